//! Emitting instructions: registers, constants hoisted to the program's
//! start, nested statement lists.

use std::collections::HashMap;

use crate::ir::{BinOp, Builtin, Inst, Reg, Stmt, Ty, UnOp};

/// The program being written: its registers and the statement lists
/// open around the current point.
pub(super) struct Builder {
    pub regs: Vec<Ty>,
    /// Constants, written once at the start of the program so that a
    /// register made for one use is valid at every later one, whatever
    /// branch it was first needed in.
    prologue: Vec<Stmt>,
    consts: HashMap<(Ty, u64), Reg>,
    /// Builtins read once, at the start, for the same reason.
    builtins: HashMap<Builtin, Reg>,
    open: Vec<Vec<Stmt>>,
    next_block: u32,
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            regs: Vec::new(),
            prologue: Vec::new(),
            consts: HashMap::new(),
            builtins: HashMap::new(),
            open: vec![Vec::new()],
            next_block: 0,
        }
    }

    /// The whole body: constants and builtins first.
    pub fn finish(mut self) -> (Vec<Ty>, Vec<Stmt>) {
        let body = self.open.pop().unwrap_or_default();
        let mut all = self.prologue;
        all.extend(body);
        (self.regs, all)
    }

    pub fn reg(&mut self, ty: Ty) -> Reg {
        self.regs.push(ty);
        Reg(self.regs.len() as u32 - 1)
    }

    pub fn ty(&self, r: Reg) -> Ty {
        self.regs[r.index()]
    }

    pub fn stmt(&mut self, s: Stmt) {
        if let Some(list) = self.open.last_mut() {
            list.push(s);
        }
    }

    pub fn inst(&mut self, i: Inst) {
        self.stmt(Stmt::Inst(i));
    }

    /// Starts a statement list nested in the current one.
    pub fn open(&mut self) {
        self.open.push(Vec::new());
    }

    /// Ends the list [`open`](Self::open) started and returns it.
    pub fn close(&mut self) -> Vec<Stmt> {
        self.open.pop().unwrap_or_default()
    }

    pub fn block_id(&mut self) -> u32 {
        self.next_block += 1;
        self.next_block
    }

    pub fn konst(&mut self, ty: Ty, bits: u64) -> Reg {
        let bits = match ty {
            Ty::Bool => u64::from(bits != 0),
            Ty::F16 => bits & 0xffff,
            Ty::U32 | Ty::I32 | Ty::F32 => bits & 0xffff_ffff,
            Ty::U64 => bits,
        };
        if let Some(&r) = self.consts.get(&(ty, bits)) {
            return r;
        }
        let dst = self.reg(ty);
        self.prologue.push(Stmt::Inst(Inst::Const { dst, bits }));
        self.consts.insert((ty, bits), dst);
        dst
    }

    pub fn u32(&mut self, v: u32) -> Reg {
        self.konst(Ty::U32, u64::from(v))
    }

    pub fn u64(&mut self, v: u64) -> Reg {
        self.konst(Ty::U64, v)
    }

    pub fn boolean(&mut self, v: bool) -> Reg {
        self.konst(Ty::Bool, u64::from(v))
    }

    pub fn f32(&mut self, v: f32) -> Reg {
        self.konst(Ty::F32, u64::from(v.to_bits()))
    }

    /// A float constant of `ty` (`F32` or `F16`).
    pub fn float(&mut self, ty: Ty, v: f64) -> Reg {
        match ty {
            Ty::F16 => self.konst(Ty::F16, u64::from(half::f16::from_f64(v).to_bits())),
            _ => self.f32(v as f32),
        }
    }

    /// An integer or float constant of `ty` with value `v`.
    pub fn number(&mut self, ty: Ty, v: i64) -> Reg {
        match ty {
            Ty::F32 | Ty::F16 => self.float(ty, v as f64),
            _ => self.konst(ty, v as u64),
        }
    }

    pub fn builtin(&mut self, what: Builtin) -> Reg {
        if let Some(&r) = self.builtins.get(&what) {
            return r;
        }
        let ty = match what {
            Builtin::BufferLen(_) => Ty::U64,
            _ => Ty::U32,
        };
        let dst = self.reg(ty);
        self.prologue.push(Stmt::Inst(Inst::Read { dst, what }));
        self.builtins.insert(what, dst);
        dst
    }

    pub fn mov(&mut self, src: Reg) -> Reg {
        let dst = self.reg(self.ty(src));
        self.inst(Inst::Mov { dst, src });
        dst
    }

    pub fn un(&mut self, op: UnOp, a: Reg) -> Reg {
        let dst = self.reg(self.ty(a));
        self.inst(Inst::Un { op, dst, a });
        dst
    }

    pub fn bin(&mut self, op: BinOp, a: Reg, b: Reg) -> Reg {
        let ty = if op.is_comparison() {
            Ty::Bool
        } else {
            self.ty(a)
        };
        let dst = self.reg(ty);
        self.inst(Inst::Bin { op, dst, a, b });
        dst
    }

    pub fn fma(&mut self, a: Reg, b: Reg, c: Reg) -> Reg {
        let dst = self.reg(self.ty(a));
        self.inst(Inst::Fma { dst, a, b, c });
        dst
    }

    pub fn select(&mut self, cond: Reg, a: Reg, b: Reg) -> Reg {
        let dst = self.reg(self.ty(a));
        self.inst(Inst::Select { dst, cond, a, b });
        dst
    }

    /// `a` converted to `ty` (nothing when it already is).
    pub fn convert(&mut self, a: Reg, ty: Ty) -> Reg {
        if self.ty(a) == ty {
            return a;
        }
        let dst = self.reg(ty);
        self.inst(Inst::Convert { dst, a });
        dst
    }

    /// WGSL's value conversion (`i32(x)`, `u32(x)`): an f32 out of the
    /// integer's range becomes the nearest f32 inside it (the largest f32
    /// below 2^31 is 2^31 - 128, below 2^32 it is 2^32 - 256), then
    /// converts exactly; a NaN gives the clamp's lower bound.
    pub fn value_convert(&mut self, a: Reg, ty: Ty) -> Reg {
        let (lo, hi) = match (self.ty(a), ty) {
            (Ty::F32, Ty::I32) => (-2_147_483_648.0f32, 2_147_483_520.0f32),
            (Ty::F32, Ty::U32) => (0.0, 4_294_967_040.0),
            _ => return self.convert(a, ty),
        };
        let (lo, hi) = (self.f32(lo), self.f32(hi));
        let up = self.bin(BinOp::Max, a, lo);
        let c = self.bin(BinOp::Min, up, hi);
        self.convert(c, ty)
    }

    pub fn bitcast(&mut self, a: Reg, ty: Ty) -> Reg {
        if self.ty(a) == ty {
            return a;
        }
        let dst = self.reg(ty);
        self.inst(Inst::Bitcast { dst, a });
        dst
    }

    /// `a && b` for optional guards.
    pub fn and_guard(&mut self, a: Option<Reg>, b: Option<Reg>) -> Option<Reg> {
        match (a, b) {
            (Some(a), Some(b)) => Some(self.bin(BinOp::And, a, b)),
            (a, None) => a,
            (None, b) => b,
        }
    }
}
