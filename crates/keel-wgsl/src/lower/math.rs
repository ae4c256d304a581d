//! Operators and built-in functions, component by component, with WGSL's
//! results where a target's instruction would differ.

use naga::{BinaryOperator as B, MathFunction as M, RelationalFunction as R};

use super::build::Builder;
use super::shape::Shape;
use super::{Result, err};
use crate::ir::{BinOp, Reg, Ty, UnOp};

/// `l op r` over whole values, with a scalar operand applied to every
/// component and matrix products.
pub(super) fn binary(
    b: &mut Builder,
    op: B,
    ls: &Shape,
    l: &[Reg],
    rs: &Shape,
    r: &[Reg],
) -> Result<Vec<Reg>> {
    if op == B::Multiply {
        match (ls, rs) {
            (Shape::Matrix { cols, rows, .. }, Shape::Vector(..)) => {
                // (rows x cols) * vec(cols) -> vec(rows)
                let (c, n) = (*cols as usize, *rows as usize);
                return Ok((0..n)
                    .map(|i| dot(b, &(0..c).map(|k| l[k * n + i]).collect::<Vec<_>>(), r))
                    .collect());
            }
            (Shape::Vector(..), Shape::Matrix { cols, rows, .. }) => {
                let (c, n) = (*cols as usize, *rows as usize);
                return Ok((0..c).map(|j| dot(b, l, &r[j * n..j * n + n])).collect());
            }
            (
                Shape::Matrix {
                    cols: lc, rows: lr, ..
                },
                Shape::Matrix { cols: rc, .. },
            ) => {
                let (lc, lr, rc) = (*lc as usize, *lr as usize, *rc as usize);
                let mut out = Vec::new();
                for j in 0..rc {
                    let col = &r[j * lc..j * lc + lc];
                    for i in 0..lr {
                        let row: Vec<Reg> = (0..lc).map(|k| l[k * lr + i]).collect();
                        out.push(dot(b, &row, col));
                    }
                }
                return Ok(out);
            }
            _ => {}
        }
    }
    let n = l.len().max(r.len());
    let pick = |v: &[Reg], i: usize| if v.len() == 1 { v[0] } else { v[i] };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(scalar_binary(b, op, pick(l, i), pick(r, i))?);
    }
    Ok(out)
}

fn scalar_binary(b: &mut Builder, op: B, x: Reg, y: Reg) -> Result<Reg> {
    let ty = b.ty(x);
    Ok(match op {
        B::Add => b.bin(BinOp::Add, x, y),
        B::Subtract => b.bin(BinOp::Sub, x, y),
        B::Multiply => b.bin(BinOp::Mul, x, y),
        B::Divide if ty.is_float() => b.bin(BinOp::Div, x, y),
        B::Divide => {
            let d = safe_divisor(b, x, y);
            b.bin(BinOp::Div, x, d)
        }
        B::Modulo if ty.is_float() => {
            // WGSL's float `%` truncates, like C's fmod but by formula.
            let q = b.bin(BinOp::Div, x, y);
            let t = b.un(UnOp::Trunc, q);
            let p = b.bin(BinOp::Mul, y, t);
            b.bin(BinOp::Sub, x, p)
        }
        B::Modulo => {
            let d = safe_divisor(b, x, y);
            b.bin(BinOp::Rem, x, d)
        }
        B::Equal => b.bin(BinOp::Eq, x, y),
        B::NotEqual => b.bin(BinOp::Ne, x, y),
        B::Less => b.bin(BinOp::Lt, x, y),
        B::LessEqual => b.bin(BinOp::Le, x, y),
        B::Greater => b.bin(BinOp::Gt, x, y),
        B::GreaterEqual => b.bin(BinOp::Ge, x, y),
        B::And | B::LogicalAnd => b.bin(BinOp::And, x, y),
        B::InclusiveOr | B::LogicalOr => b.bin(BinOp::Or, x, y),
        B::ExclusiveOr => b.bin(BinOp::Xor, x, y),
        B::ShiftLeft | B::ShiftRight => {
            // WGSL shifts by the amount modulo the bit width.
            let m = b.u32(31);
            let y = b.bitcast(y, Ty::U32);
            let s = b.bin(BinOp::And, y, m);
            let op = if op == B::ShiftLeft {
                BinOp::Shl
            } else {
                BinOp::Shr
            };
            b.bin(op, x, s)
        }
    })
}

/// A divisor that gives WGSL's results: `x / 0 == x`, `x % 0 == 0`,
/// `MIN / -1 == MIN`, `MIN % -1 == 0` all follow from dividing by 1.
fn safe_divisor(b: &mut Builder, x: Reg, y: Reg) -> Reg {
    let ty = b.ty(x);
    let zero = b.konst(ty, 0);
    let one = b.konst(ty, 1);
    let mut bad = b.bin(BinOp::Eq, y, zero);
    if ty == Ty::I32 {
        let min = b.konst(Ty::I32, 0x8000_0000);
        let m1 = b.konst(Ty::I32, 0xffff_ffff);
        let xm = b.bin(BinOp::Eq, x, min);
        let ym = b.bin(BinOp::Eq, y, m1);
        let ov = b.bin(BinOp::And, xm, ym);
        bad = b.bin(BinOp::Or, bad, ov);
    }
    b.select(bad, one, y)
}

/// Sum of products, left to right, never fused.
fn dot(b: &mut Builder, x: &[Reg], y: &[Reg]) -> Reg {
    let mut acc = b.bin(BinOp::Mul, x[0], y[0]);
    for i in 1..x.len() {
        let p = b.bin(BinOp::Mul, x[i], y[i]);
        acc = b.bin(BinOp::Add, acc, p);
    }
    acc
}

pub(super) fn relational(b: &mut Builder, fun: R, v: &[Reg]) -> Result<Vec<Reg>> {
    Ok(match fun {
        R::All | R::Any => {
            let op = if fun == R::All { BinOp::And } else { BinOp::Or };
            let mut acc = v[0];
            for &x in &v[1..] {
                acc = b.bin(op, acc, x);
            }
            vec![acc]
        }
        R::IsNan => v.iter().map(|&x| b.bin(BinOp::Ne, x, x)).collect(),
        R::IsInf => v
            .iter()
            .map(|&x| {
                let a = b.un(UnOp::Abs, x);
                let inf = b.float(b.ty(x), f64::INFINITY);
                b.bin(BinOp::Eq, a, inf)
            })
            .collect(),
    })
}

/// Applies `f` to each component, broadcasting scalar arguments.
fn each(
    b: &mut Builder,
    args: &[Vec<Reg>],
    mut f: impl FnMut(&mut Builder, &[Reg]) -> Result<Reg>,
) -> Result<Vec<Reg>> {
    let n = args.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let xs: Vec<Reg> = args
            .iter()
            .map(|a| if a.len() == 1 { a[0] } else { a[i] })
            .collect();
        out.push(f(b, &xs)?);
    }
    Ok(out)
}

pub(super) fn math(
    b: &mut Builder,
    fun: M,
    shapes: &[Shape],
    args: &[Vec<Reg>],
) -> Result<Vec<Reg>> {
    let un = |op: UnOp| move |b: &mut Builder, x: &[Reg]| Ok(b.un(op, x[0]));
    let bin = |op: BinOp| move |b: &mut Builder, x: &[Reg]| Ok(b.bin(op, x[0], x[1]));
    let ty = b.ty(args[0][0]);
    Ok(match fun {
        M::Abs => each(b, args, un(UnOp::Abs))?,
        M::Min => each(b, args, bin(BinOp::Min))?,
        M::Max => each(b, args, bin(BinOp::Max))?,
        M::Clamp => each(b, args, |b, x| {
            let lo = b.bin(BinOp::Max, x[0], x[1]);
            Ok(b.bin(BinOp::Min, lo, x[2]))
        })?,
        M::Saturate => each(b, args, |b, x| {
            let (z, o) = (b.float(ty, 0.0), b.float(ty, 1.0));
            let lo = b.bin(BinOp::Max, x[0], z);
            Ok(b.bin(BinOp::Min, lo, o))
        })?,
        M::Cos => each(b, args, un(UnOp::Cos))?,
        M::Sin => each(b, args, un(UnOp::Sin))?,
        M::Tan => each(b, args, un(UnOp::Tan))?,
        M::Cosh => each(b, args, un(UnOp::Cosh))?,
        M::Sinh => each(b, args, un(UnOp::Sinh))?,
        M::Tanh => each(b, args, un(UnOp::Tanh))?,
        M::Acos => each(b, args, un(UnOp::Acos))?,
        M::Asin => each(b, args, un(UnOp::Asin))?,
        M::Atan => each(b, args, un(UnOp::Atan))?,
        M::Atan2 => each(b, args, bin(BinOp::Atan2))?,
        M::Asinh | M::Acosh => each(b, args, |b, x| {
            // ln(x + sqrt(x^2 +- 1))
            let one = b.float(ty, 1.0);
            let sq = b.bin(BinOp::Mul, x[0], x[0]);
            let op = if fun == M::Asinh {
                BinOp::Add
            } else {
                BinOp::Sub
            };
            let s = b.bin(op, sq, one);
            let r = b.un(UnOp::Sqrt, s);
            let a = b.bin(BinOp::Add, x[0], r);
            Ok(ln(b, a))
        })?,
        M::Atanh => each(b, args, |b, x| {
            // 0.5 * ln((1 + x) / (1 - x))
            let one = b.float(ty, 1.0);
            let half = b.float(ty, 0.5);
            let p = b.bin(BinOp::Add, one, x[0]);
            let m = b.bin(BinOp::Sub, one, x[0]);
            let q = b.bin(BinOp::Div, p, m);
            let l = ln(b, q);
            Ok(b.bin(BinOp::Mul, half, l))
        })?,
        M::Radians | M::Degrees => each(b, args, |b, x| {
            let k = if fun == M::Radians {
                std::f64::consts::PI / 180.0
            } else {
                180.0 / std::f64::consts::PI
            };
            let k = b.float(ty, k);
            Ok(b.bin(BinOp::Mul, x[0], k))
        })?,
        M::Ceil => each(b, args, un(UnOp::Ceil))?,
        M::Floor => each(b, args, un(UnOp::Floor))?,
        M::Round => each(b, args, un(UnOp::Round))?,
        M::Trunc => each(b, args, un(UnOp::Trunc))?,
        M::Fract => each(b, args, |b, x| {
            let f = b.un(UnOp::Floor, x[0]);
            Ok(b.bin(BinOp::Sub, x[0], f))
        })?,
        M::Modf => {
            // struct { fract, whole }
            let whole: Vec<Reg> = args[0].iter().map(|&x| b.un(UnOp::Trunc, x)).collect();
            let fract: Vec<Reg> = args[0]
                .iter()
                .zip(&whole)
                .map(|(&x, &w)| b.bin(BinOp::Sub, x, w))
                .collect();
            fract.into_iter().chain(whole).collect()
        }
        M::Exp => each(b, args, |b, x| {
            let k = b.float(ty, std::f64::consts::LOG2_E);
            let y = b.bin(BinOp::Mul, x[0], k);
            Ok(b.un(UnOp::Exp2, y))
        })?,
        M::Exp2 => each(b, args, un(UnOp::Exp2))?,
        M::Log => each(b, args, |b, x| Ok(ln(b, x[0])))?,
        M::Log2 => each(b, args, un(UnOp::Log2))?,
        M::Pow => each(b, args, bin(BinOp::Pow))?,
        M::Dot => vec![dot(b, &args[0], &args[1])],
        M::Cross => {
            let (x, y) = (&args[0], &args[1]);
            let mut out = Vec::new();
            for (i, j) in [(1, 2), (2, 0), (0, 1)] {
                let p = b.bin(BinOp::Mul, x[i], y[j]);
                let q = b.bin(BinOp::Mul, x[j], y[i]);
                out.push(b.bin(BinOp::Sub, p, q));
            }
            out
        }
        M::Length => vec![length(b, &args[0])],
        M::Distance => {
            let d: Vec<Reg> = args[0]
                .iter()
                .zip(&args[1])
                .map(|(&x, &y)| b.bin(BinOp::Sub, x, y))
                .collect();
            vec![length(b, &d)]
        }
        M::Normalize => {
            let l = length(b, &args[0]);
            args[0].iter().map(|&x| b.bin(BinOp::Div, x, l)).collect()
        }
        M::FaceForward => {
            // select(-e1, e1, dot(e2, e3) < 0)
            let d = dot(b, &args[1], &args[2]);
            let z = b.float(ty, 0.0);
            let neg = b.bin(BinOp::Lt, d, z);
            args[0]
                .iter()
                .map(|&x| {
                    let n = b.un(UnOp::Neg, x);
                    b.select(neg, x, n)
                })
                .collect()
        }
        M::Reflect => {
            // e1 - 2 * dot(e2, e1) * e2
            let d = dot(b, &args[1], &args[0]);
            let two = b.float(ty, 2.0);
            let k = b.bin(BinOp::Mul, two, d);
            args[0]
                .iter()
                .zip(&args[1])
                .map(|(&x, &n)| {
                    let p = b.bin(BinOp::Mul, k, n);
                    b.bin(BinOp::Sub, x, p)
                })
                .collect()
        }
        M::Sign => each(b, args, |b, x| {
            let z = b.konst(ty, 0);
            let one = b.number(ty, 1);
            let m1 = b.number(ty, -1);
            let pos = b.bin(BinOp::Gt, x[0], z);
            let neg = b.bin(BinOp::Lt, x[0], z);
            let s = b.select(neg, m1, z);
            Ok(b.select(pos, one, s))
        })?,
        M::Fma => each(b, args, |b, x| Ok(b.fma(x[0], x[1], x[2])))?,
        M::Mix => each(b, args, |b, x| {
            // e1 * (1 - e3) + e2 * e3
            let one = b.float(ty, 1.0);
            let w = b.bin(BinOp::Sub, one, x[2]);
            let p = b.bin(BinOp::Mul, x[0], w);
            let q = b.bin(BinOp::Mul, x[1], x[2]);
            Ok(b.bin(BinOp::Add, p, q))
        })?,
        M::Step => each(b, args, |b, x| {
            // 1 where edge <= x
            let (z, o) = (b.float(ty, 0.0), b.float(ty, 1.0));
            let c = b.bin(BinOp::Le, x[0], x[1]);
            Ok(b.select(c, o, z))
        })?,
        M::SmoothStep => each(b, args, |b, x| {
            let (z, o) = (b.float(ty, 0.0), b.float(ty, 1.0));
            let (two, three) = (b.float(ty, 2.0), b.float(ty, 3.0));
            let num = b.bin(BinOp::Sub, x[2], x[0]);
            let den = b.bin(BinOp::Sub, x[1], x[0]);
            let t = b.bin(BinOp::Div, num, den);
            let t = b.bin(BinOp::Max, t, z);
            let t = b.bin(BinOp::Min, t, o);
            let tt = b.bin(BinOp::Mul, t, t);
            let t2 = b.bin(BinOp::Mul, two, t);
            let k = b.bin(BinOp::Sub, three, t2);
            Ok(b.bin(BinOp::Mul, tt, k))
        })?,
        M::Sqrt => each(b, args, un(UnOp::Sqrt))?,
        M::InverseSqrt => each(b, args, un(UnOp::InverseSqrt))?,
        M::Transpose => {
            let Shape::Matrix { cols, rows, .. } = shapes[0] else {
                return err("transpose of a non-matrix");
            };
            let (c, r) = (cols as usize, rows as usize);
            let m = &args[0];
            let mut out = Vec::new();
            for i in 0..r {
                for j in 0..c {
                    out.push(m[j * r + i]);
                }
            }
            out
        }
        M::Outer => {
            let mut out = Vec::new();
            for &y in &args[1] {
                for &x in &args[0] {
                    out.push(b.bin(BinOp::Mul, x, y));
                }
            }
            out
        }
        M::QuantizeToF16 => each(b, args, |b, x| {
            let h = b.convert(x[0], Ty::F16);
            Ok(b.convert(h, Ty::F32))
        })?,
        M::CountOneBits => each(b, args, un(UnOp::CountOneBits))?,
        M::ReverseBits => each(b, args, un(UnOp::ReverseBits))?,
        M::CountLeadingZeros => each(b, args, un(UnOp::CountLeadingZeros))?,
        M::CountTrailingZeros => each(b, args, un(UnOp::CountTrailingZeros))?,
        M::FirstTrailingBit => each(b, args, |b, x| {
            // -1 (all ones) for 0, else the index of the lowest set bit.
            let t = b.un(UnOp::CountTrailingZeros, x[0]);
            let z = b.konst(ty, 0);
            let all = b.konst(ty, 0xffff_ffff);
            let is0 = b.bin(BinOp::Eq, x[0], z);
            Ok(b.select(is0, all, t))
        })?,
        M::FirstLeadingBit => each(b, args, |b, x| {
            // Unsigned: the highest set bit. Signed: the highest bit that
            // differs from the sign; -1 for 0 (and for -1 when signed).
            let mut v = x[0];
            if ty == Ty::I32 {
                let z = b.konst(Ty::I32, 0);
                let neg = b.bin(BinOp::Lt, v, z);
                let inv = b.un(UnOp::Not, v);
                v = b.select(neg, inv, v);
            }
            let c = b.un(UnOp::CountLeadingZeros, v);
            let c = b.bitcast(c, ty);
            let k31 = b.konst(ty, 31);
            let idx = b.bin(BinOp::Sub, k31, c);
            let z = b.konst(ty, 0);
            let all = b.konst(ty, 0xffff_ffff);
            let is0 = b.bin(BinOp::Eq, v, z);
            Ok(b.select(is0, all, idx))
        })?,
        M::ExtractBits => each(b, args, |b, x| Ok(extract_bits(b, x[0], x[1], x[2])))?,
        M::InsertBits => each(b, args, |b, x| Ok(insert_bits(b, x[0], x[1], x[2], x[3])))?,
        M::Pack2x16float => {
            let lo = b.convert(args[0][0], Ty::F16);
            let hi = b.convert(args[0][1], Ty::F16);
            let lo = half_bits(b, lo);
            let hi = half_bits(b, hi);
            let s = b.u32(16);
            let h = b.bin(BinOp::Shl, hi, s);
            vec![b.bin(BinOp::Or, lo, h)]
        }
        M::Unpack2x16float => {
            let x = args[0][0];
            let s = b.u32(16);
            let m = b.u32(0xffff);
            let lo = b.bin(BinOp::And, x, m);
            let hi = b.bin(BinOp::Shr, x, s);
            let lo = bits_half(b, lo);
            let hi = bits_half(b, hi);
            vec![b.convert(lo, Ty::F32), b.convert(hi, Ty::F32)]
        }
        M::Pack4xU8 | M::Pack4xI8 => {
            let m = b.u32(0xff);
            let mut acc = b.u32(0);
            for (i, &x) in args[0].iter().enumerate() {
                let x = b.bitcast(x, Ty::U32);
                let x = b.bin(BinOp::And, x, m);
                let s = b.u32(8 * i as u32);
                let x = b.bin(BinOp::Shl, x, s);
                acc = b.bin(BinOp::Or, acc, x);
            }
            vec![acc]
        }
        M::Unpack4xU8 => {
            let m = b.u32(0xff);
            (0..4)
                .map(|i| {
                    let s = b.u32(8 * i);
                    let x = b.bin(BinOp::Shr, args[0][0], s);
                    b.bin(BinOp::And, x, m)
                })
                .collect()
        }
        M::Unpack4xI8 => {
            let x = b.bitcast(args[0][0], Ty::I32);
            (0..4)
                .map(|i| {
                    let up = b.u32(24 - 8 * i);
                    let down = b.u32(24);
                    let y = b.bin(BinOp::Shl, x, up);
                    b.bin(BinOp::Shr, y, down)
                })
                .collect()
        }
        other => {
            return err(format!(
                "the built-in function {other:?} is not supported yet"
            ));
        }
    })
}

fn ln(b: &mut Builder, x: Reg) -> Reg {
    let ty = b.ty(x);
    let l = b.un(UnOp::Log2, x);
    let k = b.float(ty, std::f64::consts::LN_2);
    b.bin(BinOp::Mul, l, k)
}

fn length(b: &mut Builder, v: &[Reg]) -> Reg {
    let d = dot(b, v, v);
    b.un(UnOp::Sqrt, d)
}

/// f16 -> its bits in a U32.
fn half_bits(b: &mut Builder, h: Reg) -> Reg {
    // Through f32: the f16's exact value, whose bits give the f16's.
    let f = b.convert(h, Ty::F32);
    let bits = b.bitcast(f, Ty::U32);
    f32_bits_to_f16_bits(b, bits)
}

/// The bits of an f32 that is exactly an f16 value, as that f16's bits.
fn f32_bits_to_f16_bits(b: &mut Builder, bits: Reg) -> Reg {
    // The IR's bitcasts keep the width, so the f16 pattern is rebuilt
    // from the f32's sign, exponent and mantissa.
    let k16 = b.u32(16);
    let sign = b.bin(BinOp::Shr, bits, k16);
    let m8000 = b.u32(0x8000);
    let sign = b.bin(BinOp::And, sign, m8000);
    let mag = b.u32(0x7fff_ffff);
    let abs = b.bin(BinOp::And, bits, mag);
    // Normal f16: exponent - 112, mantissa >> 13.
    let k13 = b.u32(13);
    let sh = b.bin(BinOp::Shr, abs, k13);
    let bias = b.u32(112 << 10);
    let normal = b.bin(BinOp::Sub, sh, bias);
    // Subnormal f16 (|x| < 2^-14): value * 2^24 as an integer.
    let absf = b.bitcast(abs, Ty::F32);
    let scale = b.f32(16_777_216.0);
    let scaled = b.bin(BinOp::Mul, absf, scale);
    let sub = b.convert(scaled, Ty::U32);
    let min_normal = b.u32(0x3880_0000);
    let is_sub = b.bin(BinOp::Lt, abs, min_normal);
    let m = b.select(is_sub, sub, normal);
    // Infinity and NaN keep an all-ones exponent.
    let inf = b.u32(0x7f80_0000);
    let special = b.bin(BinOp::Ge, abs, inf);
    let nan_bits = b.u32(0x7c00);
    let k3ff = b.u32(0x3ff);
    let mant = b.bin(BinOp::And, sh, k3ff);
    let sp = b.bin(BinOp::Or, nan_bits, mant);
    let m = b.select(special, sp, m);
    b.bin(BinOp::Or, sign, m)
}

/// U32 holding f16 bits -> an f16 register.
fn bits_half(b: &mut Builder, bits: Reg) -> Reg {
    // Decode to f32 bits, then narrow exactly (the value is an f16).
    let k = b.u32(0x7fff);
    let abs = b.bin(BinOp::And, bits, k);
    let s = b.u32(0x8000);
    let sign = b.bin(BinOp::And, bits, s);
    let k16 = b.u32(16);
    let sign = b.bin(BinOp::Shl, sign, k16);
    let k13 = b.u32(13);
    let sh = b.bin(BinOp::Shl, abs, k13);
    let bias = b.u32(112 << 23);
    let normal = b.bin(BinOp::Add, sh, bias);
    // Subnormal: mantissa * 2^-24.
    let mf = b.convert(abs, Ty::F32);
    let scale = b.f32(1.0 / 16_777_216.0);
    let subf = b.bin(BinOp::Mul, mf, scale);
    let sub = b.bitcast(subf, Ty::U32);
    let min_normal = b.u32(0x0400);
    let is_sub = b.bin(BinOp::Lt, abs, min_normal);
    let v = b.select(is_sub, sub, normal);
    let infh = b.u32(0x7c00);
    let special = b.bin(BinOp::Ge, abs, infh);
    let inf = b.u32(0x7f80_0000);
    let rest = b.bin(BinOp::Or, inf, sh);
    let v = b.select(special, rest, v);
    let f = b.bin(BinOp::Or, v, sign);
    let f = b.bitcast(f, Ty::F32);
    b.convert(f, Ty::F16)
}

/// WGSL's `extractBits`: `o = min(offset, 32)`, `c = min(count, 32 - o)`;
/// 0 when `c == 0`; signed values sign-extended from bit `c - 1`.
fn extract_bits(b: &mut Builder, e: Reg, offset: Reg, count: Reg) -> Reg {
    let ty = b.ty(e);
    let (o, c) = clamp_bits(b, offset, count);
    let k32 = b.u32(32);
    // Shift the field to the top, then back down (arithmetic for I32).
    let oc = b.bin(BinOp::Add, o, c);
    let up = b.bin(BinOp::Sub, k32, oc);
    let down = b.bin(BinOp::Sub, k32, c);
    // Shift amounts of 32 are not allowed: c == 0 is handled by the select.
    let k31 = b.u32(31);
    let up = b.bin(BinOp::Min, up, k31);
    let down_s = b.bin(BinOp::Min, down, k31);
    let x = b.bin(BinOp::Shl, e, up);
    let x = b.bin(BinOp::Shr, x, down_s);
    // When c == 32, o == 0: the value itself.
    let full = b.bin(BinOp::Eq, c, k32);
    let x = b.select(full, e, x);
    let z = b.u32(0);
    let none = b.bin(BinOp::Eq, c, z);
    let zero = b.konst(ty, 0);
    b.select(none, zero, x)
}

fn insert_bits(b: &mut Builder, e: Reg, new: Reg, offset: Reg, count: Reg) -> Reg {
    let ty = b.ty(e);
    let (o, c) = clamp_bits(b, offset, count);
    let k32 = b.u32(32);
    let k31 = b.u32(31);
    let one = b.u32(1);
    let all = b.u32(0xffff_ffff);
    // mask = ((1 << c) - 1) << o, with c == 32 giving all ones and o == 32
    // (then c == 0) giving none.
    let cs = b.bin(BinOp::Min, c, k31);
    let p = b.bin(BinOp::Shl, one, cs);
    let low = b.bin(BinOp::Sub, p, one);
    let full = b.bin(BinOp::Eq, c, k32);
    let low = b.select(full, all, low);
    let os = b.bin(BinOp::Min, o, k31);
    let mask = b.bin(BinOp::Shl, low, os);
    let z = b.u32(0);
    let none = b.bin(BinOp::Eq, c, z);
    let mask = b.select(none, z, mask);
    let eu = b.bitcast(e, Ty::U32);
    let nu = b.bitcast(new, Ty::U32);
    let nm = b.un(UnOp::Not, mask);
    let keep = b.bin(BinOp::And, eu, nm);
    let sh = b.bin(BinOp::Shl, nu, os);
    let put = b.bin(BinOp::And, sh, mask);
    let r = b.bin(BinOp::Or, keep, put);
    b.bitcast(r, ty)
}

fn clamp_bits(b: &mut Builder, offset: Reg, count: Reg) -> (Reg, Reg) {
    let k32 = b.u32(32);
    let o = b.bin(BinOp::Min, offset, k32);
    let room = b.bin(BinOp::Sub, k32, o);
    let c = b.bin(BinOp::Min, count, room);
    (o, c)
}
