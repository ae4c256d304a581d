//! The Rust end: real WGSL kernels translated ahead of time into
//! `tests/generated/mod.rs` (checked in, and checked here to be what the
//! translator prints today), compiled with this test, and run against the
//! interpreter on the same inputs: the outputs must be the same bits.

use keel_wgsl::host::{self, HostOptions};
use keel_wgsl::ir::Program;
use keel_wgsl::native::Kernel;
use keel_wgsl::rust::emit_module;

mod generated;

/// An atomics kernel without workgroup memory or barriers (the
/// conformance corpus's `atomics.wgsl` has both): every read-modify-write,
/// signed and unsigned, guarded and not, with results that do not depend
/// on the order of the invocations.
const ATOMICS: &str = r"
@group(0) @binding(0) var<storage, read_write> counters: array<atomic<u32>, 4>;
@group(0) @binding(1) var<storage, read_write> signed: array<atomic<i32>, 2>;
@group(0) @binding(2) var<storage, read_write> slots: array<atomic<u32>>;
@compute @workgroup_size(64)
fn atomics_global(@builtin(global_invocation_id) g: vec3<u32>) {
    atomicAdd(&counters[0], 1u);
    atomicMax(&counters[1], g.x);
    atomicOr(&counters[2], 1u << (g.x % 32u));
    atomicXor(&counters[3], g.x * 2654435761u);
    atomicMin(&signed[0], -i32(g.x));
    atomicSub(&signed[1], i32(g.x));
    atomicMax(&signed[1], -1000000);
    let old = atomicExchange(&slots[g.x], g.x + 7u);
    let r = atomicCompareExchangeWeak(&slots[g.x + 700u], old, 5u);
    atomicStore(&slots[g.x + 2000u], select(0u, 1u, r.exchanged) + atomicLoad(&slots[g.x]));
    atomicAnd(&slots[g.x + 1400u], old);
}
";

/// Accesses the windowed path takes or leaves, and the workgroups where it
/// must fall back: a two-dimensional workgroup, an index that runs
/// backwards, a stride with an offset, a gather (whose index read is
/// windowed but whose read is not), a `u32` index that wraps inside a
/// workgroup for a large `shift`, an `i32` index that is negative for the
/// first invocations (a guard besides the bounds), and `vec4` accesses
/// with one bounds guard for four words. Each invocation writes only its
/// own elements, so the order of the invocations does not matter.
const WINDOWS: &str = r"
struct Params { n: u32, shift: u32, back: i32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> reversed: array<f32>;
@group(0) @binding(3) var<storage, read_write> strided: array<f32>;
@group(0) @binding(4) var<storage, read_write> shifted: array<f32>;
@group(0) @binding(5) var<storage, read_write> quads: array<vec4<u32>>;
@group(0) @binding(6) var<uniform> p: Params;
@compute @workgroup_size(8, 4)
fn windows(
    @builtin(local_invocation_id) l: vec3<u32>,
    @builtin(workgroup_id) w: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let t = ((w.y * groups.x + w.x) * 4u + l.y) * 8u + l.x;
    if t >= p.n {
        return;
    }
    reversed[p.n - 1u - t] = a[t] * 2.0;
    strided[2u * t + 1u] += a[idx[t] % 64u];
    shifted[i32(t) - p.back] = a[t + p.shift];
    let q = quads[t];
    quads[t] = q.wzyx + vec4<u32>(t);
    // Signed conditions, one with the bound on the left: settled per
    // workgroup where every invocation agrees (with `t < n`), tested
    // where they differ.
    let s = i32(t) - p.back;
    if s > p.back - 40 {
        strided[2u * t] = f32(s);
    }
    if p.back + 3000 >= s {
        strided[2u * t] += 0.5;
    }
}
";

/// An elementwise add written `shift` elements along: where `shift` is a
/// multiple of 256, each workgroup's window of `out` is the part of it
/// the workgroup owns; otherwise none is, and every workgroup runs after
/// the parted pass, on the shared words.
const SHIFTED: &str = r"
struct Params { n: u32, shift: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
@compute @workgroup_size(256)
fn shifted(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < p.n {
        out[i + p.shift] = a[i] + b[i];
    }
}
";

/// Barriers where the translation prints its workgroup in phases: a
/// two-dimensional workgroup that returns as a whole before its first
/// barrier, a tile in workgroup memory read transposed, a loop holding
/// barriers that skips rounds (`continue`) and ends early (`break`), an
/// `if` and `else` that both hold barriers, one through a function that
/// returns before its own barriers in some workgroups, values carried
/// across barriers, and a workgroup atomic.
const BARRIERS: &str = r"
struct Params { n: u32, rounds: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> counts: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;
var<workgroup> tile: array<f32, 32>;
var<workgroup> hits: atomic<u32>;

fn mix(l: u32, skip: bool) -> f32 {
    if skip {
        return -1.0;
    }
    let mine = tile[l] + tile[(l + 1u) % 32u];
    workgroupBarrier();
    tile[l] = mine;
    workgroupBarrier();
    return tile[(l + 3u) % 32u];
}

@compute @workgroup_size(8, 4)
fn barriers(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) l: u32,
    @builtin(workgroup_id) w: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let g = w.y * groups.x + w.x;
    if g * 32u >= p.n {
        return;
    }
    let t = g * 32u + l;
    let v = a[t];
    tile[l] = v;
    workgroupBarrier();
    let transposed = tile[lid.x * 4u + lid.y];
    workgroupBarrier();
    var acc = 0.0;
    for (var r = 0u; r < 100u; r++) {
        if r >= p.rounds {
            break;
        }
        if r % 3u == 1u {
            continue;
        }
        tile[l] = acc + v * f32(r + 1u);
        workgroupBarrier();
        acc += tile[31u - l];
        atomicAdd(&hits, 1u);
        workgroupBarrier();
    }
    var m: f32;
    if g % 2u == 0u {
        tile[l] = transposed;
        workgroupBarrier();
        m = tile[(l + 5u) % 32u];
    } else {
        m = mix(l, g % 4u == 3u);
    }
    workgroupBarrier();
    if t < p.n {
        out[t] = acc + m + transposed;
    }
    if l == 0u {
        counts[g] = atomicLoad(&hits);
    }
}
";

/// A private array indexed at run time whose values an invocation keeps
/// across a barrier: each invocation has its own copy in every phase.
const PRIVATE: &str = r"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
var<workgroup> seen: array<u32, 64>;
@compute @workgroup_size(64)
fn private_barrier(@builtin(local_invocation_index) l: u32, @builtin(workgroup_id) w: vec3<u32>) {
    var keep: array<u32, 8>;
    let base = w.x * 64u + l;
    for (var i = 0u; i < 8u; i++) {
        keep[(out[base] + i) % 8u] += l * 8u + i;
    }
    seen[l] = keep[out[base] % 8u];
    workgroupBarrier();
    out[base] = keep[seen[63u - l] % 8u] + seen[(l + 1u) % 64u];
}
";

/// Subgroup operations where the translation prints its workgroup in
/// phases: workgroups of 80 (two whole subgroups and half of one),
/// float sums whose order shows in the bits, scans, shuffles, a ballot,
/// and operations in an `if` and a loop that only some invocations
/// enter, where only those take part.
const SUBGROUPS: &str = r"
struct P { n: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(80)
fn subgroup_mix(
    @builtin(local_invocation_index) l: u32,
    @builtin(workgroup_id) w: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
) {
    let t = w.x * 80u + l;
    let x = a[t];
    let s = subgroupAdd(x);
    let inc = subgroupInclusiveAdd(x);
    let ex = subgroupExclusiveMul(i32(lane) - 3);
    let mn = subgroupMin(i32(t % 7u) - 3);
    let mx = subgroupMax(x);
    let sh = subgroupShuffle(x, (lane * 5u) % size);
    let dn = subgroupShuffleDown(t, lane % 4u);
    let up = subgroupShuffleUp(t, 3u);
    var odd = 0u;
    if (t + p.n) % 3u == 0u {
        odd = subgroupAdd(lane) + subgroupBallot(x > 0.0).x;
    }
    var acc = 0.0;
    for (var k = 0u; k < (t + p.n) % 5u; k++) {
        acc += subgroupAdd(f32(k) + x);
    }
    let base = 8u * t;
    out[base] = bitcast<u32>(s);
    out[base + 1u] = bitcast<u32>(inc);
    out[base + 2u] = bitcast<u32>(ex) ^ bitcast<u32>(mn);
    out[base + 3u] = bitcast<u32>(mx) ^ bitcast<u32>(sh);
    out[base + 4u] = dn * 65536u + up;
    out[base + 5u] = odd;
    out[base + 6u] = bitcast<u32>(acc);
    out[base + 7u] = select(0u, 1u, subgroupAll(x < 7.5)) + select(0u, 2u, subgroupAny(x > 7.5));
}
";

/// The source and entry point of every kernel the generated module holds.
fn sources() -> Vec<(String, &'static str)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let read = |path: &str| {
        std::fs::read_to_string(format!("{root}/{path}"))
            .unwrap_or_else(|e| panic!("reading {path}: {e}"))
    };
    let device = |f: &str| read(&format!("crates/keel-device/shaders/{f}"));
    let corpus = |f: &str| {
        read(&format!(
            "crates/keel-device/src/testing/conformance/wgsl/{f}"
        ))
    };
    let rounding = read("shaders/compute/rounding.wgsl");
    let philox = read("shaders/random/philox.wgsl");
    let mut out = vec![
        (device("vector_add.wgsl"), "vector_add"),
        (device("saxpy.wgsl"), "saxpy"),
        (device("spin.wgsl"), "spin"),
        (read("shaders/ops/add.wgsl"), "add_f32"),
        (read("shaders/ops/fill.wgsl"), "fill_f32"),
        (
            format!("{rounding}\n{}", read("shaders/ops/cast.wgsl")),
            "cast_f32_half",
        ),
        (
            format!(
                "{rounding}\n{}\n{}",
                read("shaders/compute/matmul_bindings.wgsl"),
                read("shaders/compute/matmul_naive.wgsl")
            ),
            "matmul_naive",
        ),
    ];
    for entry in [
        "philox_u32",
        "philox_u32_wg64",
        "philox_rand",
        "philox_rand_wg64",
        "philox_randn",
        "philox_uniform",
        "philox_normal",
        "philox_normal_plain",
        "philox_randint",
    ] {
        out.push((philox.clone(), entry));
    }
    for name in [
        "scalars",
        "struct_layout",
        "control",
        "builtins",
        "semantics",
        "math",
        "halves",
    ] {
        out.push((corpus(&format!("{name}.wgsl")), name));
    }
    out.push((ATOMICS.to_string(), "atomics_global"));
    out.push((WINDOWS.to_string(), "windows"));
    out.push((SHIFTED.to_string(), "shifted"));
    for name in ["shared_sum", "atomics"] {
        out.push((corpus(&format!("{name}.wgsl")), name));
    }
    out.push((read("shaders/compute/sum.wgsl"), "sum_shared"));
    out.push((read("shaders/compute/softmax_rows.wgsl"), "softmax_rows"));
    out.push((BARRIERS.to_string(), "barriers"));
    out.push((PRIVATE.to_string(), "private_barrier"));
    out.push((SUBGROUPS.to_string(), "subgroup_mix"));
    out.push((corpus("subgroups.wgsl"), "subgroups"));
    out.push((read("shaders/compute/sum_subgroup.wgsl"), "sum_subgroup"));
    out
}

fn programs() -> Vec<Program> {
    sources()
        .iter()
        .map(|(src, entry)| {
            keel_wgsl::compile(src, entry).unwrap_or_else(|e| panic!("compiling `{entry}`: {e}"))
        })
        .collect()
}

/// `text` through `rustfmt --edition 2024`, as the checked-in file is.
fn rustfmt(text: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("rustfmt runs (rustup component add rustfmt)");
    child
        .stdin
        .take()
        .expect("rustfmt's stdin is piped")
        .write_all(text.as_bytes())
        .expect("rustfmt reads the module");
    let out = child.wait_with_output().expect("rustfmt finishes");
    assert!(
        out.status.success(),
        "rustfmt failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("rustfmt prints UTF-8")
}

#[test]
fn generated_module_is_current() {
    let text = rustfmt(&emit_module(&programs()).expect("every kernel translates"));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/generated/mod.rs");
    if std::env::var_os("KEEL_BLESS").is_some() {
        std::fs::write(path, &text).expect("writing tests/generated/mod.rs");
        return;
    }
    let current = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        current == text,
        "tests/generated/mod.rs is stale: regenerate it with \
         `KEEL_BLESS=1 cargo test -p keel-wgsl --test rust generated_module_is_current`"
    );
}

#[test]
fn emission_is_deterministic() {
    let p = programs();
    assert_eq!(emit_module(&p), emit_module(&p));
}

/// A small deterministic generator of test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }

    /// A word holding a finite `f32` in [-8, 8), or now and then a small
    /// integer: every kernel's buffers get the same data, which must be
    /// meaningful as floats (no NaN inputs, whose payloads an add may
    /// pick from either operand) and as integers.
    fn word(&mut self) -> u32 {
        let r = self.next();
        if r.is_multiple_of(8) {
            r % 64
        } else {
            ((r as f32 / u32::MAX as f32) * 16.0 - 8.0).to_bits()
        }
    }
}

/// How one kernel is launched in the comparison.
struct Case {
    name: &'static str,
    /// Parameter blocks, as words.
    params: Vec<Vec<u32>>,
    grids: Vec<[u32; 3]>,
}

fn f(x: f32) -> u32 {
    x.to_bits()
}

fn cases() -> Vec<Case> {
    let g1 = |n: u32| [n, 1, 1];
    let elementwise = vec![g1(1), g1(4), g1(9), [3, 2, 1]];
    let mut out = vec![
        Case {
            name: "vector_add",
            params: vec![vec![1000], vec![2048], vec![3000]],
            grids: elementwise.clone(),
        },
        Case {
            name: "add_f32",
            params: vec![vec![1000], vec![2048], vec![3000]],
            grids: elementwise.clone(),
        },
        Case {
            name: "saxpy",
            params: vec![vec![1000, f(1.5)], vec![2100, f(-0.25)]],
            grids: elementwise.clone(),
        },
        Case {
            name: "spin",
            params: vec![vec![500, 7], vec![64, 0]],
            grids: vec![g1(3), g1(9)],
        },
        Case {
            name: "fill_f32",
            params: vec![vec![1000, f(3.5)], vec![5000, f(-1.0)]],
            grids: elementwise.clone(),
        },
        Case {
            name: "cast_f32_half",
            params: (0..4).map(|mode| vec![1500, mode]).collect(),
            grids: vec![g1(1), g1(6), g1(9)],
        },
        Case {
            name: "matmul_naive",
            params: vec![
                vec![20, 17, 23, 0, 0],
                vec![31, 9, 40, 1, 4],
                vec![16, 16, 16, 2, 8],
            ],
            grids: vec![g1(1), [2, 2, 1], [3, 2, 1]],
        },
        Case {
            name: "scalars",
            params: vec![vec![f(1.25), -3i32 as u32, 77], vec![f(-0.0), 9, 1 << 31]],
            grids: vec![g1(1)],
        },
        Case {
            name: "semantics",
            params: vec![vec![0, f(3e9), -1i32 as u32, 35], vec![3, f(-1e10), 5, 7]],
            grids: vec![g1(1)],
        },
    ];
    for name in ["struct_layout", "control", "builtins", "math", "halves"] {
        out.push(Case {
            name,
            params: vec![vec![]],
            grids: vec![g1(1), g1(3), [2, 3, 1], [3, 2, 2]],
        });
    }
    out.push(Case {
        name: "atomics_global",
        params: vec![vec![]],
        grids: vec![g1(1), g1(3), g1(8)],
    });
    out.push(Case {
        name: "windows",
        params: vec![
            vec![200, 0, 0],
            vec![2000, 0xffff_fff0, 3],
            vec![1000, 7, -5i32 as u32],
            vec![300, 0x8000_0000, 40],
        ],
        grids: vec![g1(1), g1(9), [3, 2, 1], [40, 2, 1]],
    });
    // Kernels with barriers, workgroup memory or subgroup operations.
    let sum_params = vec![vec![2048, 4], vec![1000, 3], vec![5000, 2]];
    let sum_grids = vec![g1(4), g1(3), g1(2)];
    for (name, params, grids) in [
        ("shared_sum", vec![vec![]], vec![g1(1), g1(3), [2, 2, 1]]),
        ("atomics", vec![vec![]], vec![g1(1), g1(3)]),
        ("sum_shared", sum_params.clone(), sum_grids.clone()),
        ("sum_subgroup", sum_params, sum_grids),
        (
            "softmax_rows",
            vec![vec![2, 1000], vec![3, 300], vec![1, 2048]],
            vec![g1(2), g1(4), [1, 2, 1]],
        ),
        (
            "barriers",
            vec![vec![100, 0], vec![1000, 5], vec![2000, 7]],
            vec![g1(1), g1(5), [4, 2, 1], [3, 3, 1]],
        ),
        ("private_barrier", vec![vec![]], vec![g1(1), g1(3)]),
        (
            "subgroup_mix",
            vec![vec![0], vec![1], vec![2]],
            vec![g1(1), g1(3)],
        ),
        ("subgroups", vec![vec![]], vec![g1(1), g1(3)]),
    ] {
        out.push(Case {
            name,
            params,
            grids,
        });
    }
    out.push(Case {
        name: "shifted",
        params: vec![vec![1000, 0], vec![1000, 1], vec![1500, 256], vec![600, 5]],
        grids: elementwise.clone(),
    });
    for name in [
        "philox_u32",
        "philox_u32_wg64",
        "philox_rand",
        "philox_rand_wg64",
        "philox_randn",
        "philox_uniform",
        "philox_normal",
        "philox_normal_plain",
        "philox_randint",
    ] {
        out.push(Case {
            name,
            params: vec![
                vec![1001, 7, 9, 3, 0, f(-1.0), f(2.0), 0],
                vec![4000, 0xdead, 0xbeef, 0xffff_fffe, 1, 5, 1000, 0],
            ],
            grids: vec![g1(1), g1(3), [2, 2, 1]],
        });
    }
    out
}

fn kernel(name: &str) -> &'static Kernel {
    generated::KERNELS
        .iter()
        .copied()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("`{name}` is not in tests/generated/mod.rs; regenerate it"))
}

/// Runs `case` through the interpreter and the generated code, each on
/// fresh copies of the same buffers, over every grid, parameter block and
/// buffer length (the odd one is viewed through a padded copy), and
/// compares every output byte.
fn compare(case: &Case, program: &Program, threads: usize) {
    let k = kernel(case.name);
    assert_eq!(k.read_only.len(), program.buffers.len());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for &len in &[8192usize, 8190] {
        for params in &case.params {
            let params: Vec<u8> = params.iter().flat_map(|w| w.to_le_bytes()).collect();
            for &grid in &case.grids {
                let inputs: Vec<Vec<u8>> = program
                    .buffers
                    .iter()
                    .map(|_| {
                        (0..len.div_ceil(4))
                            .flat_map(|_| rng.word().to_le_bytes())
                            .take(len)
                            .collect()
                    })
                    .collect();
                let mut a = inputs.clone();
                let mut b = inputs.clone();
                let mut views: Vec<&mut [u8]> = a.iter_mut().map(|v| &mut v[..]).collect();
                host::run(
                    program,
                    grid,
                    &mut views,
                    &params,
                    &HostOptions { threads: 1 },
                )
                .unwrap_or_else(|e| panic!("{} on the interpreter: {e}", case.name));
                let mut views: Vec<&mut [u8]> = b.iter_mut().map(|v| &mut v[..]).collect();
                k.run_with(grid, &mut views, &params, &HostOptions { threads })
                    .unwrap_or_else(|e| panic!("{} as Rust: {e}", case.name));
                for (n, (x, y)) in a.iter().zip(&b).enumerate() {
                    if x != y {
                        let at = x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(0) / 4 * 4;
                        panic!(
                            "{}: grid {grid:?}, params {params:?}, buffer length {len}: buffer {n} \
                             differs first at byte {at}: interpreter {:02x?}, Rust {:02x?}",
                            case.name,
                            &x[at..(at + 4).min(len)],
                            &y[at..(at + 4).min(len)],
                        );
                    }
                }
                assert_ne!(a, inputs, "{}: the launch wrote nothing", case.name);
            }
        }
    }
}

#[test]
fn every_kernel_matches_the_interpreter_bit_for_bit() {
    let programs = programs();
    let cases = cases();
    assert_eq!(cases.len(), programs.len(), "every kernel has a case");
    for case in &cases {
        let program = programs
            .iter()
            .find(|p| p.name == case.name)
            .expect("the case's kernel is compiled");
        compare(case, program, 1);
    }
}

#[test]
fn threads_give_the_same_bits() {
    let programs = programs();
    for case in cases().iter().filter(|c| {
        [
            "add_f32",
            "matmul_naive",
            "philox_randn",
            "atomics_global",
            "windows",
            "shifted",
            "sum_shared",
            "barriers",
            "subgroup_mix",
        ]
        .contains(&c.name)
    }) {
        let program = programs
            .iter()
            .find(|p| p.name == case.name)
            .expect("the case's kernel is compiled");
        compare(case, program, 4);
    }
}

/// The windowed path against the interpreter at random counts, offsets
/// and grids: offsets near 2^32 wrap inside some workgroups and not in
/// others, negative indices reach before the buffers, and grids reach
/// past their ends, so workgroups of one launch take either path.
#[test]
fn windows_match_the_interpreter_at_random_offsets() {
    let programs = programs();
    let program = programs
        .iter()
        .find(|p| p.name == "windows")
        .expect("the windows kernel is compiled");
    let mut rng = Rng(0x51ed_270b_2749_66f1);
    let mut params = Vec::new();
    let mut grids = Vec::new();
    for _ in 0..12 {
        let n = 1 + rng.next() % 2100;
        let shift = match rng.next() % 3 {
            0 => rng.next() % 64,
            1 => 0u32.wrapping_sub(1 + rng.next() % 600),
            _ => rng.next(),
        };
        let back = (rng.next() % 200) as i32 - 100;
        params.push(vec![n, shift, back as u32]);
        grids.push([1 + rng.next() % 12, 1 + rng.next() % 3, 1]);
    }
    let case = Case {
        name: "windows",
        params,
        grids,
    };
    compare(&case, program, 1);
}

#[test]
fn launch_errors_name_the_kernel() {
    let k = kernel("add_f32");
    let mut a = [0u8; 16];
    let mut b = [0u8; 16];
    let err = k
        .run([1, 1, 1], &mut [&mut a[..], &mut b[..]], &[0; 4])
        .expect_err("one buffer short");
    assert!(
        err.contains("add_f32") && err.contains("expected 3 storage buffers, found 2"),
        "{err}"
    );
    let mut c = [0u8; 16];
    let err = k
        .run([1, 1, 1], &mut [&mut a[..], &mut b[..], &mut c[..]], &[])
        .expect_err("no parameters");
    assert!(err.contains("parameter block of 4 bytes, found 0"), "{err}");
    k.run(
        [0, 1, 1],
        &mut [&mut a[..], &mut b[..], &mut c[..]],
        &[0; 4],
    )
    .expect("an empty grid runs nothing");
}
