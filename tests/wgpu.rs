//! wgpu-specific behaviour: adapter order and selection by environment
//! (`WGPU_BACKEND`, `WGPU_ADAPTER_NAME`, in child processes), properties,
//! kernel errors without panics, and moves between wgpu, Vulkan and CPU.

mod common;
mod conformance;

use std::process::Command;

use keel::{Buffer, Device, DeviceType, Kernel, kernels};

const TY: DeviceType = DeviceType::Wgpu;

fn api(d: Device) -> String {
    keel::properties(d)
        .expect("properties")
        .extra
        .into_iter()
        .find(|(k, _)| k == "native API")
        .map(|(_, v)| v)
        .unwrap_or_default()
}

#[test]
fn adapters_are_in_the_documented_order() {
    let Some(_) = conformance::device(TY) else {
        return;
    };
    let rank = |a: &str| {
        ["Vulkan", "Metal", "DX12", "GL"]
            .iter()
            .position(|x| *x == a)
    };
    let keys: Vec<_> = keel::devices(TY)
        .into_iter()
        .map(|d| {
            let p = keel::properties(d).expect("properties");
            (rank(&api(d)), p.kind, p.name)
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "native API, then kind, then name");
    let p = keel::properties(Device::new(TY, 0).expect("wgpu:0")).expect("properties");
    assert!(
        p.native_backend.starts_with("wgpu/"),
        "{}",
        p.native_backend
    );
    assert!(p.max_workgroup_size.is_some() && p.max_workgroup_count.is_some());
}

#[test]
fn kernel_errors_do_not_panic() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel::get_stream_from_pool(d, false).expect("pool");
    let b = Buffer::new(d, 64).expect("alloc");
    let broken = Kernel {
        name: "broken",
        wgsl: Some("@compute @workgroup_size(1) fn broken() { let x: u32 = 1.5; }"),
        ..kernels::SPIN
    };
    let e = s
        .launch(&broken, [1, 1, 1], &[&b], &[])
        .expect_err("bad WGSL");
    assert!(
        e.to_string()
            .starts_with("kernel 'broken': WGSL rejected by wgpu"),
        "{e}"
    );
    let host_only = Kernel {
        wgsl: None,
        ..kernels::SPIN
    };
    let e = s
        .launch(&host_only, [1, 1, 1], &[&b], &[])
        .expect_err("no WGSL");
    assert_eq!(
        e.to_string(),
        "kernel 'spin': has no WGSL source, which the wgpu backend runs"
    );
    let e = s
        .launch(&kernels::SPIN, [u32::MAX, 1, 1], &[&b], &[])
        .expect_err("grid");
    assert!(
        e.to_string()
            .contains("exceeds the device's maximum workgroup count"),
        "{e}"
    );
    // The device still works.
    let params = [16u32.to_le_bytes(), 10u32.to_le_bytes()].concat();
    s.launch(&kernels::SPIN, [1, 1, 1], &[&b], &params)
        .expect("spin");
    let got = b.read_as::<f32>(&s).expect("read");
    assert!((got[15] - kernels::spin_reference(15, 10)).abs() < 1e-4);
}

#[test]
fn unaligned_copies_and_moves_across_backends() {
    let Some(d) = conformance::device(TY) else {
        return;
    };
    let s = keel::get_stream_from_pool(d, false).expect("pool");
    let data = common::pattern(10_007, 11);
    let a = Buffer::from_slice(&s, &data).expect("upload");
    let b = Buffer::new(d, 10_007).expect("alloc");
    // Every phase of source and destination offsets.
    for (so, dof, len) in [(1, 2, 1001), (3, 0, 4), (0, 3, 17), (5, 5, 9000), (2, 1, 1)] {
        b.copy_from(&s, &a, so, dof, len).expect("copy");
        let got = b
            .read_async(&s, dof, len)
            .expect("read")
            .wait()
            .expect("wait");
        assert!(got == data[so..so + len], "copy {so} -> {dof} of {len}");
    }
    let e = a.copy_from(&s, &a, 0, 10, 20).expect_err("overlap");
    assert!(e.to_string().contains("non-overlapping"), "{e}");
    a.copy_from(&s, &a, 0, 5001, 3001)
        .expect("same buffer, disjoint");
    let whole = a.read(&s).expect("read");
    assert!(whole[5001..8002] == data[0..3001]);
    // wgpu -> CPU -> Vulkan (when present) -> wgpu.
    let cpu = Device::new(DeviceType::Cpu, 0).expect("cpu");
    let sc = keel::current_stream(cpu).expect("cpu stream");
    let _g = keel::StreamGuard::new(s).expect("host path reads on s");
    let on_cpu = a.to(cpu, &sc).expect("wgpu -> cpu");
    let back = if keel::is_available(DeviceType::Vulkan) {
        let v = Device::new(DeviceType::Vulkan, 0).expect("vulkan:0");
        let sv = keel::current_stream(v).expect("vulkan stream");
        let on_vk = on_cpu.to(v, &sv).expect("cpu -> vulkan");
        sv.synchronize().expect("sync");
        on_vk.to(d, &s).expect("vulkan -> wgpu")
    } else {
        on_cpu.to(d, &s).expect("cpu -> wgpu")
    };
    assert!(back.read(&s).expect("read") == whole);
}

/// Runs in a child process with the environment the parent chose.
#[test]
#[ignore = "run by `environment_selects_adapters` in child processes"]
fn probe_wgpu_environment() {
    let expect = std::env::var("KEEL_PROBE_EXPECT").expect("set by the parent");
    match expect.as_str() {
        "gl-only" => {
            let apis: Vec<String> = keel::devices(TY).into_iter().map(api).collect();
            assert!(!apis.is_empty(), "the GL adapter is found");
            assert!(apis.iter().all(|a| a == "GL"), "{apis:?}");
        }
        "none" => {
            assert_eq!(keel::device_count(TY), 0);
            let e = keel::availability(TY).expect_err("no adapter");
            assert!(
                e.to_string()
                    .starts_with("wgpu unavailable: no wgpu adapter found"),
                "{e}"
            );
            let e = Buffer::new(Device::new(TY, 0).expect("wgpu:0"), 4).expect_err("alloc");
            assert!(e.to_string().starts_with("wgpu unavailable"), "{e}");
            assert!(keel::is_available(DeviceType::Cpu));
        }
        other => panic!("unknown expectation {other}"),
    }
    println!("probe ok");
}

#[test]
fn environment_selects_adapters() {
    if conformance::device(TY).is_none() {
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    for (var, value, expect) in [
        ("WGPU_BACKEND", "gl", "gl-only"),
        ("WGPU_ADAPTER_NAME", "no-such-adapter-keel", "none"),
    ] {
        let out = Command::new(&exe)
            .args([
                "probe_wgpu_environment",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(var, value)
            .env("KEEL_PROBE_EXPECT", expect)
            .output()
            .expect("child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("probe ok"),
            "{var}={value}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
