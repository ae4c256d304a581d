//! Stream queries racing completions, on every backend that runs here (CPU,
//! Vulkan, and wgpu on both its Vulkan and GL adapters): several threads
//! share a few pool streams, each repeatedly enqueues a slow kernel
//! ([`SPIN`]) and quick work after it, then polls `stream.query()` while
//! the other threads keep submitting and querying. Whenever a query reads
//! true, everything the thread enqueued before it must be complete: the
//! events recorded after the slow kernel and after the quick work read
//! complete, and the results are there when read through another stream
//! (which does not wait for the shared one).
//!
//! Each backend runs for a few seconds. A backend that is unavailable is
//! skipped with the reason printed, unless `KEEL_REQUIRE_BACKENDS` names it
//! (then the test fails). This is the test that showed the wgpu completion
//! problem described in Note [wgpu completion tracking]
//! (`src/backend/wgpu/stream.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use keel_device::kernels::{SPIN, spin_reference};
use keel_device::testing::conformance::{device, wgpu_adapter};
use keel_device::{Buffer, Device, DeviceType, Event, Stream};

/// Threads per backend, and how many pool streams they share.
const THREADS: usize = 4;
const SHARED_STREAMS: usize = 2;
/// How long each backend is stressed.
const RUN_FOR: Duration = Duration::from_millis(2500);
/// A query loop that never sees its stream complete fails after this.
const STUCK: Duration = Duration::from_secs(60);

fn spin_params(n: u32, iters: u32) -> Vec<u8> {
    [n.to_le_bytes(), iters.to_le_bytes()].concat()
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1.0)
}

#[derive(Default)]
struct Counts {
    iterations: AtomicU64,
    queries: AtomicU64,
    /// Queries that read "not yet complete".
    pending: AtomicU64,
    /// The longest stream query, in microseconds (a query never waits).
    longest_query_us: AtomicU64,
}

/// One thread's loop: slow kernel, event, quick write, event, then query
/// the shared stream until it reads complete, checking everything before.
fn worker(d: Device, shared: &[Stream], (n, base_iters): (u32, u32), t: usize, counts: &Counts) {
    let ty = d.device_type();
    // A stream of this thread's own for checking reads: it does not wait
    // for the shared streams, so what it reads is what has completed.
    let own = keel_device::get_stream_from_pool(d, true).expect("own pool stream");
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let marker = Buffer::new(d, 4).expect("marker");
    let start = Instant::now();
    let mut k = 0u32;
    while start.elapsed() < RUN_FOR {
        let s = shared[(t + k as usize) % shared.len()];
        // A different iteration count each time, so that a stale result of
        // an earlier iteration cannot pass for this one.
        let iters = base_iters + k;
        let tag = (t as u32) << 20 | k;
        s.launch(
            &SPIN,
            SPIN.grid_for(u64::from(n)),
            &[&out],
            &spin_params(n, iters),
        )
        .expect("spin");
        let mut after_spin = Event::new(ty);
        after_spin.record(&s).expect("record after the spin");
        marker.write(&s, 0, &[tag]).expect("quick write");
        let mut after_write = Event::new(ty);
        after_write.record(&s).expect("record after the write");

        let waiting = Instant::now();
        loop {
            counts.queries.fetch_add(1, Ordering::Relaxed);
            let asked = Instant::now();
            let done = s.query().expect("stream query");
            counts
                .longest_query_us
                .fetch_max(asked.elapsed().as_micros() as u64, Ordering::Relaxed);
            if done {
                break;
            }
            counts.pending.fetch_add(1, Ordering::Relaxed);
            assert!(
                waiting.elapsed() < STUCK,
                "{d}: stream {} never completed",
                s.id()
            );
            std::thread::yield_now();
        }
        // The stream read complete: all that was enqueued on it before the
        // query is complete, and so are the events recorded among it.
        assert_eq!(
            after_spin.query(),
            Ok(true),
            "{d}: stream {} read complete, the event after the slow kernel did not (thread {t}, iteration {k})",
            s.id()
        );
        assert_eq!(
            after_write.query(),
            Ok(true),
            "{d}: stream {} read complete, the event after the quick write did not (thread {t}, iteration {k})",
            s.id()
        );
        let got = out.read_as::<f32>(&own).expect("read the spin's output");
        let want = spin_reference(n - 1, iters);
        assert!(
            close(got[n as usize - 1], want),
            "{d}: stream {} read complete before the slow kernel's results were there: out[{}] = {}, want {want} (thread {t}, iteration {k})",
            s.id(),
            n - 1,
            got[n as usize - 1]
        );
        let m = marker.read_as::<u32>(&own).expect("read the marker");
        assert_eq!(
            m,
            [tag],
            "{d}: stream {} read complete before the quick write landed (thread {t}, iteration {k})",
            s.id()
        );
        counts.iterations.fetch_add(1, Ordering::Relaxed);
        k += 1;
    }
}

/// Stresses `d` with `spin` = (invocations, base iterations) per launch.
fn stress(d: Device, spin: (u32, u32)) {
    let shared: Vec<Stream> = (0..SHARED_STREAMS)
        .map(|_| keel_device::get_stream_from_pool(d, false).expect("pool stream"))
        .collect();
    let counts = Counts::default();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (shared, counts) = (&shared, &counts);
            scope.spawn(move || worker(d, shared, spin, t, counts));
        }
    });
    keel_device::synchronize(d).expect("device synchronize");
    let (iterations, queries, pending, longest) = (
        counts.iterations.load(Ordering::Relaxed),
        counts.queries.load(Ordering::Relaxed),
        counts.pending.load(Ordering::Relaxed),
        counts.longest_query_us.load(Ordering::Relaxed),
    );
    eprintln!(
        "{d}: {iterations} iterations, {queries} stream queries ({pending} not yet complete, the longest {longest} us) in {:.2?}",
        started.elapsed()
    );
    assert!(
        iterations >= THREADS as u64,
        "{d}: every thread finishes at least one iteration ({iterations} in all)"
    );
}

#[test]
fn cpu() {
    if let Some(d) = device(DeviceType::Cpu) {
        stress(d, (64, 20_000));
    }
}

#[test]
fn vulkan() {
    if let Some(d) = device(DeviceType::Vulkan) {
        stress(d, (1024, 20_000));
    }
}

#[test]
fn wgpu_vulkan_adapter() {
    if let Some(d) = wgpu_adapter("Vulkan") {
        stress(d, (1024, 20_000));
    }
}

#[test]
fn wgpu_gl_adapter() {
    if let Some(d) = wgpu_adapter("GL") {
        stress(d, (1024, 20_000));
    }
}
