//! PrivateUse1: c10's registration rules, and what is particular to the
//! `npu` of `examples/custom_backend` (two devices, an asynchronous default
//! stream). The conformance suite runs on it too (`conformance.rs` beside this file).

use crate::npu;

use keel::testing::{GATED_FILL, Gate};
use keel::{Buffer, Device, DeviceGuard, DeviceType, Event, Stream, StreamGuard};

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
    let p = keel::properties(d).expect("properties");
    assert_eq!(p.name, "Keel simulated NPU");
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
    let gate = Gate::new();
    default
        .launch(&GATED_FILL, [1, 1, 1], &[&buf], &gate.params(4.0))
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
    gate.open();
    assert_eq!(out.read_as::<f32>(&other).expect("read"), [4.0]);
}

/// PrivateUse1 parity through the public API: the npu's own kernels for
/// some operators, the CPU fallback for the rest (counted), save/load
/// with its metadata hook, its device module. This process runs no other
/// operator, so the fallback counts are exact.
#[test]
fn npu_operators_fallback_serialization_and_device_module() {
    use keel::dispatch::fallback_count;
    use keel::{DType, Tensor};
    use std::sync::atomic::Ordering;

    npu::install_ops().expect("npu ops");
    let d = npu(0);
    let module = keel::device_module::<npu::NpuModule>(npu::NAME).expect("module");
    assert_eq!(module.device_count(), npu::DEVICES as usize);
    assert_eq!(module.native_ops(), &npu::NPU_OPS);

    let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[1, 3], d).expect("x");
    // Own kernels: no fallback.
    let y = x.add(&x).expect("add").mul_scalar(0.5).expect("mul.Scalar");
    assert_eq!(y.to_vec::<f32>().expect("read"), vec![1.0, -2.0, 3.0]);
    assert_eq!(fallback_count("add"), 0);
    assert_eq!(fallback_count("mul.Scalar"), 0);
    // No npu kernel: the CPU fallback, results back on the npu.
    let w = Tensor::ones(&[3, 2], DType::F32, d).expect("w");
    let s = y.matmul(&w).expect("matmul").softmax().expect("softmax");
    assert_eq!(s.device(), d);
    assert_eq!(s.to_vec::<f32>().expect("read"), vec![0.5, 0.5]);
    let total = y.sum().expect("sum");
    assert_eq!(total.to_vec::<f32>().expect("read"), vec![2.0]);
    assert_eq!(fallback_count("matmul"), 1);
    assert_eq!(fallback_count("softmax"), 1);
    assert_eq!(fallback_count("sum"), 1);
    // An npu kernel that declines (f16) falls back too.
    let h = Tensor::ones(&[2], DType::F16, d).expect("h");
    h.add(&h).expect("f16 add");
    assert_eq!(fallback_count("add"), 1);

    // Saved from the npu with its metadata; loaded on the CPU, the hook
    // reads it back.
    let path = std::env::temp_dir().join(format!("keel-pu1-{}.safetensors", std::process::id()));
    keel::save(&path, &[("y", &y)]).expect("save");
    let before = npu::META_LOADS.load(Ordering::Relaxed);
    let loaded = keel::load(&path, Device::cpu()).expect("load");
    std::fs::remove_file(&path).ok();
    assert_eq!(npu::META_LOADS.load(Ordering::Relaxed), before + 1);
    assert_eq!(
        loaded[0].1.to_vec::<f32>().expect("read"),
        vec![1.0, -2.0, 3.0]
    );
    assert_eq!(npu::NPU_FORMAT, "ND");
    module.synchronize(0).expect("synchronize");
}
