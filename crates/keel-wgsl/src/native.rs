//! The runtime of kernels translated to Rust ahead of time ([`crate::rust`]).
//!
//! A kernel without subgroup operations needs no lockstep: each
//! invocation can run to its end (or, where the kernel has barriers, to
//! its next barrier) before the next starts. The translator prints such a
//! program as one Rust function per workgroup (loops over its
//! invocations, each an ordinary block of scalar Rust), which the
//! including crate compiles with the rest of its code; this module gives
//! that function its launch ([`Kernel::run`]), its memory ([`Ro`],
//! [`Rw`], [`Private`] for an invocation's arrays and the workgroup's
//! memory, [`Part`], and the windows [`RoWindow`],
//! [`RwWindow`] and [`PartWindow`] of a workgroup's accesses) and WGSL's
//! scalar semantics (the free functions below), which the interpreter's
//! lane kernels ([`crate::host`]) call too, so that both ends compute the
//! same bits.
//!
//! There is no `unsafe`: bindings are viewed as words exactly as the
//! interpreter views them (in place through zerocopy, or a padded copy),
//! writable ones as relaxed atomics shared by every thread. A relaxed
//! atomic store is a plain move, but the compiler vectorises no loop that
//! has one; so where each workgroup reaches a writable buffer only in a
//! part of its own ([`Parted`]), the launch splits that buffer's words
//! with `split_at_mut` and hands each thread its parts as plain memory.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use zerocopy::FromBytes;

use crate::host::{self, Binding, HostOptions, Mem, View};
pub use crate::ir::{AtomicOp, BinOp, Reduce, SubgroupOp, Ty, UnOp};
pub use crate::scalar::*;
pub use half::f16;

/// A kernel translated to Rust: what a launch checks, and the function
/// that runs one workgroup.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// The entry point's name, for errors.
    pub name: &'static str,
    /// `@workgroup_size`.
    pub workgroup_size: [u32; 3],
    /// Per storage buffer, in binding order: declared read-only.
    pub read_only: &'static [bool],
    /// Bytes of the parameter block the kernel reads.
    pub param_bytes: u32,
    /// Bytes of private memory per invocation.
    pub private_bytes: u32,
    /// Bytes of workgroup memory.
    pub shared_bytes: u32,
    /// Instructions in the program: sizes a launch's work, to decide
    /// whether threads pay.
    pub ops: u32,
    /// Runs every invocation of one workgroup.
    pub group: GroupFn,
    /// Where each workgroup's accesses of some writable buffers fall in a
    /// part of them that is its own: the workgroup's windowed path over
    /// plain words.
    pub parted: Option<Parted>,
}

/// The generated function that runs one workgroup's invocations.
pub type GroupFn = fn(&Ctx<'_>, &mut Group) -> Result<(), Fault>;

/// The workgroups of a kernel whose every access of some writable buffers
/// goes through a window as wide as the workgroup: workgroup `g` (linear,
/// x fastest) of a launch where those windows start at word `g * W` (`W`
/// invocations a workgroup, as `out[gid.x]` does) owns those words.
///
/// The launch then hands each thread those words as plain memory, not as
/// atomics shared by every thread, so that the compiler vectorises the
/// stores as it does a Rust loop's. A workgroup whose windows fall
/// elsewhere (past the buffer's end, or at an offset) runs after the
/// others, through [`Kernel::group`]: WGSL orders no workgroup of a
/// dispatch before another, so running some later is one of the orders a
/// GPU may take.
#[derive(Clone, Copy, Debug)]
pub struct Parted {
    /// The storage buffers whose parts the workgroups own, ascending.
    pub buffers: &'static [u32],
    /// Runs one workgroup over its parts, one per buffer of `buffers`.
    pub group: PartedFn,
}

/// Workgroups at the start of a range that, none running on its parts,
/// give the rest of the range to the shared pass untried: where windows
/// miss their parts (written at an offset, or backwards), they miss them
/// in every workgroup, and trying each would evaluate its prologue twice.
const GIVE_UP: usize = 2;

/// Runs one workgroup over its [`Part`]s: `Ok(false)`, having run no
/// invocation, where a window is not exactly the workgroup's part.
pub type PartedFn = fn(&Ctx<'_>, &mut Group, &[Part<'_>]) -> Result<bool, Fault>;

/// The launch as a workgroup sees it: bindings, parameters, grid.
#[derive(Debug)]
pub struct Ctx<'a> {
    buffers: Vec<Binding<'a>>,
    params: &'a [u8],
    grid: [u32; 3],
}

/// One thread's state for the workgroups it runs.
#[derive(Debug)]
pub struct Group {
    id: [u32; 3],
    private: Private,
    shared: Private,
    /// Per invocation, its private memory, where a kernel with barriers
    /// keeps it across phases.
    privates: Vec<Private>,
}

/// An access that no guard covers outside its memory (a lowering bug), a
/// binding of the wrong kind, or a parameter word past the block: the
/// launch stops with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault(String);

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fault {}

impl Kernel {
    /// Runs `grid` workgroups on every thread (see [`Kernel::run_with`]).
    pub fn run(
        &self,
        grid: [u32; 3],
        buffers: &mut [&mut [u8]],
        params: &[u8],
    ) -> Result<(), String> {
        self.run_with(grid, buffers, params, &HostOptions::default())
    }

    /// Runs `grid` workgroups: `buffers[n]` is storage buffer `n`,
    /// `params` the parameter block (little-endian words). Checks the
    /// arguments as [`host::run`] does; workgroups run in parallel on
    /// `options.threads` threads, or on the calling thread where the
    /// launch is too small to pay for threads.
    pub fn run_with(
        &self,
        grid: [u32; 3],
        buffers: &mut [&mut [u8]],
        params: &[u8],
        options: &HostOptions,
    ) -> Result<(), String> {
        let name = self.name;
        if buffers.len() != self.read_only.len() {
            return Err(format!(
                "kernel `{name}`: expected {} storage buffers, found {}",
                self.read_only.len(),
                buffers.len()
            ));
        }
        if params.len() < self.param_bytes as usize {
            return Err(format!(
                "kernel `{name}`: expected a parameter block of {} bytes, found {}",
                self.param_bytes,
                params.len()
            ));
        }
        if self.workgroup_size.contains(&0) {
            return Err(format!(
                "kernel `{name}`: workgroup size {:?} has an empty axis",
                self.workgroup_size
            ));
        }
        let groups = grid
            .iter()
            .try_fold(1u64, |n, &g| n.checked_mul(u64::from(g)))
            .ok_or_else(|| format!("kernel `{name}`: grid {grid:?} has too many workgroups"))?;
        if groups == 0 {
            return Ok(());
        }
        if let Some(parted) = &self.parted
            && let Some(result) = self.run_parted(parted, grid, groups, buffers, params, options)
        {
            return result;
        }
        self.run_groups(grid, groups, |i| i, buffers, params, options)
    }

    /// The work of `groups` workgroups: about one unit per instruction per
    /// invocation.
    fn work(&self, groups: u64) -> u64 {
        let invocations: u32 = self.workgroup_size.iter().product();
        groups
            .saturating_mul(u64::from(invocations))
            .saturating_mul(u64::from(self.ops.max(1)))
    }

    /// Runs workgroups `index(0)..index(count)` with every writable buffer
    /// shared by the threads.
    fn run_groups(
        &self,
        grid: [u32; 3],
        count: u64,
        index: impl Fn(u64) -> u64 + Sync,
        buffers: &mut [&mut [u8]],
        params: &[u8],
        options: &HostOptions,
    ) -> Result<(), String> {
        let name = self.name;
        let mut views: Vec<View<'_>> = buffers
            .iter_mut()
            .zip(self.read_only)
            .map(|(b, &ro)| View::new(b, ro))
            .collect();
        let cx = Ctx {
            buffers: views.iter().map(View::binding).collect(),
            params,
            grid,
        };
        let result = host::for_each_group(
            count,
            self.work(count),
            options,
            || self.state(),
            |g, i| {
                g.id = host::group_id(index(i), grid);
                (self.group)(&cx, g).map_err(|f| format!("kernel `{name}`: {f}"))
            },
        );
        drop(cx);
        for view in &mut views {
            view.write_back();
        }
        result
    }

    fn state(&self) -> Group {
        Group {
            id: [0; 3],
            private: Private::new(self.private_bytes, "private memory"),
            shared: Private::new(self.shared_bytes, "workgroup memory"),
            privates: Vec::new(),
        }
    }

    /// Runs the launch with the buffers of `parted` split into the
    /// workgroups' parts (see [`Parted`]), then the workgroups that could
    /// not run on their parts with every buffer shared. `None`, having run
    /// nothing, where such a buffer cannot be viewed in place as words.
    fn run_parted(
        &self,
        parted: &Parted,
        grid: [u32; 3],
        groups: u64,
        buffers: &mut [&mut [u8]],
        params: &[u8],
        options: &HostOptions,
    ) -> Option<Result<(), String>> {
        let name = self.name;
        let owns = |n: usize| parted.buffers.contains(&(n as u32));
        let in_place = parted.buffers.iter().all(|&n| {
            let n = n as usize;
            self.read_only.get(n) == Some(&false)
                && buffers
                    .get(n)
                    .is_some_and(|b| <[u32]>::ref_from_bytes(b).is_ok())
        });
        if !in_place {
            return None;
        }
        let width = self.workgroup_size.iter().product::<u32>() as usize;
        let chunk = host::chunk_of(groups, self.work(groups), options);
        let ranges = usize::try_from(groups.div_ceil(chunk)).ok()?;
        let span = usize::try_from(chunk)
            .ok()
            .and_then(|c| c.checked_mul(width))
            .unwrap_or(usize::MAX);
        let later = Mutex::new(Vec::new());
        let result = {
            let mut views = Vec::with_capacity(buffers.len());
            let mut regions: Vec<Vec<&mut [u32]>> = (0..ranges).map(|_| Vec::new()).collect();
            let mut lens = Vec::new();
            for (n, (b, &ro)) in buffers.iter_mut().zip(self.read_only).enumerate() {
                if !owns(n) {
                    views.push(Ok(View::new(b, ro)));
                    continue;
                }
                let len = b.len() as u64;
                views.push(Err(len));
                lens.push(len);
                // The words of range `k`, for every `k`: a thread that
                // takes the range owns them.
                let mut rest = <[u32]>::mut_from_bytes(b).ok()?;
                for region in &mut regions {
                    let words = std::mem::take(&mut rest);
                    let (head, tail) = words.split_at_mut(span.min(words.len()));
                    region.push(head);
                    rest = tail;
                }
            }
            let regions: Vec<Mutex<Option<Vec<&mut [u32]>>>> =
                regions.into_iter().map(|r| Mutex::new(Some(r))).collect();
            let cx = Ctx {
                buffers: views
                    .iter()
                    .map(|v| match v {
                        Ok(view) => view.binding(),
                        // Reached only through the parts.
                        &Err(len) => Binding {
                            words: Mem::Atomic(&[]),
                            len,
                        },
                    })
                    .collect(),
                params,
                grid,
            };
            let result = host::for_each_range(
                groups,
                chunk,
                options,
                || self.state(),
                |g, range| {
                    let taken = regions
                        .get((range.start / chunk) as usize)
                        .and_then(|r| r.lock().unwrap_or_else(PoisonError::into_inner).take());
                    let Some(mut region) = taken else {
                        return Err(format!(
                            "kernel `{name}`: workgroups {range:?} have no parts"
                        ));
                    };
                    let deferred = self.run_range(parted, &cx, g, &mut region, &lens, range)?;
                    if !deferred.is_empty() {
                        later
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .extend(deferred);
                    }
                    Ok(())
                },
            );
            drop(cx);
            for view in views.iter_mut().flatten() {
                view.write_back();
            }
            result
        };
        if let Err(e) = result {
            return Some(Err(e));
        }
        let mut later = later.into_inner().unwrap_or_else(PoisonError::into_inner);
        if later.is_empty() {
            return Some(Ok(()));
        }
        later.sort_unstable();
        Some(self.run_groups(
            grid,
            later.len() as u64,
            |i| later[i as usize],
            buffers,
            params,
            options,
        ))
    }

    /// Runs the workgroups of `range` over their parts, which `region`
    /// holds (per buffer of `parted`, the range's words, of buffers of
    /// `lens` bytes); gives the workgroups left to the shared pass. A
    /// range whose first [`GIVE_UP`] workgroups miss their parts leaves
    /// the rest to it untried.
    fn run_range(
        &self,
        parted: &Parted,
        cx: &Ctx<'_>,
        g: &mut Group,
        region: &mut [&mut [u32]],
        lens: &[u64],
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u64>, String> {
        let width = self.workgroup_size.iter().product::<u32>() as usize;
        let mut parts = Vec::with_capacity(region.len());
        let mut deferred = Vec::new();
        let mut ran_any = false;
        for index in range.clone() {
            if !ran_any && deferred.len() == GIVE_UP {
                deferred.extend(index..range.end);
                break;
            }
            parts.clear();
            for (words, &len) in region.iter_mut().zip(lens) {
                let rest = std::mem::take(words);
                let (head, tail) = rest.split_at_mut(width.min(rest.len()));
                *words = tail;
                parts.push(Part {
                    words: Cell::from_mut(head).as_slice_of_cells(),
                    start: index.saturating_mul(width as u64 * 4),
                    len,
                });
            }
            g.id = host::group_id(index, cx.grid);
            let ran = (parted.group)(cx, g, &parts)
                .map_err(|f| format!("kernel `{}`: {f}", self.name))?;
            if ran {
                ran_any = true;
            } else {
                deferred.push(index);
            }
        }
        Ok(deferred)
    }
}

impl<'a> Ctx<'a> {
    /// Storage buffer `n`, declared read-only.
    #[inline]
    pub fn ro(&self, n: u32) -> Result<Ro<'a>, Fault> {
        match self.buffers.get(n as usize) {
            Some(Binding {
                words: Mem::Plain(words),
                len,
            }) => Ok(Ro {
                words,
                full: whole_words(words, *len),
                len: *len,
                n,
            }),
            _ => Err(Fault(format!("buffer {n} is not bound read-only"))),
        }
    }

    /// Storage buffer `n`, which the kernel may write.
    #[inline]
    pub fn rw(&self, n: u32) -> Result<Rw<'a>, Fault> {
        match self.buffers.get(n as usize) {
            Some(Binding {
                words: Mem::Atomic(words),
                len,
            }) => Ok(Rw {
                words,
                full: whole_words(words, *len),
                len: *len,
                n,
            }),
            _ => Err(Fault(format!("buffer {n} is not bound read-write"))),
        }
    }

    /// Parameter word `word` (bytes `4 * word ..`), little-endian.
    #[inline]
    pub fn param(&self, word: u32) -> Result<u32, Fault> {
        let at = word as usize * 4;
        match self.params.get(at..at + 4) {
            Some(&[a, b, c, d]) => Ok(u32::from_le_bytes([a, b, c, d])),
            _ => Err(Fault(format!(
                "reads parameter word {word} (bytes {at}..{}), but the parameter block has {} bytes",
                at + 4,
                self.params.len()
            ))),
        }
    }

    /// `num_workgroups`.
    #[inline]
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }
}

impl Group {
    /// `workgroup_id`, and the private memory of the invocation about to
    /// run.
    #[inline]
    pub fn parts(&mut self) -> ([u32; 3], &mut Private) {
        (self.id, &mut self.private)
    }

    /// For a workgroup of `invocations` run in phases: `workgroup_id`,
    /// the workgroup's memory (`var<workgroup>`), and each invocation's
    /// private memory, all zeroed.
    #[inline]
    pub fn phases(&mut self, invocations: usize) -> ([u32; 3], &mut Private, &mut [Private]) {
        self.shared.clear();
        if self.private.len > 0 {
            self.privates
                .resize_with(invocations, || self.private.clone());
            self.privates.iter_mut().for_each(Private::clear);
        }
        (self.id, &mut self.shared, &mut self.privates)
    }
}

/// Invocations in a subgroup: consecutive linear invocation indices, as
/// the interpreter groups them.
pub const SUBGROUP_SIZE: u32 = host::compile::SUBGROUP as u32;

/// A subgroup operation over a workgroup run in phases, as the
/// interpreter computes it: operand words `a` (and lanes `b` for a
/// shuffle) per invocation, results into `d` for the invocations running
/// (state 0 in `states`), which alone take part; the others keep their
/// word. Values are register words: `f32` and `f16` bits (`f16` in the
/// low half), `i32` as `u32`, `bool` as 0 or 1.
pub fn subgroup(
    op: SubgroupOp,
    ty: Ty,
    states: &[u32],
    a: &[u32],
    b: Option<&[u32]>,
    d: &mut [u32],
) -> Result<(), Fault> {
    let Some((kernel, _)) = host::compile::SubgroupKernel::of(op, ty) else {
        return Err(Fault(format!("subgroup {op:?} is not defined on {ty:?}")));
    };
    let shuffle = matches!(
        op,
        SubgroupOp::Shuffle
            | SubgroupOp::ShuffleDown
            | SubgroupOp::ShuffleUp
            | SubgroupOp::ShuffleXor
    );
    let n = d.len();
    if shuffle != b.is_some()
        || states.len() != n
        || a.len() != n
        || b.is_some_and(|b| b.len() != n)
    {
        return Err(Fault(format!(
            "subgroup {op:?}: expected {n} states and operands{}, found {}, {} and {:?}",
            if shuffle { " and lanes" } else { "" },
            states.len(),
            a.len(),
            b.map(<[u32]>::len)
        )));
    }
    let running: Vec<bool> = states.iter().map(|&s| s == 0).collect();
    host::exec::subgroup(kernel, d, a, b, Some(&running));
    Ok(())
}

/// Sets every invocation of a workgroup in state `code` running again
/// (state 0): a kernel with barriers, translated in phases, keeps one state
/// per invocation of where it goes next.
#[inline]
pub fn resume(states: &mut [u32], code: u32) {
    for s in states.iter_mut().filter(|s| **s == code) {
        *s = 0;
    }
}

/// Checks an access of `bytes` at `offset` against `limit` bytes and its
/// alignment, as the interpreter does; gives the word it starts in.
#[inline(always)]
fn word_of(offset: u64, bytes: u64, limit: u64) -> Option<usize> {
    match offset.checked_add(bytes) {
        Some(end) if end <= limit && offset.is_multiple_of(bytes) => Some((offset / 4) as usize),
        _ => None,
    }
}

/// The words of `words` that lie wholly inside `len` bytes: a 4-byte
/// access at an aligned offset is inside the binding exactly where its
/// word index is inside these, so it costs one comparison.
fn whole_words<T>(words: &[T], len: u64) -> &[T] {
    let n = usize::try_from(len / 4).map_or(words.len(), |n| n.min(words.len()));
    &words[..n]
}

/// The word index of a 4-byte access at `offset`, where it is aligned.
#[inline(always)]
fn aligned_word(offset: u64) -> Option<usize> {
    if offset.is_multiple_of(4) {
        usize::try_from(offset / 4).ok()
    } else {
        None
    }
}

/// The word `min` bytes from `addr` (a negative `min` reaches back), where
/// it is a whole word: where a window starts.
#[inline(always)]
fn window_start(addr: u64, min: i64) -> Option<usize> {
    let start = addr.checked_add_signed(min)?;
    if start.is_multiple_of(4) {
        usize::try_from(start / 4).ok()
    } else {
        None
    }
}

/// Whether `base + min ..= base + end` (bytes, `min <= 0 <= end`) lies
/// inside `len` bytes: a bounds guard at `base` then holds for every step
/// in `min..=end - size`.
#[inline(always)]
fn covers(len: u64, base: u64, min: i64, end: i64) -> bool {
    let first = i128::from(base) + i128::from(min);
    let last = i128::from(base) + i128::from(end);
    first >= 0 && last <= i128::from(len)
}

/// Whether `v + d` stays a `u32` for every `d` in `min..=max`: widening
/// such a value to 64 bits keeps its steps.
#[inline(always)]
pub fn fits_u32(v: u32, min: i64, max: i64) -> bool {
    let v = i128::from(v);
    v + i128::from(min) >= 0 && v + i128::from(max) <= i128::from(u32::MAX)
}

/// Whether `v + d` stays an `i32` for every `d` in `min..=max`.
#[inline(always)]
pub fn fits_i32(v: i32, min: i64, max: i64) -> bool {
    let v = i128::from(v);
    v + i128::from(min) >= i128::from(i32::MIN) && v + i128::from(max) <= i128::from(i32::MAX)
}

/// A binding's length in bytes (`arrayLength`, bounds checks), and the
/// test of a range against it.
macro_rules! buffer_len {
    () => {
        /// The buffer's length in bytes.
        #[inline]
        pub fn len(&self) -> u64 {
            self.len
        }

        /// Whether the buffer has no bytes.
        #[inline]
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// Whether `base + min ..= base + end` lies inside the buffer.
        #[inline]
        pub fn covers(&self, base: u64, min: i64, end: i64) -> bool {
            covers(self.len, base, min, end)
        }
    };
}

/// A window's byte offset, and its typed loads from its `ld_u32`.
macro_rules! window_loads {
    () => {
        /// The byte offset of word 0 in the buffer.
        #[inline(always)]
        pub fn start(&self) -> u64 {
            self.start
        }

        /// The `i32` at word `i`.
        #[inline(always)]
        pub fn ld_i32(&self, i: usize) -> i32 {
            self.ld_u32(i) as i32
        }

        /// The `f32` at word `i`.
        #[inline(always)]
        pub fn ld_f32(&self, i: usize) -> f32 {
            f32::from_bits(self.ld_u32(i))
        }
    };
}

/// A window's typed stores, from its `st_u32`.
macro_rules! window_stores {
    () => {
        /// Stores an `i32` at word `i`.
        #[inline(always)]
        pub fn st_i32(&self, i: usize, v: i32) {
            self.st_u32(i, v as u32);
        }

        /// Stores an `f32` at word `i`.
        #[inline(always)]
        pub fn st_f32(&self, i: usize, v: f32) {
            self.st_u32(i, v.to_bits());
        }
    };
}

/// `W` words of a read-only buffer that a workgroup's accesses all fall
/// in: indexing it with an index the compiler can bound needs no check
/// per access.
#[derive(Clone, Copy, Debug)]
pub struct RoWindow<'a, const W: usize> {
    words: &'a [u32; W],
    start: u64,
}

impl<const W: usize> RoWindow<'_, W> {
    /// The `u32` at word `i`.
    #[inline(always)]
    pub fn ld_u32(&self, i: usize) -> u32 {
        self.words[i]
    }

    window_loads!();
}

/// `W` words of a writable buffer that a workgroup's accesses all fall
/// in (see [`RoWindow`]).
#[derive(Clone, Copy, Debug)]
pub struct RwWindow<'a, const W: usize> {
    words: &'a [AtomicU32; W],
    start: u64,
}

impl<const W: usize> RwWindow<'_, W> {
    /// The `u32` at word `i`.
    #[inline(always)]
    pub fn ld_u32(&self, i: usize) -> u32 {
        self.words[i].load(Relaxed)
    }

    window_loads!();

    /// Stores a `u32` at word `i`.
    #[inline(always)]
    pub fn st_u32(&self, i: usize, v: u32) {
        self.words[i].store(v, Relaxed);
    }

    window_stores!();
}

/// The words of a writable buffer that one workgroup owns during a
/// launch ([`Parted`]): no other thread reaches them, so they are plain
/// memory.
#[derive(Clone, Copy, Debug)]
pub struct Part<'a> {
    words: &'a [Cell<u32>],
    /// The byte offset of `words[0]` in the buffer.
    start: u64,
    /// The buffer's length in bytes.
    len: u64,
}

impl<'a> Part<'a> {
    buffer_len!();

    /// The part as the window of `W` words from `min` bytes after `addr`,
    /// where that window is exactly the part.
    #[inline]
    pub fn window<const W: usize>(&self, addr: u64, min: i64) -> Option<PartWindow<'a, W>> {
        let first = window_start(addr, min)?;
        if first as u64 * 4 != self.start {
            return None;
        }
        Some(PartWindow {
            words: self.words.try_into().ok()?,
            start: self.start,
        })
    }
}

/// A workgroup's window into its own [`Part`] of a buffer: loads and
/// stores of plain words.
#[derive(Clone, Copy, Debug)]
pub struct PartWindow<'a, const W: usize> {
    words: &'a [Cell<u32>; W],
    start: u64,
}

impl<const W: usize> PartWindow<'_, W> {
    /// The `u32` at word `i`.
    #[inline(always)]
    pub fn ld_u32(&self, i: usize) -> u32 {
        self.words[i].get()
    }

    window_loads!();

    /// Stores a `u32` at word `i`.
    #[inline(always)]
    pub fn st_u32(&self, i: usize, v: u32) {
        self.words[i].set(v);
    }

    window_stores!();
}

#[cold]
fn fault(what: &str, memory: &str, offset: u64, bytes: u64, limit: u64) -> Fault {
    Fault(format!(
        "{what} of {bytes} bytes at byte offset {offset} is outside {memory} ({limit} bytes) or misaligned, \
         and no guard covers it (a lowering bug)"
    ))
}

/// The typed loads of a memory of words, from its `word` and `locate`.
macro_rules! loads {
    () => {
        /// The `u32` at byte `offset`.
        #[inline(always)]
        pub fn ld_u32(&self, offset: u64) -> Result<u32, Fault> {
            self.ld_word(offset)
        }

        /// The `i32` at byte `offset`.
        #[inline(always)]
        pub fn ld_i32(&self, offset: u64) -> Result<i32, Fault> {
            self.ld_u32(offset).map(|v| v as i32)
        }

        /// The `f32` at byte `offset`.
        #[inline(always)]
        pub fn ld_f32(&self, offset: u64) -> Result<f32, Fault> {
            self.ld_u32(offset).map(f32::from_bits)
        }

        /// The `f16` at byte `offset` (half of a word).
        #[inline(always)]
        pub fn ld_f16(&self, offset: u64) -> Result<f16, Fault> {
            let w = self.locate("load", offset, 2)?;
            let v = self.word(w, offset, 2)?;
            Ok(f16::from_bits((v >> (8 * (offset & 2))) as u16))
        }

        /// The `u64` at byte `offset` (two words, low first).
        #[inline(always)]
        pub fn ld_u64(&self, offset: u64) -> Result<u64, Fault> {
            let w = self.locate("load", offset, 8)?;
            let lo = self.word(w, offset, 8)?;
            let hi = self.word(w + 1, offset, 8)?;
            Ok(u64::from(lo) | u64::from(hi) << 32)
        }
    };
}

/// A read-only storage buffer: plain words no thread writes.
#[derive(Clone, Copy, Debug)]
pub struct Ro<'a> {
    words: &'a [u32],
    /// `words` wholly inside `len`.
    full: &'a [u32],
    len: u64,
    n: u32,
}

impl<'a> Ro<'a> {
    buffer_len!();

    #[inline(always)]
    fn locate(&self, what: &str, offset: u64, bytes: u64) -> Result<usize, Fault> {
        word_of(offset, bytes, self.len).ok_or_else(|| self.fault(what, offset, bytes))
    }

    #[inline(always)]
    fn word(&self, w: usize, offset: u64, bytes: u64) -> Result<u32, Fault> {
        self.words
            .get(w)
            .copied()
            .ok_or_else(|| self.fault("load", offset, bytes))
    }

    #[cold]
    fn fault(&self, what: &str, offset: u64, bytes: u64) -> Fault {
        fault(what, &format!("buffer {}", self.n), offset, bytes, self.len)
    }

    #[inline(always)]
    fn ld_word(&self, offset: u64) -> Result<u32, Fault> {
        match aligned_word(offset).and_then(|w| self.full.get(w)) {
            Some(&v) => Ok(v),
            None => Err(self.fault("load", offset, 4)),
        }
    }

    /// The `W` words from `min` bytes after `addr`, where they are whole
    /// words of the buffer.
    #[inline]
    pub fn window<const W: usize>(&self, addr: u64, min: i64) -> Option<RoWindow<'a, W>> {
        let first = window_start(addr, min)?;
        let words = self.full.get(first..first.checked_add(W)?)?;
        Some(RoWindow {
            words: words.try_into().ok()?,
            start: first as u64 * 4,
        })
    }

    loads!();
}

/// A storage buffer the kernel may write: relaxed atomic words shared by
/// every thread (plain moves on common hardware).
#[derive(Clone, Copy, Debug)]
pub struct Rw<'a> {
    words: &'a [AtomicU32],
    /// `words` wholly inside `len`.
    full: &'a [AtomicU32],
    len: u64,
    n: u32,
}

impl<'a> Rw<'a> {
    buffer_len!();

    #[inline(always)]
    fn locate(&self, what: &str, offset: u64, bytes: u64) -> Result<usize, Fault> {
        word_of(offset, bytes, self.len).ok_or_else(|| self.fault(what, offset, bytes))
    }

    #[inline(always)]
    fn cell(&self, w: usize, offset: u64, bytes: u64) -> Result<&'a AtomicU32, Fault> {
        self.words
            .get(w)
            .ok_or_else(|| self.fault("access", offset, bytes))
    }

    #[inline(always)]
    fn word(&self, w: usize, offset: u64, bytes: u64) -> Result<u32, Fault> {
        self.cell(w, offset, bytes).map(|c| c.load(Relaxed))
    }

    #[cold]
    fn fault(&self, what: &str, offset: u64, bytes: u64) -> Fault {
        fault(what, &format!("buffer {}", self.n), offset, bytes, self.len)
    }

    #[inline(always)]
    fn ld_word(&self, offset: u64) -> Result<u32, Fault> {
        match aligned_word(offset).and_then(|w| self.full.get(w)) {
            Some(c) => Ok(c.load(Relaxed)),
            None => Err(self.fault("load", offset, 4)),
        }
    }

    /// The `W` words from `min` bytes after `addr`, where they are whole
    /// words of the buffer.
    #[inline]
    pub fn window<const W: usize>(&self, addr: u64, min: i64) -> Option<RwWindow<'a, W>> {
        let first = window_start(addr, min)?;
        let words = self.full.get(first..first.checked_add(W)?)?;
        Some(RwWindow {
            words: words.try_into().ok()?,
            start: first as u64 * 4,
        })
    }

    loads!();

    /// Stores a `u32` at byte `offset`.
    #[inline(always)]
    pub fn st_u32(&self, offset: u64, v: u32) -> Result<(), Fault> {
        match aligned_word(offset).and_then(|w| self.full.get(w)) {
            Some(c) => {
                c.store(v, Relaxed);
                Ok(())
            }
            None => Err(self.fault("store", offset, 4)),
        }
    }

    /// Stores an `i32`.
    #[inline(always)]
    pub fn st_i32(&self, offset: u64, v: i32) -> Result<(), Fault> {
        self.st_u32(offset, v as u32)
    }

    /// Stores an `f32`.
    #[inline(always)]
    pub fn st_f32(&self, offset: u64, v: f32) -> Result<(), Fault> {
        self.st_u32(offset, v.to_bits())
    }

    /// Stores an `f16` into half of a word. Another thread may write the
    /// other half at the same time: a compare-exchange loop keeps its
    /// write.
    #[inline(always)]
    pub fn st_f16(&self, offset: u64, v: f16) -> Result<(), Fault> {
        let w = self.locate("store", offset, 2)?;
        let cell = self.cell(w, offset, 2)?;
        let shift = 8 * (offset & 2);
        let keep = !(0xffff_u32 << shift);
        let v = u32::from(v.to_bits()) << shift;
        let mut old = cell.load(Relaxed);
        while let Err(now) = cell.compare_exchange_weak(old, (old & keep) | v, Relaxed, Relaxed) {
            old = now;
        }
        Ok(())
    }

    /// Stores a `u64` as two words, low first.
    #[inline(always)]
    pub fn st_u64(&self, offset: u64, v: u64) -> Result<(), Fault> {
        let w = self.locate("store", offset, 8)?;
        self.cell(w, offset, 8)?.store(v as u32, Relaxed);
        self.cell(w + 1, offset, 8)?
            .store((v >> 32) as u32, Relaxed);
        Ok(())
    }

    /// An atomic read-modify-write of the word at `offset` (`signed`: an
    /// `i32`'s min and max); gives the old value.
    #[inline(always)]
    pub fn atomic(
        &self,
        op: AtomicOp,
        signed: bool,
        offset: u64,
        v: u32,
        cmp: u32,
    ) -> Result<u32, Fault> {
        let w = self.locate("atomic", offset, 4)?;
        let word = self.cell(w, offset, 4)?;
        Ok(crate::scalar::atomic_rmw(word, op, signed, v, cmp))
    }
}

/// Memory one thread owns while it runs a workgroup: an invocation's
/// private memory (arrays indexed at run time), zeroed before each
/// invocation, or the workgroup's memory, zeroed before its first phase.
/// Plain words: no other thread sees them.
#[derive(Clone, Debug)]
pub struct Private {
    words: Vec<u32>,
    len: u64,
    /// Which memory, for faults.
    name: &'static str,
}

impl Private {
    fn new(bytes: u32, name: &'static str) -> Self {
        Private {
            words: vec![0; (bytes as usize).div_ceil(4)],
            len: u64::from(bytes),
            name,
        }
    }

    /// Zeroes the memory: WGSL's function-scope variables start zeroed.
    #[inline]
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    #[inline(always)]
    fn locate(&self, what: &str, offset: u64, bytes: u64) -> Result<usize, Fault> {
        word_of(offset, bytes, self.len).ok_or_else(|| self.fault(what, offset, bytes))
    }

    #[inline(always)]
    fn word(&self, w: usize, offset: u64, bytes: u64) -> Result<u32, Fault> {
        self.words
            .get(w)
            .copied()
            .ok_or_else(|| self.fault("load", offset, bytes))
    }

    #[inline(always)]
    fn cell(&mut self, w: usize, offset: u64, bytes: u64) -> Result<&mut u32, Fault> {
        let (len, name) = (self.len, self.name);
        self.words
            .get_mut(w)
            .ok_or_else(|| fault("store", name, offset, bytes, len))
    }

    #[cold]
    fn fault(&self, what: &str, offset: u64, bytes: u64) -> Fault {
        fault(what, self.name, offset, bytes, self.len)
    }

    #[inline(always)]
    fn ld_word(&self, offset: u64) -> Result<u32, Fault> {
        let w = self.locate("load", offset, 4)?;
        self.word(w, offset, 4)
    }

    loads!();

    /// Stores a `u32` at byte `offset`.
    #[inline(always)]
    pub fn st_u32(&mut self, offset: u64, v: u32) -> Result<(), Fault> {
        let w = self.locate("store", offset, 4)?;
        *self.cell(w, offset, 4)? = v;
        Ok(())
    }

    /// Stores an `i32`.
    #[inline(always)]
    pub fn st_i32(&mut self, offset: u64, v: i32) -> Result<(), Fault> {
        self.st_u32(offset, v as u32)
    }

    /// Stores an `f32`.
    #[inline(always)]
    pub fn st_f32(&mut self, offset: u64, v: f32) -> Result<(), Fault> {
        self.st_u32(offset, v.to_bits())
    }

    /// Stores an `f16` into half of a word.
    #[inline(always)]
    pub fn st_f16(&mut self, offset: u64, v: f16) -> Result<(), Fault> {
        let w = self.locate("store", offset, 2)?;
        let shift = 8 * (offset & 2);
        let cell = self.cell(w, offset, 2)?;
        *cell = (*cell & !(0xffff_u32 << shift)) | u32::from(v.to_bits()) << shift;
        Ok(())
    }

    /// Stores a `u64` as two words, low first.
    #[inline(always)]
    pub fn st_u64(&mut self, offset: u64, v: u64) -> Result<(), Fault> {
        let w = self.locate("store", offset, 8)?;
        *self.cell(w, offset, 8)? = v as u32;
        *self.cell(w + 1, offset, 8)? = (v >> 32) as u32;
        Ok(())
    }

    /// A read-modify-write of the word at `offset` (no other invocation
    /// sees private memory, so a plain one); gives the old value.
    #[inline(always)]
    pub fn atomic(
        &mut self,
        op: AtomicOp,
        signed: bool,
        offset: u64,
        v: u32,
        cmp: u32,
    ) -> Result<u32, Fault> {
        let w = self.locate("atomic", offset, 4)?;
        let cell = self.cell(w, offset, 4)?;
        let old = *cell;
        *cell = atomic_apply(op, signed, old, v, cmp);
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words per workgroup of [`PARTS`].
    const W: usize = 4;

    fn linear(wid: [u32; 3], grid: [u32; 3]) -> u64 {
        u64::from(wid[0]) + u64::from(grid[0]) * u64::from(wid[1])
    }

    /// Writes `1000 + g` into workgroup `g`'s words, through the shared
    /// buffer.
    fn shared(cx: &Ctx<'_>, wg: &mut Group) -> Result<(), Fault> {
        let (wid, _) = wg.parts();
        let g = linear(wid, cx.grid());
        let b = cx.rw(0)?;
        for i in 0..W as u64 {
            let at = (g * W as u64 + i) * 4;
            if at + 4 <= b.len() {
                b.st_u32(at, 1000 + g as u32)?;
            }
        }
        Ok(())
    }

    /// Writes `g` into workgroup `g`'s words through its part, and leaves
    /// every fifth workgroup (and any whose part is not whole) to
    /// [`shared`].
    fn parted(cx: &Ctx<'_>, wg: &mut Group, owned: &[Part<'_>]) -> Result<bool, Fault> {
        let (wid, _) = wg.parts();
        let g = linear(wid, cx.grid());
        if g % 5 == 3 {
            return Ok(false);
        }
        let Some(w) = owned[0].window::<W>(g * W as u64 * 4, 0) else {
            return Ok(false);
        };
        for i in 0..W {
            assert_eq!(w.ld_u32(i), 7, "a part starts with the buffer's words");
            w.st_u32(i, g as u32);
        }
        Ok(true)
    }

    const PARTS: Kernel = Kernel {
        name: "parts",
        workgroup_size: [W as u32, 1, 1],
        read_only: &[false],
        param_bytes: 0,
        private_bytes: 0,
        shared_bytes: 0,
        ops: 1,
        group: shared,
        parted: Some(Parted {
            buffers: &[0],
            group: parted,
        }),
    };

    /// What [`PARTS`] leaves in word `i` of a buffer of `words` words.
    fn expected(i: usize, groups: u64, words: usize) -> u32 {
        let g = (i / W) as u64;
        let whole = (g as usize + 1) * W <= words;
        match () {
            () if g >= groups => 7,
            () if g % 5 == 3 || !whole => 1000 + g as u32,
            () => g as u32,
        }
    }

    fn check(grid: [u32; 3], words: usize, threads: usize) {
        let groups = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let mut bytes: Vec<u32> = vec![7; words];
        let mut views: Vec<&mut [u8]> = vec![zerocopy::IntoBytes::as_mut_bytes(&mut bytes[..])];
        PARTS
            .run_with(grid, &mut views, &[], &HostOptions { threads })
            .expect("the launch runs");
        for (i, &w) in bytes.iter().enumerate() {
            assert_eq!(
                w,
                expected(i, groups, words),
                "grid {grid:?}, {words} words, {threads} threads: word {i}"
            );
        }
    }

    #[test]
    fn workgroups_run_on_their_parts_and_the_rest_after() {
        // One thread; threads with many ranges (2^15 workgroups pass the
        // work a thread needs); a buffer ending inside a workgroup's part,
        // one shorter than the grid, one longer; two grid rows.
        for threads in [1, 3] {
            check([9, 1, 1], 9 * W, threads);
            check([1 << 15, 1, 1], (1 << 15) * W - 2, threads);
            check([40, 1, 1], 21 * W + 1, threads);
            check([40, 1, 1], 50 * W, threads);
            check([1 << 14, 2, 1], (1 << 15) * W, threads);
        }
    }

    /// Like [`parted`], but every workgroup after the first two could run
    /// on its part.
    fn parted_after_two(cx: &Ctx<'_>, wg: &mut Group, owned: &[Part<'_>]) -> Result<bool, Fault> {
        let (wid, _) = wg.parts();
        if linear(wid, cx.grid()) < 2 {
            return Ok(false);
        }
        parted(cx, wg, owned)
    }

    /// Where the first two workgroups of a range do not run on their
    /// parts, the rest of the range is not tried: it runs shared, with
    /// the same result as on parts.
    #[test]
    fn a_range_that_starts_without_parts_runs_shared() {
        let kernel = Kernel {
            parted: Some(Parted {
                buffers: &[0],
                group: parted_after_two,
            }),
            ..PARTS
        };
        let mut words: Vec<u32> = vec![7; 12 * W];
        let mut views: Vec<&mut [u8]> = vec![zerocopy::IntoBytes::as_mut_bytes(&mut words[..])];
        kernel
            .run_with([12, 1, 1], &mut views, &[], &HostOptions { threads: 1 })
            .expect("the launch runs");
        for (i, &w) in words.iter().enumerate() {
            assert_eq!(w, 1000 + (i / W) as u32, "word {i}");
        }
    }

    #[test]
    fn a_buffer_not_viewed_in_place_runs_shared() {
        // Bytes off a word boundary: the words are a copy, so no part can
        // be handed out, and every workgroup writes `1000 + g`.
        let mut store = [0u8; 4 * 8 * W + 1];
        let offset = if store.as_ptr().align_offset(4) == 0 {
            1
        } else {
            0
        };
        let bytes = &mut store[offset..offset + 4 * 8 * W];
        let mut views: Vec<&mut [u8]> = vec![bytes];
        PARTS
            .run_with([8, 1, 1], &mut views, &[], &HostOptions { threads: 1 })
            .expect("the launch runs");
        for (i, c) in views[0].chunks(4).enumerate() {
            let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert_eq!(w, 1000 + (i / W) as u32, "word {i}");
        }
    }
}
