//! Choosing the device a suite instance tests, and telling a device the
//! user filtered out (always a skip) from one that is unavailable (a skip,
//! or a failure where `KEEL_REQUIRE_BACKENDS` names its type).

use crate::DeviceProperties;
use crate::core::{Device, DeviceType};

/// The first device of `ty`, or `None` (with the reason printed) when the
/// backend cannot run here or the user filtered its devices out. Panics if
/// the backend is unavailable although `KEEL_REQUIRE_BACKENDS` names `ty`.
pub fn device(ty: DeviceType) -> Option<Device> {
    select(ty, None, "any device", |_| true)
}

/// The first wgpu adapter on native API `api` (`"Vulkan"`, `"GL"`,
/// `"Metal"`, `"DX12"`, as its properties name it), with the rule of
/// [`device`]; `WGPU_BACKEND` filters per API, so with
/// `WGPU_BACKEND=vulkan` the GL adapter skips as "filtered out by
/// WGPU_BACKEND=vulkan" even when `KEEL_REQUIRE_BACKENDS` names `wgpu`.
pub fn wgpu_adapter(api: &'static str) -> Option<Device> {
    select(DeviceType::Wgpu, Some(api), api, |p| {
        p.extra.iter().any(|(k, v)| k == "native API" && v == api)
    })
}

/// One device of each built-in backend that runs here, with a label
/// (`cpu`, `cuda`, `vulkan`, `wgpu Vulkan`, `wgpu GL`), by the rules of
/// [`device`] and [`wgpu_adapter`]: absent ones are printed as skipped, and
/// a backend `KEEL_REQUIRE_BACKENDS` names must be present.
pub fn builtin_devices() -> Vec<(&'static str, Device)> {
    [
        ("cpu", device(DeviceType::Cpu)),
        ("cuda", device(DeviceType::Cuda)),
        ("vulkan", device(DeviceType::Vulkan)),
        ("wgpu Vulkan", wgpu_adapter("Vulkan")),
        ("wgpu GL", wgpu_adapter("GL")),
    ]
    .into_iter()
    .filter_map(|(label, d)| d.map(|d| (label, d)))
    .collect()
}

/// The devices of `ty` that open here (their properties can be read), in
/// order; each one that does not is printed as skipped with its error, or
/// fails the test where `KEEL_REQUIRE_BACKENDS` names `ty`. wgpu's noop
/// adapter, which runs no work, is skipped too.
/// (`keel_device::devices` lists every device the backend enumerates; one may
/// still fail to open, as wgpu's GL adapter does on NVIDIA's headless EGL.)
/// Devices a program adopted are left out: they are that program's, which
/// may release them at any moment (another test's, in a test binary).
pub fn usable_devices(ty: DeviceType) -> Vec<Device> {
    crate::devices(ty)
        .into_iter()
        .filter(|&d| match crate::properties(d) {
            Ok(p) if runs_no_work(&p) => {
                eprintln!("skipping {d}: {RUNS_NO_WORK}");
                false
            }
            Ok(p) => !adopted(&p),
            Err(crate::Error::Unavailable { reason, .. }) if reason.contains("was released") => {
                false
            }
            Err(e) if required(ty) => {
                panic!("KEEL_REQUIRE_BACKENDS requires {ty}, but {d} does not open: {e}")
            }
            Err(e) => {
                eprintln!("skipping {d}: it does not open: {e}");
                false
            }
        })
        .collect()
}

/// The first device of `ty` whose properties satisfy `pick` (described by
/// `what` in messages), with the rule of [`device`].
pub fn device_where(
    ty: DeviceType,
    what: &str,
    pick: impl Fn(&DeviceProperties) -> bool,
) -> Option<Device> {
    select(ty, None, what, pick)
}

/// Why a device that runs no work is never tested.
const RUNS_NO_WORK: &str =
    "wgpu's noop adapter (WGPU_NOOP_BACKEND=1) completes work without running it";

/// Whether `p` describes wgpu's noop adapter: it accepts every command and
/// runs none, so no test of results can pass on it (it is there to
/// measure Keel's host side).
fn runs_no_work(p: &DeviceProperties) -> bool {
    p.extra
        .iter()
        .any(|(k, v)| k == "native API" && v == "noop")
}

/// Whether `KEEL_REQUIRE_BACKENDS` (a comma list of device type names, such
/// as `vulkan,wgpu`) names `ty`: its devices must then be present, unless
/// the user filtered them out.
pub fn required(ty: DeviceType) -> bool {
    std::env::var("KEEL_REQUIRE_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .any(|r| r.trim().eq_ignore_ascii_case(ty.name(true)))
}

fn select(
    ty: DeviceType,
    api: Option<&str>,
    what: &str,
    pick: impl Fn(&DeviceProperties) -> bool,
) -> Option<Device> {
    let found = match crate::availability(ty) {
        Err(e) => Err(e.to_string()),
        Ok(()) => {
            // A device that cannot be opened (wgpu's GL adapter on NVIDIA's
            // headless EGL, say) is no match; its error is the reason.
            let mut unopened = Vec::new();
            crate::devices(ty)
                .into_iter()
                .find(|&d| match crate::properties(d) {
                    Ok(p) if runs_no_work(&p) => {
                        unopened.push(format!("{d}: {RUNS_NO_WORK}"));
                        false
                    }
                    Ok(p) => pick(&p),
                    Err(e) => {
                        unopened.push(format!("{d}: {e}"));
                        false
                    }
                })
                .ok_or_else(|| {
                    if unopened.is_empty() {
                        "no such device".to_owned()
                    } else {
                        format!("no such device opens ({})", unopened.join("; "))
                    }
                })
        }
    };
    let reason = match found {
        Ok(d) => return Some(d),
        Err(reason) => reason,
    };
    if let Some(filter) = filtered_out(ty, api) {
        eprintln!("skipping: {ty} ({what}): {filter}");
        return None;
    }
    if required(ty) {
        panic!("KEEL_REQUIRE_BACKENDS requires {ty} ({what}), but it is unavailable: {reason}");
    }
    eprintln!("skipping: {ty} ({what}) unavailable: {reason}");
    None
}

/// An environment variable with which a user narrows a backend's devices.
struct Filter {
    ty: DeviceType,
    var: &'static str,
    /// Whether this value of the variable hides the devices asked for: on
    /// native API `api`, or (`None`) every device of the type.
    hides: fn(value: &str, api: Option<&str>) -> bool,
}

/// The filters understood, per device type:
///
/// - `WGPU_BACKEND` (wgpu): a comma list of native APIs (`vulkan`/`vk`,
///   `gl`/`gles`/`opengl`, `metal`/`mtl`, `dx12`/`d3d12`, as wgpu reads
///   it); hides an adapter whose API is not listed, and every adapter when
///   no listed API exists on this platform.
/// - `WGPU_ADAPTER_NAME` (wgpu): keeps adapters whose name contains it
///   (case-insensitive); names of hidden adapters are unknown, so while it
///   is set a missing adapter counts as filtered out.
/// - `CUDA_VISIBLE_DEVICES` (CUDA): hides every device when empty or when
///   its first entry is negative (as CUDA reads it).
const FILTERS: &[Filter] = &[
    Filter {
        ty: DeviceType::Wgpu,
        var: "WGPU_BACKEND",
        hides: wgpu_backend_hides,
    },
    Filter {
        ty: DeviceType::Wgpu,
        var: "WGPU_ADAPTER_NAME",
        hides: |_, _| true,
    },
    Filter {
        ty: DeviceType::Cuda,
        var: "CUDA_VISIBLE_DEVICES",
        hides: |value, _| {
            let first = value.split(',').next().unwrap_or_default().trim();
            first.is_empty() || first.starts_with('-')
        },
    },
];

/// Why the user's environment hides the devices of `ty` asked for (on
/// native API `api`, or any), as "filtered out by VAR=value"; `None` when
/// no filter of `ty` is set or none hides them.
pub fn filtered_out(ty: DeviceType, api: Option<&str>) -> Option<String> {
    FILTERS.iter().filter(|f| f.ty == ty).find_map(|f| {
        let value = std::env::var(f.var).ok()?;
        (f.hides)(&value, api).then(|| format!("filtered out by {}={value}", f.var))
    })
}

/// wgpu's name for each spelling `WGPU_BACKEND` accepts.
fn wgpu_api(name: &str) -> Option<&'static str> {
    match name.trim().to_lowercase().as_str() {
        "vulkan" | "vk" => Some("Vulkan"),
        "gl" | "gles" | "opengl" => Some("GL"),
        "metal" | "mtl" => Some("Metal"),
        "dx12" | "d3d12" => Some("DX12"),
        _ => None,
    }
}

/// The native APIs wgpu (as Keel builds it) has on this platform.
const PLATFORM_APIS: &[&str] = if cfg!(target_vendor = "apple") {
    &["Metal"]
} else if cfg!(windows) {
    &["Vulkan", "DX12", "GL"]
} else {
    &["Vulkan", "GL"]
};

fn wgpu_backend_hides(value: &str, api: Option<&str>) -> bool {
    let listed: Vec<&str> = value.split(',').filter_map(wgpu_api).collect();
    match api {
        Some(api) => !listed.iter().any(|l| l.eq_ignore_ascii_case(api)),
        None => !listed.iter().any(|l| PLATFORM_APIS.contains(l)),
    }
}

/// Whether a program handed Keel this device (the `"adopted"` property).
fn adopted(p: &DeviceProperties) -> bool {
    p.extra.iter().any(|(k, _)| k == "adopted")
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn wgpu_backend_lists_apis_as_wgpu_reads_them() {
        assert!(wgpu_backend_hides("vulkan", Some("GL")));
        assert!(!wgpu_backend_hides("vulkan", Some("Vulkan")));
        assert!(!wgpu_backend_hides(" VK , gles", Some("GL")));
        assert!(!wgpu_backend_hides("OpenGL", Some("GL")));
        assert!(wgpu_backend_hides("bogus", Some("Vulkan")));
        assert!(wgpu_backend_hides("bogus", None));
        assert!(!wgpu_backend_hides("vulkan,metal,dx12,gl", None));
    }
}
