//! `cargo xtask <task>`: the project's scripted jobs.
//!
//! - `cargo xtask test`: everything CI checks, in order, stopping at the
//!   first failure:
//!   1. system packages the tests need (software Vulkan: Mesa's lavapipe,
//!      the Vulkan loader, the Khronos validation layer; headless EGL/GL on
//!      Mesa for wgpu's GL backend), installed with apt-get when missing
//!      and running as root;
//!   2. rustfmt;
//!   3. `layers`: no import cycle between the files of any crate's
//!      `src/`, the device layer's profiler uses only the core values,
//!      the backend interface and the error type (see `layers.rs`), and
//!      the crates' dependencies keep the layers apart ([`FORBIDDEN_DEPS`],
//!      read from `cargo tree`: the device layer compiles no trace
//!      importer, compression or tensor-file crate; the trace crate no GPU
//!      API);
//!   4. clippy with `-D warnings` on every target and feature, each
//!      library built alone with no default features (only the CPU
//!      backend, no trace import), and the documentation built with
//!      rustdoc's warnings as errors;
//!   5. `ptx`: every `*.ptx` under [`PTX_DIRS`] assembled by NVIDIA's `ptxas` for
//!      sm_70, sm_80 and sm_90 ([`PTX_ARCHS`]), from the architecture its
//!      `.target` line names on (a `.target sm_80` file, such as the
//!      tensor-core matmul, is not assembled for sm_70); a file that does not
//!      assemble fails the step with ptxas's message, and so does an
//!      entry of the CUDA C++ overrides that spills registers on sm_90
//!      (`ptxas -v`) without leave in [`MAY_SPILL`]. No GPU or CUDA
//!      toolkit is needed: `ptxas` comes from the PyPI wheel
//!      `nvidia-cuda-nvcc-cu12` ([`PTXAS_WHEEL`], downloaded once with
//!      `pip download --no-deps` into `target/ptxas/` and unpacked there).
//!      That each PTX entry takes the parameters its launch code passes is
//!      a unit test of the library (`compute::params`); the PTX generated
//!      from every WGSL kernel is assembled the same way by keel-wgsl's
//!      tests in step 6, which get this `ptxas` as `KEEL_PTXAS`;
//!   6. every test of the workspace, with the Khronos validation layer
//!      enabled for Vulkan (`VK_INSTANCE_LAYERS`), so a validation error
//!      fails the test that caused it. Without a `DISPLAY`, an `Xvfb :99`
//!      is started for the run (the profiler app's real-window test);
//!   7. `coop`: the cooperative-matrix tests of `tests/ops` (the
//!      `matmul_coop` kernel against the f64 reference, the kernel picks)
//!      again on a newer Mesa lavapipe than the system's, one that has
//!      `VK_KHR_cooperative_matrix` (Debian 12's has none): Debian 13's
//!      backports, unpacked with their C library and validation layer into
//!      `target/newer-lavapipe/` by `xtask/newer_lavapipe.py` (about 70 MB
//!      from deb.debian.org, once) and used only by the test binary, which
//!      runs under that C library's loader (a cargo runner). With
//!      `KEEL_REQUIRE_COOPERATIVE_MATRIX` set, so that the tests fail
//!      instead of skipping if no device has cooperative matrices. Only
//!      on Debian-like systems (`dpkg`); elsewhere it prints why not;
//!   8. `hta`: PyTorch's trace analysis (HolisticTraceAnalysis, pinned in
//!      [`HTA_PACKAGES`]) on a trace that `examples/record_trace` writes:
//!      `xtask/hta_check.py` runs its GPU kernel breakdown, temporal
//!      breakdown, idle time breakdown and kernel launch statistics and
//!      fails on an empty result. The virtual environment is created once
//!      in `target/hta-venv` (needs `python3` with `venv` and PyPI).
//!
//! - `cargo xtask layers`: step 3 alone, printing every file's layer and
//!   dependencies.
//! - `cargo xtask ptx`: step 5 alone.
//! - `cargo xtask coop`: step 7 alone.
//! - `cargo xtask hta`: step 8 alone.
//! - `cargo xtask mma-ptx`: compiles the CUDA C++ matmul overrides
//!   ([`CUDA_SOURCES`]: `shaders/compute/matmul_mma.cu`, `matmul_mma16.cu`,
//!   `matmul_sgemm.cu`, which include `matmul_mma_common.cuh`) to their
//!   `.ptx` files with NVRTC for
//!   compute_80 and declares the result `.version 7.0` (all it uses, so
//!   that drivers from CUDA 11 on load it); `--check` fails instead where
//!   the checked-in file differs. NVRTC comes from the PyPI wheel
//!   [`NVRTC_WHEEL`] (90 MB, downloaded into `target/nvrtc/` on first
//!   use) and is driven from Python (`xtask/nvrtc.py`); not part of `test`.
//!
//! `KEEL_REQUIRE_BACKENDS` (set by `.ci/run`) makes a backend's tests fail
//! instead of skipping when that backend is unavailable.

mod layers;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Every crate's `src/`, bottom-up: the trace model, the device layer,
/// the operators, the app.
const CRATE_SRCS: &[&str] = &[
    "crates/keel-trace/src",
    "crates/keel-wgsl/src",
    "crates/keel-device/src",
    "src",
    "app/src",
];

/// Per crate, the crates its normal dependencies (with its default
/// features) must not pull in, whatever the path: what keeps the layers
/// apart at the crate level (cargo itself forbids cycles between crates).
const FORBIDDEN_DEPS: &[(&str, &[&str])] = &[
    (
        "keel-device",
        &[
            "serde_json",
            "flate2",
            "ruzstd",
            "safetensors",
            "matrixmultiply",
            "keel",
        ],
    ),
    (
        "keel-wgsl",
        &["wgpu", "ash", "cudarc", "keel-trace", "keel-device", "keel"],
    ),
    (
        "keel-trace",
        &[
            "wgpu",
            "ash",
            "cudarc",
            "naga",
            "gpu-allocator",
            "keel-device",
            "keel",
        ],
    ),
];

/// The directories whose `*.ptx` files the PTX check assembles.
const PTX_DIRS: &[&str] = &["crates/keel-device/shaders", "shaders"];

/// Step 3: the file graph of every crate, then the crate graph.
fn layers_check(cargo: &str, verbose: bool) -> Result<(), String> {
    for src in CRATE_SRCS {
        eprintln!("xtask: layers: {src}");
        layers::check(&root().join(src), verbose)?;
    }
    deps_check(cargo)
}

/// [`FORBIDDEN_DEPS`], from `cargo tree`'s list of each crate's normal
/// dependencies.
fn deps_check(cargo: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    for (krate, forbidden) in FORBIDDEN_DEPS {
        let out = Command::new(cargo)
            .current_dir(root())
            .args([
                "tree", "-q", "-p", krate, "-e", "normal", "--prefix", "none",
            ])
            .args(["--format", "{p}"])
            .output()
            .map_err(|e| format!("layers: could not run cargo tree: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "layers: cargo tree -p {krate} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let names: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        eprintln!(
            "xtask: layers: {krate} depends on {} crates",
            names.len() - 1
        );
        for f in *forbidden {
            if names.contains(f) {
                problems.push(format!("{krate} depends on {f} (forbidden: {forbidden:?})"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("layers: {}", problems.join("; ")))
    }
}

fn run(step: &str, cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: {step}: {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("{step}: could not start {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step} failed ({status})"))
    }
}

/// What the HTA check installs in its virtual environment: HTA 0.5.0 fails
/// under pandas 3 (it assigns row indices into a column it downcast to
/// int8), so pandas stays on 2.x.
const HTA_PACKAGES: &[&str] = &["HolisticTraceAnalysis==0.5.0", "pandas>=2.2,<3"];

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The wheel `ptxas` comes from (pinned, so every run checks with the
/// same assembler).
const PTXAS_WHEEL: &str = "nvidia-cuda-nvcc-cu12==12.9.86";

/// The wheel NVRTC comes from for `mma-ptx` (the same CUDA release as
/// [`PTXAS_WHEEL`]).
const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc-cu12==12.9.86";

/// The CUDA C++ sources compiled to checked-in PTX by `mma-ptx`, with the
/// virtual architecture each is compiled for.
const CUDA_SOURCES: &[(&str, &str)] = &[
    ("shaders/compute/matmul_mma.cu", "compute_80"),
    ("shaders/compute/matmul_mma16.cu", "compute_80"),
    ("shaders/compute/matmul_sgemm.cu", "compute_80"),
];

/// The GPU architectures every PTX file must assemble for: Volta, Ampere
/// (the first with TF32 `mma`) and Hopper.
const PTX_ARCHS: &[&str] = &["sm_70", "sm_80", "sm_90"];

/// The build directory (`CARGO_TARGET_DIR` or `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// `ptxas`, downloaded and unpacked into `target/ptxas/` on first use.
fn ptxas() -> Result<PathBuf, String> {
    let dir = target_dir().join("ptxas");
    let exe = dir.join("nvidia/cuda_nvcc/bin/ptxas");
    if exe.exists() {
        return Ok(exe);
    }
    // Only ptxas is kept (the wheel is 40 MB).
    fetch_wheel(
        "ptx",
        &dir,
        PTXAS_WHEEL,
        "z.extract('nvidia/cuda_nvcc/bin/ptxas', sys.argv[2])",
    )?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {exe:?}: {e}"))?;
    }
    Ok(exe)
}

/// NVRTC's library, downloaded and unpacked into `target/nvrtc/` on
/// first use.
fn nvrtc() -> Result<PathBuf, String> {
    let dir = target_dir().join("nvrtc");
    let lib = dir.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    if lib.exists() {
        return Ok(lib);
    }
    // The library and the builtins it opens from its own directory.
    fetch_wheel(
        "mma-ptx",
        &dir,
        NVRTC_WHEEL,
        "[z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith('nvidia/cuda_nvrtc/lib/')]",
    )?;
    Ok(lib)
}

/// Downloads the wheel `spec` into `dir` with pip (no dependencies), runs
/// `extract` on it in Python (the wheel open as the zip file `z`,
/// `sys.argv[2]` the directory) and deletes the wheel.
fn fetch_wheel(task: &str, dir: &Path, spec: &str, extract: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {dir:?}: {e}"))?;
    run(
        &format!("{task}: pip download"),
        Command::new("python3")
            .args(["-m", "pip", "download", "-q", "--disable-pip-version-check"])
            .args(["--no-deps", "--only-binary=:all:", "-d"])
            .arg(dir)
            .arg(spec),
    )?;
    let wheel = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {dir:?}: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("{task}: no wheel in {dir:?} after pip download"))?;
    // A wheel is a zip file; Python (which pip needs anyway) unpacks it.
    run(
        &format!("{task}: unpack {spec}"),
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); {extract}"
            ))
            .arg(&wheel)
            .arg(dir),
    )?;
    let _ = std::fs::remove_file(&wheel);
    Ok(())
}

/// `cargo xtask mma-ptx [--check]`: each of [`CUDA_SOURCES`] compiled to
/// the `.ptx` beside it.
fn mma_ptx(check: bool) -> Result<(), String> {
    let lib = nvrtc()?;
    let mut stale = Vec::new();
    for (source, arch) in CUDA_SOURCES {
        let src = root().join(source);
        let out = src.with_extension("ptx");
        let raw = target_dir().join("nvrtc").join("out.ptx");
        run(
            "mma-ptx: nvrtc",
            Command::new("python3")
                .arg(root().join("xtask/nvrtc.py"))
                .arg(&lib)
                .arg(&src)
                .arg(&raw)
                .arg(format!("--gpu-architecture={arch}"))
                .arg(format!(
                    "--include-path={}",
                    src.parent().unwrap_or(&root()).display()
                ))
                .arg("--std=c++17"),
        )?;
        let ptx = std::fs::read_to_string(&raw).map_err(|e| format!("reading {raw:?}: {e}"))?;
        let name = src
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let text = format!(
            "// Generated from {name} by `cargo xtask mma-ptx` (NVRTC, {arch});\n// do not edit.\n{}",
            declare_ptx_7(&ptx)?
        );
        let old = std::fs::read_to_string(&out).unwrap_or_default();
        if check {
            if old != text {
                stale.push(out.display().to_string());
            }
        } else if old != text {
            std::fs::write(&out, &text).map_err(|e| format!("writing {out:?}: {e}"))?;
            println!("xtask: mma-ptx: wrote {}", out.display());
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "mma-ptx: stale (run `cargo xtask mma-ptx`): {}",
            stale.join(", ")
        ))
    }
}

/// `ptx` with its `.version` line replaced by `.version 7.0`: NVRTC 12.9
/// declares its own newest version, which drivers older than CUDA 12.9's
/// refuse, while the kernels use nothing past 7.0 (ptxas checks that when
/// it assembles them).
fn declare_ptx_7(ptx: &str) -> Result<String, String> {
    let mut found = false;
    let lines: Vec<&str> = ptx
        .lines()
        .map(|l| {
            if !found && l.trim_start().starts_with(".version") {
                found = true;
                ".version 7.0"
            } else {
                l
            }
        })
        .collect();
    if found {
        Ok(lines.join("\n") + "\n")
    } else {
        Err("mma-ptx: NVRTC's output has no .version line".to_owned())
    }
}

/// Every `.ptx` file under `dir`, sorted.
fn ptx_files(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {dir:?}: {e}"))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("reading {dir:?}: {e}"))?.path();
        if path.is_dir() {
            ptx_files(&path, found)?;
        } else if path.extension().is_some_and(|x| x == "ptx") {
            found.push(path);
        }
    }
    found.sort();
    Ok(())
}

/// Step 5: every PTX file assembled for every architecture of
/// [`PTX_ARCHS`]; all failures are reported, with ptxas's messages.
fn ptx_check() -> Result<PathBuf, String> {
    let ptxas = ptxas()?;
    let mut files = Vec::new();
    for dir in PTX_DIRS {
        ptx_files(&root().join(dir), &mut files)?;
    }
    let mut failures = Vec::new();
    let mut runs = 0;
    for file in &files {
        let text =
            std::fs::read_to_string(file).map_err(|e| format!("ptx: reading {file:?}: {e}"))?;
        let least = ptx_target(&text);
        for arch in PTX_ARCHS {
            // A file declaring a newer `.target` (such as sm_80 for
            // tensor-core `mma`) is not meant for the older architectures.
            if least.is_some_and(|t| arch_number(arch).is_some_and(|a| a < t)) {
                continue;
            }
            runs += 1;
            let out = Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(file)
                .args(["-o", "/dev/null"])
                .output()
                .map_err(|e| format!("ptx: could not start {ptxas:?}: {e}"))?;
            if !out.status.success() {
                failures.push(format!(
                    "{} ({arch}): {}{}",
                    file.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    eprintln!(
        "xtask: ptx: {} files, {runs} assemblies (each file for every architecture of {PTX_ARCHS:?} from its `.target` on), {} failed",
        files.len(),
        failures.len()
    );
    if failures.is_empty() {
        failures.extend(spills(&ptxas)?);
    }
    if failures.is_empty() {
        Ok(ptxas)
    } else {
        Err(format!("ptxas failed:\n{}", failures.join("\n")))
    }
}

/// Entries of the CUDA C++ overrides that may spill registers to local
/// memory, and why: everything else in [`CUDA_SOURCES`] must not (the
/// kernels hold two blocks per SM at 128 registers, and a spill in a
/// main loop costs more than any instruction saved).
const MAY_SPILL: &[(&str, &str)] = &[(
    "matmul_mma16_split",
    "its split-K totals live in local memory between chunks",
)];

/// The entries of [`CUDA_SOURCES`]' PTX that spill on sm_90 without
/// leave in [`MAY_SPILL`], from `ptxas -v`.
fn spills(ptxas: &Path) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for (source, _) in CUDA_SOURCES {
        let file = root().join(source).with_extension("ptx");
        let out = Command::new(ptxas)
            .args(["-v", "-arch=sm_90"])
            .arg(&file)
            .args(["-o", "/dev/null"])
            .output()
            .map_err(|e| format!("ptx: could not start {ptxas:?}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        let mut entry = "";
        for line in text.lines() {
            if let Some(rest) = line.split("Compiling entry function '").nth(1) {
                entry = rest.split('\'').next().unwrap_or("");
            } else if let Some(at) = line.find(" bytes spill stores") {
                let bytes = line[..at]
                    .rsplit(',')
                    .next()
                    .and_then(|w| w.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                if bytes > 0 && !MAY_SPILL.iter().any(|(e, _)| *e == entry) {
                    found.push(format!(
                        "{} (sm_90): `{entry}` spills {bytes} bytes of registers",
                        file.display()
                    ));
                }
            }
        }
    }
    eprintln!(
        "xtask: ptx: the CUDA C++ overrides' entries checked for spills on sm_90, {} spill",
        found.len()
    );
    Ok(found)
}

/// The architecture number of a PTX file's `.target sm_NN` line (the
/// first target named), or `None` without one.
fn ptx_target(ptx: &str) -> Option<u32> {
    ptx.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(".target"))
        .and_then(|rest| rest.split([',', ' ', '\t']).find(|w| w.starts_with("sm_")))
        .and_then(arch_number)
}

/// `sm_80` -> 80 (a suffix such as `sm_90a` is ignored).
fn arch_number(arch: &str) -> Option<u32> {
    let digits: String = arch
        .strip_prefix("sm_")?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// HolisticTraceAnalysis's virtual environment, made once: its Python.
/// `test` starts this on a thread of its own at the beginning, since the
/// download (about two minutes here) waits on the network, not the CPU.
fn hta_prepare() -> Result<PathBuf, String> {
    let venv = target_dir().join("hta-venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        run(
            "hta: virtual environment",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    let marker = venv.join(format!(
        "keel-installed-{}",
        HTA_PACKAGES.join("-").replace(['<', '>', '=', ','], "_")
    ));
    if !marker.exists() {
        run(
            "hta: pip install",
            Command::new(&python)
                .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
                .args(HTA_PACKAGES),
        )?;
        std::fs::write(&marker, "").map_err(|e| format!("writing {marker:?}: {e}"))?;
    }
    Ok(python)
}

/// Step 7: HolisticTraceAnalysis on a trace Keel exported.
fn hta_check(cargo: &str, runtime_dir: &Path, python: &Path) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("keel-hta-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {dir:?}: {e}"))?;
    // Built as the test step builds it (the whole workspace, every
    // feature): cargo unifies dependency features across the packages of
    // one command, so `cargo run --example` alone would build wgpu, naga
    // and Keel's crates again with another feature set.
    run(
        "hta: build record_trace",
        Command::new(cargo)
            .current_dir(root())
            .args(["build", "-q", "--workspace", "--all-features"])
            .args(["--example", "record_trace"]),
    )?;
    let mut record = Command::new(
        target_dir()
            .join("debug/examples")
            .join(format!("record_trace{}", std::env::consts::EXE_SUFFIX)),
    );
    record.current_dir(root()).arg(&dir);
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        record.env("XDG_RUNTIME_DIR", runtime_dir);
    }
    run("hta: record a trace", &mut record)?;
    // HTA reads every .json in the folder; record_trace writes one.
    let result = run(
        "hta: analyses",
        Command::new(python)
            .arg(root().join("xtask").join("hta_check.py"))
            .arg(&dir),
    );
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The test filters step 7 runs on the newer lavapipe: every test of
/// `tests/ops` that runs the cooperative-matrix kernel or checks that the
/// device's configuration picks it.
const COOP_TESTS: &[&str] = &[
    "compute::cooperative_matrix",
    "compute::matmul_picks_its_kernel",
];

/// The environment of the workspace's test run (step 6): the same here,
/// so that a later `cargo test` builds nothing again.
fn test_command(cargo: &str, runtime_dir: &Path, ptxas: &Path) -> Command {
    let mut tests = Command::new(cargo);
    tests
        .args(["test", "--workspace", "--all-features", "--no-fail-fast"])
        .env("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation")
        // keel-wgsl's tests assemble the PTX generated for every kernel.
        .env("KEEL_PTXAS", ptxas);
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        tests.env("XDG_RUNTIME_DIR", runtime_dir);
    }
    tests
}

/// Step 7: the cooperative-matrix tests on a newer lavapipe.
fn coop_check(cargo: &str, runtime_dir: &Path, ptxas: &Path) -> Result<(), String> {
    if !cfg!(target_os = "linux") || !Path::new("/usr/bin/dpkg").exists() {
        eprintln!(
            "xtask: coop: not a Debian-like system, so no newer lavapipe to unpack: \
             the cooperative-matrix kernel runs only where a device has cooperative matrices"
        );
        return Ok(());
    }
    let dest = target_dir().join("newer-lavapipe");
    run(
        "coop: unpack a newer lavapipe",
        Command::new("python3")
            .arg(root().join("xtask").join("newer_lavapipe.py"))
            .arg(&dest),
    )?;
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let runner = format!(
        "CARGO_TARGET_{}_RUNNER",
        triple.to_uppercase().replace('-', "_")
    );
    let icd = dest.join("lvp.json");
    let mut tests = test_command(cargo, runtime_dir, ptxas);
    tests
        .args(["--test", "ops", "--"])
        .args(COOP_TESTS)
        .env(runner, dest.join("run"))
        .env("VK_DRIVER_FILES", &icd)
        .env("VK_ICD_FILENAMES", &icd)
        // The unpacked validation layer, which knows cooperative matrices.
        .env(
            "VK_LAYER_PATH",
            dest.join("root/usr/share/vulkan/explicit_layer.d"),
        )
        .env("KEEL_REQUIRE_COOPERATIVE_MATRIX", "1");
    run(
        "coop: cooperative-matrix tests on the newer lavapipe",
        &mut tests,
    )
}

/// Files whose presence means a Debian package is installed.
const PACKAGES: &[(&str, &[&str])] = &[
    (
        "libvulkan1",
        &[
            "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
            "/usr/lib/aarch64-linux-gnu/libvulkan.so.1",
        ],
    ),
    (
        "mesa-vulkan-drivers",
        &[
            "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
            "/usr/share/vulkan/icd.d/lvp_icd.aarch64.json",
        ],
    ),
    (
        "vulkan-validationlayers",
        &["/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"],
    ),
    // wgpu's GL backend: headless EGL on Mesa's software rasteriser.
    (
        "libegl1",
        &[
            "/usr/lib/x86_64-linux-gnu/libEGL.so.1",
            "/usr/lib/aarch64-linux-gnu/libEGL.so.1",
        ],
    ),
    (
        "libegl-mesa0",
        &[
            "/usr/lib/x86_64-linux-gnu/libEGL_mesa.so.0",
            "/usr/lib/aarch64-linux-gnu/libEGL_mesa.so.0",
        ],
    ),
    (
        "libgl1-mesa-dri",
        &[
            "/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so",
            "/usr/lib/aarch64-linux-gnu/dri/swrast_dri.so",
        ],
    ),
    // The app's real-window test (keel-profiler --screenshot) runs on Xvfb.
    ("xvfb", &["/usr/bin/Xvfb"]),
    (
        "libgles2",
        &[
            "/usr/lib/x86_64-linux-gnu/libGLESv2.so.2",
            "/usr/lib/aarch64-linux-gnu/libGLESv2.so.2",
        ],
    ),
];

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn install_system_packages() -> Result<(), String> {
    if !cfg!(target_os = "linux") || !Path::new("/usr/bin/apt-get").exists() {
        eprintln!(
            "xtask: not a Debian-like system: install a Vulkan driver and the validation layer yourself"
        );
        return Ok(());
    }
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, files)| !files.iter().any(|f| Path::new(f).exists()))
        .map(|(name, _)| *name)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        eprintln!(
            "xtask: missing packages {missing:?}, and not root: install them with `sudo apt-get install {}`",
            missing.join(" ")
        );
        return Ok(());
    }
    run(
        "apt-get update",
        Command::new("apt-get").args(["update", "-q"]),
    )?;
    run(
        "apt-get install",
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing),
    )
}

fn test() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let hta_env = std::thread::spawn(hta_prepare);
    install_system_packages()?;
    run(
        "rustfmt",
        Command::new(&cargo).args(["fmt", "--all", "--", "--check"]),
    )?;
    layers_check(&cargo, false)?;
    run(
        "clippy",
        Command::new(&cargo).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    // One crate per invocation: cargo unifies the features of the crates
    // it builds together, which would hide a crate that does not build
    // alone with these features. Only the CPU backend: with the GPU
    // backends on, wgpu and naga would be checked again under another
    // feature set than the workspace's (a minute here); the backends' code
    // uses nothing that `import` gates, and `deps_check` holds their
    // dependencies.
    for (krate, features) in [
        ("keel-trace", "--no-default-features"),
        ("keel-wgsl", "--no-default-features"),
        ("keel-device", "--no-default-features"),
        ("keel", "--no-default-features"),
    ] {
        run(
            &format!("{krate} {features}"),
            Command::new(&cargo).args(["check", "-q", "-p", krate, features, "--lib"]),
        )?;
    }
    // The library's documentation: no broken or private links, no stray
    // HTML (`<backend>` in prose swallows text).
    run(
        "rustdoc",
        Command::new(&cargo)
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    let ptxas = ptx_check()?;
    // Mesa warns on stderr when XDG_RUNTIME_DIR is unset; give it one.
    let runtime_dir = std::env::temp_dir().join("keel-xdg-runtime");
    std::fs::create_dir_all(&runtime_dir).map_err(|e| format!("creating {runtime_dir:?}: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700));
    }
    let mut tests = test_command(&cargo, &runtime_dir, &ptxas);
    let xvfb = start_xvfb();
    if let Some((display, _)) = &xvfb {
        tests.env("DISPLAY", display);
    }
    let result = run("tests", &mut tests);
    if let Some((_, mut child)) = xvfb {
        stop_xvfb(&mut child);
    }
    result?;
    coop_check(&cargo, &runtime_dir, &ptxas)?;
    let python = hta_env
        .join()
        .map_err(|_| "hta: preparing the environment panicked".to_owned())??;
    hta_check(&cargo, &runtime_dir, &python)
}

/// Whether X display `:n` is held by a running server: its lock file names
/// a live process, or it has a socket and no lock.
fn display_in_use(n: u32) -> bool {
    let socket = Path::new(&format!("/tmp/.X11-unix/X{n}")).exists();
    match std::fs::read_to_string(format!("/tmp/.X{n}-lock")) {
        Ok(lock) => match lock.trim().parse::<u32>() {
            Ok(pid) => Path::new(&format!("/proc/{pid}")).exists(),
            // A lock being written, or one we cannot read: held.
            Err(_) => true,
        },
        Err(_) => socket,
    }
}

/// Stops an Xvfb started here with SIGTERM, so that it removes its lock
/// file and socket (`Child::kill` sends SIGKILL, which leaves both
/// behind); SIGKILL only if that fails.
fn stop_xvfb(child: &mut std::process::Child) {
    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    if !terminated {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Starts `Xvfb :99` when there is no `DISPLAY` (and Xvfb is installed), so
/// the app's window test has an X server. Returns the display and process.
fn start_xvfb() -> Option<(String, std::process::Child)> {
    if std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty()) {
        return None;
    }
    let xvfb = Path::new("/usr/bin/Xvfb");
    if !xvfb.exists() {
        eprintln!("xtask: no DISPLAY and no Xvfb: the window test will skip");
        return None;
    }
    // The first display from :99 that no live server holds: a server
    // killed without the chance to clean up leaves its lock file (holding
    // its pid) and socket behind, and Xvfb replaces both when that pid is
    // gone.
    let Some(n) = (99..140).find(|&n| !display_in_use(n)) else {
        eprintln!("xtask: no free X display in :99..:139: the window test starts its own Xvfb");
        return None;
    };
    let display = format!(":{n}");
    let socket = format!("/tmp/.X11-unix/X{n}");
    let socket = Path::new(&socket);
    let child = Command::new(xvfb)
        .args([
            display.as_str(),
            "-screen",
            "0",
            "1600x1000x24",
            "-nolisten",
            "tcp",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xtask: could not start Xvfb: {e}");
            return None;
        }
    };
    for _ in 0..100 {
        if socket.exists() {
            eprintln!("xtask: started Xvfb on {display}");
            return Some((display, child));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!("xtask: Xvfb did not come up on {display}");
    let mut child = child;
    stop_xvfb(&mut child);
    None
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("layers") => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            layers_check(&cargo, true)
        }
        Some("ptx") => ptx_check().map(|_| ()),
        Some("mma-ptx") => mma_ptx(args.get(1).is_some_and(|a| a == "--check")),
        Some("coop") => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let runtime_dir = std::env::temp_dir().join("keel-xdg-runtime");
            ptxas().and_then(|ptxas| coop_check(&cargo, &runtime_dir, &ptxas))
        }
        Some("hta") => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let runtime_dir = std::env::temp_dir().join("keel-xdg-runtime");
            hta_prepare().and_then(|python| hta_check(&cargo, &runtime_dir, &python))
        }
        other => Err(format!(
            "expected a task (test, layers, ptx, mma-ptx, coop, hta), found {}",
            other.map_or("nothing".to_owned(), |o| format!("'{o}'"))
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ptx_target_sets_the_oldest_architecture() {
        assert_eq!(
            ptx_target(".version 7.0\n.target sm_80\n.address_size 64\n"),
            Some(80)
        );
        assert_eq!(ptx_target("  .target sm_90a, debug\n"), Some(90));
        assert_eq!(ptx_target(".version 7.0\n"), None);
        assert_eq!(arch_number("sm_70"), Some(70));
        assert_eq!(arch_number("compute_70"), None);
        // The repository's tensor-core kernel is not meant for sm_70.
        let mma = std::fs::read_to_string(root().join("shaders/compute/matmul_mma.ptx"))
            .expect("matmul_mma.ptx");
        assert_eq!(ptx_target(&mma), Some(80));
    }
}
