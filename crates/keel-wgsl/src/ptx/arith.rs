//! Arithmetic, conversions and reads: every [`Inst`] but memory and
//! subgroup operations.
//!
//! The source's float adds, subtracts and multiplies carry no rounding
//! modifier: PTX then rounds each to nearest but lets ptxas contract a
//! multiply and the add that uses it into one FMA, as nvcc's default
//! `--fmad=true` does. WGSL allows exactly that (section 15.7.5: fusion
//! where the result is at least as accurate, which an FMA's single
//! rounding is), NVIDIA's Vulkan driver does the same with SPIR-V, and a
//! matmul's inner loop needs it to reach the hardware's rate. Products
//! that are exact in f32 (two inputs of at most 12 significant bits, as
//! tf32, bf16 and f16 values are) give the same bits either way. A kernel
//! that needs an unfused `a * b + c` is printed with strict floating
//! point ([`super::Options::strict_float`]): each of them `.rn`, which
//! ptxas never contracts. Sequences this printer expands itself (`%`, the
//! math functions) keep `.rn` on every step, so their accuracy is what
//! was measured. Where an expansion needs several instructions, it writes
//! the destination last, so that a destination that is also an operand
//! is read intact.

use super::{Bank, Emitter, PtxError, Result, mov_ty};
use crate::ir::{Axis, BinOp, Builtin, Inst, Reg, Ty, UnOp};

impl Emitter<'_> {
    /// The rounding modifier of the source's float adds, subtracts and
    /// multiplies: `.rn` where floating point is strict, which keeps
    /// ptxas from contracting them; none otherwise.
    fn rounding(&self) -> &'static str {
        if self.strict_float { ".rn" } else { "" }
    }
}

/// The integer type suffix of `ty` for typed integer instructions.
fn int_suffix(ty: Ty) -> Option<&'static str> {
    match ty {
        Ty::U32 => Some("u32"),
        Ty::I32 => Some("s32"),
        Ty::U64 => Some("u64"),
        _ => None,
    }
}

/// The bit type of an integer `ty`.
fn bits_suffix(ty: Ty) -> &'static str {
    match ty {
        Ty::U64 => "b64",
        _ => "b32",
    }
}

fn axis(a: Axis) -> &'static str {
    match a {
        Axis::X => "x",
        Axis::Y => "y",
        Axis::Z => "z",
    }
}

impl Emitter<'_> {
    pub(super) fn inst(&mut self, inst: &Inst) -> Result<()> {
        match inst {
            Inst::Const { dst, bits } => self.constant(*dst, *bits),
            Inst::Mov { dst, src } => {
                let ty = self.ty(*dst)?;
                let s = self.reg_of(*src, ty, "mov")?;
                let d = self.reg(*dst)?;
                self.ins(&format!("mov.{} {d}, {s};", mov_ty(ty)));
                Ok(())
            }
            Inst::Un { op, dst, a } => self.unary(*op, *dst, *a),
            Inst::Bin { op, dst, a, b } => self.binary(*op, *dst, *a, *b),
            Inst::Fma { dst, a, b, c } => {
                let ty = self.ty(*dst)?;
                let name = match ty {
                    Ty::F32 => "fma.rn.f32",
                    Ty::F16 => "fma.rn.f16",
                    _ => return Err(PtxError::new(format!("fma of {ty:?}"))),
                };
                let (a, b, c) = (
                    self.reg_of(*a, ty, "fma")?,
                    self.reg_of(*b, ty, "fma")?,
                    self.reg_of(*c, ty, "fma")?,
                );
                let d = self.reg(*dst)?;
                self.ins(&format!("{name} {d}, {a}, {b}, {c};"));
                Ok(())
            }
            Inst::Select { dst, cond, a, b } => {
                let ty = self.ty(*dst)?;
                let c = self.reg_of(*cond, Ty::Bool, "select condition")?;
                let (a, b) = (
                    self.reg_of(*a, ty, "select")?,
                    self.reg_of(*b, ty, "select")?,
                );
                let d = self.reg(*dst)?;
                if ty == Ty::Bool {
                    // selp takes no predicates: move through a scratch
                    // predicate, as dst may be cond.
                    let t = self.tmp(Bank::Pred);
                    self.ins(&format!("mov.pred {t}, {b};"));
                    self.ins(&format!("@{c} mov.pred {t}, {a};"));
                    self.ins(&format!("mov.pred {d}, {t};"));
                } else {
                    self.ins(&format!("selp.{} {d}, {a}, {b}, {c};", mov_ty(ty)));
                }
                Ok(())
            }
            Inst::Convert { dst, a } => self.convert(*dst, *a),
            Inst::Bitcast { dst, a } => {
                let (dt, at) = (self.ty(*dst)?, self.ty(*a)?);
                if dt == Ty::Bool || at == Ty::Bool || dt.bytes() != at.bytes() {
                    return Err(PtxError::new(format!("bitcast of {at:?} to {dt:?}")));
                }
                let (d, a) = (self.reg(*dst)?, self.reg(*a)?);
                let width = match dt.bytes() {
                    2 => "b16",
                    4 => "b32",
                    _ => "b64",
                };
                self.ins(&format!("mov.{width} {d}, {a};"));
                Ok(())
            }
            Inst::Read { dst, what } => self.read(*dst, *what),
            Inst::Param { dst, word } => {
                let ty = self.ty(*dst)?;
                let t = match ty {
                    Ty::U32 => "u32",
                    Ty::I32 => "s32",
                    Ty::F32 => "f32",
                    _ => return Err(PtxError::new(format!("parameter word read as {ty:?}"))),
                };
                if *word >= self.param_words() {
                    return Err(PtxError::new(format!(
                        "parameter word {word} past the {}-byte block",
                        self.prog.param_bytes
                    )));
                }
                let d = self.reg(*dst)?;
                self.ins(&format!("ld.param.{t} {d}, [keel_w{word}];"));
                Ok(())
            }
            Inst::Load {
                dst,
                space,
                addr,
                guard,
                atomic,
            } => self.load(*dst, *space, *addr, *guard, *atomic),
            Inst::Store {
                space,
                addr,
                value,
                guard,
                atomic,
            } => self.store(*space, *addr, *value, *guard, *atomic),
            Inst::Atomic {
                op,
                dst,
                space,
                addr,
                value,
                compare,
                guard,
            } => self.atomic(*op, *dst, *space, *addr, *value, *compare, *guard),
            Inst::Subgroup { op, dst, a, b } => self.subgroup(*op, *dst, *a, *b),
        }
    }

    fn constant(&mut self, dst: Reg, bits: u64) -> Result<()> {
        let ty = self.ty(dst)?;
        let d = self.reg(dst)?;
        let line = match ty {
            Ty::Bool => format!("mov.pred {d}, {};", bits & 1),
            Ty::U32 | Ty::I32 => format!("mov.b32 {d}, 0x{:08X};", bits as u32),
            Ty::F32 => format!("mov.f32 {d}, 0f{:08X};", bits as u32),
            Ty::F16 => format!("mov.b16 {d}, 0x{:04X};", bits as u16),
            Ty::U64 => format!("mov.b64 {d}, 0x{bits:016X};"),
        };
        self.ins(&line);
        Ok(())
    }

    fn read(&mut self, dst: Reg, what: Builtin) -> Result<()> {
        let src = match what {
            Builtin::BufferLen(n) => {
                if n as usize >= self.prog.buffers.len() {
                    return Err(PtxError::new(format!(
                        "length of buffer {n}, which is not bound"
                    )));
                }
                let d = self.reg_of(dst, Ty::U64, "buffer length")?;
                self.ins(&format!("mov.b64 {d}, %len{n};"));
                return Ok(());
            }
            Builtin::LocalId(a) => format!("%tid.{}", axis(a)),
            Builtin::GroupId(a) => format!("%ctaid.{}", axis(a)),
            Builtin::NumGroups(a) => format!("%nctaid.{}", axis(a)),
            // A warp is a subgroup.
            Builtin::SubgroupSize => "32".to_string(),
            Builtin::SubgroupInvocationId => "%laneid".to_string(),
        };
        let d = self.reg_of(dst, Ty::U32, "built-in")?;
        self.ins(&format!("mov.u32 {d}, {src};"));
        Ok(())
    }

    fn unary(&mut self, op: UnOp, dst: Reg, a: Reg) -> Result<()> {
        let ty = self.ty(dst)?;
        if ty.is_float()
            && matches!(
                op,
                UnOp::Tan
                    | UnOp::Asin
                    | UnOp::Acos
                    | UnOp::Atan
                    | UnOp::Sinh
                    | UnOp::Cosh
                    | UnOp::Tanh
            )
        {
            self.comment(&format!("{dst} = {op:?} {a}"));
        }
        let a = self.reg_of(a, ty, "unary operand")?;
        let d = self.reg(dst)?;
        let bad = || PtxError::new(format!("{op:?} of {ty:?}"));
        match ty {
            Ty::Bool => match op {
                UnOp::Not => self.ins(&format!("not.pred {d}, {a};")),
                _ => return Err(bad()),
            },
            Ty::U32 | Ty::I32 | Ty::U64 => {
                let wide = ty == Ty::U64;
                let b = bits_suffix(ty);
                match op {
                    UnOp::Neg => {
                        let s = if wide { "s64" } else { "s32" };
                        self.ins(&format!("neg.{s} {d}, {a};"));
                    }
                    UnOp::Not => self.ins(&format!("not.{b} {d}, {a};")),
                    UnOp::Abs if ty == Ty::I32 => {
                        // max(a, -a) wraps abs(MIN) to MIN, which abs.s32
                        // leaves unstated.
                        let t = self.tmp(Bank::B32);
                        self.ins(&format!("neg.s32 {t}, {a};"));
                        self.ins(&format!("max.s32 {d}, {a}, {t};"));
                    }
                    UnOp::Abs => self.ins(&format!("mov.{b} {d}, {a};")),
                    UnOp::CountOneBits if !wide => self.ins(&format!("popc.b32 {d}, {a};")),
                    UnOp::ReverseBits if !wide => self.ins(&format!("brev.b32 {d}, {a};")),
                    UnOp::CountLeadingZeros if !wide => self.ins(&format!("clz.b32 {d}, {a};")),
                    UnOp::CountTrailingZeros if !wide => {
                        // Trailing zeros are the reversed value's leading
                        // ones; clz gives 32 for 0 as WGSL wants.
                        let t = self.tmp(Bank::B32);
                        self.ins(&format!("brev.b32 {t}, {a};"));
                        self.ins(&format!("clz.b32 {d}, {t};"));
                    }
                    _ => return Err(bad()),
                }
            }
            Ty::F32 => self.unary_f32(op, &d, &a)?,
            Ty::F16 => match op {
                UnOp::Neg => self.ins(&format!("neg.f16 {d}, {a};")),
                // Clearing the sign bit is exact and needs no newer PTX
                // than abs.f32 does.
                UnOp::Abs => self.ins(&format!("and.b16 {d}, {a}, 0x7FFF;")),
                UnOp::Floor => self.ins(&format!("cvt.rmi.f16.f16 {d}, {a};")),
                UnOp::Ceil => self.ins(&format!("cvt.rpi.f16.f16 {d}, {a};")),
                UnOp::Trunc => self.ins(&format!("cvt.rzi.f16.f16 {d}, {a};")),
                UnOp::Round => self.ins(&format!("cvt.rni.f16.f16 {d}, {a};")),
                UnOp::Not
                | UnOp::CountOneBits
                | UnOp::ReverseBits
                | UnOp::CountLeadingZeros
                | UnOp::CountTrailingZeros => return Err(bad()),
                _ => {
                    // In f32 and rounded once back: f32 carries more than
                    // twice f16's precision, so sqrt stays correctly
                    // rounded and the approximations gain accuracy.
                    let (x, y) = (self.tmp(Bank::F32), self.tmp(Bank::F32));
                    self.ins(&format!("cvt.f32.f16 {x}, {a};"));
                    self.unary_f32(op, &y, &x)?;
                    self.ins(&format!("cvt.rn.f16.f32 {d}, {y};"));
                }
            },
        }
        Ok(())
    }

    /// `d = op(a)` for f32 registers (or scratch registers).
    fn unary_f32(&mut self, op: UnOp, d: &str, a: &str) -> Result<()> {
        let simple = match op {
            UnOp::Neg => "neg.f32",
            UnOp::Abs => "abs.f32",
            UnOp::Floor => "cvt.rmi.f32.f32",
            UnOp::Ceil => "cvt.rpi.f32.f32",
            UnOp::Trunc => "cvt.rzi.f32.f32",
            UnOp::Round => "cvt.rni.f32.f32",
            UnOp::Sqrt => "sqrt.rn.f32",
            UnOp::InverseSqrt => "rsqrt.approx.f32",
            UnOp::Exp2 => "ex2.approx.f32",
            UnOp::Log2 => "lg2.approx.f32",
            UnOp::Sin => "sin.approx.f32",
            UnOp::Cos => "cos.approx.f32",
            UnOp::Tan => return self.tan(d, a),
            UnOp::Asin => return self.asin(d, a),
            UnOp::Acos => return self.acos(d, a),
            UnOp::Atan => return self.atan(d, a),
            UnOp::Sinh => return self.sinh(d, a),
            UnOp::Cosh => return self.cosh(d, a),
            UnOp::Tanh => return self.tanh(d, a),
            UnOp::Not
            | UnOp::CountOneBits
            | UnOp::ReverseBits
            | UnOp::CountLeadingZeros
            | UnOp::CountTrailingZeros => return Err(PtxError::new(format!("{op:?} of a float"))),
        };
        self.ins(&format!("{simple} {d}, {a};"));
        Ok(())
    }

    fn binary(&mut self, op: BinOp, dst: Reg, a: Reg, b: Reg) -> Result<()> {
        if matches!(op, BinOp::Pow | BinOp::Atan2) {
            self.comment(&format!("{dst} = {op:?} {a}, {b}"));
        }
        let ty = self.ty(a)?;
        let a = self.reg_of(a, ty, "binary operand")?;
        let b = if matches!(op, BinOp::Shl | BinOp::Shr) {
            self.reg_of(b, Ty::U32, "shift amount")?
        } else {
            self.reg_of(b, ty, "binary operand")?
        };
        let dst_ty = if op.is_comparison() { Ty::Bool } else { ty };
        let d = self.reg_of(dst, dst_ty, "binary result")?;
        let bad = || PtxError::new(format!("{op:?} of {ty:?}"));
        match ty {
            Ty::Bool => match op {
                BinOp::And => self.ins(&format!("and.pred {d}, {a}, {b};")),
                BinOp::Or => self.ins(&format!("or.pred {d}, {a}, {b};")),
                BinOp::Xor | BinOp::Ne => self.ins(&format!("xor.pred {d}, {a}, {b};")),
                BinOp::Eq => {
                    let t = self.tmp(Bank::Pred);
                    self.ins(&format!("xor.pred {t}, {a}, {b};"));
                    self.ins(&format!("not.pred {d}, {t};"));
                }
                _ => return Err(bad()),
            },
            Ty::U32 | Ty::I32 | Ty::U64 => {
                let s = int_suffix(ty).ok_or_else(bad)?;
                let bits = bits_suffix(ty);
                // Wrapping add, subtract and multiply are the same
                // instruction for either signedness.
                let u = if ty == Ty::U64 { "u64" } else { "u32" };
                let line = match op {
                    BinOp::Add => format!("add.{u} {d}, {a}, {b};"),
                    BinOp::Sub => format!("sub.{u} {d}, {a}, {b};"),
                    BinOp::Mul => format!("mul.lo.{u} {d}, {a}, {b};"),
                    BinOp::MulHi if ty == Ty::U32 => format!("mul.hi.u32 {d}, {a}, {b};"),
                    BinOp::Div => format!("div.{s} {d}, {a}, {b};"),
                    BinOp::Rem => format!("rem.{s} {d}, {a}, {b};"),
                    BinOp::Min => format!("min.{s} {d}, {a}, {b};"),
                    BinOp::Max => format!("max.{s} {d}, {a}, {b};"),
                    BinOp::And => format!("and.{bits} {d}, {a}, {b};"),
                    BinOp::Or => format!("or.{bits} {d}, {a}, {b};"),
                    BinOp::Xor => format!("xor.{bits} {d}, {a}, {b};"),
                    BinOp::Shl => format!("shl.{bits} {d}, {a}, {b};"),
                    BinOp::Shr => format!("shr.{s} {d}, {a}, {b};"),
                    BinOp::Eq => format!("setp.eq.{s} {d}, {a}, {b};"),
                    BinOp::Ne => format!("setp.ne.{s} {d}, {a}, {b};"),
                    BinOp::Lt => format!("setp.lt.{s} {d}, {a}, {b};"),
                    BinOp::Le => format!("setp.le.{s} {d}, {a}, {b};"),
                    BinOp::Gt => format!("setp.gt.{s} {d}, {a}, {b};"),
                    BinOp::Ge => format!("setp.ge.{s} {d}, {a}, {b};"),
                    BinOp::MulHi | BinOp::Pow | BinOp::Atan2 => return Err(bad()),
                };
                self.ins(&line);
            }
            Ty::F32 => {
                if let Some(cmp) = float_compare(op) {
                    self.ins(&format!("setp.{cmp}.f32 {d}, {a}, {b};"));
                } else {
                    self.binary_f32(op, &d, &a, &b)?;
                }
            }
            Ty::F16 => {
                if let Some(cmp) = float_compare(op) {
                    self.ins(&format!("setp.{cmp}.f16 {d}, {a}, {b};"));
                    return Ok(());
                }
                let rn = self.rounding();
                match op {
                    BinOp::Add => self.ins(&format!("add{rn}.f16 {d}, {a}, {b};")),
                    BinOp::Sub => self.ins(&format!("sub{rn}.f16 {d}, {a}, {b};")),
                    BinOp::Mul => self.ins(&format!("mul{rn}.f16 {d}, {a}, {b};")),
                    BinOp::Div
                    | BinOp::Rem
                    | BinOp::Min
                    | BinOp::Max
                    | BinOp::Pow
                    | BinOp::Atan2 => {
                        // Through f32 (min.f16 needs sm_80). Division
                        // rounded in f32 then f16 is still correctly
                        // rounded (24 >= 2 * 11 + 2 bits); min and max
                        // are exact.
                        let [x, y, z] = [(); 3].map(|()| self.tmp(Bank::F32));
                        self.ins(&format!("cvt.f32.f16 {x}, {a};"));
                        self.ins(&format!("cvt.f32.f16 {y}, {b};"));
                        self.binary_f32(op, &z, &x, &y)?;
                        self.ins(&format!("cvt.rn.f16.f32 {d}, {z};"));
                    }
                    _ => return Err(bad()),
                }
            }
        }
        Ok(())
    }

    /// `d = op(a, b)` for f32 registers, `op` not a comparison.
    fn binary_f32(&mut self, op: BinOp, d: &str, a: &str, b: &str) -> Result<()> {
        let rn = self.rounding();
        let line = match op {
            BinOp::Add => format!("add{rn}.f32 {d}, {a}, {b};"),
            BinOp::Sub => format!("sub{rn}.f32 {d}, {a}, {b};"),
            BinOp::Mul => format!("mul{rn}.f32 {d}, {a}, {b};"),
            BinOp::Div => format!("div.rn.f32 {d}, {a}, {b};"),
            // min.f32 and max.f32 give the non-NaN operand, as the IR asks.
            BinOp::Min => format!("min.f32 {d}, {a}, {b};"),
            BinOp::Max => format!("max.f32 {d}, {a}, {b};"),
            BinOp::Rem => {
                // The lowering never emits it; a - b * trunc(a / b) keeps
                // the printer total.
                let t = self.tmp(Bank::F32);
                self.ins(&format!("div.rn.f32 {t}, {a}, {b};"));
                self.ins(&format!("cvt.rzi.f32.f32 {t}, {t};"));
                self.ins(&format!("mul.rn.f32 {t}, {t}, {b};"));
                format!("sub.rn.f32 {d}, {a}, {t};")
            }
            BinOp::Pow => return self.pow(d, a, b),
            BinOp::Atan2 => return self.atan2(d, a, b),
            _ => return Err(PtxError::new(format!("{op:?} of a float"))),
        };
        self.ins(&line);
        Ok(())
    }

    fn convert(&mut self, dst: Reg, a: Reg) -> Result<()> {
        let (to, from) = (self.ty(dst)?, self.ty(a)?);
        let (d, a) = (self.reg(dst)?, self.reg(a)?);
        let line = match (from, to) {
            _ if from == to => format!("mov.{} {d}, {a};", mov_ty(to)),
            (Ty::Bool, Ty::U32 | Ty::I32) => format!("selp.u32 {d}, 1, 0, {a};"),
            (Ty::Bool, Ty::U64) => format!("selp.u64 {d}, 1, 0, {a};"),
            (Ty::Bool, Ty::F32) => format!("selp.f32 {d}, 0f3F800000, 0f00000000, {a};"),
            (Ty::Bool, Ty::F16) => format!("selp.b16 {d}, 0x3C00, 0x0000, {a};"),
            (Ty::U32 | Ty::I32, Ty::Bool) => format!("setp.ne.u32 {d}, {a}, 0;"),
            (Ty::U64, Ty::Bool) => format!("setp.ne.u64 {d}, {a}, 0;"),
            // NaN != 0 holds, as in WGSL's bool(f).
            (Ty::F32, Ty::Bool) => format!("setp.neu.f32 {d}, {a}, 0f00000000;"),
            (Ty::F16, Ty::Bool) => {
                // f16 instructions take no immediates.
                let z = self.tmp(Bank::B16);
                self.ins(&format!("mov.b16 {z}, 0;"));
                format!("setp.neu.f16 {d}, {a}, {z};")
            }
            (Ty::U32 | Ty::I32, Ty::U32 | Ty::I32) => format!("mov.b32 {d}, {a};"),
            // cvt from a float to an integer of 32 bits or fewer rounds
            // as asked, clamps to the range and gives 0 for NaN: what
            // WGSL's conversion does.
            (Ty::F32 | Ty::F16, Ty::U32 | Ty::I32) => {
                let s = if to == Ty::U32 { "u32" } else { "s32" };
                let f = if from == Ty::F32 { "f32" } else { "f16" };
                format!("cvt.rzi.{s}.{f} {d}, {a};")
            }
            (Ty::F32 | Ty::F16, Ty::U64) => {
                // To 64 bits cvt gives 1 << 63 for NaN: fix it to 0.
                let f = if from == Ty::F32 { "f32" } else { "f16" };
                let p = self.tmp(Bank::Pred);
                self.ins(&format!("cvt.rzi.u64.{f} {d}, {a};"));
                self.ins(&format!("setp.nan.{f} {p}, {a}, {a};"));
                format!("@{p} mov.b64 {d}, 0;")
            }
            (Ty::U32 | Ty::I32 | Ty::U64, Ty::F32 | Ty::F16) => {
                let s = int_suffix(from).expect("an integer type");
                let f = if to == Ty::F32 { "f32" } else { "f16" };
                format!("cvt.rn.{f}.{s} {d}, {a};")
            }
            (Ty::F32, Ty::F16) => format!("cvt.rn.f16.f32 {d}, {a};"),
            (Ty::F16, Ty::F32) => format!("cvt.f32.f16 {d}, {a};"),
            (Ty::U32, Ty::U64) => format!("cvt.u64.u32 {d}, {a};"),
            // An I32 widens by its sign, keeping its value modulo 2^64.
            (Ty::I32, Ty::U64) => format!("cvt.s64.s32 {d}, {a};"),
            (Ty::U64, Ty::U32 | Ty::I32) => format!("cvt.u32.u64 {d}, {a};"),
            _ => return Err(PtxError::new(format!("conversion of {from:?} to {to:?}"))),
        };
        self.ins(&line);
        Ok(())
    }
}

/// The `setp` comparison of a float comparison `op`: ordered (false for
/// NaN) except `!=`, which holds for NaN.
fn float_compare(op: BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Eq => "eq",
        BinOp::Ne => "neu",
        BinOp::Lt => "lt",
        BinOp::Le => "le",
        BinOp::Gt => "gt",
        BinOp::Ge => "ge",
        _ => return None,
    })
}
