//! A trace larger than memory: an indexed file
//! ([`keel_trace::indexed`]) shown one window at a time.
//!
//! The timeline draws a small [`TraceView`](crate::view::TraceView) of
//! the window in view, three screens wide, read at the resolution of the
//! screen's pixels; when the user pans out of it or zooms to another
//! level, the next window is read on a background thread while the last
//! one stays on screen, so a frame never waits for the file. Search counts
//! and steps through the whole file's name table; the selection analysis
//! reads its window at full resolution.

use std::sync::Arc;
use std::sync::mpsc;

use keel_trace::indexed::{
    IndexedSet, IndexedTrace, Matches, NameTotal, Window, WindowView, level_for,
};

/// What an [`IndexedSession`] reads: one indexed file, or the segments a
/// live session wrote to disk.
pub enum Indexed {
    /// An indexed file.
    File(Box<IndexedTrace>),
    /// A live session's segments.
    Set(IndexedSet),
}

/// The matches of a search over an [`Indexed`].
#[derive(Debug, Clone, Default)]
pub struct Found {
    parts: Vec<Matches>,
    /// Spans matching.
    pub total: u64,
}

impl std::fmt::Debug for Indexed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Indexed::File(t) => write!(f, "Indexed::File({} spans)", t.span_count()),
            Indexed::Set(s) => write!(f, "Indexed::Set({s:?})"),
        }
    }
}

impl Indexed {
    /// Reads a window.
    pub fn window(&self, w: &Window) -> keel_trace::Result<WindowView> {
        match self {
            Indexed::File(t) => t.window(w),
            Indexed::Set(s) => s.window(w),
        }
    }

    /// Earliest start and latest end.
    pub fn bounds(&self) -> (u64, u64) {
        match self {
            Indexed::File(t) => t.bounds(),
            Indexed::Set(s) => s.bounds().unwrap_or((0, 1)),
        }
    }

    /// Spans held.
    pub fn span_count(&self) -> u64 {
        match self {
            Indexed::File(t) => t.span_count(),
            Indexed::Set(s) => s.span_count(),
        }
    }

    /// Lanes of the trace.
    pub fn lane_count(&self) -> usize {
        match self {
            Indexed::File(t) => t.tables().lanes.len(),
            Indexed::Set(s) => s.parts().last().map_or(0, |p| p.tables().lanes.len()),
        }
    }

    /// Span `id` (a record of the file, or of the set).
    pub fn span(&self, id: u32) -> keel_trace::Result<keel_trace::Span> {
        match self {
            Indexed::File(t) => t.span(id),
            Indexed::Set(s) => s.span(u64::from(id)),
        }
    }

    /// Every name's count and total time.
    pub fn name_totals(&self) -> keel_trace::Result<Vec<NameTotal>> {
        match self {
            Indexed::File(t) => t.name_totals(),
            Indexed::Set(s) => s.name_totals(),
        }
    }

    /// The spans whose name contains `query`.
    pub fn search(&self, query: &str) -> keel_trace::Result<Found> {
        match self {
            Indexed::File(t) => {
                let m = t.search(query)?;
                Ok(Found {
                    total: m.total,
                    parts: vec![m],
                })
            }
            Indexed::Set(s) => {
                let (parts, total) = s.search(query)?;
                Ok(Found { parts, total })
            }
        }
    }

    /// The match after (or before) `from`, or the first from `at_ns`.
    pub fn step(
        &self,
        m: &Found,
        from: Option<u32>,
        at_ns: u64,
        forward: bool,
    ) -> keel_trace::Result<Option<u32>> {
        match self {
            Indexed::File(t) => match m.parts.first() {
                Some(p) => t.step(p, from, at_ns, forward),
                None => Ok(None),
            },
            Indexed::Set(s) => Ok(s
                .step(&m.parts, from.map(u64::from), at_ns, forward)?
                .and_then(|id| u32::try_from(id).ok())),
        }
    }
}

/// The most spans one window may hold: a window of the timeline is far
/// below it at any zoom (a few items per pixel and row); an area selection
/// over more asks for a shorter one.
pub const MAX_WINDOW_SPANS: usize = 5_000_000;

/// What is shown of an indexed file, and the window being read.
pub struct IndexedSession {
    /// The file (or a live session's segments).
    pub trace: Arc<Indexed>,
    /// The window shown: its range, level and the file's record of each
    /// of its spans.
    pub shown: Option<Shown>,
    job: Option<(Want, mpsc::Receiver<Result<WindowView, String>>)>,
    /// The query [`Self::matches`] holds the matches of.
    pub searched: String,
    /// Matches of the search over the whole file.
    pub matches: Found,
    /// The match moved to last (a record).
    pub current: Option<u32>,
    /// A record to select once a window holds it (a search match).
    pub reveal: Option<u32>,
    /// Every span name with its count and total time (for the Analysis
    /// tab), read when first shown.
    pub names: Option<Result<Vec<NameTotal>, String>>,
}

impl std::fmt::Debug for IndexedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedSession")
            .field("spans", &self.trace.span_count())
            .field("shown", &self.shown.as_ref().map(|s| (s.t0, s.t1, s.level)))
            .finish_non_exhaustive()
    }
}

/// The window on screen.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Its start, ns.
    pub t0: u64,
    /// Its end, ns.
    pub t1: u64,
    /// The level it was read at.
    pub level: u32,
    /// For every span of the shown view, its record (`None`: a run).
    pub records: Vec<Option<u32>>,
}

/// A window wanted: range and level.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Want {
    t0: u64,
    t1: u64,
    level: u32,
    ns_per_px: f64,
}

impl IndexedSession {
    /// A session over `trace`, nothing read yet.
    pub fn new(trace: Indexed) -> IndexedSession {
        IndexedSession {
            trace: Arc::new(trace),
            shown: None,
            job: None,
            searched: String::new(),
            matches: Found::default(),
            current: None,
            reveal: None,
            names: None,
        }
    }

    /// The window to read for a screen showing `start..start + width` ns
    /// over `px` pixels: three screens wide, at the screen's resolution.
    fn want(&self, start: f64, width: f64, px: f32) -> Want {
        let ns_per_px = width / f64::from(px.max(100.0));
        let t0 = (start - width).max(0.0) as u64;
        let t1 = (start + 2.0 * width).max(0.0) as u64;
        Want {
            t0,
            t1,
            level: level_for(ns_per_px),
            ns_per_px,
        }
    }

    /// Whether the shown window covers the screen at its level.
    fn covers(&self, start: f64, width: f64, level: u32) -> bool {
        self.shown.as_ref().is_some_and(|s| {
            // One level finer draws the same picture with more items.
            (s.level == level || s.level + 1 == level)
                && s.t0 as f64 <= start.max(0.0)
                && (start + width) <= s.t1 as f64
        })
    }

    /// Reads the window for the screen now, on this thread (the first
    /// frame, headless runs, tests).
    pub fn read_now(&mut self, start: f64, width: f64, px: f32) -> Result<WindowView, String> {
        let w = self.want(start, width, px);
        self.job = None;
        self.trace.window(&window(w)).map_err(|e| e.to_string())
    }

    /// Starts reading the window for the screen when the shown one does
    /// not cover it (and no read of a covering one is under way); `wake`
    /// is called when it is read.
    pub fn request(&mut self, start: f64, width: f64, px: f32, wake: impl Fn() + Send + 'static) {
        let w = self.want(start, width, px);
        if self.covers(start, width, w.level) {
            self.job = None;
            return;
        }
        if let Some((j, _)) = &self.job
            && j.level == w.level
            && j.t0 as f64 <= start.max(0.0)
            && start + width <= j.t1 as f64
        {
            return;
        }
        let (tx, rx) = mpsc::channel();
        let trace = Arc::clone(&self.trace);
        std::thread::spawn(move || {
            let r = trace.window(&window(w)).map_err(|e| e.to_string());
            // The app may have moved on and dropped the receiver.
            let _ = tx.send(r);
            wake();
        });
        self.job = Some((w, rx));
    }

    /// A window read in the background, if one is ready.
    pub fn take(&mut self) -> Option<Result<WindowView, String>> {
        let r = self.job.as_ref()?.1.try_recv().ok()?;
        self.job = None;
        Some(r)
    }

    /// Waits for the window being read, if any (tests, screenshots).
    pub fn wait(&mut self) -> Option<Result<WindowView, String>> {
        let (_, rx) = self.job.take()?;
        rx.recv().ok()
    }

    /// Whether a window is being read.
    pub fn busy(&self) -> bool {
        self.job.is_some()
    }

    /// Keeps `w` as the shown window, its view in `slot`. The view it
    /// replaces is dropped on another thread: freeing tens of thousands
    /// of spans takes longer than a frame.
    pub fn replace(&mut self, slot: &mut Option<Arc<crate::view::TraceView>>, w: WindowView) {
        let old = slot.replace(Arc::new(self.show(w)));
        if let Some(old) = old {
            std::thread::spawn(move || drop(old));
        }
    }

    /// Keeps `w` as the shown window; returns its view.
    pub fn show(&mut self, w: WindowView) -> crate::view::TraceView {
        self.shown = Some(Shown {
            t0: w.t0,
            t1: w.t1,
            level: w.level,
            records: w.records,
        });
        w.view
    }

    /// The record of span `local` of the shown view.
    pub fn record_of(&self, local: u32) -> Option<u32> {
        *self.shown.as_ref()?.records.get(local as usize)?
    }

    /// The span of the shown view that is record `record`.
    pub fn local_of(&self, record: u32) -> Option<u32> {
        let s = self.shown.as_ref()?;
        s.records
            .iter()
            .position(|&r| r == Some(record))
            .map(|i| i as u32)
    }

    /// Searches the whole file for `query` when it changed.
    pub fn search(&mut self, query: &str) -> Result<(), String> {
        if query == self.searched {
            return Ok(());
        }
        self.searched = query.to_owned();
        self.current = None;
        self.matches = self.trace.search(query).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The next (or previous) match from the current one, or from `at_ns`.
    pub fn step(&mut self, forward: bool, at_ns: u64) -> Result<Option<keel_trace::Span>, String> {
        let next = self
            .trace
            .step(&self.matches, self.current, at_ns, forward)
            .map_err(|e| e.to_string())?;
        self.current = next;
        match next {
            Some(r) => self.trace.span(r).map(Some).map_err(|e| e.to_string()),
            None => Ok(None),
        }
    }
}

fn window(w: Want) -> Window {
    Window {
        t0: w.t0,
        t1: w.t1,
        ns_per_px: w.ns_per_px,
        lanes: None,
        max_spans: MAX_WINDOW_SPANS,
    }
}

/// Files from this size up open through their index.
pub const INDEX_ABOVE: u64 = 2 << 30;

/// Whether trace file `path` opens through its index: an indexed file
/// itself, or a trace of [`INDEX_ABOVE`] bytes or more.
pub fn wants_index(path: &std::path::Path) -> bool {
    keel_trace::indexed::is_indexed_file(path)
        || std::fs::metadata(path).is_ok_and(|m| m.len() >= INDEX_ABOVE)
}

/// The Statistics, Memory and Analysis tabs of an indexed trace: what the
/// file holds, and every span name's count and total time over the whole
/// trace (the tables computed over a whole trace in memory need it in
/// memory; an area selection analyses any window).
pub fn show_totals(ui: &mut egui::Ui, s: &mut IndexedSession) {
    let t = &s.trace;
    let (lo, hi) = t.bounds();
    ui.heading(match &**t {
        Indexed::File(_) => "Indexed trace",
        Indexed::Set(_) => "Live session history (on disk)",
    });
    ui.label(format!(
        "{} spans on {} lanes over {}, read a window at a time. Select an area of the timeline (Shift+drag) to analyse it.",
        t.span_count(),
        t.lane_count(),
        crate::view::format_ns((hi - lo) as f64)
    ));
    let names = s
        .names
        .get_or_insert_with(|| t.name_totals().map_err(|e| e.to_string()));
    let names = match names {
        Ok(n) => n,
        Err(e) => {
            ui.colored_label(egui::Color32::from_rgb(240, 100, 90), e.as_str());
            return;
        }
    };
    ui.separator();
    ui.strong(format!(
        "Spans by name ({} names, most time first)",
        names.len()
    ));
    egui::ScrollArea::vertical().show(ui, |ui| {
        egui::Grid::new("indexed names")
            .striped(true)
            .show(ui, |ui| {
                ui.strong("name");
                ui.strong("count");
                ui.strong("total");
                ui.strong("mean");
                ui.end_row();
                for n in names.iter().take(500) {
                    ui.label(crate::analysis::short(&n.name, 80))
                        .on_hover_text(&n.name);
                    ui.label(n.count.to_string());
                    ui.label(crate::view::format_ns(n.total_ns as f64));
                    ui.label(crate::view::format_ns(
                        n.total_ns as f64 / n.count.max(1) as f64,
                    ));
                    ui.end_row();
                }
            });
    });
}
