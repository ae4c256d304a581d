//! The host end against a hand-written Rust loop on an elementwise add
//! (`out[i] = a[i] + b[i]` over 2^22 `f32`), single-threaded and on every
//! thread: Keel's goal is that a generated elementwise kernel runs within
//! 1.5x of the loop.
//!
//! The program is what the lowering produces for
//!
//! ```wgsl
//! @compute @workgroup_size(256)
//! fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
//!     let i = gid.x;
//!     if i < arrayLength(&out) { out[i] = a[i] + b[i]; }
//! }
//! ```
//!
//! with naga's bounds checks as guards (`offset + 4 <= BufferLen`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use keel_wgsl::host::{HostOptions, run};
use keel_wgsl::ir::*;
use zerocopy::IntoBytes;

const N: usize = 1 << 22;
const RUNS: usize = 15;

/// The lowered elementwise add.
fn add_program() -> Program {
    let mut regs = Vec::new();
    let mut body = Vec::new();
    let mut reg = |ty: Ty| {
        regs.push(ty);
        Reg(regs.len() as u32 - 1)
    };
    let (g, wsz, t, l, i) = (
        reg(Ty::U32),
        reg(Ty::U32),
        reg(Ty::U32),
        reg(Ty::U32),
        reg(Ty::U32),
    );
    let (len, four64, words64, n, inb) = (
        reg(Ty::U64),
        reg(Ty::U64),
        reg(Ty::U64),
        reg(Ty::U32),
        reg(Ty::Bool),
    );
    let (i64r, off, end) = (reg(Ty::U64), reg(Ty::U64), reg(Ty::U64));
    let (la, ga, x, lb, gb, y, sum, lo, go) = (
        reg(Ty::U64),
        reg(Ty::Bool),
        reg(Ty::F32),
        reg(Ty::U64),
        reg(Ty::Bool),
        reg(Ty::F32),
        reg(Ty::F32),
        reg(Ty::U64),
        reg(Ty::Bool),
    );
    let inst = |i: Inst| Stmt::Inst(i);
    body.extend([
        inst(Inst::Read {
            dst: g,
            what: Builtin::GroupId(Axis::X),
        }),
        inst(Inst::Const {
            dst: wsz,
            bits: 256,
        }),
        inst(Inst::Bin {
            op: BinOp::Mul,
            dst: t,
            a: g,
            b: wsz,
        }),
        inst(Inst::Read {
            dst: l,
            what: Builtin::LocalId(Axis::X),
        }),
        inst(Inst::Bin {
            op: BinOp::Add,
            dst: i,
            a: t,
            b: l,
        }),
        // arrayLength(&out) = BufferLen(2) / 4
        inst(Inst::Read {
            dst: len,
            what: Builtin::BufferLen(2),
        }),
        inst(Inst::Const {
            dst: four64,
            bits: 4,
        }),
        inst(Inst::Bin {
            op: BinOp::Div,
            dst: words64,
            a: len,
            b: four64,
        }),
        inst(Inst::Convert { dst: n, a: words64 }),
        inst(Inst::Bin {
            op: BinOp::Lt,
            dst: inb,
            a: i,
            b: n,
        }),
    ]);
    let mut then = vec![
        inst(Inst::Convert { dst: i64r, a: i }),
        inst(Inst::Bin {
            op: BinOp::Mul,
            dst: off,
            a: i64r,
            b: four64,
        }),
        inst(Inst::Bin {
            op: BinOp::Add,
            dst: end,
            a: off,
            b: four64,
        }),
    ];
    for (buf, lenr, guard, dst) in [(0, la, ga, x), (1, lb, gb, y)] {
        then.extend([
            inst(Inst::Read {
                dst: lenr,
                what: Builtin::BufferLen(buf),
            }),
            inst(Inst::Bin {
                op: BinOp::Le,
                dst: guard,
                a: end,
                b: lenr,
            }),
            inst(Inst::Load {
                dst,
                space: Space::Buffer(buf),
                addr: off,
                guard: Some(guard),
                atomic: false,
            }),
        ]);
    }
    then.extend([
        inst(Inst::Bin {
            op: BinOp::Add,
            dst: sum,
            a: x,
            b: y,
        }),
        inst(Inst::Read {
            dst: lo,
            what: Builtin::BufferLen(2),
        }),
        inst(Inst::Bin {
            op: BinOp::Le,
            dst: go,
            a: end,
            b: lo,
        }),
        inst(Inst::Store {
            space: Space::Buffer(2),
            addr: off,
            value: sum,
            guard: Some(go),
            atomic: false,
        }),
    ]);
    body.push(Stmt::If {
        cond: inb,
        then,
        els: Vec::new(),
    });
    let buffer = |binding: u32, read_only: bool, name: &str| Buffer {
        binding,
        read_only,
        name: name.into(),
    };
    Program {
        name: "add".into(),
        workgroup_size: [256, 1, 1],
        regs,
        buffers: vec![
            buffer(0, true, "a"),
            buffer(1, true, "b"),
            buffer(2, false, "out"),
        ],
        param_bytes: 0,
        shared_bytes: 0,
        private_bytes: 0,
        body,
        needs: Needs::default(),
    }
}

/// The median of `RUNS` timings of `f`, after one warm-up.
fn median(mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

/// The hand-written loop, on `threads` threads (contiguous chunks).
fn rust_add(a: &[f32], b: &[f32], out: &mut [f32], threads: usize) {
    if threads <= 1 {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y;
        }
        return;
    }
    let chunk = a.len().div_ceil(threads);
    std::thread::scope(|s| {
        for ((o, a), b) in out
            .chunks_mut(chunk)
            .zip(a.chunks(chunk))
            .zip(b.chunks(chunk))
        {
            s.spawn(move || {
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    *o = x + y;
                }
            });
        }
    });
}

fn main() {
    let program = add_program();
    let mut a: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
    let mut b: Vec<f32> = (0..N).map(|i| (N - i) as f32 * 0.25).collect();
    let mut out = vec![0f32; N];
    let grid = [(N / 256) as u32, 1, 1];
    let all = std::thread::available_parallelism().map_or(1, usize::from);
    println!("elementwise add, {N} f32, 256 invocations per workgroup ({RUNS} runs, median)");
    for threads in [1, all] {
        let host = median(|| {
            let mut bufs: Vec<&mut [u8]> =
                vec![a.as_mut_bytes(), b.as_mut_bytes(), out.as_mut_bytes()];
            run(&program, grid, &mut bufs, &[], &HostOptions { threads }).expect("the add runs");
            black_box(&out);
        });
        let check = a.iter().zip(&b).zip(&out).all(|((x, y), o)| x + y == *o);
        assert!(check, "the host end computed the sums");
        out.fill(0.0);
        let rust = median(|| {
            rust_add(&a, &b, &mut out, threads);
            black_box(&out);
        });
        println!(
            "threads {threads}: host {:8.3} ms, Rust loop {:8.3} ms, ratio {:.2}x",
            host.as_secs_f64() * 1e3,
            rust.as_secs_f64() * 1e3,
            host.as_secs_f64() / rust.as_secs_f64()
        );
    }
}
