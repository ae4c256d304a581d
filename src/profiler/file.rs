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
//!   own, read exactly, or another tool's, imported).
//!
//! This is the one place that decides; viewers (the app) call it rather
//! than looking at names or bytes themselves.

use std::path::Path;

use super::native::{self, EXTENSION, MAGIC};
use super::{json, trace::Trace};
use crate::error::{Error, Result};

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
            other => Err(Error::TraceFormat(format!(
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
    match TraceFileFormat::sniff(bytes) {
        TraceFileFormat::Native => native::read_native(bytes),
        TraceFileFormat::Json => json::read_json_bytes(bytes),
    }
}

/// Saves `trace` to `path`, as JSON for `.json` and in the native format
/// for `.keeltrace` (any other extension is an error).
pub fn save_trace(trace: &Trace, path: &Path) -> Result<()> {
    let bytes = to_bytes(trace, TraceFileFormat::from_path(path)?)?;
    std::fs::write(path, bytes).map_err(|e| {
        Error::TraceFormat(format!(
            "could not write trace file {}: {e}",
            path.display()
        ))
    })
}

/// Loads a trace saved by [`save_trace`] (or a JSON trace of another
/// tool): native when the file starts with [`MAGIC`], JSON otherwise,
/// whatever the extension.
pub fn load_trace(path: &Path) -> Result<Trace> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::TraceFormat(format!("could not read trace file {}: {e}", path.display()))
    })?;
    from_bytes(&bytes)
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
            version: super::super::trace::TRACE_VERSION,
            ..Trace::default()
        };
        for format in [TraceFileFormat::Json, TraceFileFormat::Native] {
            let bytes = to_bytes(&trace, format).expect("encodes");
            assert_eq!(TraceFileFormat::sniff(&bytes), format);
            assert_eq!(from_bytes(&bytes), Ok(trace.clone()));
        }
    }
}
