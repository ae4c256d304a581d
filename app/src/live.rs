//! Live sessions: one or more programs streaming their profiles
//! ([`keel::profiler::live`]) into one timeline, for hours.
//!
//! - **One clock.** Each program's hello gives the Unix time of its
//!   traces' time 0; the session's time 0 is a minute before the first
//!   program's (or the viewer's start, if earlier), and every fragment
//!   moves by the difference, so programs started apart, in any order, or
//!   a program that restarted, line up.
//! - **Own groups.** Each source's devices and host threads are labelled
//!   with its program's name ([`keel_trace::Trace::label_source`]).
//! - **Connections come back.** A source's thread reconnects every
//!   [`RETRY`] until the user disconnects; a gap is drawn on the source's
//!   `connection` lane from the moment it was lost to the moment it came
//!   back.
//! - **Bounded memory.** The view keeps at most [`Retention::spans`]
//!   spans (and, when set, [`Retention::age_ns`] of time); the oldest
//!   quarter leaves at once ([`TraceView::evict_front`]) and is written to
//!   a segment file on a background thread, read back as one
//!   [`IndexedSet`] when the user scrolls before what is in memory.
//! - **Never unbounded queues.** Fragments wait for the UI in a queue of
//!   [`QUEUE`]; past it the source's thread drops them and counts them
//!   (the program itself never waits: its server drops for a slow viewer
//!   and says so).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel::profiler::live::{Chunk, Client, Program};
use keel_trace::indexed::{IndexedSet, IndexedTrace};
use keel_trace::view::TraceView;
use keel_trace::{Lane, LaneKind, Span, SpanKind, Text, Trace};

/// The extension of a saved live session: a directory of segment files
/// (`segment-00000.keelidx`, ...), read back as one trace.
pub const SESSION_EXT: &str = "keelsession";

/// Fragments that may wait for the UI, over all sources.
pub const QUEUE: usize = 256;
/// How long before the first program's start (or the viewer's) a live
/// session's clock begins; see [`LiveSession::poll`].
const CLOCK_MARGIN_NS: i64 = 60_000_000_000;

/// How often a lost source tries to connect again.
pub const RETRY: Duration = Duration::from_millis(100);

/// How much of a live session stays in memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// The most spans in memory (what a frame and memory cost grow with).
    pub spans: usize,
    /// Only the newest this many ns in memory (`None`: no time limit).
    pub age_ns: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            spans: 2_000_000,
            age_ns: None,
        }
    }
}

/// What a source's thread reports.
#[derive(Debug)]
enum Event {
    Connected(Program),
    Chunk(Chunk),
    Lost(String),
}

/// One program streamed into the session, at one address.
#[derive(Debug)]
pub struct Source {
    /// The address it streams from.
    pub addr: String,
    /// Its lanes' label (the program's name, made unique in the session),
    /// fixed at its first connection so a restart continues its lanes.
    pub label: Option<String>,
    /// The program as its last hello said.
    pub program: Option<Program>,
    /// Whether it is connected now.
    pub connected: bool,
    /// When it was lost (session ns, wall clock) and why, until it is back.
    pub lost: Option<(u64, Instant, String)>,
    /// Fragments received.
    pub chunks: u64,
    /// Fragments its server dropped for this viewer (it read too slowly).
    pub server_dropped: u64,
    /// Times it came back after being lost.
    pub reconnects: u64,
    /// The last reconnect's delay: lost to streaming again.
    pub last_reconnect: Option<Duration>,
    /// The latest span end it sent, on the session clock.
    pub latest_ns: u64,
    stop: Arc<AtomicBool>,
}

/// A live session: its sources, clock, retention and what went to disk.
pub struct LiveSession {
    /// The programs streamed.
    pub sources: Vec<Source>,
    tx: SyncSender<(usize, Event)>,
    rx: Receiver<(usize, Event)>,
    /// Fragments the viewer dropped because the UI fell behind.
    viewer_dropped: Arc<AtomicU64>,
    /// The Unix time of the session's time 0.
    origin_unix_ns: Option<i64>,
    /// The Unix time the session started.
    started_unix_ns: i64,
    /// How much stays in memory.
    pub retention: Retention,
    /// Segments written so far, read as one trace.
    pub history: IndexedSet,
    /// Their files, in order.
    segments: Vec<PathBuf>,
    dir: Option<PathBuf>,
    /// The lock on `dir`'s [`OWNER_LOCK`], held while the session lives:
    /// a later session sweeps directories whose lock nobody holds.
    _owner: Option<std::fs::File>,
    spill: Option<mpsc::Sender<(usize, Trace)>>,
    spilled: Option<Receiver<Result<PathBuf, String>>>,
    next_segment: usize,
    /// Spans handed to the writer and not yet on disk.
    pub writing: u64,
    /// Spans evicted from memory so far.
    pub evicted: u64,
    /// The view of what is in memory while the timeline shows the history
    /// (the app's view is then a window of [`Self::history`]).
    pub parked: Option<Arc<TraceView>>,
    /// The next view of what is in memory, being made on another thread.
    compacting: Option<Receiver<Compacted>>,
    /// Fragments that arrived while it is made, appended to it when done.
    pending: Vec<Trace>,
    /// The session's earliest time (the view's start before any span
    /// left memory).
    pub start_ns: Option<u64>,
    /// Where the spans in memory begin, once some went to disk.
    pub memory_from: Option<u64>,
    /// The query last counted on disk and its matches.
    searched: Option<(String, u64)>,
}

impl std::fmt::Debug for LiveSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSession")
            .field("sources", &self.sources)
            .field("history", &self.history)
            .field("evicted", &self.evicted)
            .finish_non_exhaustive()
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        self.stop();
        // The segments are the session's scratch: they go with it (mapped
        // files stay readable until unmapped). The lock file is closed
        // first: some systems do not remove an open file.
        self._owner = None;
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The start of the name of a session's scratch directory in the temp dir.
const SCRATCH_PREFIX: &str = "keel-live-";

/// The file in a scratch directory whose lock the owning session holds.
const OWNER_LOCK: &str = "owner.lock";

/// How old a scratch directory must be before a sweep may remove it: a
/// session that has just made its directory may not have locked it yet.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Removes the scratch directories under `temp` that no session owns: a
/// viewer that crashed (or was killed) leaves its segments behind, and
/// the operating system releases its lock. Directories younger than
/// `min_age`, and any whose lock is held, stay. Gives how many went.
pub fn sweep_stale_sessions(temp: &Path, min_age: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(SCRATCH_PREFIX));
        if !ours || !path.is_dir() {
            continue;
        }
        let old_enough = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if !old_enough {
            continue;
        }
        // A directory without its lock file is not one this version made
        // or one still being made; either way it is not taken.
        let Ok(lock) = std::fs::File::open(path.join(OWNER_LOCK)) else {
            continue;
        };
        if lock.try_lock().is_ok() {
            drop(lock);
            if std::fs::remove_dir_all(&path).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// A view made without its oldest spans ([`LiveSession::compact`]).
struct Compacted {
    view: TraceView,
    evicted: usize,
    /// Where its spans begin.
    edge: u64,
}

/// The Unix time now, ns.
fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl LiveSession {
    /// A session with no source yet.
    pub fn new(retention: Retention) -> LiveSession {
        // What crashed sessions left in the temp dir goes, off the UI
        // thread (the temp dir may be large).
        let _ = std::thread::Builder::new()
            .name("keel-live-sweep".to_owned())
            .spawn(|| sweep_stale_sessions(&std::env::temp_dir(), STALE_AFTER));
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        LiveSession {
            sources: Vec::new(),
            tx,
            rx,
            viewer_dropped: Arc::new(AtomicU64::new(0)),
            origin_unix_ns: None,
            started_unix_ns: unix_now_ns(),
            retention,
            history: IndexedSet::new(),
            segments: Vec::new(),
            dir: None,
            _owner: None,
            spill: None,
            spilled: None,
            next_segment: 0,
            writing: 0,
            evicted: 0,
            parked: None,
            compacting: None,
            pending: Vec::new(),
            start_ns: None,
            memory_from: None,
            searched: None,
        }
    }

    /// Starts streaming from `addr` on a background thread (`wake` is
    /// called when something arrives). An address already streamed is
    /// restarted.
    pub fn add(
        &mut self,
        addr: &str,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> Result<(), String> {
        if let Some(i) = self.sources.iter().position(|s| s.addr == addr) {
            self.sources[i].stop.store(true, Ordering::Relaxed);
            let stop = self.spawn(i, addr, wake)?;
            self.sources[i].stop = stop;
            return Ok(());
        }
        let i = self.sources.len();
        let stop = self.spawn(i, addr, wake)?;
        self.sources.push(Source {
            addr: addr.to_owned(),
            label: None,
            program: None,
            connected: false,
            lost: None,
            chunks: 0,
            server_dropped: 0,
            reconnects: 0,
            last_reconnect: None,
            latest_ns: 0,
            stop,
        });
        Ok(())
    }

    fn spawn(
        &self,
        i: usize,
        addr: &str,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> Result<Arc<AtomicBool>, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, dropped, addr_owned) = (
            self.tx.clone(),
            Arc::clone(&self.viewer_dropped),
            addr.to_owned(),
        );
        let stop2 = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("keel-live-client".to_owned())
            .spawn(move || stream(i, &addr_owned, &tx, &dropped, &stop2, &wake))
            .map_err(|e| format!("could not start a thread: {e}"))?;
        Ok(stop)
    }

    /// Stops every source (their threads end within a read timeout).
    pub fn stop(&mut self) {
        for s in &self.sources {
            s.stop.store(true, Ordering::Relaxed);
        }
        for s in &mut self.sources {
            s.connected = false;
        }
    }

    /// Whether a source is streaming or trying to.
    pub fn running(&self) -> bool {
        self.sources.iter().any(|s| !s.stop.load(Ordering::Relaxed))
    }

    /// Fragments the viewer dropped because the UI fell behind.
    pub fn viewer_dropped(&self) -> u64 {
        self.viewer_dropped.load(Ordering::Relaxed)
    }

    /// The latest time every connected program that sent spans has
    /// reached (`None`: none has).
    pub fn edge_ns(&self) -> Option<u64> {
        self.sources
            .iter()
            .filter(|s| s.connected && s.latest_ns > 0)
            .map(|s| s.latest_ns)
            .min()
    }

    /// Session time now, ns.
    pub fn now_ns(&self) -> u64 {
        let origin = self.origin_unix_ns.unwrap_or_else(unix_now_ns);
        u64::try_from(unix_now_ns() - origin).unwrap_or(0)
    }

    /// Takes what the sources' threads reported: the fragments to append,
    /// on the session's clock and labelled by program (gaps of sources
    /// that came back included), and errors to show.
    pub fn poll(&mut self) -> (Vec<Trace>, Vec<String>) {
        let mut fragments = Vec::new();
        let mut errors = Vec::new();
        while let Ok((i, e)) = self.rx.try_recv() {
            match e {
                Event::Connected(p) => {
                    if let Some(gap) = self.connected(i, p) {
                        fragments.push(gap);
                    }
                }
                Event::Chunk(Chunk::Dropped(n)) => {
                    if let Some(s) = self.sources.get_mut(i) {
                        s.server_dropped = n;
                    }
                }
                Event::Chunk(Chunk::Fragment(mut f)) => {
                    let Some(s) = self.sources.get_mut(i) else {
                        continue;
                    };
                    s.chunks += 1;
                    let (Some(label), Some(p), Some(origin)) =
                        (&s.label, &s.program, self.origin_unix_ns)
                    else {
                        continue;
                    };
                    f.label_source(label, i as u16 + 1, p.origin_unix_ns - origin);
                    if let Some(end) = f.spans.iter().map(Span::end_ns).max() {
                        s.latest_ns = s.latest_ns.max(end);
                    }
                    fragments.push(*f);
                }
                Event::Lost(why) => {
                    let now = self.now_ns();
                    if let Some(s) = self.sources.get_mut(i) {
                        // A source never reached is an error; a lost one
                        // is retried, and its status says so.
                        if s.program.is_none() && s.lost.is_none() {
                            errors.push(format!("connecting to {}: {why}", s.addr));
                        }
                        s.connected = false;
                        if s.lost.is_none() {
                            s.lost = Some((now, Instant::now(), why));
                        }
                    }
                }
            }
        }
        (fragments, errors)
    }

    /// Source `i` connected to `p`: fixes its label and the session clock
    /// on first contact; returns the gap to draw when it came back.
    fn connected(&mut self, i: usize, p: Program) -> Option<Trace> {
        // The session's time 0 lies a minute before the first program's start
        // or the viewer's, whichever is earlier: a program that started
        // before the one that connected first still lands after it (the
        // ruler counts from the first span, so the margin never shows).
        let started = self.started_unix_ns;
        let origin = *self
            .origin_unix_ns
            .get_or_insert_with(|| p.origin_unix_ns.min(started) - CLOCK_MARGIN_NS);
        let taken: Vec<String> = self
            .sources
            .iter()
            .filter_map(|s| s.label.clone())
            .collect();
        let now = u64::try_from(unix_now_ns() - origin).unwrap_or(0);
        let s = self.sources.get_mut(i)?;
        if s.label.is_none() {
            let mut label = p.name.clone();
            if taken.contains(&label) {
                label = format!("{} #{}", p.name, i + 1);
            }
            s.label = Some(label);
        }
        s.program = Some(p);
        s.connected = true;
        let (since, wall, why) = s.lost.take()?;
        s.reconnects += 1;
        s.last_reconnect = Some(wall.elapsed());
        let label = s.label.clone()?;
        Some(gap(&label, i as u16 + 1, since, now.max(since), &why))
    }

    /// Spans of `view` to evict now to keep within the retention: past
    /// it, down to three quarters of it (so this happens once per quarter
    /// of it); past the age limit, in batches of an eighth of the view.
    fn to_evict(&self, view: &TraceView) -> usize {
        let n = view.trace.spans.len();
        let mut k = if n > self.retention.spans {
            n - self.retention.spans * 3 / 4
        } else {
            0
        };
        if let Some(age) = self.retention.age_ns {
            // Spans arrive about in end order: the leading ones that ended
            // before the horizon.
            let horizon = view.bounds.1.saturating_sub(age);
            let old = view
                .trace
                .spans
                .iter()
                .take_while(|s| s.end_ns() < horizon)
                .count();
            if old > (n / 8).max(1_000) {
                k = k.max(old);
            }
        }
        k
    }

    /// Starts making the next view of what stays in memory when `view`
    /// holds more than the retention: on another thread, which copies it
    /// without its oldest spans (so the one drawn meanwhile is never
    /// waited for), makes its levels, and hands what left to the segment
    /// writer. Fragments arriving meanwhile wait in [`Self::pending`].
    fn compact(&mut self, view: &Arc<TraceView>) -> Result<(), String> {
        if self.compacting.is_some() {
            return Ok(());
        }
        let k = self.to_evict(view);
        if k == 0 {
            return Ok(());
        }
        let writer = self.writer()?;
        let n = self.next_segment;
        self.next_segment += 1;
        self.writing += k as u64;
        let (tx, rx) = mpsc::channel();
        let shared = Arc::clone(view);
        let room = self.retention.spans;
        std::thread::Builder::new()
            .name("keel-live-compact".to_owned())
            .spawn(move || {
                let mut v = TraceView::clone(&shared);
                drop(shared);
                let out = v.evict_front(k);
                let edge = v.bounds.0;
                v.make_levels();
                // Room to grow to the next compaction without copying a
                // row within a frame.
                v.reserve(room);
                // A stopped writer is reported when the session asks for
                // its segments.
                let _ = writer.send((n, out));
                let _ = tx.send(Compacted {
                    view: v,
                    evicted: k,
                    edge,
                });
            })
            .map_err(|e| format!("could not start a thread: {e}"))?;
        self.compacting = Some(rx);
        Ok(())
    }

    /// The next view, when its thread made it.
    fn compacted(&mut self, wait: bool) -> Option<Compacted> {
        let rx = self.compacting.as_ref()?;
        let done = if wait {
            rx.recv().ok()
        } else {
            match rx.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => return None,
                Err(mpsc::TryRecvError::Disconnected) => None,
            }
        };
        self.compacting = None;
        let c = done?;
        self.evicted += c.evicted as u64;
        self.memory_from = Some(c.edge);
        Some(c)
    }

    /// The segment writer's queue (started on first use).
    fn writer(&mut self) -> Result<mpsc::Sender<(usize, Trace)>, String> {
        if let Some(tx) = &self.spill {
            return Ok(tx.clone());
        }
        let dir = std::env::temp_dir().join(format!(
            "{SCRATCH_PREFIX}{}-{}",
            std::process::id(),
            unix_now_ns()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("could not make {}: {e}", dir.display()))?;
        let lock = dir.join(OWNER_LOCK);
        let owner = std::fs::File::create(&lock)
            .map_err(|e| format!("could not make {}: {e}", lock.display()))?;
        owner
            .try_lock()
            .map_err(|e| format!("could not lock {}: {e}", lock.display()))?;
        self._owner = Some(owner);
        let (tx, rx) = mpsc::channel::<(usize, Trace)>();
        let (done_tx, done_rx) = mpsc::channel();
        let d = dir.clone();
        std::thread::Builder::new()
            .name("keel-live-writer".to_owned())
            .spawn(move || {
                // Segments arrive in order: one compaction runs at a time.
                for (n, t) in rx {
                    let path = d.join(format!("segment-{n:05}.keelidx"));
                    let r = keel_trace::indexed::write_trace(&t, &path, None)
                        .map(|()| path)
                        .map_err(|e| e.to_string());
                    drop(t);
                    if done_tx.send(r).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("could not start a thread: {e}"))?;
        self.dir = Some(dir);
        self.spill = Some(tx.clone());
        self.spilled = Some(done_rx);
        Ok(tx)
    }

    /// Takes the segments written since the last call into
    /// [`Self::history`]; returns whether there were any.
    pub fn take_segments(&mut self) -> Result<bool, String> {
        let done: Vec<_> = match &self.spilled {
            Some(rx) => rx.try_iter().collect(),
            None => return Ok(false),
        };
        let any = !done.is_empty();
        for r in done {
            self.add_segment(r?)?;
        }
        Ok(any)
    }

    /// Waits until every segment handed to the writer is in
    /// [`Self::history`] (tests, the soak benchmark's end).
    pub fn flush(&mut self) -> Result<(), String> {
        while self.writing > 0 {
            let Some(rx) = &self.spilled else {
                return Ok(());
            };
            let r = rx
                .recv()
                .map_err(|_| "the segment writer stopped".to_owned())?;
            self.add_segment(r?)?;
        }
        Ok(())
    }

    /// Adds the segment the writer wrote at `path` to the history.
    fn add_segment(&mut self, path: PathBuf) -> Result<(), String> {
        let t = IndexedTrace::open(&path).map_err(|e| e.to_string())?;
        self.writing = self.writing.saturating_sub(t.span_count());
        self.history.push(t);
        self.segments.push(path);
        Ok(())
    }

    /// One line on what the session holds and lost: for the timeline's
    /// status bar.
    pub fn status(&self, resident: usize, recorder_dropped: u64) -> String {
        let connected = self.sources.iter().filter(|s| s.connected).count();
        let server: u64 = self.sources.iter().map(|s| s.server_dropped).sum();
        let mut line = format!(
            "live: {connected} of {} connected | in memory {resident} spans (keeps {}) | on disk {} spans in {} segments",
            self.sources.len(),
            self.retention.spans,
            self.history.span_count(),
            self.history.parts().len(),
        );
        if self.writing > 0 {
            line.push_str(&format!(" (+{} being written)", self.writing));
        }
        line.push_str(&format!(
            " | dropped: {recorder_dropped} records by the recorders, {server} chunks by the servers, {} by this viewer",
            self.viewer_dropped()
        ));
        line
    }
}

/// Saves a live session in directory `dir`: its segments on disk, then
/// `resident` (what is in memory) as the last one. Returns the spans
/// saved.
fn save_session(segments: &[PathBuf], resident: &TraceView, dir: &Path) -> Result<u64, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("could not make {}: {e}", dir.display()))?;
    let name = |i: usize| dir.join(format!("segment-{i:05}.keelidx"));
    for (i, from) in segments.iter().enumerate() {
        // A hard link costs nothing; across file systems, a copy.
        let to = name(i);
        let _ = std::fs::remove_file(&to);
        if std::fs::hard_link(from, &to).is_err() {
            std::fs::copy(from, &to).map_err(|e| {
                format!("could not copy {} to {}: {e}", from.display(), to.display())
            })?;
        }
    }
    keel_trace::indexed::write_trace(&resident.trace, &name(segments.len()), None)
        .map_err(|e| e.to_string())?;
    let set = open_session(dir)?;
    Ok(set.span_count())
}

/// Reads a saved live session (see [`SESSION_EXT`]): its segment files
/// in order, as one trace.
pub fn open_session(dir: &Path) -> Result<IndexedSet, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("could not read {}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("segment-") && n.ends_with(".keelidx"))
        })
        .collect();
    if paths.is_empty() {
        return Err(format!(
            "{}: expected a saved live session (segment-*.keelidx files), found none",
            dir.display()
        ));
    }
    paths.sort();
    let mut set = IndexedSet::new();
    for p in &paths {
        set.push(IndexedTrace::open(p).map_err(|e| e.to_string())?);
    }
    Ok(set)
}

/// A source's gap: a span on its `connection` lane.
fn gap(label: &str, key: u16, from: u64, to: u64, why: &str) -> Trace {
    Trace {
        version: keel_trace::TRACE_VERSION,
        lanes: vec![Lane {
            kind: LaneKind::Host {
                thread: (u64::from(key) << 48) | 0xFFFF_FFFF_FFFF,
            },
            name: "connection".to_owned(),
            group: label.to_owned(),
        }],
        spans: vec![Span {
            lane: 0,
            name: Text::from("no connection"),
            kind: SpanKind::Sync,
            start_ns: from,
            dur_ns: to - from,
            op: 0,
            args: vec![(Text::from("lost because"), Text::from(why))],
        }],
        ..Trace::default()
    }
}

/// A source's thread: connects, forwards chunks, reconnects when lost,
/// until `stop`.
fn stream(
    i: usize,
    addr: &str,
    tx: &SyncSender<(usize, Event)>,
    dropped: &AtomicU64,
    stop: &AtomicBool,
    wake: &dyn Fn(),
) {
    let mut said_lost = false;
    while !stop.load(Ordering::Relaxed) {
        let mut client = match Client::connect(addr) {
            Ok(c) => c,
            Err(e) => {
                // Said once per loss; then quietly retried.
                if !said_lost {
                    said_lost = true;
                    if tx.send((i, Event::Lost(e.to_string()))).is_err() {
                        return;
                    }
                    wake();
                }
                std::thread::sleep(RETRY);
                continue;
            }
        };
        said_lost = false;
        let Some(program) = client.program().cloned() else {
            continue;
        };
        if tx.send((i, Event::Connected(program))).is_err() {
            return;
        }
        wake();
        while !stop.load(Ordering::Relaxed) {
            match client.next_chunk() {
                Ok(c @ Chunk::Fragment(_)) => match tx.try_send((i, Event::Chunk(c))) {
                    Ok(()) => wake(),
                    Err(TrySendError::Full(_)) => {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                },
                Ok(c @ Chunk::Dropped(_)) => {
                    // Small and idempotent: never dropped.
                    if tx.send((i, Event::Chunk(c))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    said_lost = true;
                    if tx.send((i, Event::Lost(e.to_string()))).is_err() {
                        return;
                    }
                    wake();
                    break;
                }
            }
        }
    }
}

impl crate::App {
    /// Streams the live server at `addr` into the live session (started
    /// now when there is none): beside the programs already streamed, on
    /// one clock. Errors go to the UI.
    pub fn connect(&mut self, addr: String, ctx: Option<egui::Context>) {
        if addr.is_empty() {
            self.fail("connect: enter an address such as 127.0.0.1:7878".to_owned());
            return;
        }
        let retention = self.retention;
        let live = self.live.get_or_insert_with(|| LiveSession::new(retention));
        let wake = move || {
            if let Some(c) = &ctx {
                c.request_repaint();
            }
        };
        match live.add(&addr, wake) {
            Ok(()) => self.sources.live = Some(format!("connecting to {addr}")),
            Err(e) => self.fail(e),
        }
    }

    /// Stops streaming; what was received stays shown, in memory and on
    /// disk, until another trace is.
    pub fn disconnect(&mut self) {
        if let Some(l) = &mut self.live {
            l.stop();
        }
        self.sources.live = None;
    }

    /// Whether a live session is streaming (or trying to).
    pub fn is_live(&self) -> bool {
        self.live.as_ref().is_some_and(LiveSession::running)
    }

    /// Takes in what the live session's sources sent: appends it to the
    /// view of what is in memory, keeps that within the retention (the
    /// rest goes to disk), keeps the statistics, search and status
    /// current, and switches between what is in memory and the history
    /// on disk as the user scrolls.
    pub(crate) fn poll_live(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        if live.retention.spans != self.retention.spans {
            live.retention = self.retention;
        }
        let (fragments, mut errors) = live.poll();
        match live.take_segments() {
            Ok(true) => {
                if let (true, Some(s)) = (live.parked.is_some(), &mut self.indexed) {
                    s.trace = Arc::new(crate::indexed::Indexed::Set(live.history.clone()));
                    self.timeline.file_spans = Some(live.history.span_count());
                }
                live.searched = None;
            }
            Ok(false) => {}
            Err(e) => errors.push(e),
        }
        self.append_live(&mut live, fragments, false, &mut errors);
        self.follow_history(&mut live);
        self.live_search(&mut live);
        let resident = live.parked.as_ref().or(self.view.as_ref());
        if let Some(v) = resident.filter(|v| v.source.starts_with("live ")) {
            let v: &TraceView = v;
            self.timeline.live_status = Some(live.status(v.trace.spans.len(), v.trace.dropped));
        }
        self.sources.live = live.running().then(|| source_lines(&live));
        self.timeline.live_edge = live.edge_ns();
        self.live = Some(live);
        for e in errors {
            self.fail(e);
        }
    }

    /// Appends `fragments` to the view of what is in memory (or keeps them
    /// for the next one, while that is made), swaps in the next view when
    /// made (`wait`: waits for it), and starts making one when the view
    /// holds more than the retention.
    fn append_live(
        &mut self,
        live: &mut LiveSession,
        fragments: Vec<Trace>,
        wait: bool,
        errors: &mut Vec<String>,
    ) {
        let browsing = live.parked.is_some();
        let is_live_view = |v: &Arc<TraceView>| v.source.starts_with("live ");
        if !fragments.is_empty() && !browsing && !self.view.as_ref().is_some_and(is_live_view) {
            // The first fragment: the live view replaces what was shown.
            let names: Vec<&str> = live.sources.iter().map(|s| s.addr.as_str()).collect();
            self.forget_computed();
            self.view = Some(Arc::new(TraceView::new(
                Trace::default(),
                format!("live {}", names.join(", ")),
            )));
            self.timeline.search.reset();
            self.tab = crate::Tab::Timeline;
            self.timeline.fit_pending = true;
            self.timeline.follow_live = true;
        }
        let mut parked = live.parked.take();
        let slot = if browsing {
            &mut parked
        } else {
            &mut self.view
        };
        let mut evicted = 0;
        if let Some(done) = live.compacted(wait) {
            let mut v = done.view;
            for f in live.pending.drain(..) {
                if let Err(e) = v.append(f) {
                    errors.push(format!("live fragment rejected: {e}"));
                }
            }
            if let Some(old) = slot.replace(Arc::new(v)) {
                // Freeing millions of spans takes longer than a frame.
                std::thread::spawn(move || drop(old));
            }
            evicted = done.evicted;
        }
        let before = slot.as_ref().map_or(0, |v| v.trace.spans.len());
        if live.compacting.is_some() {
            live.pending.extend(fragments);
        } else if let Some(view) = slot.as_mut().and_then(Arc::get_mut) {
            for f in fragments {
                if let Err(e) = view.append(f) {
                    errors.push(format!("live fragment rejected: {e}"));
                }
            }
            // An empty view's bounds are a default, not a time of the
            // session: a first fragment without spans (a program's lanes)
            // must not set the start to 0.
            if view.holds_times() {
                live.start_ns = Some(
                    live.start_ns
                        .map_or(view.bounds.0, |s| s.min(view.bounds.0)),
                );
            }
        }
        if let Some(view) = slot.as_mut().and_then(Arc::get_mut)
            && let Some(s) = live.start_ns
        {
            // The ruler counts from the session's start, and Fit shows the
            // whole session, what is on disk included.
            view.bounds.0 = view.bounds.0.min(s);
        }
        if let Some(view) = slot.as_ref()
            && let Err(e) = live.compact(view)
        {
            errors.push(e);
        }
        live.parked = parked;
        if browsing {
            return;
        }
        if evicted > 0 {
            let k = evicted as u32;
            let kept = self.selected.and_then(|s| s.checked_sub(k));
            self.select(kept);
            self.timeline.search.reset();
            self.area = None;
        } else if let Some(view) = &self.view
            && view.trace.spans.len() > before
        {
            self.timeline.search.extend(view, before);
        }
        if self
            .view
            .as_ref()
            .is_some_and(|v| v.trace.spans.len() != before)
            || evicted > 0
        {
            self.live_analysis();
        }
    }

    /// Saves the whole live session (what is on disk and what is in
    /// memory) in directory `path` (see [`SESSION_EXT`]). Errors go to
    /// the UI.
    pub fn save_session(&mut self, path: &Path) {
        if let Err(e) = self.settle_live() {
            return self.fail(e);
        }
        let Some(live) = &self.live else {
            return self.fail(format!(
                "nothing to save as a .{SESSION_EXT}: no live session (Save to a trace file instead)"
            ));
        };
        let Some(resident) = live.parked.as_ref().or(self.view.as_ref()) else {
            return self.fail("nothing to save: no spans received yet".to_owned());
        };
        match save_session(&live.segments, resident, path) {
            Ok(n) => self.sources.say(format!(
                "saved the live session ({n} spans) in {}",
                path.display()
            )),
            Err(e) => self.fail(format!("could not save {}: {e}", path.display())),
        }
    }

    /// Opens a saved live session (a directory, see [`SESSION_EXT`]) a
    /// window at a time. Errors go to the UI.
    pub fn open_session(&mut self, dir: &Path) {
        match open_session(dir) {
            Ok(set) => self.show_indexed(
                crate::indexed::Indexed::Set(set),
                dir.display().to_string(),
                ", a saved live session",
            ),
            Err(e) => self.fail(format!("could not open {}: {e}", dir.display())),
        }
    }

    /// Waits for the work a live session has under way: the next view of
    /// what is in memory, and the segments being written (tests, the soak
    /// benchmark's end).
    pub fn settle_live(&mut self) -> Result<(), String> {
        let Some(mut live) = self.live.take() else {
            return Ok(());
        };
        let mut errors = Vec::new();
        self.append_live(&mut live, Vec::new(), true, &mut errors);
        // What arrived meanwhile may have made the view too big again.
        self.append_live(&mut live, Vec::new(), true, &mut errors);
        let flushed = live.flush();
        self.live = Some(live);
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => flushed,
        }
    }

    /// Makes the statistics or analysis of the tab shown again over the
    /// spans in memory, at most every ten times what making them cost
    /// (and at most once a second), so a big window never eats the
    /// frames; a tab not shown makes them when shown.
    fn live_analysis(&mut self) {
        let due = self
            .live_stats
            .is_none_or(|(at, cost)| at.elapsed() >= (cost * 10).max(Duration::from_secs(1)));
        if !due {
            return;
        }
        let Some(view) = &self.view else {
            return;
        };
        let t = Instant::now();
        match self.tab {
            crate::Tab::Stats => self.stats = Some(crate::stats::Stats::new(view)),
            crate::Tab::Analysis => {
                self.analysis = Some(crate::analysis::Analysis::new(view));
            }
            _ => {
                self.stats = None;
                self.analysis = None;
                return;
            }
        }
        self.live_stats = Some((Instant::now(), t.elapsed()));
    }

    /// Shows the history on disk when the timeline is scrolled wholly
    /// before what is in memory, and what is in memory again when it
    /// comes back (or follows live).
    fn follow_history(&mut self, live: &mut LiveSession) {
        self.timeline.memory_from = live
            .memory_from
            .filter(|_| live.history.span_count() > 0 || live.writing > 0);
        let Some(edge) = self.timeline.memory_from else {
            return;
        };
        let (start, width) = (self.timeline.start_ns, self.timeline.width_ns);
        if live.parked.is_some() {
            if self.timeline.follow_live || start + width > edge as f64 {
                self.leave_history(live);
            }
            return;
        }
        let before = start + width < edge as f64;
        if !before || self.timeline.follow_live || live.history.span_count() == 0 {
            return;
        }
        let Some(resident) = self.view.take() else {
            return;
        };
        let end = resident.bounds.1;
        let mut s =
            crate::indexed::IndexedSession::new(crate::indexed::Indexed::Set(live.history.clone()));
        let px = self.timeline.layout.area.width();
        let px = if px.is_finite() && px > 0.0 {
            px
        } else {
            1_200.0
        };
        match s.read_now(start, width, px) {
            Ok(w) => {
                let mut v = s.show(w);
                v.bounds = (v.bounds.0.min(resident.bounds.0), v.bounds.1.max(end));
                self.view = Some(Arc::new(v));
                live.parked = Some(resident);
                self.select(None);
                self.timeline.file_spans = Some(live.history.span_count());
                self.timeline.search.reset();
                self.timeline.search.whole = Some(Default::default());
                self.indexed = Some(s);
            }
            Err(e) => {
                self.view = Some(resident);
                self.fail(format!("could not read the session's history: {e}"));
            }
        }
    }

    fn leave_history(&mut self, live: &mut LiveSession) {
        let Some(resident) = live.parked.take() else {
            return;
        };
        self.indexed = None;
        if let Some(old) = self.view.replace(resident) {
            std::thread::spawn(move || drop(old));
        }
        self.select(None);
        self.timeline.file_spans = None;
        self.timeline.search.reset();
        self.timeline.search.whole = None;
    }

    /// Counts the search's matches on disk when the query or the history
    /// changed.
    fn live_search(&mut self, live: &mut LiveSession) {
        let q = self.timeline.search.query.trim();
        if q.is_empty() || live.parked.is_some() {
            self.timeline.search.on_disk = None;
            return;
        }
        if live.searched.as_ref().is_some_and(|(s, _)| s == q) {
            return;
        }
        let n = live.history.search(q).map_or(0, |(_, n)| n);
        live.searched = Some((q.to_owned(), n));
        self.timeline.search.on_disk = Some(n);
    }
}

/// The sources panel's lines: each program and its connection.
fn source_lines(live: &LiveSession) -> String {
    let mut out = Vec::new();
    for s in &live.sources {
        let who = s.label.clone().unwrap_or_else(|| s.addr.clone());
        let state = match (&s.lost, s.connected) {
            (_, true) => format!("connected, {} chunks", s.chunks),
            (Some((_, wall, why)), false) => format!(
                "reconnecting for {:.1} s ({why})",
                wall.elapsed().as_secs_f64()
            ),
            (None, false) => "connecting".to_owned(),
        };
        let pid = s
            .program
            .as_ref()
            .map_or_else(String::new, |p| format!(" pid {}", p.pid));
        out.push(format!("{who}{pid} at {}: {state}", s.addr));
    }
    out.join("\n")
}
