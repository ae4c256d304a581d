//! # keel-trace: the trace model and trace processing
//!
//! What Keel's profiler records and what its viewer shows, apart from both:
//! a [`Trace`] is plain data (devices, lanes, spans, flows, counters,
//! memory events, all on one host clock in nanoseconds), and this crate
//! holds everything that works on traces and needs no device:
//!
//! - the model ([`model`], re-exported at the root), its invariants
//!   ([`Trace::check`]) and fragment merging ([`Trace::merge`]);
//! - Chrome Trace Event JSON ([`json`]): Keel's writer, and (feature
//!   `import`, on by default) a streaming reader for Keel's own files and
//!   for other tools' (PyTorch's Kineto traces, Chrome traces), with an
//!   import report of what was skipped and why;
//! - Keel's native binary format ([`native`]) and files by extension and
//!   magic bytes, compressed or not ([`file`](mod@file), feature `import`);
//! - indexed files (`indexed`, feature `import`): a trace converted
//!   once into the viewer's index with coarser levels above it, mapped and
//!   read only where the timeline looks, for traces larger than memory;
//! - the viewer's index ([`view`]), statistics ([`stats`]),
//!   HolisticTraceAnalysis-style analyses ([`analysis`]) and the analysis of
//!   an area of the timeline ([`selection`]);
//! - the ranks of a distributed job opened as one trace
//!   ([`file::load_traces_with`], feature
//!   `import`): put on one clock (their files' own clocks, kept as each
//!   trace's [`origin_ns`](Trace::origin_ns), or the ends of their NCCL
//!   collectives), and compared ([`ranks`]: communication, computation,
//!   their overlap, skew, the rank that enters collectives last);
//! - PyTorch's CUDA memory snapshots (`snapshot`, feature `import`): the
//!   pickle `torch.cuda.memory._dump_snapshot` writes, read without
//!   Python, and the memory viewer's timelines and allocator states;
//! - the comparison of a baseline and a candidate trace ([`diff`]): steps
//!   and operators aligned, per-name and per-span time changes, a table
//!   for scripts.
//!
//! The device layer (`keel-device`) depends on this crate without the
//! `import` feature, so a program that only records compiles no JSON
//! parser and no compression crate; the desktop viewer (`keel-profiler`)
//! depends on it with the feature. Nothing here depends on a GPU API.
//!
//! ```
//! use keel_trace::{Trace, json};
//!
//! # fn main() -> keel_trace::Result<()> {
//! let trace = Trace::default();
//! let text = json::to_json_string(&trace)?;
//! # #[cfg(feature = "import")]
//! assert_eq!(json::read_json(&text)?, trace);
//! # Ok(()) }
//! ```

pub mod analysis;
pub mod diff;
mod error;
#[cfg(feature = "import")]
pub mod file;
#[cfg(feature = "import")]
pub mod indexed;
pub mod json;
pub mod model;
pub mod native;
pub mod ranks;
pub mod selection;
#[cfg(feature = "import")]
pub mod snapshot;
pub mod stats;
pub mod view;

pub use error::{Error, Result};
#[cfg(feature = "import")]
pub use file::{load_trace, load_traces, load_traces_with, save_trace};
pub use model::*;
