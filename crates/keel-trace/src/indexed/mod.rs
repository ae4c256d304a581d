//! Indexed trace files (`.keelidx`): traces larger than memory, opened by
//! mapping and read only where the timeline looks.
//!
//! A trace is converted once ([`convert`], or [`open_or_convert`] on
//! first open) into a file that holds the viewer's index itself: every
//! lane's depth rows as [`TraceView`] places them, each row's spans as
//! sorted arrays of starts and ends, and above each row coarser levels in
//! which spans too short to see at a resolution are merged into runs (a
//! pyramid, as map tiles are). [`IndexedTrace::open`] maps the file and
//! reads the header, the section directory and the small tables (devices,
//! lanes, instants, counters); [`IndexedTrace::window`] reads the rows of
//! one time window at one resolution, by binary search in the coarsest
//! level fine enough, and returns them as a small [`TraceView`] that the
//! timeline, search and selection analysis use as they use a whole trace.
//! Memory follows what the window shows, not the file: a row contributes
//! at most a few items per pixel column at any zoom.
//!
//! Search goes through the names: every distinct span name has its span
//! count, total time and the records of its spans (sorted, so by start), so
//! counting the matches of a query reads the name table and moving to the
//! next match is one binary search per matching name.
//!
//! # Byte layout (version 1)
//!
//! Little-endian throughout. A 64-byte header, a directory of at most 16
//! entries of 24 bytes (kind u32, 0 u32, offset u64, length u64; unused
//! entries zero), then the sections, each starting at a multiple of 8.
//!
//! ```text
//! header: "KEELIDX\0", version u32 (1), section count u32, span count u64,
//!         bounds start u64, bounds end u64, source length u64, source
//!         modification time ns u64 (both 0: none), longest flow ns u64
//! ```
//!
//! | kind | section  | body |
//! |------|----------|------|
//! | 1    | records  | per span, in start order (its id is its position): start u64, dur u64, op u64, args u64 (offset in `args`, `u64::MAX`: none), lane u32, name u32 (string id), kind u32 ([`SpanKind::ALL`] index), depth u32 (48 bytes) |
//! | 2    | args     | per span with arguments: count varint, per argument key varint (string id), value length varint, UTF-8 bytes |
//! | 3    | strings  | count u64, count + 1 offsets u64 (into the bytes), the bytes |
//! | 4    | rows     | per row of every lane: lane u32, depth u32, length u64, data offset u64 (in `rowdata`), first level u32, level count u32 (32 bytes) |
//! | 5    | levels   | per level of a row, finest first: resolution ns u64, length u64, offset u64 (in `items`) |
//! | 6    | items    | per item of a level: start u64, end u64 (the running maximum), first span u32 (position in the row), span count u32 (low 28 bits, at most 2^28 - 1; the high 4 bits the first span's kind) |
//! | 7    | rowdata  | per row: starts u64 * length, ends u64 * length (running maximum), span ids u32 * length, padded to 8 |
//! | 8    | names    | per string: span count u64, total ns u64, offset u64 (in `postings`) of its span ids |
//! | 9    | postings | span ids u32, each name's ascending |
//! | 10   | flows    | by earlier end: id u64, from ts u64, to ts u64, from lane u32, to lane u32, kind u32 (0 launch, 1 event wait), 0 u32 (40 bytes) |
//! | 11   | tables   | a [native](crate::native) trace without spans, flows and memory events, its counters without points: devices, lanes, instants, counter names, calibrations, origin, ranks |
//! | 12   | counters | per counter of the tables: offset u64 (in `points`, in points), point count u64, offset u64 (in `groups`, in groups), level count u64 (32 bytes) |
//! | 13   | points   | per point: ts u64, value i64 (16 bytes), each counter's in time order |
//! | 14   | groups   | per level of a counter (groups of 8, 64, 512, ... consecutive points, while a level has two or more), per group: its lowest point, its highest point (ts u64, value i64 each; 32 bytes) |
//!
//! Allocator events are not kept: replaying them (the Memory tab) needs the
//! trace in memory; the counters drawn from them are.
//!
//! A level at resolution `r` holds items that are one span, or a run of
//! spans (and gaps) each shorter than `r`; the levels go up by a factor 4
//! from 256 ns, and a level is stored only when it has at most three
//! quarters of the items of the last one stored.
//!
//! # Checks
//!
//! Opening checks the header, the directory (sections inside the file,
//! not overlapping, each kind once, every kind present), the sizes of the
//! fixed-width sections, every row's and level's place in its data
//! section, and the tables. What is read later (a record, a string, an
//! argument list, a span id in a row) is checked when it is read: a
//! damaged file gives an [`Error::Format`] naming the file, the place and
//! what was expected, never a panic, and nothing is allocated from a count
//! the bytes could not hold. Rows out of order give wrong pictures, not
//! errors.

mod set;
mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::view::{level_for, level_res};
pub use set::IndexedSet;
pub use write::{IndexWriter, write_trace};

use crate::error::{Error, Result};
use crate::model::{Counter, Flow, FlowEnd, FlowKind, Span, SpanKind, Text, Trace};
use crate::view::TraceView;

/// The first bytes of every indexed file.
pub const MAGIC: &[u8; 8] = b"KEELIDX\0";
/// The version this crate writes and reads.
pub const VERSION: u32 = 1;
/// The extension of indexed files (`trace.json.keelidx`).
pub const EXTENSION: &str = "keelidx";

const HEADER_LEN: usize = 64;
const ENTRY: usize = 24;
const DIRECTORY_ENTRIES: usize = 16;
const RECORD: usize = 48;
const ROW: usize = 32;
const LEVEL: usize = 24;
const ITEM: usize = 24;
const NAME: usize = 24;
const FLOW: usize = 40;
const POINT: usize = 16;
const COUNTER: usize = 32;
const GROUP: usize = 32;
const GROUP_BASE: usize = 8;
const NO_ARGS: u64 = u64::MAX;
/// The longest run an item counts (its count's low 28 bits; the high 4
/// are the kind of its first span).
const MAX_RUN: u32 = (1 << 28) - 1;

mod section {
    pub const RECORDS: u32 = 1;
    pub const ARGS: u32 = 2;
    pub const STRINGS: u32 = 3;
    pub const ROWS: u32 = 4;
    pub const LEVELS: u32 = 5;
    pub const ITEMS: u32 = 6;
    pub const ROWDATA: u32 = 7;
    pub const NAMES: u32 = 8;
    pub const POSTINGS: u32 = 9;
    pub const FLOWS: u32 = 10;
    pub const TABLES: u32 = 11;
    pub const COUNTERS: u32 = 12;
    pub const POINTS: u32 = 13;
    pub const GROUPS: u32 = 14;
    pub const COUNT: usize = 14;
    pub const NAMES_OF: [&str; COUNT] = [
        "records", "args", "strings", "rows", "levels", "items", "rowdata", "names", "postings",
        "flows", "tables", "counters", "points", "groups",
    ];
}

/// Groups in `levels` levels of groups of 8, 64, ... of `n` points.
fn group_count(n: u64, levels: u64) -> Option<u64> {
    let mut total = 0u64;
    let mut g = GROUP_BASE as u64;
    for _ in 0..levels {
        total = total.checked_add(n.div_ceil(g))?;
        g = g.checked_mul(GROUP_BASE as u64)?;
    }
    Some(total)
}

/// The size and modification time of the file an index was made from: an
/// index whose stamp differs from its source's is out of date.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    /// Bytes.
    pub len: u64,
    /// Modification time, ns since the Unix epoch.
    pub modified_ns: u64,
}

impl Stamp {
    /// The stamp of the file at `path`.
    pub fn of(path: &Path) -> Result<Stamp> {
        let m = std::fs::metadata(path)
            .map_err(|e| Error::Format(format!("could not read {}: {e}", path.display())))?;
        let modified_ns = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Stamp {
            len: m.len(),
            modified_ns,
        })
    }
}

/// Where the index of trace file `path` is kept: beside it, named
/// `<file name>.keelidx`.
pub fn index_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(EXTENSION);
    path.with_file_name(name)
}

/// Whether `bytes` (a file's first bytes) start an indexed file.
pub fn is_indexed(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Converts the trace file `input` (any format [`load_trace`](crate::load_trace)
/// reads) into an indexed file at `output`. The whole trace is read into
/// memory once; what opens the index later does not.
pub fn convert(input: &Path, output: &Path) -> Result<()> {
    let trace = crate::load_trace(input)?;
    write_trace(&trace, output, Some(Stamp::of(input)?))
}

/// Opens the index of `input` ([`index_path`]), converting the file first
/// when it has no index yet or the index is older than the file (another
/// size or modification time). Returns the index and whether it was made
/// now.
pub fn open_or_convert(input: &Path) -> Result<(IndexedTrace, bool)> {
    if is_indexed_file(input) {
        return Ok((IndexedTrace::open(input)?, false));
    }
    let path = index_path(input);
    let stamp = Stamp::of(input)?;
    if let Ok(t) = IndexedTrace::open(&path)
        && t.source() == Some(stamp)
    {
        return Ok((t, false));
    }
    let trace = crate::load_trace(input)?;
    write_trace(&trace, &path, Some(stamp))?;
    drop(trace);
    Ok((IndexedTrace::open(&path)?, true))
}

/// Whether the file at `path` is an indexed file (by its first bytes;
/// `false` when it cannot be read).
pub fn is_indexed_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAGIC.len() as u64).read_to_end(&mut head))
        .is_ok_and(|_| is_indexed(&head))
}

/// The file's bytes: mapped, or owned (for bytes that are not a file).
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Reads point `k` of a counter's window, or of its groups.
type PointAt<'a> = dyn Fn(usize) -> (u64, i64) + 'a;

/// Reads item `i` of a row's level: start, end, first span (its place
/// in the row) and span count.
type ItemAt<'a> = dyn Fn(usize) -> (u64, u64, usize, u32) + 'a;

/// One row's place in the file.
#[derive(Debug, Clone, Copy)]
struct RowInfo {
    lane: u32,
    depth: u32,
    len: usize,
    /// Byte offset of the starts in `rowdata`.
    data: usize,
    levels: (usize, usize),
}

/// One level's place in the file.
#[derive(Debug, Clone, Copy)]
struct LevelInfo {
    res: u64,
    len: usize,
    /// Byte offset in `items`.
    data: usize,
}

/// A span count and total time of one name, over the whole trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameTotal {
    /// The name.
    pub name: String,
    /// Spans with it.
    pub count: u64,
    /// Their total duration, ns.
    pub total_ns: u64,
}

/// The matches of a search ([`IndexedTrace::search`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matches {
    /// The names containing the query (string ids).
    names: Vec<u32>,
    /// Spans with one of them.
    pub total: u64,
}

/// What [`IndexedTrace::window`] reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Start of the window, ns.
    pub t0: u64,
    /// End of the window, ns.
    pub t1: u64,
    /// Nanoseconds per pixel: spans and gaps shorter than this may come
    /// merged into runs (0: every span as it is).
    pub ns_per_px: f64,
    /// Only these trace lanes (`None`: all).
    pub lanes: Option<Vec<u32>>,
    /// The most spans to read: past it the read stops with an error
    /// (bounds the memory of a window at full resolution).
    pub max_spans: usize,
}

/// A window of an indexed trace, as a small trace the viewer shows.
#[derive(Debug, Clone)]
pub struct WindowView {
    /// The window's spans in their rows (every lane of the trace, with its
    /// whole trace's row count; [`TraceView::bounds`] the whole trace's).
    pub view: TraceView,
    /// For every span of [`Self::view`], its id in the file (a record), or
    /// `None` for a run of merged spans.
    pub records: Vec<Option<u32>>,
    /// The level read ([`level_for`]).
    pub level: u32,
    /// The window read.
    pub t0: u64,
    /// The window read.
    pub t1: u64,
}

impl WindowView {
    /// The span of [`Self::view`] that is record `record`, if the window
    /// holds it.
    pub fn local(&self, record: u32) -> Option<u32> {
        self.records
            .iter()
            .position(|&r| r == Some(record))
            .map(|i| i as u32)
    }
}

/// An indexed trace file, mapped.
pub struct IndexedTrace {
    bytes: Bytes,
    name: String,
    sections: [(usize, usize); section::COUNT],
    span_count: u64,
    bounds: (u64, u64),
    source: Option<Stamp>,
    max_flow: u64,
    string_count: usize,
    rows: Vec<RowInfo>,
    /// Per trace lane, its rows (positions in `rows`), by depth.
    lane_rows: Vec<Vec<usize>>,
    levels: Vec<LevelInfo>,
    tables: Trace,
}

impl std::fmt::Debug for IndexedTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedTrace")
            .field("file", &self.name)
            .field("spans", &self.span_count)
            .field("rows", &self.rows.len())
            .finish_non_exhaustive()
    }
}

fn le64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// The first index in `0..n` where `pred` is false (`pred` true then false).
fn partition(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl IndexedTrace {
    /// Maps and opens the indexed file at `path` (see the module docs for
    /// what is checked now and what when read).
    pub fn open(path: &Path) -> Result<IndexedTrace> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::Format(format!("could not open {}: {e}", path.display())))?;
        // SAFETY: the map is read-only and lives as long as `self`; Keel
        // writes an index under another name and renames it into place, so
        // the mapped file is never changed by Keel while it is open. A file
        // changed by another program under a reader is outside what any
        // mapping can protect against (its bytes are still only read
        // through checked accessors).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::Format(format!("could not map {}: {e}", path.display())))?;
        // Windows read by binary search and scattered records: read-ahead
        // around each page touched would bring in pages no window uses.
        // Only a hint; a system without it reads the same bytes.
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Random);
        IndexedTrace::parse(Bytes::Mapped(map), path.display().to_string())
    }

    /// Opens an indexed file held in memory (`name` names it in errors).
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<IndexedTrace> {
        IndexedTrace::parse(Bytes::Owned(bytes), name.to_owned())
    }

    fn parse(bytes: Bytes, name: String) -> Result<IndexedTrace> {
        let fail = |what: String| Error::Format(format!("indexed trace {name}: {what}"));
        let b: &[u8] = &bytes;
        if b.len() < HEADER_LEN + DIRECTORY_ENTRIES * ENTRY {
            return Err(fail(format!(
                "expected at least {} bytes (header and directory), found {}",
                HEADER_LEN + DIRECTORY_ENTRIES * ENTRY,
                b.len()
            )));
        }
        if !b.starts_with(MAGIC) {
            let shown: String = b[..8]
                .iter()
                .map(|&c| c.escape_ascii().to_string())
                .collect();
            return Err(fail(format!(
                "expected the magic \"KEELIDX\\0\", found \"{shown}\""
            )));
        }
        let version = le32(b, 8);
        if version != VERSION {
            return Err(fail(format!(
                "expected format version {VERSION}, found {version}"
            )));
        }
        let count = le32(b, 12) as usize;
        if count > DIRECTORY_ENTRIES {
            return Err(fail(format!(
                "expected at most {DIRECTORY_ENTRIES} sections, found {count}"
            )));
        }
        let span_count = le64(b, 16);
        let bounds = (le64(b, 24), le64(b, 32));
        let source = Stamp {
            len: le64(b, 40),
            modified_ns: le64(b, 48),
        };
        let max_flow = le64(b, 56);
        let mut sections = [(usize::MAX, 0usize); section::COUNT];
        let mut placed: Vec<(usize, usize)> = Vec::new();
        for e in 0..count {
            let at = HEADER_LEN + e * ENTRY;
            let kind = le32(b, at);
            let (off, len) = (le64(b, at + 8), le64(b, at + 16));
            let start = HEADER_LEN + DIRECTORY_ENTRIES * ENTRY;
            let end = off.checked_add(len);
            if off < start as u64 || end.is_none_or(|e| e > b.len() as u64) {
                return Err(fail(format!(
                    "section {e} (kind {kind}) at {off}+{len} lies outside the file's sections ({start}..{})",
                    b.len()
                )));
            }
            let (off, len) = (off as usize, len as usize);
            let Some(slot) = (kind as usize)
                .checked_sub(1)
                .and_then(|k| sections.get_mut(k))
            else {
                continue;
            };
            if slot.0 != usize::MAX {
                return Err(fail(format!("section kind {kind} is listed twice")));
            }
            if placed.iter().any(|&(o, l)| off < o + l && o < off + len) {
                return Err(fail(format!(
                    "section {e} (kind {kind}) at {off}+{len} overlaps another"
                )));
            }
            placed.push((off, len));
            *slot = (off, len);
        }
        for (k, s) in sections.iter().enumerate() {
            if s.0 == usize::MAX {
                return Err(fail(format!(
                    "expected a {} section (kind {}), found none",
                    section::NAMES_OF[k],
                    k + 1
                )));
            }
        }
        let sec = |k: u32| {
            let (o, l) = sections[k as usize - 1];
            &b[o..o + l]
        };
        for (k, size) in [
            (section::RECORDS, RECORD),
            (section::ROWS, ROW),
            (section::LEVELS, LEVEL),
            (section::ITEMS, ITEM),
            (section::NAMES, NAME),
            (section::FLOWS, FLOW),
            (section::POSTINGS, 4),
            (section::COUNTERS, COUNTER),
            (section::GROUPS, GROUP),
            (section::POINTS, POINT),
        ] {
            let len = sec(k).len();
            if len % size != 0 {
                return Err(fail(format!(
                    "expected the {} section to hold {size}-byte entries, found {len} bytes",
                    section::NAMES_OF[k as usize - 1]
                )));
            }
        }
        if (sec(section::RECORDS).len() / RECORD) as u64 != span_count {
            return Err(fail(format!(
                "the header counts {span_count} spans, the records section holds {}",
                sec(section::RECORDS).len() / RECORD
            )));
        }
        let strings = sec(section::STRINGS);
        let string_count = le64(strings, 0);
        if strings.len() < 16
            || string_count > (strings.len() as u64 - 16) / 8
            || sec(section::NAMES).len() as u64 / NAME as u64 != string_count
        {
            return Err(fail(format!(
                "the strings section ({} bytes) cannot hold {string_count} strings with one name entry each",
                strings.len()
            )));
        }
        let tables = crate::native::read_native(sec(section::TABLES))
            .map_err(|e| fail(format!("its tables: {e}")))?;
        let counters = sec(section::COUNTERS);
        let points = (sec(section::POINTS).len() / POINT) as u64;
        let groups = (sec(section::GROUPS).len() / GROUP) as u64;
        if counters.len() / COUNTER != tables.counters.len() {
            return Err(fail(format!(
                "expected {} counter entries, found {}",
                tables.counters.len(),
                counters.len() / COUNTER
            )));
        }
        for (i, c) in counters.chunks_exact(COUNTER).enumerate() {
            let (off, n, goff, levels) = (le64(c, 0), le64(c, 8), le64(c, 16), le64(c, 24));
            let need = group_count(n, levels);
            if off.checked_add(n).is_none_or(|e| e > points)
                || need
                    .and_then(|g| g.checked_add(goff))
                    .is_none_or(|e| e > groups)
            {
                return Err(fail(format!(
                    "counter {i}: {n} points from point {off} and {levels} levels of groups from group {goff} lie outside the {points} points and {groups} groups"
                )));
            }
        }
        let level_bytes = sec(section::LEVELS);
        let items_len = sec(section::ITEMS).len();
        let mut levels = Vec::with_capacity(level_bytes.len() / LEVEL);
        for (i, l) in level_bytes.chunks_exact(LEVEL).enumerate() {
            let (res, len, data) = (le64(l, 0), le64(l, 8), le64(l, 16));
            if len
                .checked_mul(ITEM as u64)
                .and_then(|n| n.checked_add(data))
                .is_none_or(|e| e > items_len as u64)
            {
                return Err(fail(format!(
                    "level {i}: {len} items at byte {data} lie outside the items section ({items_len} bytes)"
                )));
            }
            levels.push(LevelInfo {
                res,
                len: len as usize,
                data: data as usize,
            });
        }
        let data_len = sec(section::ROWDATA).len() as u64;
        let mut rows = Vec::with_capacity(sec(section::ROWS).len() / ROW);
        let mut lane_rows = vec![Vec::new(); tables.lanes.len()];
        for (i, r) in sec(section::ROWS).chunks_exact(ROW).enumerate() {
            let (lane, depth, len, data) = (le32(r, 0), le32(r, 4), le64(r, 8), le64(r, 16));
            let (first, n) = (le32(r, 24) as usize, le32(r, 28) as usize);
            let Some(per_lane) = lane_rows.get_mut(lane as usize) else {
                return Err(fail(format!(
                    "row {i} names lane {lane}, the trace has {} lanes",
                    tables.lanes.len()
                )));
            };
            if len
                .checked_mul(20)
                .and_then(|n| n.checked_add(data))
                .is_none_or(|e| e > data_len)
                || first.checked_add(n).is_none_or(|e| e > levels.len())
                || depth as usize != per_lane.len()
            {
                return Err(fail(format!(
                    "row {i} (lane {lane}, depth {depth}): {len} spans at byte {data} and levels {first}+{n} do not fit the row data ({data_len} bytes) and levels ({}), or its depth does not follow the lane's previous row",
                    levels.len()
                )));
            }
            per_lane.push(rows.len());
            rows.push(RowInfo {
                lane,
                depth,
                len: len as usize,
                data: data as usize,
                levels: (first, n),
            });
        }
        Ok(IndexedTrace {
            name,
            sections,
            span_count,
            bounds: if bounds.0 < bounds.1 {
                bounds
            } else {
                (bounds.0, bounds.0.saturating_add(1))
            },
            source: (source != Stamp::default()).then_some(source),
            max_flow,
            string_count: string_count as usize,
            rows,
            lane_rows,
            levels,
            tables,
            bytes,
        })
    }

    fn sec(&self, k: u32) -> &[u8] {
        let (o, l) = self.sections[k as usize - 1];
        self.bytes.get(o..o + l).unwrap_or(&[])
    }

    fn fail(&self, what: String) -> Error {
        Error::Format(format!("indexed trace {}: {what}", self.name))
    }

    /// Spans in the file.
    pub fn span_count(&self) -> u64 {
        self.span_count
    }

    /// Earliest start and latest end over spans, instants and counters, ns.
    pub fn bounds(&self) -> (u64, u64) {
        self.bounds
    }

    /// The file it was converted from, if it says.
    pub fn source(&self) -> Option<Stamp> {
        self.source
    }

    /// The devices, lanes, instants, counters, memory events, calibrations
    /// and clock records (no spans, no flows).
    pub fn tables(&self) -> &Trace {
        &self.tables
    }

    /// The rows of trace lane `lane`.
    pub fn row_count(&self, lane: u32) -> usize {
        self.lane_rows.get(lane as usize).map_or(0, Vec::len)
    }

    /// String `id`.
    pub fn string(&self, id: u32) -> Result<&str> {
        let s = self.sec(section::STRINGS);
        let n = self.string_count;
        if id as usize >= n {
            return Err(self.fail(format!("string {id} out of range (the file has {n})")));
        }
        let base = 16 + 8 * n;
        let (a, b) = (le64(s, 8 + 8 * id as usize), le64(s, 16 + 8 * id as usize));
        let bytes = (a <= b)
            .then(|| s.get(base + a as usize..base.checked_add(b as usize)?))
            .flatten()
            .ok_or_else(|| {
                self.fail(format!(
                    "string {id} at {a}..{b} lies outside the strings section"
                ))
            })?;
        std::str::from_utf8(bytes).map_err(|_| {
            let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(40)]).into_owned();
            self.fail(format!("string {id} is not UTF-8: {shown:?}"))
        })
    }

    /// The start of record `id` (0 past the end).
    fn record_start(&self, id: u32) -> u64 {
        le64(self.sec(section::RECORDS), id as usize * RECORD)
    }

    /// Span `id` (a record) and its depth row. `names` and `keys` share the
    /// names and argument keys read before.
    fn record(&self, id: u32, names: &mut HashMap<u32, Text>) -> Result<(Span, u16)> {
        if u64::from(id) >= self.span_count {
            return Err(self.fail(format!(
                "span {id} out of range (the file has {})",
                self.span_count
            )));
        }
        let r = &self.sec(section::RECORDS)[id as usize * RECORD..][..RECORD];
        let (start, dur, op, args) = (le64(r, 0), le64(r, 8), le64(r, 16), le64(r, 24));
        let (lane, name, kind, depth) = (le32(r, 32), le32(r, 36), le32(r, 40), le32(r, 44));
        if lane as usize >= self.tables.lanes.len() || depth > u32::from(u16::MAX) {
            return Err(self.fail(format!(
                "span {id}: lane {lane} depth {depth}, the trace has {} lanes",
                self.tables.lanes.len()
            )));
        }
        let kind = *SpanKind::ALL.get(kind as usize).ok_or_else(|| {
            self.fail(format!(
                "span {id}: kind {kind}, expected 0 to {}",
                SpanKind::ALL.len() - 1
            ))
        })?;
        let mut text = |i: u32| -> Result<Text> {
            if let Some(t) = names.get(&i) {
                return Ok(t.clone());
            }
            let t = Text::from(self.string(i)?);
            names.insert(i, t.clone());
            Ok(t)
        };
        let name = text(name)?;
        let mut list = Vec::new();
        if args != NO_ARGS {
            let a = self.sec(section::ARGS);
            let bad = || {
                self.fail(format!(
                    "span {id}: its arguments at byte {args} are damaged"
                ))
            };
            let mut at = usize::try_from(args).map_err(|_| bad())?;
            let n = read_varint(a, &mut at).ok_or_else(bad)?;
            // Each argument takes at least two bytes.
            if n > (a.len().saturating_sub(at) / 2) as u64 {
                return Err(bad());
            }
            for _ in 0..n {
                let k = read_varint(a, &mut at).ok_or_else(bad)?;
                let len = read_varint(a, &mut at).ok_or_else(bad)?;
                let v = usize::try_from(len)
                    .ok()
                    .and_then(|l| a.get(at..at.checked_add(l)?))
                    .ok_or_else(bad)?;
                at += v.len();
                let v = std::str::from_utf8(v).map_err(|_| bad())?;
                let k = u32::try_from(k).map_err(|_| bad())?;
                list.push((text(k)?, Text::from(v)));
            }
        }
        Ok((
            Span {
                lane,
                name,
                kind,
                start_ns: start,
                dur_ns: dur,
                op,
                args: list,
            },
            depth as u16,
        ))
    }

    /// Span `id` (a record id: a search match, [`WindowView::records`]).
    pub fn span(&self, id: u32) -> Result<Span> {
        Ok(self.record(id, &mut HashMap::new())?.0)
    }

    /// Reads a window (see [`Window`]).
    pub fn window(&self, w: &Window) -> Result<WindowView> {
        let level = level_for(w.ns_per_px);
        let res = level_res(level);
        let (t0, t1) = (w.t0, w.t1.max(w.t0));
        let mut spans = Vec::new();
        let mut depths = Vec::new();
        let mut records = Vec::new();
        let mut names: HashMap<u32, Text> = HashMap::new();
        let mut runs: HashMap<u32, Text> = HashMap::new();
        let data = self.sec(section::ROWDATA);
        let items = self.sec(section::ITEMS);
        let all: Vec<u32>;
        let lanes: &[u32] = match &w.lanes {
            Some(l) => l,
            None => {
                all = (0..self.tables.lanes.len() as u32).collect();
                &all
            }
        };
        for &lane in lanes {
            for &ri in self
                .lane_rows
                .get(lane as usize)
                .map_or(&[][..], |v| &v[..])
            {
                let row = self.rows[ri];
                let (lf, ln) = row.levels;
                let lv = self.levels[lf..lf + ln]
                    .iter()
                    .rev()
                    .find(|l| l.res <= res && level > 0);
                let (starts, ends, ids) =
                    (row.data, row.data + 8 * row.len, row.data + 16 * row.len);
                let id_at = |i: usize| le32(data, ids + 4 * i);
                // Items: (start, end, first span in the row, count).
                let (n, item): (usize, Box<ItemAt>) = match lv {
                    Some(l) => (
                        l.len,
                        Box::new(move |i| {
                            let at = l.data + ITEM * i;
                            (
                                le64(items, at),
                                le64(items, at + 8),
                                le32(items, at + 16) as usize,
                                le32(items, at + 20),
                            )
                        }),
                    ),
                    None => (
                        row.len,
                        Box::new(move |i| {
                            (le64(data, starts + 8 * i), le64(data, ends + 8 * i), i, 1)
                        }),
                    ),
                };
                let first = partition(n, |i| item(i).1 < t0);
                let last = partition(n, |i| item(i).0 <= t1).max(first);
                for i in first..last {
                    if spans.len() >= w.max_spans {
                        return Err(self.fail(format!(
                            "the window {t0}..{t1} ns holds more than {} spans; choose a shorter one",
                            w.max_spans
                        )));
                    }
                    let (s, e, f, c) = item(i);
                    if f >= row.len {
                        return Err(self.fail(format!(
                            "row of lane {} depth {}: item {i} starts at span {f} of {}",
                            row.lane, row.depth, row.len
                        )));
                    }
                    let (kind, c) = ((c >> 28) as usize, c & MAX_RUN);
                    let mut span = if c > 1 {
                        // A run: drawn from the item alone, no record read.
                        records.push(None);
                        Span {
                            lane: row.lane,
                            name: runs
                                .entry(c)
                                .or_insert_with(|| Text::from(format!("{c} spans")))
                                .clone(),
                            kind: SpanKind::ALL.get(kind).copied().unwrap_or(SpanKind::Kernel),
                            start_ns: s,
                            dur_ns: e.saturating_sub(s),
                            op: 0,
                            args: vec![(Text::from("merged spans"), Text::from(c.to_string()))],
                        }
                    } else {
                        let id = id_at(f);
                        records.push(Some(id));
                        self.record(id, &mut names)?.0
                    };
                    span.lane = row.lane;
                    spans.push(span);
                    depths.push(row.depth.min(u32::from(u16::MAX)) as u16);
                }
            }
        }
        let t = &self.tables;
        let mut trace = Trace {
            version: t.version,
            devices: t.devices.clone(),
            lanes: t.lanes.clone(),
            calibrations: t.calibrations.clone(),
            import: t.import.clone(),
            origin_ns: t.origin_ns,
            ranks: t.ranks.clone(),
            dropped: t.dropped,
            spans,
            ..Trace::default()
        };
        let a = t.instants.partition_point(|i| i.ts_ns < t0);
        let b = t.instants.partition_point(|i| i.ts_ns <= t1);
        trace.instants = t.instants[a..b.max(a)].to_vec();
        trace.counters = t
            .counters
            .iter()
            .enumerate()
            .map(|(i, c)| Counter {
                device: c.device,
                name: c.name.clone(),
                points: self.points(i, t0, t1, w.ns_per_px),
            })
            .collect();
        if level == 0 {
            trace.flows = self.flows(t0.saturating_sub(self.max_flow), t1, w.max_spans)?;
        }
        let mut view = TraceView::from_depths(trace, &depths, self.name.clone());
        view.bounds = self.bounds;
        for li in &mut view.lanes {
            let n = self.row_count(li.lane);
            if li.rows.len() < n {
                li.rows.resize_with(n, Default::default);
            }
        }
        Ok(WindowView {
            view,
            records,
            level,
            t0,
            t1,
        })
    }

    /// The points of counter `i` in `t0..=t1` with one on each side; when
    /// more than two fall in one `ns_per_px` column, only the lowest and
    /// highest of it (what a pixel column draws).
    fn points(&self, i: usize, t0: u64, t1: u64, ns_per_px: f64) -> Vec<(u64, i64)> {
        let c = self.sec(section::COUNTERS);
        let p = self.sec(section::POINTS);
        let g = self.sec(section::GROUPS);
        let e = COUNTER * i;
        let (off, n) = (le64(c, e) as usize, le64(c, e + 8) as usize);
        let (goff, levels) = (le64(c, e + 16) as usize, le64(c, e + 24));
        let raw = |k: usize| {
            let b = (off + k) * POINT;
            (le64(p, b), le64(p, b + 8) as i64)
        };
        let a = partition(n, |k| raw(k).0 < t0).saturating_sub(1);
        let b = (partition(n, |k| raw(k).0 <= t1) + 1).min(n).max(a);
        // Past a few points per pixel column, the coarsest level of groups
        // with at least two groups a column stands in for the points.
        let columns = if ns_per_px > 0.0 {
            ((t1 - t0) as f64 / ns_per_px).max(1.0)
        } else {
            f64::INFINITY
        };
        let mut level = 0u32;
        let mut size = 1usize;
        while u64::from(level) < levels
            && ((b - a) as f64 / (size * GROUP_BASE) as f64) >= 2.0 * columns
        {
            level += 1;
            size *= GROUP_BASE;
        }
        let mut level_start = goff;
        let mut gsize = GROUP_BASE;
        for _ in 1..level {
            level_start += n.div_ceil(gsize);
            gsize *= GROUP_BASE;
        }
        // Points (level 0) or the lowest and highest of each group.
        let (count, at): (usize, Box<PointAt>) = if level == 0 {
            (b - a, Box::new(move |k| raw(a + k)))
        } else {
            let (ga, gb) = (a / size, (b.div_ceil(size)).min(n.div_ceil(size)));
            (
                2 * (gb - ga),
                Box::new(move |k| {
                    // Group k / 2: its lowest point, then its highest.
                    let at = (level_start + ga + k / 2) * GROUP + (k % 2) * 16;
                    (le64(g, at), le64(g, at + 8) as i64)
                }),
            )
        };
        let mut sorted: Vec<(u64, i64)> = (0..count).map(&at).collect();
        if level > 0 {
            sorted.sort_unstable_by_key(|p| p.0);
        }
        let column = ns_per_px.max(1.0);
        let mut out: Vec<(u64, i64)> = Vec::new();
        let (a, b) = (0, sorted.len());
        let at = |k: usize| sorted[k];
        let mut k = a;
        while k < b {
            let first = at(k);
            let col = ((first.0.saturating_sub(t0)) as f64 / column) as u64;
            let (mut lo, mut hi, mut last) = (first, first, first);
            let mut j = k + 1;
            while j < b {
                let q = at(j);
                if ((q.0.saturating_sub(t0)) as f64 / column) as u64 != col {
                    break;
                }
                if q.1 < lo.1 {
                    lo = q;
                }
                if q.1 > hi.1 {
                    hi = q;
                }
                last = q;
                j += 1;
            }
            if j - k <= 2 || ns_per_px <= 0.0 {
                out.extend((k..j).map(at));
            } else {
                // First, lowest and highest in time order, and the last
                // (the value the next column starts from).
                let mut col_points = vec![first, lo, hi, last];
                col_points.sort_unstable();
                col_points.dedup();
                out.extend(col_points);
            }
            k = j;
        }
        out
    }

    /// Flows whose earlier end lies in `t0..=t1`, at most `max`.
    fn flows(&self, t0: u64, t1: u64, max: usize) -> Result<Vec<Flow>> {
        let f = self.sec(section::FLOWS);
        let n = f.len() / FLOW;
        let first = |i: usize| le64(f, i * FLOW + 8).min(le64(f, i * FLOW + 16));
        let a = partition(n, |i| first(i) < t0);
        let b = partition(n, |i| first(i) <= t1).max(a);
        let lanes = self.tables.lanes.len() as u32;
        let mut out = Vec::with_capacity((b - a).min(max));
        for i in a..b.min(a.saturating_add(max)) {
            let at = i * FLOW;
            let (from_lane, to_lane, kind) = (le32(f, at + 24), le32(f, at + 28), le32(f, at + 32));
            if from_lane >= lanes || to_lane >= lanes || kind > 1 {
                return Err(self.fail(format!(
                    "flow {i}: lanes {from_lane} and {to_lane}, kind {kind}; expected lanes below {lanes} and kind 0 or 1"
                )));
            }
            out.push(Flow {
                id: le64(f, at),
                kind: if kind == 0 {
                    FlowKind::Launch
                } else {
                    FlowKind::EventWait
                },
                from: FlowEnd {
                    lane: from_lane,
                    ts_ns: le64(f, at + 8),
                },
                to: FlowEnd {
                    lane: to_lane,
                    ts_ns: le64(f, at + 16),
                },
            });
        }
        Ok(out)
    }

    /// Every span name with its count and total time over the whole trace,
    /// longest total first.
    pub fn name_totals(&self) -> Result<Vec<NameTotal>> {
        let names = self.sec(section::NAMES);
        let mut out = Vec::new();
        for i in 0..self.string_count {
            let count = le64(names, i * NAME);
            if count > 0 {
                out.push(NameTotal {
                    name: self.string(i as u32)?.to_owned(),
                    count,
                    total_ns: le64(names, i * NAME + 8),
                });
            }
        }
        out.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(out)
    }

    /// The spans whose name contains `query` (ignoring ASCII case).
    pub fn search(&self, query: &str) -> Result<Matches> {
        let q = query.trim().to_ascii_lowercase();
        let mut m = Matches::default();
        if q.is_empty() {
            return Ok(m);
        }
        let names = self.sec(section::NAMES);
        for i in 0..self.string_count {
            let count = le64(names, i * NAME);
            if count > 0 && crate::view::contains_ignore_case(self.string(i as u32)?, &q) {
                m.names.push(i as u32);
                m.total = m.total.saturating_add(count);
            }
        }
        Ok(m)
    }

    /// The span ids of name `name` (ascending, so by start).
    fn postings(&self, name: u32) -> Result<(usize, usize)> {
        let names = self.sec(section::NAMES);
        let count = le64(names, name as usize * NAME);
        let off = le64(names, name as usize * NAME + 16);
        let len = self.sec(section::POSTINGS).len() as u64;
        if count
            .checked_mul(4)
            .and_then(|n| n.checked_add(off))
            .is_none_or(|e| e > len)
            || !off.is_multiple_of(4)
        {
            return Err(self.fail(format!(
                "name {name}: {count} spans at byte {off} lie outside the postings ({len} bytes)"
            )));
        }
        Ok((off as usize, count as usize))
    }

    /// The match after span `from` (a record; `None`: the first at or
    /// after `at_ns`), or before it when `forward` is false; wraps around
    /// at the ends. `None` when nothing matches.
    pub fn step(
        &self,
        m: &Matches,
        from: Option<u32>,
        at_ns: u64,
        forward: bool,
    ) -> Result<Option<u32>> {
        let p = self.sec(section::POSTINGS);
        // Matches are ordered by record id, which is start order.
        let pivot = match from {
            Some(r) => u64::from(r) + u64::from(forward),
            None => partition(self.span_count as usize, |i| {
                self.record_start(i as u32) < at_ns
            }) as u64,
        };
        let mut best: Option<u32> = None;
        let mut wrap: Option<u32> = None;
        for &name in &m.names {
            let (off, n) = self.postings(name)?;
            let id = |i: usize| le32(p, off + 4 * i);
            let k = partition(n, |i| u64::from(id(i)) < pivot);
            if forward {
                if k < n {
                    best = Some(best.map_or(id(k), |b| b.min(id(k))));
                }
                if n > 0 {
                    wrap = Some(wrap.map_or(id(0), |w| w.min(id(0))));
                }
            } else {
                if k > 0 {
                    best = Some(best.map_or(id(k - 1), |b| b.max(id(k - 1))));
                }
                if n > 0 {
                    wrap = Some(wrap.map_or(id(n - 1), |w| w.max(id(n - 1))));
                }
            }
        }
        Ok(best.or(wrap))
    }
}
