//! Vulkan-specific behaviour beyond the conformance suite
//! (`tests/conformance_vulkan.rs`): properties and device order, empty
//! bindings, timestamp slot reuse, pooled staging buffers, launches through
//! cached descriptor sets and the parameter ring, and the unavailable path
//! (in a child process with no driver).

use keel_device::testing::{child, conformance};
use keel_device::{Buffer, Device, DeviceGuard, DeviceType, Error, Event, kernels};

const TY: DeviceType = DeviceType::Vulkan;

/// Launches the `spin` kernel over `out`'s `n` elements, `iters`
/// dependent steps each (work that keeps a stream busy for a while).
fn spin(s: &keel_device::Stream, out: &Buffer, n: u32, iters: u32) {
    let params: Vec<u8> = [n, iters].iter().flat_map(|v| v.to_le_bytes()).collect();
    s.launch(
        &kernels::SPIN,
        kernels::SPIN.grid_for(u64::from(n)),
        &[out],
        &params,
    )
    .expect("spin");
}

fn no_validation_errors() {
    assert_eq!(
        keel_device::backend::vulkan::validation_error_count(),
        0,
        "{:#?}",
        keel_device::backend::vulkan::validation_messages()
    );
}

#[test]
fn properties_and_documented_order() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let p = keel_device::properties(d).expect("properties");
    assert!(!p.name.is_empty());
    assert!(
        p.native_backend.starts_with("Vulkan 1."),
        "{}",
        p.native_backend
    );
    assert!(!p.driver.is_empty());
    assert!(
        p.timestamps
            .is_some_and(|t| t.period_ns > 0.0 && t.valid_bits > 0)
    );
    assert!(p.max_workgroup_size.is_some_and(|s| s[0] >= 128));
    assert!(p.max_workgroup_count.is_some_and(|c| c[0] >= 65535));
    assert!(p.subgroup_size.is_some());
    assert!(p.total_memory.is_some_and(|m| m > 0));
    assert!(p.extra.iter().any(|(k, _)| k == "compute queue family"));
    let kinds: Vec<_> = keel_device::devices(TY)
        .into_iter()
        .map(|d| keel_device::properties(d).expect("properties"))
        .map(|p| (p.kind, p.name))
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort();
    assert_eq!(
        kinds, sorted,
        "discrete, integrated, virtual, CPU, other; then by name"
    );
    no_validation_errors();
}

#[test]
fn empty_bindings_are_refused() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    let empty = Buffer::new(d, 0).expect("empty buffers exist");
    let e = s
        .launch(&kernels::SPIN, [1, 1, 1], &[&empty], &[])
        .expect_err("empty binding");
    assert_eq!(
        e.to_string(),
        "kernel 'spin': binding 0 is an empty buffer, which Vulkan cannot bind"
    );
    no_validation_errors();
}

#[test]
fn timed_events_recycle_their_query_slots() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    let other = keel_device::get_stream_from_pool(d, false).expect("pool");
    // More timed records than the device has query slots (32,768), with
    // no synchronize: the host may run ahead of the device, and then
    // waits for the oldest record's work instead of running out of slots.
    // Every record takes a slot; new events and a re-recorded one (whose
    // previous slot retires) alternate.
    let mut again = Event::timed(TY);
    for i in 0..40_000 {
        if i % 2 == 0 {
            let mut e = Event::timed(TY);
            e.record(&s).expect("record");
        } else {
            again.record(&s).expect("re-record");
        }
    }
    s.synchronize().expect("sync");
    assert!(again.query().expect("query"));
    // Timestamps of two streams of one device share a clock.
    let mut a = Event::timed(TY);
    let mut b = Event::timed(TY);
    a.record(&s).expect("record");
    s.synchronize().expect("sync");
    b.record(&other).expect("record");
    b.synchronize().expect("sync");
    assert!(a.elapsed_time(&b).expect("elapsed") >= 0.0);
    no_validation_errors();
}

/// Staging buffers are pooled and reused: copies in flight never share
/// one, whatever the sizes (small, one size class, past the largest class)
/// and however many are queued before anything completes.
#[test]
fn pooled_staging_buffers_never_serve_two_copies_in_flight() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    let other = keel_device::get_stream_from_pool(d, true).expect("pool");
    for len in [1usize, 100 << 10, 3 << 20] {
        let bufs: Vec<Buffer> = (0..6)
            .map(|_| Buffer::new(d, len).expect("buffer"))
            .collect();
        for round in 0u8..4 {
            let fill = |i: usize| -> Vec<u8> {
                (0..len)
                    .map(|j| (j as u8).wrapping_mul(31) ^ (i as u8 * 17 + round))
                    .collect()
            };
            // Every write queued before any completes, across two streams.
            for (i, b) in bufs.iter().enumerate() {
                let stream = if i % 2 == 0 { &s } else { &other };
                b.write(stream, 0, &fill(i)).expect("write");
            }
            let reads: Vec<_> = bufs
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let stream = if i % 2 == 0 { &s } else { &other };
                    b.read_async(stream, 0, len).expect("read")
                })
                .collect();
            for (i, r) in reads.into_iter().enumerate() {
                assert_eq!(r.wait().expect("wait"), fill(i), "len {len}, buffer {i}");
            }
        }
    }
    // A copy larger than the largest pooled size gets a buffer of its own.
    let big = 300 << 20;
    let b = Buffer::new(d, big).expect("buffer");
    b.write(&s, big - 4, &[1u8, 2, 3, 4]).expect("write");
    let tail = b
        .read_async(&s, big - 8, 8)
        .expect("read")
        .wait()
        .expect("wait");
    assert_eq!(tail, [0, 0, 0, 0, 1, 2, 3, 4]);
    no_validation_errors();
}

/// `read_into` copies straight into the caller's memory (Vulkan's mapped
/// staging path, the CPU backend's default path); a destination of the
/// wrong length is refused before anything is read.
#[test]
fn read_into_fills_the_callers_memory() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    for d in [d, Device::cpu()] {
        let s = keel_device::get_stream_from_pool(d, false).expect("pool");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let b = Buffer::new(d, data.len()).expect("buffer");
        b.write(&s, 0, &data).expect("write");
        let mut out = vec![0u8; 1000];
        b.read_into(&s, 5000, &mut out).expect("read_into");
        assert_eq!(out, data[5000..6000], "{d}");
        let e = b
            .read_async(&s, 0, 16)
            .expect("read")
            .wait_into(&mut [0u8; 8])
            .expect_err("wrong length");
        assert_eq!(
            e.to_string(),
            "wait_into: expected a destination of 16 bytes (the read's length), found 8 bytes",
        );
        let e = b
            .read_into(&s, data.len() - 4, &mut [0u8; 8])
            .expect_err("out of range");
        assert!(e.to_string().contains("read"), "{e}");
    }
    no_validation_errors();
}

/// Vulkan calibrates its clock with calibrated timestamps where the device
/// has them (lavapipe does): the stated bound is under 5 us, and a timed
/// kernel's device span lies inside the host interval around its launch
/// and completion, within that bound.
/// Launches with the same bindings share one cached descriptor set and
/// take their parameters from the stream's ring of slots: more launches
/// than the ring has slots, each with its own `alpha`, interleaved with
/// parameter blocks too large for a slot (a buffer and set of their own)
/// and with launches on freshly allocated buffers (new sets), must each
/// see their own parameters.
#[test]
fn cached_sets_and_the_parameter_ring_keep_each_launchs_parameters() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    const N: u32 = 300;
    const LAUNCHES: u32 = 1200; // more than the ring's 512 slots, twice over
    let k = kernels::SAXPY;
    let params = |alpha: f32, large: bool| {
        let mut p = [N.to_le_bytes(), alpha.to_le_bytes()].concat();
        if large {
            p.resize(1024, 0); // past a 256-byte slot
        }
        p
    };
    let ones = vec![1.0f32; N as usize];
    let x = Buffer::from_slice(&s, &ones).expect("x");
    let y = Buffer::from_slice(&s, &vec![0.0f32; N as usize]).expect("y");
    let mut expected = 0.0f32;
    for i in 1..=LAUNCHES {
        let alpha = i as f32;
        s.launch(
            &k,
            k.grid_for(u64::from(N)),
            &[&x, &y],
            &params(alpha, i % 7 == 0),
        )
        .expect("saxpy");
        expected += alpha;
        if i % 100 == 0 {
            // Fresh buffers (the old ones freed): a new set, while the
            // old one may still be in flight.
            let fresh = Buffer::from_slice(&s, &ones).expect("fresh");
            let z = Buffer::from_slice(&s, &vec![0.0f32; N as usize]).expect("z");
            s.launch(
                &k,
                k.grid_for(u64::from(N)),
                &[&fresh, &z],
                &params(2.0 * alpha, false),
            )
            .expect("saxpy");
            let z = z.read_as::<f32>(&s).expect("read");
            assert!(
                z.iter().all(|&v| v == 2.0 * alpha),
                "launch {i}: {:?}",
                &z[..4]
            );
        }
    }
    let y = y.read_as::<f32>(&s).expect("read");
    // Integers below 2^24: every partial sum is exact in f32.
    assert_eq!(expected, (LAUNCHES * (LAUNCHES + 1) / 2) as f32);
    assert!(y.iter().all(|&v| v == expected), "{:?}", &y[..4]);
    no_validation_errors();
}

#[test]
fn calibrated_device_spans_lie_inside_their_host_interval() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    let n = 4096u32;
    let out = Buffer::new(d, 4 * n as usize).expect("buffer");
    // Warm up the pipeline, so the recorded launch is only the dispatch.
    spin(&s, &out, n, 20_000);
    s.synchronize().expect("sync");
    let _one_session = crate::session();
    let session = keel_device::profiler::start().expect("session");
    let before = session.now_ns();
    spin(&s, &out, n, 20_000);
    s.synchronize().expect("sync");
    let after = session.now_ns();
    let trace = session.stop();
    let cal = trace.calibrations.first().expect("a calibration");
    if !cal.method.starts_with("calibrated timestamps") {
        eprintln!(
            "this device has no calibrated timestamps ({}); skipped",
            cal.method
        );
        return;
    }
    eprintln!("{}: +/- {} ns", cal.method, cal.error_bound_ns);
    assert!(
        cal.error_bound_ns < 5_000,
        "bound {} ns",
        cal.error_bound_ns
    );
    let device_lane = |lane: u32| {
        matches!(
            trace.lanes[lane as usize].kind,
            keel_device::profiler::LaneKind::Stream { .. }
        )
    };
    let span = trace
        .spans
        .iter()
        .find(|sp| sp.name == "spin" && device_lane(sp.lane))
        .expect("the kernel's device span");
    let bound = cal.error_bound_ns;
    assert!(
        span.start_ns + bound >= before && span.end_ns() <= after + bound,
        "device span {}..{} outside host interval {before}..{after} (+/- {bound} ns)",
        span.start_ns,
        span.end_ns()
    );
    assert!(span.dur_ns > 0);
    no_validation_errors();
}

/// The profiler's device spans as the Vulkan backend makes them
/// (`begin_timed_work` / `end_timed_work`, what the profiler calls around
/// each operation), on a stream kept busy by a long kernel: each span's
/// start is at most its end, each ends no later than the next starts, and
/// the timed event recorded inside a span lies within it. Spans whose
/// first submission found the stream busy share the previous span's end
/// as their start (one timestamp per launch); a span on an idle stream
/// writes a start of its own, after the previous end, and so does a span
/// after which another stream submitted to the same queue (its work may
/// run in between).
///
/// The bracketed work is made through the backend interface (timed event
/// records, and spans with no submission of their own), not through
/// stream operations: a profiler session another test may have open does
/// not bracket it, so this test needs no session (and no lock).
#[test]
fn busy_stream_spans_share_timestamps_and_idle_spans_start_their_own() {
    use keel_device::backend::registry;
    use keel_device::{EventFlag, backend::EventHandle};
    let Some(d) = conformance::device(TY) else {
        return;
    };
    if keel_device::properties(d)
        .expect("properties")
        .timestamps
        .is_none()
    {
        eprintln!("{d} has no timestamps; skipped");
        return;
    }
    let g = registry::available_guard_impl(TY).expect("vulkan");
    let t = registry::timing(TY).expect("vulkan's profiler hooks");
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    let n = 4096u32;
    let out = Buffer::new(d, 4 * n as usize).expect("buffer");
    let spin = |iters: u32| spin(&s, &out, n, iters);
    spin(1); // the pipeline, compiled before the stream is made busy
    s.synchronize().expect("sync");

    let time = |e: &EventHandle| {
        t.event_time_ns(e)
            .expect("event time")
            .expect("a calibrated clock (lavapipe has one)")
    };
    // (start, end, timed event inside or None)
    type Span = (EventHandle, EventHandle, Option<EventHandle>);
    let bracket = |with_event: bool| -> Span {
        assert!(t.begin_timed_work(&s).expect("begin"), "Vulkan times work");
        let mut inside = None;
        if with_event {
            g.record(&mut inside, &s, d.index(), EventFlag::Timing)
                .expect("record");
        }
        let (start, end) = t
            .end_timed_work(&s)
            .expect("end")
            .expect("a bracketed span");
        (start, end, inside)
    };

    // Busy: a kernel of many milliseconds, then spans queued behind it.
    spin(200_000);
    let mut spans: Vec<Span> = (0..64).map(|i| bracket(i % 5 != 3)).collect();
    // Idle: everything has completed before the next span is made.
    s.synchronize().expect("sync");
    spans.push(bracket(true));
    spans.push(bracket(false));
    s.synchronize().expect("sync");

    let times: Vec<(i64, i64, Option<i64>)> = spans
        .iter()
        .map(|(a, b, e)| (time(a), time(b), e.as_ref().map(time)))
        .collect();
    let mut shared = 0;
    for (i, &(start, end, inside)) in times.iter().enumerate() {
        assert!(start <= end, "span {i}: start {start} after end {end}");
        if let Some(t) = inside {
            assert!(
                start <= t && t <= end,
                "span {i}: event {t} outside {start}..{end}"
            );
        }
        if i > 0 {
            let prev_end = times[i - 1].1;
            assert!(
                prev_end <= start,
                "span {i} starts at {start}, before the previous end {prev_end}"
            );
            if i < times.len() - 2 {
                shared += usize::from(prev_end == start);
            }
        }
    }
    let idle = times.len() - 2;
    assert!(
        times[idle].0 > times[idle - 1].1,
        "the span on an idle stream starts after the previous end: {:?}",
        &times[idle - 1..=idle]
    );
    // The second span after the long kernel was submitted while it ran.
    assert!(shared >= 1, "no busy span shared its start: {times:?}");
    eprintln!(
        "{shared} of {} spans after the first on the busy stream started at the previous end",
        idle - 1
    );

    // Busy again, but another stream submits to the same queue between
    // the spans: its work may run first, so no span shares a start.
    let queues: usize = keel_device::properties(d)
        .expect("properties")
        .extra
        .iter()
        .find(|(k, _)| k == "compute queues")
        .and_then(|(_, v)| v.parse().ok())
        .expect("the compute queue count");
    let other = (0..64)
        .map(|_| keel_device::get_stream_from_pool(d, false).expect("pool"))
        .find(|o| *o != s)
        .expect("a second pool stream");
    spin(200_000);
    let mut interleaved: Vec<Span> = Vec::new();
    for _ in 0..8 {
        interleaved.push(bracket(false));
        let mut e = None;
        g.record(&mut e, &other, d.index(), EventFlag::Timing)
            .expect("record on the other stream");
        if let Some(h) = e {
            g.destroy_event(h, d.index());
        }
    }
    s.synchronize().expect("sync");
    other.synchronize().expect("sync");
    let times: Vec<(i64, i64)> = interleaved
        .iter()
        .map(|(a, b, _)| (time(a), time(b)))
        .collect();
    for (i, w) in times.windows(2).enumerate() {
        assert!(w[0].0 <= w[0].1 && w[0].1 <= w[1].0, "span {i}: {w:?}");
        if queues == 1 {
            assert_ne!(
                w[0].1,
                w[1].0,
                "span {} shared a start across another stream's work",
                i + 1
            );
        }
    }
    spans.extend(interleaved);
    for (a, b, e) in spans {
        for h in [Some(a), Some(b), e].into_iter().flatten() {
            g.destroy_event(h, d.index());
        }
    }
    no_validation_errors();
}

const PROBE: &str = "probe_vulkan_unavailable";

/// Runs in a child process whose Vulkan loader finds no driver.
#[test]
#[ignore = "run by `unavailable_vulkan_is_a_clean_error` in a child process"]
fn probe_vulkan_unavailable() {
    assert_eq!(keel_device::device_count(TY), 0);
    let reason = keel_device::availability(TY).expect_err("no driver");
    assert!(
        reason.to_string().starts_with("Vulkan unavailable: "),
        "{reason}"
    );
    let d = Device::new(TY, 0).expect("vulkan:0 parses");
    let e = DeviceGuard::new(d).expect_err("guard");
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    let e = Buffer::new(d, 4).expect_err("alloc");
    assert!(e.to_string().starts_with("Vulkan unavailable: "), "{e}");
    assert!(keel_device::current_device(TY).is_err());
    assert!(keel_device::get_stream_from_pool(d, false).is_err());
    // Other backends keep working in the same process.
    let cpu = keel_device::current_stream(Device::cpu()).expect("cpu");
    assert_eq!(
        Buffer::from_slice(&cpu, &[5u8])
            .expect("cpu")
            .read(&cpu)
            .expect("read"),
        [5]
    );
    println!("probe ok: {reason}");
}

#[test]
fn unavailable_vulkan_is_a_clean_error() {
    let stdout = child::probe(
        module_path!(),
        PROBE,
        &[
            ("VK_ICD_FILENAMES", "/nonexistent/keel_no_driver.json"),
            ("VK_DRIVER_FILES", "/nonexistent/keel_no_driver.json"),
        ],
    );
    assert!(stdout.contains("probe ok: Vulkan unavailable"), "{stdout}");
}

/// A Vulkan device holds more live timed events than its 32,768 query
/// slots (PyTorch's habit: a start and an end event per iteration, all
/// read at the end): once every slot is held, the values of events whose
/// work completed move out of the pool and their slots are reused. The
/// events keep their times, can be recorded again, and a profiling
/// session meanwhile times every operation. In a child process: it holds
/// every slot of the device for a while.
#[test]
fn a_device_holds_more_timed_events_than_query_slots() {
    if conformance::device(TY).is_none() {
        return;
    }
    let stdout = child::probe(
        module_path!(),
        "probe_more_timed_events_than_query_slots",
        &[],
    );
    assert!(
        stdout.contains("probe ok"),
        "holding more timed events than slots failed: {stdout}"
    );
}

#[test]
#[ignore = "run in a child process by a_device_holds_more_timed_events_than_query_slots"]
fn probe_more_timed_events_than_query_slots() {
    let d = conformance::device(TY).expect("a Vulkan device");
    // More than the device's 32,768 query slots.
    conformance::timed_events_past_the_slots(d, 33_000);
    no_validation_errors();
    println!("probe ok");
}
