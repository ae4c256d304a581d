//! The native binary trace format.
