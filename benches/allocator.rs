//! The caching allocator: a cached allocation + free of 4 KiB and 64 MiB
//! against the backend's raw allocation (`backend:direct`: every buffer
//! straight to the backend and back), on the CPU, Vulkan and every wgpu
//! adapter, in one run; then a replayed training step
//! (`keel::testing::alloc_trace`), timed, with its peak reserved / peak
//! allocated printed per device.
//!
//! Buffers are `Buffer::empty_on` (no zeroing, like `torch.empty`), on a
//! pool stream of each device.
//!
//! Run: `cargo bench --bench allocator --features testing -- --warm-up-time 1
//! --measurement-time 3`. Results in docs/BENCHMARKS.md.
//!
//! `KEEL_ALLOC_QUICK=1`: instead of criterion, short batches of cached and
//! direct pairs alternate (40 rounds) on every device and the fastest batch of
//! each is printed with their ratio: the fastest of interleaved batches is
//! the least disturbed by other load on a shared machine.
//! `KEEL_ALLOC_QUICK=vulkan:0` (any part of a device's label): that device
//! only.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group};
use keel::memory::{self, AllocBackend, AllocConfig};
use keel::testing::alloc_trace::{replay, training_steps};
use keel::{Buffer, Device, DeviceType};

mod common;

fn label(d: Device) -> String {
    let api = keel::properties(d)
        .ok()
        .and_then(|p| p.extra.into_iter().find(|(k, _)| k == "native API"))
        .map(|(_, v)| format!("/{v}"))
        .unwrap_or_default();
    format!("{d}{api}")
}

fn devices() -> Vec<Device> {
    let mut v = Vec::new();
    if common::wanted(DeviceType::Cpu) {
        v.push(Device::new(DeviceType::Cpu, 0).expect("cpu:0"));
    }
    v.extend(common::devices_of(&[DeviceType::Vulkan, DeviceType::Wgpu]));
    v
}

/// One allocation + free. The buffer is observed where the allocation
/// returned it (`black_box(&buf)` inside the `Result`), not moved out of
/// the `Result` nor through `black_box`: such a move copies the 64-byte
/// struct through memory with wider loads than the stores that wrote it,
/// a store-forwarding stall of a few ns on this machine that is the
/// caller's copy, not the allocator's work (both columns leave it out).
#[inline(always)]
fn pair(s: &keel::Stream, len: usize) {
    match Buffer::empty_on(s, len) {
        Ok(ref buf) => {
            black_box(buf);
        }
        Err(e) => panic!("alloc: {e}"),
    }
}

fn pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_free");
    for d in devices() {
        let s = keel::get_stream_from_pool(d, false).expect("pool");
        let native = memory::config(d).expect("config");
        let direct = AllocConfig {
            backend: AllocBackend::Direct,
            ..native
        };
        for (name, len) in [("4KiB", 4usize << 10), ("64MiB", 64 << 20)] {
            memory::set_config(d, native).expect("native");
            // Warm the cache: the block is reserved once.
            drop(Buffer::empty_on(&s, len).expect("alloc"));
            g.bench_function(BenchmarkId::new(format!("cached/{name}"), label(d)), |b| {
                b.iter(|| pair(&s, len))
            });
            memory::set_config(d, direct).expect("direct");
            g.bench_function(BenchmarkId::new(format!("direct/{name}"), label(d)), |b| {
                b.iter(|| pair(&s, len))
            });
            memory::set_config(d, native).expect("native");
        }
        // Let the backend finish freeing what the direct runs released.
        s.synchronize().expect("sync");
    }
    g.finish();
}

fn training_step(c: &mut Criterion) {
    let trace = training_steps(3);
    let mut g = c.benchmark_group("training_trace");
    g.sample_size(10);
    for d in devices() {
        let streams = [
            keel::get_stream_from_pool(d, false).expect("s0"),
            keel::get_stream_from_pool(d, true).expect("s1"),
        ];
        memory::empty_cache(d).expect("empty_cache");
        memory::reset_peak_memory_stats(d).expect("reset");
        replay(streams, &trace).expect("replay");
        let reserved = memory::max_memory_reserved(d).expect("reserved") as f64;
        let allocated = memory::max_memory_allocated(d).expect("allocated") as f64;
        println!(
            "training trace on {}: peak reserved {:.1} MiB / peak allocated {:.1} MiB = {:.3}",
            label(d),
            reserved / 1048576.0,
            allocated / 1048576.0,
            reserved / allocated
        );
        g.bench_function(BenchmarkId::new("replay_3_steps", label(d)), |b| {
            b.iter(|| replay(streams, black_box(&trace)).expect("replay"))
        });
        memory::empty_cache(d).expect("empty_cache");
    }
    g.finish();
}

/// Nanoseconds per pair of a batch of `n` pairs.
fn batch(s: &keel::Stream, len: usize, n: u32) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..n {
        pair(s, len);
    }
    t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
}

/// [`batch`] with each buffer moved out of its `Result` and through
/// `black_box`: the caller's copy included, to show what it costs.
fn batch_moved(s: &keel::Stream, len: usize, n: u32) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..n {
        drop(black_box(Buffer::empty_on(s, len).expect("alloc")));
    }
    t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
}

fn quick(only: &str) {
    for d in devices() {
        if only != "1" && !label(d).contains(only) {
            continue;
        }
        let s = keel::get_stream_from_pool(d, false).expect("pool");
        let native = memory::config(d).expect("config");
        let direct = AllocConfig {
            backend: AllocBackend::Direct,
            ..native
        };
        for (name, len, n_direct) in [("4KiB", 4usize << 10, 500), ("64MiB", 64 << 20, 3)] {
            let mut best = [f64::MAX; 3];
            for _ in 0..40 {
                memory::set_config(d, native).expect("native");
                drop(Buffer::empty_on(&s, len).expect("alloc"));
                best[0] = best[0].min(batch(&s, len, 5_000));
                best[2] = best[2].min(batch_moved(&s, len, 5_000));
                memory::set_config(d, direct).expect("direct");
                best[1] = best[1].min(batch(&s, len, n_direct));
            }
            memory::set_config(d, native).expect("native");
            s.synchronize().expect("sync");
            println!(
                "{name} on {}: cached {:.1} ns (moved out: {:.1} ns), direct {:.1} ns, direct / cached {:.1}x (moved out: {:.1}x)",
                label(d),
                best[0],
                best[2],
                best[1],
                best[1] / best[0],
                best[1] / best[2]
            );
        }
    }
}

criterion_group!(benches, pairs, training_step);

fn main() {
    if let Ok(only) = std::env::var("KEEL_ALLOC_QUICK") {
        quick(&only);
    } else {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
