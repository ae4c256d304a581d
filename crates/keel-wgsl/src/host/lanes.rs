//! Lane kernels: one function per operation and type, each a loop over the
//! lanes of a workgroup.
//!
//! The compiler picks a kernel once per instruction (a plain function
//! pointer), so the interpreter's dispatch happens outside the lane loop
//! and every loop is a straight map that LLVM vectorizes. With every lane
//! active the loop writes every lane; otherwise it computes every lane and
//! keeps the old value where the lane is inactive (a select, which still
//! vectorizes), so every operation here is total: no input panics.
//!
//! Registers of 32-bit class hold `U32`, `I32`, `F32` bits, `F16` bits in
//! the low half and `Bool` as 0 or 1; `U64` registers have their own
//! storage.

use half::f16;

use crate::ir::{BinOp, Reduce, Ty, UnOp};
use crate::scalar;

/// Which lanes an instruction writes; `None`: all of them.
pub(crate) type Mask<'a> = Option<&'a [bool]>;
/// A one-operand kernel over 32-bit registers.
pub(crate) type Un32 = fn(&mut [u32], &[u32], Mask<'_>);
/// A two-operand kernel over 32-bit registers.
pub(crate) type Bin32 = fn(&mut [u32], &[u32], &[u32], Mask<'_>);
/// A three-operand kernel over 32-bit registers (`fma`).
pub(crate) type Tri32 = fn(&mut [u32], &[u32], &[u32], &[u32], Mask<'_>);
/// A one-operand kernel over `U64` registers.
pub(crate) type Un64 = fn(&mut [u64], &[u64], Mask<'_>);
/// A two-operand kernel over `U64` registers.
pub(crate) type Bin64 = fn(&mut [u64], &[u64], &[u64], Mask<'_>);
/// A `U64` shift: the amount is a `U32` register.
pub(crate) type Shift64 = fn(&mut [u64], &[u64], &[u32], Mask<'_>);
/// A `U64` comparison, writing a `Bool`.
pub(crate) type Cmp64 = fn(&mut [u32], &[u64], &[u64], Mask<'_>);
/// A conversion from `U64` to a 32-bit type.
pub(crate) type Narrow = fn(&mut [u32], &[u64], Mask<'_>);
/// A conversion from a 32-bit type to `U64`.
pub(crate) type Widen = fn(&mut [u64], &[u32], Mask<'_>);

/// One step of a subgroup reduction.
pub(crate) type Step = fn(u32, u32) -> u32;

/// `d = f(a)` in the active lanes.
#[inline(always)]
pub(crate) fn map1<A: Copy, D: Copy>(d: &mut [D], a: &[A], m: Mask<'_>, f: impl Fn(A) -> D) {
    match m {
        None => {
            for (d, &a) in d.iter_mut().zip(a) {
                *d = f(a);
            }
        }
        Some(m) => {
            for ((d, &a), &m) in d.iter_mut().zip(a).zip(m) {
                let r = f(a);
                *d = if m { r } else { *d };
            }
        }
    }
}

/// `d = f(a, b)` in the active lanes.
#[inline(always)]
pub(crate) fn map2<A: Copy, B: Copy, D: Copy>(
    d: &mut [D],
    a: &[A],
    b: &[B],
    m: Mask<'_>,
    f: impl Fn(A, B) -> D,
) {
    match m {
        None => {
            for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
                *d = f(a, b);
            }
        }
        Some(m) => {
            for (((d, &a), &b), &m) in d.iter_mut().zip(a).zip(b).zip(m) {
                let r = f(a, b);
                *d = if m { r } else { *d };
            }
        }
    }
}

/// `d = f(a, b, c)` in the active lanes.
#[inline(always)]
pub(crate) fn map3<A: Copy, B: Copy, C: Copy, D: Copy>(
    d: &mut [D],
    a: &[A],
    b: &[B],
    c: &[C],
    m: Mask<'_>,
    f: impl Fn(A, B, C) -> D,
) {
    match m {
        None => {
            for (((d, &a), &b), &c) in d.iter_mut().zip(a).zip(b).zip(c) {
                *d = f(a, b, c);
            }
        }
        Some(m) => {
            for ((((d, &a), &b), &c), &m) in d.iter_mut().zip(a).zip(b).zip(c).zip(m) {
                let r = f(a, b, c);
                *d = if m { r } else { *d };
            }
        }
    }
}

/// `d = v` in the active lanes.
#[inline(always)]
pub(crate) fn fill<D: Copy>(d: &mut [D], v: D, m: Mask<'_>) {
    match m {
        None => d.fill(v),
        Some(m) => {
            for (d, &m) in d.iter_mut().zip(m) {
                *d = if m { v } else { *d };
            }
        }
    }
}

/// `d = cond ? a : b` in the active lanes.
#[inline(always)]
pub(crate) fn select<D: Copy>(d: &mut [D], c: &[u32], a: &[D], b: &[D], m: Mask<'_>) {
    map3(d, c, a, b, m, |c, a, b| if c != 0 { a } else { b });
}

/// An `f32` from its bits.
#[inline(always)]
fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

/// An `f16` held in the low half of a register, widened (exactly) to `f32`.
#[inline(always)]
fn h(x: u32) -> f32 {
    f16::from_bits(x as u16).to_f32()
}

/// An `f32` rounded to the nearest `f16`, ties to even, as register bits.
///
/// Rounding an `f32` result of one `+ - * /` or `sqrt` of `f16` operands
/// again to `f16` gives the correctly rounded `f16` result: `f32` carries
/// more than twice `f16`'s precision plus two bits.
#[inline(always)]
fn hb(x: f32) -> u32 {
    u32::from(f16::from_f32(x).to_bits())
}

/// An `f64` rounded once to the nearest `f16`, as register bits.
#[inline(always)]
fn hb64(x: f64) -> u32 {
    u32::from(f16::from_f64(x).to_bits())
}

/// A kernel `u32 -> u32`.
macro_rules! k1 {
    (|$x:ident| $e:expr) => {{
        let k: Un32 = |d, a, m| map1(d, a, m, |$x: u32| -> u32 { $e });
        k
    }};
}

/// A kernel `(u32, u32) -> u32`.
macro_rules! k2 {
    (|$x:ident, $y:ident| $e:expr) => {{
        let k: Bin32 = |d, a, b, m| map2(d, a, b, m, |$x: u32, $y: u32| -> u32 { $e });
        k
    }};
}

/// A float kernel `f32 -> f32` for `F32` and `F16` (computed in `f32`).
macro_rules! float1 {
    ($ty:expr, $op:ident) => {
        match $ty {
            Ty::F32 => Some(k1!(|v| scalar::un_f32(UnOp::$op, f(v)).to_bits())),
            Ty::F16 => Some(k1!(|v| u32::from(
                scalar::un_f16(UnOp::$op, f16::from_bits(v as u16)).to_bits()
            ))),
            _ => None,
        }
    };
}

/// A float kernel `(f32, f32) -> f32` for `F32` and `F16`.
macro_rules! float2 {
    ($ty:expr, $op:ident) => {
        match $ty {
            Ty::F32 => Some(k2!(|p, q| scalar::bin_f32(BinOp::$op, f(p), f(q)).to_bits())),
            Ty::F16 => Some(k2!(|p, q| u32::from(
                scalar::bin_f16(
                    BinOp::$op,
                    f16::from_bits(p as u16),
                    f16::from_bits(q as u16)
                )
                .to_bits()
            ))),
            _ => None,
        }
    };
}

/// A comparison kernel writing a `Bool` (0 or 1) for every 32-bit type.
macro_rules! compare {
    ($ty:expr, $op:tt) => {
        match $ty {
            Ty::U32 | Ty::Bool => Some(k2!(|p, q| u32::from(p $op q))),
            Ty::I32 => Some(k2!(|p, q| u32::from((p as i32) $op (q as i32)))),
            Ty::F32 => Some(k2!(|p, q| u32::from(f(p) $op f(q)))),
            Ty::F16 => Some(k2!(|p, q| u32::from(h(p) $op h(q)))),
            Ty::U64 => None,
        }
    };
}

/// The kernel of `op` over a 32-bit type, or `None` where WGSL has no
/// such operation.
pub(crate) fn un32(op: UnOp, ty: Ty) -> Option<Un32> {
    let int = matches!(ty, Ty::U32 | Ty::I32);
    match op {
        UnOp::Neg => match ty {
            Ty::U32 | Ty::I32 => Some(k1!(|x| x.wrapping_neg())),
            Ty::F32 => Some(k1!(|x| x ^ 0x8000_0000)),
            Ty::F16 => Some(k1!(|x| x ^ 0x8000)),
            _ => None,
        },
        UnOp::Not => match ty {
            Ty::U32 | Ty::I32 => Some(k1!(|x| !x)),
            Ty::Bool => Some(k1!(|x| x ^ 1)),
            _ => None,
        },
        UnOp::Abs => match ty {
            Ty::U32 => Some(k1!(|x| x)),
            Ty::I32 => Some(k1!(|x| (x as i32).wrapping_abs() as u32)),
            Ty::F32 => Some(k1!(|x| x & 0x7fff_ffff)),
            Ty::F16 => Some(k1!(|x| x & 0x7fff)),
            _ => None,
        },
        UnOp::Floor => float1!(ty, Floor),
        UnOp::Ceil => float1!(ty, Ceil),
        UnOp::Trunc => float1!(ty, Trunc),
        UnOp::Round => float1!(ty, Round),
        UnOp::Sqrt => float1!(ty, Sqrt),
        UnOp::InverseSqrt => float1!(ty, InverseSqrt),
        UnOp::Exp2 => float1!(ty, Exp2),
        UnOp::Log2 => float1!(ty, Log2),
        UnOp::Sin => float1!(ty, Sin),
        UnOp::Cos => float1!(ty, Cos),
        UnOp::Tan => float1!(ty, Tan),
        UnOp::Asin => float1!(ty, Asin),
        UnOp::Acos => float1!(ty, Acos),
        UnOp::Atan => float1!(ty, Atan),
        UnOp::Sinh => float1!(ty, Sinh),
        UnOp::Cosh => float1!(ty, Cosh),
        UnOp::Tanh => float1!(ty, Tanh),
        UnOp::CountOneBits if int => Some(k1!(|x| x.count_ones())),
        UnOp::ReverseBits if int => Some(k1!(|x| x.reverse_bits())),
        UnOp::CountLeadingZeros if int => Some(k1!(|x| x.leading_zeros())),
        UnOp::CountTrailingZeros if int => Some(k1!(|x| x.trailing_zeros())),
        _ => None,
    }
}

/// The kernel of `op` over operands of a 32-bit type (the shift amount
/// is `U32`), or `None` where WGSL has no such operation.
///
/// Integer division and remainder guard their divisor although the
/// lowering already does: a zero divisor gives WGSL's results (`a` for
/// `/`, 0 for `%`) and `MIN / -1` wraps, so no input can panic.
pub(crate) fn bin32(op: BinOp, ty: Ty) -> Option<Bin32> {
    let bits = matches!(ty, Ty::U32 | Ty::I32 | Ty::Bool);
    match (op, ty) {
        (BinOp::Add, Ty::U32 | Ty::I32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Add, x, y))),
        (BinOp::Sub, Ty::U32 | Ty::I32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Sub, x, y))),
        (BinOp::Mul, Ty::U32 | Ty::I32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Mul, x, y))),
        (BinOp::MulHi, Ty::U32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::MulHi, x, y))),
        (BinOp::Div, Ty::U32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Div, x, y))),
        (BinOp::Div, Ty::I32) => Some(k2!(
            |x, y| scalar::bin_i32(BinOp::Div, x as i32, y as i32) as u32
        )),
        (BinOp::Rem, Ty::U32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Rem, x, y))),
        (BinOp::Rem, Ty::I32) => Some(k2!(
            |x, y| scalar::bin_i32(BinOp::Rem, x as i32, y as i32) as u32
        )),
        (BinOp::Min, Ty::U32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Min, x, y))),
        (BinOp::Min, Ty::I32) => Some(k2!(
            |x, y| scalar::bin_i32(BinOp::Min, x as i32, y as i32) as u32
        )),
        (BinOp::Max, Ty::U32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Max, x, y))),
        (BinOp::Max, Ty::I32) => Some(k2!(
            |x, y| scalar::bin_i32(BinOp::Max, x as i32, y as i32) as u32
        )),
        (BinOp::And, _) if bits => Some(k2!(|x, y| x & y)),
        (BinOp::Or, _) if bits => Some(k2!(|x, y| x | y)),
        (BinOp::Xor, _) if bits => Some(k2!(|x, y| x ^ y)),
        (BinOp::Shl, Ty::U32 | Ty::I32) => Some(k2!(|x, y| x.wrapping_shl(y))),
        (BinOp::Shr, Ty::U32) => Some(k2!(|x, y| scalar::bin_u32(BinOp::Shr, x, y))),
        (BinOp::Shr, Ty::I32) => Some(k2!(
            |x, y| scalar::bin_i32(BinOp::Shr, x as i32, y as i32) as u32
        )),
        (BinOp::Eq, _) => compare!(ty, ==),
        (BinOp::Ne, _) => compare!(ty, !=),
        (BinOp::Lt, _) => compare!(ty, <),
        (BinOp::Le, _) => compare!(ty, <=),
        (BinOp::Gt, _) => compare!(ty, >),
        (BinOp::Ge, _) => compare!(ty, >=),
        (BinOp::Add, _) => float2!(ty, Add),
        (BinOp::Sub, _) => float2!(ty, Sub),
        (BinOp::Mul, _) => float2!(ty, Mul),
        (BinOp::Div, _) => float2!(ty, Div),
        (BinOp::Rem, _) => float2!(ty, Rem),
        (BinOp::Min, _) => float2!(ty, Min),
        (BinOp::Max, _) => float2!(ty, Max),
        (BinOp::Pow, _) => float2!(ty, Pow),
        (BinOp::Atan2, _) => float2!(ty, Atan2),
        _ => None,
    }
}

/// `a * b + c` with one rounding, for `F32` and `F16`.
pub(crate) fn fma32(ty: Ty) -> Option<Tri32> {
    match ty {
        Ty::F32 => Some(|d, a, b, c, m| {
            map3(d, a, b, c, m, |a, b, c| {
                scalar::fma_f32(f(a), f(b), f(c)).to_bits()
            });
        }),
        Ty::F16 => Some(|d, a, b, c, m| {
            map3(d, a, b, c, m, |a, b, c| {
                let h = |x: u32| f16::from_bits(x as u16);
                u32::from(scalar::fma_f16(h(a), h(b), h(c)).to_bits())
            });
        }),
        _ => None,
    }
}

/// One-operand `U64` kernels.
pub(crate) fn un64(op: UnOp) -> Option<Un64> {
    let k: Un64 = match op {
        UnOp::Neg => |d, a, m| map1(d, a, m, |x: u64| x.wrapping_neg()),
        UnOp::Not => |d, a, m| map1(d, a, m, |x: u64| !x),
        UnOp::Abs => |d, a, m| map1(d, a, m, |x: u64| x),
        UnOp::CountOneBits => |d, a, m| map1(d, a, m, |x: u64| u64::from(x.count_ones())),
        UnOp::ReverseBits => |d, a, m| map1(d, a, m, |x: u64| x.reverse_bits()),
        UnOp::CountLeadingZeros => |d, a, m| map1(d, a, m, |x: u64| u64::from(x.leading_zeros())),
        UnOp::CountTrailingZeros => |d, a, m| map1(d, a, m, |x: u64| u64::from(x.trailing_zeros())),
        _ => return None,
    };
    Some(k)
}

/// Two-operand `U64` kernels that write `U64`.
pub(crate) fn bin64(op: BinOp) -> Option<Bin64> {
    let k: Bin64 = match op {
        BinOp::Add => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.wrapping_add(y)),
        BinOp::Sub => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.wrapping_sub(y)),
        BinOp::Mul => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.wrapping_mul(y)),
        BinOp::Div => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.checked_div(y).unwrap_or(x)),
        BinOp::Rem => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.checked_rem(y).unwrap_or(0)),
        BinOp::Min => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.min(y)),
        BinOp::Max => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x.max(y)),
        BinOp::And => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x & y),
        BinOp::Or => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x | y),
        BinOp::Xor => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| x ^ y),
        _ => return None,
    };
    Some(k)
}

/// `U64` shifts by a `U32` amount (masked to the width).
pub(crate) fn shift64(op: BinOp) -> Option<Shift64> {
    let k: Shift64 = match op {
        BinOp::Shl => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u32| x.wrapping_shl(y)),
        BinOp::Shr => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u32| x.wrapping_shr(y)),
        _ => return None,
    };
    Some(k)
}

/// `U64` comparisons.
pub(crate) fn cmp64(op: BinOp) -> Option<Cmp64> {
    let k: Cmp64 = match op {
        BinOp::Eq => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| u32::from(x == y)),
        BinOp::Ne => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| u32::from(x != y)),
        BinOp::Lt => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| u32::from(x < y)),
        BinOp::Le => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| u32::from(x <= y)),
        BinOp::Gt => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| u32::from(x > y)),
        BinOp::Ge => |d, a, b, m| map2(d, a, b, m, |x: u64, y: u64| u32::from(x >= y)),
        _ => return None,
    };
    Some(k)
}

/// WGSL's conversion between two different 32-bit types: float to
/// integer truncates and saturates with NaN to 0 (Rust's `as`), integer
/// to float rounds to nearest even (to `f16` from the exact `f64`, so
/// once), integers of one width are reinterpreted, `Bool` is 0 or 1.
pub(crate) fn convert32(from: Ty, to: Ty) -> Option<Un32> {
    let k = match (from, to) {
        (Ty::Bool, Ty::U32 | Ty::I32) | (Ty::U32, Ty::I32) | (Ty::I32, Ty::U32) => k1!(|x| x),
        (Ty::Bool, Ty::F32) => k1!(|x| if x != 0 { 1.0f32.to_bits() } else { 0 }),
        (Ty::Bool, Ty::F16) => k1!(|x| if x != 0 { 0x3c00 } else { 0 }),
        (Ty::U32 | Ty::I32, Ty::Bool) => k1!(|x| u32::from(x != 0)),
        (Ty::F32, Ty::Bool) => k1!(|x| u32::from(f(x) != 0.0)),
        (Ty::F16, Ty::Bool) => k1!(|x| u32::from(h(x) != 0.0)),
        (Ty::U32, Ty::F32) => k1!(|x| (x as f32).to_bits()),
        (Ty::I32, Ty::F32) => k1!(|x| (x as i32 as f32).to_bits()),
        (Ty::U32, Ty::F16) => k1!(|x| hb64(f64::from(x))),
        (Ty::I32, Ty::F16) => k1!(|x| hb64(f64::from(x as i32))),
        (Ty::F32, Ty::U32) => k1!(|x| f(x) as u32),
        (Ty::F32, Ty::I32) => k1!(|x| f(x) as i32 as u32),
        (Ty::F16, Ty::U32) => k1!(|x| h(x) as u32),
        (Ty::F16, Ty::I32) => k1!(|x| h(x) as i32 as u32),
        (Ty::F32, Ty::F16) => k1!(|x| hb(f(x))),
        (Ty::F16, Ty::F32) => k1!(|x| h(x).to_bits()),
        _ => return None,
    };
    Some(k)
}

/// Conversion from a 32-bit type to `U64`: `U32` zero extends, `I32`
/// sign extends (Rust's `as`), floats truncate and saturate.
pub(crate) fn widen(from: Ty) -> Option<Widen> {
    let k: Widen = match from {
        Ty::U32 | Ty::Bool => |d, a, m| map1(d, a, m, u64::from),
        Ty::I32 => |d, a, m| map1(d, a, m, |x: u32| x as i32 as i64 as u64),
        Ty::F32 => |d, a, m| map1(d, a, m, |x: u32| f(x) as u64),
        Ty::F16 => |d, a, m| map1(d, a, m, |x: u32| h(x) as u64),
        Ty::U64 => return None,
    };
    Some(k)
}

/// Conversion from `U64` to a 32-bit type: integers truncate, floats
/// round to nearest even.
pub(crate) fn narrow(to: Ty) -> Option<Narrow> {
    let k: Narrow = match to {
        Ty::U32 | Ty::I32 => |d, a, m| map1(d, a, m, |x: u64| x as u32),
        Ty::Bool => |d, a, m| map1(d, a, m, |x: u64| u32::from(x != 0)),
        Ty::F32 => |d, a, m| map1(d, a, m, |x: u64| (x as f32).to_bits()),
        Ty::F16 => |d, a, m| map1(d, a, m, |x: u64| hb64(x as f64)),
        Ty::U64 => return None,
    };
    Some(k)
}

/// The combining step of a subgroup reduction over a 32-bit type and its
/// identity (what an exclusive scan gives its first invocation).
pub(crate) fn reduce32(r: Reduce, ty: Ty) -> Option<(Step, u32)> {
    let bits = matches!(ty, Ty::U32 | Ty::I32 | Ty::Bool);
    let all_ones = if ty == Ty::Bool { 1 } else { u32::MAX };
    let step: (Step, u32) = match (r, ty) {
        (Reduce::Add, Ty::U32 | Ty::I32) => (|x, y| x.wrapping_add(y), 0),
        (Reduce::Mul, Ty::U32 | Ty::I32) => (|x, y| x.wrapping_mul(y), 1),
        (Reduce::Min, Ty::U32) => (|x, y| x.min(y), u32::MAX),
        (Reduce::Max, Ty::U32) => (|x, y| x.max(y), 0),
        (Reduce::Min, Ty::I32) => (|x, y| (x as i32).min(y as i32) as u32, i32::MAX as u32),
        (Reduce::Max, Ty::I32) => (|x, y| (x as i32).max(y as i32) as u32, i32::MIN as u32),
        (Reduce::And, _) if bits => (|x, y| x & y, all_ones),
        (Reduce::Or, _) if bits => (|x, y| x | y, 0),
        (Reduce::Xor, _) if bits => (|x, y| x ^ y, 0),
        (Reduce::Add, Ty::F32) => (|x, y| (f(x) + f(y)).to_bits(), 0),
        (Reduce::Mul, Ty::F32) => (|x, y| (f(x) * f(y)).to_bits(), 1.0f32.to_bits()),
        (Reduce::Min, Ty::F32) => (|x, y| f(x).min(f(y)).to_bits(), f32::INFINITY.to_bits()),
        (Reduce::Max, Ty::F32) => (|x, y| f(x).max(f(y)).to_bits(), f32::NEG_INFINITY.to_bits()),
        (Reduce::Add, Ty::F16) => (|x, y| hb(h(x) + h(y)), 0),
        (Reduce::Mul, Ty::F16) => (|x, y| hb(h(x) * h(y)), 0x3c00),
        (Reduce::Min, Ty::F16) => (|x, y| hb(h(x).min(h(y))), 0x7c00),
        (Reduce::Max, Ty::F16) => (|x, y| hb(h(x).max(h(y))), 0xfc00),
        _ => return None,
    };
    Some(step)
}
