//! Host streams: in-order queues of work, run inline on the submitting
//! thread (the CPU default stream) or on a worker thread of their own
//! (pool streams, and every stream of a host-thread accelerator such as
//! the `npu` example).
//!
//! - Tasks run in submission order. Workers are created on first use and
//!   live for the process, as pool streams do.
//! - A failing task does not stop the stream; its error is kept and
//!   reported by the stream's next `query`/`synchronize` (the first error
//!   wins; `synchronize` reports it once). A panic inside a task is caught
//!   and reported the same way. Nothing is lost silently.
//! - Every item a worker runs is counted, in order: item `n` (1, 2, ...)
//!   is complete when the count reaches `n`, which one atomic load tells
//!   (as a timeline semaphore's value does). Untimed events are such a
//!   position ([`Position`]); timed events are markers in the queue that
//!   take the host time when reached, in the same critical section that
//!   counts them, so whoever sees a marker complete also sees the count.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::error::{Error, Result};

/// Work for a host stream.
pub type Task = Box<dyn FnOnce() -> Result<()> + Send>;

/// Locks a mutex, ignoring poisoning: every critical section here leaves
/// the data consistent (panics are caught outside the lock).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run_task(task: impl FnOnce() -> Result<()>) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(task)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".to_owned());
            Err(Error::invalid(format!(
                "a task panicked on a host stream: {msg}"
            )))
        }
    }
}

enum Item {
    Work(Task),
    /// Completes a marker in the same critical section that counts it, so
    /// whoever sees the marker complete also sees the stream's count.
    Marker(Arc<Marker>),
}

#[derive(Default)]
struct StreamState {
    queue: VecDeque<Item>,
    submitted: u64,
    completed: u64,
    error: Option<Error>,
}

#[derive(Default)]
pub(super) struct StreamShared {
    state: Mutex<StreamState>,
    work: Condvar,
    idle: Condvar,
    /// `state.submitted`, readable without the lock (written under it).
    submitted: AtomicU64,
    /// `state.completed`, readable without the lock (written under it,
    /// after the item's effects).
    completed: AtomicU64,
}

impl StreamShared {
    /// Counts one finished item (under the state lock).
    fn count_completed(&self, s: &mut StreamState) {
        s.completed += 1;
        self.completed.store(s.completed, Ordering::Release);
    }
}

/// A point in a worker stream's order: complete once the stream has
/// finished `seq` items.
#[derive(Clone)]
pub(super) struct Position {
    stream: Arc<StreamShared>,
    seq: u64,
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Position({})", self.seq)
    }
}

impl Position {
    /// Whether the stream has finished everything up to this point. One
    /// atomic load.
    pub(super) fn reached(&self) -> bool {
        self.stream.completed.load(Ordering::Acquire) >= self.seq
    }

    /// Waits until the stream reaches this point.
    pub(super) fn wait(&self) {
        if self.reached() {
            return;
        }
        let mut s = lock(&self.stream.state);
        while s.completed < self.seq {
            s = self
                .stream
                .idle
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// An in-order queue of host work; see the module docs.
#[derive(Clone)]
pub struct HostStream {
    shared: Arc<StreamShared>,
    inline: bool,
}

impl fmt::Debug for HostStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = lock(&self.shared.state);
        f.debug_struct("HostStream")
            .field("inline", &self.inline)
            .field("submitted", &s.submitted)
            .field("completed", &s.completed)
            .finish()
    }
}

impl HostStream {
    /// A stream that runs each task on the submitting thread, at once.
    pub fn inline() -> Self {
        HostStream {
            shared: Arc::default(),
            inline: true,
        }
    }

    /// A stream with its own worker thread named `name`.
    pub fn spawn(name: String) -> Result<Self> {
        let shared: Arc<StreamShared> = Arc::default();
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || worker_loop(&worker))
            .map_err(|e| {
                Error::invalid(format!("could not start host stream thread {name}: {e}"))
            })?;
        Ok(HostStream {
            shared,
            inline: false,
        })
    }

    /// Whether tasks run on the submitting thread.
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// Enqueues `task`. On an inline stream the task runs now and its error
    /// is returned directly.
    pub fn submit(&self, task: Task) -> Result<()> {
        if self.inline {
            return run_task(task);
        }
        self.push(Item::Work(task));
        Ok(())
    }

    /// Runs `task` now on the calling thread, as [`submit`](Self::submit)
    /// does on an inline stream, without boxing it (a task that borrows
    /// the caller's data). On a worker's stream this is an error: its work
    /// must be submitted.
    pub fn run_inline(&self, task: impl FnOnce() -> Result<()>) -> Result<()> {
        if !self.inline {
            return Err(Error::invalid(
                "run_inline on a host stream with a worker thread (submit its work instead)",
            ));
        }
        run_task(task)
    }

    fn push(&self, item: Item) {
        let mut s = lock(&self.shared.state);
        s.queue.push_back(item);
        s.submitted += 1;
        self.shared.submitted.store(s.submitted, Ordering::Release);
        drop(s);
        self.shared.work.notify_one();
    }

    /// The point after everything submitted so far, or `None` where that
    /// has already run (an inline stream, or a worker with nothing
    /// pending). Takes no lock and allocates nothing.
    pub(super) fn position(&self) -> Option<Position> {
        if self.inline {
            return None;
        }
        let seq = self.shared.submitted.load(Ordering::Acquire);
        let position = Position {
            stream: Arc::clone(&self.shared),
            seq,
        };
        (!position.reached()).then_some(position)
    }

    /// Enqueues a marker: it completes (with the host time) when the
    /// stream reaches it.
    pub(super) fn submit_marker(&self, marker: Arc<Marker>) {
        if self.inline {
            marker.complete();
        } else {
            self.push(Item::Marker(marker));
        }
    }

    /// Whether every submitted task has finished. Never blocks. Reports
    /// (without clearing) the first error of a failed task.
    pub fn query(&self) -> Result<bool> {
        let s = lock(&self.shared.state);
        if let Some(e) = &s.error {
            return Err(e.clone());
        }
        Ok(s.completed == s.submitted)
    }

    /// Waits until every task submitted so far has finished; returns (and
    /// clears) the first error of a failed task.
    pub fn synchronize(&self) -> Result<()> {
        let mut s = lock(&self.shared.state);
        let target = s.submitted;
        while s.completed < target {
            s = self
                .shared
                .idle
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match s.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn worker_loop(shared: &StreamShared) {
    loop {
        let item = {
            let mut s = lock(&shared.state);
            loop {
                if let Some(t) = s.queue.pop_front() {
                    break t;
                }
                s = shared.work.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        };
        match item {
            Item::Work(task) => {
                let result = run_task(task);
                let mut s = lock(&shared.state);
                if let Err(e) = result {
                    s.error.get_or_insert(e);
                }
                shared.count_completed(&mut s);
            }
            Item::Marker(marker) => {
                let mut s = lock(&shared.state);
                shared.count_completed(&mut s);
                marker.complete();
            }
        }
        shared.idle.notify_all();
    }
}

/// The completion state of one record of a [`HostEvent`](super::HostEvent).
#[derive(Debug, Default)]
pub(super) struct Marker {
    at: Mutex<Option<Instant>>,
    cv: Condvar,
}

impl Marker {
    pub(super) fn complete(&self) {
        *lock(&self.at) = Some(Instant::now());
        self.cv.notify_all();
    }
    pub(super) fn time(&self) -> Option<Instant> {
        *lock(&self.at)
    }
    pub(super) fn wait(&self) -> Instant {
        let mut at = lock(&self.at);
        loop {
            if let Some(t) = *at {
                return t;
            }
            at = self.cv.wait(at).unwrap_or_else(PoisonError::into_inner);
        }
    }
}
