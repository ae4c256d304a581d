//! Event semantics (c10's `InlineEvent`) on the fake backend: the checks
//! and their order live in Keel's core, so they hold for every backend.

use keel_device::testing::FakeGuardImpl;
use keel_device::{Device, DeviceType, Event, EventFlag, Stream};

const A: DeviceType = DeviceType::Cuda;
const B: DeviceType = DeviceType::Vulkan;

fn setup() {
    FakeGuardImpl::register(A).expect("fake in the cuda slot");
    FakeGuardImpl::register(B).expect("fake in the vulkan slot");
}

fn stream(ty: DeviceType, index: i16) -> Stream {
    Stream::default_for(Device::new(ty, index).expect("valid"))
}

#[test]
fn unrecorded_events_are_complete_and_inert() {
    setup();
    let e = Event::new(A);
    assert_eq!(e.flag(), EventFlag::Default, "timing is off by default");
    assert_eq!(e.device_index(), -1);
    assert!(!e.was_marked_for_recording());
    assert_eq!(e.query(), Ok(true));
    assert_eq!(e.block(&stream(A, 0)), Ok(()));
    assert_eq!(e.synchronize(), Ok(()));
    // Blocking a stream of another type is fine while nothing was recorded.
    assert_eq!(e.block(&stream(B, 0)), Ok(()));
}

#[test]
fn record_checks_device_type_and_index() {
    setup();
    let mut e = Event::new(A);
    let err = e.record(&stream(B, 0)).expect_err("type mismatch");
    assert_eq!(
        err.to_string(),
        "Event device type CUDA does not match recording stream's device type VULKAN."
    );
    assert!(
        !e.was_marked_for_recording(),
        "a failed record records nothing"
    );
    e.record(&stream(A, 2)).expect("record");
    assert_eq!(e.device_index(), 2);
    assert!(e.was_marked_for_recording());
    let err = e.record(&stream(A, 3)).expect_err("index mismatch");
    assert_eq!(
        err.to_string(),
        "Event device index 2 does not match recording stream's device index 3."
    );
    let err = e.block(&stream(B, 0)).expect_err("block type mismatch");
    assert_eq!(
        err.to_string(),
        "Event device type CUDA does not match blocking stream's device type VULKAN."
    );
    stream(A, 1).wait(&e).expect("stream.wait is event.block");
}

#[test]
fn record_once_records_only_the_first_time() {
    setup();
    let mut e = Event::new(A);
    e.record_once(&stream(A, 4)).expect("record");
    e.record_once(&stream(A, 5))
        .expect("ignored: already recorded");
    assert_eq!(e.device_index(), 4);
}

#[test]
fn elapsed_time_checks_in_c10_order() {
    setup();
    let mut plain = Event::new(A);
    let mut timed = Event::timed(A);
    let mut other_type = Event::timed(B);

    // 1. Device type first, even before timing flags.
    let e = plain.elapsed_time(&other_type).expect_err("type");
    assert_eq!(
        e.to_string(),
        "Event device type CUDA does not match other's device type VULKAN."
    );
    // 2. Timing flags before recording state.
    let e = plain.elapsed_time(&timed).expect_err("flags");
    assert_eq!(
        e.to_string(),
        "Both events must be created with argument 'enable_timing=True'."
    );
    // 3. Both recorded.
    let mut timed2 = Event::with_flag(A, EventFlag::Timing);
    let e = timed.elapsed_time(&timed2).expect_err("unrecorded");
    assert_eq!(
        e.to_string(),
        "Both events must be recorded before calculating elapsed time."
    );
    timed.record(&stream(A, 0)).expect("record");
    let e = timed.elapsed_time(&timed2).expect_err("one unrecorded");
    assert_eq!(
        e.to_string(),
        "Both events must be recorded before calculating elapsed time."
    );
    // 4. The fake completes at once but has no clock: the backend says so.
    timed2.record(&stream(A, 0)).expect("record");
    let e = timed.elapsed_time(&timed2).expect_err("fake has no timing");
    assert_eq!(e.to_string(), "CUDA backend doesn't support elapsed_time.");
    plain.record(&stream(A, 0)).expect("record");
    other_type.record(&stream(B, 0)).expect("record");
}

#[test]
fn events_are_send() {
    setup();
    let mut e = Event::new(A);
    e.record(&stream(A, 0)).expect("record");
    let handle = std::thread::spawn(move || e.query());
    assert_eq!(handle.join().expect("thread"), Ok(true));
}
