//! [`EventFlag`]: what an event records.

/// How an event is created (c10's `EventFlag`).
///
/// Timing is off by default, as in c10 (`PYTORCH_DEFAULT`): recording a
/// timestamp can cost a query slot or a serialisation point on some
/// backends, so it is paid only when asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EventFlag {
    /// No timing: the event only marks a point in a stream (c10's
    /// `PYTORCH_DEFAULT`, Python's `enable_timing=False`).
    #[default]
    Default,
    /// The event also records a device timestamp, so
    /// [`Event::elapsed_time`](crate::Event::elapsed_time) works (c10's
    /// `BACKEND_DEFAULT`, Python's `enable_timing=True`).
    Timing,
}

impl EventFlag {
    /// Whether events with this flag record timestamps.
    pub const fn timing(self) -> bool {
        matches!(self, EventFlag::Timing)
    }
}
