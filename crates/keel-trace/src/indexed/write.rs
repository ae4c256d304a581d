//! Writing an indexed file: spans streamed in start order, placed in rows
//! as the viewer places them, their records written as they come; rows,
//! levels, names and flows written at the end.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{
    DIRECTORY_ENTRIES, ENTRY, HEADER_LEN, ITEM, MAGIC, NO_ARGS, RECORD, Stamp, VERSION, section,
};
use crate::error::{Error, Result};
use crate::model::{Flow, Span, Trace};
use crate::view::LaneIndex;

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Format(format!(
        "could not write indexed trace {}: {e}",
        path.display()
    ))
}

/// Writes an indexed file from spans pushed in start order.
///
/// Spans must come sorted by start and, at equal starts, longest first
/// (a parent before the spans it encloses), the order
/// [`TraceView`](crate::view::TraceView) places them in; a span that
/// starts before the previous one is an error. Memory holds the rows (20
/// bytes a span) and the names' span lists (4 bytes a span); records and
/// arguments go to the file as they come. The file appears under its name
/// only when [`finish`](Self::finish) succeeds (it is written beside it
/// and renamed), so an index is never seen half written.
pub struct IndexWriter {
    path: PathBuf,
    partial: PathBuf,
    out: BufWriter<File>,
    args_path: PathBuf,
    args: BufWriter<File>,
    args_len: u64,
    tables: Trace,
    strings: HashMap<String, u32>,
    string_list: Vec<String>,
    lanes: Vec<LaneIndex>,
    /// Per string id used as a name: span count, total ns, records.
    names: Vec<(u64, u64, Vec<u32>)>,
    flows: Vec<Flow>,
    /// Every span's kind ([`crate::SpanKind::ALL`] index), for the runs.
    kinds: Vec<u8>,
    count: u32,
    last_start: u64,
    bounds: (u64, u64),
    scratch: Vec<u8>,
}

impl std::fmt::Debug for IndexWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexWriter")
            .field("path", &self.path)
            .field("spans", &self.count)
            .finish_non_exhaustive()
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl IndexWriter {
    /// Starts writing `path` for a trace whose devices, lanes, instants,
    /// counters, memory events, calibrations and clock records are those
    /// of `tables` (its spans and flows are ignored: push them).
    pub fn create(path: &Path, tables: &Trace) -> Result<IndexWriter> {
        let partial = sibling(path, "partial");
        let args_path = sibling(path, "args");
        let file = File::create(&partial).map_err(|e| io_error(&partial, e))?;
        let args = File::create(&args_path).map_err(|e| io_error(&args_path, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&vec![0u8; HEADER_LEN + DIRECTORY_ENTRIES * ENTRY])
            .map_err(|e| io_error(&partial, e))?;
        let mut t = Trace {
            spans: Vec::new(),
            flows: Vec::new(),
            memory: Vec::new(),
            ..tables.clone()
        };
        t.instants.sort_by_key(|i| i.ts_ns);
        let lanes = (0..t.lanes.len() as u32)
            .map(|l| LaneIndex::new(&t, l))
            .collect();
        let mut bounds = (u64::MAX, 0);
        for i in &t.instants {
            bounds = (bounds.0.min(i.ts_ns), bounds.1.max(i.ts_ns));
        }
        for c in &t.counters {
            for &(ts, _) in &c.points {
                bounds = (bounds.0.min(ts), bounds.1.max(ts));
            }
        }
        Ok(IndexWriter {
            path: path.to_path_buf(),
            partial,
            out,
            args_path,
            args: BufWriter::with_capacity(1 << 20, args),
            args_len: 0,
            tables: t,
            strings: HashMap::new(),
            string_list: Vec::new(),
            lanes,
            names: Vec::new(),
            flows: Vec::new(),
            kinds: Vec::new(),
            count: 0,
            last_start: 0,
            bounds,
            scratch: Vec::new(),
        })
    }

    fn string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.string_list.len() as u32;
        self.strings.insert(s.to_owned(), i);
        self.string_list.push(s.to_owned());
        i
    }

    /// Adds one span (see the type's docs for the order).
    pub fn push(&mut self, span: &Span) -> Result<()> {
        if span.start_ns < self.last_start {
            return Err(Error::Format(format!(
                "indexed trace {}: spans must be pushed in start order; span {} ({:.40}) starts at {} ns, before the previous span's {} ns",
                self.path.display(),
                self.count,
                span.name.as_str(),
                span.start_ns,
                self.last_start
            )));
        }
        let Some(lane) = self.lanes.get_mut(span.lane as usize) else {
            return Err(Error::Format(format!(
                "indexed trace {}: span {} names lane {}, but the trace has {} lanes",
                self.path.display(),
                self.count,
                span.lane,
                self.lanes.len()
            )));
        };
        if self.count == u32::MAX {
            return Err(Error::Format(format!(
                "indexed trace {}: more than {} spans",
                self.path.display(),
                u32::MAX - 1
            )));
        }
        let id = self.count;
        let end = span.start_ns.saturating_add(span.dur_ns);
        let depth = lane.place(id, span.start_ns, end);
        self.last_start = span.start_ns;
        self.bounds = (self.bounds.0.min(span.start_ns), self.bounds.1.max(end));
        let name = self.string(&span.name);
        if self.names.len() <= name as usize {
            self.names.resize_with(name as usize + 1, Default::default);
        }
        let n = &mut self.names[name as usize];
        n.0 += 1;
        n.1 += span.dur_ns;
        n.2.push(id);
        let args = if span.args.is_empty() {
            NO_ARGS
        } else {
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            varint(&mut buf, span.args.len() as u64);
            for (k, v) in &span.args {
                let k = self.string(k);
                varint(&mut buf, u64::from(k));
                varint(&mut buf, v.len() as u64);
                buf.extend_from_slice(v.as_bytes());
            }
            let at = self.args_len;
            self.args
                .write_all(&buf)
                .map_err(|e| io_error(&self.args_path, e))?;
            self.args_len += buf.len() as u64;
            self.scratch = buf;
            at
        };
        let kind = crate::SpanKind::ALL
            .iter()
            .position(|&k| k == span.kind)
            .unwrap_or(0) as u32;
        let mut rec = [0u8; RECORD];
        rec[0..8].copy_from_slice(&span.start_ns.to_le_bytes());
        rec[8..16].copy_from_slice(&span.dur_ns.to_le_bytes());
        rec[16..24].copy_from_slice(&span.op.to_le_bytes());
        rec[24..32].copy_from_slice(&args.to_le_bytes());
        rec[32..36].copy_from_slice(&span.lane.to_le_bytes());
        rec[36..40].copy_from_slice(&name.to_le_bytes());
        rec[40..44].copy_from_slice(&kind.to_le_bytes());
        rec[44..48].copy_from_slice(&u32::from(depth).to_le_bytes());
        self.out
            .write_all(&rec)
            .map_err(|e| io_error(&self.partial, e))?;
        self.kinds.push(kind as u8);
        self.count += 1;
        Ok(())
    }

    /// Adds one flow (any order).
    pub fn push_flow(&mut self, flow: &Flow) {
        self.flows.push(flow.clone());
    }

    /// Writes the rest of the file and gives it its name. `source` is the
    /// file it was converted from, if any (an index older than its source
    /// is rebuilt, see [`super::open_or_convert`]).
    pub fn finish(mut self, source: Option<Stamp>) -> Result<()> {
        let r = self.write_tail(source);
        let _ = std::fs::remove_file(&self.args_path);
        match r {
            Ok(()) => {
                std::fs::rename(&self.partial, &self.path).map_err(|e| io_error(&self.path, e))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&self.partial);
                Err(e)
            }
        }
    }

    fn write_tail(&mut self, source: Option<Stamp>) -> Result<()> {
        let partial = self.partial.clone();
        let err = |e: std::io::Error| io_error(&partial, e);
        let mut pos = (HEADER_LEN + DIRECTORY_ENTRIES * ENTRY) as u64;
        let mut dir: Vec<(u32, u64, u64)> = Vec::new();
        let records = u64::from(self.count) * RECORD as u64;
        dir.push((section::RECORDS, pos, records));
        pos += records;

        // Arguments, copied from their scratch file.
        self.args
            .flush()
            .map_err(|e| io_error(&self.args_path, e))?;
        let mut f = File::open(&self.args_path).map_err(|e| io_error(&self.args_path, e))?;
        let copied = std::io::copy(&mut f, &mut self.out).map_err(err)?;
        dir.push((section::ARGS, pos, copied));
        pos += copied;

        let mut put = |out: &mut BufWriter<File>, kind: u32, body: &[u8]| -> Result<()> {
            let pad = (8 - pos % 8) % 8;
            out.write_all(&[0u8; 8][..pad as usize]).map_err(err)?;
            pos += pad;
            out.write_all(body).map_err(err)?;
            dir.push((kind, pos, body.len() as u64));
            pos += body.len() as u64;
            Ok(())
        };

        // Strings: count, offsets, bytes.
        let mut body = Vec::new();
        body.extend_from_slice(&(self.string_list.len() as u64).to_le_bytes());
        let mut off = 0u64;
        body.extend_from_slice(&off.to_le_bytes());
        for s in &self.string_list {
            off += s.len() as u64;
            body.extend_from_slice(&off.to_le_bytes());
        }
        for s in &self.string_list {
            body.extend_from_slice(s.as_bytes());
        }
        put(&mut self.out, section::STRINGS, &body)?;

        // Rows, their levels and their data.
        let (mut rows, mut levels, mut items, mut data) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for li in &self.lanes {
            for (d, row) in li.rows.iter().enumerate() {
                let first_level = (levels.len() / 24) as u32;
                let mut nlevels = 0u32;
                let base = (0..row.spans.len())
                    .map(|i| (row.starts[i], row.ends[i], i as u32, 1))
                    .collect();
                for (r, next) in crate::view::build_levels(base) {
                    levels.extend_from_slice(&r.to_le_bytes());
                    levels.extend_from_slice(&(next.len() as u64).to_le_bytes());
                    levels.extend_from_slice(&(items.len() as u64).to_le_bytes());
                    for &(s, e, f, c) in &next {
                        // A run is drawn in its first span's kind.
                        let kind = row
                            .spans
                            .get(f as usize)
                            .and_then(|&id| self.kinds.get(id as usize))
                            .copied()
                            .unwrap_or(0);
                        let packed = c.min(super::MAX_RUN) | (u32::from(kind) << 28);
                        items.extend_from_slice(&s.to_le_bytes());
                        items.extend_from_slice(&e.to_le_bytes());
                        items.extend_from_slice(&f.to_le_bytes());
                        items.extend_from_slice(&packed.to_le_bytes());
                    }
                    nlevels += 1;
                }
                rows.extend_from_slice(&li.lane.to_le_bytes());
                rows.extend_from_slice(&(d as u32).to_le_bytes());
                rows.extend_from_slice(&(row.spans.len() as u64).to_le_bytes());
                rows.extend_from_slice(&(data.len() as u64).to_le_bytes());
                rows.extend_from_slice(&first_level.to_le_bytes());
                rows.extend_from_slice(&nlevels.to_le_bytes());
                for &s in &row.starts {
                    data.extend_from_slice(&s.to_le_bytes());
                }
                for &e in &row.ends {
                    data.extend_from_slice(&e.to_le_bytes());
                }
                for &i in &row.spans {
                    data.extend_from_slice(&i.to_le_bytes());
                }
                data.resize(data.len().div_ceil(8) * 8, 0);
            }
        }
        debug_assert_eq!(items.len() % ITEM, 0);
        put(&mut self.out, section::ROWS, &rows)?;
        drop(rows);
        put(&mut self.out, section::LEVELS, &levels)?;
        put(&mut self.out, section::ITEMS, &items)?;
        drop(items);
        put(&mut self.out, section::ROWDATA, &data)?;
        drop(data);

        // Names: per string, count, total and where its records are.
        let (mut names, mut postings) = (Vec::new(), Vec::new());
        for i in 0..self.string_list.len() {
            let (count, total, ids) = self
                .names
                .get(i)
                .map_or((0, 0, &[][..]), |(c, t, ids)| (*c, *t, &ids[..]));
            names.extend_from_slice(&count.to_le_bytes());
            names.extend_from_slice(&total.to_le_bytes());
            names.extend_from_slice(&(postings.len() as u64).to_le_bytes());
            for id in ids {
                postings.extend_from_slice(&id.to_le_bytes());
            }
        }
        put(&mut self.out, section::NAMES, &names)?;
        put(&mut self.out, section::POSTINGS, &postings)?;
        drop(postings);

        // Flows by their earlier end.
        let first = |f: &Flow| f.from.ts_ns.min(f.to.ts_ns);
        self.flows.sort_by_key(first);
        let mut max_flow = 0u64;
        let mut body = Vec::with_capacity(self.flows.len() * super::FLOW);
        for f in &self.flows {
            max_flow = max_flow.max(f.from.ts_ns.abs_diff(f.to.ts_ns));
            body.extend_from_slice(&f.id.to_le_bytes());
            body.extend_from_slice(&f.from.ts_ns.to_le_bytes());
            body.extend_from_slice(&f.to.ts_ns.to_le_bytes());
            body.extend_from_slice(&f.from.lane.to_le_bytes());
            body.extend_from_slice(&f.to.lane.to_le_bytes());
            let kind: u32 = match f.kind {
                crate::FlowKind::Launch => 0,
                crate::FlowKind::EventWait => 1,
            };
            body.extend_from_slice(&kind.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
        }
        put(&mut self.out, section::FLOWS, &body)?;
        drop(body);

        // Counter points apart from their names, read per window.
        let (mut counters, mut points, mut groups) = (Vec::new(), Vec::new(), Vec::new());
        for c in &mut self.tables.counters {
            let mut pts = std::mem::take(&mut c.points);
            pts.sort_by_key(|p| p.0);
            counters.extend_from_slice(&((points.len() / 16) as u64).to_le_bytes());
            counters.extend_from_slice(&(pts.len() as u64).to_le_bytes());
            counters.extend_from_slice(&((groups.len() / super::GROUP) as u64).to_le_bytes());
            for &(ts, v) in &pts {
                points.extend_from_slice(&ts.to_le_bytes());
                points.extend_from_slice(&v.to_le_bytes());
            }
            // Levels of groups of 8, 64, ... points: each group's lowest
            // and highest point.
            let mut levels = 0u64;
            let mut g = super::GROUP_BASE;
            while pts.len() / g >= 2 {
                for chunk in pts.chunks(g) {
                    let lo = chunk
                        .iter()
                        .min_by_key(|p| p.1)
                        .copied()
                        .unwrap_or_default();
                    let hi = chunk
                        .iter()
                        .max_by_key(|p| p.1)
                        .copied()
                        .unwrap_or_default();
                    for (t, v) in [lo, hi] {
                        groups.extend_from_slice(&t.to_le_bytes());
                        groups.extend_from_slice(&v.to_le_bytes());
                    }
                }
                levels += 1;
                g *= super::GROUP_BASE;
            }
            counters.extend_from_slice(&levels.to_le_bytes());
        }
        put(&mut self.out, section::COUNTERS, &counters)?;
        put(&mut self.out, section::POINTS, &points)?;
        drop(points);
        put(&mut self.out, section::GROUPS, &groups)?;
        drop(groups);
        let tables = crate::native::to_native_bytes(&self.tables)?;
        put(&mut self.out, section::TABLES, &tables)?;

        // The header and directory, now that every section is placed.
        let mut head = Vec::with_capacity(HEADER_LEN + DIRECTORY_ENTRIES * ENTRY);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(dir.len() as u32).to_le_bytes());
        head.extend_from_slice(&u64::from(self.count).to_le_bytes());
        let bounds = if self.bounds.0 > self.bounds.1 {
            (0, 1_000)
        } else {
            self.bounds
        };
        head.extend_from_slice(&bounds.0.to_le_bytes());
        head.extend_from_slice(&bounds.1.to_le_bytes());
        let s = source.unwrap_or_default();
        head.extend_from_slice(&s.len.to_le_bytes());
        head.extend_from_slice(&s.modified_ns.to_le_bytes());
        head.extend_from_slice(&max_flow.to_le_bytes());
        debug_assert_eq!(head.len(), HEADER_LEN);
        for (kind, offset, len) in dir {
            head.extend_from_slice(&kind.to_le_bytes());
            head.extend_from_slice(&0u32.to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            head.extend_from_slice(&len.to_le_bytes());
        }
        self.out.flush().map_err(err)?;
        let file = self.out.get_mut();
        file.seek(SeekFrom::Start(0)).map_err(err)?;
        file.write_all(&head).map_err(err)?;
        file.sync_all().map_err(err)?;
        Ok(())
    }
}

/// `path` with `.suffix` added to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// Writes `trace` as an indexed file at `path` (`source`: the file it was
/// read from).
pub fn write_trace(trace: &Trace, path: &Path, source: Option<Stamp>) -> Result<()> {
    let mut w = IndexWriter::create(path, trace)?;
    let spans = &trace.spans;
    let mut order: Vec<u32> = (0..spans.len() as u32).collect();
    order.sort_by_key(|&i| {
        let s = &spans[i as usize];
        (s.start_ns, std::cmp::Reverse(s.dur_ns))
    });
    for i in order {
        w.push(&spans[i as usize])?;
    }
    for f in &trace.flows {
        w.push_flow(f);
    }
    w.finish(source)
}
