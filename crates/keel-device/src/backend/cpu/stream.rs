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
//!   position (`Position`); timed events are markers in the queue that
//!   take the host time when reached, in the same critical section that
//!   counts them, so whoever sees a marker complete also sees the count.

use std::cell::RefCell;
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
        let timed = self.timed();
        if self.inline {
            return run_timed(timed, task);
        }
        let task = match timed {
            Some(t) => Box::new(move || run_timed(Some(t), task)),
            None => task,
        };
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
        run_timed(self.timed(), task)
    }

    /// Starts timing the work the calling thread submits to this stream
    /// next, inside that work (the profiler's device spans, see
    /// [`TimedWork`]); replaces a timing this thread left unfinished.
    pub(super) fn begin_timed(&self) {
        let work = Arc::new(TimedWork::default());
        TIMED.with(|t| *t.borrow_mut() = Some((self.id(), work)));
    }

    /// Ends what [`begin_timed`](Self::begin_timed) started: markers that
    /// complete when the first task submitted since starts and when the
    /// last one ends. Work that submitted no task (a wait already
    /// satisfied, an event record) gets one marker at its point in the
    /// stream, for both. `None` when this thread is not timing this
    /// stream.
    pub(super) fn end_timed(&self) -> Option<(Arc<Marker>, Arc<Marker>)> {
        let me = self.id();
        let (_, work) = TIMED.with(|t| {
            let mut t = t.borrow_mut();
            t.as_ref()
                .is_some_and(|(id, _)| *id == me)
                .then(|| t.take())?
        })?;
        let mut count = lock(&work.count);
        count.closed = true;
        if count.submitted == 0 {
            drop(count);
            self.submit_marker(Arc::clone(&work.start));
            return Some((Arc::clone(&work.start), Arc::clone(&work.start)));
        }
        if count.finished == count.submitted
            && let Some(t) = count.last_end
        {
            work.end.complete_at(t);
        }
        drop(count);
        Some((Arc::clone(&work.start), Arc::clone(&work.end)))
    }

    /// This stream's identity, for the calling thread's timing.
    fn id(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    /// The timing the calling thread has started on this stream, counting
    /// one more task into it.
    fn timed(&self) -> Option<Arc<TimedWork>> {
        TIMED.with(|t| {
            let t = t.borrow();
            let (_, work) = t.as_ref().filter(|(id, _)| *id == self.id())?;
            lock(&work.count).submitted += 1;
            Some(Arc::clone(work))
        })
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

thread_local! {
    /// The timing this thread has started on a stream: (stream id, work).
    static TIMED: RefCell<Option<(usize, Arc<TimedWork>)>> = const { RefCell::new(None) };
}

/// The device span of one profiled operation on a host stream, timed
/// inside its own tasks (as Vulkan and wgpu write the timestamps in the
/// operation's own submission): `start` completes when the first task
/// starts, `end` when the last one ends. No marker enters the stream's
/// queue for it, so profiling adds no work to the stream.
#[derive(Debug, Default)]
pub(super) struct TimedWork {
    start: Arc<Marker>,
    end: Arc<Marker>,
    count: Mutex<TimedCount>,
}

#[derive(Debug, Default)]
struct TimedCount {
    /// Tasks submitted, and finished (panicked ones included).
    submitted: u32,
    finished: u32,
    /// No more tasks will come (the operation was enqueued).
    closed: bool,
    /// When the last finished task ended.
    last_end: Option<Instant>,
}

/// Runs `task`, inside `timed`'s span when given.
fn run_timed(timed: Option<Arc<TimedWork>>, task: impl FnOnce() -> Result<()>) -> Result<()> {
    let Some(work) = timed else {
        return run_task(task);
    };
    work.start.complete_once();
    let result = run_task(task);
    let end = Instant::now();
    let mut count = lock(&work.count);
    count.finished += 1;
    count.last_end = Some(end);
    if count.closed && count.finished == count.submitted {
        work.end.complete_at(end);
    }
    result
}

/// The completion state of one record of a [`HostEvent`](super::HostEvent).
#[derive(Debug, Default)]
pub(super) struct Marker {
    at: Mutex<Option<Instant>>,
    cv: Condvar,
}

impl Marker {
    pub(super) fn complete(&self) {
        self.complete_at(Instant::now());
    }
    /// Completes the marker with the time `t`.
    pub(super) fn complete_at(&self, t: Instant) {
        *lock(&self.at) = Some(t);
        self.cv.notify_all();
    }
    /// Completes the marker now, unless it already is.
    pub(super) fn complete_once(&self) {
        let mut at = lock(&self.at);
        if at.is_none() {
            *at = Some(Instant::now());
            drop(at);
            self.cv.notify_all();
        }
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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// An operation timed inside its tasks puts nothing of its own in the
    /// worker's queue: its span runs from its first task's start to its
    /// last task's end, and completes only when that last task has run.
    #[test]
    fn work_timed_inside_its_tasks_adds_no_queue_items() {
        let s = HostStream::spawn("keel-test-timed".to_owned()).expect("stream");
        // The worker is held up, so the timed tasks queue behind it.
        let (release, gate) = mpsc::channel::<()>();
        s.submit(Box::new(move || {
            let _ = gate.recv();
            Ok(())
        }))
        .expect("blocker");
        s.begin_timed();
        for _ in 0..2 {
            s.submit(Box::new(|| {
                std::thread::sleep(Duration::from_millis(2));
                Ok(())
            }))
            .expect("task");
        }
        let (start, end) = s.end_timed().expect("this thread timed the stream");
        assert_eq!(
            s.shared.submitted.load(Ordering::Acquire),
            3,
            "the blocker and the two tasks, no marker"
        );
        assert!(
            start.time().is_none() && end.time().is_none(),
            "not run yet"
        );
        release.send(()).expect("release");
        let (t0, t1) = (start.wait(), end.wait());
        assert!(
            t1 - t0 >= Duration::from_millis(4),
            "both tasks inside the span"
        );
        s.synchronize().expect("sync");
        assert!(s.end_timed().is_none(), "the timing ended");
    }

    /// Work that submitted no task gets one marker at its point, for both
    /// ends; an inline stream's span is complete when the work returns.
    #[test]
    fn timed_work_without_tasks_and_inline_work() {
        let s = HostStream::spawn("keel-test-timed-empty".to_owned()).expect("stream");
        s.begin_timed();
        let (start, end) = s.end_timed().expect("timed");
        assert!(Arc::ptr_eq(&start, &end), "one marker for both ends");
        assert_eq!(s.shared.submitted.load(Ordering::Acquire), 1);
        s.synchronize().expect("sync");
        assert!(start.time().is_some());

        let inline = HostStream::inline();
        inline.begin_timed();
        inline
            .run_inline(|| {
                std::thread::sleep(Duration::from_millis(1));
                Ok(())
            })
            .expect("run");
        let (start, end) = inline.end_timed().expect("timed");
        let (t0, t1) = (start.time().expect("started"), end.time().expect("ended"));
        assert!(t1 - t0 >= Duration::from_millis(1));
        // Another stream's work is not timed by this one's bracket.
        inline.begin_timed();
        s.submit(Box::new(|| Ok(()))).expect("other stream");
        assert!(s.end_timed().is_none());
        let (start, end) = inline.end_timed().expect("timed, with no task");
        assert!(Arc::ptr_eq(&start, &end) && start.time().is_some());
    }
}
