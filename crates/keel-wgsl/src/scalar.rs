//! Scalar semantics: WGSL's operations on one value, shared by the
//! generated Rust (`crate::rust`, through `crate::native`) and the
//! interpreter's lane kernels (`crate::host`), so both ends compute the
//! same bits. Each is total (no input panics) and `#[inline(always)]`, so
//! that a constant `op` folds the `match` away.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use crate::ir::{AtomicOp, BinOp, UnOp};
use half::f16;

/// An atomic read-modify-write of `word`: the old value. Relaxed, as WGSL's
/// atomics are; signed min and max are a compare-exchange loop over the
/// bits.
pub fn atomic_rmw(word: &AtomicU32, op: AtomicOp, signed: bool, v: u32, cmp: u32) -> u32 {
    match op {
        AtomicOp::Add => word.fetch_add(v, Relaxed),
        AtomicOp::Sub => word.fetch_sub(v, Relaxed),
        AtomicOp::And => word.fetch_and(v, Relaxed),
        AtomicOp::Or => word.fetch_or(v, Relaxed),
        AtomicOp::Xor => word.fetch_xor(v, Relaxed),
        AtomicOp::Min if !signed => word.fetch_min(v, Relaxed),
        AtomicOp::Max if !signed => word.fetch_max(v, Relaxed),
        AtomicOp::Exchange => word.swap(v, Relaxed),
        AtomicOp::CompareExchange => word
            .compare_exchange(cmp, v, Relaxed, Relaxed)
            .unwrap_or_else(|old| old),
        AtomicOp::Min | AtomicOp::Max => {
            let mut old = word.load(Relaxed);
            loop {
                match word.compare_exchange_weak(
                    old,
                    atomic_apply(op, signed, old, v, cmp),
                    Relaxed,
                    Relaxed,
                ) {
                    Ok(old) => return old,
                    Err(now) => old = now,
                }
            }
        }
    }
}

/// The new value of an atomic read-modify-write of `old`.
#[inline(always)]
pub fn atomic_apply(op: AtomicOp, signed: bool, old: u32, v: u32, cmp: u32) -> u32 {
    match op {
        AtomicOp::Add => old.wrapping_add(v),
        AtomicOp::Sub => old.wrapping_sub(v),
        AtomicOp::And => old & v,
        AtomicOp::Or => old | v,
        AtomicOp::Xor => old ^ v,
        AtomicOp::Min if signed => (old as i32).min(v as i32) as u32,
        AtomicOp::Max if signed => (old as i32).max(v as i32) as u32,
        AtomicOp::Min => old.min(v),
        AtomicOp::Max => old.max(v),
        AtomicOp::Exchange => v,
        AtomicOp::CompareExchange => {
            if old == cmp {
                v
            } else {
                old
            }
        }
    }
}

/// `op` on a `u32` (integer operations; anything else returns `x`).
#[inline(always)]
pub fn un_u32(op: UnOp, x: u32) -> u32 {
    match op {
        UnOp::Neg => x.wrapping_neg(),
        UnOp::Not => !x,
        UnOp::CountOneBits => x.count_ones(),
        UnOp::ReverseBits => x.reverse_bits(),
        UnOp::CountLeadingZeros => x.leading_zeros(),
        UnOp::CountTrailingZeros => x.trailing_zeros(),
        _ => x,
    }
}

/// `op` on an `i32`: wrapping, and the bit operations of its bits.
#[inline(always)]
pub fn un_i32(op: UnOp, x: i32) -> i32 {
    match op {
        UnOp::Abs => x.wrapping_abs(),
        _ => un_u32(op, x as u32) as i32,
    }
}

/// `op` on a `u64`.
#[inline(always)]
pub fn un_u64(op: UnOp, x: u64) -> u64 {
    match op {
        UnOp::Neg => x.wrapping_neg(),
        UnOp::Not => !x,
        UnOp::CountOneBits => u64::from(x.count_ones()),
        UnOp::ReverseBits => x.reverse_bits(),
        UnOp::CountLeadingZeros => u64::from(x.leading_zeros()),
        UnOp::CountTrailingZeros => u64::from(x.trailing_zeros()),
        _ => x,
    }
}

/// `op` on an `f32` (float operations; anything else returns `x`).
#[inline(always)]
pub fn un_f32(op: UnOp, x: f32) -> f32 {
    match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Trunc => x.trunc(),
        UnOp::Round => x.round_ties_even(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::InverseSqrt => 1.0 / x.sqrt(),
        UnOp::Exp2 => x.exp2(),
        UnOp::Log2 => x.log2(),
        UnOp::Sin => x.sin(),
        UnOp::Cos => x.cos(),
        UnOp::Tan => x.tan(),
        UnOp::Asin => x.asin(),
        UnOp::Acos => x.acos(),
        UnOp::Atan => x.atan(),
        UnOp::Sinh => x.sinh(),
        UnOp::Cosh => x.cosh(),
        UnOp::Tanh => x.tanh(),
        _ => x,
    }
}

/// `op` on an `f16`: negation and absolute value on the bits, the rest
/// computed in `f32` and rounded once to `f16`.
#[inline(always)]
pub fn un_f16(op: UnOp, x: f16) -> f16 {
    match op {
        UnOp::Neg => f16::from_bits(x.to_bits() ^ 0x8000),
        UnOp::Abs => f16::from_bits(x.to_bits() & 0x7fff),
        _ => f16::from_f32(un_f32(op, x.to_f32())),
    }
}

/// `op` on two `u32`s (shifts take the amount, already masked, in `y`).
/// Division by zero gives `x` and remainder by zero 0, WGSL's results.
#[inline(always)]
pub fn bin_u32(op: BinOp, x: u32, y: u32) -> u32 {
    match op {
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::MulHi => ((u64::from(x) * u64::from(y)) >> 32) as u32,
        BinOp::Div => x.checked_div(y).unwrap_or(x),
        BinOp::Rem => x.checked_rem(y).unwrap_or(0),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::Shl => x.wrapping_shl(y),
        BinOp::Shr => x.wrapping_shr(y),
        _ => x,
    }
}

/// `op` on two `i32`s: wrapping; division by zero gives `x`, remainder
/// by zero 0, and `MIN / -1` wraps.
#[inline(always)]
pub fn bin_i32(op: BinOp, x: i32, y: i32) -> i32 {
    match op {
        BinOp::Div => {
            if y == 0 {
                x
            } else {
                x.wrapping_div(y)
            }
        }
        BinOp::Rem => {
            if y == 0 {
                0
            } else {
                x.wrapping_rem(y)
            }
        }
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::Shr => x.wrapping_shr(y as u32),
        _ => bin_u32(op, x as u32, y as u32) as i32,
    }
}

/// `op` on two `u64`s (shift amounts in `y`).
#[inline(always)]
pub fn bin_u64(op: BinOp, x: u64, y: u64) -> u64 {
    match op {
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div => x.checked_div(y).unwrap_or(x),
        BinOp::Rem => x.checked_rem(y).unwrap_or(0),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::Shl => x.wrapping_shl(y as u32),
        BinOp::Shr => x.wrapping_shr(y as u32),
        _ => x,
    }
}

/// `op` on two `f32`s: each rounded once, never contracted; `Rem` is
/// `x - y * trunc(x / y)`; min and max give the non-NaN operand.
#[inline(always)]
pub fn bin_f32(op: BinOp, x: f32, y: f32) -> f32 {
    match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Rem => x - y * (x / y).trunc(),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::Pow => x.powf(y),
        BinOp::Atan2 => x.atan2(y),
        _ => x,
    }
}

/// `op` on two `f16`s, computed in `f32` and rounded once: for one
/// `+ - * /` that is the correctly rounded `f16` result, as `f32` carries
/// more than twice `f16`'s precision plus two bits.
#[inline(always)]
pub fn bin_f16(op: BinOp, x: f16, y: f16) -> f16 {
    f16::from_f32(bin_f32(op, x.to_f32(), y.to_f32()))
}

/// A comparison (`Eq` .. `Ge`) of two values of one ordered type.
#[inline(always)]
pub fn cmp<T: PartialOrd>(op: BinOp, x: T, y: T) -> bool {
    match op {
        BinOp::Eq => x == y,
        BinOp::Ne => x != y,
        BinOp::Lt => x < y,
        BinOp::Le => x <= y,
        BinOp::Gt => x > y,
        BinOp::Ge => x >= y,
        _ => false,
    }
}

/// A comparison of two `f16`s (through their exact `f32` values).
#[inline(always)]
pub fn cmp_f16(op: BinOp, x: f16, y: f16) -> bool {
    cmp(op, x.to_f32(), y.to_f32())
}

/// `op` on two `bool`s: logical and, or, xor, or a comparison.
#[inline(always)]
pub fn bin_bool(op: BinOp, x: bool, y: bool) -> bool {
    match op {
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        _ => cmp(op, x, y),
    }
}

/// `x * y + z` with one rounding.
#[inline(always)]
pub fn fma_f32(x: f32, y: f32, z: f32) -> f32 {
    x.mul_add(y, z)
}

/// `x * y + z` for `f16`: the product of two `f16`s is exact in `f64`;
/// the sum is rounded to `f64`, then to `f16`.
#[inline(always)]
pub fn fma_f16(x: f16, y: f16, z: f16) -> f16 {
    f16::from_f64(f64::from(x.to_f32()).mul_add(f64::from(y.to_f32()), f64::from(z.to_f32())))
}

/// An integer as the nearest `f16`, rounded once (from its exact `f64`).
#[inline(always)]
pub fn f16_from_f64(x: f64) -> f16 {
    f16::from_f64(x)
}

/// A `bool` as an `f16`: 1 or 0.
#[inline(always)]
pub fn f16_from_bool(x: bool) -> f16 {
    if x { f16::ONE } else { f16::ZERO }
}

/// A `bool` as an `f32`: 1 or 0.
#[inline(always)]
pub fn f32_from_bool(x: bool) -> f32 {
    if x { 1.0 } else { 0.0 }
}
