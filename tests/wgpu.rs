//! wgpu-specific behaviour beyond the conformance suite
//! (`tests/conformance_wgpu.rs`): adapter order and properties, and
//! selection by environment (`WGPU_BACKEND`, `WGPU_ADAPTER_NAME`, in child
//! processes).

use std::process::Command;

use keel::testing::conformance;
use keel::{Buffer, Device, DeviceType};

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
