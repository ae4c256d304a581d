//! Box-Muller in `f32` adds and multiplies that round the same on every
//! backend: the host reference for `randn` and `normal_` (Note [Normal
//! draws are bit-identical] in `keel::random`).
//!
//! The kernels (`shaders/random/philox.wgsl`) take the same steps in the
//! same order, so the results agree bit for bit. Each step is one IEEE
//! `f32` add, subtract or multiply (correctly rounded to nearest even on
//! every backend), an exact conversion of an integer below 2^24, or
//! integer work on the bits; no value is ever subnormal, so flushing
//! changes nothing. In the kernels every product that feeds an add goes
//! through `fence` (an exclusive-or of its bits with a zero the compiler
//! cannot see), so that no driver and no `ptxas` fuses the two into one
//! FMA; Rust never fuses, so here the products are plain.
//! `tests::box_muller_is_within_three_ulps_of_f64` bounds how far the
//! results are from the exact value.

/// `ln(1 + x) = x + x^2 P(x)` for `x` in `[-0.3125, 0.375)`: `P`'s
/// coefficients from the constant term up, fitted for the least largest
/// relative error of the logarithm (under 2^-27).
const LOG_P: [f32; 9] = [
    -0.49999994,
    0.3333324,
    -0.25000942,
    0.2000831,
    -0.16633914,
    0.14052981,
    -0.12849376,
    0.13687582,
    -0.098010495,
];

/// `sin(phi) = phi + phi z S(z)` and `cos(phi) = 1 - z (1/2 - z C(z))`
/// with `z = phi^2`, `|phi| <= pi/4`: `S`'s and `C`'s coefficients from
/// the constant term up (relative errors under 2^-27 and 2^-32).
const SIN_S: [f32; 3] = [-0.16666655, 0.008332161, -0.00019515303];
const COS_C: [f32; 3] = [0.041666646, -0.0013887316, 2.443317e-5];

/// `ln 2` as a 16-bit part (so `n * LN_2_HI` is exact for `n <= 24`) and
/// the `f32` nearest the rest.
const LN_2_HI: f32 = 0.69314575;
const LN_2_LO: f32 = 1.4286068e-6;

/// The angle of one step of `u2` (`2 pi / 2^24`) as a 2-bit part (so
/// `y * STEP_HI` is exact for `|y| <= 2^21`) and the `f32` nearest the
/// rest.
const STEP_HI: f32 = 3.5762787e-7;
const STEP_LO: f32 = 1.687916e-8;

/// `2^-k` for `k` in `[0, 24]`, exactly.
fn pow2_neg(k: u32) -> f32 {
    f32::from_bits((127 - k) << 23)
}

/// `-ln(a * 2^-24)` for `a` in `[1, 2^24]`: with `a = (1 + x) 2^k` and
/// `1 + x` in `[0.6875, 1.375)` (`x` exact), `(24 - k) ln 2 - ln(1 + x)`.
/// Near `a = 2^24`, where the result is tiny, `k = 24` and the result is
/// `-ln(1 + x)` alone, with its relative accuracy.
fn neg_log(a: u32) -> f32 {
    let mut k = 31 - a.leading_zeros();
    let mut p = 1u32 << k;
    if 8 * (a - p) >= 3 * p {
        k += 1;
        p <<= 1;
    }
    let x = (a as i32 - p as i32) as f32 * pow2_neg(k);
    let q = LOG_P[..8].iter().rev().fold(LOG_P[8], |q, &c| q * x + c);
    let tail = x * x * q;
    let n = (24 - k) as f32;
    (n * LN_2_HI - x) + (n * LN_2_LO - tail)
}

/// `sqrt(2 l)` for `l >= 0`: `1 / sqrt(2 l)` from the bits and two Newton
/// steps, `s = 2 l` times that, then one correction `s + (2 l - s^2) / (2 s)`
/// whose residual is exact: `s` split into two 12-bit halves makes every
/// partial square exact. Zero gives zero.
fn radius(l: f32) -> f32 {
    let v = l + l;
    let mut y = f32::from_bits(0x5f37_59df - (v.to_bits() >> 1));
    for _ in 0..2 {
        y = y * (1.5 - l * y * y);
    }
    let s = v * y;
    let sh = f32::from_bits(s.to_bits() & 0xffff_f000);
    let sl = s - sh;
    let d = ((v - sh * sh) - (sh + sh) * sl) - sl * sl;
    s + d * (0.5 * y)
}

/// `(cos phi, sin phi)` for `phi = |y| 2 pi / 2^24`, `|y| <= 2^21`.
fn cos_sin(ay: u32) -> (f32, f32) {
    let fy = ay as f32;
    let hi = fy * STEP_HI;
    let lo = fy * STEP_LO;
    let phi = hi + lo;
    let z = phi * phi;
    let s = (z * SIN_S[2] + SIN_S[1]) * z + SIN_S[0];
    let sin = hi + (lo + phi * z * s);
    let c = (z * COS_C[2] + COS_C[1]) * z + COS_C[0];
    let cos = 1.0 - z * (0.5 - z * c);
    (cos, sin)
}

/// Box-Muller on a pair of words, as `f32` bits (`r cos t`, `r sin t`):
/// `r = sqrt(-2 ln u1)`, `u1 = 1 - (x0's low 24 bits) 2^-24` in `(0, 1]`;
/// `t = 2 pi u2`, `u2 = (x1's low 24 bits) 2^-24`, reduced exactly (in
/// integers) to the nearest quarter turn, leaving `|phi| <= pi/4`.
pub(super) fn box_muller_bits(x0: u32, x1: u32) -> (u32, u32) {
    let r = radius(neg_log(0x100_0000 - (x0 & 0xff_ffff)));
    let m1 = x1 & 0xff_ffff;
    let turn = (m1 + 0x20_0000) >> 22;
    let y = m1 as i32 - (turn << 22) as i32;
    let (cos_phi, sin_phi) = cos_sin(y.unsigned_abs());
    let sn = u32::from(y < 0);
    // t = quarter * pi/2 + phi: which of sin/cos phi, and the signs.
    let (cm, sm, c_neg, s_neg) = match turn & 3 {
        0 => (cos_phi, sin_phi, 0, sn),
        1 => (sin_phi, cos_phi, sn ^ 1, 0),
        2 => (cos_phi, sin_phi, 1, sn ^ 1),
        _ => (sin_phi, cos_phi, sn, 1),
    };
    let signed = |mag: f32, neg: u32| match (r * mag).to_bits() {
        0 => 0,
        bits => bits | (neg << 31),
    };
    (signed(cm, c_neg), signed(sm, s_neg))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact Box-Muller value of a pair of words, in `f64`.
    fn exact(x0: u32, x1: u32) -> (f64, f64) {
        let u1 = 1.0 - f64::from(x0 & 0xff_ffff) / 16_777_216.0;
        let u2 = f64::from(x1 & 0xff_ffff) / 16_777_216.0;
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        (r * t.cos(), r * t.sin())
    }

    /// How many `f32` steps `got` is from the exact value.
    fn ulps(got: f32, want: f64) -> f64 {
        let w = (want as f32).abs();
        let ulp = f64::from(f32::from_bits(w.to_bits() + 1) - w);
        (f64::from(got) - want).abs() / ulp
    }

    /// The logarithm and the radius for every `a` (every third one, and
    /// both ends), against `f64`: each within one step, and never
    /// subnormal (a GPU may flush those).
    #[test]
    fn the_radius_is_within_an_ulp_for_every_word() {
        let (mut worst_log, mut worst_r) = (0.0f64, 0.0f64);
        for a in (1..=0x100_0000u32)
            .step_by(3)
            .chain([0xff_ffff, 0x100_0000])
        {
            let l = neg_log(a);
            let r = radius(l);
            let want = -(f64::from(a) / 16_777_216.0).ln();
            if a == 0x100_0000 {
                assert_eq!((l.to_bits(), r.to_bits()), (0, 0), "u1 = 1 gives r = +0");
                continue;
            }
            assert!(l.is_normal() && r.is_normal(), "a = {a:#x}: {l:e}, {r:e}");
            worst_log = worst_log.max(ulps(l, want));
            worst_r = worst_r.max(ulps(r, (2.0 * want).sqrt()));
        }
        assert!(worst_log <= 0.85 && worst_r <= 1.0, "{worst_log} {worst_r}");
        assert!(worst_log > 0.1, "the comparison compared something");
    }

    /// Cosine and sine for every angle of the quarter turn's half.
    #[test]
    fn cos_and_sin_are_within_one_and_a_half_ulps_for_every_angle() {
        let (mut worst_c, mut worst_s) = (0.0f64, 0.0f64);
        for ay in 0..=0x20_0000u32 {
            let (c, s) = cos_sin(ay);
            let phi = f64::from(ay) * std::f64::consts::TAU / 16_777_216.0;
            worst_c = worst_c.max(ulps(c, phi.cos()));
            if ay == 0 {
                assert_eq!(s.to_bits(), 0, "sin 0 is +0");
                continue;
            }
            assert!(s.is_normal(), "ay = {ay}: {s:e}");
            worst_s = worst_s.max(ulps(s, phi.sin()));
        }
        assert!(worst_c <= 1.5 && worst_s <= 1.0, "{worst_c} {worst_s}");
    }

    /// Every draw is within three `f32` steps of the exact value, however
    /// small: near u1 = 1 (the radius is tiny), near the quarter turns
    /// (cos or sin is tiny) and at the largest radius.
    #[test]
    fn box_muller_is_within_three_ulps_of_f64() {
        let mut words: Vec<u32> = Vec::new();
        for edge in [
            0u32, 1, 2, 3, 42, 0xFF_FFFF, 0xFF_FFFE, 0x80_0000, 0x7F_FFFF,
        ] {
            words.push(edge);
        }
        for q in 0..4u32 {
            for d in [1u32, 2, 3, 1000] {
                words.push((q << 22).wrapping_add(d) & 0xff_ffff);
                words.push((q << 22).wrapping_sub(d) & 0xff_ffff);
                words.push(((q << 22) + 0x20_0000 - d) & 0xff_ffff);
            }
        }
        // And a spread of others (a 64-bit LCG: any words do).
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..3000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            words.push((state >> 40) as u32);
        }
        let mut worst = 0.0f64;
        for &x0 in &words {
            for &x1 in words.iter().step_by(5) {
                let (c, s) = box_muller_bits(x0, x1);
                let (ec, es) = exact(x0, x1);
                for (got, want) in [(c, ec), (s, es)] {
                    // Zero is exact at a quarter turn (f64's sin(pi) is
                    // 1.2e-16); the smallest nonzero draw is about 1.3e-10.
                    if want.abs() < 1e-13 {
                        assert_eq!(got & 0x7fff_ffff, 0, "{x0:#x} {x1:#x}");
                        continue;
                    }
                    let got = f32::from_bits(got);
                    let err = ulps(got, want);
                    worst = worst.max(err);
                    assert!(
                        err <= 3.0,
                        "({x0:#x}, {x1:#x}): {got} against {want} ({err} ulp)"
                    );
                }
            }
        }
        assert!(worst > 0.5, "the comparison compared something: {worst}");
    }

    /// The range of the draws that `normal_`'s launch-wide test in the
    /// kernel (`normal_plain`) relies on: every nonzero draw is at least
    /// 2^-33 and every draw under 8 in magnitude. The extremes are the
    /// smallest radius (u1 = 1 - 2^-24) at the smallest angle, and the
    /// largest radius (u1 = 2^-24) at no angle.
    #[test]
    fn draws_lie_between_two_to_the_minus_33_and_8() {
        let smallest = f32::from_bits(box_muller_bits(1, 1).1);
        assert!(smallest > 0.0 && smallest >= 2f32.powi(-33), "{smallest:e}");
        let largest = f32::from_bits(box_muller_bits(0xff_ffff, 0).0);
        assert!(largest > 5.7 && largest < 8.0, "{largest}");
        for (x0, x1) in [(1, 0xff_ffff), (1, 0x40_0001), (1, 0x3f_ffff), (2, 1)] {
            let (c, s) = box_muller_bits(x0, x1);
            for z in [c, s] {
                let z = f32::from_bits(z).abs();
                assert!(z == 0.0 || z >= smallest, "({x0:#x}, {x1:#x}): {z:e}");
            }
        }
    }

    /// The named positions of the issue that found the GPU `log` error
    /// (seed 42, element 308,306; seed 0, element 932,033) come out as
    /// the exact values do: u1 = 1 - 42 * 2^-24 keeps its small radius.
    #[test]
    fn a_word_near_one_keeps_its_small_radius() {
        let (c, s) = box_muller_bits(0x7e00_002a, 0x12_3456);
        let (ec, es) = exact(0x7e00_002a, 0x12_3456);
        let (c, s) = (f32::from_bits(c), f32::from_bits(s));
        assert!(ulps(c, ec) <= 3.0 && ulps(s, es) <= 3.0, "{c} {s}");
        let want = (-2.0 * (1.0 - 42.0f64 / 16_777_216.0).ln()).sqrt();
        assert!(ulps(radius(neg_log(0x100_0000 - 42)), want) <= 1.0);
    }
}
