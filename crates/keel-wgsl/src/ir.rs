//! The lowered kernel: what both ends (PTX text, host execution) read.
//!
//! A [`Program`] is one compute entry point with every WGSL rule already
//! applied, so that an end only maps each instruction onto its target:
//!
//! - Values are scalars in typed virtual registers ([`Reg`], [`Ty`]);
//!   vectors, matrices and structs are split into their components.
//!   Registers are mutable (a `var` of scalar or vector type lives in
//!   registers and is written by [`Inst::Mov`]); a write in a branch
//!   changes only the invocations that take it.
//! - Every function call is inlined into a [`Stmt::Block`] that its
//!   `return` leaves; a `switch` is a block of `if`s. Control flow is
//!   structured: ifs, loops with a continuing block and `break if`,
//!   blocks left by [`Stmt::Leave`], and the invocation's own
//!   [`Stmt::Return`].
//! - WGSL's semantics are explicit: integer division never sees a zero
//!   divisor or `MIN / -1` (the lowering substitutes 1, which gives
//!   WGSL's results), shift amounts are already masked to the bit width,
//!   out-of-bounds buffer accesses carry a guard (loads read zero, stores
//!   and atomics are skipped: naga's `ReadZeroSkipWrite`), and floating
//!   point adds and multiplies each round to nearest. A target may
//!   contract a multiply and an add that uses it into one FMA, as WGSL
//!   allows (section 15.7.5: fusion where the result is at least as
//!   accurate); the PTX end lets ptxas do so, the host ends never do.
//!   [`Inst::Fma`] is the source's own `fma`, fused on every end.
//! - Every register is written before it is read, in every invocation
//!   that reads it (constants and launch values are written at the
//!   program's start), so an end need not zero registers between
//!   workgroups.
//!
//! Addresses are byte offsets: `U64` into a storage buffer (its binding
//! index in [`Space::Buffer`]), `U32` into workgroup memory or the
//! invocation's private memory. Loads and stores are of one scalar, at an
//! offset aligned to its width.

use std::fmt;

/// A scalar type of a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A predicate: true or false.
    Bool,
    /// 32-bit unsigned integer.
    U32,
    /// 32-bit signed integer, two's complement.
    I32,
    /// IEEE binary32.
    F32,
    /// IEEE binary16 (WGSL's `f16`, where the device has it).
    F16,
    /// 64-bit unsigned integer: storage-buffer byte offsets and lengths.
    U64,
}

impl Ty {
    /// Size in bytes in memory (`Bool` is never stored).
    pub fn bytes(self) -> u32 {
        match self {
            Ty::Bool => 1,
            Ty::F16 => 2,
            Ty::U32 | Ty::I32 | Ty::F32 => 4,
            Ty::U64 => 8,
        }
    }

    /// Whether the type is a float.
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F16)
    }
}

/// A virtual register: an index into [`Program::regs`], which gives its
/// type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u32);

impl Reg {
    /// The index into [`Program::regs`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An axis of a three-dimensional id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// x
    X,
    /// y
    Y,
    /// z
    Z,
}

impl Axis {
    /// 0, 1 or 2.
    pub fn index(self) -> usize {
        match self {
            Axis::X => 0,
            Axis::Y => 1,
            Axis::Z => 2,
        }
    }
}

/// A value an invocation reads from its launch rather than computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `local_invocation_id` along an axis (`U32`).
    LocalId(Axis),
    /// `workgroup_id` along an axis (`U32`).
    GroupId(Axis),
    /// `num_workgroups` along an axis (`U32`).
    NumGroups(Axis),
    /// `subgroup_size` (`U32`): 32 on CUDA; the host chooses its own.
    SubgroupSize,
    /// `subgroup_invocation_id` (`U32`): the lane within the subgroup.
    SubgroupInvocationId,
    /// The length in bytes of storage buffer binding `n` (`U64`): what
    /// bounds checks and `arrayLength` compare against.
    BufferLen(u32),
}

/// Where a load, store or atomic goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// Storage buffer number `n` in [`Program::buffers`] order; `U64`
    /// byte offset.
    Buffer(u32),
    /// The workgroup's shared memory ([`Program::shared_bytes`],
    /// zeroed at the start of each workgroup); `U32` byte offset.
    Shared,
    /// The invocation's private memory ([`Program::private_bytes`],
    /// zeroed at its start), for arrays indexed at run time; `U32` byte
    /// offset.
    Private,
}

/// One-operand operations. The operand and the destination have the same
/// type unless the variant says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// Arithmetic negation (wrapping for integers).
    Neg,
    /// Bitwise not for integers, logical not for `Bool`.
    Not,
    /// Absolute value (wrapping: `abs(i32::MIN) == i32::MIN`).
    Abs,
    /// Round toward negative infinity (floats).
    Floor,
    /// Round toward positive infinity (floats).
    Ceil,
    /// Round toward zero (floats).
    Trunc,
    /// Round to nearest, ties to even (floats).
    Round,
    /// Square root, correctly rounded (floats).
    Sqrt,
    /// `1 / sqrt(x)` (floats; approximate).
    InverseSqrt,
    /// `2^x` (floats; approximate).
    Exp2,
    /// `log2(x)` (floats; approximate).
    Log2,
    /// Sine of radians (floats; approximate).
    Sin,
    /// Cosine of radians (floats; approximate).
    Cos,
    /// Tangent (floats; approximate).
    Tan,
    /// Arc sine (floats; approximate).
    Asin,
    /// Arc cosine (floats; approximate).
    Acos,
    /// Arc tangent (floats; approximate).
    Atan,
    /// Hyperbolic sine (floats; approximate).
    Sinh,
    /// Hyperbolic cosine (floats; approximate).
    Cosh,
    /// Hyperbolic tangent (floats; approximate).
    Tanh,
    /// Number of set bits (integers).
    CountOneBits,
    /// Bits in reverse order (integers).
    ReverseBits,
    /// Number of leading zero bits; 32 for 0 (integers).
    CountLeadingZeros,
    /// Number of trailing zero bits; 32 for 0 (integers).
    CountTrailingZeros,
}

/// Two-operand operations over operands of one type. Comparisons write a
/// `Bool`; everything else writes the operands' type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// Wrapping for integers; round to nearest even for floats, which a
    /// target may contract with a `Mul` into an FMA (see the module).
    Add,
    /// As `Add`.
    Sub,
    /// As `Add` (the low 32 bits for integers).
    Mul,
    /// `U32` only: the high 32 bits of the 64-bit product `a * b`. WGSL
    /// has no such operation; the lowering makes it from the usual
    /// 16-bit-halves form of one (`crate::lower`'s idioms pass).
    MulHi,
    /// Floats: correctly rounded. Integers: truncating; the lowering
    /// guarantees a divisor that is neither 0 nor (for `I32`) -1 with
    /// `MIN` as dividend.
    Div,
    /// Integers: the remainder of truncating division, with the same
    /// guarantee as `Div`. Never used for floats (lowered to
    /// `a - b * trunc(a / b)`).
    Rem,
    /// Minimum (floats: the non-NaN operand if one is NaN).
    Min,
    /// Maximum (floats: the non-NaN operand if one is NaN).
    Max,
    /// Bitwise and for integers, logical and for `Bool`.
    And,
    /// Bitwise or for integers, logical or for `Bool`.
    Or,
    /// Bitwise xor for integers, logical xor (`!=`) for `Bool`.
    Xor,
    /// Shift left; `b` is `U32` and already below the bit width.
    Shl,
    /// Shift right, arithmetic for `I32`, logical for `U32`; `b` is `U32`
    /// and already below the bit width.
    Shr,
    /// `a == b` (floats: false for NaN).
    Eq,
    /// `a != b` (floats: true for NaN).
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
    /// `a^b` (floats; approximate).
    Pow,
    /// `atan2(a, b)` (floats; approximate).
    Atan2,
}

impl UnOp {
    /// Every operation, in declaration order.
    pub const ALL: [UnOp; 24] = [
        UnOp::Neg,
        UnOp::Not,
        UnOp::Abs,
        UnOp::Floor,
        UnOp::Ceil,
        UnOp::Trunc,
        UnOp::Round,
        UnOp::Sqrt,
        UnOp::InverseSqrt,
        UnOp::Exp2,
        UnOp::Log2,
        UnOp::Sin,
        UnOp::Cos,
        UnOp::Tan,
        UnOp::Asin,
        UnOp::Acos,
        UnOp::Atan,
        UnOp::Sinh,
        UnOp::Cosh,
        UnOp::Tanh,
        UnOp::CountOneBits,
        UnOp::ReverseBits,
        UnOp::CountLeadingZeros,
        UnOp::CountTrailingZeros,
    ];
}

impl BinOp {
    /// Every operation, in declaration order.
    pub const ALL: [BinOp; 20] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Rem,
        BinOp::Min,
        BinOp::Max,
        BinOp::And,
        BinOp::Or,
        BinOp::Xor,
        BinOp::Shl,
        BinOp::Shr,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Pow,
        BinOp::Atan2,
    ];

    /// Whether the operation writes a `Bool` whatever its operands.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

/// Read-modify-write operations of [`Inst::Atomic`] (on `U32` or `I32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// Wrapping add.
    Add,
    /// Wrapping subtract.
    Sub,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
    /// Minimum (signed for `I32`).
    Min,
    /// Maximum (signed for `I32`).
    Max,
    /// Store `value`, return the old value.
    Exchange,
    /// Store `value` where the old value equals `compare`; return the old
    /// value.
    CompareExchange,
}

/// Reductions and scans of [`SubgroupOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// Sum (wrapping for integers).
    Add,
    /// Product.
    Mul,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Bitwise (or logical) and.
    And,
    /// Bitwise (or logical) or.
    Or,
    /// Bitwise (or logical) xor.
    Xor,
}

/// Operations across the invocations of a subgroup. Only the subgroup's
/// active invocations take part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubgroupOp {
    /// The reduction over the subgroup, the same in every invocation.
    Reduce(Reduce),
    /// The reduction over this invocation and the ones below it.
    InclusiveScan(Reduce),
    /// The reduction over the invocations below this one (the identity
    /// for the first).
    ExclusiveScan(Reduce),
    /// `a` of the lowest active invocation.
    BroadcastFirst,
    /// `a` of the invocation whose lane is `b` (`U32`).
    Shuffle,
    /// `a` of lane `id + b`.
    ShuffleDown,
    /// `a` of lane `id - b`.
    ShuffleUp,
    /// `a` of lane `id ^ b`.
    ShuffleXor,
    /// Whether `a` (`Bool`) holds in every active invocation.
    All,
    /// Whether `a` (`Bool`) holds in any active invocation.
    Any,
    /// Bit `lane` set where `a` (`Bool`) holds (`U32`; lanes 0..32).
    Ballot,
}

/// One instruction. `dst` is always a fresh write of the register in the
/// invocations that execute it.
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// `dst = bits` (the low bits of `bits` in `dst`'s type: an `f32` is
    /// its bit pattern, a `Bool` is 0 or 1).
    Const {
        /// Destination.
        dst: Reg,
        /// The value's bits.
        bits: u64,
    },
    /// `dst = src` (same type).
    Mov {
        /// Destination.
        dst: Reg,
        /// Source.
        src: Reg,
    },
    /// `dst = op(a)`.
    Un {
        /// Operation.
        op: UnOp,
        /// Destination.
        dst: Reg,
        /// Operand.
        a: Reg,
    },
    /// `dst = op(a, b)`.
    Bin {
        /// Operation.
        op: BinOp,
        /// Destination.
        dst: Reg,
        /// First operand.
        a: Reg,
        /// Second operand.
        b: Reg,
    },
    /// `dst = a * b + c` with one rounding (floats).
    Fma {
        /// Destination.
        dst: Reg,
        /// Multiplicand.
        a: Reg,
        /// Multiplier.
        b: Reg,
        /// Addend.
        c: Reg,
    },
    /// `dst = cond ? a : b`.
    Select {
        /// Destination.
        dst: Reg,
        /// `Bool` condition.
        cond: Reg,
        /// Value where `cond` holds.
        a: Reg,
        /// Value where it does not.
        b: Reg,
    },
    /// Numeric conversion to `dst`'s type, as WGSL's value constructors
    /// convert: float to integer rounds toward zero and saturates (NaN
    /// gives 0), integer to float and f32 to f16 round to nearest even,
    /// `Bool` to a number is 0 or 1, a number to `Bool` is `!= 0`,
    /// integers of one width are reinterpreted, `U32` to `U64` zero
    /// extends, `I32` to `U64` sign extends and `U64` to `U32` truncates.
    /// (WGSL's value conversions from f32, which clamp into the
    /// integer's range first, are lowered to a clamp and this.)
    Convert {
        /// Destination.
        dst: Reg,
        /// Operand.
        a: Reg,
    },
    /// The same bits in another type of the same width.
    Bitcast {
        /// Destination.
        dst: Reg,
        /// Operand.
        a: Reg,
    },
    /// `dst = builtin`.
    Read {
        /// Destination.
        dst: Reg,
        /// What is read.
        what: Builtin,
    },
    /// `dst` = word `word` (bytes `4 * word ..`) of the parameter block,
    /// reinterpreted as `dst`'s type (`U32`, `I32` or `F32`).
    Param {
        /// Destination.
        dst: Reg,
        /// Index of the 32-bit word.
        word: u32,
    },
    /// `dst` = the scalar of `dst`'s type at `addr` in `space`, or zero
    /// where `guard` is false. `atomic` marks `atomicLoad`.
    Load {
        /// Destination.
        dst: Reg,
        /// Memory.
        space: Space,
        /// Byte offset.
        addr: Reg,
        /// Whether the access happens (`Bool`); `None`: always.
        guard: Option<Reg>,
        /// `atomicLoad`: not torn, not cached across invocations.
        atomic: bool,
    },
    /// Writes `value` at `addr` in `space` where `guard` holds.
    Store {
        /// Memory.
        space: Space,
        /// Byte offset.
        addr: Reg,
        /// Value.
        value: Reg,
        /// Whether the access happens; `None`: always.
        guard: Option<Reg>,
        /// `atomicStore`.
        atomic: bool,
    },
    /// An atomic read-modify-write of the `U32`/`I32` at `addr`; `dst`
    /// gets the old value (zero where `guard` is false).
    Atomic {
        /// Operation.
        op: AtomicOp,
        /// Old value, where the source uses it.
        dst: Option<Reg>,
        /// Memory (`Buffer` or `Shared`).
        space: Space,
        /// Byte offset.
        addr: Reg,
        /// Operand.
        value: Reg,
        /// The expected value of `CompareExchange`.
        compare: Option<Reg>,
        /// Whether the access happens; `None`: always.
        guard: Option<Reg>,
    },
    /// A subgroup operation (see [`SubgroupOp`] for `a` and `b`).
    Subgroup {
        /// Operation.
        op: SubgroupOp,
        /// Destination.
        dst: Reg,
        /// Operand.
        a: Reg,
        /// Lane or distance for shuffles.
        b: Option<Reg>,
    },
}

/// Structured control flow.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// One instruction.
    Inst(Inst),
    /// `if cond { then } else { els }`.
    If {
        /// `Bool` condition.
        cond: Reg,
        /// Taken where `cond` holds.
        then: Vec<Stmt>,
        /// Taken where it does not.
        els: Vec<Stmt>,
    },
    /// `loop { body continuing { continuing break if break_if } }`: the
    /// body, then the continuing block, then the loop ends for the
    /// invocations where `break_if` holds, and starts again for the
    /// others.
    Loop {
        /// The loop's body.
        body: Vec<Stmt>,
        /// Run after the body and after a `Continue`.
        continuing: Vec<Stmt>,
        /// `Bool`, computed in `continuing`.
        break_if: Option<Reg>,
    },
    /// Ends the innermost loop for this invocation.
    Break,
    /// Goes to the innermost loop's continuing block.
    Continue,
    /// A block that [`Stmt::Leave`] with its `id` exits (an inlined
    /// function, a switch). Ids are unique in a program.
    Block {
        /// Target of `Leave`.
        id: u32,
        /// Statements.
        body: Vec<Stmt>,
    },
    /// Continues after the enclosing block `id`, which may be several
    /// levels out (but never outside a loop the statement is in, unless
    /// the block encloses that loop too).
    Leave(u32),
    /// The invocation ends.
    Return,
    /// `workgroupBarrier()` / `storageBarrier()`: every invocation of the
    /// workgroup arrives before any goes on, and the named memory's
    /// writes before it are seen by the reads after it. Always in
    /// uniform control flow (WGSL checks that).
    Barrier {
        /// Orders workgroup memory.
        workgroup: bool,
        /// Orders storage buffers.
        storage: bool,
    },
}

/// A storage buffer the kernel binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// `@binding(n)` in the source (`@group(0)`).
    pub binding: u32,
    /// Declared `read` (never written).
    pub read_only: bool,
    /// The variable's name in the source.
    pub name: String,
}

/// What a kernel needs of a device beyond plain 32-bit arithmetic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Uses `f16` values.
    pub f16: bool,
    /// Uses subgroup operations or built-ins.
    pub subgroups: bool,
    /// Uses atomics.
    pub atomics: bool,
}

/// One compute entry point, lowered.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The entry point's name.
    pub name: String,
    /// `@workgroup_size`.
    pub workgroup_size: [u32; 3],
    /// The type of every register, indexed by [`Reg`].
    pub regs: Vec<Ty>,
    /// Storage buffers in binding order; [`Space::Buffer`] indexes this.
    pub buffers: Vec<Buffer>,
    /// Size in bytes of the parameter block (the uniform or immediate
    /// struct Keel passes after the buffers), 0 if there is none.
    pub param_bytes: u32,
    /// Bytes of workgroup memory.
    pub shared_bytes: u32,
    /// Bytes of private memory per invocation.
    pub private_bytes: u32,
    /// The entry point's body.
    pub body: Vec<Stmt>,
    /// Device capabilities it needs.
    pub needs: Needs,
}

impl Program {
    /// Invocations in one workgroup.
    pub fn invocations(&self) -> u32 {
        self.workgroup_size.iter().product()
    }

    /// The type of `reg`.
    pub fn ty(&self, reg: Reg) -> Ty {
        self.regs[reg.index()]
    }

    /// Per register, the one instruction that writes it; `None` where no
    /// instruction or several do (a `var`, a loop counter). What such an
    /// instruction makes of its operands is the register's value wherever
    /// it is read, which is what the analyses over the program use.
    pub fn single_writers(&self) -> Vec<Option<&Inst>> {
        let mut writers = vec![0u32; self.regs.len()];
        let mut defs: Vec<Option<&Inst>> = vec![None; self.regs.len()];
        walk(&self.body, &mut |inst| {
            if let Some(d) = inst.dst()
                && let Some(n) = writers.get_mut(d.index())
            {
                *n += 1;
                defs[d.index()] = Some(inst);
            }
        });
        for (d, n) in defs.iter_mut().zip(&writers) {
            if *n != 1 {
                *d = None;
            }
        }
        defs
    }
}

/// Calls `f` on every instruction of `stmts`, in program order.
pub(crate) fn walk<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a Inst)) {
    for s in stmts {
        match s {
            Stmt::Inst(inst) => f(inst),
            Stmt::If { then, els, .. } => {
                walk(then, f);
                walk(els, f);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                walk(body, f);
                walk(continuing, f);
            }
            Stmt::Block { body, .. } => walk(body, f),
            Stmt::Break | Stmt::Continue | Stmt::Leave(_) | Stmt::Return | Stmt::Barrier { .. } => {
            }
        }
    }
}

/// Calls `f` on every register `stmts` reads (`false`) or writes
/// (`true`), in program order, the conditions of `if`s and loops
/// included.
pub(crate) fn walk_regs(stmts: &[Stmt], f: &mut impl FnMut(Reg, bool)) {
    for s in stmts {
        match s {
            Stmt::Inst(inst) => {
                for r in inst.reads() {
                    f(r, false);
                }
                if let Some(d) = inst.dst() {
                    f(d, true);
                }
            }
            Stmt::If { cond, then, els } => {
                f(*cond, false);
                walk_regs(then, f);
                walk_regs(els, f);
            }
            Stmt::Loop {
                body,
                continuing,
                break_if,
            } => {
                walk_regs(body, f);
                walk_regs(continuing, f);
                if let Some(c) = break_if {
                    f(*c, false);
                }
            }
            Stmt::Block { body, .. } => walk_regs(body, f),
            Stmt::Break | Stmt::Continue | Stmt::Leave(_) | Stmt::Return | Stmt::Barrier { .. } => {
            }
        }
    }
}

/// Whether `f` holds for a statement of `stmts` or of the statements
/// they hold.
pub(crate) fn any_stmt(stmts: &[Stmt], f: &impl Fn(&Stmt) -> bool) -> bool {
    stmts.iter().any(|s| {
        f(s) || match s {
            Stmt::If { then, els, .. } => any_stmt(then, f) || any_stmt(els, f),
            Stmt::Loop {
                body, continuing, ..
            } => any_stmt(body, f) || any_stmt(continuing, f),
            Stmt::Block { body, .. } => any_stmt(body, f),
            _ => false,
        }
    })
}

/// Calls `f` on `stmts` and on every statement list it holds, at every
/// depth (the branches of `if`s, loops' bodies and continuing blocks,
/// blocks' bodies).
pub(crate) fn each_list<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a [Stmt])) {
    f(stmts);
    for s in stmts {
        match s {
            Stmt::If { then, els, .. } => {
                each_list(then, f);
                each_list(els, f);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                each_list(body, f);
                each_list(continuing, f);
            }
            Stmt::Block { body, .. } => each_list(body, f),
            _ => {}
        }
    }
}

/// [`each_list`] with each list given to `f` to change (`f` sees a list
/// before the lists its statements then hold).
pub(crate) fn each_list_mut(stmts: &mut Vec<Stmt>, f: &mut impl FnMut(&mut Vec<Stmt>)) {
    f(stmts);
    for s in stmts.iter_mut() {
        match s {
            Stmt::If { then, els, .. } => {
                each_list_mut(then, f);
                each_list_mut(els, f);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                each_list_mut(body, f);
                each_list_mut(continuing, f);
            }
            Stmt::Block { body, .. } => each_list_mut(body, f),
            _ => {}
        }
    }
}

/// Calls `f` on every instruction of `stmts`, in program order, to
/// rewrite it in place.
pub(crate) fn walk_mut(stmts: &mut [Stmt], f: &mut impl FnMut(&mut Inst)) {
    for s in stmts {
        match s {
            Stmt::Inst(inst) => f(inst),
            Stmt::If { then, els, .. } => {
                walk_mut(then, f);
                walk_mut(els, f);
            }
            Stmt::Loop {
                body, continuing, ..
            } => {
                walk_mut(body, f);
                walk_mut(continuing, f);
            }
            Stmt::Block { body, .. } => walk_mut(body, f),
            Stmt::Break | Stmt::Continue | Stmt::Leave(_) | Stmt::Return | Stmt::Barrier { .. } => {
            }
        }
    }
}

impl Inst {
    /// Whether the instruction is arithmetic: it touches no memory, cannot
    /// fail, and its value is a function of its operands alone.
    pub fn is_pure(&self) -> bool {
        matches!(
            self,
            Inst::Mov { .. }
                | Inst::Un { .. }
                | Inst::Bin { .. }
                | Inst::Fma { .. }
                | Inst::Select { .. }
                | Inst::Convert { .. }
                | Inst::Bitcast { .. }
        )
    }

    /// Every register the instruction reads, guards included.
    pub fn reads(&self) -> Vec<Reg> {
        match *self {
            Inst::Const { .. } | Inst::Read { .. } | Inst::Param { .. } => Vec::new(),
            Inst::Mov { src: a, .. }
            | Inst::Un { a, .. }
            | Inst::Convert { a, .. }
            | Inst::Bitcast { a, .. } => vec![a],
            Inst::Bin { a, b, .. } => vec![a, b],
            Inst::Fma { a, b, c, .. } => vec![a, b, c],
            Inst::Select { cond, a, b, .. } => vec![cond, a, b],
            Inst::Load { addr, guard, .. } => [Some(addr), guard].into_iter().flatten().collect(),
            Inst::Store {
                addr, value, guard, ..
            } => [Some(addr), Some(value), guard]
                .into_iter()
                .flatten()
                .collect(),
            Inst::Atomic {
                addr,
                value,
                compare,
                guard,
                ..
            } => [Some(addr), Some(value), compare, guard]
                .into_iter()
                .flatten()
                .collect(),
            Inst::Subgroup { a, b, .. } => [Some(a), b].into_iter().flatten().collect(),
        }
    }

    /// The register the instruction writes, if any.
    pub fn dst(&self) -> Option<Reg> {
        match *self {
            Inst::Const { dst, .. }
            | Inst::Mov { dst, .. }
            | Inst::Un { dst, .. }
            | Inst::Bin { dst, .. }
            | Inst::Fma { dst, .. }
            | Inst::Select { dst, .. }
            | Inst::Convert { dst, .. }
            | Inst::Bitcast { dst, .. }
            | Inst::Read { dst, .. }
            | Inst::Param { dst, .. }
            | Inst::Load { dst, .. }
            | Inst::Subgroup { dst, .. } => Some(dst),
            Inst::Atomic { dst, .. } => dst,
            Inst::Store { .. } => None,
        }
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}
