//! Recording: the hooks the stream-operation path calls, the per-thread
//! buffers, device spans from timed events, and calibration.
//!
//! # Cost
//! With no session, a hook is one relaxed atomic load ([`enabled`]). With a
//! session, a stream operation appends one record to its thread's buffer
//! (two host clock reads, an uncontended lock, a push; measured in
//! `benches/profiler.rs`), and brackets the operation on its stream with
//! two timed events so its device span can be placed. Buffers are bounded
//! ([`MAX_RECORDS_PER_THREAD`]); what does not fit is counted in
//! [`Trace::dropped`](super::Trace::dropped), never lost silently.
//!
//! # Device time
//! Device spans come from timed events, the one timing mechanism every
//! backend has (Vulkan and wgpu timestamp queries, CUDA events, the host
//! clock on CPU). Per device, the first operation of a session records a
//! *reference* event; every device span is stored as an offset from it
//! (`elapsed_time`). To place the reference on the host clock, a
//! calibration event is recorded and polled: its device timestamp lies
//! between the host instant of the record call and the first poll that sees
//! it complete. The midpoint of that host interval maps device time onto
//! the host clock; half its width is the error bound stored in the trace
//! ([`Calibration`]). A live session calibrates each device on its first
//! drain without waiting for the device; a session that stops first makes
//! the device idle, which keeps the interval short (tens of microseconds on
//! the software drivers here). Clock drift during a session is not
//! corrected. Backends
//! whose events cannot time produce host spans only.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::trace::{
    Calibration, Counter, Flow, FlowEnd, FlowKind, InstantEvent, Lane, LaneKind, Span, SpanKind,
    TRACE_VERSION, Trace, TraceDevice,
};
use crate::core::{Device, Stream};
use crate::error::{Error, Result};
use crate::event::Event;

/// Records a thread keeps before it counts drops instead.
pub const MAX_RECORDS_PER_THREAD: usize = 1 << 20;

/// Device spans waiting for their events before they are resolved in a
/// batch (keeps the number of live timed events bounded).
const RESOLVE_BATCH: usize = 256;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static NEXT_OP: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a session is recording. The only cost an instrumented operation
/// pays when none is: one relaxed load.
#[inline]
pub fn enabled() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// What a host record carries beyond its kind and name, kept compact until
/// the trace is built.
#[derive(Debug, Clone)]
pub(crate) enum Detail {
    None,
    Bytes(u64),
    Grid([u32; 3]),
    Event(u64),
}

#[derive(Debug)]
enum Record {
    Span {
        op: u64,
        kind: SpanKind,
        name: Cow<'static, str>,
        start: Instant,
        end: Instant,
        stream: Option<Stream>,
        detail: Detail,
    },
    Mark {
        name: String,
        at: Instant,
    },
}

struct ThreadBuf {
    thread: u64,
    name: String,
    generation: AtomicU64,
    records: Mutex<Vec<Record>>,
    /// An empty buffer with the capacity of earlier ones: the collector
    /// swaps it in, so a recording thread keeps writing into memory that is
    /// already mapped (no reallocation or page faults in steady state).
    spare: Mutex<Vec<Record>>,
}

static THREADS: Mutex<Vec<Arc<ThreadBuf>>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<Option<Arc<ThreadBuf>>> = const { RefCell::new(None) };
}

fn push(record: Record) {
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        let buf = local.get_or_insert_with(|| {
            let t = std::thread::current();
            let thread = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            let buf = Arc::new(ThreadBuf {
                thread,
                name: t
                    .name()
                    .map_or_else(|| format!("thread {thread}"), str::to_owned),
                generation: AtomicU64::new(GENERATION.load(Ordering::Relaxed)),
                records: Mutex::new(Vec::new()),
                spare: Mutex::new(Vec::new()),
            });
            lock(&THREADS).push(Arc::clone(&buf));
            buf
        });
        let mut records = lock(&buf.records);
        // Records of a previous session left behind are discarded.
        let generation = GENERATION.load(Ordering::Relaxed);
        if buf.generation.load(Ordering::Relaxed) != generation {
            buf.generation.store(generation, Ordering::Relaxed);
            records.clear();
        }
        if records.len() < MAX_RECORDS_PER_THREAD {
            records.push(record);
        } else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// A device span waiting for its two events.
struct PendingDevice {
    op: u64,
    stream: Stream,
    kind: SpanKind,
    name: Cow<'static, str>,
    start: Event,
    end: Event,
    detail: Detail,
}

/// A device span resolved to offsets (ns) from its device's reference event.
struct DeviceSpan {
    op: u64,
    stream: Stream,
    kind: SpanKind,
    name: Cow<'static, str>,
    start_off: i64,
    end_off: i64,
    detail: Detail,
}

struct DeviceClock {
    reference: Event,
    stream: Stream,
}

struct SessionState {
    epoch: Instant,
    clocks: HashMap<Device, Option<DeviceClock>>,
    pending: Vec<PendingDevice>,
    resolved: Vec<DeviceSpan>,
    /// event id -> op that last recorded it
    event_ops: HashMap<u64, u64>,
    /// (record op, wait op) pairs
    waits: Vec<(u64, u64)>,
    /// (device, time, +/- bytes)
    memory: Vec<(Device, Instant, i64)>,
    /// Per device: (host ns of its reference event, error bound).
    bases: HashMap<Device, (i64, u64)>,
    /// op -> (host lane, its name, start ns) of its host span.
    host_of_op: HashMap<u64, (LaneKind, String, u64)>,
    /// op -> (stream, start ns, end ns) of its device span.
    device_of_op: HashMap<u64, (Stream, u64, u64)>,
    /// Per stream: the end of its last placed device span.
    last_end: HashMap<Stream, u64>,
    memory_total: HashMap<Device, i64>,
    next_flow: u64,
}

static SESSION: Mutex<Option<SessionState>> = Mutex::new(None);

fn ms_to_ns(ms: f64) -> i64 {
    (ms * 1e6).round() as i64
}

impl SessionState {
    /// The clock of `stream`'s device, created on first use. `None` when the
    /// device's events cannot time.
    fn clock(&mut self, stream: &Stream) -> Option<&DeviceClock> {
        self.clocks
            .entry(stream.device())
            .or_insert_with(|| {
                let mut reference = Event::timed(stream.device_type());
                reference.record_untraced(stream).ok()?;
                Some(DeviceClock {
                    reference,
                    stream: *stream,
                })
            })
            .as_ref()
    }

    /// Resolves pending spans whose events have completed (all of them when
    /// `wait` is true).
    fn resolve(&mut self, wait: bool) {
        let pending = std::mem::take(&mut self.pending);
        for p in pending {
            if wait {
                let _ = p.end.synchronize_untraced();
            }
            if !wait && !matches!(p.end.query(), Ok(true)) {
                self.pending.push(p);
                continue;
            }
            let Some(Some(clock)) = self.clocks.get(&p.stream.device()) else {
                continue;
            };
            let (Ok(a), Ok(b)) = (
                clock.reference.elapsed_time(&p.start),
                clock.reference.elapsed_time(&p.end),
            ) else {
                continue;
            };
            self.resolved.push(DeviceSpan {
                op: p.op,
                stream: p.stream,
                kind: p.kind,
                name: p.name,
                start_off: ms_to_ns(a),
                end_off: ms_to_ns(b),
                detail: p.detail,
            });
        }
    }
}

/// Starts recording. Fails if a session is already recording.
pub(super) fn begin() -> Result<Instant> {
    let mut session = lock(&SESSION);
    if session.is_some() || ACTIVE.load(Ordering::Acquire) {
        return Err(Error::invalid(
            "a profiler session is already recording; stop it before starting another",
        ));
    }
    GENERATION.fetch_add(1, Ordering::Relaxed);
    DROPPED.store(0, Ordering::Relaxed);
    for t in lock(&THREADS).iter() {
        lock(&t.records).clear();
    }
    let epoch = Instant::now();
    *session = Some(SessionState {
        epoch,
        clocks: HashMap::new(),
        pending: Vec::new(),
        resolved: Vec::new(),
        event_ops: HashMap::new(),
        waits: Vec::new(),
        memory: Vec::new(),
        bases: HashMap::new(),
        host_of_op: HashMap::new(),
        device_of_op: HashMap::new(),
        last_end: HashMap::new(),
        memory_total: HashMap::new(),
        next_flow: 1,
    });
    ACTIVE.store(true, Ordering::Release);
    Ok(epoch)
}

thread_local! {
    static LAST_OP: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A new operation id.
pub(crate) fn next_op() -> u64 {
    let op = NEXT_OP.fetch_add(1, Ordering::Relaxed);
    LAST_OP.with(|l| l.set(op));
    op
}

/// The id of the last operation this thread recorded.
pub(crate) fn last_op() -> u64 {
    LAST_OP.with(std::cell::Cell::get)
}

/// Records a host span (and, for stream work, brackets it with timed
/// events for its device span). Returns what `f` returns.
pub(crate) fn stream_op<T>(
    kind: SpanKind,
    name: Cow<'static, str>,
    stream: Option<&Stream>,
    detail: Detail,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let op = next_op();
    if let (SpanKind::EventRecord, Detail::Event(e)) = (kind, &detail) {
        event_recorded(*e, op);
    }
    let device_events = stream.and_then(start_device_span);
    let start = Instant::now();
    let result = f();
    let end = Instant::now();
    if let (Some(s), Some(start_event)) = (stream, device_events) {
        finish_device_span(op, *s, kind, name.clone(), start_event, detail.clone());
    }
    push(Record::Span {
        op,
        kind,
        name,
        start,
        end,
        stream: stream.copied(),
        detail,
    });
    result
}

fn start_device_span(stream: &Stream) -> Option<Event> {
    let mut session = lock(&SESSION);
    let Some(state) = session.as_mut() else {
        // A live drain is calibrating a device right now.
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    state.clock(stream)?;
    drop(session);
    let mut e = Event::timed(stream.device_type());
    e.record_untraced(stream).ok()?;
    Some(e)
}

fn finish_device_span(
    op: u64,
    stream: Stream,
    kind: SpanKind,
    name: Cow<'static, str>,
    start: Event,
    detail: Detail,
) {
    let mut end = Event::timed(stream.device_type());
    if end.record_untraced(&stream).is_err() {
        return;
    }
    let mut session = lock(&SESSION);
    let Some(state) = session.as_mut() else {
        return;
    };
    state.pending.push(PendingDevice {
        op,
        stream,
        kind,
        name,
        start,
        end,
        detail,
    });
    if state.pending.len() >= RESOLVE_BATCH {
        state.resolve(false);
    }
}

/// Notes that operation `op` recorded event `event`.
pub(crate) fn event_recorded(event: u64, op: u64) {
    if let Some(state) = lock(&SESSION).as_mut() {
        state.event_ops.insert(event, op);
    }
}

/// Notes that operation `op` waited for event `event`.
pub(crate) fn event_waited(event: u64, op: u64) {
    if let Some(state) = lock(&SESSION).as_mut()
        && let Some(&record) = state.event_ops.get(&event)
    {
        state.waits.push((record, op));
    }
}

/// Notes `bytes` allocated (positive) or freed (negative) on `device`.
pub(crate) fn memory(device: Device, bytes: i64) {
    if let Some(state) = lock(&SESSION).as_mut() {
        state.memory.push((device, Instant::now(), bytes));
    }
}

/// Records a user marker.
pub(super) fn mark(name: String) {
    push(Record::Mark {
        name,
        at: Instant::now(),
    });
}

/// Records a finished user range.
pub(super) fn range(name: Cow<'static, str>, start: Instant) {
    push(Record::Span {
        op: 0,
        kind: SpanKind::Annotation,
        name,
        start,
        end: Instant::now(),
        stream: None,
        detail: Detail::None,
    });
}

fn ns_since(epoch: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(epoch).as_nanos() as u64
}

fn detail_args(detail: &Detail) -> Vec<(String, String)> {
    match detail {
        Detail::None => Vec::new(),
        Detail::Bytes(b) => vec![("bytes".to_owned(), b.to_string())],
        Detail::Grid(g) => vec![("grid".to_owned(), format!("{}x{}x{}", g[0], g[1], g[2]))],
        Detail::Event(e) => vec![("event".to_owned(), e.to_string())],
    }
}

/// Calibrates one device's clock without blocking any stream: records a
/// calibration event and polls it; the device time of its timestamp lies
/// between the record call and the first poll that saw it complete. Returns the host time (ns from the epoch) of the device's
/// reference event and the error bound (half that interval).
fn calibrate(epoch: Instant, clock: &DeviceClock, idle_first: bool) -> Option<(i64, u64)> {
    if idle_first {
        // At the end of a session the device may be made idle first, which
        // tightens the pair (the event then completes as soon as it runs).
        crate::api::synchronize(clock.stream.device()).ok()?;
    }
    let mut cal = Event::timed(clock.stream.device_type());
    // The event's device timestamp is written after this instant...
    let before = Instant::now();
    cal.record_untraced(&clock.stream).ok()?;
    let mut polls = 0u32;
    // ...and before the first poll that sees it complete. (Polls that see
    // it incomplete prove nothing: completion is signalled after the
    // timestamp is written, sometimes milliseconds later.)
    let after = loop {
        if cal.query().ok()? {
            break Instant::now();
        }
        polls += 1;
        if polls > 2_000 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    };
    let offset = ms_to_ns(clock.reference.elapsed_time(&cal).ok()?);
    let (h0, h1) = (
        ns_since(epoch, before) as i64,
        ns_since(epoch, after) as i64,
    );
    let mid = h0 + (h1 - h0) / 2;
    Some((mid - offset, ((h1 - h0) / 2) as u64))
}

/// Stops recording and builds the trace.
pub(super) fn end() -> Trace {
    ACTIVE.store(false, Ordering::Release);
    let Some(mut state) = lock(&SESSION).take() else {
        return Trace {
            version: TRACE_VERSION,
            ..Trace::default()
        };
    };
    collect(&mut state, true)
}

/// Takes what was recorded since the last call as a self-contained trace
/// fragment (its own device and lane tables), without stopping the
/// session. Device spans appear once their events completed. `None` when
/// no session records.
pub(super) fn drain() -> Option<Trace> {
    // Calibrating a new device polls an event; do it with the state out of
    // the lock so recording threads never wait for it. Operations recorded
    // in that window (once per device per session) lose their device span,
    // which is counted as dropped.
    let needs_calibration = lock(&SESSION).as_ref().is_some_and(|st| {
        st.clocks
            .iter()
            .any(|(d, c)| c.is_some() && !st.bases.contains_key(d))
    });
    if needs_calibration {
        let mut state = lock(&SESSION).take()?;
        calibrate_new(&mut state, false);
        let mut slot = lock(&SESSION);
        if slot.is_none() && ACTIVE.load(Ordering::Acquire) {
            *slot = Some(state);
        }
    }
    let mut session = lock(&SESSION);
    let state = session.as_mut()?;
    Some(collect(state, false))
}

fn calibrate_new(state: &mut SessionState, idle_first: bool) {
    let uncalibrated: Vec<Device> = state
        .clocks
        .iter()
        .filter(|(d, c)| c.is_some() && !state.bases.contains_key(*d))
        .map(|(d, _)| *d)
        .collect();
    for d in uncalibrated {
        if let Some(Some(clock)) = state.clocks.get(&d)
            && let Some(pair) = calibrate(state.epoch, clock, idle_first)
        {
            state.bases.insert(d, pair);
        }
    }
}

/// Builds a trace from what `state` holds; `last` resolves everything.
fn collect(state: &mut SessionState, last: bool) -> Trace {
    state.resolve(last);
    let epoch = state.epoch;
    let mut b = Builder::new(epoch);

    if last {
        calibrate_new(state, true);
    }
    let mut calibrated: Vec<(Device, (i64, u64))> =
        state.bases.iter().map(|(d, p)| (*d, *p)).collect();
    calibrated.sort();
    for (d, (_, bound)) in calibrated {
        let di = b.device(d);
        b.trace.calibrations.push(Calibration {
            device: di,
            method: if d.is_cpu() {
                "host clock, paired sampling".to_owned()
            } else {
                "paired sampling".to_owned()
            },
            error_bound_ns: bound,
        });
    }

    // Host spans and marks from every thread's buffer.
    let threads: Vec<Arc<ThreadBuf>> = lock(&THREADS).clone();
    let generation = GENERATION.load(Ordering::Relaxed);
    for t in threads {
        if t.generation.load(Ordering::Relaxed) != generation {
            continue;
        }
        let mut records = std::mem::take(&mut *lock(&t.spare));
        std::mem::swap(&mut records, &mut *lock(&t.records));
        if records.is_empty() {
            *lock(&t.spare) = records;
            continue;
        }
        let kind = LaneKind::Host { thread: t.thread };
        let lane = b.lane(kind.clone(), t.name.clone());
        for r in records.drain(..) {
            match r {
                Record::Span {
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
                    let mut args = detail_args(&detail);
                    if let Some(st) = stream {
                        args.push(("stream".to_owned(), st.to_string()));
                    }
                    if op != 0 {
                        state
                            .host_of_op
                            .insert(op, (kind.clone(), t.name.clone(), s));
                    }
                    b.trace.spans.push(Span {
                        lane,
                        name: name.into_owned(),
                        kind: span_kind,
                        start_ns: s,
                        dur_ns: e - s,
                        op,
                        args,
                    });
                }
                Record::Mark { name, at } => b.trace.instants.push(InstantEvent {
                    lane,
                    name,
                    ts_ns: ns_since(epoch, at),
                    args: Vec::new(),
                }),
            }
        }
        *lock(&t.spare) = records;
    }

    // Device spans on their stream lanes, and launch flows.
    let mut resolved = std::mem::take(&mut state.resolved);
    resolved.sort_by_key(|s| (s.stream, s.start_off, s.op));
    for s in resolved {
        let Some(&(base, _)) = state.bases.get(&s.stream.device()) else {
            if !last {
                state.resolved.push(s); // placed once the device is calibrated
            }
            continue;
        };
        let di = b.device(s.stream.device());
        let lane_kind = LaneKind::Stream {
            device: di,
            stream: s.stream.id(),
        };
        let lane = b.lane(lane_kind, format!("stream {}", s.stream.id()));
        let mut start = (base + s.start_off).max(0) as u64;
        // A stream runs in order: clamp rounding so spans never overlap.
        if let Some(&prev) = state.last_end.get(&s.stream) {
            start = start.max(prev);
        }
        let end = ((base + s.end_off).max(0) as u64).max(start);
        state.last_end.insert(s.stream, end);
        state.device_of_op.insert(s.op, (s.stream, start, end));
        b.trace.spans.push(Span {
            lane,
            name: s.name.into_owned(),
            kind: s.kind,
            start_ns: start,
            dur_ns: end - start,
            op: s.op,
            args: detail_args(&s.detail),
        });
        if let Some((host_kind, host_name, host_start)) = state.host_of_op.get(&s.op).cloned() {
            let host_lane = b.lane(host_kind, host_name);
            let id = state.next_flow;
            state.next_flow += 1;
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
    let waits = std::mem::take(&mut state.waits);
    for (record, wait) in waits {
        let from = end_of(state, &mut b, record, true);
        let to = end_of(state, &mut b, wait, false);
        match (from, to) {
            (Some(from), Some(to)) => {
                let id = state.next_flow;
                state.next_flow += 1;
                b.trace.flows.push(Flow {
                    id,
                    kind: FlowKind::EventWait,
                    from,
                    to,
                });
            }
            _ if !last => state.waits.push((record, wait)),
            _ => {}
        }
    }

    // Memory in use per device.
    let mut memory = std::mem::take(&mut state.memory);
    memory.sort_by_key(|m| m.1);
    let mut counters: HashMap<Device, Vec<(u64, i64)>> = HashMap::new();
    for (d, at, delta) in memory {
        let total = state.memory_total.entry(d).or_insert(0);
        *total += delta;
        counters
            .entry(d)
            .or_default()
            .push((ns_since(epoch, at), *total));
    }
    let mut counters: Vec<(Device, Vec<(u64, i64)>)> = counters.into_iter().collect();
    counters.sort_by_key(|c| c.0);
    for (d, points) in counters {
        let device = b.device(d);
        b.trace.counters.push(Counter {
            device,
            name: "memory in use (bytes)".to_owned(),
            points,
        });
    }

    b.trace.dropped = DROPPED.swap(0, Ordering::Relaxed);
    b.trace
}

/// Where a flow attaches to operation `op`: its device span (start, or end
/// when `at_end`), else its host span's start.
fn end_of(state: &SessionState, b: &mut Builder, op: u64, at_end: bool) -> Option<FlowEnd> {
    if let Some(&(stream, s, e)) = state.device_of_op.get(&op) {
        let device = b.device(stream.device());
        let lane = b.lane(
            LaneKind::Stream {
                device,
                stream: stream.id(),
            },
            format!("stream {}", stream.id()),
        );
        return Some(FlowEnd {
            lane,
            ts_ns: if at_end { e } else { s },
        });
    }
    let (kind, name, s) = state.host_of_op.get(&op).cloned()?;
    let lane = b.lane(kind, name);
    Some(FlowEnd { lane, ts_ns: s })
}

/// Builds the trace's device and lane tables.
struct Builder {
    trace: Trace,
    devices: HashMap<Device, u32>,
    lanes: HashMap<LaneKind, u32>,
}

impl std::hash::Hash for LaneKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            LaneKind::Stream { device, stream } => (0u8, *device, *stream).hash(state),
            LaneKind::Host { thread } => (1u8, *thread).hash(state),
        }
    }
}

impl Builder {
    fn new(_epoch: Instant) -> Self {
        Builder {
            trace: Trace {
                version: TRACE_VERSION,
                ..Trace::default()
            },
            devices: HashMap::new(),
            lanes: HashMap::new(),
        }
    }

    fn device(&mut self, d: Device) -> u32 {
        if let Some(&i) = self.devices.get(&d) {
            return i;
        }
        let i = self.trace.devices.len() as u32;
        let (name, properties) = match crate::api::properties(d) {
            Ok(p) => {
                let mut props = vec![
                    ("kind".to_owned(), p.kind.to_string()),
                    ("native backend".to_owned(), p.native_backend.clone()),
                    ("driver".to_owned(), p.driver.clone()),
                ];
                if let Some(m) = p.total_memory {
                    props.push(("total memory".to_owned(), m.to_string()));
                }
                if let Some(t) = p.timestamps {
                    props.push(("timestamp period (ns)".to_owned(), t.period_ns.to_string()));
                }
                (p.name, props)
            }
            Err(e) => (
                d.to_string(),
                vec![("properties".to_owned(), e.to_string())],
            ),
        };
        self.trace.devices.push(TraceDevice {
            device: d.to_string(),
            name,
            properties,
        });
        self.devices.insert(d, i);
        i
    }

    fn lane(&mut self, kind: LaneKind, name: String) -> u32 {
        if let Some(&i) = self.lanes.get(&kind) {
            return i;
        }
        let i = self.trace.lanes.len() as u32;
        self.trace.lanes.push(Lane {
            kind: kind.clone(),
            name,
        });
        self.lanes.insert(kind, i);
        i
    }
}
