//! The PTX Keel ships and generates, run on the CPU by the interpreter in
//! `sim/`, without a GPU: the tensor-core matmuls (NVRTC's PTX, checked
//! in) against the f64 reference of their rounded inputs at odd shapes,
//! and the PTX keel-wgsl generates for shipped kernels against the host
//! end's bits on the same inputs.

mod sim;

use std::path::{Path, PathBuf};

use sim::{Arg, Global, f32_bytes, f32s};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A deterministic spread of values in [-1, 1) (xorshift).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Keel's input rounding (rounding.wgsl's codes: 1 tf32, 2 bf16, 3 f16),
/// to nearest with ties to even.
fn round_input(x: f32, format: u32) -> f32 {
    let mantissa = |drop: u32| -> f32 {
        let bits = x.to_bits();
        if bits & 0x7f80_0000 == 0x7f80_0000 {
            return x;
        }
        let lsb = (bits >> drop) & 1;
        let half = (1u32 << (drop - 1)) - 1;
        f32::from_bits((bits + half + lsb) & !((1u32 << drop) - 1))
    };
    match format {
        1 => mantissa(13),
        2 => mantissa(16),
        3 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

const MMA: &str = "shaders/compute/matmul_mma.ptx";
const MMA16: &str = "shaders/compute/matmul_mma16.ptx";
/// Outputs per block of `matmul_mma` and `matmul_mma16`: rows, columns
/// (src/compute/matmul.rs).
const MMA_TILE: (usize, usize) = (128, 128);

/// A tensor-core matmul as src/compute/matmul.rs launches it: its entry
/// point, the entry point that packs its inputs first (`NAME_pack`: the
/// values rounded, rows padded to whole tiles), the bytes of a packed
/// value and the steps of k in a stage.
struct TensorCore {
    main: sim::Kernel,
    pack: sim::Kernel,
    value_bytes: usize,
    stage_k: usize,
    /// `matmul_sgemm`: A is packed transposed (pk x pm) and the pass's
    /// last parameter says whether to transpose, not the mode.
    transpose_a: bool,
}

impl TensorCore {
    fn load(file: &str, name: &str) -> Self {
        Self::load_with(file, name, &format!("{name}_pack"))
    }

    /// An entry point whose packing pass is named otherwise
    /// (`matmul_mma16_split` packs with `matmul_mma16_pack`).
    fn load_with(file: &str, name: &str, pack_name: &str) -> Self {
        let text = std::fs::read_to_string(root().join(file)).expect("PTX file");
        let mut kernels = sim::parse(&text).expect("the interpreter parses it");
        let mut take = |name: &str| {
            let i = kernels
                .iter()
                .position(|k| k.name == name)
                .expect("the entry point");
            kernels.remove(i)
        };
        let (main, pack) = (take(name), take(pack_name));
        let (value_bytes, stage_k, transpose_a) = match pack_name {
            "matmul_mma16_pack" => (2, 32, false),
            "matmul_sgemm_pack" => (4, 32, true),
            _ => (4, 16, false),
        };
        TensorCore {
            main,
            pack,
            value_bytes,
            stage_k,
            transpose_a,
        }
    }

    /// Launches the kernel on buffers a, b, c at (m, k, n) in `format`
    /// (the input format alone: no split-K chunks).
    fn launch(
        &self,
        g: &mut Global,
        buffers: [u64; 3],
        dims: (usize, usize, usize),
        format: u32,
    ) -> sim::Result<()> {
        self.launch_mode(g, buffers, dims, format, 0, 0).map(|_| ())
    }

    /// Launches the kernel on buffers a, b, c at (m, k, n) with Keel's
    /// `mode` and `chunk` parameters: packs a and b (blocks of 256
    /// threads, one per 16 bytes packed; `pack_flags` added to the
    /// pass's mode), then blocks of 256 threads over 128 x 128 tiles with
    /// the packed a, b, then c, m, k, n, mode, chunk. Returns the kernel's
    /// shared-memory bank use (not the packing pass's).
    fn launch_mode(
        &self,
        g: &mut Global,
        [pa, pb, pc]: [u64; 3],
        (m, k, n): (usize, usize, usize),
        format: u32,
        chunk: u32,
        pack_flags: u32,
    ) -> sim::Result<sim::BankReport> {
        let u = |v: usize| Arg::U32(v as u32);
        let (pm, pk, pn) = (
            m.next_multiple_of(MMA_TILE.0),
            k.next_multiple_of(self.stage_k),
            n.next_multiple_of(MMA_TILE.1),
        );
        let per_invocation = 16 / self.value_bytes;
        let mut packed =
            |src: u64, rows: usize, cols: usize, dst_rows: usize, dst_cols: usize, last: u32| {
                // NaN everywhere the pass fails to write.
                let dst = g.alloc(&vec![0xffu8; dst_rows * dst_cols * self.value_bytes]);
                let grid = [
                    (dst_rows * dst_cols / per_invocation).div_ceil(256) as u32,
                    1,
                    1,
                ];
                let args = [
                    Arg::U64(src),
                    Arg::U64(dst),
                    u(rows),
                    u(cols),
                    u(dst_rows),
                    u(dst_cols),
                    Arg::U32(last),
                ];
                self.pack.launch(g, grid, [256, 1, 1], &args).map(|()| dst)
            };
        let (a, b) = if self.transpose_a {
            (packed(pa, m, k, pk, pm, 1)?, packed(pb, k, n, pk, pn, 0)?)
        } else {
            (
                packed(pa, m, k, pm, pk, format | pack_flags)?,
                packed(pb, k, n, pk, pn, format | pack_flags)?,
            )
        };
        let grid = [
            n.div_ceil(MMA_TILE.1) as u32,
            m.div_ceil(MMA_TILE.0) as u32,
            1,
        ];
        let args = [
            Arg::U64(a),
            Arg::U64(b),
            Arg::U64(pc),
            u(m),
            u(k),
            u(n),
            Arg::U32(format),
            Arg::U32(chunk),
        ];
        self.main.launch_counting_banks(g, grid, [256, 1, 1], &args)
    }
}

/// Runs `matmul_mma` on (m, k, n) in `format` and checks every output
/// against the f64 product of the rounded inputs, within docs/NUMERICS.md's
/// bound for the tensor cores: 2 (k + 2) 2^-24 sum |a b|.
fn check_mma(mma: &TensorCore, m: usize, k: usize, n: usize, format: u32, a: &[f32], b: &[f32]) {
    let mut g = Global::default();
    let pa = g.alloc_f32(a);
    let pb = g.alloc_f32(b);
    let pc = g.alloc_f32(&vec![f32::NAN; m * n]);
    mma.launch(&mut g, [pa, pb, pc], (m, k, n), format)
        .unwrap_or_else(|e| panic!("{m}x{k}x{n} format {format}: {e}"));
    let c = g.read_f32(pc);
    let ra: Vec<f64> = a
        .iter()
        .map(|x| f64::from(round_input(*x, format)))
        .collect();
    let rb: Vec<f64> = b
        .iter()
        .map(|x| f64::from(round_input(*x, format)))
        .collect();
    for i in 0..m {
        for j in 0..n {
            let (mut sum, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                sum += ra[i * k + p] * rb[p * n + j];
                mag += (ra[i * k + p] * rb[p * n + j]).abs();
            }
            let got = f64::from(c[i * n + j]);
            let bound = 2.0 * (k as f64 + 2.0) * 2f64.powi(-24) * mag;
            assert!(
                (got - sum).abs() <= bound || (got.is_infinite() && got == sum),
                "{m}x{k}x{n} format {format}: c[{i}][{j}] = {got}, reference {sum}, bound {bound}"
            );
        }
    }
}

/// Shapes on either side of the kernels' 128 x 128 tile and their k
/// stages (16, 32), k = 1 and a long k (ten stages, so that the
/// three-stage ring of `matmul_mma16` wraps more than once); 256 x 64 x
/// 256 takes `matmul_mma`'s unchecked loads (whole tiles and stages) with
/// float4 rows, 130 x 70 x 131 the same loads of single floats, and
/// `matmul_mma16_pack` its float4 loads and its single ones.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (3, 17, 5),
    (128, 16, 128),
    (129, 33, 130),
    (40, 300, 9),
    (256, 64, 256),
    (130, 70, 131),
];

/// The tf32 tensor-core kernel in the three input formats.
#[test]
fn matmul_mma_matches_the_f64_reference_of_rounded_inputs() {
    check_shapes(MMA, "matmul_mma", &[1, 2, 3]);
}

/// The 16-bit tensor-core kernel in its two formats.
#[test]
fn matmul_mma16_matches_the_f64_reference_of_rounded_inputs() {
    check_shapes(MMA16, "matmul_mma16", &[2, 3]);
}

const SGEMM: &str = "shaders/compute/matmul_sgemm.ptx";

/// The plain-f32 kernel computes each output as the products added in k
/// order with one rounding per step (fused multiply-adds from zero), the
/// sum the 4x4 kernel's PTX makes once ptxas fuses it: bit for bit, at
/// the shapes above and with the edges of f32 (subnormal products, an
/// overflow to infinity, signed zeros). So does the hand-written 4x4 PTX
/// the generated kernel is timed against (`benches/hand_ptx/`), which
/// passed the GPU tests on an H200 before it was replaced.
#[test]
fn matmul_sgemm_is_the_fused_sum_in_k_order() {
    let sgemm = TensorCore::load(SGEMM, "matmul_sgemm");
    let text = std::fs::read_to_string(root().join("benches/hand_ptx/matmul_tiled_4x4.ptx"))
        .expect("the baseline PTX");
    let hand = sim::parse(&text)
        .expect("the interpreter parses it")
        .into_iter()
        .find(|k| k.name == "matmul_tiled_4x4")
        .expect("the entry point");
    let mut shapes = SHAPES.to_vec();
    shapes.push((257, 40, 300));
    for (m, k, n) in shapes {
        let mut a = values(m * k, (m * 13 + k) as u64);
        let mut b = values(k * n, (n * 5 + k) as u64 + 3);
        if m * k > 3 && k * n > 3 {
            a[0] = 1e-30;
            b[0] = 1e-15;
            a[1] = 3e38;
            b[n.min(k * n - 1)] = 4.0;
            a[2] = -0.0;
        }
        let mut g = Global::default();
        let pa = g.alloc_f32(&a);
        let pb = g.alloc_f32(&b);
        let pc = g.alloc_f32(&vec![f32::NAN; m * n]);
        sgemm
            .launch(&mut g, [pa, pb, pc], (m, k, n), 0)
            .unwrap_or_else(|e| panic!("{m}x{k}x{n}: {e}"));
        let c = g.read_f32(pc);
        // The baseline: blocks of 16 x 16 over 64 x 64 tiles, a, b, c, m,
        // k, n, mode, chunk.
        let ph = g.alloc_f32(&vec![f32::NAN; m * n]);
        let u = |v: usize| Arg::U32(v as u32);
        let args = [
            Arg::U64(pa),
            Arg::U64(pb),
            Arg::U64(ph),
            u(m),
            u(k),
            u(n),
            u(0),
            u(0),
        ];
        let grid = [n.div_ceil(64) as u32, m.div_ceil(64) as u32, 1];
        hand.launch(&mut g, grid, [16, 16, 1], &args)
            .unwrap_or_else(|e| panic!("the baseline at {m}x{k}x{n}: {e}"));
        let baseline = g.read_f32(ph);
        for i in 0..m {
            for j in 0..n {
                let want = (0..k).fold(0.0f32, |acc, p| a[i * k + p].mul_add(b[p * n + j], acc));
                for (who, got) in [
                    ("matmul_sgemm", c[i * n + j]),
                    ("the baseline", baseline[i * n + j]),
                ] {
                    assert!(
                        got.to_bits() == want.to_bits(),
                        "{who} at {m}x{k}x{n}: c[{i}][{j}] = {got:e}, the fused sum in k order {want:e}"
                    );
                }
            }
        }
    }
}

/// `matmul_mma16_pack` copies a bf16 or f16 tensor's values as they are
/// (mode bit 16): the product is the one of the same values given as
/// f32, bit for bit, with rows whose 16 bytes are aligned (whole loads)
/// and rows that are not (k and n off a multiple of 8).
#[test]
fn matmul_mma16_takes_16_bit_values_as_they_are() {
    let mma = TensorCore::load(MMA16, "matmul_mma16");
    for (m, k, n) in [(3, 17, 5), (129, 64, 136), (40, 300, 9)] {
        for format in [2u32, 3] {
            let round =
                |v: Vec<f32>| -> Vec<f32> { v.iter().map(|&x| round_input(x, format)).collect() };
            let a = round(values(m * k, (m + k) as u64));
            let b = round(values(k * n, (n + k) as u64 + 9));
            let halves = |v: &[f32]| -> Vec<u8> {
                v.iter()
                    .flat_map(|&x| {
                        let h = if format == 2 {
                            (x.to_bits() >> 16) as u16
                        } else {
                            half::f16::from_f32(x).to_bits()
                        };
                        h.to_le_bytes()
                    })
                    .collect()
            };
            let run = |a: u64, b: u64, g: &mut Global, flags: u32| {
                let c = g.alloc_f32(&vec![f32::NAN; m * n]);
                mma.launch_mode(g, [a, b, c], (m, k, n), format, 0, flags)
                    .unwrap_or_else(|e| panic!("{m}x{k}x{n} format {format}: {e}"));
                g.read_f32(c)
            };
            let mut g = Global::default();
            let (pa, pb) = (g.alloc_f32(&a), g.alloc_f32(&b));
            let wide = run(pa, pb, &mut g, 0);
            let (ha, hb) = (g.alloc(&halves(&a)), g.alloc(&halves(&b)));
            let narrow = run(ha, hb, &mut g, 0x10000);
            for (i, (x, y)) in wide.iter().zip(&narrow).enumerate() {
                assert!(
                    x.to_bits() == y.to_bits(),
                    "{m}x{k}x{n} format {format}: c[{i}] = {y} from 16-bit values, {x} from f32"
                );
            }
        }
    }
}

/// The matmul overrides read shared memory without bank conflicts: every
/// `ldmatrix` matrix, fragment load and 16-byte row read of a warp takes
/// the fewest passes over the banks its bytes need (the XOR-permuted
/// chunks of the tensor-core kernels' rows, the 4 x 4 blocks of
/// `matmul_sgemm`), counted by the interpreter over whole launches.
#[test]
fn matmul_overrides_read_shared_memory_without_bank_conflicts() {
    for (file, name, pack, format) in [
        (MMA, "matmul_mma", "matmul_mma_pack", 1),
        (MMA16, "matmul_mma16", "matmul_mma16_pack", 2),
        (MMA16, "matmul_mma16_split", "matmul_mma16_pack", 2 | 2 << 8),
        (SGEMM, "matmul_sgemm", "matmul_sgemm_pack", 0),
    ] {
        let kernel = TensorCore::load_with(file, name, pack);
        let (m, k, n) = (128, 64, 256);
        let mut g = Global::default();
        let pa = g.alloc_f32(&values(m * k, 1));
        let pb = g.alloc_f32(&values(k * n, 2));
        let pc = g.alloc_f32(&vec![0.0; m * n]);
        let report = kernel
            .launch_mode(&mut g, [pa, pb, pc], (m, k, n), format, 256, 0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let reads = report
            .lines
            .iter()
            .filter(|l| l.text.starts_with("ld") || l.text.contains("ldmatrix"));
        let requests: u64 = reads.clone().map(|l| l.requests).sum();
        println!(
            "{name}: {requests} shared read requests on {} lines",
            reads.count()
        );
        assert!(requests > 0, "{name}: no shared reads counted");
        assert_no_bank_conflicts(name, &report, |l| {
            l.text.starts_with("ld") || l.text.contains("ldmatrix")
        });
    }
}

/// Fails, naming each line, where an instruction of `report` that `which`
/// picks took more passes over the banks than its bytes need.
fn assert_no_bank_conflicts(
    what: &str,
    report: &sim::BankReport,
    which: impl Fn(&sim::BankLine) -> bool,
) {
    let conflicts: Vec<String> = report
        .conflicts()
        .into_iter()
        .filter(|l| which(l))
        .map(|l| {
            format!(
                "line {}: `{}`: {} wavefronts for {}",
                l.line, l.text, l.wavefronts, l.ideal
            )
        })
        .collect();
    assert!(
        conflicts.is_empty(),
        "{what}: bank conflicts:\n{}",
        conflicts.join("\n")
    );
}

/// The PTX keel-wgsl generates for the 4x4 tiled matmul (what CUDA runs
/// for products too small for the overrides; its WGSL is what Vulkan and
/// wgpu run on every GPU) reads and writes workgroup memory without bank
/// conflicts: the transposing stores of A's tile among them, where a
/// warp's 32 stores cover 8 steps of 4 rows so that the padded rows
/// (68 floats) spread them over the 32 banks.
#[test]
fn generated_4x4_matmul_uses_workgroup_memory_without_bank_conflicts() {
    let source = matmul_source("matmul_tiled_4x4.wgsl");
    let program = keel_wgsl::compile(&source, "matmul_tiled_4x4").expect("lowers");
    let text = keel_wgsl::ptx::emit(&program).expect("prints as PTX");
    let kernel = sim::parse(&text)
        .expect("the interpreter parses it")
        .into_iter()
        .find(|k| k.name == "matmul_tiled_4x4")
        .expect("the entry point");
    let (m, k, n) = (128usize, 64usize, 128usize);
    let buffers = [
        f32_bytes(&values(m * k, 3)),
        f32_bytes(&values(k * n, 4)),
        f32_bytes(&vec![0.0; m * n]),
    ];
    let mut g = Global::default();
    let addrs: Vec<u64> = buffers.iter().map(|b| g.alloc(b)).collect();
    let args = ptx_end_args(
        &program,
        &addrs,
        &buffers,
        &[m as u32, k as u32, n as u32, 0, 0],
    );
    let report = kernel
        .launch_counting_banks(&mut g, [2, 2, 1], program.workgroup_size, &args)
        .expect("runs");
    let requests: u64 = report.lines.iter().map(|l| l.requests).sum();
    assert!(requests > 0, "no workgroup-memory accesses counted");
    assert_no_bank_conflicts("matmul_tiled_4x4", &report, |_| true);
}

/// The split-K modes (bf16 and f16 tensors' defaults) on
/// `matmul_mma16_split`: the sums cut every 256 steps of k and after the
/// last, each chunk sum rounded to the format and added into the total,
/// rounded. With small integer inputs every chunk sum is exact in f32 in
/// any order, so the tensor cores' order does not show and the result is
/// the reference's bit for bit; the sums reach past the formats'
/// significands (bf16's 8 bits, f16's 11), so their rounding does.
#[test]
fn matmul_mma16_split_rounds_each_chunk_as_the_reference() {
    let mma = TensorCore::load_with(MMA16, "matmul_mma16_split", "matmul_mma16_pack");
    // Chunk sums that needed rounding, per format (bf16, f16).
    let mut rounded = [0usize; 2];
    // Keel's chunk of 256 steps, and 0: one chunk of the whole of k.
    for (m, k, n, chunk) in [
        (3, 1, 2, 256),
        (5, 256, 3, 256),
        (130, 257, 9, 256),
        (4, 700, 131, 256),
        (4, 700, 131, 0),
    ] {
        let chunk_len = if chunk == 0 { k } else { chunk as usize };
        // Integers in [-40, 40] for bf16; in [0, 12] for f16, whose sums
        // of a chunk (about 9,000) then lie where its steps are 4 and 8
        // and below its largest value.
        let ints = |len: usize, seed: u64, format: u32| -> Vec<f32> {
            values(len, seed)
                .iter()
                .map(|v| {
                    if format == 2 {
                        (v * 40.0).round()
                    } else {
                        (v * 6.0 + 6.0).round()
                    }
                })
                .collect()
        };
        for format in [2u32, 3] {
            let a = ints(m * k, (m * 7 + k) as u64, format);
            let b = ints(k * n, (n * 3 + k) as u64 + 1, format);
            let mut g = Global::default();
            let pa = g.alloc_f32(&a);
            let pb = g.alloc_f32(&b);
            let pc = g.alloc_f32(&vec![f32::NAN; m * n]);
            let mode = format | format << 8;
            mma.launch_mode(&mut g, [pa, pb, pc], (m, k, n), mode, chunk, 0)
                .unwrap_or_else(|e| panic!("{m}x{k}x{n} format {format}: {e}"));
            let c = g.read_f32(pc);
            let round = |x: f32| round_input(x, format);
            for i in 0..m {
                for j in 0..n {
                    let (mut total, mut part) = (0.0f32, 0.0f32);
                    for p in 0..k {
                        part += a[i * k + p] * b[p * n + j];
                        if (p + 1) % chunk_len == 0 || p + 1 == k {
                            rounded[format as usize - 2] += usize::from(round(part) != part);
                            total = round(total + round(part));
                            part = 0.0;
                        }
                    }
                    let got = c[i * n + j];
                    assert!(
                        got.to_bits() == total.to_bits(),
                        "{m}x{k}x{n} format {format} chunk {chunk}: c[{i}][{j}] = {got}, reference {total}"
                    );
                }
            }
        }
    }
    assert!(
        rounded.iter().all(|&r| r > 100),
        "chunk sums rounded (bf16, f16): {rounded:?}; too few for the test to show the rounding"
    );
}

fn check_shapes(file: &str, name: &str, formats: &[u32]) {
    let mma = TensorCore::load(file, name);
    for &(m, k, n) in SHAPES {
        for &format in formats {
            let a = values(m * k, (m * 31 + k) as u64);
            let b = values(k * n, (n * 17 + k) as u64 + 7);
            check_mma(&mma, m, k, n, format, &a, &b);
        }
    }
}

/// The rounding of values the formats treat apart: ties, f16 subnormals,
/// values past f16's largest, f32 subnormals, infinity.
#[test]
fn tensor_core_kernels_round_edge_values_as_every_kernel_does() {
    for (file, name, formats) in [
        (MMA, "matmul_mma", &[1, 2, 3][..]),
        (MMA16, "matmul_mma16", &[2, 3]),
    ] {
        check_edges(&TensorCore::load(file, name), formats);
    }
}

fn check_edges(mma: &TensorCore, formats: &[u32]) {
    let edges = [
        1.0 + 2f32.powi(-11),         // f16 and tf32 tie
        1.0 + 3.0 * 2f32.powi(-11),   // tie, odd below
        1.0 + 2f32.powi(-8),          // bf16 tie
        -(1.0 + 3.0 * 2f32.powi(-8)), // bf16 tie, odd below
        3.0 * 2f32.powi(-25),         // f16 subnormal tie
        2f32.powi(-20) * 1.3,         // f16 subnormal
        65519.0,                      // f16: to 65504
        65520.0,                      // f16: to infinity
        f32::from_bits(0x0000_1234),  // f32 subnormal
        0.75,
    ];
    let (m, k, n) = (edges.len(), edges.len(), 3);
    // Row i of A holds one edge value on the diagonal; B holds small exact values,
    // so each output is one rounded edge value times an exact nonzero
    // value (infinity stays infinite).
    let mut a = vec![0.0f32; m * k];
    for (i, e) in edges.iter().enumerate() {
        a[i * k + i] = *e;
    }
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.5).collect();
    for &format in formats {
        check_mma(mma, m, k, n, format, &a, &b);
    }
}

/// The interpreter's own checks fire: a launch with a buffer too small
/// for the product is refused at the first access past it.
#[test]
fn the_interpreter_refuses_accesses_outside_every_buffer() {
    let mma = TensorCore::load(MMA, "matmul_mma");
    let mut g = Global::default();
    let (m, k, n) = (4, 4, 4);
    let pa = g.alloc_f32(&values(m * k, 1));
    let pb = g.alloc_f32(&values(k * n - 1, 2));
    let pc = g.alloc_f32(&vec![0.0; m * n]);
    let err = mma
        .launch(&mut g, [pa, pb, pc], (m, k, n), 1)
        .expect_err("b is one element short");
    assert!(err.contains("outside every buffer"), "{err}");
}

/// A WGSL kernel's buffers after one launch on each end: the host end
/// (`keel_wgsl::host`, what the CPU backend runs) and the PTX end
/// (`keel_wgsl::ptx`, what CUDA runs) on the interpreter.
struct BothEnds {
    host: Vec<Vec<u8>>,
    ptx: Vec<Vec<u8>>,
}

/// Runs `entry` of `source` on both ends over `grid`, with `buffers` as
/// the storage buffers and `params` (32-bit words) as the parameter block,
/// passed as keel-wgsl's PTX convention says: the buffers' pointers, the
/// block's words, the buffers' byte lengths.
fn both_ends(
    source: &str,
    entry: &str,
    grid: [u32; 3],
    buffers: &[Vec<u8>],
    params: &[u32],
) -> BothEnds {
    let program = keel_wgsl::compile(source, entry).expect("lowers");
    let block: Vec<u8> = params.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut host: Vec<Vec<u8>> = buffers.to_vec();
    {
        let mut views: Vec<&mut [u8]> = host.iter_mut().map(Vec::as_mut_slice).collect();
        keel_wgsl::host::run(
            &program,
            grid,
            &mut views,
            &block,
            &keel_wgsl::host::HostOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{entry} on the host end: {e}"));
    }
    let text = keel_wgsl::ptx::emit(&program).expect("prints as PTX");
    let kernel = sim::parse(&text)
        .expect("the interpreter parses keel-wgsl's PTX")
        .into_iter()
        .find(|k| k.name == entry)
        .expect("the entry point");
    let mut g = Global::default();
    let addrs: Vec<u64> = buffers.iter().map(|b| g.alloc(b)).collect();
    let args = ptx_end_args(&program, &addrs, buffers, params);
    kernel
        .launch(&mut g, grid, program.workgroup_size, &args)
        .unwrap_or_else(|e| panic!("{entry} on the PTX end: {e}"));
    let ptx = addrs.iter().map(|a| g.bytes(*a).to_vec()).collect();
    BothEnds { host, ptx }
}

/// The arguments of a keel-wgsl entry point, as its PTX convention
/// takes them: the buffers' addresses, the parameter block's words (zeros
/// past `params`), the buffers' byte lengths.
fn ptx_end_args(
    program: &keel_wgsl::ir::Program,
    addrs: &[u64],
    buffers: &[Vec<u8>],
    params: &[u32],
) -> Vec<Arg> {
    let words = (program.param_bytes as usize).div_ceil(4);
    let mut args: Vec<Arg> = addrs.iter().map(|a| Arg::U64(*a)).collect();
    args.extend((0..words).map(|i| Arg::U32(params.get(i).copied().unwrap_or(0))));
    args.extend(buffers.iter().map(|b| Arg::U64(b.len() as u64)));
    args
}

fn read_shader(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).expect("kernel source")
}

/// The matmul kernels' shared prefix and one kernel.
fn matmul_source(kernel: &str) -> String {
    ["rounding.wgsl", "matmul_bindings.wgsl", kernel]
        .iter()
        .map(|f| read_shader(&format!("shaders/compute/{f}")))
        .collect()
}

/// One launch of a shipped kernel: a label, the source, the entry point,
/// the grid, the buffers, the parameter words.
type Case = (
    String,
    String,
    &'static str,
    [u32; 3],
    Vec<Vec<u8>>,
    Vec<u32>,
);

/// Shipped kernels whose generated PTX computes the same bits as the host
/// end on the same inputs: elementwise, reductions in workgroup memory,
/// the tiled matmuls in every input-rounding mode, and the random
/// streams (Philox, Box-Muller) the issue of one source promises are the
/// same on every device. The interpreter rounds every add and multiply on
/// its own, as the host end does; on a GPU ptxas may fuse where WGSL
/// allows, which the kernels whose bits are promised fence against.
#[test]
fn generated_ptx_computes_the_host_ends_bits() {
    let mut cases: Vec<Case> = Vec::new();
    let n = 1000usize;
    cases.push((
        "add".into(),
        read_shader("shaders/ops/add.wgsl"),
        "add_f32",
        [4, 1, 1],
        vec![
            f32_bytes(&values(n, 1)),
            f32_bytes(&values(n, 2)),
            vec![0; 4 * n],
        ],
        vec![n as u32],
    ));
    // Three workgroups' partial sums of 5,000 elements.
    cases.push((
        "sum".into(),
        read_shader("shaders/compute/sum.wgsl"),
        "sum_shared",
        [3, 1, 1],
        vec![f32_bytes(&values(5000, 3)), vec![0; 12]],
        vec![5000, 3],
    ));
    let (m, k, nn) = (70usize, 37usize, 65usize);
    for (file, entry, grid_tile) in [
        ("matmul_tiled.wgsl", "matmul_tiled", 64u32),
        ("matmul_tiled_4x4.wgsl", "matmul_tiled_4x4", 64),
    ] {
        for mode in [0u32, 1, 2, 3] {
            cases.push((
                format!("{entry} mode {mode}"),
                matmul_source(file),
                entry,
                [
                    (nn as u32).div_ceil(grid_tile),
                    (m as u32).div_ceil(grid_tile),
                    1,
                ],
                vec![
                    f32_bytes(&values(m * k, 4)),
                    f32_bytes(&values(k * nn, 5)),
                    vec![0; 4 * m * nn],
                ],
                vec![m as u32, k as u32, nn as u32, mode, 0],
            ));
        }
    }
    // The 4x4 matmul's input-rounding pass in each format, ties,
    // subnormals, overflow and NaN among the values; A and B of
    // different lengths.
    let awkward = [
        1.0 + 1.0 / 2048.0,
        1.0 + 1.0 / 256.0,
        8.940_697e-8,
        65520.0,
        -65504.0,
        3.4e38,
        f32::MIN_POSITIVE / 3.0,
        -0.0,
        f32::INFINITY,
        f32::NAN,
    ];
    let (la, lb) = (700usize, 333usize);
    let mut ra = values(la, 8);
    ra[..awkward.len()].copy_from_slice(&awkward);
    let mut rb = values(lb, 9);
    rb[lb - awkward.len()..].copy_from_slice(&awkward);
    for format in [1u32, 2, 3] {
        cases.push((
            format!("matmul_round_inputs format {format}"),
            read_shader("shaders/compute/rounding.wgsl")
                + &read_shader("shaders/compute/matmul_round_inputs.wgsl"),
            "matmul_round_inputs",
            [(la + lb).div_ceil(256) as u32, 1, 1],
            vec![
                f32_bytes(&ra),
                f32_bytes(&rb),
                vec![0; 4 * la],
                vec![0; 4 * lb],
            ],
            vec![la as u32, lb as u32, format],
        ));
    }
    // Random streams: n, seed, offset, two words (a normal's mean and
    // std), the zero word the fences read.
    let philox = read_shader("shaders/random/philox.wgsl");
    for entry in [
        "philox_u32",
        "philox_rand",
        "philox_randn",
        "philox_normal",
        "philox_normal_plain",
    ] {
        let count = 999u32;
        cases.push((
            entry.into(),
            philox.clone(),
            entry,
            [2, 1, 1],
            vec![vec![0; 4 * count as usize]],
            vec![
                count,
                0x1234_5678,
                0x9abc,
                6,
                0,
                0.5f32.to_bits(),
                2.0f32.to_bits(),
                0,
            ],
        ));
    }
    for (label, source, entry, grid, buffers, params) in cases {
        let both = both_ends(&source, entry, grid, &buffers, &params);
        for (i, (h, p)) in both.host.iter().zip(&both.ptx).enumerate() {
            if h != p {
                let at = h.iter().zip(p).position(|(x, y)| x != y).unwrap_or(0) / 4 * 4;
                panic!(
                    "{label}: buffer {i} differs first at byte {at}: host {:02x?}, PTX {:02x?}",
                    &h[at..at + 4],
                    &p[at..at + 4]
                );
            }
        }
        // A kernel that writes nothing would pass as well: each case
        // writes its last buffer.
        let last = both.ptx.last().expect("a buffer");
        assert!(last.iter().any(|b| *b != 0), "{label}: wrote nothing");
    }
}

/// `softmax_rows` through `exp`: the PTX end's `ex2.approx` and the
/// host end's exponential differ in their last bits, so within 4 ulps.
#[test]
fn generated_softmax_is_within_ulps_of_the_host_end() {
    let (rows, cols) = (3usize, 1100usize);
    let both = both_ends(
        &read_shader("shaders/compute/softmax_rows.wgsl"),
        "softmax_rows",
        [rows as u32, 1, 1],
        &[f32_bytes(&values(rows * cols, 6)), vec![0; 4 * rows * cols]],
        &[rows as u32, cols as u32],
    );
    let (h, p) = (f32s(&both.host[1]), f32s(&both.ptx[1]));
    for (i, (x, y)) in h.iter().zip(&p).enumerate() {
        let ulps = (x.to_bits() as i64 - y.to_bits() as i64).abs();
        assert!(ulps <= 4 && *x > 0.0, "softmax[{i}]: host {x}, PTX {y}");
    }
}
