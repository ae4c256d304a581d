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

/// Devices a backend adopted from the program (interop: a `wgpu::Device`,
/// an ash device, a CUDA context), numbered after the devices the backend
/// found itself. Append-only and never emptied, like [`Slots`]: an adopted
/// device is kept for the rest of the process, so references to it are
/// `'static`. Lookups take no lock (one acquire load per slot).
pub struct Adopted<T: 'static> {
    slots: [OnceLock<&'static T>; MAX_ADOPTED],
    /// How many slots are filled (a prefix of `slots`).
    len: std::sync::atomic::AtomicUsize,
    /// Serialises adoptions (lookups never take it).
    adopting: std::sync::Mutex<()>,
}

/// How many devices one backend adopts at most: with the devices it finds
/// itself this stays within c10's 8-bit device index.
pub const MAX_ADOPTED: usize = 64;

impl<T> fmt::Debug for Adopted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adopted").field("len", &self.len()).finish()
    }
}

impl<T: 'static> Default for Adopted<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: 'static> Adopted<T> {
    /// No device adopted.
    pub const fn new() -> Self {
        Adopted {
            slots: [const { OnceLock::new() }; MAX_ADOPTED],
            len: std::sync::atomic::AtomicUsize::new(0),
            adopting: std::sync::Mutex::new(()),
        }
    }

    /// How many devices were adopted.
    pub fn len(&self) -> usize {
        self.len.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adopted device `i` (0 is the first adopted), if there is one.
    pub fn get(&self, i: usize) -> Option<&'static T> {
        self.slots.get(i)?.get().copied()
    }

    /// Every adopted device, in adoption order.
    pub fn iter(&self) -> impl Iterator<Item = &'static T> + '_ {
        self.slots.iter().map_while(|s| s.get().copied())
    }

    /// Adopts a device: `existing` finds one already adopted (adopting the
    /// same native device twice gives the same Keel device), otherwise
    /// `make` builds it from its position among the adopted (0-based).
    /// Returns the position. An error when [`MAX_ADOPTED`] are adopted.
    pub fn adopt(
        &self,
        existing: impl Fn(&T) -> bool,
        make: impl FnOnce(usize) -> Result<T>,
    ) -> Result<usize> {
        let _one = self
            .adopting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = self.iter().position(existing) {
            return Ok(i);
        }
        let i = self.len();
        let slot = self.slots.get(i).ok_or_else(|| {
            Error::invalid(format!(
                "expected at most {MAX_ADOPTED} adopted devices per backend, found one more"
            ))
        })?;
        let device: &'static T = Box::leak(Box::new(make(i)?));
        // Only this thread fills slot `i` (under `adopting`), so it is empty.
        let _ = slot.set(device);
        self.len.store(i + 1, std::sync::atomic::Ordering::Release);
        Ok(i)
    }
}
