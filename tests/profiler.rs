//! The profiler records every stream operation, on every backend present:
//! host spans, device spans placed by calibration, launch and event-wait
//! flows, memory counters, annotations, bounded buffers.

mod common;

use std::sync::Mutex;

use keel::profiler::{FlowKind, LaneKind, SpanKind, Trace};
use keel::{Buffer, Device, DeviceType, Event, kernels};

/// Sessions are process-wide: tests here take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A two-stream workload with a cross-stream event wait on `d`.
fn workload(d: Device) -> (u64, u64) {
    let ty = d.device_type();
    let (s1, s2) = (
        keel::get_stream_from_pool(d, false).expect("s1"),
        keel::get_stream_from_pool(d, false).expect("s2"),
    );
    let n = 4096u32;
    let out = Buffer::new(d, 4 * n as usize).expect("out");
    let y = Buffer::from_slice(&s2, &vec![1.0f32; n as usize]).expect("y");
    let params = [n.to_le_bytes(), 2000u32.to_le_bytes()].concat();
    s1.launch(
        &kernels::SPIN,
        kernels::SPIN.grid_for(u64::from(n)),
        &[&out],
        &params,
    )
    .expect("spin");
    let mut produced = Event::new(ty);
    produced.record(&s1).expect("record");
    s2.wait(&produced).expect("wait");
    let saxpy = [n.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    s2.launch(
        &kernels::SAXPY,
        kernels::SAXPY.grid_for(u64::from(n)),
        &[&out, &y],
        &saxpy,
    )
    .expect("saxpy");
    let got = y.read_as::<f32>(&s2).expect("read");
    assert!((got[7] - (1.0 + 2.0 * kernels::spin_reference(7, 2000))).abs() < 1e-3);
    (s1.id() as u64, s2.id() as u64)
}

fn check_trace(trace: &Trace, d: Device) {
    let dev = trace
        .devices
        .iter()
        .position(|x| x.device == d.to_string())
        .expect("the device is in the trace") as u32;
    let stream_lanes: Vec<u32> = trace
        .lanes
        .iter()
        .enumerate()
        .filter(|(_, l)| matches!(l.kind, LaneKind::Stream { device, .. } if device == dev))
        .map(|(i, _)| i as u32)
        .collect();
    assert!(
        stream_lanes.len() >= 2,
        "two stream lanes on {d}: {:?}",
        trace.lanes
    );
    let on_device = |kind: SpanKind, name: &str| {
        trace
            .spans
            .iter()
            .any(|s| stream_lanes.contains(&s.lane) && s.kind == kind && s.name == name)
    };
    assert!(
        on_device(SpanKind::Kernel, "spin"),
        "device span of the kernel"
    );
    assert!(on_device(SpanKind::Kernel, "saxpy"));
    assert!(on_device(SpanKind::Copy, "copy device->host"));
    assert!(on_device(SpanKind::Wait, "stream wait"));
    assert!(
        trace
            .spans
            .iter()
            .any(|s| s.kind == SpanKind::Alloc && !stream_lanes.contains(&s.lane)),
        "host span of an allocation"
    );
    let launch = trace
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::Launch)
        .count();
    assert!(launch >= 4, "launch flows, found {launch}");
    let waits: Vec<_> = trace
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::EventWait)
        .collect();
    assert!(!waits.is_empty(), "an event record -> wait flow");
    assert!(
        waits
            .iter()
            .any(|f| f.from.lane != f.to.lane && stream_lanes.contains(&f.to.lane)),
        "the wait flow crosses streams"
    );
    assert!(trace.calibrations.iter().any(|c| c.device == dev));
    assert!(
        trace
            .counters
            .iter()
            .any(|c| c.device == dev && !c.points.is_empty())
    );
    assert_eq!(trace.dropped, 0);
}

fn devices() -> Vec<Device> {
    let mut v = vec![Device::new(DeviceType::Cpu, 0).expect("cpu")];
    for ty in [DeviceType::Vulkan, DeviceType::Wgpu] {
        if keel::is_available(ty) {
            v.extend(keel::devices(ty));
        } else {
            let required = std::env::var("KEEL_REQUIRE_BACKENDS").unwrap_or_default();
            assert!(
                !required.split(',').any(|r| r.trim() == ty.name(true)),
                "KEEL_REQUIRE_BACKENDS requires {ty}: {:?}",
                keel::availability(ty)
            );
            eprintln!("skipping {ty}: {:?}", keel::availability(ty));
        }
    }
    v
}

#[test]
fn records_every_backend_with_flows_and_counters() {
    let _s = serial();
    let session = keel::profiler::start().expect("start");
    for &d in &devices() {
        workload(d);
    }
    let trace = session.stop();
    for &d in &devices() {
        check_trace(&trace, d);
    }
    // Every slice nests within its lane and every flow binds at both ends.
    if let Err(problems) = trace.check() {
        panic!("recorded trace is not well formed: {problems:#?}");
    }
    // Both file formats carry the recorded trace exactly.
    let json = keel::profiler::json::to_json_string(&trace).expect("json");
    assert_eq!(
        keel::profiler::json::read_json(&json).expect("import"),
        trace
    );
    let bytes = keel::profiler::native::to_native_bytes(&trace).expect("native");
    assert_eq!(
        keel::profiler::native::read_native(&bytes).expect("read"),
        trace
    );
}

#[test]
fn device_spans_lie_inside_the_host_interval_after_calibration() {
    let _s = serial();
    for d in devices() {
        let session = keel::profiler::start().expect("start");
        let s = keel::get_stream_from_pool(d, false).expect("stream");
        let n = 4096u32;
        let out = Buffer::new(d, 4 * n as usize).expect("out");
        s.synchronize().expect("idle");
        let before = session.now_ns();
        let params = [n.to_le_bytes(), 20_000u32.to_le_bytes()].concat();
        s.launch(
            &kernels::SPIN,
            kernels::SPIN.grid_for(u64::from(n)),
            &[&out],
            &params,
        )
        .expect("spin");
        s.synchronize().expect("sync");
        let after = session.now_ns();
        let trace = session.stop();
        let dev = trace
            .devices
            .iter()
            .position(|x| x.device == d.to_string())
            .expect("device") as u32;
        let bound = trace
            .calibrations
            .iter()
            .find(|c| c.device == dev)
            .expect("calibrated")
            .error_bound_ns;
        let span = trace
            .spans
            .iter()
            .find(|s| {
                s.name == "spin"
                    && matches!(trace.lanes[s.lane as usize].kind, LaneKind::Stream { .. })
            })
            .expect("device span of the kernel");
        assert!(
            span.start_ns + bound >= before && span.end_ns() <= after + bound,
            "{d}: device span {}..{} outside host interval {before}..{after} (+/- {bound} ns)",
            span.start_ns,
            span.end_ns()
        );
        assert!(span.dur_ns > 0, "{d}: the kernel took time");
    }
}

#[test]
fn annotations_markers_and_one_session_at_a_time() {
    let _s = serial();
    assert!(!keel::profiler::enabled());
    let session = keel::profiler::start().expect("start");
    let e = keel::profiler::start().expect_err("second session");
    assert!(e.to_string().contains("already recording"), "{e}");
    {
        let _outer = keel::profiler::range("outer");
        let _inner = keel::profiler::range(format!("inner {}", 1));
        keel::profiler::mark("checkpoint");
    }
    let trace = session.stop();
    assert!(!keel::profiler::enabled());
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
        let _r = keel::profiler::range("unrecorded");
    }
    let trace = keel::profiler::start().expect("start").stop();
    assert!(trace.spans.iter().all(|s| s.name != "unrecorded"));
}

#[test]
fn full_buffers_count_drops() {
    let _s = serial();
    let session = keel::profiler::start().expect("start");
    let extra = 25u64;
    for _ in 0..(keel::profiler::record::MAX_RECORDS_PER_THREAD as u64 + extra) {
        keel::profiler::mark("m");
    }
    let trace = session.stop();
    assert_eq!(trace.dropped, extra);
    assert_eq!(
        trace.instants.len(),
        keel::profiler::record::MAX_RECORDS_PER_THREAD
    );
}
