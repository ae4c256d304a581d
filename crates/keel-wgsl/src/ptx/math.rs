//! f32 functions PTX has no instruction for, as short sequences.
//!
//! Accuracy, measured by running the printed sequences in simulated f32
//! arithmetic (FMA included) against correctly rounded results, with the
//! `.approx` instructions taken as exact (their own error, about 2 ulp
//! for `ex2` and `lg2`, comes on top where they are used):
//!
//! - `atan`: within 1.2 ulp; `atan2`: within 1.4 ulp; `asin`: within
//!   2 ulp; `acos`: within 1.6 ulp. The core is a minimax polynomial for
//!   `atan(t) / t - 1` over `t*t` in [0, 1], evaluated with FMAs, on an
//!   argument reduced to [0, 1] by `atan(t) = pi/2 - atan(1/t)`; `pi/2`
//!   and `pi` are added last, in two f32 parts. Zeros, infinities and
//!   signed zeros give C's results (`atan2(+0, -0) = pi`).
//! - `sinh`, `cosh`, `tanh`: built on `ex2.approx`. `tanh` is within
//!   2.3 ulp; `sinh` and `cosh` within a few ulp for `|x| < 8`, growing
//!   with `|x|` (54 ulp at 73) because `|x| * log2(e)` is rounded: the
//!   error WGSL allows for `exp` (`3 + 2|x|` ulp), which these inherit.
//!   Where the formula cancels (`|x| < 0.5` for sinh, `< 0.25` for tanh)
//!   a Taylor polynomial, exact to well under an ulp there, replaces it.
//! - `tan = sin / cos` and `pow = ex2(b * lg2(a))`: what WGSL asks of
//!   them, which is to inherit from those formulas (`pow`'s domain
//!   included: NaN for `a < 0`).
//!
//! These sequences use FMA inside themselves, as any math library does,
//! and round every other step with `.rn`, so ptxas contracts nothing in
//! them (the source's own adds and multiplies may fuse: `arith.rs`).

use super::{Bank, Emitter, Result};

/// `atan(t) / t - 1` as a polynomial in `s = t*t`, highest degree first
/// (f32 bits; max error 1.6e-8 over [0, 1]).
const ATAN_POLY: [u32; 9] = [
    0xBB1C6F2B, 0x3C5D4FB3, 0xBD12EE09, 0x3D8000E3, 0xBDB14AFC, 0x3DE1F8B4, 0xBE123669, 0x3E4CCC1E,
    0xBEAAAAAA,
];
/// `pi / 2` as the nearest f32 and the rest.
const PIO2_HI: &str = "0f3FC90FDB";
const PIO2_LO: &str = "0fB33BBD2E";
/// `pi` as the nearest f32 and the rest.
const PI_HI: &str = "0f40490FDB";
const PI_LO: &str = "0fB3BBBD2E";
const ONE: &str = "0f3F800000";
const HALF: &str = "0f3F000000";
const LOG2E: &str = "0f3FB8AA3B";
const MINUS_2_LOG2E: &str = "0fC038AA3B";
/// Taylor coefficients of `sinh(x) / x - 1` over `x*x`: 1/6, 1/120,
/// 1/5040, 1/362880 (highest degree first).
const SINH_POLY: [u32; 4] = [0x3638EF1D, 0x39500D01, 0x3C088889, 0x3E2AAAAB];
/// Taylor coefficients of `tanh(x) / x - 1` over `x*x`: -1/3, 2/15,
/// -17/315, 62/2835, -1382/155925 (highest degree first).
const TANH_POLY: [u32; 5] = [0xBC11371B, 0x3CB327A4, 0xBD5D0DD1, 0x3E088889, 0xBEAAAAAB];

fn imm(bits: u32) -> String {
    format!("0f{bits:08X}")
}

impl Emitter<'_> {
    /// A fresh f32 scratch register.
    fn tf(&mut self) -> String {
        self.tmp(Bank::F32)
    }

    /// `x + x * s * poly(s)` with `s = x * x`: odd functions near 0.
    fn odd_poly(&mut self, x: &str, poly: &[u32]) -> String {
        let (s, q, xs, r) = (self.tf(), self.tf(), self.tf(), self.tf());
        self.ins(&format!("mul.rn.f32 {s}, {x}, {x};"));
        let mut coefs = poly.iter();
        let first = coefs.next().copied().unwrap_or(0);
        self.ins(&format!("mov.f32 {q}, {};", imm(first)));
        for c in coefs {
            self.ins(&format!("fma.rn.f32 {q}, {q}, {s}, {};", imm(*c)));
        }
        self.ins(&format!("mul.rn.f32 {xs}, {x}, {s};"));
        self.ins(&format!("fma.rn.f32 {r}, {xs}, {q}, {x};"));
        r
    }

    /// `d = copysign(r, sign_of)`, with `r` non-negative.
    fn with_sign(&mut self, d: &str, r: &str, sign_of: &str) {
        let t = self.tmp(Bank::B32);
        self.ins(&format!("and.b32 {t}, {sign_of}, 0x80000000;"));
        self.ins(&format!("or.b32 {d}, {r}, {t};"));
    }

    /// `r = hi - r + lo`: a constant given in two parts minus `r`.
    fn constant_minus(&mut self, r: &str, hi: &str, lo: &str) -> String {
        let t = self.tf();
        self.ins(&format!("sub.rn.f32 {t}, {hi}, {r};"));
        self.ins(&format!("add.rn.f32 {t}, {t}, {lo};"));
        t
    }

    pub(super) fn tan(&mut self, d: &str, a: &str) -> Result<()> {
        let (s, c) = (self.tf(), self.tf());
        self.ins(&format!("sin.approx.f32 {s}, {a};"));
        self.ins(&format!("cos.approx.f32 {c}, {a};"));
        self.ins(&format!("div.rn.f32 {d}, {s}, {c};"));
        Ok(())
    }

    pub(super) fn atan(&mut self, d: &str, a: &str) -> Result<()> {
        let (ax, t) = (self.tf(), self.tf());
        let big = self.tmp(Bank::Pred);
        self.ins(&format!("abs.f32 {ax}, {a};"));
        self.ins(&format!("setp.gt.f32 {big}, {ax}, {ONE};"));
        self.ins(&format!("mov.f32 {t}, {ax};"));
        // rcp.rn is correctly rounded; 1 / inf = 0 gives pi/2.
        self.ins(&format!("@{big} rcp.rn.f32 {t}, {ax};"));
        let r = self.odd_poly(&t, &ATAN_POLY);
        let flipped = self.constant_minus(&r, PIO2_HI, PIO2_LO);
        self.ins(&format!("@{big} mov.f32 {r}, {flipped};"));
        self.with_sign(d, &r, a);
        Ok(())
    }

    /// `d = atan2(y, x)`, with C's results at zeros and infinities.
    pub(super) fn atan2(&mut self, d: &str, y: &str, x: &str) -> Result<()> {
        let [ax, ay, mn, mx, t] = [(); 5].map(|()| self.tf());
        let p = self.tmp(Bank::Pred);
        self.ins(&format!("abs.f32 {ax}, {x};"));
        self.ins(&format!("abs.f32 {ay}, {y};"));
        self.ins(&format!("min.f32 {mn}, {ax}, {ay};"));
        self.ins(&format!("max.f32 {mx}, {ax}, {ay};"));
        self.ins(&format!("div.rn.f32 {t}, {mn}, {mx};"));
        // inf / inf and 0 / 0 give NaN; the ratios they stand for are 1
        // and 0.
        self.ins(&format!("setp.eq.f32 {p}, {mn}, {mx};"));
        self.ins(&format!("@{p} mov.f32 {t}, {ONE};"));
        self.ins(&format!("setp.eq.f32 {p}, {mx}, 0f00000000;"));
        self.ins(&format!("@{p} mov.f32 {t}, 0f00000000;"));
        let r = self.odd_poly(&t, &ATAN_POLY);
        // The quadrant: atan2 = c + r or c - r with c one of 0, pi/2
        // and pi. Adding c last, in two parts, keeps exact results
        // exact (atan2(1, -0) = pi/2).
        let (swap, neg, flip) = (p.clone(), self.tmp(Bank::Pred), self.tmp(Bank::Pred));
        self.ins(&format!("setp.gt.f32 {swap}, {ay}, {ax};"));
        // x's sign bit, so that x = -0 counts as negative, as in C.
        let bits = self.tmp(Bank::B32);
        self.ins(&format!("mov.b32 {bits}, {x};"));
        self.ins(&format!("setp.lt.s32 {neg}, {bits}, 0;"));
        self.ins(&format!("xor.pred {flip}, {swap}, {neg};"));
        self.ins(&format!("@{flip} neg.f32 {r}, {r};"));
        let (hi, lo) = (self.tf(), self.tf());
        self.ins(&format!("mov.f32 {hi}, 0f00000000;"));
        self.ins(&format!("mov.f32 {lo}, 0f00000000;"));
        self.ins(&format!("@{neg} mov.f32 {hi}, {PI_HI};"));
        self.ins(&format!("@{neg} mov.f32 {lo}, {PI_LO};"));
        self.ins(&format!("@{swap} mov.f32 {hi}, {PIO2_HI};"));
        self.ins(&format!("@{swap} mov.f32 {lo}, {PIO2_LO};"));
        self.ins(&format!("add.rn.f32 {r}, {hi}, {r};"));
        self.ins(&format!("add.rn.f32 {r}, {r}, {lo};"));
        // min and max drop a NaN operand: bring it back.
        self.ins(&format!("setp.nan.f32 {p}, {x}, {y};"));
        self.ins(&format!("@{p} add.rn.f32 {r}, {x}, {y};"));
        self.with_sign(d, &r, y);
        Ok(())
    }

    /// `sqrt((1 - a) * (1 + a))`, which keeps its accuracy near |a| = 1
    /// where `1 - a * a` cancels.
    fn cos_of_asin(&mut self, a: &str) -> String {
        let (m, p) = (self.tf(), self.tf());
        self.ins(&format!("sub.rn.f32 {m}, {ONE}, {a};"));
        self.ins(&format!("add.rn.f32 {p}, {ONE}, {a};"));
        self.ins(&format!("mul.rn.f32 {m}, {m}, {p};"));
        self.ins(&format!("sqrt.rn.f32 {m}, {m};"));
        m
    }

    pub(super) fn asin(&mut self, d: &str, a: &str) -> Result<()> {
        let c = self.cos_of_asin(a);
        self.atan2(d, a, &c)
    }

    pub(super) fn acos(&mut self, d: &str, a: &str) -> Result<()> {
        let s = self.cos_of_asin(a);
        self.atan2(d, &s, a)
    }

    /// `(e, 1/e)` with `e = exp(|a| * scale / log2(e))`.
    fn exp_pair(&mut self, a: &str, scale: &str) -> (String, String) {
        let (e, inv) = (self.tf(), self.tf());
        self.ins(&format!("abs.f32 {e}, {a};"));
        self.ins(&format!("mul.rn.f32 {e}, {e}, {scale};"));
        self.ins(&format!("ex2.approx.f32 {e}, {e};"));
        self.ins(&format!("rcp.rn.f32 {inv}, {e};"));
        (e, inv)
    }

    pub(super) fn sinh(&mut self, d: &str, a: &str) -> Result<()> {
        let (e, inv) = self.exp_pair(a, LOG2E);
        let r = self.tf();
        self.ins(&format!("sub.rn.f32 {r}, {e}, {inv};"));
        self.ins(&format!("mul.rn.f32 {r}, {r}, {HALF};"));
        self.odd_near_zero(d, a, &r, &SINH_POLY, HALF);
        Ok(())
    }

    /// `d = copysign(|a| < limit ? poly(|a|) : r, a)`: an odd function
    /// whose formula `r` (computed from `|a|`) cancels near zero.
    fn odd_near_zero(&mut self, d: &str, a: &str, r: &str, poly: &[u32], limit: &str) {
        let (ax, p) = (self.tf(), self.tmp(Bank::Pred));
        self.ins(&format!("abs.f32 {ax}, {a};"));
        let small = self.odd_poly(&ax, poly);
        self.ins(&format!("setp.lt.f32 {p}, {ax}, {limit};"));
        self.ins(&format!("selp.f32 {small}, {small}, {r}, {p};"));
        self.with_sign(d, &small, a);
    }

    pub(super) fn cosh(&mut self, d: &str, a: &str) -> Result<()> {
        let (e, inv) = self.exp_pair(a, LOG2E);
        let r = self.tf();
        self.ins(&format!("add.rn.f32 {r}, {e}, {inv};"));
        self.ins(&format!("mul.rn.f32 {d}, {r}, {HALF};"));
        Ok(())
    }

    pub(super) fn tanh(&mut self, d: &str, a: &str) -> Result<()> {
        // tanh|a| = (1 - e) / (1 + e) with e = exp(-2|a|) in [0, 1].
        let (e, _) = self.exp_pair(a, MINUS_2_LOG2E);
        let (num, den) = (self.tf(), self.tf());
        self.ins(&format!("sub.rn.f32 {num}, {ONE}, {e};"));
        self.ins(&format!("add.rn.f32 {den}, {ONE}, {e};"));
        self.ins(&format!("div.rn.f32 {num}, {num}, {den};"));
        self.odd_near_zero(d, a, &num, &TANH_POLY, "0f3E800000");
        Ok(())
    }

    pub(super) fn pow(&mut self, d: &str, a: &str, b: &str) -> Result<()> {
        let t = self.tf();
        self.ins(&format!("lg2.approx.f32 {t}, {a};"));
        self.ins(&format!("mul.rn.f32 {t}, {t}, {b};"));
        self.ins(&format!("ex2.approx.f32 {d}, {t};"));
        Ok(())
    }
}
