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
//!   "imported", "skipped": [[reason, count], ...]}`).
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
//! `keel` object (another tool's) is imported: see `import.rs`.
//!
//! # Layout
//! - this file: the format (above), the category mapping every side
//!   shares, and [`read_json`], which tells Keel's own files from others;
//! - `write.rs`: the writer ([`write_json`]);
//! - `read.rs`: the reader of Keel's own files (strict, an exact round
//!   trip): tables from the `keel` object and `thread_name` metadata;
//! - `stream.rs`: the byte scanner an import reads through (one event at a
//!   time, from any reader);
//! - `import.rs`: the importer of other tools' files (lenient, nothing lost
//!   silently: the import report);
//! - `decode.rs`: field access with JSON paths in errors, exact
//!   microseconds, arguments, and the walk over the events of a Keel file;
//!   [`short`] for quoting bad values.
//!
//! Choosing between JSON and the native format, and decompressing, is
//! [`file`](crate::file)'s job.

mod decode;
mod import;
mod read;
mod stream;
mod write;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::{FlowKind, Lane, LaneKind, SpanKind, Trace};
use decode::{err, type_name};

pub use decode::short;
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

/// How many leading bytes [`read_json_bytes`] looks at to tell a Keel
/// file (whose `thread_name` metadata comes first and carries
/// `"keel_lane"`) from another tool's.
const SNIFF: usize = 64 << 10;

/// Whether `head`, the start of a JSON trace, looks like Keel's own (a
/// guess that only saves time: an import that meets a `keel` object reads
/// the file exactly after all).
pub(crate) fn looks_like_keel(head: &[u8]) -> bool {
    let head = &head[..head.len().min(SNIFF)];
    head.windows(12).any(|w| w == b"\"keel_lane\":")
}

/// [`read_json`] from bytes: Keel's own files are read exactly (invalid
/// UTF-8 is reported with its byte offset), other tools' imported as they
/// stream by.
pub fn read_json_bytes(input: &[u8]) -> Result<Trace> {
    read_json_bytes_as(input, None)
}

/// [`read_json_bytes`] of bytes that were compressed with `compression`
/// (for the import report).
pub(crate) fn read_json_bytes_as(input: &[u8], compression: Option<&str>) -> Result<Trace> {
    if !looks_like_keel(input) {
        let imported = import::import(input, compression)?;
        if !imported.keel {
            return Ok(imported.trace);
        }
    }
    let text = std::str::from_utf8(input).map_err(|e| {
        Error::Format(format!(
            "expected a UTF-8 JSON trace, found invalid UTF-8 at byte offset {}",
            e.valid_up_to()
        ))
    })?;
    match read_keel(text)? {
        Some(trace) => Ok(trace),
        // Keel-like metadata but no `keel` object: someone else's.
        None => Ok(import::import(input, compression)?.trace),
    }
}

/// Reads Chrome Trace Event JSON: the exact [`Trace`] for a file written by
/// [`write_json`], or what can be imported from another tool's trace (see
/// `import.rs`: every event imported or counted as skipped with a reason in
/// [`Trace::import`]). Malformed input is an [`Error::Format`] naming
/// the JSON path or byte offset of the problem; no input panics.
pub fn read_json(input: &str) -> Result<Trace> {
    read_json_bytes(input.as_bytes())
}

/// Imports another tool's JSON trace from a reader, streaming (the file is
/// never held whole). Returns the trace, or `None` when the input turned
/// out to be a Keel file (with a `keel` object), which the caller reads
/// exactly with [`read_json_bytes`]; also `distributedInfo.rank`.
pub(crate) fn import_reader(
    input: impl std::io::Read + Send,
    compression: Option<&str>,
) -> Result<(Option<Trace>, Option<i64>)> {
    let imported = import::import(input, compression)?;
    Ok(if imported.keel {
        (None, imported.rank)
    } else {
        (Some(imported.trace), imported.rank)
    })
}

/// Reads a Keel file exactly (with the whole JSON tree: Keel's own files
/// are what Keel wrote from memory).
fn read_keel(input: &str) -> Result<Option<Trace>> {
    let root: Value = serde_json::from_str(input).map_err(|e| {
        err(format!(
            "expected a JSON trace, found invalid JSON: {e} (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let (events, keel) = match &root {
        Value::Array(events) => (events.as_slice(), None),
        Value::Object(map) => {
            let events = match map.get("traceEvents") {
                Some(Value::Array(events)) => events.as_slice(),
                Some(other) => {
                    return Err(err(format!(
                        "traceEvents: expected an array, found {}",
                        type_name(other)
                    )));
                }
                None => {
                    return Err(err(
                        "expected a top-level field \"traceEvents\", found none".to_owned(),
                    ));
                }
            };
            (events, map.get("keel"))
        }
        other => {
            return Err(err(format!(
                "expected a JSON object with \"traceEvents\", found {}",
                type_name(other)
            )));
        }
    };
    match keel {
        Some(keel) => read::keel(events, keel).map(Some),
        None => Ok(None),
    }
}
