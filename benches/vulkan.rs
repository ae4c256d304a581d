//! Vulkan: 10,000 small dispatches through Keel vs the same dispatches with
//! raw ash in the same process; the same Keel dispatches with a profiling
//! session recording and without; copy bandwidth (next to a host memcpy);
//! event record + query.
//!
//! "The same" means the same observable work: every dispatch is its own
//! submission, ordered after the previous one by a timeline semaphore (what
//! a stream guarantees), running `vector_add` on 1,024 elements. The raw
//! baseline does the minimum for that by hand: pipeline, descriptor set and
//! parameters made once, one pre-allocated command buffer per dispatch
//! recorded and submitted, no allocation per dispatch. It runs twice:
//! with all 10,000 submissions queued at once, and with at most 512 in
//! flight, the bound Keel's per-stream parameter ring sets. With a
//! profiling session, the raw loop also runs with one timestamp query per
//! dispatch and without (what the driver alone costs for the timestamps a
//! profiled launch writes).
//!
//! Run: `cargo bench --bench vulkan`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ash::vk;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel::{Buffer, Device, DeviceType, Event, kernels};

mod common;

const DISPATCHES: usize = 10_000;
const N: u32 = 1024;

fn device() -> Option<Device> {
    match keel::availability(DeviceType::Vulkan) {
        Ok(()) => Device::new(DeviceType::Vulkan, 0).ok(),
        Err(e) => {
            eprintln!("skipping Vulkan benchmarks: {e}");
            None
        }
    }
}

/// A minimal hand-written ash program running the same dispatches.
struct Raw {
    device: ash::Device,
    queue: vk::Queue,
    semaphore: vk::Semaphore,
    value: u64,
    pipeline: vk::Pipeline,
    layout: vk::PipelineLayout,
    set: vk::DescriptorSet,
    cbs: Vec<vk::CommandBuffer>,
    /// One timestamp slot per dispatch, plus one for a start.
    queries: vk::QueryPool,
    _keep: (ash::Entry, ash::Instance, Vec<vk::DeviceMemory>),
}

impl Raw {
    // SAFETY (whole function): straight-line Vulkan setup on objects created
    // here, each used only after successful creation; the benchmark owns
    // them for the life of the process.
    #[allow(clippy::undocumented_unsafe_blocks)]
    fn new() -> Raw {
        unsafe {
            let entry = ash::Entry::load().expect("loader");
            let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
            let instance = entry
                .create_instance(
                    &vk::InstanceCreateInfo::default().application_info(&app),
                    None,
                )
                .expect("instance");
            let physical = instance.enumerate_physical_devices().expect("devices")[0];
            let family = instance
                .get_physical_device_queue_family_properties(physical)
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
                .expect("compute family") as u32;
            let prio = [1.0f32];
            let qinfo = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&prio)];
            let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
                .timeline_semaphore(true)
                .host_query_reset(true);
            let mut f13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
            let device = instance
                .create_device(
                    physical,
                    &vk::DeviceCreateInfo::default()
                        .queue_create_infos(&qinfo)
                        .push_next(&mut f12)
                        .push_next(&mut f13),
                    None,
                )
                .expect("device");
            let queue = device.get_device_queue(family, 0);
            let mem_props = instance.get_physical_device_memory_properties(physical);
            let mut memories = Vec::new();
            let mut buffer = |size: u64, usage: vk::BufferUsageFlags, host: bool| {
                let b = device
                    .create_buffer(
                        &vk::BufferCreateInfo::default().size(size).usage(usage),
                        None,
                    )
                    .expect("buffer");
                let req = device.get_buffer_memory_requirements(b);
                let want = if host {
                    vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT
                } else {
                    vk::MemoryPropertyFlags::DEVICE_LOCAL
                };
                let ty = (0..mem_props.memory_type_count)
                    .find(|&i| {
                        req.memory_type_bits & (1 << i) != 0
                            && mem_props.memory_types[i as usize]
                                .property_flags
                                .contains(want)
                    })
                    .expect("memory type");
                let m = device
                    .allocate_memory(
                        &vk::MemoryAllocateInfo::default()
                            .allocation_size(req.size)
                            .memory_type_index(ty),
                        None,
                    )
                    .expect("memory");
                device.bind_buffer_memory(b, m, 0).expect("bind");
                memories.push(m);
                (b, m)
            };
            let bytes = u64::from(N) * 4;
            let storage = vk::BufferUsageFlags::STORAGE_BUFFER;
            let bufs: Vec<vk::Buffer> = (0..3).map(|_| buffer(bytes, storage, false).0).collect();
            let (params, pm) = buffer(16, vk::BufferUsageFlags::UNIFORM_BUFFER, true);
            let ptr = device
                .map_memory(pm, 0, 16, vk::MemoryMapFlags::empty())
                .expect("map") as *mut u32;
            ptr.write(N);
            let bindings: Vec<_> = (0..4)
                .map(|i| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(i)
                        .descriptor_type(if i < 3 {
                            vk::DescriptorType::STORAGE_BUFFER
                        } else {
                            vk::DescriptorType::UNIFORM_BUFFER
                        })
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let set_layout = device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .expect("set layout");
            let layouts = [set_layout];
            let layout = device
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                    None,
                )
                .expect("layout");
            let code = keel::backend::vulkan::spirv(&kernels::VECTOR_ADD).expect("spirv");
            let module = device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .expect("module");
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"vector_add");
            let pipeline = device
                .create_compute_pipelines(
                    vk::PipelineCache::null(),
                    &[vk::ComputePipelineCreateInfo::default()
                        .stage(stage)
                        .layout(layout)],
                    None,
                )
                .expect("pipeline")[0];
            let sizes = [
                vk::DescriptorPoolSize::default()
                    .ty(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(3),
                vk::DescriptorPoolSize::default()
                    .ty(vk::DescriptorType::UNIFORM_BUFFER)
                    .descriptor_count(1),
            ];
            let pool = device
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .expect("pool");
            let set = device
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(pool)
                        .set_layouts(&layouts),
                )
                .expect("set")[0];
            let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bufs
                .iter()
                .chain([&params])
                .map(|&b| {
                    [vk::DescriptorBufferInfo::default()
                        .buffer(b)
                        .range(vk::WHOLE_SIZE)]
                })
                .collect();
            let writes: Vec<_> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(if i < 3 {
                            vk::DescriptorType::STORAGE_BUFFER
                        } else {
                            vk::DescriptorType::UNIFORM_BUFFER
                        })
                        .buffer_info(info)
                })
                .collect();
            device.update_descriptor_sets(&writes, &[]);
            let mut timeline =
                vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
            let semaphore = device
                .create_semaphore(
                    &vk::SemaphoreCreateInfo::default().push_next(&mut timeline),
                    None,
                )
                .expect("semaphore");
            let cmd_pool = device
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(family)
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .expect("command pool");
            let cbs = device
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(cmd_pool)
                        .command_buffer_count(DISPATCHES as u32),
                )
                .expect("command buffers");
            let queries = device
                .create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(DISPATCHES as u32 + 1),
                    None,
                )
                .expect("query pool");
            Raw {
                device,
                queue,
                semaphore,
                value: 0,
                pipeline,
                layout,
                set,
                cbs,
                queries,
                _keep: (entry, instance, memories),
            }
        }
    }

    // SAFETY (whole function): every command buffer is idle (the previous
    // run was waited for), and all objects were created in `new`.
    /// Records and submits the dispatches. With `window`, at most that
    /// many are in flight (the host waits for the oldest before submitting
    /// more), as Keel's parameter ring bounds a stream's launches in
    /// flight (512). With `timestamps`, what a profiled Keel launch on a
    /// busy stream writes: an ALL_COMMANDS timestamp after each dispatch
    /// (and a TOP_OF_PIPE start before the first), into slots reset on the
    /// host before the run and read in one call after it.
    #[allow(clippy::undocumented_unsafe_blocks)]
    fn run(&mut self, window: Option<u64>, timestamps: bool) {
        unsafe {
            let d = &self.device;
            let groups = N.div_ceil(256);
            let base = self.value;
            let slots = DISPATCHES as u32 + 1;
            if timestamps {
                d.reset_query_pool(self.queries, 0, slots);
            }
            for (i, &cb) in self.cbs.iter().enumerate() {
                if let Some(w) = window
                    && self.value - base >= w
                {
                    let sems = [self.semaphore];
                    let values = [self.value - w + 1];
                    d.wait_semaphores(
                        &vk::SemaphoreWaitInfo::default()
                            .semaphores(&sems)
                            .values(&values),
                        u64::MAX,
                    )
                    .expect("wait");
                }
                d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                    .expect("begin");
                if timestamps && i == 0 {
                    let top = vk::PipelineStageFlags2::TOP_OF_PIPE;
                    d.cmd_write_timestamp2(cb, top, self.queries, DISPATCHES as u32);
                }
                d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
                d.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    self.layout,
                    0,
                    &[self.set],
                    &[],
                );
                d.cmd_dispatch(cb, groups, 1, 1);
                if timestamps {
                    let all = vk::PipelineStageFlags2::ALL_COMMANDS;
                    d.cmd_write_timestamp2(cb, all, self.queries, i as u32);
                }
                d.end_command_buffer(cb).expect("end");
                let wait = [vk::SemaphoreSubmitInfo::default()
                    .semaphore(self.semaphore)
                    .value(self.value)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
                let signal = [vk::SemaphoreSubmitInfo::default()
                    .semaphore(self.semaphore)
                    .value(self.value + 1)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
                let cbi = [vk::CommandBufferSubmitInfo::default().command_buffer(cb)];
                let submit = [vk::SubmitInfo2::default()
                    .wait_semaphore_infos(&wait)
                    .command_buffer_infos(&cbi)
                    .signal_semaphore_infos(&signal)];
                d.queue_submit2(self.queue, &submit, vk::Fence::null())
                    .expect("submit");
                self.value += 1;
            }
            let sems = [self.semaphore];
            let values = [self.value];
            d.wait_semaphores(
                &vk::SemaphoreWaitInfo::default()
                    .semaphores(&sems)
                    .values(&values),
                u64::MAX,
            )
            .expect("wait");
            if timestamps {
                let mut ticks = vec![0u64; slots as usize];
                d.get_query_pool_results(
                    self.queries,
                    0,
                    &mut ticks,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
                .expect("results");
                black_box(ticks);
            }
        }
    }
}

/// Paired rounds for the printed ratios.
const PAIRED_ROUNDS: usize = 20;

fn dispatches(c: &mut Criterion) {
    let Some(d) = device() else { return };
    let s = keel::get_stream_from_pool(d, false).expect("stream");
    let bufs: Vec<Buffer> = (0..3)
        .map(|_| Buffer::new(d, 4 * N as usize).expect("buffer"))
        .collect();
    let k = kernels::VECTOR_ADD;
    let params = N.to_le_bytes();
    let raw = Raw::new();
    let mut g = c.benchmark_group("vulkan_10k_dispatches");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    g.throughput(Throughput::Elements(DISPATCHES as u64));
    let keel = || {
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
    let raw = std::cell::RefCell::new(raw);
    let raw_run = || {
        let start = Instant::now();
        raw.borrow_mut().run(None, false);
        start.elapsed()
    };
    let raw_window_run = || {
        let start = Instant::now();
        raw.borrow_mut().run(Some(512), false);
        start.elapsed()
    };
    // The ratio from paired rounds first (it is quick), then criterion.
    common::print_paired(
        "vulkan_10k_dispatches",
        "keel/raw_ash",
        PAIRED_ROUNDS,
        &keel,
        &raw_run,
    );
    // Each iteration runs both back to back and counts only its own (see
    // `vulkan_10k_dispatches_profiled`).
    common::interleaved(&mut g, ("raw_ash", &raw_run), ("keel", &keel));
    // The raw loop with Keel's bound on launches in flight: lavapipe runs
    // a shallow queue faster than 10,000 queued submissions.
    // (With a Keel loop in every iteration too, the order alternating, as
    // `common::interleaved` runs the two above.)
    g.bench_function("raw_ash_512_in_flight", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|i| {
                    if i.is_multiple_of(2) {
                        keel();
                        raw_window_run()
                    } else {
                        let t = raw_window_run();
                        keel();
                        t
                    }
                })
                .sum()
        })
    });
    g.finish();

    // The same Keel dispatches with and without a profiling session
    // recording, each timed from the first launch to the synchronize (the
    // session's start and its trace's assembly are outside the timing).
    let mut g = c.benchmark_group("vulkan_10k_dispatches_profiled");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    g.throughput(Throughput::Elements(DISPATCHES as u64));
    let profiled = || {
        let session = keel::profiler::start().expect("session");
        let t = keel();
        let trace = session.stop();
        assert!(trace.spans.len() >= 2 * DISPATCHES, "host and device spans");
        t
    };
    common::print_paired(
        "vulkan_10k_dispatches_profiled",
        "session_recording/no_session",
        PAIRED_ROUNDS,
        &profiled,
        &keel,
    );
    // Both in every iteration (`common::interleaved`).
    common::interleaved(
        &mut g,
        ("no_session", &keel),
        ("session_recording", &profiled),
    );
    // The driver's floor: the raw loop (512 in flight, as Keel) with and
    // without the one timestamp per dispatch a profiled Keel launch on a
    // busy stream writes, interleaved the same way.
    let raw_floor = |timestamps: bool| {
        let start = Instant::now();
        raw.borrow_mut().run(Some(512), timestamps);
        start.elapsed()
    };
    let (plain, stamped) = (|| raw_floor(false), || raw_floor(true));
    common::interleaved(
        &mut g,
        ("raw_ash_no_timestamps", &plain),
        ("raw_ash_one_timestamp", &stamped),
    );
    g.finish();
}

fn bandwidth(c: &mut Criterion) {
    let Some(d) = device() else { return };
    let s = keel::get_stream_from_pool(d, false).expect("stream");
    let mut g = c.benchmark_group("vulkan_copy");
    g.sample_size(10);
    for mib in [1usize, 64] {
        let len = mib << 20;
        let data = vec![7u8; len];
        let buf = Buffer::new(d, len).expect("buffer");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("host_to_device", mib), &len, |b, _| {
            b.iter(|| {
                buf.write(&s, 0, &data).expect("write");
                s.synchronize().expect("sync");
            })
        });
        g.bench_with_input(BenchmarkId::new("device_to_host", mib), &len, |b, _| {
            b.iter(|| black_box(buf.read(&s).expect("read")))
        });
        // Into memory the caller keeps: no allocation (and no page faults
        // on a fresh vector) per read.
        let mut dst = vec![0u8; len];
        g.bench_with_input(
            BenchmarkId::new("device_to_host_into", mib),
            &len,
            |b, _| b.iter(|| buf.read_into(&s, 0, black_box(&mut dst)).expect("read")),
        );
        // Baseline in the same process: a plain host memcpy of the same size.
        g.bench_with_input(BenchmarkId::new("host_memcpy", mib), &len, |b, _| {
            b.iter(|| dst.copy_from_slice(black_box(&data)))
        });
    }
    g.finish();
}

fn events(c: &mut Criterion) {
    let Some(d) = device() else { return };
    let s = keel::get_stream_from_pool(d, false).expect("stream");
    let mut e = Event::new(DeviceType::Vulkan);
    c.bench_function("vulkan_event_record_query", |b| {
        b.iter(|| {
            e.record(&s).expect("record");
            e.query().expect("query")
        })
    });
    let mut t = Event::timed(DeviceType::Vulkan);
    c.bench_function("vulkan_timed_event_record_query", |b| {
        b.iter(|| {
            t.record(&s).expect("record");
            t.query().expect("query")
        })
    });
    s.synchronize().expect("sync");
}

criterion_group!(benches, dispatches, bandwidth, events);
criterion_main!(benches);
