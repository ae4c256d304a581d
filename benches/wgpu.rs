//! wgpu: 10,000 small dispatches through Keel vs the same with raw wgpu in
//! the same process; the same Keel dispatches with a profiling session
//! recording and without; copy bandwidth; event record + query. On every
//! adapter found (Vulkan and GL here).
//!
//! "The same" dispatches: `vector_add` on 1,024 elements, each in its own
//! submission (what a stream operation is). The raw baseline creates the
//! pipeline, bind group and parameters once and records one compute pass
//! per submission. Raw and Keel loops alternate in every iteration (each
//! side counts its own), and the group ends by printing the median ratio
//! of paired rounds (`paired_ratio`).
//!
//! With `WGPU_NOOP_BACKEND=1` the same groups run on wgpu's noop adapter
//! too (`wgpu_noop_*`; `WGPU_BACKEND=noop` for it alone): a device that
//! completes every submission at once without running it, where what is
//! left is each side's host cost, the regime of a fast GPU.
//!
//! `KEEL_WGPU_STAMPS=1`: instead, where a raw wgpu program on the first
//! Vulkan adapter puts its timestamps around Keel's `spin` kernel (about
//! 40 us on a GPU): the pass's own beginning and end writes, encoder
//! writes around the pass, a beginning write in a command buffer of its
//! own ahead of the pass, and two dispatches in one pass; printed in
//! nanoseconds, for a driver on which a pass's two timestamps come out
//! equal.
//!
//! Run: `cargo bench --bench wgpu`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group};
use keel::{Buffer, Device, DeviceType, Event, kernels};

mod common;

const DISPATCHES: usize = 10_000;
const N: u32 = 1024;
/// Paired rounds of raw wgpu and Keel for the printed ratio.
const PAIRED_ROUNDS: usize = 20;

fn api(d: Device) -> String {
    keel::properties(d)
        .ok()
        .and_then(|p| p.extra.into_iter().find(|(k, _)| k == "native API"))
        .map_or_else(|| "?".to_owned(), |(_, v)| v)
}

fn devices() -> Vec<Device> {
    common::devices_of(&[DeviceType::Wgpu])
}

/// The raw-wgpu program: a device of its own on the same adapter.
struct Raw {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
}

impl Raw {
    fn new(backend: wgpu::Backends) -> Raw {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backend,
            backend_options: wgpu::BackendOptions {
                noop: wgpu::NoopBackendOptions {
                    enable: backend == wgpu::Backends::NOOP,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = pollster::block_on(instance.enumerate_adapters(backend))
            .into_iter()
            .next()
            .expect("adapter");
        // Timestamps where offered (`run_timed`); `run` writes none.
        let desc = wgpu::DeviceDescriptor {
            required_features: adapter.features() & wgpu::Features::TIMESTAMP_QUERY,
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).expect("device");
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(kernels::VECTOR_ADD.wgsl.expect("wgsl").into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("vector_add"),
            compilation_options: Default::default(),
            cache: None,
        });
        let storage = |_: usize| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: u64::from(N) * 4,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let bufs: Vec<wgpu::Buffer> = (0..3).map(storage).collect();
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(
            &params,
            0,
            &[N.to_le_bytes(), [0; 4], [0; 4], [0; 4]].concat(),
        );
        let entries: Vec<wgpu::BindGroupEntry<'_>> = bufs
            .iter()
            .chain([&params])
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        Raw {
            device,
            queue,
            pipeline,
            group,
        }
    }

    /// The same dispatches, each compute pass writing a timestamp at its
    /// beginning and its end (`ComputePassDescriptor::timestamp_writes`,
    /// two slots per dispatch, cycling over one query set), with every
    /// 256 dispatches one resolve of the last 512 slots, one copy and one
    /// map: the floor of what a profiler timing each dispatch on the
    /// device costs through wgpu. `None` when the adapter has no
    /// timestamps.
    fn run_timed(&self) -> Option<()> {
        if !self
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
        {
            return None;
        }
        const SLOTS: u32 = 4096;
        const BATCH: u32 = 256;
        let qs = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: None,
            ty: wgpu::QueryType::Timestamp,
            count: SLOTS,
        });
        let bytes = u64::from(2 * BATCH) * 8;
        let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut last = None;
        for i in 0..DISPATCHES as u32 {
            let slot = (2 * i) % SLOTS;
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &qs,
                        beginning_of_pass_write_index: Some(slot),
                        end_of_pass_write_index: Some(slot + 1),
                    }),
                });
                pass.set_pipeline(&self.pipeline);
                pass.set_bind_group(0, &self.group, &[]);
                pass.dispatch_workgroups(N.div_ceil(256), 1, 1);
            }
            last = Some(self.queue.submit([enc.finish()]));
            if (i + 1) % BATCH == 0 {
                let first = slot + 2 - 2 * BATCH;
                let mut enc = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
                enc.resolve_query_set(&qs, first..slot + 2, &resolve, 0);
                enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
                let index = self.queue.submit([enc.finish()]);
                read.slice(..)
                    .map_async(wgpu::MapMode::Read, |r| r.expect("map"));
                self.device
                    .poll(wgpu::PollType::Wait {
                        submission_index: Some(index),
                        timeout: None,
                    })
                    .expect("poll");
                black_box(&read.slice(..).get_mapped_range().expect("mapped")[..8]);
                read.unmap();
            }
        }
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: last,
                timeout: None,
            })
            .expect("poll");
        Some(())
    }

    fn run(&self) {
        let mut last = None;
        for _ in 0..DISPATCHES {
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                pass.set_pipeline(&self.pipeline);
                pass.set_bind_group(0, &self.group, &[]);
                pass.dispatch_workgroups(N.div_ceil(256), 1, 1);
            }
            last = Some(self.queue.submit([enc.finish()]));
        }
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: last,
                timeout: None,
            })
            .expect("poll");
    }
}

fn dispatches(c: &mut Criterion) {
    for d in devices() {
        let api = api(d);
        let backend = match api.as_str() {
            "Vulkan" => wgpu::Backends::VULKAN,
            "GL" => wgpu::Backends::GL,
            "noop" => wgpu::Backends::NOOP,
            _ => continue,
        };
        let s = keel::get_stream_from_pool(d, false).expect("stream");
        let bufs: Vec<Buffer> = (0..3)
            .map(|_| Buffer::new(d, 4 * N as usize).expect("buffer"))
            .collect();
        let k = kernels::VECTOR_ADD;
        let params = N.to_le_bytes();
        let raw = Raw::new(backend);
        let raw_run = || {
            let start = Instant::now();
            raw.run();
            start.elapsed()
        };
        let keel_run = || {
            let start = Instant::now();
            for _ in 0..DISPATCHES {
                s.launch(
                    &k,
                    k.grid_for(u64::from(N)),
                    &[&bufs[0], &bufs[1], &bufs[2]],
                    &params,
                )
                .expect("launch");
            }
            s.synchronize().expect("sync");
            start.elapsed()
        };
        // Both sides in every iteration (`common::interleaved`).
        let mut g = c.benchmark_group(format!("wgpu_{api}_10k_dispatches"));
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .measurement_time(Duration::from_secs(15));
        g.throughput(Throughput::Elements(DISPATCHES as u64));
        common::interleaved(&mut g, ("raw_wgpu", &raw_run), ("keel", &keel_run));
        g.finish();
        // The ratio from paired rounds (one raw loop and one Keel loop
        // each, the order alternating): the median of the per-round ratios.
        common::print_paired(
            &format!("wgpu_{api}_10k_dispatches"),
            "keel/raw",
            PAIRED_ROUNDS,
            &keel_run,
            &raw_run,
        );

        // With a profiling session recording and without, each iteration
        // running both back to back and counting only its own (the
        // session's start and its trace's assembly are outside the
        // timing). Flat sampling: a profiled iteration takes seconds.
        let profiled = || {
            let session = keel::profiler::start().expect("session");
            let t = keel_run();
            black_box(session.stop());
            t
        };
        // Paired rounds first, as above: criterion's two estimates come
        // from different seconds, which on a fast GPU spread 1.5x.
        common::print_paired(
            &format!("wgpu_{api}_10k_dispatches_profiled"),
            "session_recording/no_session",
            PAIRED_ROUNDS,
            &profiled,
            &keel_run,
        );
        let mut g = c.benchmark_group(format!("wgpu_{api}_10k_dispatches_profiled"));
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .measurement_time(Duration::from_secs(10));
        g.throughput(Throughput::Elements(DISPATCHES as u64));
        common::interleaved(
            &mut g,
            ("no_session", &keel_run),
            ("session_recording", &profiled),
        );
        // The floor under the profiled Keel dispatches: raw wgpu without
        // and with two pass timestamps per dispatch (and their batched
        // reads), both in every iteration.
        let timed = || {
            let start = Instant::now();
            raw.run_timed().map(|()| start.elapsed())
        };
        if timed().is_some() {
            let plain = || {
                let start = Instant::now();
                raw.run();
                start.elapsed()
            };
            let timed = || timed().unwrap_or_default();
            common::print_paired(
                &format!("wgpu_{api}_10k_dispatches_profiled"),
                "raw_wgpu_pass_timestamps/raw_wgpu",
                PAIRED_ROUNDS,
                &timed,
                &plain,
            );
            common::interleaved(
                &mut g,
                ("raw_wgpu", &plain),
                ("raw_wgpu_pass_timestamps", &timed),
            );
        }
        g.finish();
    }
}

fn bandwidth_and_events(c: &mut Criterion) {
    for d in devices() {
        let api = api(d);
        let s = keel::get_stream_from_pool(d, false).expect("stream");
        let mut g = c.benchmark_group(format!("wgpu_{api}_copy"));
        g.sample_size(10);
        let len = 16usize << 20;
        let data = vec![7u8; len];
        let buf = Buffer::new(d, len).expect("buffer");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("host_to_device", 16), &len, |b, _| {
            b.iter(|| {
                buf.write(&s, 0, &data).expect("write");
                s.synchronize().expect("sync");
            })
        });
        g.bench_with_input(BenchmarkId::new("device_to_host", 16), &len, |b, _| {
            b.iter(|| black_box(buf.read(&s).expect("read")))
        });
        let mut dst = vec![0u8; len];
        g.bench_with_input(BenchmarkId::new("host_memcpy", 16), &len, |b, _| {
            b.iter(|| dst.copy_from_slice(black_box(&data)))
        });
        g.finish();
        let mut e = Event::new(DeviceType::Wgpu);
        c.bench_function(&format!("wgpu_{api}_event_record_query"), |b| {
            b.iter(|| {
                e.record(&s).expect("record");
                e.query().expect("query")
            })
        });
    }
}

/// The timestamp placements of `KEEL_WGPU_STAMPS` (module docs).
fn stamps() {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let Some(adapter) = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .into_iter()
        .next()
    else {
        println!("stamps: no Vulkan adapter");
        return;
    };
    let want = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
    if !adapter.features().contains(want) {
        println!(
            "stamps: {} has no timestamps inside encoders",
            adapter.get_info().name
        );
        return;
    }
    let desc = wgpu::DeviceDescriptor {
        required_features: want,
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).expect("device");
    let period = f64::from(queue.get_timestamp_period());
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(kernels::SPIN.wgsl.expect("wgsl").into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("spin"),
        compilation_options: Default::default(),
        cache: None,
    });
    let n = 4096u32;
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: u64::from(n) * 4,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let params = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(
        &params,
        0,
        &[n.to_le_bytes(), 20_000u32.to_le_bytes(), [0; 4], [0; 4]].concat(),
    );
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: out.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: params.as_entire_binding(),
            },
        ],
    });
    let qs = device.create_query_set(&wgpu::QuerySetDescriptor {
        label: None,
        ty: wgpu::QueryType::Timestamp,
        count: 2,
    });
    let pass = |enc: &mut wgpu::CommandEncoder, writes: bool, dispatches: u32| {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: writes.then_some(wgpu::ComputePassTimestampWrites {
                query_set: &qs,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            }),
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        for _ in 0..dispatches {
            pass.dispatch_workgroups(n.div_ceil(64), 1, 1);
        }
    };
    let new = || device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    // Each placement submits its command buffers, then the two slots are
    // resolved and read back.
    let measure = |name: &str, buffers: Vec<wgpu::CommandBuffer>| {
        let t = Instant::now();
        queue.submit(buffers);
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = new();
        enc.resolve_query_set(&qs, 0..2, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, 16);
        let index = queue.submit([enc.finish()]);
        read.slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.expect("map"));
        device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .expect("poll");
        let host = t.elapsed();
        let bytes = read.slice(..).get_mapped_range().expect("mapped").to_vec();
        let tick =
            |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let (a, b) = (tick(0), tick(1));
        println!(
            "stamps {name}: start {a}, end {b}: {:.0} ns (host {:.0} us)",
            b.wrapping_sub(a) as f64 * period,
            host.as_secs_f64() * 1e6
        );
    };
    println!(
        "stamps: {} ({:?}), period {period} ns",
        adapter.get_info().name,
        adapter.get_info().driver_info
    );
    for round in 0..2 {
        let _ = round;
        let mut enc = new();
        pass(&mut enc, true, 1);
        measure("pass writes, 1 dispatch", vec![enc.finish()]);
        let mut enc = new();
        pass(&mut enc, true, 2);
        measure("pass writes, 2 dispatches", vec![enc.finish()]);
        let mut enc = new();
        enc.write_timestamp(&qs, 0);
        pass(&mut enc, false, 1);
        enc.write_timestamp(&qs, 1);
        measure("encoder writes around the pass", vec![enc.finish()]);
        let mut first = new();
        first.write_timestamp(&qs, 0);
        let mut enc = new();
        pass(&mut enc, false, 1);
        enc.write_timestamp(&qs, 1);
        measure(
            "start in a buffer of its own (Keel's submit)",
            vec![first.finish(), enc.finish()],
        );
    }
}

criterion_group!(benches, dispatches, bandwidth_and_events);

fn main() {
    if std::env::var_os("KEEL_WGPU_STAMPS").is_some() {
        stamps();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
