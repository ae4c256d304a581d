//! The host end against hand-built programs: every operation and type,
//! WGSL's edge cases, divergent control flow, barriers, atomics across
//! threads, guards, private memory, subgroups, copied bindings and the
//! launch errors.

use half::f16;
use keel_wgsl::host::{HostError, HostOptions, run};
use keel_wgsl::ir::*;

/// Builds a `Program` statement by statement; nested bodies are built by
/// closures.
struct K {
    p: Program,
    stack: Vec<Vec<Stmt>>,
    next_block: u32,
}

impl K {
    fn new(workgroup_size: [u32; 3], buffers: usize) -> K {
        K {
            p: Program {
                name: "test".into(),
                workgroup_size,
                regs: Vec::new(),
                buffers: (0..buffers as u32)
                    .map(|binding| Buffer {
                        binding,
                        read_only: false,
                        name: format!("b{binding}"),
                    })
                    .collect(),
                param_bytes: 0,
                shared_bytes: 0,
                private_bytes: 0,
                body: Vec::new(),
                needs: Needs::default(),
            },
            stack: vec![Vec::new()],
            next_block: 0,
        }
    }

    fn r(&mut self, ty: Ty) -> Reg {
        self.p.regs.push(ty);
        Reg(self.p.regs.len() as u32 - 1)
    }

    fn ty(&self, r: Reg) -> Ty {
        self.p.regs[r.index()]
    }

    fn emit(&mut self, s: Stmt) {
        self.stack
            .last_mut()
            .expect("a statement list is open")
            .push(s);
    }

    fn i(&mut self, inst: Inst) {
        self.emit(Stmt::Inst(inst));
    }

    fn c(&mut self, ty: Ty, bits: u64) -> Reg {
        let dst = self.r(ty);
        self.i(Inst::Const { dst, bits });
        dst
    }

    fn u(&mut self, v: u32) -> Reg {
        self.c(Ty::U32, u64::from(v))
    }

    fn bin(&mut self, op: BinOp, a: Reg, b: Reg) -> Reg {
        let ty = if op.is_comparison() {
            Ty::Bool
        } else {
            self.ty(a)
        };
        let dst = self.r(ty);
        self.i(Inst::Bin { op, dst, a, b });
        dst
    }

    /// `dst = op(dst, b)`: a register written again.
    fn set(&mut self, dst: Reg, op: BinOp, b: Reg) {
        self.i(Inst::Bin { op, dst, a: dst, b });
    }

    fn un(&mut self, op: UnOp, a: Reg) -> Reg {
        let dst = self.r(self.ty(a));
        self.i(Inst::Un { op, dst, a });
        dst
    }

    fn conv(&mut self, a: Reg, ty: Ty) -> Reg {
        let dst = self.r(ty);
        self.i(Inst::Convert { dst, a });
        dst
    }

    fn mov(&mut self, dst: Reg, src: Reg) {
        self.i(Inst::Mov { dst, src });
    }

    fn read(&mut self, what: Builtin) -> Reg {
        let dst = self.r(if matches!(what, Builtin::BufferLen(_)) {
            Ty::U64
        } else {
            Ty::U32
        });
        self.i(Inst::Read { dst, what });
        dst
    }

    /// `local_invocation_index`.
    fn lid(&mut self) -> Reg {
        let [sx, sy, _] = self.p.workgroup_size;
        let x = self.read(Builtin::LocalId(Axis::X));
        let y = self.read(Builtin::LocalId(Axis::Y));
        let z = self.read(Builtin::LocalId(Axis::Z));
        let sx = self.u(sx);
        let sxy = self.u(self.p.workgroup_size[0] * sy);
        let y = self.bin(BinOp::Mul, y, sx);
        let z = self.bin(BinOp::Mul, z, sxy);
        let i = self.bin(BinOp::Add, x, y);
        self.bin(BinOp::Add, i, z)
    }

    /// `global_invocation_id.x` of a one-dimensional launch.
    fn gid(&mut self) -> Reg {
        let g = self.read(Builtin::GroupId(Axis::X));
        let w = self.u(self.p.workgroup_size[0]);
        let l = self.read(Builtin::LocalId(Axis::X));
        let t = self.bin(BinOp::Mul, g, w);
        self.bin(BinOp::Add, t, l)
    }

    /// The byte offset of element `idx` (`U32`) of `size` bytes, and the
    /// guard `offset + size <= arrayLength` as the lowering writes it.
    fn at(&mut self, buf: u32, idx: Reg, size: u32) -> (Reg, Reg) {
        let i = self.conv(idx, Ty::U64);
        let s = self.c(Ty::U64, u64::from(size));
        let off = self.bin(BinOp::Mul, i, s);
        let end = self.bin(BinOp::Add, off, s);
        let len = self.read(Builtin::BufferLen(buf));
        let guard = self.bin(BinOp::Le, end, len);
        (off, guard)
    }

    /// A guarded load of element `idx` of type `ty` (a `Bool` is a `U32`
    /// in memory).
    fn load(&mut self, buf: u32, idx: Reg, ty: Ty) -> Reg {
        let mem = if ty == Ty::Bool { Ty::U32 } else { ty };
        let (addr, guard) = self.at(buf, idx, mem.bytes());
        let dst = self.r(mem);
        self.i(Inst::Load {
            dst,
            space: Space::Buffer(buf),
            addr,
            guard: Some(guard),
            atomic: false,
        });
        if ty == Ty::Bool {
            self.conv(dst, Ty::Bool)
        } else {
            dst
        }
    }

    /// A guarded store of `value` at element `idx` (a `Bool` as a `U32`).
    fn store(&mut self, buf: u32, idx: Reg, value: Reg) {
        let value = if self.ty(value) == Ty::Bool {
            self.conv(value, Ty::U32)
        } else {
            value
        };
        let (addr, guard) = self.at(buf, idx, self.ty(value).bytes());
        self.i(Inst::Store {
            space: Space::Buffer(buf),
            addr,
            value,
            guard: Some(guard),
            atomic: false,
        });
    }

    fn mload(&mut self, space: Space, addr: Reg, ty: Ty) -> Reg {
        let dst = self.r(ty);
        self.i(Inst::Load {
            dst,
            space,
            addr,
            guard: None,
            atomic: false,
        });
        dst
    }

    fn mstore(&mut self, space: Space, addr: Reg, value: Reg) {
        self.i(Inst::Store {
            space,
            addr,
            value,
            guard: None,
            atomic: false,
        });
    }

    fn body(&mut self, f: impl FnOnce(&mut K)) -> Vec<Stmt> {
        self.stack.push(Vec::new());
        f(self);
        self.stack.pop().expect("pushed above")
    }

    fn if_(&mut self, cond: Reg, then: impl FnOnce(&mut K), els: impl FnOnce(&mut K)) {
        let then = self.body(then);
        let els = self.body(els);
        self.emit(Stmt::If { cond, then, els });
    }

    fn loop_(&mut self, body: impl FnOnce(&mut K), continuing: impl FnOnce(&mut K) -> Option<Reg>) {
        let body = self.body(body);
        let mut break_if = None;
        let continuing = self.body(|k| break_if = continuing(k));
        self.emit(Stmt::Loop {
            body,
            continuing,
            break_if,
        });
    }

    fn block(&mut self, body: impl FnOnce(&mut K, u32)) {
        let id = self.next_block;
        self.next_block += 1;
        let body = self.body(|k| body(k, id));
        self.emit(Stmt::Block { id, body });
    }

    fn subgroup(&mut self, op: SubgroupOp, a: Reg, b: Option<Reg>) -> Reg {
        let ty = match op {
            SubgroupOp::All | SubgroupOp::Any => Ty::Bool,
            SubgroupOp::Ballot => Ty::U32,
            _ => self.ty(a),
        };
        let dst = self.r(ty);
        self.i(Inst::Subgroup { op, dst, a, b });
        dst
    }

    fn finish(mut self) -> Program {
        self.p.body = self.stack.pop().expect("the body");
        self.p
    }
}

fn opts(threads: usize) -> HostOptions {
    HostOptions { threads }
}

/// Runs `p` over byte buffers.
fn launch(
    p: &Program,
    grid: [u32; 3],
    bufs: &mut [Vec<u8>],
    params: &[u8],
    threads: usize,
) -> Result<(), HostError> {
    let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    run(p, grid, &mut views, params, &opts(threads))
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn unwords(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Values of `ty` as memory bytes (each value's low bits).
fn enc(ty: Ty, vals: &[u64]) -> Vec<u8> {
    let n = if ty == Ty::Bool {
        4
    } else {
        ty.bytes() as usize
    };
    vals.iter()
        .flat_map(|v| v.to_le_bytes()[..n].to_vec())
        .collect()
}

fn dec(ty: Ty, bytes: &[u8]) -> Vec<u64> {
    let n = if ty == Ty::Bool {
        4
    } else {
        ty.bytes() as usize
    };
    bytes
        .chunks_exact(n)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

fn f32b(x: f32) -> u64 {
    u64::from(x.to_bits())
}

fn h(bits: u64) -> f64 {
    f64::from(f16::from_bits(bits as u16).to_f32())
}

fn hb(x: f64) -> u64 {
    u64::from(f16::from_f64(x).to_bits())
}

fn f(bits: u64) -> f32 {
    f32::from_bits(bits as u32)
}

fn edge_values(ty: Ty) -> Vec<u64> {
    match ty {
        Ty::U32 => vec![
            0,
            1,
            2,
            7,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fffe,
            0xffff_ffff,
        ],
        Ty::I32 => [0i32, 1, -1, 7, -7, 3, i32::MAX, i32::MIN]
            .iter()
            .map(|&v| u64::from(v as u32))
            .collect(),
        Ty::F32 => [
            0.0f32,
            -0.0,
            1.5,
            -2.25,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            3e9,
        ]
        .iter()
        .map(|&v| f32b(v))
        .collect(),
        // 0, -0, 1.5, -2.25, inf, -inf, NaN, 65504, the smallest subnormal, 2049's neighbour 2048.
        Ty::F16 => vec![
            0x0000, 0x8000, 0x3e00, 0xc080, 0x7c00, 0xfc00, 0x7e00, 0x7bff, 0x0001, 0x6800,
        ],
        Ty::Bool => vec![0, 1],
        Ty::U64 => vec![0, 1, 2, 1 << 32, u64::MAX, 1 << 63, 12_345_678_901, 7],
    }
}

fn is_nan(ty: Ty, bits: u64) -> bool {
    match ty {
        Ty::F32 => f(bits).is_nan(),
        Ty::F16 => h(bits).is_nan(),
        _ => false,
    }
}

/// WGSL's result of `op` over `ty`, written independently of the host
/// end (f16 through exact f64 arithmetic, rounded once), or `None` where
/// the operation is not defined on the type.
fn ref_bin(op: BinOp, ty: Ty, a: u64, b: u64) -> Option<u64> {
    use BinOp::*;
    let cmp = |o: std::cmp::Ordering| -> u64 {
        use std::cmp::Ordering::*;
        u64::from(match op {
            Eq => o == Equal,
            Ne => o != Equal,
            Lt => o == Less,
            Le => o != Greater,
            Gt => o == Greater,
            Ge => o != Less,
            _ => unreachable!(),
        })
    };
    let fcmp = |x: f64, y: f64| -> u64 {
        u64::from(match op {
            Eq => x == y,
            Ne => x != y,
            Lt => x < y,
            Le => x <= y,
            Gt => x > y,
            Ge => x >= y,
            _ => unreachable!(),
        })
    };
    Some(match ty {
        Ty::U32 | Ty::Bool => {
            let (x, y) = (a as u32, b as u32);
            if ty == Ty::Bool && !matches!(op, And | Or | Xor | Eq | Ne) {
                return None;
            }
            u64::from(match op {
                Add => x.wrapping_add(y),
                Sub => x.wrapping_sub(y),
                Mul => x.wrapping_mul(y),
                MulHi if ty == Ty::U32 => ((u64::from(x) * u64::from(y)) >> 32) as u32,
                MulHi => return None,
                // WGSL: `x / 0` is `x`, `x % 0` is 0.
                Div => x.checked_div(y).unwrap_or(x),
                Rem => x.checked_rem(y).unwrap_or(0),
                Min => x.min(y),
                Max => x.max(y),
                And => x & y,
                Or => x | y,
                Xor => x ^ y,
                Shl => x << y,
                Shr => x >> y,
                Eq | Ne | Lt | Le | Gt | Ge => return Some(cmp(x.cmp(&y))),
                Pow | Atan2 => return None,
            })
        }
        Ty::I32 => {
            let (x, y) = (a as u32 as i32, b as u32 as i32);
            let r = match op {
                Add => x.wrapping_add(y),
                Sub => x.wrapping_sub(y),
                Mul => x.wrapping_mul(y),
                Div => match (x, y) {
                    (_, 0) => x,
                    (i32::MIN, -1) => i32::MIN,
                    _ => x / y,
                },
                Rem => match (x, y) {
                    (_, 0) | (i32::MIN, -1) => 0,
                    _ => x % y,
                },
                Min => x.min(y),
                Max => x.max(y),
                And => x & y,
                Or => x | y,
                Xor => x ^ y,
                Shl => x << (b as u32),
                Shr => x >> (b as u32),
                Eq | Ne | Lt | Le | Gt | Ge => return Some(cmp(x.cmp(&y))),
                MulHi | Pow | Atan2 => return None,
            };
            u64::from(r as u32)
        }
        Ty::F32 => {
            let (x, y) = (f(a), f(b));
            let r = match op {
                Add => x + y,
                Sub => x - y,
                Mul => x * y,
                Div => x / y,
                Min => x.min(y),
                Max => x.max(y),
                Pow => x.powf(y),
                Atan2 => x.atan2(y),
                Eq | Ne | Lt | Le | Gt | Ge => return Some(fcmp(f64::from(x), f64::from(y))),
                _ => return None,
            };
            f32b(r)
        }
        Ty::F16 => {
            let (x, y) = (h(a), h(b));
            match op {
                Add => hb(x + y),
                Sub => hb(x - y),
                Mul => hb(x * y),
                Div => hb(x / y),
                Min => hb(x.min(y)),
                Max => hb(x.max(y)),
                Pow => hb(f64::from((x as f32).powf(y as f32))),
                Atan2 => hb(f64::from((x as f32).atan2(y as f32))),
                Eq | Ne | Lt | Le | Gt | Ge => fcmp(x, y),
                _ => return None,
            }
        }
        Ty::U64 => match op {
            Add => a.wrapping_add(b),
            Sub => a.wrapping_sub(b),
            Mul => a.wrapping_mul(b),
            Div => a.checked_div(b).unwrap_or(a),
            Rem => a.checked_rem(b).unwrap_or(0),
            Min => a.min(b),
            Max => a.max(b),
            And => a & b,
            Or => a | b,
            Xor => a ^ b,
            Shl => a << b,
            Shr => a >> b,
            Eq | Ne | Lt | Le | Gt | Ge => cmp(a.cmp(&b)),
            MulHi | Pow | Atan2 => return None,
        },
    })
}

const TYPES: [Ty; 6] = [Ty::U32, Ty::I32, Ty::F32, Ty::F16, Ty::Bool, Ty::U64];

/// Runs `out[i] = op(a[i], b[i])` over one workgroup of `n` lanes.
fn run_bin(op: BinOp, ty: Ty, bty: Ty, a: &[u64], b: &[u64]) -> Vec<u64> {
    let n = a.len() as u32;
    let out_ty = if op.is_comparison() { Ty::Bool } else { ty };
    let mut k = K::new([n, 1, 1], 3);
    let i = k.gid();
    let x = k.load(0, i, ty);
    let y = k.load(1, i, bty);
    let r = k.bin(op, x, y);
    k.store(2, i, r);
    let p = k.finish();
    let mut bufs = vec![enc(ty, a), enc(bty, b), enc(out_ty, &vec![0xdead; a.len()])];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    dec(out_ty, &bufs[2])
}

#[test]
fn every_binop_on_every_type() {
    let mut checked = 0;
    for ty in TYPES {
        for op in BinOp::ALL {
            let shift = matches!(op, BinOp::Shl | BinOp::Shr);
            let vals = edge_values(ty);
            let bvals: Vec<u64> = match (shift, ty) {
                (true, Ty::U64) => vec![0, 1, 33, 63],
                (true, _) => vec![0, 1, 5, 31],
                (false, _) => vals.clone(),
            };
            if ref_bin(op, ty, vals[0], bvals[0]).is_none() {
                continue;
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for &x in &vals {
                for &y in &bvals {
                    a.push(x);
                    b.push(y);
                }
            }
            let bty = if shift { Ty::U32 } else { ty };
            let got = run_bin(op, ty, bty, &a, &b);
            let out_ty = if op.is_comparison() { Ty::Bool } else { ty };
            for i in 0..a.len() {
                let want = ref_bin(op, ty, a[i], b[i]).expect("defined");
                let ok = got[i] == want || (is_nan(out_ty, want) && is_nan(out_ty, got[i]));
                assert!(
                    ok,
                    "{op:?} on {ty:?}: {:#x}, {:#x} gave {:#x}, expected {want:#x}",
                    a[i], b[i], got[i]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 3000, "{checked}");
}

#[test]
fn integer_division_edges() {
    let min = i32::MIN as u32 as u64;
    let neg1 = (-1i32) as u32 as u64;
    let got = run_bin(
        BinOp::Div,
        Ty::I32,
        Ty::I32,
        &[min, 7, 7, neg1],
        &[neg1, 0, 2, 0],
    );
    assert_eq!(got, [min, 7, 3, neg1]);
    let got = run_bin(
        BinOp::Rem,
        Ty::I32,
        Ty::I32,
        &[min, 7, (-7i32) as u32 as u64],
        &[neg1, 0, 2],
    );
    assert_eq!(got, [0, 0, (-1i32) as u32 as u64]);
    let got = run_bin(BinOp::Div, Ty::U32, Ty::U32, &[9, 9], &[0, 4]);
    assert_eq!(got, [9, 2]);
    // Min/max of a NaN give the other operand.
    let nan = f32b(f32::NAN);
    let got = run_bin(
        BinOp::Min,
        Ty::F32,
        Ty::F32,
        &[nan, f32b(2.0)],
        &[f32b(1.0), nan],
    );
    assert_eq!(got, [f32b(1.0), f32b(2.0)]);
    // f16: 2048 + 1 rounds to even (2048), 2048 + 3 to 2052.
    let got = run_bin(
        BinOp::Add,
        Ty::F16,
        Ty::F16,
        &[0x6800, 0x6800],
        &[0x3c00, 0x4200],
    );
    assert_eq!(got, [0x6800, 0x6802]);
}

fn ref_un(op: UnOp, ty: Ty, a: u64) -> Option<u64> {
    use UnOp::*;
    let float = |g: fn(f32) -> f32, exact: Option<fn(f64) -> f64>| -> Option<u64> {
        match ty {
            Ty::F32 => Some(f32b(g(f(a)))),
            Ty::F16 => Some(match exact {
                Some(e) => hb(e(h(a))),
                None => hb(f64::from(g(h(a) as f32))),
            }),
            _ => None,
        }
    };
    match (op, ty) {
        (Neg, Ty::U32 | Ty::I32) => Some(u64::from((a as u32).wrapping_neg())),
        (Neg, Ty::F32) => Some(f32b(-f(a))),
        (Neg, Ty::F16) => Some(hb(-h(a))),
        (Neg, Ty::U64) => Some(a.wrapping_neg()),
        (Not, Ty::U32 | Ty::I32) => Some(u64::from(!(a as u32))),
        (Not, Ty::Bool) => Some(u64::from(a == 0)),
        (Not, Ty::U64) => Some(!a),
        (Abs, Ty::U32 | Ty::U64) => Some(a),
        (Abs, Ty::I32) => Some(u64::from((a as u32 as i32).wrapping_abs() as u32)),
        (Abs, Ty::F32) => Some(f32b(f(a).abs())),
        (Abs, Ty::F16) => Some(hb(h(a).abs())),
        (Floor, _) => float(f32::floor, Some(f64::floor)),
        (Ceil, _) => float(f32::ceil, Some(f64::ceil)),
        (Trunc, _) => float(f32::trunc, Some(f64::trunc)),
        (Round, _) => float(f32::round_ties_even, Some(f64::round_ties_even)),
        (Sqrt, _) => float(f32::sqrt, Some(f64::sqrt)),
        (InverseSqrt, _) => float(|x| 1.0 / x.sqrt(), None),
        (Exp2, _) => float(f32::exp2, None),
        (Log2, _) => float(f32::log2, None),
        (Sin, _) => float(f32::sin, None),
        (Cos, _) => float(f32::cos, None),
        (Tan, _) => float(f32::tan, None),
        (Asin, _) => float(f32::asin, None),
        (Acos, _) => float(f32::acos, None),
        (Atan, _) => float(f32::atan, None),
        (Sinh, _) => float(f32::sinh, None),
        (Cosh, _) => float(f32::cosh, None),
        (Tanh, _) => float(f32::tanh, None),
        (CountOneBits, Ty::U32 | Ty::I32) => Some(u64::from((a as u32).count_ones())),
        (ReverseBits, Ty::U32 | Ty::I32) => Some(u64::from((a as u32).reverse_bits())),
        (CountLeadingZeros, Ty::U32 | Ty::I32) => Some(u64::from((a as u32).leading_zeros())),
        (CountTrailingZeros, Ty::U32 | Ty::I32) => Some(u64::from((a as u32).trailing_zeros())),
        (CountOneBits, Ty::U64) => Some(u64::from(a.count_ones())),
        (ReverseBits, Ty::U64) => Some(a.reverse_bits()),
        (CountLeadingZeros, Ty::U64) => Some(u64::from(a.leading_zeros())),
        (CountTrailingZeros, Ty::U64) => Some(u64::from(a.trailing_zeros())),
        _ => None,
    }
}

/// Runs `out[i] = f(a[i])` where `f` builds the instruction.
fn run_map(from: Ty, to: Ty, a: &[u64], f: impl FnOnce(&mut K, Reg) -> Reg) -> Vec<u64> {
    let n = a.len() as u32;
    let mut k = K::new([n, 1, 1], 2);
    let i = k.gid();
    let x = k.load(0, i, from);
    let r = f(&mut k, x);
    k.store(1, i, r);
    let p = k.finish();
    let mut bufs = vec![enc(from, a), enc(to, &vec![0xdead; a.len()])];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    dec(to, &bufs[1])
}

#[test]
fn every_unop_on_every_type() {
    let mut checked = 0;
    for ty in TYPES {
        let mut vals = edge_values(ty);
        if ty.is_float() {
            // Values inside the domains of the inverse functions, and ties.
            let extra: [f32; 6] = [0.5, -0.25, 2.5, -3.5, 0.75, 100.0];
            vals.extend(extra.iter().map(|&x| {
                if ty == Ty::F32 {
                    f32b(x)
                } else {
                    hb(f64::from(x))
                }
            }));
        }
        for op in UnOp::ALL {
            if ref_un(op, ty, vals[0]).is_none() {
                continue;
            }
            let got = run_map(ty, ty, &vals, |k, x| k.un(op, x));
            for (&a, &g) in vals.iter().zip(&got) {
                let want = ref_un(op, ty, a).expect("defined");
                let ok = g == want || (is_nan(ty, want) && is_nan(ty, g));
                assert!(
                    ok,
                    "{op:?} on {ty:?}: {a:#x} gave {g:#x}, expected {want:#x}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 250, "{checked}");
}

#[test]
fn conversions_at_the_edges() {
    let i = |v: i32| u64::from(v as u32);
    type Case = (Ty, Ty, Vec<(u64, u64)>);
    let cases: Vec<Case> = vec![
        (
            Ty::F32,
            Ty::I32,
            vec![
                (f32b(f32::NAN), 0),
                (f32b(f32::INFINITY), i(i32::MAX)),
                (f32b(f32::NEG_INFINITY), i(i32::MIN)),
                (f32b(3e9), i(i32::MAX)),
                (f32b(-3e9), i(i32::MIN)),
                (f32b(-1.5), i(-1)),
                (f32b(1.9), 1),
            ],
        ),
        (
            Ty::F32,
            Ty::U32,
            vec![
                (f32b(f32::NAN), 0),
                (f32b(f32::INFINITY), u64::from(u32::MAX)),
                (f32b(3e9), 3_000_000_000),
                (f32b(5e9), u64::from(u32::MAX)),
                (f32b(-1.5), 0),
                (f32b(2.99), 2),
            ],
        ),
        (
            Ty::F32,
            Ty::F16,
            vec![
                (f32b(2049.0), 0x6800),
                (f32b(2051.0), 0x6802),
                (f32b(65520.0), 0x7c00),
                (f32b(65519.0), 0x7bff),
                (f32b(-1.5), 0xbe00),
                (f32b(1e-8), 0),
                (f32b(f32::NEG_INFINITY), 0xfc00),
            ],
        ),
        (
            Ty::F16,
            Ty::F32,
            vec![
                (0x0001, f32b(2f32.powi(-24))),
                (0xfc00, f32b(f32::NEG_INFINITY)),
            ],
        ),
        (
            Ty::F16,
            Ty::I32,
            vec![(0xfc00, i(i32::MIN)), (0xbe00, i(-1)), (0x7bff, 65504)],
        ),
        (
            Ty::F16,
            Ty::U32,
            vec![(0xbe00, 0), (0x7c00, u64::from(u32::MAX))],
        ),
        (
            Ty::U32,
            Ty::F16,
            vec![(2049, 0x6800), (2051, 0x6802), (70000, 0x7c00)],
        ),
        (Ty::I32, Ty::F16, vec![(i(-2049), 0xe800)]),
        (
            Ty::I32,
            Ty::F32,
            vec![
                (i(16_777_217), f32b(16_777_216.0)),
                (i(-1), f32b(-1.0)),
                (i(i32::MIN), f32b(-2147483648.0)),
            ],
        ),
        (
            Ty::U32,
            Ty::F32,
            vec![
                (u64::from(u32::MAX), f32b(4294967296.0)),
                (16_777_219, f32b(16_777_220.0)),
            ],
        ),
        (Ty::I32, Ty::U32, vec![(i(-1), u64::from(u32::MAX))]),
        (
            Ty::U32,
            Ty::U64,
            vec![(u64::from(u32::MAX), u64::from(u32::MAX))],
        ),
        (Ty::I32, Ty::U64, vec![(i(-2), u64::MAX - 1)]),
        (Ty::U64, Ty::U32, vec![((5 << 32) | 9, 9)]),
        (Ty::U64, Ty::F32, vec![(1 << 40, f32b(2f32.powi(40)))]),
        (
            Ty::F32,
            Ty::U64,
            vec![(f32b(-1.0), 0), (f32b(1e10), 10_000_000_000)],
        ),
        (Ty::Bool, Ty::F32, vec![(1, f32b(1.0)), (0, 0)]),
        (Ty::Bool, Ty::F16, vec![(1, 0x3c00)]),
        (Ty::Bool, Ty::I32, vec![(1, 1), (0, 0)]),
        (
            Ty::F32,
            Ty::Bool,
            vec![(f32b(-0.0), 0), (f32b(f32::NAN), 1), (f32b(0.5), 1)],
        ),
        (Ty::U32, Ty::Bool, vec![(0, 0), (0x100, 1)]),
        (Ty::U64, Ty::Bool, vec![(1 << 40, 1), (0, 0)]),
    ];
    for (from, to, pairs) in cases {
        let a: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let want: Vec<u64> = pairs.iter().map(|p| p.1).collect();
        let got = run_map(from, to, &a, |k, x| k.conv(x, to));
        assert_eq!(got, want, "{from:?} -> {to:?} of {a:#x?}");
    }
    // Bitcast keeps the bits.
    let got = run_map(Ty::F32, Ty::I32, &[f32b(-1.0)], |k, x| {
        let d = k.r(Ty::I32);
        k.i(Inst::Bitcast { dst: d, a: x });
        d
    });
    assert_eq!(got, [u64::from((-1.0f32).to_bits())]);
}

#[test]
fn fma_fuses_and_select_picks() {
    // 1 + 2^-23 squared, minus 1 + 2^-22: the fused result keeps 2^-46.
    let a = 1.0f32 + f32::EPSILON;
    let got = run_map(Ty::F32, Ty::F32, &[f32b(a)], |k, x| {
        let c = k.c(Ty::F32, f32b(-(1.0 + 2.0 * f32::EPSILON)));
        let d = k.r(Ty::F32);
        k.i(Inst::Fma {
            dst: d,
            a: x,
            b: x,
            c,
        });
        d
    });
    assert_eq!(got, [f32b(2f32.powi(-46))]);
    // The unfused product rounds the 2^-46 away.
    let got = run_map(Ty::F32, Ty::F32, &[f32b(a)], |k, x| {
        let c = k.c(Ty::F32, f32b(-(1.0 + 2.0 * f32::EPSILON)));
        let p = k.bin(BinOp::Mul, x, x);
        k.bin(BinOp::Add, p, c)
    });
    assert_eq!(got, [0]);
    let got = run_map(Ty::U32, Ty::U64, &[0, 1, 2, 3], |k, x| {
        let one = k.u(1);
        let bit = k.bin(BinOp::And, x, one);
        let c = k.conv(bit, Ty::Bool);
        let (a, b) = (k.c(Ty::U64, 1 << 40), k.c(Ty::U64, 5));
        let d = k.r(Ty::U64);
        k.i(Inst::Select {
            dst: d,
            cond: c,
            a,
            b,
        });
        d
    });
    assert_eq!(got, [5, 1 << 40, 5, 1 << 40]);
}

/// A kernel of 64 lanes that writes `f(lane)` to `out[lane]`.
fn per_lane(w: u32, f: impl FnOnce(&mut K, Reg) -> Reg) -> Vec<u32> {
    let mut k = K::new([w, 1, 1], 1);
    let i = k.gid();
    let r = f(&mut k, i);
    k.store(0, i, r);
    let p = k.finish();
    let mut bufs = vec![words(&vec![0xdead_beef; w as usize])];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    unwords(&bufs[0])
}

#[test]
fn if_with_mixed_masks_keeps_inactive_lanes() {
    let got = per_lane(64, |k, i| {
        let r = k.u(7);
        let three = k.u(3);
        let zero = k.u(0);
        let m = k.bin(BinOp::Rem, i, three);
        let c = k.bin(BinOp::Eq, m, zero);
        k.if_(
            c,
            |k| k.mov(r, i),
            |k| {
                let one = k.u(1);
                let c1 = k.bin(BinOp::Eq, m, one);
                k.if_(
                    c1,
                    |k| {
                        let hundred = k.u(100);
                        k.set(r, BinOp::Add, hundred);
                    },
                    |_| {},
                );
            },
        );
        r
    });
    let want: Vec<u32> = (0..64)
        .map(|i| match i % 3 {
            0 => i,
            1 => 107,
            _ => 7,
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn nested_loops_with_continue_break_and_break_if() {
    let got = per_lane(64, |k, i| {
        let sum = k.u(0);
        let j = k.u(0);
        let (one, two, five, ten, thousand) = (k.u(1), k.u(2), k.u(5), k.u(10), k.u(1000));
        let eight = k.u(8);
        let lim = k.bin(BinOp::Rem, i, eight);
        k.loop_(
            |k| {
                let done = k.bin(BinOp::Ge, j, lim);
                k.if_(done, |k| k.emit(Stmt::Break), |_| {});
                let kk = k.u(0);
                k.loop_(
                    |k| {
                        let is2 = k.bin(BinOp::Eq, kk, two);
                        k.if_(is2, |k| k.emit(Stmt::Continue), |_| {});
                        let past = k.bin(BinOp::Gt, kk, j);
                        k.if_(past, |k| k.emit(Stmt::Break), |_| {});
                        let t = k.bin(BinOp::Mul, kk, ten);
                        let t = k.bin(BinOp::Add, t, j);
                        k.set(sum, BinOp::Add, t);
                    },
                    |k| {
                        k.set(kk, BinOp::Add, one);
                        Some(k.bin(BinOp::Ge, kk, five))
                    },
                );
                let odd = k.bin(BinOp::And, j, one);
                let odd = k.conv(odd, Ty::Bool);
                k.if_(odd, |k| k.emit(Stmt::Continue), |_| {});
                k.set(sum, BinOp::Add, thousand);
            },
            |k| {
                k.set(j, BinOp::Add, one);
                None
            },
        );
        sum
    });
    let want: Vec<u32> = (0..64u32)
        .map(|i| {
            let mut sum = 0;
            let mut j = 0;
            loop {
                if j >= i % 8 {
                    break;
                }
                let mut kk = 0;
                loop {
                    if kk != 2 {
                        if kk > j {
                            break;
                        }
                        sum += kk * 10 + j;
                    }
                    kk += 1;
                    if kk >= 5 {
                        break;
                    }
                }
                if j & 1 == 0 {
                    sum += 1000;
                }
                j += 1;
            }
            sum
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn leave_crosses_a_loop_and_return_ends_divergent_lanes() {
    // block { loop { if x == lane % 5 { leave } x += 1; marker = 1 } marker = 2 }
    // then out = x * 10 + marker, except that odd lanes above 32 return
    // first (their output keeps its old value).
    let got = per_lane(64, |k, i| {
        let x = k.u(0);
        let marker = k.u(0);
        let (one, two, five, ten, big) = (k.u(1), k.u(2), k.u(5), k.u(10), k.u(32));
        let odd = k.bin(BinOp::And, i, one);
        let odd = k.conv(odd, Ty::Bool);
        let high = k.bin(BinOp::Ge, i, big);
        let leaves = k.bin(BinOp::And, odd, high);
        k.if_(leaves, |k| k.emit(Stmt::Return), |_| {});
        let target = k.bin(BinOp::Rem, i, five);
        k.block(|k, id| {
            k.loop_(
                |k| {
                    let hit = k.bin(BinOp::Eq, x, target);
                    k.if_(hit, |k| k.emit(Stmt::Leave(id)), |_| {});
                    k.set(x, BinOp::Add, one);
                    k.mov(marker, one);
                },
                |_| None,
            );
            k.mov(marker, two);
        });
        let r = k.bin(BinOp::Mul, x, ten);
        k.bin(BinOp::Add, r, marker)
    });
    let want: Vec<u32> = (0..64u32)
        .map(|i| {
            if i % 2 == 1 && i >= 32 {
                0xdead_beef
            } else {
                let t = i % 5;
                t * 10 + u32::from(t > 0)
            }
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn return_inside_a_loop_in_some_lanes() {
    // Lanes with lane % 4 == 3 return when the counter reaches 2; the
    // others leave the loop at 6 and write the counter.
    let got = per_lane(32, |k, i| {
        let n = k.u(0);
        let (one, two, three, four, six) = (k.u(1), k.u(2), k.u(3), k.u(4), k.u(6));
        let m = k.bin(BinOp::Rem, i, four);
        k.loop_(
            |k| {
                let r = k.bin(BinOp::Eq, m, three);
                let at = k.bin(BinOp::Eq, n, two);
                let ret = k.bin(BinOp::And, r, at);
                k.if_(ret, |k| k.emit(Stmt::Return), |_| {});
                k.set(n, BinOp::Add, one);
            },
            |k| Some(k.bin(BinOp::Ge, n, six)),
        );
        k.bin(BinOp::Add, n, m)
    });
    let want: Vec<u32> = (0..32u32)
        .map(|i| if i % 4 == 3 { 0xdead_beef } else { 6 + i % 4 })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn workgroup_tree_sum_through_shared_memory() {
    let groups = 37u32;
    let mut k = K::new([256, 1, 1], 2);
    k.p.shared_bytes = 256 * 4;
    let lid = k.read(Builtin::LocalId(Axis::X));
    let g = k.read(Builtin::GroupId(Axis::X));
    let i = k.gid();
    let v = k.load(0, i, Ty::U32);
    let four = k.u(4);
    let addr = k.bin(BinOp::Mul, lid, four);
    k.mstore(Space::Shared, addr, v);
    let stride = k.u(128);
    let (zero, one) = (k.u(0), k.u(1));
    k.loop_(
        |k| {
            k.emit(Stmt::Barrier {
                workgroup: true,
                storage: false,
            });
            let active = k.bin(BinOp::Lt, lid, stride);
            k.if_(
                active,
                |k| {
                    let other = k.bin(BinOp::Add, lid, stride);
                    let oaddr = k.bin(BinOp::Mul, other, four);
                    let a = k.mload(Space::Shared, addr, Ty::U32);
                    let b = k.mload(Space::Shared, oaddr, Ty::U32);
                    let s = k.bin(BinOp::Add, a, b);
                    k.mstore(Space::Shared, addr, s);
                },
                |_| {},
            );
        },
        |k| {
            k.set(stride, BinOp::Shr, one);
            Some(k.bin(BinOp::Eq, stride, zero))
        },
    );
    k.emit(Stmt::Barrier {
        workgroup: true,
        storage: false,
    });
    let first = k.bin(BinOp::Eq, lid, zero);
    k.if_(
        first,
        |k| {
            let total = k.mload(Space::Shared, zero, Ty::U32);
            k.store(1, g, total);
        },
        |_| {},
    );
    let p = k.finish();
    let input: Vec<u32> = (0..groups * 256)
        .map(|x| x.wrapping_mul(2_654_435_761) >> 8)
        .collect();
    for threads in [1, 4] {
        let mut bufs = vec![words(&input), words(&vec![0; groups as usize])];
        launch(&p, [groups, 1, 1], &mut bufs, &[], threads).expect("runs");
        let want: Vec<u32> = input
            .chunks(256)
            .map(|c| c.iter().fold(0u32, |a, &b| a.wrapping_add(b)))
            .collect();
        assert_eq!(unwords(&bufs[1]), want, "threads {threads}");
    }
}

#[test]
fn atomics_from_many_workgroups_on_many_threads() {
    // Every lane: counter += 1 (keeping the old value as a ticket),
    // max = max(max, signed value), and a compare-exchange that only the
    // first lane to arrive wins.
    let groups = 500u32;
    let mut k = K::new([64, 1, 1], 4);
    let i = k.gid();
    let zero64 = k.c(Ty::U64, 0);
    let four64 = k.c(Ty::U64, 4);
    let one = k.u(1);
    let ticket = k.r(Ty::U32);
    k.i(Inst::Atomic {
        op: AtomicOp::Add,
        dst: Some(ticket),
        space: Space::Buffer(0),
        addr: zero64,
        value: one,
        compare: None,
        guard: None,
    });
    k.store(1, i, ticket);
    // Signed max of (i * 7919) % 100000 - 50000.
    let (p7919, m, half) = (k.u(7919), k.u(100_000), k.u(50_000));
    let v = k.bin(BinOp::Mul, i, p7919);
    let v = k.bin(BinOp::Rem, v, m);
    let v = k.bin(BinOp::Sub, v, half);
    let sv = k.r(Ty::I32);
    k.i(Inst::Bitcast { dst: sv, a: v });
    k.i(Inst::Atomic {
        op: AtomicOp::Max,
        dst: None,
        space: Space::Buffer(0),
        addr: four64,
        value: sv,
        compare: None,
        guard: None,
    });
    k.i(Inst::Atomic {
        op: AtomicOp::Min,
        dst: None,
        space: Space::Buffer(2),
        addr: zero64,
        value: sv,
        compare: None,
        guard: None,
    });
    // compare-exchange 0 -> gid + 1 on buffer 3: one lane wins.
    let (zero, plus) = (k.u(0), k.bin(BinOp::Add, i, one));
    let won = k.r(Ty::U32);
    k.i(Inst::Atomic {
        op: AtomicOp::CompareExchange,
        dst: Some(won),
        space: Space::Buffer(3),
        addr: zero64,
        value: plus,
        compare: Some(zero),
        guard: None,
    });
    let p = k.finish();
    let total = groups * 64;
    for threads in [1, 2, 4] {
        let mut bufs = vec![
            words(&[0, (-60_000i32) as u32]),
            words(&vec![0; total as usize]),
            words(&[0]),
            words(&[0]),
        ];
        launch(&p, [groups, 1, 1], &mut bufs, &[], threads).expect("runs");
        let counter = unwords(&bufs[0]);
        assert_eq!(counter[0], total, "threads {threads}");
        let vals = (0..total).map(|i| (i.wrapping_mul(7919) % 100_000) as i32 - 50_000);
        assert_eq!(counter[1] as i32, vals.clone().max().expect("lanes"));
        assert_eq!(
            unwords(&bufs[2])[0] as i32,
            vals.min().expect("lanes").min(0)
        );
        let mut tickets = unwords(&bufs[1]);
        tickets.sort_unstable();
        assert!(
            tickets.iter().copied().eq(0..total),
            "tickets are a permutation"
        );
        let winner = unwords(&bufs[3])[0];
        assert!((1..=total).contains(&winner));
    }
}

#[test]
fn shared_memory_atomics_and_f16_halves() {
    // Lanes add into shared word lane % 4; then lane 0 copies the words
    // out. Each lane also writes its f16 value into half `lane` of
    // shared bytes 16.. and lane 0 reads two halves back.
    let mut k = K::new([16, 1, 1], 2);
    k.p.shared_bytes = 16 + 32;
    let lid = k.read(Builtin::LocalId(Axis::X));
    let (zero, two, three, four, sixteen) = (k.u(0), k.u(2), k.u(3), k.u(4), k.u(16));
    let slot = k.bin(BinOp::And, lid, three);
    let addr = k.bin(BinOp::Mul, slot, four);
    let old = k.r(Ty::U32);
    k.i(Inst::Atomic {
        op: AtomicOp::Add,
        dst: Some(old),
        space: Space::Shared,
        addr,
        value: lid,
        compare: None,
        guard: None,
    });
    let haddr = k.bin(BinOp::Mul, lid, two);
    let haddr = k.bin(BinOp::Add, haddr, sixteen);
    let hv = k.conv(lid, Ty::F16);
    k.mstore(Space::Shared, haddr, hv);
    k.store(1, lid, old);
    let first = k.bin(BinOp::Eq, lid, zero);
    k.if_(
        first,
        |k| {
            for w in 0..4u32 {
                let a = k.u(w * 4);
                let v = k.mload(Space::Shared, a, Ty::U32);
                let idx = k.u(w);
                k.store(0, idx, v);
            }
            for (n, at) in [(4u32, 16 + 2 * 5), (5, 16 + 2 * 6)] {
                let a = k.u(at);
                let v = k.mload(Space::Shared, a, Ty::F16);
                let v = k.conv(v, Ty::U32);
                let idx = k.u(n);
                k.store(0, idx, v);
            }
        },
        |_| {},
    );
    let p = k.finish();
    let mut bufs = vec![words(&[0; 6]), words(&[9; 16])];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    assert_eq!(unwords(&bufs[0]), [24, 28, 32, 36, 5, 6]);
    // Old values in lane order: lane l adds to word l % 4 after lanes
    // l - 4, l - 8, ...
    let want: Vec<u32> = (0..16u32).map(|l| (l % 4..l).step_by(4).sum()).collect();
    assert_eq!(unwords(&bufs[1]), want);
}

#[test]
fn guarded_loads_read_zero_and_guarded_stores_are_skipped() {
    // 100 lanes over buffers of 90 and 95 elements: out[i] = a[i] + 1.
    let mut k = K::new([100, 1, 1], 2);
    let i = k.gid();
    let a = k.load(0, i, Ty::U32);
    let one = k.u(1);
    let r = k.bin(BinOp::Add, a, one);
    k.store(1, i, r);
    let p = k.finish();
    let input: Vec<u32> = (10..100).collect();
    let mut bufs = vec![words(&input), words(&[7; 95])];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    let out = unwords(&bufs[1]);
    let want: Vec<u32> = (0..95).map(|i| if i < 90 { i + 11 } else { 1 }).collect();
    assert_eq!(out, want);

    // Without a guard, the access past the end is an error naming the
    // kernel and the offset.
    let mut k = K::new([8, 1, 1], 1);
    let i = k.gid();
    let (addr, _) = k.at(0, i, 4);
    let v = k.u(1);
    k.i(Inst::Store {
        space: Space::Buffer(0),
        addr,
        value: v,
        guard: None,
        atomic: false,
    });
    let mut p = k.finish();
    p.name = "oob".into();
    let mut bufs = vec![words(&[0; 6])];
    let err = launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect_err("out of bounds");
    assert!(err.message().contains("`oob`"), "{err}");
    assert!(err.message().contains("offset 24"), "{err}");
    assert!(err.message().contains("buffer 0"), "{err}");
}

#[test]
fn private_arrays_indexed_at_run_time() {
    // arr[j] = lane * j for j in 0..8; out = sum of arr[(lane + j) % 8] * j.
    let got = {
        let mut k = K::new([64, 1, 1], 1);
        k.p.private_bytes = 32;
        let i = k.gid();
        let (zero, one, four, eight) = (k.u(0), k.u(1), k.u(4), k.u(8));
        let j = k.u(0);
        k.loop_(
            |k| {
                let v = k.bin(BinOp::Mul, i, j);
                let a = k.bin(BinOp::Mul, j, four);
                k.mstore(Space::Private, a, v);
            },
            |k| {
                k.set(j, BinOp::Add, one);
                Some(k.bin(BinOp::Ge, j, eight))
            },
        );
        let sum = k.u(0);
        k.mov(j, zero);
        k.loop_(
            |k| {
                let x = k.bin(BinOp::Add, i, j);
                let x = k.bin(BinOp::Rem, x, eight);
                let a = k.bin(BinOp::Mul, x, four);
                let v = k.mload(Space::Private, a, Ty::U32);
                let v = k.bin(BinOp::Mul, v, j);
                k.set(sum, BinOp::Add, v);
            },
            |k| {
                k.set(j, BinOp::Add, one);
                Some(k.bin(BinOp::Ge, j, eight))
            },
        );
        k.store(0, i, sum);
        let p = k.finish();
        let mut bufs = vec![words(&[0; 64])];
        launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
        unwords(&bufs[0])
    };
    let want: Vec<u32> = (0..64u32)
        .map(|l| (0..8).map(|j| l * ((l + j) % 8) * j).sum())
        .collect();
    assert_eq!(got, want);
}

/// The host's subgroups, in Rust: chunks of 32 consecutive lanes, only
/// the active ones taking part.
fn ref_subgroup(op: SubgroupOp, a: &[u32], b: &[u32], active: &[bool]) -> Vec<Option<u32>> {
    let mut out = vec![None; a.len()];
    for start in (0..a.len()).step_by(32) {
        let end = (start + 32).min(a.len());
        let act: Vec<usize> = (start..end).filter(|&i| active[i]).collect();
        for &i in &act {
            let below = act.iter().filter(|&&j| j < i);
            let lane = i - start;
            let src = |s: Option<usize>| match s {
                Some(s) if start + s < end => a[start + s],
                _ => a[i],
            };
            out[i] = Some(match op {
                SubgroupOp::Reduce(Reduce::Add) => {
                    act.iter().map(|&j| a[j]).fold(0u32, u32::wrapping_add)
                }
                SubgroupOp::Reduce(Reduce::Max) => act.iter().map(|&j| a[j]).max().unwrap_or(0),
                SubgroupOp::InclusiveScan(Reduce::Add) => {
                    below.map(|&j| a[j]).fold(a[i], u32::wrapping_add)
                }
                SubgroupOp::ExclusiveScan(Reduce::Add) => {
                    below.map(|&j| a[j]).fold(0, u32::wrapping_add)
                }
                SubgroupOp::ExclusiveScan(Reduce::Mul) => {
                    below.map(|&j| a[j]).fold(1, u32::wrapping_mul)
                }
                SubgroupOp::BroadcastFirst => a[act[0]],
                SubgroupOp::Shuffle => src(Some(b[i] as usize)),
                SubgroupOp::ShuffleDown => src(lane.checked_add(b[i] as usize)),
                SubgroupOp::ShuffleUp => src(lane.checked_sub(b[i] as usize)),
                SubgroupOp::ShuffleXor => src(Some(lane ^ b[i] as usize)),
                SubgroupOp::Ballot => act
                    .iter()
                    .filter(|&&j| a[j] & 1 != 0)
                    .fold(0, |m, &j| m | 1 << (j - start)),
                SubgroupOp::All => u32::from(act.iter().all(|&j| a[j] & 1 != 0)),
                SubgroupOp::Any => u32::from(act.iter().any(|&j| a[j] & 1 != 0)),
                _ => unreachable!(),
            });
        }
    }
    out
}

#[test]
fn subgroup_operations_full_small_and_divergent() {
    let ops = [
        SubgroupOp::Reduce(Reduce::Add),
        SubgroupOp::Reduce(Reduce::Max),
        SubgroupOp::InclusiveScan(Reduce::Add),
        SubgroupOp::ExclusiveScan(Reduce::Add),
        SubgroupOp::ExclusiveScan(Reduce::Mul),
        SubgroupOp::BroadcastFirst,
        SubgroupOp::Shuffle,
        SubgroupOp::ShuffleDown,
        SubgroupOp::ShuffleUp,
        SubgroupOp::ShuffleXor,
        SubgroupOp::Ballot,
        SubgroupOp::All,
        SubgroupOp::Any,
    ];
    // Lane count, and which lanes take part: all, or lanes with
    // lane % 3 != 0 (divergent).
    for (w, divergent) in [
        (64u32, false),
        (64, true),
        (8, false),
        (8, true),
        (40, true),
    ] {
        for op in ops {
            let mut k = K::new([w, 1, 1], 3);
            let i = k.gid();
            let a = k.load(0, i, Ty::U32);
            let b = k.load(1, i, Ty::U32);
            let (zero, three) = (k.u(0), k.u(3));
            let out = k.u(0xdead);
            let body = |k: &mut K| {
                let r = match op {
                    SubgroupOp::Ballot | SubgroupOp::All | SubgroupOp::Any => {
                        let one = k.u(1);
                        let bit = k.bin(BinOp::And, a, one);
                        let c = k.conv(bit, Ty::Bool);
                        let r = k.subgroup(op, c, None);
                        if op == SubgroupOp::Ballot {
                            r
                        } else {
                            k.conv(r, Ty::U32)
                        }
                    }
                    SubgroupOp::Shuffle
                    | SubgroupOp::ShuffleDown
                    | SubgroupOp::ShuffleUp
                    | SubgroupOp::ShuffleXor => k.subgroup(op, a, Some(b)),
                    _ => k.subgroup(op, a, None),
                };
                k.mov(out, r);
            };
            if divergent {
                let m = k.bin(BinOp::Rem, i, three);
                let c = k.bin(BinOp::Ne, m, zero);
                k.if_(c, body, |_| {});
            } else {
                body(&mut k);
            }
            k.store(2, i, out);
            let p = k.finish();
            let av: Vec<u32> = (0..w).map(|i| (i * 37 + 11) % 101).collect();
            let bv: Vec<u32> = (0..w).map(|i| (i * 5 + 1) % 9).collect();
            let mut bufs = vec![words(&av), words(&bv), words(&vec![0; w as usize])];
            launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
            let active: Vec<bool> = (0..w).map(|i| !divergent || i % 3 != 0).collect();
            let want: Vec<u32> = ref_subgroup(op, &av, &bv, &active)
                .into_iter()
                .map(|v| v.unwrap_or(0xdead))
                .collect();
            assert_eq!(
                unwords(&bufs[2]),
                want,
                "{op:?}, {w} lanes, divergent {divergent}"
            );
        }
    }
    // Hand-checked: 8 lanes, sum of 0..8 and the ballot of odd lanes.
    let got = per_lane(8, |k, i| {
        k.subgroup(SubgroupOp::Reduce(Reduce::Add), i, None)
    });
    assert_eq!(got, [28; 8]);
    let got = per_lane(8, |k, i| {
        let one = k.u(1);
        let odd = k.bin(BinOp::And, i, one);
        let odd = k.conv(odd, Ty::Bool);
        k.subgroup(SubgroupOp::Ballot, odd, None)
    });
    assert_eq!(got, [0xaa; 8]);
    let got = per_lane(40, |k, _| k.read(Builtin::SubgroupInvocationId));
    assert_eq!(got, (0..40).map(|i| i % 32).collect::<Vec<u32>>());
}

#[test]
fn local_and_group_ids_in_three_dimensions() {
    // out[flat global index] = gx | gy << 4 | gz << 8 | lx << 12 | ly << 16 | lz << 20,
    // plus num_workgroups in the top bits checked separately.
    let size = [4u32, 2, 3];
    let grid = [3u32, 2, 2];
    let mut k = K::new(size, 1);
    let ids: Vec<Reg> = [
        Builtin::GroupId(Axis::X),
        Builtin::GroupId(Axis::Y),
        Builtin::GroupId(Axis::Z),
        Builtin::LocalId(Axis::X),
        Builtin::LocalId(Axis::Y),
        Builtin::LocalId(Axis::Z),
    ]
    .into_iter()
    .map(|b| k.read(b))
    .collect();
    let mut v = k.u(0);
    for (n, &id) in ids.iter().enumerate() {
        let s = k.u(4 * n as u32);
        let t = k.bin(BinOp::Shl, id, s);
        v = k.bin(BinOp::Or, v, t);
    }
    let ng = k.read(Builtin::NumGroups(Axis::Y));
    let s = k.u(28);
    let t = k.bin(BinOp::Shl, ng, s);
    v = k.bin(BinOp::Or, v, t);
    // flat = ((gz * 2 + gy) * 3 + gx) * 24 + lid
    let lid = k.lid();
    let (c2, c3, c24) = (k.u(2), k.u(3), k.u(24));
    let f = k.bin(BinOp::Mul, ids[2], c2);
    let f = k.bin(BinOp::Add, f, ids[1]);
    let f = k.bin(BinOp::Mul, f, c3);
    let f = k.bin(BinOp::Add, f, ids[0]);
    let f = k.bin(BinOp::Mul, f, c24);
    let f = k.bin(BinOp::Add, f, lid);
    k.store(0, f, v);
    let p = k.finish();
    let mut bufs = vec![words(&[0; 12 * 24])];
    launch(&p, grid, &mut bufs, &[], 1).expect("runs");
    let got = unwords(&bufs[0]);
    let mut want = Vec::new();
    for gz in 0..2 {
        for gy in 0..2 {
            for gx in 0..3 {
                for lz in 0..3 {
                    for ly in 0..2 {
                        for lx in 0..4 {
                            want.push(
                                gx | gy << 4 | gz << 8 | lx << 12 | ly << 16 | lz << 20 | 2 << 28,
                            );
                        }
                    }
                }
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn params_are_read_as_words() {
    let mut k = K::new([4, 1, 1], 1);
    k.p.param_bytes = 8;
    let i = k.gid();
    let (a, b) = (k.r(Ty::U32), k.r(Ty::F32));
    k.i(Inst::Param { dst: a, word: 0 });
    k.i(Inst::Param { dst: b, word: 1 });
    let fi = k.conv(i, Ty::F32);
    let s = k.bin(BinOp::Mul, fi, b);
    let s = k.conv(s, Ty::U32);
    let r = k.bin(BinOp::Add, s, a);
    k.store(0, i, r);
    let p = k.finish();
    let mut params = 1000u32.to_le_bytes().to_vec();
    params.extend(2.5f32.to_le_bytes());
    let mut bufs = vec![words(&[0; 4])];
    launch(&p, [1, 1, 1], &mut bufs, &params, 1).expect("runs");
    assert_eq!(unwords(&bufs[0]), [1000, 1002, 1005, 1007]);

    let err = launch(&p, [1, 1, 1], &mut bufs, &params[..6], 1).expect_err("short params");
    assert!(err.message().contains("8 bytes"), "{err}");
    assert!(err.message().contains("found 6"), "{err}");
}

#[test]
fn wrong_buffer_count_is_an_error() {
    let mut k = K::new([4, 1, 1], 2);
    let i = k.gid();
    k.store(1, i, i);
    let p = k.finish();
    let mut bufs = vec![words(&[0; 4])];
    let err = launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect_err("one buffer short");
    assert_eq!(
        err.message(),
        "kernel `test`: expected 2 storage buffers, found 1"
    );
    // Nothing ran.
    assert_eq!(unwords(&bufs[0]), [0; 4]);
}

#[test]
fn misaligned_odd_length_binding_is_copied_and_written_back() {
    // A 13-byte binding starting at byte 1 of its allocation: a u32 at
    // 4, an f16 at 10, and a guarded u32 store at 12 that is skipped
    // (only one byte is left).
    let mut k = K::new([1, 1, 1], 1);
    let (a4, a10, a12) = (k.c(Ty::U64, 4), k.c(Ty::U64, 10), k.c(Ty::U64, 12));
    let v = k.u(0x0403_0201);
    let x = k.mload(Space::Buffer(0), a4, Ty::U32);
    let x = k.bin(BinOp::Add, x, v);
    k.mstore(Space::Buffer(0), a4, x);
    let hv = k.c(Ty::F16, 0xabcd);
    k.mstore(Space::Buffer(0), a10, hv);
    let four = k.c(Ty::U64, 4);
    let end = k.bin(BinOp::Add, a12, four);
    let len = k.read(Builtin::BufferLen(0));
    let g = k.bin(BinOp::Le, end, len);
    let y = k.r(Ty::U32);
    k.i(Inst::Load {
        dst: y,
        space: Space::Buffer(0),
        addr: a12,
        guard: Some(g),
        atomic: false,
    });
    k.i(Inst::Store {
        space: Space::Buffer(0),
        addr: a12,
        value: v,
        guard: Some(g),
        atomic: false,
    });
    // The length reads 13: store it at 0.
    let len32 = k.conv(len, Ty::U32);
    let y1 = k.bin(BinOp::Add, len32, y);
    let a0 = k.c(Ty::U64, 0);
    k.mstore(Space::Buffer(0), a0, y1);
    let p = k.finish();
    let mut mem: Vec<u8> = (0..16).map(|b| b * 16).collect();
    let before = mem.clone();
    {
        let mut views: Vec<&mut [u8]> = vec![&mut mem[1..14]];
        run(&p, [1, 1, 1], &mut views, &[], &opts(1)).expect("runs");
    }
    let mut want = before.clone();
    want[1..5].copy_from_slice(&13u32.to_le_bytes());
    let x = u32::from_le_bytes([before[5], before[6], before[7], before[8]]) + 0x0403_0201;
    want[5..9].copy_from_slice(&x.to_le_bytes());
    want[11..13].copy_from_slice(&0xabcdu16.to_le_bytes());
    assert_eq!(mem, want);
}

#[test]
fn registers_written_from_themselves_and_u64_memory() {
    // x = x * 3 + x in place, and a U64 value stored and loaded back.
    let got = per_lane(8, |k, i| {
        let x = k.u(0);
        k.mov(x, i);
        let three = k.u(3);
        k.i(Inst::Bin {
            op: BinOp::Mul,
            dst: x,
            a: x,
            b: three,
        });
        k.i(Inst::Bin {
            op: BinOp::Add,
            dst: x,
            a: x,
            b: x,
        });
        x
    });
    assert_eq!(got, (0..8).map(|i| i * 6).collect::<Vec<u32>>());

    let mut k = K::new([4, 1, 1], 1);
    k.p.private_bytes = 16;
    let i = k.gid();
    let wide = k.conv(i, Ty::U64);
    let s = k.u(40);
    let wide = k.bin(BinOp::Shl, wide, s);
    let eight = k.u(8);
    k.mstore(Space::Private, eight, wide);
    let back = k.mload(Space::Private, eight, Ty::U64);
    let (off, _) = k.at(0, i, 8);
    k.mstore(Space::Buffer(0), off, back);
    let p = k.finish();
    let mut bufs = vec![vec![0u8; 32]];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    assert_eq!(dec(Ty::U64, &bufs[0]), [0, 1 << 40, 2 << 40, 3 << 40]);
}

#[test]
fn ill_typed_programs_are_errors() {
    let mut k = K::new([1, 1, 1], 0);
    let a = k.u(1);
    let d = k.r(Ty::F32);
    k.i(Inst::Un {
        op: UnOp::Sin,
        dst: d,
        a,
    });
    let p = k.finish();
    let err = launch(&p, [1, 1, 1], &mut [], &[], 1).expect_err("ill-typed");
    assert!(err.message().contains("expected F32"), "{err}");

    let mut k = K::new([1, 1, 1], 0);
    k.emit(Stmt::Break);
    let p = k.finish();
    let err = launch(&p, [1, 1, 1], &mut [], &[], 1).expect_err("break outside a loop");
    assert!(err.message().contains("outside a loop"), "{err}");
}

#[test]
fn read_only_bindings_in_place_copied_and_never_written() {
    // out[i] = a[i] * 2 with `a` read-only: viewed in place when aligned,
    // copied when not; a store into it is refused before anything runs.
    let mut k = K::new([16, 1, 1], 2);
    k.p.buffers[0].read_only = true;
    let i = k.gid();
    let a = k.load(0, i, Ty::U32);
    let two = k.u(2);
    let r = k.bin(BinOp::Mul, a, two);
    k.store(1, i, r);
    let p = k.finish();
    let input: Vec<u32> = (0..16).map(|x| x * 3 + 1).collect();
    let want: Vec<u32> = input.iter().map(|x| x * 2).collect();
    let mut bufs = vec![words(&input), words(&[0; 16])];
    launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect("runs");
    assert_eq!(unwords(&bufs[1]), want);

    let mut shifted = vec![0u8];
    shifted.extend(words(&input));
    let mut out = words(&[0; 16]);
    {
        let mut views: Vec<&mut [u8]> = vec![&mut shifted[1..], &mut out[..]];
        run(&p, [1, 1, 1], &mut views, &[], &opts(1)).expect("runs");
    }
    assert_eq!(unwords(&out), want);

    let mut k = K::new([4, 1, 1], 1);
    k.p.buffers[0].read_only = true;
    let i = k.gid();
    k.store(0, i, i);
    let p = k.finish();
    let mut bufs = vec![words(&[5; 4])];
    let err = launch(&p, [1, 1, 1], &mut bufs, &[], 1).expect_err("read-only");
    assert!(err.message().contains("read-only"), "{err}");
    assert_eq!(unwords(&bufs[0]), [5; 4]);
}
