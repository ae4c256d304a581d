//! Scenarios a backend's own test binary runs in a child process, because
//! they hold a whole device resource for a while (every timestamp slot)
//! and would disturb other tests of the same process.

use crate::kernels::VECTOR_ADD;
use crate::profiler::{LaneKind, SpanKind};
use crate::testing::VectorAdds;
use crate::{Device, Event};

/// `events` live timed events on a pool stream of `d` (more than the
/// device's timestamp slots hold), with six launches spread between them:
/// the events keep their times in record order, one recorded again is
/// the latest and leaves no stale value behind, and a profiling session
/// meanwhile times every launch on the device and drops nothing.
pub fn timed_events_past_the_slots(d: Device, events: usize) {
    let s = crate::get_stream_from_pool(d, false).expect("stream");
    let adds = VectorAdds::on(s);
    let add = || adds.launch();
    add();
    let every = events.div_ceil(6).max(1);
    let mut held = Vec::with_capacity(events);
    for i in 0..events {
        if i % every == 0 {
            add();
        }
        let mut e = Event::timed(d.device_type());
        e.record(&s).expect("a timed event past the slots' count");
        held.push(e);
    }
    s.synchronize().expect("sync");
    let ms = |a: &Event, b: &Event| a.elapsed_time(b).expect("elapsed time");
    let last = events - 1;
    assert!(
        ms(&held[0], &held[last]) > 0.0,
        "launches lie between the first and the last"
    );
    // In record order throughout, across the events whose values moved.
    let step = (events / 33).max(1);
    let mut probe: Vec<usize> = (0..events).step_by(step).collect();
    probe.push(last);
    for w in probe.windows(2) {
        assert!(ms(&held[w[0]], &held[w[1]]) >= 0.0, "events {w:?} in order");
    }
    // Recorded again: its time is after every other's.
    add();
    held[0].record(&s).expect("record again");
    s.synchronize().expect("sync");
    assert!(
        ms(&held[last], &held[0]) > 0.0,
        "the re-recorded event is the latest"
    );
    assert!(ms(&held[1], &held[2]) >= 0.0, "its old value did not leak");

    // A session with the events still live: each launch is timed.
    let session = crate::profiler::start().expect("session");
    for _ in 0..3 {
        add();
    }
    s.synchronize().expect("sync");
    let trace = session.stop();
    drop(held);
    let kernels = |on_device: bool| {
        trace
            .spans
            .iter()
            .filter(|sp| {
                sp.kind == SpanKind::Kernel
                    && sp.name.as_str() == VECTOR_ADD.name
                    && matches!(trace.lanes[sp.lane as usize].kind, LaneKind::Stream { .. })
                        == on_device
            })
            .count()
    };
    assert_eq!(kernels(false), 3, "three launches on the host");
    assert_eq!(kernels(true), 3, "each timed on the device");
    assert_eq!(trace.dropped, 0, "nothing dropped");
}
