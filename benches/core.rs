//! Core costs: guards (registry vs static dispatch vs a raw thread-local
//! swap), current_stream, pool acquire, CPU event record + query.
//!
//! Run: `cargo bench --features testing --bench core`. Results and ratios go
//! in docs/BENCHMARKS.md.

use std::cell::Cell;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use keel::backend::cpu::CpuGuardImpl;
use keel::testing::FakeGuardImpl;
use keel::{Device, DeviceGuard, DeviceType, Event, InlineDeviceGuard};

thread_local! {
    static BASELINE: Cell<i16> = const { Cell::new(0) };
}

fn guards(c: &mut Criterion) {
    FakeGuardImpl::register(DeviceType::Cuda).expect("fake in the cuda slot");
    let dev = Device::new(DeviceType::Cuda, 1).expect("cuda:1");
    let mut g = c.benchmark_group("device_guard");
    g.bench_function("baseline_tls_swap", |b| {
        b.iter(|| {
            // What a guard must do at least: swap in, then restore.
            let old = BASELINE.with(|c| c.replace(black_box(dev).index()));
            black_box(&old);
            BASELINE.with(|c| c.set(old));
        })
    });
    g.bench_function("inline_fake", |b| {
        b.iter(|| {
            let guard = InlineDeviceGuard::<FakeGuardImpl>::new(black_box(dev));
            black_box(&guard);
        })
    });
    g.bench_function("registry_fake", |b| {
        b.iter(|| {
            let guard = DeviceGuard::new(black_box(dev));
            black_box(&guard);
        })
    });
    // A built-in backend, statically and through the registry.
    let cpu = Device::new(DeviceType::Cpu, 0).expect("cpu:0");
    g.bench_function("inline_cpu", |b| {
        b.iter(|| {
            let guard = InlineDeviceGuard::<CpuGuardImpl>::new(black_box(cpu));
            black_box(&guard);
        })
    });
    g.bench_function("registry_cpu", |b| {
        b.iter(|| {
            let guard = DeviceGuard::new(black_box(cpu));
            black_box(&guard);
        })
    });
    g.finish();
}

fn streams_and_events(c: &mut Criterion) {
    let cpu = Device::new(DeviceType::Cpu, 0).expect("cpu:0");
    c.bench_function("current_stream_cpu", |b| {
        b.iter(|| keel::current_stream(black_box(cpu)))
    });
    c.bench_function("pool_acquire_cpu", |b| {
        b.iter(|| keel::get_stream_from_pool(black_box(cpu), false))
    });
    let default = keel::default_stream(cpu).expect("default");
    let mut e = Event::new(DeviceType::Cpu);
    c.bench_function("event_record_query_cpu_default_stream", |b| {
        b.iter(|| {
            e.record(black_box(&default)).expect("record");
            e.query().expect("query")
        })
    });
    let pool = keel::get_stream_from_pool(cpu, false).expect("pool");
    let mut e = Event::new(DeviceType::Cpu);
    c.bench_function("event_record_query_cpu_pool_stream", |b| {
        b.iter(|| {
            e.record(black_box(&pool)).expect("record");
            e.query().expect("query")
        })
    });
    pool.synchronize().expect("sync");
}

criterion_group!(benches, guards, streams_and_events);
criterion_main!(benches);
