//! Idioms WGSL can only spell long, rewritten as the one operation they
//! compute.
//!
//! WGSL has no 64-bit integers, so the high word of a 32 x 32-bit product
//! (the heart of Philox and of most counter-based generators) is written
//! from 16-bit halves:
//!
//! ```wgsl
//! let p00 = (a & 0xffffu) * (b & 0xffffu);   // and p01, p10, p11
//! let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
//! return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
//! ```
//!
//! Fifteen operations for what a GPU does in one (`mul.hi.u32`) and a
//! CPU in one widening multiply; ptxas does not see through them. The
//! pass finds that sum in any order of its terms and factors and makes
//! it [`BinOp::MulHi`] of `a` and `b`, then drops what only it read.
//! Every term must be computed in one straight run of instructions (no
//! branch, loop or block between the first and the sum) from registers
//! written once, so the operands hold the same values at the sum as at
//! the products.

use std::collections::HashMap;

use crate::ir::{
    BinOp, Inst, Program, Reg, Stmt, Ty, each_list, each_list_mut, walk_mut, walk_regs,
};

/// Rewrites every high-word product of `p` (see the module), and drops
/// the pure instructions nothing reads any more where one was found.
pub(crate) fn mul_hi(p: &mut Program) {
    let rewrites: HashMap<Reg, (Reg, Reg)> = {
        let writers = p.single_writers();
        let mut found = HashMap::new();
        each_list(&p.body, &mut |list| {
            find_in_list(list, &writers, &p.regs, &mut found);
        });
        found
    };
    if rewrites.is_empty() {
        return;
    }
    walk_mut(&mut p.body, &mut |inst| {
        if let Inst::Bin {
            op: BinOp::Add,
            dst,
            ..
        } = *inst
            && let Some(&(a, b)) = rewrites.get(&dst)
        {
            *inst = Inst::Bin {
                op: BinOp::MulHi,
                dst,
                a,
                b,
            };
        }
    });
    drop_unread(p);
}

/// The program's registers written once, with the positions of one
/// statement list's instructions.
struct Run<'a> {
    /// Each register's instruction where one instruction writes it.
    writers: &'a [Option<&'a Inst>],
    /// Positions in the list of the instructions that write a register.
    at: HashMap<Reg, usize>,
    regs: &'a [Ty],
}

impl<'a> Run<'a> {
    fn def(&self, r: Reg) -> Option<&'a Inst> {
        self.writers.get(r.index()).copied().flatten()
    }

    /// The value of `r` where constants, copies and bit operations on
    /// them make it one.
    fn konst(&self, r: Reg, depth: u32) -> Option<u32> {
        if depth > 4 || self.regs[r.index()] != Ty::U32 {
            return None;
        }
        match self.def(r)? {
            Inst::Const { bits, .. } => Some(*bits as u32),
            Inst::Mov { src, .. } => self.konst(*src, depth + 1),
            Inst::Bin { op, a, b, .. } => {
                let (x, y) = (self.konst(*a, depth + 1)?, self.konst(*b, depth + 1)?);
                match op {
                    BinOp::And => Some(x & y),
                    BinOp::Or => Some(x | y),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Follows copies back to the register an instruction computes, as
    /// far as registers written once go (a variable's register, written
    /// by every assignment, ends it).
    fn source(&self, mut r: Reg) -> Reg {
        for _ in 0..8 {
            match self.def(r) {
                Some(Inst::Mov { src, .. }) if self.def(*src).is_some() => r = *src,
                _ => break,
            }
        }
        r
    }

    /// `op` of `U32`s, written once, by an instruction of this list: its
    /// operands and position.
    fn bin(&self, r: Reg, want: BinOp) -> Option<(Reg, Reg, usize)> {
        let r = self.source(r);
        match self.def(r)? {
            Inst::Bin { op, a, b, .. } if *op == want && self.regs[r.index()] == Ty::U32 => {
                Some((*a, *b, *self.at.get(&r)?))
            }
            _ => None,
        }
    }

    /// `x & 0xffff` (either order): `x`.
    fn low(&self, r: Reg, at: &mut Vec<usize>) -> Option<Reg> {
        let (a, b, i) = self.bin(r, BinOp::And)?;
        let x = match (self.konst(a, 0), self.konst(b, 0)) {
            (_, Some(0xffff)) => a,
            (Some(0xffff), _) => b,
            _ => return None,
        };
        at.push(i);
        Some(self.source(x))
    }

    /// `x >> 16`: `x`.
    fn high(&self, r: Reg, at: &mut Vec<usize>) -> Option<Reg> {
        let (a, b, i) = self.bin(r, BinOp::Shr)?;
        (self.konst(b, 0) == Some(16)).then_some(())?;
        at.push(i);
        Some(self.source(a))
    }

    /// The terms of a sum of `U32`s: `r` itself where it is no add.
    fn terms(&self, r: Reg, out: &mut Vec<Reg>, at: &mut Vec<usize>) {
        match self.bin(r, BinOp::Add) {
            Some((a, b, i)) if out.len() < 8 => {
                at.push(i);
                self.terms(a, out, at);
                self.terms(b, out, at);
            }
            _ => out.push(self.source(r)),
        }
    }

    /// A product of two halves: each factor as (`true` for the high
    /// half, the register halved), in the order written.
    fn halves(&self, r: Reg, at: &mut Vec<usize>) -> Option<[(bool, Reg); 2]> {
        let (a, b, i) = self.bin(r, BinOp::Mul)?;
        at.push(i);
        let half = |x: Reg, at: &mut Vec<usize>| {
            self.low(x, at)
                .map(|v| (false, v))
                .or_else(|| self.high(x, at).map(|v| (true, v)))
        };
        Some([half(a, at)?, half(b, at)?])
    }

    /// `(a, b)` where `r` is the high word of `a * b` written from
    /// halves, with the positions of the instructions it takes.
    fn mul_hi(&self, r: Reg) -> Option<(Reg, Reg, Vec<usize>)> {
        let mut at = Vec::new();
        let mut terms = Vec::new();
        self.terms(r, &mut terms, &mut at);
        if terms.len() != 4 {
            return None;
        }
        // One plain product (high x high) and three shifted terms: two
        // products (the cross terms) and the middle sum.
        let mut plain = Vec::new();
        let mut shifted = Vec::new();
        for &t in &terms {
            match self.high(t, &mut at) {
                Some(inner) => shifted.push(inner),
                None => plain.push(t),
            }
        }
        let (&[p11], 3) = (&plain[..], shifted.len()) else {
            return None;
        };
        let hh = self.halves(p11, &mut at)?;
        let ((true, x), (true, y)) = (hh[0], hh[1]) else {
            return None;
        };
        // The cross terms are the shifted products; the remaining shifted
        // term is the middle sum.
        let mut cross = Vec::new();
        let mut mid = None;
        for &s in &shifted {
            match self.halves(s, &mut at) {
                Some(h) => cross.push((s, h)),
                None => mid = Some(s),
            }
        }
        let (Some(mid), [(c0, h0), (c1, h1)]) = (mid, &cross[..]) else {
            return None;
        };
        // One cross term is low(x) * high(y) and the other high(x) *
        // low(y), each in either order.
        let has = |h: &[(bool, Reg); 2], hx: bool, hy: bool| {
            h.contains(&(hx, x)) && h.contains(&(hy, y)) && (x != y || h[0].0 != h[1].0)
        };
        let crossed = (has(h0, false, true) && has(h1, true, false))
            || (has(h0, true, false) && has(h1, false, true));
        if !crossed {
            return None;
        }
        // The middle sum: low(x) * low(y) shifted, and the low halves of
        // the two cross terms.
        let mut mids = Vec::new();
        self.terms(mid, &mut mids, &mut at);
        if mids.len() != 3 {
            return None;
        }
        let mut low_of = Vec::new();
        let mut p00 = None;
        for &t in &mids {
            if let Some(v) = self.low(t, &mut at) {
                low_of.push(v);
            } else if let Some(v) = self.high(t, &mut at) {
                p00 = Some(v);
            } else {
                return None;
            }
        }
        let ll = self.halves(p00?, &mut at)?;
        let lows = ll == [(false, x), (false, y)] || ll == [(false, y), (false, x)];
        // The low halves are of the cross terms: the same registers, or
        // products of the same halves computed again.
        let [l0, l1] = low_of[..] else {
            return None;
        };
        let same = |l: Reg, c: Reg, h: &[(bool, Reg); 2], at: &mut Vec<usize>| {
            l == c
                || self
                    .halves(l, at)
                    .is_some_and(|g| canonical(g) == canonical(*h))
        };
        let both = (same(l0, *c0, h0, &mut at) && same(l1, *c1, h1, &mut at))
            || (same(l0, *c1, h1, &mut at) && same(l1, *c0, h0, &mut at));
        (lows && both).then_some((x, y, at))
    }
}

/// A product's two halves in a fixed order.
fn canonical(h: [(bool, Reg); 2]) -> [(bool, u32); 2] {
    let mut k = h.map(|(high, r)| (high, r.0));
    k.sort_unstable();
    k
}

/// Adds to `found` the high-word products summed in `list`: the sum's
/// register and the two operands.
fn find_in_list(
    list: &[Stmt],
    writers: &[Option<&Inst>],
    regs: &[Ty],
    found: &mut HashMap<Reg, (Reg, Reg)>,
) {
    let mut at = HashMap::new();
    for (i, s) in list.iter().enumerate() {
        if let Stmt::Inst(inst) = s
            && let Some(d) = inst.dst()
        {
            at.insert(d, i);
        }
    }
    let run = Run { writers, at, regs };
    for (i, s) in list.iter().enumerate() {
        let Stmt::Inst(Inst::Bin {
            op: BinOp::Add,
            dst,
            ..
        }) = s
        else {
            continue;
        };
        if run.def(*dst).is_none() {
            continue;
        }
        let Some((x, y, used)) = run.mul_hi(*dst) else {
            continue;
        };
        // One straight run from the first instruction to the sum, in
        // which neither operand is written.
        let first = used.iter().copied().min().unwrap_or(i);
        let span = &list[first..=i];
        let straight = span.iter().all(|s| matches!(s, Stmt::Inst(_)));
        let steady = |r: Reg| {
            run.def(r).is_some()
                && !span
                    .iter()
                    .any(|s| matches!(s, Stmt::Inst(inst) if inst.dst() == Some(r)))
        };
        if straight && steady(x) && steady(y) {
            found.insert(*dst, (x, y));
        }
    }
}

/// Removes pure instructions (and constants) whose register nothing
/// reads, until none is left.
fn drop_unread(p: &mut Program) {
    loop {
        let mut read = vec![false; p.regs.len()];
        walk_regs(&p.body, &mut |r, write| {
            if !write && let Some(x) = read.get_mut(r.index()) {
                *x = true;
            }
        });
        let mut removed = false;
        each_list_mut(&mut p.body, &mut |list| {
            list.retain(|s| {
                let Stmt::Inst(inst) = s else {
                    return true;
                };
                let unread = (inst.is_pure() || matches!(inst, Inst::Const { .. }))
                    && inst.dst().is_some_and(|d| !read[d.index()]);
                removed |= unread;
                !unread
            });
        });
        if !removed {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostOptions, run};
    use crate::ir::walk;

    /// The kernel of the tests: `out[i] = f(x[i], y[i])` for the body of
    /// `f` given.
    fn kernel(f: &str) -> String {
        format!(
            "
            @group(0) @binding(0) var<storage, read> x: array<u32>;
            @group(0) @binding(1) var<storage, read> y: array<u32>;
            @group(0) @binding(2) var<storage, read_write> out: array<u32>;
            fn f(a: u32, b: u32) -> u32 {{ {f} }}
            @compute @workgroup_size(64)
            fn k(@builtin(global_invocation_id) g: vec3<u32>) {{
                out[g.x] = f(x[g.x], y[g.x]);
            }}"
        )
    }

    /// Philox's form of the high word (shaders/random/philox.wgsl).
    const PHILOX: &str = "
        let a0 = a & 0xffffu;
        let a1 = a >> 16u;
        let b0 = b & 0xffffu;
        let b1 = b >> 16u;
        let p00 = a0 * b0;
        let p01 = a0 * b1;
        let p10 = a1 * b0;
        let p11 = a1 * b1;
        let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
        return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);";

    /// The same terms in another order, the factors swapped, the halves
    /// computed where used, the operand given twice.
    const REORDERED: &str = "
        let mid = (((b & 0xffffu) * (a >> 16u)) & 0xffffu)
            + (((b & 0xffffu) * (a & 0xffffu)) >> 16u)
            + (((b >> 16u) * (a & 0xffffu)) & 0xffffu);
        return (mid >> 16u) + (((a >> 16u) * (b & 0xffffu)) >> 16u)
            + ((b >> 16u) * (a >> 16u)) + (((a & 0xffffu) * (b >> 16u)) >> 16u);";

    fn mul_his(p: &Program) -> usize {
        let mut n = 0;
        walk(&p.body, &mut |i| {
            n += usize::from(matches!(
                i,
                Inst::Bin {
                    op: BinOp::MulHi,
                    ..
                }
            ));
        });
        n
    }

    fn multiplies(p: &Program) -> usize {
        let mut n = 0;
        walk(&p.body, &mut |i| {
            if let Inst::Bin {
                op: BinOp::Mul,
                dst,
                ..
            } = *i
            {
                n += usize::from(p.ty(dst) == Ty::U32);
            }
        });
        n
    }

    /// `f` over pairs that reach every carry of the sum, on the host end.
    fn results(p: &Program, pairs: &[(u32, u32)]) -> Vec<u32> {
        let bytes = |v: Vec<u32>| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let mut x = bytes(pairs.iter().map(|p| p.0).collect());
        let mut y = bytes(pairs.iter().map(|p| p.1).collect());
        let mut out = vec![0u8; 4 * pairs.len()];
        let groups = pairs.len().div_ceil(64) as u32;
        run(
            p,
            [groups, 1, 1],
            &mut [&mut x, &mut y, &mut out],
            &[],
            &HostOptions { threads: 1 },
        )
        .expect("runs");
        out.chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn pairs() -> Vec<(u32, u32)> {
        let mut v = vec![
            (0, 0),
            (u32::MAX, u32::MAX),
            (0xffff, 0xffff),
            (0x1_0000, 0xffff_ffff),
            (0xD251_1F53, 0x8000_0000),
            (0xCD9E_8D57, 0xffff_0001),
        ];
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..250 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push((s as u32, (s >> 32) as u32));
        }
        v
    }

    #[test]
    fn the_high_word_from_halves_becomes_one_operation() {
        for (label, body) in [("philox", PHILOX), ("reordered", REORDERED)] {
            let p = crate::compile(&kernel(body), "k").expect("compiles");
            assert_eq!(mul_his(&p), 1, "{label}");
            // None of the four partial products is left: no more
            // multiplies than the kernel has around a function with none.
            let plain = crate::compile(&kernel("return a ^ b;"), "k").expect("compiles");
            assert!(multiplies(&p) <= multiplies(&plain), "{label}");
            let want: Vec<u32> = pairs()
                .iter()
                .map(|&(a, b)| ((u64::from(a) * u64::from(b)) >> 32) as u32)
                .collect();
            assert_eq!(results(&p, &pairs()), want, "{label}");
            let ptx = crate::ptx::emit(&p).expect("PTX");
            assert!(ptx.contains("mul.hi.u32"), "{label}");
        }
        // A square: both operands the same register.
        let square = PHILOX.replace("let b0 = b & 0xffffu;", "let b0 = a & 0xffffu;");
        let square = square.replace("let b1 = b >> 16u;", "let b1 = a >> 16u;");
        let p = crate::compile(&kernel(&square), "k").expect("compiles");
        assert_eq!(mul_his(&p), 1, "square");
        let want: Vec<u32> = pairs()
            .iter()
            .map(|&(a, _)| ((u64::from(a) * u64::from(a)) >> 32) as u32)
            .collect();
        assert_eq!(results(&p, &pairs()), want, "square");
    }

    /// Sums that are not the high word stay as they are: a mask or shift
    /// off by one, a term missing, a low half where the high one goes, the
    /// two cross terms the same product.
    #[test]
    fn near_misses_are_left_alone() {
        for (label, from, to) in [
            ("mask", "let a0 = a & 0xffffu;", "let a0 = a & 0x7fffu;"),
            ("shift", "let a1 = a >> 16u;", "let a1 = a >> 15u;"),
            ("missing", " + (mid >> 16u);", ";"),
            ("low for high", "let p11 = a1 * b1;", "let p11 = a0 * b1;"),
            ("same cross", "let p10 = a1 * b0;", "let p10 = a0 * b1;"),
            ("mid term", "+ (p10 & 0xffffu);", "+ (p01 & 0xffffu);"),
        ] {
            assert!(PHILOX.contains(from), "{label}");
            let body = PHILOX.replace(from, to);
            let p = crate::compile(&kernel(&body), "k").expect("compiles");
            assert_eq!(mul_his(&p), 0, "{label}");
        }
    }

    /// Where an operand is a variable assigned between the products and
    /// the sum, the sum is not the high word of one product, and stays.
    #[test]
    fn an_operand_changed_between_the_terms_is_left_alone() {
        let src = "
            @group(0) @binding(0) var<storage, read_write> out: array<u32>;
            @compute @workgroup_size(1)
            fn k() {
                var a = out[0];
                let b = out[1];
                let p00 = (a & 0xffffu) * (b & 0xffffu);
                let p01 = (a & 0xffffu) * (b >> 16u);
                let p10 = (a >> 16u) * (b & 0xffffu);
                a = out[2];
                let p11 = (a >> 16u) * (b >> 16u);
                let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
                out[3] = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
            }";
        let p = crate::compile(src, "k").expect("compiles");
        assert_eq!(mul_his(&p), 0);
    }
}
