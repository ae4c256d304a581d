//! Assembling: what a session collected, as plain data, in; a [`Trace`]
//! (or a fragment of one) out.
//!
//! Nothing here reads a clock, touches a device or a global: the recorder
//! ([`record`](super::record)) and the device clocks
//! ([`clock`](super::clock)) produce the values defined here, the collector
//! ([`collect`](super::collect)) hands them over in a [`Collected`] batch,
//! and an [`Assembler`] turns each batch into a self-contained fragment
//! (its own device and lane tables). A session assembles once, when it
//! stops; a live server assembles every interval. Either way the same
//! function runs; only where the fragment goes differs (a sink).
//!
//! What one batch cannot place yet is carried to the next: a device span
//! whose device has no calibration yet, an event wait whose ends are not
//! both known. The last batch (`Collected::last`) carries nothing over.
//!
//! Times: host records carry [`Instant`]s, turned into ns from the
//! session's epoch; device spans carry ns offsets from their device's
//! reference event, placed on the host clock with that device's
//! [`ClockBase`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::core::{Device, Stream};
use keel_trace::{
    ALLOCATED_COUNTER, Calibration, Counter, Flow, FlowEnd, FlowKind, InstantEvent, Interner, Lane,
    LaneKind, MemoryAction, MemoryEvent, RESERVED_COUNTER, Span, SpanKind, TRACE_VERSION, Text,
    Trace, TraceDevice,
};

/// What a record carries beyond its kind and name, kept compact until the
/// trace is assembled.
#[derive(Debug, Clone)]
pub(crate) enum Detail {
    None,
    Bytes(u64),
    /// A kernel launch: the grid (workgroups) and the block (invocations
    /// per workgroup, the kernel's `workgroup_size`).
    Launch {
        grid: [u32; 3],
        block: [u32; 3],
        /// The op id of the dispatched operator that made the launch (0:
        /// none); set by the recorder.
        operator: u64,
    },
    Event(u64),
    /// Arguments as they are (an operator's input shapes and dtypes).
    Args(Vec<(Text, Text)>),
    /// A `tracing` span's fields, formatted once when the span was made
    /// and shared by each of its entries.
    #[cfg(feature = "tracing")]
    Fields(std::sync::Arc<FieldText>),
}

/// Named values in one string: a `tracing` span's fields, made with one
/// allocation for the text however many fields there are.
#[cfg(feature = "tracing")]
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldText {
    /// The values, one after the other.
    pub text: String,
    /// Each field's name and where its value ends in `text`.
    pub fields: smallvec::SmallVec<[(&'static str, u32); 4]>,
}

#[cfg(feature = "tracing")]
impl FieldText {
    /// Each field's name and value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let mut start = 0;
        self.fields.iter().map(move |&(name, end)| {
            let end = end as usize;
            let value = self.text.get(start..end).unwrap_or("");
            start = end;
            (name, value)
        })
    }
}

/// One caching-allocator action, with the device's totals after it; the
/// allocator hands it to `record::memory_event` while a session records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRecord {
    /// The device whose allocator acted.
    pub device: Device,
    /// What it did.
    pub action: MemoryAction,
    /// Block address (`Alloc`/`Free`) or segment base
    /// (`SegmentAlloc`/`SegmentFree`); for `Oom`, 0.
    pub addr: u64,
    /// Base of the segment the block is in (= `addr` for segment actions).
    pub segment: u64,
    /// Bytes of the block or segment (for `Oom`: the request).
    pub bytes: u64,
    /// Stream the block belongs to (`None` for segment actions and `Oom`).
    pub stream: Option<Stream>,
    /// From the small-block pool.
    pub small_pool: bool,
    /// Bytes allocated on the device after this action.
    pub allocated: u64,
    /// Bytes reserved on the device after this action.
    pub reserved: u64,
}

/// One entry of a thread's recording buffer, with times of type `T`:
/// counter ticks while recording (`stamp.rs`), host [`Instant`]s once
/// the collector has converted them.
#[derive(Debug)]
pub(super) enum HostRecord<T = Instant> {
    /// A stream operation (`op` > 0) or a user range (`op` 0).
    Span {
        op: u64,
        kind: SpanKind,
        name: Cow<'static, str>,
        start: T,
        end: T,
        stream: Option<Stream>,
        detail: Detail,
    },
    /// A user marker, with its details (a `tracing` event's fields).
    Mark {
        name: String,
        at: T,
        args: Vec<(String, String)>,
    },
}

impl<T> HostRecord<T> {
    /// The same record with its times converted by `f`.
    pub(super) fn map_time<U>(self, f: impl Fn(T) -> U) -> HostRecord<U> {
        match self {
            HostRecord::Span {
                op,
                kind,
                name,
                start,
                end,
                stream,
                detail,
            } => HostRecord::Span {
                op,
                kind,
                name,
                start: f(start),
                end: f(end),
                stream,
                detail,
            },
            HostRecord::Mark { name, at, args } => HostRecord::Mark {
                name,
                at: f(at),
                args,
            },
        }
    }
}

/// The records one host thread made since the previous batch.
#[derive(Debug)]
pub(super) struct HostThread<T = Instant> {
    /// Process-unique thread number (the lane's identity).
    pub thread: u64,
    /// The lane's name.
    pub name: String,
    /// Drained by the assembler, which leaves the capacity for reuse.
    pub records: Vec<HostRecord<T>>,
}

/// A device span, as offsets (ns) from its device's reference event.
#[derive(Debug)]
pub(super) struct DeviceSpan {
    pub op: u64,
    pub stream: Stream,
    /// The thread that ran it, for a stream whose work runs inline on the
    /// submitting threads (its lane is then the thread's); else 0.
    pub thread: u64,
    pub kind: SpanKind,
    pub name: Cow<'static, str>,
    pub start_off: i64,
    pub end_off: i64,
    pub detail: Detail,
}

/// How a device clock sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) enum ClockMethod {
    /// A timed event recorded and polled: its timestamp lies between the
    /// record call and the first poll that saw it complete.
    #[default]
    PairedSampling,
    /// The device clock read directly between two host instants (Vulkan's
    /// calibrated timestamps).
    Calibrated,
}

/// One calibration sample: where a device's reference event lies on the
/// host clock, as measured at device offset `at_off`. A device calibrated
/// several times (long recordings) has its spans placed by interpolating
/// between its samples, which follows the drift between the two clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct ClockBase {
    /// Host time (ns from the epoch) of the reference event.
    pub reference_ns: i64,
    /// Half the width of the host interval the sample was taken in (plus
    /// the driver's stated deviation, for calibrated timestamps).
    pub error_bound_ns: u64,
    /// The device offset (ns from the reference event) of the sample.
    pub at_off: i64,
    pub method: ClockMethod,
}

/// Host time (ns from the epoch) of device offset `off`, from a device's
/// samples sorted by `at_off` (at least one): between two samples the
/// reference's host time is interpolated linearly, outside them it follows
/// the nearest pair's slope; with one sample it is constant.
pub(super) fn place(samples: &[ClockBase], off: i64) -> i64 {
    let [first, .., last] = samples else {
        return samples.first().map_or(off, |b| b.reference_ns + off);
    };
    let i = samples
        .partition_point(|b| b.at_off <= off)
        .clamp(1, samples.len() - 1);
    let (a, b) = (&samples[i - 1], &samples[i]);
    let width = (b.at_off - a.at_off) as f64;
    if width <= 0.0 {
        return last.reference_ns.max(first.reference_ns) + off;
    }
    let slope = (b.reference_ns - a.reference_ns) as f64 / width;
    let reference = a.reference_ns as f64 + slope * (off - a.at_off) as f64;
    off + reference.round() as i64
}

/// A device's entry in the trace's device table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeviceInfo {
    pub name: String,
    pub properties: Vec<(String, String)>,
}

/// Everything collected since the previous batch.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// Host records, per thread.
    pub host: Vec<HostThread>,
    /// Device spans whose events completed.
    pub device_spans: Vec<DeviceSpan>,
    /// Devices seen for the first time: how the trace names them.
    pub devices: Vec<(Device, DeviceInfo)>,
    /// Devices calibrated for the first time.
    pub bases: Vec<(Device, ClockBase)>,
    /// (record op, wait op): a stream waited for an event an op recorded.
    pub waits: Vec<(u64, u64)>,
    /// Allocator events and when they happened.
    pub memory: Vec<(Instant, MemoryRecord)>,
    /// Records lost since the previous batch.
    pub dropped: u64,
    /// The session's last batch: nothing is carried over.
    pub last: bool,
}

/// A stream's lane: the stream, and for work run inline on the submitting
/// threads, the thread (else 0; see [`LaneKind::Stream`]).
type StreamLane = (Stream, u64);

/// Assembles the batches of one session; keeps what links them.
#[derive(Debug)]
pub(super) struct Assembler {
    epoch: Instant,
    devices: HashMap<Device, DeviceInfo>,
    bases: HashMap<Device, Vec<ClockBase>>,
    /// Device spans waiting for their device's calibration.
    held_spans: Vec<DeviceSpan>,
    /// Waits whose ends are not both placed yet.
    /// (record op, wait op, the newest time when first held).
    held_waits: Vec<(u64, u64, u64)>,
    /// op -> (host lane, its name, start ns) of its host span, while a
    /// later span or flow may still refer to it (see [`Assembler::prune`]).
    host_of_op: FxHashMap<u64, (LaneKind, Text, u64)>,
    /// op -> (stream lane, start ns, end ns) of the device span of an
    /// event record or wait (what event-wait flows start and end at).
    device_of_op: FxHashMap<u64, (StreamLane, u64, u64)>,
    /// The latest time placed so far (ns from the epoch).
    newest_ns: u64,
    /// `host_of_op` and `device_of_op` entries that trigger the next
    /// pruning pass.
    prune_at: usize,
    /// Per stream lane: the end of its last placed device span.
    last_end: FxHashMap<StreamLane, u64>,
    /// Host thread number -> its name (what a stream's lane for the
    /// thread's inline work is named after).
    thread_names: FxHashMap<u64, Text>,
    /// Texts repeated across spans, made once.
    texts: Texts,
    /// Per device: the last (allocated, reserved) put on its curves.
    memory_last: HashMap<Device, (u64, u64)>,
    next_flow: u64,
}

/// How long before the newest time placed a live recording keeps what it
/// knows of an operation, for flows that arrive later (see
/// `Assembler::prune`).
const RETAIN_NS: u64 = 60_000_000_000;

/// Entries of that bookkeeping below which it is never pruned.
const PRUNE_MIN: usize = 1 << 16;

/// Device spans held for a device not calibrated yet, at most; past that
/// (a device whose calibration keeps failing) they are counted as dropped.
const HELD_MAX: usize = 1 << 18;

/// A counter's points: (ns from the epoch, value).
type Curve = Vec<(u64, i64)>;

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn ns_since(epoch: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(epoch).as_nanos() as u64
}

/// Texts the assembler repeats across spans (argument names and values,
/// span names), each made once: a span's arguments cost a reference count
/// each, not an allocation and a `format!`. Names and values come from the
/// program itself, not from a file, so a fast hash does.
#[derive(Debug)]
struct Texts {
    /// Span names and formatted values, up to [`Texts::CAP`] of them (past
    /// that, made anew each time).
    known: Interner<FxBuildHasher>,
    /// Grid and block sizes, formatted.
    dims: FxHashMap<[u32; 3], Text>,
    /// Streams, formatted.
    streams: FxHashMap<Stream, Text>,
    /// Scratch for formatting a value before it is looked up.
    buf: String,
    grid: Text,
    block: Text,
    bytes: Text,
    event: Text,
    stream: Text,
}

impl Texts {
    /// The most texts of each kind remembered.
    const CAP: usize = 1 << 16;

    fn new() -> Self {
        Texts {
            known: Interner::with_hasher(Self::CAP, FxBuildHasher),
            dims: FxHashMap::default(),
            streams: FxHashMap::default(),
            buf: String::new(),
            grid: Text::from("grid"),
            block: Text::from("block"),
            bytes: Text::from("bytes"),
            event: Text::from("event"),
            stream: Text::from("stream"),
        }
    }

    /// `text`, shared with every earlier equal one.
    fn name(&mut self, text: &str) -> Text {
        self.known.intern(text)
    }

    /// `value` formatted, shared with every earlier equal one.
    fn format(&mut self, value: std::fmt::Arguments<'_>) -> Text {
        use std::fmt::Write;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // Writing into a `String` cannot fail.
        let _ = buf.write_fmt(value);
        let t = self.name(&buf);
        self.buf = buf;
        t
    }

    /// Grid or block sizes as `XxYxZ`.
    fn dims(&mut self, d: [u32; 3]) -> Text {
        remembered(&mut self.dims, d, || format!("{}x{}x{}", d[0], d[1], d[2]))
    }

    /// A host span's `stream` argument.
    fn stream_arg(&mut self, st: Stream) -> (Text, Text) {
        let value = remembered(&mut self.streams, st, || st.to_string());
        (self.stream.clone(), value)
    }

    /// The (name, value) arguments of a span's detail.
    fn args(&mut self, detail: &Detail) -> Vec<(Text, Text)> {
        match detail {
            Detail::None => Vec::new(),
            Detail::Bytes(b) => vec![(self.bytes.clone(), self.format(format_args!("{b}")))],
            Detail::Args(args) => args.clone(),
            #[cfg(feature = "tracing")]
            Detail::Fields(f) => f
                .iter()
                .map(|(name, value)| (self.name(name), Text::from(value)))
                .collect(),
            Detail::Launch {
                grid: g, block: b, ..
            } => vec![
                (self.grid.clone(), self.dims(*g)),
                (self.block.clone(), self.dims(*b)),
            ],
            // Event ids are mostly distinct: not remembered.
            Detail::Event(e) => vec![(self.event.clone(), Text::from(e.to_string()))],
        }
    }
}

/// The text made of `key` (by `make`), made once: up to [`Texts::CAP`]
/// keys are remembered.
fn remembered<K: std::hash::Hash + Eq>(
    map: &mut FxHashMap<K, Text>,
    key: K,
    make: impl FnOnce() -> String,
) -> Text {
    if let Some(t) = map.get(&key) {
        return t.clone();
    }
    let t = Text::from(make());
    if map.len() < Texts::CAP {
        map.insert(key, t.clone());
    }
    t
}

impl Assembler {
    /// An assembler for a session whose host times count from `epoch`.
    pub(super) fn new(epoch: Instant) -> Self {
        Assembler {
            epoch,
            devices: HashMap::new(),
            bases: HashMap::new(),
            held_spans: Vec::new(),
            held_waits: Vec::new(),
            host_of_op: FxHashMap::default(),
            device_of_op: FxHashMap::default(),
            newest_ns: 0,
            prune_at: PRUNE_MIN,
            last_end: FxHashMap::default(),
            thread_names: FxHashMap::default(),
            texts: Texts::new(),
            memory_last: HashMap::new(),
            next_flow: 1,
        }
    }

    /// Turns `batch` into a fragment. Host record buffers are drained, not
    /// dropped, so their capacity can be reused.
    pub(super) fn assemble(&mut self, batch: &mut Collected) -> Trace {
        let epoch = self.epoch;
        self.devices.extend(batch.devices.drain(..));
        for (d, base) in batch.bases.drain(..) {
            let samples = self.bases.entry(d).or_default();
            samples.push(base);
            samples.sort_by_key(|b| b.at_off);
        }
        let mut b = Builder::new(&self.devices);

        let mut calibrated: Vec<(&Device, &Vec<ClockBase>)> = self.bases.iter().collect();
        calibrated.sort();
        for (d, samples) in calibrated {
            let device = b.device(*d);
            let method = match samples.last().map(|s| s.method).unwrap_or_default() {
                ClockMethod::Calibrated => "calibrated timestamps",
                ClockMethod::PairedSampling if d.is_cpu() => "host clock, paired sampling",
                ClockMethod::PairedSampling => "paired sampling",
            };
            let method = if samples.len() > 1 {
                format!("{method}, {} samples interpolated", samples.len())
            } else {
                method.to_owned()
            };
            b.trace.calibrations.push(Calibration {
                device,
                method,
                error_bound_ns: samples.iter().map(|s| s.error_bound_ns).max().unwrap_or(0),
            });
        }

        // Host spans and marks from every thread's buffer.
        for t in &mut batch.host {
            if t.records.is_empty() {
                continue;
            }
            let kind = LaneKind::Host { thread: t.thread };
            let lane = b.lane(kind.clone(), || t.name.clone());
            let lane_name = self.texts.name(&t.name);
            self.thread_names
                .entry(t.thread)
                .or_insert_with(|| lane_name.clone());
            for r in t.records.drain(..) {
                match r {
                    HostRecord::Span {
                        op,
                        kind: span_kind,
                        name,
                        start,
                        end,
                        stream,
                        detail,
                    } => {
                        let s = ns_since(epoch, start);
                        let e = ns_since(epoch, end).max(s);
                        self.newest_ns = self.newest_ns.max(e);
                        let mut args = self.texts.args(&detail);
                        if let Some(st) = stream {
                            args.push(self.texts.stream_arg(st));
                        }
                        if op != 0 {
                            self.host_of_op
                                .insert(op, (kind.clone(), lane_name.clone(), s));
                        }
                        b.trace.spans.push(Span {
                            lane,
                            name: self.texts.name(&name),
                            kind: span_kind,
                            start_ns: s,
                            dur_ns: e - s,
                            op,
                            args,
                        });
                    }
                    HostRecord::Mark { name, at, args } => b.trace.instants.push(InstantEvent {
                        lane,
                        name,
                        ts_ns: ns_since(epoch, at),
                        args,
                    }),
                }
            }
        }

        // Device spans on their stream lanes, and launch flows.
        let mut spans = std::mem::take(&mut self.held_spans);
        spans.append(&mut batch.device_spans);
        spans.sort_by_key(|s| (s.stream, s.thread, s.start_off, s.op));
        // Device spans that cannot be placed: counted as dropped, never
        // silently lost.
        let mut unplaced = 0u64;
        for s in spans {
            let Some(samples) = self.bases.get(&s.stream.device()).filter(|v| !v.is_empty()) else {
                // Placed once the device is calibrated; a device that never
                // is (its calibration fails) holds at most `HELD_MAX`.
                if !batch.last && self.held_spans.len() < HELD_MAX {
                    self.held_spans.push(s);
                } else {
                    unplaced += 1;
                }
                continue;
            };
            let at = (s.stream, s.thread);
            let lane = self.stream_lane(&mut b, at);
            let mut start = place(samples, s.start_off).max(0) as u64;
            // A stream (or a thread's inline work on it) runs in order:
            // clamp rounding so spans never overlap. Annotations (scopes
            // on a program's own work) nest around the work instead.
            let annotation = s.kind == SpanKind::Annotation;
            if let Some(&prev) = self.last_end.get(&at)
                && !annotation
            {
                start = start.max(prev);
            }
            let end = (place(samples, s.end_off).max(0) as u64).max(start);
            self.newest_ns = self.newest_ns.max(end);
            if !annotation {
                self.last_end.insert(at, end);
            }
            // Only event records and waits are looked up again (by the
            // flows between them).
            let waited = matches!(s.kind, SpanKind::EventRecord | SpanKind::Wait);
            if waited {
                self.device_of_op.insert(s.op, (at, start, end));
            }
            b.trace.spans.push(Span {
                lane,
                name: self.texts.name(&s.name),
                kind: s.kind,
                start_ns: start,
                dur_ns: end - start,
                op: s.op,
                args: self.texts.args(&s.detail),
            });
            // The launch flow is the last use of the host span of an
            // operation that is not an event record or wait.
            let host = if waited {
                self.host_of_op.get(&s.op).cloned()
            } else {
                self.host_of_op.remove(&s.op)
            };
            if let Some((host_kind, host_name, host_start)) = host {
                let host_lane = b.lane(host_kind, || host_name.to_string());
                let id = self.next_flow;
                self.next_flow += 1;
                b.trace.flows.push(Flow {
                    id,
                    kind: FlowKind::Launch,
                    from: FlowEnd {
                        lane: host_lane,
                        ts_ns: host_start,
                    },
                    to: FlowEnd { lane, ts_ns: start },
                });
            }
            // A kernel a dispatched operator launched: a flow from the
            // operator's span too.
            if let Detail::Launch { operator, .. } = s.detail
                && operator != 0
                && let Some((host_kind, host_name, host_start)) =
                    self.host_of_op.get(&operator).cloned()
            {
                let host_lane = b.lane(host_kind, || host_name.to_string());
                let id = self.next_flow;
                self.next_flow += 1;
                b.trace.flows.push(Flow {
                    id,
                    kind: FlowKind::Launch,
                    from: FlowEnd {
                        lane: host_lane,
                        ts_ns: host_start,
                    },
                    to: FlowEnd { lane, ts_ns: start },
                });
            }
        }

        // Event record -> wait flows, once both ends are placed (device spans
        // where there are, host spans otherwise).
        let mut waits = std::mem::take(&mut self.held_waits);
        let now = self.newest_ns;
        waits.extend(
            batch
                .waits
                .drain(..)
                .map(|(record, wait)| (record, wait, now)),
        );
        for (record, wait, since) in waits {
            let from = self.end_of(&mut b, record, true);
            let to = self.end_of(&mut b, wait, false);
            match (from, to) {
                (Some(from), Some(to)) => {
                    let id = self.next_flow;
                    self.next_flow += 1;
                    b.trace.flows.push(Flow {
                        id,
                        kind: FlowKind::EventWait,
                        from,
                        to,
                    });
                }
                // Held until both ends are placed, for as long as the
                // bookkeeping keeps operations (`prune`).
                _ if !batch.last && now.saturating_sub(since) <= RETAIN_NS => {
                    self.held_waits.push((record, wait, since));
                }
                _ => {}
            }
        }

        // Allocator events, and the allocated and reserved curves per
        // device (a point where a total changed).
        let mut memory = std::mem::take(&mut batch.memory);
        memory.sort_by_key(|m| m.0);
        let mut curves: HashMap<Device, [Curve; 2]> = HashMap::new();
        b.trace.memory.reserve(memory.len());
        for (at, r) in memory {
            let ts_ns = ns_since(epoch, at);
            let device = b.device(r.device);
            b.trace.memory.push(MemoryEvent {
                ts_ns,
                device,
                action: r.action,
                addr: r.addr,
                segment: r.segment,
                bytes: r.bytes,
                stream: r.stream.map(|s| s.id()),
                small_pool: r.small_pool,
                allocated: r.allocated,
                reserved: r.reserved,
            });
            let last = self.memory_last.get(&r.device).copied();
            let [allocated, reserved] = curves.entry(r.device).or_default();
            if last.is_none_or(|l| l.0 != r.allocated) {
                allocated.push((ts_ns, clamp_i64(r.allocated)));
            }
            if last.is_none_or(|l| l.1 != r.reserved) {
                reserved.push((ts_ns, clamp_i64(r.reserved)));
            }
            self.memory_last.insert(r.device, (r.allocated, r.reserved));
        }
        let mut curves: Vec<(Device, [Curve; 2])> = curves.into_iter().collect();
        curves.sort_by_key(|c| c.0);
        for (d, [allocated, reserved]) in curves {
            let device = b.device(d);
            for (name, points) in [(ALLOCATED_COUNTER, allocated), (RESERVED_COUNTER, reserved)] {
                if !points.is_empty() {
                    b.trace.counters.push(Counter {
                        device,
                        name: name.to_owned(),
                        points,
                    });
                }
            }
        }

        b.trace.dropped = batch.dropped + unplaced;
        let trace = b.trace;
        self.prune();
        trace
    }

    /// Bounds what a long (live) recording keeps about past operations:
    /// once `host_of_op` and `device_of_op` hold [`PRUNE_MIN`] entries and
    /// twice as many as after the previous pass, those older than
    /// [`RETAIN_NS`] before the newest time placed are dropped. A flow to
    /// an operation that old is then not drawn (a device span placed that
    /// long after its launch, an event waited for that long after its
    /// record). Each pass costs about what adding the entries since the
    /// last one did.
    fn prune(&mut self) {
        let len = self.host_of_op.len() + self.device_of_op.len();
        if len < self.prune_at {
            return;
        }
        let horizon = self.newest_ns.saturating_sub(RETAIN_NS);
        self.host_of_op.retain(|_, (_, _, start)| *start >= horizon);
        self.device_of_op.retain(|_, (_, _, end)| *end >= horizon);
        let kept = self.host_of_op.len() + self.device_of_op.len();
        self.prune_at = (2 * kept).max(PRUNE_MIN);
    }

    /// The lane of stream `at.0`, or of thread `at.1`'s inline work on it:
    /// `stream 0`, `stream 0 · main`.
    fn stream_lane(&self, b: &mut Builder<'_>, (stream, thread): StreamLane) -> u32 {
        let device = b.device(stream.device());
        let kind = LaneKind::Stream {
            device,
            stream: stream.id(),
            thread,
        };
        b.lane(kind, || match (thread, self.thread_names.get(&thread)) {
            (0, _) => format!("stream {}", stream.id()),
            (_, Some(name)) => format!("stream {} · {name}", stream.id()),
            (_, None) => format!("stream {} · thread {thread}", stream.id()),
        })
    }

    /// Where a flow attaches to operation `op`: its device span (start, or
    /// end when `at_end`), else its host span's start.
    fn end_of(&self, b: &mut Builder<'_>, op: u64, at_end: bool) -> Option<FlowEnd> {
        if let Some(&(at, s, e)) = self.device_of_op.get(&op) {
            let lane = self.stream_lane(b, at);
            return Some(FlowEnd {
                lane,
                ts_ns: if at_end { e } else { s },
            });
        }
        let (kind, name, s) = self.host_of_op.get(&op).cloned()?;
        let lane = b.lane(kind, || name.to_string());
        Some(FlowEnd { lane, ts_ns: s })
    }
}

/// Builds one fragment's device and lane tables as they are referenced.
struct Builder<'a> {
    trace: Trace,
    infos: &'a HashMap<Device, DeviceInfo>,
    devices: HashMap<Device, u32>,
    lanes: FxHashMap<LaneKind, u32>,
}

impl<'a> Builder<'a> {
    fn new(infos: &'a HashMap<Device, DeviceInfo>) -> Self {
        Builder {
            trace: Trace {
                version: TRACE_VERSION,
                ..Trace::default()
            },
            infos,
            devices: HashMap::new(),
            lanes: FxHashMap::default(),
        }
    }

    fn device(&mut self, d: Device) -> u32 {
        if let Some(&i) = self.devices.get(&d) {
            return i;
        }
        let i = self.trace.devices.len() as u32;
        let (name, properties) = match self.infos.get(&d) {
            Some(info) => (info.name.clone(), info.properties.clone()),
            None => (d.to_string(), Vec::new()),
        };
        self.trace.devices.push(TraceDevice {
            device: d.to_string(),
            name,
            properties,
        });
        self.devices.insert(d, i);
        i
    }

    /// The lane of `kind` in this fragment; `name` names it when it is
    /// new.
    fn lane(&mut self, kind: LaneKind, name: impl FnOnce() -> String) -> u32 {
        if let Some(&i) = self.lanes.get(&kind) {
            return i;
        }
        let i = self.trace.lanes.len() as u32;
        self.trace.lanes.push(Lane {
            kind: kind.clone(),
            name: name(),
            group: String::new(),
        });
        self.lanes.insert(kind, i);
        i
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::DeviceType;

    fn at(epoch: Instant, ns: u64) -> Instant {
        epoch + Duration::from_nanos(ns)
    }

    fn vulkan() -> Device {
        Device::new(DeviceType::Vulkan, 0).expect("vulkan:0")
    }

    fn info(name: &str) -> DeviceInfo {
        DeviceInfo {
            name: name.to_owned(),
            properties: vec![("driver".to_owned(), "test".to_owned())],
        }
    }

    /// A block event on stream 2 of `d` with the totals after it.
    fn block(d: Device, action: MemoryAction, allocated: u64, bytes: u64) -> MemoryRecord {
        MemoryRecord {
            device: d,
            action,
            addr: 0x1000,
            segment: 0x1000,
            bytes,
            stream: Some(Stream::new(d, 2)),
            small_pool: true,
            allocated,
            reserved: 4096,
        }
    }

    fn host_span(
        epoch: Instant,
        op: u64,
        kind: SpanKind,
        name: &'static str,
        s: u64,
        e: u64,
    ) -> HostRecord {
        HostRecord::Span {
            op,
            kind,
            name: Cow::Borrowed(name),
            start: at(epoch, s),
            end: at(epoch, e),
            stream: None,
            detail: Detail::None,
        }
    }

    /// A calibration of `d` whose reference event is at the host epoch,
    /// exactly.
    fn exact_clock(d: Device) -> (Device, ClockBase) {
        let base = ClockBase {
            reference_ns: 0,
            error_bound_ns: 0,
            ..ClockBase::default()
        };
        (d, base)
    }

    fn device_span(stream: Stream, op: u64, kind: SpanKind, s: i64, e: i64) -> DeviceSpan {
        DeviceSpan {
            op,
            stream,
            thread: 0,
            kind,
            name: Cow::Borrowed("k"),
            start_off: s,
            end_off: e,
            detail: Detail::Launch {
                grid: [4, 1, 1],
                block: [64, 1, 1],
                operator: 0,
            },
        }
    }

    #[test]
    fn a_launch_becomes_a_host_span_a_device_span_and_a_flow() {
        let epoch = Instant::now();
        let d = vulkan();
        let stream = Stream::new(d, 3);
        let mut a = Assembler::new(epoch);
        let mut batch = Collected {
            host: vec![HostThread {
                thread: 7,
                name: "main".to_owned(),
                records: vec![
                    host_span(epoch, 1, SpanKind::Kernel, "k", 100, 200),
                    HostRecord::Mark {
                        name: "here".to_owned(),
                        at: at(epoch, 250),
                        args: vec![("k".to_owned(), "v".to_owned())],
                    },
                ],
            }],
            device_spans: vec![device_span(stream, 1, SpanKind::Kernel, 50, 80)],
            devices: vec![(d, info("llvmpipe"))],
            bases: vec![(
                d,
                ClockBase {
                    reference_ns: 1000,
                    error_bound_ns: 5,
                    ..ClockBase::default()
                },
            )],
            memory: vec![
                (at(epoch, 10), block(d, MemoryAction::Alloc, 64, 64)),
                (at(epoch, 300), block(d, MemoryAction::Free, 0, 64)),
            ],
            dropped: 2,
            last: true,
            ..Collected::default()
        };
        let t = a.assemble(&mut batch);
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.version, TRACE_VERSION);
        assert_eq!(t.devices.len(), 1);
        assert_eq!(t.devices[0].device, "vulkan:0");
        assert_eq!(t.devices[0].name, "llvmpipe");
        assert_eq!(t.calibrations[0].error_bound_ns, 5);
        assert_eq!(t.calibrations[0].method, "paired sampling");
        assert_eq!(
            t.lanes.iter().map(|l| l.kind.clone()).collect::<Vec<_>>(),
            [
                LaneKind::Host { thread: 7 },
                LaneKind::Stream {
                    device: 0,
                    stream: 3,
                    thread: 0
                }
            ]
        );
        let device = t.spans.iter().find(|s| s.lane == 1).expect("device span");
        assert_eq!((device.start_ns, device.dur_ns), (1050, 30));
        assert_eq!(
            device.args,
            [
                ("grid".into(), "4x1x1".into()),
                ("block".into(), "64x1x1".into())
            ]
        );
        assert_eq!(t.flows.len(), 1);
        assert_eq!(t.flows[0].kind, FlowKind::Launch);
        assert_eq!((t.flows[0].from.ts_ns, t.flows[0].to.ts_ns), (100, 1050));
        assert_eq!(t.instants[0].ts_ns, 250);
        assert_eq!(t.instants[0].args, [("k".to_owned(), "v".to_owned())]);
        assert_eq!(t.counters[0].name, ALLOCATED_COUNTER);
        assert_eq!(t.counters[0].points, [(10, 64), (300, 0)]);
        // Reserved did not change: one point.
        assert_eq!(t.counters[1].name, RESERVED_COUNTER);
        assert_eq!(t.counters[1].points, [(10, 4096)]);
        assert_eq!(t.memory.len(), 2);
        assert_eq!(
            (t.memory[0].ts_ns, t.memory[0].device, t.memory[0].stream),
            (10, 0, Some(2))
        );
        assert_eq!(t.memory[1].action, MemoryAction::Free);
        assert_eq!(t.dropped, 2);
        // The buffer was drained, its capacity kept for reuse.
        assert!(batch.host[0].records.is_empty());
        assert!(batch.host[0].records.capacity() >= 2);
    }

    #[test]
    fn what_cannot_be_placed_waits_for_a_later_batch() {
        let epoch = Instant::now();
        let d = vulkan();
        let s1 = Stream::new(d, 1);
        let s2 = Stream::new(d, 2);
        let mut a = Assembler::new(epoch);
        // Op 1 records an event on s1, op 2 makes s2 wait for it; the
        // device is not calibrated yet.
        let mut first = Collected {
            device_spans: vec![
                device_span(s1, 1, SpanKind::EventRecord, 10, 20),
                device_span(s2, 2, SpanKind::Wait, 30, 40),
            ],
            devices: vec![(d, info("gpu"))],
            waits: vec![(1, 2)],
            ..Collected::default()
        };
        let t = a.assemble(&mut first);
        assert!(t.spans.is_empty() && t.flows.is_empty() && t.devices.is_empty());
        let mut second = Collected {
            bases: vec![(
                d,
                ClockBase {
                    reference_ns: 100,
                    error_bound_ns: 1,
                    ..ClockBase::default()
                },
            )],
            memory: vec![(at(epoch, 5), block(d, MemoryAction::Alloc, 8, 8))],
            ..Collected::default()
        };
        let t = a.assemble(&mut second);
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.spans.len(), 2);
        let wait = t.flows.iter().find(|f| f.kind == FlowKind::EventWait);
        let wait = wait.expect("the wait flow");
        // From the end of the record to the start of the wait.
        assert_eq!((wait.from.ts_ns, wait.to.ts_ns), (120, 130));
        // Calibrations and totals are carried from batch to batch.
        let mut third = Collected {
            memory: vec![
                (at(epoch, 50), block(d, MemoryAction::Alloc, 16, 8)),
                (at(epoch, 60), block(d, MemoryAction::Alloc, 24, 8)),
            ],
            ..Collected::default()
        };
        let t = a.assemble(&mut third);
        assert_eq!(t.calibrations.len(), 1);
        // Only what changed since the previous batch makes a point.
        assert_eq!(t.counters.len(), 1);
        assert_eq!(t.counters[0].points, [(50, 16), (60, 24)]);
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn the_last_batch_drops_what_it_cannot_place() {
        let epoch = Instant::now();
        let stream = Stream::new(vulkan(), 1);
        let mut a = Assembler::new(epoch);
        let mut batch = Collected {
            device_spans: vec![device_span(stream, 1, SpanKind::Kernel, 0, 10)],
            waits: vec![(5, 6)],
            last: true,
            ..Collected::default()
        };
        let t = a.assemble(&mut batch);
        assert!(t.spans.is_empty() && t.flows.is_empty());
        assert!(a.held_spans.is_empty() && a.held_waits.is_empty());
    }

    #[test]
    fn device_spans_on_one_stream_never_overlap() {
        let epoch = Instant::now();
        let d = vulkan();
        let stream = Stream::new(d, 1);
        let mut a = Assembler::new(epoch);
        let mut batch = Collected {
            device_spans: vec![
                device_span(stream, 2, SpanKind::Kernel, 95, 200),
                device_span(stream, 1, SpanKind::Kernel, 0, 100),
            ],
            bases: vec![exact_clock(d)],
            last: true,
            ..Collected::default()
        };
        let t = a.assemble(&mut batch);
        let starts: Vec<(u64, u64)> = t.spans.iter().map(|s| (s.start_ns, s.end_ns())).collect();
        assert_eq!(starts, [(0, 100), (100, 200)]);
        assert_eq!(t.check(), Ok(()));
    }

    /// Work run inline by the threads that submit it (the CPU's default
    /// stream) overlaps in time across threads: each thread's spans go on
    /// a lane of their own, named after the thread, at the times they
    /// ran (none is shifted), and an event wait's flow reaches the lane of
    /// the thread whose record it waited for. Each lane still runs in
    /// order.
    #[test]
    fn inline_work_of_two_threads_gets_a_lane_per_thread() {
        let epoch = Instant::now();
        let d = Device::cpu();
        let stream = Stream::new(d, 0);
        let mut a = Assembler::new(epoch);
        let inline = |thread: u64, op: u64, kind: SpanKind, s: i64, e: i64| DeviceSpan {
            thread,
            ..device_span(stream, op, kind, s, e)
        };
        let thread = |thread: u64, name: &str, records| HostThread {
            thread,
            name: name.to_owned(),
            records,
        };
        let mut batch = Collected {
            host: vec![
                thread(
                    1,
                    "main",
                    vec![
                        host_span(epoch, 1, SpanKind::Kernel, "k", 0, 120),
                        host_span(epoch, 3, SpanKind::EventRecord, "record", 130, 140),
                    ],
                ),
                thread(
                    2,
                    "worker",
                    vec![
                        host_span(epoch, 2, SpanKind::Kernel, "k", 40, 210),
                        host_span(epoch, 5, SpanKind::Wait, "wait", 215, 220),
                    ],
                ),
            ],
            device_spans: vec![
                inline(1, 1, SpanKind::Kernel, 10, 110),
                inline(2, 2, SpanKind::Kernel, 50, 200),
                inline(1, 3, SpanKind::EventRecord, 132, 138),
                // A second kernel of `main` rounded 1 ns into its record.
                inline(1, 4, SpanKind::Kernel, 137, 150),
                inline(2, 5, SpanKind::Wait, 216, 218),
            ],
            waits: vec![(3, 5)],
            bases: vec![exact_clock(d)],
            last: true,
            ..Collected::default()
        };
        let t = a.assemble(&mut batch);
        assert_eq!(t.check(), Ok(()));
        let lane = |thread: u64| {
            t.lanes
                .iter()
                .position(|l| {
                    l.kind
                        == LaneKind::Stream {
                            device: 0,
                            stream: 0,
                            thread,
                        }
                })
                .expect("a lane for the thread") as u32
        };
        let (main, worker) = (lane(1), lane(2));
        assert_eq!(t.lanes[main as usize].name, "stream 0 · main");
        assert_eq!(t.lanes[worker as usize].name, "stream 0 · worker");
        let on = |lane: u32| -> Vec<(u64, u64)> {
            t.spans
                .iter()
                .filter(|s| s.lane == lane)
                .map(|s| (s.start_ns, s.end_ns()))
                .collect()
        };
        // Overlapping across threads, in order within each.
        assert_eq!(on(main), [(10, 110), (132, 138), (138, 150)]);
        assert_eq!(on(worker), [(50, 200), (216, 218)]);
        let wait = t
            .flows
            .iter()
            .find(|f| f.kind == FlowKind::EventWait)
            .expect("the wait's flow");
        assert_eq!((wait.from.lane, wait.from.ts_ns), (main, 138));
        assert_eq!((wait.to.lane, wait.to.ts_ns), (worker, 216));
    }

    /// A device clock running 1% fast (an injected skew): calibrated at
    /// offsets 0 and 10 ms, its spans are placed on the host clock by
    /// interpolating between the two samples, and past the last sample
    /// along the same slope.
    #[test]
    fn drift_between_samples_is_interpolated() {
        let epoch = Instant::now();
        let d = vulkan();
        let stream = Stream::new(d, 1);
        let mut a = Assembler::new(epoch);
        // Device offset x is host time 1_000 + x / 1.01; written as the
        // reference's host time at each sample: host - offset.
        let host = |off: i64| 1_000 + (off as f64 / 1.01).round() as i64;
        let sample = |off: i64| ClockBase {
            reference_ns: host(off) - off,
            error_bound_ns: 3,
            at_off: off,
            method: ClockMethod::Calibrated,
        };
        let mut first = Collected {
            bases: vec![(d, sample(0))],
            devices: vec![(d, info("gpu"))],
            ..Collected::default()
        };
        a.assemble(&mut first);
        let mut second = Collected {
            device_spans: vec![
                device_span(stream, 1, SpanKind::Kernel, 5_050_000, 5_151_000),
                device_span(stream, 2, SpanKind::Kernel, 20_200_000, 20_301_000),
            ],
            bases: vec![(d, sample(10_100_000))],
            last: true,
            ..Collected::default()
        };
        let t = a.assemble(&mut second);
        assert_eq!(t.check(), Ok(()));
        let placed: Vec<(u64, u64)> = t.spans.iter().map(|s| (s.start_ns, s.end_ns())).collect();
        // Without the second sample the spans would sit 1% late (at
        // 5_051_000 and 20_201_000).
        assert_eq!(placed, [(5_001_000, 5_101_000), (20_001_000, 20_101_000)]);
        assert_eq!(
            t.calibrations[0].method,
            "calibrated timestamps, 2 samples interpolated"
        );
        assert_eq!(t.calibrations[0].error_bound_ns, 3);
    }

    /// A live recording of many minutes keeps bounded bookkeeping: a
    /// launch's host span is forgotten once its device span and flow are
    /// placed, and what is left (host-only operations, event records and
    /// waits) is pruned past `RETAIN_NS`; flows within it are still drawn,
    /// and a wait whose record was pruned is not held forever.
    #[test]
    fn a_long_live_recording_keeps_bounded_bookkeeping() {
        let epoch = Instant::now();
        let d = vulkan();
        let stream = Stream::new(d, 3);
        let mut a = Assembler::new(epoch);
        const PER_BATCH: u64 = 5_000;
        const STEP_NS: u64 = 10_000_000_000; // 10 s of recording per batch
        let batches = 20u64;
        let mut op = 0u64;
        let mut flows = 0;
        let mut merged = Trace::default();
        for k in 0..batches {
            let t0 = k * STEP_NS;
            let mut records = Vec::new();
            let mut device_spans = Vec::new();
            let mut waits = Vec::new();
            for i in 0..PER_BATCH {
                let t = t0 + i * 1_000;
                op += 1;
                records.push(host_span(epoch, op, SpanKind::Kernel, "k", t, t + 10));
                device_spans.push(device_span(
                    stream,
                    op,
                    SpanKind::Kernel,
                    t as i64,
                    t as i64 + 5,
                ));
                op += 1;
                records.push(host_span(epoch, op, SpanKind::Sync, "sync", t + 20, t + 30));
            }
            // An event recorded in this batch and waited for in the next
            // (10 s later: drawn), and one recorded in the first batch and
            // waited for in the last (190 s later: past the horizon).
            op += 1;
            let record = op;
            records.push(host_span(
                epoch,
                record,
                SpanKind::EventRecord,
                "event record",
                t0 + 900,
                t0 + 910,
            ));
            op += 1;
            let wait = op;
            records.push(host_span(
                epoch,
                wait,
                SpanKind::Wait,
                "wait",
                t0 + 920,
                t0 + 930,
            ));
            if k > 0 {
                waits.push((record - (2 * PER_BATCH + 2), wait));
            }
            if k == batches - 1 {
                waits.push((2 * PER_BATCH + 1, wait));
            }
            let mut batch = Collected {
                host: vec![HostThread {
                    thread: 1,
                    name: "main".to_owned(),
                    records,
                }],
                device_spans,
                devices: if k == 0 {
                    vec![(d, info("llvmpipe"))]
                } else {
                    Vec::new()
                },
                bases: if k == 0 {
                    vec![(d, ClockBase::default())]
                } else {
                    Vec::new()
                },
                waits,
                ..Collected::default()
            };
            let t = a.assemble(&mut batch);
            let launches = t
                .flows
                .iter()
                .filter(|f| f.kind == FlowKind::Launch)
                .count();
            assert_eq!(launches as u64, PER_BATCH, "every launch flow drawn");
            flows += t
                .flows
                .iter()
                .filter(|f| f.kind == FlowKind::EventWait)
                .count();
            if k == 0 {
                // The launches' host spans are gone; the syncs, the event
                // record and the wait are kept.
                assert_eq!(a.host_of_op.len() as u64, PER_BATCH + 2);
                assert!(a.device_of_op.is_empty(), "no event spans on the device");
            }
            let kept = a.host_of_op.len() + a.device_of_op.len();
            assert!(
                kept <= PRUNE_MIN + PER_BATCH as usize + 2,
                "batch {k}: {kept} entries kept"
            );
            assert!(
                a.held_waits.len() <= 1,
                "batch {k}: {} waits held",
                a.held_waits.len()
            );
            merged.merge(t).expect("merge");
        }
        // Flows between fragments land on spans of earlier ones.
        assert_eq!(merged.check(), Ok(()));
        // 100,000 host-only operations recorded in all, most of them pruned.
        assert!(op > 2 * PRUNE_MIN as u64);
        assert_eq!(
            flows as u64,
            batches - 1,
            "the waits within the horizon drawn, the other not"
        );
        // The wait whose record was pruned is held only for as long as the
        // bookkeeping keeps operations: gone once the recording moves on.
        assert_eq!(a.held_waits.len(), 1);
        let later = batches * STEP_NS + RETAIN_NS;
        let mut batch = Collected {
            host: vec![HostThread {
                thread: 1,
                name: "main".to_owned(),
                records: vec![host_span(
                    epoch,
                    op + 1,
                    SpanKind::Sync,
                    "sync",
                    later,
                    later + 10,
                )],
            }],
            ..Collected::default()
        };
        a.assemble(&mut batch);
        assert!(
            a.held_waits.is_empty(),
            "the wait past the horizon is not held"
        );
    }

    /// Device spans of a device that is never calibrated are held up to a
    /// bound and counted as dropped past it, and when the session ends.
    #[test]
    fn device_spans_that_cannot_be_placed_are_counted_as_dropped() {
        let epoch = Instant::now();
        let stream = Stream::new(vulkan(), 3);
        let mut a = Assembler::new(epoch);
        let per_batch = HELD_MAX / 2 + 1;
        let mut dropped = 0;
        for k in 0..3 {
            let mut batch = Collected {
                device_spans: (0..per_batch)
                    .map(|i| {
                        let t = (k * per_batch + i) as i64;
                        device_span(stream, t as u64 + 1, SpanKind::Kernel, t, t + 1)
                    })
                    .collect(),
                last: k == 2,
                ..Collected::default()
            };
            let t = a.assemble(&mut batch);
            assert!(t.spans.is_empty(), "nothing placed without a calibration");
            assert!(a.held_spans.len() <= HELD_MAX);
            dropped += t.dropped;
        }
        // Held: the first batch and half of the second; the rest of the
        // second dropped; at the end everything held or new is dropped.
        assert_eq!(dropped as usize, 3 * per_batch);
        assert!(a.held_spans.is_empty());
    }
}
