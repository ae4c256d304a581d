//! Kernels with barriers, subgroup operations or workgroup memory,
//! printed in phases.
//!
//! WGSL puts every barrier in uniform control flow: the invocations of a
//! workgroup reach each one together. So the statements between two
//! barriers (a phase) can run for one invocation after another, as a
//! kernel without barriers does, provided every invocation finishes a
//! phase before any starts the next: the workgroup function runs each
//! phase as its own loop over the invocations. A subgroup operation is
//! such a point too, for the invocations of a subgroup: the phase before
//! it ends, the operation runs once over every invocation's operand (with
//! the interpreter's function, so the bits are the interpreter's), and
//! the next phase starts. Below, a barrier or a subgroup operation is a
//! sync point. The statements that hold one (the `if`s, loops and blocks
//! around it) run once for the workgroup, between the phases. One thread
//! runs the whole workgroup, so its memory (`sh`) and each invocation's
//! private memory (`pvs[li]`, kept across phases) are plain words, and a
//! barrier orders every access before it before every access after it.
//!
//! Values live where their uses need them:
//! - one computed by arithmetic from constants, parameters and built-ins
//!   that are the same for the whole workgroup is set once, before the
//!   phases;
//! - one that some phase may read before that phase writes it (a value
//!   carried across a sync point, a counter of a loop that holds one), or
//!   that the workgroup's statements read or write (a condition, a
//!   subgroup operation's operand or result), is an array with one
//!   element per invocation, `lN` for `rN`, copied into the phase's `rN`
//!   where a phase uses it and back where the phase writes it;
//! - any other is a local of each phase that uses it, as in a kernel
//!   without sync points.
//!
//! Each invocation has a state in `st`: 0 while it runs, otherwise where
//! it is going (past a loop it broke out of, to the continuing part of a
//! loop it continued, past a block it left, past the branch of an `if` it
//! did not take, or nowhere: it returned). A phase skips the invocations
//! that are not running, and only running ones take part in a subgroup
//! operation; the workgroup's statements set a state where an invocation
//! leaves and reset it where the invocation arrives. A loop that holds a
//! sync point runs again while some invocation is still in it.

use std::collections::{BTreeSet, HashSet};

use super::{Emitter, RustError, rust_ty, zero};
use crate::ir::{Builtin, Inst, Program, Reg, Stmt, SubgroupOp, Ty, any_stmt, walk_regs};

/// Where a register lives in a workgroup function printed in phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Home {
    /// A local of each phase that uses it, per invocation.
    Local,
    /// An array of one value per invocation (`lN`), copied into `rN` in
    /// the phases that use it.
    Lane,
    /// One value for the workgroup, set before the first phase.
    Uniform,
}

/// The state of an invocation that returned.
const RETURNED: &str = "u32::MAX";

/// Lane arrays up to this many bytes in all live on the stack; larger
/// ones on the heap, so that a workgroup of many invocations that carries
/// many values does not overflow a thread's stack.
const STACK_BYTES: usize = 64 * 1024;

/// Whether `program` is printed in phases: it has barriers, subgroup
/// operations or built-ins, or workgroup memory.
pub(super) fn needed(program: &Program) -> bool {
    let mut lanes = false;
    crate::ir::walk(&program.body, &mut |inst| {
        lanes |= matches!(
            inst,
            Inst::Read {
                what: Builtin::SubgroupSize | Builtin::SubgroupInvocationId,
                ..
            }
        );
    });
    lanes || program.shared_bytes > 0 || syncs(&program.body)
}

/// Whether `stmts` hold a barrier or a subgroup operation: a point that
/// every invocation (of the workgroup, or of its subgroup) reaches before
/// any goes on.
fn syncs(stmts: &[Stmt]) -> bool {
    any_stmt(stmts, &|s| {
        matches!(s, Stmt::Barrier { .. } | Stmt::Inst(Inst::Subgroup { .. }))
    })
}

/// A statement list cut at its barriers and subgroup operations.
enum Piece<'a> {
    /// Statements without either: one phase.
    Run(&'a [Stmt]),
    /// A barrier, a subgroup operation, or a statement that holds one.
    Sync(&'a Stmt),
}

fn pieces(stmts: &[Stmt]) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, s) in stmts.iter().enumerate() {
        if syncs(std::slice::from_ref(s)) {
            if start < i {
                out.push(Piece::Run(&stmts[start..i]));
            }
            out.push(Piece::Sync(s));
            start = i + 1;
        }
    }
    if start < stmts.len() {
        out.push(Piece::Run(&stmts[start..]));
    }
    out
}

/// Per register, whether it holds one value for the whole workgroup that
/// can be computed before the first phase: its only writer is a
/// constant, a parameter, a built-in that is the same for every
/// invocation, or an arithmetic instruction (which has no effect and
/// cannot fail) of such registers. Registers are marked in program order,
/// so a marked register's operands are marked before it, and the values
/// printed in that order are computed before they are read.
fn uniforms(p: &Program) -> Vec<bool> {
    let writers = p.single_writers();
    let mut marked = vec![false; p.regs.len()];
    crate::ir::walk(&p.body, &mut |inst| {
        let Some(d) = inst.dst() else { return };
        if writers.get(d.index()).copied().flatten() != Some(inst) {
            return;
        }
        let of_uniforms = |regs: Vec<Reg>| {
            regs.iter()
                .all(|r| r != &d && marked.get(r.index()).copied().unwrap_or(false))
        };
        let uniform = match inst {
            Inst::Const { .. } | Inst::Param { .. } => true,
            Inst::Read { what, .. } => matches!(
                what,
                Builtin::GroupId(_)
                    | Builtin::NumGroups(_)
                    | Builtin::BufferLen(_)
                    | Builtin::SubgroupSize
            ),
            _ => inst.is_pure() && of_uniforms(inst.reads()),
        };
        marked[d.index()] = uniform;
    });
    marked
}

/// Adds to `out` the registers that `stmts` may read before they write
/// them, given the registers `set` that are written on every path to the
/// statements; leaves in `set` those written on every path through them.
/// A register outside `out` holds, wherever a run of the statements reads
/// it, a value that run wrote. Conservative: after a loop, or a block that
/// something leaves, only what was set before it counts as set.
fn exposed(stmts: &[Stmt], set: &mut HashSet<Reg>, out: &mut HashSet<Reg>) {
    for s in stmts {
        match s {
            Stmt::Inst(inst) => {
                out.extend(inst.reads().into_iter().filter(|r| !set.contains(r)));
                set.extend(inst.dst());
            }
            Stmt::If { cond, then, els } => {
                if !set.contains(cond) {
                    out.insert(*cond);
                }
                let mut a = set.clone();
                exposed(then, &mut a, out);
                let mut b = set.clone();
                exposed(els, &mut b, out);
                set.extend(a.intersection(&b).copied().collect::<Vec<_>>());
            }
            Stmt::Loop {
                body,
                continuing,
                break_if,
            } => {
                let mut a = set.clone();
                exposed(body, &mut a, out);
                exposed(continuing, &mut a, out);
                if let Some(c) = break_if
                    && !a.contains(c)
                {
                    out.insert(*c);
                }
            }
            Stmt::Block { id, body } => {
                let mut a = set.clone();
                exposed(body, &mut a, out);
                if !leaves(body, *id) {
                    *set = a;
                }
            }
            Stmt::Break | Stmt::Continue | Stmt::Leave(_) | Stmt::Return | Stmt::Barrier { .. } => {
            }
        }
    }
}

/// Whether `stmts` hold a `leave` of block `id`.
fn leaves(stmts: &[Stmt], id: u32) -> bool {
    any_stmt(stmts, &|s| *s == Stmt::Leave(id))
}

/// Where each register of `p` lives (see the module's doc).
pub(super) fn homes(p: &Program) -> Vec<Home> {
    /// The phases, and the registers the workgroup's statements read or
    /// write.
    #[derive(Default)]
    struct Walk<'a> {
        phases: Vec<&'a [Stmt]>,
        outside: Vec<Reg>,
    }
    fn visit<'a>(stmts: &'a [Stmt], w: &mut Walk<'a>) {
        for piece in pieces(stmts) {
            match piece {
                Piece::Run(run) => w.phases.push(run),
                Piece::Sync(Stmt::If { cond, then, els }) => {
                    w.outside.push(*cond);
                    visit(then, w);
                    visit(els, w);
                }
                Piece::Sync(Stmt::Loop {
                    body,
                    continuing,
                    break_if,
                }) => {
                    visit(body, w);
                    visit(continuing, w);
                    w.outside.extend(*break_if);
                }
                Piece::Sync(Stmt::Block { body, .. }) => visit(body, w),
                Piece::Sync(Stmt::Inst(inst)) => {
                    w.outside.extend(inst.reads());
                    w.outside.extend(inst.dst());
                }
                Piece::Sync(_) => {}
            }
        }
    }
    let mut w = Walk::default();
    visit(&p.body, &mut w);
    // A value that a phase may read before it writes it comes from
    // another phase, or from the same phase's run in an earlier turn of a
    // loop.
    let mut carried = HashSet::new();
    for run in &w.phases {
        exposed(run, &mut HashSet::new(), &mut carried);
    }
    let uniform = uniforms(p);
    (0..p.regs.len())
        .map(|i| {
            let r = Reg(i as u32);
            if uniform[i] {
                Home::Uniform
            } else if carried.contains(&r) || w.outside.contains(&r) {
                Home::Lane
            } else {
                Home::Local
            }
        })
        .collect()
}

/// The printing state of a workgroup function in phases.
pub(super) struct Phased {
    homes: Vec<Home>,
    /// The states of the loops that hold a sync point around the
    /// statement being printed, innermost last: (broken out of,
    /// continued).
    loops: Vec<(u32, u32)>,
    /// The blocks that hold a sync point around it: (id, left).
    blocks: Vec<(u32, u32)>,
    /// The last state given out.
    codes: u32,
}

impl Phased {
    fn code(&mut self) -> u32 {
        self.codes += 1;
        self.codes
    }
}

impl Emitter<'_> {
    /// Prints the program in phases: its static, launch function and
    /// workgroup function.
    pub(super) fn phased(&mut self) -> Result<String, RustError> {
        let homes = homes(self.p);
        let lanes: Vec<usize> = (0..homes.len())
            .filter(|&i| homes[i] == Home::Lane)
            .collect();
        // The body: the uniform values, then the phases and what holds
        // the sync points.
        let before = std::mem::take(&mut self.out);
        self.depth = 1;
        let mut set = Vec::new();
        crate::ir::walk(&self.p.body, &mut |inst| {
            if inst
                .dst()
                .is_some_and(|d| homes.get(d.index()) == Some(&Home::Uniform))
            {
                set.push(inst);
            }
        });
        for inst in set {
            let text = self.inst(inst)?;
            self.line(format_args!("let {text}"));
        }
        self.phased = Some(Phased {
            homes,
            loops: Vec::new(),
            blocks: Vec::new(),
            codes: 0,
        });
        self.next_loop = 0;
        self.ops = 0;
        self.wstmts(&self.p.body)?;
        let body = std::mem::replace(&mut self.out, before);
        self.params.sort_unstable();
        self.params.dedup();
        self.kernel_items(None);
        let group = format!("{}_group", self.p.name);
        let _ = std::fmt::Write::write_fmt(
            &mut self.out,
            format_args!(
                "{}\nfn {group}(cx: &keel_wgsl::native::Ctx<'_>, wg: &mut keel_wgsl::native::Group) -> Result<(), keel_wgsl::native::Fault> {{\n",
                super::ALLOW
            ),
        );
        self.bindings(&[], true);
        self.depth = 1;
        let invocations = self.p.invocations() as usize;
        let on_heap = (lanes.len() + 1) * invocations * 8 > STACK_BYTES;
        let array = |value: &str| {
            if on_heap {
                format!("vec![{value}; {invocations}]")
            } else {
                format!("[{value}; {invocations}]")
            }
        };
        self.line(format_args!("let mut st = {};", array("0u32")));
        for i in lanes {
            let ty = self.p.regs[i];
            self.line(format_args!("let mut l{i} = {};", array(zero(ty))));
        }
        self.out.push_str(&body);
        self.line("Ok(())");
        self.depth = 0;
        self.line("}");
        Ok(std::mem::take(&mut self.out))
    }

    fn state(&mut self) -> &mut Phased {
        self.phased
            .as_mut()
            .expect("only a program printed in phases has phases")
    }

    fn home(&self, r: Reg) -> Home {
        self.phased
            .as_ref()
            .and_then(|s| s.homes.get(r.index()).copied())
            .unwrap_or(Home::Local)
    }

    /// Whether the instruction is left out of the phases: its register is
    /// set before them.
    pub(super) fn set_before(&self, inst: &Inst) -> bool {
        self.phased.is_some() && inst.dst().is_some_and(|d| self.home(d) == Home::Uniform)
    }

    /// `cond`'s value for invocation `li`, outside the phases.
    fn tested(&self, cond: Reg) -> Result<String, RustError> {
        self.want(cond, Ty::Bool)?;
        Ok(self.value(cond))
    }

    /// `r`'s value for invocation `li`, outside the phases.
    fn value(&self, r: Reg) -> String {
        match self.home(r) {
            Home::Uniform => r.to_string(),
            _ => format!("l{}[li]", r.0),
        }
    }

    /// A subgroup operation, outside the phases: the operands' words of
    /// every invocation, `rt::subgroup` over the running ones, and the
    /// results back into `dst`'s lanes.
    fn subgroup(
        &mut self,
        op: SubgroupOp,
        dst: Reg,
        a: Reg,
        b: Option<Reg>,
    ) -> Result<(), RustError> {
        let ty = self.ty(a)?;
        let Some((_, want)) = crate::host::compile::SubgroupKernel::of(op, ty) else {
            return Err(self.err(format_args!("subgroup {op:?} on {ty:?}")));
        };
        self.want(dst, want)?;
        if self.home(dst) != Home::Lane {
            return Err(self.err(format_args!(
                "subgroup result {dst} is not kept per invocation (a translator bug)"
            )));
        }
        let n = self.p.invocations();
        let op_text = match op {
            SubgroupOp::Reduce(r) => format!("SubgroupOp::Reduce(rt::Reduce::{r:?})"),
            SubgroupOp::InclusiveScan(r) => format!("SubgroupOp::InclusiveScan(rt::Reduce::{r:?})"),
            SubgroupOp::ExclusiveScan(r) => format!("SubgroupOp::ExclusiveScan(rt::Reduce::{r:?})"),
            other => format!("SubgroupOp::{other:?}"),
        };
        self.line("{");
        self.depth += 1;
        let word = |e: &Self, r: Reg| -> Result<String, RustError> {
            let v = e.value(r);
            Ok(match e.ty(r)? {
                Ty::U32 => v,
                Ty::I32 => format!("{v} as u32"),
                Ty::F32 => format!("{v}.to_bits()"),
                Ty::F16 => format!("u32::from({v}.to_bits())"),
                Ty::Bool => format!("u32::from({v})"),
                Ty::U64 => return Err(e.err(format_args!("subgroup {op:?} on U64"))),
            })
        };
        let wa = word(self, a)?;
        self.line(format_args!("let mut a = [0u32; {n}];"));
        self.line(format_args!("for li in 0..{n} {{ a[li] = {wa}; }}"));
        let lanes = match b {
            Some(b) => {
                self.want(b, Ty::U32)?;
                let wb = word(self, b)?;
                self.line(format_args!("let mut b = [0u32; {n}];"));
                self.line(format_args!("for li in 0..{n} {{ b[li] = {wb}; }}"));
                "Some(&b[..])"
            }
            None => "None",
        };
        let wd = word(self, dst)?;
        self.line(format_args!("let mut d = [0u32; {n}];"));
        self.line(format_args!("for li in 0..{n} {{ d[li] = {wd}; }}"));
        self.line(format_args!(
            "rt::subgroup(rt::{op_text}, rt::Ty::{ty:?}, &st[..], &a, {lanes}, &mut d)?;"
        ));
        let back = match want {
            Ty::U32 => "d[li]".to_string(),
            Ty::I32 => "d[li] as i32".to_string(),
            Ty::F32 => "f32::from_bits(d[li])".to_string(),
            Ty::F16 => "rt::f16::from_bits(d[li] as u16)".to_string(),
            Ty::Bool => "d[li] != 0".to_string(),
            Ty::U64 => return Err(self.err(format_args!("subgroup {op:?} on U64"))),
        };
        self.line(format_args!(
            "for li in 0..{n} {{ l{}[li] = {back}; }}",
            dst.0
        ));
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Where a `break`, `continue` or `leave` inside a phase goes to a
    /// statement that holds a sync point: the state that takes the
    /// invocation there, set as it leaves the phase.
    pub(super) fn leave_phase(&mut self, code: u32) {
        self.line(format_args!("st[li] = {code};"));
        self.line("break 'inv;");
    }

    /// For a `break` (`continue: false`) or `continue` with no loop
    /// around it in its phase: the state for the innermost loop that
    /// holds a sync point.
    pub(super) fn loop_exit(&self, continuing: bool) -> Option<u32> {
        let (brk, cont) = *self.phased.as_ref()?.loops.last()?;
        Some(if continuing { cont } else { brk })
    }

    /// For a `leave` of a block outside its phase: the block's state.
    pub(super) fn block_exit(&self, id: u32) -> Option<u32> {
        let s = self.phased.as_ref()?;
        s.blocks.iter().find(|b| b.0 == id).map(|b| b.1)
    }

    /// The end of an invocation inside a phase.
    pub(super) fn phase_return(&mut self) {
        self.line(format_args!("st[li] = {RETURNED};"));
        self.line("break 'inv;");
    }

    /// Resets the invocations in state `code` to running.
    fn resume(&mut self, code: u32) {
        self.line(format_args!("rt::resume(&mut st, {code});"));
    }

    /// Statements outside any phase: phases and what holds a sync point.
    fn wstmts(&mut self, stmts: &[Stmt]) -> Result<(), RustError> {
        for piece in pieces(stmts) {
            match piece {
                Piece::Run(run) => self.phase(run)?,
                Piece::Sync(Stmt::Barrier { .. }) => {
                    self.line("// A barrier: every invocation has run the phase above.");
                }
                Piece::Sync(Stmt::If { cond, then, els }) => {
                    let c = self.tested(*cond)?;
                    let (skip_then, skip_else) = (self.state().code(), self.state().code());
                    self.line(format_args!(
                        "for li in 0..st.len() {{ if st[li] == 0 && !{c} {{ st[li] = {skip_then}; }} }}"
                    ));
                    self.wstmts(then)?;
                    self.line(format_args!(
                        "for li in 0..st.len() {{ if st[li] == {skip_then} {{ st[li] = 0; }} else if st[li] == 0 {{ st[li] = {skip_else}; }} }}"
                    ));
                    self.wstmts(els)?;
                    self.resume(skip_else);
                }
                Piece::Sync(Stmt::Loop {
                    body,
                    continuing,
                    break_if,
                }) => {
                    let (brk, cont) = (self.state().code(), self.state().code());
                    self.line("loop {");
                    self.depth += 1;
                    self.state().loops.push((brk, cont));
                    self.wstmts(body)?;
                    self.resume(cont);
                    self.wstmts(continuing)?;
                    self.state().loops.pop();
                    if let Some(c) = break_if {
                        let c = self.tested(*c)?;
                        self.line(format_args!(
                            "for li in 0..st.len() {{ if st[li] == 0 && {c} {{ st[li] = {brk}; }} }}"
                        ));
                    }
                    self.line("if !st.contains(&0) {");
                    self.line("    break;");
                    self.line("}");
                    self.depth -= 1;
                    self.line("}");
                    self.resume(brk);
                }
                Piece::Sync(Stmt::Block { id, body }) => {
                    let code = self.state().code();
                    self.state().blocks.push((*id, code));
                    self.wstmts(body)?;
                    self.state().blocks.pop();
                    self.resume(code);
                }
                Piece::Sync(Stmt::Inst(Inst::Subgroup { op, dst, a, b })) => {
                    self.ops += 1;
                    self.subgroup(*op, *dst, *a, *b)?;
                }
                Piece::Sync(other) => {
                    return Err(self.err(format_args!("{other:?} is cut as a sync point")));
                }
            }
        }
        Ok(())
    }

    /// One phase: a loop over the running invocations, each running
    /// `run` with its carried values copied in and back.
    fn phase(&mut self, run: &[Stmt]) -> Result<(), RustError> {
        let mut used = BTreeSet::new();
        let mut written = BTreeSet::new();
        walk_regs(run, &mut |r, write| {
            used.insert(r);
            if write {
                written.insert(r);
            }
        });
        let [sx, sy, sz] = self.p.workgroup_size;
        self.line(format_args!("for lz in 0..{sz}u32 {{"));
        self.line(format_args!("for ly in 0..{sy}u32 {{"));
        self.line(format_args!("for lx in 0..{sx}u32 {{"));
        self.depth += 1;
        self.line(format_args!(
            "let li = ((lz * {sy} + ly) * {sx} + lx) as usize;"
        ));
        self.line("if st[li] != 0 {");
        self.line("    continue;");
        self.line("}");
        if self.p.private_bytes > 0 {
            self.line("let pv = &mut pvs[li];");
        }
        for &r in &used {
            let ty = self.ty(r)?;
            match self.home(r) {
                Home::Lane => self.line(format_args!("let mut {r} = l{}[li];", r.0)),
                Home::Local => {
                    self.line(format_args!("let mut {r}: {} = {};", rust_ty(ty), zero(ty)))
                }
                Home::Uniform => {}
            }
        }
        self.line("'inv: {");
        self.loops.clear();
        self.blocks.clear();
        self.block(run)?;
        self.line("}");
        for &r in &written {
            if self.home(r) == Home::Lane {
                self.line(format_args!("l{}[li] = {r};", r.0));
            }
        }
        self.depth -= 1;
        self.line("}");
        self.line("}");
        self.line("}");
        Ok(())
    }
}
