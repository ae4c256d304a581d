//! Guards that hold in every invocation, dropped.
//!
//! The lowering guards every access with a bounds check (an access's end
//! against its variable's). Where the offset is made of constants and the
//! local invocation id, as the indices of workgroup tiles are
//! (`tile_a[17u * step + lid.y]`), the check holds for every invocation
//! of every workgroup, and an end that keeps it pays for it in the
//! kernel's innermost loop: the PTX computes the predicate and issues a
//! predicated load and a zeroing move per scalar, the host translation
//! branches. This pass proves such guards true with intervals and drops
//! them.
//!
//! Only registers written once count (a `var` lives in registers written
//! by each assignment, a loop counter by each step): their value is what
//! their one instruction makes of its operands, wherever it runs. Unsigned
//! values are intervals `lo..=hi` (a `U32` about which nothing else is
//! known is still at most `u32::MAX`); an `I32` counts only where it is
//! known not to be negative; an operation that could wrap gives nothing.
//!
//! Storage buffers' lengths are known only at launch, so their guards
//! stay, but a guard's part that holds everywhere goes: the bounds check
//! is `offset + size <= end && offset + size >= offset`, and the second
//! test (the add did not wrap) holds wherever the offset is a `u32` index
//! times a stride, which is every array element's. An `and` with an
//! operand that always holds becomes a copy of the other, so the end
//! computes, and a GPU runs, one 64-bit comparison per access, not two.

use std::collections::{HashMap, HashSet};

use crate::ir::{BinOp, Builtin, Inst, Program, Reg, Ty, walk, walk_mut};

/// What is known of a register in every invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fact {
    /// An integer in `lo..=hi` (an `I32` then is not negative).
    Range(u64, u64),
    /// A `Bool` of this value.
    Known(bool),
    /// Nothing.
    Unknown,
}

/// How deep a chain of definitions is followed before giving up: index
/// arithmetic is a few operations deep, and a bound keeps the recursion
/// off the stack's limit on generated programs.
const MAX_DEPTH: u32 = 64;

/// Drops every guard of a load, store or atomic that holds in every
/// invocation.
pub(super) fn drop_proven_guards(p: &mut Program) {
    let proven = {
        let mut a = Analysis::new(p);
        let mut guards = Vec::new();
        walk(&p.body, &mut |inst| {
            if let Some(g) = guard(inst) {
                guards.push(g);
            }
        });
        guards
            .into_iter()
            .filter(|&g| a.fact(g, 0) == Fact::Known(true))
            .collect::<HashSet<Reg>>()
    };
    walk_mut(&mut p.body, &mut |inst| {
        if let Inst::Load { guard, .. } | Inst::Store { guard, .. } | Inst::Atomic { guard, .. } =
            inst
            && guard.is_some_and(|g| proven.contains(&g))
        {
            *guard = None;
        }
    });
    drop_proven_conjuncts(p);
}

/// Rewrites `dst = a && b` as `dst = a` where `b` holds in every
/// invocation (and the other way round): the value is the same wherever
/// the instruction runs, since `b`'s one writer always makes it true.
fn drop_proven_conjuncts(p: &mut Program) {
    let copies = {
        let mut a = Analysis::new(p);
        let mut ands = Vec::new();
        walk(&p.body, &mut |inst| {
            if let Some(and) = and_of(&p.regs, inst) {
                ands.push(and);
            }
        });
        ands.into_iter()
            .filter_map(|(dst, x, y)| {
                if a.fact(y, 0) == Fact::Known(true) {
                    Some(((dst, x, y), x))
                } else if a.fact(x, 0) == Fact::Known(true) {
                    Some(((dst, x, y), y))
                } else {
                    None
                }
            })
            .collect::<HashMap<(Reg, Reg, Reg), Reg>>()
    };
    if copies.is_empty() {
        return;
    }
    let Program { regs, body, .. } = p;
    walk_mut(body, &mut |inst| {
        if let Some(key) = and_of(regs, inst)
            && let Some(&src) = copies.get(&key)
        {
            *inst = Inst::Mov { dst: key.0, src };
        }
    });
}

/// `(dst, a, b)` of a `Bool` `dst = a && b`.
fn and_of(regs: &[Ty], inst: &Inst) -> Option<(Reg, Reg, Reg)> {
    match *inst {
        Inst::Bin {
            op: BinOp::And,
            dst,
            a,
            b,
        } if regs.get(dst.index()) == Some(&Ty::Bool) => Some((dst, a, b)),
        _ => None,
    }
}

fn guard(inst: &Inst) -> Option<Reg> {
    match *inst {
        Inst::Load { guard, .. } | Inst::Store { guard, .. } | Inst::Atomic { guard, .. } => guard,
        _ => None,
    }
}

/// The largest value an interval of `ty` may hold: `I32`s count only
/// while they are not negative.
fn max_of(ty: Ty) -> Option<u64> {
    match ty {
        Ty::U32 => Some(u64::from(u32::MAX)),
        Ty::I32 => Some(i32::MAX as u64),
        Ty::U64 => Some(u64::MAX),
        _ => None,
    }
}

struct Analysis<'a> {
    p: &'a Program,
    /// Per register, its only writer; `None` where it has none or several.
    defs: Vec<Option<&'a Inst>>,
    memo: HashMap<Reg, Fact>,
}

impl<'a> Analysis<'a> {
    fn new(p: &'a Program) -> Self {
        Analysis {
            p,
            defs: p.single_writers(),
            memo: HashMap::new(),
        }
    }

    fn ty(&self, r: Reg) -> Option<Ty> {
        self.p.regs.get(r.index()).copied()
    }

    fn fact(&mut self, r: Reg, depth: u32) -> Fact {
        if let Some(&f) = self.memo.get(&r) {
            return f;
        }
        if depth > MAX_DEPTH {
            return Fact::Unknown;
        }
        let f = match self.compute(r, depth + 1) {
            // Whatever wrote it, a `U32` is at most `u32::MAX`.
            Fact::Unknown if self.ty(r) == Some(Ty::U32) => Fact::Range(0, u64::from(u32::MAX)),
            f => f,
        };
        self.memo.insert(r, f);
        f
    }

    /// An integer register's interval, clipped to what its type holds.
    fn range(&mut self, r: Reg, depth: u32) -> Option<(u64, u64)> {
        match self.fact(r, depth) {
            Fact::Range(lo, hi) => Some((lo, hi)),
            _ => None,
        }
    }

    fn compute(&mut self, r: Reg, depth: u32) -> Fact {
        let (Some(inst), Some(ty)) = (self.defs.get(r.index()).copied().flatten(), self.ty(r))
        else {
            return Fact::Unknown;
        };
        let within = |lo: u64, hi: u64| match max_of(ty) {
            Some(max) if lo <= hi && hi <= max => Fact::Range(lo, hi),
            _ => Fact::Unknown,
        };
        match *inst {
            Inst::Const { bits, .. } => match ty {
                Ty::Bool => Fact::Known(bits & 1 != 0),
                Ty::U32 | Ty::I32 => within(bits & 0xFFFF_FFFF, bits & 0xFFFF_FFFF),
                Ty::U64 => within(bits, bits),
                _ => Fact::Unknown,
            },
            Inst::Read {
                what: Builtin::LocalId(axis),
                ..
            } => {
                let size = self.p.workgroup_size[axis.index()];
                within(0, u64::from(size.max(1) - 1))
            }
            Inst::Mov { src, .. } => self.fact(src, depth),
            Inst::Convert { a, .. } => {
                let from = self.ty(a);
                match (from, ty, self.fact(a, depth)) {
                    (Some(Ty::Bool), _, Fact::Known(v)) if max_of(ty).is_some() => {
                        within(u64::from(v), u64::from(v))
                    }
                    (Some(Ty::Bool), _, _) => within(0, 1),
                    (_, Ty::Bool, Fact::Range(lo, hi)) => {
                        if lo > 0 {
                            Fact::Known(true)
                        } else if hi == 0 {
                            Fact::Known(false)
                        } else {
                            Fact::Unknown
                        }
                    }
                    // Between integer types a value that fits is kept: a
                    // widening, a reinterpretation of a non-negative
                    // value, a truncation of a small one.
                    (Some(f), _, Fact::Range(lo, hi)) if max_of(f).is_some() => within(lo, hi),
                    _ => Fact::Unknown,
                }
            }
            Inst::Select { cond, a, b, .. } => match self.fact(cond, depth) {
                Fact::Known(true) => self.fact(a, depth),
                Fact::Known(false) => self.fact(b, depth),
                _ => match (self.fact(a, depth), self.fact(b, depth)) {
                    (Fact::Range(al, ah), Fact::Range(bl, bh)) => within(al.min(bl), ah.max(bh)),
                    (Fact::Known(x), Fact::Known(y)) if x == y => Fact::Known(x),
                    _ => Fact::Unknown,
                },
            },
            Inst::Bin { op, a, b, .. } if ty == Ty::Bool => self.predicate(op, a, b, depth),
            Inst::Bin { op, a, b, .. } => {
                let (Some((al, ah)), Some((bl, bh))) = (self.range(a, depth), self.range(b, depth))
                else {
                    return Fact::Unknown;
                };
                let max = max_of(ty).unwrap_or(0);
                match op {
                    BinOp::Add => match (al.checked_add(bl), ah.checked_add(bh)) {
                        (Some(lo), Some(hi)) => within(lo, hi),
                        _ => Fact::Unknown,
                    },
                    BinOp::Sub if al >= bh => within(al - bh, ah - bl),
                    BinOp::Mul => match (al.checked_mul(bl), ah.checked_mul(bh)) {
                        (Some(lo), Some(hi)) => within(lo, hi),
                        _ => Fact::Unknown,
                    },
                    // The lowering has already replaced a zero divisor by 1.
                    BinOp::Div => within(al / bh.max(1), ah / bl.max(1)),
                    BinOp::Rem => within(0, ah.min(bh.max(1) - 1)),
                    BinOp::Min => within(al.min(bl), ah.min(bh)),
                    BinOp::Max => within(al.max(bl), ah.max(bh)),
                    BinOp::And => within(0, ah.min(bh)),
                    // No bit above the highest of either bound.
                    BinOp::Or => {
                        let top = ah | bh;
                        let ones = if top == 0 {
                            0
                        } else {
                            max.min(u64::MAX >> top.leading_zeros())
                        };
                        within(al.max(bl), ones)
                    }
                    // Shift amounts are already masked to the width.
                    BinOp::Shl if bh < 64 => {
                        match (al.checked_shl(bl as u32), ah.checked_shl(bh as u32)) {
                            (Some(lo), Some(hi)) if hi >> bh == ah => within(lo, hi),
                            _ => Fact::Unknown,
                        }
                    }
                    BinOp::Shr if bh < 64 => within(al >> bh, ah >> bl),
                    _ => Fact::Unknown,
                }
            }
            _ => Fact::Unknown,
        }
    }

    /// A `Bool` made by `op` of `a` and `b`.
    fn predicate(&mut self, op: BinOp, a: Reg, b: Reg, depth: u32) -> Fact {
        if self.ty(a) == Some(Ty::Bool) {
            let (x, y) = (self.fact(a, depth), self.fact(b, depth));
            return match (op, x, y) {
                (BinOp::And, Fact::Known(false), _) | (BinOp::And, _, Fact::Known(false)) => {
                    Fact::Known(false)
                }
                (BinOp::And, Fact::Known(true), Fact::Known(true)) => Fact::Known(true),
                (BinOp::Or, Fact::Known(true), _) | (BinOp::Or, _, Fact::Known(true)) => {
                    Fact::Known(true)
                }
                (BinOp::Or, Fact::Known(false), Fact::Known(false)) => Fact::Known(false),
                _ => Fact::Unknown,
            };
        }
        // `offset + size >= offset`: the bounds check's test that the add
        // did not wrap, true wherever the add's interval shows it cannot.
        if matches!(op, BinOp::Ge) && self.adds_without_wrapping(a, b, depth) {
            return Fact::Known(true);
        }
        if matches!(op, BinOp::Le) && self.adds_without_wrapping(b, a, depth) {
            return Fact::Known(true);
        }
        let (Some((al, ah)), Some((bl, bh))) = (self.range(a, depth), self.range(b, depth)) else {
            return Fact::Unknown;
        };
        let (holds, fails) = match op {
            BinOp::Lt => (ah < bl, al >= bh),
            BinOp::Le => (ah <= bl, al > bh),
            BinOp::Gt => (al > bh, ah <= bl),
            BinOp::Ge => (al >= bh, ah < bl),
            BinOp::Eq => (al == ah && bl == bh && al == bl, ah < bl || bh < al),
            BinOp::Ne => (ah < bl || bh < al, al == ah && bl == bh && al == bl),
            _ => (false, false),
        };
        if holds {
            Fact::Known(true)
        } else if fails {
            Fact::Known(false)
        } else {
            Fact::Unknown
        }
    }

    /// Whether `sum` is `base + c` (either order) for a `c` known not to be
    /// negative, with an interval that shows the add does not wrap.
    fn adds_without_wrapping(&mut self, sum: Reg, base: Reg, depth: u32) -> bool {
        let Some(&Inst::Bin {
            op: BinOp::Add,
            a,
            b,
            ..
        }) = self.defs.get(sum.index()).copied().flatten()
        else {
            return false;
        };
        let other = if a == base {
            b
        } else if b == base {
            a
        } else {
            return false;
        };
        self.range(other, depth).is_some() && self.range(sum, depth).is_some()
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::{Inst, Space};

    /// The guards of `entry`'s accesses to `space`, in program order.
    fn guards(src: &str, entry: &str, space: Space) -> Vec<bool> {
        let p = crate::compile(src, entry).expect("compiles");
        let mut out = Vec::new();
        crate::ir::walk(&p.body, &mut |inst| match inst {
            Inst::Load {
                space: s, guard, ..
            }
            | Inst::Store {
                space: s, guard, ..
            } if *s == space => {
                out.push(guard.is_some());
            }
            _ => {}
        });
        out
    }

    /// A tile indexed by the local id and constants loses its guards; an
    /// index from a parameter, or one that may pass the tile's end, keeps
    /// them; a storage buffer's always stay.
    #[test]
    fn tile_indices_from_the_local_id_are_proven_in_bounds() {
        let src = "
            struct P { n: u32 }
            @group(0) @binding(0) var<storage, read_write> out: array<f32>;
            @group(0) @binding(1) var<uniform> p: P;
            var<workgroup> tile: array<vec4<f32>, 272>;
            @compute @workgroup_size(16, 16)
            fn k(@builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
                tile[17u * (li % 16u) + li / 64u][li % 4u] = 1.0;
                workgroupBarrier();
                let a = tile[17u + lid.y];
                let b = tile[p.n + lid.x];
                let c = tile[lid.x * 17u + 16u];
                let d = tile[lid.x * 17u + 17u];
                out[li] = a.x + b.y + c.z + d.w;
            }";
        let shared = guards(src, "k", Space::Shared);
        // One store, then a, b, c and d's four components each.
        assert_eq!(shared.len(), 1 + 4 * 4, "{shared:?}");
        assert!(!shared[0], "the staging store is in bounds");
        assert!(shared[1..5].iter().all(|g| !g), "tile[17 + lid.y]");
        assert!(shared[5..9].iter().all(|&g| g), "a parameter's index");
        assert!(
            shared[9..13].iter().all(|g| !g),
            "tile[17 lid.x + 16] <= 271"
        );
        assert!(
            shared[13..17].iter().all(|&g| g),
            "tile[17 lid.x + 17] may be 272"
        );
        assert_eq!(guards(src, "k", Space::Buffer(0)), vec![true]);
    }

    /// A storage buffer's guard keeps its comparison with the buffer's
    /// end and loses the test that `offset + size` did not wrap, which
    /// holds for any `u32` index times a stride; an index that is not a
    /// `u32` keeps both.
    #[test]
    fn a_storage_guard_is_one_comparison() {
        let ands = |src: &str| {
            let p = crate::compile(src, "k").expect("compiles");
            let mut n = 0;
            crate::ir::walk(&p.body, &mut |inst| {
                if super::and_of(&p.regs, inst).is_some() {
                    n += 1;
                }
            });
            n
        };
        let src = "
            @group(0) @binding(0) var<storage, read> x: array<f32>;
            @group(0) @binding(1) var<storage, read_write> out: array<f32>;
            @compute @workgroup_size(64)
            fn k(@builtin(global_invocation_id) gid: vec3<u32>) {
                out[gid.x] = x[gid.x * 3u + 1u] * 2.0;
            }";
        assert_eq!(ands(src), 0, "both guards are a single comparison");
        // An `i32` index may be negative: its 64-bit offset may be near
        // 2^64, where the add can wrap, so that test stays.
        let signed = src.replace("x[gid.x * 3u + 1u]", "x[i32(gid.x) - 7]");
        assert_eq!(ands(&signed), 1, "the signed index keeps its wrap test");
    }

    /// Wrapping arithmetic proves nothing: `lid.x - 1` wraps at 0.
    #[test]
    fn a_subtraction_that_may_wrap_keeps_its_guard() {
        let src = "
            @group(0) @binding(0) var<storage, read_write> out: array<f32>;
            var<workgroup> tile: array<f32, 64>;
            @compute @workgroup_size(64)
            fn k(@builtin(local_invocation_id) lid: vec3<u32>) {
                tile[lid.x] = 1.0;
                workgroupBarrier();
                out[lid.x] = tile[lid.x - 1u] + tile[63u - lid.x];
            }";
        assert_eq!(guards(src, "k", Space::Shared), vec![false, true, false]);
    }
}
