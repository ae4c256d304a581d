//! Chrome Trace Event JSON, shaped like a PyTorch profiler (Kineto) trace.
//!
//! The file opens in Perfetto (ui.perfetto.dev) and `chrome://tracing`, and
//! PyTorch's trace analysis (HolisticTraceAnalysis) analyses it:
//!
//! ```text
//! {"schemaVersion": 1,
//! "distributedInfo": {"backend": "none", "rank": 0, "world_size": 1},
//! "traceEvents":[ ...events... ],
//! "displayTimeUnit":"ns",
//! "deviceProperties":[{"id":0,"name":"llvmpipe","device":"vulkan:0", ...properties}],
//! "keel":{"version":1,"dropped":0,"devices":[...],"counters":[...],"calibrations":[...]}}
//! ```
//!
//! - Processes: host threads are pid 0 (`process_name` "host"); device `i`
//!   of [`Trace::devices`] is pid `i + 1` (`process_name` "vulkan:0
//!   llvmpipe"). Lane `j` of [`Trace::lanes`] is tid `j + 1` in the pid of
//!   its device (or 0 for host lanes). `M` events give `process_name`,
//!   `process_sort_index`, `thread_name` and `thread_sort_index`; the
//!   `thread_name` args also carry the lane's kind (`"keel_lane":"stream",
//!   "device":0,"stream":33`, with `"thread":7` for a thread's lane of a
//!   stream that runs work inline, or `"keel_lane":"host","thread":7`) and, when
//!   it has one, its [`Lane::group`] (`"keel_group"`). An imported trace's
//!   [`Trace::import`] report is `keel.import` (`{"format", "events",
//!   "imported", "skipped": [[reason, count], ...]}`); a trace's
//!   [`Trace::origin_ns`] is `keel.origin_ns`, and the record of the files
//!   it was opened from ([`Trace::ranks`]) `keel.ranks` (`{"alignment":
//!   "clock" | "collectives" | "start", "matched", "files": [{"label",
//!   "rank", "lanes": [start, end], "devices": [start, end], "origin_ns",
//!   "offset_ns", "skew_ns", "collectives"}, ...]}`, `null` for a value
//!   not known); each is left out when the trace has none.
//! - Spans are `X` events; `ts` and `dur` are microseconds printed with
//!   exactly three decimals from the integer ns (no float rounding). `cat`
//!   follows Kineto: on host lanes `cpu_op` (kernel, copy, alloc, free,
//!   event record, wait), `cuda_sync`, `user_annotation`; on stream lanes
//!   `kernel`, `gpu_memcpy`, `gpu_memory` (alloc, free), `cuda_event`
//!   (event record, wait), `cuda_sync`. `args` holds `keel_kind` (the
//!   [`SpanKind`] name; left out when the category already implies it, see
//!   [`kind_for_category`]), `keel_op` (left out when 0) and the span's args
//!   as strings; an empty `args` is left out. A user argument whose name
//!   starts with `keel_` or is one of Kineto's (below) is written as
//!   `keel_arg_<name>` so it cannot be taken for Keel's own or Kineto's.
//! - For PyTorch's tools, as Kineto writes them: device spans also carry
//!   `device` (the device index), `stream` (the lane's tid, always
//!   positive), `correlation` and `External id` (the op), and kernels
//!   `grid` and `block` as arrays (from the span's `grid` and `block`
//!   arguments: `4x1x1` as Keel records a launch's grid and its kernel's
//!   workgroup size, which is CUDA's block, or `[4, 1, 1]` as imported
//!   from Kineto); a host launch or copy with an op holds a
//!   `cuda_runtime` slice `cudaLaunchKernel` / `cudaMemcpyAsync` over the
//!   same interval with the same `correlation` (marked `keel_extra`, which
//!   Keel's reader skips; it also skips every non-string argument, which
//!   only these fields are). `keel::profiler::step` ranges are
//!   `ProfilerStep#N` annotations.
//! - Instants are `"ph":"i","s":"t"` events. Counters are `C` events on
//!   the device's pid with `args:{"value":v}`, one per point; the `keel`
//!   object lists the counters so that empty ones survive a round trip.
//! - Allocator events ([`Trace::memory`]) are written as PyTorch's
//!   profiler writes them with `profile_memory=True`: `"ph":"i","s":"t"`,
//!   `cat` `cpu_instant_event`, name `[memory]` (a block allocated or
//!   freed), `[OutOfMemory]`, or `[memory segment]` (segments, which
//!   PyTorch's traces lack, named apart so its tools do not count them as
//!   blocks), on the device's pid and thread 0, with `args` `Device Type`
//!   (c10's number: cpu 0, cuda 1, vulkan 10; wgpu and third-party
//!   backends 20, PrivateUse1), `Device Id`, `Addr`, `Bytes` (negative for
//!   frees), `Total Allocated`, `Total Reserved`, and Keel's `keel_action`
//!   (the [`MemoryAction`](crate::model::MemoryAction) name),
//!   `keel_bytes`, `keel_segment`, `keel_stream` (when known) and
//!   `keel_small_pool` (when true). The allocated and reserved curves are
//!   counters like any other.
//! - Flows are an `s` and an `f` event with the flow's `id`, `cat` `ac2g`
//!   (launch, Kineto's name) or `event_wait`, `name` the [`FlowKind`] name,
//!   `"bp":"e"`, and the `ts`, pid and tid of each end: both bind to the
//!   slice enclosing that time.
//!
//! [`read_json`] rebuilds the exact [`Trace`] from a file written here
//! (files written before the Kineto fields too). A trace without the
//! `keel` object (another tool's) is imported: see `import/`.
//!
//! # Layout
//! Reading is a trace processor: a tokenizer finds each event's bytes, a
//! parser reads one event at a time into what it means, and no JSON tree
//! of the file is ever built, for Keel's own files and other tools' alike.
//! - this file: the format (above), the category mapping every side
//!   shares, and [`read_json`], which tells Keel's own files from others;
//! - `write.rs`: the writer ([`write_json`]);
//! - `stream.rs`: the tokenizer, the byte scanner every read goes through
//!   (one event at a time, from any reader; lenient for other tools'
//!   files, strict for Keel's);
//! - `value.rs`: the parser's values ([`short`] for quoting bad ones);
//! - `keel.rs` and `decode.rs`: the reader of Keel's own files (strict, an
//!   exact round trip): the tables from the `keel` object and
//!   `thread_name` metadata, then every event, with JSON paths and byte
//!   offsets in its errors;
//! - `import/`: the importer of other tools' files (lenient, nothing lost
//!   silently: the import report), a parser feeding one tracker per kind
//!   of cross-event state.
//!
//! Choosing between JSON and the native format, and decompressing, is
//! [`file`](crate::file)'s job.

// The readers (feature `import`): the tokenizer, the importer of other
// tools' traces, and Keel's own files.
#[cfg(feature = "import")]
mod decode;
#[cfg(feature = "import")]
mod import;
#[cfg(feature = "import")]
mod keel;
#[cfg(feature = "import")]
mod stream;
#[cfg(feature = "import")]
mod value;
mod write;

#[cfg(feature = "import")]
use std::io::Read;

use crate::model::{FlowKind, Lane, LaneKind, SpanKind};
#[cfg(feature = "import")]
use crate::{error::Result, model::Trace};

#[cfg(feature = "import")]
pub use value::short;
pub use write::{to_json_string, write_json};

/// The Kineto-style category of a span of `kind` on a host or stream lane.
pub fn category(kind: SpanKind, host: bool) -> &'static str {
    match (kind, host) {
        (SpanKind::Sync, _) => "cuda_sync",
        (SpanKind::Annotation, true) => "user_annotation",
        (_, true) => "cpu_op",
        (SpanKind::Kernel, false) => "kernel",
        (SpanKind::Copy, false) => "gpu_memcpy",
        (SpanKind::Alloc | SpanKind::Free, false) => "gpu_memory",
        (SpanKind::EventRecord | SpanKind::Wait, false) => "cuda_event",
        (SpanKind::Annotation, false) => "user_annotation",
        (SpanKind::Operator, false) => "cpu_op",
    }
}

/// The kind a category implies when a span has no `keel_kind` argument
/// (also used for traces of other tools).
pub fn kind_for_category(category: &str, host: bool) -> Option<SpanKind> {
    Some(match (category, host) {
        ("cuda_sync", _) => SpanKind::Sync,
        ("user_annotation" | "cpu_op" | "python_function", _) => SpanKind::Annotation,
        ("cuda_runtime" | "cuda_driver", true) => SpanKind::Kernel,
        ("kernel", _) => SpanKind::Kernel,
        ("gpu_memcpy" | "gpu_memset", _) => SpanKind::Copy,
        ("gpu_memory", _) => SpanKind::Alloc,
        ("cuda_event", _) => SpanKind::EventRecord,
        _ => return None,
    })
}

fn flow_category(kind: FlowKind) -> &'static str {
    match kind {
        FlowKind::Launch => "ac2g",
        FlowKind::EventWait => "event_wait",
    }
}

fn lane_pid(lane: &Lane) -> u64 {
    match lane.kind {
        LaneKind::Stream { device, .. } => u64::from(device) + 1,
        LaneKind::Host { .. } => 0,
    }
}

#[cfg(feature = "import")]
/// How many leading bytes are looked at to tell a Keel file (whose
/// `thread_name` metadata comes first and carries `"keel_lane"`) from
/// another tool's.
const SNIFF: usize = 64 << 10;

#[cfg(feature = "import")]
/// Whether `head`, the start of a JSON trace, looks like Keel's own (a
/// guess that only saves a pass: an import that meets a `keel` object
/// reads the file exactly after all).
fn looks_like_keel(head: &[u8]) -> bool {
    let head = &head[..head.len().min(SNIFF)];
    head.windows(12).any(|w| w == b"\"keel_lane\":")
}

#[cfg(feature = "import")]
/// [`read_json`] from bytes: Keel's own files are read exactly (invalid
/// UTF-8 is reported with its byte offset), other tools' imported as they
/// stream by.
pub fn read_json_bytes(input: &[u8]) -> Result<Trace> {
    read_from(|| Ok(input), input, None).map(|(trace, _)| trace)
}

#[cfg(feature = "import")]
/// Reads Chrome Trace Event JSON: the exact [`Trace`] for a file written by
/// [`write_json`], or what can be imported from another tool's trace (see
/// `import/`: every event imported or counted as skipped with a reason in
/// [`Trace::import`]). Malformed input is an
/// [`Error::Format`](crate::Error::Format) naming the JSON path
/// or byte offset of the problem; no input panics.
pub fn read_json(input: &str) -> Result<Trace> {
    read_json_bytes(input.as_bytes())
}

#[cfg(feature = "import")]
/// Reads a JSON trace from the input `open` gives, streaming (the input is
/// never held whole). `open` is called once per pass: Keel's own files
/// are read in two (their tables, then their events), and a file is read
/// again when it turns out to be of the other kind than its start
/// (`head`) suggested. `compression` names how the input was compressed,
/// for the import report.
///
/// Returns the trace and, for another tool's file, its
/// `distributedInfo.rank` (Keel writes a placeholder rank 0 for PyTorch's
/// tools, which says nothing).
pub(crate) fn read_from<R: Read + Send>(
    mut open: impl FnMut() -> Result<R>,
    head: &[u8],
    compression: Option<&str>,
) -> Result<(Trace, Option<i64>)> {
    if looks_like_keel(head) {
        if let Some(trace) = keel::read(&mut open)? {
            return Ok((trace, None));
        }
        // Keel-like metadata but no `keel` object: someone else's, once it
        // is known to be JSON.
        keel::validate(open()?)?;
    }
    let imported = import::import(open()?, compression)?;
    if imported.keel
        && let Some(trace) = keel::read(&mut open)?
    {
        return Ok((trace, None));
    }
    Ok((imported.trace, imported.rank))
}
