//! What only the CPU backend does, beyond the conformance suite
//! (`tests/conformance_cpu.rs`): one device, an inline default stream, two
//! priority levels, its own stream ids and out-of-memory errors.

use keel_device::{Buffer, Device, DeviceType, Error, Stream};

fn cpu() -> Device {
    Device::new(DeviceType::Cpu, 0).expect("cpu:0")
}

#[test]
fn one_device_with_properties() {
    assert_eq!(keel_device::device_count(DeviceType::Cpu), 1);
    assert!(keel_device::is_available(DeviceType::Cpu));
    assert_eq!(keel_device::devices(DeviceType::Cpu), vec![cpu()]);
    assert_eq!(keel_device::current_device(DeviceType::Cpu), Ok(cpu()));
    keel_device::set_device(cpu()).expect("cpu:0");
    keel_device::set_device(Device::cpu()).expect("cpu");
    let p = keel_device::properties(Device::cpu()).expect("properties");
    assert_eq!(p.device, cpu());
    assert!(!p.name.is_empty());
    assert!(p.compute_units.is_some_and(|n| n >= 1));
    assert!(
        p.total_memory.is_some_and(|m| m > 0),
        "Linux reports MemTotal"
    );
    assert_eq!(p.kind, keel_device::DeviceKind::Cpu);
    assert!(p.timestamps.is_some());
}

#[test]
fn default_stream_runs_inline() {
    let s = keel_device::default_stream(Device::cpu()).expect("default");
    assert_eq!(s, Stream::default_for(cpu()));
    let b = Buffer::new(cpu(), 8).expect("alloc");
    b.write(&s, 0, &[1u32, 2]).expect("write");
    assert_eq!(s.query(), Ok(true), "inline work is done on return");
    assert_eq!(b.read_as::<u32>(&s).expect("read"), [1, 2]);
}

#[test]
fn two_priority_levels() {
    let high = keel_device::get_stream_from_pool(cpu(), true).expect("pool");
    let normal = keel_device::get_stream_from_pool(cpu(), false).expect("pool");
    assert!(matches!(
        high.kind(),
        keel_device::core::StreamKind::Pool { level: 1, .. }
    ));
    assert!(matches!(
        normal.kind(),
        keel_device::core::StreamKind::Pool { level: 0, .. }
    ));
}

#[test]
fn cpu_specific_errors() {
    let e = Buffer::new(cpu(), usize::MAX).expect_err("too big");
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().starts_with("out of memory on cpu:0"), "{e}");
    let bogus = Stream::new(cpu(), 2);
    let e = bogus.query().expect_err("even ids are not CPU streams");
    assert!(e.to_string().contains("unknown stream id 2"), "{e}");
    let e = keel_device::set_current_stream(Stream::new(cpu(), 1 << 20 | 1)).expect_err("bad id");
    assert!(e.to_string().contains("unknown stream id"), "{e}");
}

/// Kernels of two threads on small buffers of the inline default stream
/// run at the same time. Each kernel waits (up to 10 s) until both have
/// started. A host kernel holds the allocations it binds for its whole
/// run, so the CPU gives every buffer an allocation of its own
/// (`exclusive_allocations`); were the two buffers blocks of one shared
/// segment, the second kernel could not start while the first waited.
#[test]
fn kernels_of_two_threads_on_small_buffers_run_at_once() {
    use keel_device::kernel::{CpuInvocation, Kernel};
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    static STARTED: (Mutex<u32>, Condvar) = (Mutex::new(0), Condvar::new());
    fn rendezvous(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        let (m, cv) = &STARTED;
        let mut n = m.lock().map_err(|e| e.to_string())?;
        *n += 1;
        cv.notify_all();
        let (_n, wait) = cv
            .wait_timeout_while(n, Duration::from_secs(10), |n| *n < 2)
            .map_err(|e| e.to_string())?;
        if wait.timed_out() {
            return Err(
                "expected the other thread's kernel to start meanwhile, found it waiting".into(),
            );
        }
        inv.buffers[0].fill(7);
        Ok(())
    }
    const RENDEZVOUS: Kernel = Kernel {
        name: "rendezvous",
        workgroup_size: [1, 1, 1],
        bindings: 1,
        wgsl: None,
        ptx: None,
        cpu: Some(rendezvous),
        strict_float: false,
    };
    assert!(
        keel_device::properties(cpu())
            .expect("properties")
            .exclusive_allocations
    );
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| -> keel_device::Result<Vec<u8>> {
                let s = keel_device::default_stream(cpu())?;
                let b = Buffer::new(cpu(), 64)?;
                s.launch(&RENDEZVOUS, [1, 1, 1], &[&b], &[])?;
                b.read(&s)
            })
        })
        .collect();
    for t in threads {
        let bytes = t.join().expect("thread").expect("kernel");
        assert_eq!(bytes, [7u8; 64]);
    }
}
