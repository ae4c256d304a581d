//! Branch-free forms of two shapes the lowering makes, for the PTX end.
//!
//! - naga gives WGSL's short-circuit `a && b` (and `a || b`) as an `if`
//!   that sets a variable: `if a { x = b } else { x = false }`. Where the
//!   branch only computes (nothing in it touches memory, and each value it
//!   makes is made there alone), that is `x = a && b` with the branch's
//!   instructions run either way: one `and.pred`, which ptxas folds into
//!   the comparison that makes `b`, where the `if` took a branch or two
//!   predicated moves.
//! - `select(0, v, c)` of a value `v` that a guarded load reads (zero where
//!   its guard fails) and that nothing else reads is that load guarded by
//!   `guard && c`: the load moves down to the select, past instructions
//!   that only compute, and the select becomes a copy. A tiled matmul's
//!   staging selects each element it loads to zero outside the matrices;
//!   so its loads take one predicate each, where there was the guard's
//!   zero and then a second select.
//!
//! Both give the same value in every invocation; the interpreter runs
//! the rewritten program bit for bit as the lowered one (tests below).
//! The host ends keep the lowered shapes, which the window planner reads.

use crate::ir::{BinOp, Inst, Program, Reg, Stmt, Ty, walk, walk_regs};

/// Per register, how many instructions write it and read it.
struct Uses {
    writes: Vec<u32>,
    reads: Vec<u32>,
    /// The constant a register holds, where a constant is its one writer.
    consts: Vec<Option<u64>>,
    /// Whether a guarded, non-atomic load is a register's one writer.
    loaded: Vec<bool>,
    /// `a` where `!a` is a register's one writer.
    nots: Vec<Option<Reg>>,
}

impl Uses {
    fn of(p: &Program) -> Self {
        let n = p.regs.len();
        let mut u = Uses {
            writes: vec![0; n],
            reads: vec![0; n],
            consts: vec![None; n],
            loaded: vec![false; n],
            nots: vec![None; n],
        };
        walk_regs(&p.body, &mut |r, write| {
            if !write && let Some(c) = u.reads.get_mut(r.index()) {
                *c += 1;
            }
        });
        walk(&p.body, &mut |inst| {
            if let Some(d) = inst.dst()
                && let Some(c) = u.writes.get_mut(d.index())
            {
                *c += 1;
                u.consts[d.index()] = match *inst {
                    Inst::Const { bits, .. } => Some(bits),
                    _ => None,
                };
                u.nots[d.index()] = match *inst {
                    Inst::Un {
                        op: crate::ir::UnOp::Not,
                        a,
                        ..
                    } => Some(a),
                    _ => None,
                };
                u.loaded[d.index()] = matches!(
                    inst,
                    Inst::Load {
                        guard: Some(_),
                        atomic: false,
                        ..
                    }
                );
            }
        });
        for (i, w) in u.writes.iter().enumerate() {
            if *w != 1 {
                u.consts[i] = None;
                u.loaded[i] = false;
                u.nots[i] = None;
            }
        }
        u
    }

    fn constant(&self, r: Reg) -> Option<u64> {
        self.consts.get(r.index()).copied().flatten()
    }

    fn written_once(&self, r: Reg) -> bool {
        self.writes.get(r.index()) == Some(&1)
    }
}

/// Both rewrites of the module's doc, over the uses of the lowered
/// program (the first changes no read, constant or load the second looks
/// at).
pub(super) fn branch_free(p: &mut Program) {
    let uses = Uses::of(p);
    short_circuits(p, &uses);
    zero_selects(p, &uses);
}

/// Rewrites every short-circuit `if` of `p` that only computes as a
/// predicate `and` or `or` (see the module's doc).
fn short_circuits(p: &mut Program, uses: &Uses) {
    let regs = std::mem::take(&mut p.regs);
    rebuild(&mut p.body, &mut |s| match s {
        Stmt::If { cond, then, els } => logic(&regs, uses, *cond, then, els),
        _ => None,
    });
    p.regs = regs;
}

/// `if cond { then } else { els }` as straight-line instructions, where it
/// is `x = cond && e` (`els` sets `x` to false), `x = cond || e` (`then`
/// sets it to true) or `x = a || e` (`cond` is `!a` and `els` sets `x` to
/// true: naga's `a || e`), and the other branch only computes `e`.
fn logic(regs: &[Ty], uses: &Uses, cond: Reg, then: &[Stmt], els: &[Stmt]) -> Option<Vec<Stmt>> {
    let set = |stmts: &[Stmt]| match stmts {
        [Stmt::Inst(Inst::Mov { dst, src })] => Some((*dst, uses.constant(*src)?)),
        _ => None,
    };
    let negated = || uses.nots.get(cond.index()).copied().flatten();
    let (op, left, x, branch) = match (set(then), set(els)) {
        (_, Some((x, 0))) => (BinOp::And, cond, x, then),
        (_, Some((x, 1))) => (BinOp::Or, negated()?, x, then),
        (Some((x, 1)), _) => (BinOp::Or, cond, x, els),
        _ => return None,
    };
    let (Stmt::Inst(Inst::Mov { dst, src: e }), computed) = branch.split_last()? else {
        return None;
    };
    let bool_reg = |r: Reg| regs.get(r.index()) == Some(&Ty::Bool);
    if *dst != x || !bool_reg(x) || !bool_reg(*e) || !bool_reg(left) {
        return None;
    }
    let mut out = Vec::with_capacity(branch.len());
    for s in computed {
        let Stmt::Inst(inst) = s else { return None };
        let d = inst.dst()?;
        if !computes(inst) || !uses.written_once(d) || d == x || d == cond || d == left {
            return None;
        }
        out.push(s.clone());
    }
    out.push(Stmt::Inst(Inst::Bin {
        op,
        dst: x,
        a: left,
        b: *e,
    }));
    Some(out)
}

/// Rewrites every `select(0, v, c)` of a guarded load's value that
/// nothing else reads as the load guarded by `guard && c` (see the
/// module's doc).
fn zero_selects(p: &mut Program, uses: &Uses) {
    let mut fresh = p.regs.len();
    let mut added = Vec::new();
    fold_lists(&mut p.body, uses, &mut |ty| {
        added.push(ty);
        fresh += 1;
        Reg((fresh - 1) as u32)
    });
    p.regs.extend(added);
}

/// [`zero_selects`] over every statement list of `stmts`.
fn fold_lists(stmts: &mut Vec<Stmt>, uses: &Uses, fresh: &mut impl FnMut(Ty) -> Reg) {
    for s in stmts.iter_mut() {
        match s {
            Stmt::If { then, els, .. } => {
                fold_lists(then, uses, fresh);
                fold_lists(els, uses, fresh);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                fold_lists(body, uses, fresh);
                fold_lists(continuing, uses, fresh);
            }
            Stmt::Block { body, .. } => fold_lists(body, uses, fresh),
            _ => {}
        }
    }
    let mut j = 0;
    while j < stmts.len() {
        if let Some(i) = folded_load(stmts, j, uses) {
            let Stmt::Inst(Inst::Select { dst, cond, a, .. }) = stmts[j] else {
                unreachable!("folded_load matched a select");
            };
            let Stmt::Inst(Inst::Load {
                dst: v,
                space,
                addr,
                guard: Some(g),
                atomic,
            }) = stmts.remove(i)
            else {
                unreachable!("folded_load matched a guarded load");
            };
            // The select is now at j - 1.
            let both = fresh(Ty::Bool);
            stmts.splice(
                j - 1..j,
                [
                    Inst::Bin {
                        op: BinOp::And,
                        dst: both,
                        a: g,
                        b: cond,
                    },
                    Inst::Load {
                        dst: v,
                        space,
                        addr,
                        guard: Some(both),
                        atomic,
                    },
                    Inst::Mov { dst, src: a },
                ]
                .map(Stmt::Inst),
            );
            j += 2;
        } else {
            j += 1;
        }
    }
}

/// Where `stmts[j]` is `select(0, v, c)` and `v` is read only there and
/// written by a guarded, non-atomic load earlier in the list with only
/// computing instructions between them (none writing the load's address
/// or guard), that load's index.
fn folded_load(stmts: &[Stmt], j: usize, uses: &Uses) -> Option<usize> {
    let Stmt::Inst(Inst::Select { a: v, b: zero, .. }) = stmts[j] else {
        return None;
    };
    if uses.constant(zero) != Some(0) || uses.reads.get(v.index()) != Some(&1) {
        return None;
    }
    if uses.loaded.get(v.index()) != Some(&true) {
        return None;
    }
    for i in (0..j).rev() {
        let Stmt::Inst(inst) = &stmts[i] else {
            return None;
        };
        if let Inst::Load {
            dst,
            addr,
            guard: Some(g),
            atomic: false,
            ..
        } = *inst
            && dst == v
        {
            let clobbered = stmts[i + 1..j].iter().any(|s| {
                matches!(s, Stmt::Inst(between) if between.dst().is_some_and(|d| d == addr || d == g || d == v))
            });
            return (!clobbered).then_some(i);
        }
        if !computes(inst) {
            return None;
        }
    }
    None
}

/// Whether an instruction only computes a value: it touches no memory
/// and cannot fail, so running it earlier, later or on a path that did
/// not run it changes nothing but its register.
fn computes(inst: &Inst) -> bool {
    inst.is_pure()
        || matches!(
            inst,
            Inst::Const { .. } | Inst::Param { .. } | Inst::Read { .. }
        )
}

/// Rebuilds every statement list of `stmts`, innermost first, replacing
/// each statement for which `f` gives some with those statements.
fn rebuild(stmts: &mut Vec<Stmt>, f: &mut impl FnMut(&Stmt) -> Option<Vec<Stmt>>) {
    for mut s in std::mem::take(stmts) {
        match &mut s {
            Stmt::If { then, els, .. } => {
                rebuild(then, f);
                rebuild(els, f);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                rebuild(body, f);
                rebuild(continuing, f);
            }
            Stmt::Block { body, .. } => rebuild(body, f),
            _ => {}
        }
        match f(&s) {
            Some(new) => stmts.extend(new),
            None => stmts.push(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostOptions, run};

    /// `&&` and `||` whose right sides only compute, and loads selected
    /// to zero, as a tiled kernel stages its tiles.
    const SRC: &str = "
        struct P { n: u32, m: u32 }
        @group(0) @binding(0) var<storage, read> a: array<f32>;
        @group(0) @binding(1) var<storage, read_write> out: array<f32>;
        @group(0) @binding(2) var<uniform> p: P;
        @compute @workgroup_size(64)
        fn k(@builtin(global_invocation_id) gid: vec3<u32>) {
            let i = gid.x;
            let ok = i < p.n;
            let row = i / 8u < p.m;
            let va = select(0.0, a[i + p.m], ok && i + 3u < p.n);
            let vb = select(0.0, a[min(i * 2u, p.n)], row || i % 5u == 0u);
            let vc = select(0.0, a[i], ok);
            if i < 256u {
                out[i] = va + 2.0 * vb + 4.0 * vc;
            }
        }";

    fn prepared(p: &Program) -> Program {
        let mut p = p.clone();
        branch_free(&mut p);
        p
    }

    fn count(p: &Program, f: impl Fn(&Inst) -> bool) -> usize {
        let mut n = 0;
        walk(&p.body, &mut |inst| n += usize::from(f(inst)));
        n
    }

    fn ifs(stmts: &[Stmt]) -> usize {
        stmts
            .iter()
            .map(|s| match s {
                Stmt::If { then, els, .. } => 1 + ifs(then) + ifs(els),
                Stmt::Loop {
                    body, continuing, ..
                } => ifs(body) + ifs(continuing),
                Stmt::Block { body, .. } => ifs(body),
                _ => 0,
            })
            .sum()
    }

    /// Runs `before` and `after` on the interpreter over the same buffers
    /// for each parameter block, and compares every byte.
    fn same_results(
        before: &Program,
        after: &Program,
        grid: [u32; 3],
        params: &[Vec<u32>],
        lens: &[usize],
    ) {
        let options = HostOptions { threads: 1 };
        for words in params {
            let params: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let fill = |k: usize, len: usize| -> Vec<u8> {
                (0..len / 4)
                    .flat_map(|i| (((i * 37 + k * 11) % 97) as f32 - 40.0).to_le_bytes())
                    .collect()
            };
            let mut x: Vec<Vec<u8>> = lens.iter().enumerate().map(|(k, &l)| fill(k, l)).collect();
            let mut y = x.clone();
            let mut xs: Vec<&mut [u8]> = x.iter_mut().map(|b| &mut b[..]).collect();
            run(before, grid, &mut xs, &params, &options).expect("runs");
            let mut ys: Vec<&mut [u8]> = y.iter_mut().map(|b| &mut b[..]).collect();
            run(after, grid, &mut ys, &params, &options).expect("runs");
            assert_eq!(x, y, "params {words:?}");
        }
    }

    #[test]
    fn short_circuits_and_zero_selects_are_rewritten() {
        let before = crate::compile(SRC, "k").expect("compiles");
        let after = prepared(&before);
        assert!(
            ifs(&before.body) > ifs(&after.body),
            "the short-circuit ifs go"
        );
        let selects = |p: &Program| count(p, |i| matches!(i, Inst::Select { .. }));
        assert!(
            selects(&after) + 3 <= selects(&before),
            "three selects of zero go"
        );
        let ptx = super::super::emit(&before).expect("prints");
        assert!(ptx.contains("and.pred") && ptx.contains("or.pred"), "{ptx}");
    }

    #[test]
    fn the_rewrites_keep_every_result() {
        let before = crate::compile(SRC, "k").expect("compiles");
        let after = prepared(&before);
        let params: Vec<Vec<u32>> = [(0, 0), (5, 3), (64, 8), (100, 2), (130, 40), (u32::MAX, 7)]
            .iter()
            .map(|&(n, m)| vec![n, m])
            .collect();
        same_results(&before, &after, [3, 1, 1], &params, &[400, 1024]);
        same_results(&before, &after, [3, 1, 1], &params, &[0, 1024]);
    }

    /// The 4x4 tiled matmul, whose staging both rewrites change, gives
    /// the lowered program's bits at shapes that end inside a tile.
    #[test]
    fn the_tiled_matmul_keeps_its_bits() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shaders/compute");
        let read = |f: &str| std::fs::read_to_string(format!("{root}/{f}")).expect("shader");
        let src = format!(
            "{}\n{}\n{}",
            read("rounding.wgsl"),
            read("matmul_bindings.wgsl"),
            read("matmul_tiled_4x4.wgsl")
        );
        let before = crate::compile(&src, "matmul_tiled_4x4").expect("compiles");
        let after = prepared(&before);
        assert!(ifs(&after.body) < ifs(&before.body));
        for (m, k, n, mode) in [
            (70u32, 33u32, 65u32, 0u32),
            (17, 5, 9, 0),
            (64, 16, 64, 1),
            (3, 40, 70, 2),
        ] {
            let grid = [n.div_ceil(64), m.div_ceil(64), 1];
            let lens = [
                (m * k * 4) as usize,
                (k * n * 4) as usize,
                (m * n * 4) as usize,
            ];
            same_results(&before, &after, grid, &[vec![m, k, n, mode, 0]], &lens);
        }
    }
}
