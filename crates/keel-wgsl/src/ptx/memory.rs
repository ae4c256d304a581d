//! Loads, stores and atomics.
//!
//! An address is the space's base plus the IR's byte offset: a buffer's
//! global pointer (converted with `cvta.to.global` at entry) plus a U64
//! offset; `keel_shared`'s 32-bit shared address plus a U32 offset;
//! `keel_private`'s local address plus the U32 offset widened. A guarded
//! access is predicated on its guard; where the guard is false a load or
//! an atomic writes 0 to its destination instead (the two are
//! predicated on opposite conditions, so a destination that is also the
//! value operand is read before it is written).
//!
//! A vector read from workgroup memory arrives as one load per component
//! (the lowering splits values into scalars); where its offset is
//! provably aligned to the whole vector, the components are read by one
//! `ld.shared.v2` or `.v4` instead ([`Emitter::vector_load`]): a tiled
//! kernel's inner loop reads its tiles a vector at a time, and scalar
//! loads quadruple its shared-memory instructions.

use super::{Bank, Emitter, PtxError, Result, mov_ty, zero};
use crate::ir::{AtomicOp, BinOp, Inst, Reg, Space, Stmt, Ty};

/// How far a chain of definitions is followed for an alignment.
const MAX_DEPTH: u32 = 32;

/// Loads of a vector's components from workgroup memory that print as
/// one vector load (`Emitter::vector_group`).
pub(super) struct VectorGroup {
    /// The statements it stands for.
    pub used: usize,
    /// The components' registers.
    pub dsts: Vec<Reg>,
    /// The first component's offset, the vector's.
    pub base: Reg,
    /// The components' type.
    pub ty: Ty,
}

/// The state space and address register of an access.
struct Address {
    space: &'static str,
    reg: String,
}

/// The load/store type of a value of type `ty`.
fn mem_ty(ty: Ty) -> Result<&'static str> {
    Ok(match ty {
        Ty::U32 => "u32",
        Ty::I32 => "s32",
        Ty::F32 => "f32",
        Ty::F16 => "b16",
        Ty::U64 => "u64",
        Ty::Bool => return Err(PtxError::new("a Bool in memory")),
    })
}

impl Emitter<'_> {
    fn address(&mut self, space: Space, addr: Reg) -> Result<Address> {
        match space {
            Space::Buffer(n) => {
                if n as usize >= self.prog.buffers.len() {
                    return Err(PtxError::new(format!(
                        "access to buffer {n}, which is not bound"
                    )));
                }
                let reg = self.tmp(Bank::B64);
                if let Some(e) = self.elements.get(&addr).copied() {
                    let index = self.reg_of(e.index, Ty::U32, "element index")?;
                    self.ins(&format!(
                        "mad.wide.u32 {reg}, {index}, {}, %buf{n};",
                        e.stride
                    ));
                } else {
                    let offset = self.reg_of(addr, Ty::U64, "buffer offset")?;
                    self.ins(&format!("add.s64 {reg}, %buf{n}, {offset};"));
                }
                Ok(Address {
                    space: "global",
                    reg,
                })
            }
            Space::Shared => {
                if self.prog.shared_bytes == 0 {
                    return Err(PtxError::new("workgroup access with no workgroup memory"));
                }
                let offset = self.reg_of(addr, Ty::U32, "workgroup offset")?;
                let reg = self.tmp(Bank::B32);
                self.ins(&format!("add.u32 {reg}, %smem, {offset};"));
                Ok(Address {
                    space: "shared",
                    reg,
                })
            }
            Space::Private => {
                if self.prog.private_bytes == 0 {
                    return Err(PtxError::new("private access with no private memory"));
                }
                let offset = self.reg_of(addr, Ty::U32, "private offset")?;
                let reg = self.tmp(Bank::B64);
                self.ins(&format!("cvt.u64.u32 {reg}, {offset};"));
                self.ins(&format!("add.u64 {reg}, %pmem, {reg};"));
                Ok(Address {
                    space: "local",
                    reg,
                })
            }
        }
    }

    /// The `@p ` prefix of a guarded access, after writing `zero` to
    /// `dst` where the guard is false.
    fn guard(&mut self, guard: Option<Reg>, dst: Option<(&str, Ty)>) -> Result<String> {
        let Some(g) = guard else {
            return Ok(String::new());
        };
        let g = self.reg_of(g, Ty::Bool, "guard")?;
        if let Some((d, ty)) = dst {
            self.ins(&format!("@!{g} mov.{} {d}, {};", mov_ty(ty), zero(ty)));
        }
        Ok(format!("@{g} "))
    }

    /// The instruction name of an access: `atomic` loads and stores are
    /// relaxed at GPU scope in buffers (not torn, not served from a
    /// stale L1 line) and volatile in workgroup memory.
    fn access(op: &str, at: &Address, atomic: bool) -> String {
        match (atomic, at.space) {
            (true, "global") => format!("{op}.relaxed.gpu.global"),
            (true, "shared") => format!("{op}.volatile.shared"),
            _ => format!("{op}.{}", at.space),
        }
    }

    pub(super) fn load(
        &mut self,
        dst: Reg,
        space: Space,
        addr: Reg,
        guard: Option<Reg>,
        atomic: bool,
    ) -> Result<()> {
        let ty = self.ty(dst)?;
        let t = mem_ty(ty)?;
        let d = self.reg(dst)?;
        let at = self.address(space, addr)?;
        let pre = self.guard(guard, Some((&d, ty)))?;
        let name = Self::access("ld", &at, atomic);
        self.ins(&format!("{pre}{name}.{t} {d}, [{}];", at.reg));
        Ok(())
    }

    /// Where `body` starts with the loads of a vector's components from
    /// workgroup memory as the lowering writes them (an unguarded load at
    /// offset `a`, then for each further component the add of `a` and
    /// its byte offset, and its load), and `a` is a multiple of the
    /// vector's size: the group, for one vector load. The adds read
    /// neither destination, so the loads may move after them.
    pub(super) fn vector_group(&self, body: &[Stmt]) -> Result<Option<VectorGroup>> {
        let Some(Stmt::Inst(Inst::Load {
            dst,
            space: Space::Shared,
            addr: base,
            guard: None,
            atomic: false,
        })) = body.first()
        else {
            return Ok(None);
        };
        let ty = self.ty(*dst)?;
        if ty.bytes() != 4 {
            return Ok(None);
        }
        let mut dsts = vec![*dst];
        let mut used = 1;
        while dsts.len() < 4 {
            let (
                Some(Stmt::Inst(Inst::Bin {
                    op: BinOp::Add,
                    dst: at,
                    a,
                    b,
                })),
                Some(Stmt::Inst(Inst::Load {
                    dst: d,
                    space: Space::Shared,
                    addr,
                    guard: None,
                    atomic: false,
                })),
            ) = (body.get(used), body.get(used + 1))
            else {
                break;
            };
            let step = 4 * dsts.len() as u64;
            if a != base || addr != at || self.konst(*b) != Some(step) || self.ty(*d)? != ty {
                break;
            }
            dsts.push(*d);
            used += 2;
        }
        // v2 or v4 only; a third component is read on its own.
        if dsts.len() == 3 {
            dsts.pop();
            used -= 2;
        }
        let size = 4 * dsts.len() as u32;
        let clash = dsts.iter().enumerate().any(|(i, d)| {
            d == base
                || dsts[..i].contains(d)
                || body[1..used].iter().any(|s| match s {
                    Stmt::Inst(Inst::Bin { a, b, .. }) => a == d || b == d,
                    _ => false,
                })
        });
        if dsts.len() < 2 || clash || self.known_zero_bits(*base, 0) < size.trailing_zeros() {
            return Ok(None);
        }
        Ok(Some(VectorGroup {
            used,
            dsts,
            base: *base,
            ty,
        }))
    }

    /// Emits a [`vector_group`](Self::vector_group) of `body`, the adds
    /// and one vector load; returns how many statements it stood for.
    pub(super) fn vector_load(&mut self, body: &[Stmt]) -> Result<Option<usize>> {
        let Some(VectorGroup {
            used,
            dsts,
            base,
            ty,
        }) = self.vector_group(body)?
        else {
            return Ok(None);
        };
        for s in &body[1..used] {
            if let Stmt::Inst(inst @ Inst::Bin { .. }) = s {
                self.reset_tmps();
                self.inst_if_read(inst)?;
            }
        }
        self.reset_tmps();
        let t = mem_ty(ty)?;
        let names = dsts
            .iter()
            .map(|&d| self.reg(d))
            .collect::<Result<Vec<_>>>()?
            .join(", ");
        let at = self.address(Space::Shared, base)?;
        self.ins(&format!(
            "ld.shared.v{}.{t} {{{names}}}, [{}];",
            dsts.len(),
            at.reg
        ));
        Ok(Some(used))
    }

    /// The value of a register written once by a constant.
    fn konst(&self, r: Reg) -> Option<u64> {
        match self.defs.get(r.index()).copied().flatten() {
            Some(Inst::Const { bits, .. }) => Some(*bits),
            _ => None,
        }
    }

    /// How many low bits of `r` are zero in every invocation (at most
    /// 32), from the instructions that make it.
    fn known_zero_bits(&self, r: Reg, depth: u32) -> u32 {
        if depth > MAX_DEPTH {
            return 0;
        }
        let z = |s: &Self, r: Reg| s.known_zero_bits(r, depth + 1);
        let bits = match self.defs.get(r.index()).copied().flatten() {
            Some(Inst::Const { bits, .. }) => (*bits as u32).trailing_zeros(),
            Some(Inst::Mov { src, .. }) => z(self, *src),
            Some(Inst::Select { a, b, .. }) => z(self, *a).min(z(self, *b)),
            Some(Inst::Bin { op, a, b, .. }) => match op {
                BinOp::Add | BinOp::Sub => z(self, *a).min(z(self, *b)),
                BinOp::Mul => z(self, *a) + z(self, *b),
                BinOp::And => z(self, *a).max(z(self, *b)),
                BinOp::Shl => match self.konst(*b) {
                    Some(c) => z(self, *a) + c as u32,
                    None => z(self, *a),
                },
                _ => 0,
            },
            _ => 0,
        };
        bits.min(32)
    }

    pub(super) fn store(
        &mut self,
        space: Space,
        addr: Reg,
        value: Reg,
        guard: Option<Reg>,
        atomic: bool,
    ) -> Result<()> {
        let ty = self.ty(value)?;
        let t = mem_ty(ty)?;
        let v = self.reg(value)?;
        let at = self.address(space, addr)?;
        let pre = self.guard(guard, None)?;
        let name = Self::access("st", &at, atomic);
        self.ins(&format!("{pre}{name}.{t} [{}], {v};", at.reg));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
        &mut self,
        op: AtomicOp,
        dst: Option<Reg>,
        space: Space,
        addr: Reg,
        value: Reg,
        compare: Option<Reg>,
        guard: Option<Reg>,
    ) -> Result<()> {
        if space == Space::Private {
            return Err(PtxError::new("an atomic in private memory"));
        }
        let ty = self.ty(value)?;
        if !matches!(ty, Ty::U32 | Ty::I32) {
            return Err(PtxError::new(format!("an atomic on {ty:?}")));
        }
        let mut v = self.reg(value)?;
        let cmp = match (op, compare) {
            (AtomicOp::CompareExchange, Some(c)) => Some(self.reg_of(c, ty, "compare")?),
            (AtomicOp::CompareExchange, None) => {
                return Err(PtxError::new("compare-exchange without a compare value"));
            }
            _ => None,
        };
        let d = match dst {
            Some(dst) => self.reg_of(dst, ty, "atomic result")?,
            None => self.tmp(Bank::B32),
        };
        let signed = ty == Ty::I32;
        let name = match op {
            AtomicOp::Add => "add.u32",
            AtomicOp::Sub => {
                // atom has no subtract: add the wrapping negation.
                let n = self.tmp(Bank::B32);
                self.ins(&format!("neg.s32 {n}, {v};"));
                v = n;
                "add.u32"
            }
            AtomicOp::And => "and.b32",
            AtomicOp::Or => "or.b32",
            AtomicOp::Xor => "xor.b32",
            AtomicOp::Min if signed => "min.s32",
            AtomicOp::Min => "min.u32",
            AtomicOp::Max if signed => "max.s32",
            AtomicOp::Max => "max.u32",
            AtomicOp::Exchange => "exch.b32",
            AtomicOp::CompareExchange => "cas.b32",
        };
        let at = self.address(space, addr)?;
        let pre = self.guard(guard, Some((&d, ty)))?;
        let operands = match cmp {
            Some(c) => format!("{c}, {v}"),
            None => v,
        };
        // atom without .sem and .scope is relaxed at GPU scope.
        self.ins(&format!(
            "{pre}atom.{}.{name} {d}, [{}], {operands};",
            at.space, at.reg
        ));
        Ok(())
    }
}
