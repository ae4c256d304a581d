//! The trace model: the contract between the runtime and every viewer.
//!
//! A [`Trace`] is plain data: devices, lanes (one per device stream and one
//! per host thread), spans on lanes, instants, flows between spans, and
//! counters. Every timestamp is in nanoseconds on the *host* clock, counted
//! from the trace's epoch (the session start); device timestamps have
//! already been mapped onto it through calibration (see
//! [`Calibration`]). Nothing here refers to live runtime objects, so a
//! trace can be saved, loaded, sent over a socket and compared.
//!
//! Invariants a well-formed trace keeps (checked by [`Trace::check`]):
//! - every span, instant and flow end names an existing lane;
//! - spans on one lane nest: two spans either do not overlap or one
//!   contains the other;
//! - every flow end lies inside a span of its lane (so viewers can bind it).
//!
//! Operations on traces live beside the model, whoever produced the trace
//! (a session, a file, a live server): `check.rs` ([`Trace::check`]) and
//! `merge.rs` ([`Trace::merge`], which joins live fragments, and
//! [`Trace::tables_only`]); `ranks.rs` holds the record of the files a
//! trace was opened from ([`Ranks`]). Nothing here records, reads files or
//! talks to a socket.
//!
//! The epoch is the trace's own; [`Trace::origin_ns`] says, when known,
//! what it was on the clock of the file the trace came from.

mod check;
mod memory;
mod merge;
mod ranks;

pub use memory::{Block, BlockState, MemoryMap, SegmentRow};
pub use ranks::{Alignment, RankFile, Ranks};

use std::fmt;

/// The version of this model, carried by both file formats.
pub const TRACE_VERSION: u32 = 1;

/// A device that appears in the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceDevice {
    /// The device string (`vulkan:0`).
    pub device: String,
    /// The device's name.
    pub name: String,
    /// Properties as (name, value) pairs, in a stable order.
    pub properties: Vec<(String, String)>,
}

/// What a lane is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LaneKind {
    /// A stream of a device: index into [`Trace::devices`] and stream id.
    Stream {
        /// Index of the device in [`Trace::devices`].
        device: u32,
        /// The stream id.
        stream: i64,
        /// 0 for the stream's lane. A stream whose work runs inline on
        /// the threads that submit it (the CPU's default stream) has a
        /// lane per such thread, since their work overlaps in time: the
        /// thread's number, as in [`LaneKind::Host`].
        thread: u64,
    },
    /// A host thread.
    Host {
        /// A process-unique thread number.
        thread: u64,
    },
}

/// A row of the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    /// What the lane shows.
    pub kind: LaneKind,
    /// Its display name (`stream 33`, `main`).
    pub name: String,
    /// The group a viewer shows the lane under when it is not a device's
    /// stream: the process (and, for several files opened together, the
    /// file or rank) of a host thread, as `rank 1 · python3.10 (pid 42)`.
    /// Empty for Keel's own recordings (one process) and device lanes,
    /// which group by [`LaneKind::Stream::device`].
    pub group: String,
}

/// What a span is, for colouring and statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpanKind {
    /// A kernel running (device) or being launched (host).
    Kernel,
    /// A copy between host and device or between buffers.
    Copy,
    /// A buffer allocation.
    Alloc,
    /// A buffer being freed.
    Free,
    /// An event being recorded.
    EventRecord,
    /// A stream waiting for an event.
    Wait,
    /// The host waiting (event, stream or device synchronize).
    Sync,
    /// A user annotation (named host range).
    Annotation,
    /// A dispatched operator (host): encloses the launches and copies it
    /// made; exported with category `cpu_op`, as PyTorch's profiler does.
    Operator,
}

impl SpanKind {
    /// Every kind, in a stable order.
    pub const ALL: [SpanKind; 9] = [
        SpanKind::Kernel,
        SpanKind::Copy,
        SpanKind::Alloc,
        SpanKind::Free,
        SpanKind::EventRecord,
        SpanKind::Wait,
        SpanKind::Sync,
        SpanKind::Annotation,
        SpanKind::Operator,
    ];

    /// A short lower-case name (`kernel`, `copy`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Kernel => "kernel",
            SpanKind::Copy => "copy",
            SpanKind::Alloc => "alloc",
            SpanKind::Free => "free",
            SpanKind::EventRecord => "event_record",
            SpanKind::Wait => "wait",
            SpanKind::Sync => "sync",
            SpanKind::Annotation => "annotation",
            SpanKind::Operator => "operator",
        }
    }

    /// The kind with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<SpanKind> {
        SpanKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for SpanKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Something that took time on a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Index into [`Trace::lanes`].
    pub lane: u32,
    /// What it was (kernel name, `copy host->device`, ...).
    pub name: Text,
    /// Its kind.
    pub kind: SpanKind,
    /// Start, ns from the epoch.
    pub start_ns: u64,
    /// Duration in ns.
    pub dur_ns: u64,
    /// The operation it belongs to: the host span and the device span of
    /// one stream operation share it (0: none).
    pub op: u64,
    /// Details as (name, value) pairs.
    pub args: Vec<(Text, Text)>,
}

/// What a device span counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Activity {
    /// A compute kernel.
    Kernel,
    /// A memory copy.
    Copy,
    /// A memory set (`gpu_memset`, `Memset ...`).
    Memset,
}

impl Span {
    /// The value of argument `key`, if the span has it.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// What the span counts as on a device: memsets are told apart by
    /// their Kineto category (`cat` argument `gpu_memset`) or by name
    /// (`Memset (Device)`, `memset`); other kernels and copies by kind.
    /// Waits, event records and the rest are no activity.
    pub fn activity(&self) -> Option<Activity> {
        let s = self;
        let cat = s.arg("cat").or_else(|| s.arg("category"));
        let memset = cat == Some("gpu_memset")
            || s.name
                .as_bytes()
                .windows(6)
                .any(|w| w.eq_ignore_ascii_case(b"memset"));
        match s.kind {
            SpanKind::Kernel | SpanKind::Copy if memset => Some(Activity::Memset),
            SpanKind::Kernel if cat == Some("gpu_memcpy") => Some(Activity::Copy),
            SpanKind::Kernel => Some(Activity::Kernel),
            SpanKind::Copy => Some(Activity::Copy),
            _ => None,
        }
    }
}

/// Shared, immutable text for the strings a trace repeats across millions
/// of spans (kernel names, argument names and common values): readers
/// intern them ([`Interner`]), so a name costs its bytes once, not once per
/// span. It reads as a `&str` (`Deref`), prints as one, and compares with
/// `&str` and `String` (`span.name == "spin"`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Text(std::sync::Arc<str>);

impl Text {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Text {
    fn default() -> Self {
        Text::from("")
    }
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Text {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(s.into())
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(s.into())
    }
}

impl From<std::borrow::Cow<'_, str>> for Text {
    fn from(s: std::borrow::Cow<'_, str>) -> Self {
        Text(s.into())
    }
}

impl From<Text> for String {
    fn from(t: Text) -> Self {
        t.0.as_ref().to_owned()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Text> for str {
    fn eq(&self, other: &Text) -> bool {
        *self == *other.0
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Text> for String {
    fn eq(&self, other: &Text) -> bool {
        **self == *other.0
    }
}

/// Shares equal [`Text`]s while a trace is read: the first occurrence is
/// allocated, later ones are a reference count. At most `cap` distinct
/// texts are remembered (a file of unique values must not grow the table
/// without end); past that, new texts are allocated each time.
///
/// `S` hashes the texts: the default resists texts chosen to collide (a
/// file's); a program's own texts can take a faster one
/// ([`with_hasher`](Interner::with_hasher)).
pub struct Interner<S = std::collections::hash_map::RandomState> {
    set: std::collections::HashSet<Text, S>,
    cap: usize,
}

impl<S> std::fmt::Debug for Interner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interner")
            .field("texts", &self.set.len())
            .field("cap", &self.cap)
            .finish()
    }
}

impl Interner {
    /// An interner remembering at most `cap` distinct texts.
    pub fn new(cap: usize) -> Self {
        Interner::with_hasher(cap, Default::default())
    }
}

impl<S: std::hash::BuildHasher> Interner<S> {
    /// An interner remembering at most `cap` distinct texts, hashed with
    /// `hasher`.
    pub fn with_hasher(cap: usize, hasher: S) -> Self {
        Interner {
            set: std::collections::HashSet::with_hasher(hasher),
            cap,
        }
    }

    /// `text`, shared with every earlier equal one.
    pub fn intern(&mut self, text: &str) -> Text {
        if let Some(t) = self.set.get(text) {
            return Text::clone(t);
        }
        let t = Text::from(text);
        if self.set.len() < self.cap {
            self.set.insert(Text::clone(&t));
        }
        t
    }
}

impl Default for Interner {
    /// Names and argument names: up to a million distinct.
    fn default() -> Self {
        Interner::new(1 << 20)
    }
}

impl Span {
    /// End, ns from the epoch.
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.dur_ns
    }
}

/// A point in time on a lane (a user marker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstantEvent {
    /// Index into [`Trace::lanes`].
    pub lane: u32,
    /// Its name.
    pub name: String,
    /// When, ns from the epoch.
    pub ts_ns: u64,
    /// Details.
    pub args: Vec<(String, String)>,
}

/// What a flow connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowKind {
    /// A host call that launched work -> the work on the device.
    Launch,
    /// An event record -> the stream wait that consumed it.
    EventWait,
}

impl FlowKind {
    /// A short name (`launch`, `event_wait`).
    pub fn name(self) -> &'static str {
        match self {
            FlowKind::Launch => "launch",
            FlowKind::EventWait => "event_wait",
        }
    }

    /// The kind with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<FlowKind> {
        [FlowKind::Launch, FlowKind::EventWait]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// One end of a flow: a lane and a time inside a span on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEnd {
    /// Index into [`Trace::lanes`].
    pub lane: u32,
    /// ns from the epoch.
    pub ts_ns: u64,
}

/// An arrow from one span to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// Unique within the trace.
    pub id: u64,
    /// What it connects.
    pub kind: FlowKind,
    /// Where it starts.
    pub from: FlowEnd,
    /// Where it ends.
    pub to: FlowEnd,
}

/// A value over time for one device (the memory curves, or any counter an
/// imported trace has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// Index into [`Trace::devices`].
    pub device: u32,
    /// What is counted (`allocated (bytes)`).
    pub name: String,
    /// (ns from the epoch, value), in time order.
    pub points: Vec<(u64, i64)>,
}

/// What a caching allocator did (the kinds of [`MemoryEvent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryAction {
    /// A block handed out (`addr` is the block).
    Alloc,
    /// A block given back to the cache (it stays reserved).
    Free,
    /// A segment reserved from the backend (`addr` is its base).
    SegmentAlloc,
    /// A segment released to the backend.
    SegmentFree,
    /// A request that could not be met (`bytes` is the request).
    Oom,
}

impl MemoryAction {
    /// Every action, in a stable order (the native format's codes).
    pub const ALL: [MemoryAction; 5] = [
        MemoryAction::Alloc,
        MemoryAction::Free,
        MemoryAction::SegmentAlloc,
        MemoryAction::SegmentFree,
        MemoryAction::Oom,
    ];

    /// A short lower-case name (`alloc`, `free`, `segment_alloc`,
    /// `segment_free`, `oom`).
    pub fn name(self) -> &'static str {
        match self {
            MemoryAction::Alloc => "alloc",
            MemoryAction::Free => "free",
            MemoryAction::SegmentAlloc => "segment_alloc",
            MemoryAction::SegmentFree => "segment_free",
            MemoryAction::Oom => "oom",
        }
    }

    /// The action with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<MemoryAction> {
        MemoryAction::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for MemoryAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of the two memory curves every device with allocator events
/// has in [`Trace::counters`]: bytes handed out in blocks, and bytes the
/// cache holds from the backend (blocks in use, cached free blocks and
/// what splitting left over).
pub const ALLOCATED_COUNTER: &str = "allocated (bytes)";
/// See [`ALLOCATED_COUNTER`].
pub const RESERVED_COUNTER: &str = "reserved (bytes)";

/// One thing a device's caching allocator did, with the device's totals
/// after it (PyTorch's profiler writes the same as `[memory]` events).
/// A trace keeps them in time order; [`MemoryMap`] rebuilds the segments
/// and blocks at any time from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEvent {
    /// When, ns from the epoch.
    pub ts_ns: u64,
    /// Index into [`Trace::devices`].
    pub device: u32,
    /// What happened.
    pub action: MemoryAction,
    /// The block's address (alloc, free) or the segment's base (segment
    /// actions); 0 for out-of-memory.
    pub addr: u64,
    /// The base of the segment the block lies in (`addr` for segment
    /// actions). Imported traces, which do not know segments, give each
    /// block its own (`addr`).
    pub segment: u64,
    /// Bytes of the block or segment; for out-of-memory, the request.
    pub bytes: u64,
    /// The id of the stream (on `device`) the block belongs to; `None` for
    /// segment actions, out-of-memory and imported traces.
    pub stream: Option<i64>,
    /// From the small-block pool (PyTorch's: requests up to 1 MiB).
    pub small_pool: bool,
    /// Bytes allocated on the device after this action.
    pub allocated: u64,
    /// Bytes reserved on the device after this action.
    pub reserved: u64,
}

/// How one device's clock was mapped onto the host clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calibration {
    /// Index into [`Trace::devices`].
    pub device: u32,
    /// How the pair was taken (`paired sampling`, `host clock`).
    pub method: String,
    /// Half the width of the host interval the device timestamp was known
    /// to lie in: device spans are placed within +/- this many ns.
    pub error_bound_ns: u64,
}

/// What reading another tool's file kept and what it dropped: every event
/// of the file is either imported or counted here with a reason.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImportReport {
    /// The format read (`Chrome trace (PyTorch/Kineto)`, `Chrome trace`).
    pub format: String,
    /// Events in the file.
    pub events: u64,
    /// Events imported.
    pub imported: u64,
    /// Events skipped, as (reason, count), most frequent first.
    pub skipped: Vec<(String, u64)>,
}

/// A recorded profile; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    /// [`TRACE_VERSION`] of the producer.
    pub version: u32,
    /// Devices, referenced by index.
    pub devices: Vec<TraceDevice>,
    /// Lanes, referenced by index.
    pub lanes: Vec<Lane>,
    /// Spans (any order).
    pub spans: Vec<Span>,
    /// Instants.
    pub instants: Vec<InstantEvent>,
    /// Flows.
    pub flows: Vec<Flow>,
    /// Counters.
    pub counters: Vec<Counter>,
    /// Caching-allocator events, in time order (the curves they make are
    /// the [`ALLOCATED_COUNTER`] and [`RESERVED_COUNTER`] counters).
    pub memory: Vec<MemoryEvent>,
    /// One per device with device spans.
    pub calibrations: Vec<Calibration>,
    /// Records lost (never silently): host records past a full recording
    /// buffer, and device spans a device that times could not time (its
    /// timing resources used up) or whose times could not be read.
    pub dropped: u64,
    /// Set when the trace was imported from another tool's file.
    pub import: Option<ImportReport>,
    /// The file's own time of t=0 in ns, when known: a time `t` of this
    /// trace is `origin_ns + t` on the clock of the file it was read from.
    /// For PyTorch's (Kineto's) files that is Unix-epoch time, their
    /// `baseTimeNanoseconds` plus `ts` (the time base PyTorch's memory
    /// snapshots' `time_us` also use, in microseconds); for another tool's
    /// file without `baseTimeNanoseconds`, the earliest `ts` read. Several
    /// files opened as one: the shared clock's time of t=0 when they were
    /// aligned on their clocks, the reference file's (rank 0's) when aligned on
    /// collectives, unknown when each was aligned on its own start (each
    /// file's own is in [`Ranks`]). `None` for Keel's own recordings.
    pub origin_ns: Option<i64>,
    /// Set when the trace was opened from several files (one per rank):
    /// which lanes and devices came from which file, and how the files'
    /// clocks were aligned.
    pub ranks: Option<Ranks>,
}

#[cfg(test)]
mod tests {
    use super::{Interner, Text};

    #[test]
    fn interned_texts_share_their_bytes_up_to_the_cap() {
        let mut names = Interner::new(2);
        let a = names.intern("vector_add");
        let b = names.intern(&String::from("vector_add"));
        assert!(std::ptr::eq(a.as_str(), b.as_str()), "one allocation");
        assert_eq!(a, "vector_add");
        let _ = names.intern("saxpy");
        // The table is full: a third text is made fresh each time.
        let c = names.intern("spin");
        let d = names.intern("spin");
        assert_eq!(c, d);
        assert!(!std::ptr::eq(c.as_str(), d.as_str()), "not remembered");
        // Earlier texts are still shared.
        assert!(std::ptr::eq(
            names.intern("saxpy").as_str(),
            names.intern("saxpy").as_str()
        ));
    }

    #[test]
    fn text_reads_and_compares_as_str() {
        let t = Text::from("copy host->device");
        assert_eq!(t, "copy host->device");
        assert_eq!(t, String::from("copy host->device"));
        assert!("copy host->device" == t);
        assert!(t.starts_with("copy"));
        assert_eq!(
            format!("{t} / {t:?}"),
            "copy host->device / \"copy host->device\""
        );
        assert_eq!(Text::default(), "");
    }
}
