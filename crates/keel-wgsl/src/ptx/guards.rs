//! Array elements' offsets, for the PTX end: their bounds checks as index
//! comparisons, their addresses as one wide multiply-add.
//!
//! The lowering makes an element's byte offset `0 + u64(i) * s` from its
//! `u32` index `i` and the array's stride `s` (the `0` is where the array
//! starts in its binding), and checks an access of `s` bytes there in 64
//! bits: `offset + s <= len`. Where `s` is a power of two, that holds
//! exactly where `u64(i) < len >> log2(s)` (no product or sum here wraps
//! in 64 bits), so with the shift done once, at the kernel's start, the
//! check is a comparison of the index, not an add with its carry and a
//! comparison of the sum; and the address `buffer + u64(i) * s` is one
//! `mad.wide.u32`, which ptxas does not find on its own from a 64-bit
//! multiply and add. A tiled matmul's staging makes eight such accesses
//! per step of k.
//!
//! The CUDA end alone uses these forms: the host translation recognises
//! the sum when it takes a workgroup's windows, and the interpreter runs
//! either at the same cost.

use std::collections::HashMap;

use crate::ir::{
    BinOp, Builtin, Inst, Program, Reg, Stmt, Ty, each_list, each_list_mut, walk, walk_mut,
};

/// Strides up to this many bytes (powers of two) are followed: an index
/// times one stays far from 64 bits' end.
const MAX_STRIDE: u64 = 1 << 16;

/// An element's offset `u64(i) * s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Element {
    /// The `u32` index `i`.
    pub index: Reg,
    /// The register holding `u64(i)`.
    pub wide: Reg,
    /// The stride `s`, a power of two.
    pub stride: u64,
}

/// Per `U64` register that holds an element's offset (with the lowering's
/// `0 +` or not).
pub(super) type Elements = HashMap<Reg, Element>;

/// The element offsets of `p` (see [`Elements`]).
pub(super) fn elements(p: &Program) -> Elements {
    let writers = p.single_writers();
    let def = |r: Reg| writers.get(r.index()).copied().flatten();
    let konst = |r: Reg| constant(&writers, r);
    let source = |r: Reg| source(&writers, r);
    let product = |r: Reg| -> Option<Element> {
        let Some(&Inst::Bin {
            op: BinOp::Mul,
            a,
            b,
            ..
        }) = def(source(r))
        else {
            return None;
        };
        let (wide, s) = match (konst(a), konst(b)) {
            (None, Some(s)) => (a, s),
            (Some(s), None) => (b, s),
            _ => return None,
        };
        let Some(&Inst::Convert { a: index, .. }) = def(source(wide)) else {
            return None;
        };
        let fits = s.is_power_of_two() && s <= MAX_STRIDE;
        (fits && p.ty(wide) == Ty::U64 && p.ty(index) == Ty::U32).then_some(Element {
            index,
            wide,
            stride: s,
        })
    };
    let mut found = Elements::new();
    for (n, ty) in p.regs.iter().enumerate() {
        let r = Reg(n as u32);
        if *ty != Ty::U64 || def(r).is_none() {
            continue;
        }
        let element = match def(r) {
            Some(&Inst::Bin {
                op: BinOp::Add,
                a,
                b,
                ..
            }) => match (konst(a), konst(b)) {
                (Some(0), None) => product(b),
                (None, Some(0)) => product(a),
                _ => None,
            },
            _ => product(r),
        };
        if let Some(e) = element {
            found.insert(r, e);
        }
    }
    found
}

/// The bits of `r` where a constant is its one writer.
fn constant(writers: &[Option<&Inst>], r: Reg) -> Option<u64> {
    match writers.get(r.index()).copied().flatten() {
        Some(&Inst::Const { bits, .. }) => Some(bits),
        _ => None,
    }
}

/// Follows copies back to the register whose instruction computes `r`.
fn source(writers: &[Option<&Inst>], mut r: Reg) -> Reg {
    for _ in 0..8 {
        match writers.get(r.index()).copied().flatten() {
            Some(&Inst::Mov { src, .. }) => r = src,
            _ => break,
        }
    }
    r
}

/// A bounds check [`index_bounds`] rewrote: the check's register, the
/// element's `u64(i)`, the buffer and `log2` of the stride.
pub(super) type Rewrite = (Reg, Reg, u32, u32);

/// Rewrites every `offset + s <= len` of buffer `n` whose offset is an
/// element of stride `s` (in `elements`) as `u64(i) < len >> log2(s)`,
/// with each such shift computed once before the body; what it rewrote.
pub(super) fn index_bounds(p: &mut Program, elements: &Elements) -> Vec<Rewrite> {
    let rewrites: Vec<(Reg, Reg, u32, u32)> = {
        let writers = p.single_writers();
        let def = |r: Reg| writers.get(r.index()).copied().flatten();
        let konst = |r: Reg| constant(&writers, r);
        let mut found = Vec::new();
        walk(&p.body, &mut |inst| {
            let &Inst::Bin {
                op: BinOp::Le,
                dst,
                a: end,
                b: len,
            } = inst
            else {
                return;
            };
            let Some(&Inst::Read {
                what: Builtin::BufferLen(n),
                ..
            }) = def(source(&writers, len))
            else {
                return;
            };
            // end = offset + s, either way round.
            let Some(&Inst::Bin {
                op: BinOp::Add,
                a,
                b,
                ..
            }) = def(source(&writers, end))
            else {
                return;
            };
            let (offset, size) = match (konst(a), konst(b)) {
                (None, Some(s)) => (a, s),
                (Some(s), None) => (b, s),
                _ => return,
            };
            let Some(e) = elements.get(&source(&writers, offset)) else {
                return;
            };
            // `dst` written once, so that the one rewrite is its value
            // everywhere.
            if e.stride == size && def(dst).is_some() {
                found.push((dst, e.wide, n, size.trailing_zeros()));
            }
        });
        found
    };
    if rewrites.is_empty() {
        return rewrites;
    }
    let mut quotients: HashMap<(u32, u32), Reg> = HashMap::new();
    let mut prologue = Vec::new();
    for &(_, _, n, k) in &rewrites {
        if quotients.contains_key(&(n, k)) {
            continue;
        }
        let quotient = element_count(p, n, k, &mut prologue);
        quotients.insert((n, k), quotient);
    }
    let by_dst: HashMap<Reg, (Reg, Reg)> = rewrites
        .iter()
        .map(|&(dst, wide, n, k)| (dst, (wide, quotients[&(n, k)])))
        .collect();
    walk_mut(&mut p.body, &mut |inst| {
        if let Inst::Bin {
            op: BinOp::Le, dst, ..
        } = *inst
            && let Some(&(wide, quotient)) = by_dst.get(&dst)
        {
            *inst = Inst::Bin {
                op: BinOp::Lt,
                dst,
                a: wide,
                b: quotient,
            };
        }
    });
    p.body.splice(0..0, prologue);
    rewrites
}

/// Narrows the checks of `rewrites` that guard an access alone (no `and`
/// with a condition of the kernel's: `select.rs` makes those) from
/// `u64(i) < q` to `i < min(q, 2^32 - 1) || q >= 2^32` (`i` is at most
/// 2^32 - 1): ptxas merges the `or` into one 32-bit comparison, where
/// the 64-bit one takes two instructions. A check already in an `and`
/// stays, as ptxas folds the `and` into the 64-bit comparison's second
/// instruction and would need one more for the `or`. The bounds are
/// computed once, in 32-bit halves.
pub(super) fn narrow_lone_bounds(p: &mut Program, rewrites: &[Rewrite]) {
    // Registers read other than as an access's guard (a copy's source
    // counts where the copy is read so).
    let mut elsewhere = vec![false; p.regs.len()];
    let mut copies = Vec::new();
    walk(&p.body, &mut |inst| {
        let guard = match *inst {
            Inst::Load { guard, .. } | Inst::Store { guard, .. } | Inst::Atomic { guard, .. } => {
                guard
            }
            Inst::Mov { dst, src } => {
                copies.push((dst, src));
                return;
            }
            _ => None,
        };
        for r in inst.reads() {
            if Some(r) != guard {
                mark(&mut elsewhere, r);
            }
        }
    });
    // (A register out of range, which the emitter reports, counts as
    // read elsewhere.)
    let read_elsewhere = |marks: &[bool], r: Reg| marks.get(r.index()).is_none_or(|&m| m);
    let mut changed = true;
    while changed {
        changed = false;
        for &(dst, src) in &copies {
            if read_elsewhere(&elsewhere, dst) && !read_elsewhere(&elsewhere, src) {
                mark(&mut elsewhere, src);
                changed = true;
            }
        }
    }
    mark_conditions(&p.body, &mut elsewhere);
    // In the rewrites' order, so that the registers made below (and the
    // PTX) are the same in every run.
    let lone: Vec<Rewrite> = rewrites
        .iter()
        .copied()
        .filter(|&(dst, ..)| !read_elsewhere(&elsewhere, dst))
        .collect();
    if lone.is_empty() {
        return;
    }
    let mut bounds: HashMap<(u32, u32), (Reg, Reg)> = HashMap::new();
    let mut prologue = Vec::new();
    let mut keys: Vec<(u32, u32)> = lone.iter().map(|&(_, _, n, k)| (n, k)).collect();
    keys.sort_unstable();
    keys.dedup();
    for (n, k) in keys {
        let quotient = element_count(p, n, k, &mut prologue);
        let [low, high_shift, high_wide, high, zero, past, top, limit] = [
            Ty::U32,
            Ty::U32,
            Ty::U64,
            Ty::U32,
            Ty::U32,
            Ty::Bool,
            Ty::U32,
            Ty::U32,
        ]
        .map(|ty| fresh(p, ty));
        prologue.extend(
            [
                Inst::Convert {
                    dst: low,
                    a: quotient,
                },
                Inst::Const {
                    dst: high_shift,
                    bits: 32,
                },
                Inst::Bin {
                    op: BinOp::Shr,
                    dst: high_wide,
                    a: quotient,
                    b: high_shift,
                },
                Inst::Convert {
                    dst: high,
                    a: high_wide,
                },
                Inst::Const { dst: zero, bits: 0 },
                Inst::Bin {
                    op: BinOp::Ne,
                    dst: past,
                    a: high,
                    b: zero,
                },
                Inst::Const {
                    dst: top,
                    bits: u64::from(u32::MAX),
                },
                Inst::Select {
                    dst: limit,
                    cond: past,
                    a: top,
                    b: low,
                },
            ]
            .map(Stmt::Inst),
        );
        bounds.insert((n, k), (limit, past));
    }
    let mut narrowed: HashMap<Reg, [Inst; 3]> = HashMap::new();
    for &(dst, wide, n, k) in &lone {
        let (limit, past) = bounds[&(n, k)];
        let index = fresh(p, Ty::U32);
        let below = fresh(p, Ty::Bool);
        narrowed.insert(
            dst,
            [
                Inst::Convert {
                    dst: index,
                    a: wide,
                },
                Inst::Bin {
                    op: BinOp::Lt,
                    dst: below,
                    a: index,
                    b: limit,
                },
                Inst::Bin {
                    op: BinOp::Or,
                    dst,
                    a: below,
                    b: past,
                },
            ],
        );
    }
    each_list_mut(&mut p.body, &mut |list| {
        let mut out = Vec::with_capacity(list.len());
        for s in list.drain(..) {
            match s {
                Stmt::Inst(Inst::Bin {
                    op: BinOp::Lt, dst, ..
                }) if narrowed.contains_key(&dst) => {
                    out.extend(narrowed[&dst].clone().map(Stmt::Inst));
                }
                s => out.push(s),
            }
        }
        *list = out;
    });
    p.body.splice(0..0, prologue);
}

/// Sets `r`'s mark, where `r` is in range.
fn mark(marks: &mut [bool], r: Reg) {
    if let Some(m) = marks.get_mut(r.index()) {
        *m = true;
    }
}

/// Marks the registers `if`s and loops' `break if`s read.
fn mark_conditions(stmts: &[Stmt], marks: &mut [bool]) {
    each_list(stmts, &mut |list| {
        for s in list {
            match s {
                Stmt::If { cond, .. } => mark(marks, *cond),
                Stmt::Loop {
                    break_if: Some(c), ..
                } => mark(marks, *c),
                _ => {}
            }
        }
    });
}

/// Appends to `prologue` the element count `len >> k` of buffer `n`:
/// its register.
fn element_count(p: &mut Program, n: u32, k: u32, prologue: &mut Vec<Stmt>) -> Reg {
    let shift = fresh(p, Ty::U32);
    let len = fresh(p, Ty::U64);
    let quotient = fresh(p, Ty::U64);
    prologue.extend(
        [
            Inst::Const {
                dst: shift,
                bits: u64::from(k),
            },
            Inst::Read {
                dst: len,
                what: Builtin::BufferLen(n),
            },
            Inst::Bin {
                op: BinOp::Shr,
                dst: quotient,
                a: len,
                b: shift,
            },
        ]
        .map(Stmt::Inst),
    );
    quotient
}

/// A new register of `ty`.
fn fresh(p: &mut Program, ty: Ty) -> Reg {
    p.regs.push(ty);
    Reg((p.regs.len() - 1) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostOptions, run};

    /// Elements of strides 4, 8 and 16 read and written at an index that
    /// `shift` moves past any buffer's end, and wraps near `u32::MAX`.
    const SRC: &str = "
        struct P { shift: u32 }
        @group(0) @binding(0) var<storage, read> a: array<f32>;
        @group(0) @binding(1) var<storage, read> q: array<vec2<u32>>;
        @group(0) @binding(2) var<storage, read_write> out: array<f32>;
        @group(0) @binding(3) var<storage, read_write> h: array<vec4<f32>>;
        @group(0) @binding(4) var<uniform> p: P;
        @compute @workgroup_size(64)
        fn k(@builtin(global_invocation_id) gid: vec3<u32>) {
            let i = gid.x + p.shift;
            let v = a[i];
            let w = q[i];
            out[i] = v + f32(w.x) - f32(w.y);
            h[i] = vec4<f32>(v, 1.0, f32(w.y), 2.0);
        }";

    fn lowered() -> Program {
        crate::compile(SRC, "k").expect("the kernel compiles")
    }

    fn rewritten() -> Program {
        let mut p = lowered();
        let elements = elements(&p);
        index_bounds(&mut p, &elements);
        p
    }

    /// As the PTX end takes it: the checks rewritten, then those that
    /// guard an access alone narrowed.
    fn narrowed() -> Program {
        let mut p = lowered();
        let elements = elements(&p);
        let checks = index_bounds(&mut p, &elements);
        crate::ptx::select::branch_free(&mut p);
        narrow_lone_bounds(&mut p, &checks);
        p
    }

    /// The 64-bit comparisons `op` of `p`: `Le` the lowering's checks,
    /// `Lt` those rewritten and not narrowed.
    fn wide(p: &Program, want: BinOp) -> usize {
        let mut n = 0;
        walk(&p.body, &mut |inst| {
            if let Inst::Bin { op, a, .. } = *inst
                && op == want
                && p.ty(a) == Ty::U64
            {
                n += 1;
            }
        });
        n
    }

    /// The PTX is the same text every time: the registers the rewrites
    /// make follow the program, not a hash map's order.
    #[test]
    fn the_rewrites_print_the_same_ptx_every_time() {
        let first = super::super::emit(&lowered()).expect("prints");
        for _ in 0..8 {
            assert_eq!(super::super::emit(&lowered()).expect("prints"), first);
        }
    }

    /// Every check of the kernel guards its access alone, so each is
    /// narrowed to a 32-bit comparison or'ed with the buffer's being
    /// past 2^32 elements.
    #[test]
    fn lone_checks_become_32_bit_comparisons() {
        assert!(wide(&rewritten(), BinOp::Lt) >= 4);
        let p = narrowed();
        assert_eq!(wide(&p, BinOp::Lt), 0);
        let ptx = super::super::emit(&lowered()).expect("prints");
        assert!(!ptx.contains("setp.lt.u64"), "{ptx}");
    }

    /// Every bounds check of the kernel is rewritten, and its PTX takes
    /// each address with one `mad.wide.u32`.
    #[test]
    fn element_checks_become_index_comparisons() {
        let before = lowered();
        assert!(
            wide(&before, BinOp::Le) >= 4,
            "the lowering checks every access"
        );
        assert_eq!(wide(&rewritten(), BinOp::Le), 0);
        let ptx = super::super::emit(&before).expect("prints");
        assert!(!ptx.contains("setp.le.u64"), "{ptx}");
        assert_eq!(ptx.matches("mad.wide.u32").count(), 4, "{ptx}");
    }

    /// The rewritten program computes what the lowered one does, bit for
    /// bit, for buffers that end inside an element, hold none, or hold
    /// some, at indices inside, past the end and wrapped.
    #[test]
    fn the_rewrite_keeps_every_result() {
        let before = lowered();
        for after in [rewritten(), narrowed()] {
            keeps_every_result(&before, &after);
        }
    }

    fn keeps_every_result(before: &Program, after: &Program) {
        let options = HostOptions { threads: 1 };
        for len in [0usize, 3, 4, 7, 8, 12, 16, 20, 100, 256, 258, 1024] {
            for shift in [0u32, 5, 60, 200, u32::MAX - 40] {
                let params = shift.to_le_bytes();
                let fill = |k: usize| -> Vec<u8> {
                    (0..len).map(|b| (b * 7 + k * 13) as u8 | 1).collect()
                };
                let mut x: Vec<Vec<u8>> = (0..4).map(fill).collect();
                let mut y = x.clone();
                let mut xs: Vec<&mut [u8]> = x.iter_mut().map(|b| &mut b[..]).collect();
                run(before, [2, 1, 1], &mut xs, &params, &options).expect("runs");
                let mut ys: Vec<&mut [u8]> = y.iter_mut().map(|b| &mut b[..]).collect();
                run(after, [2, 1, 1], &mut ys, &params, &options).expect("runs");
                assert_eq!(x, y, "{len} bytes, shift {shift}");
            }
        }
    }
}
