//! The PTX end: hand-built programs that together use every instruction,
//! operation, space and statement of the IR, printed and handed to
//! `ptxas` for sm_70, sm_80 and sm_90 (where `KEEL_PTXAS` names one),
//! plus checks on the text itself.

use std::path::PathBuf;
use std::process::Command;

use keel_wgsl::ir::{
    AtomicOp, Axis, BinOp, Buffer, Builtin, Inst, Needs, Program, Reduce, Reg, Space, Stmt,
    SubgroupOp, Ty, UnOp,
};
use keel_wgsl::ptx::{PtxError, emit};

/// Builds a program's registers and statements.
struct Builder {
    regs: Vec<Ty>,
    body: Vec<Stmt>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            regs: Vec::new(),
            body: Vec::new(),
        }
    }

    fn reg(&mut self, ty: Ty) -> Reg {
        self.regs.push(ty);
        Reg(self.regs.len() as u32 - 1)
    }

    fn inst(&mut self, inst: Inst) {
        self.body.push(Stmt::Inst(inst));
    }

    /// A register of `ty` holding `bits`.
    fn konst(&mut self, ty: Ty, bits: u64) -> Reg {
        let dst = self.reg(ty);
        self.inst(Inst::Const { dst, bits });
        dst
    }

    /// A register of `ty` holding something the compiler cannot fold:
    /// read from the parameter block and converted.
    fn opaque(&mut self, ty: Ty) -> Reg {
        let word = self.reg(Ty::U32);
        self.inst(Inst::Param { dst: word, word: 0 });
        if ty == Ty::U32 {
            return word;
        }
        let dst = self.reg(ty);
        self.inst(Inst::Convert { dst, a: word });
        dst
    }

    /// Stores `value` to buffer 0 so that nothing computed is dead.
    fn sink(&mut self, value: Reg) {
        let ty = self.regs[value.index()];
        let value = if ty == Ty::Bool {
            let v = self.reg(Ty::U32);
            self.inst(Inst::Convert { dst: v, a: value });
            v
        } else {
            value
        };
        let addr = self.konst(Ty::U64, 64);
        self.inst(Inst::Store {
            space: Space::Buffer(0),
            addr,
            value,
            guard: None,
            atomic: false,
        });
    }

    fn program(self, name: &str) -> Program {
        Program {
            name: name.to_string(),
            workgroup_size: [64, 1, 1],
            regs: self.regs,
            buffers: vec![
                Buffer {
                    binding: 0,
                    read_only: false,
                    name: "out".to_string(),
                },
                Buffer {
                    binding: 1,
                    read_only: true,
                    name: "input".to_string(),
                },
            ],
            param_bytes: 16,
            shared_bytes: 0,
            private_bytes: 0,
            body: self.body,
            needs: Needs::default(),
        }
    }
}

const TYPES: [Ty; 6] = [Ty::Bool, Ty::U32, Ty::I32, Ty::F32, Ty::F16, Ty::U64];

const REDUCES: [Reduce; 7] = [
    Reduce::Add,
    Reduce::Mul,
    Reduce::Min,
    Reduce::Max,
    Reduce::And,
    Reduce::Or,
    Reduce::Xor,
];

fn unop_valid(op: UnOp, ty: Ty) -> bool {
    use UnOp::*;
    match ty {
        Ty::Bool => op == Not,
        Ty::U32 | Ty::I32 => matches!(
            op,
            Neg | Not | Abs | CountOneBits | ReverseBits | CountLeadingZeros | CountTrailingZeros
        ),
        Ty::U64 => matches!(op, Neg | Not | Abs),
        Ty::F32 | Ty::F16 => !matches!(
            op,
            Not | CountOneBits | ReverseBits | CountLeadingZeros | CountTrailingZeros
        ),
    }
}

fn binop_valid(op: BinOp, ty: Ty) -> bool {
    use BinOp::*;
    match ty {
        Ty::Bool => matches!(op, And | Or | Xor | Eq | Ne),
        Ty::U32 | Ty::I32 | Ty::U64 => !matches!(op, Pow | Atan2),
        Ty::F32 | Ty::F16 => !matches!(op, And | Or | Xor | Shl | Shr),
    }
}

/// Emits `program`, runs ptxas on it for each architecture, and returns
/// the text.
fn check(program: &Program) -> String {
    let text = match emit(program) {
        Ok(text) => text,
        Err(e) => panic!("{}: {e}", program.name),
    };
    assemble(&program.name, &text);
    text
}

fn ptxas() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("KEEL_PTXAS")?);
    path.is_file().then_some(path)
}

fn assemble(name: &str, text: &str) {
    // KEEL_PTX_DUMP=dir keeps every printed file for reading.
    if let Some(dir) = std::env::var_os("KEEL_PTX_DUMP") {
        let path = PathBuf::from(dir).join(format!("{name}.ptx"));
        std::fs::write(&path, text).expect("the dump directory is writable");
    }
    let Some(ptxas) = ptxas() else {
        println!("skipped: ptxas not found (set KEEL_PTXAS)");
        return;
    };
    let file = std::env::temp_dir().join(format!("keel-ptx-{}-{name}.ptx", std::process::id()));
    std::fs::write(&file, text).expect("the temporary directory is writable");
    for arch in ["sm_70", "sm_80", "sm_90"] {
        let out = Command::new(&ptxas)
            .arg(format!("-arch={arch}"))
            .arg("-o")
            .arg("/dev/null")
            .arg(&file)
            .output()
            .expect("ptxas runs");
        if !out.status.success() {
            let numbered: String = text
                .lines()
                .enumerate()
                .map(|(i, l)| format!("{:5} {l}\n", i + 1))
                .collect();
            panic!(
                "ptxas -arch={arch} rejected {name}:\n{}\n{numbered}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    std::fs::remove_file(&file).ok();
}

#[test]
fn every_unary_and_binary_operation() {
    let mut b = Builder::new();
    for ty in TYPES {
        let x = b.opaque(ty);
        let y = b.opaque(ty);
        for op in UnOp::ALL.into_iter().filter(|op| unop_valid(*op, ty)) {
            let dst = b.reg(ty);
            b.inst(Inst::Un { op, dst, a: x });
            b.sink(dst);
        }
        for op in BinOp::ALL.into_iter().filter(|op| binop_valid(*op, ty)) {
            let dst = b.reg(if op.is_comparison() { Ty::Bool } else { ty });
            let rhs = if matches!(op, BinOp::Shl | BinOp::Shr) {
                b.opaque(Ty::U32)
            } else {
                y
            };
            b.inst(Inst::Bin {
                op,
                dst,
                a: x,
                b: rhs,
            });
            b.sink(dst);
        }
        // The destination as an operand: expansions must read first.
        if ty.is_float() {
            b.inst(Inst::Un {
                op: UnOp::Atan,
                dst: x,
                a: x,
            });
            b.inst(Inst::Bin {
                op: BinOp::Atan2,
                dst: y,
                a: y,
                b: x,
            });
            b.sink(y);
        }
    }
    check(&b.program("unary_binary"));
}

#[test]
fn invalid_operations_are_errors() {
    for ty in TYPES {
        for op in UnOp::ALL.into_iter().filter(|op| !unop_valid(*op, ty)) {
            let mut b = Builder::new();
            let x = b.opaque(ty);
            let dst = b.reg(ty);
            b.inst(Inst::Un { op, dst, a: x });
            assert!(emit(&b.program("bad")).is_err(), "{op:?} of {ty:?}");
        }
        for op in BinOp::ALL.into_iter().filter(|op| !binop_valid(*op, ty)) {
            let mut b = Builder::new();
            let x = b.opaque(ty);
            let dst = b.reg(ty);
            b.inst(Inst::Bin {
                op,
                dst,
                a: x,
                b: x,
            });
            assert!(emit(&b.program("bad")).is_err(), "{op:?} of {ty:?}");
        }
    }
}

#[test]
fn constants_moves_selects_fma_conversions_and_bitcasts() {
    let mut b = Builder::new();
    let cond = b.opaque(Ty::Bool);
    for ty in TYPES {
        for bits in [0, 1, 0x3F80_0000, u64::MAX] {
            let c = b.konst(ty, bits);
            b.sink(c);
        }
        let x = b.opaque(ty);
        let y = b.opaque(ty);
        let m = b.reg(ty);
        b.inst(Inst::Mov { dst: m, src: x });
        let s = b.reg(ty);
        b.inst(Inst::Select {
            dst: s,
            cond,
            a: m,
            b: y,
        });
        b.sink(s);
        // Select whose destination is its own condition.
        if ty == Ty::Bool {
            b.inst(Inst::Select {
                dst: x,
                cond: x,
                a: y,
                b: m,
            });
            b.sink(x);
        }
        if ty.is_float() {
            let f = b.reg(ty);
            b.inst(Inst::Fma {
                dst: f,
                a: x,
                b: y,
                c: m,
            });
            b.sink(f);
        }
        for to in TYPES {
            let c = b.reg(to);
            b.inst(Inst::Convert { dst: c, a: x });
            b.sink(c);
            if to != Ty::Bool && ty != Ty::Bool && to.bytes() == ty.bytes() {
                let c = b.reg(to);
                b.inst(Inst::Bitcast { dst: c, a: x });
                b.sink(c);
            }
        }
    }
    check(&b.program("values"));
}

#[test]
fn builtins_and_parameters() {
    let mut b = Builder::new();
    for axis in [Axis::X, Axis::Y, Axis::Z] {
        for what in [
            Builtin::LocalId(axis),
            Builtin::GroupId(axis),
            Builtin::NumGroups(axis),
        ] {
            let dst = b.reg(Ty::U32);
            b.inst(Inst::Read { dst, what });
            b.sink(dst);
        }
    }
    for what in [Builtin::SubgroupSize, Builtin::SubgroupInvocationId] {
        let dst = b.reg(Ty::U32);
        b.inst(Inst::Read { dst, what });
        b.sink(dst);
    }
    for n in 0..2 {
        let dst = b.reg(Ty::U64);
        b.inst(Inst::Read {
            dst,
            what: Builtin::BufferLen(n),
        });
        b.sink(dst);
    }
    for (word, ty) in [(0, Ty::U32), (1, Ty::I32), (2, Ty::F32), (3, Ty::U32)] {
        let dst = b.reg(ty);
        b.inst(Inst::Param { dst, word });
        b.sink(dst);
    }
    let text = check(&b.program("builtins"));
    assert!(text.contains("mov.u32 %r"), "{text}");
    assert!(text.contains("%laneid;"));
    assert!(text.contains("ld.param.f32"));
}

#[test]
fn memory_in_every_space() {
    let mut b = Builder::new();
    let guard = b.opaque(Ty::Bool);
    let off64 = b.opaque(Ty::U64);
    let off32 = b.opaque(Ty::U32);
    for space in [
        Space::Buffer(0),
        Space::Buffer(1),
        Space::Shared,
        Space::Private,
    ] {
        let addr = if matches!(space, Space::Buffer(_)) {
            off64
        } else {
            off32
        };
        for ty in [Ty::U32, Ty::I32, Ty::F32, Ty::F16, Ty::U64] {
            for g in [None, Some(guard)] {
                for atomic in [false, true] {
                    if atomic && !matches!(ty, Ty::U32 | Ty::I32) {
                        continue;
                    }
                    let dst = b.reg(ty);
                    b.inst(Inst::Load {
                        dst,
                        space,
                        addr,
                        guard: g,
                        atomic,
                    });
                    b.inst(Inst::Store {
                        space,
                        addr,
                        value: dst,
                        guard: g,
                        atomic,
                    });
                }
            }
        }
    }
    // A guarded load whose destination is its own address.
    b.inst(Inst::Load {
        dst: off32,
        space: Space::Shared,
        addr: off32,
        guard: Some(guard),
        atomic: false,
    });
    b.sink(off32);
    let mut p = b.program("memory");
    p.shared_bytes = 1000;
    p.private_bytes = 24;
    let text = check(&p);
    assert!(
        text.contains(".shared .align 16 .b8 keel_shared[1008];"),
        "{text}"
    );
    assert!(text.contains(".local .align 16 .b8 keel_private[32];"));
    assert!(text.contains("ld.relaxed.gpu.global.u32"));
    assert!(text.contains("st.relaxed.gpu.global.s32"));
    assert!(text.contains("ld.volatile.shared.u32"));
    assert!(text.contains("st.volatile.shared.s32"));
    assert!(text.contains("cvta.to.global.u64 %buf1, %buf1;"));
    assert!(
        text.contains("bar.sync 0;"),
        "workgroup memory is zeroed, then synced"
    );

    // Large private memory zeroes in a loop.
    let mut big = Builder::new();
    let off = big.opaque(Ty::U32);
    let v = big.reg(Ty::F32);
    big.inst(Inst::Load {
        dst: v,
        space: Space::Private,
        addr: off,
        guard: None,
        atomic: false,
    });
    big.sink(v);
    let mut p = big.program("big_private");
    p.private_bytes = 4096;
    let text = check(&p);
    assert!(text.contains("$Lzero_private:"));
    assert!(!text.contains("keel_shared"));
}

#[test]
fn every_atomic() {
    let ops = [
        AtomicOp::Add,
        AtomicOp::Sub,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Exchange,
        AtomicOp::CompareExchange,
    ];
    let mut b = Builder::new();
    let guard = b.opaque(Ty::Bool);
    let off64 = b.opaque(Ty::U64);
    let off32 = b.opaque(Ty::U32);
    for space in [Space::Buffer(1), Space::Shared] {
        let addr = if space == Space::Shared { off32 } else { off64 };
        for ty in [Ty::U32, Ty::I32] {
            let value = b.opaque(ty);
            let compare = b.opaque(ty);
            for op in ops {
                for g in [None, Some(guard)] {
                    for keep in [false, true] {
                        let dst = keep.then(|| b.reg(ty));
                        b.inst(Inst::Atomic {
                            op,
                            dst,
                            space,
                            addr,
                            value,
                            compare: (op == AtomicOp::CompareExchange).then_some(compare),
                            guard: g,
                        });
                        if let Some(d) = dst {
                            b.sink(d);
                        }
                    }
                }
            }
            // The old value written over the operand.
            b.inst(Inst::Atomic {
                op: AtomicOp::Sub,
                dst: Some(value),
                space,
                addr,
                value,
                compare: None,
                guard: Some(guard),
            });
            b.sink(value);
        }
    }
    let mut p = b.program("atomics");
    p.shared_bytes = 256;
    let text = check(&p);
    for needle in [
        "atom.global.add.u32",
        "atom.global.min.s32",
        "atom.global.max.u32",
        "atom.global.exch.b32",
        "atom.global.cas.b32",
        "atom.shared.xor.b32",
        "atom.shared.min.u32",
        "atom.shared.max.s32",
    ] {
        assert!(text.contains(needle), "{needle} missing");
    }
}

#[test]
fn every_subgroup_operation() {
    let mut b = Builder::new();
    let lane = b.opaque(Ty::U32);
    for ty in [Ty::U32, Ty::I32, Ty::F32, Ty::F16, Ty::Bool, Ty::U64] {
        let x = b.opaque(ty);
        let mut ops = vec![
            SubgroupOp::BroadcastFirst,
            SubgroupOp::Shuffle,
            SubgroupOp::ShuffleDown,
            SubgroupOp::ShuffleUp,
            SubgroupOp::ShuffleXor,
        ];
        let reduces: Vec<Reduce> = match ty {
            Ty::F32 | Ty::F16 => REDUCES[..4].to_vec(),
            Ty::Bool => REDUCES[4..].to_vec(),
            _ => REDUCES.to_vec(),
        };
        for r in reduces {
            ops.push(SubgroupOp::Reduce(r));
            ops.push(SubgroupOp::InclusiveScan(r));
            ops.push(SubgroupOp::ExclusiveScan(r));
        }
        if ty == Ty::Bool {
            ops.extend([SubgroupOp::All, SubgroupOp::Any, SubgroupOp::Ballot]);
        }
        for op in ops {
            let dst = b.reg(if op == SubgroupOp::Ballot {
                Ty::U32
            } else {
                ty
            });
            let needs_lane = matches!(
                op,
                SubgroupOp::Shuffle
                    | SubgroupOp::ShuffleDown
                    | SubgroupOp::ShuffleUp
                    | SubgroupOp::ShuffleXor
            );
            b.inst(Inst::Subgroup {
                op,
                dst,
                a: x,
                b: needs_lane.then_some(lane),
            });
            b.sink(dst);
        }
        // In place.
        b.inst(Inst::Subgroup {
            op: SubgroupOp::InclusiveScan(Reduce::Max),
            dst: x,
            a: x,
            b: None,
        });
        b.sink(x);
    }
    // Inside divergent code, where only some lanes take part.
    let cond = b.opaque(Ty::Bool);
    let x = b.opaque(Ty::F32);
    let dst = b.reg(Ty::F32);
    let inner = vec![Stmt::Inst(Inst::Subgroup {
        op: SubgroupOp::Reduce(Reduce::Add),
        dst,
        a: x,
        b: None,
    })];
    b.body.push(Stmt::If {
        cond,
        then: inner,
        els: vec![],
    });
    b.sink(dst);
    let mut p = b.program("subgroups");
    p.workgroup_size = [8, 1, 1];
    let text = check(&p);
    assert!(text.contains("activemask.b32"));
    assert!(text.contains("shfl.sync.bfly.b32"));
    assert!(text.contains("shfl.sync.up.b32"));
    assert!(text.contains("shfl.sync.down.b32"));
    assert!(text.contains("shfl.sync.idx.b32"));
    assert!(text.contains("vote.sync.ballot.b32"));
    assert!(text.contains("vote.sync.all.pred"));
    assert!(text.contains("vote.sync.any.pred"));
}

#[test]
fn every_statement() {
    let mut b = Builder::new();
    let i = b.opaque(Ty::U32);
    let one = b.konst(Ty::U32, 1);
    let ten = b.konst(Ty::U32, 10);
    let c = b.reg(Ty::Bool);
    let done = b.reg(Ty::Bool);
    let step = Stmt::Inst(Inst::Bin {
        op: BinOp::Add,
        dst: i,
        a: i,
        b: one,
    });
    let test = |dst| {
        Stmt::Inst(Inst::Bin {
            op: BinOp::Gt,
            dst,
            a: i,
            b: ten,
        })
    };
    let inner_loop = Stmt::Loop {
        body: vec![
            test(c),
            Stmt::If {
                cond: c,
                then: vec![Stmt::Break],
                els: vec![Stmt::Continue],
            },
            // Leaves the block around both loops.
            Stmt::If {
                cond: c,
                then: vec![Stmt::Leave(7)],
                els: vec![],
            },
        ],
        continuing: vec![step.clone(), test(done)],
        break_if: Some(done),
    };
    let outer_loop = Stmt::Loop {
        body: vec![
            Stmt::Block {
                id: 3,
                body: vec![
                    test(c),
                    Stmt::If {
                        cond: c,
                        then: vec![Stmt::Leave(3)],
                        els: vec![Stmt::Return],
                    },
                ],
            },
            inner_loop,
            Stmt::If {
                cond: c,
                then: vec![Stmt::Continue],
                els: vec![],
            },
            Stmt::Break,
        ],
        continuing: vec![step],
        break_if: None,
    };
    b.body.push(Stmt::Block {
        id: 7,
        body: vec![outer_loop, Stmt::Leave(7)],
    });
    b.body.push(Stmt::Barrier {
        workgroup: true,
        storage: false,
    });
    b.body.push(Stmt::Barrier {
        workgroup: true,
        storage: true,
    });
    b.sink(i);
    b.body.push(Stmt::Return);
    let text = check(&b.program("statements"));
    assert!(text.contains("$B7_end:"));
    assert!(text.contains("bra $B7_end;"));
    assert!(text.contains("membar.gl;\n\tbar.sync 0;"));
    assert!(text.contains("ret;"));
}

#[test]
fn control_flow_errors() {
    let cases: Vec<(Vec<Stmt>, &str)> = vec![
        (vec![Stmt::Break], "break outside"),
        (vec![Stmt::Continue], "continue outside"),
        (vec![Stmt::Leave(1)], "does not enclose"),
        (
            vec![
                Stmt::Block {
                    id: 1,
                    body: vec![],
                },
                Stmt::Block {
                    id: 1,
                    body: vec![],
                },
            ],
            "used twice",
        ),
    ];
    for (body, message) in cases {
        let mut b = Builder::new();
        b.body = body;
        let err: PtxError = emit(&b.program("bad")).expect_err("an inconsistent program");
        assert!(err.message().contains(message), "{err}");
    }
}

#[test]
fn type_errors() {
    let mut b = Builder::new();
    let x = b.opaque(Ty::U32);
    let f = b.opaque(Ty::F32);
    let dst = b.reg(Ty::U32);
    b.inst(Inst::Bin {
        op: BinOp::Add,
        dst,
        a: x,
        b: f,
    });
    assert!(emit(&b.program("bad")).is_err());

    let mut b = Builder::new();
    b.inst(Inst::Mov {
        dst: Reg(5),
        src: Reg(6),
    });
    assert!(emit(&b.program("bad")).is_err());

    let mut b = Builder::new();
    let x = b.opaque(Ty::U32);
    b.inst(Inst::Param { dst: x, word: 4 });
    let err = emit(&b.program("bad")).expect_err("word 4 of a 16-byte block");
    assert!(err.to_string().contains("parameter word 4"), "{err}");

    let mut p = Builder::new().program("not an identifier");
    assert!(emit(&p).is_err());
    p.name = "ok_name".to_string();
    p.workgroup_size = [1024, 2, 1];
    assert!(emit(&p).is_err());
}

#[test]
fn parameter_list() {
    let mut b = Builder::new();
    let x = b.reg(Ty::F32);
    b.inst(Inst::Param { dst: x, word: 2 });
    let y = b.reg(Ty::F32);
    b.inst(Inst::Bin {
        op: BinOp::Mul,
        dst: y,
        a: x,
        b: x,
    });
    let z = b.reg(Ty::F32);
    b.inst(Inst::Bin {
        op: BinOp::Add,
        dst: z,
        a: y,
        b: x,
    });
    b.sink(z);
    let mut p = b.program("params");
    p.param_bytes = 12;
    let text = check(&p);
    let expected = "\
.visible .entry params(
\t.param .u64 keel_buf0,\t// binding 0: out
\t.param .u64 keel_buf1,\t// binding 1: input
\t.param .b32 keel_w0,
\t.param .b32 keel_w1,
\t.param .b32 keel_w2,
\t.param .u64 keel_len0,
\t.param .u64 keel_len1
)
.maxntid 64, 1, 1
";
    assert!(text.contains(expected), "{text}");
    assert!(text.starts_with("//"));
    assert!(text.contains(".version 7.0\n.target sm_70\n.address_size 64\n"));
    // The source's multiply and add carry no rounding modifier, which
    // lets ptxas contract them into an FMA as WGSL allows (section
    // 15.7.5); the printer itself fuses nothing.
    assert!(text.contains("mul.f32 %f"), "{text}");
    assert!(text.contains("add.f32 %f"), "{text}");
    assert!(!text.contains("mul.rn.f32") && !text.contains("add.rn.f32"));
    assert!(!text.contains("fma"), "{text}");
    assert!(text.contains("ld.param.f32 %f0, [keel_w2];"));

    let mut b = Builder::new();
    let x = b.opaque(Ty::F32);
    let y = b.reg(Ty::F32);
    b.inst(Inst::Fma {
        dst: y,
        a: x,
        b: x,
        c: x,
    });
    b.sink(y);
    let text = check(&b.program("fused"));
    assert_eq!(text.matches("fma.rn.f32").count(), 1);
}

#[test]
fn empty_program() {
    let mut p = Builder::new().program("empty");
    p.buffers.clear();
    p.param_bytes = 0;
    let text = check(&p);
    assert!(text.contains(".visible .entry empty(\n)"), "{text}");
}

/// Vectors read from workgroup memory are read whole: one `ld.shared.v4`
/// per `vec4`, a `v2` and a scalar per `vec3` (its 16-byte stride keeps
/// the first two components 8-byte aligned), and, with every index made
/// of the local id and constants, no guard on them.
#[test]
fn workgroup_vectors_are_read_whole() {
    let src = "
        @group(0) @binding(0) var<storage, read_write> out: array<f32>;
        var<workgroup> tile4: array<vec4<f32>, 64>;
        var<workgroup> tile3: array<vec3<f32>, 64>;
        @compute @workgroup_size(64)
        fn k(@builtin(local_invocation_id) lid: vec3<u32>) {
            tile4[lid.x] = vec4<f32>(f32(lid.x));
            tile3[lid.x] = vec3<f32>(1.0);
            workgroupBarrier();
            let a = tile4[63u - lid.x];
            let b = tile3[lid.x / 2u];
            out[lid.x] = a.x + a.y + a.z + a.w + b.x + b.y + b.z;
        }";
    let program = keel_wgsl::compile(src, "k").expect("compiles");
    let text = check(&program);
    assert_eq!(text.matches("ld.shared.v4.f32").count(), 1, "{text}");
    assert_eq!(text.matches("ld.shared.v2.f32").count(), 1, "{text}");
    assert_eq!(text.matches("ld.shared.f32").count(), 1, "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains("ld.shared") && l.contains('@')),
        "unguarded: {text}"
    );
}
