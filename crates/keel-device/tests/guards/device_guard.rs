//! Port of c10's `DeviceGuard_test.cpp`, plus the registry and the
//! `torch.cuda`-style free functions, with the fake backend registered in
//! the CUDA and Vulkan slots (standing in for c10's CUDA and HIP fakes).

use keel_device::backend::registry;
use keel_device::testing::FakeGuardImpl;
use keel_device::{
    Device, DeviceGuard, DeviceType, Error, MultiStreamGuard, OptionalDeviceGuard, Stream,
    StreamGuard,
};

const A: DeviceType = DeviceType::Cuda;
const B: DeviceType = DeviceType::Vulkan;

fn setup() {
    FakeGuardImpl::register(A).expect("fake in the cuda slot");
    FakeGuardImpl::register(B).expect("fake in the vulkan slot");
    for ty in [A, B] {
        FakeGuardImpl::global(ty).set_device_index(0);
        FakeGuardImpl::global(ty).reset_streams();
    }
}

fn dev(ty: DeviceType, index: i16) -> Device {
    Device::new(ty, index).expect("valid device")
}

fn index(ty: DeviceType) -> i16 {
    FakeGuardImpl::global(ty).device_index()
}

#[test]
fn registry_guard_sets_and_restores() {
    setup();
    {
        let g = DeviceGuard::new(dev(A, 1)).expect("guard");
        assert_eq!(index(A), 1);
        assert_eq!(g.original_device(), dev(A, 0));
        assert_eq!(g.current_device(), dev(A, 1));
        FakeGuardImpl::global(A).set_device_index(6);
    }
    assert_eq!(index(A), 0, "restored even after a change behind its back");
}

#[test]
fn reset_device_different_device_type() {
    setup();
    let mut g = DeviceGuard::new(dev(A, 1)).expect("guard");
    g.reset_device(dev(B, 2)).expect("reset");
    assert_eq!(index(A), 0, "the old type's original is restored first");
    assert_eq!(index(B), 2);
    assert_eq!(g.current_device(), dev(B, 2));
    assert_eq!(g.original_device(), dev(B, 0));
    drop(g);
    assert_eq!(index(B), 0);
}

#[test]
fn optional_reset_device_different_device_type() {
    setup();
    let mut g = OptionalDeviceGuard::new();
    g.reset_device(dev(A, 1)).expect("reset");
    g.reset_device(dev(B, 2)).expect("reset");
    assert_eq!(index(A), 0);
    assert_eq!(index(B), 2);
    assert_eq!(g.current_device(), Some(dev(B, 2)));
    assert_eq!(g.original_device(), Some(dev(B, 0)));
}

#[test]
fn reset_device_to_an_unregistered_type_keeps_the_guard_sound() {
    setup();
    let mut g = DeviceGuard::new(dev(A, 3)).expect("guard");
    let e = g
        .reset_device(dev(DeviceType::PrivateUse1, 0))
        .expect_err("no privateuse1 backend in this process");
    assert!(matches!(e, Error::NotBuilt { .. }), "{e}");
    assert_eq!(index(A), 3, "a refused switch changes nothing");
    drop(g);
    assert_eq!(index(A), 0);
}

#[test]
fn stream_guard_across_device_types() {
    setup();
    {
        let mut g = StreamGuard::new(Stream::new(dev(A, 1), 5)).expect("guard");
        assert_eq!(FakeGuardImpl::global(A).current_stream_id(1), 5);
        g.reset_stream(Stream::new(dev(B, 2), 7)).expect("reset");
        assert_eq!(FakeGuardImpl::global(A).current_stream_id(1), 0);
        assert_eq!(index(A), 0);
        assert_eq!(index(B), 2);
        assert_eq!(FakeGuardImpl::global(B).current_stream_id(2), 7);
    }
    assert_eq!(index(B), 0);
    assert_eq!(FakeGuardImpl::global(B).current_stream_id(2), 0);
}

#[test]
fn multi_stream_guard_through_registry() {
    setup();
    {
        let _g = MultiStreamGuard::new(&[Stream::new(dev(A, 0), 3), Stream::new(dev(A, 2), 9)])
            .expect("guard");
        assert_eq!(
            keel_device::current_stream(dev(A, 0)).expect("stream").id(),
            3
        );
        assert_eq!(
            keel_device::current_stream(dev(A, 2)).expect("stream").id(),
            9
        );
        assert_eq!(index(A), 0);
    }
    assert_eq!(
        keel_device::current_stream(dev(A, 2)).expect("stream").id(),
        0
    );
}

#[test]
fn missing_backends_say_why() {
    setup();
    let e = DeviceGuard::new(dev(DeviceType::PrivateUse1, 0)).expect_err("nothing registered");
    assert_eq!(
        e.to_string(),
        "keel is not built with support for privateuseone devices (no backend is registered for it: call keel::backend::register(DeviceType::PrivateUse1, ...) first)"
    );
    // Every build without the wgpu feature must say how to get it.
    if let Err(e @ Error::NotBuilt { .. }) = keel_device::current_device(DeviceType::Wgpu) {
        assert_eq!(
            e.to_string(),
            "keel is not built with support for wgpu devices (build keel with the cargo feature `wgpu`)"
        );
    }
    assert_eq!(
        keel_device::device_count(DeviceType::PrivateUse1),
        0,
        "never fails"
    );
}

#[test]
fn registry_slots_are_filled_once_and_checked() {
    setup();
    let e = registry::register(A, FakeGuardImpl::global(B), None).expect_err("wrong type");
    assert_eq!(
        e.to_string(),
        "register: the guard implementation serves vulkan devices, but was given for the cuda slot"
    );
    let e = registry::register(A, FakeGuardImpl::global(A), None).expect_err("filled");
    assert!(e.to_string().contains("already registered for cuda"), "{e}");
    assert!(
        FakeGuardImpl::register(A).is_ok(),
        "same fake again is fine"
    );
    // The built-in CPU backend fills its slot on first use; after that the
    // slot is taken.
    assert_eq!(keel_device::device_count(DeviceType::Cpu), 1);
    let e = FakeGuardImpl::register(DeviceType::Cpu).expect_err("CPU is in use");
    assert!(e.to_string().contains("already registered for cpu"), "{e}");
    let Err(e) = registry::runtime(A) else {
        panic!("the fake registers no runtime");
    };
    assert!(e.to_string().contains("doesn't support buffers"), "{e}");
}

#[test]
fn free_functions_follow_torch_cuda() {
    setup();
    assert_eq!(keel_device::device_count(A), 8);
    assert_eq!(keel_device::current_device(A), Ok(dev(A, 0)));
    keel_device::set_device(dev(A, 3)).expect("set");
    assert_eq!(keel_device::current_device(A), Ok(dev(A, 3)));
    assert_eq!(
        keel_device::current_device(B),
        Ok(dev(B, 0)),
        "types are independent"
    );
    let e = keel_device::set_device(dev(A, 8)).expect_err("out of range");
    assert_eq!(
        e.to_string(),
        "Invalid device cuda:8: expected an index in 0..8 (8 cuda devices available), found 8"
    );
    keel_device::set_device(Device::current(A)).expect("-1 is a no-op");
    assert_eq!(keel_device::current_device(A), Ok(dev(A, 3)));

    // Setting a stream never changes the current device.
    keel_device::set_current_stream(Stream::new(dev(A, 5), 33)).expect("set stream");
    assert_eq!(keel_device::current_device(A), Ok(dev(A, 3)));
    assert_eq!(
        keel_device::current_stream(dev(A, 5)).expect("stream").id(),
        33
    );
    // Index -1 resolves to the current device.
    assert_eq!(
        keel_device::current_stream(Device::current(A))
            .expect("stream")
            .device(),
        dev(A, 3)
    );
    assert_eq!(
        keel_device::default_stream(dev(A, 5)),
        Ok(Stream::default_for(dev(A, 5)))
    );
    keel_device::synchronize(dev(A, 5)).expect("sync");
    keel_device::set_device(dev(A, 0)).expect("set");
}

#[test]
fn stream_pool_round_robin() {
    setup();
    let d = dev(A, 7);
    let first: Vec<Stream> = (0..32)
        .map(|_| keel_device::get_stream_from_pool(d, false).expect("pool"))
        .collect();
    let distinct: std::collections::HashSet<_> = first.iter().copied().collect();
    assert_eq!(distinct.len(), 32, "32 distinct streams per level");
    assert_eq!(
        keel_device::get_stream_from_pool(d, false).expect("pool"),
        first[0],
        "33rd is the 1st"
    );
    let high = keel_device::get_stream_from_pool(d, true).expect("pool");
    assert!(!distinct.contains(&high), "high priority is another pool");
    assert_eq!(
        high.kind(),
        keel_device::core::StreamKind::Pool { level: 1, index: 0 }
    );
    let same_level =
        keel_device::get_stream_with_priority(d, -5).expect("clamped to the top level");
    assert_eq!(
        same_level.kind(),
        keel_device::core::StreamKind::Pool { level: 1, index: 1 }
    );
    let e = keel_device::get_stream_with_priority(d, 1).expect_err("positive priority");
    assert!(e.to_string().contains("found 1"), "{e}");
}
