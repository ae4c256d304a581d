//! PyTorch CUDA memory snapshots: the pickle that
//! `torch.cuda.memory._dump_snapshot` writes (what PyTorch's memory viewer
//! at pytorch.org/memory_viz opens), read with no Python, and the analyses
//! that viewer offers, as plain functions a UI or a script calls.
//!
//! - [`load_snapshot`], [`read_from`] and [`read_snapshot`] decode a
//!   snapshot, plain or gzip-compressed (`.pickle.gz`, by its magic
//!   bytes), streamed, with Keel's own pickle reader ([`pickle`]; its docs
//!   say why it is not a crate's).
//! - [`Snapshot`] is the model: the allocator's segments and blocks when the
//!   snapshot was taken, each device's trace of allocator actions
//!   ([`TraceEntry`]), and the stack of every block and entry, with frames
//!   and stacks interned ([`Snapshot::frames`]), so a frame repeated in a
//!   million entries costs its bytes once and an entry costs 48 bytes.
//! - The analyses ([`timeline`], [`state_at`], [`entry_at`],
//!   [`largest_blocks`], [`text`], [`operator_at`]) are pure functions
//!   over the model (`analysis.rs`).
//!
//! # The file
//!
//! A dict with `segments` (one dict per segment reserved from CUDA:
//! `device`, `address`, `total_size`, `stream`, `segment_type`, `blocks`,
//! each block with `address`, `size`, `requested_size`, `state`, `frames`)
//! and `device_traces` (per device, the allocator's history, oldest first:
//! `action`, `addr`, `size`, `stream`, `time_us`, `frames`). A frame is
//! `name`, `filename`, `line`. Unknown keys are ignored (PyTorch adds
//! keys often: `allocator_settings`, `external_annotations`,
//! `compile_context`, `user_metadata` in 2.11). Older snapshots still
//! open: a top-level list of segments (no traces), blocks without
//! `address` (placed one after another from the segment's base, as they
//! are laid out) or without `frames` (taken from the last `history`
//! record), entries without `time_us`. A required key that is missing or
//! of the wrong type is an error naming the path to it
//! (`device_traces[0][17].size`) and quoting a short prefix of what was
//! found.
//!
//! # Memory
//!
//! The file streams through the decoder (decompressed as it is read): the
//! decoded pickle ([`pickle`]) is alive while the model is built, then
//! dropped; the model keeps only numbers, interned frames and interned
//! stacks.

mod analysis;
pub mod pickle;
mod read;

use std::io::{BufRead, Read};
use std::path::Path;

pub use analysis::{
    AllocatorState, BlockAt, Peak, SegmentAt, Timeline, entry_at, largest_blocks, operator_at,
    short_frames, state_at, text, timeline, timelines,
};

use crate::error::{Error, Result};
use crate::model::Text;

/// A frame of a stack: a Python frame (`forward`,
/// `.../modeling_gpt2.py`, line 569) or a C++ one (`at::native::empty_cuda`,
/// `??`, line 0).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function.
    pub name: Text,
    /// Its file (`??` when unknown).
    pub filename: Text,
    /// The line (0 when unknown).
    pub line: i64,
}

/// A stack: an index into [`Snapshot`]'s stack table. [`StackId::EMPTY`]
/// is the stack with no frames (what PyTorch records when history was off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StackId(pub u32);

impl StackId {
    /// The stack with no frames.
    pub const EMPTY: StackId = StackId(0);
}

/// What an allocator did (a [`TraceEntry`]'s `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block handed out (`addr`, `size` of the block).
    Alloc,
    /// A block freed by its user while streams that used it may still run
    /// (it stays active until [`Action::FreeCompleted`]).
    FreeRequested,
    /// A block given back to the cache.
    FreeCompleted,
    /// A segment reserved from CUDA (`cudaMalloc`).
    SegmentAlloc,
    /// A segment released to CUDA (`cudaFree`).
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// The moment the snapshot was taken.
    Snapshot,
    /// An allocation that failed (`size` requested, `addr` the bytes CUDA
    /// had free).
    Oom,
    /// A marker the program recorded.
    UserDefined,
}

impl Action {
    /// Every action, in a stable order.
    pub const ALL: [Action; 10] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::UserDefined,
    ];

    /// The name PyTorch writes (`alloc`, `free_requested`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::UserDefined => "user_defined",
        }
    }

    /// The action PyTorch names `name`.
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// One action of a device's allocator history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// The block's or segment's address (for [`Action::Oom`], the bytes
    /// free on the device).
    pub addr: u64,
    /// Bytes of the block or segment (for [`Action::Oom`], the request).
    pub size: u64,
    /// The CUDA stream (`cudaStream_t` as an integer; 0 the default).
    pub stream: i64,
    /// When, in microseconds since the Unix epoch (the clock of Kineto
    /// traces: see [`operator_at`]); `None` in snapshots older than
    /// PyTorch 2.1.
    pub time_us: Option<i64>,
    /// Where it was called from.
    pub stack: StackId,
}

/// What a block of a segment held when the snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out, in use.
    ActiveAllocated,
    /// Freed by its user; streams that used it may still be running.
    ActivePendingFree,
    /// Cached: free for the next request.
    Inactive,
}

impl BlockState {
    /// The name PyTorch writes (`active_allocated`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    /// Whether the block counts as allocated (active): in use, or freed
    /// but not yet given back.
    pub fn is_active(self) -> bool {
        self != BlockState::Inactive
    }
}

/// A block of a [`Segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Its first address.
    pub address: u64,
    /// Its size in bytes (the rounded size the allocator handed out).
    pub size: u64,
    /// The bytes its user asked for (`None` in old snapshots).
    pub requested_size: Option<u64>,
    /// Its state.
    pub state: BlockState,
    /// Where it was allocated (for an inactive block, where the last block
    /// there was freed, when PyTorch kept it).
    pub stack: StackId,
}

/// A segment the allocator reserved from CUDA, as the snapshot saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The CUDA device index.
    pub device: u32,
    /// Its base address.
    pub address: u64,
    /// Its size in bytes.
    pub total_size: u64,
    /// Bytes in its [`BlockState::ActiveAllocated`] blocks, as the file
    /// says (`None` when it does not).
    pub allocated_size: Option<u64>,
    /// The stream it serves.
    pub stream: i64,
    /// From the small-block pool (`segment_type` `small`: requests of at
    /// most 1 MiB).
    pub small: bool,
    /// An expandable segment (mapped page by page).
    pub expandable: bool,
    /// Where it was reserved.
    pub stack: StackId,
    /// Its blocks, in address order, covering it.
    pub blocks: Vec<Block>,
}

/// A decoded memory snapshot; see the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The segments when the snapshot was taken, in file order.
    pub segments: Vec<Segment>,
    /// Per CUDA device (by index), its allocator history, oldest first
    /// (empty when the snapshot has no `device_traces`).
    pub device_traces: Vec<Vec<TraceEntry>>,
    frames: Vec<Frame>,
    /// Frame indices of every stack, end to end.
    stack_frames: Vec<u32>,
    /// Per stack, its range in `stack_frames`.
    stacks: Vec<(u32, u32)>,
}

impl Snapshot {
    /// Every distinct frame.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// How many distinct stacks there are.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// The frames of `stack`, innermost first (the allocator's own frames
    /// come first, the program's entry point last). An id of another
    /// snapshot that is out of range reads as the empty stack.
    pub fn stack(&self, stack: StackId) -> impl ExactSizeIterator<Item = &Frame> + '_ {
        self.frame_ids(stack)
            .iter()
            .map(move |&f| &self.frames[f as usize])
    }

    /// The frames of `stack` as indices into [`frames`](Self::frames),
    /// innermost first (for grouping by frame without comparing text).
    pub fn frame_ids(&self, stack: StackId) -> &[u32] {
        let (start, end) = self
            .stacks
            .get(stack.0 as usize)
            .map_or((0, 0), |&(s, e)| (s as usize, e as usize));
        &self.stack_frames[start..end]
    }

    /// Trace entries of every device.
    pub fn entries(&self) -> usize {
        self.device_traces.iter().map(Vec::len).sum()
    }
}

/// Decodes a snapshot from a file's bytes, gzip-compressed or not (see the
/// module docs).
pub fn read_snapshot(bytes: &[u8]) -> Result<Snapshot> {
    read_from(bytes)
}

/// Decodes a snapshot from `input`, gzip-compressed (by its magic bytes)
/// or not, streaming: neither the file nor its decompressed bytes are
/// held whole.
pub fn read_from(mut input: impl BufRead) -> Result<Snapshot> {
    let head = input
        .fill_buf()
        .map_err(|e| Error::Format(format!("could not read the snapshot: {e}")))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        return read::snapshot(Gunzip(flate2::bufread::MultiGzDecoder::new(input)));
    }
    read::snapshot(input)
}

/// A gzip stream whose damage reads as an error saying so.
struct Gunzip<R>(flate2::bufread::MultiGzDecoder<R>);

impl<R: BufRead> Read for Gunzip<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            std::io::Error::other(format!(
                "expected a valid gzip stream, found a damaged one: {e}"
            ))
        })
    }
}

/// Whether the file at `path` holds a pickle (plain or gzip-compressed):
/// what a memory snapshot is and a trace never is (a pickle of protocol 2
/// or later starts with the `PROTO` opcode, byte 0x80, where a JSON trace
/// starts with text and a native one with its magic). Only the first bytes
/// are read.
pub fn is_snapshot(path: &Path) -> Result<bool> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::Format(format!("could not read file {}: {e}", path.display())))?;
    let mut input = std::io::BufReader::with_capacity(1 << 12, file);
    let gz = input
        .fill_buf()
        .map_err(|e| Error::Format(format!("could not read file {}: {e}", path.display())))?
        .starts_with(&[0x1f, 0x8b]);
    let mut first = [0u8; 1];
    let n = if gz {
        flate2::bufread::MultiGzDecoder::new(input).read(&mut first)
    } else {
        input.read(&mut first)
    };
    Ok(matches!(n, Ok(1)) && first[0] == 0x80)
}

/// Loads a snapshot file (`.pickle` or `.pickle.gz`; the content decides),
/// streaming it.
pub fn load_snapshot(path: &Path) -> Result<Snapshot> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::Format(format!(
            "could not read snapshot file {}: {e}",
            path.display()
        ))
    })?;
    read_from(std::io::BufReader::with_capacity(1 << 16, file)).map_err(|e| match e {
        Error::Format(m) => Error::Format(format!("{}: {m}", path.display())),
        other => other,
    })
}
