//! Trace well-formedness checks (`Trace::check`).
