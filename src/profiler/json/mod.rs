//! Chrome Trace Event JSON, shaped like a PyTorch profiler (Kineto) trace.
//!
//! The file opens in Perfetto (ui.perfetto.dev) and `chrome://tracing`:
//!
//! ```text
//! {"traceEvents":[ ...events... ],
//! "displayTimeUnit":"ns",
//! "keel":{"version":1,"dropped":0,"devices":[...],"counters":[...],"calibrations":[...]}}
//! ```
//!
//! - Processes: host threads are pid 0 (`process_name` "host"); device `i`
//!   of [`Trace::devices`] is pid `i + 1` (`process_name` "vulkan:0
//!   llvmpipe"). Lane `j` of [`Trace::lanes`] is tid `j + 1` in the pid of
//!   its device (or 0 for host lanes). `M` events give `process_name`,
//!   `process_sort_index`, `thread_name` and `thread_sort_index`; the
//!   `thread_name` args also carry the lane's kind (`"keel_lane":"stream",
//!   "device":0,"stream":33` or `"keel_lane":"host","thread":7`).
//! - Spans are `X` events; `ts` and `dur` are microseconds printed with
//!   exactly three decimals from the integer ns (no float rounding). `cat`
//!   follows Kineto: on host lanes `cuda_runtime` (kernel, copy, alloc, free,
//!   event record, wait), `cuda_sync`, `user_annotation`; on stream lanes
//!   `kernel`, `gpu_memcpy`, `gpu_memory` (alloc, free), `cuda_event`
//!   (event record, wait), `cuda_sync`. `args` holds `keel_kind` (the
//!   [`SpanKind`] name; left out when the category already implies it, see
//!   [`kind_for_category`]), `keel_op` (left out when 0) and the span's args
//!   as strings; an empty `args` is left out. A user argument whose name
//!   starts with `keel_` is written as `keel_arg_<name>` so it cannot be
//!   taken for Keel's own.
//! - Instants are `"ph":"i","s":"t"` events. Counters are `C` events on
//!   the device's pid with `args:{"value":v}`, one per point; the `keel`
//!   object lists the counters so that empty ones survive a round trip.
//! - Flows are an `s` and an `f` event with the flow's `id`, `cat` `ac2g`
//!   (launch, Kineto's name) or `event_wait`, `name` the [`FlowKind`] name,
//!   `"bp":"e"`, and the `ts`, pid and tid of each end: both bind to the
//!   slice enclosing that time.
//!
//! [`read_json`] rebuilds the exact [`Trace`] from a file written here. A
//! trace without the `keel` object (another tool's) is imported as far as
//! possible: devices from `process_name` metadata that names a device
//! (`cuda:0 ...`, `GPU 0`), other processes as host threads, unknown events
//! skipped.
//!
//! # Layout
//! - this file: the format (above), the category mapping every side
//!   shares, and [`read_json`], which tells Keel's own files from others;
//! - `write.rs`: the writer ([`write_json`]);
//! - `read.rs`: the reader of Keel's own files (strict, an exact round
//!   trip): tables from the `keel` object and `thread_name` metadata;
//! - `import.rs`: the importer of other tools' files (lenient): devices
//!   from process names, lanes as met;
//! - `decode.rs`: what both readers share: field access with JSON paths in
//!   errors, exact microseconds, arguments, and the walk over the events.
//!
//! Choosing between JSON and the native format for a file is
//! [`file`](super::file)'s job.

mod decode;
mod import;
mod read;
mod write;

use serde_json::Value;

use super::trace::{FlowKind, Lane, LaneKind, SpanKind, Trace};
use crate::error::{Error, Result};
use decode::{err, type_name};

pub use write::{to_json_string, write_json};

/// The Kineto-style category of a span of `kind` on a host or stream lane.
pub fn category(kind: SpanKind, host: bool) -> &'static str {
    match (kind, host) {
        (SpanKind::Sync, _) => "cuda_sync",
        (SpanKind::Annotation, true) => "user_annotation",
        (_, true) => "cuda_runtime",
        (SpanKind::Kernel, false) => "kernel",
        (SpanKind::Copy, false) => "gpu_memcpy",
        (SpanKind::Alloc | SpanKind::Free, false) => "gpu_memory",
        (SpanKind::EventRecord | SpanKind::Wait, false) => "cuda_event",
        (SpanKind::Annotation, false) => "user_annotation",
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

/// [`read_json`] from bytes, reporting invalid UTF-8 with its byte offset.
pub fn read_json_bytes(input: &[u8]) -> Result<Trace> {
    let text = std::str::from_utf8(input).map_err(|e| {
        Error::TraceFormat(format!(
            "expected a UTF-8 JSON trace, found invalid UTF-8 at byte offset {}",
            e.valid_up_to()
        ))
    })?;
    read_json(text)
}

/// Reads Chrome Trace Event JSON: the exact [`Trace`] for a file written by
/// [`write_json`], or what can be imported from another tool's trace (see
/// the module docs). Malformed input is an [`Error::TraceFormat`] naming
/// the JSON path of the problem; no input panics.
pub fn read_json(input: &str) -> Result<Trace> {
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
        Some(keel) => read::keel(events, keel),
        None => import::foreign(events),
    }
}
