//! One pool of timestamp query slots, for backends whose timed events and
//! profiled spans write timestamp queries (Vulkan's query pool, wgpu's
//! query set). [`TimestampPool`] keeps the bookkeeping: which slots are
//! free, who holds each one, which submission writes it, its value once
//! read. It makes no device call itself: asking whether work has
//! completed, resetting slots and reading their values go through
//! [`TimestampQueries`], which a backend implements over its native query
//! object and the unit tests implement over memory, so every rule here is
//! tested without a device. The pool is generic over `W`, what identifies
//! the submission that writes a slot (a timeline semaphore and its value,
//! a queue's sequence number).
//!
//! The rules:
//!
//! - Slots are handed out in blocks of `block` adjacent slots (1 on
//!   Vulkan; 2 on wgpu, whose compute passes reset every query between the
//!   two they write). A holder takes a block and holds its first `held`
//!   slots; each slot counts its holds, and [`share`](TimestampPool::share)
//!   adds one (a profiled span's end that is also the next span's start).
//!   Free blocks are handed out lowest first, so a stream's consecutive
//!   spans sit side by side and are read in one run.
//! - A slot is written once, by one submission (its *writer*), between two
//!   resets; the backend says which ([`written`](TimestampPool::written)).
//! - A block nothing holds *retires*, and is reset and freed once every
//!   writer of its slots has completed. Retired blocks are recycled in
//!   batches (when no block is free, or when [`RECYCLE_BATCH`] blocks have
//!   retired since the last pass), with one reset per run of adjacent
//!   slots: resets cost a driver call each.
//! - The first read of a slot reads other readable slots with it (its
//!   [`ReadScope`]) in one native read, and the values are kept until the
//!   slot is reset. A read holds the slots it reads, without the pool's
//!   lock, so none is reset under it.
//! - A device holds any number of timed events (PyTorch's habit of keeping
//!   a start and an end event per iteration and reading them all at the
//!   end). When every block is held, the blocks whose held slots are all
//!   *movable* (each held once, by a holder that gives it back with
//!   [`release_written`](TimestampPool::release_written): a timed event's
//!   own slot) and written by completed work have their values read and
//!   moved out of the slots, keyed by slot and writer, where their holders
//!   find them; those blocks are reset and reused. When such a block's
//!   work is still running, taking a block waits for it; when every
//!   released block's work is still running, taking waits for the oldest
//!   (as a full ring would). It is an error only when no held block can
//!   ever move: every slot held by work not submitted yet or by profiled
//!   spans.
//!
//! The pool never calls into the backend while holding its lock except
//! for what the backend declares cheap and non-blocking
//! ([`TimestampQueries::reached`] and [`TimestampQueries::reset`]).

use std::hash::Hash;
use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use rustc_hash::FxHashMap;

use crate::core::DeviceType;
use crate::error::{Error, Result};

/// Retired blocks that trigger a recycling pass (at least this many since
/// the last pass), so slots are reset in batches.
pub const RECYCLE_BATCH: usize = 1024;

/// What a pool asks of the device: whether a slot's writer has
/// completed, resetting slots and reading their values. A backend
/// implements it over its query pool or query set; the pool passes it
/// into every call that may need it.
pub trait TimestampQueries {
    /// The backend whose errors the pool reports.
    const DEVICE_TYPE: DeviceType;

    /// What identifies the submission that writes a slot: unique per
    /// submission. Its order only picks which of several writers to wait
    /// for (the least first).
    type Writer: Copy + Eq + Ord + Hash;

    /// What one pass over the slots learns of the device's progress, so
    /// that it asks the driver once per stream rather than once per slot.
    type Progress: Default;

    /// Whether `writer` has completed. Never blocks; called under the
    /// pool's lock.
    fn reached(&self, writer: &Self::Writer, progress: &mut Self::Progress) -> bool;

    /// Waits until `writer` has completed.
    fn wait(&self, writer: &Self::Writer) -> Result<()>;

    /// Makes `slots` writable again. Called under the pool's lock, only for
    /// slots whose writers have completed (or that were never written) and
    /// whose values no one reads from the device again.
    fn reset(&self, slots: Range<u32>);

    /// The values of the slots in `runs` (ascending, disjoint), one vector
    /// per run. Every slot of a run that the pool asks for was written by
    /// a completed writer and stays held until this returns; slots a run
    /// covers between them may be anything (a backend reads them or not).
    fn read(&self, runs: &[Range<u32>]) -> Result<Vec<Vec<u64>>>;
}

/// Which readable slots (held, written by completed work, not read yet)
/// the first read of a slot reads along with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadScope {
    /// The slot and the readable slots right after it, up to `max` in
    /// all: one native read per call, for drivers where every read costs
    /// a wait for the whole device (lavapipe's `vkGetQueryPoolResults`).
    Following {
        /// The most slots one read covers.
        max: u32,
    },
    /// Every readable slot, in runs of slots less than `gap` apart, all in
    /// one native read (wgpu resolves every run into one buffer with one
    /// submission and one map).
    All {
        /// Slots closer than this to the previous one share its run.
        gap: u32,
    },
}

/// One slot.
#[derive(Clone, Copy)]
struct Slot<W> {
    /// Holders: events, a bracket between its submissions, a read in
    /// progress. 0: free, or retired and waiting for its writer.
    refs: u32,
    /// The submission that writes the slot, once submitted.
    writer: Option<W>,
    /// The slot's value, once read.
    value: Option<u64>,
    /// Held once, by a holder that gives it back with `release_written`:
    /// its value may move out of the slot when every block is held.
    movable: bool,
}

impl<W> Default for Slot<W> {
    fn default() -> Self {
        Slot {
            refs: 0,
            writer: None,
            value: None,
            movable: false,
        }
    }
}

struct State<W> {
    /// Free blocks (reset), popped from the end: lowest first.
    free: Vec<u32>,
    /// Blocks nothing holds, waiting for their writers.
    retiring: Vec<u32>,
    /// `retiring`'s length that triggers the next recycling pass.
    recycle_at: usize,
    table: Vec<Slot<W>>,
    /// The values of slots whose blocks were reused while their holders
    /// lived, by slot and writer (see the module docs).
    moved: FxHashMap<(u32, W), u64>,
}

/// What `take` does when no block is free.
enum Full<W> {
    /// Values were moved out: blocks are free.
    Moved,
    /// Read these slots (held for the read), then look again.
    Read(Vec<(u32, W)>),
    /// Wait for this writer: it writes a movable block.
    Wait(W),
    /// Wait for reads in progress: they hold movable slots for a moment.
    Reading,
    /// No held block can ever move.
    Stuck,
}

/// A device's timestamp slots; see the [module docs](self).
pub struct TimestampPool<W> {
    block: u32,
    reads: ReadScope,
    state: Mutex<State<W>>,
    /// Signalled when a read gives back the holds it took (`take` waits for
    /// it when only reads keep blocks from moving out).
    read_done: Condvar,
}

impl<W> std::fmt::Debug for TimestampPool<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("TimestampPool")
            .field("slots", &st.table.len())
            .field("block", &self.block)
            .field("free_blocks", &st.free.len())
            .field("retiring_blocks", &st.retiring.len())
            .field("moved", &st.moved.len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The runs of ascending `slots` as ranges: a slot less than `gap` past
/// the previous run's end joins it (1: adjacent slots only), so a range
/// may cover a few slots between that are not in `slots`.
pub fn slot_runs(slots: impl IntoIterator<Item = u32>, gap: u32) -> Vec<Range<u32>> {
    let mut runs: Vec<Range<u32>> = Vec::new();
    for slot in slots {
        match runs.last_mut() {
            Some(run) if slot < run.end + gap => run.end = slot + 1,
            _ => runs.push(slot..slot + 1),
        }
    }
    runs
}

fn min_of<W: Ord>(a: Option<W>, b: W) -> Option<W> {
    Some(match a {
        Some(a) => a.min(b),
        None => b,
    })
}

impl<W: Copy + Eq + Ord + Hash> TimestampPool<W> {
    /// `slots` slots (a whole number of blocks of `block`), every one free
    /// and reset (the backend resets its native object when it makes it).
    pub fn new(slots: u32, block: u32, reads: ReadScope) -> Self {
        assert!(
            block > 0 && slots.is_multiple_of(block),
            "a timestamp pool holds whole blocks: {slots} slots in blocks of {block}"
        );
        TimestampPool {
            block,
            reads,
            state: Mutex::new(State {
                free: (0..slots / block).rev().collect(),
                retiring: Vec::new(),
                recycle_at: RECYCLE_BATCH,
                table: vec![Slot::default(); slots as usize],
                moved: FxHashMap::default(),
            }),
            read_done: Condvar::new(),
        }
    }

    /// How many slots there are.
    pub fn len(&self) -> u32 {
        lock(&self.state).table.len() as u32
    }

    /// Whether the pool has no slots.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slots of block `b`.
    fn slots_of(&self, b: u32) -> Range<usize> {
        (b * self.block) as usize..((b + 1) * self.block) as usize
    }

    /// A free block, of which the caller holds the first `held` slots
    /// (1..=`block`); returns its first slot. Recycles retired blocks
    /// when none is free; waits for the oldest retired block's work when
    /// all are still being written, or moves values out when every block
    /// is held (see the module docs). An error only when no held block
    /// can ever move.
    pub fn take<Q: TimestampQueries<Writer = W>>(&self, q: &Q, held: u32) -> Result<u32> {
        debug_assert!(
            (1..=self.block).contains(&held),
            "held {held} of a block of {}",
            self.block
        );
        loop {
            let mut st = lock(&self.state);
            let pending = if st.free.is_empty() {
                self.recycle(q, &mut st)
            } else {
                None
            };
            if let Some(b) = st.free.pop() {
                let first = self.slots_of(b).start;
                for s in &mut st.table[first..first + held as usize] {
                    s.refs = 1;
                }
                return Ok(first as u32);
            }
            // Blocks still retiring after recycling all have a writer
            // that has not run.
            let wait = match pending {
                Some(writer) => writer,
                None => match self.move_out(q, &mut st) {
                    Full::Moved => continue,
                    Full::Read(slots) => {
                        drop(st);
                        self.read_held(q, &slots, self.reads_gap())?;
                        continue;
                    }
                    Full::Wait(writer) => writer,
                    Full::Reading => {
                        drop(
                            self.read_done
                                .wait(st)
                                .unwrap_or_else(PoisonError::into_inner),
                        );
                        continue;
                    }
                    Full::Stuck => {
                        return Err(Error::backend(
                            Q::DEVICE_TYPE,
                            format!(
                                "all {} timestamp query slots are held by timed work not \
                                 submitted yet or by profiled operations",
                                st.table.len()
                            ),
                        ));
                    }
                },
            };
            drop(st);
            q.wait(&wait)?;
        }
    }

    /// The gap below which slots share a run when reading.
    fn reads_gap(&self) -> u32 {
        match self.reads {
            ReadScope::Following { .. } => 1,
            ReadScope::All { gap } => gap.max(1),
        }
    }

    /// With every block held: moves out the values of the blocks whose
    /// held slots are all movable, written by completed work and read, and
    /// frees those blocks; otherwise says what to do first.
    fn move_out<Q: TimestampQueries<Writer = W>>(&self, q: &Q, st: &mut State<W>) -> Full<W> {
        let mut progress = Q::Progress::default();
        let mut done = Vec::new();
        let mut unread = Vec::new();
        let mut in_flight = None;
        let mut reading = false;
        let blocks = st.table.len() as u32 / self.block;
        'blocks: for b in 0..blocks {
            let slots = &st.table[self.slots_of(b)];
            if slots.iter().all(|s| s.refs == 0) {
                continue;
            }
            let mut busy = false;
            for s in slots {
                if s.refs > 0 {
                    // A slot not written yet, or held by what does not
                    // give its value back, keeps the block.
                    if !s.movable || s.writer.is_none() {
                        continue 'blocks;
                    }
                    // A read holds it for a moment.
                    busy |= s.refs > 1;
                }
                // Every writer of the block, held or given back, must have
                // run before the block is reset.
                if let Some(w) = s.writer
                    && !q.reached(&w, &mut progress)
                {
                    in_flight = min_of(in_flight, w);
                    continue 'blocks;
                }
            }
            if busy {
                reading = true;
                continue;
            }
            let first = self.slots_of(b).start as u32;
            let before = unread.len();
            for (i, s) in slots.iter().enumerate() {
                if let (true, None, Some(w)) = (s.refs > 0, s.value, s.writer) {
                    unread.push((first + i as u32, w));
                }
            }
            if unread.len() == before {
                done.push(b);
            }
        }
        if !done.is_empty() {
            let resets = slot_runs(
                done.iter()
                    .flat_map(|&b| self.slots_of(b))
                    .map(|s| s as u32),
                1,
            );
            for run in resets {
                q.reset(run);
            }
            for &b in &done {
                for slot in self.slots_of(b) {
                    let s = std::mem::take(&mut st.table[slot]);
                    if let (true, Some(w), Some(v)) = (s.refs > 0, s.writer, s.value) {
                        st.moved.insert((slot as u32, w), v);
                    }
                }
            }
            st.free.extend(done.iter().rev());
            return Full::Moved;
        }
        if !unread.is_empty() {
            for &(slot, _) in &unread {
                st.table[slot as usize].refs += 1;
            }
            return Full::Read(unread);
        }
        match (in_flight, reading) {
            (Some(writer), _) => Full::Wait(writer),
            (None, true) => Full::Reading,
            (None, false) => Full::Stuck,
        }
    }

    /// Holds `slot` once more, if it is still held and written by
    /// `writer` (a slot released meanwhile may already be recycled).
    pub fn share(&self, slot: u32, writer: W) -> bool {
        let mut st = lock(&self.state);
        let s = &mut st.table[slot as usize];
        let ok = s.refs > 0 && s.writer == Some(writer);
        if ok {
            s.refs += 1;
        }
        ok
    }

    /// Notes that the submission `writer` (submitted) writes `slots`.
    pub fn written(&self, slots: &[u32], writer: W) {
        let mut st = lock(&self.state);
        for &slot in slots {
            st.table[slot as usize].writer = Some(writer);
        }
    }

    /// Notes that `writer` writes `slot`, held once by a holder that gives
    /// it back with [`release_written`](Self::release_written) (a timed
    /// event's own slot): its value may move out of the slot while the
    /// holder lives.
    pub fn written_movable(&self, slot: u32, writer: W) {
        let mut st = lock(&self.state);
        let s = &mut st.table[slot as usize];
        s.writer = Some(writer);
        s.value = None;
        s.movable = true;
    }

    /// Takes `slot`, written by `writer`, back for its holder to write
    /// again (an event recorded again that reuses its slot): forgets its
    /// writer and value, so that it is not moved out while rewritten.
    /// `false` when its value was moved out and its block reused: the
    /// holder then gives it back (dropping the value) and takes another.
    pub fn rewrite(&self, slot: u32, writer: W) -> bool {
        let mut st = lock(&self.state);
        if st.moved.contains_key(&(slot, writer)) {
            return false;
        }
        let s = &mut st.table[slot as usize];
        s.writer = None;
        s.value = None;
        s.movable = false;
        true
    }

    /// Drops one hold of `slot`; the last hold of its block retires the
    /// block: it is reset and reused once its writers have run.
    pub fn release<Q: TimestampQueries<Writer = W>>(&self, q: &Q, slot: u32) {
        self.release_locked(q, &mut lock(&self.state), slot);
    }

    /// Releases a movable `slot` written by `writer`: drops its moved-out
    /// value, or releases the slot, which is then no longer its holder's
    /// alone (a read may still hold it, and that hold must not look like
    /// the holder's to `move_out`).
    pub fn release_written<Q: TimestampQueries<Writer = W>>(&self, q: &Q, slot: u32, writer: W) {
        let mut st = lock(&self.state);
        if !st.moved.is_empty() && st.moved.remove(&(slot, writer)).is_some() {
            return;
        }
        st.table[slot as usize].movable = false;
        self.release_locked(q, &mut st, slot);
    }

    fn release_locked<Q: TimestampQueries<Writer = W>>(&self, q: &Q, st: &mut State<W>, slot: u32) {
        let s = &mut st.table[slot as usize];
        if s.refs == 0 {
            // Not held: retiring it again would free its block twice.
            debug_assert!(false, "timestamp slot {slot} released more often than held");
            return;
        }
        s.refs -= 1;
        if s.refs > 0 {
            return;
        }
        let b = slot / self.block;
        if st.table[self.slots_of(b)].iter().all(|s| s.refs == 0) {
            st.retiring.push(b);
            if st.retiring.len() >= st.recycle_at {
                self.recycle(q, st);
            }
        }
    }

    /// Resets every retired block whose writers have all run (one reset
    /// per run of adjacent slots) and frees them, lowest first. Returns
    /// the least writer still running among the blocks left retiring.
    fn recycle<Q: TimestampQueries<Writer = W>>(&self, q: &Q, st: &mut State<W>) -> Option<W> {
        let State {
            free,
            retiring,
            recycle_at,
            table,
            ..
        } = st;
        let mut progress = Q::Progress::default();
        let mut ready = Vec::new();
        let mut pending = None;
        retiring.retain(|&b| {
            let running = table[self.slots_of(b)]
                .iter()
                .filter_map(|s| s.writer)
                .filter(|w| !q.reached(w, &mut progress))
                .min();
            match running {
                Some(w) => {
                    pending = min_of(pending, w);
                    true
                }
                None => {
                    ready.push(b);
                    false
                }
            }
        });
        ready.sort_unstable();
        for run in slot_runs(
            ready
                .iter()
                .flat_map(|&b| self.slots_of(b))
                .map(|s| s as u32),
            1,
        ) {
            q.reset(run);
        }
        for &b in &ready {
            table[self.slots_of(b)].fill(Slot::default());
        }
        free.extend(ready.iter().rev());
        *recycle_at = retiring.len() + RECYCLE_BATCH;
        pending
    }

    /// The value of `slot` for its holder `holder` (see
    /// [`read`](Self::read)), if read already: moved out of the slot under
    /// `holder`, or kept in the slot.
    pub fn value(&self, slot: u32, holder: W) -> Option<u64> {
        Self::lookup(&lock(&self.state), slot, holder)
    }

    fn lookup(st: &State<W>, slot: u32, holder: W) -> Option<u64> {
        if !st.moved.is_empty()
            && let Some(&v) = st.moved.get(&(slot, holder))
        {
            return Some(v);
        }
        let s = &st.table[slot as usize];
        if s.refs > 0 && s.writer.is_some() {
            return s.value;
        }
        None
    }

    /// The value of `slot`, which the caller holds: kept from an earlier
    /// read, or read now (after waiting for the slot's writer) together
    /// with the slots the pool's [`ReadScope`] takes along.
    ///
    /// `holder` names the caller's hold: the writer its value moves out
    /// under when the slot is movable (the slot's own writer). A holder
    /// that shares a slot written by an earlier submission (a profiled
    /// span whose start is the previous span's end) reads it all the same.
    pub fn read<Q: TimestampQueries<Writer = W>>(
        &self,
        q: &Q,
        slot: u32,
        holder: W,
    ) -> Result<u64> {
        let writer = match Self::check_written::<Q>(&lock(&self.state), slot, holder)? {
            Ok(v) => return Ok(v),
            Err(writer) => writer,
        };
        let mut progress = Q::Progress::default();
        if !q.reached(&writer, &mut progress) {
            q.wait(&writer)?;
            progress = Q::Progress::default();
        }
        let held = {
            let mut st = lock(&self.state);
            if let Ok(v) = Self::check_written::<Q>(&st, slot, holder)? {
                return Ok(v);
            }
            let held = self.readable(q, &st, slot, &mut progress);
            // Held while read without the lock, so none is reset.
            for &(s, _) in &held {
                st.table[s as usize].refs += 1;
            }
            held
        };
        self.read_held(q, &held, self.reads_gap())?;
        Self::lookup(&lock(&self.state), slot, holder)
            .ok_or_else(|| unwritten(Q::DEVICE_TYPE, slot))
    }

    /// `Ok(value)` when `slot`'s value for `holder` was read already;
    /// `Err(writer)`, the slot's writer, when not yet; an error when the
    /// slot is not held or not written (its holder asks too early).
    fn check_written<Q: TimestampQueries<Writer = W>>(
        st: &State<W>,
        slot: u32,
        holder: W,
    ) -> Result<std::result::Result<u64, W>> {
        if let Some(v) = Self::lookup(st, slot, holder) {
            return Ok(Ok(v));
        }
        let s = &st.table[slot as usize];
        match s.writer {
            Some(writer) if s.refs > 0 => Ok(Err(writer)),
            _ => Err(unwritten(Q::DEVICE_TYPE, slot)),
        }
    }

    /// `slot` (held, written by completed work, not read) and the readable
    /// slots its pool's [`ReadScope`] reads with it, ascending.
    fn readable<Q: TimestampQueries<Writer = W>>(
        &self,
        q: &Q,
        st: &State<W>,
        slot: u32,
        progress: &mut Q::Progress,
    ) -> Vec<(u32, W)> {
        let mut readable = |s: &Slot<W>| match (s.refs > 0, s.value, s.writer) {
            (true, None, Some(w)) if q.reached(&w, progress) => Some(w),
            _ => None,
        };
        let own = |i: usize| (i as u32, st.table[i].writer);
        match self.reads {
            ReadScope::Following { max } => {
                let first = slot as usize;
                let end = st.table.len().min(first + max.max(1) as usize);
                let mut held = Vec::new();
                if let (s, Some(w)) = own(first) {
                    held.push((s, w));
                }
                for (i, s) in st.table.iter().enumerate().take(end).skip(first + 1) {
                    match readable(s) {
                        Some(w) => held.push((i as u32, w)),
                        None => break,
                    }
                }
                held
            }
            ReadScope::All { .. } => st
                .table
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    if i == slot as usize {
                        return s.writer.map(|w| (slot, w));
                    }
                    readable(s).map(|w| (i as u32, w))
                })
                .collect(),
        }
    }

    /// Reads `slots` (held once more by the caller for the read, each with
    /// the writer it had then), keeps the values of those still written
    /// by the same writer, and gives the holds back.
    fn read_held<Q: TimestampQueries<Writer = W>>(
        &self,
        q: &Q,
        slots: &[(u32, W)],
        gap: u32,
    ) -> Result<()> {
        let runs = slot_runs(slots.iter().map(|&(s, _)| s), gap);
        let result = q.read(&runs);
        let mut st = lock(&self.state);
        if let Ok(values) = &result {
            let mut at = 0;
            for &(slot, writer) in slots {
                while at < runs.len() && runs[at].end <= slot {
                    at += 1;
                }
                let Some(v) = runs
                    .get(at)
                    .filter(|r| r.start <= slot)
                    .and_then(|r| values.get(at)?.get((slot - r.start) as usize))
                else {
                    continue;
                };
                let s = &mut st.table[slot as usize];
                if s.writer == Some(writer) {
                    s.value = Some(*v);
                }
            }
        }
        for &(slot, _) in slots {
            self.release_locked(q, &mut st, slot);
        }
        drop(st);
        self.read_done.notify_all();
        result.map(drop)
    }

    /// How many values are kept for holders whose blocks were reused.
    #[cfg(test)]
    pub(crate) fn moved_len(&self) -> usize {
        lock(&self.state).moved.len()
    }
}

#[cold]
fn unwritten(ty: DeviceType, slot: u32) -> Error {
    Error::backend(
        ty,
        format!("timestamp query slot {slot} was read before its submission wrote it"),
    )
}

#[cfg(test)]
mod tests {
    use std::ops::Range;
    use std::sync::Mutex;

    use super::{RECYCLE_BATCH, ReadScope, TimestampPool, TimestampQueries, lock, slot_runs};
    use crate::core::DeviceType;
    use crate::error::Result;

    /// A device in memory: a submission writes its slots at once and
    /// completes when something waits for it; every reset and read is
    /// logged.
    struct Memory {
        /// Whether a slot may be written again without a reset (wgpu), or
        /// only once between resets (Vulkan).
        rewrites: bool,
        device: Mutex<Device>,
    }

    #[derive(Default)]
    struct Device {
        /// The last submission made, and the last completed.
        submitted: u64,
        completed: u64,
        /// What each slot holds.
        slots: Vec<Option<u64>>,
        resets: Vec<Range<u32>>,
        reads: Vec<Vec<Range<u32>>>,
        waits: Vec<u64>,
    }

    /// The value submission `seq` writes into `slot`: both can be told
    /// from it.
    fn stamp(slot: u32, seq: u64) -> u64 {
        seq * 1000 + u64::from(slot)
    }

    impl Memory {
        fn new(slots: u32, rewrites: bool) -> Self {
            Memory {
                rewrites,
                device: Mutex::new(Device {
                    slots: vec![None; slots as usize],
                    ..Device::default()
                }),
            }
        }

        /// Submits work that writes `slots`; its sequence number.
        fn submit(&self, slots: &[u32]) -> u64 {
            let mut d = lock(&self.device);
            d.submitted += 1;
            let seq = d.submitted;
            for &s in slots {
                assert!(
                    self.rewrites || d.slots[s as usize].is_none(),
                    "slot {s} written twice between resets"
                );
                d.slots[s as usize] = Some(stamp(s, seq));
            }
            seq
        }

        fn complete_all(&self) {
            let mut d = lock(&self.device);
            d.completed = d.submitted;
        }

        fn resets(&self) -> Vec<Range<u32>> {
            lock(&self.device).resets.clone()
        }

        fn reads(&self) -> Vec<Vec<Range<u32>>> {
            lock(&self.device).reads.clone()
        }

        fn waits(&self) -> Vec<u64> {
            lock(&self.device).waits.clone()
        }
    }

    impl TimestampQueries for Memory {
        const DEVICE_TYPE: DeviceType = DeviceType::PrivateUse1;
        type Writer = u64;
        type Progress = ();

        fn reached(&self, writer: &u64, _: &mut ()) -> bool {
            *writer <= lock(&self.device).completed
        }

        fn wait(&self, writer: &u64) -> Result<()> {
            let mut d = lock(&self.device);
            d.waits.push(*writer);
            d.completed = d.completed.max(*writer);
            Ok(())
        }

        fn reset(&self, slots: Range<u32>) {
            let mut d = lock(&self.device);
            for s in slots.clone() {
                d.slots[s as usize] = None;
            }
            d.resets.push(slots);
        }

        fn read(&self, runs: &[Range<u32>]) -> Result<Vec<Vec<u64>>> {
            let mut d = lock(&self.device);
            d.reads.push(runs.to_vec());
            Ok(runs
                .iter()
                .map(|r| {
                    r.clone()
                        .map(|s| d.slots[s as usize].unwrap_or(0))
                        .collect()
                })
                .collect())
        }
    }

    /// One run (a lone range is what these tests expect often).
    fn one(run: Range<u32>) -> Vec<Range<u32>> {
        vec![run]
    }

    /// Vulkan's layout: single slots, a read takes the following ones.
    fn single(slots: u32) -> (TimestampPool<u64>, Memory) {
        let pool = TimestampPool::new(slots, 1, ReadScope::Following { max: 4096 });
        (pool, Memory::new(slots, false))
    }

    /// wgpu's layout: pairs, a read takes every readable slot.
    fn pairs(slots: u32) -> (TimestampPool<u64>, Memory) {
        let pool = TimestampPool::new(slots, 2, ReadScope::All { gap: 64 });
        (pool, Memory::new(slots, true))
    }

    /// A timed event as a backend records one: a slot of its own,
    /// written by a submission of its own.
    fn event(pool: &TimestampPool<u64>, dev: &Memory) -> (u32, u64) {
        let slot = pool.take(dev, 1).expect("a slot");
        let seq = dev.submit(&[slot]);
        pool.written_movable(slot, seq);
        (slot, seq)
    }

    #[test]
    fn runs_join_slots_closer_than_the_gap() {
        assert!(slot_runs([], 1).is_empty());
        assert_eq!(slot_runs([0, 1, 2, 3], 1), one(0..4));
        assert_eq!(slot_runs([0, 1, 3], 1), [0..2, 3..4]);
        // A small gap stays in the run; a large one starts another (slots
        // recycled from both ends are not read with everything between).
        assert_eq!(slot_runs([4, 5, 9], 64), one(4..10));
        assert_eq!(
            slot_runs([4, 5, 9, 74, 4094, 4095], 64),
            [4..10, 74..75, 4094..4096]
        );
    }

    /// Released slots come back lowest first once the work that writes
    /// them has run; while it runs, a take with nothing free waits for
    /// it, as a full ring does, and the slots are reset in one run.
    #[test]
    fn released_slots_are_reused_once_their_writers_ran() {
        let (pool, dev) = single(8);
        let held: Vec<u32> = (0..3).map(|_| pool.take(&dev, 1).expect("slot")).collect();
        assert_eq!(held, [0, 1, 2], "lowest first");
        let seq = dev.submit(&held);
        pool.written(&held, seq);
        for &s in &held {
            pool.release(&dev, s);
        }
        let rest: Vec<u32> = (0..5).map(|_| pool.take(&dev, 1).expect("slot")).collect();
        assert_eq!(rest, [3, 4, 5, 6, 7], "free slots before released ones");
        assert!(
            dev.resets().is_empty(),
            "nothing recycled while slots are free"
        );
        assert_eq!(pool.take(&dev, 1).expect("a recycled slot"), 0);
        assert_eq!(
            dev.waits(),
            [seq],
            "waited for the writer of the released slots"
        );
        assert_eq!(dev.resets(), one(0..3), "one reset for the adjacent slots");
        assert_eq!(pool.take(&dev, 1).expect("slot"), 1);
    }

    /// Released slots are reset in batches of `RECYCLE_BATCH` even while
    /// free slots remain, so resets never pile up for the moment the
    /// pool runs dry.
    #[test]
    fn released_slots_are_reset_in_batches() {
        let n = RECYCLE_BATCH as u32;
        let (pool, dev) = single(2 * n);
        let held: Vec<u32> = (0..n).map(|_| pool.take(&dev, 1).expect("slot")).collect();
        let seq = dev.submit(&held);
        pool.written(&held, seq);
        dev.complete_all();
        for &s in &held[..held.len() - 1] {
            pool.release(&dev, s);
        }
        assert!(dev.resets().is_empty(), "below the batch");
        pool.release(&dev, held[held.len() - 1]);
        assert_eq!(dev.resets(), one(0..n), "the batch in one reset");
        assert_eq!(
            pool.take(&dev, 1).expect("slot"),
            0,
            "reset slots lowest first"
        );
    }

    /// A shared slot retires with its last holder; `share` refuses a
    /// slot held for another writer, or no longer held.
    #[test]
    fn a_shared_slot_retires_with_its_last_holder() {
        let (pool, dev) = single(2);
        let slot = pool.take(&dev, 1).expect("slot");
        let seq = dev.submit(&[slot]);
        pool.written(&[slot], seq);
        assert!(pool.share(slot, seq), "held and written by seq");
        assert!(!pool.share(slot, seq + 1), "another writer");
        pool.release(&dev, slot);
        assert!(pool.share(slot, seq), "still held once");
        pool.release(&dev, slot);
        pool.release(&dev, slot);
        assert!(!pool.share(slot, seq), "released by every holder");
        dev.complete_all();
        // Both slots free again: the other was never taken, this one is
        // recycled.
        assert_eq!(pool.take(&dev, 1).expect("slot"), 1);
        assert_eq!(pool.take(&dev, 1).expect("slot"), 0);
    }

    /// Releasing a slot more often than it is held is a bug (it would
    /// free it twice).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "released more often than held")]
    fn releasing_an_unheld_slot_is_a_bug() {
        let (pool, dev) = single(2);
        let slot = pool.take(&dev, 1).expect("slot");
        pool.release(&dev, slot);
        pool.release(&dev, slot);
    }

    /// The first read of a slot reads the readable slots after it in the
    /// same call; later reads of those find their values kept.
    #[test]
    fn a_read_takes_the_following_slots_along() {
        let (pool, dev) = single(8);
        let held: Vec<u32> = (0..4).map(|_| pool.take(&dev, 1).expect("slot")).collect();
        let first = dev.submit(&held[..3]);
        pool.written(&held[..3], first);
        let late = dev.submit(&held[3..]);
        pool.written(&held[3..], late);
        // Only the first submission has run: slot 3 is not read along.
        lock(&dev.device).completed = first;
        assert_eq!(pool.read(&dev, 1, first).expect("value"), stamp(1, first));
        assert_eq!(dev.reads(), [one(1..3)], "slot 1 and the next one");
        assert_eq!(pool.read(&dev, 2, first).expect("value"), stamp(2, first));
        assert_eq!(pool.read(&dev, 0, first).expect("value"), stamp(0, first));
        assert_eq!(dev.reads().len(), 2, "slot 2 was kept, slot 0 read alone");
        // A read of running work waits for the slot's writer, also for a
        // holder that shares the slot from a later submission (a span
        // whose start is the previous span's end).
        assert!(pool.share(3, late));
        assert_eq!(pool.read(&dev, 3, late + 1).expect("value"), stamp(3, late));
        assert_eq!(dev.waits(), [late]);
        assert_eq!(pool.read(&dev, 3, late).expect("value"), stamp(3, late));
        // A slot held but not written yet has nothing to read.
        let unwritten = pool.take(&dev, 1).expect("slot");
        let err = pool.read(&dev, unwritten, late).expect_err("unwritten");
        assert!(
            err.to_string().contains("before its submission wrote it"),
            "{err}"
        );
    }

    /// With reads of every readable slot, one read covers them all, in
    /// runs of near slots.
    #[test]
    fn a_read_takes_every_readable_slot_along() {
        let (pool, dev) = pairs(256);
        let a = pool.take(&dev, 2).expect("pair");
        let b = pool.take(&dev, 1).expect("pair");
        assert_eq!((a, b), (0, 2), "pairs lowest first");
        let seq = dev.submit(&[a, a + 1, b]);
        pool.written(&[a, a + 1, b], seq);
        dev.complete_all();
        assert_eq!(pool.read(&dev, b, seq).expect("value"), stamp(b, seq));
        assert_eq!(dev.reads(), [one(0..3)]);
        assert_eq!(
            pool.read(&dev, a + 1, seq).expect("value"),
            stamp(a + 1, seq)
        );
        assert_eq!(dev.reads().len(), 1, "read along");
    }

    /// Live timed events past the pool's size: once every slot is held,
    /// the values of those whose work completed move out of the slots
    /// (read in one call, reset in one), the slots are reused, and each
    /// event still reads its own value until it is released.
    #[test]
    fn live_events_past_the_pool_keep_their_values() {
        let (pool, dev) = single(4);
        let mut events: Vec<(u32, u64)> = (0..4).map(|_| event(&pool, &dev)).collect();
        dev.complete_all();
        events.push(event(&pool, &dev));
        assert_eq!(events[4].0, 0, "the lowest moved slot, reused");
        assert_eq!(dev.reads(), [one(0..4)], "the held values, read at once");
        assert_eq!(dev.resets(), one(0..4), "and reset at once");
        assert_eq!(pool.moved_len(), 4);
        for &(slot, seq) in &events {
            assert_eq!(pool.read(&dev, slot, seq).expect("value"), stamp(slot, seq));
        }
        for &(slot, seq) in &events {
            pool.release_written(&dev, slot, seq);
        }
        assert_eq!(pool.moved_len(), 0, "every release dropped its value");
    }

    /// Every slot held by timed events whose work is running: a take
    /// waits for the least writer, then moves that one out.
    #[test]
    fn every_slot_held_by_running_work_waits_for_the_oldest() {
        let (pool, dev) = single(4);
        let events: Vec<(u32, u64)> = (0..4).map(|_| event(&pool, &dev)).collect();
        let slot = pool.take(&dev, 1).expect("a slot once the oldest ran");
        assert_eq!(dev.waits(), [events[0].1], "waited for the oldest only");
        assert_eq!(slot, events[0].0);
        assert_eq!(pool.moved_len(), 1);
    }

    /// Every slot held by work not submitted yet, or by what does not give
    /// values back (a profiled span's slots): nothing can move, an error
    /// that says so.
    #[test]
    fn every_slot_held_unwritten_or_unmovable_is_an_error() {
        let (pool, dev) = single(4);
        let unwritten = pool.take(&dev, 1).expect("slot");
        let spans: Vec<u32> = (0..3).map(|_| pool.take(&dev, 1).expect("slot")).collect();
        let seq = dev.submit(&spans);
        pool.written(&spans, seq);
        dev.complete_all();
        let err = pool
            .take(&dev, 1)
            .expect_err("nothing can move")
            .to_string();
        assert!(err.contains("not submitted yet"), "{err}");
        assert!(err.contains("all 4"), "{err}");
        pool.release(&dev, unwritten);
        assert_eq!(pool.take(&dev, 1).expect("the released slot"), unwritten);
    }

    /// A pair moves out only when every held slot of it may: a bracket's
    /// two events move together, a pair with an unwritten slot stays.
    #[test]
    fn pairs_move_out_whole() {
        let (pool, dev) = pairs(6);
        let span = pool.take(&dev, 2).expect("pair");
        let (s0, s1) = (dev.submit(&[span]), dev.submit(&[span + 1]));
        pool.written_movable(span, s0);
        pool.written_movable(span + 1, s1);
        let (timed, seq) = event(&pool, &dev);
        let armed = pool.take(&dev, 2).expect("pair");
        dev.complete_all();
        assert_eq!(pool.take(&dev, 1).expect("a moved pair"), span);
        assert_eq!(dev.reads(), [one(0..3)], "the movable pairs' slots");
        assert_eq!(dev.resets(), one(0..4));
        assert_eq!(pool.moved_len(), 3);
        assert_eq!(
            pool.read(&dev, span + 1, s1).expect("value"),
            stamp(span + 1, s1)
        );
        assert_eq!(
            pool.read(&dev, timed, seq).expect("value"),
            stamp(timed, seq)
        );
        assert_eq!(pool.take(&dev, 1).expect("the other moved pair"), timed);
        pool.release(&dev, armed);
        pool.release(&dev, armed + 1);
        assert_eq!(pool.take(&dev, 2).expect("the released pair"), armed);
    }

    /// An event recorded again rewrites its slot in place; once its value
    /// has moved out, `rewrite` says to take another slot.
    #[test]
    fn rewriting_a_slot_forgets_its_value_unless_moved() {
        let (pool, dev) = pairs(2);
        let (slot, first) = event(&pool, &dev);
        dev.complete_all();
        assert_eq!(
            pool.read(&dev, slot, first).expect("value"),
            stamp(slot, first)
        );
        assert!(pool.rewrite(slot, first));
        assert_eq!(pool.value(slot, first), None, "forgotten");
        let second = dev.submit(&[slot]);
        pool.written_movable(slot, second);
        dev.complete_all();
        assert_eq!(
            pool.read(&dev, slot, second).expect("value"),
            stamp(slot, second)
        );
        // The one pair held by a completed event: its value moves out.
        let other = pool.take(&dev, 1).expect("the moved pair");
        assert!(!pool.rewrite(slot, second), "moved out");
        assert_eq!(
            pool.read(&dev, slot, second).expect("value"),
            stamp(slot, second)
        );
        pool.release_written(&dev, slot, second);
        assert_eq!(pool.moved_len(), 0);
        pool.release(&dev, other);
    }

    /// Threads recording timed events past the pool's size while keeping
    /// their last few alive: values move out under them all the time,
    /// every event reads its own, and once all are released nothing is
    /// left moved out and every slot is free.
    #[test]
    fn threads_recording_past_the_pool_keep_their_values() {
        for (pool, dev) in [single(8), pairs(16)] {
            std::thread::scope(|scope| {
                for _ in 0..4 {
                    scope.spawn(|| {
                        let mut live = std::collections::VecDeque::new();
                        for i in 0..300 {
                            live.push_back(event(&pool, &dev));
                            if i % 7 == 0 {
                                dev.complete_all();
                            }
                            if live.len() > 5
                                && let Some((slot, seq)) = live.pop_front()
                            {
                                let v = pool.read(&dev, slot, seq).expect("value");
                                assert_eq!(v, stamp(slot, seq));
                                pool.release_written(&dev, slot, seq);
                            }
                        }
                        for (slot, seq) in live {
                            assert_eq!(
                                pool.read(&dev, slot, seq).expect("value"),
                                stamp(slot, seq)
                            );
                            pool.release_written(&dev, slot, seq);
                        }
                    });
                }
            });
            assert_eq!(pool.moved_len(), 0, "every value released");
            dev.complete_all();
            let blocks = pool.len() / pool.block;
            for _ in 0..blocks {
                pool.take(&dev, 1).expect("every block free again");
            }
        }
    }
}
