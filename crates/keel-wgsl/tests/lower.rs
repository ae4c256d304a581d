//! Every kernel Keel ships lowers, and what the lowering rejects it
//! rejects with a message and a place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Shipped kernels that only Vulkan and wgpu devices with cooperative
/// matrices run: the ends refuse them, saying why.
const COOPERATIVE: &[&str] = &["shaders/compute/matmul_coop.wgsl"];

/// Keel's kernel sources for the ends: every `.wgsl` with an entry point,
/// the matmul kernels with their shared prefix, but [`COOPERATIVE`].
fn sources() -> Vec<(String, String)> {
    all_sources()
        .into_iter()
        .filter(|(file, _)| !COOPERATIVE.contains(&file.as_str()))
        .collect()
}

/// Every shipped kernel source, [`COOPERATIVE`] among them.
fn all_sources() -> Vec<(String, String)> {
    let root = root();
    let mut out = Vec::new();
    let prefix = |names: &[&str]| -> String {
        names
            .iter()
            .map(|n| {
                std::fs::read_to_string(root.join("shaders/compute").join(n)).unwrap_or_default()
            })
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
            let name = f
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_owned();
            let text = std::fs::read_to_string(&f).expect("kernel source");
            if !text.contains("@compute") {
                continue;
            }
            let text = match name.as_str() {
                "matmul_tiled.wgsl" | "matmul_naive.wgsl" | "matmul_tiled_4x4.wgsl" => {
                    prefix(&["rounding.wgsl", "matmul_bindings.wgsl"]) + &text
                }
                "matmul_coop.wgsl" => {
                    // Both fragment sizes; the one for 16 below.
                    let eight = ["coop_matrix.wgsl", "coop_fragment8.wgsl"];
                    out.push((format!("{dir}/{name}"), prefix(&eight) + &text));
                    let sixteen = ["coop_matrix.wgsl", "coop_fragment16.wgsl"];
                    prefix(&sixteen) + &text
                }
                "cast.wgsl" | "matmul_round_inputs.wgsl" => prefix(&["rounding.wgsl"]) + &text,
                "cast_f16_narrow.wgsl" | "matmul_coop_pack.wgsl" => {
                    text + &prefix(&["rounding.wgsl"])
                }
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

/// The cooperative-matrix kernels parse, and the ends refuse them with
/// an error that names cooperative matrices.
#[test]
fn cooperative_matrix_kernels_are_refused_by_name() {
    let all = all_sources();
    for file in COOPERATIVE {
        let texts: Vec<&String> = all
            .iter()
            .filter(|(f, _)| f == file)
            .map(|(_, t)| t)
            .collect();
        assert!(!texts.is_empty(), "{file} is shipped");
        for text in texts {
            let module = naga::front::wgsl::parse_str(text).expect("Keel's WGSL parses");
            assert!(!module.entry_points.is_empty(), "{file}");
            for ep in &module.entry_points {
                let e = keel_wgsl::compile(text, &ep.name).expect_err("refused");
                assert!(e.message.contains("cooperative matrices"), "{file}: {e}");
            }
        }
    }
}

/// The PTX of every entry point of the shipped sources whose file name
/// `keep` takes: (file, entry, PTX).
fn shipped_ptx(keep: impl Fn(&str) -> bool) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (file, text) in sources().into_iter().filter(|(f, _)| keep(f)) {
        let module = naga::front::wgsl::parse_str(&text).expect("Keel's WGSL parses");
        for ep in &module.entry_points {
            let program = keel_wgsl::compile(&text, &ep.name).expect("lowers");
            let ptx = keel_wgsl::ptx::emit(&program).expect("prints");
            out.push((file.clone(), ep.name.clone(), ptx));
        }
    }
    out
}

/// The register tokens of PTX text (`%r1`, `%tid.x`, the `%td0` of
/// `[%td0+8]`), in order.
fn registers(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '_' | '.')))
        .filter(|t| t.starts_with('%'))
        .map(str::to_string)
        .collect()
}

/// `ptxas` from `KEEL_PTXAS`, or `None` (and a printed reason).
fn ptxas() -> Option<PathBuf> {
    match std::env::var_os("KEEL_PTXAS").map(PathBuf::from) {
        Some(p) if p.is_file() => Some(p),
        _ => {
            println!("skipped: ptxas not found (set KEEL_PTXAS)");
            None
        }
    }
}

/// Every shipped kernel and corpus kernel prints as PTX, and `ptxas`
/// assembles each for sm_70, sm_80 and sm_90 (where `KEEL_PTXAS` names
/// it; `cargo xtask test` does), the random kernels as Keel runs them:
/// with strict floating point.
#[test]
fn every_shipped_kernel_prints_as_ptx_that_ptxas_accepts() {
    let dir = std::env::temp_dir().join(format!("keel-wgsl-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary folder");
    let ptxas = ptxas();
    let mut failures = Vec::new();
    let mut assembled = 0;
    for (file, text) in sources() {
        let module = naga::front::wgsl::parse_str(&text).expect("Keel's WGSL parses");
        // Keel runs the random kernels with strict floating point.
        let options = if file.ends_with("philox.wgsl") {
            keel_wgsl::ptx::Options::strict()
        } else {
            keel_wgsl::ptx::Options::default()
        };
        for ep in &module.entry_points {
            let program = keel_wgsl::compile(&text, &ep.name).expect("lowers");
            let ptx = match keel_wgsl::ptx::emit_with(&program, &options) {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{file} `{}`: {e}", ep.name));
                    continue;
                }
            };
            assert!(ptx.contains(&format!(".entry {}(", ep.name)), "{}", ep.name);
            let Some(ptxas) = &ptxas else { continue };
            let path = dir.join(format!("{}.ptx", ep.name));
            std::fs::write(&path, &ptx).expect("write PTX");
            for arch in ["sm_70", "sm_80", "sm_90"] {
                let out = std::process::Command::new(ptxas)
                    .args(["-arch", arch, "-o"])
                    .arg(dir.join("out.cubin"))
                    .arg(&path)
                    .output()
                    .expect("ptxas runs");
                if out.status.success() {
                    assembled += 1;
                } else {
                    failures.push(format!(
                        "{file} `{}` ({arch}): {}",
                        ep.name,
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if ptxas.is_some() {
        println!("ptxas assembled {assembled} files");
        assert!(assembled >= 90, "assembled {assembled}");
    }
}

/// The float add, subtract and multiply of a PTX line (`add.f32`,
/// `mul.f16`, with or without `.rn`), or `None`.
fn float_arithmetic(line: &str) -> Option<&str> {
    let inst = line.split_whitespace().next()?;
    let op = inst.split('.').next()?;
    let ty = inst.rsplit('.').next()?;
    (matches!(op, "add" | "sub" | "mul") && matches!(ty, "f32" | "f16")).then_some(inst)
}

/// Printed with strict floating point, every shipped kernel rounds each
/// float add, subtract and multiply on its own (`.rn`, which ptxas never
/// contracts into an FMA), and nothing else changes: the plain printing
/// is the same text without those modifiers.
#[test]
fn strict_ptx_rounds_every_float_add_subtract_and_multiply() {
    let mut unrounded_plain = 0;
    for (file, text) in sources() {
        let module = naga::front::wgsl::parse_str(&text).expect("Keel's WGSL parses");
        for ep in &module.entry_points {
            let program = keel_wgsl::compile(&text, &ep.name).expect("lowers");
            let plain = keel_wgsl::ptx::emit(&program).expect("prints");
            let strict = keel_wgsl::ptx::emit_with(&program, &keel_wgsl::ptx::Options::strict())
                .expect("prints strict");
            let loose: Vec<&str> = strict
                .lines()
                .filter_map(float_arithmetic)
                .filter(|inst| !inst.contains(".rn"))
                .collect();
            assert!(loose.is_empty(), "{file} `{}`: {loose:?}", ep.name);
            unrounded_plain += plain
                .lines()
                .filter_map(float_arithmetic)
                .filter(|inst| !inst.contains(".rn"))
                .count();
            // Line by line, the same text, or the plain line's unrounded
            // operation with `.rn` added.
            let rounded = |line: &str| match float_arithmetic(line) {
                Some(inst) if !inst.contains(".rn") => {
                    let (op, ty) = inst.split_once('.').expect("op.type");
                    line.replacen(inst, &format!("{op}.rn.{ty}"), 1)
                }
                _ => line.to_owned(),
            };
            let same = strict.lines().count() == plain.lines().count()
                && strict
                    .lines()
                    .zip(plain.lines())
                    .all(|(s, p)| s == rounded(p));
            assert!(
                same,
                "{file} `{}`: strict printing changes more than rounding modifiers",
                ep.name
            );
        }
    }
    // The plain printing leaves ptxas its contractions.
    assert!(unrounded_plain > 1000, "{unrounded_plain}");
}

/// The printed PTX of every shipped kernel holds no arithmetic whose
/// result nothing reads (the IR's byte offsets where addresses come from
/// element indices, the checks the guard rewrites replace: people read
/// this PTX), and every register it reads is written somewhere in it, so
/// that leaving code out never leaves a value undefined.
#[test]
fn printed_ptx_computes_nothing_unread_and_reads_nothing_unwritten() {
    // Opcodes without side effects whose first operand is their result.
    const PURE: [&str; 24] = [
        "add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max", "neg", "abs", "and", "or",
        "xor", "not", "shl", "shr", "setp", "selp", "cvt", "mov", "ex2", "lg2", "rcp",
    ];
    let mut unread = Vec::new();
    let mut unwritten = Vec::new();
    for (file, entry, ptx) in shipped_ptx(|_| true) {
        let body = ptx.split_once("\n{\n").map_or("", |(_, b)| b);
        let mut reads: HashMap<String, usize> = HashMap::new();
        let mut written: Vec<String> = Vec::new();
        let mut pure: Vec<(String, String)> = Vec::new();
        for line in body.lines().map(str::trim) {
            if line.is_empty() || line.starts_with("//") || line.starts_with('.') {
                continue;
            }
            let (guard, inst) = match line.strip_prefix('@') {
                Some(rest) => rest.split_once(' ').unwrap_or((rest, "")),
                None => ("", line),
            };
            for g in registers(guard) {
                *reads.entry(g).or_default() += 1;
            }
            let (op, operands) = inst.split_once(' ').unwrap_or((inst, ""));
            // An instruction's first operand is its result (a vector's
            // registers in braces), but a store's, a branch's and a
            // barrier's.
            let writes = !["st.", "bra", "bar", "ret", "red."]
                .iter()
                .any(|p| op.starts_with(p));
            let (first, rest) = match operands.strip_prefix('{') {
                Some(v) => v.split_once('}').unwrap_or((v, "")),
                None => operands.split_once(',').unwrap_or((operands, "")),
            };
            let (dsts, srcs) = if writes {
                (registers(first), registers(rest))
            } else {
                (Vec::new(), registers(operands))
            };
            if guard.is_empty()
                && PURE.contains(&op.split('.').next().unwrap_or(""))
                && let [dst] = &dsts[..]
            {
                pure.push((dst.clone(), line.to_string()));
            }
            written.extend(dsts);
            for r in srcs {
                *reads.entry(r).or_default() += 1;
            }
        }
        let what = format!("{file} `{entry}`");
        for (dst, line) in pure {
            if !reads.contains_key(&dst) {
                unread.push(format!("{what}: {line}"));
            }
        }
        // PTX's special registers (`%tid.x`, `%laneid`, ...) are
        // read only.
        let special = |r: &str| r.contains('.') || ["%laneid", "%warpid", "%clock"].contains(&r);
        for r in reads.keys() {
            if !written.contains(r) && !special(r) {
                unwritten.push(format!("{what}: {r}"));
            }
        }
    }
    assert!(
        unread.is_empty(),
        "{} instructions whose result nothing reads, the first: {:?}",
        unread.len(),
        &unread[..unread.len().min(5)]
    );
    assert!(
        unwritten.is_empty(),
        "registers read but never written: {:?}",
        &unwritten[..unwritten.len().min(5)]
    );
}

/// The Philox kernels promise the same bits on every device, so no f32
/// product of theirs may reach an add unfenced. Keel runs them with
/// strict floating point where an API can say it (CUDA's `.rn`, SPIR-V's
/// `NoContraction`); wgpu's GL, Metal and DX12 adapters have only the
/// source's fences. Their PTX printed plain is where a missing fence
/// shows without a GPU: ptxas contracts a `mul.f32` whose result an
/// `add.f32` or `sub.f32` reads into one FMA, which rounds once where the
/// host rounds twice. `philox.wgsl` passes every such product through
/// `fence`; this finds one that does not.
#[test]
fn philox_ptx_leaves_ptxas_no_product_to_fuse() {
    let operands = |line: &str| registers(line.split_once(' ').map_or("", |(_, o)| o));
    let mut checked = 0;
    for (_, entry, ptx) in shipped_ptx(|f| f.ends_with("random/philox.wgsl")) {
        let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
        let op = |line: &str| line.split(' ').next().unwrap_or("").to_string();
        // Products, and what copies or negates one.
        let mut products: Vec<String> = Vec::new();
        loop {
            let before = products.len();
            for line in &lines {
                let o = operands(line);
                let Some(dst) = o.first() else { continue };
                let from_product = match op(line).as_str() {
                    "mul.f32" => true,
                    "mov.f32" | "neg.f32" => o.get(1).is_some_and(|s| products.contains(s)),
                    _ => false,
                };
                if from_product && !products.contains(dst) {
                    products.push(dst.clone());
                }
            }
            if products.len() == before {
                break;
            }
        }
        let mut adds = 0;
        for line in &lines {
            if matches!(op(line).as_str(), "add.f32" | "sub.f32") {
                adds += 1;
                let fused = operands(line).iter().skip(1).any(|s| products.contains(s));
                assert!(!fused, "`{entry}`: ptxas may fuse into `{line}`");
            }
        }
        if !products.is_empty() && adds > 0 {
            checked += 1;
        }
    }
    // randn, normal_ and normal_'s plain variant multiply and add.
    assert!(checked >= 3, "{checked} kernels with products and adds");
}

/// A construct the ends do not cover is an error that names it and says
/// where it is, never a wrong program.
#[test]
fn uncovered_constructs_are_errors_with_a_place() {
    let cases = [
        (
            "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
             @group(0) @binding(1) var t: texture_2d<f32>;\n\
             @compute @workgroup_size(1) fn k() {\n\
             \x20   out[0] = u32(textureLoad(t, vec2(0, 0), 0).x);\n}\n",
            "texture",
        ),
        (
            "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
             @compute @workgroup_size(1) fn k() {\n\
             \x20   out[0] = ldexp(out[1], 3);\n}\n",
            "Ldexp",
        ),
        (
            "@group(1) @binding(0) var<storage, read_write> out: array<u32>;\n\
             @compute @workgroup_size(1) fn k() { out[0] = 1u; }\n",
            "@group(1)",
        ),
        (
            "enable wgpu_cooperative_matrix;\n\
             @group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
             alias Frag = coop_mat16x16<f32, C>;\n\
             @compute @workgroup_size(32) fn k() {\n\
             \x20   coopStoreT(Frag(), &out[0], 16u);\n}\n",
            "cooperative matrices",
        ),
    ];
    for (src, what) in cases {
        let e = keel_wgsl::compile(src, "k").expect_err("not covered");
        assert!(e.message.contains(what), "{e}");
        if what == "Ldexp" {
            // Errors inside a function carry the line and column.
            assert_eq!(e.location.map(|l| l.0), Some(3), "{e}");
        }
        if what == "cooperative matrices" {
            // The place of the type.
            assert_eq!(e.location.map(|l| l.0), Some(3), "{e}");
        }
    }
    let e = keel_wgsl::compile("@compute @workgroup_size(1) fn k() {}", "main")
        .expect_err("no such entry point");
    assert!(e.to_string().contains("`k`"), "{e}");
    let e = keel_wgsl::compile("fn broken( {", "k").expect_err("does not parse");
    assert!(e.to_string().starts_with("1:"), "{e}");
}

/// A local array passed by pointer to a function that indexes it at run
/// time lives in memory, though the caller indexes it only by constants.
#[test]
fn a_local_indexed_in_a_callee_works() {
    let src = "
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
fn put(a: ptr<function, array<u32, 4>>, i: u32, v: u32) { (*a)[i] = v; }
@compute @workgroup_size(1)
fn k() {
    var arr: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) { put(&arr, i, i * 7u); }
    out[0] = arr[0]; out[1] = arr[1]; out[2] = arr[2]; out[3] = arr[3];
}";
    assert_eq!(run_one(src, [0; 4]), [0, 7, 14, 21]);
}

/// Runs entry point `k` of `src` as one invocation on the host over a
/// buffer of four words starting as `words`, and returns them.
fn run_one(src: &str, words: [u32; 4]) -> Vec<u32> {
    let p = keel_wgsl::compile(src, "k").expect("compiles");
    let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    keel_wgsl::host::run(
        &p,
        [1, 1, 1],
        &mut [&mut out[..]],
        &[],
        &keel_wgsl::host::HostOptions::default(),
    )
    .expect("runs");
    out.chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A constant struct built in a function body (which naga leaves out of
/// every `Emit`) is usable first inside a branch and again after it.
#[test]
fn a_constant_composite_in_a_function_body_works() {
    let src = "
struct Pair { a: u32, b: i32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
fn pick(x: u32) -> Pair {
    var t = Pair(0u, 0);
    if x > 1u {
        t = Pair(x, -2);
        t.b += 5;
    }
    let z = vec2<u32>(3u, 4u).yx;
    return Pair(t.a + z.x, t.b + i32(z.y));
}
@compute @workgroup_size(1)
fn k() {
    let p = pick(out[0]);
    let q = pick(0u);
    out[0] = p.a; out[1] = u32(p.b); out[2] = q.a; out[3] = u32(q.b);
}";
    assert_eq!(run_one(src, [9, 0, 0, 0]), [13, 6, 4, 3]);
}

/// Every Philox kernel (`shaders/random/philox.wgsl`) multiplies with
/// `mul.hi.u32`: the pass that finds the high word written from 16-bit
/// halves still finds the shipped form, two products a round.
#[test]
fn shipped_philox_kernels_take_the_high_word_in_one_multiply() {
    let src = std::fs::read_to_string(root().join("shaders/random/philox.wgsl")).expect("read");
    for entry in ["philox_u32", "philox_rand", "philox_randn", "philox_normal"] {
        let program = keel_wgsl::compile(&src, entry).expect("compiles");
        let ptx = keel_wgsl::ptx::emit(&program).expect("PTX");
        let n = ptx.matches("mul.hi.u32").count();
        assert!(n >= 2, "{entry}: {n} mul.hi.u32");
        assert!(
            !ptx.contains("0x0000FFFF"),
            "{entry}: a 16-bit half is left"
        );
    }
}
