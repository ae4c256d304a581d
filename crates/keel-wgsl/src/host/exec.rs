//! The SIMT interpreter: one workgroup's invocations run in lockstep,
//! lane by lane within each instruction, under a mask of active lanes.
//!
//! Structured control flow narrows the mask: an `if` runs each side with
//! the lanes that take it; `break`, `continue`, `leave` and `return`
//! take the active lanes out and mark each with where it is waiting to
//! come back (the loop's end, its continuing block, the block's end,
//! never), and the construct that is the target puts them back. Because
//! every lane has run every statement before the next starts, a barrier
//! needs no work: writes before it are seen after it.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::ir::{AtomicOp, Space};

use super::HostError;
use super::compile::{Addr, Compiled, Node, Op, SUBGROUP, Slot, SubgroupKernel, Width};
use super::lanes::{self, Mask};

/// A storage buffer's words.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mem<'a> {
    /// A read-only buffer: plain words, which every thread may read and
    /// none writes.
    Plain(&'a [u32]),
    /// A buffer the kernel may write: relaxed atomic words, shared by
    /// every thread.
    Atomic(&'a [AtomicU32]),
}

/// A storage buffer as the interpreter sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding<'a> {
    /// The buffer as 32-bit words.
    pub(crate) words: Mem<'a>,
    /// Its length in bytes (what bounds checks compare against).
    pub(crate) len: u64,
}

/// Where an inactive lane waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Not waiting (active, or inactive only because of an `if`).
    None,
    /// Returned: never comes back.
    Return,
    /// After loop `id`.
    Break(u32),
    /// At loop `id`'s continuing block.
    Continue(u32),
    /// After block `id`.
    Leave(u32),
}

/// The active lanes.
#[derive(Debug)]
struct Lanes {
    /// Per lane: active.
    on: Vec<bool>,
    /// How many are.
    count: usize,
}

/// The launch-wide read-only state a worker reads.
#[derive(Debug)]
pub(super) struct Shared<'a> {
    /// The compiled program.
    pub(super) code: &'a Compiled,
    /// The kernel's name, for errors.
    pub(super) name: &'a str,
    /// Workgroup size.
    pub(super) size: [u32; 3],
    /// Workgroups per axis.
    pub(super) grid: [u32; 3],
    /// The storage buffers.
    pub(super) buffers: Vec<Binding<'a>>,
    /// Bytes of workgroup memory.
    pub(super) shared_bytes: u32,
    /// Bytes of private memory per invocation.
    pub(super) private_bytes: u32,
}

/// One thread's interpreter state, reused for every workgroup it runs.
#[derive(Debug)]
pub(super) struct Worker<'a> {
    env: &'a Shared<'a>,
    /// Invocations per workgroup.
    w: usize,
    /// 32-bit registers, each `w` lanes.
    r32: Vec<Vec<u32>>,
    /// `U64` registers, each `w` lanes.
    r64: Vec<Vec<u64>>,
    /// Where each lane waits.
    exits: Vec<Exit>,
    /// Lanes waiting for a loop or block (not returned).
    pending: usize,
    /// Spare masks.
    pool: Vec<Vec<bool>>,
    /// Workgroup memory.
    shared: Vec<u32>,
    /// Private memory: lane `i` at words `i * private_words ..`.
    private: Vec<u32>,
    /// Words of private memory per lane.
    private_words: usize,
    /// `local_invocation_id` per axis.
    local: [Vec<u32>; 3],
    /// `subgroup_invocation_id`.
    sub_lane: Vec<u32>,
    /// The current `workgroup_id`.
    group: [u32; 3],
    /// The workgroup's mask, kept between workgroups.
    on: Vec<bool>,
}

/// An access outside its memory.
struct Fault {
    offset: u64,
    bytes: u64,
}

impl<'a> Worker<'a> {
    /// A worker with zeroed registers.
    pub(super) fn new(env: &'a Shared<'a>) -> Self {
        let [sx, sy, _] = env.size.map(|s| s as usize);
        let w = env.size.iter().map(|&s| s as usize).product::<usize>();
        let private_words = (env.private_bytes as usize).div_ceil(4);
        let idx = |f: fn(usize) -> usize| (0..w).map(|i| f(i) as u32).collect::<Vec<u32>>();
        let local = [
            (0..w).map(|i| (i % sx) as u32).collect(),
            (0..w).map(|i| (i / sx % sy) as u32).collect(),
            (0..w).map(|i| (i / (sx * sy)) as u32).collect(),
        ];
        let mut r32 = vec![vec![0; w]; env.code.regs32];
        let mut r64 = vec![vec![0; w]; env.code.regs64];
        for &(slot, v) in &env.code.consts32 {
            r32[slot].fill(v);
        }
        for &(slot, v) in &env.code.consts64 {
            r64[slot].fill(v);
        }
        Worker {
            env,
            w,
            r32,
            r64,
            on: vec![true; w],
            exits: vec![Exit::None; w],
            pending: 0,
            pool: Vec::new(),
            shared: vec![0; (env.shared_bytes as usize).div_ceil(4)],
            private: vec![0; private_words * w],
            private_words,
            local,
            sub_lane: idx(|i| i % SUBGROUP),
            group: [0; 3],
        }
    }

    /// Runs workgroup `index` (x fastest, then y, then z).
    ///
    /// Registers are not cleared between workgroups: the lowering writes
    /// every register before reading it (WGSL has no uninitialized
    /// values), so a register's lanes never carry a value across
    /// workgroups into what the kernel computes.
    pub(super) fn run_group(&mut self, index: u64) -> Result<(), HostError> {
        self.group = super::group_id(index, self.env.grid);
        self.shared.fill(0);
        self.private.fill(0);
        self.exits.fill(Exit::None);
        self.pending = 0;
        let mut on = std::mem::take(&mut self.on);
        on.fill(true);
        let mut lanes = Lanes { on, count: self.w };
        let env = self.env;
        let result = self.exec(&env.code.body, &mut lanes);
        self.on = lanes.on;
        result
    }

    fn take_mask(&mut self) -> Vec<bool> {
        match self.pool.pop() {
            Some(mut m) => {
                m.fill(false);
                m
            }
            None => vec![false; self.w],
        }
    }

    fn exec(&mut self, nodes: &[Node], lanes: &mut Lanes) -> Result<(), HostError> {
        for node in nodes {
            if lanes.count == 0 {
                return Ok(());
            }
            match node {
                Node::Run(ops) => {
                    let mask = (lanes.count < self.w).then_some(&lanes.on[..]);
                    for op in ops {
                        self.op(op, mask)?;
                    }
                }
                Node::If { cond, then, els } => self.branch(*cond, then, els, lanes)?,
                Node::Loop {
                    id,
                    body,
                    continuing,
                    break_if,
                } => {
                    loop {
                        self.exec(body, lanes)?;
                        self.restore(lanes, Exit::Continue(*id));
                        self.exec(continuing, lanes)?;
                        if let Some(c) = break_if {
                            let c = &self.r32[*c];
                            for ((on, &c), e) in lanes.on.iter_mut().zip(c).zip(&mut self.exits) {
                                if *on && c != 0 {
                                    *on = false;
                                    lanes.count -= 1;
                                    *e = Exit::Break(*id);
                                    self.pending += 1;
                                }
                            }
                        }
                        if lanes.count == 0 {
                            break;
                        }
                    }
                    self.restore(lanes, Exit::Break(*id));
                }
                Node::Break(id) => self.park(lanes, Exit::Break(*id)),
                Node::Continue(id) => self.park(lanes, Exit::Continue(*id)),
                Node::Leave(id) => self.park(lanes, Exit::Leave(*id)),
                Node::Return => self.park(lanes, Exit::Return),
                Node::Block { id, body } => {
                    self.exec(body, lanes)?;
                    self.restore(lanes, Exit::Leave(*id));
                }
            }
        }
        Ok(())
    }

    /// Runs `then` with the active lanes where `cond` holds and `els`
    /// with the others; without a mask split where all go one way.
    fn branch(
        &mut self,
        cond: Slot,
        then: &[Node],
        els: &[Node],
        lanes: &mut Lanes,
    ) -> Result<(), HostError> {
        let c = &self.r32[cond];
        let taken = if lanes.count == self.w {
            c.iter().filter(|&&c| c != 0).count()
        } else {
            c.iter()
                .zip(&lanes.on)
                .filter(|&(&c, &on)| on && c != 0)
                .count()
        };
        if taken == lanes.count {
            return self.exec(then, lanes);
        }
        if taken == 0 {
            return self.exec(els, lanes);
        }
        let mut t = Lanes {
            on: self.take_mask(),
            count: taken,
        };
        let mut e = Lanes {
            on: self.take_mask(),
            count: lanes.count - taken,
        };
        let c = &self.r32[cond];
        for (((t, e), &on), &c) in t.on.iter_mut().zip(&mut e.on).zip(&lanes.on).zip(c) {
            *t = on && c != 0;
            *e = on && c == 0;
        }
        self.exec(then, &mut t)?;
        self.exec(els, &mut e)?;
        for ((on, &t), &e) in lanes.on.iter_mut().zip(&t.on).zip(&e.on) {
            *on = t || e;
        }
        lanes.count = t.count + e.count;
        self.pool.push(t.on);
        self.pool.push(e.on);
        Ok(())
    }

    /// Takes every active lane out, waiting at `exit`.
    fn park(&mut self, lanes: &mut Lanes, exit: Exit) {
        for (on, e) in lanes.on.iter_mut().zip(&mut self.exits) {
            if *on {
                *on = false;
                *e = exit;
            }
        }
        if exit != Exit::Return {
            self.pending += lanes.count;
        }
        lanes.count = 0;
    }

    /// Brings back the lanes waiting at `exit`.
    fn restore(&mut self, lanes: &mut Lanes, exit: Exit) {
        if self.pending == 0 {
            return;
        }
        for (on, e) in lanes.on.iter_mut().zip(&mut self.exits) {
            if *e == exit {
                *e = Exit::None;
                *on = true;
                lanes.count += 1;
                self.pending -= 1;
            }
        }
    }

    fn op(&mut self, op: &Op, m: Mask<'_>) -> Result<(), HostError> {
        /// Runs `$body` with `$d` the destination register taken out of
        /// its bank, so that the sources can be borrowed from the bank
        /// (the compiler never lets a destination be a source).
        macro_rules! with_dst {
            ($bank:ident[$slot:expr], |$d:ident| $body:expr) => {{
                let mut $d = std::mem::take(&mut self.$bank[$slot]);
                let r = $body;
                self.$bank[$slot] = $d;
                r
            }};
        }
        match *op {
            Op::Const32 { d, v } => lanes::fill(&mut self.r32[d], v, m),
            Op::Const64 { d, v } => lanes::fill(&mut self.r64[d], v, m),
            Op::Mov32 { d, a } => {
                with_dst!(r32[d], |dv| lanes::map1(&mut dv, &self.r32[a], m, |x| x))
            }
            Op::Mov64 { d, a } => {
                with_dst!(r64[d], |dv| lanes::map1(&mut dv, &self.r64[a], m, |x| x))
            }
            Op::Un32 { f, d, a } => with_dst!(r32[d], |dv| f(&mut dv, &self.r32[a], m)),
            Op::Bin32 { f, d, a, b } => {
                with_dst!(r32[d], |dv| f(&mut dv, &self.r32[a], &self.r32[b], m))
            }
            Op::Tri32 { f, d, a, b, c } => {
                with_dst!(r32[d], |dv| f(
                    &mut dv,
                    &self.r32[a],
                    &self.r32[b],
                    &self.r32[c],
                    m
                ))
            }
            Op::Un64 { f, d, a } => with_dst!(r64[d], |dv| f(&mut dv, &self.r64[a], m)),
            Op::Bin64 { f, d, a, b } => {
                with_dst!(r64[d], |dv| f(&mut dv, &self.r64[a], &self.r64[b], m))
            }
            Op::Shift64 { f, d, a, b } => {
                with_dst!(r64[d], |dv| f(&mut dv, &self.r64[a], &self.r32[b], m))
            }
            Op::Cmp64 { f, d, a, b } => f(&mut self.r32[d], &self.r64[a], &self.r64[b], m),
            Op::Narrow { f, d, a } => f(&mut self.r32[d], &self.r64[a], m),
            Op::Widen { f, d, a } => f(&mut self.r64[d], &self.r32[a], m),
            Op::Select32 { d, c, a, b } => {
                with_dst!(r32[d], |dv| lanes::select(
                    &mut dv,
                    &self.r32[c],
                    &self.r32[a],
                    &self.r32[b],
                    m
                ))
            }
            Op::Select64 { d, c, a, b } => {
                with_dst!(r64[d], |dv| lanes::select(
                    &mut dv,
                    &self.r32[c],
                    &self.r64[a],
                    &self.r64[b],
                    m
                ))
            }
            Op::LocalId { d, axis } => lanes::map1(&mut self.r32[d], &self.local[axis], m, |x| x),
            Op::GroupId { d, axis } => lanes::fill(&mut self.r32[d], self.group[axis], m),
            Op::SubgroupLane { d } => lanes::map1(&mut self.r32[d], &self.sub_lane, m, |x| x),
            Op::Load {
                d,
                width,
                space,
                addr,
                guard,
            } => return self.load(d, width, space, addr, guard, m),
            Op::Store {
                value,
                width,
                space,
                addr,
                guard,
            } => return self.store(value, width, space, addr, guard, m),
            Op::Atomic {
                op,
                signed,
                d,
                space,
                addr,
                value,
                compare,
                guard,
            } => {
                return self.atomic(
                    AtomicArgs {
                        op,
                        signed,
                        d,
                        space,
                        addr,
                        value,
                        compare,
                        guard,
                    },
                    m,
                );
            }
            Op::Subgroup { op, d, a, b } => with_dst!(r32[d], |dv| subgroup(
                op,
                &mut dv,
                &self.r32[a],
                b.map(|b| &self.r32[b][..]),
                m
            )),
        }
        Ok(())
    }

    /// An error for a write into a read-only buffer (the compiler rejects
    /// those first).
    fn read_only(&self, n: u32) -> HostError {
        HostError::new(format!(
            "kernel `{}`: writes read-only buffer {n}",
            self.env.name
        ))
    }

    /// An error for an access outside its memory: without a guard, only a
    /// lowering bug produces one.
    fn fault(&self, what: &str, space: Space, f: Fault) -> HostError {
        let (memory, limit) = match space {
            Space::Buffer(n) => (format!("buffer {n}"), self.env.buffers[n as usize].len),
            Space::Shared => (
                "workgroup memory".to_string(),
                u64::from(self.env.shared_bytes),
            ),
            Space::Private => (
                "private memory".to_string(),
                u64::from(self.env.private_bytes),
            ),
        };
        HostError::new(format!(
            "kernel `{}`: {what} of {} bytes at byte offset {} is outside {memory} ({limit} bytes) or misaligned, \
             and no guard covers it (a lowering bug)",
            self.env.name, f.bytes, f.offset
        ))
    }

    fn load(
        &mut self,
        d: Slot,
        width: Width,
        space: Space,
        addr: Addr,
        guard: Option<Slot>,
        m: Mask<'_>,
    ) -> Result<(), HostError> {
        let wide = width == Width::Double;
        let mut dst = if wide {
            Dst::Wide(std::mem::take(&mut self.r64[d]))
        } else {
            Dst::Narrow(std::mem::take(&mut self.r32[d]))
        };
        let guard = guard.map(|g| &self.r32[g][..]);
        let a = addresses(&self.r32, &self.r64, addr);
        let result = match space {
            Space::Buffer(n) => {
                let b = self.env.buffers[n as usize];
                match b.words {
                    Mem::Plain(words) => load_lanes(words, b.len, 0, width, &mut dst, a, guard, m),
                    Mem::Atomic(words) => load_lanes(words, b.len, 0, width, &mut dst, a, guard, m),
                }
            }
            Space::Shared => load_lanes(
                &self.shared[..],
                u64::from(self.env.shared_bytes),
                0,
                width,
                &mut dst,
                a,
                guard,
                m,
            ),
            Space::Private => load_lanes(
                &self.private[..],
                u64::from(self.env.private_bytes),
                self.private_words,
                width,
                &mut dst,
                a,
                guard,
                m,
            ),
        };
        match dst {
            Dst::Wide(v) => self.r64[d] = v,
            Dst::Narrow(v) => self.r32[d] = v,
        }
        result.map_err(|f| self.fault("load", space, f))
    }
}

/// A load's destination register, taken out of its bank.
enum Dst {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
}

/// The address register `addr`'s lanes.
fn addresses<'r>(r32: &'r [Vec<u32>], r64: &'r [Vec<u64>], addr: Addr) -> Addresses<'r> {
    if addr.wide {
        Addresses::Wide(&r64[addr.slot])
    } else {
        Addresses::Narrow(&r32[addr.slot])
    }
}

/// The lanes' addresses: a `U32` or a `U64` register.
#[derive(Clone, Copy)]
enum Addresses<'a> {
    Narrow(&'a [u32]),
    Wide(&'a [u64]),
}

impl Addresses<'_> {
    #[inline(always)]
    fn get(self, i: usize) -> u64 {
        match self {
            Addresses::Narrow(a) => u64::from(a[i]),
            Addresses::Wide(a) => a[i],
        }
    }
}

/// Memory of 32-bit words that loads read: a buffer shared between
/// threads (relaxed atomic loads, plain moves on x86) or a worker's own
/// memory.
trait ReadWords {
    fn word(&self, w: usize) -> u32;
    /// Reads words `start..` into `dst`; false if they are not all there.
    fn get_run(&self, start: usize, dst: &mut [u32]) -> bool;
}

/// Memory that stores and atomics write.
trait Words: ReadWords {
    fn set(&mut self, w: usize, v: u32);
    /// Writes `src` at words `start..`; false if they are not all there.
    fn set_run(&mut self, start: usize, src: &[u32]) -> bool;
    /// Writes the 16 bits at byte `2 * half` of word `w`.
    fn set_half(&mut self, w: usize, half: usize, v: u32);
    /// An atomic read-modify-write; returns the old value.
    fn rmw(&mut self, w: usize, op: AtomicOp, signed: bool, v: u32, cmp: u32) -> u32;
}

/// The new value of an atomic read-modify-write of `old`: the rule both
/// ends share.
use crate::scalar::atomic_apply as apply;

impl ReadWords for &[AtomicU32] {
    #[inline(always)]
    fn word(&self, w: usize) -> u32 {
        self[w].load(Relaxed)
    }

    fn get_run(&self, start: usize, dst: &mut [u32]) -> bool {
        let Some(src) = self.get(start..start + dst.len()) else {
            return false;
        };
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.load(Relaxed);
        }
        true
    }
}

impl Words for &[AtomicU32] {
    fn set_run(&mut self, start: usize, src: &[u32]) -> bool {
        let Some(dst) = self.get(start..start + src.len()) else {
            return false;
        };
        for (d, &s) in dst.iter().zip(src) {
            d.store(s, Relaxed);
        }
        true
    }

    #[inline(always)]
    fn set(&mut self, w: usize, v: u32) {
        self[w].store(v, Relaxed);
    }

    fn set_half(&mut self, w: usize, half: usize, v: u32) {
        let shift = 16 * half;
        let keep = !(0xffff << shift);
        let mut old = self[w].load(Relaxed);
        // Another workgroup may write the word's other half at the same
        // time: a compare-exchange loop keeps its write.
        while let Err(now) =
            self[w].compare_exchange_weak(old, (old & keep) | (v << shift), Relaxed, Relaxed)
        {
            old = now;
        }
    }

    fn rmw(&mut self, w: usize, op: AtomicOp, signed: bool, v: u32, cmp: u32) -> u32 {
        crate::scalar::atomic_rmw(&self[w], op, signed, v, cmp)
    }
}

impl ReadWords for &mut [u32] {
    #[inline(always)]
    fn word(&self, w: usize) -> u32 {
        self[w]
    }

    fn get_run(&self, start: usize, dst: &mut [u32]) -> bool {
        (&**self).get_run(start, dst)
    }
}

impl Words for &mut [u32] {
    fn set_run(&mut self, start: usize, src: &[u32]) -> bool {
        match self.get_mut(start..start + src.len()) {
            Some(dst) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    #[inline(always)]
    fn set(&mut self, w: usize, v: u32) {
        self[w] = v;
    }

    fn set_half(&mut self, w: usize, half: usize, v: u32) {
        let shift = 16 * half;
        self[w] = (self[w] & !(0xffff << shift)) | (v << shift);
    }

    fn rmw(&mut self, w: usize, op: AtomicOp, signed: bool, v: u32, cmp: u32) -> u32 {
        let old = self[w];
        self[w] = apply(op, signed, old, v, cmp);
        old
    }
}

impl ReadWords for &[u32] {
    #[inline(always)]
    fn word(&self, w: usize) -> u32 {
        self[w]
    }

    fn get_run(&self, start: usize, dst: &mut [u32]) -> bool {
        match self.get(start..start + dst.len()) {
            Some(src) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// The first word of an access of one word per lane at consecutive
/// addresses, every lane active and its guard true, inside `limit`: the
/// shape of nearly every elementwise load and store, which then moves
/// as one run of words.
fn contiguous(a: Addresses<'_>, guard: Option<&[u32]>, limit: u64, m: Mask<'_>) -> Option<usize> {
    if m.is_some() || guard.is_some_and(|g| !g.iter().fold(true, |ok, &g| ok & (g != 0))) {
        return None;
    }
    let (base, lanes, consecutive) = match a {
        Addresses::Narrow(a) => {
            let base = *a.first()?;
            let ok = a.iter().zip(0u32..).fold(true, |ok, (&x, i)| {
                ok & (x == base.wrapping_add(i.wrapping_mul(4)))
            });
            (u64::from(base), a.len(), ok)
        }
        Addresses::Wide(a) => {
            let base = *a.first()?;
            let ok = a.iter().zip(0u64..).fold(true, |ok, (&x, i)| {
                ok & (x == base.wrapping_add(i.wrapping_mul(4)))
            });
            (base, a.len(), ok)
        }
    };
    let end = base.checked_add(4 * lanes as u64)?;
    (consecutive && base.is_multiple_of(4) && end <= limit).then_some((base / 4) as usize)
}

/// Checks an access of `bytes` at `offset` against `limit` bytes and its
/// alignment; gives the word it starts in.
#[inline(always)]
fn word_of(offset: u64, bytes: u64, limit: u64) -> Result<usize, Fault> {
    match offset.checked_add(bytes) {
        Some(end) if end <= limit && offset.is_multiple_of(bytes) => Ok((offset / 4) as usize),
        _ => Err(Fault { offset, bytes }),
    }
}

/// Loads every active lane's scalar into `dst`.
#[allow(clippy::too_many_arguments)]
fn load_lanes<M: ReadWords>(
    mem: M,
    limit: u64,
    stride: usize,
    width: Width,
    dst: &mut Dst,
    a: Addresses<'_>,
    guard: Option<&[u32]>,
    m: Mask<'_>,
) -> Result<(), Fault> {
    let bytes = width.bytes();
    match dst {
        Dst::Wide(dst) => {
            for i in 0..dst.len() {
                if m.is_some_and(|m| !m[i]) {
                    continue;
                }
                if guard.is_some_and(|g| g[i] == 0) {
                    dst[i] = 0;
                    continue;
                }
                let w = i * stride + word_of(a.get(i), bytes, limit)?;
                dst[i] = u64::from(mem.word(w)) | u64::from(mem.word(w + 1)) << 32;
            }
        }
        Dst::Narrow(dst) => {
            if width == Width::Word
                && stride == 0
                && let Some(start) = contiguous(a, guard, limit, m)
                && mem.get_run(start, dst)
            {
                return Ok(());
            }
            for i in 0..dst.len() {
                if m.is_some_and(|m| !m[i]) {
                    continue;
                }
                if guard.is_some_and(|g| g[i] == 0) {
                    dst[i] = 0;
                    continue;
                }
                let offset = a.get(i);
                let w = i * stride + word_of(offset, bytes, limit)?;
                let v = mem.word(w);
                dst[i] = if width == Width::Half {
                    (v >> (8 * (offset & 2))) & 0xffff
                } else {
                    v
                };
            }
        }
    }
    Ok(())
}

/// Stores every active lane's value: `v32` for 32-bit and 16-bit
/// stores, `v64` for `U64` ones.
#[allow(clippy::too_many_arguments)]
fn store_lanes<M: Words>(
    mut mem: M,
    limit: u64,
    stride: usize,
    width: Width,
    (v32, v64): (&[u32], &[u64]),
    a: Addresses<'_>,
    guard: Option<&[u32]>,
    m: Mask<'_>,
) -> Result<(), Fault> {
    let bytes = width.bytes();
    if width == Width::Word
        && stride == 0
        && let Some(start) = contiguous(a, guard, limit, m)
        && mem.set_run(start, v32)
    {
        return Ok(());
    }
    let lanes = v32.len().max(v64.len());
    for i in 0..lanes {
        if m.is_some_and(|m| !m[i]) || guard.is_some_and(|g| g[i] == 0) {
            continue;
        }
        let offset = a.get(i);
        let w = i * stride + word_of(offset, bytes, limit)?;
        match width {
            Width::Word => mem.set(w, v32[i]),
            Width::Half => mem.set_half(w, (offset as usize & 2) / 2, v32[i] & 0xffff),
            Width::Double => {
                let v = v64[i];
                mem.set(w, v as u32);
                mem.set(w + 1, (v >> 32) as u32);
            }
        }
    }
    Ok(())
}

/// The operands of an atomic instruction.
#[derive(Clone, Copy)]
struct AtomicArgs {
    op: AtomicOp,
    signed: bool,
    d: Option<Slot>,
    space: Space,
    addr: Addr,
    value: Slot,
    compare: Option<Slot>,
    guard: Option<Slot>,
}

/// Runs an atomic read-modify-write for every active lane, in lane order;
/// writes the old values into `old` (zero where the guard is false).
#[allow(clippy::too_many_arguments)]
fn atomic_lanes<M: Words>(
    mut mem: M,
    limit: u64,
    stride: usize,
    x: AtomicArgs,
    old: &mut [u32],
    r32: &[Vec<u32>],
    a: Addresses<'_>,
    m: Mask<'_>,
) -> Result<(), Fault> {
    let guard = x.guard.map(|g| &r32[g][..]);
    for i in 0..old.len() {
        if m.is_some_and(|m| !m[i]) {
            continue;
        }
        if guard.is_some_and(|g| g[i] == 0) {
            old[i] = 0;
            continue;
        }
        let w = i * stride + word_of(a.get(i), 4, limit)?;
        let cmp = x.compare.map_or(0, |c| r32[c][i]);
        old[i] = mem.rmw(w, x.op, x.signed, r32[x.value][i], cmp);
    }
    Ok(())
}

impl Worker<'_> {
    fn store(
        &mut self,
        value: Slot,
        width: Width,
        space: Space,
        addr: Addr,
        guard: Option<Slot>,
        m: Mask<'_>,
    ) -> Result<(), HostError> {
        let guard = guard.map(|g| &self.r32[g][..]);
        let a = addresses(&self.r32, &self.r64, addr);
        let values: (&[u32], &[u64]) = if width == Width::Double {
            (&[], &self.r64[value])
        } else {
            (&self.r32[value], &[])
        };
        let result = match space {
            Space::Buffer(n) => {
                let b = self.env.buffers[n as usize];
                match b.words {
                    Mem::Atomic(words) => store_lanes(words, b.len, 0, width, values, a, guard, m),
                    Mem::Plain(_) => return Err(self.read_only(n)),
                }
            }
            Space::Shared => store_lanes(
                &mut self.shared[..],
                u64::from(self.env.shared_bytes),
                0,
                width,
                values,
                a,
                guard,
                m,
            ),
            Space::Private => store_lanes(
                &mut self.private[..],
                u64::from(self.env.private_bytes),
                self.private_words,
                width,
                values,
                a,
                guard,
                m,
            ),
        };
        result.map_err(|f| self.fault("store", space, f))
    }

    fn atomic(&mut self, x: AtomicArgs, m: Mask<'_>) -> Result<(), HostError> {
        // The old values go to the destination, or to the temporary
        // (the last slot, which no source uses) where the source drops
        // them.
        let d = x.d.unwrap_or(self.r32.len() - 1);
        let mut old = std::mem::take(&mut self.r32[d]);
        let a = addresses(&self.r32, &self.r64, x.addr);
        let r32 = &self.r32;
        let result = match x.space {
            Space::Buffer(n) => {
                let b = self.env.buffers[n as usize];
                match b.words {
                    Mem::Atomic(words) => atomic_lanes(words, b.len, 0, x, &mut old, r32, a, m),
                    Mem::Plain(_) => {
                        self.r32[d] = old;
                        return Err(self.read_only(n));
                    }
                }
            }
            Space::Shared => atomic_lanes(
                &mut self.shared[..],
                u64::from(self.env.shared_bytes),
                0,
                x,
                &mut old,
                r32,
                a,
                m,
            ),
            Space::Private => atomic_lanes(
                &mut self.private[..],
                u64::from(self.env.private_bytes),
                self.private_words,
                x,
                &mut old,
                r32,
                a,
                m,
            ),
        };
        self.r32[d] = old;
        result.map_err(|f| self.fault("atomic", x.space, f))
    }
}

/// A subgroup operation over each chunk of [`SUBGROUP`] lanes; only the
/// active lanes take part and get a result.
///
/// A shuffle whose source lane is outside the subgroup gives the lane's
/// own value (as CUDA's `shfl` does); one whose source is inside but
/// inactive reads that lane's register (WGSL leaves both undefined).
pub(crate) fn subgroup(
    op: SubgroupKernel,
    d: &mut [u32],
    a: &[u32],
    b: Option<&[u32]>,
    m: Mask<'_>,
) {
    let on = |i: usize| m.is_none_or(|m| m[i]);
    for start in (0..d.len()).step_by(SUBGROUP) {
        let end = (start + SUBGROUP).min(d.len());
        let active = (start..end).filter(|&i| on(i));
        match op {
            SubgroupKernel::Reduce(f, id) => {
                let r = active.clone().fold(id, |acc, i| f(acc, a[i]));
                active.for_each(|i| d[i] = r);
            }
            SubgroupKernel::Inclusive(f, id) => {
                let mut acc = id;
                for i in active {
                    acc = f(acc, a[i]);
                    d[i] = acc;
                }
            }
            SubgroupKernel::Exclusive(f, id) => {
                let mut acc = id;
                for i in active {
                    d[i] = acc;
                    acc = f(acc, a[i]);
                }
            }
            SubgroupKernel::BroadcastFirst => {
                if let Some(first) = active.clone().next() {
                    let v = a[first];
                    active.for_each(|i| d[i] = v);
                }
            }
            SubgroupKernel::All => {
                let r = active.clone().all(|i| a[i] != 0);
                active.for_each(|i| d[i] = u32::from(r));
            }
            SubgroupKernel::Any => {
                let r = active.clone().any(|i| a[i] != 0);
                active.for_each(|i| d[i] = u32::from(r));
            }
            SubgroupKernel::Ballot => {
                let r = active
                    .clone()
                    .filter(|&i| a[i] != 0)
                    .fold(0u32, |acc, i| acc | 1 << (i - start));
                active.for_each(|i| d[i] = r);
            }
            SubgroupKernel::Shuffle
            | SubgroupKernel::Down
            | SubgroupKernel::Up
            | SubgroupKernel::Xor => {
                let b = b.expect("the compiler gives every shuffle a lane register");
                for i in active {
                    let lane = i - start;
                    let delta = b[i] as usize;
                    let src = match op {
                        SubgroupKernel::Shuffle => Some(delta),
                        SubgroupKernel::Down => lane.checked_add(delta),
                        SubgroupKernel::Up => lane.checked_sub(delta),
                        _ => Some(lane ^ delta),
                    };
                    d[i] = match src {
                        Some(s) if start + s < end => a[start + s],
                        _ => a[i],
                    };
                }
            }
        }
    }
}
