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
//! Saving and loading files by extension: [`save_trace`](super::native::save_trace),
//! [`load_trace`](super::native::load_trace).

use std::collections::{HashMap, hash_map::Entry};
use std::io::Write;

use serde_json::{Map, Value};

use super::trace::{
    Calibration, Counter, Flow, FlowEnd, FlowKind, InstantEvent, Lane, LaneKind, Span, SpanKind,
    TRACE_VERSION, Trace, TraceDevice,
};
use crate::error::{Error, Result};

/// Bytes gathered before each `write_all` on the output.
const CHUNK: usize = 1 << 16;

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

/// A buffer of output bytes with the small JSON writers the exporter needs.
struct Out<'w, W: Write> {
    buf: Vec<u8>,
    out: &'w mut W,
}

impl<W: Write> Out<'_, W> {
    fn raw(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
    }

    fn u64(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.buf.extend_from_slice(&digits[i..]);
    }

    fn i64(&mut self, v: i64) {
        if v < 0 {
            self.buf.push(b'-');
        }
        self.u64(v.unsigned_abs());
    }

    /// ns as microseconds with exactly three decimals.
    fn micros(&mut self, ns: u64) {
        self.u64(ns / 1000);
        let frac = ns % 1000;
        self.buf.extend_from_slice(&[
            b'.',
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ]);
    }

    /// A JSON string literal.
    fn str(&mut self, s: &str) {
        self.buf.push(b'"');
        self.str_body(s);
        self.buf.push(b'"');
    }

    /// The inside of a JSON string literal: `s` escaped.
    fn str_body(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = s.as_bytes();
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let escape: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0..=0x1f => &[],
                _ => continue,
            };
            self.buf.extend_from_slice(&bytes[start..i]);
            if escape.is_empty() {
                self.buf.extend_from_slice(b"\\u00");
                self.buf.push(HEX[usize::from(b >> 4)]);
                self.buf.push(HEX[usize::from(b & 0xf)]);
            } else {
                self.buf.extend_from_slice(escape);
            }
            start = i + 1;
        }
        self.buf.extend_from_slice(&bytes[start..]);
    }

    /// `"key":"value"` for a user argument (see the module docs).
    fn user_arg(&mut self, key: &str, value: &str) {
        self.buf.push(b'"');
        if key.starts_with("keel_") {
            self.raw("keel_arg_");
        }
        self.str_body(key);
        self.raw("\":");
        self.str(value);
    }

    fn pairs(&mut self, pairs: &[(String, String)]) {
        self.buf.push(b'[');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            self.buf.push(b'[');
            self.str(k);
            self.buf.push(b',');
            self.str(v);
            self.buf.push(b']');
        }
        self.buf.push(b']');
    }

    /// Starts an event: `{"ph":"<ph>","pid":<pid>,"tid":<tid>` (with the
    /// separator from the previous event).
    fn event(&mut self, first: &mut bool, ph: &str, pid: u64, tid: Option<u64>) -> Result<()> {
        if !*first {
            self.raw(",\n");
        }
        *first = false;
        self.raw("{\"ph\":\"");
        self.raw(ph);
        self.raw("\",\"pid\":");
        self.u64(pid);
        if let Some(tid) = tid {
            self.raw(",\"tid\":");
            self.u64(tid);
        }
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.out
            .write_all(&self.buf)
            .map_err(|e| Error::TraceFormat(format!("could not write the JSON trace: {e}")))?;
        self.buf.clear();
        Ok(())
    }
}

/// Writes `trace` as Chrome Trace Event JSON (see the module docs).
///
/// Output is gathered in 64 KiB chunks, so `out` needs no `BufWriter`.
pub fn write_json(trace: &Trace, out: &mut impl Write) -> Result<()> {
    let mut w = Out {
        buf: Vec::with_capacity(CHUNK + 4096),
        out,
    };
    let mut first = true;
    w.raw("{\"traceEvents\":[\n");

    // Metadata: processes, then threads.
    let mut host = trace
        .lanes
        .iter()
        .any(|l| matches!(l.kind, LaneKind::Host { .. }));
    host |= trace.lanes.is_empty() && trace.devices.is_empty();
    if host {
        w.event(&mut first, "M", 0, None)?;
        w.raw(",\"name\":\"process_name\",\"args\":{\"name\":\"host\"}}");
        w.event(&mut first, "M", 0, None)?;
        w.raw(",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":0}}");
    }
    for (i, device) in trace.devices.iter().enumerate() {
        let pid = i as u64 + 1;
        w.event(&mut first, "M", pid, None)?;
        w.raw(",\"name\":\"process_name\",\"args\":{\"name\":");
        w.str(&format!("{} {}", device.device, device.name));
        w.raw("}}");
        w.event(&mut first, "M", pid, None)?;
        w.raw(",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
        w.u64(pid);
        w.raw("}}");
    }
    for (i, lane) in trace.lanes.iter().enumerate() {
        let (pid, tid) = (lane_pid(lane), i as u64 + 1);
        w.event(&mut first, "M", pid, Some(tid))?;
        w.raw(",\"name\":\"thread_name\",\"args\":{\"name\":");
        w.str(&lane.name);
        match lane.kind {
            LaneKind::Stream { device, stream } => {
                w.raw(",\"keel_lane\":\"stream\",\"device\":");
                w.u64(device.into());
                w.raw(",\"stream\":");
                w.i64(stream);
            }
            LaneKind::Host { thread } => {
                w.raw(",\"keel_lane\":\"host\",\"thread\":");
                w.u64(thread);
            }
        }
        w.raw("}}");
        w.event(&mut first, "M", pid, Some(tid))?;
        w.raw(",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
        w.u64(i as u64);
        w.raw("}}");
    }

    // Where each lane lives; an unknown lane (a broken trace) is written as
    // host pid 0 with its tid so that the problem shows on import.
    let place = |lane: u32| -> (u64, bool) {
        match trace.lanes.get(lane as usize) {
            Some(l) => (lane_pid(l), matches!(l.kind, LaneKind::Host { .. })),
            None => (0, true),
        }
    };

    for span in &trace.spans {
        let (pid, host) = place(span.lane);
        let cat = category(span.kind, host);
        w.event(&mut first, "X", pid, Some(u64::from(span.lane) + 1))?;
        w.raw(",\"ts\":");
        w.micros(span.start_ns);
        w.raw(",\"dur\":");
        w.micros(span.dur_ns);
        w.raw(",\"cat\":\"");
        w.raw(cat);
        w.raw("\",\"name\":");
        w.str(&span.name);
        // `args` is left out when empty.
        let mut sep = ",\"args\":{";
        if kind_for_category(cat, host) != Some(span.kind) {
            w.raw(sep);
            w.raw("\"keel_kind\":\"");
            w.raw(span.kind.name());
            w.raw("\"");
            sep = ",";
        }
        if span.op != 0 {
            w.raw(sep);
            w.raw("\"keel_op\":");
            w.u64(span.op);
            sep = ",";
        }
        for (k, v) in &span.args {
            w.raw(sep);
            w.user_arg(k, v);
            sep = ",";
        }
        w.raw(if sep == "," { "}}" } else { "}" });
    }

    for instant in &trace.instants {
        let (pid, _) = place(instant.lane);
        w.event(&mut first, "i", pid, Some(u64::from(instant.lane) + 1))?;
        w.raw(",\"s\":\"t\",\"ts\":");
        w.micros(instant.ts_ns);
        w.raw(",\"name\":");
        w.str(&instant.name);
        w.raw(",\"args\":{");
        for (i, (k, v)) in instant.args.iter().enumerate() {
            if i > 0 {
                w.raw(",");
            }
            w.user_arg(k, v);
        }
        w.raw("}}");
    }

    for counter in &trace.counters {
        let pid = u64::from(counter.device) + 1;
        for &(ts, value) in &counter.points {
            w.event(&mut first, "C", pid, None)?;
            w.raw(",\"ts\":");
            w.micros(ts);
            w.raw(",\"name\":");
            w.str(&counter.name);
            w.raw(",\"args\":{\"value\":");
            w.i64(value);
            w.raw("}}");
        }
    }

    for flow in &trace.flows {
        for (ph, end) in [("s", flow.from), ("f", flow.to)] {
            let (pid, _) = place(end.lane);
            w.event(&mut first, ph, pid, Some(u64::from(end.lane) + 1))?;
            w.raw(",\"ts\":");
            w.micros(end.ts_ns);
            w.raw(",\"id\":");
            w.u64(flow.id);
            w.raw(",\"cat\":\"");
            w.raw(flow_category(flow.kind));
            w.raw("\",\"name\":\"");
            w.raw(flow.kind.name());
            w.raw("\",\"bp\":\"e\"}");
        }
    }

    w.raw("\n],\n\"displayTimeUnit\":\"ns\",\n\"keel\":{\"version\":");
    w.u64(trace.version.into());
    w.raw(",\"dropped\":");
    w.u64(trace.dropped);
    w.raw(",\"devices\":[");
    for (i, device) in trace.devices.iter().enumerate() {
        if i > 0 {
            w.raw(",");
        }
        w.raw("{\"device\":");
        w.str(&device.device);
        w.raw(",\"name\":");
        w.str(&device.name);
        w.raw(",\"properties\":");
        w.pairs(&device.properties);
        w.raw("}");
    }
    w.raw("],\"counters\":[");
    for (i, counter) in trace.counters.iter().enumerate() {
        if i > 0 {
            w.raw(",");
        }
        w.raw("{\"device\":");
        w.u64(counter.device.into());
        w.raw(",\"name\":");
        w.str(&counter.name);
        w.raw("}");
    }
    w.raw("],\"calibrations\":[");
    for (i, c) in trace.calibrations.iter().enumerate() {
        if i > 0 {
            w.raw(",");
        }
        w.raw("{\"device\":");
        w.u64(c.device.into());
        w.raw(",\"method\":");
        w.str(&c.method);
        w.raw(",\"error_bound_ns\":");
        w.u64(c.error_bound_ns);
        w.raw("}");
    }
    w.raw("]}}\n");
    w.flush()?;
    w.out
        .flush()
        .map_err(|e| Error::TraceFormat(format!("could not write the JSON trace: {e}")))
}

/// [`write_json`] into a `String`.
pub fn to_json_string(trace: &Trace) -> Result<String> {
    let mut bytes = Vec::with_capacity(200 + 110 * trace.spans.len());
    write_json(trace, &mut bytes)?;
    String::from_utf8(bytes)
        .map_err(|e| Error::TraceFormat(format!("the JSON writer produced invalid UTF-8: {e}")))
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

fn err(message: String) -> Error {
    Error::TraceFormat(message)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field access with JSON paths in the errors.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, path: &'a str) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            other => Err(err(format!(
                "{path}: expected an object, found {}",
                type_name(other)
            ))),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    fn req(&self, key: &str) -> Result<&'a Value> {
        self.map.get(key).ok_or_else(|| {
            err(format!(
                "{}: expected a field \"{key}\", found none",
                self.path
            ))
        })
    }

    fn str(&self, key: &str) -> Result<&'a str> {
        match self.req(key)? {
            Value::String(s) => Ok(s),
            other => Err(err(format!(
                "{}.{key}: expected a string, found {}",
                self.path,
                type_name(other)
            ))),
        }
    }

    fn u64(&self, key: &str) -> Result<u64> {
        let v = self.req(key)?;
        v.as_u64().ok_or_else(|| {
            err(format!(
                "{}.{key}: expected an unsigned integer, found {}",
                self.path,
                describe(v)
            ))
        })
    }

    fn u32(&self, key: &str) -> Result<u32> {
        let v = self.u64(key)?;
        u32::try_from(v).map_err(|_| {
            err(format!(
                "{}.{key}: expected an integer below 2^32, found {v}",
                self.path
            ))
        })
    }

    fn i64(&self, key: &str) -> Result<i64> {
        let v = self.req(key)?;
        v.as_i64().ok_or_else(|| {
            err(format!(
                "{}.{key}: expected an integer, found {}",
                self.path,
                describe(v)
            ))
        })
    }

    fn array(&self, key: &str) -> Result<&'a [Value]> {
        match self.req(key)? {
            Value::Array(a) => Ok(a),
            other => Err(err(format!(
                "{}.{key}: expected an array, found {}",
                self.path,
                type_name(other)
            ))),
        }
    }

    /// Microseconds (a JSON number) as exact ns.
    fn micros(&self, key: &str, exact: bool) -> Result<u64> {
        let v = self.req(key)?;
        let Value::Number(n) = v else {
            return Err(err(format!(
                "{}.{key}: expected a number of microseconds, found {}",
                self.path,
                type_name(v)
            )));
        };
        parse_micros(n.as_str(), exact).ok_or_else(|| {
            err(format!(
                "{}.{key}: expected a non-negative number of microseconds{} below 2^64 ns, found {}",
                self.path,
                if exact { " with at most 3 decimals" } else { "" },
                n.as_str()
            ))
        })
    }
}

/// A short description of a value for error messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => n.as_str().to_owned(),
        other => type_name(other).to_owned(),
    }
}

/// Parses a decimal number of microseconds into ns without floating point.
/// With `exact`, more than three decimals (or an exponent) is refused;
/// without, the value is rounded to the nearest ns.
fn parse_micros(text: &str, exact: bool) -> Option<u64> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(int) && (frac.is_empty() || digits(frac)) && (frac.len() <= 3 || !exact) {
        let mut ns: u64 = int.parse::<u64>().ok()?.checked_mul(1000)?;
        let mut scale = 100;
        for b in frac.bytes().take(3) {
            ns = ns.checked_add(u64::from(b - b'0') * scale)?;
            scale /= 10;
        }
        if frac.as_bytes().get(3).is_some_and(|&b| b >= b'5') {
            ns = ns.checked_add(1)?;
        }
        return Some(ns);
    }
    if exact {
        return None;
    }
    // Exponents and the like, from other tools: floating point is fine.
    let us: f64 = text.parse().ok()?;
    let ns = (us * 1000.0).round();
    (ns.is_finite() && (0.0..1.8e19).contains(&ns)).then_some(ns as u64)
}

/// The user arguments of an event: keel's own are skipped, `keel_arg_`
/// names restored, values other than strings (other tools') kept as JSON.
fn user_args(args: Option<&Map<String, Value>>) -> Vec<(String, String)> {
    let Some(args) = args else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(args.len());
    for (k, v) in args {
        let key = if let Some(rest) = k.strip_prefix("keel_arg_") {
            rest.to_owned()
        } else if k.starts_with("keel_") {
            continue;
        } else {
            k.clone()
        };
        let value = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push((key, value));
    }
    out
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
        Some(keel) => Importer::keel(events, keel)?.run(events),
        None => Importer::foreign(events).run(events),
    }
}

/// Which lane a (pid, tid) is.
struct Importer {
    trace: Trace,
    /// Whether the file is Keel's own (strict) or another tool's.
    strict: bool,
    lanes: HashMap<(u64, u64), u32>,
    /// Foreign mode: the device index of each device pid.
    device_pids: HashMap<u64, u32>,
    /// Counter index by (device, name).
    counters: HashMap<(u32, String), usize>,
}

fn event_path(i: usize) -> String {
    format!("traceEvents[{i}]")
}

impl Importer {
    fn keel(events: &[Value], keel: &Value) -> Result<Importer> {
        let k = Obj::new(keel, "keel")?;
        let version = k.u32("version")?;
        if version > TRACE_VERSION {
            return Err(err(format!(
                "keel.version: expected a trace version up to {TRACE_VERSION}, found {version} (written by a newer Keel)"
            )));
        }
        let mut trace = Trace {
            version,
            dropped: k.u64("dropped")?,
            ..Trace::default()
        };
        for (i, d) in k.array("devices")?.iter().enumerate() {
            let path = format!("keel.devices[{i}]");
            let d = Obj::new(d, &path)?;
            let mut properties = Vec::new();
            for (j, p) in d.array("properties")?.iter().enumerate() {
                match p.as_array().map(Vec::as_slice) {
                    Some([Value::String(k), Value::String(v)]) => {
                        properties.push((k.clone(), v.clone()));
                    }
                    _ => {
                        return Err(err(format!(
                            "{path}.properties[{j}]: expected a [name, value] pair of strings, found {}",
                            describe(p)
                        )));
                    }
                }
            }
            trace.devices.push(TraceDevice {
                device: d.str("device")?.to_owned(),
                name: d.str("name")?.to_owned(),
                properties,
            });
        }
        let devices = trace.devices.len();
        let device_index = |path: &str, device: u32| -> Result<u32> {
            if (device as usize) < devices {
                Ok(device)
            } else {
                Err(err(format!(
                    "{path}.device: expected a device index below {devices}, found {device}"
                )))
            }
        };
        let mut counters = HashMap::new();
        if k.get("counters").is_some() {
            for (i, c) in k.array("counters")?.iter().enumerate() {
                let path = format!("keel.counters[{i}]");
                let c = Obj::new(c, &path)?;
                let device = device_index(&path, c.u32("device")?)?;
                let name = c.str("name")?.to_owned();
                counters
                    .entry((device, name.clone()))
                    .or_insert(trace.counters.len());
                trace.counters.push(Counter {
                    device,
                    name,
                    points: Vec::new(),
                });
            }
        }
        for (i, c) in k.array("calibrations")?.iter().enumerate() {
            let path = format!("keel.calibrations[{i}]");
            let c = Obj::new(c, &path)?;
            trace.calibrations.push(Calibration {
                device: device_index(&path, c.u32("device")?)?,
                method: c.str("method")?.to_owned(),
                error_bound_ns: c.u64("error_bound_ns")?,
            });
        }

        // Lanes: every thread_name event with "keel_lane" args.
        let mut slots: Vec<Option<Lane>> = Vec::new();
        let mut lanes = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let path = event_path(i);
            let ev = Obj::new(e, &path)?;
            if ev.get("ph").and_then(Value::as_str) != Some("M")
                || ev.get("name").and_then(Value::as_str) != Some("thread_name")
            {
                continue;
            }
            let args_path = format!("{path}.args");
            let args = Obj::new(ev.req("args")?, &args_path)?;
            if args.get("keel_lane").is_none() {
                continue;
            }
            let (pid, tid) = (ev.u64("pid")?, ev.u64("tid")?);
            let kind = match args.str("keel_lane")? {
                "stream" => LaneKind::Stream {
                    device: device_index(&args_path, args.u32("device")?)?,
                    stream: args.i64("stream")?,
                },
                "host" => LaneKind::Host {
                    thread: args.u64("thread")?,
                },
                other => {
                    return Err(err(format!(
                        "{args_path}.keel_lane: expected \"stream\" or \"host\", found \"{other}\""
                    )));
                }
            };
            let lane = Lane {
                kind,
                name: args.str("name")?.to_owned(),
            };
            let want_pid = lane_pid(&lane);
            if pid != want_pid {
                return Err(err(format!(
                    "{path}.pid: expected {want_pid} for a lane of kind {:?}, found {pid}",
                    lane.kind
                )));
            }
            // tid = lane index + 1; one thread_name per lane, so a tid past
            // the number of events cannot be right (and bounds the slots).
            let index = tid
                .checked_sub(1)
                .filter(|&t| t < events.len() as u64 && t < u64::from(u32::MAX))
                .ok_or_else(|| {
                    err(format!(
                        "{path}.tid: expected a lane number between 1 and {}, found {tid}",
                        events.len()
                    ))
                })? as usize;
            if slots.len() <= index {
                slots.resize(index + 1, None);
            }
            if slots[index].is_some() {
                return Err(err(format!(
                    "{path}: expected one thread_name per lane, found a second one for tid {tid}"
                )));
            }
            slots[index] = Some(lane);
            lanes.insert((pid, tid), index as u32);
        }
        for (i, slot) in slots.into_iter().enumerate() {
            trace.lanes.push(slot.ok_or_else(|| {
                err(format!(
                    "expected a thread_name event for every lane, found none for lane {i} (tid {})",
                    i + 1
                ))
            })?);
        }
        Ok(Importer {
            trace,
            strict: true,
            lanes,
            device_pids: HashMap::new(),
            counters,
        })
    }

    fn foreign(events: &[Value]) -> Importer {
        let mut trace = Trace {
            version: TRACE_VERSION,
            ..Trace::default()
        };
        let mut device_pids = HashMap::new();
        let mut names = HashMap::new();
        for e in events {
            let Some(ev) = e.as_object() else { continue };
            if ev.get("ph").and_then(Value::as_str) != Some("M") {
                continue;
            }
            let (Some(pid), Some(name)) = (
                ev.get("pid").and_then(Value::as_u64),
                ev.get("args")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str),
            ) else {
                continue;
            };
            match ev.get("name").and_then(Value::as_str) {
                Some("process_name") => {
                    if let Entry::Vacant(slot) = device_pids.entry(pid)
                        && let Some((device, rest)) = device_name(name)
                    {
                        slot.insert(trace.devices.len() as u32);
                        trace.devices.push(TraceDevice {
                            device,
                            name: rest,
                            properties: Vec::new(),
                        });
                    }
                }
                Some("thread_name") => {
                    if let Some(tid) = ev.get("tid").and_then(Value::as_u64) {
                        names.entry((pid, tid)).or_insert_with(|| name.to_owned());
                    }
                }
                _ => {}
            }
        }
        let mut importer = Importer {
            trace,
            strict: false,
            lanes: HashMap::new(),
            device_pids,
            counters: HashMap::new(),
        };
        // Lanes in the order of their thread_name events, then as met.
        let mut named: Vec<_> = names.into_iter().collect();
        named.sort();
        for ((pid, tid), name) in named {
            importer.foreign_lane(pid, tid, Some(name));
        }
        importer
    }

    fn foreign_lane(&mut self, pid: u64, tid: u64, name: Option<String>) -> u32 {
        if let Some(&lane) = self.lanes.get(&(pid, tid)) {
            return lane;
        }
        let kind = match self.device_pids.get(&pid) {
            Some(&device) => LaneKind::Stream {
                device,
                stream: tid as i64,
            },
            None => LaneKind::Host { thread: tid },
        };
        let name = name.unwrap_or_else(|| match kind {
            LaneKind::Stream { .. } => format!("stream {tid}"),
            LaneKind::Host { .. } => format!("thread {tid}"),
        });
        let index = self.trace.lanes.len() as u32;
        self.trace.lanes.push(Lane { kind, name });
        self.lanes.insert((pid, tid), index);
        index
    }

    /// The lane of an event; `None` (skip it) for a foreign event with no
    /// usable pid/tid.
    fn lane(&mut self, ev: &Obj<'_>) -> Result<Option<u32>> {
        if self.strict {
            let (pid, tid) = (ev.u64("pid")?, ev.u64("tid")?);
            return match self.lanes.get(&(pid, tid)) {
                Some(&lane) => Ok(Some(lane)),
                None => Err(err(format!(
                    "{}: expected the pid/tid of a lane declared by a thread_name event, found unknown lane pid {pid} tid {tid}",
                    ev.path
                ))),
            };
        }
        let pid = ev.get("pid").and_then(Value::as_u64);
        let tid = ev.get("tid").and_then(Value::as_u64);
        Ok(match (pid, tid) {
            (Some(pid), Some(tid)) => Some(self.foreign_lane(pid, tid, None)),
            _ => None,
        })
    }

    fn is_host(&self, lane: u32) -> bool {
        self.trace
            .lanes
            .get(lane as usize)
            .is_some_and(|l| matches!(l.kind, LaneKind::Host { .. }))
    }

    /// An event's `args` object, if any.
    fn args<'a>(&self, ev: &Obj<'a>) -> Result<Option<&'a Map<String, Value>>> {
        match ev.get("args") {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) if self.strict => Err(err(format!(
                "{}.args: expected an object, found {}",
                ev.path,
                type_name(other)
            ))),
            Some(_) => Ok(None),
        }
    }

    fn run(mut self, events: &[Value]) -> Result<Trace> {
        // Flow id -> index in `pending`.
        let mut ids: HashMap<u64, usize> = HashMap::new();
        let mut pending: Vec<PendingFlow> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let path = event_path(i);
            let ev = match Obj::new(e, &path) {
                Ok(ev) => ev,
                Err(e) if self.strict => return Err(e),
                Err(_) => continue,
            };
            let ph = match ev.get("ph") {
                Some(Value::String(ph)) => ph.as_str(),
                Some(other) if self.strict => {
                    return Err(err(format!(
                        "{path}.ph: expected a string, found {}",
                        type_name(other)
                    )));
                }
                _ if self.strict => {
                    return Err(err(format!("{path}: expected a field \"ph\", found none")));
                }
                _ => continue,
            };
            let result = match ph {
                "X" => self.span(&ev),
                "i" | "I" => self.instant(&ev),
                "C" => self.counter(&ev),
                "s" | "f" => self.flow_end(&ev, ph == "s", i, &mut ids, &mut pending),
                _ => Ok(()),
            };
            match result {
                Ok(()) => {}
                Err(e) if self.strict => return Err(e),
                Err(_) => {}
            }
        }
        for flow in pending {
            match flow.to {
                Some(to) => self.trace.flows.push(Flow {
                    id: flow.id,
                    kind: flow.kind,
                    from: flow.from,
                    to,
                }),
                None if self.strict => {
                    return Err(err(format!(
                        "{}: expected an \"f\" event ending flow id {}, found none",
                        event_path(flow.event),
                        flow.id
                    )));
                }
                None => {}
            }
        }
        Ok(self.trace)
    }

    fn span(&mut self, ev: &Obj<'_>) -> Result<()> {
        let Some(lane) = self.lane(ev)? else {
            return Ok(());
        };
        let host = self.is_host(lane);
        let start_ns = ev.micros("ts", self.strict)?;
        let dur_ns = ev.micros("dur", self.strict)?;
        let name = ev.str("name")?.to_owned();
        let cat = match ev.get("cat") {
            Some(Value::String(c)) => c.as_str(),
            _ => "",
        };
        let args = self.args(ev)?;
        let kind = match args.and_then(|a| a.get("keel_kind")) {
            Some(Value::String(k)) => SpanKind::from_name(k).ok_or_else(|| {
                err(format!(
                    "{}.args.keel_kind: expected one of {}, found \"{k}\"",
                    ev.path,
                    SpanKind::ALL.map(SpanKind::name).join(", ")
                ))
            })?,
            Some(other) => {
                return Err(err(format!(
                    "{}.args.keel_kind: expected a string, found {}",
                    ev.path,
                    type_name(other)
                )));
            }
            None => match kind_for_category(cat, host) {
                Some(kind) => kind,
                None if self.strict => {
                    return Err(err(format!(
                        "{}: expected \"args.keel_kind\" or a known \"cat\", found cat \"{cat}\"",
                        ev.path
                    )));
                }
                None if host => SpanKind::Annotation,
                None => SpanKind::Kernel,
            },
        };
        let op = match args.and_then(|a| a.get("keel_op")) {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| {
                err(format!(
                    "{}.args.keel_op: expected an unsigned integer, found {}",
                    ev.path,
                    describe(v)
                ))
            })?,
        };
        self.trace.spans.push(Span {
            lane,
            name,
            kind,
            start_ns,
            dur_ns,
            op,
            args: user_args(args),
        });
        Ok(())
    }

    fn instant(&mut self, ev: &Obj<'_>) -> Result<()> {
        let Some(lane) = self.lane(ev)? else {
            return Ok(());
        };
        let ts_ns = ev.micros("ts", self.strict)?;
        let name = ev.str("name")?.to_owned();
        let args = user_args(self.args(ev)?);
        self.trace.instants.push(InstantEvent {
            lane,
            name,
            ts_ns,
            args,
        });
        Ok(())
    }

    fn counter(&mut self, ev: &Obj<'_>) -> Result<()> {
        let pid = ev.u64("pid")?;
        let device = if self.strict {
            pid.checked_sub(1)
                .and_then(|d| u32::try_from(d).ok())
                .filter(|&d| (d as usize) < self.trace.devices.len())
                .ok_or_else(|| {
                    err(format!(
                        "{}.pid: expected the pid of a device (1 to {}), found {pid}",
                        ev.path,
                        self.trace.devices.len()
                    ))
                })?
        } else {
            match self.device_pids.get(&pid) {
                Some(&d) => d,
                None => return Ok(()),
            }
        };
        let ts = ev.micros("ts", self.strict)?;
        let name = ev.str("name")?;
        let args_path = format!("{}.args", ev.path);
        let args = Obj::new(ev.req("args")?, &args_path)?;
        let value = args.i64("value")?;
        let key = (device, name.to_owned());
        let index = match self.counters.get(&key) {
            Some(&index) => index,
            None if self.strict => {
                return Err(err(format!(
                    "{}: expected a counter listed in keel.counters, found \"{name}\" of device {device}",
                    ev.path
                )));
            }
            None => {
                self.trace.counters.push(Counter {
                    device,
                    name: name.to_owned(),
                    points: Vec::new(),
                });
                self.counters.insert(key, self.trace.counters.len() - 1);
                self.trace.counters.len() - 1
            }
        };
        if let Some(counter) = self.trace.counters.get_mut(index) {
            counter.points.push((ts, value));
        }
        Ok(())
    }

    fn flow_end(
        &mut self,
        ev: &Obj<'_>,
        start: bool,
        index: usize,
        ids: &mut HashMap<u64, usize>,
        pending: &mut Vec<PendingFlow>,
    ) -> Result<()> {
        let id = ev.u64("id")?;
        let Some(lane) = self.lane(ev)? else {
            return Ok(());
        };
        let end = FlowEnd {
            lane,
            ts_ns: ev.micros("ts", self.strict)?,
        };
        let name = ev.get("name").and_then(Value::as_str).unwrap_or("");
        let cat = ev.get("cat").and_then(Value::as_str).unwrap_or("");
        let kind = match FlowKind::from_name(name) {
            Some(kind) => kind,
            None if cat == "ac2g" => FlowKind::Launch,
            None => {
                return Err(err(format!(
                    "{}.name: expected a flow kind (\"launch\" or \"event_wait\"), found \"{name}\"",
                    ev.path
                )));
            }
        };
        if start {
            match ids.entry(id) {
                Entry::Occupied(_) => Err(err(format!(
                    "{}: expected one \"s\" event per flow id, found a second one for id {id}",
                    ev.path
                ))),
                Entry::Vacant(slot) => {
                    slot.insert(pending.len());
                    pending.push(PendingFlow {
                        id,
                        kind,
                        from: end,
                        to: None,
                        event: index,
                    });
                    Ok(())
                }
            }
        } else {
            let Some(flow) = ids.get(&id).and_then(|&i| pending.get_mut(i)) else {
                return Err(err(format!(
                    "{}: expected an \"s\" event before this \"f\" of flow id {id}, found none",
                    ev.path
                )));
            };
            if flow.to.is_some() {
                return Err(err(format!(
                    "{}: expected one \"f\" event per flow id, found a second one for id {id}",
                    ev.path
                )));
            }
            if flow.kind != kind {
                return Err(err(format!(
                    "{}: expected a \"{}\" flow like its \"s\" event, found \"{}\"",
                    ev.path,
                    flow.kind.name(),
                    kind.name()
                )));
            }
            flow.to = Some(end);
            Ok(())
        }
    }
}

/// A flow whose `s` event was read.
struct PendingFlow {
    id: u64,
    kind: FlowKind,
    from: FlowEnd,
    to: Option<FlowEnd>,
    /// Index of the `s` event, for errors.
    event: usize,
}

/// Splits a foreign process name into (device string, name) when it names
/// a device: `cuda:0 NVIDIA H100` or Kineto's `GPU 0`.
fn device_name(name: &str) -> Option<(String, String)> {
    let (first, rest) = name.split_once(' ').unwrap_or((name, ""));
    if let Some((ty, index)) = first.split_once(':')
        && !ty.is_empty()
        && ty.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
        && !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
    {
        return Some((first.to_owned(), rest.to_owned()));
    }
    if first == "GPU" && !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        return Some((format!("cuda:{rest}"), name.to_owned()));
    }
    None
}
