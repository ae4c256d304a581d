//! `KEEL_LAUNCH_BLOCKING=1` and `set_launch_blocking` make every stream
//! operation synchronous. The setting is process-wide, so this file is its
//! own test binary, and the environment variable is tested in a child
//! process (the variable is read once, on first use).

use keel_device::testing::{GATED_FILL, SLEEP, child};
use keel_device::{Buffer, Device, DeviceType, Event};

const PROBE: &str = "probe_env_launch_blocking";

/// Runs in the child: with the variable set, an enqueued operation has
/// finished by the time the call returns.
#[test]
#[ignore = "run by `environment_variable_turns_launch_blocking_on` in a child process"]
fn probe_env_launch_blocking() {
    assert_eq!(
        std::env::var("KEEL_LAUNCH_BLOCKING").as_deref(),
        Ok("1"),
        "the parent sets the variable"
    );
    assert!(keel_device::launch_blocking());
    let s = keel_device::get_stream_from_pool(Device::cpu(), false).expect("pool");
    s.launch(&SLEEP, [1, 1, 1], &[], &30u32.to_le_bytes())
        .expect("launch");
    assert_eq!(
        s.query(),
        Ok(true),
        "the launch returned after the kernel ran"
    );
}

#[test]
fn environment_variable_turns_launch_blocking_on() {
    child::probe(module_path!(), PROBE, &[("KEEL_LAUNCH_BLOCKING", "1")]);
}

#[test]
fn set_launch_blocking_makes_errors_surface_at_the_call() {
    let cpu = Device::new(DeviceType::Cpu, 0).expect("cpu:0");
    let s = keel_device::get_stream_from_pool(cpu, false).expect("pool");
    keel_device::set_launch_blocking(true);
    assert!(keel_device::launch_blocking());
    // A failing kernel reports its error from `launch` itself.
    let buf = Buffer::new(cpu, 4).expect("alloc");
    let no_gate = [u32::MAX.to_le_bytes(), 1.0f32.to_le_bytes()].concat();
    let err = s
        .launch(&GATED_FILL, [1, 1, 1], &[&buf], &no_gate)
        .expect_err("no such gate");
    assert_eq!(
        err.to_string(),
        "kernel 'gated_fill': expected the id of a Gate, found 4294967295"
    );
    // Event records and waits are synchronous too.
    s.launch(&SLEEP, [1, 1, 1], &[], &20u32.to_le_bytes())
        .expect("launch");
    assert_eq!(s.query(), Ok(true));
    let mut e = Event::new(DeviceType::Cpu);
    e.record(&s).expect("record");
    assert_eq!(e.query(), Ok(true));
    keel_device::set_launch_blocking(false);
    assert!(!keel_device::launch_blocking());
    s.launch(&SLEEP, [1, 1, 1], &[], &50u32.to_le_bytes())
        .expect("launch");
    assert_eq!(s.query(), Ok(false), "asynchronous again");
    s.synchronize().expect("sync");
}
