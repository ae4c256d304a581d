//! Functions, statements and expressions.

use naga::{
    BinaryOperator as B, Expression as E, Function, Handle, Module, Statement as S, TypeInner,
    UnaryOperator,
};

use super::build::Builder;
use super::shape::{Shape, column_stride};
use super::{CompileError, GlobalPlace, Globals, Result, err, round_up, scalar_ty};
use crate::ir::{
    AtomicOp, Axis, BinOp, Builtin, Inst, Needs, Reduce, Reg, Space, Stmt, SubgroupOp, Ty, UnOp,
};

/// A lowered expression.
#[derive(Clone, Debug)]
pub(super) enum Value {
    /// Its leaves.
    Regs(Vec<Reg>),
    /// A pointer.
    Ptr(Ptr),
}

#[derive(Clone, Debug)]
pub(super) struct Ptr {
    shape: Shape,
    place: Place,
}

#[derive(Clone, Debug)]
enum Place {
    /// Registers holding the pointee's leaves (a local in registers).
    Regs(Vec<Reg>),
    /// Memory: the pointee starts at byte `offset`; its root variable ends
    /// at `end` (same type as `offset`), and `guard` is what else must
    /// hold for the access to happen (an index was not negative).
    Mem {
        space: Space,
        offset: Reg,
        end: Reg,
        guard: Option<Reg>,
    },
    /// The parameter block, at a constant byte offset.
    Param(u32),
}

/// What `break` leaves.
enum Breakable {
    Loop,
    Switch(u32),
}

/// Where a local variable lives.
#[derive(Clone)]
enum Local {
    Regs(Vec<Reg>),
    Mem(u32),
}

pub(super) struct State<'a> {
    module: &'a Module,
    info: &'a naga::valid::ModuleInfo,
    globals: &'a Globals,
    b: &'a mut Builder,
    needs: &'a mut Needs,
    private_bytes: u32,
    workgroup_size: [u32; 3],
    /// Inlining depth, against runaway recursion (WGSL has none).
    depth: u32,
}

struct Ctx<'f> {
    fun: &'f Function,
    finfo: &'f naga::valid::FunctionInfo,
    values: Vec<Option<Value>>,
    locals: Vec<Local>,
    args: Vec<Value>,
    /// For an inlined function: its block and the result's registers.
    ret: Option<(u32, Vec<Reg>)>,
    breakables: Vec<Breakable>,
    /// The span of the statement being lowered, for errors.
    span: naga::Span,
}

pub(super) fn lower_entry(
    module: &Module,
    finfo: &naga::valid::FunctionInfo,
    info: &naga::valid::ModuleInfo,
    ep: &naga::EntryPoint,
    globals: &Globals,
    b: &mut Builder,
    needs: &mut Needs,
) -> Result<u32> {
    let mut st = State {
        module,
        info,
        globals,
        b,
        needs,
        private_bytes: globals.private_bytes,
        workgroup_size: ep.workgroup_size,
        depth: 0,
    };
    // Module-scope initializers.
    for (h, var) in module.global_variables.iter() {
        if let (GlobalPlace::Private(off, _), Some(init)) = (globals.places[h.index()], var.init) {
            let shape = Shape::of(module, var.ty)?;
            let v = st.const_expr(init)?;
            let offset = st.b.u32(off);
            let end = st.b.u32(off + shape.size());
            st.store(
                &Ptr {
                    shape,
                    place: Place::Mem {
                        space: Space::Private,
                        offset,
                        end,
                        guard: None,
                    },
                },
                &v,
            )?;
        }
    }
    let mut args = Vec::new();
    for arg in &ep.function.arguments {
        args.push(st.entry_argument(arg)?);
    }
    st.inline(&ep.function, finfo, args, true)?;
    // Private memory grows as functions are inlined.
    Ok(st.private_bytes)
}

impl State<'_> {
    fn entry_argument(&mut self, arg: &naga::FunctionArgument) -> Result<Value> {
        match &arg.binding {
            Some(naga::Binding::BuiltIn(bi)) => self.builtin_value(*bi),
            Some(naga::Binding::Location { .. }) => {
                err("a @location argument in a compute entry point")
            }
            None => {
                let TypeInner::Struct { members, .. } = &self.module.types[arg.ty].inner else {
                    return err("an entry point argument without a built-in");
                };
                let mut regs = Vec::new();
                for m in members {
                    match &m.binding {
                        Some(naga::Binding::BuiltIn(bi)) => match self.builtin_value(*bi)? {
                            Value::Regs(r) => regs.extend(r),
                            Value::Ptr(_) => return err("a built-in pointer"),
                        },
                        _ => return err("an entry point struct member without a built-in"),
                    }
                }
                Ok(Value::Regs(regs))
            }
        }
    }

    fn builtin_value(&mut self, bi: naga::BuiltIn) -> Result<Value> {
        use naga::BuiltIn as BI;
        let axes = [Axis::X, Axis::Y, Axis::Z];
        let regs = match bi {
            BI::LocalInvocationId => axes
                .iter()
                .map(|&a| self.b.builtin(Builtin::LocalId(a)))
                .collect(),
            BI::WorkGroupId => axes
                .iter()
                .map(|&a| self.b.builtin(Builtin::GroupId(a)))
                .collect(),
            BI::NumWorkGroups => axes
                .iter()
                .map(|&a| self.b.builtin(Builtin::NumGroups(a)))
                .collect(),
            BI::WorkGroupSize => self.workgroup_size.iter().map(|&n| self.b.u32(n)).collect(),
            BI::GlobalInvocationId => {
                let mut v = Vec::new();
                for (i, &a) in axes.iter().enumerate() {
                    let g = self.b.builtin(Builtin::GroupId(a));
                    let l = self.b.builtin(Builtin::LocalId(a));
                    let n = self.b.u32(self.workgroup_size[i]);
                    let base = self.b.bin(BinOp::Mul, g, n);
                    v.push(self.b.bin(BinOp::Add, base, l));
                }
                v
            }
            BI::LocalInvocationIndex => vec![self.local_index()],
            BI::SubgroupSize => {
                self.needs.subgroups = true;
                vec![self.b.builtin(Builtin::SubgroupSize)]
            }
            BI::SubgroupInvocationId => {
                self.needs.subgroups = true;
                vec![self.b.builtin(Builtin::SubgroupInvocationId)]
            }
            BI::SubgroupId => {
                self.needs.subgroups = true;
                let i = self.local_index();
                let n = self.b.builtin(Builtin::SubgroupSize);
                vec![self.b.bin(BinOp::Div, i, n)]
            }
            BI::NumSubgroups => {
                self.needs.subgroups = true;
                let total: u32 = self.workgroup_size.iter().product();
                let t = self.b.u32(total);
                let n = self.b.builtin(Builtin::SubgroupSize);
                let one = self.b.u32(1);
                let nm1 = self.b.bin(BinOp::Sub, n, one);
                let s = self.b.bin(BinOp::Add, t, nm1);
                vec![self.b.bin(BinOp::Div, s, n)]
            }
            other => return err(format!("built-in {other:?} in a compute kernel")),
        };
        Ok(Value::Regs(regs))
    }

    fn local_index(&mut self) -> Reg {
        let [wx, wy, _] = self.workgroup_size;
        let x = self.b.builtin(Builtin::LocalId(Axis::X));
        let y = self.b.builtin(Builtin::LocalId(Axis::Y));
        let z = self.b.builtin(Builtin::LocalId(Axis::Z));
        let nx = self.b.u32(wx);
        let nxy = self.b.u32(wx * wy);
        let yx = self.b.bin(BinOp::Mul, y, nx);
        let zxy = self.b.bin(BinOp::Mul, z, nxy);
        let s = self.b.bin(BinOp::Add, x, yx);
        self.b.bin(BinOp::Add, s, zxy)
    }

    /// Evaluates a module-scope constant expression.
    fn const_expr(&mut self, h: Handle<naga::Expression>) -> Result<Value> {
        let module = self.module;
        match &module.global_expressions[h] {
            E::Literal(l) => Ok(Value::Regs(vec![self.literal(l)?])),
            E::Constant(c) => self.const_expr(module.constants[*c].init),
            E::ZeroValue(ty) => self.zero(&Shape::of(module, *ty)?),
            E::Compose { components, .. } => {
                let mut regs = Vec::new();
                for &c in components {
                    regs.extend(self.const_expr(c)?.regs()?);
                }
                Ok(Value::Regs(regs))
            }
            E::Splat { size, value } => {
                let r = self.const_expr(*value)?.regs()?;
                Ok(Value::Regs(
                    (0..*size as u32).flat_map(|_| r.iter().copied()).collect(),
                ))
            }
            other => err(format!("constant expression {other:?} is not supported")),
        }
    }

    fn literal(&mut self, l: &naga::Literal) -> Result<Reg> {
        use naga::Literal as L;
        Ok(match *l {
            L::F32(v) => self.b.f32(v),
            L::F16(v) => self.b.konst(Ty::F16, u64::from(v.to_bits())),
            L::U32(v) => self.b.u32(v),
            L::I32(v) => self.b.konst(Ty::I32, v as u32 as u64),
            L::Bool(v) => self.b.boolean(v),
            ref other => {
                return err(format!(
                    "literal {other:?}: 64-bit and 16-bit integers are not supported"
                ));
            }
        })
    }

    fn zero(&mut self, shape: &Shape) -> Result<Value> {
        let mut tys = Vec::new();
        shape.leaves(&mut tys)?;
        Ok(Value::Regs(
            tys.into_iter().map(|t| self.b.konst(t, 0)).collect(),
        ))
    }

    /// Inlines `fun` with `args`; returns its result's registers.
    fn inline(
        &mut self,
        fun: &Function,
        finfo: &naga::valid::FunctionInfo,
        args: Vec<Value>,
        entry: bool,
    ) -> Result<Option<Vec<Reg>>> {
        self.depth += 1;
        if self.depth > 64 {
            return err("function calls nest deeper than 64");
        }
        let mut ctx = Ctx {
            fun,
            finfo,
            values: vec![None; fun.expressions.len()],
            locals: Vec::new(),
            args,
            ret: None,
            breakables: Vec::new(),
            span: naga::Span::default(),
        };
        let result = match &fun.result {
            Some(r) if !entry => {
                let shape = Shape::of(self.module, r.ty)?;
                let mut tys = Vec::new();
                shape.leaves(&mut tys)?;
                Some(tys.into_iter().map(|t| self.b.reg(t)).collect::<Vec<_>>())
            }
            _ => None,
        };
        let block = self.b.block_id();
        if !entry {
            ctx.ret = Some((block, result.clone().unwrap_or_default()));
        }
        self.b.open();
        let r = self
            .declare_locals(&mut ctx, entry)
            .and_then(|_| self.block(&mut ctx, &fun.body));
        let body = self.b.close();
        r.map_err(|mut e| {
            if e.span.is_none() {
                e.span = Some(ctx.span);
            }
            e
        })?;
        self.b.stmt(Stmt::Block { id: block, body });
        self.depth -= 1;
        Ok(result)
    }

    fn declare_locals(&mut self, ctx: &mut Ctx<'_>, entry: bool) -> Result<()> {
        let in_memory = locals_indexed_at_run_time(ctx.fun, ctx.finfo, self.module);
        for (h, var) in ctx.fun.local_variables.iter() {
            let shape = Shape::of(self.module, var.ty)?;
            let init = match var.init {
                Some(e) => Some(self.expr(ctx, e)?),
                None => None,
            };
            if in_memory[h.index()] {
                let align = super::alignment(self.module, var.ty).max(4);
                let off = round_up(self.private_bytes, align);
                self.private_bytes = off + shape.size();
                ctx.locals.push(Local::Mem(off));
                let ptr = self.local_ptr(ctx, h.index())?;
                match init {
                    Some(v) => self.store(&ptr, &v)?,
                    // Private memory starts zeroed; a function inlined
                    // again (in a loop) must zero its locals itself.
                    None if !entry => {
                        let z = self.zero(&shape)?;
                        self.store(&ptr, &z)?;
                    }
                    None => {}
                }
            } else {
                let mut tys = Vec::new();
                shape.leaves(&mut tys)?;
                let regs: Vec<Reg> = tys.iter().map(|&t| self.b.reg(t)).collect();
                let src = match init {
                    Some(v) => v.regs()?,
                    None => self.zero(&shape)?.regs()?,
                };
                for (&d, &s) in regs.iter().zip(&src) {
                    self.b.inst(Inst::Mov { dst: d, src: s });
                }
                ctx.locals.push(Local::Regs(regs));
            }
        }
        Ok(())
    }

    fn local_ptr(&mut self, ctx: &Ctx<'_>, i: usize) -> Result<Ptr> {
        let Some((_, var)) = ctx.fun.local_variables.iter().nth(i) else {
            return err(format!("local variable {i} missing"));
        };
        let shape = Shape::of(self.module, var.ty)?;
        Ok(match &ctx.locals[i] {
            Local::Regs(r) => Ptr {
                shape,
                place: Place::Regs(r.clone()),
            },
            Local::Mem(off) => {
                let offset = self.b.u32(*off);
                let end = self.b.u32(off + shape.size());
                Ptr {
                    shape,
                    place: Place::Mem {
                        space: Space::Private,
                        offset,
                        end,
                        guard: None,
                    },
                }
            }
        })
    }

    fn block(&mut self, ctx: &mut Ctx<'_>, block: &naga::Block) -> Result<()> {
        for (s, span) in block.span_iter() {
            ctx.span = *span;
            self.statement(ctx, s)?;
        }
        Ok(())
    }

    fn nested_block(&mut self, ctx: &mut Ctx<'_>, block: &naga::Block) -> Result<Vec<Stmt>> {
        self.b.open();
        let r = self.block(ctx, block);
        let list = self.b.close();
        r.map(|_| list)
    }

    fn statement(&mut self, ctx: &mut Ctx<'_>, s: &S) -> Result<()> {
        match s {
            S::Emit(range) => {
                for h in range.clone() {
                    let v = self.eval(ctx, h)?;
                    ctx.values[h.index()] = Some(v);
                }
            }
            S::Block(b) => self.block(ctx, b)?,
            S::If {
                condition,
                accept,
                reject,
            } => {
                let cond = self.scalar(ctx, *condition)?;
                let then = self.nested_block(ctx, accept)?;
                let els = self.nested_block(ctx, reject)?;
                self.b.stmt(Stmt::If { cond, then, els });
            }
            S::Switch { selector, cases } => self.switch(ctx, *selector, cases)?,
            S::Loop {
                body,
                continuing,
                break_if,
            } => {
                ctx.breakables.push(Breakable::Loop);
                let body = self.nested_block(ctx, body)?;
                self.b.open();
                let r = self.block(ctx, continuing).and_then(|_| match break_if {
                    Some(h) => self.scalar(ctx, *h).map(Some),
                    None => Ok(None),
                });
                let cont = self.b.close();
                let brk = r?;
                ctx.breakables.pop();
                self.b.stmt(Stmt::Loop {
                    body,
                    continuing: cont,
                    break_if: brk,
                });
            }
            S::Break => match ctx.breakables.last() {
                Some(Breakable::Loop) => self.b.stmt(Stmt::Break),
                Some(Breakable::Switch(id)) => {
                    let id = *id;
                    self.b.stmt(Stmt::Leave(id));
                }
                None => return err("`break` outside a loop or switch"),
            },
            S::Continue => self.b.stmt(Stmt::Continue),
            S::Return { value } => match &ctx.ret {
                None => self.b.stmt(Stmt::Return),
                Some((block, regs)) => {
                    let (block, regs) = (*block, regs.clone());
                    if let Some(v) = value {
                        let src = self.regs(ctx, *v)?;
                        for (&d, &s) in regs.iter().zip(&src) {
                            self.b.inst(Inst::Mov { dst: d, src: s });
                        }
                    }
                    self.b.stmt(Stmt::Leave(block));
                }
            },
            S::Kill => return err("`discard` in a compute kernel"),
            S::ControlBarrier(bar) => {
                if bar.contains(naga::Barrier::SUB_GROUP) {
                    return err("`subgroupBarrier` is not supported");
                }
                if bar.contains(naga::Barrier::TEXTURE) {
                    return err("`textureBarrier` is not supported");
                }
                self.b.stmt(Stmt::Barrier {
                    workgroup: bar.contains(naga::Barrier::WORK_GROUP),
                    storage: bar.contains(naga::Barrier::STORAGE),
                });
            }
            S::MemoryBarrier(bar) => {
                // A memory-only barrier orders at least as much as a full
                // one; the ends have only the full one.
                self.b.stmt(Stmt::Barrier {
                    workgroup: bar.contains(naga::Barrier::WORK_GROUP),
                    storage: bar.contains(naga::Barrier::STORAGE),
                });
            }
            S::Store { pointer, value } => {
                let p = self.ptr(ctx, *pointer)?;
                let v = self.expr(ctx, *value)?;
                self.store(&p, &v)?;
            }
            S::Atomic {
                pointer,
                fun,
                value,
                result,
            } => self.atomic(ctx, *pointer, fun, *value, *result)?,
            S::WorkGroupUniformLoad { pointer, result } => {
                self.b.stmt(Stmt::Barrier {
                    workgroup: true,
                    storage: false,
                });
                let p = self.ptr(ctx, *pointer)?;
                let v = self.load(&p)?;
                self.b.stmt(Stmt::Barrier {
                    workgroup: true,
                    storage: false,
                });
                ctx.values[result.index()] = Some(v);
            }
            S::Call {
                function,
                arguments,
                result,
            } => {
                let mut args = Vec::new();
                for &a in arguments {
                    args.push(self.expr(ctx, a)?);
                }
                let module = self.module;
                let info = self.info;
                let callee = &module.functions[*function];
                let out = self.inline(callee, &info[*function], args, false)?;
                if let (Some(h), Some(regs)) = (result, out) {
                    // A copy: the callee's registers are written again by
                    // the next call.
                    let regs = regs.iter().map(|&r| self.b.mov(r)).collect();
                    ctx.values[h.index()] = Some(Value::Regs(regs));
                }
            }
            S::SubgroupBallot { result, predicate } => {
                self.needs.subgroups = true;
                let p = match predicate {
                    Some(p) => self.scalar(ctx, *p)?,
                    None => self.b.boolean(true),
                };
                let dst = self.b.reg(Ty::U32);
                self.b.inst(Inst::Subgroup {
                    op: SubgroupOp::Ballot,
                    dst,
                    a: p,
                    b: None,
                });
                let z = self.b.u32(0);
                ctx.values[result.index()] = Some(Value::Regs(vec![dst, z, z, z]));
            }
            S::SubgroupGather {
                mode,
                argument,
                result,
            } => {
                self.needs.subgroups = true;
                let (op, lane) = match mode {
                    naga::GatherMode::BroadcastFirst => (SubgroupOp::BroadcastFirst, None),
                    naga::GatherMode::Broadcast(h) | naga::GatherMode::Shuffle(h) => {
                        (SubgroupOp::Shuffle, Some(*h))
                    }
                    naga::GatherMode::ShuffleDown(h) => (SubgroupOp::ShuffleDown, Some(*h)),
                    naga::GatherMode::ShuffleUp(h) => (SubgroupOp::ShuffleUp, Some(*h)),
                    naga::GatherMode::ShuffleXor(h) => (SubgroupOp::ShuffleXor, Some(*h)),
                    other => return err(format!("subgroup operation {other:?} is not supported")),
                };
                let lane = match lane {
                    Some(h) => Some(self.scalar(ctx, h)?),
                    None => None,
                };
                let lane = lane.map(|l| self.b.bitcast(l, Ty::U32));
                let src = self.regs(ctx, *argument)?;
                let mut out = Vec::new();
                for a in src {
                    let dst = self.b.reg(self.b.ty(a));
                    self.b.inst(Inst::Subgroup {
                        op,
                        dst,
                        a,
                        b: lane,
                    });
                    out.push(dst);
                }
                ctx.values[result.index()] = Some(Value::Regs(out));
            }
            S::SubgroupCollectiveOperation {
                op,
                collective_op,
                argument,
                result,
            } => {
                self.needs.subgroups = true;
                use naga::SubgroupOperation as O;
                let red = match op {
                    O::All | O::Any => None,
                    O::Add => Some(Reduce::Add),
                    O::Mul => Some(Reduce::Mul),
                    O::Min => Some(Reduce::Min),
                    O::Max => Some(Reduce::Max),
                    O::And => Some(Reduce::And),
                    O::Or => Some(Reduce::Or),
                    O::Xor => Some(Reduce::Xor),
                };
                let sop = match (op, red, collective_op) {
                    (O::All, _, _) => SubgroupOp::All,
                    (O::Any, _, _) => SubgroupOp::Any,
                    (_, Some(r), naga::CollectiveOperation::Reduce) => SubgroupOp::Reduce(r),
                    (_, Some(r), naga::CollectiveOperation::InclusiveScan) => {
                        SubgroupOp::InclusiveScan(r)
                    }
                    (_, Some(r), naga::CollectiveOperation::ExclusiveScan) => {
                        SubgroupOp::ExclusiveScan(r)
                    }
                    _ => return err("subgroup operation"),
                };
                let src = self.regs(ctx, *argument)?;
                let mut out = Vec::new();
                for a in src {
                    let dst = self.b.reg(self.b.ty(a));
                    self.b.inst(Inst::Subgroup {
                        op: sop,
                        dst,
                        a,
                        b: None,
                    });
                    out.push(dst);
                }
                ctx.values[result.index()] = Some(Value::Regs(out));
            }
            S::ImageStore { .. } | S::ImageAtomic { .. } => {
                return err("textures are not supported in compute kernels here");
            }
            S::RayQuery { .. } | S::RayPipelineFunction(_) => {
                return err("ray queries are not supported");
            }
            S::CooperativeStore { .. } => {
                return err("cooperative matrices are not supported");
            }
        }
        Ok(())
    }

    fn switch(
        &mut self,
        ctx: &mut Ctx<'_>,
        selector: Handle<naga::Expression>,
        cases: &[naga::SwitchCase],
    ) -> Result<()> {
        let sel = self.scalar(ctx, selector)?;
        let id = self.b.block_id();
        ctx.breakables.push(Breakable::Switch(id));
        self.b.open();
        let r = self.switch_cases(ctx, sel, id, cases);
        let body = self.b.close();
        r?;
        ctx.breakables.pop();
        self.b.stmt(Stmt::Block { id, body });
        Ok(())
    }

    fn switch_cases(
        &mut self,
        ctx: &mut Ctx<'_>,
        sel: Reg,
        id: u32,
        cases: &[naga::SwitchCase],
    ) -> Result<()> {
        let mut matches = Vec::new();
        for c in cases {
            matches.push(match c.value {
                naga::SwitchValue::I32(v) => {
                    let v = self.b.konst(Ty::I32, v as u32 as u64);
                    Some(self.b.bin(BinOp::Eq, sel, v))
                }
                naga::SwitchValue::U32(v) => {
                    let v = self.b.u32(v);
                    Some(self.b.bin(BinOp::Eq, sel, v))
                }
                naga::SwitchValue::Default => None,
            });
        }
        // `default` runs where no value matched.
        let mut none = self.b.boolean(true);
        for m in matches.iter().flatten() {
            let n = self.b.un(UnOp::Not, *m);
            none = self.b.bin(BinOp::And, none, n);
        }
        // `taken` accumulates over fall-through cases.
        let f = self.b.boolean(false);
        let taken = self.b.mov(f);
        for (c, m) in cases.iter().zip(&matches) {
            let m = m.unwrap_or(none);
            self.b.inst(Inst::Bin {
                op: BinOp::Or,
                dst: taken,
                a: taken,
                b: m,
            });
            let mut then = self.nested_block(ctx, &c.body)?;
            if !c.fall_through {
                then.push(Stmt::Leave(id));
            }
            self.b.stmt(Stmt::If {
                cond: taken,
                then,
                els: Vec::new(),
            });
        }
        Ok(())
    }

    /// The value of `h`: evaluated at its `Emit`, or now for the
    /// expressions naga never emits: leaves, and constant expressions built
    /// from them (`Wide(0u, 0)` in a function body), which gather registers
    /// without emitting an instruction, so evaluating them where first used
    /// defines nothing that another path would miss.
    fn expr(&mut self, ctx: &mut Ctx<'_>, h: Handle<naga::Expression>) -> Result<Value> {
        if let Some(v) = &ctx.values[h.index()] {
            return Ok(v.clone());
        }
        match &ctx.fun.expressions[h] {
            E::Literal(_)
            | E::Constant(_)
            | E::ZeroValue(_)
            | E::GlobalVariable(_)
            | E::LocalVariable(_)
            | E::FunctionArgument(_)
            | E::Compose { .. }
            | E::Splat { .. }
            | E::Swizzle { .. } => {
                let v = self.eval(ctx, h)?;
                ctx.values[h.index()] = Some(v.clone());
                Ok(v)
            }
            other => err(format!(
                "expression {:?} used before it is computed",
                std::mem::discriminant(other)
            )),
        }
    }

    fn regs(&mut self, ctx: &mut Ctx<'_>, h: Handle<naga::Expression>) -> Result<Vec<Reg>> {
        self.expr(ctx, h)?.regs()
    }

    fn scalar(&mut self, ctx: &mut Ctx<'_>, h: Handle<naga::Expression>) -> Result<Reg> {
        let r = self.regs(ctx, h)?;
        match r.as_slice() {
            [x] => Ok(*x),
            _ => err("expected a scalar"),
        }
    }

    fn ptr(&mut self, ctx: &mut Ctx<'_>, h: Handle<naga::Expression>) -> Result<Ptr> {
        match self.expr(ctx, h)? {
            Value::Ptr(p) => Ok(p),
            Value::Regs(_) => err("expected a pointer"),
        }
    }

    fn type_of<'m>(&'m self, ctx: &'m Ctx<'_>, h: Handle<naga::Expression>) -> &'m TypeInner {
        ctx.finfo[h].ty.inner_with(&self.module.types)
    }

    fn shape_of(&self, ctx: &Ctx<'_>, h: Handle<naga::Expression>) -> Result<Shape> {
        Shape::of_inner(self.module, self.type_of(ctx, h))
    }

    fn eval(&mut self, ctx: &mut Ctx<'_>, h: Handle<naga::Expression>) -> Result<Value> {
        let module = self.module;
        let e = &ctx.fun.expressions[h];
        if let Some(span) = Some(ctx.fun.expressions.get_span(h)).filter(|s| s.is_defined()) {
            ctx.span = span;
        }
        Ok(match e {
            E::Literal(l) => Value::Regs(vec![self.literal(l)?]),
            E::Constant(c) => self.const_expr(module.constants[*c].init)?,
            E::Override(_) => return err("pipeline-overridable constants are not supported"),
            E::ZeroValue(ty) => self.zero(&Shape::of(module, *ty)?)?,
            E::Compose { components, .. } => {
                let mut regs = Vec::new();
                for &c in components {
                    regs.extend(self.regs(ctx, c)?);
                }
                Value::Regs(regs)
            }
            E::Splat { size, value } => {
                let r = self.scalar(ctx, *value)?;
                Value::Regs(vec![r; *size as usize])
            }
            E::Swizzle {
                size,
                vector,
                pattern,
            } => {
                let v = self.regs(ctx, *vector)?;
                Value::Regs(
                    pattern[..*size as usize]
                        .iter()
                        .map(|c| v[*c as usize])
                        .collect(),
                )
            }
            E::FunctionArgument(i) => {
                ctx.args
                    .get(*i as usize)
                    .cloned()
                    .ok_or_else(|| CompileError {
                        message: format!("argument {i} missing"),
                        location: None,
                        span: None,
                    })?
            }
            E::GlobalVariable(g) => self.global_ptr(*g)?,
            E::LocalVariable(l) => Value::Ptr(self.local_ptr(ctx, l.index())?),
            E::Load { pointer } => {
                let p = self.ptr(ctx, *pointer)?;
                self.load(&p)?
            }
            E::AccessIndex { base, index } => match self.expr(ctx, *base)? {
                Value::Ptr(p) => Value::Ptr(self.ptr_index(&p, *index)?),
                Value::Regs(regs) => {
                    let shape = self.shape_of(ctx, *base)?;
                    let (el, first, _) = shape.element(*index)?;
                    let n = el.count()?;
                    Value::Regs(regs[first..first + n].to_vec())
                }
            },
            E::Access { base, index } => {
                let i = self.scalar(ctx, *index)?;
                match self.expr(ctx, *base)? {
                    Value::Ptr(p) => Value::Ptr(self.ptr_dynamic(&p, i)?),
                    Value::Regs(regs) => {
                        let shape = self.shape_of(ctx, *base)?;
                        self.value_dynamic(&shape, &regs, i)?
                    }
                }
            }
            E::Unary { op, expr } => {
                let v = self.regs(ctx, *expr)?;
                let op = match op {
                    UnaryOperator::Negate => UnOp::Neg,
                    UnaryOperator::LogicalNot | UnaryOperator::BitwiseNot => UnOp::Not,
                };
                Value::Regs(v.into_iter().map(|r| self.b.un(op, r)).collect())
            }
            E::Binary { op, left, right } => {
                let (ls, rs) = (self.shape_of(ctx, *left)?, self.shape_of(ctx, *right)?);
                let (l, r) = (self.regs(ctx, *left)?, self.regs(ctx, *right)?);
                Value::Regs(self.binary(*op, &ls, &l, &rs, &r)?)
            }
            E::Select {
                condition,
                accept,
                reject,
            } => {
                let c = self.regs(ctx, *condition)?;
                let a = self.regs(ctx, *accept)?;
                let r = self.regs(ctx, *reject)?;
                Value::Regs(
                    a.iter()
                        .zip(&r)
                        .enumerate()
                        .map(|(i, (&a, &r))| {
                            let c = if c.len() == 1 { c[0] } else { c[i] };
                            self.b.select(c, a, r)
                        })
                        .collect(),
                )
            }
            E::Relational { fun, argument } => {
                let v = self.regs(ctx, *argument)?;
                Value::Regs(self.relational(*fun, &v)?)
            }
            E::Math {
                fun,
                arg,
                arg1,
                arg2,
                arg3,
            } => {
                let shape = self.shape_of(ctx, *arg)?;
                let mut args = vec![self.regs(ctx, *arg)?];
                let mut shapes = vec![shape];
                for a in [arg1, arg2, arg3].into_iter().flatten() {
                    shapes.push(self.shape_of(ctx, *a)?);
                    args.push(self.regs(ctx, *a)?);
                }
                Value::Regs(self.math(*fun, &shapes, &args)?)
            }
            E::As {
                expr,
                kind,
                convert,
            } => {
                let v = self.regs(ctx, *expr)?;
                let mut out = Vec::new();
                for r in v {
                    let from = self.b.ty(r);
                    let width = convert.unwrap_or(from.bytes() as u8);
                    let to = scalar_ty(naga::Scalar {
                        kind: *kind,
                        width: if *kind == naga::ScalarKind::Bool {
                            naga::BOOL_WIDTH
                        } else {
                            width
                        },
                    })?;
                    out.push(match convert {
                        Some(_) => self.b.value_convert(r, to),
                        None => self.b.bitcast(r, to),
                    });
                }
                Value::Regs(out)
            }
            E::ArrayLength(p) => {
                let p = self.ptr(ctx, *p)?;
                let (Shape::Array { stride, .. }, Place::Mem { offset, end, .. }) =
                    (&p.shape, &p.place)
                else {
                    return err("arrayLength of something other than a runtime-sized array");
                };
                let rest = self.b.bin(BinOp::Sub, *end, *offset);
                let s = self.b.u64(u64::from(*stride));
                let n = self.b.bin(BinOp::Div, rest, s);
                Value::Regs(vec![self.b.convert(n, Ty::U32)])
            }
            E::CallResult(_)
            | E::AtomicResult { .. }
            | E::WorkGroupUniformLoadResult { .. }
            | E::SubgroupBallotResult
            | E::SubgroupOperationResult { .. } => {
                return err("a result used before its statement");
            }
            E::ImageSample { .. } | E::ImageLoad { .. } | E::ImageQuery { .. } => {
                return err("textures are not supported in compute kernels here");
            }
            E::Derivative { .. } => return err("derivatives exist only in fragment shaders"),
            E::RayQueryVertexPositions { .. }
            | E::RayQueryProceedResult
            | E::RayQueryGetIntersection { .. } => return err("ray queries are not supported"),
            E::CooperativeLoad { .. } | E::CooperativeMultiplyAdd { .. } => {
                return err("cooperative matrices are not supported");
            }
        })
    }

    fn global_ptr(&mut self, g: Handle<naga::GlobalVariable>) -> Result<Value> {
        let var = &self.module.global_variables[g];
        let shape = Shape::of(self.module, var.ty)?;
        let place = match self.globals.places[g.index()] {
            GlobalPlace::Buffer(n) => {
                let offset = self.b.u64(0);
                let end = self.b.builtin(Builtin::BufferLen(n));
                Place::Mem {
                    space: Space::Buffer(n),
                    offset,
                    end,
                    guard: None,
                }
            }
            GlobalPlace::Params => Place::Param(0),
            GlobalPlace::Shared(off, size) => Place::Mem {
                space: Space::Shared,
                offset: self.b.u32(off),
                end: self.b.u32(off + size),
                guard: None,
            },
            GlobalPlace::Private(off, size) => Place::Mem {
                space: Space::Private,
                offset: self.b.u32(off),
                end: self.b.u32(off + size),
                guard: None,
            },
            GlobalPlace::Unused => return err("a variable kernels here cannot use"),
        };
        Ok(Value::Ptr(Ptr { shape, place }))
    }

    fn ptr_index(&mut self, p: &Ptr, i: u32) -> Result<Ptr> {
        let (shape, first, off) = p.shape.element(i)?;
        let place = match &p.place {
            Place::Regs(r) => {
                let n = shape.count()?;
                Place::Regs(r[first..first + n].to_vec())
            }
            Place::Param(b) => Place::Param(b + off),
            Place::Mem {
                space,
                offset,
                end,
                guard,
            } => {
                let ty = self.b.ty(*offset);
                let o = self.b.konst(ty, u64::from(off));
                let offset = if off == 0 {
                    *offset
                } else {
                    self.b.bin(BinOp::Add, *offset, o)
                };
                Place::Mem {
                    space: *space,
                    offset,
                    end: *end,
                    guard: *guard,
                }
            }
        };
        Ok(Ptr { shape, place })
    }

    fn ptr_dynamic(&mut self, p: &Ptr, i: Reg) -> Result<Ptr> {
        let (el, stride) = match &p.shape {
            Shape::Array { base, stride, .. } => ((**base).clone(), *stride),
            Shape::Vector(_, t) => (Shape::Scalar(*t), t.bytes()),
            Shape::Matrix { rows, ty, .. } => {
                (Shape::Vector(*rows, *ty), column_stride(*rows, *ty))
            }
            other => return err(format!("a run-time index into {other:?}")),
        };
        match &p.place {
            Place::Mem {
                space,
                offset,
                end,
                guard,
            } => {
                let oty = self.b.ty(*offset);
                // A negative index is out of bounds.
                let (idx, neg) = if self.b.ty(i) == Ty::I32 {
                    let z = self.b.konst(Ty::I32, 0);
                    let ok = self.b.bin(BinOp::Ge, i, z);
                    (self.b.bitcast(i, Ty::U32), Some(ok))
                } else {
                    (i, None)
                };
                let idx = self.b.convert(idx, oty);
                let s = self.b.konst(oty, u64::from(stride));
                let d = self.b.bin(BinOp::Mul, idx, s);
                let offset = self.b.bin(BinOp::Add, *offset, d);
                let guard = self.b.and_guard(*guard, neg);
                Ok(Ptr {
                    shape: el,
                    place: Place::Mem {
                        space: *space,
                        offset,
                        end: *end,
                        guard,
                    },
                })
            }
            // `locals_indexed_at_run_time` sends every local an `Access`
            // reaches (here or through a call) to memory.
            Place::Regs(_) => {
                err("a run-time index into a value held in registers (a lowering bug)")
            }
            Place::Param(_) => err(
                "a run-time index into the parameter block; Keel passes parameters as separate words",
            ),
        }
    }

    /// `value[i]` for a composite value at run time: a select over the
    /// elements (an index out of range gives element 0).
    fn value_dynamic(&mut self, shape: &Shape, regs: &[Reg], i: Reg) -> Result<Value> {
        let n = match shape {
            Shape::Vector(n, _) => *n,
            Shape::Matrix { cols, .. } => *cols,
            Shape::Array { len: Some(n), .. } => *n,
            other => return err(format!("a run-time index into {other:?}")),
        };
        let width = shape.element(0)?.0.count()?;
        let mut out: Vec<Reg> = regs[..width].to_vec();
        let ity = self.b.ty(i);
        for k in 1..n {
            let kk = self.b.konst(ity, u64::from(k));
            let hit = self.b.bin(BinOp::Eq, i, kk);
            let base = k as usize * width;
            for j in 0..width {
                out[j] = self.b.select(hit, regs[base + j], out[j]);
            }
        }
        Ok(Value::Regs(out))
    }

    pub(super) fn load(&mut self, p: &Ptr) -> Result<Value> {
        match &p.place {
            Place::Regs(r) => Ok(Value::Regs(r.iter().map(|&x| self.b.mov(x)).collect())),
            Place::Param(at) => {
                let mut layout = Vec::new();
                p.shape.layout(*at, &mut layout)?;
                let mut out = Vec::new();
                for (off, ty, _) in layout {
                    if ty.bytes() != 4 && ty != Ty::Bool {
                        return err(format!(
                            "a {ty:?} in the parameter block; Keel passes 32-bit words"
                        ));
                    }
                    let mty = if ty == Ty::Bool { Ty::U32 } else { ty };
                    let dst = self.b.reg(mty);
                    self.b.inst(Inst::Param { dst, word: off / 4 });
                    out.push(if ty == Ty::Bool {
                        self.b.convert(dst, Ty::Bool)
                    } else {
                        dst
                    });
                }
                Ok(Value::Regs(out))
            }
            Place::Mem {
                space,
                offset,
                end,
                guard,
            } => {
                let g = self.bounds(*offset, *end, p.shape.size(), *guard);
                let mut layout = Vec::new();
                p.shape.layout(0, &mut layout)?;
                let mut out = Vec::new();
                for (off, ty, atomic) in layout {
                    let addr = self.offset(*offset, off);
                    let mty = if ty == Ty::Bool { Ty::U32 } else { ty };
                    let dst = self.b.reg(mty);
                    self.b.inst(Inst::Load {
                        dst,
                        space: *space,
                        addr,
                        guard: Some(g),
                        atomic,
                    });
                    out.push(if ty == Ty::Bool {
                        self.b.convert(dst, Ty::Bool)
                    } else {
                        dst
                    });
                }
                Ok(Value::Regs(out))
            }
        }
    }

    pub(super) fn store(&mut self, p: &Ptr, v: &Value) -> Result<()> {
        let src = v.clone().regs()?;
        match &p.place {
            Place::Regs(r) => {
                for (&d, &s) in r.iter().zip(&src) {
                    self.b.inst(Inst::Mov { dst: d, src: s });
                }
                Ok(())
            }
            Place::Param(_) => err("a store into the parameter block"),
            Place::Mem {
                space,
                offset,
                end,
                guard,
            } => {
                let g = self.bounds(*offset, *end, p.shape.size(), *guard);
                let mut layout = Vec::new();
                p.shape.layout(0, &mut layout)?;
                for ((off, ty, atomic), &s) in layout.into_iter().zip(&src) {
                    let addr = self.offset(*offset, off);
                    let value = if ty == Ty::Bool {
                        self.b.convert(s, Ty::U32)
                    } else {
                        s
                    };
                    self.b.inst(Inst::Store {
                        space: *space,
                        addr,
                        value,
                        guard: Some(g),
                        atomic,
                    });
                }
                Ok(())
            }
        }
    }

    /// Whether `size` bytes at `offset` lie inside the root variable.
    fn bounds(&mut self, offset: Reg, end: Reg, size: u32, guard: Option<Reg>) -> Reg {
        let ty = self.b.ty(offset);
        let s = self.b.konst(ty, u64::from(size));
        let last = self.b.bin(BinOp::Add, offset, s);
        let inside = self.b.bin(BinOp::Le, last, end);
        // The add cannot wrap past `end` unless the offset was already
        // huge: an index beyond 2^32 elements is outside too.
        let not_wrapped = self.b.bin(BinOp::Ge, last, offset);
        let ok = self.b.bin(BinOp::And, inside, not_wrapped);
        match guard {
            Some(g) => self.b.bin(BinOp::And, ok, g),
            None => ok,
        }
    }

    fn offset(&mut self, base: Reg, off: u32) -> Reg {
        if off == 0 {
            return base;
        }
        let ty = self.b.ty(base);
        let o = self.b.konst(ty, u64::from(off));
        self.b.bin(BinOp::Add, base, o)
    }

    fn atomic(
        &mut self,
        ctx: &mut Ctx<'_>,
        pointer: Handle<naga::Expression>,
        fun: &naga::AtomicFunction,
        value: Handle<naga::Expression>,
        result: Option<Handle<naga::Expression>>,
    ) -> Result<()> {
        self.needs.atomics = true;
        let p = self.ptr(ctx, pointer)?;
        let Place::Mem {
            space,
            offset,
            end,
            guard,
        } = p.place
        else {
            return err("an atomic outside workgroup or storage memory");
        };
        let g = self.bounds(offset, end, 4, guard);
        let v = self.scalar(ctx, value)?;
        use naga::AtomicFunction as F;
        let (op, compare) = match fun {
            F::Add => (AtomicOp::Add, None),
            F::Subtract => (AtomicOp::Sub, None),
            F::And => (AtomicOp::And, None),
            F::ExclusiveOr => (AtomicOp::Xor, None),
            F::InclusiveOr => (AtomicOp::Or, None),
            F::Min => (AtomicOp::Min, None),
            F::Max => (AtomicOp::Max, None),
            F::Exchange { compare: None } => (AtomicOp::Exchange, None),
            F::Exchange { compare: Some(c) } => {
                (AtomicOp::CompareExchange, Some(self.scalar(ctx, *c)?))
            }
        };
        let ty = self.b.ty(v);
        if !matches!(ty, Ty::U32 | Ty::I32) {
            return err(format!("atomics on {ty:?}; 32-bit integers are supported"));
        }
        let dst = result.map(|_| self.b.reg(ty));
        self.b.inst(Inst::Atomic {
            op,
            dst,
            space,
            addr: offset,
            value: v,
            compare,
            guard: Some(g),
        });
        if let (Some(h), Some(old)) = (result, dst) {
            let regs = match compare {
                Some(c) => vec![old, self.b.bin(BinOp::Eq, old, c)],
                None => vec![old],
            };
            ctx.values[h.index()] = Some(Value::Regs(regs));
        }
        Ok(())
    }

    fn binary(&mut self, op: B, ls: &Shape, l: &[Reg], rs: &Shape, r: &[Reg]) -> Result<Vec<Reg>> {
        super::math::binary(self.b, op, ls, l, rs, r)
    }

    fn relational(&mut self, fun: naga::RelationalFunction, v: &[Reg]) -> Result<Vec<Reg>> {
        super::math::relational(self.b, fun, v)
    }

    fn math(
        &mut self,
        fun: naga::MathFunction,
        shapes: &[Shape],
        args: &[Vec<Reg>],
    ) -> Result<Vec<Reg>> {
        super::math::math(self.b, fun, shapes, args)
    }
}

impl Value {
    pub fn regs(self) -> Result<Vec<Reg>> {
        match self {
            Value::Regs(r) => Ok(r),
            Value::Ptr(_) => err("expected a value, found a pointer"),
        }
    }
}

/// Locals that some `Access` indexes at run time: they live in private
/// memory; the rest live in registers.
fn locals_indexed_at_run_time(
    fun: &Function,
    finfo: &naga::valid::FunctionInfo,
    module: &Module,
) -> Vec<bool> {
    let mut out = vec![false; fun.local_variables.len()];
    let is_ptr = |h: Handle<naga::Expression>| {
        matches!(
            finfo[h].ty.inner_with(&module.types),
            TypeInner::Pointer { .. } | TypeInner::ValuePointer { .. }
        )
    };
    let mut roots = Vec::new();
    for (_, e) in fun.expressions.iter() {
        if let E::Access { base, .. } = e
            && is_ptr(*base)
        {
            roots.push(*base);
        }
    }
    // A pointer passed to a function may be indexed at run time there,
    // where this function's analysis does not see it.
    call_arguments(&fun.body, &mut |h| {
        if is_ptr(h) {
            roots.push(h);
        }
    });
    for mut h in roots {
        loop {
            match &fun.expressions[h] {
                E::Access { base, .. } | E::AccessIndex { base, .. } => h = *base,
                E::LocalVariable(l) => {
                    out[l.index()] = true;
                    break;
                }
                _ => break,
            }
        }
    }
    out
}

/// Calls `f` on every argument of every call in `block`, nested blocks
/// included.
fn call_arguments(block: &naga::Block, f: &mut impl FnMut(Handle<naga::Expression>)) {
    for s in block.iter() {
        match s {
            S::Call { arguments, .. } => arguments.iter().for_each(|&a| f(a)),
            S::Block(b) => call_arguments(b, f),
            S::If { accept, reject, .. } => {
                call_arguments(accept, f);
                call_arguments(reject, f);
            }
            S::Switch { cases, .. } => cases.iter().for_each(|c| call_arguments(&c.body, f)),
            S::Loop {
                body, continuing, ..
            } => {
                call_arguments(body, f);
                call_arguments(continuing, f);
            }
            _ => {}
        }
    }
}
