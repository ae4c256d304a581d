//! The suite's tests, one function each, run on one device `d` under the
//! instance's [`Config`]. Each asserts (panics) where the backend does not
//! conform; [`run`](super::run) applies the instance's expectations.
//!
//! The list the macro instantiates is in
//! [`conformance_suite!`](crate::conformance_suite); a new test is a `pub
//! fn` here plus its name there (in `exclusive:` if it starts a profiler
//! session or leaves errors on streams on purpose).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Config, KernelSource};
use crate::core::StreamKind;
use crate::kernels::{SAXPY, SPIN, VECTOR_ADD, spin_reference};
use crate::profiler::{ALLOCATED_COUNTER, FlowKind, LaneKind, MemoryAction, SpanKind, Trace};
use crate::testing::{GATED_FILL, Gate, PANICS, SLEEP, pattern};
use crate::{Buffer, Device, DeviceGuard, DeviceType, Error, Event, Kernel, Stream, StreamGuard};

fn pool(d: Device) -> Stream {
    crate::get_stream_from_pool(d, false).expect("pool stream")
}

/// Launches [`SPIN`] on `s` over the first `n` elements of `out`, `iters`
/// steps each.
fn launch_spin(s: &Stream, out: &Buffer, n: u32, iters: u32) {
    s.launch(
        &SPIN,
        SPIN.grid_for(u64::from(n)),
        &[out],
        &spin_params(n, iters),
    )
    .expect("spin");
}

fn spin_params(n: u32, iters: u32) -> Vec<u8> {
    [n.to_le_bytes(), iters.to_le_bytes()].concat()
}

/// The least time one slow [`SPIN`] launch must take on the device under
/// test: long enough that the submissions a test makes after it (an
/// event, a wait, a launch, a read with its staging memory), on a host
/// busy with every other test, all come before it ends.
const SLOW_SPIN_AT_LEAST: Duration = Duration::from_millis(200);

/// `(n, iters)` of a slow [`SPIN`] on `d`: the instance's
/// [`slow_spin`](Config::slow_spin), with its iterations scaled up until
/// one launch takes at least [`SLOW_SPIN_AT_LEAST`] on this device.
///
/// A fixed count is a guess at one device's speed (lavapipe runs
/// Vulkan's `(4096, 200_000)` in 150-240 ms); a fast GPU runs it in far
/// less, and a check that work queued behind the spin is still waiting
/// ("the consumer still waits") then fails whenever the host's next few
/// submissions come after the spin has ended (as on an H200:
/// docs/BENCHMARKS.md, 2026-11-26). The count is measured once per device
/// and configuration (a warm-up launch loads the kernel, then one launch
/// of the configured size is timed from the host, which can only
/// overstate it) and never scaled down.
fn slow_spin(d: Device, cfg: &Config) -> (u32, u32) {
    /// Per device and configured `(n, iters)`: the iterations to use.
    type Sized = HashMap<(Device, (u32, u32)), u32>;
    static MEASURED: Mutex<Option<Sized>> = Mutex::new(None);
    let (n, iters) = cfg.slow_spin;
    if gated(cfg) {
        // Busy work is gated there, and timed tests sleep: no spin to size.
        return (n, iters);
    }
    // Held while measuring: one thread measures, the others wait for it.
    let mut measured = MEASURED.lock().unwrap_or_else(PoisonError::into_inner);
    let known = measured.get_or_insert_with(HashMap::new);
    if let Some(&scaled) = known.get(&(d, cfg.slow_spin)) {
        return (n, scaled);
    }
    let s = pool(d);
    let out = Buffer::new(d, 4 * n as usize).expect("spin out");
    let spin = |iters: u32| {
        launch_spin(&s, &out, n, iters);
        s.synchronize().expect("spin sync");
    };
    spin(1);
    let t0 = Instant::now();
    spin(iters);
    let took = t0.elapsed().max(Duration::from_micros(1));
    let factor = SLOW_SPIN_AT_LEAST.as_secs_f64() / took.as_secs_f64();
    // `as` saturates: u32::MAX iterations at most.
    let scaled = (f64::from(iters) * factor.max(1.0)) as u32;
    println!("{d}: a spin of {iters} iterations took {took:?}; using {scaled}");
    known.insert((d, cfg.slow_spin), scaled);
    (n, scaled)
}

fn saxpy_params(n: u32, alpha: f32) -> Vec<u8> {
    [n.to_le_bytes(), alpha.to_le_bytes()].concat()
}

fn saxpy(s: &Stream, x: &Buffer, y: &Buffer, n: u32, alpha: f32) {
    s.launch(
        &SAXPY,
        SAXPY.grid_for(u64::from(n)),
        &[x, y],
        &saxpy_params(n, alpha),
    )
    .expect("saxpy");
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1.0)
}

/// Every device present, other than `d`: the other devices of its type and
/// the first device that opens of every other available type.
fn other_devices(d: Device) -> Vec<Device> {
    let ty = d.device_type();
    let mut v: Vec<Device> = super::usable_devices(ty)
        .into_iter()
        .filter(|&o| o != d)
        .collect();
    for other in DeviceType::ALL {
        if other != ty && crate::is_available(other) {
            // The first that opens (opening the rest would be wasted).
            v.extend(
                crate::devices(other)
                    .into_iter()
                    .find(|&o| crate::properties(o).is_ok()),
            );
        }
    }
    v
}

/// Whether [`Busy`] work is held by a [`Gate`] on this backend (host
/// kernels on asynchronous streams) rather than by a slow [`SPIN`].
fn gated(cfg: &Config) -> bool {
    cfg.kernel_source == KernelSource::Host && !cfg.blocking_submit
}

/// What a [`Busy`] gated fill writes.
const GATE_VALUE: f32 = 3.0;

/// Work that keeps a stream busy until released, writing `out` (`4 * n`
/// bytes, `n = cfg.slow_spin.0`). On host backends with asynchronous
/// streams it is a [`GATED_FILL`] held by a [`Gate`], so "not yet
/// complete" is certain; elsewhere it is the slow [`SPIN`], released by
/// time.
struct Busy {
    gate: Option<Gate>,
    iters: u32,
}

impl Busy {
    fn launch(s: &Stream, cfg: &Config, out: &Buffer, iters: u32) -> Busy {
        let n = cfg.slow_spin.0;
        if gated(cfg) {
            let gate = Gate::new();
            s.launch(&GATED_FILL, [1, 1, 1], &[out], &gate.params(GATE_VALUE))
                .expect("gated fill");
            Busy {
                gate: Some(gate),
                iters,
            }
        } else {
            launch_spin(s, out, n, iters);
            Busy { gate: None, iters }
        }
    }

    /// The value the work leaves in `out[i]`.
    fn value(&self, i: u32) -> f32 {
        match self.gate {
            Some(_) => GATE_VALUE,
            None => spin_reference(i, self.iters),
        }
    }

    /// Lets the work finish (a spin finishes by itself).
    fn release(&self) {
        if let Some(g) = &self.gate {
            g.open();
        }
    }
}

/// The device reports itself: properties name it, it is listed and
/// available, timestamps (where offered) have a period.
pub fn properties_describe_the_device(d: Device, _cfg: &Config) {
    let ty = d.device_type();
    let p = crate::properties(d).expect("properties");
    assert_eq!(p.device, d);
    assert!(!p.name.is_empty(), "a name");
    assert!(!p.native_backend.is_empty(), "a native backend");
    assert!(crate::devices(ty).contains(&d), "{d} is listed");
    assert_eq!(crate::availability(ty), Ok(()));
    if let Some(t) = p.timestamps {
        assert!(t.period_ns > 0.0 && t.valid_bits > 0, "{t:?}");
    }
}

/// Copies and kernels on one stream run in submission order.
pub fn in_order_within_a_stream(d: Device, _cfg: &Config) {
    let s = pool(d);
    let b = Buffer::new(d, 4).expect("alloc");
    for i in 0..200u32 {
        b.write(&s, 0, &[i]).expect("write");
    }
    let c = Buffer::new(d, 4).expect("alloc");
    c.copy_from(&s, &b, 0, 0, 4).expect("copy");
    assert_eq!(
        c.read_as::<u32>(&s).expect("read"),
        [199],
        "writes ran in order"
    );
    // Kernels too: ten saxpy launches accumulate in order with the copies
    // between them.
    let n = 1000u32;
    let x = Buffer::from_slice(&s, &vec![1.0f32; n as usize]).expect("x");
    let y = Buffer::from_slice(&s, &vec![0.0f32; n as usize]).expect("y");
    for k in 0..10 {
        saxpy(&s, &x, &y, n, 1.0);
        if k == 4 {
            // Overwrite y midway: later launches must see the new value.
            y.write(&s, 0, &vec![100.0f32; n as usize]).expect("write");
        }
    }
    let y = y.read_as::<f32>(&s).expect("read");
    assert!(
        y.iter().all(|&v| v == 105.0),
        "100 + 5 launches after the write: {}",
        y[0]
    );
}

/// `stream.wait(event)` orders a consumer after a producer on another
/// stream, without blocking the host.
pub fn producer_consumer_across_streams(d: Device, cfg: &Config) {
    let (producer, consumer) = (pool(d), pool(d));
    assert_ne!(producer, consumer);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let y = Buffer::from_slice(&consumer, &vec![1.0f32; n as usize]).expect("y");
    consumer.synchronize().expect("upload");
    let busy = Busy::launch(&producer, cfg, &out, iters);
    let mut produced = Event::new(d.device_type());
    produced.record(&producer).expect("record");
    consumer.wait(&produced).expect("wait");
    saxpy(&consumer, &out, &y, n, 2.0);
    let result = y.read_async(&consumer, 0, y.len()).expect("read");
    if cfg.submit_waits_for_previous {
        // The producer may have finished while these were submitted, and
        // may finish at any moment; the answers must agree: the read is
        // the consumer's last work, so a ready read means a done consumer.
        let ready = result.is_ready().expect("is_ready");
        let done = consumer.query().expect("query");
        assert!(!ready || done, "the read is ready, so its stream is done");
    } else if !cfg.blocking_submit {
        assert_eq!(
            consumer.query(),
            Ok(false),
            "the consumer waits for the producer"
        );
        assert_eq!(result.is_ready(), Ok(false), "the read waits too");
    }
    busy.release();
    let y: Vec<f32> = bytemuck::pod_collect_to_vec(&result.wait().expect("data"));
    for i in (0..n).step_by((n as usize / 16).max(1)) {
        let want = 1.0 + 2.0 * busy.value(i);
        assert!(
            close(y[i as usize], want),
            "y[{i}] = {}, want {want}",
            y[i as usize]
        );
    }
}

/// Streams and events report "not yet complete" while work runs (where
/// submission does not block), and complete after `synchronize`.
pub fn query_before_and_after_completion(d: Device, cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let mut start = Event::timed(ty);
    let mut done = Event::timed(ty);
    // An untimed event too: backends may track it differently (the host
    // streams as a position in the stream's order).
    let mut untimed = Event::new(ty);
    start.record(&s).expect("record");
    let busy = Busy::launch(&s, cfg, &out, iters);
    done.record(&s).expect("record");
    untimed.record(&s).expect("record");
    if cfg.blocking_submit {
        // The work ran inside its submissions, so nothing is left to run:
        // a query may answer "not yet" until the backend notices, and must
        // notice with no thread synchronizing.
        let deadline = Instant::now() + Duration::from_secs(30);
        for (what, event) in [("timed", &done), ("untimed", &untimed)] {
            while !event.query().expect("query") {
                assert!(
                    Instant::now() < deadline,
                    "submission blocks, yet queries did not see the {what} event after it \
                     complete within 30 s"
                );
                std::thread::yield_now();
            }
        }
    } else if cfg.submit_waits_for_previous {
        // Recording `done` (a submission) may have waited for the slow
        // kernel, and the work may finish at any moment: whatever the
        // answers, they must agree (`done` is the stream's last work).
        let before = done.query().expect("query");
        let stream = s.query().expect("query");
        let after = done.query().expect("query");
        assert!(!before || stream, "the event is complete, so is its stream");
        assert!(
            !stream || after,
            "the stream is complete, so is its last event"
        );
        match start.elapsed_time(&done) {
            Ok(ms) => assert!(ms >= 0.0),
            Err(e) => assert_eq!(
                e.to_string(),
                "Both events must be completed before calculating elapsed time."
            ),
        }
    } else {
        assert_eq!(done.query(), Ok(false), "the work is still running");
        assert_eq!(untimed.query(), Ok(false), "the work is still running");
        assert_eq!(s.query(), Ok(false));
        let e = start.elapsed_time(&done).expect_err("not complete");
        assert_eq!(
            e.to_string(),
            "Both events must be completed before calculating elapsed time."
        );
    }
    busy.release();
    untimed.synchronize().expect("event sync");
    assert_eq!(untimed.query(), Ok(true));
    done.synchronize().expect("event sync");
    assert_eq!(done.query(), Ok(true));
    assert_eq!(s.query(), Ok(true));
    assert!(start.elapsed_time(&done).expect("elapsed") >= 0.0);
    let got = out.read_as::<f32>(&s).expect("read");
    assert!(close(got[n as usize - 1], busy.value(n - 1)));
}

/// Polling alone reaches completion: an event's and a stream's `query`
/// and a read's `is_ready`, asked in a loop while the work runs and after,
/// report it complete without any thread synchronizing (c10's `while not
/// stream.query(): ...`). A backend that learns of completion only when
/// someone waits fails here.
pub fn queries_alone_see_completion(d: Device, cfg: &Config) {
    let s = pool(d);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let busy = Busy::launch(&s, cfg, &out, iters / 4);
    let mut done = Event::new(d.device_type());
    done.record(&s).expect("record");
    let read = out.read_async(&s, 0, out.len()).expect("read");
    // Asked once before the work may finish, then until it has.
    let early = done.query().expect("query");
    busy.release();
    let deadline = Instant::now() + Duration::from_secs(30);
    let poll = |what: &str, ready: &dyn Fn() -> bool| {
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "{what} did not report the work complete within 30 s of polling (first answer: {early})"
            );
            std::thread::yield_now();
        }
    };
    poll("the event's query", &|| done.query().expect("query"));
    poll("the read's is_ready", &|| {
        read.is_ready().expect("is_ready")
    });
    poll("the stream's query", &|| s.query().expect("query"));
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read.wait().expect("data"));
    let last = n as usize - 1;
    assert!(
        close(got[last], busy.value(n - 1)),
        "{} != {}",
        got[last],
        busy.value(n - 1)
    );
}

/// `synchronize(device)` waits for every stream of the device.
pub fn synchronize_waits_for_everything(d: Device, cfg: &Config) {
    let (s1, s2) = (pool(d), pool(d));
    let (n, iters) = slow_spin(d, cfg);
    let (a, b) = (
        Buffer::new(d, 4 * n as usize).expect("a"),
        Buffer::new(d, 4 * n as usize).expect("b"),
    );
    let busy = [(s1, &a), (s2, &b)].map(|(s, buf)| Busy::launch(&s, cfg, buf, iters / 4));
    let want: Vec<f32> = busy.iter().map(|b| b.value(n - 1)).collect();
    // Gated work opens a little later, from another thread.
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        busy.iter().for_each(Busy::release);
    });
    crate::synchronize(d).expect("device synchronize");
    assert_eq!((s1.query(), s2.query()), (Ok(true), Ok(true)));
    opener.join().expect("opener");
    for (buf, want) in [&a, &b].into_iter().zip(want) {
        let got = buf.read_as::<f32>(&s1).expect("read");
        assert!(
            close(got[n as usize - 1], want),
            "{} != {want}",
            got[n as usize - 1]
        );
    }
    launch_spin(&s1, &a, n, iters / 4);
    s1.synchronize().expect("stream synchronize");
    assert_eq!(s1.query(), Ok(true));
}

/// Timed events measure device time: within the host's time around it and
/// most of it (host backends: at least the time a kernel slept).
pub fn elapsed_time_matches_host_time(d: Device, cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let (n, iters) = slow_spin(d, cfg);
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let mut start = Event::timed(ty);
    let mut end = Event::timed(ty);
    s.synchronize().expect("idle");
    let t0 = Instant::now();
    start.record(&s).expect("record");
    let host_kernel = cfg.kernel_source == KernelSource::Host;
    if host_kernel {
        s.launch(&SLEEP, [1, 1, 1], &[], &20u32.to_le_bytes())
            .expect("sleep");
    } else {
        launch_spin(&s, &out, n, iters);
    }
    end.record(&s).expect("record");
    end.synchronize().expect("sync");
    let host_ms = t0.elapsed().as_secs_f64() * 1e3;
    let ms = start.elapsed_time(&end).expect("elapsed");
    assert!(ms > 0.0, "positive: {ms}");
    assert!(
        ms <= host_ms * 1.01 + 0.05,
        "device {ms} ms within host {host_ms} ms"
    );
    if host_kernel {
        assert!(ms >= 19.0, "the stream slept 20 ms, measured {ms}");
    } else {
        assert!(
            ms >= host_ms * 0.05,
            "device {ms} ms is most of host {host_ms} ms"
        );
    }
    // A second pair on the same events (re-record) measures again.
    start.record(&s).expect("re-record");
    end.record(&s).expect("re-record");
    end.synchronize().expect("sync");
    let empty = start.elapsed_time(&end).expect("elapsed");
    assert!(
        empty >= 0.0 && empty < ms,
        "an empty interval {empty} < {ms}"
    );
}

/// c10's event rules, on this backend: never-recorded events are complete,
/// and misuse is an error with c10's message.
pub fn event_misuse_is_a_clear_error(d: Device, _cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let never = Event::new(ty);
    assert_eq!(never.query(), Ok(true), "never recorded: complete");
    assert_eq!(never.synchronize(), Ok(()));
    assert_eq!(never.block(&s), Ok(()));
    let other = if ty == DeviceType::Cpu {
        DeviceType::Cuda
    } else {
        DeviceType::Cpu
    };
    let mut e = Event::new(ty);
    let foreign = Stream::default_for(Device::new(other, 0).expect("valid"));
    let err = e.record(&foreign).expect_err("another device type");
    assert_eq!(
        err.to_string(),
        format!(
            "Event device type {} does not match recording stream's device type {}.",
            ty.name_upper(),
            other.name_upper()
        )
    );
    let (a, b) = (Event::timed(ty), Event::timed(ty));
    let err = a.elapsed_time(&b).expect_err("never recorded");
    assert_eq!(
        err.to_string(),
        "Both events must be recorded before calculating elapsed time."
    );
    let mut untimed = Event::new(ty);
    untimed.record(&s).expect("record");
    let mut timed = Event::timed(ty);
    timed.record(&s).expect("record");
    timed.synchronize().expect("sync");
    let err = untimed.elapsed_time(&timed).expect_err("flags");
    assert_eq!(
        err.to_string(),
        "Both events must be created with argument 'enable_timing=True'."
    );
    // An event stays on the device it was first recorded on.
    if let Some(&d2) = other_devices(d).iter().find(|o| o.device_type() == ty) {
        let err = untimed.record(&pool(d2)).expect_err("another device");
        assert_eq!(
            err.to_string(),
            format!(
                "Event device index {} does not match recording stream's device index {}.",
                d.index(),
                d2.index()
            )
        );
    }
}

/// Device-to-device copies are byte-exact, at any size and at every phase
/// of source and destination offsets (backends that copy in words handle
/// the rest themselves).
pub fn copies_round_trip(d: Device, _cfg: &Config) {
    let s = pool(d);
    for (seed, len) in [0usize, 1, 4097, 16 * 1024 * 1024 + 3]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, seed as u32);
        let a = Buffer::from_slice(&s, &data).expect("upload");
        let b = Buffer::new(d, len).expect("alloc");
        b.copy_from(&s, &a, 0, 0, len).expect("device to device");
        let back = b.read(&s).expect("download");
        assert!(back == data, "{len} bytes round trip byte-exact");
    }
    let data = pattern(10_007, 11);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    let b = Buffer::new(d, 10_007).expect("alloc");
    for (so, dof, len) in [(1, 2, 1001), (3, 0, 4), (0, 3, 17), (5, 5, 9000), (2, 1, 1)] {
        b.copy_from(&s, &a, so, dof, len).expect("copy");
        let got = b
            .read_async(&s, dof, len)
            .expect("read")
            .wait()
            .expect("wait");
        assert!(got == data[so..so + len], "copy {so} -> {dof} of {len}");
    }
    // Writes land at their offset; reads of a part.
    let a = Buffer::from_slice(&s, &[1u8, 2, 3, 4, 5, 6, 7, 8]).expect("a");
    let b = Buffer::from_slice(&s, &[0u8; 8]).expect("b");
    b.copy_from(&s, &a, 2, 5, 3).expect("copy");
    b.write(&s, 0, &[9u8]).expect("write");
    assert_eq!(b.read(&s).expect("read"), [9, 0, 0, 0, 0, 3, 4, 5]);
    let part = a.read_async(&s, 6, 2).expect("read").wait().expect("wait");
    assert_eq!(part, [7, 8]);
}

/// Transfers enqueued back to back, without waiting in between, keep their
/// own data even where a backend reuses staging memory between transfers
/// (wgpu keeps its mappable buffers): each read sees exactly the writes
/// enqueued before it on the stream.
pub fn transfers_in_flight_keep_their_data(d: Device, _cfg: &Config) {
    let s = pool(d);
    let mut mirror = vec![0u8; 8192];
    let b = Buffer::from_slice(&s, &mirror).expect("alloc");
    let mut reads = Vec::new();
    let writes = [
        (0, 8192),
        (0, 100),
        (4, 4000),
        (3, 7),
        (8, 3000),
        (4096, 4096),
        (0, 5000),
        (12, 4),
    ];
    for (i, (offset, len)) in writes.into_iter().enumerate() {
        let data = pattern(len, 100 + i as u32);
        b.write(&s, offset, &data).expect("write");
        mirror[offset..offset + len].copy_from_slice(&data);
        let read = b.read_async(&s, 0, mirror.len()).expect("read");
        reads.push((read, mirror.clone()));
    }
    for (i, (read, want)) in reads.into_iter().enumerate() {
        let got = read.wait().expect("wait");
        assert!(
            got == want,
            "read {i} sees the writes enqueued before it, and only those"
        );
    }
}

/// A copy within one buffer whose ranges overlap is an error on every
/// backend (and enqueues nothing); disjoint ranges within one buffer, and
/// any ranges across two buffers, copy.
pub fn copies_within_one_buffer(d: Device, _cfg: &Config) {
    let s = pool(d);
    let data = pattern(64, 5);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    for (so, dof, len) in [(0, 8, 16), (8, 0, 16), (4, 4, 1), (0, 0, 64), (10, 13, 7)] {
        let e = a
            .copy_from(&s, &a, so, dof, len)
            .expect_err("overlapping ranges within one buffer");
        assert_eq!(
            e.to_string(),
            format!(
                "copy within one buffer: expected non-overlapping ranges, found {so}..{} and {dof}..{}",
                so + len,
                dof + len
            )
        );
    }
    assert!(
        a.read(&s).expect("read") == data,
        "refused copies changed nothing"
    );
    // Disjoint, touching and unaligned ranges within one buffer; an empty
    // copy overlaps nothing.
    let mut want = data.clone();
    for (so, dof, len) in [(0, 32, 32), (33, 1, 7), (40, 41, 0)] {
        a.copy_from(&s, &a, so, dof, len).expect("disjoint ranges");
        want.copy_within(so..so + len, dof);
    }
    assert!(
        a.read(&s).expect("read") == want,
        "disjoint copies within one buffer"
    );
    // Two buffers: the same ranges are no overlap.
    let other = pattern(64, 6);
    let b = Buffer::from_slice(&s, &other).expect("upload");
    b.copy_from(&s, &a, 0, 8, 16).expect("two buffers");
    let mut want_b = other.clone();
    want_b[8..24].copy_from_slice(&want[0..16]);
    assert!(
        b.read(&s).expect("read") == want_b,
        "copy between two buffers"
    );
}

/// `Buffer::to` moves data within the device, to every other device
/// present (of this backend, directly or through the host; of every other
/// backend) and back, byte-exact. Mixing devices in one call is an error.
pub fn moves_between_devices(d: Device, _cfg: &Config) {
    let s = pool(d);
    let data = pattern((1 << 20) + 3, 3);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    let same = a.to(d, &s).expect("within the device");
    assert_eq!(same.device(), d);
    assert!(same.read(&s).expect("read") == data, "{d} -> {d}");
    // The host path reads on the source device's current stream: make it
    // the stream the data was written on, as in PyTorch.
    let _current = StreamGuard::new(s).expect("s current");
    let others = other_devices(d);
    for &o in &others {
        let so = pool(o);
        let there = a.to(o, &so).expect("move there");
        assert_eq!((there.device(), there.len()), (o, data.len()));
        // A direct (peer) copy back runs on `s`, which does not wait for
        // `so` by itself.
        so.synchronize().expect("moved there");
        let _there_current = StreamGuard::new(so).expect("so current");
        let back = there.to(d, &s).expect("move back");
        assert!(back.read(&s).expect("read") == data, "{d} -> {o} -> {d}");
    }
    if let Some(&o) = others.first() {
        let e = a
            .write(&pool(o), 0, &[1u8])
            .expect_err("a stream of another device");
        assert_eq!(
            e,
            Error::DeviceMismatch {
                first: d,
                second: o
            }
        );
        let e = a.to(d, &pool(o)).expect_err("a stream of another device");
        assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    }
}

/// The vector add kernel is exact at sizes around its workgroup size.
pub fn vector_add_is_correct(d: Device, _cfg: &Config) {
    let s = pool(d);
    for n in [1usize, 1000, 1_000_003] {
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| 0.25 * i as f32 - 3.0).collect();
        let (da, db) = (
            Buffer::from_slice(&s, &a).expect("a"),
            Buffer::from_slice(&s, &b).expect("b"),
        );
        let dc = Buffer::new(d, 4 * n).expect("c");
        s.launch(
            &VECTOR_ADD,
            VECTOR_ADD.grid_for(n as u64),
            &[&da, &db, &dc],
            &(n as u32).to_le_bytes(),
        )
        .expect("launch");
        let c = dc.read_as::<f32>(&s).expect("read");
        let wrong = (0..n).find(|&i| c[i] != a[i] + b[i]);
        assert_eq!(wrong, None, "n = {n}: first wrong element");
    }
}

/// 32 pool streams per priority level, handed out round-robin; every one
/// works.
pub fn stream_pool_round_robin(d: Device, _cfg: &Config) {
    let many: Vec<Stream> = (0..200)
        .map(|_| crate::get_stream_from_pool(d, true).expect("pool"))
        .collect();
    let distinct: HashSet<Stream> = many.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        32,
        "200 requests reuse the 32 streams of a level"
    );
    assert!(
        many.iter()
            .all(|s| matches!(s.kind(), StreamKind::Pool { .. })),
        "pool streams"
    );
    let first = crate::get_stream_from_pool(d, true).expect("pool");
    let mut last = first;
    for _ in 0..32 {
        last = crate::get_stream_from_pool(d, true).expect("pool");
    }
    assert_eq!(last, first, "the 33rd request returns the 1st");
    let normal = crate::get_stream_from_pool(d, false).expect("pool");
    assert!(
        !distinct.contains(&normal),
        "normal and high priority are separate pools"
    );
    for s in distinct.iter().take(4) {
        let b = Buffer::from_slice(s, &[s.id() as u32]).expect("upload");
        assert_eq!(b.read_as::<u32>(s).expect("read"), [s.id() as u32]);
    }
}

/// Guards and `set_current_stream` change the current device and stream,
/// and work follows them; guards restore on drop.
pub fn guards_switch_device_and_stream(d: Device, _cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let before_device = crate::current_device(ty).expect("current");
    let before_stream = crate::current_stream(d).expect("current");
    {
        let _g = DeviceGuard::new(d).expect("device guard");
        assert_eq!(crate::current_device(ty), Ok(d));
        let sg = StreamGuard::new(s).expect("stream guard");
        assert_eq!(crate::current_stream(Device::current(ty)), Ok(s));
        assert_eq!(sg.original_stream().device().device_type(), ty);
        // Work on the current stream goes where the guard says.
        let cur = crate::current_stream(Device::current(ty)).expect("current");
        let b = Buffer::from_slice(&cur, &[42u32]).expect("upload");
        assert_eq!(b.read_as::<u32>(&s).expect("read"), [42]);
    }
    assert_eq!(crate::current_device(ty), Ok(before_device));
    assert_eq!(crate::current_stream(d), Ok(before_stream));
    crate::set_current_stream(s).expect("set");
    assert_eq!(crate::current_stream(d), Ok(s));
    crate::set_current_stream(before_stream).expect("restore");
    assert_eq!(crate::current_stream(d), Ok(before_stream));
    let count = crate::device_count(ty);
    // One past the last device: an error from the constructor (CPU) or
    // from the guard (every other backend).
    let e = Device::new(ty, count as i16)
        .and_then(DeviceGuard::new)
        .expect_err("no such device");
    assert!(e.to_string().contains("index"), "{e}");
}

/// What the public objects check before a backend sees a request: ranges,
/// binding counts, element sizes, devices.
pub fn bad_requests_are_clear_errors(d: Device, _cfg: &Config) {
    let s = pool(d);
    let b = Buffer::new(d, 16).expect("alloc");
    let e = b.write(&s, 12, &[0u32, 0]).expect_err("overflow");
    assert_eq!(
        e.to_string(),
        "write out of bounds: expected offset + length <= 16 (the buffer's size), found 12 + 8"
    );
    let e = b
        .read_async(&s, usize::MAX, 2)
        .expect_err("overflowing range");
    assert!(e.to_string().starts_with("read out of bounds"), "{e}");
    let c = Buffer::new(d, 8).expect("alloc");
    let e = c.copy_from(&s, &b, 4, 0, 16).expect_err("source range");
    assert!(
        e.to_string().starts_with("copy source out of bounds"),
        "{e}"
    );
    let e = c.copy_from(&s, &b, 0, 4, 8).expect_err("destination range");
    assert!(
        e.to_string().starts_with("copy destination out of bounds"),
        "{e}"
    );
    let e = s
        .launch(&VECTOR_ADD, [1, 1, 1], &[&b, &c], &[])
        .expect_err("two of three");
    assert_eq!(
        e.to_string(),
        "kernel 'vector_add': expected 3 buffers, found 2"
    );
    let e = b
        .read_as::<[u8; 3]>(&s)
        .expect_err("16 is not a multiple of 3");
    assert!(e.to_string().contains("multiple of 3 bytes"), "{e}");
    if let Some(&o) = other_devices(d).first() {
        let elsewhere = Buffer::new(o, 16).expect("alloc");
        let e = s
            .launch(
                &VECTOR_ADD,
                [1, 1, 1],
                &[&b, &elsewhere, &b],
                &4u32.to_le_bytes(),
            )
            .expect_err("mixed devices");
        assert_eq!(
            e,
            Error::DeviceMismatch {
                first: d,
                second: o
            }
        );
    }
    // The stream still works.
    b.write(&s, 0, &[7u32]).expect("write");
    assert_eq!(b.read_as::<u32>(&s).expect("read")[0], 7);
}

/// Kernel errors say what is wrong, when the kernel source allows it
/// (see [`KernelSource`]): a missing source, a grid beyond the device's
/// maximum, a broken source; host kernels' failures (an `Err`, a binding
/// too short, a panic) are reported once by the next `synchronize`. The
/// stream works afterwards. Exclusive: it leaves errors on pool streams.
pub fn kernel_errors_are_clear(d: Device, cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let b = Buffer::new(d, 64).expect("alloc");
    let without_own_source = match cfg.kernel_source {
        KernelSource::Wgsl => Kernel {
            wgsl: None,
            ..SAXPY
        },
        KernelSource::Ptx => Kernel { ptx: None, ..SAXPY },
        KernelSource::Host => Kernel { cpu: None, ..SAXPY },
    };
    let c = Buffer::new(d, 64).expect("alloc");
    let e = s
        .launch(
            &without_own_source,
            [1, 1, 1],
            &[&b, &c],
            &saxpy_params(1, 1.0),
        )
        .expect_err("no source for this backend");
    assert_eq!(
        e.to_string(),
        format!(
            "kernel 'saxpy': has no {}, which the {} backend runs",
            cfg.kernel_source.missing(),
            ty.backend_name()
        )
    );
    let props = crate::properties(d).expect("properties");
    if let Some(max) = props.max_workgroup_count
        && max[0] < u32::MAX
    {
        let e = s
            .launch(&SPIN, [max[0] + 1, 1, 1], &[&b], &spin_params(4, 3))
            .expect_err("grid too big");
        assert!(
            e.to_string().contains("exceeds the device's maximum"),
            "{e}"
        );
    }
    match cfg.kernel_source {
        KernelSource::Wgsl => {
            let broken = Kernel {
                name: "broken",
                wgsl: Some("@compute @workgroup_size(1) fn broken() { let x: u32 = 1.5; }"),
                ..SPIN
            };
            let e = s
                .launch(&broken, [1, 1, 1], &[&b], &[])
                .expect_err("bad WGSL");
            assert!(e.to_string().starts_with("kernel 'broken': WGSL"), "{e}");
        }
        KernelSource::Ptx => {
            let broken = Kernel {
                name: "broken",
                ptx: Some(
                    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry broken(.param .u64 p) { bogus; }",
                ),
                ..SPIN
            };
            let e = s
                .launch(&broken, [1, 1, 1], &[&b], &spin_params(4, 3))
                .expect_err("bad PTX");
            assert!(
                e.to_string()
                    .starts_with("kernel 'broken': PTX failed to load"),
                "{e}"
            );
        }
        KernelSource::Host => host_kernel_failures(d, &s, &b),
    }
    // The stream still works after refused or failed launches.
    s.launch(&SPIN, [1, 1, 1], &[&b], &spin_params(4, 3))
        .expect("spin");
    let got = b.read_as::<f32>(&s).expect("read");
    assert!(close(got[3], spin_reference(3, 3)), "{}", got[3]);
    s.synchronize().expect("no error left");
}

fn host_kernel_failures(d: Device, s: &Stream, b: &Buffer) {
    let broken = Kernel {
        name: "broken",
        cpu: Some(|_| Err("broken on purpose".to_owned())),
        wgsl: None,
        ptx: None,
        ..SPIN
    };
    s.launch(&broken, [1, 1, 1], &[b], &[])
        .expect("enqueued; fails when it runs");
    let e = s.synchronize().expect_err("the kernel failed");
    assert_eq!(e.to_string(), "kernel 'broken': broken on purpose");
    assert_eq!(s.synchronize(), Ok(()), "reported once");
    let (short, other) = (
        Buffer::new(d, 8).expect("alloc"),
        Buffer::new(d, 8).expect("alloc"),
    );
    s.launch(
        &SAXPY,
        SAXPY.grid_for(100),
        &[&short, &other],
        &saxpy_params(100, 1.0),
    )
    .expect("enqueued; fails when it runs");
    let e = s.synchronize().expect_err("binding too short");
    assert_eq!(
        e.to_string(),
        "kernel 'saxpy': binding 0: expected at least 100 elements, found 2"
    );
    s.launch(&PANICS, [1, 1, 1], &[], &[]).expect("enqueued");
    let e = crate::synchronize(d).expect_err("the panic is reported");
    assert!(e.to_string().contains("kernel bug"), "{e}");
    // Host kernels get distinct buffers, so binding one twice is refused.
    let e = s
        .launch(&VECTOR_ADD, [1, 1, 1], &[b, b, b], &4u32.to_le_bytes())
        .expect_err("aliasing");
    assert!(
        e.to_string()
            .contains("same buffer is bound at bindings 0 and 1"),
        "{e}"
    );
}

/// A two-stream workload with a cross-stream event wait on `d`; returns
/// its two streams.
fn profiled_workload(d: Device) -> (Stream, Stream) {
    let ty = d.device_type();
    let (s1, s2) = (pool(d), pool(d));
    let n = 4096u32;
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let y = Buffer::from_slice(&s2, &vec![1.0f32; n as usize]).expect("y");
    launch_spin(&s1, &out, n, 2000);
    let mut produced = Event::new(ty);
    produced.record(&s1).expect("record");
    s2.wait(&produced).expect("wait");
    saxpy(&s2, &out, &y, n, 2.0);
    let got = y.read_as::<f32>(&s2).expect("read");
    assert!(close(got[7], 1.0 + 2.0 * spin_reference(7, 2000)));
    (s1, s2)
}

/// The index of `d` in the trace's device table.
fn trace_device(trace: &Trace, d: Device) -> u32 {
    let i = trace
        .devices
        .iter()
        .position(|x| x.device == d.to_string())
        .expect("the device is in the trace");
    u32::try_from(i).expect("a small device table")
}

/// The profiler records this backend's stream operations: host spans,
/// device spans on stream lanes (where events can time), launch and event
/// wait flows, calibration, allocator events and curves; the trace is well formed and
/// survives both file formats. Exclusive: a session records every thread.
pub fn profiler_records_this_backend(d: Device, _cfg: &Config) {
    let timed = crate::properties(d)
        .expect("properties")
        .timestamps
        .is_some();
    let session = crate::profiler::start().expect("start");
    let (s1, s2) = profiled_workload(d);
    let trace = session.stop();
    let dev = trace_device(&trace, d);
    let lane_of = |s: Stream| {
        trace.lanes.iter().position(|l| {
            l.kind
                == LaneKind::Stream {
                    device: dev,
                    stream: s.id(),
                    thread: 0,
                }
        })
    };
    let stream_lanes: Vec<u32> = [s1, s2]
        .into_iter()
        .filter_map(lane_of)
        .map(|i| i as u32)
        .collect();
    assert!(
        trace
            .memory
            .iter()
            .any(|m| m.device == dev && m.action == MemoryAction::Alloc),
        "an allocator event of {d}"
    );
    // A launch records its grid and its kernel's workgroup size (the block
    // Keel's JSON export writes as Kineto does).
    let wg = SAXPY.workgroup_size;
    let block = format!("{}x{}x{}", wg[0], wg[1], wg[2]);
    let arg = |s: &crate::profiler::Span, key: &str| {
        s.args
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| v.to_string())
    };
    assert!(
        trace.spans.iter().any(|s| s.kind == SpanKind::Kernel
            && &*s.name == "saxpy"
            && arg(s, "block").as_deref() == Some(block.as_str())
            && arg(s, "grid").is_some()),
        "a saxpy launch with its grid and block {block}"
    );
    let launches = trace
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::Launch)
        .count();
    assert!(launches >= 4, "launch flows, found {launches}");
    assert!(
        trace
            .counters
            .iter()
            .any(|c| c.device == dev && c.name == ALLOCATED_COUNTER && !c.points.is_empty()),
        "the allocated curve of {d}"
    );
    if timed {
        assert_eq!(
            stream_lanes.len(),
            2,
            "both stream lanes: {:?}",
            trace.lanes
        );
        let on_device = |kind: SpanKind, name: &str| {
            trace
                .spans
                .iter()
                .any(|s| stream_lanes.contains(&s.lane) && s.kind == kind && s.name == name)
        };
        assert!(on_device(SpanKind::Kernel, "spin"), "device span of spin");
        assert!(on_device(SpanKind::Kernel, "saxpy"), "device span of saxpy");
        assert!(on_device(SpanKind::Copy, "copy device->host"));
        assert!(on_device(SpanKind::Wait, "stream wait"));
        assert!(
            trace.flows.iter().any(|f| f.kind == FlowKind::EventWait
                && f.from.lane != f.to.lane
                && stream_lanes.contains(&f.to.lane)),
            "an event record -> wait flow across streams"
        );
        assert!(
            trace.calibrations.iter().any(|c| c.device == dev),
            "{d} is calibrated"
        );
    }
    assert_eq!(trace.dropped, 0);
    if let Err(problems) = trace.check() {
        panic!("recorded trace is not well formed: {problems:#?}");
    }
    let json = crate::profiler::json::to_json_string(&trace).expect("json");
    assert_eq!(
        crate::profiler::json::read_json(&json).expect("import"),
        trace
    );
    let bytes = crate::profiler::native::to_native_bytes(&trace).expect("native");
    assert_eq!(
        crate::profiler::native::read_native(&bytes).expect("read"),
        trace
    );
}

/// After calibration, a kernel's device span lies within the host
/// interval around its launch and synchronize (up to the stated error
/// bound). Exclusive: a session records every thread.
pub fn profiler_places_device_spans_within_host_time(d: Device, _cfg: &Config) {
    if crate::properties(d)
        .expect("properties")
        .timestamps
        .is_none()
    {
        eprintln!("{d} has no timestamps: the profiler records host spans only");
        return;
    }
    let session = crate::profiler::start().expect("start");
    let s = pool(d);
    let n = 4096u32;
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    s.synchronize().expect("idle");
    let before = session.now_ns();
    launch_spin(&s, &out, n, 20_000);
    s.synchronize().expect("sync");
    let after = session.now_ns();
    let trace = session.stop();
    let dev = trace_device(&trace, d);
    let bound = trace
        .calibrations
        .iter()
        .find(|c| c.device == dev)
        .expect("calibrated")
        .error_bound_ns;
    let lane = LaneKind::Stream {
        device: dev,
        stream: s.id(),
        thread: 0,
    };
    let span = trace
        .spans
        .iter()
        .find(|sp| sp.name == "spin" && trace.lanes[sp.lane as usize].kind == lane)
        .expect("device span of the kernel");
    assert!(
        span.start_ns + bound >= before && span.end_ns() <= after + bound,
        "{d}: device span {}..{} outside host interval {before}..{after} (+/- {bound} ns)",
        span.start_ns,
        span.end_ns()
    );
    assert!(span.dur_ns > 0, "{d}: the kernel took time");
}

// ----- the caching allocator (exclusive: they read the device's
// statistics and the blocks' reuse, which other tests would disturb) -----

/// Two streams of `d` that differ.
fn two_streams(d: Device) -> (Stream, Stream) {
    let s1 = pool(d);
    let s2 = (0..64)
        .map(|_| pool(d))
        .find(|s| *s != s1)
        .expect("a second pool stream");
    (s1, s2)
}

/// The hazard of the stream section of PyTorch's CUDA semantics: a buffer
/// allocated on `s1` is read by work on `s2` that has not run yet, and is
/// dropped. Without `record_stream` the block is handed out again at once
/// on `s1` (documented: the caller must say that `s2` uses it); with
/// `record_stream(s2)` it is not reused before `s2`'s work completes, and
/// the data that work reads stays intact. Host backends hold `s2` with a
/// gate (certain); GPU backends with a slow spin, asserting only what
/// cannot race ("a reused block implies `s2`'s work had completed").
pub fn freed_blocks_wait_for_recorded_streams(d: Device, cfg: &Config) {
    const LEN: usize = 3 << 20; // large pool: a segment of its own
    let n = LEN / 4;
    let (s1, s2) = two_streams(d);
    // Sized before the cache is emptied: sizing allocates.
    let (n_spin, iters) = slow_spin(d, cfg);
    crate::memory::empty_cache(d).expect("empty_cache");
    let original: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let newer = vec![-1.0f32; n];
    let gated = gated(cfg);
    for record in [false, true] {
        let hold = Buffer::new_on(&s2, 4 * n_spin as usize).expect("hold");
        let out = Buffer::empty_on(&s2, LEN).expect("out");
        let a = Buffer::from_slice(&s1, &original).expect("a");
        s1.synchronize().expect("upload");
        // s2: busy, then reads `a`.
        let busy = Busy::launch(&s2, cfg, &hold, iters);
        out.copy_from(&s2, &a, 0, 0, LEN).expect("copy on s2");
        if record {
            a.record_stream(&s2).expect("record_stream");
        }
        let a_block = (a.handle().clone(), a.offset());
        drop(a);
        if record && gated {
            // The snapshot shows the block waiting for s2.
            let snapshot = crate::memory::memory_snapshot(d).expect("snapshot");
            let pending: Vec<_> = snapshot
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == crate::memory::BlockState::Pending)
                .collect();
            assert_eq!(pending.len(), 1, "{snapshot:?}");
            assert_eq!(pending[0].stream_uses, [s2]);
            assert_eq!(pending[0].requested_size, LEN as u64);
        }
        let b = Buffer::empty_on(&s1, LEN).expect("b");
        let reused = b.handle().ptr_eq(&a_block.0) && b.offset() == a_block.1;
        let s2_done = s2.query().expect("query");
        b.write(&s1, 0, &newer).expect("overwrite");
        s1.synchronize().expect("overwrite done");
        busy.release();
        s2.synchronize().expect("s2");
        let seen = out.read_as::<f32>(&s2).expect("read out");
        if !record {
            assert!(
                reused,
                "without record_stream the block is handed out again at once"
            );
            if gated {
                assert!(
                    seen == newer,
                    "without record_stream, s2 reads the new owner's data (the hazard)"
                );
            }
        } else {
            if gated {
                assert!(!reused, "a block s2 still uses is not reused");
            }
            assert!(
                !reused || s2_done,
                "a reused block implies s2's work had completed"
            );
            assert!(seen == original, "the data s2's work reads stays intact");
            // Once s2's work is done the pending block is free again.
            drop(b);
            let snapshot = crate::memory::memory_snapshot(d).expect("snapshot");
            assert!(
                snapshot
                    .iter()
                    .flat_map(|s| &s.blocks)
                    .all(|b| b.state != crate::memory::BlockState::Pending),
                "no block is still pending after s2 completed"
            );
        }
    }
}

/// Two buffers carved from one segment, bound together in one launch,
/// give the right results (each backend binds ranges of its allocation).
pub fn suballocated_buffers_bind_together(d: Device, _cfg: &Config) {
    let s = pool(d);
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32 + 1.0).collect();
    let da = Buffer::from_slice(&s, &a).expect("a");
    let db = Buffer::from_slice(&s, &b).expect("b");
    let dc = Buffer::empty_on(&s, 4 * n).expect("c");
    if crate::api::properties(d)
        .expect("properties")
        .exclusive_allocations
    {
        // Kernels hold whole allocations here: a buffer each.
        assert!(
            !da.handle().ptr_eq(db.handle()) && !db.handle().ptr_eq(dc.handle()),
            "small buffers of a device with exclusive allocations have their own"
        );
    } else {
        assert!(
            da.handle().ptr_eq(db.handle()) && db.handle().ptr_eq(dc.handle()),
            "three small buffers on one stream share a segment"
        );
        assert!(
            da.offset() != db.offset() && db.offset() != dc.offset() && da.offset() != dc.offset()
        );
    }
    assert!([&da, &db, &dc].iter().all(|b| b.offset() % 512 == 0));
    s.launch(
        &VECTOR_ADD,
        VECTOR_ADD.grid_for(n as u64),
        &[&da, &db, &dc],
        &(n as u32).to_le_bytes(),
    )
    .expect("launch");
    let c = dc.read_as::<f32>(&s).expect("read");
    assert_eq!(
        (0..n).find(|&i| c[i] != a[i] + b[i]),
        None,
        "first wrong element"
    );
    // The neighbours are untouched, and copies between blocks of one
    // segment work.
    assert_eq!(da.read_as::<f32>(&s).expect("a"), a);
    assert_eq!(db.read_as::<f32>(&s).expect("b"), b);
    da.copy_from(&s, &db, 8, 4, 400)
        .expect("copy within a segment");
    let got = da.read_as::<f32>(&s).expect("a after copy");
    assert_eq!(got[1..101], b[2..102]);
    assert_eq!(got[0], a[0]);
}

/// Statistics follow allocations and frees (PyTorch's keys), peaks reset,
/// `empty_cache` gives free segments back, the summary and the snapshot
/// describe them, and a new buffer is zeroed even on a reused block.
pub fn memory_statistics_follow_buffers(d: Device, _cfg: &Config) {
    use crate::memory;
    let s = pool(d);
    memory::empty_cache(d).expect("empty_cache");
    let before = memory::memory_stats(d).expect("stats");
    let key = |m: &std::collections::BTreeMap<String, i64>, k: &str| {
        *m.get(k).unwrap_or_else(|| panic!("key {k}"))
    };
    let b = Buffer::empty_on(&s, 1000).expect("small");
    let big = Buffer::empty_on(&s, 4 << 20).expect("large");
    let m = memory::memory_stats(d).expect("stats");
    let delta = |k: &str| key(&m, k) - key(&before, k);
    assert_eq!(delta("allocated_bytes.all.current"), 1024 + (4 << 20));
    assert_eq!(delta("allocated_bytes.small_pool.current"), 1024);
    assert_eq!(delta("allocated_bytes.large_pool.current"), 4 << 20);
    assert_eq!(delta("requested_bytes.all.current"), 1000 + (4 << 20));
    assert_eq!(delta("allocation.all.current"), 2);
    assert_eq!(delta("active_bytes.all.current"), 1024 + (4 << 20));
    assert!(delta("reserved_bytes.large_pool.current") >= 4 << 20);
    assert_eq!(
        memory::memory_allocated(d).expect("allocated") as i64,
        key(&m, "allocated_bytes.all.current")
    );
    assert!(
        memory::max_memory_allocated(d).expect("peak") >= memory::memory_allocated(d).expect("cur")
    );
    assert!(
        memory::memory_reserved(d).expect("reserved") >= memory::memory_allocated(d).expect("cur")
    );
    let snap = memory::memory_snapshot(d).expect("snapshot");
    let seg = snap
        .iter()
        .find(|seg| seg.blocks.iter().any(|b| b.requested_size == 4 << 20))
        .expect("the large block's segment");
    assert!(!seg.small_pool);
    assert_eq!(seg.stream, s);
    assert_eq!(seg.blocks[0].state, memory::BlockState::Active);
    drop(big);
    let after_free = memory::memory_stats(d).expect("stats");
    assert_eq!(
        key(&after_free, "allocated_bytes.all.current"),
        key(&before, "allocated_bytes.all.current") + 1024
    );
    assert_eq!(
        key(&after_free, "reserved_bytes.all.current"),
        key(&m, "reserved_bytes.all.current"),
        "a freed block stays cached"
    );
    memory::reset_peak_memory_stats(d).expect("reset");
    assert_eq!(
        memory::max_memory_allocated(d).expect("peak"),
        memory::memory_allocated(d).expect("current")
    );
    memory::empty_cache(d).expect("empty_cache");
    let emptied = memory::memory_stats(d).expect("stats");
    assert_eq!(
        key(&emptied, "reserved_bytes.large_pool.current"),
        key(&before, "reserved_bytes.large_pool.current"),
        "empty_cache released the free large segment"
    );
    assert!(key(&emptied, "num_device_free") > key(&before, "num_device_free"));
    let summary = memory::memory_summary(d).expect("summary");
    assert!(summary.contains(&d.to_string()), "{summary}");
    assert!(summary.contains("Allocated memory") && summary.contains("from small pool"));
    // A zeroed buffer on a reused (dirty) block.
    b.write(&s, 0, &[0xabu8; 1000]).expect("dirty");
    s.synchronize().expect("dirty");
    drop(b);
    let z = Buffer::new_on(&s, 1000).expect("zeroed");
    assert!(z.read(&s).expect("read").iter().all(|&x| x == 0), "zeroed");
}

/// Out of memory under a small budget: the cache is freed and the
/// allocation retried once (`num_alloc_retries`); then a clear error with
/// what was asked and what is allocated and reserved (`num_ooms`).
pub fn out_of_memory_retries_then_reports(d: Device, _cfg: &Config) {
    use crate::memory;
    struct Restore(Device, crate::memory::AllocConfig);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = crate::memory::set_config(self.0, self.1);
        }
    }
    let (s, s2) = two_streams(d);
    let _restore = Restore(d, memory::config(d).expect("config"));
    memory::empty_cache(d).expect("empty_cache");
    let base = memory::memory_reserved(d).expect("reserved");
    let big = memory::segment_for(d, 3 << 20).expect("segment size");
    memory::set_memory_budget(d, Some(base + big)).expect("budget");
    let st0 = memory::stats(d).expect("stats");
    // A segment filling the budget (4 MiB, or 3 MiB where every buffer
    // has its own), freed into the cache.
    drop(Buffer::empty_on(&s, 3 << 20).expect("fits the budget"));
    // A small segment (on another stream) needs more: the cached segment
    // is released and the allocation retried, successfully.
    let small = Buffer::empty_on(&s2, 1000).expect("fits after a retry");
    let st1 = memory::stats(d).expect("stats");
    assert_eq!(st1.num_alloc_retries, st0.num_alloc_retries + 1);
    assert_eq!(st1.num_ooms, st0.num_ooms);
    // Cached again; it is released for the next request's retry.
    drop(small);
    // 5 MiB never fits 4 MiB: retried, then out of memory.
    let e = Buffer::empty_on(&s, 5 << 20).expect_err("over the budget");
    let st2 = memory::stats(d).expect("stats");
    assert_eq!(st2.num_alloc_retries, st1.num_alloc_retries + 1);
    assert_eq!(st2.num_ooms, st1.num_ooms + 1);
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let msg = e.to_string();
    for part in [
        format!("out of memory on {d}: tried to allocate 5242880 bytes (5.00 MiB)"),
        "a memory budget of".to_owned(),
        "is allocated by buffers".to_owned(),
        "is reserved by Keel's caching allocator".to_owned(),
        "max_split_size_mb".to_owned(),
    ] {
        assert!(msg.contains(&part), "{part:?} in {msg}");
    }
    let m = memory::memory_stats(d).expect("stats");
    assert_eq!(m["num_ooms"], st2.num_ooms as i64);
    assert_eq!(m["num_alloc_retries"], st2.num_alloc_retries as i64);
}

/// `backend:direct`: every buffer is its own backend allocation, given back
/// when the buffer is dropped (nothing cached).
pub fn direct_mode_goes_to_the_backend(d: Device, _cfg: &Config) {
    use crate::memory::{self, AllocBackend, AllocConfig};
    let s = pool(d);
    let saved = memory::config(d).expect("config");
    memory::set_config(
        d,
        AllocConfig {
            backend: AllocBackend::Direct,
            ..saved
        },
    )
    .expect("direct");
    let run = || {
        let st0 = memory::stats(d).expect("stats");
        let a = Buffer::from_slice(&s, &[1.0f32, 2.0, 3.0]).expect("a");
        let b = Buffer::from_slice(&s, &[10.0f32, 20.0, 30.0]).expect("b");
        assert!(!a.handle().ptr_eq(b.handle()), "separate allocations");
        assert_eq!(a.offset(), 0);
        s.launch(&SAXPY, SAXPY.grid_for(3), &[&a, &b], &saxpy_params(3, 2.0))
            .expect("saxpy");
        assert_eq!(b.read_as::<f32>(&s).expect("read"), [12.0, 24.0, 36.0]);
        let st1 = memory::stats(d).expect("stats");
        assert_eq!(st1.num_device_alloc, st0.num_device_alloc + 2);
        drop((a, b));
        let st2 = memory::stats(d).expect("stats");
        assert_eq!(st2.num_device_free, st0.num_device_free + 2);
        assert_eq!(
            st2.reserved_bytes.all.current,
            st0.reserved_bytes.all.current
        );
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    memory::set_config(d, saved).expect("restore");
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

/// `garbage_collection_threshold`: before reserving a new segment, free
/// cached segments are released while the reserved memory would exceed the
/// threshold's share of the capacity (here the budget), with no
/// out-of-memory retry.
pub fn garbage_collection_releases_before_growing(d: Device, _cfg: &Config) {
    use crate::memory;
    let s = pool(d);
    let saved = memory::config(d).expect("config");
    memory::empty_cache(d).expect("empty_cache");
    let base = memory::memory_reserved(d).expect("reserved");
    // 4 MiB and 2 MiB segments, or 3 MiB and 1 KiB where every buffer has
    // its own.
    let (big, small) = (
        memory::segment_for(d, 3 << 20).expect("segment size"),
        memory::segment_for(d, 1000).expect("segment size"),
    );
    memory::set_config(
        d,
        memory::AllocConfig {
            garbage_collection_threshold: Some(0.5),
            memory_budget: Some(base + 2 * big),
            ..saved
        },
    )
    .expect("config");
    let run = || {
        drop(Buffer::empty_on(&s, 3 << 20).expect("a big segment"));
        let st0 = memory::stats(d).expect("stats");
        assert_eq!(memory::memory_reserved(d).expect("reserved"), base + big);
        let _small = Buffer::empty_on(&s, 1000).expect("a small segment");
        let st1 = memory::stats(d).expect("stats");
        assert_eq!(
            memory::memory_reserved(d).expect("reserved"),
            base + small,
            "the free big segment was released first"
        );
        assert_eq!(st1.num_device_free, st0.num_device_free + 1);
        assert_eq!(st1.num_alloc_retries, st0.num_alloc_retries, "no retry");
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    memory::set_config(d, saved).expect("restore");
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}
