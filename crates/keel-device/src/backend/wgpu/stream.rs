//! Logical streams over a device's single queue, and every submission to
//! that queue: sequence numbers and completion.
//!
//! wgpu gives a device one queue. Each Keel stream of a wgpu device (the
//! default stream and every pool stream) is a [`QueueStream`], a logical
//! stream that submits to that queue: it keeps its own order and every
//! stream semantic, but logical streams never run concurrently.
//!
//! All submission tracking is in this file:
//!
//! - A submission takes the device's [`SubmissionOrder`] lock, submits,
//!   takes the next sequence number (1, 2, ...), hands the submission to
//!   the device's poll thread and becomes its stream's last submission
//!   before the lock is released, so sequence numbers follow the queue's
//!   order.
//! - A [`Point`] is "everything submitted up to sequence number `seq`"
//!   (0: before any submission): what a stream's query and synchronize,
//!   an event and a readback wait for. Asking whether a point is done is
//!   an atomic load; waiting for it waits on a condition variable.
//! - Work that belongs to no stream (resolving timestamps for
//!   `elapsed_time`) goes through [`submit_outside_streams`], under the
//!   same lock.
//!
//! # Note [wgpu completion tracking]
//!
//! Every Keel submission gets a sequence number `seq` (1, 2, ...) in the
//! order it reached the queue; a logical stream remembers the `seq` of its
//! last submission and an event the `seq` it follows. "Is `seq` complete?"
//! is answered from [`Completion`] alone, an atomic load: queries
//! (`stream.query()`, `event.query()`, `Readback::is_ready`) never call
//! into wgpu. After each submission, [`SubmissionOrder::submit`] polls
//! once without waiting (`PollType::Poll`); when wgpu reports its queue
//! empty, every submission so far is complete. Otherwise the submission
//! is handed to the device's poll thread (`keel-wgpu-N`, see
//! [`poll_thread`]), which waits for submissions with
//! `device.poll(Wait { submission_index, timeout: None })` and advances
//! `completed`; `synchronize` waits on a condition variable for it.
//!
//! The poll thread works only on demand: for the newest submission that a
//! query found incomplete or a thread waits for, and to retire a backlog
//! of [`BACKLOG`] submissions nobody asked about (so the queue stays
//! bounded while the device keeps up). Waking it for every submission
//! would cost a futex wake and two context switches per launch, and its
//! polls would take wgpu's locks next to the launching thread's `submit`:
//! on a device that keeps up (wgpu's noop adapter, where only the host's
//! cost is left) that is a large part of a launch (docs/BENCHMARKS.md,
//! 2026-11-26, "Launch overhead on a device with no driver time"). A
//! query that finds its submission incomplete therefore answers "not yet"
//! once more after the work finished, while the poll thread catches up;
//! it never answers "complete" early.
//!
//! On GL, where the commands have run by the time `queue.submit` returns
//! (its fences may still signal a little later), the submitting thread
//! neither polls nor waits for the submission's fence: every wgpu call on
//! GL makes the device's one GL context current on the calling thread,
//! and the poll thread, working on demand, takes it rarely (under the GL
//! context lock, Note [GL context lock]). Waiting for the fence in
//! `submit` would cost a few percent of a small launch, and handing every
//! GL submission to a poll thread that waits for it at once would move
//! the context to that thread and back each time, which costs more than
//! the launch itself. A copy from host memory on GL polls once without
//! waiting ([`SubmissionOrder::reap_gl`]), so that its staging buffer is
//! ready again for the next one.
//!
//! Why a query does not ask wgpu itself: a wgpu poll of any kind, even
//! `PollType::Poll` or a `Wait` with a zero timeout, can block, and a
//! bounded `Wait` can panic.
//!
//! - wgpu-core holds its device-wide submission lock (`command_indices`,
//!   written by `Queue::submit` from allocating the index until the
//!   submission is tracked) across the driver's `vkQueueSubmit`, and every
//!   poll takes that lock (shared) after reading the fence. lavapipe's
//!   `vkQueueSubmit` does not return until the previous submission has
//!   been executed (wgpu chains submissions with binary semaphores, and
//!   lavapipe's queue thread runs a submission to the end before the next
//!   one's wait is satisfied). So while one thread submits behind a slow
//!   kernel, every other thread's poll, and so a query that polled, blocks
//!   until that kernel has finished, and then reports "complete". The same
//!   holds for `Queue::on_submitted_work_done` registered after each
//!   submission: that call first flushes wgpu's pending writes (the
//!   uploads of parameter and staging buffers that other threads created
//!   meanwhile) as a submission of its own, which waits in
//!   `vkQueueSubmit` until the kernel just launched has run, so `launch`
//!   would return with its own kernel finished. Either way a concurrent
//!   conformance suite sees "complete" right after launching a slow
//!   kernel: never a wrong answer, but a late one.
//! - `Wait { submission_index, timeout: Some(..) }` reads the fence value,
//!   then wgpu-core checks whether its list of active submissions is empty
//!   and asserts that the fence reached the index if so. When another
//!   thread's poll retires the submission in between (with a newer fence
//!   value), the list is empty, the stale value is lower, and the
//!   assertion panics ("If the queue is empty, the current submission
//!   index ... should be at least the wait submission index ...").
//!   `tests/stream_stress.rs` exercises that race. Waits without a timeout
//!   cannot hit it: their fence value is read after the wait succeeded.
//!
//! Completion order can be trusted: wgpu signals one fence (a timeline
//! semaphore on Vulkan) per submission index, indices grow in submission
//! order, and wgpu-hal chains each submission after the previous one, so
//! submission `i` complete means every earlier one is. Keel takes `seq`
//! and hands `(seq, index)` to the poll thread under one lock around
//! `queue.submit` ([`SubmissionOrder::submit`]), so `seq` order is wgpu's
//! index order, a logical stream's last `seq` only grows, and tracking
//! each stream's last submission is enough. Nothing Keel submits bypasses
//! that lock (the timestamp resolve of `elapsed_time` included), so no
//! Keel thread holds wgpu's submission lock while another Keel thread is
//! inside `submit`; `launch` still waits in lavapipe's `vkQueueSubmit` for
//! the *previous* submission, never for its own.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::TY;
use super::device::{GlContextLock, WgpuDevice, lock};
use crate::core::DeviceIndex;
use crate::error::{Error, Result};

/// Which submissions have completed (Note [wgpu completion tracking]).
#[derive(Default)]
struct Completion {
    /// Submissions not yet known complete, and who sleeps on them.
    pending: Mutex<Pending>,
    /// Signalled when the poll thread has work: someone wants a pending
    /// submission, or the backlog is full.
    added: Condvar,
    /// Signalled when `completed` grows (synchronizing threads wait).
    advanced: Condvar,
    /// The highest sequence number known complete; every lower one is
    /// complete too.
    completed: AtomicU64,
    /// The highest sequence number anyone has asked about (a query, a
    /// wait) before it was known complete: the poll thread works while it
    /// is ahead of `completed`.
    wanted: AtomicU64,
}

/// What [`Completion::pending`] guards. A condition variable is signalled
/// only when someone sleeps on it: a notification is a system call even
/// with no waiter.
///
/// Generic over wgpu's submission index for its unit tests.
struct Pending<I = wgpu::SubmissionIndex> {
    /// Submissions not yet known complete, in submission order:
    /// `(seq, wgpu's index)`.
    queue: VecDeque<(u64, I)>,
    /// Whether the poll thread sleeps on `added`.
    poll_thread_asleep: bool,
    /// Whether the poll thread is retiring a full backlog (until it has
    /// emptied the queue).
    draining: bool,
    /// Threads sleeping on `advanced`.
    waiters: usize,
}

/// Pending submissions that wake the poll thread though nobody asked about
/// them: the bound on [`Pending::queue`] while the device keeps up.
const BACKLOG: usize = 64;

impl<I> Default for Pending<I> {
    fn default() -> Self {
        Pending {
            queue: VecDeque::new(),
            poll_thread_asleep: false,
            draining: false,
            waiters: 0,
        }
    }
}

impl<I: Clone> Pending<I> {
    /// The submission the poll thread should wait for next, if any: the
    /// newest wanted one (completing it completes every earlier one), or
    /// the oldest while a backlog is retired.
    fn target(&mut self, completed: u64, wanted: u64) -> Option<(u64, I)> {
        let oldest = self.queue.front()?;
        if wanted > completed && wanted >= oldest.0 {
            let at = self.queue.partition_point(|&(s, _)| s <= wanted);
            return Some(self.queue[at - 1].clone());
        }
        self.draining |= self.queue.len() >= BACKLOG;
        self.draining.then(|| oldest.clone())
    }

    /// Whether a submission pushed or wanted now gives a sleeping poll
    /// thread work (under the lock, where the thread decides to sleep).
    fn wakes(&self, completed: u64, wanted: u64) -> bool {
        self.poll_thread_asleep
            && !self.queue.is_empty()
            && (wanted > completed || self.queue.len() >= BACKLOG)
    }
}

impl Completion {
    /// The highest sequence number known complete.
    fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Whether submission `seq` is known complete (0: no submission). A
    /// submission not known complete yet is wanted: the poll thread finds
    /// out.
    fn is_done(&self, seq: u64) -> bool {
        if seq == 0 || self.completed() >= seq {
            return true;
        }
        // A plain load first: a thread polling in a loop does not write
        // the shared line on every call.
        if self.wanted.load(Ordering::Acquire) < seq
            && self.wanted.fetch_max(seq, Ordering::AcqRel) < seq
        {
            let pending = lock(&self.pending);
            let wake = pending.wakes(self.completed(), seq);
            drop(pending);
            if wake {
                self.added.notify_one();
            }
        }
        self.completed() >= seq
    }

    /// Hands submission `seq` to the poll thread, which waits for it when
    /// someone wants it or the backlog is full.
    fn push(&self, seq: u64, index: wgpu::SubmissionIndex) {
        let mut pending = lock(&self.pending);
        pending.queue.push_back((seq, index));
        let wake = pending.wakes(self.completed(), self.wanted.load(Ordering::Acquire));
        // Signalled after the unlock, so the woken thread does not block
        // on the lock at once (it decided to sleep under the lock: no
        // wakeup is lost).
        drop(pending);
        if wake {
            self.added.notify_one();
        }
    }

    /// Marks every submission up to `seq` complete.
    fn complete_through(&self, seq: u64) {
        let mut pending = lock(&self.pending);
        self.completed.fetch_max(seq, Ordering::AcqRel);
        while pending.queue.front().is_some_and(|&(s, _)| s <= seq) {
            pending.queue.pop_front();
        }
        let waiters = pending.waiters;
        drop(pending);
        if waiters > 0 {
            self.advanced.notify_all();
        }
    }

    /// Blocks until submission `seq` is complete.
    fn wait(&self, seq: u64) {
        let mut pending = lock(&self.pending);
        while !(seq == 0 || self.completed() >= seq) {
            self.wanted.fetch_max(seq, Ordering::AcqRel);
            if pending.wakes(self.completed(), seq) {
                self.added.notify_one();
            }
            pending.waiters += 1;
            pending = self
                .advanced
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
            pending.waiters -= 1;
        }
    }

    /// Blocks until the poll thread has a submission to wait for
    /// ([`Pending::target`]); returns it and the sequence number of the
    /// newest pending one.
    fn next(&self) -> ((u64, wgpu::SubmissionIndex), u64) {
        let mut pending = lock(&self.pending);
        loop {
            let (completed, wanted) = (self.completed(), self.wanted.load(Ordering::Acquire));
            if let Some(target) = pending.target(completed, wanted) {
                let newest = pending.queue.back().map_or(target.0, |&(s, _)| s);
                return (target, newest);
            }
            pending.draining = false;
            pending.poll_thread_asleep = true;
            pending = self
                .added
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
            pending.poll_thread_asleep = false;
        }
    }
}

/// The body of a device's poll thread: waits for the submission
/// [`Completion::next`] names (no timeout, see Note [wgpu completion
/// tracking]) and marks it complete, forever. wgpu runs completion and
/// mapping callbacks on this thread too. On GL it waits under the context
/// lock held exclusively, as every wait does (Note [GL context lock]).
fn poll_thread(device: wgpu::Device, completion: Arc<Completion>, gl: Arc<GlContextLock>) {
    loop {
        let ((seq, index), newest) = completion.next();
        let exclusive = gl.exclusive();
        let status = device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        drop(exclusive);
        match status {
            // Everything submitted before this poll has completed.
            Ok(wgpu::PollStatus::QueueEmpty) => completion.complete_through(newest),
            Ok(_) => completion.complete_through(seq),
            // wgpu's GL backend caps a wait at about 4 s: wait again.
            Err(wgpu::PollError::Timeout) => {}
            // A submission wgpu rejected (a validation error, reported by
            // `submit`): nothing of it runs.
            Err(wgpu::PollError::WrongSubmissionIndex(..)) => completion.complete_through(seq),
        }
    }
}

/// A device's submission order: the sequence number of the last
/// submission (held around every `queue.submit`), and which submissions
/// have completed, tracked by the device's poll thread (Note [wgpu
/// completion tracking]).
pub(super) struct SubmissionOrder {
    last: Mutex<u64>,
    completion: Arc<Completion>,
}

impl SubmissionOrder {
    /// The submission order of wgpu device `device` (Keel's `wgpu:index`),
    /// with its poll thread started.
    pub(super) fn start(
        device: &wgpu::Device,
        index: DeviceIndex,
        gl: Arc<GlContextLock>,
    ) -> Result<Self> {
        let completion = Arc::new(Completion::default());
        let (poll_device, poll_completion) = (device.clone(), Arc::clone(&completion));
        std::thread::Builder::new()
            .name(format!("keel-wgpu-{index}"))
            .spawn(move || poll_thread(poll_device, poll_completion, gl))
            .map_err(|e| {
                Error::backend(
                    TY,
                    format!("starting the completion thread of wgpu:{index}: {e}"),
                )
            })?;
        Ok(SubmissionOrder {
            last: Mutex::new(0),
            completion,
        })
    }

    /// The highest sequence number known complete (0: none yet).
    pub(super) fn completed(&self) -> u64 {
        self.completion.completed()
    }

    /// Blocks until submission `seq` has completed.
    pub(super) fn wait(&self, seq: u64) {
        self.completion.wait(seq);
    }

    /// On GL, reaps work that completed, without waiting: a submission
    /// that staged host memory has its staging buffer back (mapped again)
    /// and is known complete when wgpu's queue is empty, instead of
    /// waiting for a later poll while every upload meanwhile makes a new
    /// staging buffer. Nothing elsewhere: the poll thread reaps there.
    pub(super) fn reap_gl(&self, d: &WgpuDevice, at: &Point) {
        let Some(exclusive) = d.gl.exclusive() else {
            return;
        };
        let _ = self.reap(d, at.seq());
        drop(exclusive);
    }

    /// Polls `d` without waiting; when wgpu's queue is empty, marks
    /// submission `seq` and every earlier one complete. Returns whether it
    /// did, or wgpu's error.
    fn reap(&self, d: &WgpuDevice, seq: u64) -> Result<bool> {
        let status = d.device.poll(wgpu::PollType::Poll);
        let empty = matches!(status, Ok(wgpu::PollStatus::QueueEmpty));
        if empty {
            self.completion.complete_through(seq);
        }
        status.map_err(|e| Error::backend(TY, format!("polling the device: {e}")))?;
        Ok(empty)
    }

    /// Submits `encoder` on `stream` (or on none, for Keel's own work):
    /// the one place Keel calls `queue.submit` (Note [wgpu completion
    /// tracking]). Returns the point right after the submission; reports a
    /// wgpu error the submission raised.
    fn submit(
        &self,
        d: &'static WgpuDevice,
        stream: Option<&QueueStream>,
        buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> Result<Point> {
        // On GL, a submission runs its commands (and compiles a pipeline's
        // shader at its first dispatch), then waits for them: Note [GL
        // context lock]. Taken before the submission lock, like every
        // other holder of both.
        let exclusive = d.gl.exclusive();
        let mut last = lock(&self.last);
        let index = d.queue.submit(buffers);
        *last += 1;
        let seq = *last;
        if let Some(stream) = stream {
            stream.last.store(seq, Ordering::Release);
        }
        if d.adapter.info.backend == wgpu::Backend::Gl {
            // GL has run the commands by now (its fences can still signal
            // a little later): hand the submission to the poll thread,
            // which finds it complete when someone asks or a backlog has
            // gathered, with no poll here. Polling here, even without
            // waiting, costs a few percent of a small launch, and each
            // wait of the poll thread moves the one GL context to it and
            // back, which on demand happens rarely (Note [wgpu completion
            // tracking]).
            self.completion.push(seq, index.clone());
        } else {
            // Reap without waiting: when wgpu's queue is empty, this
            // submission and every earlier one are complete, and the poll
            // thread is not needed.
            let reaped = self.reap(d, seq);
            if !matches!(reaped, Ok(true)) {
                self.completion.push(seq, index.clone());
            }
            reaped?;
        }
        drop(last);
        drop(exclusive);
        d.uncaptured.take()?;
        Ok(Point {
            device: d,
            seq,
            index: Some(index),
        })
    }
}

/// Timestamps the calling thread has asked for around its next
/// submissions on one stream (the profiler's device spans, see
/// `begin_timed_work` in `event.rs`): `start` is written at the beginning
/// of the first submission, `end` at the end of every one (the last one's
/// stays). Both are written by the work's own submissions: a kernel's
/// compute pass (`ComputePassDescriptor::timestamp_writes`), otherwise
/// `write_timestamp` in the same `queue.submit`.
#[derive(Clone, Copy)]
pub(super) struct Bracket {
    /// Brackets are per thread and stream.
    pub(super) stream: &'static QueueStream,
    pub(super) start: u32,
    pub(super) end: u32,
    /// Sequence numbers of the first and last bracketed submissions.
    pub(super) first: Option<u64>,
    pub(super) last: Option<u64>,
}

thread_local! {
    static BRACKET: Cell<Option<Bracket>> = const { Cell::new(None) };
}

/// Arms `bracket` for this thread, returning the one it replaces.
pub(super) fn arm(bracket: Bracket) -> Option<Bracket> {
    BRACKET.with(|b| b.replace(Some(bracket)))
}

/// Disarms and returns this thread's bracket.
pub(super) fn disarm() -> Option<Bracket> {
    BRACKET.with(Cell::take)
}

/// What a bracketed submission writes ([`QueueStream::stamps`]).
pub(super) struct Stamps<'a> {
    pub(super) query_set: &'a wgpu::QuerySet,
    /// The bracket's start, on its first submission.
    pub(super) start: Option<u32>,
    pub(super) end: u32,
}

/// One logical stream of a device's queue; see the module docs.
pub struct QueueStream {
    device: &'static WgpuDevice,
    /// The sequence number of the stream's last submission (0: none); only
    /// written under the submission lock, so it only grows.
    last: AtomicU64,
}

impl fmt::Debug for QueueStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueStream")
            .field("device", &self.device.index)
            .field("last", &self.last.load(Ordering::Relaxed))
            .finish()
    }
}

impl QueueStream {
    /// A logical stream of `device` with nothing submitted yet.
    pub(super) fn new(device: &'static WgpuDevice) -> Self {
        QueueStream {
            device,
            last: AtomicU64::new(0),
        }
    }

    /// The stream's device.
    pub(super) fn device(&self) -> &'static WgpuDevice {
        self.device
    }

    /// Submits `encoder`'s commands on this stream; returns the point right
    /// after them. Reports a wgpu error the submission raised.
    ///
    /// Where the calling thread has a [`Bracket`] armed on this stream, the
    /// same submission writes its timestamps: the start (first bracketed
    /// submission only) in an encoder of its own ahead of `encoder`, the
    /// end at the end of `encoder`.
    pub(super) fn submit(&self, mut encoder: wgpu::CommandEncoder) -> Result<Point> {
        let d = self.device;
        let Some(stamps) = self.stamps() else {
            return d.order.submit(d, Some(self), [encoder.finish()]);
        };
        let start = stamps.start.map(|slot| {
            let mut e = d.encoder();
            e.write_timestamp(stamps.query_set, slot);
            e
        });
        encoder.write_timestamp(stamps.query_set, stamps.end);
        let at = d.order.submit(
            d,
            Some(self),
            start
                .into_iter()
                .chain([encoder])
                .map(wgpu::CommandEncoder::finish),
        )?;
        self.bracketed(at.seq);
        Ok(at)
    }

    /// Submits a program's command buffers on this stream (interop): in
    /// order with Keel's work on it. Where the calling thread has a
    /// [`Bracket`] armed on this stream, the same submission writes its
    /// timestamps around them.
    pub(super) fn submit_buffers(&self, buffers: Vec<wgpu::CommandBuffer>) -> Result<Point> {
        let d = self.device;
        let Some(stamps) = self.stamps() else {
            return d.order.submit(d, Some(self), buffers);
        };
        let start = stamps.start.map(|slot| {
            let mut e = d.encoder();
            e.write_timestamp(stamps.query_set, slot);
            e.finish()
        });
        let mut end = d.encoder();
        end.write_timestamp(stamps.query_set, stamps.end);
        let at = d.order.submit(
            d,
            Some(self),
            start.into_iter().chain(buffers).chain([end.finish()]),
        )?;
        self.bracketed(at.seq);
        Ok(at)
    }

    /// Submits `encoder`, which already writes the timestamps
    /// [`stamps`](Self::stamps) asked for (a kernel's compute pass), on
    /// this stream.
    pub(super) fn submit_stamped(&self, encoder: wgpu::CommandEncoder) -> Result<Point> {
        let at = self
            .device
            .order
            .submit(self.device, Some(self), [encoder.finish()])?;
        self.bracketed(at.seq);
        Ok(at)
    }

    /// The timestamps the calling thread's bracket on this stream wants
    /// its next submission to write; `None` when it has none armed here.
    pub(super) fn stamps(&self) -> Option<Stamps<'static>> {
        let b = BRACKET
            .with(Cell::get)
            .filter(|b| std::ptr::eq(b.stream, self))?;
        Some(Stamps {
            query_set: self.device.timestamps.as_ref()?,
            start: b.first.is_none().then_some(b.start),
            end: b.end,
        })
    }

    /// Notes that submission `seq` wrote the calling thread's bracket on
    /// this stream.
    fn bracketed(&self, seq: u64) {
        BRACKET.with(|cell| {
            if let Some(mut b) = cell.get().filter(|b| std::ptr::eq(b.stream, self)) {
                b.first.get_or_insert(seq);
                b.last = Some(seq);
                cell.set(Some(b));
            }
        });
    }

    /// The point after everything submitted on this stream so far.
    pub(super) fn point(&self) -> Point {
        Point {
            device: self.device,
            seq: self.last.load(Ordering::Acquire),
            index: None,
        }
    }

    /// The point after submission `seq` of this stream's device.
    pub(super) fn point_at(&self, seq: u64) -> Point {
        Point {
            device: self.device,
            seq,
            index: None,
        }
    }

    /// Whether everything submitted on this stream has completed. Never
    /// blocks and never calls into wgpu.
    pub(super) fn query(&self) -> Result<bool> {
        Ok(self.point().is_done())
    }

    /// Waits for everything submitted on this stream.
    pub(super) fn synchronize(&self) -> Result<()> {
        self.point().wait()
    }
}

/// Everything submitted to one device's queue up to sequence number `seq`
/// (0: nothing); see the module docs.
#[derive(Clone)]
pub(super) struct Point {
    device: &'static WgpuDevice,
    seq: u64,
    /// wgpu's index of submission `seq`, where the point was made by that
    /// submission.
    index: Option<wgpu::SubmissionIndex>,
}

impl Point {
    /// The device whose queue this is a point of.
    pub(super) fn device(&self) -> &'static WgpuDevice {
        self.device
    }

    /// The sequence number (0: before any submission).
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// wgpu's index of the submission, where this point was returned by a
    /// submission.
    pub(super) fn index(&self) -> Option<&wgpu::SubmissionIndex> {
        self.index.as_ref()
    }

    /// Whether the submission has completed. Never blocks and never calls
    /// into wgpu (Note [wgpu completion tracking]).
    pub(super) fn is_done(&self) -> bool {
        self.device.order.completion.is_done(self.seq)
    }

    /// Waits until the submission has completed (for the device's poll
    /// thread to see it complete); reports a wgpu error the device raised
    /// meanwhile.
    pub(super) fn wait(&self) -> Result<()> {
        self.device.order.completion.wait(self.seq);
        self.device.uncaptured.take()
    }
}

impl WgpuDevice {
    /// The point after submission `seq` of this device.
    pub(super) fn point_at(&'static self, seq: u64) -> Point {
        Point {
            device: self,
            seq,
            index: None,
        }
    }
}

/// Submits `encoder`'s commands outside every logical stream (no stream
/// waits for them), under the same lock and with a sequence number like
/// every submission (Note [wgpu completion tracking]); returns the point
/// right after them.
pub(super) fn submit_outside_streams(
    device: &'static WgpuDevice,
    encoder: wgpu::CommandEncoder,
) -> Result<Point> {
    device.order.submit(device, None, [encoder.finish()])
}

#[cfg(test)]
mod tests {
    use super::{BACKLOG, Pending};

    /// Pending submissions `seqs`, wgpu's index standing in as `seq * 10`.
    fn pending(seqs: impl IntoIterator<Item = u64>) -> Pending<u64> {
        let mut p = Pending::default();
        p.queue.extend(seqs.into_iter().map(|s| (s, s * 10)));
        p
    }

    #[test]
    fn the_poll_thread_waits_for_the_newest_wanted_submission() {
        let mut p = pending(3..=9);
        assert_eq!(p.target(2, 6), Some((6, 60)), "one wait completes 3..=6");
        assert_eq!(p.target(2, 100), Some((9, 90)), "wanted past the newest");
        assert_eq!(p.target(6, 6), None, "wanted and complete: nothing to do");
        assert_eq!(
            pending(5..=9).target(2, 4),
            None,
            "wanted but not pending yet (being submitted): its push wakes the thread"
        );
        assert_eq!(pending([]).target(0, 4), None);
    }

    #[test]
    fn a_full_backlog_is_retired_oldest_first_until_empty() {
        let n = BACKLOG as u64;
        assert_eq!(
            pending(1..n).target(0, 0),
            None,
            "below the backlog: asleep"
        );
        let mut p = pending(1..=n);
        assert_eq!(p.target(0, 0), Some((1, 10)));
        // The thread keeps retiring below the backlog, until the queue is
        // empty (then `next` clears `draining` and sleeps).
        p.queue.pop_front();
        assert_eq!(p.target(1, 0), Some((2, 20)));
        p.queue.clear();
        assert_eq!(p.target(n, 0), None);
    }

    #[test]
    fn only_work_for_the_poll_thread_wakes_it() {
        let mut p = pending(1..=3);
        assert!(!p.wakes(0, 3), "awake: never signalled");
        p.poll_thread_asleep = true;
        assert!(p.wakes(0, 3), "asleep and a pending submission is wanted");
        assert!(!p.wakes(3, 3), "what is wanted is complete");
        assert!(!p.wakes(0, 0), "nobody wants anything, no backlog");
        assert!(
            pending(1..=BACKLOG as u64).wakes_asleep(0, 0),
            "a full backlog"
        );
        assert!(
            !Pending::<u64>::default().wakes_asleep(0, 5),
            "nothing pending"
        );
    }

    impl Pending<u64> {
        fn wakes_asleep(mut self, completed: u64, wanted: u64) -> bool {
            self.poll_thread_asleep = true;
            self.wakes(completed, wanted)
        }
    }
}
