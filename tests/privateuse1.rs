//! PrivateUse1: c10's registration rules, and a third-party backend (the
//! `npu` of `examples/custom_backend`) used through the ordinary API.

#[path = "../examples/custom_backend/npu.rs"]
mod npu;

mod common;

use common::{GATED_FILL, gate_params, open, pattern};
use keel::{Buffer, Device, DeviceGuard, DeviceType, Error, Event, Stream, StreamGuard, kernels};

fn npu(index: i16) -> Device {
    npu::install().expect("npu backend");
    Device::new(DeviceType::PrivateUse1, index).expect("valid")
}

#[test]
fn registration_follows_c10s_rules() {
    for in_tree in ["cpu", "cuda", "vulkan", "wgpu", "privateuseone"] {
        let e = keel::register_privateuse1_backend(in_tree).expect_err(in_tree);
        assert_eq!(
            e.to_string(),
            format!("Cannot register privateuse1 backend with in-tree device name: {in_tree}")
        );
    }
    for bad in ["", "n pu", "npu0", "npu:0", "np-u"] {
        let e = keel::register_privateuse1_backend(bad).expect_err(bad);
        assert!(e.to_string().contains("[A-Za-z_]+"), "{bad}: {e}");
    }
    npu::install().expect("install");
    keel::register_privateuse1_backend("npu").expect("the same name again is fine");
    let e = keel::register_privateuse1_backend("dummy").expect_err("another name");
    assert_eq!(
        e.to_string(),
        "register_privateuse1_backend() has already been set! Current backend: npu"
    );
    assert_eq!(keel::privateuse1_backend_name(), Some("npu"));
    assert_eq!(DeviceType::PrivateUse1.name(true), "npu");
    assert_eq!(DeviceType::PrivateUse1.name(false), "NPU");
}

#[test]
fn npu_devices_parse_and_print() {
    let d = npu(1);
    assert_eq!("npu:1".parse::<Device>(), Ok(d));
    assert_eq!(d.to_string(), "npu:1");
    assert_eq!(
        "privateuseone:1".parse::<Device>().map(|d| d.to_string()),
        Ok("npu:1".into())
    );
    assert_eq!(
        "npu".parse::<Device>(),
        Ok(Device::current(DeviceType::PrivateUse1))
    );
    let e = "cuda_x:0".parse::<Device>().expect_err("unknown");
    assert!(
        e.to_string()
            .starts_with("Expected one of cpu, cuda, vulkan, wgpu, privateuseone, npu device type"),
        "{e}"
    );
    assert_eq!(
        Stream::default_for(d).to_string(),
        "stream 0 on device npu:1"
    );
}

#[test]
fn guards_and_streams_on_a_third_party_backend() {
    let (d0, d1) = (npu(0), npu(1));
    assert_eq!(keel::device_count(DeviceType::PrivateUse1), 2);
    assert_eq!(keel::current_device(DeviceType::PrivateUse1), Ok(d0));
    let s = keel::get_stream_from_pool(d1, true).expect("pool");
    {
        let _g = DeviceGuard::new(d1).expect("guard");
        assert_eq!(keel::current_device(DeviceType::PrivateUse1), Ok(d1));
        let _sg = StreamGuard::new(s).expect("stream guard");
        assert_eq!(
            keel::current_stream(Device::current(DeviceType::PrivateUse1)),
            Ok(s)
        );
    }
    assert_eq!(keel::current_device(DeviceType::PrivateUse1), Ok(d0));
    assert_eq!(keel::current_stream(d1), Ok(Stream::default_for(d1)));
    let e = DeviceGuard::new(npu(0).with_index(2).expect("valid index")).expect_err("2 devices");
    assert!(e.to_string().contains("expected an index in 0..2"), "{e}");
}

#[test]
fn default_stream_is_asynchronous_and_events_order_it() {
    let d = npu(0);
    let default = keel::default_stream(d).expect("default");
    let other = keel::get_stream_from_pool(d, false).expect("pool");
    let buf = Buffer::new(d, 4).expect("alloc");
    default
        .launch(&GATED_FILL, [1, 1, 1], &[&buf], &gate_params(10, 4.0))
        .expect("launch");
    assert_eq!(
        default.query(),
        Ok(false),
        "an accelerator's default stream is async"
    );
    let mut done = Event::timed(DeviceType::PrivateUse1);
    done.record(&default).expect("record");
    other.wait(&done).expect("wait");
    let out = buf.to(d, &other).expect("copy after the wait");
    open(10);
    assert_eq!(out.read_as::<f32>(&other).expect("read"), [4.0]);
}

#[test]
fn buffers_on_different_devices_do_not_mix() {
    let (d0, d1) = (npu(0), npu(1));
    let s0 = keel::current_stream(d0).expect("stream");
    let a = Buffer::new(d0, 16).expect("a");
    let b = Buffer::new(d1, 16).expect("b");
    let c = Buffer::new(d0, 16).expect("c");
    let k = kernels::VECTOR_ADD;
    let e = s0
        .launch(&k, [1, 1, 1], &[&a, &b, &c], &4u32.to_le_bytes())
        .expect_err("mixed devices");
    assert_eq!(
        e,
        Error::DeviceMismatch {
            first: d0,
            second: d1
        }
    );
    assert_eq!(
        e.to_string(),
        "expected all buffers to be on the same device, but found at least two devices, npu:0 and npu:1"
    );
    let cpu_stream = keel::current_stream(Device::cpu()).expect("cpu");
    let e = a
        .write(&cpu_stream, 0, &[1u8])
        .expect_err("stream on another device");
    assert!(e.to_string().ends_with("npu:0 and cpu:0"), "{e}");
}

#[test]
fn data_moves_between_any_devices() {
    let (d0, d1) = (npu(0), npu(1));
    let cpu = Device::new(DeviceType::Cpu, 0).expect("cpu");
    let data = pattern(100_003, 7);
    let s0 = keel::get_stream_from_pool(d0, false).expect("s0");
    let s1 = keel::get_stream_from_pool(d1, false).expect("s1");
    let sc = keel::get_stream_from_pool(cpu, false).expect("sc");
    let on_cpu = Buffer::from_slice(&sc, &data).expect("upload");
    sc.synchronize().expect("sync");
    keel::set_current_stream(sc).expect("reads of cpu buffers use the current stream");
    let on_npu0 = on_cpu.to(d0, &s0).expect("cpu -> npu:0");
    s0.synchronize().expect("sync");
    keel::set_current_stream(s0).expect("current");
    let on_npu1 = on_npu0.to(d1, &s1).expect("npu:0 -> npu:1, peer");
    // The host path reads on the source device's current stream: make it
    // the stream the data was written on, as in PyTorch.
    keel::set_current_stream(s1).expect("current");
    let back = on_npu1.to(cpu, &sc).expect("npu:1 -> cpu");
    assert_eq!(back.device(), cpu);
    assert!(
        back.read(&sc).expect("read") == data,
        "byte-exact after three moves"
    );
}

#[test]
fn kernels_and_timing_on_npu() {
    let d = npu(1);
    let s = keel::get_stream_from_pool(d, false).expect("pool");
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let dx = Buffer::from_slice(&s, &x).expect("x");
    let dy = Buffer::from_slice(&s, &vec![1.0f32; n]).expect("y");
    let mut start = Event::timed(DeviceType::PrivateUse1);
    let mut end = Event::timed(DeviceType::PrivateUse1);
    start.record(&s).expect("record");
    let params = [(n as u32).to_le_bytes(), 3.0f32.to_le_bytes()].concat();
    let k = kernels::SAXPY;
    s.launch(&k, k.grid_for(n as u64), &[&dx, &dy], &params)
        .expect("saxpy");
    end.record(&s).expect("record");
    keel::synchronize(d).expect("device sync");
    assert!(start.elapsed_time(&end).expect("elapsed") >= 0.0);
    let y = dy.read_as::<f32>(&s).expect("read");
    assert!(
        y.iter()
            .enumerate()
            .all(|(i, &v)| v == 1.0 + 3.0 * i as f32)
    );
    let p = keel::properties(d).expect("properties");
    assert_eq!(p.name, "Keel simulated NPU");
}
