//! The writer: a [`Trace`] as Chrome Trace Event JSON (the format is in
//! the [module docs](super)).

use std::io::Write;

use super::{category, flow_category, kind_for_category, lane_pid};
use crate::error::{Error, Result};
use crate::model::{LaneKind, MemoryAction, MemoryEvent, Span, SpanKind, Trace};

/// Argument names Kineto gives meaning to, which Keel writes itself (as
/// numbers or arrays) for PyTorch's tools; a user argument of that name is
/// written as `keel_arg_<name>`.
const KINETO_ARGS: [&str; 7] = [
    "device",
    "stream",
    "correlation",
    "External id",
    "grid",
    "block",
    "cbid",
];

/// A `grid` or `block` argument as its three numbers: `4x1x1` as Keel
/// records a launch, or `[4, 1, 1]` as an imported Kineto trace has it.
fn dims_of(span: &Span, key: &str) -> Option<[u64; 3]> {
    let (_, v) = span.args.iter().find(|(k, _)| k == key)?;
    let v = v.trim();
    let (body, sep) = match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(inner) => (inner, ','),
        None => (v, 'x'),
    };
    let mut parts = body.split(sep).map(|p| p.trim().parse::<u64>());
    let g = [
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    ];
    parts.next().is_none().then_some(g)
}

/// The CUDA runtime call (name, Kineto's callback id) a host span of this
/// kind stands for, for the `cuda_runtime` slice written inside it.
fn runtime_call(kind: SpanKind) -> Option<(&'static str, u64)> {
    match kind {
        SpanKind::Kernel => Some(("cudaLaunchKernel", 211)),
        SpanKind::Copy => Some(("cudaMemcpyAsync", 41)),
        _ => None,
    }
}

/// Bytes gathered before each `write_all` on the output.
const CHUNK: usize = 1 << 16;

/// A buffer of output bytes with the small JSON writers the exporter needs.
struct Out<'w, W: Write> {
    buf: Vec<u8>,
    out: &'w mut W,
}

impl<W: Write> Out<'_, W> {
    fn raw(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// Writes `items` one after another, separated by commas.
    fn list<T>(&mut self, items: impl IntoIterator<Item = T>, mut each: impl FnMut(&mut Self, T)) {
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.raw(",");
            }
            each(self, item);
        }
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

    /// An integer, or `null` for none.
    fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.i64(v),
            None => self.raw("null"),
        }
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
        if key.starts_with("keel_") || KINETO_ARGS.contains(&key) {
            self.raw("keel_arg_");
        }
        self.str_body(key);
        self.raw("\":");
        self.str(value);
    }

    fn pairs(&mut self, pairs: &[(String, String)]) {
        self.buf.push(b'[');
        self.list(pairs, |o, (k, v)| {
            o.buf.push(b'[');
            o.str(k);
            o.buf.push(b',');
            o.str(v);
            o.buf.push(b']');
        });
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
            .map_err(|e| Error::Format(format!("could not write the JSON trace: {e}")))?;
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
    // What Kineto writes first; HolisticTraceAnalysis finds the rank with
    // a pattern that wants the space after the colon.
    w.raw("{\"schemaVersion\": 1,\n\"distributedInfo\": {\"backend\": \"none\", \"rank\": 0, \"world_size\": 1},\n\"traceEvents\":[\n");

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
            LaneKind::Stream {
                device,
                stream,
                thread,
            } => {
                w.raw(",\"keel_lane\":\"stream\",\"device\":");
                w.u64(device.into());
                w.raw(",\"stream\":");
                w.i64(stream);
                if thread != 0 {
                    w.raw(",\"thread\":");
                    w.u64(thread);
                }
            }
            LaneKind::Host { thread } => {
                w.raw(",\"keel_lane\":\"host\",\"thread\":");
                w.u64(thread);
            }
        }
        if !lane.group.is_empty() {
            w.raw(",\"keel_group\":");
            w.str(&lane.group);
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
        let tid = u64::from(span.lane) + 1;
        let cat = category(span.kind, host);
        w.event(&mut first, "X", pid, Some(tid))?;
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
        // Kineto's fields on device work: its device, stream (the lane's
        // tid, always positive), correlation with the host call, grid and
        // block.
        if let Some(LaneKind::Stream { device, .. }) =
            trace.lanes.get(span.lane as usize).map(|l| &l.kind)
        {
            w.raw(sep);
            w.raw("\"device\":");
            w.u64(u64::from(*device));
            w.raw(",\"stream\":");
            w.u64(tid);
            sep = ",";
            if span.op != 0 {
                w.raw(",\"correlation\":");
                w.u64(span.op);
                w.raw(",\"External id\":");
                w.u64(span.op);
            }
            if span.kind == SpanKind::Kernel {
                for key in ["grid", "block"] {
                    if let Some(d) = dims_of(span, key) {
                        w.raw(",\"");
                        w.raw(key);
                        w.raw("\":[");
                        w.u64(d[0]);
                        w.raw(",");
                        w.u64(d[1]);
                        w.raw(",");
                        w.u64(d[2]);
                        w.raw("]");
                    }
                }
            }
        }
        for (k, v) in &span.args {
            w.raw(sep);
            w.user_arg(k, v);
            sep = ",";
        }
        w.raw(if sep == "," { "}}" } else { "}" });
        // The runtime call inside a host launch or copy, as Kineto has it
        // (`cudaLaunchKernel` with the correlation of the device work);
        // Keel's reader skips it (`keel_extra`).
        if host
            && span.op != 0
            && let Some((call, cbid)) = runtime_call(span.kind)
        {
            w.event(&mut first, "X", pid, Some(tid))?;
            w.raw(",\"ts\":");
            w.micros(span.start_ns);
            w.raw(",\"dur\":");
            w.micros(span.dur_ns);
            w.raw(",\"cat\":\"cuda_runtime\",\"name\":\"");
            w.raw(call);
            w.raw("\",\"args\":{\"keel_extra\":1,\"correlation\":");
            w.u64(span.op);
            w.raw(",\"External id\":");
            w.u64(span.op);
            w.raw(",\"cbid\":");
            w.u64(cbid);
            w.raw("}}");
        }
    }

    for instant in &trace.instants {
        let (pid, _) = place(instant.lane);
        w.event(&mut first, "i", pid, Some(u64::from(instant.lane) + 1))?;
        w.raw(",\"s\":\"t\",\"ts\":");
        w.micros(instant.ts_ns);
        w.raw(",\"name\":");
        w.str(&instant.name);
        w.raw(",\"args\":{");
        w.list(&instant.args, |w, (k, v)| {
            w.user_arg(k, v);
        });
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

    for m in &trace.memory {
        let device = trace
            .devices
            .get(m.device as usize)
            .map(|d| d.device.as_str());
        memory_event(&mut w, &mut first, m, device.unwrap_or(""))?;
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

    w.raw("\n],\n\"displayTimeUnit\":\"ns\",\n\"deviceProperties\":[");
    // Kineto's device table: `id` is the device's index (its events'
    // `device` argument).
    w.list(trace.devices.iter().enumerate(), |w, (i, device)| {
        w.raw("{\"id\":");
        w.u64(i as u64);
        w.raw(",\"name\":");
        w.str(&device.name);
        w.raw(",\"device\":");
        w.str(&device.device);
        for (k, v) in &device.properties {
            if matches!(k.as_str(), "id" | "name" | "device") {
                continue;
            }
            w.raw(",");
            w.str(k);
            w.raw(":");
            w.str(v);
        }
        w.raw("}");
    });
    w.raw("],\n\"keel\":{\"version\":");
    w.u64(trace.version.into());
    w.raw(",\"dropped\":");
    w.u64(trace.dropped);
    w.raw(",\"devices\":[");
    w.list(&trace.devices, |w, device| {
        w.raw("{\"device\":");
        w.str(&device.device);
        w.raw(",\"name\":");
        w.str(&device.name);
        w.raw(",\"properties\":");
        w.pairs(&device.properties);
        w.raw("}");
    });
    w.raw("],\"counters\":[");
    w.list(&trace.counters, |w, counter| {
        w.raw("{\"device\":");
        w.u64(counter.device.into());
        w.raw(",\"name\":");
        w.str(&counter.name);
        w.raw("}");
    });
    w.raw("],\"calibrations\":[");
    w.list(&trace.calibrations, |w, c| {
        w.raw("{\"device\":");
        w.u64(c.device.into());
        w.raw(",\"method\":");
        w.str(&c.method);
        w.raw(",\"error_bound_ns\":");
        w.u64(c.error_bound_ns);
        w.raw("}");
    });
    w.raw("]");
    if let Some(r) = &trace.import {
        w.raw(",\"import\":{\"format\":");
        w.str(&r.format);
        w.raw(",\"events\":");
        w.u64(r.events);
        w.raw(",\"imported\":");
        w.u64(r.imported);
        w.raw(",\"skipped\":[");
        w.list(&r.skipped, |w, (reason, n)| {
            w.raw("[");
            w.str(reason);
            w.raw(",");
            w.u64(*n);
            w.raw("]");
        });
        w.raw("]}");
    }
    if let Some(origin) = trace.origin_ns {
        w.raw(",\"origin_ns\":");
        w.i64(origin);
    }
    if let Some(ranks) = &trace.ranks {
        w.raw(",\"ranks\":{\"alignment\":\"");
        w.raw(ranks.alignment.name());
        w.raw("\",\"matched\":");
        w.u64(ranks.matched);
        w.raw(",\"files\":[");
        w.list(&ranks.files, |w, f| {
            w.raw("{\"label\":");
            w.str(&f.label);
            w.raw(",\"rank\":");
            w.opt_i64(f.rank);
            w.raw(",\"lanes\":[");
            w.u64(f.lanes.start.into());
            w.raw(",");
            w.u64(f.lanes.end.into());
            w.raw("],\"devices\":[");
            w.u64(f.devices.start.into());
            w.raw(",");
            w.u64(f.devices.end.into());
            w.raw("],\"origin_ns\":");
            w.opt_i64(f.origin_ns);
            w.raw(",\"offset_ns\":");
            w.u64(f.offset_ns);
            w.raw(",\"skew_ns\":");
            w.opt_i64(f.skew_ns);
            w.raw(",\"collectives\":");
            w.u64(f.collectives);
            w.raw("}");
        });
        w.raw("]}");
    }
    w.raw("}}\n");
    w.flush()?;
    w.out
        .flush()
        .map_err(|e| Error::Format(format!("could not write the JSON trace: {e}")))
}

/// c10's `DeviceType` number and the device index of a device string
/// (`cuda:1` -> (1, 1); the last word of `rank 0 · vulkan:0`), as
/// PyTorch's `[memory]` events carry them. wgpu, which c10 has no number
/// for, is written as PrivateUse1 (20), like any third-party backend.
pub(super) fn c10_device(device: &str) -> (i64, i64) {
    let device = device.rsplit(' ').next().unwrap_or(device);
    let (ty, index) = device.split_once(':').unwrap_or((device, "0"));
    let ty = match ty.to_ascii_lowercase().as_str() {
        "cpu" => 0,
        "cuda" => 1,
        "hip" => 6,
        "vulkan" => 10,
        "xpu" => 12,
        "mps" => 13,
        _ => 20,
    };
    (ty, index.parse().unwrap_or(0))
}

/// The event name PyTorch's profiler gives an allocator action: blocks are
/// `[memory]` (what PyTorch's tools add up), out-of-memory is
/// `[OutOfMemory]`; segments, which PyTorch's traces do not have, are
/// `[memory segment]`, so that those tools do not count them as blocks.
pub(super) fn memory_event_name(action: MemoryAction) -> &'static str {
    match action {
        MemoryAction::Alloc | MemoryAction::Free => "[memory]",
        MemoryAction::SegmentAlloc | MemoryAction::SegmentFree => "[memory segment]",
        MemoryAction::Oom => "[OutOfMemory]",
    }
}

/// One allocator event, as PyTorch's profiler writes it with
/// `profile_memory=True` (on the device's pid, thread 0), plus Keel's
/// fields.
fn memory_event<W: Write>(
    w: &mut Out<'_, W>,
    first: &mut bool,
    m: &MemoryEvent,
    device: &str,
) -> Result<()> {
    w.event(first, "i", u64::from(m.device) + 1, Some(0))?;
    w.raw(",\"s\":\"t\",\"ts\":");
    w.micros(m.ts_ns);
    w.raw(",\"cat\":\"cpu_instant_event\",\"name\":\"");
    w.raw(memory_event_name(m.action));
    let (ty, index) = c10_device(device);
    w.raw("\",\"args\":{\"Device Type\":");
    w.i64(ty);
    w.raw(",\"Device Id\":");
    w.i64(index);
    w.raw(",\"Addr\":");
    w.u64(m.addr);
    w.raw(",\"Bytes\":");
    let bytes = i64::try_from(m.bytes).unwrap_or(i64::MAX);
    let freed = matches!(m.action, MemoryAction::Free | MemoryAction::SegmentFree);
    w.i64(if freed { -bytes } else { bytes });
    w.raw(",\"Total Allocated\":");
    w.u64(m.allocated);
    w.raw(",\"Total Reserved\":");
    w.u64(m.reserved);
    w.raw(",\"keel_action\":\"");
    w.raw(m.action.name());
    w.raw("\",\"keel_bytes\":");
    w.u64(m.bytes);
    w.raw(",\"keel_segment\":");
    w.u64(m.segment);
    if let Some(stream) = m.stream {
        w.raw(",\"keel_stream\":");
        w.i64(stream);
    }
    if m.small_pool {
        w.raw(",\"keel_small_pool\":true");
    }
    w.raw("}}");
    Ok(())
}

/// [`write_json`] into a `String`.
pub fn to_json_string(trace: &Trace) -> Result<String> {
    let mut bytes = Vec::with_capacity(200 + 110 * trace.spans.len());
    write_json(trace, &mut bytes)?;
    String::from_utf8(bytes)
        .map_err(|e| Error::Format(format!("the JSON writer produced invalid UTF-8: {e}")))
}
