//! The importer of other tools' Chrome trace files (no `keel` object),
//! PyTorch's profiler (Kineto) first: lenient, and losing nothing silently.
//!
//! The input is scanned (`stream.rs`) and each event parsed on its own
//! into a borrowed [`RawEvent`], so no JSON tree of the file is ever held;
//! what an event gives goes straight into the [`Trace`]. Lanes are keyed by
//! (pid, tid) as met and only decided at the end, when every metadata event
//! has been read (Kineto may write a process's labels after its events):
//!
//! - A process is a GPU when its `process_labels` (Kineto: `GPU 0`) or
//!   `process_name` (`cuda:0 ...`) names one, or when it holds device
//!   events (categories `kernel`, `gpu_memcpy`, `gpu_memset`,
//!   `gpu_user_annotation`). Its threads are the device's streams; the
//!   device takes its name and properties from Kineto's top-level
//!   `deviceProperties` (matched by `id`).
//! - Every other thread is a host lane whose [`Lane::group`] is its
//!   process (`python3.10 (pid 42)`).
//! - Lanes are ordered host processes first (by `process_sort_index`, then
//!   first appearance), then devices; threads by `thread_sort_index`.
//!
//! Times: `ts`/`dur` are microseconds as numbers or numeric strings (any
//! precision, rounded to the ns); the whole trace is moved so its earliest
//! event is at 0 (Kineto writes epoch times). `displayTimeUnit` only says
//! how to display times, never how to read them.
//!
//! Events: `X`; `B`/`E` (matched per lane, innermost first, `E` args
//! merged); `i`/`I`/`R` instants (scope in the `scope` argument); `C`
//! counters (one series per numeric argument: `name` for `value`, else
//! `name.key`; a host process's counters hang on a device entry `host`
//! named after the process); `M` metadata; async `b`/`e` (matched by pid,
//! cat and id, on a lane per async name) and `n`; flows `s`/`t`/`f` matched
//! by (cat, name, id) in any file order (Kineto writes an `f` before its
//! `s`), ids as numbers or hex strings, `f`/`t` binding to the enclosing
//! slice with `"bp":"e"` and to the next slice otherwise; flows v2
//! (`bind_id` with `flow_out`/`flow_in` on slices). A flow's kind is
//! [`FlowKind::Launch`] except for event waits and Kineto's `fwdbwd`
//! (forward -> backward), which are dependencies ([`FlowKind::EventWait`]).
//!
//! PyTorch's allocator events (`[memory]` and `[OutOfMemory]` instants,
//! written with `profile_memory=True`: `Device Type`, `Device Id`, `Addr`,
//! `Bytes` (negative for a free), `Total Allocated`, `Total Reserved`)
//! become [`MemoryEvent`]s of their device (c10's device type numbers:
//! `cuda:N` is the GPU process of index N, `cpu` the host) with the
//! allocated and reserved curves. PyTorch's traces have no segments: each
//! block is its own segment ([`MemoryEvent::segment`] = `Addr`) and no
//! stream is known.
//!
//! Every element of `traceEvents` is counted either imported or skipped
//! with a reason in [`Trace::import`]. Spans that overlap on one lane
//! without nesting are kept (viewers stack them in extra rows).

use std::borrow::Cow;
use std::collections::{HashMap, hash_map::Entry};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::decode::short;
use super::stream::{self, Ending, Sink};
use crate::error::Result;
use crate::model::{
    ALLOCATED_COUNTER, Counter, Flow, FlowEnd, FlowKind, ImportReport, InstantEvent, Interner,
    Lane, LaneKind, MemoryAction, MemoryEvent, RESERVED_COUNTER, Span, SpanKind, TRACE_VERSION,
    Text, Trace, TraceDevice,
};

/// What one import produced.
pub(crate) struct Imported {
    /// The trace, with its [`ImportReport`].
    pub trace: Trace,
    /// The file had a top-level `keel` object: it is Keel's own and should
    /// be read exactly instead.
    pub keel: bool,
    /// `distributedInfo.rank`, when the file has one.
    pub rank: Option<i64>,
}

/// Imports another tool's JSON trace read from `input`; `compression`
/// names how it was compressed, for the report (`None`: plain).
///
/// The input is read (and decompressed) on a thread of its own, a few
/// blocks ahead of the parse, so decompression and parsing overlap.
pub(crate) fn import(
    input: impl std::io::Read + Send,
    compression: Option<&str>,
) -> Result<Imported> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        scope.spawn(move || read_ahead(input, &tx));
        let mut im = Importer::default();
        let ending = stream::scan(
            BlockReader {
                blocks: rx,
                block: Vec::new(),
                pos: 0,
            },
            &mut im,
        )?;
        Ok(im.finish(ending, compression))
    })
}

/// Bytes read ahead at a time.
const READ_AHEAD: usize = 1 << 20;

/// Reads `input` in blocks into `tx` until its end, an error, or the
/// receiver going away (the parse stopped).
fn read_ahead(
    mut input: impl std::io::Read,
    tx: &std::sync::mpsc::SyncSender<std::io::Result<Vec<u8>>>,
) {
    // Small first blocks, so small inputs cost little.
    let mut size = 64 << 10;
    loop {
        let mut block = vec![0; size];
        size = (size * 2).min(READ_AHEAD);
        let mut n = 0;
        while n < block.len() {
            match input.read(&mut block[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        if n == 0 {
            return;
        }
        block.truncate(n);
        if tx.send(Ok(block)).is_err() {
            return;
        }
    }
}

/// The blocks [`read_ahead`] sends, as a reader.
struct BlockReader {
    blocks: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
}

impl std::io::Read for BlockReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.block.len() {
            match self.blocks.recv() {
                Ok(block) => {
                    self.block = block?;
                    self.pos = 0;
                }
                // The reader is done.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// One event as the file has it; fields other tools add are ignored.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pid: Option<Lite<'a>>,
    #[serde(borrow, default)]
    tid: Option<Lite<'a>>,
    #[serde(borrow, default)]
    ts: Option<Lite<'a>>,
    #[serde(borrow, default)]
    dur: Option<Lite<'a>>,
    #[serde(borrow, default)]
    id: Option<Lite<'a>>,
    #[serde(borrow, default)]
    id2: Option<Lite<'a>>,
    #[serde(borrow, default)]
    bind_id: Option<Lite<'a>>,
    #[serde(borrow, default)]
    flow_in: Option<Lite<'a>>,
    #[serde(borrow, default)]
    flow_out: Option<Lite<'a>>,
    #[serde(borrow, default)]
    bp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    s: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    args: Option<Args<'a>>,
}

/// A JSON value as the file has it, borrowed: numbers keep their text
/// (exact microseconds), strings are unescaped only when they hold an
/// escape, arrays and objects stay text.
#[derive(Debug, Clone)]
enum Lite<'a> {
    Num(&'a str),
    Str(Cow<'a, str>),
    Bool(bool),
    Null,
    /// An array or object, as written.
    Other(&'a str),
}

impl<'de: 'a, 'a> Deserialize<'de> for Lite<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw: &'a RawValue = Deserialize::deserialize(d)?;
        let text = raw.get();
        Ok(match text.as_bytes().first() {
            Some(b'"') => {
                let inner = &text[1..text.len() - 1];
                if inner.contains('\\') {
                    Lite::Str(Cow::Owned(
                        serde_json::from_str(text).map_err(serde::de::Error::custom)?,
                    ))
                } else {
                    Lite::Str(Cow::Borrowed(inner))
                }
            }
            Some(b't') => Lite::Bool(true),
            Some(b'f') => Lite::Bool(false),
            Some(b'n') => Lite::Null,
            Some(b'[' | b'{') => Lite::Other(text),
            _ => Lite::Num(text),
        })
    }
}

impl<'a> Lite<'a> {
    fn as_i64(&self) -> Option<i64> {
        match self {
            Lite::Num(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// A number, or a string holding one.
    fn as_f64(&self) -> Option<f64> {
        match self {
            Lite::Num(n) => n.parse().ok(),
            Lite::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The value as an argument's text: strings as they are, anything else
    /// as compact JSON.
    fn into_text(self) -> String {
        self.text().into_owned()
    }

    /// [`into_text`](Self::into_text), borrowed where it can be.
    fn text(self) -> Cow<'a, str> {
        match self {
            Lite::Str(s) => s,
            Lite::Num(n) => Cow::Borrowed(n),
            Lite::Bool(true) => Cow::Borrowed("true"),
            Lite::Bool(false) => Cow::Borrowed("false"),
            Lite::Null => Cow::Borrowed("null"),
            Lite::Other(text) => Cow::Owned(compact(text)),
        }
    }
}

/// JSON text without the whitespace outside its strings.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escape) = (false, false);
    for c in text.chars() {
        if in_string {
            if escape {
                escape = false;
            } else if c == '\\' {
                escape = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_ascii_whitespace() {
            continue;
        }
        out.push(c);
    }
    out
}

/// An event's `args`, in file order, borrowed where possible.
struct Args<'a>(Vec<(Cow<'a, str>, Lite<'a>)>);

impl<'a> Args<'a> {
    fn get(&self, key: &str) -> Option<&Lite<'a>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// A map key, borrowed when it has no escapes.
struct KeyStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for KeyStr<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = KeyStr<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<KeyStr<'a>, E> {
                Ok(KeyStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<KeyStr<'a>, E> {
                Ok(KeyStr(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Args<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Args<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Args<'a>, M::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<KeyStr<'a>, Lite<'a>>()? {
                    out.push((k.0, v));
                }
                Ok(Args(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A pid, tid or id: numbers and strings both occur.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Num(i64),
    Str(Box<str>),
}

impl Key {
    fn of(v: &Lite<'_>) -> Option<Key> {
        match v {
            Lite::Num(n) => n
                .parse::<i64>()
                .ok()
                .or_else(|| n.parse::<u64>().ok().map(|u| u as i64))
                .map(Key::Num)
                .or_else(|| Some(Key::Str(short(n).into()))),
            Lite::Str(s) => {
                let t = s.trim();
                if let Ok(n) = t.parse::<i64>() {
                    Some(Key::Num(n))
                } else if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))
                    && let Ok(n) = u64::from_str_radix(hex, 16)
                {
                    Some(Key::Num(n as i64))
                } else {
                    Some(Key::Str(short(s).into()))
                }
            }
            Lite::Bool(b) => Some(Key::Num(i64::from(*b))),
            _ => None,
        }
    }

    /// A flow or async id: `id`, or `id2` (`{"local": ..}` / `{"global": ..}`).
    fn id(ev: &RawEvent<'_>) -> Option<Key> {
        if let Some(id) = ev.id.as_ref().and_then(Key::of) {
            return Some(id);
        }
        let Some(Lite::Other(id2)) = ev.id2.as_ref() else {
            return None;
        };
        let id2: Args<'_> = serde_json::from_str(id2).ok()?;
        id2.get("global")
            .or_else(|| id2.get("local"))
            .and_then(Key::of)
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Num(n) => write!(f, "{n}"),
            Key::Str(s) => f.write_str(s),
        }
    }
}

/// Microseconds (a number or a numeric string) as signed ns.
fn ns_of(v: &Lite<'_>) -> Option<i64> {
    let text = match v {
        Lite::Num(n) => n,
        Lite::Str(s) => s.trim(),
        _ => return None,
    };
    parse_ns(text)
}

/// Decimal microseconds into ns, exactly for plain decimals, through f64
/// for exponents.
fn parse_ns(text: &str) -> Option<i64> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let ns = if !int.is_empty() && digits(int) && digits(frac) {
        let mut ns: i64 = int.parse::<i64>().ok()?.checked_mul(1000)?;
        let mut scale = 100;
        for b in frac.bytes().take(3) {
            ns = ns.checked_add(i64::from(b - b'0') * scale)?;
            scale /= 10;
        }
        if frac.as_bytes().get(3).is_some_and(|&b| b >= b'5') {
            ns = ns.checked_add(1)?;
        }
        ns
    } else {
        let us: f64 = body.parse().ok()?;
        let ns = (us * 1000.0).round();
        if !(ns.is_finite() && (0.0..9.2e18).contains(&ns)) {
            return None;
        }
        ns as i64
    };
    Some(if neg { -ns } else { ns })
}

/// The kind of an imported span: by Kineto category, then by the CUDA
/// call's name for runtime and driver calls.
fn span_kind(cat: &str, name: &str) -> SpanKind {
    match cat {
        "kernel" => SpanKind::Kernel,
        "gpu_memcpy" | "gpu_memset" => SpanKind::Copy,
        "gpu_memory" => SpanKind::Alloc,
        "cuda_sync" => SpanKind::Sync,
        "cuda_event" => SpanKind::EventRecord,
        "cuda_runtime" | "cuda_driver" => runtime_kind(name),
        _ => SpanKind::Annotation,
    }
}

/// The kind of a CUDA runtime or driver call, by name.
fn runtime_kind(name: &str) -> SpanKind {
    let n = name
        .trim_start_matches("cuda")
        .trim_start_matches("cu")
        .trim_start_matches("hip");
    if n.contains("Launch") {
        SpanKind::Kernel
    } else if n.starts_with("Memcpy") || n.starts_with("Memset") {
        SpanKind::Copy
    } else if n.starts_with("Malloc") || n.starts_with("MemAlloc") || n.starts_with("HostAlloc") {
        SpanKind::Alloc
    } else if n.starts_with("Free") || n.starts_with("MemFree") {
        SpanKind::Free
    } else if n.starts_with("EventRecord") {
        SpanKind::EventRecord
    } else if n.starts_with("StreamWaitEvent") {
        SpanKind::Wait
    } else if n.contains("Synchronize") || n.starts_with("EventQuery") {
        SpanKind::Sync
    } else {
        SpanKind::Annotation
    }
}

/// Categories Kineto gives events that run on a GPU.
fn is_device_category(cat: &str) -> bool {
    matches!(
        cat,
        "kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation"
    )
}

/// Categories whose kind says all there is; any other is kept as a `cat`
/// argument.
fn is_known_category(cat: &str) -> bool {
    matches!(
        cat,
        "" | "kernel"
            | "gpu_memcpy"
            | "gpu_memset"
            | "gpu_memory"
            | "cuda_sync"
            | "cuda_event"
            | "cuda_runtime"
            | "cuda_driver"
            | "cpu_op"
            | "user_annotation"
            | "gpu_user_annotation"
            | "python_function"
    )
}

/// A process seen in the file.
#[derive(Default)]
struct Process {
    name: Option<String>,
    labels: Option<String>,
    sort: Option<i64>,
    /// Holds device events (Kineto's GPU categories).
    device_events: bool,
    /// `args.device` of its device events.
    device_arg: Option<i64>,
    /// First appearance.
    order: usize,
}

/// Where a lane goes: host or device, process order, thread order, as met.
type LaneOrder = (u8, i64, usize, i64, usize);

/// A lane before lanes are decided.
struct RawLane {
    pid: Key,
    tid: Key,
    /// A lane made for async events of this name.
    async_name: Option<String>,
}

#[derive(Default)]
struct Thread {
    name: Option<String>,
    sort: Option<i64>,
}

/// An open `B` event.
struct OpenB {
    span: usize,
    name: String,
}

/// An open async `b` event.
struct OpenAsync {
    lane: u32,
    name: String,
    ts: i64,
    cat: String,
    args: Vec<(String, String)>,
}

/// One event of a flow.
#[derive(Clone, Copy)]
struct FlowPoint {
    /// 0 `s`/out, 1 `t`, 2 `f`/in.
    phase: u8,
    lane: u32,
    ts: i64,
    /// Binds to the next slice starting at or after `ts`.
    next_slice: bool,
}

#[derive(Default)]
struct FlowGroup {
    kind: Option<FlowKind>,
    points: Vec<FlowPoint>,
    /// Flow v2 points come from slices, which are counted as spans.
    v2: bool,
}

/// A counter's points: (ns, value).
type Curve = Vec<(u64, i64)>;

/// A PyTorch allocator event, its device not decided yet.
struct RawMemory {
    ts: i64,
    /// c10's device type number and the device index.
    device: (i64, i64),
    action: MemoryAction,
    addr: u64,
    bytes: u64,
    allocated: u64,
    reserved: u64,
}

/// The longest list of distinct skip reasons kept; more are counted under
/// one "other" reason.
const MAX_REASONS: usize = 64;

#[derive(Default)]
struct Importer {
    trace: Trace,
    /// Span names and argument names, shared across spans.
    names: Interner,
    /// Argument values, shared where they repeat (the table fills with
    /// the first distinct values: ids that never repeat stop it growing).
    values: ValueInterner,
    events: u64,
    skipped: HashMap<String, u64>,
    /// Span start, instant and flow times are kept as wrapped `i64` ns
    /// until the end, when the earliest becomes 0.
    min_ts: Option<i64>,
    processes: HashMap<Key, Process>,
    threads: HashMap<(Key, Key), Thread>,
    lanes: Vec<RawLane>,
    lane_index: HashMap<(Key, Key), u32>,
    async_lanes: HashMap<(Key, String), u32>,
    open_b: HashMap<u32, Vec<OpenB>>,
    open_async: HashMap<(Key, String, Key), Vec<OpenAsync>>,
    flows: HashMap<(String, String, Key), FlowGroup>,
    flows_v2: HashMap<Key, FlowGroup>,
    /// Flows paired as they were read: (from, to, kind).
    paired_flows: Vec<(FlowPoint, FlowPoint, FlowKind)>,
    /// Counter series: (pid, name) -> index in `trace.counters` (the
    /// counter's device is the pid's order until the end).
    counters: HashMap<(Key, String), usize>,
    counter_pids: Vec<Key>,
    /// PyTorch's allocator events, in file order.
    memory: Vec<RawMemory>,
    /// Top-level fields.
    device_properties: Option<Value>,
    rank: Option<i64>,
    kineto: bool,
    keel: bool,
}

impl Sink for Importer {
    fn event(&mut self, bytes: Option<&[u8]>) {
        self.events += 1;
        let Some(bytes) = bytes else {
            self.skip(format!("event larger than {} MiB", stream::MAX_VALUE >> 20));
            return;
        };
        match serde_json::from_slice::<RawEvent<'_>>(bytes) {
            Ok(ev) => self.raw_event(ev),
            Err(e) => {
                let reason = if matches!(bytes.first(), Some(b'{')) {
                    if e.is_syntax() || e.is_eof() {
                        "invalid JSON in an event"
                    } else {
                        "event fields of the wrong type (ph, name, cat, bp and s must be strings, args an object)"
                    }
                } else {
                    "not a JSON object"
                };
                self.skip(reason.to_owned());
            }
        }
    }

    fn truncated_event(&mut self) {
        self.events += 1;
        self.skip("the last event, cut by the end of the file".to_owned());
    }

    fn wants(&self, key: &str) -> bool {
        matches!(
            key,
            "deviceProperties" | "distributedInfo" | "schemaVersion" | "keel"
        )
    }

    fn field(&mut self, key: &str, value: Option<&[u8]>) {
        match key {
            "keel" => self.keel = true,
            "schemaVersion" => self.kineto = true,
            "deviceProperties" => {
                self.kineto = true;
                self.device_properties = value.and_then(|v| serde_json::from_slice(v).ok());
            }
            "distributedInfo" => {
                let info: Option<Args<'_>> = value.and_then(|v| serde_json::from_slice(v).ok());
                self.rank = info
                    .as_ref()
                    .and_then(|i| i.get("rank"))
                    .and_then(Key::of)
                    .and_then(|k| match k {
                        Key::Num(n) => Some(n),
                        Key::Str(_) => None,
                    });
            }
            _ => {}
        }
    }
}

/// An [`Interner`] for argument values, remembering fewer of them.
#[derive(Debug)]
struct ValueInterner(Interner);

impl Default for ValueInterner {
    fn default() -> Self {
        ValueInterner(Interner::new(1 << 16))
    }
}

/// The user arguments of an event, values other than strings as JSON.
fn args_of(args: Option<Args<'_>>) -> Vec<(String, String)> {
    let Some(args) = args else {
        return Vec::new();
    };
    args.0
        .into_iter()
        .map(|(k, v)| (k.into_owned(), v.into_text()))
        .collect()
}

impl Importer {
    /// A span's arguments (user arguments, values other than strings as
    /// JSON), their texts shared with earlier spans'.
    fn span_args(&mut self, args: Option<Args<'_>>, extra: usize) -> Vec<(Text, Text)> {
        let Some(args) = args else {
            return Vec::with_capacity(extra);
        };
        let mut out = Vec::with_capacity(args.0.len() + extra);
        for (k, v) in args.0 {
            out.push((self.names.intern(&k), self.values.0.intern(&v.text())));
        }
        out
    }

    fn skip(&mut self, reason: String) {
        if self.skipped.len() >= MAX_REASONS && !self.skipped.contains_key(&reason) {
            *self.skipped.entry("other reasons".to_owned()).or_default() += 1;
        } else {
            *self.skipped.entry(reason).or_default() += 1;
        }
    }

    fn see_ts(&mut self, ts: i64) {
        self.min_ts = Some(self.min_ts.map_or(ts, |m| m.min(ts)));
    }

    fn process(&mut self, pid: &Key) -> &mut Process {
        let order = self.processes.len();
        self.processes
            .entry(pid.clone())
            .or_insert_with(|| Process {
                order,
                ..Process::default()
            })
    }

    fn lane(&mut self, pid: Key, tid: Key) -> u32 {
        if let Some(&lane) = self.lane_index.get(&(pid.clone(), tid.clone())) {
            return lane;
        }
        self.process(&pid);
        let index = self.lanes.len() as u32;
        self.lanes.push(RawLane {
            pid: pid.clone(),
            tid: tid.clone(),
            async_name: None,
        });
        self.lane_index.insert((pid, tid), index);
        index
    }

    fn async_lane(&mut self, pid: Key, name: &str) -> u32 {
        if let Some(&lane) = self.async_lanes.get(&(pid.clone(), name.to_owned())) {
            return lane;
        }
        self.process(&pid);
        let index = self.lanes.len() as u32;
        self.lanes.push(RawLane {
            pid: pid.clone(),
            tid: Key::Str(format!("async {name}").into()),
            async_name: Some(name.to_owned()),
        });
        self.async_lanes.insert((pid, name.to_owned()), index);
        index
    }

    /// The event's (pid, tid): a missing tid is 0.
    fn pid_tid(ev: &RawEvent<'_>) -> Option<(Key, Key)> {
        let pid = ev.pid.as_ref().and_then(Key::of)?;
        let tid = ev.tid.as_ref().and_then(Key::of).unwrap_or(Key::Num(0));
        Some((pid, tid))
    }

    fn raw_event(&mut self, ev: RawEvent<'_>) {
        let Some(ph) = ev.ph.clone() else {
            self.skip("event without \"ph\"".to_owned());
            return;
        };
        let ph = &*ph;
        match ph {
            "X" | "B" => self.slice(ev, ph == "B"),
            "E" => self.end_slice(ev),
            "i" | "I" | "R" | "n" => self.instant(ev),
            "C" => self.counter(ev),
            "M" => self.metadata(ev),
            "s" | "t" | "f" => self.flow(ev),
            "b" | "e" => self.async_event(ev),
            other => {
                let what = match other {
                    "S" | "T" | "p" | "F" => "deprecated async events",
                    "P" => "samples",
                    "N" | "O" | "D" => "object events",
                    "c" => "clock sync",
                    "V" | "v" => "memory dumps",
                    "(" | ")" => "context events",
                    _ => "",
                };
                self.skip(if what.is_empty() {
                    format!("unknown phase \"{}\"", short(other))
                } else {
                    format!("phase \"{other}\" ({what}) not shown")
                });
            }
        }
    }

    fn slice(&mut self, ev: RawEvent<'_>, begin: bool) {
        let Some((pid, tid)) = Self::pid_tid(&ev) else {
            self.skip(format!(
                "{} event without a pid",
                if begin { "B" } else { "X" }
            ));
            return;
        };
        let Some(ts) = ev.ts.as_ref().and_then(ns_of) else {
            self.skip(format!(
                "{} event without a numeric ts",
                if begin { "B" } else { "X" }
            ));
            return;
        };
        let dur = if begin {
            0
        } else {
            match ev.dur.as_ref().map(ns_of) {
                None => 0,
                Some(Some(d)) if d >= 0 => d,
                Some(_) => {
                    self.skip("X event with a negative or non-numeric dur".to_owned());
                    return;
                }
            }
        };
        let cat = ev.cat.as_deref().unwrap_or("");
        let name = ev.name.as_deref().unwrap_or("");
        if !self.kineto && (cat == "cpu_op" || cat == "cuda_runtime" || cat == "kernel") {
            self.kineto = true;
        }
        if is_device_category(cat) {
            let device_arg = ev
                .args
                .as_ref()
                .and_then(|a| a.get("device"))
                .and_then(Lite::as_i64);
            let p = self.process(&pid);
            p.device_events = true;
            if p.device_arg.is_none() {
                p.device_arg = device_arg;
            }
        }
        let lane = self.lane(pid, tid);
        self.see_ts(ts);
        if ts.checked_add(dur).is_none() {
            self.skip("X event ending past the largest time".to_owned());
            return;
        }
        let kind = span_kind(cat, name);
        let known = is_known_category(cat);
        let mut args = self.span_args(ev.args, usize::from(!known));
        if !known {
            args.push((self.names.intern("cat"), self.values.0.intern(cat)));
        }
        let span = self.trace.spans.len();
        // Flows v2: the slice itself is an end.
        if let Some(bind) = ev.bind_id.as_ref().and_then(Key::of) {
            let truthy = |v: &Option<Lite<'_>>| matches!(v, Some(Lite::Bool(true)));
            for (on, phase) in [(truthy(&ev.flow_out), 0), (truthy(&ev.flow_in), 2)] {
                if on {
                    let group = self.flows_v2.entry(bind.clone()).or_default();
                    group.v2 = true;
                    group.points.push(FlowPoint {
                        phase,
                        lane,
                        ts,
                        next_slice: false,
                    });
                }
            }
        }
        self.trace.spans.push(Span {
            lane,
            name: self.names.intern(name),
            kind,
            start_ns: ts as u64,
            dur_ns: dur as u64,
            op: 0,
            args,
        });
        if begin {
            self.open_b.entry(lane).or_default().push(OpenB {
                span,
                name: name.to_owned(),
            });
        }
    }

    fn end_slice(&mut self, ev: RawEvent<'_>) {
        let Some((pid, tid)) = Self::pid_tid(&ev) else {
            self.skip("E event without a pid".to_owned());
            return;
        };
        let Some(ts) = ev.ts.as_ref().and_then(ns_of) else {
            self.skip("E event without a numeric ts".to_owned());
            return;
        };
        let Some(&lane) = self.lane_index.get(&(pid, tid)) else {
            self.skip("E event without a matching B".to_owned());
            return;
        };
        let stack = self.open_b.entry(lane).or_default();
        // The innermost open B (of the same name, when the E has one).
        let at = match ev.name.as_deref() {
            Some(name) if !name.is_empty() => innermost(stack, |b| b.name == name),
            _ => stack.len().checked_sub(1),
        };
        let Some(at) = at else {
            self.skip("E event without a matching B".to_owned());
            return;
        };
        let open = stack.remove(at);
        let start = self.trace.spans.get(open.span).map(|s| s.start_ns as i64);
        let Some(dur) = start
            .and_then(|start| ts.checked_sub(start))
            .filter(|d| *d >= 0)
        else {
            // The B stays open (and is counted as such at the end).
            self.open_b.entry(lane).or_default().insert(at, open);
            self.skip("E event before its B".to_owned());
            return;
        };
        let Some(span) = self.trace.spans.get_mut(open.span) else {
            return;
        };
        span.dur_ns = dur as u64;
        for (k, v) in args_of(ev.args) {
            if !span.args.iter().any(|(j, _)| **j == *k) {
                span.args
                    .push((self.names.intern(&k), self.values.0.intern(&v)));
            }
        }
        self.see_ts(ts);
    }

    fn instant(&mut self, ev: RawEvent<'_>) {
        let ph = ev.ph.as_deref().unwrap_or("i");
        let Some(pid) = ev.pid.as_ref().and_then(Key::of).or_else(|| {
            // Global instants may leave the pid out.
            (ev.s.as_deref() == Some("g")).then_some(Key::Num(0))
        }) else {
            self.skip(format!("{ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts.as_ref().and_then(ns_of) else {
            self.skip(format!("{ph} event without a numeric ts"));
            return;
        };
        let name = ev.name.as_deref().unwrap_or("").to_owned();
        if ph != "n"
            && let Some(m) = pytorch_memory(&name, ev.args.as_ref(), ts)
        {
            self.see_ts(ts);
            self.memory.push(m);
            return;
        }
        let lane = if ph == "n" {
            let cat = ev.cat.as_deref().unwrap_or("").to_owned();
            match Key::id(&ev).and_then(|id| {
                self.open_async
                    .get(&(pid.clone(), cat, id))
                    .and_then(|s| s.last())
                    .map(|o| o.lane)
            }) {
                Some(lane) => lane,
                None => self.async_lane(pid, &name),
            }
        } else {
            let tid = ev.tid.as_ref().and_then(Key::of).unwrap_or(Key::Num(0));
            self.lane(pid, tid)
        };
        let mut args = args_of(ev.args);
        match ev.s.as_deref() {
            Some("g") => args.push(("scope".to_owned(), "global".to_owned())),
            Some("p") => args.push(("scope".to_owned(), "process".to_owned())),
            _ => {}
        }
        if let Some(cat) = ev.cat.as_deref()
            && !is_known_category(cat)
        {
            args.push(("cat".to_owned(), cat.to_owned()));
        }
        self.see_ts(ts);
        self.trace.instants.push(InstantEvent {
            lane,
            name,
            ts_ns: ts as u64,
            args,
        });
    }

    fn counter(&mut self, ev: RawEvent<'_>) {
        let Some(pid) = ev.pid.as_ref().and_then(Key::of) else {
            self.skip("C event without a pid".to_owned());
            return;
        };
        let Some(ts) = ev.ts.as_ref().and_then(ns_of) else {
            self.skip("C event without a numeric ts".to_owned());
            return;
        };
        let name = ev.name.as_deref().unwrap_or("");
        let mut points = 0;
        for (key, value) in ev.args.map(|a| a.0).into_iter().flatten() {
            let v = value.as_i64().or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.is_finite() && f.abs() < 9.2e18)
                    .map(|f| f.round() as i64)
            });
            let Some(v) = v else { continue };
            let series = if key == "value" {
                name.to_owned()
            } else {
                format!("{name}.{key}")
            };
            let index = match self.counters.get(&(pid.clone(), series.clone())) {
                Some(&i) => i,
                None => {
                    self.trace.counters.push(Counter {
                        device: 0,
                        name: series.clone(),
                        points: Vec::new(),
                    });
                    self.counter_pids.push(pid.clone());
                    let i = self.trace.counters.len() - 1;
                    self.counters.insert((pid.clone(), series), i);
                    i
                }
            };
            if let Some(c) = self.trace.counters.get_mut(index) {
                c.points.push((ts as u64, v));
                points += 1;
            }
        }
        if points == 0 {
            self.skip("C event without a numeric argument".to_owned());
            return;
        }
        self.process(&pid);
        self.see_ts(ts);
    }

    fn metadata(&mut self, ev: RawEvent<'_>) {
        let Some(pid) = ev.pid.as_ref().and_then(Key::of) else {
            self.skip("M event without a pid".to_owned());
            return;
        };
        let arg = |key: &str| ev.args.as_ref().and_then(|a| a.get(key));
        let text = |v: Option<&Lite<'_>>| v.map(|v| v.clone().into_text());
        let meta = ev.name.as_deref().unwrap_or("");
        match meta {
            "process_name" | "process_labels" | "process_sort_index" => {
                let name = text(arg("name"));
                let labels = text(arg("labels"));
                let sort = arg("sort_index").and_then(Lite::as_i64);
                let p = self.process(&pid);
                let used = match meta {
                    "process_name" if name.is_some() => {
                        p.name = name;
                        true
                    }
                    "process_labels" if labels.is_some() => {
                        p.labels = labels;
                        true
                    }
                    "process_sort_index" if sort.is_some() => {
                        p.sort = sort;
                        true
                    }
                    _ => false,
                };
                if !used {
                    self.skip(format!("{meta} metadata without its value"));
                }
            }
            "thread_name" | "thread_sort_index" => {
                let tid = ev.tid.as_ref().and_then(Key::of).unwrap_or(Key::Num(0));
                let name = text(arg("name"));
                let sort = arg("sort_index").and_then(Lite::as_i64);
                self.process(&pid);
                let t = self.threads.entry((pid, tid)).or_default();
                let used = match meta {
                    "thread_name" if name.is_some() => {
                        t.name = name;
                        true
                    }
                    "thread_sort_index" if sort.is_some() => {
                        t.sort = sort;
                        true
                    }
                    _ => false,
                };
                if !used {
                    self.skip(format!("{meta} metadata without its value"));
                }
            }
            other => self.skip(format!("metadata \"{}\" not used", short(other))),
        }
    }

    fn flow(&mut self, ev: RawEvent<'_>) {
        let ph = ev.ph.as_deref().unwrap_or("s");
        let Some((pid, tid)) = Self::pid_tid(&ev) else {
            self.skip(format!("flow {ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts.as_ref().and_then(ns_of) else {
            self.skip(format!("flow {ph} event without a numeric ts"));
            return;
        };
        let Some(id) = Key::id(&ev) else {
            self.skip(format!("flow {ph} event without an id"));
            return;
        };
        let cat = ev.cat.as_deref().unwrap_or("").to_owned();
        let name = ev.name.as_deref().unwrap_or("").to_owned();
        let kind = if cat == "event_wait" || name == "event_wait" || cat == "fwdbwd" {
            FlowKind::EventWait
        } else {
            FlowKind::Launch
        };
        if cat == "ac2g" || cat == "fwdbwd" {
            self.kineto = true;
        }
        let lane = self.lane(pid, tid);
        self.see_ts(ts);
        let phase = match ph {
            "s" => 0,
            "t" => 1,
            _ => 2,
        };
        let point = FlowPoint {
            phase,
            lane,
            ts,
            next_slice: phase != 0 && ev.bp.as_deref() != Some("e"),
        };
        let ac2g = cat == "ac2g";
        match self.flows.entry((cat, name, id)) {
            Entry::Vacant(slot) => {
                slot.insert(FlowGroup {
                    kind: Some(kind),
                    points: vec![point],
                    v2: false,
                });
            }
            Entry::Occupied(mut group) => {
                group.get_mut().points.push(point);
                // Kineto's launch flows (ids are correlation ids, one s and
                // one f each, no steps) are paired as soon as both ends are
                // read, so a big trace never holds them all unpaired.
                if ac2g
                    && let [a, b] = group.get().points[..]
                    && a.phase + b.phase == 2
                    && a.phase != 1
                {
                    group.remove();
                    let (from, to) = if a.phase == 0 { (a, b) } else { (b, a) };
                    self.paired_flows.push((from, to, kind));
                }
            }
        }
    }

    fn async_event(&mut self, ev: RawEvent<'_>) {
        let ph = ev.ph.as_deref().unwrap_or("b");
        let Some(pid) = ev.pid.as_ref().and_then(Key::of) else {
            self.skip(format!("async {ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts.as_ref().and_then(ns_of) else {
            self.skip(format!("async {ph} event without a numeric ts"));
            return;
        };
        let Some(id) = Key::id(&ev) else {
            self.skip(format!("async {ph} event without an id"));
            return;
        };
        let cat = ev.cat.as_deref().unwrap_or("").to_owned();
        let name = ev.name.as_deref().unwrap_or("").to_owned();
        let key = (pid.clone(), cat.clone(), id);
        if ph == "b" {
            let lane = match self.open_async.get(&key).and_then(|s| s.last()) {
                Some(outer) => outer.lane,
                None => self.async_lane(pid, &name),
            };
            self.see_ts(ts);
            self.open_async.entry(key).or_default().push(OpenAsync {
                lane,
                name,
                ts,
                cat,
                args: args_of(ev.args),
            });
            return;
        }
        let stack = self.open_async.entry(key).or_default();
        let at = innermost(stack, |o| o.name == name);
        let Some((at, dur)) = at.and_then(|at| {
            let dur = ts.checked_sub(stack.get(at)?.ts).filter(|d| *d >= 0)?;
            Some((at, dur))
        }) else {
            self.skip("async e event without a matching b".to_owned());
            return;
        };
        let open = stack.remove(at);
        let mut args = open.args;
        for (k, v) in args_of(ev.args) {
            if !args.iter().any(|(j, _)| *j == k) {
                args.push((k, v));
            }
        }
        if !is_known_category(&open.cat) {
            args.push(("cat".to_owned(), open.cat.clone()));
        }
        let args = args
            .iter()
            .map(|(k, v)| (self.names.intern(k), self.values.0.intern(v)))
            .collect();
        self.see_ts(ts);
        self.trace.spans.push(Span {
            lane: open.lane,
            name: self.names.intern(&open.name),
            kind: span_kind(&open.cat, ""),
            start_ns: open.ts as u64,
            dur_ns: dur as u64,
            op: 0,
            args,
        });
    }

    /// Decides lanes, devices, flows and times; fills the report.
    fn finish(mut self, ending: Ending, compression: Option<&str>) -> Imported {
        // Open B events: spans that never ended are dropped and counted.
        let mut unended: Vec<usize> = self
            .open_b
            .values()
            .flat_map(|s| s.iter().map(|b| b.span))
            .collect();
        let open_async: u64 = self.open_async.values().map(|s| s.len() as u64).sum();
        for _ in 0..open_async {
            self.skip("async b event without a matching e".to_owned());
        }
        if !unended.is_empty() {
            for _ in 0..unended.len() {
                self.skip("B event without a matching E".to_owned());
            }
            unended.sort_unstable();
            let mut i = 0;
            let mut next = 0;
            self.trace.spans.retain(|_| {
                let keep = unended.get(next) != Some(&i);
                if !keep {
                    next += 1;
                }
                i += 1;
                keep
            });
        }

        // Devices: processes that are GPUs.
        let mut devices: Vec<(Key, Option<i64>)> = Vec::new();
        let mut device_of: HashMap<Key, u32> = HashMap::new();
        let mut procs: Vec<(&Key, &Process)> = self.processes.iter().collect();
        procs.sort_by_key(|(_, p)| p.order);
        for (pid, p) in &procs {
            let from_label = p.labels.as_deref().and_then(gpu_label);
            let from_name = p.name.as_deref().and_then(device_name);
            if from_label.is_some() || from_name.is_some() || p.device_events {
                let index = from_label
                    .or_else(|| from_name.as_ref().and_then(|d| d.1))
                    .or(p.device_arg)
                    .or(match pid {
                        Key::Num(n) if (0..1024).contains(n) => Some(*n),
                        _ => None,
                    });
                device_of.insert((*pid).clone(), devices.len() as u32);
                devices.push(((*pid).clone(), index));
                let (device, name) = match from_name {
                    Some((device, _, rest)) => (device, rest),
                    None => match index {
                        Some(i) => (format!("cuda:{i}"), format!("GPU {i}")),
                        None => (format!("gpu (pid {pid})"), format!("GPU (pid {pid})")),
                    },
                };
                let mut device = TraceDevice {
                    device,
                    name,
                    properties: Vec::new(),
                };
                if let Some(props) = index.and_then(|i| self.properties(i)) {
                    if let Some(name) = props
                        .iter()
                        .find(|(k, _)| k == "name")
                        .map(|(_, v)| v.clone())
                    {
                        device.name = name;
                    }
                    device.properties = props;
                }
                self.trace.devices.push(device);
            }
        }
        let process_label = |pid: &Key, p: Option<&Process>| -> String {
            match p.and_then(|p| p.name.as_deref()) {
                Some(name) => format!("{name} (pid {pid})"),
                None => format!("pid {pid}"),
            }
        };
        // Counters of host processes: a device entry per process.
        let mut host_devices: HashMap<Key, u32> = HashMap::new();
        for (i, pid) in self.counter_pids.iter().enumerate() {
            let device = match device_of.get(pid) {
                Some(&d) => d,
                None => *host_devices.entry(pid.clone()).or_insert_with(|| {
                    self.trace.devices.push(TraceDevice {
                        device: "host".to_owned(),
                        name: process_label(pid, self.processes.get(pid)),
                        properties: Vec::new(),
                    });
                    (self.trace.devices.len() - 1) as u32
                }),
            };
            if let Some(c) = self.trace.counters.get_mut(i) {
                c.device = device;
            }
        }

        // PyTorch's allocator events: their devices, then the curves.
        let mut memory_devices: HashMap<(i64, i64), u32> = HashMap::new();
        let mut memory = std::mem::take(&mut self.memory);
        memory.sort_by_key(|m| m.ts);
        let min_ts = self.min_ts.unwrap_or(0);
        for m in memory {
            let device = match memory_devices.get(&m.device) {
                Some(&d) => d,
                None => {
                    let (ty, index) = m.device;
                    let gpu = (ty == 1)
                        .then(|| devices.iter().position(|(_, i)| *i == Some(index)))
                        .flatten();
                    let d = match gpu {
                        Some(d) => d as u32,
                        None => {
                            let (device, name) = memory_device_name(ty, index);
                            self.trace.devices.push(TraceDevice {
                                device,
                                name,
                                properties: Vec::new(),
                            });
                            (self.trace.devices.len() - 1) as u32
                        }
                    };
                    memory_devices.insert(m.device, d);
                    d
                }
            };
            self.trace.memory.push(MemoryEvent {
                ts_ns: m.ts.wrapping_sub(min_ts) as u64,
                device,
                action: m.action,
                addr: m.addr,
                segment: m.addr,
                bytes: m.bytes,
                stream: None,
                small_pool: false,
                allocated: m.allocated,
                reserved: m.reserved,
            });
        }
        let mut curves: Vec<(u32, [Curve; 2])> = Vec::new();
        for m in &self.trace.memory {
            let i = match curves.iter().position(|c| c.0 == m.device) {
                Some(i) => i,
                None => {
                    curves.push((m.device, [Vec::new(), Vec::new()]));
                    curves.len() - 1
                }
            };
            let [allocated, reserved] = &mut curves[i].1;
            for (points, v) in [(allocated, m.allocated), (reserved, m.reserved)] {
                let v = i64::try_from(v).unwrap_or(i64::MAX);
                if points.last().is_none_or(|p| p.1 != v) {
                    points.push((m.ts_ns, v));
                }
            }
        }
        for (device, [allocated, reserved]) in curves {
            for (name, points) in [(ALLOCATED_COUNTER, allocated), (RESERVED_COUNTER, reserved)] {
                self.trace.counters.push(Counter {
                    device,
                    name: name.to_owned(),
                    points,
                });
            }
        }

        // Lanes: decided, then ordered.
        let mut used_threads = std::collections::HashSet::new();
        let mut lanes: Vec<(Lane, LaneOrder)> = Vec::new();
        for (i, raw) in self.lanes.iter().enumerate() {
            let process = self.processes.get(&raw.pid);
            let thread = self.threads.get(&(raw.pid.clone(), raw.tid.clone()));
            let p_order = process.map_or(0, |p| p.order);
            let p_sort = process.and_then(|p| p.sort).unwrap_or(p_order as i64);
            let t_sort = thread.and_then(|t| t.sort).unwrap_or(match raw.tid {
                Key::Num(n) => n,
                Key::Str(_) => i64::MAX,
            });
            let name = thread
                .and_then(|t| t.name.as_deref())
                .map(|n| n.trim().to_owned());
            let lane = match (device_of.get(&raw.pid), raw.async_name.is_none()) {
                (Some(&device), true) => {
                    let stream = match raw.tid {
                        Key::Num(n) => n,
                        Key::Str(_) => i as i64,
                    };
                    Lane {
                        kind: LaneKind::Stream {
                            device,
                            stream,
                            thread: 0,
                        },
                        name: name.unwrap_or_else(|| format!("stream {}", raw.tid)),
                        group: String::new(),
                    }
                }
                _ => {
                    let thread = match raw.tid {
                        Key::Num(n) if n >= 0 && used_threads.insert(n as u64) => n as u64,
                        _ => (1 << 48) + i as u64,
                    };
                    let name = match &raw.async_name {
                        Some(a) => format!("async: {a}"),
                        None => name.unwrap_or_else(|| format!("thread {}", raw.tid)),
                    };
                    Lane {
                        kind: LaneKind::Host { thread },
                        name,
                        group: process_label(&raw.pid, process),
                    }
                }
            };
            let key = match lane.kind {
                LaneKind::Host { .. } => (0, p_sort, p_order, t_sort, i),
                LaneKind::Stream { device, stream, .. } => (1, i64::from(device), 0, stream, i),
            };
            lanes.push((lane, key));
        }
        let mut order: Vec<usize> = (0..lanes.len()).collect();
        order.sort_by_key(|&i| lanes[i].1);
        let mut new_index = vec![0u32; lanes.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new as u32;
        }
        let mut slots: Vec<Option<Lane>> = lanes.into_iter().map(|(l, _)| Some(l)).collect();
        self.trace.lanes = order.iter().filter_map(|&i| slots[i].take()).collect();
        let remap = |lane: u32| new_index.get(lane as usize).copied().unwrap_or(lane);

        // Times: the earliest event at 0.
        let min = self.min_ts.unwrap_or(0);
        let rebase = |t: u64| (t as i64).wrapping_sub(min) as u64;
        for span in &mut self.trace.spans {
            span.lane = remap(span.lane);
            span.start_ns = rebase(span.start_ns);
        }
        for instant in &mut self.trace.instants {
            instant.lane = remap(instant.lane);
            instant.ts_ns = rebase(instant.ts_ns);
        }
        // (The memory curves, after the C events' counters, are placed.)
        let from_c_events = self.counter_pids.len();
        for counter in &mut self.trace.counters[..from_c_events] {
            for p in &mut counter.points {
                p.0 = rebase(p.0);
            }
            counter.points.sort_by_key(|p| p.0);
        }

        // Flows: per lane, span starts for binding to the next slice.
        let mut starts: Vec<Vec<u64>> = vec![Vec::new(); self.trace.lanes.len()];
        for span in &self.trace.spans {
            if let Some(s) = starts.get_mut(span.lane as usize) {
                s.push(span.start_ns);
            }
        }
        for s in &mut starts {
            s.sort_unstable();
        }
        let end_of = |p: &FlowPoint| -> FlowEnd {
            let lane = remap(p.lane);
            let mut ts = (p.ts.wrapping_sub(min)) as u64;
            if p.next_slice
                && let Some(s) = starts.get(lane as usize)
            {
                let at = s.partition_point(|&x| x < ts);
                if let Some(&next) = s.get(at) {
                    ts = next;
                }
            }
            FlowEnd { lane, ts_ns: ts }
        };
        let mut groups: Vec<FlowGroup> = std::mem::take(&mut self.flows).into_values().collect();
        groups.extend(std::mem::take(&mut self.flows_v2).into_values());
        let mut unpaired = 0u64;
        let mut flows: Vec<(FlowEnd, FlowEnd, FlowKind)> = std::mem::take(&mut self.paired_flows)
            .iter()
            .map(|(a, b, kind)| (end_of(a), end_of(b), *kind))
            .collect();
        for mut g in groups {
            let kind = g.kind.unwrap_or(FlowKind::Launch);
            let total = g.points.len() as u64;
            let starts_n = g.points.iter().filter(|p| p.phase == 0).count();
            let ends_n = g.points.iter().filter(|p| p.phase == 2).count();
            let mut used = vec![false; g.points.len()];
            if g.points.len() == 2 && starts_n == 1 && ends_n == 1 {
                // The usual case, whatever the file order or clock skew.
                g.points.sort_by_key(|p| p.phase);
                flows.push((end_of(&g.points[0]), end_of(&g.points[1]), kind));
                used = vec![true; 2];
            } else {
                // Chains in time order: s, then t steps, then f.
                g.points.sort_by_key(|p| (p.ts, p.phase));
                let mut current: Option<usize> = None;
                for (j, p) in g.points.iter().enumerate() {
                    if p.phase == 0 {
                        current = Some(j);
                    } else if let Some(c) = current {
                        flows.push((end_of(&g.points[c]), end_of(p), kind));
                        used[c] = true;
                        used[j] = true;
                        current = (p.phase == 1).then_some(j);
                    }
                }
            }
            let used = used.iter().filter(|&&u| u).count() as u64;
            if g.v2 {
                // The ends are slices, already counted.
                continue;
            }
            unpaired += total - used;
        }
        for _ in 0..unpaired {
            self.skip("flow event without a matching start or finish".to_owned());
        }
        flows.sort_by_key(|f| (f.0.ts_ns, f.0.lane, f.1.ts_ns));
        self.trace.flows = flows
            .into_iter()
            .enumerate()
            .map(|(i, (from, to, kind))| Flow {
                id: i as u64 + 1,
                kind,
                from,
                to,
            })
            .collect();

        // The report.
        let skipped_total: u64 = self.skipped.values().sum();
        let mut skipped: Vec<(String, u64)> = self.skipped.into_iter().collect();
        skipped.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut format = if self.kineto {
            "Chrome trace (PyTorch/Kineto)".to_owned()
        } else {
            "Chrome trace".to_owned()
        };
        if let Some(c) = compression {
            format.push_str(", ");
            format.push_str(c);
        }
        if ending == Ending::Unterminated {
            format.push_str(", unterminated");
        }
        self.trace.version = TRACE_VERSION;
        self.trace.import = Some(ImportReport {
            format,
            events: self.events,
            imported: self.events.saturating_sub(skipped_total),
            skipped,
        });
        Imported {
            trace: self.trace,
            keel: self.keel,
            rank: self.rank,
        }
    }

    /// Kineto's `deviceProperties` entry with `id` `index`, as pairs.
    fn properties(&self, index: i64) -> Option<Vec<(String, String)>> {
        let list = self.device_properties.as_ref()?.as_array()?;
        let entry = list
            .iter()
            .find(|d| d.get("id").and_then(Value::as_i64) == Some(index))?
            .as_object()?;
        Some(
            entry
                .iter()
                .filter(|(k, _)| k.as_str() != "id")
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        )
    }
}

/// A PyTorch allocator event: a `[memory]` (block allocated, `Bytes` > 0,
/// or freed, `Bytes` < 0) or `[OutOfMemory]` instant with numeric `Bytes`
/// (missing totals and addresses read as 0).
fn pytorch_memory(name: &str, args: Option<&Args<'_>>, ts: i64) -> Option<RawMemory> {
    if name != "[memory]" && name != "[OutOfMemory]" {
        return None;
    }
    let args = args?;
    let int = |key: &str| {
        args.get(key).and_then(|v| {
            v.as_i64().or_else(|| {
                v.as_f64()
                    .filter(|f| f.is_finite() && f.abs() < 9.2e18)
                    .map(|f| f.round() as i64)
            })
        })
    };
    let bytes = int("Bytes")?;
    let action = match (name, bytes < 0) {
        ("[OutOfMemory]", _) => MemoryAction::Oom,
        (_, false) => MemoryAction::Alloc,
        (_, true) => MemoryAction::Free,
    };
    let unsigned = |key: &str| int(key).map_or(0, |v| v.max(0) as u64);
    // Older traces have no `Device Type`: a device index is a GPU's, -1
    // the CPU's.
    let index = int("Device Id").unwrap_or(-1);
    let ty = int("Device Type").unwrap_or(if index >= 0 { 1 } else { 0 });
    Some(RawMemory {
        ts,
        device: (ty, index),
        action,
        addr: if action == MemoryAction::Oom {
            0
        } else {
            unsigned("Addr")
        },
        bytes: bytes.unsigned_abs(),
        allocated: unsigned("Total Allocated"),
        reserved: unsigned("Total Reserved"),
    })
}

/// The device string and name of a device only PyTorch's allocator events
/// name (c10's device type number, index): `cpu`, `cuda:1`, ...
fn memory_device_name(ty: i64, index: i64) -> (String, String) {
    let kind = match ty {
        0 => return ("cpu".to_owned(), "CPU".to_owned()),
        1 => "cuda",
        6 => "hip",
        10 => "vulkan",
        12 => "xpu",
        13 => "mps",
        20 => "privateuseone",
        _ => {
            return (
                format!("device type {ty}:{index}"),
                format!("device type {ty} {index}"),
            );
        }
    };
    let name = if ty == 1 {
        format!("GPU {index}")
    } else {
        format!("{kind} {index}")
    };
    (format!("{kind}:{index}"), name)
}

/// How deep into a stack of open events an end looks for its begin's name:
/// bounded, so that a file of unmatched begins cannot make the import
/// quadratic.
const MATCH_DEPTH: usize = 64;

/// The index of the innermost open event that `matches` (within
/// [`MATCH_DEPTH`] of the top), else the top's.
fn innermost<T>(stack: &[T], matches: impl Fn(&T) -> bool) -> Option<usize> {
    let from = stack.len().saturating_sub(MATCH_DEPTH);
    stack[from..]
        .iter()
        .rposition(matches)
        .map(|i| from + i)
        .or(stack.len().checked_sub(1))
}

/// The GPU index in Kineto's `process_labels` (`GPU 0`, `GPU 1,...`).
fn gpu_label(labels: &str) -> Option<i64> {
    labels.split(',').find_map(|l| {
        let rest = l.trim().strip_prefix("GPU")?.trim();
        rest.parse().ok()
    })
}

/// A process name that names a device: `cuda:0 NVIDIA H100` (device
/// string, its index, the rest) or `GPU 0`.
fn device_name(name: &str) -> Option<(String, Option<i64>, String)> {
    let (first, rest) = name.split_once(' ').unwrap_or((name, ""));
    if let Some((ty, index)) = first.split_once(':')
        && !ty.is_empty()
        && ty.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
        && !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
    {
        return Some((first.to_owned(), index.parse().ok(), rest.to_owned()));
    }
    let index = gpu_label(name).filter(|_| name.trim_start().starts_with("GPU"))?;
    Some((format!("cuda:{index}"), Some(index), name.to_owned()))
}
