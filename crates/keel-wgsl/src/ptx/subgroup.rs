//! Subgroup operations: a subgroup is a warp of 32 lanes, and its active
//! invocations are the lanes of `activemask`, which every `.sync`
//! instruction takes as its member mask.
//!
//! Reductions and scans take a fast path when the whole warp is active
//! (a butterfly of `shfl.sync.bfly`, or a `shfl.sync.up` ladder), and
//! otherwise a loop over the mask's set bits in lane order that reads
//! each active lane with `shfl.sync.idx`: a workgroup smaller than a
//! warp, or divergent code, only combines the lanes that take part. Every
//! active lane runs the same iterations (the mask is the same in each),
//! so the shuffles stay convergent.
//!
//! Values other than 32-bit ones cross lanes as 32-bit words: f16 zero
//! extended, Bool as 0 or 1, U64 as two halves.

use super::{Bank, Emitter, PtxError, Result, mov_ty};
use crate::ir::{Reduce, Reg, SubgroupOp, Ty};

/// Which of reduce, inclusive scan and exclusive scan.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reduce,
    Inclusive,
    Exclusive,
}

impl Emitter<'_> {
    pub(super) fn subgroup(
        &mut self,
        op: SubgroupOp,
        dst: Reg,
        a: Reg,
        b: Option<Reg>,
    ) -> Result<()> {
        let ty = self.ty(a)?;
        let av = self.reg(a)?;
        self.comment(&format!("{dst} = subgroup {op:?} {a}"));
        let mask = self.tmp(Bank::B32);
        self.ins(&format!("activemask.b32 {mask};"));
        let lane_op = |this: &Self| -> Result<String> {
            let b = b.ok_or_else(|| PtxError::new(format!("subgroup {op:?} without a lane")))?;
            this.reg_of(b, Ty::U32, "subgroup lane")
        };
        match op {
            SubgroupOp::All | SubgroupOp::Any => {
                let a = self.reg_of(a, Ty::Bool, "vote operand")?;
                let d = self.reg_of(dst, Ty::Bool, "vote result")?;
                let mode = if op == SubgroupOp::All { "all" } else { "any" };
                self.ins(&format!("vote.sync.{mode}.pred {d}, {a}, {mask};"));
            }
            SubgroupOp::Ballot => {
                let a = self.reg_of(a, Ty::Bool, "ballot operand")?;
                let d = self.reg_of(dst, Ty::U32, "ballot result")?;
                self.ins(&format!("vote.sync.ballot.b32 {d}, {a}, {mask};"));
            }
            SubgroupOp::BroadcastFirst => {
                let d = self.reg_of(dst, ty, "broadcast result")?;
                // The lowest set bit: leading zeros of the reversed mask.
                let lane = self.tmp(Bank::B32);
                self.ins(&format!("brev.b32 {lane}, {mask};"));
                self.ins(&format!("clz.b32 {lane}, {lane};"));
                self.shuffle(ty, "idx", &d, &av, &lane, &mask, None);
            }
            SubgroupOp::Shuffle
            | SubgroupOp::ShuffleDown
            | SubgroupOp::ShuffleUp
            | SubgroupOp::ShuffleXor => {
                let d = self.reg_of(dst, ty, "shuffle result")?;
                let lane = lane_op(self)?;
                let mode = match op {
                    SubgroupOp::Shuffle => "idx",
                    SubgroupOp::ShuffleDown => "down",
                    SubgroupOp::ShuffleUp => "up",
                    _ => "bfly",
                };
                self.shuffle(ty, mode, &d, &av, &lane, &mask, None);
            }
            SubgroupOp::Reduce(r) => self.reduce(Kind::Reduce, r, ty, dst, &av, &mask)?,
            SubgroupOp::InclusiveScan(r) => self.reduce(Kind::Inclusive, r, ty, dst, &av, &mask)?,
            SubgroupOp::ExclusiveScan(r) => self.reduce(Kind::Exclusive, r, ty, dst, &av, &mask)?,
        }
        Ok(())
    }

    /// `d` = `src` of another lane by `shfl.sync.{mode}`, for a value of
    /// type `ty`; `pred` receives whether the source lane was in range.
    /// `src` is read before `d` is written.
    #[allow(clippy::too_many_arguments)]
    fn shuffle(
        &mut self,
        ty: Ty,
        mode: &str,
        d: &str,
        src: &str,
        lane: &str,
        mask: &str,
        pred: Option<&str>,
    ) {
        // The clamp operand: lanes 0..=31, and for `up` the lowest lane.
        let c = if mode == "up" { "0" } else { "0x1f" };
        let p = pred.map(|p| format!("|{p}")).unwrap_or_default();
        match ty {
            Ty::U32 | Ty::I32 | Ty::F32 => {
                self.ins(&format!(
                    "shfl.sync.{mode}.b32 {d}{p}, {src}, {lane}, {c}, {mask};"
                ));
            }
            Ty::F16 | Ty::Bool => {
                let (w, r) = (self.tmp(Bank::B32), self.tmp(Bank::B32));
                if ty == Ty::F16 {
                    self.ins(&format!("cvt.u32.u16 {w}, {src};"));
                } else {
                    self.ins(&format!("selp.u32 {w}, 1, 0, {src};"));
                }
                self.ins(&format!(
                    "shfl.sync.{mode}.b32 {r}{p}, {w}, {lane}, {c}, {mask};"
                ));
                if ty == Ty::F16 {
                    self.ins(&format!("cvt.u16.u32 {d}, {r};"));
                } else {
                    self.ins(&format!("setp.ne.u32 {d}, {r}, 0;"));
                }
            }
            Ty::U64 => {
                let [lo, hi, rlo, rhi] = [(); 4].map(|()| self.tmp(Bank::B32));
                self.ins(&format!("mov.b64 {{{lo}, {hi}}}, {src};"));
                self.ins(&format!(
                    "shfl.sync.{mode}.b32 {rlo}{p}, {lo}, {lane}, {c}, {mask};"
                ));
                self.ins(&format!(
                    "shfl.sync.{mode}.b32 {rhi}, {hi}, {lane}, {c}, {mask};"
                ));
                self.ins(&format!("mov.b64 {d}, {{{rlo}, {rhi}}};"));
            }
        }
    }

    /// `d = x op y` for values of type `ty` (not `Bool`).
    fn combine(&mut self, r: Reduce, ty: Ty, d: &str, x: &str, y: &str) -> Result<()> {
        let bad = || PtxError::new(format!("subgroup {r:?} of {ty:?}"));
        let line = match ty {
            Ty::U32 | Ty::I32 | Ty::U64 => {
                let wide = ty == Ty::U64;
                let (u, b) = if wide { ("u64", "b64") } else { ("u32", "b32") };
                let s = match ty {
                    Ty::I32 => "s32",
                    _ => u,
                };
                match r {
                    Reduce::Add => format!("add.{u} {d}, {x}, {y};"),
                    Reduce::Mul => format!("mul.lo.{u} {d}, {x}, {y};"),
                    Reduce::Min => format!("min.{s} {d}, {x}, {y};"),
                    Reduce::Max => format!("max.{s} {d}, {x}, {y};"),
                    Reduce::And => format!("and.{b} {d}, {x}, {y};"),
                    Reduce::Or => format!("or.{b} {d}, {x}, {y};"),
                    Reduce::Xor => format!("xor.{b} {d}, {x}, {y};"),
                }
            }
            Ty::F32 => match r {
                Reduce::Add => format!("add.rn.f32 {d}, {x}, {y};"),
                Reduce::Mul => format!("mul.rn.f32 {d}, {x}, {y};"),
                Reduce::Min => format!("min.f32 {d}, {x}, {y};"),
                Reduce::Max => format!("max.f32 {d}, {x}, {y};"),
                _ => return Err(bad()),
            },
            Ty::F16 => match r {
                Reduce::Add => format!("add.rn.f16 {d}, {x}, {y};"),
                Reduce::Mul => format!("mul.rn.f16 {d}, {x}, {y};"),
                Reduce::Min | Reduce::Max => {
                    // Exact through f32; min.f16 needs sm_80.
                    let (fx, fy) = (self.tmp(Bank::F32), self.tmp(Bank::F32));
                    self.ins(&format!("cvt.f32.f16 {fx}, {x};"));
                    self.ins(&format!("cvt.f32.f16 {fy}, {y};"));
                    let m = if r == Reduce::Min { "min" } else { "max" };
                    self.ins(&format!("{m}.f32 {fx}, {fx}, {fy};"));
                    format!("cvt.rn.f16.f32 {d}, {fx};")
                }
                _ => return Err(bad()),
            },
            Ty::Bool => return Err(bad()),
        };
        self.ins(&line);
        Ok(())
    }

    /// The identity of `r` on `ty` as an immediate. Float add uses -0.0,
    /// which leaves every value (+0.0 included) unchanged; float min and
    /// max use NaN, which min.f32 and max.f32 drop, so that a reduction
    /// of NaNs alone stays NaN as on the fast path. An exclusive scan's
    /// first lane gets WGSL's identity instead: +0.0, or an infinity.
    fn identity(r: Reduce, ty: Ty, exclusive: bool) -> String {
        let ones = if ty == Ty::U64 {
            "0xFFFFFFFFFFFFFFFF"
        } else {
            "0xFFFFFFFF"
        };
        let s = match (ty, r) {
            (Ty::F32, Reduce::Add) if exclusive => "0f00000000",
            (Ty::F32, Reduce::Add) => "0f80000000",
            (Ty::F32, Reduce::Mul) => "0f3F800000",
            (Ty::F32, Reduce::Min) if exclusive => "0f7F800000",
            (Ty::F32, Reduce::Max) if exclusive => "0fFF800000",
            (Ty::F32, _) => "0f7FFFFFFF",
            (Ty::F16, Reduce::Add) if exclusive => "0x0000",
            (Ty::F16, Reduce::Add) => "0x8000",
            (Ty::F16, Reduce::Mul) => "0x3C00",
            (Ty::F16, Reduce::Min) if exclusive => "0x7C00",
            (Ty::F16, Reduce::Max) if exclusive => "0xFC00",
            (Ty::F16, _) => "0x7E00",
            (_, Reduce::Add | Reduce::Or | Reduce::Xor) => "0",
            (_, Reduce::Mul) => "1",
            (_, Reduce::And) => ones,
            (Ty::I32, Reduce::Min) => "0x7FFFFFFF",
            (Ty::I32, Reduce::Max) => "0x80000000",
            (_, Reduce::Min) => ones,
            (_, Reduce::Max) => "0",
        };
        s.to_string()
    }

    fn reduce(
        &mut self,
        kind: Kind,
        r: Reduce,
        ty: Ty,
        dst: Reg,
        a: &str,
        mask: &str,
    ) -> Result<()> {
        let d = self.reg_of(dst, ty, "subgroup result")?;
        if ty == Ty::Bool && kind == Kind::Reduce {
            match r {
                Reduce::And | Reduce::Min | Reduce::Mul => {
                    self.ins(&format!("vote.sync.all.pred {d}, {a}, {mask};"));
                }
                Reduce::Or | Reduce::Max => {
                    self.ins(&format!("vote.sync.any.pred {d}, {a}, {mask};"));
                }
                Reduce::Xor | Reduce::Add => {
                    let t = self.tmp(Bank::B32);
                    self.ins(&format!("vote.sync.ballot.b32 {t}, {a}, {mask};"));
                    self.ins(&format!("popc.b32 {t}, {t};"));
                    self.ins(&format!("and.b32 {t}, {t}, 1;"));
                    self.ins(&format!("setp.ne.u32 {d}, {t}, 0;"));
                }
            }
            return Ok(());
        }
        // Bool scans run on 0 and 1, where and, or and xor agree with the
        // logical operations.
        let (wt, value) = if ty == Ty::Bool {
            let w = self.tmp(Bank::B32);
            self.ins(&format!("selp.u32 {w}, 1, 0, {a};"));
            (Ty::U32, w)
        } else {
            (ty, a.to_string())
        };
        let mv = mov_ty(wt);
        let n = self.fresh_label();
        let (partial, done) = (format!("$L{n}_partial"), format!("$L{n}_done"));
        let res = self.tmp_of(wt);
        let full = self.tmp(Bank::Pred);
        self.ins(&format!("setp.ne.u32 {full}, {mask}, 0xFFFFFFFF;"));
        self.ins(&format!("@{full} bra {partial};"));

        // Every lane active.
        let acc = self.tmp_of(wt);
        let v = self.tmp_of(wt);
        self.ins(&format!("mov.{mv} {acc}, {value};"));
        if kind == Kind::Reduce {
            // Butterfly: both lanes of a pair combine the same two values,
            // so every lane ends with the same bits.
            for k in [16, 8, 4, 2, 1] {
                self.shuffle(wt, "bfly", &v, &acc, &k.to_string(), mask, None);
                self.combine(r, wt, &acc, &acc, &v)?;
            }
            self.ins(&format!("mov.{mv} {res}, {acc};"));
        } else {
            let (t, p) = (self.tmp_of(wt), self.tmp(Bank::Pred));
            for k in [1, 2, 4, 8, 16] {
                self.shuffle(wt, "up", &v, &acc, &k.to_string(), mask, Some(&p));
                self.combine(r, wt, &t, &v, &acc)?;
                self.ins(&format!("@{p} mov.{mv} {acc}, {t};"));
            }
            if kind == Kind::Inclusive {
                self.ins(&format!("mov.{mv} {res}, {acc};"));
            } else {
                self.shuffle(wt, "up", &v, &acc, "1", mask, Some(&p));
                let id = Self::identity(r, wt, true);
                self.ins(&format!("mov.{mv} {res}, {id};"));
                self.ins(&format!("@{p} mov.{mv} {res}, {v};"));
            }
        }
        self.ins(&format!("bra {done};"));

        // Some lanes inactive: combine the active ones in lane order.
        self.label(&partial);
        let rest = self.tmp(Bank::B32);
        let src = self.tmp(Bank::B32);
        let more = self.tmp(Bank::Pred);
        let id = Self::identity(r, wt, kind == Kind::Exclusive);
        self.ins(&format!("mov.b32 {rest}, {mask};"));
        self.ins(&format!("mov.{mv} {acc}, {id};"));
        let lane = self.tmp(Bank::B32);
        if kind != Kind::Reduce {
            self.ins(&format!("mov.u32 {lane}, %laneid;"));
        }
        let next = format!("$L{n}_next");
        self.label(&next);
        self.ins(&format!("brev.b32 {src}, {rest};"));
        self.ins(&format!("clz.b32 {src}, {src};"));
        self.shuffle(wt, "idx", &v, &value, &src, mask, None);
        let t = self.tmp_of(wt);
        self.combine(r, wt, &t, &acc, &v)?;
        match kind {
            Kind::Reduce => self.ins(&format!("mov.{mv} {acc}, {t};")),
            Kind::Inclusive | Kind::Exclusive => {
                let cmp = if kind == Kind::Inclusive { "le" } else { "lt" };
                let p = self.tmp(Bank::Pred);
                self.ins(&format!("setp.{cmp}.u32 {p}, {src}, {lane};"));
                self.ins(&format!("@{p} mov.{mv} {acc}, {t};"));
            }
        }
        // Clear the lowest set bit.
        self.ins(&format!("add.u32 {src}, {rest}, -1;"));
        self.ins(&format!("and.b32 {rest}, {rest}, {src};"));
        self.ins(&format!("setp.ne.u32 {more}, {rest}, 0;"));
        self.ins(&format!("@{more} bra {next};"));
        self.ins(&format!("mov.{mv} {res}, {acc};"));
        self.label(&done);
        if ty == Ty::Bool {
            self.ins(&format!("setp.ne.u32 {d}, {res}, 0;"));
        } else {
            self.ins(&format!("mov.{mv} {d}, {res};"));
        }
        Ok(())
    }
}
