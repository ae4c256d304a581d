//! Port of c10's `InlineDeviceGuard_test.cpp` onto the fake backend
//! (statically dispatched: `InlineDeviceGuard<FakeGuardImpl>`).

use keel_device::testing::FakeGuardImpl;
use keel_device::{Device, DeviceType, InlineDeviceGuard, InlineOptionalDeviceGuard};

type TestGuard = InlineDeviceGuard<FakeGuardImpl>;
type MaybeTestGuard = InlineOptionalDeviceGuard<FakeGuardImpl>;

const TY: DeviceType = DeviceType::Cuda;

fn fake() -> FakeGuardImpl {
    FakeGuardImpl::new(TY)
}

fn dev(index: i16) -> Device {
    Device::new(TY, index).expect("valid device")
}

#[test]
fn constructor() {
    for i in [-1, 0, 1] {
        let init_i = 0;
        fake().set_device_index(init_i);
        let expected = if i == -1 { init_i } else { i };
        let test_body = |g: &TestGuard| {
            assert_eq!(g.original_device(), dev(init_i));
            assert_eq!(g.current_device(), dev(expected));
            assert_eq!(fake().device_index(), expected);
            // An un-bracketed write behind the guard's back.
            fake().set_device_index(4);
        };
        {
            let g = TestGuard::new(dev(i)).expect("guard");
            test_body(&g);
        }
        assert_eq!(fake().device_index(), init_i, "restored for index {i}");
        {
            let g = TestGuard::with_impl(fake(), dev(i)).expect("guard");
            test_body(&g);
        }
        assert_eq!(fake().device_index(), init_i, "restored for index {i}");
    }
}

#[test]
fn constructor_error() {
    let e = TestGuard::with_impl(fake(), Device::new(DeviceType::Vulkan, 1).expect("valid"))
        .expect_err("type mismatch");
    assert_eq!(
        e.to_string(),
        "device guard for cuda devices was given vulkan:1"
    );
    let e = TestGuard::new(dev(8)).expect_err("fake has 8 devices");
    assert!(e.to_string().contains("expected an index in 0..8"), "{e}");
    assert_eq!(fake().device_index(), 0, "a failed guard changes nothing");
}

#[test]
fn set_device() {
    let init_i = 0;
    fake().set_device_index(init_i);
    let mut g = TestGuard::new(dev(1)).expect("guard");
    for _ in 0..2 {
        g.set_device(dev(2)).expect("set");
        assert_eq!(g.original_device(), dev(init_i));
        assert_eq!(g.current_device(), dev(2));
        assert_eq!(fake().device_index(), 2);
    }
    g.set_device(dev(-1)).expect("-1 is a no-op");
    assert_eq!(fake().device_index(), 2);
    assert!(
        g.set_device(Device::new(DeviceType::Vulkan, 0).expect("valid"))
            .is_err()
    );
    drop(g);
    assert_eq!(fake().device_index(), init_i);
}

#[test]
fn reset_device() {
    let init_i = 0;
    fake().set_device_index(init_i);
    let mut g = TestGuard::new(dev(1)).expect("guard");
    for _ in 0..2 {
        g.reset_device(dev(2)).expect("reset");
        assert_eq!(g.original_device(), dev(init_i));
        assert_eq!(g.current_device(), dev(2));
        assert_eq!(fake().device_index(), 2);
    }
    drop(g);
    assert_eq!(fake().device_index(), init_i);
}

#[test]
fn set_index() {
    let init_i = 0;
    fake().set_device_index(init_i);
    let mut g = TestGuard::new(dev(1)).expect("guard");
    for _ in 0..2 {
        g.set_index(2).expect("set_index");
        assert_eq!(g.original_device(), dev(init_i));
        assert_eq!(g.current_device(), dev(2));
        assert_eq!(fake().device_index(), 2);
    }
}

#[test]
fn optional_constructor() {
    for i in [-1, 0, 1] {
        let init_i = 0;
        fake().set_device_index(init_i);
        let expected = if i == -1 { init_i } else { i };
        {
            let g = MaybeTestGuard::with_device(Some(dev(i))).expect("guard");
            assert_eq!(g.original_device(), Some(dev(init_i)));
            assert_eq!(g.current_device(), Some(dev(expected)));
            assert_eq!(fake().device_index(), expected);
            fake().set_device_index(4);
        }
        assert_eq!(fake().device_index(), init_i);
    }
}

#[test]
fn optional_nullary_constructor() {
    let init_i = 0;
    fake().set_device_index(init_i);
    for g in [
        MaybeTestGuard::new(),
        MaybeTestGuard::with_device(None).expect("empty"),
    ] {
        assert_eq!(g.original_device(), None);
        assert_eq!(g.current_device(), None);
        assert_eq!(fake().device_index(), init_i);
    }
    // An empty guard restores nothing: a change made during its life stays.
    {
        let _g = MaybeTestGuard::new();
        fake().set_device_index(3);
    }
    assert_eq!(fake().device_index(), 3);
}

#[test]
fn optional_set_device() {
    let init_i = 0;
    fake().set_device_index(init_i);
    let mut g = MaybeTestGuard::new();
    for _ in 0..2 {
        g.set_device(dev(1)).expect("set");
        assert_eq!(g.original_device(), Some(dev(init_i)));
        assert_eq!(g.current_device(), Some(dev(1)));
        assert_eq!(fake().device_index(), 1);
    }
    g.reset();
    assert_eq!(fake().device_index(), init_i, "reset restores at once");
    assert_eq!(g.original_device(), None);
}

#[test]
fn guards_restore_during_panic_unwinding() {
    fake().set_device_index(0);
    let result = std::panic::catch_unwind(|| {
        let _g = TestGuard::new(dev(5)).expect("guard");
        assert_eq!(fake().device_index(), 5);
        panic!("boom inside a guarded scope");
    });
    assert!(result.is_err());
    assert_eq!(fake().device_index(), 0);
}
