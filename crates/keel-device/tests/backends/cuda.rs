//! CUDA-specific behaviour beyond the conformance suite
//! (`tests/conformance_cuda.rs`): the unavailable path (where libcuda is
//! missing, as on the machine this backend was written on), and GPU checks
//! (properties, the PTX parameter convention, event reuse, peer access)
//! that run only where a GPU is present and otherwise print why they skip.

use keel_device::testing::{conformance, pattern};
use keel_device::{Buffer, Device, DeviceGuard, DeviceType, Error, Event, Stream, kernels};

const TY: DeviceType = DeviceType::Cuda;
const NO_DRIVER: &str = "CUDA unavailable: the CUDA driver library (libcuda) was not found";

#[test]
fn cuda_device_strings_parse_without_a_driver() {
    let d: Device = "cuda:0".parse().expect("cuda:0 parses");
    assert_eq!((d.device_type(), d.index()), (TY, 0));
    assert_eq!(
        "cuda:1".parse::<Device>().expect("cuda:1").to_string(),
        "cuda:1"
    );
    assert!("cuda:01".parse::<Device>().is_err());
}

#[test]
fn missing_driver_is_a_clean_error() {
    let reason = match keel_device::availability(TY) {
        Ok(()) => {
            eprintln!("skipping: a CUDA driver is present, so the no-driver path cannot be tested");
            return;
        }
        Err(e) => e,
    };
    if reason.to_string() != NO_DRIVER {
        eprintln!("skipping: libcuda is present but CUDA cannot run: {reason}");
        assert_eq!(keel_device::device_count(TY), 0);
        return;
    }
    assert_eq!(keel_device::device_count(TY), 0);
    assert!(!keel_device::is_available(TY));
    assert_eq!(keel_device::devices(TY), Vec::<Device>::new());
    let d: Device = "cuda:0".parse().expect("cuda:0 parses");
    let msg = |e: Error| e.to_string();
    assert!(matches!(
        keel_device::availability(TY),
        Err(Error::Unavailable { ref backend, ref reason })
            if backend == "CUDA" && reason == "the CUDA driver library (libcuda) was not found"
    ));
    assert_eq!(msg(DeviceGuard::new(d).expect_err("guard")), NO_DRIVER);
    assert_eq!(msg(Buffer::new(d, 4).expect_err("alloc")), NO_DRIVER);
    assert_eq!(
        msg(keel_device::get_stream_from_pool(d, false).expect_err("pool")),
        NO_DRIVER
    );
    assert_eq!(
        msg(keel_device::get_stream_with_priority(d, -1).expect_err("pool")),
        NO_DRIVER
    );
    assert_eq!(
        msg(keel_device::current_device(TY).expect_err("current")),
        NO_DRIVER
    );
    assert_eq!(
        msg(keel_device::current_stream(d).expect_err("stream")),
        NO_DRIVER
    );
    assert_eq!(
        msg(keel_device::default_stream(d).expect_err("default")),
        NO_DRIVER
    );
    assert_eq!(msg(keel_device::set_device(d).expect_err("set")), NO_DRIVER);
    assert_eq!(
        msg(keel_device::properties(d).expect_err("properties")),
        NO_DRIVER
    );
    assert_eq!(
        msg(keel_device::synchronize(d).expect_err("synchronize")),
        NO_DRIVER
    );
    let s = Stream::default_for(d);
    let mut e = Event::new(TY);
    assert_eq!(msg(e.record(&s).expect_err("record")), NO_DRIVER);
    let mut timed = Event::timed(TY);
    assert_eq!(msg(timed.record(&s).expect_err("record")), NO_DRIVER);
    assert_eq!(msg(s.synchronize().expect_err("sync")), NO_DRIVER);
    assert_eq!(msg(s.query().expect_err("query")), NO_DRIVER);
    let peer = Device::new(TY, 1).expect("cuda:1");
    assert_eq!(
        msg(keel_device::backend::cuda::can_device_access_peer(d, peer).expect_err("peer")),
        NO_DRIVER
    );
    assert_eq!(
        msg(keel_device::backend::cuda::enable_peer_access(d, peer).expect_err("peer")),
        NO_DRIVER
    );

    // The CPU backend keeps working in the same process.
    let cpu = keel_device::current_stream(Device::cpu()).expect("cpu");
    let b = Buffer::from_slice(&cpu, &[5u8, 6]).expect("cpu buffer");
    assert_eq!(b.read(&cpu).expect("read"), [5, 6]);
    // So does Vulkan, where it can run.
    if let Some(v) = conformance::device(DeviceType::Vulkan) {
        let s = keel_device::get_stream_from_pool(v, false).expect("vulkan stream");
        let b = Buffer::from_slice(&s, &[7u32, 8]).expect("vulkan buffer");
        assert_eq!(b.read_as::<u32>(&s).expect("read"), [7, 8]);
        let c = b.to(Device::cpu(), &cpu).expect("vulkan -> cpu");
        assert_eq!(c.read_as::<u32>(&cpu).expect("read"), [7, 8]);
    }
}

#[test]
fn properties_are_sane() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let p = keel_device::properties(d).expect("properties");
    assert!(!p.name.is_empty());
    assert!(
        p.native_backend.starts_with("CUDA "),
        "{}",
        p.native_backend
    );
    assert!(p.total_memory.is_some_and(|m| m > 0));
    assert!(p.compute_units.is_some_and(|n| n > 0));
    assert_eq!(p.subgroup_size, Some(32));
    assert!(p.max_workgroup_invocations.is_some_and(|n| n >= 256));
    assert!(p.max_workgroup_size.is_some_and(|s| s[0] >= 256));
    assert!(p.max_workgroup_count.is_some_and(|c| c[0] >= 65535));
    assert!(p.shared_memory_per_workgroup.is_some_and(|m| m > 0));
    let get = |k: &str| {
        p.extra
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let cc = get("compute capability").expect("compute capability");
    let (major, _) = cc.split_once('.').expect("major.minor");
    let major: i32 = major.parse().expect("a number");
    assert_eq!(
        get("tensor cores"),
        Some(if major >= 7 { "yes" } else { "no" })
    );
    assert_eq!(get("FP8"), Some(if major >= 9 { "yes" } else { "no" }));
    for k in [
        "clock rate (kHz)",
        "memory bus width (bits)",
        "L2 cache size (bytes)",
    ] {
        assert!(get(k).is_some(), "{k}");
    }
}

/// A kernel generated from WGSL takes the parameter block its WGSL struct
/// declares: a longer one is an error, a shorter one reads as zeros past
/// what the caller gave (as Vulkan and wgpu read it).
#[test]
fn ptx_parameter_convention_is_checked() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    let b = Buffer::new(d, 16).expect("alloc");
    let words: Vec<u8> = [4u32, 1, 7].iter().flat_map(|w| w.to_le_bytes()).collect();
    let e = s
        .launch(&kernels::SPIN, [1, 1, 1], &[&b], &words)
        .expect_err("one word too many");
    assert!(e.to_string().contains("at most 2 32-bit values"), "{e}");
    // `iters` reads as 0: each out[i] is its start value, f32(i).
    s.launch(&kernels::SPIN, [1, 1, 1], &[&b], &4u32.to_le_bytes())
        .expect("a short block");
    assert_eq!(b.read_as::<f32>(&s).expect("read"), [0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn events_come_from_a_pool() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel_device::get_stream_from_pool(d, false).expect("pool");
    for i in 0..10_000 {
        let mut e = if i % 2 == 0 {
            Event::new(TY)
        } else {
            Event::timed(TY)
        };
        e.record(&s).expect("record");
    }
    s.synchronize().expect("sync");
    let mut a = Event::timed(TY);
    let mut b = Event::timed(TY);
    a.record(&s).expect("record");
    b.record(&s).expect("record");
    b.synchronize().expect("sync");
    assert!(a.elapsed_time(&b).expect("elapsed") >= 0.0);
    let mut untimed = Event::new(TY);
    untimed.record(&s).expect("record");
    untimed.synchronize().expect("sync");
    assert!(
        a.elapsed_time(&untimed).is_err(),
        "timing was not asked for"
    );
}

#[test]
fn peer_access_between_two_gpus() {
    let Some(d0) = conformance::device(TY) else {
        return;
    };
    if keel_device::device_count(TY) < 2 {
        eprintln!("skipping: peer access needs two CUDA devices, found 1");
        return;
    }
    let d1 = Device::new(TY, 1).expect("cuda:1");
    use keel_device::backend::cuda::{can_device_access_peer, enable_peer_access};
    assert_eq!(
        can_device_access_peer(d0, d0),
        Ok(false),
        "not its own peer"
    );
    let peers = can_device_access_peer(d0, d1).expect("query");
    if peers {
        enable_peer_access(d0, d1).expect("enable");
        enable_peer_access(d0, d1).expect("enabling twice is fine");
    } else {
        assert!(enable_peer_access(d0, d1).is_err());
    }
    // Either way data moves (directly between peers, through the host
    // otherwise).
    let data = pattern(1 << 20, 9);
    let s0 = keel_device::get_stream_from_pool(d0, false).expect("s0");
    let s1 = keel_device::get_stream_from_pool(d1, false).expect("s1");
    let a = Buffer::from_slice(&s0, &data).expect("upload");
    s0.synchronize().expect("sync");
    let b = a.to(d1, &s1).expect("cuda:0 -> cuda:1");
    assert!(b.read(&s1).expect("read") == data);
}
