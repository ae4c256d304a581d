//! What recording costs an operation: with no session (goal: about one
//! relaxed load, < 1 ns) and with one (goal: a `profiler::range` under
//! 15 ns, its two counter reads included). Baselines in the same process:
//! an empty iteration, two `Instant::now` reads, two counter reads (the
//! floor of a range's two stamps) and the same operation with no session.
//!
//! Run: `cargo bench --bench profiler`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use keel::Device;

/// Runs `f` `iters` times inside sessions restarted every 100,000 calls
/// (so buffers never fill), timing only the calls.
fn with_session(iters: u64, mut f: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let batch = left.min(100_000);
        let session = keel::profiler::start().expect("start");
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        total += t.elapsed();
        black_box(session.stop());
        left -= batch;
    }
    total
}

fn costs(c: &mut Criterion) {
    let mut g = c.benchmark_group("profiler");
    g.bench_function("baseline_empty", |b| b.iter(|| black_box(1u32)));
    // Any timestamped record reads the clock twice: the floor.
    g.bench_function("baseline_two_clock_reads", |b| {
        b.iter(|| (black_box(Instant::now()), black_box(Instant::now())))
    });
    // What host records read instead (`profiler/stamp.rs`): the CPU's
    // counter, twice.
    let counter = quanta::Clock::new();
    g.bench_function("baseline_two_counter_reads", |b| {
        b.iter(|| (black_box(counter.raw()), black_box(counter.raw())))
    });
    g.bench_function("hook_no_session", |b| {
        b.iter(|| black_box(keel::profiler::enabled()))
    });
    g.bench_function("range_no_session", |b| {
        b.iter(|| drop(black_box(keel::profiler::range("r"))))
    });
    g.bench_function("range_with_session", |b| {
        b.iter_custom(|iters| with_session(iters, || drop(black_box(keel::profiler::range("r")))))
    });
    // A host-only operation: synchronizing the CPU's (inline, idle) default
    // stream, with and without a session.
    let s = keel::default_stream(Device::cpu()).expect("stream");
    g.bench_function("stream_sync_no_session", |b| {
        b.iter(|| s.synchronize().expect("sync"))
    });
    g.bench_function("stream_sync_with_session", |b| {
        b.iter_custom(|iters| with_session(iters, || s.synchronize().expect("sync")))
    });
    g.finish();
}

/// What building a session's trace costs, per operation: a session
/// records 10,000 launches of a small kernel on the CPU's default stream,
/// and `stop` assembles them (a host span, a device span and a flow each).
/// Baseline: recording those launches, in the same iterations.
fn collect(c: &mut Criterion) {
    const LAUNCHES: usize = 10_000;
    let cpu = Device::cpu();
    let s = keel::default_stream(cpu).expect("stream");
    let n = 256u32;
    let bufs: Vec<keel::Buffer> = (0..3)
        .map(|_| keel::Buffer::new(cpu, 4 * n as usize).expect("buffer"))
        .collect();
    let k = keel::kernels::VECTOR_ADD;
    // One session: (time recording the launches, time of `stop`).
    let session = || {
        let session = keel::profiler::start().expect("start");
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            s.launch(
                &k,
                k.grid_for(u64::from(n)),
                &[&bufs[0], &bufs[1], &bufs[2]],
                &n.to_le_bytes(),
            )
            .expect("launch");
        }
        let recorded = t.elapsed();
        let t = Instant::now();
        let trace = session.stop();
        let stopped = t.elapsed();
        assert_eq!(trace.dropped, 0);
        black_box(trace);
        (recorded, stopped)
    };
    let mut g = c.benchmark_group("profiler_collect");
    g.sample_size(20);
    g.bench_function("record_10k_launches", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| session().0).sum())
    });
    g.bench_function("stop_after_10k_launches", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| session().1).sum())
    });
    g.finish();
    // The ratio within each session, over a few sessions.
    let mut ratios: Vec<f64> = (0..10)
        .map(|_| {
            let (r, s) = session();
            s.as_secs_f64() / r.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    println!(
        "profiler_collect: stop / recording of {LAUNCHES} launches = {:.3} (median of 10 sessions)",
        ratios[5]
    );
}

criterion_group!(benches, costs, collect);
criterion_main!(benches);
