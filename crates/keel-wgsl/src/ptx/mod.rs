//! The PTX end: a lowered [`Program`] printed as PTX text that the CUDA
//! driver compiles (`cuModuleLoadDataEx`) for any GPU from sm_70 on.
//!
//! The text is PTX ISA 7.0 for `sm_70`, the oldest GPU Keel's CUDA
//! backend runs on: the driver JITs it for newer GPUs, and nothing the IR
//! asks for needs a newer instruction (f16 min/max, which would, go
//! through f32).
//!
//! Registers keep their IR numbers: IR register `r12` prints as `%p12`,
//! `%r12`, `%f12`, `%h12` or `%rd12` by its type, so the PTX reads
//! against the IR. Scratch registers that an instruction's expansion
//! needs are `%tp`, `%tr`, `%tf`, `%th` and `%td`, reused from one IR
//! instruction to the next.

mod arith;
mod guards;
mod math;
mod memory;
mod select;
mod subgroup;

use std::collections::HashSet;
use std::fmt;

use crate::ir::{Inst, Program, Reg, Space, Stmt, Ty, each_list};

/// Why a [`Program`] cannot be printed: an inconsistency in the IR, such
/// as an operand of the wrong type or a `Leave` of a block that does not
/// enclose it.
#[derive(Debug, Clone, PartialEq)]
pub struct PtxError {
    message: String,
}

impl PtxError {
    fn new(message: impl Into<String>) -> Self {
        PtxError {
            message: message.into(),
        }
    }

    /// What is wrong, in words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot print PTX: {}", self.message)
    }
}

impl std::error::Error for PtxError {}

type Result<T> = std::result::Result<T, PtxError>;

/// Prints `program` as one PTX module holding one `.visible .entry` named
/// `program.name`.
///
/// # Parameter ABI
///
/// The kernel's parameters, in order:
///
/// 1. `.param .u64 keel_buf<n>`: the device pointer of each storage
///    buffer, in [`Program::buffers`] order;
/// 2. `.param .b32 keel_w<i>`: the parameter block as `ceil(param_bytes
///    / 4)` 32-bit words ([`crate::ir::Inst::Param`] reads word `i`);
/// 3. `.param .u64 keel_len<n>`: the byte length of each storage buffer,
///    in the same order ([`crate::ir::Builtin::BufferLen`]).
///
/// The launch's block size must be [`Program::workgroup_size`] (the entry
/// declares it as `.maxntid`); workgroup memory is static (`.shared`), so
/// the launch asks for no dynamic shared memory.
///
/// # Errors
///
/// [`PtxError`] where the IR is inconsistent: a register index out of
/// range, an operand of a type the operation does not take, a `Break`
/// outside a loop, a `Leave` of a block that does not enclose it, a name
/// PTX cannot spell.
pub fn emit(program: &Program) -> Result<String> {
    emit_with(program, &Options::default())
}

/// How [`emit_with`] prints a program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Every float add, subtract and multiply rounded on its own (`.rn`),
    /// which ptxas never contracts into an FMA: the program's arithmetic
    /// as written. By default they carry no rounding modifier, and ptxas
    /// fuses a multiply into the add that reads it, as WGSL allows.
    pub strict_float: bool,
}

impl Options {
    /// The default options with [`strict_float`](Self::strict_float) set.
    pub fn strict() -> Options {
        Options { strict_float: true }
    }
}

/// [`emit`] with `options`.
///
/// # Errors
///
/// As [`emit`].
pub fn emit_with(program: &Program, options: &Options) -> Result<String> {
    let mut program = program.clone();
    let elements = guards::elements(&program);
    let checks = guards::index_bounds(&mut program, &elements);
    select::branch_free(&mut program);
    guards::narrow_lone_bounds(&mut program, &checks);
    let mut e = Emitter::new(&program);
    e.strict_float = options.strict_float;
    e.elements = elements;
    e.printed = e.printed_reads();
    e.run()
}

/// Whether an instruction only computes its result: arithmetic, a
/// constant, a built-in value or a parameter word. Where the printed PTX
/// reads no result of it, it is checked but not printed.
fn computes_only(inst: &Inst) -> bool {
    inst.is_pure()
        || matches!(
            inst,
            Inst::Const { .. } | Inst::Read { .. } | Inst::Param { .. }
        )
}

/// A bank of registers of one PTX type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bank {
    Pred,
    B32,
    F32,
    B16,
    B64,
}

impl Bank {
    const ALL: [Bank; 5] = [Bank::Pred, Bank::B32, Bank::F32, Bank::B16, Bank::B64];

    fn of(ty: Ty) -> Bank {
        match ty {
            Ty::Bool => Bank::Pred,
            Ty::U32 | Ty::I32 => Bank::B32,
            Ty::F32 => Bank::F32,
            Ty::F16 => Bank::B16,
            Ty::U64 => Bank::B64,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn decl(self) -> &'static str {
        match self {
            Bank::Pred => ".pred",
            Bank::B32 => ".b32",
            Bank::F32 => ".f32",
            Bank::B16 => ".b16",
            Bank::B64 => ".b64",
        }
    }

    fn ir_prefix(self) -> &'static str {
        match self {
            Bank::Pred => "%p",
            Bank::B32 => "%r",
            Bank::F32 => "%f",
            Bank::B16 => "%h",
            Bank::B64 => "%rd",
        }
    }

    fn tmp_prefix(self) -> &'static str {
        match self {
            Bank::Pred => "%tp",
            Bank::B32 => "%tr",
            Bank::F32 => "%tf",
            Bank::B16 => "%th",
            Bank::B64 => "%td",
        }
    }
}

/// The `mov` type of a register of type `ty`.
fn mov_ty(ty: Ty) -> &'static str {
    match ty {
        Ty::Bool => "pred",
        Ty::U32 | Ty::I32 => "b32",
        Ty::F32 => "f32",
        Ty::F16 => "b16",
        Ty::U64 => "b64",
    }
}

/// Zero as an immediate of type `ty` (not `Bool`).
fn zero(ty: Ty) -> &'static str {
    match ty {
        Ty::F32 => "0f00000000",
        _ => "0",
    }
}

/// Whether `name` is a PTX identifier (which the entry's name becomes).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    let rest_ok = name
        .chars()
        .skip(1)
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if first.is_ascii_alphabetic() {
        rest_ok
    } else {
        (first == '_' || first == '$') && name.len() > 1 && rest_ok
    }
}

/// Printer state for one program.
struct Emitter<'a> {
    prog: &'a Program,
    /// Instructions of the entry's body, after the declarations.
    out: String,
    next_label: u32,
    /// Scratch registers taken by the current IR instruction, per bank.
    tmp_used: [u32; 5],
    /// The most any instruction took, per bank: what is declared.
    tmp_max: [u32; 5],
    /// `(continue, break)` labels of the enclosing loops, innermost last.
    loops: Vec<(String, String)>,
    /// Ids of the enclosing blocks, innermost last.
    blocks: Vec<u32>,
    /// Every block id seen, so that a repeated id (a repeated label) is
    /// reported rather than left to ptxas.
    block_ids: HashSet<u32>,
    /// Per register, its one writer (`Program::single_writers`): what
    /// vector loads are recognised by.
    defs: Vec<Option<&'a Inst>>,
    /// Offsets that are array elements (`guards.rs`): their addresses
    /// are one wide multiply-add.
    elements: guards::Elements,
    /// Per register, whether the printed PTX reads it ([`printed_reads`]).
    printed: Vec<bool>,
    /// [`Options::strict_float`].
    strict_float: bool,
}

impl<'a> Emitter<'a> {
    fn new(prog: &'a Program) -> Self {
        Emitter {
            prog,
            out: String::new(),
            next_label: 0,
            tmp_used: [0; 5],
            tmp_max: [0; 5],
            loops: Vec::new(),
            blocks: Vec::new(),
            block_ids: HashSet::new(),
            defs: prog.single_writers(),
            elements: guards::Elements::new(),
            printed: Vec::new(),
            strict_float: false,
        }
    }

    fn run(mut self) -> Result<String> {
        let prog = self.prog;
        if !is_identifier(&prog.name) {
            return Err(PtxError::new(format!(
                "entry point name `{}` is not a PTX identifier",
                prog.name
            )));
        }
        let [x, y, z] = prog.workgroup_size;
        if x == 0 || y == 0 || z == 0 || u64::from(x) * u64::from(y) * u64::from(z) > 1024 {
            return Err(PtxError::new(format!(
                "workgroup size {x}x{y}x{z} is not a CUDA block size"
            )));
        }
        self.prologue();
        self.stmts(&prog.body)?;
        self.ins("ret;");

        let mut text = String::new();
        text.push_str("//\n// Generated by keel-wgsl\n//\n\n");
        text.push_str(".version 7.0\n.target sm_70\n.address_size 64\n\n");
        text.push_str(&format!(
            "// @compute @workgroup_size({x}, {y}, {z}) fn {}\n",
            prog.name
        ));
        text.push_str(&format!(".visible .entry {}(\n", prog.name));
        // (declaration, comment) per parameter.
        let mut params: Vec<(String, String)> = Vec::new();
        for (n, buffer) in prog.buffers.iter().enumerate() {
            params.push((
                format!(".param .u64 keel_buf{n}"),
                format!("\t// binding {}: {}", buffer.binding, buffer.name),
            ));
        }
        for w in 0..self.param_words() {
            params.push((format!(".param .b32 keel_w{w}"), String::new()));
        }
        for n in 0..prog.buffers.len() {
            params.push((format!(".param .u64 keel_len{n}"), String::new()));
        }
        for (i, (decl, comment)) in params.iter().enumerate() {
            let sep = if i + 1 < params.len() { "," } else { "" };
            text.push_str(&format!("\t{decl}{sep}{comment}\n"));
        }
        text.push_str(&format!(")\n.maxntid {x}, {y}, {z}\n{{\n"));
        self.declarations(&mut text);
        text.push_str(&self.out);
        text.push_str("}\n");
        Ok(text)
    }

    /// Parameter words: a block whose size is not a multiple of 4 still
    /// passes its last bytes.
    fn param_words(&self) -> u32 {
        self.prog.param_bytes.div_ceil(4)
    }

    fn declarations(&self, text: &mut String) {
        let prog = self.prog;
        let mut counts = [0usize; 5];
        for (i, ty) in prog.regs.iter().enumerate() {
            let b = Bank::of(*ty).index();
            counts[b] = counts[b].max(i + 1);
        }
        for bank in Bank::ALL {
            let n = counts[bank.index()];
            if n > 0 {
                text.push_str(&format!(
                    "\t.reg {} {}<{n}>;\n",
                    bank.decl(),
                    bank.ir_prefix()
                ));
            }
        }
        for bank in Bank::ALL {
            let n = self.tmp_max[bank.index()];
            if n > 0 {
                text.push_str(&format!(
                    "\t.reg {} {}<{n}>;\n",
                    bank.decl(),
                    bank.tmp_prefix()
                ));
            }
        }
        let buffers = prog.buffers.len();
        if buffers > 0 {
            text.push_str(&format!("\t.reg .b64 %buf<{buffers}>;\n"));
            text.push_str(&format!("\t.reg .b64 %len<{buffers}>;\n"));
        }
        if prog.shared_bytes > 0 {
            text.push_str("\t.reg .b32 %smem;\n");
            text.push_str(&format!(
                "\t.shared .align 16 .b8 keel_shared[{}];\n",
                round16(prog.shared_bytes)
            ));
        }
        if prog.private_bytes > 0 {
            text.push_str("\t.reg .b64 %pmem;\n");
            text.push_str(&format!(
                "\t.local .align 16 .b8 keel_private[{}];\n",
                round16(prog.private_bytes)
            ));
        }
        text.push('\n');
    }

    /// Loads the parameters once and zeroes workgroup and private memory,
    /// as WGSL requires of both.
    fn prologue(&mut self) {
        let prog = self.prog;
        for n in 0..prog.buffers.len() {
            self.ins(&format!("ld.param.u64 %buf{n}, [keel_buf{n}];"));
            self.ins(&format!("cvta.to.global.u64 %buf{n}, %buf{n};"));
            self.ins(&format!("ld.param.u64 %len{n}, [keel_len{n}];"));
        }
        if prog.shared_bytes > 0 {
            self.reset_tmps();
            let size = round16(prog.shared_bytes);
            self.comment("zero workgroup memory: 16 bytes per invocation and step");
            self.ins("mov.u32 %smem, keel_shared;");
            let [tx, ty, tz, nx, ny, nz, zero, at] = [(); 8].map(|()| self.tmp(Bank::B32));
            let done = self.tmp(Bank::Pred);
            for (reg, sreg) in [
                (&tx, "%tid.x"),
                (&ty, "%tid.y"),
                (&tz, "%tid.z"),
                (&nx, "%ntid.x"),
                (&ny, "%ntid.y"),
                (&nz, "%ntid.z"),
            ] {
                self.ins(&format!("mov.u32 {reg}, {sreg};"));
            }
            // flat = (z * ny + y) * nx + x; stride = nx * ny * nz.
            self.ins(&format!("mad.lo.u32 {tz}, {tz}, {ny}, {ty};"));
            self.ins(&format!("mad.lo.u32 {tz}, {tz}, {nx}, {tx};"));
            self.ins(&format!("mul.lo.u32 {ny}, {ny}, {nx};"));
            self.ins(&format!("mul.lo.u32 {ny}, {ny}, {nz};"));
            self.ins(&format!("shl.b32 {tz}, {tz}, 4;"));
            self.ins(&format!("shl.b32 {ny}, {ny}, 4;"));
            self.ins(&format!("mov.u32 {zero}, 0;"));
            self.label("$Lzero_shared");
            self.ins(&format!("setp.ge.u32 {done}, {tz}, {size};"));
            self.ins(&format!("@{done} bra $Lzero_shared_done;"));
            self.ins(&format!("add.u32 {at}, %smem, {tz};"));
            self.ins(&format!(
                "st.shared.v4.u32 [{at}], {{{zero}, {zero}, {zero}, {zero}}};"
            ));
            self.ins(&format!("add.u32 {tz}, {tz}, {ny};"));
            self.ins("bra $Lzero_shared;");
            self.label("$Lzero_shared_done");
            self.ins("bar.sync 0;");
        }
        if prog.private_bytes > 0 {
            self.reset_tmps();
            let size = round16(prog.private_bytes);
            self.comment("zero private memory");
            self.ins("mov.u64 %pmem, keel_private;");
            let zero = self.tmp(Bank::B32);
            self.ins(&format!("mov.u32 {zero}, 0;"));
            let v4 = format!("{{{zero}, {zero}, {zero}, {zero}}}");
            if size <= 128 {
                for at in (0..size).step_by(16) {
                    self.ins(&format!("st.local.v4.u32 [%pmem+{at}], {v4};"));
                }
            } else {
                let at = self.tmp(Bank::B64);
                let end = self.tmp(Bank::B64);
                let more = self.tmp(Bank::Pred);
                self.ins(&format!("mov.b64 {at}, %pmem;"));
                self.ins(&format!("add.u64 {end}, %pmem, {size};"));
                self.label("$Lzero_private");
                self.ins(&format!("st.local.v4.u32 [{at}], {v4};"));
                self.ins(&format!("add.u64 {at}, {at}, 16;"));
                self.ins(&format!("setp.lt.u64 {more}, {at}, {end};"));
                self.ins(&format!("@{more} bra $Lzero_private;"));
            }
        }
        self.reset_tmps();
    }

    // ---- text ----

    /// One instruction line.
    fn ins(&mut self, text: &str) {
        self.out.push('\t');
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn label(&mut self, name: &str) {
        self.out.push_str(name);
        self.out.push_str(":\n");
    }

    fn comment(&mut self, text: &str) {
        self.out.push_str("\t// ");
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// A fresh number for labels.
    fn fresh_label(&mut self) -> u32 {
        let n = self.next_label;
        self.next_label += 1;
        n
    }

    // ---- registers ----

    fn reset_tmps(&mut self) {
        self.tmp_used = [0; 5];
    }

    /// A scratch register of `bank`, free until the next IR instruction.
    fn tmp(&mut self, bank: Bank) -> String {
        let i = bank.index();
        let n = self.tmp_used[i];
        self.tmp_used[i] += 1;
        self.tmp_max[i] = self.tmp_max[i].max(n + 1);
        format!("{}{n}", bank.tmp_prefix())
    }

    /// A scratch register for values of type `ty`.
    fn tmp_of(&mut self, ty: Ty) -> String {
        self.tmp(Bank::of(ty))
    }

    fn ty(&self, reg: Reg) -> Result<Ty> {
        self.prog.regs.get(reg.index()).copied().ok_or_else(|| {
            PtxError::new(format!(
                "register {reg} out of range ({} registers)",
                self.prog.regs.len()
            ))
        })
    }

    /// Emits `inst`, and takes it out again where it only computes its
    /// result ([`computes_only`]) and the printed PTX does not read that
    /// (`printed`): checked either way.
    fn inst_if_read(&mut self, inst: &Inst) -> Result<()> {
        let start = self.out.len();
        self.inst(inst)?;
        let unread = |d: Reg| self.printed.get(d.index()) == Some(&false);
        if computes_only(inst) && inst.dst().is_some_and(unread) {
            self.out.truncate(start);
        }
        Ok(())
    }

    /// Per register, whether the printed PTX reads it: what the
    /// statements read, but a buffer access reads its element's index
    /// where its offset is an array element (`address` prints the address
    /// from the index), a vector load only its first component's offset
    /// (`vector_group`), and an instruction that only computes its result
    /// ([`computes_only`]) reads only where its result is read. Left out
    /// are the byte offsets that only addresses took, and the checks the
    /// guard rewrites replaced (`guards.rs`): ptxas drops them as well,
    /// but people read this PTX.
    fn printed_reads(&self) -> Vec<bool> {
        let n = self.prog.regs.len();
        let mut pending: Vec<Reg> = Vec::new();
        // Per register, what the instructions that only compute it read.
        let mut feeds: Vec<Vec<Reg>> = vec![Vec::new(); n];
        let mut inst_reads = |inst: &Inst, addr_read: bool, pending: &mut Vec<Reg>| {
            let mut reads = inst.reads();
            let addr = match *inst {
                Inst::Load { space, addr, .. }
                | Inst::Store { space, addr, .. }
                | Inst::Atomic { space, addr, .. } => Some((space, addr)),
                _ => None,
            };
            if let Some((space, addr)) = addr {
                let element = match space {
                    Space::Buffer(_) => self.elements.get(&addr),
                    _ => None,
                };
                if !addr_read || element.is_some() {
                    reads.retain(|r| *r != addr);
                }
                reads.extend(element.map(|e| e.index));
            }
            match inst.dst() {
                Some(d) if computes_only(inst) && d.index() < n => feeds[d.index()].extend(reads),
                _ => pending.extend(reads),
            }
        };
        each_list(&self.prog.body, &mut |list| {
            let mut i = 0;
            while i < list.len() {
                if let Ok(Some(group)) = self.vector_group(&list[i..]) {
                    pending.push(group.base);
                    for s in &list[i..i + group.used] {
                        if let Stmt::Inst(inst) = s {
                            inst_reads(inst, false, &mut pending);
                        }
                    }
                    i += group.used;
                    continue;
                }
                match &list[i] {
                    Stmt::Inst(inst) => inst_reads(inst, true, &mut pending),
                    Stmt::If { cond, .. } => pending.push(*cond),
                    Stmt::Loop {
                        break_if: Some(c), ..
                    } => pending.push(*c),
                    _ => {}
                }
                i += 1;
            }
        });
        let mut read = vec![false; n];
        while let Some(r) = pending.pop() {
            if let Some(x) = read.get_mut(r.index())
                && !*x
            {
                *x = true;
                pending.append(&mut feeds[r.index()]);
            }
        }
        read
    }

    /// The PTX name of `reg`.
    fn reg(&self, reg: Reg) -> Result<String> {
        let ty = self.ty(reg)?;
        Ok(format!("{}{}", Bank::of(ty).ir_prefix(), reg.0))
    }

    /// The PTX name of `reg`, which must have type `ty`.
    fn reg_of(&self, reg: Reg, ty: Ty, what: &str) -> Result<String> {
        let actual = self.ty(reg)?;
        if actual != ty {
            return Err(PtxError::new(format!(
                "{what}: {reg} is {actual:?}, expected {ty:?}"
            )));
        }
        self.reg(reg)
    }

    // ---- statements ----

    fn stmts(&mut self, body: &[Stmt]) -> Result<()> {
        let mut i = 0;
        while i < body.len() {
            if let Some(n) = self.vector_load(&body[i..])? {
                i += n;
                continue;
            }
            self.stmt(&body[i])?;
            i += 1;
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<()> {
        match stmt {
            Stmt::Inst(inst) => {
                self.reset_tmps();
                self.inst_if_read(inst)
            }
            Stmt::If { cond, then, els } => {
                let c = self.reg_of(*cond, Ty::Bool, "if condition")?;
                let n = self.fresh_label();
                let end = format!("$L{n}_endif");
                self.comment(&format!("if {cond}"));
                if els.is_empty() {
                    self.ins(&format!("@!{c} bra {end};"));
                    self.stmts(then)?;
                } else {
                    let else_label = format!("$L{n}_else");
                    self.ins(&format!("@!{c} bra {else_label};"));
                    self.stmts(then)?;
                    self.ins(&format!("bra {end};"));
                    self.label(&else_label);
                    self.stmts(els)?;
                }
                self.label(&end);
                Ok(())
            }
            Stmt::Loop {
                body,
                continuing,
                break_if,
            } => {
                let n = self.fresh_label();
                let head = format!("$L{n}_loop");
                let cont = format!("$L{n}_continuing");
                let end = format!("$L{n}_end");
                self.label(&head);
                self.loops.push((cont.clone(), end.clone()));
                self.stmts(body)?;
                self.label(&cont);
                self.stmts(continuing)?;
                if let Some(cond) = break_if {
                    let c = self.reg_of(*cond, Ty::Bool, "break if")?;
                    self.ins(&format!("@{c} bra {end};"));
                }
                self.ins(&format!("bra {head};"));
                self.loops.pop();
                self.label(&end);
                Ok(())
            }
            Stmt::Break => {
                let (_, end) = self
                    .loops
                    .last()
                    .ok_or_else(|| PtxError::new("break outside a loop"))?;
                let line = format!("bra {end};");
                self.ins(&line);
                Ok(())
            }
            Stmt::Continue => {
                let (cont, _) = self
                    .loops
                    .last()
                    .ok_or_else(|| PtxError::new("continue outside a loop"))?;
                let line = format!("bra {cont};");
                self.ins(&line);
                Ok(())
            }
            Stmt::Block { id, body } => {
                if !self.block_ids.insert(*id) {
                    return Err(PtxError::new(format!("block id {id} used twice")));
                }
                self.blocks.push(*id);
                self.stmts(body)?;
                self.blocks.pop();
                self.label(&format!("$B{id}_end"));
                Ok(())
            }
            Stmt::Leave(id) => {
                if !self.blocks.contains(id) {
                    return Err(PtxError::new(format!(
                        "leave of block {id}, which does not enclose it"
                    )));
                }
                self.ins(&format!("bra $B{id}_end;"));
                Ok(())
            }
            Stmt::Return => {
                self.ins("ret;");
                Ok(())
            }
            Stmt::Barrier { workgroup, storage } => {
                // bar.sync orders the CTA's memory accesses for the threads
                // that take part; a storage barrier also fences at GPU
                // scope so that the buffer writes are seen through L1.
                self.comment(&format!(
                    "barrier (workgroup: {workgroup}, storage: {storage})"
                ));
                if *storage {
                    self.ins("membar.gl;");
                }
                self.ins("bar.sync 0;");
                Ok(())
            }
        }
    }
}

/// `n` rounded up to a multiple of 16, so that zeroing stores 16 bytes at
/// a time.
fn round16(n: u32) -> u32 {
    n.div_ceil(16) * 16
}
