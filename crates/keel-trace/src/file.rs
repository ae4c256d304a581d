//! Trace files: choosing a format, saving and loading.
//!
//! Two formats hold a [`Trace`]: Chrome Trace Event JSON
//! ([`json`], `.json`, including `.trace.json`) and Keel's
//! binary format ([`native`], `.keeltrace`).
//!
//! - Saving picks the format by the file name's extension; any other
//!   extension is an error (a file named `.json` always holds JSON).
//! - Loading picks it by content, whatever the name: native when the bytes
//!   start with the native magic ([`native::MAGIC`]), JSON otherwise (Keel's
//!   own, read exactly, or another tool's, imported). JSON compressed with
//!   gzip (`.json.gz`) or zstd (`.json.zst`) is recognised by its magic
//!   bytes and decompressed as it is read.
//! - JSON streams from the file (neither the file nor a JSON tree of it is
//!   held in memory): another tool's is imported, Keel's own read exactly
//!   (in two passes, so the file is opened twice).
//! - [`load_traces`] opens several files as one trace (one per rank of a
//!   distributed job), each file's lanes in their own group, their clocks
//!   aligned as [`load_traces_with`] says.
//!
//! This is the one place that decides; viewers (the app) call it rather
//! than looking at names or bytes themselves.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use crate::error::{Error, Result};
use crate::model::{Alignment, Ranks, Trace};
use crate::native::{self, EXTENSION, MAGIC};
use crate::{json, ranks};

/// The format of a trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFileFormat {
    /// Chrome Trace Event JSON ([`json`]), extension `.json`.
    Json,
    /// Keel's binary format ([`native`]), extension
    /// `.keeltrace`.
    Native,
}

impl TraceFileFormat {
    /// The format for a file name: `.json` (including `.trace.json`) or
    /// `.keeltrace`, in any case.
    pub fn from_path(path: &Path) -> Result<TraceFileFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Ok(TraceFileFormat::Json),
            Some(e) if e.eq_ignore_ascii_case(EXTENSION) => Ok(TraceFileFormat::Native),
            other => Err(Error::Format(format!(
                "{}: expected a trace file name ending in .json or .{EXTENSION}, found {}",
                path.display(),
                match other {
                    Some(e) => format!("extension .{e}"),
                    None => "no extension".to_owned(),
                }
            ))),
        }
    }

    /// The format of a file's content: native when it starts with
    /// [`MAGIC`], JSON otherwise.
    pub fn sniff(bytes: &[u8]) -> TraceFileFormat {
        if bytes.starts_with(MAGIC) {
            TraceFileFormat::Native
        } else {
            TraceFileFormat::Json
        }
    }

    /// The extension files of this format get (without the dot).
    pub fn extension(self) -> &'static str {
        match self {
            TraceFileFormat::Json => "json",
            TraceFileFormat::Native => EXTENSION,
        }
    }
}

/// How a file's bytes are compressed, by their magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    Gzip,
    Zstd,
}

impl Compression {
    fn sniff(bytes: &[u8]) -> Option<Compression> {
        match bytes {
            [0x1f, 0x8b, ..] => Some(Compression::Gzip),
            // A zstd frame, or a skippable frame (magic 0x184D2A5X), which
            // pzstd writes first.
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Some(Compression::Zstd),
            [b, 0x2a, 0x4d, 0x18, ..] if b & 0xf0 == 0x50 => Some(Compression::Zstd),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    /// A reader of the decompressed bytes of `input`.
    fn decoder<'r>(self, input: impl Read + Send + 'r) -> Result<Box<dyn Read + Send + 'r>> {
        Ok(match self {
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
            Compression::Zstd => Box::new(ZstdFrames::new(input)),
        })
    }
}

/// The decompressed bytes of a zstd stream: every frame in turn (the
/// `zstd` tool writes one, parallel compressors several; skippable frames
/// are passed over), decoded by ruzstd, pure Rust, so no C library is
/// built. Memory is the decoder's window, whatever the file's size.
struct ZstdFrames<R> {
    source: BufReader<R>,
    decoder: FrameDecoder,
    in_frame: bool,
}

impl<R: Read> ZstdFrames<R> {
    fn new(input: R) -> ZstdFrames<R> {
        ZstdFrames {
            source: BufReader::new(input),
            decoder: FrameDecoder::new(),
            in_frame: false,
        }
    }
}

impl<R: Read> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                if self.decoder.can_collect() > 0 {
                    return self.decoder.read(buf);
                }
                if self.decoder.is_finished() {
                    self.in_frame = false;
                    continue;
                }
                self.decoder
                    .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBlocks(1))
                    .map_err(damaged)?;
            } else {
                if self.source.fill_buf()?.is_empty() {
                    return Ok(0);
                }
                match self.decoder.reset(&mut self.source) {
                    Ok(()) => self.in_frame = true,
                    Err(FrameDecoderError::ReadFrameHeaderError(
                        ReadFrameHeaderError::SkipFrame { length, .. },
                    )) => {
                        let skipped = std::io::copy(
                            &mut (&mut self.source).take(u64::from(length)),
                            &mut std::io::sink(),
                        )?;
                        if skipped < u64::from(length) {
                            return Err(damaged("a skippable frame cut short"));
                        }
                    }
                    Err(e) => return Err(damaged(e)),
                }
            }
        }
    }
}

/// An error of the zstd decoder, saying what the input was.
fn damaged(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("a damaged zstd stream: {e}"))
}

/// Reads decompressed bytes fully (a compressed native trace); the
/// decompressed size is bounded by what the reader yields, and a corrupt
/// stream is an error naming the compression.
fn read_all(mut input: impl Read, compression: Compression) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    input.read_to_end(&mut out).map_err(|e| {
        Error::Format(format!(
            "expected a valid {} stream, found a damaged one: {e}",
            compression.name()
        ))
    })?;
    Ok(out)
}

/// `trace` as the bytes of a file in `format`.
pub fn to_bytes(trace: &Trace, format: TraceFileFormat) -> Result<Vec<u8>> {
    match format {
        TraceFileFormat::Json => {
            let mut bytes = Vec::with_capacity(256 + 110 * trace.spans.len());
            json::write_json(trace, &mut bytes)?;
            Ok(bytes)
        }
        TraceFileFormat::Native => native::to_native_bytes(trace),
    }
}

/// The trace in a file's bytes, in the format its content shows (see the
/// module docs).
pub fn from_bytes(bytes: &[u8]) -> Result<Trace> {
    if let Some(c) = Compression::sniff(bytes) {
        let (trace, _) = import_compressed(|| Ok(bytes), c)?;
        return Ok(trace);
    }
    match TraceFileFormat::sniff(bytes) {
        TraceFileFormat::Native => native::read_native(bytes),
        TraceFileFormat::Json => json::read_json_bytes(bytes),
    }
}

/// Reads a compressed trace from the input `open` gives (once per pass
/// over the decompressed JSON, see [`json`]'s `read_from`).
fn import_compressed<R: Read + Send>(
    open: impl Fn() -> Result<R>,
    c: Compression,
) -> Result<(Trace, Option<i64>)> {
    let mut decoded = BufReader::with_capacity(1 << 16, c.decoder(open()?)?);
    let head = decoded.fill_buf().map_err(|e| {
        Error::Format(format!(
            "expected a valid {} stream, found a damaged one: {e}",
            c.name()
        ))
    })?;
    if head.starts_with(MAGIC) {
        return Ok((native::read_native(&read_all(decoded, c)?)?, None));
    }
    let head = head.to_vec();
    // The first pass reads on from the head already decompressed.
    let mut first = Some(decoded);
    json::read_from(
        move || match first.take() {
            Some(decoded) => Ok(decoded),
            None => Ok(BufReader::with_capacity(1 << 16, c.decoder(open()?)?)),
        },
        &head,
        Some(c.name()),
    )
}

/// Saves `trace` to `path`, as JSON for `.json` and in the native format
/// for `.keeltrace` (any other extension is an error).
pub fn save_trace(trace: &Trace, path: &Path) -> Result<()> {
    let bytes = to_bytes(trace, TraceFileFormat::from_path(path)?)?;
    std::fs::write(path, bytes).map_err(|e| {
        Error::Format(format!(
            "could not write trace file {}: {e}",
            path.display()
        ))
    })
}

/// Loads a trace saved by [`save_trace`] (or a JSON trace of another
/// tool): native when the file starts with [`MAGIC`], JSON otherwise,
/// whatever the extension.
pub fn load_trace(path: &Path) -> Result<Trace> {
    Ok(load(path)?.0)
}

fn open_file(path: &Path) -> Result<BufReader<std::fs::File>> {
    std::fs::File::open(path)
        .map(|f| BufReader::with_capacity(1 << 16, f))
        .map_err(|e| Error::Format(format!("could not read trace file {}: {e}", path.display())))
}

fn read_error(path: &Path, e: std::io::Error) -> Error {
    Error::Format(format!("could not read trace file {}: {e}", path.display()))
}

/// A trace file and, for another tool's, its `distributedInfo.rank`.
fn load(path: &Path) -> Result<(Trace, Option<i64>)> {
    let mut head = Vec::with_capacity(64 << 10);
    open_file(path)?
        .take(64 << 10)
        .read_to_end(&mut head)
        .map_err(|e| read_error(path, e))?;
    if let Some(c) = Compression::sniff(&head) {
        return import_compressed(|| open_file(path), c)
            .map_err(|e| Error::Format(format!("{}: {e}", path.display())));
    }
    if TraceFileFormat::sniff(&head) == TraceFileFormat::Native {
        let bytes = std::fs::read(path).map_err(|e| read_error(path, e))?;
        return Ok((native::read_native(&bytes)?, None));
    }
    json::read_from(|| open_file(path), &head, None)
}

/// Loads several trace files as one trace, as for the ranks of a
/// distributed job, on their files' own clocks when those agree: see
/// [`load_traces_with`] with [`Alignment::Clock`].
pub fn load_traces(paths: &[impl AsRef<Path>]) -> Result<Trace> {
    load_traces_with(paths, Alignment::Clock)
}

/// Loads several trace files as one trace, as for the ranks of a
/// distributed job: each file's host lanes are grouped under a prefix
/// (`rank N · ` from another tool's file's `distributedInfo.rank`, else
/// the file name), its devices are its own (`rank N · cuda:0`), its flows,
/// counters and memory events follow it, and the trace's
/// [`Ranks`] record says which lanes and devices are whose (Note [Rank of
/// a lane]) and where each file's clock was placed.
///
/// Clocks, by `alignment`:
///
/// - [`Alignment::Clock`]: every file's time `t` at its origin plus `t`
///   ([`Trace::origin_ns`]: Kineto writes Unix-epoch times, so the ranks
///   of one job on one host, or on hosts that NTP keeps in step, share a
///   clock), when every file's origin is known and the files' recordings
///   share an instant on those clocks (the ranks of one job are profiled
///   together; recordings that share none are on clocks that disagree,
///   such as hosts' times since boot). Otherwise as `Collectives` when
///   every file has collectives, else as `Start`.
/// - [`Alignment::Collectives`]: each file moved so that the ends of its
///   collective kernels ([`ranks::is_collective`]) line up with the
///   reference file's (the file of rank 0, else the first): by the
///   median, over the collectives they have in common, of the
///   differences of their ends ([`ranks::median_skew`]). The `n`-th
///   collective of each file is taken as the same one; files with
///   different numbers are aligned on the common prefix
///   ([`Ranks::matched`] says how many). A file with no collective is an
///   error naming it.
/// - [`Alignment::Start`]: every file on its own earliest event (the
///   files' t=0), as HolisticTraceAnalysis compares ranks.
///
/// Whatever the alignment, each file's clock skew against the reference
/// file's is measured by its collectives when every file has some
/// ([`RankFile::skew_ns`](crate::RankFile::skew_ns)), so a trace kept on
/// clocks shows how far they disagree. The merged trace's
/// [`origin_ns`](Trace::origin_ns) is the shared clock's time of its t=0
/// (clocks), the reference file's clock's (collectives, when origins are
/// known), or unknown (starts). The import report adds up the files'
/// reports. One file is the same as [`load_trace`], whatever the
/// alignment; with several, an error names the file it comes from.
pub fn load_traces_with(paths: &[impl AsRef<Path>], alignment: Alignment) -> Result<Trace> {
    let several = paths.len() > 1;
    let mut loaded = Vec::with_capacity(paths.len());
    for path in paths {
        let path = path.as_ref();
        let (trace, rank) = load(path).map_err(|e| if several { naming(path, e) } else { e })?;
        let label = match rank {
            Some(rank) => format!("rank {rank}"),
            None => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string()),
        };
        loaded.push(Part {
            label,
            rank,
            trace,
            shown: path.display().to_string(),
        });
    }
    if loaded.len() == 1 {
        return Ok(loaded.remove(0).trace);
    }
    merge(loaded, alignment)
}

/// `e`, an error of file `path` among several, naming the file (errors
/// reading it name it already, those of its content do not).
fn naming(path: &Path, e: Error) -> Error {
    let shown = path.display().to_string();
    match e {
        Error::Format(m) if m.contains(&shown) => Error::Format(m),
        Error::Format(m) => Error::Format(format!("{shown}: {m}")),
        other => Error::Format(format!("{shown}: {other}")),
    }
}

/// Several files' traces as one, each labelled as given (no
/// `distributedInfo.rank` is known): see [`load_traces`]. Never fails:
/// clocks fall back to collectives, then to starts.
pub fn merge_files(files: Vec<(String, Trace)>) -> Trace {
    // `Clock` falls back instead of failing, and nothing else can fail:
    // the default is never reached.
    merge_files_with(files, Alignment::Clock).unwrap_or_default()
}

/// [`merge_files`] with an alignment, as [`load_traces_with`] applies it.
pub fn merge_files_with(files: Vec<(String, Trace)>, alignment: Alignment) -> Result<Trace> {
    let parts = files
        .into_iter()
        .map(|(label, trace)| Part {
            shown: label.clone(),
            label,
            rank: None,
            trace,
        })
        .collect();
    merge(parts, alignment)
}

/// One file to merge.
struct Part {
    /// The prefix of its groups and devices.
    label: String,
    /// Its `distributedInfo.rank`.
    rank: Option<i64>,
    trace: Trace,
    /// How errors name it (its path).
    shown: String,
}

/// Where each file goes on the merged timeline ([`load_traces_with`]).
struct Placement {
    applied: Alignment,
    /// Per file: `t` of the file is `t + offset` merged.
    offsets: Vec<u64>,
    skews: Vec<Option<i64>>,
    counts: Vec<u64>,
    matched: u64,
    /// The merged trace's origin.
    origin_ns: Option<i64>,
}

/// The earliest start and latest end of a trace's spans and instants.
fn extent(t: &Trace) -> Option<(u64, u64)> {
    let spans = t.spans.iter().map(|s| (s.start_ns, s.end_ns()));
    let instants = t.instants.iter().map(|i| (i.ts_ns, i.ts_ns));
    spans
        .chain(instants)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// Decides the alignment (after fallbacks) and each file's offset.
fn place(parts: &[Part], wanted: Alignment) -> Result<Placement> {
    // A file that is itself several merged has a list per file: its
    // collectives are taken together, in order of start.
    let lists: Vec<Vec<ranks::Collective>> = parts
        .iter()
        .map(|p| {
            let mut all: Vec<ranks::Collective> =
                ranks::collectives(&p.trace).into_iter().flatten().collect();
            all.sort_unstable_by_key(|c| (c.start_ns, c.end_ns, c.lane));
            all
        })
        .collect();
    let counts: Vec<u64> = lists.iter().map(|l| l.len() as u64).collect();
    let matched = lists.iter().map(Vec::len).min().unwrap_or(0);
    let origins: Option<Vec<i64>> = parts.iter().map(|p| p.trace.origin_ns).collect();
    // Each file's clock against the reference's: the median difference of
    // the collectives' ends from each file's start, plus the difference of
    // the starts on their own clocks when both are known.
    let reference = parts.iter().position(|p| p.rank == Some(0)).unwrap_or(0);
    let relative: Vec<Option<i64>> = lists
        .iter()
        .map(|l| ranks::median_skew(&lists[reference], l, matched))
        .collect();
    let skews: Vec<Option<i64>> = relative
        .iter()
        .enumerate()
        .map(|(i, rel)| {
            let rel = i128::from((*rel)?);
            Some(ranks::clamp(match &origins {
                Some(o) => rel + i128::from(o[i]) - i128::from(o[reference]),
                None => rel,
            }))
        })
        .collect();
    let clocks_agree = origins.as_ref().is_some_and(|o| {
        // Every recording shares an instant with every other: the latest
        // first event is before the earliest last end.
        let on_clock: Vec<(i128, i128)> = parts
            .iter()
            .zip(o)
            .filter_map(|(p, &origin)| {
                let (a, b) = extent(&p.trace)?;
                Some((
                    i128::from(origin) + i128::from(a),
                    i128::from(origin) + i128::from(b),
                ))
            })
            .collect();
        let latest_start = on_clock.iter().map(|e| e.0).max();
        let earliest_end = on_clock.iter().map(|e| e.1).min();
        match (latest_start, earliest_end) {
            (Some(s), Some(e)) => s <= e,
            _ => true,
        }
    });
    let applied = match wanted {
        Alignment::Clock if clocks_agree => Alignment::Clock,
        Alignment::Clock if matched > 0 => Alignment::Collectives,
        Alignment::Clock => Alignment::Start,
        Alignment::Collectives => {
            if let Some(i) = counts.iter().position(|&n| n == 0) {
                let p = &parts[i];
                let kernels = p
                    .trace
                    .spans
                    .iter()
                    .filter(|s| {
                        s.kind == crate::model::SpanKind::Kernel
                            && p.trace.lanes.get(s.lane as usize).is_some_and(|l| {
                                matches!(l.kind, crate::model::LaneKind::Stream { .. })
                            })
                    })
                    .count();
                let name = if p.shown == p.label {
                    p.label.clone()
                } else {
                    format!("{} ({})", p.shown, p.label)
                };
                return Err(Error::Format(format!(
                    "{name}: expected collective kernels (names starting {}) to align the ranks on, found none among its {kernels} device kernels",
                    ranks::COLLECTIVE_PREFIXES.join(", ")
                )));
            }
            Alignment::Collectives
        }
        Alignment::Start => Alignment::Start,
    };
    // Each file's place before the earliest is moved to 0.
    let raw: Vec<i128> = match (applied, &origins) {
        (Alignment::Clock, Some(o)) => o.iter().map(|&o| i128::from(o)).collect(),
        (Alignment::Collectives, _) => relative
            .iter()
            .map(|r| -i128::from(r.unwrap_or(0)))
            .collect(),
        _ => vec![0; parts.len()],
    };
    let least = raw.iter().copied().min().unwrap_or(0);
    let offsets: Vec<u64> = raw
        .iter()
        .map(|&r| u64::try_from(r - least).unwrap_or(u64::MAX))
        .collect();
    let origin_ns = match (applied, &origins) {
        (Alignment::Clock, Some(_)) => i64::try_from(least).ok(),
        (Alignment::Collectives, Some(o)) => {
            i64::try_from(i128::from(o[reference]) - i128::from(offsets[reference])).ok()
        }
        _ => None,
    };
    Ok(Placement {
        applied,
        offsets,
        skews,
        counts,
        matched: matched as u64,
        origin_ns,
    })
}

/// Several files' traces as one ([`load_traces_with`]). Every event is
/// moved, not copied, into tables reserved once for all files.
fn merge(files: Vec<Part>, alignment: Alignment) -> Result<Trace> {
    if files.is_empty() {
        return Ok(Trace {
            version: crate::model::TRACE_VERSION,
            ..Trace::default()
        });
    }
    let placement = place(&files, alignment)?;
    let total = |f: fn(&Trace) -> usize| files.iter().map(|p| f(&p.trace)).sum::<usize>();
    let mut out = Trace {
        version: crate::model::TRACE_VERSION,
        devices: Vec::with_capacity(total(|t| t.devices.len())),
        lanes: Vec::with_capacity(total(|t| t.lanes.len())),
        spans: Vec::with_capacity(total(|t| t.spans.len())),
        instants: Vec::with_capacity(total(|t| t.instants.len())),
        flows: Vec::with_capacity(total(|t| t.flows.len())),
        counters: Vec::with_capacity(total(|t| t.counters.len())),
        memory: Vec::with_capacity(total(|t| t.memory.len())),
        origin_ns: placement.origin_ns,
        ..Trace::default()
    };
    let mut record = Ranks {
        alignment: placement.applied,
        matched: placement.matched,
        files: Vec::with_capacity(files.len()),
    };
    let mut report: Option<crate::model::ImportReport> = None;
    let mut next_flow = 1;
    for (
        i,
        Part {
            label,
            rank,
            trace: t,
            ..
        },
    ) in files.into_iter().enumerate()
    {
        let offset = placement.offsets[i];
        let at = |ts: u64| ts.saturating_add(offset);
        let lane_base = out.lanes.len() as u32;
        let device_base = out.devices.len() as u32;
        record.files.push(crate::model::RankFile {
            label: label.clone(),
            rank,
            lanes: lane_base..lane_base + t.lanes.len() as u32,
            devices: device_base..device_base + t.devices.len() as u32,
            origin_ns: t.origin_ns,
            offset_ns: offset,
            skew_ns: placement.skews[i],
            collectives: placement.counts[i],
        });
        out.version = out.version.max(t.version);
        out.dropped += t.dropped;
        for mut d in t.devices {
            d.device = format!("{label} \u{b7} {}", d.device);
            out.devices.push(d);
        }
        for mut lane in t.lanes {
            match &mut lane.kind {
                crate::model::LaneKind::Stream { device, .. } => *device += device_base,
                crate::model::LaneKind::Host { .. } => {
                    lane.group = if lane.group.is_empty() {
                        label.clone()
                    } else {
                        format!("{label} \u{b7} {}", lane.group)
                    };
                }
            }
            out.lanes.push(lane);
        }
        out.spans.extend(t.spans.into_iter().map(|mut s| {
            s.lane += lane_base;
            s.start_ns = at(s.start_ns);
            s
        }));
        out.instants.extend(t.instants.into_iter().map(|mut i| {
            i.lane += lane_base;
            i.ts_ns = at(i.ts_ns);
            i
        }));
        out.flows.extend(t.flows.into_iter().map(|mut f| {
            f.id = next_flow;
            next_flow += 1;
            f.from.lane += lane_base;
            f.to.lane += lane_base;
            f.from.ts_ns = at(f.from.ts_ns);
            f.to.ts_ns = at(f.to.ts_ns);
            f
        }));
        out.counters.extend(t.counters.into_iter().map(|mut c| {
            c.device += device_base;
            for p in &mut c.points {
                p.0 = at(p.0);
            }
            c
        }));
        out.memory.extend(t.memory.into_iter().map(|mut m| {
            m.device += device_base;
            m.ts_ns = at(m.ts_ns);
            m
        }));
        out.calibrations
            .extend(t.calibrations.into_iter().map(|mut c| {
                c.device += device_base;
                c
            }));
        if let Some(r) = t.import {
            let total = report.get_or_insert_with(Default::default);
            if total.format.is_empty() {
                total.format = r.format;
            } else if !total.format.contains(&r.format) {
                total.format = format!("{}; {}", total.format, r.format);
            }
            total.events += r.events;
            total.imported += r.imported;
            for (reason, n) in r.skipped {
                match total.skipped.iter_mut().find(|(k, _)| *k == reason) {
                    Some(entry) => entry.1 += n,
                    None => total.skipped.push((reason, n)),
                }
            }
        }
    }
    // Each file's events are in time order; together they are sorted.
    out.memory.sort_by_key(|m| m.ts_ns);
    if let Some(r) = &mut report {
        r.skipped
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    out.import = report;
    out.ranks = Some(record);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_picks_the_format_for_saving_and_the_content_for_loading() {
        for format in [TraceFileFormat::Json, TraceFileFormat::Native] {
            let name = format!("a.trace.{}", format.extension().to_uppercase());
            assert_eq!(TraceFileFormat::from_path(Path::new(&name)), Ok(format));
        }
        assert!(TraceFileFormat::from_path(Path::new("trace")).is_err());
        let trace = Trace {
            version: crate::model::TRACE_VERSION,
            ..Trace::default()
        };
        for format in [TraceFileFormat::Json, TraceFileFormat::Native] {
            let bytes = to_bytes(&trace, format).expect("encodes");
            assert_eq!(TraceFileFormat::sniff(&bytes), format);
            assert_eq!(from_bytes(&bytes), Ok(trace.clone()));
        }
    }

    #[test]
    fn no_files_merge_into_an_empty_trace_whatever_the_alignment() {
        for alignment in Alignment::ALL {
            let t = merge_files_with(Vec::new(), alignment).expect("nothing to align");
            assert_eq!((t.spans.len(), t.ranks, t.origin_ns), (0, None, None));
        }
        assert_eq!(merge_files(Vec::new()).version, crate::model::TRACE_VERSION);
    }
}
