//! The trace crate's error type.

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading, writing or merging a trace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A trace file (JSON or native) could not be read or written: what was
    /// expected, what was found, and where (byte offset or JSON path).
    #[error("trace format error: {0}")]
    Format(String),

    /// A trace fragment names a device or lane outside its own tables, so
    /// it cannot be merged ([`Trace::merge`](crate::Trace::merge)).
    #[error("profiler live error: {0}")]
    Merge(String),
}
