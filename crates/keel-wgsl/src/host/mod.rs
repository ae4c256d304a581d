//! Runs a lowered [`Program`] on the host's threads: the CPU backend's
//! WGSL kernels, and the reference the GPU ends are compared with.
//!
//! A launch compiles the program once (`compile.rs`): registers become
//! slots of lane-major storage (a register is a contiguous run of one
//! value per invocation), each instruction gets the lane kernel for its
//! type, and the launch's constants are folded in. Each workgroup then
//! runs as a SIMT interpreter (`exec.rs`): every instruction runs over all
//! of the workgroup's invocations before the next, under a mask of active
//! lanes, so barriers cost nothing and dispatch happens once per
//! instruction, not once per invocation. Workgroups run in parallel on
//! scoped threads that take chunks of them from an atomic counter.
//!
//! There is no `unsafe`: each storage buffer is viewed as `&[AtomicU32]`
//! (zerocopy checks the alignment and length), shared by every thread and
//! accessed with relaxed loads and stores, which are plain moves on
//! common hardware. A buffer declared read-only is viewed as plain
//! `&[u32]` instead (no thread writes it, so its loads vectorize; the
//! compiler refuses a program that writes one). A binding that is not
//! 4-byte aligned, or whose length is not a multiple of 4, is copied into
//! padded words and back.

pub(crate) mod compile;
pub(crate) mod exec;
pub(crate) mod lanes;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use zerocopy::FromBytes;

use crate::ir::Program;

use compile::Launch;
pub(crate) use exec::{Binding, Mem};
use exec::{Shared, Worker};

/// How a launch uses the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostOptions {
    /// Threads to run workgroups on; 0: `std::thread::available_parallelism`.
    pub threads: usize,
}

/// Why a launch did not run, or stopped: the launch's arguments do not
/// match the program, or the program breaks a rule of the IR (a lowering
/// bug), said with the kernel's name and what was expected and found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    message: String,
}

impl HostError {
    fn new(message: String) -> Self {
        HostError { message }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HostError {}

/// Lane-instructions below which a launch runs on the calling thread:
/// about what starting and joining a few threads costs.
const INLINE_WORK: u64 = 1 << 17;

/// Runs `grid` workgroups of `program` on the host.
///
/// `buffers[n]` is storage buffer `n` (`Space::Buffer(n)`), `params` the
/// parameter block (read as little-endian 32-bit words). Workgroups run in
/// parallel on `options.threads` threads; a launch too small to pay for
/// threads runs on the calling thread.
pub fn run(
    program: &Program,
    grid: [u32; 3],
    buffers: &mut [&mut [u8]],
    params: &[u8],
    options: &HostOptions,
) -> Result<(), HostError> {
    let name = &program.name;
    if buffers.len() != program.buffers.len() {
        return Err(HostError::new(format!(
            "kernel `{name}`: expected {} storage buffers, found {}",
            program.buffers.len(),
            buffers.len()
        )));
    }
    if params.len() < program.param_bytes as usize {
        return Err(HostError::new(format!(
            "kernel `{name}`: expected a parameter block of {} bytes, found {}",
            program.param_bytes,
            params.len()
        )));
    }
    if program.workgroup_size.contains(&0) {
        return Err(HostError::new(format!(
            "kernel `{name}`: workgroup size {:?} has an empty axis",
            program.workgroup_size
        )));
    }
    let lens: Vec<u64> = buffers.iter().map(|b| b.len() as u64).collect();
    let code = compile::compile(
        program,
        &Launch {
            lens: &lens,
            params,
            grid,
        },
    )?;
    let groups = grid
        .iter()
        .try_fold(1u64, |n, &g| n.checked_mul(u64::from(g)))
        .ok_or_else(|| {
            HostError::new(format!(
                "kernel `{name}`: grid {grid:?} has too many workgroups"
            ))
        })?;
    if groups == 0 {
        return Ok(());
    }

    let mut views: Vec<View<'_>> = buffers
        .iter_mut()
        .zip(&program.buffers)
        .map(|(b, decl)| View::new(b, decl.read_only))
        .collect();
    let env = Shared {
        code: &code,
        name,
        size: program.workgroup_size,
        grid,
        buffers: views.iter().map(View::binding).collect(),
        shared_bytes: program.shared_bytes,
        private_bytes: program.private_bytes,
    };
    let result = launch(&env, groups, program.invocations(), options);
    drop(env);
    for view in &mut views {
        view.write_back();
    }
    result
}

/// Runs every workgroup of the launch, in parallel where it pays.
fn launch(
    env: &Shared<'_>,
    groups: u64,
    invocations: u32,
    options: &HostOptions,
) -> Result<(), HostError> {
    let work = groups
        .saturating_mul(u64::from(invocations))
        .saturating_mul(env.code.ops.max(1) as u64);
    for_each_group(
        groups,
        work,
        options,
        || Worker::new(env),
        |worker, g| worker.run_group(g),
    )
}

/// Workgroup `index` of `grid` as an id (x fastest, then y, then z).
pub(crate) fn group_id(index: u64, grid: [u32; 3]) -> [u32; 3] {
    let [gx, gy, _] = grid.map(u64::from);
    [
        (index % gx) as u32,
        (index / gx % gy) as u32,
        (index / (gx * gy)) as u32,
    ]
}

/// Calls `run` on workgroups `0..groups`, each thread with its own state
/// from `make` (see [`for_each_range`]). The first error stops every
/// thread at its next range and is returned.
pub(crate) fn for_each_group<W, E: Send>(
    groups: u64,
    work: u64,
    options: &HostOptions,
    make: impl Fn() -> W + Sync,
    run: impl Fn(&mut W, u64) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let chunk = chunk_of(groups, work, options);
    for_each_range(groups, chunk, options, make, |state, range| {
        range.into_iter().try_for_each(|g| run(state, g))
    })
}

/// The threads a launch of `groups` workgroups may run on:
/// `options.threads` (every core where it is 0), at most one a workgroup.
fn threads_for(groups: u64, options: &HostOptions) -> usize {
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    threads
        .min(usize::try_from(groups).unwrap_or(usize::MAX))
        .max(1)
}

/// The workgroups a thread takes at a time: all of them where one thread
/// runs the launch (its `work`, about one unit per instruction per
/// invocation, too small to pay for starting threads); otherwise ranges
/// small enough to balance the threads, large enough that the counter
/// they are taken from is not contended.
pub(crate) fn chunk_of(groups: u64, work: u64, options: &HostOptions) -> u64 {
    match threads_for(groups, options) {
        threads if threads > 1 && work >= INLINE_WORK => (groups / (threads as u64 * 8)).max(1),
        _ => groups.max(1),
    }
}

/// Calls `run` on the ranges `k * chunk .. (k + 1) * chunk` of workgroups
/// `0..groups` (the last one cut at `groups`), each thread with its own
/// state from `make`: on the calling thread where `chunk` covers every
/// workgroup, otherwise on `options.threads` scoped threads taking ranges
/// from an atomic counter. The first error stops every thread at its next
/// range and is returned.
pub(crate) fn for_each_range<W, E: Send>(
    groups: u64,
    chunk: u64,
    options: &HostOptions,
    make: impl Fn() -> W + Sync,
    run: impl Fn(&mut W, std::ops::Range<u64>) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let chunk = chunk.max(1);
    let threads = threads_for(groups, options);
    if chunk >= groups || threads == 1 {
        let mut state = make();
        let mut start = 0;
        while start < groups {
            let end = start.saturating_add(chunk).min(groups);
            run(&mut state, start..end)?;
            start = end;
        }
        return Ok(());
    }
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let work = || -> Result<(), E> {
        let mut state = make();
        while !failed.load(Ordering::Relaxed) {
            let start = next.fetch_add(chunk, Ordering::Relaxed);
            if start >= groups {
                break;
            }
            if let Err(e) = run(&mut state, start..start.saturating_add(chunk).min(groups)) {
                failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mine = work();
        handles.into_iter().fold(mine, |acc, h| {
            let theirs = h
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            acc.and(theirs)
        })
    })
}

/// One storage buffer during a launch.
pub(crate) enum View<'a> {
    /// The caller's bytes, viewed in place as words.
    Direct(&'a [AtomicU32], u64),
    /// A read-only buffer's bytes, viewed in place as plain words: no
    /// thread writes them, so loads need no atomics and vectorize.
    ReadOnly(&'a [u32], u64),
    /// A padded copy of a read-only buffer that cannot be viewed in place.
    ReadOnlyCopy(Vec<u32>, u64),
    /// A padded copy of the caller's bytes, written back after the
    /// launch unless the buffer is read-only.
    Copied {
        words: Vec<AtomicU32>,
        bytes: &'a mut [u8],
        read_only: bool,
    },
}

impl<'a> View<'a> {
    /// Views `bytes` as words: in place where zerocopy allows it, else
    /// as a padded copy.
    pub(crate) fn new(bytes: &'a mut [u8], read_only: bool) -> Self {
        let len = bytes.len() as u64;
        if read_only {
            let bytes: &'a [u8] = bytes;
            return match <[u32]>::ref_from_bytes(bytes) {
                Ok(words) => View::ReadOnly(words, len),
                Err(_) => View::ReadOnlyCopy(
                    bytes
                        .chunks(4)
                        .map(|c| {
                            let mut w = [0u8; 4];
                            w[..c.len()].copy_from_slice(c);
                            u32::from_le_bytes(w)
                        })
                        .collect(),
                    len,
                ),
            };
        }
        match <[AtomicU32]>::mut_from_bytes(bytes) {
            Ok(words) => View::Direct(words, len),
            Err(e) => {
                let bytes = e.into_src();
                let words = bytes
                    .chunks(4)
                    .map(|c| {
                        let mut w = [0u8; 4];
                        w[..c.len()].copy_from_slice(c);
                        AtomicU32::new(u32::from_le_bytes(w))
                    })
                    .collect();
                View::Copied {
                    words,
                    bytes,
                    read_only,
                }
            }
        }
    }

    /// The words a launch reads and writes.
    pub(crate) fn binding(&self) -> Binding<'_> {
        match self {
            View::Direct(words, len) => Binding {
                words: Mem::Atomic(words),
                len: *len,
            },
            View::ReadOnly(words, len) => Binding {
                words: Mem::Plain(words),
                len: *len,
            },
            View::ReadOnlyCopy(words, len) => Binding {
                words: Mem::Plain(words),
                len: *len,
            },
            View::Copied { words, bytes, .. } => Binding {
                words: Mem::Atomic(words),
                len: bytes.len() as u64,
            },
        }
    }

    /// Copies a padded copy's words back into the caller's bytes.
    pub(crate) fn write_back(&mut self) {
        if let View::Copied {
            words,
            bytes,
            read_only: false,
        } = self
        {
            for (c, w) in bytes.chunks_mut(4).zip(words.iter()) {
                let w = w.load(Ordering::Relaxed).to_le_bytes();
                c.copy_from_slice(&w[..c.len()]);
            }
        }
    }
}
