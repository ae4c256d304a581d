//! The built-in profiler (in progress): the trace model is in [`trace`].

mod check;
pub mod json;
pub mod native;
pub mod trace;

pub use native::{load_trace, save_trace};
pub use trace::*;
