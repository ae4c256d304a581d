//! Every kernel Keel ships lowers, and what the lowering rejects it
//! rejects with a message and a place.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Keel's kernel sources: every `.wgsl` with an entry point, the matmul
/// kernels with their shared prefix.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut out = Vec::new();
    let prefix = |names: &[&str]| -> String {
        names
            .iter()
            .map(|n| std::fs::read_to_string(root.join("shaders/compute").join(n)).unwrap_or_default())
            .collect()
    };
    for dir in [
        "shaders/ops",
        "shaders/compute",
        "shaders/random",
        "crates/keel-device/shaders",
        "crates/keel-device/src/testing/conformance/wgsl",
    ] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .expect("kernel folder")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wgsl"))
            .collect();
        files.sort();
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("").to_owned();
            let text = std::fs::read_to_string(&f).expect("kernel source");
            if !text.contains("@compute") {
                continue;
            }
            let text = match name.as_str() {
                "matmul_tiled.wgsl" | "matmul_naive.wgsl" => {
                    prefix(&["rounding.wgsl", "matmul_bindings.wgsl"]) + &text
                }
                "matmul_tiled_4x4.wgsl" => prefix(&["matmul_bindings.wgsl"]) + &text,
                "cast.wgsl" => prefix(&["rounding.wgsl"]) + &text,
                "cast_f16_narrow.wgsl" => text + &prefix(&["rounding.wgsl"]),
                _ => text,
            };
            out.push((format!("{dir}/{name}"), text));
        }
    }
    out
}

#[test]
fn every_shipped_kernel_lowers() {
    let mut failures = Vec::new();
    let mut count = 0;
    for (file, text) in sources() {
        let module = naga::front::wgsl::parse_str(&text).expect("Keel's WGSL parses");
        for ep in &module.entry_points {
            count += 1;
            match keel_wgsl::compile(&text, &ep.name) {
                Ok(p) => {
                    assert_eq!(p.name, ep.name);
                    assert_eq!(p.workgroup_size, ep.workgroup_size);
                    assert!(!p.body.is_empty());
                }
                Err(e) => failures.push(format!("{file} `{}`: {e}", ep.name)),
            }
        }
    }
    assert!(count >= 30, "found {count} entry points");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
