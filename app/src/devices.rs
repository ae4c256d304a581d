//! What devices this process can see: every device of every compiled
//! backend, the reason a backend is unavailable, and capability checks.
//! Gathered once (probing backends is slow) and shown by the devices panel
//! and by `--headless`.

use keel::{Device, DeviceProperties, DeviceType};

/// One backend (device type) and what it has.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// The device type.
    pub ty: DeviceType,
    /// Its backend's name (`Vulkan`, `wgpu`).
    pub name: String,
    /// Why it cannot be used, if it cannot.
    pub unavailable: Option<String>,
    /// Its devices and their properties (or why they could not be read).
    pub devices: Vec<(Device, Result<DeviceProperties, String>)>,
}

/// A yes/no/value check shown per device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// What is checked.
    pub name: &'static str,
    /// The answer (`yes`, `no`, `32`, `not reported`).
    pub value: String,
}

/// Probes every backend built into keel. Device types without a built
/// backend (PrivateUse1 unless registered) are listed as unavailable.
pub fn probe() -> Vec<BackendInfo> {
    DeviceType::ALL
        .into_iter()
        .map(|ty| {
            let unavailable = keel::availability(ty).err().map(|e| e.to_string());
            let devices = keel::devices(ty)
                .into_iter()
                .map(|d| (d, keel::properties(d).map_err(|e| e.to_string())))
                .collect();
            BackendInfo {
                ty,
                name: ty.backend_name().to_owned(),
                unavailable,
                devices,
            }
        })
        .collect()
}

fn extra<'a>(p: &'a DeviceProperties, key: &str) -> Option<&'a str> {
    p.extra
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// Capability checks of one device, from what its backend reports.
pub fn capabilities(p: &DeviceProperties) -> Vec<Capability> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    let mut caps = vec![
        Capability {
            name: "timestamps",
            value: p.timestamps.map_or_else(
                || "no".to_owned(),
                |t| format!("yes ({} ns/tick, {} bits)", t.period_ns, t.valid_bits),
            ),
        },
        Capability {
            name: "subgroups",
            value: p
                .subgroup_size
                .map_or_else(|| "not reported".to_owned(), |s| format!("yes (size {s})")),
        },
    ];
    let features = extra(p, "features").unwrap_or("");
    let f16 = if features.contains("SHADER_F16") {
        Some(true)
    } else if let Some(v) = extra(p, "f16").or_else(|| extra(p, "shader f16")) {
        Some(v == "yes" || v == "true")
    } else if !features.is_empty() {
        Some(false)
    } else {
        None
    };
    caps.push(Capability {
        name: "f16",
        value: f16.map_or_else(|| "not reported".to_owned(), yes),
    });
    if let Some(v) = extra(p, "tensor cores") {
        caps.push(Capability {
            name: "tensor cores",
            value: v.to_owned(),
        });
    }
    if let Some(v) = extra(p, "FP8") {
        caps.push(Capability {
            name: "FP8",
            value: v.to_owned(),
        });
    }
    if !features.is_empty() {
        caps.push(Capability {
            name: "timestamps inside passes",
            value: yes(features.contains("TIMESTAMP_QUERY_INSIDE_PASSES")),
        });
    }
    // Whether kernels asking for strict floating point get it here (the
    // random kernels' bits rest on it).
    caps.push(Capability {
        name: "strict float",
        value: yes(p.strict_float),
    });
    caps
}

/// Every property of `p` as (name, value) rows.
pub fn property_rows(p: &DeviceProperties) -> Vec<(String, String)> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "not reported".to_owned());
    let mut rows = vec![
        ("name".to_owned(), p.name.clone()),
        ("kind".to_owned(), p.kind.to_string()),
        ("vendor".to_owned(), p.vendor.clone()),
        ("native backend".to_owned(), p.native_backend.clone()),
        (
            "driver".to_owned(),
            format!("{} {}", p.driver, p.driver_info),
        ),
        (
            "memory".to_owned(),
            opt(p
                .total_memory
                .map(|m| format!("{:.1} MiB", m as f64 / (1u64 << 20) as f64))),
        ),
        (
            "compute units".to_owned(),
            opt(p.compute_units.map(|c| c.to_string())),
        ),
        (
            "max workgroup size".to_owned(),
            opt(p
                .max_workgroup_size
                .map(|w| format!("{}x{}x{}", w[0], w[1], w[2]))),
        ),
        (
            "max workgroup invocations".to_owned(),
            opt(p.max_workgroup_invocations.map(|c| c.to_string())),
        ),
        (
            "shared memory per workgroup".to_owned(),
            opt(p.shared_memory_per_workgroup.map(|c| format!("{c} B"))),
        ),
        (
            "buffers".to_owned(),
            if p.exclusive_allocations {
                "an allocation each (a kernel holds the allocations it binds)"
            } else {
                "blocks of shared segments"
            }
            .to_owned(),
        ),
        (
            "strict floating point".to_owned(),
            if p.strict_float {
                "promised (Kernel::strict_float: no fusing or reordering)"
            } else {
                "not promised"
            }
            .to_owned(),
        ),
    ];
    rows.extend(p.extra.iter().cloned());
    rows
}

/// The device table printed by `--headless`.
pub fn table(backends: &[BackendInfo]) -> String {
    let mut out = String::new();
    for b in backends {
        match &b.unavailable {
            Some(reason) if b.devices.is_empty() => {
                out.push_str(&format!("{:<8} unavailable: {reason}\n", b.name));
            }
            _ => {
                for (d, p) in &b.devices {
                    match p {
                        Ok(p) => {
                            let caps = capabilities(p)
                                .iter()
                                .map(|c| format!("{}: {}", c.name, c.value))
                                .collect::<Vec<_>>()
                                .join(", ");
                            out.push_str(&format!(
                                "{:<8} {:<10} {} [{}; {}] {caps}\n",
                                b.name,
                                d.to_string(),
                                p.name,
                                p.kind,
                                p.native_backend
                            ));
                        }
                        Err(e) => {
                            out.push_str(&format!("{:<8} {d:<10} properties failed: {e}\n", b.name))
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::property_rows;

    /// The CPU's buffers are allocations of their own (its kernels lock
    /// what they bind), which the devices view says next to the rest.
    #[test]
    fn the_cpu_row_says_buffers_are_allocations_of_their_own() {
        let p = keel::properties(keel::Device::cpu()).expect("cpu properties");
        let rows = property_rows(&p);
        let buffers = rows
            .iter()
            .find(|(k, _)| k == "buffers")
            .map(|(_, v)| v.as_str());
        assert_eq!(
            buffers,
            Some("an allocation each (a kernel holds the allocations it binds)")
        );
    }

    #[test]
    fn the_cpu_promises_strict_floating_point() {
        let p = keel::properties(keel::Device::cpu()).expect("cpu properties");
        let strict = super::capabilities(&p)
            .into_iter()
            .find(|c| c.name == "strict float")
            .map(|c| c.value);
        assert_eq!(strict.as_deref(), Some("yes"));
        let rows = property_rows(&p);
        let row = rows.iter().find(|(k, _)| k == "strict floating point");
        assert!(
            row.is_some_and(|(_, v)| v.starts_with("promised")),
            "{row:?}"
        );
    }
}
