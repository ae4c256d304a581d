//! What the profiler records of a backend's stream operations.

use super::*;

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
    let bound = super::super::calibration_bound(&trace, d);
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
