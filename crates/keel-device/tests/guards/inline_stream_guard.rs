//! Port of c10's `InlineStreamGuard_test.cpp` (with `InlineMultiStreamGuard`)
//! onto the fake backend.

use keel_device::testing::FakeGuardImpl;
use keel_device::{
    Device, DeviceType, InlineMultiStreamGuard, InlineOptionalStreamGuard, InlineStreamGuard,
    Stream, StreamId,
};

type TestGuard = InlineStreamGuard<FakeGuardImpl>;
type OptionalTestGuard = InlineOptionalStreamGuard<FakeGuardImpl>;
type MultiTestGuard = InlineMultiStreamGuard<FakeGuardImpl>;

const TY: DeviceType = DeviceType::Cuda;

fn fake() -> FakeGuardImpl {
    FakeGuardImpl::new(TY)
}

fn dev(index: i16) -> Device {
    Device::new(TY, index).expect("valid device")
}

fn stream(index: i16, id: StreamId) -> Stream {
    Stream::new(dev(index), id)
}

fn sid(index: i16) -> StreamId {
    fake().current_stream_id(index)
}

fn reset() {
    fake().set_device_index(0);
    fake().reset_streams();
}

fn assert_all_restored() {
    assert_eq!(fake().device_index(), 0);
    for i in 0..8 {
        assert_eq!(sid(i), 0, "stream of device {i}");
    }
}

#[test]
fn constructor() {
    reset();
    {
        let g = TestGuard::new(stream(1, 2)).expect("guard");
        assert_eq!(fake().device_index(), 1);
        assert_eq!(sid(1), 2);
        assert_eq!(sid(0), 0);
        assert_eq!(g.original_stream(), stream(0, 0));
        assert_eq!(g.current_stream(), stream(1, 2));
        assert_eq!(g.original_device(), dev(0));
        assert_eq!(g.current_device(), dev(1));
    }
    assert_all_restored();
}

#[test]
fn reset_stream_same_same_device() {
    reset();
    {
        let mut g = TestGuard::new(stream(0, 2)).expect("guard");
        g.reset_stream(stream(0, 3)).expect("reset");
        assert_eq!(fake().device_index(), 0);
        assert_eq!(sid(0), 3);
        assert_eq!(g.original_stream(), stream(0, 0));
        assert_eq!(g.current_stream(), stream(0, 3));
        assert_eq!(g.original_device(), dev(0));
        assert_eq!(g.current_device(), dev(0));
    }
    assert_all_restored();
}

#[test]
fn reset_stream_different_same_device() {
    reset();
    {
        let mut g = TestGuard::new(stream(1, 2)).expect("guard");
        g.reset_stream(stream(1, 3)).expect("reset");
        assert_eq!(fake().device_index(), 1);
        assert_eq!(sid(1), 3);
        assert_eq!(sid(0), 0);
        assert_eq!(g.original_stream(), stream(0, 0));
        assert_eq!(g.current_stream(), stream(1, 3));
        assert_eq!(g.original_device(), dev(0));
        assert_eq!(g.current_device(), dev(1));
    }
    assert_all_restored();
}

#[test]
fn reset_stream_different_device() {
    reset();
    {
        let mut g = TestGuard::new(stream(1, 2)).expect("guard");
        g.reset_stream(stream(2, 3)).expect("reset");
        assert_eq!(fake().device_index(), 2);
        assert_eq!(sid(2), 3);
        assert_eq!(sid(1), 0, "the first device's stream is restored");
        assert_eq!(sid(0), 0);
        assert_eq!(g.original_stream(), stream(0, 0));
        assert_eq!(g.current_stream(), stream(2, 3));
        assert_eq!(g.original_device(), dev(0));
        assert_eq!(g.current_device(), dev(2));
    }
    assert_all_restored();
}

#[test]
fn optional_constructor() {
    reset();
    for make in [
        |s| OptionalTestGuard::with_stream(Some(s)).expect("guard"),
        |s| {
            let mut g = OptionalTestGuard::new();
            g.reset_stream(s).expect("reset");
            g
        },
    ] {
        {
            let g = make(stream(1, 2));
            assert_eq!(fake().device_index(), 1);
            assert_eq!(sid(1), 2);
            assert_eq!(sid(0), 0);
            assert_eq!(g.original_stream(), Some(stream(0, 0)));
            assert_eq!(g.current_stream(), Some(stream(1, 2)));
        }
        assert_all_restored();
    }
    {
        let g = OptionalTestGuard::new();
        assert_eq!(g.original_stream(), None);
        assert_eq!(g.current_stream(), None);
        assert_all_restored();
    }
    assert_all_restored();
}

#[test]
fn optional_reset_stream_same_device() {
    reset();
    {
        let mut g = OptionalTestGuard::new();
        g.reset_stream(stream(1, 3)).expect("reset");
        assert_eq!(fake().device_index(), 1);
        assert_eq!(sid(1), 3);
        assert_eq!(sid(0), 0);
        assert_eq!(g.original_stream(), Some(stream(0, 0)));
        assert_eq!(g.current_stream(), Some(stream(1, 3)));
    }
    assert_all_restored();
}

#[test]
fn optional_reset_stream_different_device() {
    reset();
    {
        let mut g = OptionalTestGuard::new();
        g.reset_stream(stream(2, 3)).expect("reset");
        assert_eq!(fake().device_index(), 2);
        assert_eq!(sid(2), 3);
        assert_eq!(sid(1), 0);
        assert_eq!(sid(0), 0);
        assert_eq!(g.original_stream(), Some(stream(0, 0)));
        assert_eq!(g.current_stream(), Some(stream(2, 3)));
        g.reset_stream(stream(1, 5)).expect("reset again");
        assert_eq!(sid(2), 0, "device 2's stream restored before switching");
        assert_eq!(sid(1), 5);
        assert_eq!(fake().device_index(), 1);
        assert_eq!(g.original_stream(), Some(stream(0, 0)));
    }
    assert_all_restored();
}

#[test]
fn multi_constructor() {
    reset();
    {
        let g = MultiTestGuard::new(&[]).expect("empty");
        assert!(g.original_streams().is_empty());
        assert_all_restored();
    }
    assert_all_restored();
    {
        let _g = MultiTestGuard::new(&[stream(0, 2)]).expect("guard");
        assert_eq!(fake().device_index(), 0);
        assert_eq!(sid(0), 2);
        assert_eq!(sid(1), 0);
    }
    assert_all_restored();
    {
        let _g = MultiTestGuard::new(&[stream(1, 3)]).expect("guard");
        assert_eq!(
            fake().device_index(),
            0,
            "the current device does not change"
        );
        assert_eq!(sid(0), 0);
        assert_eq!(sid(1), 3);
    }
    assert_all_restored();
    {
        let _g = MultiTestGuard::new(&[stream(0, 2), stream(1, 3)]).expect("guard");
        assert_eq!(fake().device_index(), 0);
        assert_eq!(sid(0), 2);
        assert_eq!(sid(1), 3);
    }
    assert_all_restored();
}

#[test]
fn multi_same_device_twice_restores_the_original() {
    reset();
    {
        let _g = MultiTestGuard::new(&[stream(1, 3), stream(1, 5)]).expect("guard");
        assert_eq!(sid(1), 5, "the last stream for a device wins");
    }
    assert_all_restored();
}

#[test]
fn multi_mixed_device_types_fail() {
    reset();
    let other = Stream::new(Device::new(DeviceType::Vulkan, 1).expect("valid"), 3);
    let e = MultiTestGuard::new(&[stream(0, 2), other]).expect_err("mixed types");
    assert_eq!(
        e.to_string(),
        "Streams have a mix of device types: stream 0 is on cuda:0 while stream 1 is on device vulkan:1"
    );
    assert_all_restored();
}

#[test]
fn device_guards_do_not_change_streams() {
    reset();
    let _s = TestGuard::new(stream(1, 7)).expect("stream guard");
    {
        let _d =
            keel_device::InlineDeviceGuard::<FakeGuardImpl>::new(dev(3)).expect("device guard");
        assert_eq!(fake().device_index(), 3);
        assert_eq!(sid(1), 7);
        assert_eq!(sid(3), 0);
    }
    assert_eq!(fake().device_index(), 1);
}

#[test]
fn stream_guard_restores_during_panic_unwinding() {
    reset();
    let result = std::panic::catch_unwind(|| {
        let _g = TestGuard::new(stream(4, 9)).expect("guard");
        panic!("boom");
    });
    assert!(result.is_err());
    assert_all_restored();
}
