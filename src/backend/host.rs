//! Host-thread building blocks: in-order streams, events and memory that
//! live on the host.
//!
//! The CPU backend is built from these, and so is any backend whose work
//! runs on host threads (the simulated accelerator in
//! `examples/custom_backend.rs`). They implement the stream semantics every
//! Keel backend must have:
//!
//! - A [`HostStream`] runs its tasks in submission order, either *inline*
//!   on the submitting thread (the CPU default stream) or on its own worker
//!   thread (pool streams). Workers are created on first use and live for
//!   the process, as pool streams do.
//! - A failing task does not stop the stream; its error is kept and
//!   reported by the stream's next `query`/`synchronize` (the first error
//!   wins; `synchronize` reports it once). A panic inside a task is caught
//!   and reported the same way. Nothing is lost silently.
//! - A [`HostEvent`] completes when the stream reaches the point where it
//!   was recorded, and keeps the host time of that moment for
//!   `elapsed_time`. Blocking a stream on an event enqueues a wait.
//!
//! This module never calls back into the registry: it is the bottom layer.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use super::{BufferHandle, Readback, pool::PoolCursors};
use crate::core::{
    DeviceIndex, DeviceType, MAX_PRIORITY_LEVELS, STREAMS_PER_POOL, StreamId, StreamKind,
    stream_kind,
};
use crate::error::{Error, Result};
use crate::kernel::{CpuInvocation, Kernel};

/// Work for a host stream.
pub type Task = Box<dyn FnOnce() -> Result<()> + Send>;

/// Locks a mutex, ignoring poisoning: every critical section here leaves
/// the data consistent (panics are caught outside the lock).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run_task(task: Task) -> Result<()> {
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
struct StreamShared {
    state: Mutex<StreamState>,
    work: Condvar,
    idle: Condvar,
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

    fn push(&self, item: Item) {
        let mut s = lock(&self.shared.state);
        s.queue.push_back(item);
        s.submitted += 1;
        drop(s);
        self.shared.work.notify_one();
    }

    /// Enqueues a marker: it completes (with the host time) when the
    /// stream reaches it.
    fn submit_marker(&self, marker: Arc<Marker>) {
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
                s.completed += 1;
                if let Err(e) = result {
                    s.error.get_or_insert(e);
                }
            }
            Item::Marker(marker) => {
                let mut s = lock(&shared.state);
                s.completed += 1;
                marker.complete();
            }
        }
        shared.idle.notify_all();
    }
}

/// The completion state of one record of a [`HostEvent`].
#[derive(Debug, Default)]
struct Marker {
    at: Mutex<Option<Instant>>,
    cv: Condvar,
}

impl Marker {
    fn complete(&self) {
        *lock(&self.at) = Some(Instant::now());
        self.cv.notify_all();
    }
    fn time(&self) -> Option<Instant> {
        *lock(&self.at)
    }
    fn wait(&self) -> Instant {
        let mut at = lock(&self.at);
        loop {
            if let Some(t) = *at {
                return t;
            }
            at = self.cv.wait(at).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// An event on host streams: completes when its stream reaches the point
/// of the last `record`, and remembers the host time of that moment.
#[derive(Debug, Clone)]
pub struct HostEvent {
    marker: Arc<Marker>,
    device_index: DeviceIndex,
}

impl HostEvent {
    /// Records on `stream`: the event completes when the stream's work
    /// submitted so far has run.
    pub fn record(stream: &HostStream, device_index: DeviceIndex) -> Result<Self> {
        let marker = Arc::new(Marker::default());
        stream.submit_marker(Arc::clone(&marker));
        Ok(HostEvent {
            marker,
            device_index,
        })
    }

    /// The device the event was recorded on.
    pub fn device_index(&self) -> DeviceIndex {
        self.device_index
    }

    /// Makes later work on `stream` wait for this event.
    pub fn block(&self, stream: &HostStream) -> Result<()> {
        if self.query() {
            return Ok(());
        }
        let m = Arc::clone(&self.marker);
        stream.submit(Box::new(move || {
            m.wait();
            Ok(())
        }))
    }

    /// Whether the event has completed. Never blocks.
    pub fn query(&self) -> bool {
        self.marker.time().is_some()
    }

    /// Waits for the event.
    pub fn synchronize(&self) {
        self.marker.wait();
    }

    /// Milliseconds from `self` to `end` (negative if `end` came first).
    /// `None` while either has not completed.
    pub fn elapsed_ms(&self, end: &HostEvent) -> Option<f64> {
        let (a, b) = (self.marker.time()?, end.marker.time()?);
        Some(if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        })
    }
}

/// One host-thread device: its default stream and its stream pool (the
/// native streams behind pool ids, created on first use).
pub struct HostDevice {
    ty: DeviceType,
    index: DeviceIndex,
    default: OnceLock<Result<HostStream>>,
    inline_default: bool,
    cursors: PoolCursors,
    pool: [[OnceLock<Result<HostStream>>; STREAMS_PER_POOL]; MAX_PRIORITY_LEVELS],
}

impl fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostDevice")
            .field("type", &self.ty)
            .field("index", &self.index)
            .field("inline_default", &self.inline_default)
            .field("levels", &self.cursors.levels())
            .finish()
    }
}

impl HostDevice {
    /// Device `index` of `ty` with `levels` priority levels. When
    /// `inline_default` is true the default stream runs work on the
    /// submitting thread (like Keel's CPU); otherwise it has a worker too
    /// (like an accelerator's default queue).
    pub fn new(ty: DeviceType, index: DeviceIndex, levels: usize, inline_default: bool) -> Self {
        HostDevice {
            ty,
            index,
            default: OnceLock::new(),
            inline_default,
            cursors: PoolCursors::new(levels),
            pool: [const { [const { OnceLock::new() }; STREAMS_PER_POOL] }; MAX_PRIORITY_LEVELS],
        }
    }

    /// The pool's cursors (priority levels, round robin).
    pub fn cursors(&self) -> &PoolCursors {
        &self.cursors
    }

    /// The native stream behind `id`, created on first use.
    pub fn stream(&self, id: StreamId) -> Result<&HostStream> {
        let (slot, name) = match stream_kind(id) {
            StreamKind::Default => (&self.default, "default".to_owned()),
            StreamKind::Pool { level, index } if usize::from(level) < self.cursors.levels() => (
                &self.pool[usize::from(level)][usize::from(index)],
                format!("p{level}.{index}"),
            ),
            _ => {
                return Err(Error::invalid(format!(
                    "unknown stream id {id} on {}:{}: expected 0 (default) or a pool stream id",
                    self.ty, self.index
                )));
            }
        };
        let inline = self.inline_default && id == 0;
        let r = slot.get_or_init(|| {
            if inline {
                Ok(HostStream::inline())
            } else {
                HostStream::spawn(format!("keel-{}{}-{name}", self.ty, self.index))
            }
        });
        r.as_ref().map_err(Clone::clone)
    }

    /// Waits for every stream of the device that has been used; returns the
    /// first error any of them kept.
    pub fn synchronize(&self) -> Result<()> {
        let mut first = None;
        let streams = std::iter::once(&self.default).chain(self.pool.iter().flatten());
        for s in streams
            .filter_map(|s| s.get())
            .filter_map(|r| r.as_ref().ok())
        {
            if let Err(e) = s.synchronize() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Host memory for a host-thread device: a zeroed, 8-byte aligned block.
pub struct HostMemory {
    words: Mutex<Vec<u64>>,
    len: usize,
}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostMemory({} bytes)", self.len)
    }
}

impl HostMemory {
    /// `len` zeroed bytes; `None` when the host cannot provide them.
    pub fn alloc(len: usize) -> Option<Self> {
        let words = len.div_ceil(8);
        let mut v = Vec::new();
        v.try_reserve_exact(words).ok()?;
        v.resize(words, 0u64);
        Some(HostMemory {
            words: Mutex::new(v),
            len,
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Runs `f` on the bytes.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut w = lock(&self.words);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut w[..]);
        f(&mut bytes[..self.len])
    }
}

/// The host memory behind a buffer handle, or an error naming the backend.
pub fn host_memory(ty: DeviceType, handle: &BufferHandle) -> Result<Arc<HostMemory>> {
    handle
        .downcast_arc::<HostMemory>()
        .ok_or_else(|| super::foreign_buffer(ty))
}

/// Enqueues a host-to-device write.
pub fn enqueue_write(
    stream: &HostStream,
    dst: Arc<HostMemory>,
    offset: usize,
    data: Vec<u8>,
) -> Result<()> {
    stream.submit(Box::new(move || {
        dst.with_bytes(|b| b[offset..offset + data.len()].copy_from_slice(&data));
        Ok(())
    }))
}

/// Enqueues a device-to-device copy (the same block may be both ends).
pub fn enqueue_copy(
    stream: &HostStream,
    src: Arc<HostMemory>,
    src_offset: usize,
    dst: Arc<HostMemory>,
    dst_offset: usize,
    len: usize,
) -> Result<()> {
    stream.submit(Box::new(move || {
        if Arc::ptr_eq(&src, &dst) {
            dst.with_bytes(|b| b.copy_within(src_offset..src_offset + len, dst_offset));
        } else {
            // Copy out first so the two locks are never held together.
            let tmp = src.with_bytes(|b| b[src_offset..src_offset + len].to_vec());
            dst.with_bytes(|b| b[dst_offset..dst_offset + len].copy_from_slice(&tmp));
        }
        Ok(())
    }))
}

type Slot = Arc<(Mutex<Option<Vec<u8>>>, Condvar)>;

struct HostReadback {
    slot: Slot,
    stream: HostStream,
}

impl Readback for HostReadback {
    fn is_ready(&self) -> Result<bool> {
        Ok(lock(&self.slot.0).is_some())
    }
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        let (m, cv) = &*self.slot;
        let mut data = lock(m);
        loop {
            if let Some(d) = data.take() {
                return Ok(d);
            }
            if self.stream.is_inline() {
                return Err(Error::invalid("host readback never ran"));
            }
            data = cv.wait(data).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Enqueues a device-to-host read of `len` bytes at `offset`.
pub fn enqueue_read(
    stream: &HostStream,
    src: Arc<HostMemory>,
    offset: usize,
    len: usize,
) -> Result<Box<dyn Readback>> {
    let slot: Slot = Arc::default();
    let out = Arc::clone(&slot);
    stream.submit(Box::new(move || {
        let data = src.with_bytes(|b| b[offset..offset + len].to_vec());
        *lock(&out.0) = Some(data);
        out.1.notify_all();
        Ok(())
    }))?;
    Ok(Box::new(HostReadback {
        slot,
        stream: stream.clone(),
    }))
}

/// Enqueues `kernel`'s host implementation over `buffers` (distinct
/// allocations, checked here).
pub fn enqueue_kernel(
    ty: DeviceType,
    stream: &HostStream,
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: Vec<Arc<HostMemory>>,
    params: &[u8],
) -> Result<()> {
    let f = kernel.cpu.ok_or_else(|| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: format!(
            "has no host implementation, which the {} backend runs",
            ty.backend_name()
        ),
    })?;
    for (i, a) in buffers.iter().enumerate() {
        if let Some(j) = buffers[..i].iter().position(|b| Arc::ptr_eq(a, b)) {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!(
                    "the same buffer is bound at bindings {j} and {i}; host kernels need distinct buffers"
                ),
            });
        }
    }
    let name = kernel.name;
    let workgroup_size = kernel.workgroup_size;
    let params = params.to_vec();
    stream.submit(Box::new(move || {
        // Lock in address order so two streams sharing buffers cannot
        // deadlock, then hand the kernel its buffers in binding order.
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        order.sort_by_key(|&i| Arc::as_ptr(&buffers[i]) as usize);
        let mut guards: Vec<(usize, MutexGuard<'_, Vec<u64>>)> = order
            .iter()
            .map(|&i| (i, lock(&buffers[i].words)))
            .collect();
        guards.sort_by_key(|(i, _)| *i);
        let views: Vec<&mut [u8]> = guards
            .iter_mut()
            .map(|(i, g)| {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut g[..]);
                &mut bytes[..buffers[*i].len]
            })
            .collect();
        let mut inv = CpuInvocation {
            grid,
            workgroup_size,
            params: &params,
            buffers: views,
        };
        f(&mut inv).map_err(|message| Error::Kernel {
            kernel: name.to_owned(),
            message,
        })
    }))
}
