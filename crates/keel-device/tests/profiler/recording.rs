//! The profiler's own rules: annotations and markers, one session at a
//! time, bounded buffers. What it records of each backend's stream
//! operations (device spans, flows, calibration, allocator events) is part of the
//! conformance suite (`keel_device::testing::conformance`), run on every backend.

use keel_device::profiler::SpanKind;

use crate::serial;

/// `cpu:0`'s index in `trace`'s devices.
fn cpu_index(trace: &keel_device::profiler::Trace) -> u32 {
    trace
        .devices
        .iter()
        .position(|d| d.device == "cpu:0")
        .expect("cpu:0 in the trace") as u32
}

#[test]
fn annotations_markers_and_one_session_at_a_time() {
    let _s = serial();
    assert!(!keel_device::profiler::enabled());
    let session = keel_device::profiler::start().expect("start");
    let e = keel_device::profiler::start().expect_err("second session");
    assert!(e.to_string().contains("already recording"), "{e}");
    {
        let _outer = keel_device::profiler::range("outer");
        let _inner = keel_device::profiler::range(format!("inner {}", 1));
        keel_device::profiler::mark("checkpoint");
    }
    let trace = session.stop();
    assert!(!keel_device::profiler::enabled());
    let outer = trace
        .spans
        .iter()
        .find(|s| s.name == "outer")
        .expect("outer");
    let inner = trace
        .spans
        .iter()
        .find(|s| s.name == "inner 1")
        .expect("inner");
    assert_eq!(outer.kind, SpanKind::Annotation);
    assert!(outer.start_ns <= inner.start_ns && inner.end_ns() <= outer.end_ns());
    assert!(trace.instants.iter().any(|i| i.name == "checkpoint"));
    // Nothing is recorded without a session.
    {
        let _r = keel_device::profiler::range("unrecorded");
    }
    let trace = keel_device::profiler::start().expect("start").stop();
    assert!(trace.spans.iter().all(|s| s.name != "unrecorded"));
}

#[test]
fn full_buffers_count_drops() {
    let _s = serial();
    let session = keel_device::profiler::start().expect("start");
    let extra = 25u64;
    for _ in 0..(keel_device::profiler::record::MAX_RECORDS_PER_THREAD as u64 + extra) {
        keel_device::profiler::mark("m");
    }
    let trace = session.stop();
    assert_eq!(trace.dropped, extra);
    assert_eq!(
        trace.instants.len(),
        keel_device::profiler::record::MAX_RECORDS_PER_THREAD
    );
}

#[test]
fn steps_are_profiler_step_ranges_end_to_end() {
    let _s = serial();
    // Without a session, nothing (and no step is left open).
    keel_device::profiler::step();
    let session = keel_device::profiler::start().expect("start");
    for i in 0..3 {
        keel_device::profiler::step();
        let _work = keel_device::profiler::range(format!("work {i}"));
    }
    let trace = session.stop();
    let mut steps: Vec<_> = trace
        .spans
        .iter()
        .filter(|s| s.name.starts_with("ProfilerStep#"))
        .collect();
    steps.sort_by_key(|s| s.start_ns);
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    );
    // Each step ends where the next starts; the last ends at stop.
    for pair in steps.windows(2) {
        assert_eq!(pair[0].end_ns(), pair[1].start_ns);
    }
    for (i, step) in steps.iter().enumerate() {
        let work = trace
            .spans
            .iter()
            .find(|s| s.name == format!("work {i}"))
            .expect("work");
        assert!(step.start_ns <= work.start_ns && work.end_ns() <= step.end_ns());
        assert_eq!(step.kind, SpanKind::Annotation);
    }
    assert_eq!(trace.check(), Ok(()));
    // A new session counts from 0 again.
    let session = keel_device::profiler::start().expect("start");
    keel_device::profiler::step();
    let trace = session.stop();
    assert!(trace.spans.iter().any(|s| s.name == "ProfilerStep#0"));
}

/// A buffer allocated and freed under a session: allocator events of its
/// device, and the allocated and reserved curves, whose values are the
/// events' totals at every event.
#[test]
fn allocations_are_allocator_events_with_both_curves() {
    use keel_device::profiler::{ALLOCATED_COUNTER, MemoryAction, MemoryMap, RESERVED_COUNTER};
    let _s = serial();
    let session = keel_device::profiler::start().expect("start");
    let len = 3000;
    let buffer = keel_device::Buffer::new(keel_device::Device::cpu(), len).expect("buffer");
    drop(buffer);
    let trace = session.stop();
    assert_eq!(trace.check(), Ok(()));
    let cpu = cpu_index(&trace);
    let alloc = trace
        .memory
        .iter()
        .find(|m| m.device == cpu && m.action == MemoryAction::Alloc)
        .expect("an allocation");
    assert!(alloc.bytes >= len as u64, "{alloc:?}");
    let free = trace
        .memory
        .iter()
        .find(|m| m.action == MemoryAction::Free && m.addr == alloc.addr)
        .expect("its free");
    assert!(free.ts_ns >= alloc.ts_ns);
    assert!(alloc.allocated >= alloc.bytes && alloc.reserved >= alloc.allocated);
    // While it lived, the segment map held it as an active block.
    let map = MemoryMap::at(&trace, cpu, alloc.ts_ns);
    assert!(map.rows().iter().any(|r| {
        r.blocks
            .iter()
            .any(|b| b.addr == alloc.addr && b.bytes == alloc.bytes)
    }));
    for name in [ALLOCATED_COUNTER, RESERVED_COUNTER] {
        let curve = trace
            .counters
            .iter()
            .find(|c| c.device == cpu && c.name == name)
            .unwrap_or_else(|| panic!("the {name} curve"));
        for m in trace.memory.iter().filter(|m| m.device == cpu) {
            let i = curve.points.partition_point(|p| p.0 <= m.ts_ns);
            let total = if name == ALLOCATED_COUNTER {
                m.allocated
            } else {
                m.reserved
            };
            assert_eq!(curve.points[i - 1].1 as u64, total, "{name} at {m:?}");
        }
    }
    // Both formats keep them.
    let json = keel_device::profiler::json::to_json_string(&trace).expect("json");
    assert_eq!(
        keel_device::profiler::json::read_json(&json).expect("read"),
        trace
    );
}

/// Ranges, stream operations and allocator events recorded back to back on
/// one thread share one tick source (`profiler/stamp.rs`): a range drawn
/// tightly around a stream operation contains it, and the trace's nesting
/// check holds over thousands of records.
#[test]
fn host_records_share_one_clock_and_nest() {
    let _s = serial();
    let s = keel_device::get_stream_from_pool(keel_device::Device::cpu(), false).expect("stream");
    let session = keel_device::profiler::start().expect("start");
    for i in 0..2000 {
        let _outer = keel_device::profiler::range("outer");
        {
            let _inner = keel_device::profiler::range("inner");
            s.synchronize().expect("sync");
        }
        if i % 10 == 0 {
            let b = keel_device::Buffer::from_slice(&s, &[i as u32; 4]).expect("buffer");
            keel_device::profiler::mark("allocated");
            drop(b);
        }
    }
    let trace = session.stop();
    assert_eq!(trace.check(), Ok(()));
    let inner: Vec<_> = trace.spans.iter().filter(|x| x.name == "inner").collect();
    let outer: Vec<_> = trace.spans.iter().filter(|x| x.name == "outer").collect();
    assert_eq!((inner.len(), outer.len()), (2000, 2000));
    let lane = inner[0].lane;
    let mut syncs: Vec<_> = trace
        .spans
        .iter()
        .filter(|x| x.lane == lane && x.op != 0 && x.name.contains("synchronize"))
        .collect();
    syncs.sort_by_key(|x| x.start_ns);
    let mut inner = inner;
    inner.sort_by_key(|x| x.start_ns);
    assert_eq!(syncs.len(), 2000, "one synchronize span per iteration");
    for (r, op) in inner.iter().zip(&syncs) {
        assert!(
            r.start_ns <= op.start_ns && op.end_ns() <= r.end_ns(),
            "{r:?} does not contain {op:?}"
        );
    }
    // Host times run forward: the allocator events are in order and lie
    // inside the session.
    let last_end = trace.spans.iter().map(|x| x.end_ns()).max().unwrap_or(0);
    assert!(!trace.memory.is_empty());
    assert!(trace.memory.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(trace.memory.iter().all(|m| m.ts_ns <= last_end + 1_000_000));
}

/// Kernels that two threads run at once on the CPU's default stream run
/// inline, each on its own thread, so they overlap in time. Each thread's
/// kernels get a lane of the stream of their own, named after the
/// thread, at the times they ran: a kernel's device span lies inside its
/// launch on the host (a shared lane shifted the later one past the
/// earlier's end, outside its own launch). Their buffers are small: each
/// CPU buffer is an allocation of its own, so the two kernels do not wait
/// for each other.
#[test]
fn inline_cpu_kernels_of_two_threads_get_a_lane_each() {
    use std::sync::atomic::{AtomicBool, Ordering};

    use keel_device::kernels::SPIN;
    use keel_device::profiler::LaneKind;

    let _s = serial();
    let cpu = keel_device::Device::cpu();
    let spin = |out: &keel_device::Buffer, iters: u32| {
        let s = keel_device::current_stream(cpu).expect("the default stream");
        let params: Vec<u8> = [1u32, iters].iter().flat_map(|v| v.to_le_bytes()).collect();
        s.launch(&SPIN, SPIN.grid_for(1), &[out], &params)
            .expect("spin");
    };
    let outs = [(); 2].map(|()| keel_device::Buffer::new(cpu, 64).expect("out"));
    spin(&outs[0], 1);
    let started = AtomicBool::new(false);
    let session = keel_device::profiler::start().expect("start");
    std::thread::scope(|scope| {
        let named = |name: &str| std::thread::Builder::new().name(name.to_owned());
        named("long")
            .spawn_scoped(scope, || {
                started.store(true, Ordering::Release);
                spin(&outs[0], 20_000_000);
            })
            .expect("thread");
        named("short")
            .spawn_scoped(scope, || {
                while !started.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                spin(&outs[1], 1_000_000);
            })
            .expect("thread");
    });
    let trace = session.stop();
    assert_eq!(trace.check(), Ok(()));

    let device = cpu_index(&trace);
    let bound = trace
        .calibrations
        .iter()
        .find(|c| c.device == device)
        .map_or(0, |c| c.error_bound_ns);
    // The kernel on thread `name`'s lane of stream 0, and its launch.
    let kernel = |name: &str| {
        let lane = trace
            .lanes
            .iter()
            .position(|l| {
                matches!(l.kind, LaneKind::Stream { device: d, stream: 0, thread } if d == device && thread != 0)
                    && l.name == format!("stream 0 · {name}")
            })
            .unwrap_or_else(|| panic!("a lane for {name}'s inline work: {:#?}", trace.lanes));
        let k = trace
            .spans
            .iter()
            .find(|s| s.lane as usize == lane && s.name == "spin")
            .expect("the kernel on its lane");
        let launch = trace
            .spans
            .iter()
            .find(|s| {
                s.op == k.op && matches!(trace.lanes[s.lane as usize].kind, LaneKind::Host { .. })
            })
            .expect("its launch on the host");
        assert!(
            launch.start_ns <= k.start_ns + bound && k.end_ns() <= launch.end_ns() + bound,
            "{name}: kernel {}..{} outside its launch {}..{} (bound {bound} ns)",
            k.start_ns,
            k.end_ns(),
            launch.start_ns,
            launch.end_ns()
        );
        (k.start_ns, k.end_ns())
    };
    let (long, short) = (kernel("long"), kernel("short"));
    assert!(
        short.0 < long.1 && long.0 < short.1,
        "the two kernels overlap in time: {long:?} {short:?}"
    );
}

/// A device range covers the work enqueued on its stream while it is
/// open, whoever enqueued it: an annotation on the stream's lane around
/// the kernels' device spans, nested ranges inside it. On every backend
/// present.
#[test]
fn device_ranges_enclose_the_stream_work_between_them() {
    use keel_device::profiler::{LaneKind, Span};
    use keel_device::testing::conformance;
    use keel_device::{Buffer, kernels};

    let _s = serial();
    for (label, d) in conformance::builtin_devices() {
        let s = keel_device::get_stream_from_pool(d, false).expect("stream");
        let n = 1024u32;
        let out = Buffer::new(d, 4 * n as usize).expect("out");
        let spin = || {
            s.launch(
                &kernels::SPIN,
                kernels::SPIN.grid_for(u64::from(n)),
                &[&out],
                &[n.to_le_bytes(), 200u32.to_le_bytes()].concat(),
            )
            .expect("spin");
        };
        spin(); // compiled outside the session
        s.synchronize().expect("sync");
        // No session: nothing recorded, nothing enqueued.
        drop(keel_device::profiler::device_range(&s, "idle"));

        let session = keel_device::profiler::start().expect("start");
        {
            let _outer = keel_device::profiler::device_range(&s, "outer");
            spin();
            {
                let _inner = keel_device::profiler::device_range(&s, "inner");
                spin();
            }
        }
        s.synchronize().expect("sync");
        let trace = session.stop();
        trace.check().expect("well formed");
        let name = d.to_string();
        let on_stream = |sp: &Span| {
            matches!(trace.lanes[sp.lane as usize].kind,
                LaneKind::Stream { device, stream, .. }
                    if trace.devices[device as usize].device == name && stream == s.id())
        };
        let find = |n: &str| -> Vec<&Span> {
            trace
                .spans
                .iter()
                .filter(|sp| sp.name == n && on_stream(sp))
                .collect()
        };
        let (outer, inner, kernels) = (find("outer"), find("inner"), find("spin"));
        assert!(trace.spans.iter().all(|sp| sp.name != "idle"), "{label}");
        assert_eq!(
            (outer.len(), inner.len(), kernels.len()),
            (1, 1, 2),
            "{label}: {:?}",
            trace.spans
        );
        let (outer, inner) = (outer[0], inner[0]);
        assert_eq!(outer.kind, SpanKind::Annotation);
        let end = |sp: &Span| sp.start_ns + sp.dur_ns;
        assert!(
            outer.start_ns <= kernels[0].start_ns && end(kernels[1]) <= end(outer),
            "{label}: {outer:?} {kernels:?}"
        );
        assert!(
            inner.start_ns <= kernels[1].start_ns && end(kernels[1]) <= end(inner),
            "{label}: {inner:?} {kernels:?}"
        );
        assert!(
            outer.start_ns <= inner.start_ns && end(inner) <= end(outer),
            "{label}"
        );
        assert_eq!(trace.dropped, 0, "{label}");
    }
}
