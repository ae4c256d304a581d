//! `keel-profiler`: the desktop profiler of Keel.
//!
//! The app reads everything through Keel's public API: devices and their
//! properties (`keel::devices`, `keel::properties`), and traces through
//! the profiler's trace model (an in-process `keel::profiler::start()`
//! session, the live TCP client, or a trace file). It never reaches into
//! runtime internals.
//!
//! Layout of this crate (after egui_demo_app: `main.rs` only parses
//! arguments; everything else lives here so tests and benchmarks can build
//! the real app):
//! - [`cli`]: command-line options (clap);
//! - [`view`], [`stats`], [`analysis`] (from `keel-trace`, which holds all
//!   trace processing that needs no egui): the per-lane index that makes a
//!   frame's work depend on what is visible, statistics and
//!   HolisticTraceAnalysis-style tables, computed once per trace;
//! - [`devices`]: probing backends and capability checks;
//! - [`workloads`]: built-in workloads run on a background thread;
//! - [`panels`]: the panels (devices, timeline, statistics, analysis,
//!   memory, sources, details, the area selection); each returns what the user asked for and
//!   the [`App`] acts;
//! - [`headless`]: `--headless`; [`window`]: eframe, `--screenshot`.

pub mod cli;
pub mod devices;
pub mod headless;
pub mod indexed;
pub mod live;
pub mod panels;
pub mod window;
pub mod workloads;

pub use keel_trace::{analysis, selection, stats, view};

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use egui::{Color32, Ui};
use keel::profiler::Trace;

use crate::devices::BackendInfo;
use crate::panels::memory::MemoryState;
use crate::panels::sources::{Command, SourcesState};
use crate::panels::stats::StatsState;
use crate::panels::timeline::{Highlight, TimelineState};
use crate::stats::Stats;
use crate::view::TraceView;
use crate::workloads::RunMessage;

/// The central view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Devices and their properties.
    Devices,
    /// The timeline.
    Timeline,
    /// Events and statistics.
    Stats,
    /// Import report and HTA-style analysis.
    Analysis,
    /// Allocator curves and the segment map.
    Memory,
    /// A PyTorch memory snapshot.
    Snapshot,
    /// The shown trace against a baseline.
    Diff,
}

/// The application: all state of the profiler UI.
pub struct App {
    /// Backends and devices, probed once at start.
    pub backends: Vec<BackendInfo>,
    /// The shown trace, indexed. Shared so a live session can make the
    /// next view of what it keeps in memory on another thread while this
    /// one is drawn.
    pub view: Option<Arc<TraceView>>,
    /// Statistics of [`Self::view`], computed when first shown.
    pub stats: Option<Stats>,
    /// Analysis of [`Self::view`], computed when first shown.
    pub analysis: Option<analysis::Analysis>,
    /// The ranks of [`Self::view`] side by side, for a trace of several
    /// files, computed with [`Self::analysis`].
    pub ranks: Option<keel_trace::ranks::RankAnalysis>,
    /// The central view.
    pub tab: Tab,
    /// Timeline view state.
    pub timeline: TimelineState,
    /// Statistics panel state.
    pub stats_state: StatsState,
    /// Memory view state.
    pub memory: MemoryState,
    /// Sources panel state.
    pub sources: SourcesState,
    /// The selected span.
    pub selected: Option<u32>,
    /// Spans sharing the selected span's operation.
    pub related: Vec<u32>,
    /// The selected span's flow chain (spans reachable through flows in
    /// either direction, the selected one included), sorted.
    pub chain: Vec<u32>,
    /// The flows of [`Self::chain`], sorted.
    pub chain_flows: Vec<u32>,
    /// The analysis of the timeline's area selection
    /// ([`TimelineState::area`]), computed when a drag making it ends.
    pub area: Option<selection::SelectionSummary>,
    /// The selection panel's state.
    pub area_panel: panels::selection::SelectionPanel,
    /// The PyTorch memory snapshot opened, if any.
    pub snapshot: Option<panels::snapshot::SnapshotView>,
    /// The snapshot view's state.
    pub snapshot_state: panels::snapshot::SnapshotState,
    /// A baseline the shown trace is compared with, and the comparison.
    pub diff: Option<panels::diff::DiffView>,
    /// The indexed file shown a window at a time, when the trace is one
    /// ([`Self::view`] then holds the window).
    pub indexed: Option<indexed::IndexedSession>,
    /// Open single trace files through their index (`--index`).
    pub index: bool,
    /// The last error, shown until dismissed.
    pub error: Option<String>,
    run: Option<mpsc::Receiver<RunMessage>>,
    /// The live session, if one was started (it outlives its connections
    /// until another trace is shown).
    pub live: Option<live::LiveSession>,
    /// How much of a live session stays in memory (`--retain`).
    pub retention: live::Retention,
    /// When the live statistics and analysis were last made, and what
    /// making them cost (they are made again at most every ten costs).
    live_stats: Option<(std::time::Instant, std::time::Duration)>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("tab", &self.tab)
            .field("spans", &self.view.as_ref().map(|v| v.trace.spans.len()))
            .field("selected", &self.selected)
            .finish_non_exhaustive()
    }
}

impl App {
    /// Builds the app: probes devices and applies the options (`--open`
    /// loads a file, `--connect` connects, `--device` picks the workload
    /// device). Problems are shown in the UI, never panics.
    pub fn new(options: &cli::Options) -> App {
        let backends = devices::probe();
        let all: Vec<keel::Device> = backends
            .iter()
            .flat_map(|b| b.devices.iter().map(|(d, _)| *d))
            .collect();
        let mut error = None;
        let device = match &options.device {
            Some(s) => match s.parse::<keel::Device>() {
                Ok(d) if all.contains(&d) => Some(d),
                Ok(d) => {
                    error = Some(format!("--device {d}: no such device here"));
                    None
                }
                Err(e) => {
                    error = Some(format!("--device {s}: {e}"));
                    None
                }
            },
            None => None,
        };
        let mut app = App {
            backends,
            view: None,
            stats: None,
            analysis: None,
            ranks: None,
            tab: Tab::Devices,
            timeline: TimelineState::default(),
            stats_state: StatsState::default(),
            memory: MemoryState::default(),
            sources: SourcesState::new(all, device),
            selected: None,
            related: Vec::new(),
            chain: Vec::new(),
            chain_flows: Vec::new(),
            area: None,
            area_panel: Default::default(),
            snapshot: None,
            snapshot_state: Default::default(),
            diff: None,
            indexed: None,
            index: false,
            error,
            run: None,
            live: None,
            retention: live::Retention::default(),
            live_stats: None,
        };
        app.sources.align = options.align;
        app.index = options.index;
        if let [baseline, candidate] = options.diff.as_slice() {
            app.sources.path = panels::sources::path_text(&options.diff);
            app.open_diff(baseline, candidate);
        }
        if !options.open.is_empty() {
            app.sources.path = panels::sources::path_text(&options.open);
            app.open_files(&options.open);
            if let (Some(window), Some(view)) = (options.select, &app.view) {
                let sel = headless::everything(view, window);
                match app.analyse_area(&sel) {
                    Ok(a) => app.area = Some(a),
                    Err(e) => app.fail(e),
                }
                app.timeline.area = Some(sel);
            }
        }
        app.retention = live::Retention {
            spans: options.retain,
            age_ns: options.retain_time,
        };
        for addr in &options.connect {
            app.sources.address = addr.clone();
            app.connect(addr.clone(), None);
        }
        app
    }

    /// Shows `trace` (from `source`): indexes it and fits the timeline.
    /// Following live data is off (a file or a finished recording does not
    /// grow); a live connection turns it on.
    pub fn set_trace(&mut self, trace: Trace, source: impl Into<String>) {
        self.forget_trace();
        self.view = Some(Arc::new(TraceView::new(trace, source)));
        self.timeline.fit_pending = true;
        self.timeline.follow_live = false;
        self.timeline.search.reset();
        self.tab = Tab::Timeline;
    }

    /// Closes the shown trace and everything computed from it, the live
    /// session included.
    fn forget_trace(&mut self) {
        self.view = None;
        self.live = None;
        self.timeline.live_status = None;
        self.timeline.memory_from = None;
        self.timeline.live_edge = None;
        self.timeline.search.on_disk = None;
        self.forget_computed();
    }

    /// Forgets what was computed from the shown trace (a live session's
    /// first fragment replaces the trace but keeps the session).
    pub(crate) fn forget_computed(&mut self) {
        self.indexed = None;
        self.timeline.search.whole = None;
        self.timeline.file_spans = None;
        self.stats = None;
        self.analysis = None;
        self.memory.reset();
        self.select(None);
        self.timeline.area = None;
        self.area = None;
        self.diff = None;
    }

    /// Loads a trace file (Chrome JSON or native); errors go to the UI.
    pub fn open(&mut self, path: &Path) {
        self.open_files(&[path.to_path_buf()]);
    }

    /// Loads trace files as one trace: one file as it is, several (the
    /// ranks of a distributed job) with one group of lanes per file, on
    /// one clock as [`SourcesState::align`](panels::sources::SourcesState::align)
    /// says ([`keel_trace::load_traces_with`]). Errors go to the UI.
    /// Shows `candidate` compared with `baseline` (the Diff tab, and the
    /// candidate's changed spans outlined on the timeline). Errors go to
    /// the UI.
    pub fn open_diff(&mut self, baseline: &Path, candidate: &Path) {
        let base = match keel::profiler::load_trace(baseline) {
            Ok(t) => t,
            Err(e) => return self.fail(format!("could not open {}: {e}", baseline.display())),
        };
        self.open(candidate);
        let Some(view) = &self.view else {
            return;
        };
        match panels::diff::DiffView::new(
            TraceView::new(base, baseline.display().to_string()),
            view,
        ) {
            Ok(d) => {
                self.sources.say(format!(
                    "compared with {}: {} spans matched",
                    baseline.display(),
                    d.diff.span_deltas.len()
                ));
                self.diff = Some(d);
                self.tab = Tab::Diff;
            }
            Err(e) => self.fail(format!(
                "could not compare {} with {}: {e}",
                baseline.display(),
                candidate.display()
            )),
        }
    }

    /// A PyTorch memory snapshot among `paths` (told by content) opens in
    /// the Snapshot tab; with a trace of the same run, its blocks link to
    /// the trace's operators. Opening a snapshot alone closes the trace
    /// shown, which would be another run's.
    pub fn open_files(&mut self, paths: &[PathBuf]) {
        if paths.is_empty() {
            self.fail("nothing to open: expected a trace file name, found none".to_owned());
            return;
        }
        if let [dir] = paths
            && dir.is_dir()
        {
            return self.open_session(dir);
        }
        let (snapshots, traces) = match split_snapshots(paths) {
            Ok(split) => split,
            Err(e) => return self.fail(e),
        };
        if let Some(path) = snapshots.first() {
            let source = path.display().to_string();
            match keel_trace::snapshot::load_snapshot(path) {
                Ok(s) => {
                    self.sources.say(format!(
                        "opened memory snapshot {source} ({} allocator actions)",
                        s.entries()
                    ));
                    self.snapshot = Some(panels::snapshot::SnapshotView::new(s, source));
                    self.snapshot_state.reset();
                }
                Err(e) => return self.fail(format!("could not open {source}: {e}")),
            }
        }
        if traces.is_empty() {
            self.forget_trace();
            self.tab = Tab::Snapshot;
            return;
        }
        if let [path] = traces.as_slice()
            && (self.index || indexed::wants_index(path))
        {
            return self.open_indexed(path);
        }
        let source = files_label(&traces);
        let paths = &traces;
        match keel_trace::load_traces_with(paths, self.sources.align) {
            Ok(t) => {
                self.sources
                    .say(format!("opened {source} ({} spans)", t.spans.len()));
                self.set_trace(t, source);
                if !snapshots.is_empty() {
                    self.tab = Tab::Snapshot;
                }
            }
            Err(e) => self.fail(format!("could not open {source}: {e}")),
        }
    }

    /// Shows trace file `path` through its index (made now on first open,
    /// see [`keel_trace::indexed::open_or_convert`]), the whole trace in
    /// view. Errors go to the UI.
    pub fn open_indexed(&mut self, path: &Path) {
        let source = path.display().to_string();
        let (trace, made) = match keel_trace::indexed::open_or_convert(path) {
            Ok(t) => t,
            Err(e) => return self.fail(format!("could not open {source}: {e}")),
        };
        let what = if made { ", index made now" } else { "" };
        self.show_indexed(indexed::Indexed::File(Box::new(trace)), source, what);
    }

    /// Shows `trace` (from `source`) a window at a time, the whole of it
    /// in view; `what` ends the log line.
    pub(crate) fn show_indexed(&mut self, trace: indexed::Indexed, source: String, what: &str) {
        self.forget_trace();
        let mut session = indexed::IndexedSession::new(trace);
        let (lo, hi) = session.trace.bounds();
        let width = (hi - lo) as f64 * 1.04;
        match session.read_now(lo as f64 - (hi - lo) as f64 * 0.02, width, 1_200.0) {
            Ok(w) => self.view = Some(Arc::new(session.show(w))),
            Err(e) => return self.fail(format!("could not read {source}: {e}")),
        }
        self.sources.say(format!(
            "opened {source} indexed ({} spans{what})",
            session.trace.span_count(),
        ));
        self.timeline.file_spans = Some(session.trace.span_count());
        self.indexed = Some(session);
        self.timeline.fit_pending = true;
        self.timeline.follow_live = false;
        self.timeline.search.reset();
        self.timeline.search.whole = Some(Default::default());
        self.tab = Tab::Timeline;
    }

    /// The analysis of area `sel`: over the shown trace, or, for an indexed
    /// file, over its spans in the area read at full resolution.
    pub fn analyse_area(
        &self,
        sel: &selection::Selection,
    ) -> Result<selection::SelectionSummary, String> {
        let Some(view) = &self.view else {
            return Err("no trace to select in".to_owned());
        };
        let Some(s) = &self.indexed else {
            return Ok(selection::analyse(view, sel));
        };
        let lanes = sel
            .lanes
            .iter()
            .filter_map(|&p| view.lanes.get(p).map(|l| l.lane))
            .collect();
        let w = s
            .trace
            .window(&keel_trace::indexed::Window {
                t0: sel.t0.min(sel.t1),
                t1: sel.t0.max(sel.t1),
                ns_per_px: 0.0,
                lanes: Some(lanes),
                max_spans: indexed::MAX_WINDOW_SPANS,
            })
            .map_err(|e| format!("could not analyse the selection: {e}"))?;
        Ok(selection::analyse(&w.view, sel))
    }

    /// For an indexed trace: takes a window read in the background, keeps
    /// the whole file's search current, and starts reading the window the
    /// screen needs next (`ctx` is woken when it is read).
    pub fn poll_indexed(&mut self, ctx: Option<&egui::Context>) {
        match self.indexed.as_mut().and_then(|s| s.take()) {
            Some(Ok(w)) => self.show_window(w),
            Some(Err(e)) => self.fail(e),
            None => {}
        }
        let Some(s) = &mut self.indexed else {
            return;
        };
        let searched = s.search(&self.timeline.search.query);
        self.timeline.search.whole = Some(panels::timeline::WholeSearch {
            total: s.matches.total,
            step: None,
        });
        if !self.timeline.fit_pending {
            let px = self.timeline.layout.area.width();
            let px = if px.is_finite() && px > 0.0 {
                px
            } else {
                1_200.0
            };
            let wake = ctx.cloned();
            s.request(
                self.timeline.start_ns,
                self.timeline.width_ns,
                px,
                move || {
                    if let Some(c) = &wake {
                        c.request_repaint();
                    }
                },
            );
        }
        if let Err(e) = searched {
            self.fail(e);
        }
    }

    /// Shows window `w` of the indexed trace, keeping the selected span
    /// (by its record) and selecting a search match it now holds.
    pub fn show_window(&mut self, w: keel_trace::indexed::WindowView) {
        let Some(s) = &mut self.indexed else {
            return;
        };
        let selected = self.selected.and_then(|l| s.record_of(l));
        let mut w = w;
        if let Some(p) = self.live.as_ref().and_then(|l| l.parked.as_ref()) {
            // A live session's history: the timeline still reaches what is
            // in memory, where scrolling returns to it.
            let b = &mut w.view.bounds;
            *b = (b.0.min(p.bounds.0), b.1.max(p.bounds.1));
        }
        s.replace(&mut self.view, w);
        let reveal = s.reveal.and_then(|r| s.local_of(r));
        if reveal.is_some() {
            s.reveal = None;
        }
        let keep = selected.and_then(|r| s.local_of(r));
        self.timeline.search.stale = !self.timeline.search.query.is_empty();
        match reveal {
            Some(l) => {
                self.select(Some(l));
                self.timeline.reveal = Some(l);
            }
            None => self.select(keep),
        }
    }

    /// Moves to the next (or previous) search match of the indexed file,
    /// from the one moved to last or from the middle of the screen.
    fn step_indexed(&mut self, forward: bool) {
        let Some(s) = &mut self.indexed else {
            return;
        };
        let mid = (self.timeline.start_ns + self.timeline.width_ns / 2.0).max(0.0) as u64;
        match s.step(forward, mid) {
            Ok(Some(span)) => {
                self.timeline.center_on_time(span.start_ns, span.dur_ns);
                s.reveal = s.current;
                if let Some(l) = s.current.and_then(|r| s.local_of(r)) {
                    s.reveal = None;
                    self.select(Some(l));
                    self.timeline.reveal = Some(l);
                }
            }
            Ok(None) => {}
            Err(e) => self.fail(e),
        }
    }

    /// Loads a trace from dropped bytes (the library picks the format by
    /// content).
    pub fn open_bytes(&mut self, name: &str, bytes: &[u8]) {
        match keel::profiler::file::from_bytes(bytes) {
            Ok(t) => self.set_trace(t, name.to_owned()),
            Err(e) => self.fail(format!("could not open {name}: {e}")),
        }
    }

    /// Opens files dropped on the window together: those with a path as
    /// [`Self::open_files`]; those with only their bytes (no local path)
    /// each by content, several merged with one group per file.
    pub fn open_dropped(&mut self, files: &[egui::DroppedFileHandle]) {
        let mut paths = Vec::new();
        let mut loaded = Vec::new();
        for f in files {
            let path = f.path().to_path_buf();
            let local = path.is_absolute() || path.exists();
            if local && !path.as_os_str().is_empty() {
                paths.push(path);
                continue;
            }
            let name = path.file_name().map_or_else(
                || "dropped file".to_owned(),
                |n| n.to_string_lossy().into_owned(),
            );
            match f.bytes() {
                Ok(b) => match keel::profiler::file::from_bytes(&b) {
                    Ok(t) => loaded.push((name, t)),
                    Err(e) => return self.fail(format!("could not open {name}: {e}")),
                },
                Err(e) => return self.fail(format!("could not read the dropped file {name}: {e}")),
            }
        }
        if !paths.is_empty() {
            self.sources.path = panels::sources::path_text(&paths);
            self.open_files(&paths);
        } else if loaded.len() == 1 {
            let (name, t) = loaded.remove(0);
            self.set_trace(t, name);
        } else if !loaded.is_empty() {
            let source = loaded
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            self.set_trace(keel::profiler::file::merge_files(loaded), source);
        }
    }

    /// Saves the shown trace; the format follows the extension.
    pub fn save(&mut self, path: &Path) {
        if path.extension().is_some_and(|e| e == live::SESSION_EXT) {
            return self.save_session(path);
        }
        let Some(view) = self
            .live
            .as_ref()
            .and_then(|l| l.parked.as_ref())
            .or(self.view.as_ref())
        else {
            self.fail("nothing to save: no trace is shown".to_owned());
            return;
        };
        match keel::profiler::save_trace(&view.trace, path) {
            Ok(()) => self.sources.say(format!("saved {}", path.display())),
            Err(e) => self.fail(format!("could not save {}: {e}", path.display())),
        }
        if let Some(l) = &self.live
            && l.history.span_count() > 0
        {
            self.sources.say(format!(
                "saved the spans in memory; the session's {} older spans are on disk: save to a .{} directory to keep the whole session",
                l.history.span_count(),
                live::SESSION_EXT
            ));
        }
    }

    fn fail(&mut self, message: String) {
        self.sources.say(format!("error: {message}"));
        self.error = Some(message);
    }

    /// Starts workloads on a background thread; `ctx` is woken on progress.
    pub fn run_workloads(
        &mut self,
        jobs: Vec<(workloads::Workload, keel::Device)>,
        ctx: Option<egui::Context>,
    ) {
        if self.run.is_some() {
            self.fail("a workload is already running".to_owned());
            return;
        }
        self.sources.progress = Some((0, jobs.len()));
        self.run = Some(workloads::spawn(jobs, move || {
            if let Some(c) = &ctx {
                c.request_repaint();
            }
        }));
    }

    /// Whether workloads are running.
    pub fn is_running(&self) -> bool {
        self.run.is_some()
    }

    /// Takes in what background threads reported.
    pub fn poll(&mut self) {
        if let Some(rx) = &self.run {
            let mut finished = None;
            let mut lines = Vec::new();
            while let Ok(m) = rx.try_recv() {
                match m {
                    RunMessage::Progress { done, total, line } => {
                        self.sources.progress = Some((done, total));
                        lines.push(line);
                    }
                    RunMessage::Finished(r) => finished = Some(r.map(|t| *t)),
                }
            }
            for l in lines {
                self.sources.say(l);
            }
            if let Some(r) = finished {
                self.run = None;
                self.sources.progress = None;
                match r {
                    Ok(t) => {
                        self.sources
                            .say(format!("recorded {} spans", t.spans.len()));
                        self.set_trace(t, "built-in workloads");
                    }
                    Err(e) => self.fail(e),
                }
            }
        }
        self.poll_live();
    }

    /// Selects `span` (or nothing): its details, the spans of its
    /// operation and its flow chain.
    pub fn select(&mut self, span: Option<u32>) {
        self.selected = span;
        self.related.clear();
        self.chain.clear();
        self.chain_flows.clear();
        if let (Some(s), Some(v)) = (span, &self.view) {
            (self.chain, self.chain_flows) = v.flow_chain(s, 10_000);
        }
        if let (Some(s), Some(v)) = (span, &self.view)
            && let Some(sp) = v.trace.spans.get(s as usize)
            && sp.op != 0
        {
            let op = sp.op;
            self.related = v
                .trace
                .spans
                .iter()
                .enumerate()
                .filter(|(i, o)| o.op == op && *i != s as usize)
                .map(|(i, _)| i as u32)
                .take(32)
                .collect();
        }
    }

    /// Draws one frame of the whole app into `ui`.
    pub fn ui(&mut self, ui: &mut Ui) {
        self.poll();
        let ctx = ui.ctx().clone();
        // Drag and drop.
        let dropped = ctx.input(|i| i.raw.dropped_files.clone());
        if !dropped.is_empty() {
            self.open_dropped(&dropped);
        }
        if self.run.is_some() || self.is_live() {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
        self.poll_indexed(Some(&ctx));

        egui::Panel::top("tabs").show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.strong("Keel profiler");
                ui.separator();
                ui.selectable_value(&mut self.tab, Tab::Devices, "Devices");
                ui.selectable_value(&mut self.tab, Tab::Timeline, "Timeline");
                ui.selectable_value(&mut self.tab, Tab::Stats, "Events & stats");
                ui.selectable_value(&mut self.tab, Tab::Analysis, "Analysis");
                ui.selectable_value(&mut self.tab, Tab::Memory, "Memory");
                if self.snapshot.is_some() {
                    ui.selectable_value(&mut self.tab, Tab::Snapshot, "Snapshot");
                }
                if self.diff.is_some() {
                    ui.selectable_value(&mut self.tab, Tab::Diff, "Diff");
                }
                ui.separator();
                match &self.view {
                    Some(v) => ui.label(format!("trace: {}", v.source)),
                    None => ui.weak("no trace: run a workload, connect, or open a file"),
                };
            });
        });
        if let Some(e) = self.error.clone() {
            egui::Panel::bottom("error").show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.colored_label(Color32::from_rgb(240, 100, 90), format!("Error: {e}"));
                    if ui.button("Dismiss").clicked() {
                        self.error = None;
                    }
                });
            });
        }
        let has_trace = self.view.is_some();
        let commands = egui::Panel::left("sources")
            .resizable(true)
            .default_size(240.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .show(ui, |ui| {
                        panels::sources::show(ui, &mut self.sources, has_trace)
                    })
                    .inner
            })
            .inner;
        for c in commands {
            match c {
                Command::Run(jobs) => self.run_workloads(jobs, Some(ctx.clone())),
                Command::Connect(a) => self.connect(a, Some(ctx.clone())),
                Command::Disconnect => self.disconnect(),
                Command::Open(p) => self.open_files(&p),
                Command::Diff(base, cand) => self.open_diff(&base, &cand),
                Command::Save(p) => self.save(&p),
            }
        }
        if let (Some(sel), Some(view)) = (self.selected, &self.view) {
            let jump = egui::Panel::right("details")
                .resizable(true)
                .default_size(260.0)
                .show(ui, |ui| {
                    let j = panels::details::show(ui, view, sel, &self.related, &self.chain);
                    if ui.button("Clear selection").clicked() {
                        return Some(None);
                    }
                    j.map(Some)
                })
                .inner;
            if let Some(j) = jump {
                self.select(j);
            }
        }
        let mut show_span = None;
        let mut area_changed = false;
        egui::CentralPanel::default().show(ui, |ui| match self.tab {
            Tab::Devices => panels::devices::show(ui, &self.backends),
            Tab::Timeline => match &self.view {
                Some(view) => {
                    let live = self.is_live();
                    let highlight = Highlight {
                        selected: self.selected,
                        chain: &self.chain,
                        chain_flows: &self.chain_flows,
                        changes: self.diff.as_ref().map(|d| &d.changes),
                    };
                    let action = match &self.area {
                        Some(sum) => {
                            egui::Panel::bottom("selection")
                                .resizable(true)
                                .default_size(240.0)
                                .show(ui, |ui| {
                                    panels::selection::show(ui, &mut self.area_panel, sum)
                                })
                                .inner
                        }
                        None => None,
                    };
                    match action {
                        Some(panels::selection::SelectionAction::Clear) => {
                            self.timeline.area = None;
                            self.area = None;
                        }
                        Some(panels::selection::SelectionAction::Search(name)) => {
                            let search = &mut self.timeline.search;
                            search.open = true;
                            search.query = name;
                            search.stale = true;
                        }
                        None => {}
                    }
                    let out = panels::timeline::show(ui, &mut self.timeline, view, highlight, live);
                    if out.area_changed {
                        area_changed = true;
                    }
                    if out.show_import_report {
                        self.tab = Tab::Analysis;
                    }
                    if let Some(c) = out.clicked {
                        self.select(c);
                    }
                }
                None => {
                    ui.label(
                        "No trace yet: run a workload, connect to a live process, or open a file.",
                    );
                }
            },
            Tab::Stats | Tab::Memory | Tab::Analysis if self.indexed.is_some() => {
                if let Some(s) = &mut self.indexed {
                    indexed::show_totals(ui, s);
                }
            }
            Tab::Stats => match &self.view {
                Some(view) => {
                    let stats = self.stats.get_or_insert_with(|| Stats::new(view));
                    panels::stats::show(ui, &mut self.stats_state, view, stats);
                }
                None => {
                    ui.label("No trace yet.");
                }
            },
            Tab::Diff => match (&mut self.diff, &self.view) {
                (Some(d), Some(view)) => panels::diff::show(ui, d, view),
                _ => {
                    ui.label("No diff: open two files with Diff (the first is the baseline).");
                }
            },
            Tab::Snapshot => match &self.snapshot {
                Some(sv) => {
                    let action = panels::snapshot::show(
                        ui,
                        &mut self.snapshot_state,
                        sv,
                        self.view.as_deref(),
                    );
                    if let Some(panels::snapshot::SnapshotAction::ShowSpan(span)) = action {
                        show_span = Some(span);
                    }
                }
                None => {
                    ui.label("No memory snapshot: open the pickle torch.cuda.memory._dump_snapshot writes.");
                }
            },
            Tab::Memory => match &self.view {
                Some(view) => {
                    let live = self.is_live();
                    panels::memory::show(ui, &mut self.memory, &mut self.timeline, view, live);
                }
                None => {
                    ui.label("No trace yet.");
                }
            },
            Tab::Analysis => match &self.view {
                Some(view) => {
                    if self.analysis.is_none() {
                        self.ranks = view
                            .trace
                            .ranks
                            .as_ref()
                            .map(|_| keel_trace::ranks::RankAnalysis::new(&view.trace));
                    }
                    let a = self
                        .analysis
                        .get_or_insert_with(|| analysis::Analysis::new(view));
                    panels::analysis::show(ui, view, a, self.ranks.as_ref());
                }
                None => {
                    ui.label("No trace yet.");
                }
            },
        });
        if area_changed {
            self.area = match self
                .timeline
                .area
                .clone()
                .map(|sel| self.analyse_area(&sel))
            {
                Some(Ok(a)) => Some(a),
                Some(Err(e)) => {
                    self.fail(e);
                    None
                }
                None => None,
            };
        }
        if let Some(forward) = self
            .timeline
            .search
            .whole
            .as_mut()
            .and_then(|w| w.step.take())
        {
            self.step_indexed(forward);
        }
        if let Some(span) = show_span {
            self.select(Some(span));
            if let Some(view) = &self.view {
                self.timeline.center_on(view, span);
            }
            self.tab = Tab::Timeline;
        }
    }
}

/// `paths` split into memory snapshots and trace files, by content.
pub fn split_snapshots(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), String> {
    let mut snapshots = Vec::new();
    let mut traces = Vec::new();
    for p in paths {
        match keel_trace::snapshot::is_snapshot(p) {
            Ok(true) => snapshots.push(p.clone()),
            Ok(false) => traces.push(p.clone()),
            Err(e) => return Err(format!("could not open {}: {e}", p.display())),
        }
    }
    if snapshots.len() > 1 {
        return Err(format!(
            "expected at most one memory snapshot, found {}: {}",
            snapshots.len(),
            files_label(&snapshots)
        ));
    }
    Ok((snapshots, traces))
}

/// How trace files are named in the UI and in messages: the path of one
/// file, the paths of several separated by commas.
pub fn files_label(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
