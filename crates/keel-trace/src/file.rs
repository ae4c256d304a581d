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
//!   distributed job), each file's lanes in their own group.
//!
//! This is the one place that decides; viewers (the app) call it rather
//! than looking at names or bytes themselves.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use crate::error::{Error, Result};
use crate::native::{self, EXTENSION, MAGIC};
use crate::{json, model::Trace};

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
/// distributed job: each file's host lanes are grouped under a prefix
/// (`rank N · ` from another tool's file's `distributedInfo.rank`, else
/// the file name), its devices are its own (`rank N · cuda:0`), and its flows and
/// counters and memory events follow it.
///
/// Clocks: every file is aligned on its own earliest event (imports start
/// at 0; Keel's files already count from their session's start), so steps
/// of different ranks line up even when their hosts' clocks differ, as
/// HolisticTraceAnalysis compares ranks. The import report adds up the
/// files' reports. One file is the same as [`load_trace`]; with several,
/// an error names the file it comes from.
pub fn load_traces(paths: &[impl AsRef<Path>]) -> Result<Trace> {
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
        loaded.push((label, trace));
    }
    if loaded.len() == 1 {
        return Ok(loaded.remove(0).1);
    }
    Ok(merge_files(loaded))
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

/// Several files' traces as one: see [`load_traces`].
pub fn merge_files(files: Vec<(String, Trace)>) -> Trace {
    let mut out = Trace {
        version: crate::model::TRACE_VERSION,
        ..Trace::default()
    };
    let mut report: Option<crate::model::ImportReport> = None;
    let mut next_flow = 1;
    for (label, t) in files {
        let lane_base = out.lanes.len() as u32;
        let device_base = out.devices.len() as u32;
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
            s
        }));
        out.instants.extend(t.instants.into_iter().map(|mut i| {
            i.lane += lane_base;
            i
        }));
        out.flows.extend(t.flows.into_iter().map(|mut f| {
            f.id = next_flow;
            next_flow += 1;
            f.from.lane += lane_base;
            f.to.lane += lane_base;
            f
        }));
        out.counters.extend(t.counters.into_iter().map(|mut c| {
            c.device += device_base;
            c
        }));
        out.memory.extend(t.memory.into_iter().map(|mut m| {
            m.device += device_base;
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
    out
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
}
