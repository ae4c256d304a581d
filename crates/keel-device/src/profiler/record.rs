//! Recording hooks: what the stream-operation path (`submit.rs`) calls, and
//! the per-thread buffers and the shared state they fill.
//!
//! Hooks only gather: host records go to the calling thread's buffer;
//! device spans (bracketed by timed events, see `clock.rs`), event links
//! and the caching allocator's events (`memory_event`) go to one shared,
//! locked state. The collector
//! (`collect.rs`) takes both away and hands them to the assembler
//! (`assemble.rs`); nothing here builds a trace.
//!
//! # Cost
//! With no session, a hook is one relaxed atomic load ([`enabled`]). With a
//! session, a stream operation appends one record to its thread's buffer
//! (two reads of the CPU's counter, `stamp.rs`, an uncontended lock, a
//! push; measured in
//! `benches/profiler.rs`), and times the operation's device span: inside
//! the operation's own work where the backend can (Vulkan and wgpu: its
//! own submissions; host streams: its own tasks), with two timed events
//! around it elsewhere (`clock.rs`). Buffers are bounded
//! ([`MAX_RECORDS_PER_THREAD`]); what does not fit is counted in
//! [`Trace::dropped`](super::Trace::dropped), never lost silently.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustc_hash::FxHashMap;

pub(crate) use super::assemble::Detail;
#[cfg(feature = "tracing")]
pub(crate) use super::assemble::FieldText;
pub use super::assemble::MemoryRecord;
use super::assemble::{DeviceSpan, HostRecord, HostThread};
use super::clock::{Clocks, DeviceClock, PendingSpan, PendingSpans, SpanTiming, TimedEvent};
use super::stamp::Stamp;
use crate::core::Stream;
use crate::error::{Error, Result};
pub use keel_trace::MemoryAction;
use keel_trace::{SpanKind, Text};

/// Records a thread keeps before it counts drops instead.
pub const MAX_RECORDS_PER_THREAD: usize = 1 << 20;

/// Allocator events kept between two collections before further ones are
/// counted as drops.
pub const MAX_MEMORY_RECORDS: usize = 1 << 20;

/// Device spans waiting for their events before they are resolved in a
/// batch (keeps the number of live timed events bounded).
const RESOLVE_BATCH: usize = 256;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static NEXT_OP: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static GENERATION: AtomicU64 = AtomicU64::new(0);

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a session is recording. The only cost an instrumented operation
/// pays when none is: one relaxed load.
#[inline]
pub fn enabled() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// One thread's recording buffer.
#[derive(Debug)]
pub(super) struct ThreadBuf {
    thread: u64,
    name: String,
    generation: AtomicU64,
    records: Mutex<Vec<HostRecord<Stamp>>>,
    /// An empty buffer with the capacity of earlier ones: the collector
    /// swaps it in, so a recording thread keeps writing into memory that is
    /// already mapped (no reallocation or page faults in steady state).
    spare: Mutex<Vec<HostRecord<Stamp>>>,
}

static THREADS: Mutex<Vec<Arc<ThreadBuf>>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<Option<Arc<ThreadBuf>>> = const { RefCell::new(None) };
}

/// The calling thread's recording buffer, made on its first use.
fn new_thread_buf() -> Arc<ThreadBuf> {
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
}

/// The calling thread's number (its host lane's, [`LaneKind::Host`]).
///
/// [`LaneKind::Host`]: keel_trace::LaneKind::Host
fn thread_number() -> u64 {
    LOCAL.with(|local| local.borrow_mut().get_or_insert_with(new_thread_buf).thread)
}

fn push(record: HostRecord<Stamp>) {
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        let buf = local.get_or_insert_with(new_thread_buf);
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

/// What the hooks gather besides host records, behind one lock.
#[derive(Default)]
pub(super) struct Gathered {
    /// Per device, its clock (made by its first operation).
    pub clocks: Clocks,
    /// Device spans whose events may not have completed.
    pub pending: PendingSpans,
    /// How many pending spans trigger the next resolution.
    pub resolve_at: usize,
    /// Device spans resolved to offsets, not yet collected.
    pub resolved: Vec<DeviceSpan>,
    /// event id -> op that last recorded it
    pub event_ops: FxHashMap<u64, u64>,
    /// (record op, wait op) pairs
    pub waits: Vec<(u64, u64)>,
    /// Allocator events with their host times (counter ticks), in time
    /// order.
    pub memory: Vec<(Stamp, MemoryRecord)>,
}

impl Gathered {
    /// Resolves the pending spans whose events completed (all, waiting for
    /// them, when `wait` is true).
    pub(super) fn resolve(&mut self, wait: bool) {
        let lost = self.pending.resolve(&self.clocks, wait, &mut self.resolved);
        device_spans_lost(lost);
    }
}

static GATHERED: Mutex<Option<Gathered>> = Mutex::new(None);

/// Starts recording: clears what an earlier session left and switches the
/// hooks on. Returns the session's epoch. Fails if recording already.
pub(super) fn open() -> Result<std::time::Instant> {
    let mut gathered = lock(&GATHERED);
    if gathered.is_some() || ACTIVE.load(Ordering::Acquire) {
        return Err(Error::invalid(
            "a profiler session is already recording; stop it before starting another",
        ));
    }
    GENERATION.fetch_add(1, Ordering::Relaxed);
    DROPPED.store(0, Ordering::Relaxed);
    for t in lock(&THREADS).iter() {
        lock(&t.records).clear();
    }
    let epoch = std::time::Instant::now();
    *gathered = Some(Gathered::default());
    ACTIVE.store(true, Ordering::Release);
    Ok(epoch)
}

/// Stops recording; returns what the hooks gathered and nobody took yet.
pub(super) fn close() -> Option<Gathered> {
    ACTIVE.store(false, Ordering::Release);
    lock(&GATHERED).take()
}

/// Runs `f` on the gathered state while recording (`None` when not).
pub(super) fn with_gathered<R>(f: impl FnOnce(&mut Gathered) -> R) -> Option<R> {
    lock(&GATHERED).as_mut().map(f)
}

/// Host records taken from the threads' buffers; give them back with
/// [`give_back`] once drained, so the threads reuse their capacity.
#[derive(Debug)]
pub(super) struct TakenHost {
    bufs: Vec<Arc<ThreadBuf>>,
}

/// Takes the records every thread made in this session since the last
/// call (swapping in each thread's spare buffer).
pub(super) fn take_host() -> (TakenHost, Vec<HostThread<Stamp>>) {
    let bufs: Vec<Arc<ThreadBuf>> = lock(&THREADS).clone();
    let generation = GENERATION.load(Ordering::Relaxed);
    let mut taken = TakenHost {
        bufs: Vec::with_capacity(bufs.len()),
    };
    let mut host = Vec::with_capacity(bufs.len());
    for t in bufs {
        if t.generation.load(Ordering::Relaxed) != generation {
            continue;
        }
        let mut records = std::mem::take(&mut *lock(&t.spare));
        std::mem::swap(&mut records, &mut *lock(&t.records));
        host.push(HostThread {
            thread: t.thread,
            name: t.name.clone(),
            records,
        });
        taken.bufs.push(t);
    }
    (taken, host)
}

/// Returns drained buffers to their threads as spares.
pub(super) fn give_back(taken: TakenHost, host: Vec<HostThread<Stamp>>) {
    for (t, h) in taken.bufs.into_iter().zip(host) {
        let mut records = h.records;
        records.clear();
        *lock(&t.spare) = records;
    }
}

/// Records lost since the last call.
pub(super) fn take_dropped() -> u64 {
    DROPPED.swap(0, Ordering::Relaxed)
}

thread_local! {
    static LAST_OP: Cell<u64> = const { Cell::new(0) };
}

/// A new operation id.
pub(crate) fn next_op() -> u64 {
    let op = NEXT_OP.fetch_add(1, Ordering::Relaxed);
    LAST_OP.with(|l| l.set(op));
    op
}

/// The id of the last operation this thread recorded.
pub(crate) fn last_op() -> u64 {
    LAST_OP.with(Cell::get)
}

thread_local! {
    /// The op id of the dispatched operator running on this thread (0:
    /// none): its launches are linked to it.
    static OPERATOR: Cell<u64> = const { Cell::new(0) };
}

/// Records a dispatched operator's host span (kind
/// [`SpanKind::Operator`]) around `f`, with `args` (its input shapes and
/// dtypes); kernels launched inside get a flow from it.
pub fn operator<T>(
    name: Cow<'static, str>,
    args: Vec<(Text, Text)>,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let op = next_op();
    let outer = OPERATOR.with(|o| o.replace(op));
    let start = Stamp::now();
    let result = f();
    let end = Stamp::now();
    OPERATOR.with(|o| o.set(outer));
    push(HostRecord::Span {
        op,
        kind: SpanKind::Operator,
        name,
        start,
        end,
        stream: None,
        detail: Detail::Args(args),
    });
    result
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
    let mut detail = detail;
    if let Detail::Launch { operator, .. } = &mut detail {
        *operator = OPERATOR.with(Cell::get);
    }
    if let (SpanKind::EventRecord, Detail::Event(e)) = (kind, &detail) {
        event_recorded(*e, op);
    }
    let device_events = stream.and_then(start_device_span);
    let start = Stamp::now();
    let result = f();
    let end = Stamp::now();
    if let (Some(s), Some(timing)) = (stream, device_events) {
        finish_device_span(op, *s, kind, name.clone(), timing, detail.clone());
    }
    push(HostRecord::Span {
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

fn start_device_span(stream: &Stream) -> Option<SpanTiming> {
    let mut gathered = lock(&GATHERED);
    // `None`: the session is ending, or the device's events cannot time
    // (its operations have host spans only, by design).
    gathered
        .as_mut()?
        .clocks
        .entry(stream.device())
        .or_insert_with(|| DeviceClock::new(stream).map(Arc::new))
        .as_ref()?;
    drop(gathered);
    let timing = SpanTiming::begin(stream);
    if timing.is_none() {
        // A device that times could not time this operation (its timing
        // resources are used up): the device span is lost, not silently.
        device_spans_lost(1);
    }
    timing
}

/// Counts `n` device spans lost with the session's dropped records.
pub(super) fn device_spans_lost(n: u64) {
    DROPPED.fetch_add(n, Ordering::Relaxed);
}

fn finish_device_span(
    op: u64,
    stream: Stream,
    kind: SpanKind,
    name: Cow<'static, str>,
    timing: SpanTiming,
    detail: Detail,
) {
    // Work run inline by this thread goes on its own lane of the stream.
    let thread = if timing.inline(&stream) {
        thread_number()
    } else {
        0
    };
    let Some((start, end)) = timing.finish(&stream) else {
        device_spans_lost(1);
        return;
    };
    let mut gathered = lock(&GATHERED);
    let Some(state) = gathered.as_mut() else {
        return;
    };
    state.pending.push(PendingSpan {
        op,
        stream,
        thread,
        kind,
        name,
        start,
        end,
        detail,
    });
    // Resolve again only after another batch arrived: spans whose work is
    // still queued would otherwise be looked at on every operation.
    if state.pending.len() >= state.resolve_at.max(RESOLVE_BATCH) {
        state.resolve(false);
        state.resolve_at = state.pending.len() + RESOLVE_BATCH;
    }
}

/// Records device spans of work Keel did not launch (scopes on a
/// program's own passes), each timed by two events of `stream`'s backend
/// that its work wrote: user annotations on the stream's lane, which may
/// nest and overlap Keel's spans there. The events are destroyed once
/// read, or at once when no session records.
#[cfg(any(feature = "vulkan", feature = "wgpu"))]
pub(crate) fn foreign_device_spans(
    stream: &Stream,
    spans: Vec<(
        Cow<'static, str>,
        crate::backend::EventHandle,
        crate::backend::EventHandle,
    )>,
) {
    let Ok(guard) = crate::backend::registry::available_guard_impl(stream.device_type()) else {
        return;
    };
    let index = stream.device_index();
    let timed = spans
        .into_iter()
        .map(|(name, a, b)| {
            (
                name,
                TimedEvent::made(guard, a, index),
                TimedEvent::made(guard, b, index),
            )
        })
        .collect();
    annotations(stream, timed);
}

/// Records device annotations on `stream`'s lane, each between two timed
/// events (see [`foreign_device_spans`]).
pub(super) fn annotations(
    stream: &Stream,
    timed: Vec<(Cow<'static, str>, TimedEvent, TimedEvent)>,
) {
    let mut gathered = lock(&GATHERED);
    let Some(state) = gathered.as_mut() else {
        drop(gathered);
        drop(timed);
        return;
    };
    let calibrated = state
        .clocks
        .entry(stream.device())
        .or_insert_with(|| DeviceClock::new(stream).map(Arc::new))
        .is_some();
    if !calibrated {
        drop(gathered);
        device_spans_lost(timed.len() as u64);
        drop(timed);
        return;
    }
    for (name, start, end) in timed {
        state.pending.push(PendingSpan {
            op: 0,
            stream: *stream,
            thread: 0,
            kind: SpanKind::Annotation,
            name,
            start,
            end,
            detail: Detail::None,
        });
    }
    if state.pending.len() >= state.resolve_at.max(RESOLVE_BATCH) {
        state.resolve(false);
        state.resolve_at = state.pending.len() + RESOLVE_BATCH;
    }
}

/// Notes that operation `op` recorded event `event`.
pub(crate) fn event_recorded(event: u64, op: u64) {
    if let Some(state) = lock(&GATHERED).as_mut() {
        state.event_ops.insert(event, op);
    }
}

/// Notes that operation `op` waited for event `event`.
pub(crate) fn event_waited(event: u64, op: u64) {
    if let Some(state) = lock(&GATHERED).as_mut()
        && let Some(&record) = state.event_ops.get(&event)
    {
        state.waits.push((record, op));
    }
}

/// Records an allocator action, stamped with the host clock now. The
/// caller checks [`enabled`] first; without a session this does nothing.
/// The clock is read under the recorder's lock, so records are kept in
/// time order. Past [`MAX_MEMORY_RECORDS`] between two collections,
/// records are counted as dropped.
pub(crate) fn memory_event(record: MemoryRecord) {
    let mut gathered = lock(&GATHERED);
    let Some(state) = gathered.as_mut() else {
        return;
    };
    if state.memory.len() < MAX_MEMORY_RECORDS {
        state.memory.push((Stamp::now(), record));
    } else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Records a user marker.
pub(super) fn mark(name: String) {
    mark_with(name, Vec::new());
}

/// Records a marker with details.
pub(super) fn mark_with(name: String, args: Vec<(String, String)>) {
    push(HostRecord::Mark {
        name,
        at: Stamp::now(),
        args,
    });
}

/// Records a finished host span of kind [`SpanKind::Annotation`] with
/// details.
pub(super) fn annotation(name: Cow<'static, str>, start: Stamp, end: Stamp, detail: Detail) {
    push(HostRecord::Span {
        op: 0,
        kind: SpanKind::Annotation,
        name,
        start,
        end,
        stream: None,
        detail,
    });
}

/// Records a finished user range.
pub(super) fn range(name: Cow<'static, str>, start: Stamp) {
    range_between(name, start, Stamp::now());
}

/// Records a user range with both ends given.
pub(super) fn range_between(name: Cow<'static, str>, start: Stamp, end: Stamp) {
    annotation(name, start, end, Detail::None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Device;
    use keel_trace::{ALLOCATED_COUNTER, RESERVED_COUNTER};

    /// Allocator records past the bound are counted as drops; what was
    /// kept becomes events and curves. (The only test of the library's
    /// unit tests that starts a session: it holds `TEST_SESSION`.)
    #[test]
    fn memory_records_are_bounded_and_drops_counted() {
        let _alone = crate::profiler::TEST_SESSION
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(!enabled());
        memory_event(MemoryRecord {
            device: Device::cpu(),
            action: MemoryAction::Alloc,
            addr: 1,
            segment: 1,
            bytes: 1,
            stream: None,
            small_pool: true,
            allocated: 1,
            reserved: 1,
        }); // no session: nothing kept
        let session = crate::profiler::start().expect("start");
        let extra = 7;
        let stream = Stream::new(Device::cpu(), 0);
        for i in 0..(MAX_MEMORY_RECORDS + extra) as u64 {
            memory_event(MemoryRecord {
                device: Device::cpu(),
                action: if i % 2 == 0 {
                    MemoryAction::Alloc
                } else {
                    MemoryAction::Free
                },
                addr: 4096,
                segment: 0,
                bytes: 512,
                stream: Some(stream),
                small_pool: true,
                allocated: u64::from(i % 2 == 0) * 512,
                reserved: 2 << 20,
            });
        }
        let trace = session.stop();
        assert_eq!(trace.dropped, extra as u64);
        assert_eq!(trace.memory.len(), MAX_MEMORY_RECORDS);
        assert!(trace.memory.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        assert_eq!(trace.memory[0].stream, Some(0));
        let curve = |name: &str| {
            trace
                .counters
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.points.len())
        };
        // Allocated changes at every record, reserved never after the first.
        assert_eq!(curve(ALLOCATED_COUNTER), Some(MAX_MEMORY_RECORDS));
        assert_eq!(curve(RESERVED_COUNTER), Some(1));
    }
}
