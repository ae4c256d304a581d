//! Objects a backend creates on first use and keeps for the process: its
//! devices (one slot per index) and the native streams behind a device's
//! stream ids ([`Streams`](super::pool::Streams)).
//!
//! A slot is filled at most once: concurrent first users wait for the one
//! creation, and a creation that failed is kept, so later users get the
//! same error instead of a second attempt. Nothing is ever removed, which
//! is what lets backends hand out `&'static` references to what they keep
//! in a `static` table.

use std::fmt;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// A fixed number of slots, each created on first use; see the
/// [module docs](self).
pub struct Slots<T> {
    slots: Box<[OnceLock<Result<T>>]>,
}

impl<T> fmt::Debug for Slots<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slots")
            .field("len", &self.slots.len())
            .field("created", &self.created().count())
            .finish()
    }
}

impl<T> Slots<T> {
    /// `len` empty slots.
    pub fn new(len: usize) -> Self {
        Slots {
            slots: (0..len).map(|_| OnceLock::new()).collect(),
        }
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Slot `i`, created by `create` on first use (or the error its
    /// creation kept). An index out of range is an error.
    pub fn get_or_create(&self, i: usize, create: impl FnOnce() -> Result<T>) -> Result<&T> {
        let slot = self.slots.get(i).ok_or_else(|| {
            Error::invalid(format!(
                "expected a slot index in 0..{}, found {i}",
                self.slots.len()
            ))
        })?;
        slot.get_or_init(create).as_ref().map_err(Clone::clone)
    }

    /// What has been created successfully so far, in slot order.
    pub fn created(&self) -> impl Iterator<Item = &T> {
        self.slots
            .iter()
            .filter_map(OnceLock::get)
            .filter_map(|r| r.as_ref().ok())
    }

    /// Runs `f` on everything created so far, even after a failure;
    /// returns the first error.
    pub fn try_for_each_created(&self, mut f: impl FnMut(&T) -> Result<()>) -> Result<()> {
        let mut first = None;
        for t in self.created() {
            if let Err(e) = f(t) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
