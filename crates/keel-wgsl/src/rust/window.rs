//! The windowed path of a translated workgroup.
//!
//! A storage access whose byte offset moves by a fixed step per
//! invocation (`out[gid.x]`: four bytes per `local_invocation_id.x`) touches,
//! across one workgroup, a range that is known before its invocations run:
//! the offset at invocation (0, 0, 0) plus the steps times the workgroup's
//! extent. Where that range lies inside the buffer, every invocation's
//! bounds guard holds and its word is found by indexing a fixed-size array
//! with the invocation's local id, which the compiler checks once for the
//! whole loop instead of once per access. Checked accesses are what kept
//! translated elementwise kernels at 2-3x a Rust loop.
//!
//! [`plan`] finds such accesses in a [`Program`]. The translation then
//! prints the workgroup twice: a prologue evaluates the offsets at
//! invocation (0, 0, 0) and takes each buffer's window; where every window
//! and check holds the invocations run with window accesses, otherwise
//! (a workgroup at a buffer's end, an offset that would wrap) they run as
//! before. Only registers written once, by instructions without side
//! effects, take part, so evaluating them ahead of the invocations gives
//! what each invocation would compute.
//!
//! The same forms let the prologue settle an `if` for the whole
//! workgroup where its condition compares a stepping value with a
//! uniform one (`if i < n`, `if t >= n { return; }`): the workgroups
//! inside the data then run their invocations without the test or the
//! branch, a loop the compiler unrolls ([`Hoisted`]).
//!
//! A writable buffer that the program reaches only through windows as
//! wide as the workgroup (`out[gid.x]` in workgroups of 256: 256 words),
//! never atomically, is [`Plan::parted`]: in a launch where workgroup `g`'s
//! windows are words `g * 256 ..`, each workgroup owns those words, and
//! the translation prints the windowed path once more over plain words
//! ([`crate::native::Parted`]), which the compiler vectorises.
//!
//! An offset is affine in the local ids modulo its width: adds, subtracts,
//! multiplies and shifts by constants keep the form exactly in modular
//! arithmetic. Where a 32-bit index widens to a 64-bit offset the form
//! holds as integers only if no invocation wraps; the prologue checks
//! that at run time ([`Check::Fits`]), as it checks each window against
//! the buffer.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use crate::ir::{BinOp, Builtin, Inst, Program, Reg, Space, Stmt, Ty, walk};

/// Programs longer than this are translated without a windowed path: each
/// workgroup would be printed twice, and a kernel this long spends its
/// time computing, not reaching memory.
const MAX_OPS: usize = 1000;

/// The largest step per invocation the plan follows, in bytes: beyond it a
/// window would span more than any buffer holds.
const MAX_STEP: i128 = 1 << 32;

/// The most words a window spans: its array type must stay a size the
/// compiler accepts, and a workgroup reaching further than this touches
/// memory too sparsely to gain from a window.
const MAX_WINDOW_WORDS: i128 = 1 << 20;

/// Steps of a value per local id: `value(l) = value(0) + Σ c[j] * l[j]`,
/// modulo the width of its type.
type Steps = [i128; 3];

const UNIFORM: Steps = [0; 3];

/// What the windowed path of a program needs.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Per load or store, by its place in the program (pre-order, every
    /// space counted), how its windowed form reads.
    pub accesses: HashMap<usize, Access>,
    /// The instructions the prologue runs at invocation (0, 0, 0), in
    /// program order.
    pub prologue: Vec<Inst>,
    pub windows: Vec<Window>,
    pub checks: Vec<Check>,
    /// Conditions of `if`s that hold in every invocation of a workgroup
    /// where [`Hoisted::test`] holds at invocation (0, 0, 0).
    pub hoisted: Vec<Hoisted>,
    /// Writable buffers, ascending, that the program reaches only through
    /// windows as wide as the workgroup and never atomically: each
    /// workgroup can own its window of them ([`crate::native::Parted`]).
    pub parted: Vec<u32>,
}

/// The condition of an `if` comparing a value that steps per invocation
/// with one that does not (`gid.x < n`): in a workgroup where the
/// comparison holds at the value's lowest or highest step, and no
/// invocation's value wraps, it holds in all of them, and the windowed
/// path runs the `if`'s body without testing it. An `if` whose body only
/// returns (`if t >= n { return; }`) is hoisted the other way: where the
/// comparison fails in every invocation, nothing returns. Where some
/// invocations differ (a workgroup over the end of the data) the
/// windowed path tests it as before.
#[derive(Debug)]
pub(crate) struct Hoisted {
    /// The `if`'s condition.
    pub cond: Reg,
    /// The stepping side, evaluated at invocation (0, 0, 0).
    pub value: Reg,
    /// `U32` or `I32`.
    pub ty: Ty,
    /// `Lt`, `Le`, `Gt` or `Ge`: `value op bound`.
    pub op: BinOp,
    /// The side that is the same in every invocation.
    pub bound: Reg,
    /// The value's lowest and highest step across the workgroup.
    pub min: i64,
    pub max: i64,
    /// The condition's value in every invocation where the test holds:
    /// the branch the windowed path takes.
    pub taken: bool,
}

impl Hoisted {
    /// A Rust expression true where the condition holds in every
    /// invocation, over the prologue's registers.
    pub fn test(&self) -> String {
        let Hoisted {
            value,
            ty,
            op,
            bound,
            min,
            max,
            taken,
            ..
        } = *self;
        let fits = if ty == Ty::I32 {
            "fits_i32"
        } else {
            "fits_u32"
        };
        // Failing everywhere is the opposite comparison holding everywhere.
        let op = match (taken, op) {
            (true, op) => op,
            (false, BinOp::Lt) => BinOp::Ge,
            (false, BinOp::Le) => BinOp::Gt,
            (false, BinOp::Gt) => BinOp::Le,
            (false, _) => BinOp::Lt,
        };
        let (step, cmp) = match op {
            BinOp::Lt => (max, "<"),
            BinOp::Le => (max, "<="),
            BinOp::Gt => (min, ">"),
            _ => (min, ">="),
        };
        format!(
            "(rt::{fits}({value}, {min}, {max}) && i128::from({value}) + {step} {cmp} i128::from({bound}))"
        )
    }
}

impl Plan {
    /// The registers the prologue writes, ascending: those it declares.
    pub fn prologue_regs(&self) -> Vec<Reg> {
        let mut regs: Vec<Reg> = self.prologue.iter().filter_map(Inst::dst).collect();
        regs.sort_unstable();
        regs
    }

    /// The windows' names as the generated code binds them: `w0, w1, ..`.
    pub fn window_names(&self) -> String {
        let names: Vec<String> = (0..self.windows.len()).map(|k| format!("w{k}")).collect();
        names.join(", ")
    }
}

/// A load or store through a window.
#[derive(Debug)]
pub(crate) struct Access {
    /// Index into [`Plan::windows`].
    pub window: usize,
    /// The word index into the window, a Rust expression of `lx`, `ly`,
    /// `lz`.
    pub index: String,
    /// The guard the windowed access tests.
    pub guard: Guarded,
}

/// The guard of a windowed access.
#[derive(Debug)]
pub(crate) enum Guarded {
    /// No guard.
    None,
    /// The access's own guard, which is not (only) a bounds check.
    Keep(Reg),
    /// A bounds check that holds for the whole workgroup (register `ok`,
    /// asserted in debug builds), and-ed with `outer` where there is one.
    Bounds { ok: Reg, outer: Option<Reg> },
}

/// The words of one buffer that one access reaches across a workgroup.
#[derive(Debug)]
pub(crate) struct Window {
    pub buffer: u32,
    /// The offset register, evaluated at invocation (0, 0, 0).
    pub addr: Reg,
    /// The lowest step of any invocation, in bytes (zero or negative).
    pub min: i64,
    /// Words in the window.
    pub words: u64,
}

/// A condition the prologue checks before taking the windowed path.
#[derive(Debug, PartialEq)]
pub(crate) enum Check {
    /// The 32-bit register's value at invocation (0, 0, 0) plus any step
    /// in `min..=max` stays inside its type (`U32` or `I32`): widening it
    /// to 64 bits then keeps the steps.
    Fits {
        reg: Reg,
        ty: Ty,
        min: i64,
        max: i64,
    },
    /// `base + min ..= base + end` lies inside buffer `buffer`'s bytes: a
    /// bounds guard of `size` bytes at `base` holds in every invocation.
    Covers {
        buffer: u32,
        base: Reg,
        min: i64,
        end: i64,
    },
}

/// The windowed path of `program`, where it has one: at least one load or
/// store whose offset steps by a constant per invocation, and few enough
/// instructions to print twice.
pub(crate) fn plan(program: &Program) -> Option<Plan> {
    let mut a = Analysis::new(program);
    if a.ops > MAX_OPS {
        return None;
    }
    let mut accesses = HashMap::new();
    let mut windows: Vec<Window> = Vec::new();
    let mut covers: Vec<(u32, Reg, u64)> = Vec::new();
    let mut ordinal = 0usize;
    let mut found = Vec::new();
    let mut atomic = HashSet::new();
    walk(&program.body, &mut |inst| match inst {
        Inst::Load { .. } | Inst::Store { .. } => {
            found.push((ordinal, inst));
            ordinal += 1;
        }
        Inst::Atomic {
            space: Space::Buffer(b),
            ..
        } => {
            atomic.insert(*b);
        }
        _ => {}
    });
    let mut reached: Vec<(usize, u32)> = Vec::new();
    for (ordinal, inst) in found {
        let (space, addr, guard, ty) = match *inst {
            Inst::Load {
                dst,
                space,
                addr,
                guard,
                ..
            } => (space, addr, guard, program.ty(dst)),
            Inst::Store {
                space,
                addr,
                value,
                guard,
                ..
            } => (space, addr, guard, program.ty(value)),
            _ => continue,
        };
        let Space::Buffer(buffer) = space else {
            continue;
        };
        reached.push((ordinal, buffer));
        // Whole words only: a half or a pair of words keeps its checked
        // accessor.
        if !matches!(ty, Ty::U32 | Ty::I32 | Ty::F32) || program.ty(addr) != Ty::U64 {
            continue;
        }
        let Some(steps) = a.form(addr, 0) else {
            continue;
        };
        if steps.iter().any(|c| c % 4 != 0) {
            continue;
        }
        let (min, max) = a.span(steps);
        if (max - min) / 4 >= MAX_WINDOW_WORDS {
            continue;
        }
        let guard = match guard {
            None => Guarded::None,
            Some(g) => match a.bounds_guard(g, buffer) {
                Some((ok, outer, base, size)) => {
                    covers.push((buffer, base, size));
                    Guarded::Bounds { ok, outer }
                }
                None => Guarded::Keep(g),
            },
        };
        let window = match windows
            .iter()
            .position(|w| w.buffer == buffer && w.addr == addr)
        {
            Some(w) => w,
            None => {
                windows.push(Window {
                    buffer,
                    addr,
                    min: min as i64,
                    words: ((max - min) / 4 + 1) as u64,
                });
                windows.len() - 1
            }
        };
        accesses.insert(
            ordinal,
            Access {
                window,
                index: index(steps, min),
                guard,
            },
        );
    }
    if accesses.is_empty() {
        return None;
    }
    let invocations: u64 = program
        .workgroup_size
        .iter()
        .map(|&s| u64::from(s))
        .product();
    let parted = (0u32..)
        .zip(&program.buffers)
        .filter(|&(b, binding)| {
            let mut own = windows.iter().filter(|w| w.buffer == b).peekable();
            !binding.read_only
                && !atomic.contains(&b)
                && own.peek().is_some()
                && own.all(|w| w.words == invocations)
                && reached
                    .iter()
                    .all(|&(o, buffer)| buffer != b || accesses.contains_key(&o))
        })
        .map(|(b, _)| b)
        .collect();
    let mut checks = Vec::new();
    let mut roots: Vec<Reg> = windows.iter().map(|w| w.addr).collect();
    covers.sort_unstable();
    covers.dedup();
    // A word-sized guard at a window's own offset holds wherever the
    // window lies inside the buffer.
    covers.retain(|&(buffer, base, size)| {
        size != 4 || !windows.iter().any(|w| w.buffer == buffer && w.addr == base)
    });
    for (buffer, base, size) in covers {
        let steps = a.form(base, 0)?;
        let (min, max) = a.span(steps);
        checks.push(Check::Covers {
            buffer,
            base,
            min: min as i64,
            end: (max + i128::from(size)) as i64,
        });
        roots.push(base);
    }
    let mut needed = a.slice(&roots, &mut checks);
    let mut hoisted = Vec::new();
    let mut conds = Vec::new();
    if_conditions(&program.body, &mut conds);
    for (cond, taken) in conds {
        let Some(h) = a.hoistable(cond, taken) else {
            continue;
        };
        // Its registers must not add a check of their own: a workgroup
        // where it fails would lose the windows, not only the hoisting.
        let mut more = Vec::new();
        let regs = a.slice(&[h.value, h.bound], &mut more);
        if more.iter().all(|c| checks.contains(c))
            && !hoisted.iter().any(|x: &Hoisted| x.cond == cond)
        {
            needed.extend(regs);
            hoisted.push(h);
        }
    }
    let mut prologue = Vec::new();
    walk(&program.body, &mut |inst| {
        if inst.dst().is_some_and(|d| needed.contains(&d)) {
            prologue.push(inst.clone());
        }
    });
    Some(Plan {
        accesses,
        prologue,
        windows,
        checks,
        hoisted,
        parted,
    })
}

/// The condition register of every `if` in `stmts`, in program order,
/// with the branch worth running without a test: the `else` where the
/// body only returns, otherwise the body.
fn if_conditions(stmts: &[Stmt], out: &mut Vec<(Reg, bool)>) {
    for s in stmts {
        match s {
            Stmt::If { cond, then, els } => {
                out.push((*cond, !matches!(then.as_slice(), [Stmt::Return])));
                if_conditions(then, out);
                if_conditions(els, out);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                if_conditions(body, out);
                if_conditions(continuing, out);
            }
            Stmt::Block { body, .. } => if_conditions(body, out),
            Stmt::Inst(_)
            | Stmt::Break
            | Stmt::Continue
            | Stmt::Leave(_)
            | Stmt::Return
            | Stmt::Barrier { .. } => {}
        }
    }
}

/// The word index of an access with `steps` in a window starting at step
/// `min`: `(Σ steps[j] * l[j] - min) / 4`, written so that it never goes
/// below zero on the way.
fn index(steps: Steps, min: i128) -> String {
    let mut text = String::new();
    let offset = -min / 4;
    if offset != 0 {
        let _ = write!(text, "{offset}");
    }
    let lanes = ["lx", "ly", "lz"];
    for sign in [1, -1] {
        for (c, lane) in steps.iter().zip(lanes) {
            let words = c / 4 * sign;
            if words <= 0 {
                continue;
            }
            let op = match (text.is_empty(), sign) {
                (true, _) => "",
                (false, 1) => " + ",
                (false, _) => " - ",
            };
            if words == 1 {
                let _ = write!(text, "{op}{lane} as usize");
            } else {
                let _ = write!(text, "{op}{lane} as usize * {words}");
            }
        }
    }
    if text.is_empty() {
        text.push('0');
    }
    text
}

/// The registers a pure instruction reads.
fn operands(inst: &Inst) -> Vec<Reg> {
    if inst.is_pure() {
        inst.reads()
    } else {
        Vec::new()
    }
}

fn is_int(ty: Ty) -> bool {
    matches!(ty, Ty::U32 | Ty::I32 | Ty::U64)
}

struct Analysis<'a> {
    p: &'a Program,
    /// Per register, its only writer; `None` where it has none or several.
    defs: Vec<Option<&'a Inst>>,
    forms: HashMap<Reg, Option<Steps>>,
    /// Widenings whose steps hold only if the 32-bit value does not wrap.
    fits: HashMap<Reg, Check>,
    ops: usize,
}

impl<'a> Analysis<'a> {
    fn new(p: &'a Program) -> Self {
        let defs = p.single_writers();
        let mut ops = 0;
        walk(&p.body, &mut |_| ops += 1);
        Analysis {
            p,
            defs,
            forms: HashMap::new(),
            fits: HashMap::new(),
            ops,
        }
    }

    fn def(&self, r: Reg) -> Option<&'a Inst> {
        self.defs.get(r.index()).copied().flatten()
    }

    fn ty(&self, r: Reg) -> Option<Ty> {
        self.p.regs.get(r.index()).copied()
    }

    /// The value of a constant integer register, as its type reads it.
    fn konst(&self, r: Reg) -> Option<i128> {
        let Some(Inst::Const { bits, .. }) = self.def(r) else {
            return None;
        };
        Some(match self.ty(r)? {
            Ty::U32 => i128::from(*bits as u32 as i32),
            Ty::I32 => i128::from(*bits as u32 as i32),
            Ty::U64 => i128::from(*bits as i64),
            _ => return None,
        })
    }

    /// The lowest and highest step across the workgroup.
    fn span(&self, steps: Steps) -> (i128, i128) {
        let mut min = 0;
        let mut max = 0;
        for (c, &size) in steps.iter().zip(&self.p.workgroup_size) {
            let reach = c * i128::from(size.saturating_sub(1));
            min += reach.min(0);
            max += reach.max(0);
        }
        (min, max)
    }

    /// How `r` steps per invocation, where it is affine in the local ids
    /// and computed without side effects from registers written once.
    fn form(&mut self, r: Reg, depth: u32) -> Option<Steps> {
        if let Some(f) = self.forms.get(&r) {
            return *f;
        }
        let f = self.compute(r, depth);
        self.forms.insert(r, f);
        f
    }

    fn compute(&mut self, r: Reg, depth: u32) -> Option<Steps> {
        if depth > 256 {
            return None;
        }
        let d = depth + 1;
        let inst = self.def(r)?;
        let ty = self.ty(r)?;
        let steps = match *inst {
            Inst::Const { .. } | Inst::Param { .. } => UNIFORM,
            Inst::Read { what, .. } => match what {
                Builtin::LocalId(axis) => {
                    let mut s = UNIFORM;
                    if self.p.workgroup_size[axis.index()] > 1 {
                        s[axis.index()] = 1;
                    }
                    s
                }
                Builtin::GroupId(_) | Builtin::NumGroups(_) | Builtin::BufferLen(_) => UNIFORM,
                Builtin::SubgroupSize | Builtin::SubgroupInvocationId => return None,
            },
            Inst::Mov { src, .. } => self.form(src, d)?,
            Inst::Bitcast { a, .. } => {
                let f = self.form(a, d)?;
                if f != UNIFORM && !(is_int(ty) && is_int(self.ty(a)?)) {
                    return None;
                }
                f
            }
            Inst::Convert { a, .. } => {
                let f = self.form(a, d)?;
                if f == UNIFORM {
                    return Some(UNIFORM);
                }
                match (self.ty(a)?, ty) {
                    // The same bits, modulo 2^32.
                    (Ty::U32, Ty::I32) | (Ty::I32, Ty::U32) | (Ty::U64, Ty::U32 | Ty::I32) => f,
                    // Widening keeps the steps where no invocation wraps.
                    (from @ (Ty::U32 | Ty::I32), Ty::U64) => {
                        let (min, max) = self.span(f);
                        self.fits.insert(
                            a,
                            Check::Fits {
                                reg: a,
                                ty: from,
                                min: i64::try_from(min).ok()?,
                                max: i64::try_from(max).ok()?,
                            },
                        );
                        f
                    }
                    _ => return None,
                }
            }
            Inst::Bin { op, a, b, .. } => {
                let fa = self.form(a, d)?;
                let fb = self.form(b, d)?;
                if fa == UNIFORM && fb == UNIFORM {
                    UNIFORM
                } else if !is_int(ty) {
                    return None;
                } else {
                    match op {
                        BinOp::Add => [fa[0] + fb[0], fa[1] + fb[1], fa[2] + fb[2]],
                        BinOp::Sub => [fa[0] - fb[0], fa[1] - fb[1], fa[2] - fb[2]],
                        BinOp::Mul if fa == UNIFORM => scale(fb, self.konst(a)?),
                        BinOp::Mul if fb == UNIFORM => scale(fa, self.konst(b)?),
                        BinOp::Shl if fb == UNIFORM => {
                            let k = self.konst(b)?;
                            if !(0..31).contains(&k) {
                                return None;
                            }
                            scale(fa, 1 << k)
                        }
                        _ => return None,
                    }
                }
            }
            Inst::Un { a, .. } => {
                if self.form(a, d)? != UNIFORM {
                    return None;
                }
                UNIFORM
            }
            Inst::Fma { a, b, c, .. }
            | Inst::Select {
                cond: a,
                a: b,
                b: c,
                ..
            } => {
                for x in [a, b, c] {
                    if self.form(x, d)? != UNIFORM {
                        return None;
                    }
                }
                UNIFORM
            }
            Inst::Load { .. }
            | Inst::Store { .. }
            | Inst::Atomic { .. }
            | Inst::Subgroup { .. } => {
                return None;
            }
        };
        let steps = steps.map(|c| wrap(c, ty));
        if steps.iter().any(|c| c.abs() > MAX_STEP) {
            return None;
        }
        Some(steps)
    }

    /// `cond` as a [`Hoisted`] condition: written once, by an ordering
    /// comparison of a 32-bit integer that steps per invocation with one
    /// that does not.
    fn hoistable(&mut self, cond: Reg, taken: bool) -> Option<Hoisted> {
        let Inst::Bin { op, a, b, .. } = *self.def(cond)? else {
            return None;
        };
        if !matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) {
            return None;
        }
        let ty = self.ty(a)?;
        if !matches!(ty, Ty::U32 | Ty::I32) {
            return None;
        }
        let (fa, fb) = (self.form(a, 0)?, self.form(b, 0)?);
        let (value, steps, bound, op) = match (fa == UNIFORM, fb == UNIFORM) {
            (false, true) => (a, fa, b, op),
            // `n > gid.x` is `gid.x < n`.
            (true, false) => {
                let flipped = match op {
                    BinOp::Lt => BinOp::Gt,
                    BinOp::Le => BinOp::Ge,
                    BinOp::Gt => BinOp::Lt,
                    _ => BinOp::Le,
                };
                (b, fb, a, flipped)
            }
            _ => return None,
        };
        // A constant bound (`lid.x < 16u`, `s > 10`) splits the same
        // invocations of every workgroup, or none: only a bound that moves
        // with the data (a parameter, a buffer's length) settles whole
        // workgroups, and one condition that never holds would keep the
        // others from being settled with it.
        if self.konst(bound).is_some() {
            return None;
        }
        let (min, max) = self.span(steps);
        Some(Hoisted {
            cond,
            value,
            ty,
            op,
            bound,
            min: i64::try_from(min).ok()?,
            max: i64::try_from(max).ok()?,
            taken,
        })
    }

    /// Matches the lowering's bounds guard of `size` bytes at `base` in
    /// buffer `buffer` (`base + size <= len && base + size >= base`, or
    /// the first test alone where the range pass proved the second),
    /// alone or and-ed with another guard: gives the bounds register, the
    /// other guard, `base` and `size`.
    fn bounds_guard(&self, g: Reg, buffer: u32) -> Option<(Reg, Option<Reg>, Reg, u64)> {
        if let Some((base, size)) = self.bounds(g, buffer) {
            return Some((g, None, base, size));
        }
        let Some(Inst::Bin {
            op: BinOp::And,
            a,
            b,
            ..
        }) = self.def(g)
        else {
            return None;
        };
        for (ok, outer) in [(*a, *b), (*b, *a)] {
            if let Some((base, size)) = self.bounds(ok, buffer) {
                return Some((ok, Some(outer), base, size));
            }
        }
        None
    }

    fn bounds(&self, ok: Reg, buffer: u32) -> Option<(Reg, u64)> {
        let bin = |r: Reg, want: BinOp| match self.def(r)? {
            Inst::Bin { op, a, b, .. } if *op == want => Some((*a, *b)),
            _ => None,
        };
        let (end, base, size) = match self.def(ok)? {
            Inst::Mov { src, .. } => {
                let (last, end) = bin(*src, BinOp::Le)?;
                let (base, size) = bin(last, BinOp::Add)?;
                (end, base, size)
            }
            _ => {
                let (inside, not_wrapped) = bin(ok, BinOp::And)?;
                let (last, end) = bin(inside, BinOp::Le)?;
                let (last2, base) = bin(not_wrapped, BinOp::Ge)?;
                let (base2, size) = bin(last, BinOp::Add)?;
                if last2 != last || base2 != base {
                    return None;
                }
                (end, base, size)
            }
        };
        if self.ty(base)? != Ty::U64 {
            return None;
        }
        let Some(Inst::Read {
            what: Builtin::BufferLen(n),
            ..
        }) = self.def(end)
        else {
            return None;
        };
        let size = u64::try_from(self.konst(size)?).ok()?;
        (*n == buffer).then_some((base, size))
    }

    /// Every register the prologue computes to evaluate `roots`, adding
    /// to `checks` the widenings on the way whose steps need one.
    fn slice(&self, roots: &[Reg], checks: &mut Vec<Check>) -> HashSet<Reg> {
        let mut seen = HashSet::new();
        let mut stack: Vec<Reg> = roots.to_vec();
        while let Some(r) = stack.pop() {
            if !seen.insert(r) {
                continue;
            }
            if let Some(Check::Fits { reg, ty, min, max }) = self.fits.get(&r) {
                checks.push(Check::Fits {
                    reg: *reg,
                    ty: *ty,
                    min: *min,
                    max: *max,
                });
            }
            if let Some(inst) = self.def(r) {
                stack.extend(operands(inst));
            }
        }
        seen
    }
}

fn scale(s: Steps, k: i128) -> Steps {
    s.map(|c| c * k)
}

/// `c` modulo the width of `ty`, as the representative nearest zero.
fn wrap(c: i128, ty: Ty) -> i128 {
    match ty {
        Ty::U32 | Ty::I32 => i128::from(c as u32 as i32),
        Ty::U64 => i128::from(c as u64 as i64),
        _ => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(src: &str, entry: &str) -> Option<Plan> {
        let program = crate::compile(src, entry).expect("the kernel compiles");
        plan(&program)
    }

    /// The windows' indices, in the order of the accesses.
    fn indices(plan: &Plan) -> Vec<String> {
        let mut ordinals: Vec<&usize> = plan.accesses.keys().collect();
        ordinals.sort();
        ordinals
            .into_iter()
            .map(|k| plan.accesses[k].index.clone())
            .collect()
    }

    /// `(op, taken, min, max)` of each hoisted condition.
    fn hoisted(plan: &Plan) -> Vec<(BinOp, bool, i64, i64)> {
        plan.hoisted
            .iter()
            .map(|h| (h.op, h.taken, h.min, h.max))
            .collect()
    }

    /// `i < n` around an elementwise body is taken without a test where
    /// the workgroup's last invocation passes it; `n > i` is the same
    /// test; an early return is hoisted the other way; a condition on the
    /// data, on two values that both step, or against a constant, is not
    /// hoisted.
    #[test]
    fn bounds_conditions_are_hoisted_out_of_the_invocations() {
        let add = include_str!("../../../../shaders/ops/add.wgsl");
        let plan = plan_of(add, "add_f32").expect("a windowed path");
        assert_eq!(hoisted(&plan), [(BinOp::Lt, true, 0, 255)]);
        assert_eq!(
            plan.hoisted[0].test(),
            format!(
                "(rt::fits_u32({v}, 0, 255) && i128::from({v}) + 255 < i128::from({b}))",
                v = plan.hoisted[0].value,
                b = plan.hoisted[0].bound
            )
        );
        let flipped = add.replace("if i < params.n {", "if params.n > i {");
        let plan = plan_of(&flipped, "add_f32").expect("a windowed path");
        assert_eq!(hoisted(&plan), [(BinOp::Lt, true, 0, 255)]);

        let early = "
            @group(0) @binding(0) var<storage, read_write> out: array<f32>;
            @group(0) @binding(1) var<uniform> n: u32;
            @compute @workgroup_size(64)
            fn k(@builtin(global_invocation_id) gid: vec3<u32>) {
                if gid.x >= n {
                    return;
                }
                out[gid.x] = 1.0;
            }";
        let plan = plan_of(early, "k").expect("a windowed path");
        assert_eq!(hoisted(&plan), [(BinOp::Ge, false, 0, 63)]);
        assert!(plan.hoisted[0].test().contains("+ 63 < i128::from("));

        let data = early.replace("if gid.x >= n {", "if out[gid.x] > 0.5 {");
        let plan = plan_of(&data, "k").expect("a windowed path");
        assert!(plan.hoisted.is_empty());
        let both = early.replace("if gid.x >= n {", "if gid.x >= 2u * gid.x {");
        let plan = plan_of(&both, "k").expect("a windowed path");
        assert!(plan.hoisted.is_empty());
        let constant = early.replace("if gid.x >= n {", "if gid.x >= 16u {");
        let plan = plan_of(&constant, "k").expect("a windowed path");
        assert!(plan.hoisted.is_empty());
    }

    /// A writable buffer is parted where every access of it goes through
    /// a window as wide as the workgroup: not where one access is a
    /// gather, a stride widens the window, or an atomic reaches it.
    #[test]
    fn buffers_reached_only_through_workgroup_wide_windows_are_parted() {
        let add = include_str!("../../../../shaders/ops/add.wgsl");
        let plan = plan_of(add, "add_f32").expect("a windowed path");
        assert_eq!(plan.parted, [2]);

        let k = |body: &str| {
            format!(
                "
            @group(0) @binding(0) var<storage, read> a: array<u32>;
            @group(0) @binding(1) var<storage, read_write> out: array<u32>;
            @group(0) @binding(2) var<storage, read_write> more: array<atomic<u32>>;
            @compute @workgroup_size(16, 4)
            fn k(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(local_invocation_index) l: u32,
                 @builtin(workgroup_id) w: vec3<u32>) {{
                let i = w.x * 64u + l;
                {body}
            }}"
            )
        };
        let parted = |body: &str| plan_of(&k(body), "k").expect("a windowed path").parted;
        // Read and written in place, over a two-dimensional workgroup.
        assert_eq!(parted("out[i] = out[i] + a[i];"), [1]);
        // The atomic buffer is never parted; `out` still is.
        assert_eq!(parted("out[i] = a[i]; atomicAdd(&more[0], 1u);"), [1]);
        assert!(parted("out[2u * i] = a[i];").is_empty());
        assert!(parted("out[i] = a[i]; out[a[i] % 64u] = 1u;").is_empty());
        assert!(parted("out[gid.x] = a[i];").is_empty());
    }

    #[test]
    fn an_elementwise_kernel_reads_and_writes_through_windows() {
        let src = include_str!("../../../../shaders/ops/add.wgsl");
        let plan = plan_of(src, "add_f32").expect("add_f32 has a windowed path");
        assert_eq!(indices(&plan), ["lx as usize"; 3]);
        assert_eq!(plan.windows.len(), 3);
        for w in &plan.windows {
            assert_eq!((w.min, w.words), (0, 256), "{w:?}");
        }
        // The index widens from u32: one check that no invocation wraps,
        // and no separate bounds check (the windows are the guards).
        assert!(
            matches!(
                plan.checks[..],
                [Check::Fits {
                    ty: Ty::U32,
                    min: 0,
                    max: 255,
                    ..
                }]
            ),
            "{:?}",
            plan.checks
        );
        for a in plan.accesses.values() {
            assert!(
                matches!(a.guard, Guarded::Bounds { outer: None, .. }),
                "{a:?}"
            );
        }
    }

    #[test]
    fn steps_follow_both_axes_backwards_and_strided() {
        let src = r"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> quads: array<vec4<f32>>;
@compute @workgroup_size(8, 4)
fn k(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let t = (w.x * 4u + l.y) * 8u + l.x;
    out[1000u - t] = a[2u * t + 1u];
    quads[t] = vec4<f32>(a[t]);
}";
        let plan = plan_of(src, "k").expect("a windowed path");
        let idx = indices(&plan);
        // a[2t + 1]: 2 words per x, 16 per y; out[1000 - t] backwards from
        // word 31 of its window; then the four words of quads[t] (16
        // bytes per x) and a[t].
        assert_eq!(idx[0], "lx as usize * 2 + ly as usize * 16");
        assert_eq!(idx[1], "31 - lx as usize - ly as usize * 8");
        assert_eq!(idx[2], "lx as usize + ly as usize * 8");
        assert_eq!(idx[3..], ["lx as usize * 4 + ly as usize * 32"; 4]);
        let words: Vec<(i64, u64)> = plan.windows.iter().map(|w| (w.min, w.words)).collect();
        assert_eq!(words[..3], [(0, 63), (-124, 32), (0, 32)]);
        // One bounds guard covers a vec4's 16 bytes: from the first
        // invocation's quad to the end of the last's (7 * 16 + 3 * 128 +
        // 16 bytes).
        assert!(
            plan.checks.iter().any(|c| matches!(
                c,
                Check::Covers {
                    min: 0,
                    end: 512,
                    ..
                }
            )),
            "{:?}",
            plan.checks
        );
    }

    #[test]
    fn gathers_and_loop_counters_keep_checked_accesses() {
        let gather = r"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn g(@builtin(global_invocation_id) gid: vec3<u32>) {
    out[gid.x] = a[idx[gid.x]];
}";
        let plan = plan_of(gather, "g").expect("the index read and the write are windowed");
        // idx[gid.x] and out[gid.x]; not a[idx[...]].
        assert_eq!(plan.accesses.len(), 2);
        assert!(!plan.accesses.contains_key(&1), "{:?}", plan.accesses);

        let strided_loop = r"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn s(@builtin(global_invocation_id) gid: vec3<u32>) {
    for (var i = gid.x; i < arrayLength(&out); i += 4096u) {
        out[i] = i;
    }
}";
        assert!(
            plan_of(strided_loop, "s").is_none(),
            "a loop counter is written more than once"
        );

        let sparse = r"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn w(@builtin(global_invocation_id) gid: vec3<u32>) {
    out[gid.x * 65536u] = 1u;
}";
        assert!(
            plan_of(sparse, "w").is_none(),
            "a window of 2^24 words is not taken"
        );

        let scaled = r"
struct P { stride: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64)
fn m(@builtin(global_invocation_id) gid: vec3<u32>) {
    out[gid.x * p.stride] = 1u;
}";
        assert!(
            plan_of(scaled, "m").is_none(),
            "a step set at run time is not a constant"
        );
    }

    #[test]
    fn a_signed_index_keeps_its_sign_guard_and_checks_its_range() {
        let src = r"
struct P { back: i32 }
@group(0) @binding(0) var<storage, read_write> out: array<i32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64)
fn n(@builtin(global_invocation_id) gid: vec3<u32>) {
    out[i32(gid.x) - p.back] = 7;
}";
        let plan = plan_of(src, "n").expect("a windowed path");
        assert_eq!(plan.accesses.len(), 1);
        let a = plan.accesses.values().next().expect("one access");
        assert!(
            matches!(a.guard, Guarded::Bounds { outer: Some(_), .. }),
            "the sign guard stays: {a:?}"
        );
        assert!(
            plan.checks.iter().any(|c| matches!(
                c,
                Check::Fits {
                    min: 0,
                    max: 63,
                    ..
                }
            )),
            "{:?}",
            plan.checks
        );
    }
}
