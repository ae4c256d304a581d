//! A Vulkan stream: a timeline semaphore, a queue, and a command pool.
//!
//! Every submission on a stream waits for the stream's previous value and
//! signals the next one, so the stream is in order even when several
//! streams share a queue (Vulkan does not order submissions on a queue by
//! itself). A [`Point`] on a stream's timeline (what events and readbacks
//! wait for) is reached when the submission that signals it has run.
//! Waits on events recorded elsewhere are attached to the stream's next
//! submission. Objects a submission uses (command buffer, staging
//! memory, descriptor sets, the buffers it touches) are kept until the
//! semaphore passes the submission's value, then released.
//!
//! Kernel parameters go into a ring of host-visible uniform slots per
//! stream ([`ParamRing`]): a launch writes its block into the next slot
//! and binds it with a dynamic offset, so a launch allocates no buffer and
//! its descriptor set can be cached. A slot is reused once the submission
//! that read it has run (stream order makes that the oldest one).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Mutex;

use ash::vk;

use gpu_allocator::MemoryLocation;
use smallvec::SmallVec;

use super::device::{Ctx, lock, vk_error};
use super::memory::VkBuffer;
use crate::error::Result;

/// Command buffers allocated at a time when a stream runs out.
const CB_BATCH: u32 = 16;

/// Something a submission must keep alive until it has run.
pub(super) type Keep = Box<dyn Any + Send + Sync>;

/// What one submission keeps alive (a launch: one, a copy: two), inline.
pub(super) type Keeps = SmallVec<[Keep; 2]>;

struct InFlight {
    value: u64,
    cb: vk::CommandBuffer,
    _keep: Keeps,
}

/// Bytes of one parameter slot: parameter blocks up to this size go
/// through the ring, larger ones get a buffer of their own.
pub(super) const PARAM_SLOT: usize = 256;

/// Slots in each stream's parameter ring.
const PARAM_SLOTS: usize = 512;

/// A stream's ring of parameter slots (see the module docs).
pub(super) struct ParamRing {
    pub(super) buffer: VkBuffer,
    /// Bytes between slots: [`PARAM_SLOT`] rounded up to the device's
    /// `minUniformBufferOffsetAlignment`.
    stride: usize,
    /// The next slot to use.
    next: usize,
    /// The submission value that last read each slot (0: none).
    used: Vec<u64>,
}

struct State {
    pool: vk::CommandPool,
    /// The semaphore's value when last read (what has surely completed).
    done: u64,
    /// Parameter slots, made on the first launch.
    params: Option<ParamRing>,
    free: Vec<vk::CommandBuffer>,
    in_flight: VecDeque<InFlight>,
    /// The value the last submission signals (0: nothing submitted).
    last: u64,
    /// Event waits for the next submission.
    pending: Vec<(vk::Semaphore, u64)>,
    /// The last bracketed submission's end (a later one may start there).
    last_end: Option<LastEnd>,
}

/// A bracketed submission's end timestamp.
#[derive(Clone, Copy)]
struct LastEnd {
    /// Its query slot.
    slot: u32,
    /// The submission's value.
    value: u64,
    /// Its queue's submission count right after it.
    queued: u64,
}

/// Timestamps the calling thread has asked for around its next
/// submissions on one stream (the profiler's device spans, see
/// `event.rs`). The first submission gets the start: a TOP_OF_PIPE
/// timestamp of its own, or, when the stream is busy with the previous
/// profiled submission (see [`VkStream::chained_start`]), that
/// submission's end. Every submission writes an end timestamp into a slot
/// of its own (slots are written once between host resets); the last
/// one's is the span's end.
#[derive(Clone, Copy)]
pub(super) struct Bracket {
    /// Brackets are per thread and stream.
    pub(super) stream: &'static VkStream,
    /// The start's query slot, once the first submission chose it (one
    /// hold of it).
    pub(super) start: Option<u32>,
    /// The last submission's end slot (one hold of it).
    pub(super) end: Option<u32>,
    /// Values of the first and last bracketed submissions.
    pub(super) first: Option<u64>,
    pub(super) last: Option<u64>,
}

impl Bracket {
    /// A bracket on `stream` with nothing submitted yet.
    pub(super) fn new(stream: &'static VkStream) -> Bracket {
        Bracket {
            stream,
            start: None,
            end: None,
            first: None,
            last: None,
        }
    }
}

/// The query slots one bracketed submission holds before it is submitted.
struct Marks {
    /// A slot its start is written into (the first submission on an idle
    /// stream).
    write_start: Option<u32>,
    /// The start slot taken or shared by this submission.
    new_start: Option<u32>,
    end: u32,
}

thread_local! {
    static BRACKET: std::cell::Cell<Option<Bracket>> = const { std::cell::Cell::new(None) };
}

/// Arms `bracket` for this thread, returning the one it replaces.
pub(super) fn arm(bracket: Bracket) -> Option<Bracket> {
    BRACKET.with(|b| b.replace(Some(bracket)))
}

/// Disarms and returns this thread's bracket.
pub(super) fn disarm() -> Option<Bracket> {
    BRACKET.with(std::cell::Cell::take)
}

/// A value of a stream's timeline semaphore; value 0 is reached from the
/// start.
#[derive(Clone, Copy)]
pub(super) struct Point {
    pub(super) ctx: &'static Ctx,
    pub(super) semaphore: vk::Semaphore,
    pub(super) value: u64,
}

impl Point {
    /// Whether the semaphore has reached the value. Never blocks.
    pub(super) fn reached(&self) -> Result<bool> {
        self.ctx.live()?;
        if self.value == 0 {
            return Ok(true);
        }
        Ok(counter(&self.ctx.device, self.semaphore)? >= self.value)
    }

    /// The semaphore's current value (0 for a point of value 0).
    pub(super) fn counter(&self) -> Result<u64> {
        self.ctx.live()?;
        if self.value == 0 {
            return Ok(0);
        }
        counter(&self.ctx.device, self.semaphore)
    }

    /// Waits on the host until the semaphore reaches the value.
    pub(super) fn wait(&self) -> Result<()> {
        self.ctx.live()?;
        if self.value == 0 {
            return Ok(());
        }
        let sems = [self.semaphore];
        let values = [self.value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&sems)
            .values(&values);
        // SAFETY: the semaphore is a live timeline semaphore of the device
        // (streams, and so their semaphores, live for the process, or
        // until an adopted device is released, checked above; a
        // program's semaphore given to `wait_semaphore` lives until the
        // wait completes, the program's promise).
        unsafe { self.ctx.device.wait_semaphores(&info, u64::MAX) }
            .map_err(|e| vk_error("vkWaitSemaphores", e))
    }
}

/// A timeline semaphore's current value.
fn counter(device: &ash::Device, semaphore: vk::Semaphore) -> Result<u64> {
    // SAFETY: callers pass a live timeline semaphore of `device`.
    unsafe { device.get_semaphore_counter_value(semaphore) }
        .map_err(|e| vk_error("vkGetSemaphoreCounterValue", e))
}

/// One stream of one device; see the module docs.
pub struct VkStream {
    pub(super) ctx: &'static Ctx,
    queue: usize,
    pub(super) semaphore: vk::Semaphore,
    state: Mutex<State>,
}

impl std::fmt::Debug for VkStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VkStream")
            .field("device", &self.ctx.index)
            .field("queue", &self.queue)
            .field("last", &self.last_value())
            .finish()
    }
}

impl VkStream {
    pub(super) fn new(ctx: &'static Ctx, queue: usize) -> Result<VkStream> {
        let mut timeline = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut timeline);
        // SAFETY: object creation on a live device; streams (and so their
        // semaphores and pools) live for the process.
        let semaphore = unsafe { ctx.device.create_semaphore(&info, None) }
            .map_err(|e| vk_error("vkCreateSemaphore", e))?;
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(ctx.adapter.family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: as above.
        let pool = unsafe { ctx.device.create_command_pool(&pool_info, None) }
            .map_err(|e| vk_error("vkCreateCommandPool", e))?;
        Ok(VkStream {
            ctx,
            queue,
            semaphore,
            state: Mutex::new(State {
                pool,
                done: 0,
                params: None,
                free: Vec::new(),
                in_flight: VecDeque::new(),
                last: 0,
                pending: Vec::new(),
                last_end: None,
            }),
        })
    }

    /// The point `value` of this stream's timeline.
    pub(super) fn point(&self, value: u64) -> Point {
        Point {
            ctx: self.ctx,
            semaphore: self.semaphore,
            value,
        }
    }

    /// The value the last submission signals.
    pub(super) fn last_value(&self) -> u64 {
        lock(&self.state).last
    }

    /// Whether the stream has waits queued for its next submission.
    pub(super) fn has_pending_waits(&self) -> bool {
        !lock(&self.state).pending.is_empty()
    }

    /// Releases what completed submissions kept.
    fn retire(&self, state: &mut State) -> Result<()> {
        let done = counter(&self.ctx.device, self.semaphore)?;
        state.done = done;
        while state.in_flight.front().is_some_and(|f| f.value <= done) {
            if let Some(f) = state.in_flight.pop_front() {
                state.free.push(f.cb);
            }
        }
        Ok(())
    }

    /// The stream's parameter ring buffer and the bytes each slot binds,
    /// made on first use.
    pub(super) fn param_ring(&self) -> Result<vk::Buffer> {
        let mut state = lock(&self.state);
        if let Some(r) = &state.params {
            return Ok(r.buffer.buffer);
        }
        let align = self
            .ctx
            .adapter
            .props
            .limits
            .min_uniform_buffer_offset_alignment
            .max(1) as usize;
        let stride = PARAM_SLOT.next_multiple_of(align);
        let buffer = VkBuffer::new(
            self.ctx,
            (stride * PARAM_SLOTS) as u64,
            vk::BufferUsageFlags::UNIFORM_BUFFER,
            MemoryLocation::CpuToGpu,
            "keel parameters",
        )?;
        let handle = buffer.buffer;
        state.params = Some(ParamRing {
            buffer,
            stride,
            next: 0,
            used: vec![0; PARAM_SLOTS],
        });
        Ok(handle)
    }

    /// Writes `params` (at most [`PARAM_SLOT`] bytes) into the next free
    /// slot of the ring, returning the slot's index and byte offset. Waits
    /// for the submission that last read the slot if it has not run.
    fn param_slot(&self, state: &mut State, params: &[u8]) -> Result<(usize, u32)> {
        let done = state.done;
        let ring = state.params.as_ref().ok_or_else(|| {
            crate::error::Error::backend(
                super::TY,
                "a launch used a stream's parameter ring before it was made",
            )
        })?;
        let slot = ring.next;
        let last_use = ring.used[slot];
        let mut now_done = done;
        if last_use > done {
            now_done = counter(&self.ctx.device, self.semaphore)?;
            if last_use > now_done {
                self.point(last_use).wait()?;
                now_done = last_use;
            }
        }
        let offset = slot * ring.stride;
        ring.buffer.with_mapped(|m| {
            let dst = &mut m[offset..offset + PARAM_SLOT];
            dst[..params.len()].copy_from_slice(params);
            dst[params.len()..].fill(0);
        })?;
        let offset = u32::try_from(offset).map_err(|_| {
            crate::error::Error::backend(super::TY, "a parameter slot's offset overflowed")
        })?;
        state.done = now_done;
        Ok((slot, offset))
    }

    /// Makes the next submission wait for `point` (of this device).
    pub(super) fn add_wait(&self, point: Point) {
        if point.semaphore == self.semaphore || point.value == 0 {
            return; // already ordered, or nothing to wait for
        }
        lock(&self.state)
            .pending
            .push((point.semaphore, point.value));
    }

    /// Records commands with `record` into a fresh command buffer and
    /// submits it, ordered after the stream's previous work and any pending
    /// waits. Returns the value the submission signals.
    pub(super) fn submit(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
        keep: Keeps,
    ) -> Result<u64> {
        self.submit_with_params(None, |d, cb, _| record(d, cb), keep)
    }

    /// [`submit`](Self::submit) for a launch: `params` (at most
    /// [`PARAM_SLOT`] bytes; the ring must exist, see
    /// [`param_ring`](Self::param_ring)) is written into a slot of the
    /// stream's parameter ring, whose byte offset `record` gets.
    pub(super) fn submit_with_params(
        &self,
        params: Option<&[u8]>,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer, u32),
        keep: Keeps,
    ) -> Result<u64> {
        self.submit_inner(params, record, &[], keep)
    }

    /// A free command buffer of the stream's pool (allocating a batch,
    /// after retiring completed ones, when none is free).
    fn free_command_buffer(&self, state: &mut State) -> Result<vk::CommandBuffer> {
        // Retire only when a command buffer is needed: asking the driver for
        // the semaphore's value on every submission costs more than the
        // submission itself on some drivers.
        if state.free.is_empty() {
            self.retire(state)?;
        }
        if state.free.is_empty() {
            let info = vk::CommandBufferAllocateInfo::default()
                .command_pool(state.pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(CB_BATCH);
            // SAFETY: the pool belongs to this stream and is only used
            // under the stream's lock.
            let cbs = unsafe { self.ctx.device.allocate_command_buffers(&info) }
                .map_err(|e| vk_error("vkAllocateCommandBuffers", e))?;
            state.free.extend(cbs);
        }
        state
            .free
            .pop()
            .ok_or_else(|| vk_error("vkAllocateCommandBuffers", vk::Result::ERROR_UNKNOWN))
    }

    /// [`submit_with_params`](Self::submit_with_params), with a program's
    /// command buffers `program` submitted after the one `record` fills,
    /// in the same `vkQueueSubmit2` (interop). A profiled submission
    /// then writes its end timestamp in a command buffer of its own after
    /// them.
    pub(super) fn submit_inner(
        &self,
        params: Option<&[u8]>,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer, u32),
        program: &[vk::CommandBuffer],
        keep: Keeps,
    ) -> Result<u64> {
        let device = &self.ctx.device;
        let mut state = lock(&self.state);
        let slot = match params {
            Some(p) => Some(self.param_slot(&mut state, p)?),
            None => None,
        };
        let cb = self.free_command_buffer(&mut state)?;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        let bracket = BRACKET
            .with(std::cell::Cell::get)
            .filter(|b| std::ptr::eq(b.stream, self));
        let marks = match bracket {
            Some(b) => match self.marks(&mut state, &b) {
                Ok(m) => Some(m),
                Err(e) => {
                    state.free.push(cb);
                    return Err(e);
                }
            },
            None => None,
        };
        // The end timestamp after the program's command buffers.
        let end_cb = if marks.is_some() && !program.is_empty() {
            match self.free_command_buffer(&mut state) {
                Ok(end_cb) => Some(end_cb),
                Err(e) => {
                    state.free.push(cb);
                    self.unmark(marks);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let pool = self.ctx.timestamps.pool;
        // SAFETY: `cb` is not in flight (new, or retired after its
        // submission completed), and its pool is used under our lock.
        // Beginning a command buffer from a RESET_COMMAND_BUFFER pool resets
        // it implicitly. The marks' query slots were reset on the host and
        // are written by this command buffer only (a slot is written once
        // between resets).
        let recorded = unsafe {
            device
                .begin_command_buffer(cb, &begin)
                .map(|()| {
                    if let Some(slot) = marks.as_ref().and_then(|m| m.write_start) {
                        // The start needs no wait for earlier commands:
                        // the whole submission already waits for the
                        // stream's previous one (ALL_COMMANDS), and a
                        // top-of-pipe timestamp spares drivers a flush.
                        let top = vk::PipelineStageFlags2::TOP_OF_PIPE;
                        device.cmd_write_timestamp2(cb, top, pool, slot);
                    }
                    record(device, cb, slot.map_or(0, |(_, offset)| offset));
                    if let Some(m) = marks.as_ref().filter(|_| end_cb.is_none()) {
                        let all = vk::PipelineStageFlags2::ALL_COMMANDS;
                        device.cmd_write_timestamp2(cb, all, pool, m.end);
                    }
                })
                .and_then(|()| device.end_command_buffer(cb))
                .and_then(|()| match (end_cb, &marks) {
                    (Some(end_cb), Some(m)) => {
                        device.begin_command_buffer(end_cb, &begin)?;
                        let all = vk::PipelineStageFlags2::ALL_COMMANDS;
                        device.cmd_write_timestamp2(end_cb, all, pool, m.end);
                        device.end_command_buffer(end_cb)
                    }
                    _ => Ok(()),
                })
        };
        if let Err(e) = recorded {
            state.free.push(cb);
            state.free.extend(end_cb);
            self.unmark(marks);
            return Err(vk_error("recording a command buffer", e));
        }

        let value = state.last + 1;
        let mut waits: SmallVec<[vk::SemaphoreSubmitInfo<'_>; 4]> = state
            .pending
            .iter()
            .map(|&(sem, v)| {
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(sem)
                    .value(v)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            })
            .collect();
        if state.last > 0 {
            waits.push(
                vk::SemaphoreSubmitInfo::default()
                    .semaphore(self.semaphore)
                    .value(state.last)
                    .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS),
            );
        }
        let signal = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.semaphore)
            .value(value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let cbs: SmallVec<[vk::CommandBufferSubmitInfo<'_>; 4]> = std::iter::once(cb)
            .chain(program.iter().copied())
            .chain(end_cb)
            .map(|cb| vk::CommandBufferSubmitInfo::default().command_buffer(cb))
            .collect();
        let submit = [vk::SubmitInfo2::default()
            .wait_semaphore_infos(&waits)
            .command_buffer_infos(&cbs)
            .signal_semaphore_infos(&signal)];
        let mut queue = lock(&self.ctx.queues[self.queue]);
        // SAFETY: the queue is externally synchronised by its mutex; every
        // handle in `submit` is alive, and the command buffer stays alive
        // (in `in_flight`) until the semaphore reaches `value`.
        let result = unsafe { device.queue_submit2(queue.handle, &submit, vk::Fence::null()) };
        queue.submissions += 1;
        let queued = queue.submissions;
        drop(queue);
        if let Err(e) = result {
            state.free.push(cb);
            state.free.extend(end_cb);
            self.unmark(marks);
            return Err(vk_error("vkQueueSubmit2", e));
        }
        if let (Some(mut b), Some(m)) = (bracket, marks) {
            let ts = &self.ctx.timestamps;
            let point = self.point(value);
            match m.write_start {
                Some(start) => ts.written(&[start, m.end], point),
                None => ts.written(&[m.end], point),
            }
            // The previous submission's end is not the span's end.
            if let Some(old) = b.end.replace(m.end) {
                ts.release(&self.ctx.device, old);
            }
            b.start = b.start.or(m.new_start);
            b.first = b.first.or(Some(value));
            b.last = Some(value);
            BRACKET.with(|cell| cell.set(Some(b)));
            state.last_end = Some(LastEnd {
                slot: m.end,
                value,
                queued,
            });
        }
        if let (Some((i, _)), Some(ring)) = (slot, state.params.as_mut()) {
            ring.used[i] = value;
            ring.next = (i + 1) % ring.used.len();
        }
        state.pending.clear();
        state.last = value;
        state.in_flight.push_back(InFlight {
            value,
            cb,
            _keep: keep,
        });
        if let Some(end_cb) = end_cb {
            state.in_flight.push_back(InFlight {
                value,
                cb: end_cb,
                _keep: Keeps::new(),
            });
        }
        Ok(value)
    }

    /// The query slots a submission of bracket `b` writes: an end slot,
    /// and for the bracket's first submission its start (see
    /// [`chained_start`](Self::chained_start)).
    fn marks(&self, state: &mut State, b: &Bracket) -> Result<Marks> {
        let ts = &self.ctx.timestamps;
        let device = &self.ctx.device;
        let (write_start, new_start) = if b.first.is_some() {
            (None, None)
        } else if let Some(slot) = self.chained_start(state)? {
            (None, Some(slot))
        } else {
            let slot = ts.take(device)?;
            (Some(slot), Some(slot))
        };
        match ts.take(device) {
            Ok(end) => Ok(Marks {
                write_start,
                new_start,
                end,
            }),
            Err(e) => {
                if let Some(slot) = new_start {
                    ts.release(device, slot);
                }
                Err(e)
            }
        }
    }

    /// Gives back the slots of a bracketed submission that failed.
    fn unmark(&self, marks: Option<Marks>) {
        if let Some(m) = marks {
            let ts = &self.ctx.timestamps;
            for slot in m.new_start.into_iter().chain([m.end]) {
                ts.release(&self.ctx.device, slot);
            }
        }
    }

    /// The start of a span whose first submission is about to be made:
    /// while the stream is busy with the previous bracketed submission
    /// (the stream's last one, not yet completed, with no event waits
    /// queued and no other stream's submission on the queue since), the
    /// new work starts on the device when that one ends, so its end
    /// timestamp is shared as this span's start (one timestamp per launch
    /// instead of two). `None` otherwise, or when that slot was released
    /// meanwhile: the submission writes a start of its own.
    ///
    /// "Busy" is read on the host just before submitting; if the previous
    /// work completes in between (or another stream's submission reaches
    /// the queue in between), the span also counts the few microseconds
    /// until this submission reaches the device (or that work).
    fn chained_start(&self, state: &mut State) -> Result<Option<u32>> {
        let Some(end) = state.last_end else {
            return Ok(None);
        };
        if end.value != state.last || end.value <= state.done || !state.pending.is_empty() {
            return Ok(None);
        }
        // Another stream's work queued in between could run first.
        if lock(&self.ctx.queues[self.queue]).submissions != end.queued {
            return Ok(None);
        }
        state.done = state.done.max(counter(&self.ctx.device, self.semaphore)?);
        if end.value <= state.done {
            return Ok(None);
        }
        let shared = self.ctx.timestamps.share(end.slot, &self.point(end.value));
        Ok(shared.then_some(end.slot))
    }

    /// Waits for everything submitted so far and releases what it kept.
    pub(super) fn synchronize(&self) -> Result<()> {
        self.point(self.last_value()).wait()?;
        self.retire(&mut lock(&self.state))
    }

    /// Whether everything submitted so far has completed.
    pub(super) fn query(&self) -> Result<bool> {
        self.point(self.last_value()).reached()
    }

    /// The queue this stream submits to.
    pub(super) fn queue(&self) -> vk::Queue {
        self.ctx.queue_handles[self.queue]
    }

    /// Destroys the stream's Vulkan objects (its semaphore, command pool and
    /// parameter ring), for `interop::release`.
    ///
    /// # Safety
    ///
    /// Everything submitted on the stream has completed and been retired
    /// ([`synchronize`](Self::synchronize)), and the stream is never used
    /// again (its device is marked released right after).
    pub(super) unsafe fn destroy(&self) {
        let mut state = lock(&self.state);
        state.free.clear();
        state.in_flight.clear();
        state.params = None;
        let device = &self.ctx.device;
        // SAFETY: no command buffer of the pool is pending (the caller's
        // promise), so the pool and the buffers it owns can go; no
        // submission waits for or signals the semaphore any more.
        unsafe {
            device.destroy_command_pool(state.pool, None);
            device.destroy_semaphore(self.semaphore, None);
        }
        state.pool = vk::CommandPool::null();
    }
}
