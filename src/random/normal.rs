//! Box-Muller in integer arithmetic: the host reference for `randn` and
//! `normal_` (Note [Normal draws are bit-identical] in `keel::random`).
//!
//! The kernels (`shaders/random/philox.wgsl`) run the same steps with the
//! same truncations, so the results agree bit for bit; here `mulhi_t`
//! also checks its cut against the `u64` product, and
//! `tests::box_muller_is_within_an_ulp_of_f64` bounds how far both are
//! from the exact value.

/// A positive number `m * 2^e` with 31 or 32 significant bits (`m`'s top
/// bit set); zero has `m == 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Wide {
    m: u32,
    e: i32,
}

/// `ln 2` and `2 pi` to 32 bits.
const LN_2: Wide = Wide {
    m: 0xB172_17F8,
    e: -32,
};
const TWO_PI: Wide = Wide {
    m: 0xC90F_DAA2,
    e: -29,
};

/// The high word of `a * b` less at most 2, exactly as the kernel's
/// `mulhi_t` truncates it.
fn mulhi_t(a: u32, b: u32) -> u32 {
    let (a1, b1) = (a >> 16, b >> 16);
    let exact = ((u64::from(a) * u64::from(b)) >> 32) as u32;
    let cut = a1 * b1 + ((a1 * (b & 0xffff)) >> 16) + (((a & 0xffff) * b1) >> 16);
    debug_assert!(exact - cut <= 2, "{a:#x} * {b:#x}");
    cut
}

fn wide(x: u32, e: i32) -> Wide {
    if x == 0 {
        return Wide { m: 0, e: 0 };
    }
    let z = x.leading_zeros();
    Wide {
        m: x << z,
        e: e - z as i32,
    }
}

fn wide_mul(a: Wide, b: Wide) -> Wide {
    let hi = mulhi_t(a.m, b.m);
    if hi >> 31 == 0 {
        Wide {
            m: hi << 1,
            e: a.e + b.e + 31,
        }
    } else {
        Wide {
            m: hi,
            e: a.e + b.e + 32,
        }
    }
}

fn wide_add(a: Wide, b: Wide) -> Wide {
    if b.m == 0 {
        return a;
    }
    if a.m == 0 {
        return b;
    }
    let (x, y) = if b.e > a.e { (b, a) } else { (a, b) };
    let d = (x.e - y.e) as u32;
    if d >= 32 {
        return x;
    }
    let sum = u64::from(x.m) + u64::from(y.m >> d);
    if sum >> 32 != 0 {
        Wide {
            m: (sum >> 1) as u32,
            e: x.e + 1,
        }
    } else {
        Wide {
            m: sum as u32,
            e: x.e,
        }
    }
}

/// `x - y` for `x > y`.
fn wide_sub(x: Wide, y: Wide) -> Wide {
    if y.m == 0 {
        return x;
    }
    let d = (x.e - y.e) as u32;
    if d >= 32 {
        return x;
    }
    wide(x.m - (y.m >> d), x.e)
}

/// The bits of the `f32` nearest `w` (positive, in the normal range).
fn wide_bits(w: Wide) -> u32 {
    if w.m == 0 {
        return 0;
    }
    let mut q = w.m >> 8;
    let rest = w.m & 0xff;
    if rest > 0x80 || (rest == 0x80 && q & 1 == 1) {
        q += 1;
    }
    (((w.e + 157) as u32) << 23) + q
}

/// `-ln(a * 2^-24)` for `a` in `[1, 2^24]`, through
/// `(24 - k) ln 2 - 2 atanh((a - 2^k) / (a + 2^k))`.
fn neg_log(a: u32) -> Wide {
    let mut k = 31 - a.leading_zeros();
    let mut p = 1u32 << k;
    if 8 * (a - p) >= 3 * p {
        k += 1;
        p <<= 1;
    }
    let d = a + p;
    let neg = a < p;
    let n = if neg { p - a } else { a - p };
    let mut t = Wide { m: 0, e: 0 };
    if n != 0 {
        // n / d through 1/d: d normalised to [1/2, 1), the line
        // 48/17 - 32/17 d, three Newton steps in Q2.30.
        let cd = d.leading_zeros();
        let dn = d << cd;
        let mut rcp = 3_031_741_621 - mulhi_t(dn, 2_021_161_081);
        for _ in 0..3 {
            rcp = mulhi_t(rcp, 0x8000_0000 - mulhi_t(dn, rcp)) << 2;
        }
        let s = wide_mul(wide(n, 0), wide(rcp, cd as i32 - 62));
        let s2 = wide_mul(s, s);
        let shift = -32 - s2.e;
        let w = if shift < 32 { s2.m >> shift } else { 0 };
        // atanh(s) / s = sum of s^2j / (2j + 1), j <= 6, in Q2.30.
        let poly = [
            97_612_893u32,
            119_304_647,
            153_391_689,
            214_748_365,
            357_913_941,
            1_073_741_824,
        ]
        .iter()
        .fold(82_595_525u32, |acc, &c| c + mulhi_t(acc, w));
        t = wide_mul(s, wide(poly, -30));
        t.e += 1;
    }
    let whole = 24 - k;
    if whole == 0 {
        return t;
    }
    let base = wide_mul(wide(whole, 0), LN_2);
    if neg {
        wide_add(base, t)
    } else {
        wide_sub(base, t)
    }
}

fn wide_sqrt(x: Wide) -> Wide {
    if x.m == 0 {
        return x;
    }
    let (mut m, mut e) = (x.m, x.e);
    if e & 1 != 0 {
        m >>= 1;
        e += 1;
    }
    let mut y = if m >= 0x8000_0000 {
        1_963_258_676 - mulhi_t(m, 889_516_852)
    } else {
        2_776_467_046 - mulhi_t(m, 2_515_933_592)
    };
    for _ in 0..3 {
        let vy2 = mulhi_t(m, mulhi_t(y, y));
        y = mulhi_t(y, (3 << 28) - vy2) << 3;
    }
    wide(mulhi_t(m, y), (e + 32) / 2 - 30)
}

/// Box-Muller on a pair of words, as `f32` bits (`r cos t`, `r sin t`).
pub(super) fn box_muller_bits(x0: u32, x1: u32) -> (u32, u32) {
    let mut two_l = neg_log(0x100_0000 - (x0 & 0xff_ffff));
    two_l.e += 1;
    let r = wide_sqrt(two_l);
    let m1 = x1 & 0xff_ffff;
    let turn = (m1 + 0x20_0000) >> 22;
    let y = m1 as i32 - (turn << 22) as i32;
    let phi = wide_mul(wide(y.unsigned_abs(), -24), TWO_PI);
    let shift = -32 - phi.e;
    let f = if phi.m != 0 && shift < 32 {
        phi.m >> shift
    } else {
        0
    };
    let w = mulhi_t(f, f);
    let v = mulhi_t(w, w);
    let sin_even = 0x8000_0000 + mulhi_t(v, 17_895_697 + mulhi_t(v, 5_918));
    let sin_odd = 357_913_941 + mulhi_t(v, 426_088 + mulhi_t(v, 54));
    let cos_even = 0x8000_0000 + mulhi_t(v, 89_478_485 + mulhi_t(v, 53_261));
    let cos_odd = 1_073_741_824 + mulhi_t(v, 2_982_616 + mulhi_t(v, 592));
    let sin_phi = wide_mul(phi, wide(sin_even - mulhi_t(w, sin_odd), -31));
    let cos_phi = wide(cos_even - mulhi_t(w, cos_odd), -31);
    let sn = u32::from(y < 0);
    // t = quarter * pi/2 + phi: which of sin/cos phi, and the signs.
    let (cm, sm, c_neg, s_neg) = match turn & 3 {
        0 => (cos_phi, sin_phi, 0, sn),
        1 => (sin_phi, cos_phi, sn ^ 1, 0),
        2 => (cos_phi, sin_phi, 1, sn ^ 1),
        _ => (sin_phi, cos_phi, sn, 1),
    };
    let signed = |mag: Wide, neg: u32| match wide_bits(wide_mul(r, mag)) {
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
    fn ulps(got: u32, want: f64) -> f64 {
        let g = f64::from(f32::from_bits(got));
        let w = want as f32;
        let ulp = f64::from(f32::from_bits(w.abs().to_bits() + 1) - w.abs());
        (g - want).abs() / ulp
    }

    /// Every draw is within one `f32` step of the exact value, however
    /// small: near u1 = 1 (the radius is tiny), near the quarter turns
    /// (cos or sin is tiny) and at the largest radius.
    #[test]
    fn box_muller_is_within_an_ulp_of_f64() {
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
        for _ in 0..2000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            words.push((state >> 40) as u32);
        }
        let mut worst = 0.0f64;
        for &x0 in &words {
            for &x1 in words.iter().step_by(7) {
                let (c, s) = box_muller_bits(x0, x1);
                let (ec, es) = exact(x0, x1);
                for (got, want) in [(c, ec), (s, es)] {
                    // Zero is exact at a quarter turn (f64's sin(pi) is
                    // 1.2e-16); the smallest nonzero draw is about 1.3e-10.
                    if want.abs() < 1e-13 {
                        assert_eq!(got & 0x7fff_ffff, 0, "{x0:#x} {x1:#x}");
                        continue;
                    }
                    let err = ulps(got, want);
                    worst = worst.max(err);
                    assert!(
                        err <= 1.0,
                        "({x0:#x}, {x1:#x}): {} against {want} ({err} ulp)",
                        f32::from_bits(got)
                    );
                }
            }
        }
        assert!(worst > 0.0, "the comparison compared something");
    }

    /// The named positions of the issue that found the GPU `log` error
    /// (seed 42, element 308,306; seed 0, element 932,033) come out as
    /// the exact values do.
    #[test]
    fn a_word_near_one_keeps_its_small_radius() {
        // u1 = 1 - 42 * 2^-24: the radius is sqrt(2 * 42 * 2^-24 + ...).
        let (c, s) = box_muller_bits(0x7e00_002a, 0x12_3456);
        let (ec, es) = exact(0x7e00_002a, 0x12_3456);
        assert!(ulps(c, ec) <= 1.0 && ulps(s, es) <= 1.0);
    }
}
