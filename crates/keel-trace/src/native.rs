//! Keel's native trace format (`.keeltrace`): compact, versioned, binary.
//!
//! # Byte layout (version 2)
//!
//! All fixed-width integers are little-endian. `varint` is unsigned LEB128
//! (7 bits per byte, low bits first, high bit set on every byte but the
//! last, at most 10 bytes for a u64); `svarint` is a zigzag-encoded signed
//! value (`(v << 1) ^ (v >> 63)`) written as a varint; `str` is a varint
//! index into the string table; `u8` is one byte.
//!
//! ```text
//! header:    "KEELTRC\0"           8 bytes, the magic
//!            version               u32 (2)
//! directory: count                 u32, the number of sections
//!            per section           kind u32, offset u64 (from the start of
//!                                  the file), length u64 (20 bytes)
//! sections:  each body where the directory says
//! ```
//!
//! A reader finds every section through the directory, so a section that
//! a trace has no use for is simply not listed, and one added later is
//! listed without moving the others. The reader checks the directory
//! before it reads a body: every section lies after the directory and
//! inside the file, no two overlap, the file ends where the last one ends
//! (a file cut anywhere is an error), and no kind is listed twice. Kinds it
//! does not know are skipped: they are what a newer writer added for
//! readers that know them (a change older readers must not ignore gets a
//! new format version instead). The writer lists the sections in kind
//! order and writes their bodies one after another after the directory.
//!
//! | kind | section      | body (each must be consumed exactly)                     |
//! |------|--------------|----------------------------------------------------------|
//! | 1    | header       | trace version varint, dropped varint |
//! | 2    | strings      | count varint, then per string: byte length varint, UTF-8 bytes |
//! | 3    | devices      | count, then per device: device str, name str, property count varint, (name str, value str) per property |
//! | 4    | lanes        | count, then per lane: kind u8 (0 stream: device varint, stream svarint; 1 host: thread varint; 2 a thread's lane of a stream: device varint, stream svarint, thread varint), name str |
//! | 5    | spans        | count, then per span: lane varint, name str, kind u8 ([`SpanKind::ALL`] index), start svarint (delta from the previous span's start, first from 0), dur varint, op svarint (delta from the previous span's op), arg count varint, (name str, value str) per arg |
//! | 6    | instants     | count, then per instant: lane varint, name str, ts varint, arg count, args as for spans |
//! | 7    | flows        | count, then per flow: id varint, kind u8 (0 launch, 1 event wait), from lane varint, from ts varint, to lane varint, to ts varint |
//! | 8    | counters     | count, then per counter: device varint, name str, point count varint, per point: ts svarint (delta from the previous point, first from 0), value svarint |
//! | 9    | calibrations | count, then per calibration: device varint, method str, error bound varint |
//! | 10   | origin       | lane count (that of the lanes section), then per lane its group str; import report u8 (0 none, 1 present), then format str, events varint, imported varint, skip reason count varint, (reason str, count varint) per reason |
//! | 11   | memory       | section version u8 (1), count varint, then per event: ts svarint (delta from the previous event's, first from 0), device varint, action u8 ([`MemoryAction::ALL`] index), flags u8 (bit 0 small pool, bit 1 has a stream), addr varint, addr - segment varint (wrapping), bytes varint, stream svarint (only with bit 1), allocated varint, reserved varint |
//! | 12   | clock        | origin: `opt svarint` ([`Trace::origin_ns`]); ranks u8 (0 none, 1 present), then alignment u8 ([`Alignment::ALL`] index), matched varint, file count varint, per file: label str, rank `opt svarint`, lanes start varint, lanes end varint, devices start varint, devices end varint, origin `opt svarint`, offset varint, skew `opt svarint`, collectives varint |
//!
//! `opt svarint` is u8 0 (none) or u8 1 followed by the svarint.
//!
//! Sections 1 to 9 are always listed; `origin` only for traces with lane
//! groups or an import report (imported ones), `memory` only for traces
//! with allocator events, `clock` only for traces with an origin or a
//! record of the files they were opened from ([`Trace::ranks`]). A file's
//! lane and device ranges must lie inside the tables and follow the
//! previous file's.
//!
//! # Version 1
//!
//! Files of version 1 still open. They have no directory: after the magic
//! and version each section is `tag u8, length varint, body`, sections 1
//! to 9 in that order, then `origin`, then `memory` (never `clock`). The bodies are those
//! above, except the header's: in files with a memory section it ends with
//! which optional sections follow (varint: bit 0 origin, bit 1 memory);
//! without it, `origin` follows when the next byte is its tag.
//!
//! # Checks
//!
//! Deltas wrap around (wrapping arithmetic on u64), so any value encodes.
//! The reader checks every bound: a truncated file, a wrong magic, a newer
//! version, a bad directory, a string index out of range, an unknown tag
//! and a count larger than the bytes left could hold are all
//! [`Error::Format`] errors with the byte offset; nothing is allocated
//! from an unchecked count, and what strings decode to is bounded by the
//! file's size ([`string_budget`]).
//!
//! Choosing between this format and JSON for a file is [`file`](crate::file)'s
//! job.

use std::collections::HashMap;
use std::io::Write;

use crate::error::{Error, Result};
use crate::model::{
    Alignment, Calibration, Counter, Flow, FlowEnd, FlowKind, InstantEvent, Lane, LaneKind,
    MemoryAction, MemoryEvent, RankFile, Ranks, Span, SpanKind, Text, Trace, TraceDevice,
};

/// The first 8 bytes of every native trace file.
pub const MAGIC: &[u8; 8] = b"KEELTRC\0";

/// The native format version this module writes (it reads this one and
/// every earlier one).
pub const NATIVE_VERSION: u32 = 2;

/// The file extension of native traces.
pub const EXTENSION: &str = "keeltrace";

mod tag {
    pub const HEADER: u8 = 1;
    pub const STRINGS: u8 = 2;
    pub const DEVICES: u8 = 3;
    pub const LANES: u8 = 4;
    pub const SPANS: u8 = 5;
    pub const INSTANTS: u8 = 6;
    pub const FLOWS: u8 = 7;
    pub const COUNTERS: u8 = 8;
    pub const CALIBRATIONS: u8 = 9;
    pub const ORIGIN: u8 = 10;
    pub const MEMORY: u8 = 11;
    pub const CLOCK: u8 = 12;
    /// The number of kinds this module knows, 0 (none) included.
    pub const KINDS: usize = 13;

    const NAMES: [&str; KINDS] = [
        "",
        "header",
        "strings",
        "devices",
        "lanes",
        "spans",
        "instants",
        "flows",
        "counters",
        "calibrations",
        "origin",
        "memory",
        "clock",
    ];

    /// The version of the memory section's body this module writes.
    pub const MEMORY_VERSION: u8 = 1;

    /// The name of section `tag` (known tags only).
    pub fn name(tag: u8) -> &'static str {
        NAMES.get(usize::from(tag)).copied().unwrap_or("unknown")
    }

    /// A directory entry's kind for messages: `the spans section`, or `a
    /// section of kind 40` for a kind this module does not know.
    pub fn describe(kind: u32) -> String {
        match usize::try_from(kind) {
            Ok(k @ 1..KINDS) => format!("the {} section", NAMES[k]),
            _ => format!("a section of kind {kind}"),
        }
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn span_kind_tag(kind: SpanKind) -> u8 {
    SpanKind::ALL
        .iter()
        .position(|&k| k == kind)
        .map_or(0, |i| i as u8)
}

fn memory_action_tag(action: MemoryAction) -> u8 {
    MemoryAction::ALL
        .iter()
        .position(|&a| a == action)
        .map_or(0, |i| i as u8)
}

fn alignment_tag(alignment: Alignment) -> u8 {
    Alignment::ALL
        .iter()
        .position(|&a| a == alignment)
        .map_or(0, |i| i as u8)
}

fn flow_kind_tag(kind: FlowKind) -> u8 {
    match kind {
        FlowKind::Launch => 0,
        FlowKind::EventWait => 1,
    }
}

/// The string table being built: every distinct string once.
struct Strings<'t> {
    index: HashMap<&'t str, u32>,
    list: Vec<&'t str>,
}

impl<'t> Strings<'t> {
    fn add(&mut self, s: &'t str) {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.index.entry(s) {
            slot.insert(self.list.len() as u32);
            self.list.push(s);
        }
    }

    fn get(&self, s: &str) -> u32 {
        self.index.get(s).copied().unwrap_or(0)
    }
}

/// The section bodies being written, one after another, and where each is.
struct Body<'s, 't> {
    buf: Vec<u8>,
    /// (tag, start in `buf`, length) of each finished section.
    sections: Vec<(u8, usize, usize)>,
    /// Where the section being written starts in `buf`.
    start: usize,
    strings: &'s Strings<'t>,
}

impl Body<'_, '_> {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn svarint(&mut self, v: i64) {
        self.varint(zigzag(v));
    }

    fn len(&mut self, n: usize) {
        self.varint(n as u64);
    }

    fn str(&mut self, s: &str) {
        let i = self.strings.get(s);
        self.varint(i.into());
    }

    /// An optional value: u8 0, or u8 1 and the value.
    fn opt_svarint(&mut self, v: Option<i64>) {
        match v {
            None => self.buf.push(0),
            Some(v) => {
                self.buf.push(1);
                self.svarint(v);
            }
        }
    }

    fn pairs<K: AsRef<str>, V: AsRef<str>>(&mut self, pairs: &[(K, V)]) {
        self.len(pairs.len());
        for (k, v) in pairs {
            self.str(k.as_ref());
            self.str(v.as_ref());
        }
    }

    /// Ends the section with `tag`: the bytes written since the last one.
    fn section(&mut self, tag: u8) {
        self.sections
            .push((tag, self.start, self.buf.len() - self.start));
        self.start = self.buf.len();
    }

    /// The header and the directory for the sections written.
    fn head(&self) -> Vec<u8> {
        let bodies = DIRECTORY_AT + 4 + ENTRY * self.sections.len();
        let mut head = Vec::with_capacity(bodies);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&NATIVE_VERSION.to_le_bytes());
        head.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        let bodies = bodies as u64;
        for &(tag, start, len) in &self.sections {
            head.extend_from_slice(&u32::from(tag).to_le_bytes());
            head.extend_from_slice(&(bodies + start as u64).to_le_bytes());
            head.extend_from_slice(&(len as u64).to_le_bytes());
        }
        head
    }
}

/// Where the directory starts: after the magic and the version.
const DIRECTORY_AT: usize = 12;

/// Bytes of one directory entry: kind u32, offset u64, length u64.
const ENTRY: usize = 20;

fn write(out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes)
        .map_err(|e| Error::Format(format!("could not write the native trace: {e}")))
}

/// Writes `trace` in the native format, version [`NATIVE_VERSION`] (see
/// the module docs).
pub fn write_native(trace: &Trace, out: &mut impl Write) -> Result<()> {
    let mut strings = Strings {
        index: HashMap::new(),
        list: Vec::new(),
    };
    for d in &trace.devices {
        strings.add(&d.device);
        strings.add(&d.name);
        for (k, v) in &d.properties {
            strings.add(k);
            strings.add(v);
        }
    }
    for l in &trace.lanes {
        strings.add(&l.name);
    }
    for s in &trace.spans {
        strings.add(&s.name);
        for (k, v) in &s.args {
            strings.add(k);
            strings.add(v);
        }
    }
    for i in &trace.instants {
        strings.add(&i.name);
        for (k, v) in &i.args {
            strings.add(k);
            strings.add(v);
        }
    }
    for c in &trace.counters {
        strings.add(&c.name);
    }
    for c in &trace.calibrations {
        strings.add(&c.method);
    }
    let origin = trace.import.is_some() || trace.lanes.iter().any(|l| !l.group.is_empty());
    if origin {
        for l in &trace.lanes {
            strings.add(&l.group);
        }
        if let Some(r) = &trace.import {
            strings.add(&r.format);
            for (reason, _) in &r.skipped {
                strings.add(reason);
            }
        }
    }

    if let Some(ranks) = &trace.ranks {
        for f in &ranks.files {
            strings.add(&f.label);
        }
    }

    // The bodies are gathered first: the directory before them gives each
    // one's offset and length.
    let mut b = Body {
        buf: Vec::with_capacity(1 << 16),
        sections: Vec::with_capacity(11),
        start: 0,
        strings: &strings,
    };
    b.varint(trace.version.into());
    b.varint(trace.dropped);
    b.section(tag::HEADER);

    b.len(strings.list.len());
    for s in &strings.list {
        b.len(s.len());
        b.buf.extend_from_slice(s.as_bytes());
    }
    b.section(tag::STRINGS);

    b.len(trace.devices.len());
    for d in &trace.devices {
        b.str(&d.device);
        b.str(&d.name);
        b.pairs(&d.properties);
    }
    b.section(tag::DEVICES);

    b.len(trace.lanes.len());
    for l in &trace.lanes {
        match l.kind {
            LaneKind::Stream {
                device,
                stream,
                thread: 0,
            } => {
                b.buf.push(0);
                b.varint(device.into());
                b.svarint(stream);
            }
            LaneKind::Stream {
                device,
                stream,
                thread,
            } => {
                b.buf.push(2);
                b.varint(device.into());
                b.svarint(stream);
                b.varint(thread);
            }
            LaneKind::Host { thread } => {
                b.buf.push(1);
                b.varint(thread);
            }
        }
        b.str(&l.name);
    }
    b.section(tag::LANES);

    b.buf.reserve(trace.spans.len() * 12);
    b.len(trace.spans.len());
    let (mut start, mut op) = (0u64, 0u64);
    for s in &trace.spans {
        b.varint(s.lane.into());
        b.str(&s.name);
        b.buf.push(span_kind_tag(s.kind));
        b.svarint(s.start_ns.wrapping_sub(start) as i64);
        b.varint(s.dur_ns);
        b.svarint(s.op.wrapping_sub(op) as i64);
        b.pairs(&s.args);
        (start, op) = (s.start_ns, s.op);
    }
    b.section(tag::SPANS);

    b.len(trace.instants.len());
    for i in &trace.instants {
        b.varint(i.lane.into());
        b.str(&i.name);
        b.varint(i.ts_ns);
        b.pairs(&i.args);
    }
    b.section(tag::INSTANTS);

    b.len(trace.flows.len());
    for f in &trace.flows {
        b.varint(f.id);
        b.buf.push(flow_kind_tag(f.kind));
        for end in [f.from, f.to] {
            b.varint(end.lane.into());
            b.varint(end.ts_ns);
        }
    }
    b.section(tag::FLOWS);

    b.len(trace.counters.len());
    for c in &trace.counters {
        b.varint(c.device.into());
        b.str(&c.name);
        b.len(c.points.len());
        let mut ts = 0u64;
        for &(t, v) in &c.points {
            b.svarint(t.wrapping_sub(ts) as i64);
            b.svarint(v);
            ts = t;
        }
    }
    b.section(tag::COUNTERS);

    b.len(trace.calibrations.len());
    for c in &trace.calibrations {
        b.varint(c.device.into());
        b.str(&c.method);
        b.varint(c.error_bound_ns);
    }
    b.section(tag::CALIBRATIONS);

    if origin {
        b.len(trace.lanes.len());
        for l in &trace.lanes {
            b.str(&l.group);
        }
        match &trace.import {
            None => b.buf.push(0),
            Some(r) => {
                b.buf.push(1);
                b.str(&r.format);
                b.varint(r.events);
                b.varint(r.imported);
                b.len(r.skipped.len());
                for (reason, n) in &r.skipped {
                    b.str(reason);
                    b.varint(*n);
                }
            }
        }
        b.section(tag::ORIGIN);
    }

    if !trace.memory.is_empty() {
        b.buf.reserve(trace.memory.len() * 12);
        b.buf.push(tag::MEMORY_VERSION);
        b.len(trace.memory.len());
        let mut ts = 0u64;
        for m in &trace.memory {
            b.svarint(m.ts_ns.wrapping_sub(ts) as i64);
            ts = m.ts_ns;
            b.varint(m.device.into());
            b.buf.push(memory_action_tag(m.action));
            b.buf
                .push(u8::from(m.small_pool) | (u8::from(m.stream.is_some()) << 1));
            b.varint(m.addr);
            b.varint(m.addr.wrapping_sub(m.segment));
            b.varint(m.bytes);
            if let Some(stream) = m.stream {
                b.svarint(stream);
            }
            b.varint(m.allocated);
            b.varint(m.reserved);
        }
        b.section(tag::MEMORY);
    }

    if trace.origin_ns.is_some() || trace.ranks.is_some() {
        b.opt_svarint(trace.origin_ns);
        match &trace.ranks {
            None => b.buf.push(0),
            Some(ranks) => {
                b.buf.push(1);
                b.buf.push(alignment_tag(ranks.alignment));
                b.varint(ranks.matched);
                b.len(ranks.files.len());
                for f in &ranks.files {
                    b.str(&f.label);
                    b.opt_svarint(f.rank);
                    for range in [&f.lanes, &f.devices] {
                        b.varint(range.start.into());
                        b.varint(range.end.into());
                    }
                    b.opt_svarint(f.origin_ns);
                    b.varint(f.offset_ns);
                    b.opt_svarint(f.skew_ns);
                    b.varint(f.collectives);
                }
            }
        }
        b.section(tag::CLOCK);
    }
    write(out, &b.head())?;
    write(out, &b.buf)?;
    out.flush()
        .map_err(|e| Error::Format(format!("could not write the native trace: {e}")))
}

/// [`write_native`] into a `Vec`.
pub fn to_native_bytes(trace: &Trace) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(256 + 12 * trace.spans.len());
    write_native(trace, &mut bytes)?;
    Ok(bytes)
}

/// A bounds-checked cursor over the file.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// End of the current section.
    end: usize,
    /// What is being read, for errors.
    what: &'static str,
    strings: Vec<Text>,
    /// Bytes the strings copied so far take (see [`string_budget`]).
    decoded: u64,
    budget: u64,
    /// Sections come from a directory (version 2), whose checks already
    /// caught a file cut short: a body that runs out is too short itself.
    directory: bool,
}

/// The most bytes of strings a file of `len` bytes may decode to.
///
/// The model holds a `String` per reference (span names, argument names
/// and values), while the file stores each distinct string once and a
/// reference in one or two bytes; so a small file could otherwise ask for
/// gigabytes (one 64 KiB string referenced by every device property). Each
/// copy is charged its length plus 24 bytes (what a `String` and its
/// allocation cost besides the text); a file may decode to 128 times its
/// size plus 16 MiB, far above what traces need (a span's long C++ kernel
/// name costs about 10 times the span's bytes), and memory stays bounded
/// by the input's size, for files and live fragments alike.
pub fn string_budget(len: usize) -> u64 {
    (len as u64).saturating_mul(128).saturating_add(16 << 20)
}

impl Reader<'_> {
    fn fail(&self, at: usize, message: impl std::fmt::Display) -> Error {
        Error::Format(format!(
            "native trace, {} at byte offset {at}: {message}",
            self.what
        ))
    }

    fn truncated(&self, need: &str) -> Error {
        if self.end < self.bytes.len() || self.directory {
            self.fail(
                self.pos,
                format!(
                    "expected {need}, found the end of the section (it is {} bytes long)",
                    self.end.saturating_sub(self.pos)
                ),
            )
        } else {
            self.fail(
                self.pos,
                format!("expected {need}, found the end of the file (truncated?)"),
            )
        }
    }

    fn u8(&mut self, need: &str) -> Result<u8> {
        if self.pos >= self.end {
            return Err(self.truncated(need));
        }
        let b = self.bytes[self.pos];
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self, need: &str) -> Result<u64> {
        let at = self.pos;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8(need)?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(self.fail(at, format!("expected {need}, found a varint over 64 bits")));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.fail(
            at,
            format!("expected {need}, found a varint longer than 10 bytes"),
        ))
    }

    fn svarint(&mut self, need: &str) -> Result<i64> {
        self.varint(need).map(unzigzag)
    }

    /// An optional value (see [`Body::opt_svarint`]).
    fn opt_svarint(&mut self, need: &str) -> Result<Option<i64>> {
        let at = self.pos;
        match self.u8(&format!("a flag for {need}"))? {
            0 => Ok(None),
            1 => self.svarint(need).map(Some),
            other => Err(self.fail(
                at,
                format!("expected a flag for {need} (0 or 1), found {other}"),
            )),
        }
    }

    /// A range `start..end` of a table of `len` entries that starts at or
    /// after `from`.
    fn range(&mut self, of: &str, from: u32, len: usize) -> Result<std::ops::Range<u32>> {
        let at = self.pos;
        let start = self.u32(&format!("the first of {of}"))?;
        let end = self.u32(&format!("the end of {of}"))?;
        if start < from || start > end || end as usize > len {
            return Err(self.fail(
                at,
                format!(
                    "expected {of} as a range from {from} or later to at most {len}, found {start}..{end}"
                ),
            ));
        }
        Ok(start..end)
    }

    fn u32(&mut self, need: &str) -> Result<u32> {
        let at = self.pos;
        let v = self.varint(need)?;
        u32::try_from(v)
            .map_err(|_| self.fail(at, format!("expected {need} below 2^32, found {v}")))
    }

    /// A count of items each at least `min_bytes` long: refused when the
    /// rest of the section could not hold them.
    fn count(&mut self, items: &str, min_bytes: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.varint(&format!("a count of {items}"))?;
        let left = self.end - self.pos;
        if n > (left / min_bytes.max(1)) as u64 {
            return Err(self.fail(
                at,
                format!(
                    "expected a count of {items} that fits in the {left} bytes left, found {n}"
                ),
            ));
        }
        Ok(n as usize)
    }

    /// A string copied out of the file's string table (device, lane and
    /// instant texts), charged to the budget (see [`string_budget`]).
    fn str(&mut self, need: &str) -> Result<String> {
        let at = self.pos;
        let s = self.text(need)?;
        self.decoded = self.decoded.saturating_add(s.len() as u64 + 24);
        if self.decoded > self.budget {
            return Err(self.fail(
                at,
                format!(
                    "expected strings that decode to at most {} bytes for a file of {} bytes, found more (a string of {} bytes referenced too often)",
                    self.budget,
                    self.bytes.len(),
                    s.len()
                ),
            ));
        }
        Ok(s.to_string())
    }

    /// A string shared with the file's string table: span names and
    /// arguments, which repeat across spans. Nothing is copied, so nothing
    /// is charged to the budget (a reference costs the pointer).
    fn text(&mut self, need: &str) -> Result<Text> {
        let at = self.pos;
        let i = self.varint(need)?;
        match usize::try_from(i).ok().and_then(|i| self.strings.get(i)) {
            Some(s) => Ok(Text::clone(s)),
            None => Err(self.fail(
                at,
                format!(
                    "expected {need} (a string index below {}), found index {i}",
                    self.strings.len()
                ),
            )),
        }
    }

    /// (name, value) pairs, each string read by `read` ([`Reader::str`]
    /// or [`Reader::text`]).
    fn pairs_with<T>(
        &mut self,
        of: &str,
        read: fn(&mut Self, &str) -> Result<T>,
    ) -> Result<Vec<(T, T)>> {
        let n = self.count(of, 2)?;
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            let k = read(self, "a name")?;
            let v = read(self, "a value")?;
            pairs.push((k, v));
        }
        Ok(pairs)
    }

    fn pairs(&mut self, of: &str) -> Result<Vec<(String, String)>> {
        self.pairs_with(of, Self::str)
    }

    /// Enters the next section of a version 1 file, which must have
    /// `tag`; returns where its body is.
    fn section(&mut self, tag: u8) -> Result<Extent> {
        self.what = "section header";
        self.end = self.bytes.len();
        let at = self.pos;
        let name = tag::name(tag);
        let found = self.u8(&format!("the {name} section"))?;
        if found != tag {
            return Err(self.fail(
                at,
                format!("expected the {name} section (tag {tag}), found tag {found}"),
            ));
        }
        let len = self.varint("a section length")?;
        let left = self.bytes.len() - self.pos;
        if len > left as u64 {
            return Err(self.fail(
                at,
                format!(
                    "expected a {name} section of {len} bytes, found only {left} bytes left (truncated?)"
                ),
            ));
        }
        let body = Extent {
            start: self.pos,
            end: self.pos + len as usize,
        };
        self.pos = body.end;
        Ok(body)
    }

    /// Goes to the body of section `tag` at `body`.
    fn enter(&mut self, tag: u8, body: Extent) {
        self.pos = body.start;
        self.end = body.end;
        self.what = tag::name(tag);
    }

    /// Leaves the section, which must have been read to its end.
    fn done(&mut self) -> Result<()> {
        if self.pos != self.end {
            return Err(self.fail(
                self.pos,
                format!(
                    "expected the end of the section, found {} more bytes",
                    self.end - self.pos
                ),
            ));
        }
        Ok(())
    }

    fn lane(&mut self, lanes: usize) -> Result<u32> {
        let at = self.pos;
        let lane = self.u32("a lane index")?;
        if lane as usize >= lanes {
            return Err(self.fail(
                at,
                format!("expected a lane index below {lanes}, found {lane}"),
            ));
        }
        Ok(lane)
    }

    fn device(&mut self, devices: usize) -> Result<u32> {
        let at = self.pos;
        let device = self.u32("a device index")?;
        if device as usize >= devices {
            return Err(self.fail(
                at,
                format!("expected a device index below {devices}, found {device}"),
            ));
        }
        Ok(device)
    }
}

/// Where a section's body is in the file.
#[derive(Debug, Clone, Copy)]
struct Extent {
    start: usize,
    end: usize,
}

/// Where the body of each known section is, by tag.
type Sections = [Option<Extent>; tag::KINDS];

/// How the sections of a file are found.
enum Layout {
    /// Version 1: one after another, each found when it is read (so a
    /// problem is met in file order), the optional ones as the header
    /// says (`follows`).
    Sequence { next: usize, follows: Option<u64> },
    /// Version 2: through the directory, checked before any body is read.
    Directory(Box<Sections>),
}

/// Reads a native trace of any version up to [`NATIVE_VERSION`] (see the
/// module docs for the checks).
pub fn read_native(bytes: &[u8]) -> Result<Trace> {
    let mut r = Reader {
        bytes,
        pos: 0,
        end: bytes.len(),
        what: "header",
        strings: Vec::new(),
        decoded: 0,
        budget: string_budget(bytes.len()),
        directory: false,
    };
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        let shown = &bytes[..bytes.len().min(MAGIC.len())];
        return Err(r.fail(
            0,
            format!(
                "expected the magic \"KEELTRC\\0\", found {:?}",
                String::from_utf8_lossy(shown)
            ),
        ));
    }
    r.pos = MAGIC.len();
    let Some(version) = bytes.get(8..12) else {
        return Err(r.truncated("a u32 format version"));
    };
    let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
    r.pos = DIRECTORY_AT;
    let (mut layout, trace) = match version {
        1 => {
            let body = r.section(tag::HEADER)?;
            r.enter(tag::HEADER, body);
            let (trace, follows) = header(&mut r, true)?;
            let next = body.end;
            (Layout::Sequence { next, follows }, trace)
        }
        2 => locate(&mut r)?,
        _ => {
            return Err(r.fail(
                8,
                format!(
                    "expected format version 1 or {NATIVE_VERSION}, found version {version}{}",
                    if version > NATIVE_VERSION {
                        " (written by a newer Keel)"
                    } else {
                        ""
                    }
                ),
            ));
        }
    };
    let trace = decode(&mut r, &mut layout, trace)?;
    if let Layout::Sequence { next, .. } = layout
        && next != bytes.len()
    {
        r.what = "end of file";
        return Err(r.fail(
            next,
            format!(
                "expected the end of the file after the last section, found {} more bytes",
                bytes.len() - next
            ),
        ));
    }
    Ok(trace)
}

/// The header section's body: the trace with its version and dropped
/// count, and (version 1 only) which optional sections follow, when it
/// says.
fn header(r: &mut Reader<'_>, flags: bool) -> Result<(Trace, Option<u64>)> {
    let trace = Trace {
        version: r.u32("the trace version")?,
        dropped: r.varint("the dropped count")?,
        ..Trace::default()
    };
    // Version 1 files with a memory section say which optional sections
    // follow (files before the memory section, and files without one, do
    // not).
    let follows = if flags && r.pos < r.end {
        let at = r.pos;
        let flags = r.varint("the optional sections that follow")?;
        if flags > 3 {
            return Err(r.fail(
                at,
                format!("expected optional section flags below 4, found {flags}"),
            ));
        }
        Some(flags)
    } else {
        None
    };
    r.done()?;
    Ok((trace, follows))
}

/// Reads a little-endian integer of `N` bytes at `at`, which the caller
/// has checked lies inside the file.
fn le<const N: usize>(bytes: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..N].copy_from_slice(&bytes[at..at + N]);
    u64::from_le_bytes(v)
}

/// Finds the sections of a version 2 file through its directory, checked
/// as the module docs say; reads its header.
fn locate(r: &mut Reader<'_>) -> Result<(Layout, Trace)> {
    r.what = "section directory";
    r.directory = true;
    let len = r.bytes.len();
    if len < DIRECTORY_AT + 4 {
        return Err(r.truncated("a u32 section count"));
    }
    let count = le::<4>(r.bytes, DIRECTORY_AT);
    let first = DIRECTORY_AT + 4;
    let left = (len - first) as u64;
    if count > left / ENTRY as u64 {
        return Err(r.fail(
            DIRECTORY_AT,
            format!(
                "expected a directory of {count} sections ({} bytes), found only {left} bytes left (truncated?)",
                count * ENTRY as u64
            ),
        ));
    }
    let bodies = first + count as usize * ENTRY;
    let mut sections: Sections = [None; tag::KINDS];
    // (start, end, kind) of every entry, known or not, for the overlap check.
    let mut extents = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = first + i * ENTRY;
        let kind = le::<4>(r.bytes, at) as u32;
        let offset = le::<8>(r.bytes, at + 4);
        let length = le::<8>(r.bytes, at + 12);
        let what = tag::describe(kind);
        if offset < bodies as u64 {
            return Err(r.fail(
                at,
                format!(
                    "expected {what} to start after the directory (at byte offset {bodies} or later), found byte offset {offset}"
                ),
            ));
        }
        let end = offset.saturating_add(length);
        if end > len as u64 {
            return Err(r.fail(
                at,
                format!(
                    "expected {what} ({length} bytes at byte offset {offset}) inside the file's {len} bytes, found it ending past them (truncated?)"
                ),
            ));
        }
        let extent = Extent {
            start: offset as usize,
            end: end as usize,
        };
        if let Ok(k @ 1..tag::KINDS) = usize::try_from(kind) {
            if sections[k].is_some() {
                return Err(r.fail(
                    at,
                    format!("expected one entry for {what}, found a second one"),
                ));
            }
            sections[k] = Some(extent);
        }
        extents.push((extent.start, extent.end, kind));
    }
    extents.sort_unstable();
    for pair in extents.windows(2) {
        let ((a_start, a_end, a), (b_start, b_end, b)) = (pair[0], pair[1]);
        if b_start < a_end {
            return Err(r.fail(
                DIRECTORY_AT,
                format!(
                    "expected sections that do not overlap, found {} (bytes {a_start} to {a_end}) overlapping {} (bytes {b_start} to {b_end})",
                    tag::describe(a),
                    tag::describe(b)
                ),
            ));
        }
    }
    let last = extents.last().map_or(bodies, |e| e.1);
    if last != len {
        r.what = "end of file";
        return Err(r.fail(
            last,
            format!(
                "expected the end of the file after the last section, found {} more bytes",
                len - last
            ),
        ));
    }
    for tag in tag::HEADER..=tag::CALIBRATIONS {
        if sections[usize::from(tag)].is_none() {
            return Err(r.fail(
                DIRECTORY_AT,
                format!(
                    "expected {} (kind {tag}) in the directory, found none",
                    tag::describe(tag.into())
                ),
            ));
        }
    }
    let Some(body) = sections[usize::from(tag::HEADER)] else {
        return Err(r.fail(DIRECTORY_AT, "expected a header section, found none"));
    };
    r.enter(tag::HEADER, body);
    let (trace, _) = header(r, false)?;
    Ok((Layout::Directory(Box::new(sections)), trace))
}

/// Enters section `tag` if the file has it.
fn enter(r: &mut Reader<'_>, layout: &mut Layout, tag: u8) -> Result<bool> {
    let body = match layout {
        Layout::Directory(sections) => match sections[usize::from(tag)] {
            Some(body) => body,
            None => return Ok(false),
        },
        Layout::Sequence { next, follows } => {
            let here = match tag {
                tag::ORIGIN => match follows {
                    Some(flags) => *flags & 1 != 0,
                    None => r.bytes.get(*next) == Some(&tag::ORIGIN),
                },
                tag::MEMORY => follows.is_some_and(|f| f & 2 != 0),
                tag::CLOCK => false,
                _ => true,
            };
            if !here {
                return Ok(false);
            }
            r.pos = *next;
            let body = r.section(tag)?;
            *next = body.end;
            body
        }
    };
    r.enter(tag, body);
    Ok(true)
}

/// Enters section `tag`, which every file has (version 2's directory is
/// checked for it).
fn enter_required(r: &mut Reader<'_>, layout: &mut Layout, tag: u8) -> Result<()> {
    if enter(r, layout, tag)? {
        Ok(())
    } else {
        Err(r.fail(
            r.pos,
            format!("expected the {} section, found none", tag::name(tag)),
        ))
    }
}

/// Decodes the sections' bodies into `trace` (whose header is read).
fn decode(r: &mut Reader<'_>, layout: &mut Layout, mut trace: Trace) -> Result<Trace> {
    let bytes = r.bytes;
    enter_required(r, layout, tag::STRINGS)?;
    let n = r.count("strings", 1)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let at = r.pos;
        let len = r.varint("a string length")?;
        let left = r.end - r.pos;
        if len > left as u64 {
            return Err(r.fail(
                at,
                format!("expected a string of {len} bytes, found only {left} bytes left"),
            ));
        }
        let raw = &bytes[r.pos..r.pos + len as usize];
        let s = std::str::from_utf8(raw).map_err(|e| {
            r.fail(
                r.pos + e.valid_up_to(),
                "expected UTF-8 in a string, found invalid UTF-8",
            )
        })?;
        strings.push(Text::from(s));
        r.pos += len as usize;
    }
    r.strings = strings;
    r.done()?;

    enter_required(r, layout, tag::DEVICES)?;
    let n = r.count("devices", 3)?;
    trace.devices.reserve(n);
    for _ in 0..n {
        let device = r.str("a device string")?;
        let name = r.str("a device name")?;
        let properties = r.pairs("device properties")?;
        trace.devices.push(TraceDevice {
            device,
            name,
            properties,
        });
    }
    r.done()?;
    let devices = trace.devices.len();

    enter_required(r, layout, tag::LANES)?;
    let n = r.count("lanes", 3)?;
    trace.lanes.reserve(n);
    for _ in 0..n {
        let at = r.pos;
        let kind = match r.u8("a lane kind")? {
            0 => LaneKind::Stream {
                device: r.device(devices)?,
                stream: r.svarint("a stream id")?,
                thread: 0,
            },
            1 => LaneKind::Host {
                thread: r.varint("a thread number")?,
            },
            2 => LaneKind::Stream {
                device: r.device(devices)?,
                stream: r.svarint("a stream id")?,
                thread: r.varint("a thread number")?,
            },
            other => {
                return Err(r.fail(
                    at,
                    format!(
                        "expected a lane kind (0 stream, 1 host, 2 a stream's thread), found {other}"
                    ),
                ));
            }
        };
        let name = r.str("a lane name")?;
        trace.lanes.push(Lane {
            kind,
            name,
            group: String::new(),
        });
    }
    r.done()?;
    let lanes = trace.lanes.len();

    enter_required(r, layout, tag::SPANS)?;
    let n = r.count("spans", 7)?;
    trace.spans.reserve(n);
    let (mut start, mut op) = (0u64, 0u64);
    for _ in 0..n {
        let lane = r.lane(lanes)?;
        let name = r.text("a span name")?;
        let at = r.pos;
        let kind = r.u8("a span kind")?;
        let kind = *SpanKind::ALL.get(usize::from(kind)).ok_or_else(|| {
            r.fail(
                at,
                format!(
                    "expected a span kind below {}, found {kind}",
                    SpanKind::ALL.len()
                ),
            )
        })?;
        start = start.wrapping_add(r.svarint("a span start")? as u64);
        let dur_ns = r.varint("a span duration")?;
        op = op.wrapping_add(r.svarint("a span op")? as u64);
        let args = r.pairs_with("span args", Reader::text)?;
        trace.spans.push(Span {
            lane,
            name,
            kind,
            start_ns: start,
            dur_ns,
            op,
            args,
        });
    }
    r.done()?;

    enter_required(r, layout, tag::INSTANTS)?;
    let n = r.count("instants", 4)?;
    trace.instants.reserve(n);
    for _ in 0..n {
        let lane = r.lane(lanes)?;
        let name = r.str("an instant name")?;
        let ts_ns = r.varint("an instant time")?;
        let args = r.pairs("instant args")?;
        trace.instants.push(InstantEvent {
            lane,
            name,
            ts_ns,
            args,
        });
    }
    r.done()?;

    enter_required(r, layout, tag::FLOWS)?;
    let n = r.count("flows", 6)?;
    trace.flows.reserve(n);
    for _ in 0..n {
        let id = r.varint("a flow id")?;
        let at = r.pos;
        let kind = match r.u8("a flow kind")? {
            0 => FlowKind::Launch,
            1 => FlowKind::EventWait,
            other => {
                return Err(r.fail(
                    at,
                    format!("expected a flow kind (0 launch, 1 event wait), found {other}"),
                ));
            }
        };
        let from = FlowEnd {
            lane: r.lane(lanes)?,
            ts_ns: r.varint("a flow time")?,
        };
        let to = FlowEnd {
            lane: r.lane(lanes)?,
            ts_ns: r.varint("a flow time")?,
        };
        trace.flows.push(Flow { id, kind, from, to });
    }
    r.done()?;

    enter_required(r, layout, tag::COUNTERS)?;
    let n = r.count("counters", 3)?;
    trace.counters.reserve(n);
    for _ in 0..n {
        let device = r.device(devices)?;
        let name = r.str("a counter name")?;
        let points = r.count("counter points", 2)?;
        let mut counter = Counter {
            device,
            name,
            points: Vec::with_capacity(points),
        };
        let mut ts = 0u64;
        for _ in 0..points {
            ts = ts.wrapping_add(r.svarint("a counter time")? as u64);
            let value = r.svarint("a counter value")?;
            counter.points.push((ts, value));
        }
        trace.counters.push(counter);
    }
    r.done()?;

    enter_required(r, layout, tag::CALIBRATIONS)?;
    let n = r.count("calibrations", 3)?;
    trace.calibrations.reserve(n);
    for _ in 0..n {
        let device = r.device(devices)?;
        let method = r.str("a calibration method")?;
        let error_bound_ns = r.varint("an error bound")?;
        trace.calibrations.push(Calibration {
            device,
            method,
            error_bound_ns,
        });
    }
    r.done()?;

    if enter(r, layout, tag::ORIGIN)? {
        let at = r.pos;
        let n = r.count("lane groups", 1)?;
        if n != lanes {
            return Err(r.fail(
                at,
                format!("expected a group for each of the {lanes} lanes, found {n}"),
            ));
        }
        for lane in &mut trace.lanes {
            lane.group = r.str("a lane group")?;
        }
        let at = r.pos;
        match r.u8("an import report flag")? {
            0 => {}
            1 => {
                let format = r.str("an import format")?;
                let events = r.varint("an event count")?;
                let imported = r.varint("an imported count")?;
                let n = r.count("skip reasons", 2)?;
                let mut skipped = Vec::with_capacity(n);
                for _ in 0..n {
                    let reason = r.str("a skip reason")?;
                    skipped.push((reason, r.varint("a skip count")?));
                }
                trace.import = Some(crate::model::ImportReport {
                    format,
                    events,
                    imported,
                    skipped,
                });
            }
            other => {
                return Err(r.fail(
                    at,
                    format!("expected an import report flag (0 or 1), found {other}"),
                ));
            }
        }
        r.done()?;
    }

    if enter(r, layout, tag::MEMORY)? {
        let at = r.pos;
        let version = r.u8("the memory section's version")?;
        if version != tag::MEMORY_VERSION {
            return Err(r.fail(
                at,
                format!(
                    "expected memory section version {}, found version {version}{}",
                    tag::MEMORY_VERSION,
                    if version > tag::MEMORY_VERSION {
                        " (written by a newer Keel)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let n = r.count("memory events", 9)?;
        trace.memory.reserve(n);
        let mut ts = 0u64;
        for _ in 0..n {
            ts = ts.wrapping_add(r.svarint("a memory event time")? as u64);
            let device = r.device(devices)?;
            let at = r.pos;
            let action = r.u8("a memory action")?;
            let action = *MemoryAction::ALL.get(usize::from(action)).ok_or_else(|| {
                r.fail(
                    at,
                    format!(
                        "expected a memory action below {}, found {action}",
                        MemoryAction::ALL.len()
                    ),
                )
            })?;
            let at = r.pos;
            let flags = r.u8("memory event flags")?;
            if flags > 3 {
                return Err(r.fail(
                    at,
                    format!("expected memory event flags below 4, found {flags}"),
                ));
            }
            let addr = r.varint("an address")?;
            let segment = addr.wrapping_sub(r.varint("a segment offset")?);
            let bytes = r.varint("a byte count")?;
            let stream = if flags & 2 != 0 {
                Some(r.svarint("a stream id")?)
            } else {
                None
            };
            trace.memory.push(MemoryEvent {
                ts_ns: ts,
                device,
                action,
                addr,
                segment,
                bytes,
                stream,
                small_pool: flags & 1 != 0,
                allocated: r.varint("the allocated total")?,
                reserved: r.varint("the reserved total")?,
            });
        }
        r.done()?;
    }

    if enter(r, layout, tag::CLOCK)? {
        trace.origin_ns = r.opt_svarint("the trace's origin")?;
        let at = r.pos;
        match r.u8("a ranks flag")? {
            0 => {}
            1 => {
                let at = r.pos;
                let alignment = r.u8("an alignment")?;
                let alignment = *Alignment::ALL.get(usize::from(alignment)).ok_or_else(|| {
                    r.fail(
                        at,
                        format!(
                            "expected an alignment below {}, found {alignment}",
                            Alignment::ALL.len()
                        ),
                    )
                })?;
                let matched = r.varint("a matched collective count")?;
                let n = r.count("files", 11)?;
                let mut files = Vec::with_capacity(n);
                let (mut lanes_from, mut devices_from) = (0, 0);
                for _ in 0..n {
                    let label = r.str("a file label")?;
                    let rank = r.opt_svarint("a rank")?;
                    let lanes = r.range("a file's lanes", lanes_from, lanes)?;
                    let devices = r.range("a file's devices", devices_from, devices)?;
                    (lanes_from, devices_from) = (lanes.end, devices.end);
                    files.push(RankFile {
                        label,
                        rank,
                        lanes,
                        devices,
                        origin_ns: r.opt_svarint("a file's origin")?,
                        offset_ns: r.varint("a file's offset")?,
                        skew_ns: r.opt_svarint("a file's skew")?,
                        collectives: r.varint("a collective count")?,
                    });
                }
                trace.ranks = Some(Ranks {
                    alignment,
                    matched,
                    files,
                });
            }
            other => {
                return Err(r.fail(at, format!("expected a ranks flag (0 or 1), found {other}")));
            }
        }
        r.done()?;
    }

    Ok(trace)
}
