//! A [`Program`] compiled once per launch into the form the interpreter
//! runs: registers resolved to slots of their storage class, each
//! instruction's lane kernel chosen for its type, launch constants
//! (parameters, buffer lengths, the grid) folded into constants, and
//! every type rule of the IR checked, so that running never meets an
//! ill-typed instruction.

use crate::ir::{AtomicOp, BinOp, Builtin, Inst, Program, Reg, Space, Stmt, SubgroupOp, Ty};

use super::HostError;
use super::lanes::{self, Bin32, Bin64, Cmp64, Narrow, Shift64, Step, Tri32, Un32, Un64, Widen};

/// The subgroup size the host runs with: lanes are consecutive
/// `local_invocation_index` values in chunks of this many.
pub(crate) const SUBGROUP: usize = 32;

/// Where a register lives: its index among the registers of its class.
pub(super) type Slot = usize;

/// The width of a loaded or stored scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Width {
    /// `F16`: the low or high half of a word.
    Half,
    /// `U32`, `I32`, `F32`: one word.
    Word,
    /// `U64`: two words, low first.
    Double,
}

impl Width {
    /// Bytes of memory.
    pub(super) fn bytes(self) -> u64 {
        match self {
            Width::Half => 2,
            Width::Word => 4,
            Width::Double => 8,
        }
    }
}

/// An address register: its slot and whether it is a `U64` register.
#[derive(Clone, Copy, Debug)]
pub(super) struct Addr {
    /// The slot.
    pub(super) slot: Slot,
    /// `U64` (else `U32`).
    pub(super) wide: bool,
}

/// One compiled instruction. Slots without a note are 32-bit registers.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// `d = v`.
    Const32 { d: Slot, v: u32 },
    /// `d = v` (`U64`).
    Const64 { d: Slot, v: u64 },
    /// `d = a`.
    Mov32 { d: Slot, a: Slot },
    /// `d = a` (`U64`).
    Mov64 { d: Slot, a: Slot },
    /// `d = f(a)`.
    Un32 { f: Un32, d: Slot, a: Slot },
    /// `d = f(a, b)`.
    Bin32 { f: Bin32, d: Slot, a: Slot, b: Slot },
    /// `d = f(a, b, c)`.
    Tri32 {
        f: Tri32,
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    /// `d = f(a)`, all `U64`.
    Un64 { f: Un64, d: Slot, a: Slot },
    /// `d = f(a, b)`, all `U64`.
    Bin64 { f: Bin64, d: Slot, a: Slot, b: Slot },
    /// `d = f(a, b)`: `d`, `a` `U64`, `b` 32-bit.
    Shift64 {
        f: Shift64,
        d: Slot,
        a: Slot,
        b: Slot,
    },
    /// `d = f(a, b)`: `a`, `b` `U64`.
    Cmp64 { f: Cmp64, d: Slot, a: Slot, b: Slot },
    /// `d = f(a)`: `a` `U64`.
    Narrow { f: Narrow, d: Slot, a: Slot },
    /// `d = f(a)`: `d` `U64`.
    Widen { f: Widen, d: Slot, a: Slot },
    /// `d = c ? a : b`.
    Select32 { d: Slot, c: Slot, a: Slot, b: Slot },
    /// `d = c ? a : b`: `d`, `a`, `b` `U64`.
    Select64 { d: Slot, c: Slot, a: Slot, b: Slot },
    /// `d = local_invocation_id[axis]`.
    LocalId { d: Slot, axis: usize },
    /// `d = workgroup_id[axis]`.
    GroupId { d: Slot, axis: usize },
    /// `d = subgroup_invocation_id`.
    SubgroupLane { d: Slot },
    /// `d = space[addr]`, zero where the guard is false; `d` is `U64`
    /// for [`Width::Double`].
    Load {
        d: Slot,
        width: Width,
        space: Space,
        addr: Addr,
        guard: Option<Slot>,
    },
    /// `space[addr] = value` where the guard holds; `value` is `U64`
    /// for [`Width::Double`].
    Store {
        value: Slot,
        width: Width,
        space: Space,
        addr: Addr,
        guard: Option<Slot>,
    },
    /// An atomic read-modify-write of a word.
    Atomic {
        op: AtomicOp,
        signed: bool,
        d: Option<Slot>,
        space: Space,
        addr: Addr,
        value: Slot,
        compare: Option<Slot>,
        guard: Option<Slot>,
    },
    /// A subgroup operation.
    Subgroup {
        op: SubgroupKernel,
        d: Slot,
        a: Slot,
        b: Option<Slot>,
    },
}

impl SubgroupKernel {
    /// `op` on operands of type `ty`, and the type of its result; `None`
    /// where the operation does not take `ty`.
    pub(crate) fn of(op: SubgroupOp, ty: Ty) -> Option<(Self, Ty)> {
        let reduce = |r| lanes::reduce32(r, ty);
        let (kernel, want_dst, want_a) = match op {
            SubgroupOp::Reduce(r) => {
                let (f, id) = reduce(r)?;
                (SubgroupKernel::Reduce(f, id), ty, ty)
            }
            SubgroupOp::InclusiveScan(r) => {
                let (f, id) = reduce(r)?;
                (SubgroupKernel::Inclusive(f, id), ty, ty)
            }
            SubgroupOp::ExclusiveScan(r) => {
                let (f, id) = reduce(r)?;
                (SubgroupKernel::Exclusive(f, id), ty, ty)
            }
            SubgroupOp::BroadcastFirst => (SubgroupKernel::BroadcastFirst, ty, ty),
            SubgroupOp::Shuffle => (SubgroupKernel::Shuffle, ty, ty),
            SubgroupOp::ShuffleDown => (SubgroupKernel::Down, ty, ty),
            SubgroupOp::ShuffleUp => (SubgroupKernel::Up, ty, ty),
            SubgroupOp::ShuffleXor => (SubgroupKernel::Xor, ty, ty),
            SubgroupOp::All => (SubgroupKernel::All, Ty::Bool, Ty::Bool),
            SubgroupOp::Any => (SubgroupKernel::Any, Ty::Bool, Ty::Bool),
            SubgroupOp::Ballot => (SubgroupKernel::Ballot, Ty::U32, Ty::Bool),
        };
        (ty == want_a && ty != Ty::U64).then_some((kernel, want_dst))
    }
}

/// A subgroup operation with its combining step chosen.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SubgroupKernel {
    /// Reduction.
    Reduce(Step, u32),
    /// Inclusive scan.
    Inclusive(Step, u32),
    /// Exclusive scan.
    Exclusive(Step, u32),
    /// The lowest active lane's value.
    BroadcastFirst,
    /// Lane `b`.
    Shuffle,
    /// Lane `id + b`.
    Down,
    /// Lane `id - b`.
    Up,
    /// Lane `id ^ b`.
    Xor,
    /// Every active lane.
    All,
    /// Any active lane.
    Any,
    /// Bits of the lanes.
    Ballot,
}

/// Compiled structured control flow.
#[derive(Clone, Debug)]
pub(super) enum Node {
    /// Straight-line instructions.
    Run(Vec<Op>),
    /// `if`.
    If {
        cond: Slot,
        then: Vec<Node>,
        els: Vec<Node>,
    },
    /// A loop; `id` is unique in the program.
    Loop {
        id: u32,
        body: Vec<Node>,
        continuing: Vec<Node>,
        break_if: Option<Slot>,
    },
    /// Ends loop `id` for the active lanes.
    Break(u32),
    /// Sends the active lanes to loop `id`'s continuing block.
    Continue(u32),
    /// A block that `Leave(id)` exits.
    Block { id: u32, body: Vec<Node> },
    /// Sends the active lanes past block `id`.
    Leave(u32),
    /// Ends the active lanes.
    Return,
}

/// What a launch runs.
#[derive(Debug)]
pub(super) struct Compiled {
    /// Slots of 32-bit registers (one more than the program's: a
    /// temporary for instructions whose destination is also a source).
    pub(super) regs32: usize,
    /// Slots of `U64` registers, likewise.
    pub(super) regs64: usize,
    /// The body.
    pub(super) body: Vec<Node>,
    /// Instructions left after folding, for sizing a launch's work.
    pub(super) ops: usize,
    /// 32-bit registers holding a launch constant, with their values:
    /// filled once per worker, never written by an instruction.
    pub(super) consts32: Vec<(Slot, u32)>,
    /// `U64` registers holding a launch constant.
    pub(super) consts64: Vec<(Slot, u64)>,
}

/// A folded value.
#[derive(Clone, Copy)]
enum Konst {
    Word(u32),
    Double(u64),
}

/// The launch's values a program reads as constants.
pub(super) struct Launch<'a> {
    /// Byte length of each binding.
    pub(super) lens: &'a [u64],
    /// The parameter block.
    pub(super) params: &'a [u8],
    /// Workgroups per axis.
    pub(super) grid: [u32; 3],
}

/// Compiles `program` for one launch.
pub(super) fn compile(program: &Program, launch: &Launch<'_>) -> Result<Compiled, HostError> {
    let mut slots = Vec::with_capacity(program.regs.len());
    let (mut n32, mut n64) = (0, 0);
    for &ty in &program.regs {
        if ty == Ty::U64 {
            slots.push(n64);
            n64 += 1;
        } else {
            slots.push(n32);
            n32 += 1;
        }
    }
    let mut writes = vec![0u32; program.regs.len()];
    count_writes(&program.body, &mut writes);
    let mut c = Compiler {
        program,
        launch,
        slots,
        writes,
        k32: vec![None; n32 + 1],
        k64: vec![None; n64 + 1],
        tmp32: n32,
        tmp64: n64,
        loops: Vec::new(),
        blocks: Vec::new(),
        next_loop: 0,
        ops: 0,
    };
    let body = c.stmts(&program.body)?;
    let consts32 = c
        .k32
        .iter()
        .enumerate()
        .filter_map(|(s, v)| Some((s, (*v)?)))
        .collect();
    let consts64 = c
        .k64
        .iter()
        .enumerate()
        .filter_map(|(s, v)| Some((s, (*v)?)))
        .collect();
    Ok(Compiled {
        regs32: n32 + 1,
        regs64: n64 + 1,
        body,
        ops: c.ops,
        consts32,
        consts64,
    })
}

/// Counts the instructions that write each register.
fn count_writes(stmts: &[Stmt], writes: &mut [u32]) {
    for stmt in stmts {
        match stmt {
            Stmt::Inst(inst) => {
                if let Some(w) = inst.dst().and_then(|d| writes.get_mut(d.index())) {
                    *w += 1;
                }
            }
            Stmt::If { then, els, .. } => {
                count_writes(then, writes);
                count_writes(els, writes);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                count_writes(body, writes);
                count_writes(continuing, writes);
            }
            Stmt::Block { body, .. } => count_writes(body, writes),
            Stmt::Break | Stmt::Continue | Stmt::Leave(_) | Stmt::Return | Stmt::Barrier { .. } => {
            }
        }
    }
}

/// Compilation state.
struct Compiler<'a> {
    program: &'a Program,
    launch: &'a Launch<'a>,
    /// The slot of each register.
    slots: Vec<Slot>,
    /// How many instructions write each register.
    writes: Vec<u32>,
    /// The launch constant a 32-bit slot holds, if it does.
    k32: Vec<Option<u32>>,
    /// The launch constant a `U64` slot holds, if it does.
    k64: Vec<Option<u64>>,
    /// The 32-bit temporary.
    tmp32: Slot,
    /// The `U64` temporary.
    tmp64: Slot,
    /// Ids of the loops around the statement, innermost last.
    loops: Vec<u32>,
    /// Ids of the blocks around the statement.
    blocks: Vec<u32>,
    /// The next loop id.
    next_loop: u32,
    /// Instructions compiled.
    ops: usize,
}

impl Compiler<'_> {
    /// An error naming the kernel.
    fn err(&self, what: impl std::fmt::Display) -> HostError {
        HostError::new(format!("kernel `{}`: {what}", self.program.name))
    }

    /// The type of `reg`, or an error if the program has no such
    /// register.
    fn ty(&self, reg: Reg) -> Result<Ty, HostError> {
        self.program
            .regs
            .get(reg.index())
            .copied()
            .ok_or_else(|| self.err(format_args!("register {reg} is not declared")))
    }

    /// The slot of `reg`, checking that its type is `want`.
    fn reg(&self, reg: Reg, want: Ty) -> Result<Slot, HostError> {
        let ty = self.ty(reg)?;
        if ty != want {
            return Err(self.err(format_args!("register {reg} is {ty:?}, expected {want:?}")));
        }
        Ok(self.slots[reg.index()])
    }

    /// The slot of `reg` whatever its type.
    fn any(&self, reg: Reg) -> Result<(Slot, Ty), HostError> {
        let ty = self.ty(reg)?;
        Ok((self.slots[reg.index()], ty))
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<Vec<Node>, HostError> {
        let mut nodes = Vec::new();
        let mut run = Vec::new();
        for stmt in stmts {
            if let Stmt::Inst(inst) = stmt {
                self.inst(inst, &mut run)?;
                continue;
            }
            if let Stmt::Barrier { .. } = stmt {
                // The workgroup runs in lockstep: every lane has done
                // everything before the barrier when any lane goes past it.
                continue;
            }
            if !run.is_empty() {
                nodes.push(Node::Run(std::mem::take(&mut run)));
            }
            nodes.push(self.control(stmt)?);
        }
        if !run.is_empty() {
            nodes.push(Node::Run(run));
        }
        Ok(nodes)
    }

    fn control(&mut self, stmt: &Stmt) -> Result<Node, HostError> {
        Ok(match stmt {
            Stmt::Inst(_) | Stmt::Barrier { .. } => Node::Run(Vec::new()),
            Stmt::If { cond, then, els } => Node::If {
                cond: self.reg(*cond, Ty::Bool)?,
                then: self.stmts(then)?,
                els: self.stmts(els)?,
            },
            Stmt::Loop {
                body,
                continuing,
                break_if,
            } => {
                let id = self.next_loop;
                self.next_loop += 1;
                self.loops.push(id);
                let body = self.stmts(body)?;
                let continuing = self.stmts(continuing)?;
                self.loops.pop();
                let break_if = break_if.map(|r| self.reg(r, Ty::Bool)).transpose()?;
                Node::Loop {
                    id,
                    body,
                    continuing,
                    break_if,
                }
            }
            Stmt::Break => Node::Break(self.innermost_loop("break")?),
            Stmt::Continue => Node::Continue(self.innermost_loop("continue")?),
            Stmt::Block { id, body } => {
                if self.blocks.contains(id) {
                    return Err(self.err(format_args!("block {id} is nested in itself")));
                }
                self.blocks.push(*id);
                let body = self.stmts(body)?;
                self.blocks.pop();
                Node::Block { id: *id, body }
            }
            Stmt::Leave(id) => {
                if !self.blocks.contains(id) {
                    return Err(self.err(format_args!("`leave {id}` is not inside block {id}")));
                }
                Node::Leave(*id)
            }
            Stmt::Return => Node::Return,
        })
    }

    fn innermost_loop(&self, what: &str) -> Result<u32, HostError> {
        self.loops
            .last()
            .copied()
            .ok_or_else(|| self.err(format_args!("`{what}` outside a loop")))
    }

    /// Pushes `op`, whose destination is `dst`; where `dst` is also one of
    /// the sources `srcs` (same class), the op writes the class's
    /// temporary and a move follows, so that no lane kernel reads a
    /// register it is writing.
    ///
    /// A register written only here, by an operation of launch constants,
    /// becomes a constant itself: its value is computed now, on one
    /// lane, and no instruction is left to run.
    fn push(&mut self, run: &mut Vec<Op>, dst: Reg, srcs: &[Reg], op: impl Fn(Slot) -> Op) {
        let wide = self.program.regs[dst.index()] == Ty::U64;
        let d = self.slots[dst.index()];
        if self.writes[dst.index()] == 1 {
            match self.fold(&op(d)) {
                Some(Konst::Word(v)) if !wide => return self.k32[d] = Some(v),
                Some(Konst::Double(v)) if wide => return self.k64[d] = Some(v),
                _ => {}
            }
        }
        self.ops += 1;
        let aliased = srcs.iter().any(|&s| {
            (self.program.regs[s.index()] == Ty::U64) == wide && self.slots[s.index()] == d
        });
        if !aliased {
            run.push(op(d));
        } else if wide {
            run.push(op(self.tmp64));
            run.push(Op::Mov64 { d, a: self.tmp64 });
        } else {
            run.push(op(self.tmp32));
            run.push(Op::Mov32 { d, a: self.tmp32 });
        }
    }

    /// The value of `op` where its operands are launch constants.
    fn fold(&self, op: &Op) -> Option<Konst> {
        let w = |s: Slot| self.k32[s];
        let dw = |s: Slot| self.k64[s];
        let mut d = [0u32];
        let mut dd = [0u64];
        Some(match *op {
            Op::Const32 { v, .. } => Konst::Word(v),
            Op::Const64 { v, .. } => Konst::Double(v),
            Op::Mov32 { a, .. } => Konst::Word(w(a)?),
            Op::Mov64 { a, .. } => Konst::Double(dw(a)?),
            Op::Un32 { f, a, .. } => {
                f(&mut d, &[w(a)?], None);
                Konst::Word(d[0])
            }
            Op::Bin32 { f, a, b, .. } => {
                f(&mut d, &[w(a)?], &[w(b)?], None);
                Konst::Word(d[0])
            }
            Op::Tri32 { f, a, b, c, .. } => {
                f(&mut d, &[w(a)?], &[w(b)?], &[w(c)?], None);
                Konst::Word(d[0])
            }
            Op::Un64 { f, a, .. } => {
                f(&mut dd, &[dw(a)?], None);
                Konst::Double(dd[0])
            }
            Op::Bin64 { f, a, b, .. } => {
                f(&mut dd, &[dw(a)?], &[dw(b)?], None);
                Konst::Double(dd[0])
            }
            Op::Shift64 { f, a, b, .. } => {
                f(&mut dd, &[dw(a)?], &[w(b)?], None);
                Konst::Double(dd[0])
            }
            Op::Cmp64 { f, a, b, .. } => {
                f(&mut d, &[dw(a)?], &[dw(b)?], None);
                Konst::Word(d[0])
            }
            Op::Narrow { f, a, .. } => {
                f(&mut d, &[dw(a)?], None);
                Konst::Word(d[0])
            }
            Op::Widen { f, a, .. } => {
                f(&mut dd, &[w(a)?], None);
                Konst::Double(dd[0])
            }
            Op::Select32 { c, a, b, .. } => Konst::Word(if w(c)? != 0 { w(a)? } else { w(b)? }),
            Op::Select64 { c, a, b, .. } => Konst::Double(if w(c)? != 0 { dw(a)? } else { dw(b)? }),
            _ => return None,
        })
    }

    fn inst(&mut self, inst: &Inst, run: &mut Vec<Op>) -> Result<(), HostError> {
        match *inst {
            Inst::Const { dst, bits } => {
                let ty = self.ty(dst)?;
                self.push(run, dst, &[], |d| match ty {
                    Ty::U64 => Op::Const64 { d, v: bits },
                    Ty::Bool => Op::Const32 {
                        d,
                        v: u32::from(bits != 0),
                    },
                    Ty::F16 => Op::Const32 {
                        d,
                        v: bits as u32 & 0xffff,
                    },
                    _ => Op::Const32 { d, v: bits as u32 },
                });
            }
            Inst::Mov { dst, src } => {
                let ty = self.ty(dst)?;
                let a = self.reg(src, ty)?;
                if a != self.slots[dst.index()] {
                    self.push(run, dst, &[], |d| {
                        if ty == Ty::U64 {
                            Op::Mov64 { d, a }
                        } else {
                            Op::Mov32 { d, a }
                        }
                    });
                }
            }
            Inst::Un { op, dst, a } => {
                let ty = self.ty(dst)?;
                let sa = self.reg(a, ty)?;
                let bad = || self.err(format_args!("{op:?} is not defined on {ty:?}"));
                if ty == Ty::U64 {
                    let f = lanes::un64(op).ok_or_else(bad)?;
                    self.push(run, dst, &[a], |d| Op::Un64 { f, d, a: sa });
                } else {
                    let f = lanes::un32(op, ty).ok_or_else(bad)?;
                    self.push(run, dst, &[a], |d| Op::Un32 { f, d, a: sa });
                }
            }
            Inst::Bin { op, dst, a, b } => self.bin(run, op, dst, a, b)?,
            Inst::Fma { dst, a, b, c } => {
                let ty = self.ty(dst)?;
                let (sa, sb, sc) = (self.reg(a, ty)?, self.reg(b, ty)?, self.reg(c, ty)?);
                let f = lanes::fma32(ty)
                    .ok_or_else(|| self.err(format_args!("fma is not defined on {ty:?}")))?;
                self.push(run, dst, &[a, b, c], |d| Op::Tri32 {
                    f,
                    d,
                    a: sa,
                    b: sb,
                    c: sc,
                });
            }
            Inst::Select { dst, cond, a, b } => {
                let ty = self.ty(dst)?;
                let (c, sa, sb) = (
                    self.reg(cond, Ty::Bool)?,
                    self.reg(a, ty)?,
                    self.reg(b, ty)?,
                );
                if ty == Ty::U64 {
                    self.push(run, dst, &[a, b], |d| Op::Select64 { d, c, a: sa, b: sb });
                } else {
                    self.push(run, dst, &[cond, a, b], |d| Op::Select32 {
                        d,
                        c,
                        a: sa,
                        b: sb,
                    });
                }
            }
            Inst::Convert { dst, a } => {
                let to = self.ty(dst)?;
                let (sa, from) = self.any(a)?;
                let bad = || self.err(format_args!("no conversion from {from:?} to {to:?}"));
                if from == to {
                    return self.inst(&Inst::Mov { dst, src: a }, run);
                }
                match (from, to) {
                    (Ty::U64, _) => {
                        let f = lanes::narrow(to).ok_or_else(bad)?;
                        self.push(run, dst, &[], |d| Op::Narrow { f, d, a: sa });
                    }
                    (_, Ty::U64) => {
                        let f = lanes::widen(from).ok_or_else(bad)?;
                        self.push(run, dst, &[], |d| Op::Widen { f, d, a: sa });
                    }
                    _ => {
                        let f = lanes::convert32(from, to).ok_or_else(bad)?;
                        self.push(run, dst, &[a], |d| Op::Un32 { f, d, a: sa });
                    }
                }
            }
            Inst::Bitcast { dst, a } => {
                let to = self.ty(dst)?;
                let (_, from) = self.any(a)?;
                let same_width = matches!(
                    (from, to),
                    (Ty::U32 | Ty::I32 | Ty::F32, Ty::U32 | Ty::I32 | Ty::F32)
                        | (Ty::U64, Ty::U64)
                        | (Ty::F16, Ty::F16)
                );
                if !same_width {
                    return Err(self.err(format_args!(
                        "bitcast from {from:?} to {to:?} changes the width"
                    )));
                }
                let sa = self.slots[a.index()];
                if sa != self.slots[dst.index()] {
                    self.push(run, dst, &[], |d| {
                        if to == Ty::U64 {
                            Op::Mov64 { d, a: sa }
                        } else {
                            Op::Mov32 { d, a: sa }
                        }
                    });
                }
            }
            Inst::Read { dst, what } => {
                let want = if matches!(what, Builtin::BufferLen(_)) {
                    Ty::U64
                } else {
                    Ty::U32
                };
                self.reg(dst, want)?;
                let len = match what {
                    Builtin::BufferLen(n) => {
                        self.launch.lens.get(n as usize).copied().ok_or_else(|| {
                            self.err(format_args!(
                                "reads the length of buffer {n}, but it binds {}",
                                self.launch.lens.len()
                            ))
                        })?
                    }
                    _ => 0,
                };
                let grid = self.launch.grid;
                self.push(run, dst, &[], |d| match what {
                    Builtin::LocalId(axis) => Op::LocalId {
                        d,
                        axis: axis.index(),
                    },
                    Builtin::GroupId(axis) => Op::GroupId {
                        d,
                        axis: axis.index(),
                    },
                    Builtin::NumGroups(axis) => Op::Const32 {
                        d,
                        v: grid[axis.index()],
                    },
                    Builtin::SubgroupSize => Op::Const32 {
                        d,
                        v: SUBGROUP as u32,
                    },
                    Builtin::SubgroupInvocationId => Op::SubgroupLane { d },
                    Builtin::BufferLen(_) => Op::Const64 { d, v: len },
                });
            }
            Inst::Param { dst, word } => {
                let ty = self.ty(dst)?;
                if !matches!(ty, Ty::U32 | Ty::I32 | Ty::F32) {
                    return Err(self.err(format_args!("parameter word {word} read as {ty:?}")));
                }
                let at = word as usize * 4;
                let bytes = self.launch.params.get(at..at + 4).ok_or_else(|| {
                    self.err(format_args!(
                        "reads parameter word {word} (bytes {at}..{}), but the parameter block has {} bytes",
                        at + 4,
                        self.launch.params.len()
                    ))
                })?;
                let v = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                self.push(run, dst, &[], |d| Op::Const32 { d, v });
            }
            Inst::Load {
                dst,
                space,
                addr: a,
                guard: g,
                atomic: _,
            } => {
                let ty = self.ty(dst)?;
                let width = self.width(ty, "load")?;
                let (space, addr) = (self.space(space, false)?, self.addr(a)?);
                let guard = g.map(|g| self.reg(g, Ty::Bool)).transpose()?;
                let mut srcs = vec![a];
                srcs.extend(g);
                self.push(run, dst, &srcs, |d| Op::Load {
                    d,
                    width,
                    space,
                    addr,
                    guard,
                });
            }
            Inst::Store {
                space,
                addr,
                value,
                guard,
                atomic: _,
            } => {
                let (value, ty) = self.any(value)?;
                let width = self.width(ty, "store")?;
                let (space, addr) = (self.space(space, true)?, self.addr(addr)?);
                let guard = guard.map(|g| self.reg(g, Ty::Bool)).transpose()?;
                self.ops += 1;
                run.push(Op::Store {
                    value,
                    width,
                    space,
                    addr,
                    guard,
                });
            }
            Inst::Atomic {
                op,
                dst,
                space,
                addr: a,
                value,
                compare: cmp,
                guard: g,
            } => {
                let (sv, ty) = self.any(value)?;
                if !matches!(ty, Ty::U32 | Ty::I32) {
                    return Err(self.err(format_args!("atomic {op:?} on {ty:?}")));
                }
                let compare = match (op, cmp) {
                    (AtomicOp::CompareExchange, Some(c)) => Some(self.reg(c, ty)?),
                    (AtomicOp::CompareExchange, None) => {
                        return Err(self.err("atomic compare-exchange without a compare value"));
                    }
                    _ => None,
                };
                let (space, addr) = (self.space(space, true)?, self.addr(a)?);
                let guard = g.map(|g| self.reg(g, Ty::Bool)).transpose()?;
                let signed = ty == Ty::I32;
                let make = |d| Op::Atomic {
                    op,
                    signed,
                    d,
                    space,
                    addr,
                    value: sv,
                    compare,
                    guard,
                };
                match dst {
                    Some(dst) => {
                        self.reg(dst, ty)?;
                        let mut srcs = vec![a, value];
                        srcs.extend(g);
                        srcs.extend(cmp);
                        self.push(run, dst, &srcs, |d| make(Some(d)));
                    }
                    None => {
                        self.ops += 1;
                        run.push(make(None));
                    }
                }
            }
            Inst::Subgroup { op, dst, a, b } => {
                let (sa, ty) = self.any(a)?;
                let bad = || self.err(format_args!("subgroup {op:?} on {ty:?}"));
                let (kernel, want_dst) = SubgroupKernel::of(op, ty).ok_or_else(bad)?;
                self.reg(dst, want_dst)?;
                let shuffles = matches!(
                    kernel,
                    SubgroupKernel::Shuffle
                        | SubgroupKernel::Down
                        | SubgroupKernel::Up
                        | SubgroupKernel::Xor
                );
                let sb = match (shuffles, b) {
                    (true, Some(b)) => Some(self.reg(b, Ty::U32)?),
                    (true, None) => {
                        return Err(self.err(format_args!("subgroup {op:?} without a lane")));
                    }
                    (false, _) => None,
                };
                let mut srcs = vec![a];
                srcs.extend(b);
                self.push(run, dst, &srcs, |d| Op::Subgroup {
                    op: kernel,
                    d,
                    a: sa,
                    b: sb,
                });
            }
        }
        Ok(())
    }

    fn bin(
        &mut self,
        run: &mut Vec<Op>,
        op: BinOp,
        dst: Reg,
        a: Reg,
        b: Reg,
    ) -> Result<(), HostError> {
        let (sa, ty) = self.any(a)?;
        let shift = matches!(op, BinOp::Shl | BinOp::Shr);
        let sb = self.reg(b, if shift { Ty::U32 } else { ty })?;
        let want = if op.is_comparison() { Ty::Bool } else { ty };
        self.reg(dst, want)?;
        let bad = || self.err(format_args!("{op:?} is not defined on {ty:?}"));
        if ty != Ty::U64 {
            let f = lanes::bin32(op, ty).ok_or_else(bad)?;
            self.push(run, dst, &[a, b], |d| Op::Bin32 { f, d, a: sa, b: sb });
        } else if shift {
            let f = lanes::shift64(op).ok_or_else(bad)?;
            self.push(run, dst, &[a], |d| Op::Shift64 { f, d, a: sa, b: sb });
        } else if op.is_comparison() {
            let f = lanes::cmp64(op).ok_or_else(bad)?;
            self.push(run, dst, &[], |d| Op::Cmp64 { f, d, a: sa, b: sb });
        } else {
            let f = lanes::bin64(op).ok_or_else(bad)?;
            self.push(run, dst, &[a, b], |d| Op::Bin64 { f, d, a: sa, b: sb });
        }
        Ok(())
    }

    fn width(&self, ty: Ty, what: &str) -> Result<Width, HostError> {
        match ty {
            Ty::F16 => Ok(Width::Half),
            Ty::U32 | Ty::I32 | Ty::F32 => Ok(Width::Word),
            Ty::U64 => Ok(Width::Double),
            Ty::Bool => Err(self.err(format_args!("{what} of a Bool (never in memory)"))),
        }
    }

    /// Checks that `space` exists, and that a `write` goes to a buffer
    /// not declared read-only (the host views those as plain memory).
    fn space(&self, space: Space, write: bool) -> Result<Space, HostError> {
        if let Space::Buffer(n) = space {
            if n as usize >= self.launch.lens.len() {
                return Err(self.err(format_args!(
                    "accesses buffer {n}, but it binds {}",
                    self.launch.lens.len()
                )));
            }
            if write
                && self
                    .program
                    .buffers
                    .get(n as usize)
                    .is_some_and(|b| b.read_only)
            {
                return Err(self.err(format_args!(
                    "writes buffer {n}, which is declared read-only"
                )));
            }
        }
        Ok(space)
    }

    fn addr(&self, reg: Reg) -> Result<Addr, HostError> {
        let (slot, ty) = self.any(reg)?;
        match ty {
            Ty::U32 => Ok(Addr { slot, wide: false }),
            Ty::U64 => Ok(Addr { slot, wide: true }),
            _ => Err(self.err(format_args!("address register {reg} is {ty:?}"))),
        }
    }
}
