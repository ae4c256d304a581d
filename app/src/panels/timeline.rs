//! The timeline: lanes grouped by device and process (collapsible), one
//! lane per device stream and per host thread, spans coloured by kind, flow
//! arrows, a time ruler counting from the trace's start, zoom and pan
//! (W/A/S/D, Ctrl+wheel, drag), vertical scrolling, search (Ctrl+F), hover
//! tooltips, selection with its flow chain highlighted, and an area
//! selection (Shift+drag over lanes and time, or drag on the ruler for
//! every lane) that the selection panel analyses.
//!
//! Per frame the work depends on what is visible: every depth row is cut
//! to the visible time window by binary search ([`Row::visible`]), a run
//! of spans thinner than a pixel is drawn as one block per pixel column by
//! jumping over it with one more binary search, and flows and search
//! matches are merged per pixel.

use egui::{
    Align2, Color32, CornerRadius, FontId, Key, Modifiers, Pos2, Rect, Response, Sense, Stroke, Ui,
    pos2, vec2,
};
use keel::profiler::{FlowKind, SpanKind};
use keel_trace::selection::Selection;

use crate::view::{Row, TraceView, format_ns};

/// Height of one depth row, points.
pub const ROW_H: f32 = 18.0;
/// Gap between lanes, points.
pub const LANE_GAP: f32 = 6.0;
/// Width of the lane label column, points.
pub const LABEL_W: f32 = 170.0;
/// Height of the time ruler, points.
pub const RULER_H: f32 = 22.0;
/// The smallest row height before lanes scroll, points.
pub const MIN_ROW_H: f32 = 8.0;
/// Height of a group header (a device, a process), points.
pub const GROUP_H: f32 = 18.0;

/// The colour of a span kind.
pub fn kind_color(kind: SpanKind) -> Color32 {
    match kind {
        SpanKind::Kernel => Color32::from_rgb(66, 133, 244),
        SpanKind::Copy => Color32::from_rgb(52, 168, 83),
        SpanKind::Alloc => Color32::from_rgb(171, 71, 188),
        SpanKind::Free => Color32::from_rgb(120, 144, 156),
        SpanKind::EventRecord => Color32::from_rgb(251, 188, 5),
        SpanKind::Wait => Color32::from_rgb(234, 67, 53),
        SpanKind::Sync => Color32::from_rgb(255, 112, 67),
        SpanKind::Annotation => Color32::from_rgb(0, 172, 193),
        SpanKind::Operator => Color32::from_rgb(255, 167, 38),
    }
}

fn flow_color(kind: FlowKind) -> Color32 {
    match kind {
        FlowKind::Launch => Color32::from_rgb(200, 200, 200),
        FlowKind::EventWait => Color32::from_rgb(255, 82, 82),
    }
}

/// Where the last frame put things (for hit tests and for tests that click
/// a span).
#[derive(Debug, Clone)]
pub struct Layout {
    /// The span area (right of the labels, below the ruler), as visible.
    pub area: Rect,
    /// Top of every display lane on screen (`None`: its group is
    /// collapsed); may lie outside [`Self::area`] when scrolled away.
    pub lane_tops: Vec<Option<f32>>,
    /// Height of one depth row (shrinks from [`ROW_H`] when lanes would
    /// not fit, down to [`MIN_ROW_H`]; past that the lanes scroll).
    pub row_h: f32,
    /// Height of all groups and lanes (what scrolls), points.
    pub content_h: f32,
}

/// Search over span names (Ctrl+F).
#[derive(Debug, Clone, Default)]
pub struct SearchState {
    /// Whether the search bar is shown.
    pub open: bool,
    /// The query.
    pub query: String,
    /// The query [`Self::matches`] were computed for.
    searched: String,
    /// The matching spans, by start time.
    pub matches: Vec<u32>,
    /// [`Self::matches`] sorted by span index (for membership tests).
    sorted: Vec<u32>,
    /// The longest matching span, ns (to find those reaching into view).
    max_dur: u64,
    /// Starts of [`Self::matches`].
    starts: Vec<u64>,
    /// The match the user moved to (index into [`Self::matches`]).
    pub current: Option<usize>,
    /// Recompute on the next frame (the trace grew).
    pub stale: bool,
    /// Move the keyboard focus to the search box on the next frame.
    focus: bool,
    /// Whether the search box had the keyboard focus last frame.
    box_focused: bool,
    /// Matches over a whole indexed file, of which the view holds a
    /// window (set by the app): counted and stepped through there.
    pub whole: Option<WholeSearch>,
    /// Matches of a live session's spans on disk, older than the view
    /// (set by the app; shown beside the count).
    pub on_disk: Option<u64>,
}

/// Search over a file the view holds a window of: the app counts the
/// matches and moves between them; the search bar shows the count and
/// asks for moves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WholeSearch {
    /// Matches in the file.
    pub total: u64,
    /// The move asked for this frame: next (`true`) or previous.
    pub step: Option<bool>,
}

impl SearchState {
    /// Forgets the matches (a new trace).
    pub fn reset(&mut self) {
        self.searched.clear();
        self.matches.clear();
        self.sorted.clear();
        self.starts.clear();
        self.current = None;
        self.stale = !self.query.is_empty();
    }

    /// Recomputes the matches of [`Self::query`] in `view`.
    pub fn update(&mut self, view: &TraceView) {
        self.matches = view.search(&self.query);
        self.starts = self
            .matches
            .iter()
            .map(|&i| view.trace.spans[i as usize].start_ns)
            .collect();
        self.max_dur = self
            .matches
            .iter()
            .map(|&i| view.trace.spans[i as usize].dur_ns)
            .max()
            .unwrap_or(0);
        self.sorted = self.matches.clone();
        self.sorted.sort_unstable();
        self.searched = self.query.clone();
        self.current = None;
        self.stale = false;
    }

    /// Adds the matches among the spans from index `from` on (a live
    /// fragment's), costing those spans, not the trace; a search not yet
    /// made for the query is made whole on the next frame instead.
    pub fn extend(&mut self, view: &TraceView, from: usize) {
        if self.stale || self.searched != self.query {
            self.stale = !self.query.is_empty();
            return;
        }
        let new = view.search_from(&self.query, from);
        if new.is_empty() {
            return;
        }
        let spans = &view.trace.spans;
        let start = |i: u32| spans[i as usize].start_ns;
        let current = self.current.map(|k| self.matches[k]);
        let after = self
            .matches
            .last()
            .is_none_or(|&l| (start(l), l) <= (start(new[0]), new[0]));
        self.max_dur = new
            .iter()
            .map(|&i| spans[i as usize].dur_ns)
            .fold(self.max_dur, u64::max);
        // New spans have the largest indices.
        self.sorted.extend(new.iter().copied());
        self.sorted.sort_unstable();
        self.matches.extend(new);
        if !after {
            // Spans that start before earlier matches: two runs, merged.
            self.matches.sort_by_key(|&i| (start(i), i));
        }
        self.starts = self.matches.iter().map(|&i| start(i)).collect();
        self.current = current.and_then(|c| self.matches.iter().position(|&m| m == c));
    }

    /// Whether span `span` matches.
    pub fn is_match(&self, span: u32) -> bool {
        self.sorted.binary_search(&span).is_ok()
    }

    /// Moves to the next (`forward`) or previous match; returns it.
    pub fn step(&mut self, forward: bool) -> Option<u32> {
        let n = self.matches.len();
        if n == 0 {
            return None;
        }
        let k = match (self.current, forward) {
            (None, true) => 0,
            (None, false) => n - 1,
            (Some(k), true) => (k + 1) % n,
            (Some(k), false) => (k + n - 1) % n,
        };
        self.current = Some(k);
        Some(self.matches[k])
    }
}

/// The timeline's view state.
#[derive(Debug, Clone)]
pub struct TimelineState {
    /// Left edge, ns.
    pub start_ns: f64,
    /// Visible duration, ns.
    pub width_ns: f64,
    /// Keep the newest data in view while a live connection streams (on
    /// when a live connection starts, off for files).
    pub follow_live: bool,
    /// Fit the whole trace on the next frame.
    pub fit_pending: bool,
    /// Vertical scroll of the lanes, points.
    pub scroll_y: f32,
    /// Collapsed groups, by label.
    pub collapsed: std::collections::BTreeSet<String>,
    /// Lanes pinned to the top (positions in [`TraceView::lanes`]), in
    /// the order they were pinned: shown first, in a group of their own,
    /// above every other group.
    pub pinned: Vec<usize>,
    /// Which flow arrows are drawn.
    pub flows: FlowMode,
    /// Search.
    pub search: SearchState,
    /// A span to bring into view on the next frame (a search match).
    pub reveal: Option<u32>,
    /// The last frame's layout.
    pub layout: Layout,
    /// Spans drawn last frame (merged blocks count once).
    pub drawn: usize,
    /// Flow lines drawn last frame (flows merged per pixel count once).
    pub flows_drawn: usize,
    /// Search matches outlined last frame (merged per pixel).
    pub matches_drawn: usize,
    /// The area selection: display lanes and a time window (Shift+drag
    /// over lanes, or drag on the ruler for every lane; Esc clears it).
    pub area: Option<Selection>,
    /// Where the drag making [`Self::area`] started: time (ns) and height
    /// in the lanes' content (points), `None` for a drag on the ruler.
    pub area_anchor: Option<(f64, Option<f32>)>,
    /// Draw rows zoomed far out from their coarser levels
    /// ([`Row::level_for`]); off, every row is walked span by span (the
    /// picture both give is the same, which tests check).
    pub levels: bool,
    /// The file's span count when the view is a window of an indexed file
    /// (set by the app).
    pub file_spans: Option<u64>,
    /// A live session's status line: what is in memory, on disk, and was
    /// dropped (set by the app).
    pub live_status: Option<String>,
    /// Where a live session's spans in memory begin: older ones are on
    /// disk (set by the app; drawn as a marker).
    pub memory_from: Option<u64>,
    /// The latest time every connected program of a live session has
    /// sent (set by the app): following live keeps it in view, so no
    /// program's lanes look empty while its next fragment is on its way.
    pub live_edge: Option<u64>,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            area: Rect::NOTHING,
            lane_tops: Vec::new(),
            row_h: ROW_H,
            content_h: 0.0,
        }
    }
}

impl Default for TimelineState {
    fn default() -> Self {
        TimelineState {
            start_ns: 0.0,
            width_ns: 1e6,
            follow_live: false,
            fit_pending: true,
            scroll_y: 0.0,
            collapsed: Default::default(),
            pinned: Vec::new(),
            flows: FlowMode::Readable,
            search: SearchState::default(),
            reveal: None,
            layout: Layout::default(),
            drawn: 0,
            flows_drawn: 0,
            matches_drawn: 0,
            area: None,
            area_anchor: None,
            levels: true,
            file_spans: None,
            live_status: None,
            memory_from: None,
            live_edge: None,
        }
    }
}

/// Which flow arrows the timeline draws. A real trace has thousands of
/// flows (a PyTorch training step: one per launch), which drawn at once
/// are a mesh hiding the spans; the default draws the selection's chain,
/// and every flow only where few enough are in the window to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowMode {
    /// The selected span's chain, and every flow of the window when it
    /// holds at most [`READABLE_FLOWS`].
    Readable,
    /// Every flow in the window (merged per pixel).
    All,
    /// None, not even the selection's chain.
    Off,
}

impl FlowMode {
    /// Every mode, in the menu's order.
    pub const ALL: [FlowMode; 3] = [FlowMode::Readable, FlowMode::All, FlowMode::Off];

    /// The menu's name of the mode.
    pub fn label(self) -> &'static str {
        match self {
            FlowMode::Readable => "selection",
            FlowMode::All => "all",
            FlowMode::Off => "off",
        }
    }
}

/// The most flows in the window for [`FlowMode::Readable`] to draw them
/// all (beyond it, only the selection's chain).
pub const READABLE_FLOWS: usize = 64;

/// The outline of a span that got slower.
pub const SLOWER: Color32 = Color32::from_rgb(239, 83, 80);
/// The outline of a span that got faster.
pub const FASTER: Color32 = Color32::from_rgb(102, 187, 106);
/// The candidate's spans whose time changed enough to mark, by start (for
/// the timeline to find those in its window by binary search).
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// Candidate span indices, sorted by start.
    pub spans: Vec<u32>,
    /// Their starts.
    pub starts: Vec<u64>,
    /// Whether each got slower (else faster).
    pub slower: Vec<bool>,
    /// The longest of them, ns.
    pub max_dur: u64,
}

/// What the timeline highlights besides search matches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Highlight<'a> {
    /// The selected span.
    pub selected: Option<u32>,
    /// Its flow chain (sorted span indices).
    pub chain: &'a [u32],
    /// The chain's flows (sorted flow indices).
    pub chain_flows: &'a [u32],
    /// Spans a diff against a baseline found slower or faster.
    pub changes: Option<&'a Changes>,
}

/// A group as the timeline shows it: its lanes (positions in
/// [`TraceView::lanes`]), pinned ones moved to the group of pinned lanes.
#[derive(Debug, Clone)]
struct ShownGroup {
    label: String,
    lanes: Vec<usize>,
}

/// Draws a group's header row at `top`: its background, a triangle
/// (pointing right when `collapsed`, down when open) and `text` as a
/// button that toggles the group.
fn group_header(
    ui: &mut Ui,
    painter: &egui::Painter,
    rect: Rect,
    top: f32,
    collapsed: bool,
    text: String,
) -> Response {
    painter.rect_filled(
        Rect::from_min_max(pos2(rect.left(), top), pos2(rect.right(), top + GROUP_H)),
        0.0,
        ui.visuals().widgets.noninteractive.bg_fill,
    );
    let c = pos2(rect.left() + 8.0, top + GROUP_H / 2.0);
    let tri = if collapsed {
        vec![
            c + vec2(-3.0, -4.0),
            c + vec2(3.0, 0.0),
            c + vec2(-3.0, 4.0),
        ]
    } else {
        vec![
            c + vec2(-4.0, -3.0),
            c + vec2(4.0, -3.0),
            c + vec2(0.0, 3.0),
        ]
    };
    painter.add(egui::Shape::convex_polygon(
        tri,
        ui.visuals().text_color(),
        Stroke::NONE,
    ));
    let header = Rect::from_min_size(pos2(rect.left() + 14.0, top), vec2(LABEL_W - 16.0, GROUP_H));
    put_left(
        ui,
        header,
        egui::Button::new(egui::RichText::new(text).small().strong())
            .frame(false)
            .truncate(),
    )
}

/// The header of the counter tracks.
pub const COUNTERS: &str = "Counters";
/// Height of a counter track, points.
pub const COUNTER_H: f32 = 36.0;

/// Draws counter `c` as a step curve in a track at `top`: sampled once
/// per pixel column (the value in force at the column's time, so the
/// cost is bounded by the window's width, not by the counter's points),
/// scaled to the largest value in view, labelled with its device and
/// name and the largest value.
#[allow(clippy::too_many_arguments, reason = "one track's drawing context")]
fn draw_counter(
    ui: &mut Ui,
    painter: &egui::Painter,
    state: &TimelineState,
    view: &TraceView,
    c: &keel_trace::Counter,
    rect: Rect,
    area: Rect,
    top: f32,
) {
    let value_at = |t: f64| -> Option<i64> {
        let t = t.max(0.0) as u64;
        let i = c.points.partition_point(|&(ts, _)| ts <= t);
        i.checked_sub(1).map(|i| c.points[i].1)
    };
    let columns = area.width().max(1.0) as usize;
    let samples: Vec<Option<i64>> = (0..columns)
        .map(|i| value_at(state.t_of(area, area.left() + i as f32)))
        .collect();
    let max = samples.iter().flatten().copied().max().unwrap_or(0).max(1);
    let y_of = |v: i64| top + COUNTER_H - (v.max(0) as f32 / max as f32) * (COUNTER_H - 4.0);
    let color = kind_color(SpanKind::Alloc);
    let mut prev: Option<Pos2> = None;
    for (i, v) in samples.iter().enumerate() {
        let x = area.left() + i as f32;
        let Some(v) = v else {
            prev = None;
            continue;
        };
        let p = pos2(x, y_of(*v));
        if let Some(q) = prev {
            painter.line_segment([q, pos2(p.x, q.y)], Stroke::new(1.2, color));
            painter.line_segment([pos2(p.x, q.y), p], Stroke::new(1.2, color));
        }
        painter.line_segment(
            [p, pos2(p.x, top + COUNTER_H)],
            Stroke::new(1.0, color.gamma_multiply(0.25)),
        );
        prev = Some(p);
    }
    if top >= area.top() {
        let device = view
            .trace
            .devices
            .get(c.device as usize)
            .map_or_else(String::new, |d| keel_trace::view::device_label(&d.device));
        let label = format!("{device} · {}", c.name);
        let label_rect =
            Rect::from_min_size(pos2(rect.left() + 12.0, top), vec2(LABEL_W - 16.0, ROW_H));
        put_left(
            ui,
            label_rect,
            egui::Label::new(egui::RichText::new(&label).small().strong()).truncate(),
        )
        .on_hover_text(format!("{label}: up to {max} in view"));
    }
}

/// The header of the group of pinned lanes.
pub const PINNED: &str = "Pinned";

/// The trace's groups with the `pinned` lanes moved out into a first
/// group of their own (groups left empty are not shown).
fn display_groups(view: &TraceView, pinned: &[usize]) -> Vec<ShownGroup> {
    let mut groups = Vec::with_capacity(view.groups.len() + 1);
    if !pinned.is_empty() {
        groups.push(ShownGroup {
            label: PINNED.to_owned(),
            lanes: pinned.to_vec(),
        });
    }
    for g in &view.groups {
        let lanes: Vec<usize> = g.lanes.clone().filter(|p| !pinned.contains(p)).collect();
        if !lanes.is_empty() {
            groups.push(ShownGroup {
                label: g.label.clone(),
                lanes,
            });
        }
    }
    groups
}

impl TimelineState {
    /// Pins lane `pos` to the top, or unpins it.
    pub fn toggle_pin(&mut self, pos: usize) {
        match self.pinned.iter().position(|&p| p == pos) {
            Some(i) => {
                self.pinned.remove(i);
            }
            None => self.pinned.push(pos),
        }
    }

    /// Shows the whole trace.
    pub fn fit(&mut self, view: &TraceView) {
        let (lo, hi) = view.bounds;
        let pad = (hi - lo) as f64 * 0.02;
        self.start_ns = lo as f64 - pad;
        self.width_ns = ((hi - lo) as f64 + 2.0 * pad).max(1_000.0);
    }

    /// Shows the newest `width_ns` of the trace.
    pub fn follow(&mut self, view: &TraceView) {
        let hi = self.live_edge.unwrap_or(view.bounds.1) as f64;
        self.start_ns = hi - self.width_ns * 0.95;
    }

    /// Zooms by `factor` (> 1: in) keeping time `at` where it is.
    pub fn zoom(&mut self, factor: f64, at: f64) {
        let w = (self.width_ns / factor).clamp(10.0, 1e13);
        self.start_ns = at - (at - self.start_ns) * (w / self.width_ns);
        self.width_ns = w;
    }

    /// Pans by `fraction` of the visible width (> 0: later).
    pub fn pan(&mut self, fraction: f64) {
        self.start_ns += fraction * self.width_ns;
    }

    /// Centres span `span` (zooming out when it is wider than the view).
    pub fn center_on(&mut self, view: &TraceView, span: u32) {
        let Some(s) = view.trace.spans.get(span as usize) else {
            return;
        };
        self.center_on_time(s.start_ns, s.dur_ns);
        self.reveal = Some(span);
    }

    /// Centres the time range `start_ns..start_ns + dur_ns` (zooming out
    /// when it is wider than the view).
    pub fn center_on_time(&mut self, start_ns: u64, dur_ns: u64) {
        if dur_ns as f64 > self.width_ns * 0.8 {
            self.width_ns = (dur_ns as f64 * 1.25).max(1_000.0);
        }
        let mid = start_ns as f64 + dur_ns as f64 / 2.0;
        self.start_ns = mid - self.width_ns / 2.0;
    }

    fn x_of(&self, area: Rect, t: f64) -> f32 {
        area.left() + ((t - self.start_ns) / self.width_ns) as f32 * area.width()
    }

    fn t_of(&self, area: Rect, x: f32) -> f64 {
        self.start_ns + f64::from((x - area.left()) / area.width()) * self.width_ns
    }

    fn row_top(&self, view: &TraceView, lane: u32, depth: u16) -> Option<f32> {
        let pos = *view.lane_pos.get(lane as usize)?;
        let top = (*self.layout.lane_tops.get(pos)?)?;
        Some(top + f32::from(depth) * self.layout.row_h)
    }

    /// The screen rectangle of span `span` in the last frame, if visible.
    pub fn span_rect(&self, view: &TraceView, span: u32) -> Option<Rect> {
        let s = view.trace.spans.get(span as usize)?;
        let y = self.row_top(view, s.lane, *view.depth.get(span as usize)?)?;
        let area = self.layout.area;
        let h = self.layout.row_h;
        if y + h <= area.top() || y >= area.bottom() {
            return None;
        }
        let x0 = self.x_of(area, s.start_ns as f64).max(area.left());
        let x1 = self.x_of(area, s.end_ns() as f64).min(area.right());
        (x1 > x0).then(|| Rect::from_min_max(pos2(x0, y), pos2(x1, y + h - 1.0)))
    }

    /// The span under `pos` (with one pixel of slack), from the last layout.
    pub fn hit(&self, view: &TraceView, pos: Pos2) -> Option<u32> {
        let area = self.layout.area;
        if !area.contains(pos) {
            return None;
        }
        let h = self.layout.row_h;
        let (lane, top) = self
            .layout
            .lane_tops
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .find(|&(i, top)| {
                let rows = view.lanes.get(i).map_or(1, |l| l.rows.len().max(1));
                pos.y >= top && pos.y < top + rows as f32 * h
            })?;
        let row = ((pos.y - top) / h) as usize;
        let r = view.lanes.get(lane)?.rows.get(row)?;
        let px = self.width_ns / f64::from(area.width().max(1.0));
        let t = self.t_of(area, pos.x);
        r.at((t - px).max(0.0) as u64, (t + px).max(0.0) as u64)
    }
}

fn nice_step(min_ns: f64) -> f64 {
    let mut step = 1.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if step * m >= min_ns {
                return step * m;
            }
        }
        step *= 10.0;
    }
}

/// Draws one depth row; returns how many shapes it drew.
#[allow(clippy::too_many_arguments)]
fn draw_row(
    ui: &Ui,
    state: &TimelineState,
    view: &TraceView,
    row: &Row,
    area: Rect,
    y0: f32,
    hl: Highlight<'_>,
) -> usize {
    let painter = ui.painter_at(area);
    let t0 = state.start_ns.max(0.0) as u64;
    let t1 = (state.start_ns + state.width_ns).max(0.0) as u64;
    let range = row.visible(t0, t1);
    let ns_per_px = state.width_ns / f64::from(area.width().max(1.0));
    let y1 = y0 + state.layout.row_h - 1.0;
    let font = FontId::proportional(11.0);
    let mut drawn = 0;
    let mut i = range.start;
    let end = range.end;
    // A pending block of merged sub-pixel spans: [x0, x1] and how many.
    let mut block: Option<(f32, f32, usize, SpanKind)> = None;
    let flush = |block: &mut Option<(f32, f32, usize, SpanKind)>, drawn: &mut usize| {
        if let Some((bx0, bx1, _, kind)) = block.take() {
            let c = kind_color(kind).gamma_multiply(0.7);
            painter.rect_filled(
                Rect::from_min_max(pos2(bx0, y0), pos2(bx1.max(bx0 + 1.0), y1)),
                0.0,
                c,
            );
            *drawn += 1;
        }
    };
    // Adds `count` spans starting in pixel column `col` and ending at `x1`
    // to the pending block, or starts a new one after drawing it.
    let merge = |block: &mut Option<(f32, f32, usize, SpanKind)>,
                 drawn: &mut usize,
                 col: f32,
                 x1: f32,
                 count: usize,
                 kind: SpanKind| {
        let bx1 = x1.max(col + 1.0);
        *block = match block.take() {
            Some((bx0, px1, n, k)) if col <= px1 + 0.5 => Some((bx0, bx1.max(px1), n + count, k)),
            mut other => {
                flush(&mut other, drawn);
                Some((col, bx1, count, kind))
            }
        };
    };
    let draw_span = |id: u32, x0: f32, x1: f32| {
        let s = &view.trace.spans[id as usize];
        let r = Rect::from_min_max(
            pos2(x0.max(area.left() - 1.0), y0),
            pos2(x1.min(area.right() + 1.0), y1),
        );
        let in_chain = hl.chain.binary_search(&id).is_ok();
        let fill = if hl.selected.is_some() && !in_chain {
            // Dim what is not part of the selection's chain.
            kind_color(s.kind).gamma_multiply(0.55)
        } else {
            kind_color(s.kind)
        };
        painter.rect_filled(r, CornerRadius::same(2), fill);
        if r.width() > 30.0 {
            let text_rect = r.shrink2(vec2(3.0, 0.0));
            let galley = painter.layout_no_wrap(s.name.to_string(), font.clone(), Color32::BLACK);
            let clipped = painter.with_clip_rect(text_rect.intersect(area));
            clipped.galley(
                pos2(text_rect.left(), r.center().y - galley.size().y / 2.0),
                galley,
                Color32::BLACK,
            );
        }
    };
    // Zoomed far out, the row's coarser level holds a few items per
    // pixel column: spans wide enough to draw, and runs to merge. Spans
    // added to a live row since its levels were made follow span by span.
    if let Some((level, covered)) = row.level_for(ns_per_px).filter(|_| state.levels) {
        for k in level.visible(t0, t1) {
            let (first, count) = (level.first[k] as usize, level.count[k] as usize);
            let Some(&id) = row.spans.get(first) else {
                continue;
            };
            let x0 = state.x_of(area, level.starts[k] as f64);
            let x1 = state.x_of(area, level.ends[k] as f64);
            if count == 1 && x1 - x0 >= 2.0 {
                flush(&mut block, &mut drawn);
                draw_span(id, x0, x1);
                drawn += 1;
                continue;
            }
            let kind = view.trace.spans[id as usize].kind;
            merge(&mut block, &mut drawn, x0.floor(), x1, count, kind);
        }
        i = i.max(covered);
    }
    while i < end {
        let id = row.spans[i];
        let s = &view.trace.spans[id as usize];
        let x0 = state.x_of(area, s.start_ns as f64);
        let x1 = state.x_of(area, s.end_ns() as f64);
        if x1 - x0 >= 2.0 {
            flush(&mut block, &mut drawn);
            draw_span(id, x0, x1);
            drawn += 1;
            i += 1;
        } else {
            // Everything ending inside this pixel column merges into it.
            let col = x0.floor();
            let col_end_t = state.start_ns + f64::from(col + 1.0 - area.left()) * ns_per_px;
            let next = row
                .first_ending_after(i, end, col_end_t.max(0.0) as u64)
                .max(i + 1);
            merge(&mut block, &mut drawn, col, x1, next - i, s.kind);
            i = next;
        }
    }
    flush(&mut block, &mut drawn);
    drawn
}

/// What the timeline reports back to the app.
#[derive(Debug, Default)]
pub struct TimelineOutput {
    /// A span was clicked or a search match moved to (Some(Some)), or
    /// empty space was clicked (Some(None)).
    pub clicked: Option<Option<u32>>,
    /// The user asked for the import report.
    pub show_import_report: bool,
    /// The area selection changed: a drag making it ended, or it was
    /// cleared.
    pub area_changed: bool,
}

/// The id of the search box (tests focus it).
pub fn search_box_id() -> egui::Id {
    egui::Id::unique("keel timeline search")
}

fn search_bar(ui: &mut Ui, state: &mut TimelineState, view: &TraceView, out: &mut TimelineOutput) {
    let search = &mut state.search;
    let mut moved = None;
    ui.horizontal(|ui| {
        ui.label("Search:");
        let resp = ui.add(
            egui::TextEdit::singleline(&mut search.query)
                .id(search_box_id())
                .hint_text("span name (Enter: next, Shift+Enter: previous)")
                .desired_width(260.0),
        );
        if search.focus {
            resp.request_focus();
            search.focus = false;
        }
        if search.stale || search.searched != search.query {
            search.update(view);
        }
        let (enter, shift, escape) = ui.input(|i| {
            (
                i.key_pressed(Key::Enter),
                i.modifiers.shift,
                i.key_pressed(Key::Escape),
            )
        });
        // Enter moves between matches while the box has (or had, until
        // this Enter took it away) the keyboard focus, or when no text
        // field has it.
        let typing_elsewhere = ui.ctx().text_edit_focused() && !resp.has_focus();
        let mut step = None;
        if enter && (search.box_focused || resp.has_focus() || !typing_elsewhere) {
            step = Some(!shift);
            resp.request_focus();
        }
        search.box_focused = resp.has_focus();
        if ui.button("Previous").clicked() {
            step = Some(false);
        }
        if ui.button("Next").clicked() {
            step = Some(true);
        }
        let count = match &mut search.whole {
            Some(w) => {
                w.step = step;
                match w.total {
                    _ if search.query.trim().is_empty() => String::new(),
                    0 => "no matches".to_owned(),
                    1 => "1 match in the file".to_owned(),
                    n => format!("{n} matches in the file"),
                }
            }
            None => {
                moved = step.and_then(|forward| search.step(forward));
                let n = search.matches.len();
                match (search.current, n) {
                    (_, 0) if search.query.trim().is_empty() => String::new(),
                    (_, 0) => "no matches".to_owned(),
                    (Some(k), _) => format!("{} of {n} matches", k + 1),
                    (None, 1) => "1 match".to_owned(),
                    (None, _) => format!("{n} matches"),
                }
            }
        };
        ui.label(count);
        if let Some(n) = search.on_disk.filter(|&n| n > 0)
            && !search.query.trim().is_empty()
        {
            ui.weak(format!(
                "(+{n} older, on disk: scroll back to step through them)"
            ));
        }
        if ui.button("Close").clicked() || (escape && resp.has_focus()) {
            search.open = false;
        }
    });
    if let Some(m) = moved {
        state.center_on(view, m);
        out.clicked = Some(Some(m));
    }
}

/// Shows the timeline of `view`.
pub fn show(
    ui: &mut Ui,
    state: &mut TimelineState,
    view: &TraceView,
    hl: Highlight<'_>,
    live: bool,
) -> TimelineOutput {
    let mut out = TimelineOutput::default();
    if ui.input_mut(|i| i.consume_key(Modifiers::COMMAND, Key::F)) {
        state.search.open = true;
        state.search.focus = true;
    }
    ui.horizontal(|ui| {
        if ui.button("Fit to view").clicked() {
            state.fit_pending = true;
        }
        ui.add_enabled(
            live,
            egui::Checkbox::new(&mut state.follow_live, "Follow live"),
        );
        egui::ComboBox::from_label("Flows")
            .selected_text(state.flows.label())
            .show_ui(ui, |ui| {
                for mode in FlowMode::ALL {
                    ui.selectable_value(&mut state.flows, mode, mode.label());
                }
            });
        if !state.search.open && ui.button("Search (Ctrl+F)").clicked() {
            state.search.open = true;
            state.search.focus = true;
        }
        let spans = match state.file_spans {
            Some(n) => format!("{n} spans in the file ({} read)", view.trace.spans.len()),
            None => format!("{} spans", view.trace.spans.len()),
        };
        ui.label(format!(
            "{} lanes, {spans}, {} flows | window {} | drawn {}",
            view.lanes.len(),
            view.trace.flows.len(),
            format_ns(state.width_ns),
            state.drawn
        ));
        if view.trace.dropped > 0 {
            ui.colored_label(
                Color32::YELLOW,
                format!("{} records dropped", view.trace.dropped),
            );
        }
        if let Some(r) = &view.trace.import {
            let skipped: u64 = r.skipped.iter().map(|(_, n)| n).sum();
            let text = format!("imported {} of {} events", r.imported, r.events);
            let b = if skipped > 0 {
                ui.button(
                    egui::RichText::new(format!("{text}, {skipped} skipped"))
                        .color(Color32::YELLOW),
                )
            } else {
                ui.button(text)
            };
            if b.on_hover_text("Show the import report").clicked() {
                out.show_import_report = true;
            }
        }
    });
    if let Some(line) = &state.live_status {
        ui.weak(line.as_str());
    }
    if state.search.open {
        search_bar(ui, state, view, &mut out);
    } else if state.search.stale {
        state.search.update(view);
    }
    ui.horizontal_wrapped(|ui| {
        for k in SpanKind::ALL {
            let (r, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
            ui.painter().rect_filled(r, 2.0, kind_color(k));
            ui.label(k.name());
        }
        ui.weak(
            "| W/S zoom, A/D pan, wheel scrolls, Ctrl+wheel zooms, drag pans, \
             Shift+drag selects an area (drag on the ruler: every lane), Esc clears",
        );
    });

    let avail = ui.available_size();
    let (rect, response) = ui.allocate_exact_size(avail, Sense::click_and_drag());
    let area = Rect::from_min_max(
        pos2(rect.left() + LABEL_W, rect.top() + RULER_H),
        rect.right_bottom(),
    );
    if state.fit_pending && area.width() > 10.0 {
        state.fit(view);
        state.fit_pending = false;
    } else if live && state.follow_live {
        state.follow(view);
    }
    // The groups as shown: the pinned lanes first, then each group
    // without them.
    state.pinned.retain(|&pos| pos < view.lanes.len());
    let groups = display_groups(view, &state.pinned);
    // A match in a collapsed group: open the group.
    if let Some(span) = state.reveal
        && let Some(s) = view.trace.spans.get(span as usize)
        && let Some(&pos) = view.lane_pos.get(s.lane as usize)
        && let Some(g) = groups.iter().find(|g| g.lanes.contains(&pos))
    {
        state.collapsed.remove(&g.label);
    }

    // Vertical layout: a header per group, then its lanes unless collapsed.
    let shown_rows: usize = groups
        .iter()
        .filter(|g| !state.collapsed.contains(&g.label))
        .flat_map(|g| g.lanes.iter().map(|&pos| &view.lanes[pos]))
        .map(|l| l.rows.len().max(1))
        .sum();
    let shown_lanes: usize = groups
        .iter()
        .filter(|g| !state.collapsed.contains(&g.label))
        .map(|g| g.lanes.len())
        .sum();
    let fixed = groups.len() as f32 * GROUP_H + LANE_GAP * shown_lanes as f32;
    let row_h = ((area.height() - fixed) / shown_rows.max(1) as f32).clamp(MIN_ROW_H, ROW_H);
    // Counter tracks below the groups: a header, then a track each.
    let counters_open = !view.trace.counters.is_empty() && !state.collapsed.contains(COUNTERS);
    let counters_h = if view.trace.counters.is_empty() {
        0.0
    } else if counters_open {
        GROUP_H + view.trace.counters.len() as f32 * (COUNTER_H + LANE_GAP)
    } else {
        GROUP_H
    };
    let content_h = fixed + shown_rows as f32 * row_h + counters_h;
    out.area_changed = area_input(ui, state, &response, rect, area);
    handle_input(ui, state, &response, area, content_h);

    // Offsets from the top of the content.
    let mut offsets: Vec<Option<f32>> = vec![None; view.lanes.len()];
    let mut headers = Vec::with_capacity(groups.len());
    let mut y = 0.0;
    for g in &groups {
        headers.push(y);
        y += GROUP_H;
        if state.collapsed.contains(&g.label) {
            continue;
        }
        for &pos in &g.lanes {
            offsets[pos] = Some(y);
            y += view.lanes[pos].rows.len().max(1) as f32 * row_h + LANE_GAP;
        }
    }
    if let Some(span) = state.reveal.take()
        && let Some(s) = view.trace.spans.get(span as usize)
        && let Some(&pos) = view.lane_pos.get(s.lane as usize)
        && let Some(Some(off)) = offsets.get(pos)
    {
        let d = f32::from(view.depth.get(span as usize).copied().unwrap_or(0));
        let y = off + d * row_h;
        if y < state.scroll_y || y + row_h > state.scroll_y + area.height() {
            state.scroll_y = y - area.height() / 3.0;
        }
    }
    state.scroll_y = state
        .scroll_y
        .clamp(0.0, (content_h - area.height()).max(0.0));
    let base = area.top() - state.scroll_y;

    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
    let lanes_clip = Rect::from_min_max(pos2(rect.left(), area.top()), rect.right_bottom());
    let lane_painter = ui.painter_at(lanes_clip);

    state.layout = Layout {
        area,
        lane_tops: offsets.iter().map(|o| o.map(|o| base + o)).collect(),
        row_h,
        content_h,
    };
    let mut drawn = 0;
    let mut toggled = None;
    let mut pin = None;
    for (gi, g) in groups.iter().enumerate() {
        let top = base + headers[gi];
        let collapsed = state.collapsed.contains(&g.label);
        if top + GROUP_H > area.top() && top < area.bottom() {
            let text = format!(
                "{} ({} lane{})",
                g.label,
                g.lanes.len(),
                if g.lanes.len() == 1 { "" } else { "s" }
            );
            let b = group_header(ui, &lane_painter, rect, top, collapsed, text);
            if b.on_hover_text(&g.label).clicked() {
                toggled = Some(g.label.clone());
            }
        }
        if collapsed {
            continue;
        }
        for &pos in &g.lanes {
            let lane = &view.lanes[pos];
            let Some(y) = state.layout.lane_tops[pos] else {
                continue;
            };
            let h = lane.rows.len().max(1) as f32 * row_h;
            if y + h < area.top() || y > area.bottom() {
                continue;
            }
            if pos % 2 == 1 {
                lane_painter.rect_filled(
                    Rect::from_min_max(
                        pos2(rect.left(), y - LANE_GAP / 2.0),
                        pos2(rect.right(), y + h + LANE_GAP / 2.0),
                    ),
                    0.0,
                    ui.visuals().faint_bg_color,
                );
            }
            if y >= area.top() {
                let label_rect =
                    Rect::from_min_size(pos2(rect.left() + 12.0, y), vec2(LABEL_W - 16.0, row_h));
                let pinned = state.pinned.contains(&pos);
                put_left(
                    ui,
                    label_rect,
                    egui::Label::new(egui::RichText::new(&lane.label).small().strong())
                        .truncate()
                        .sense(Sense::click()),
                )
                .on_hover_text(format!("{} (right-click to pin or unpin)", lane.label))
                .context_menu(|ui| {
                    let text = if pinned { "Unpin" } else { "Pin to top" };
                    if ui.button(text).clicked() {
                        pin = Some(pos);
                        ui.close();
                    }
                });
            }
            for (d, row) in lane.rows.iter().enumerate() {
                let ry = y + d as f32 * row_h;
                if ry + row_h < area.top() || ry > area.bottom() {
                    continue;
                }
                drawn += draw_row(ui, state, view, row, area, ry, hl);
            }
        }
    }
    if !view.trace.counters.is_empty() {
        let top = base + y;
        if top + GROUP_H > area.top() && top < area.bottom() {
            let n = view.trace.counters.len();
            let text = format!("{COUNTERS} ({n} track{})", if n == 1 { "" } else { "s" });
            if group_header(ui, &lane_painter, rect, top, !counters_open, text).clicked() {
                toggled = Some(COUNTERS.to_owned());
            }
        }
        if counters_open {
            let mut ty = top + GROUP_H;
            for c in &view.trace.counters {
                if ty + COUNTER_H >= area.top() && ty <= area.bottom() {
                    draw_counter(ui, &lane_painter, state, view, c, rect, area, ty);
                }
                ty += COUNTER_H + LANE_GAP;
            }
        }
    }
    if let Some(label) = toggled
        && !state.collapsed.remove(&label)
    {
        state.collapsed.insert(label);
    }
    if let Some(pos) = pin {
        state.toggle_pin(pos);
    }
    draw_ruler(ui, state, view, rect, area);
    if let Some(t) = state.memory_from {
        draw_memory_edge(ui, state, area, t);
    }
    state.drawn = drawn;
    draw_instants(ui, state, view, area);
    state.flows_drawn = match state.flows {
        FlowMode::Off => 0,
        mode => draw_flows(ui, state, view, area, hl, mode == FlowMode::All),
    };
    state.matches_drawn = draw_marks(ui, state, view, area, hl);
    if state.area_anchor.is_some()
        && let Some(pos) = response.interact_pointer_pos()
    {
        state.area = Some(area_selection(state, view, &offsets, area, pos));
    }
    // The analysis runs once the drag ends, not on every frame of it (a
    // window over millions of spans takes longer than a frame).
    if response.drag_stopped() && state.area_anchor.take().is_some() {
        out.area_changed = true;
    }
    draw_area(ui, state, view, rect, area);
    if content_h > area.height() {
        // Where the scrolled window lies.
        let frac = area.height() / content_h;
        let h = (area.height() * frac).max(12.0);
        let top = area.top() + (area.height() - h) * (state.scroll_y / (content_h - area.height()));
        painter.rect_filled(
            Rect::from_min_size(pos2(rect.right() - 5.0, top), vec2(4.0, h)),
            2.0,
            ui.visuals().weak_text_color().gamma_multiply(0.6),
        );
    }

    if let Some(pos) = response.hover_pos()
        && let Some(span) = state.hit(view, pos)
    {
        response
            .clone()
            .on_hover_ui_at_pointer(|ui| span_tooltip(ui, view, span));
    }
    if response.clicked() {
        out.clicked = Some(
            response
                .interact_pointer_pos()
                .and_then(|p| state.hit(view, p)),
        );
    }
    out
}

/// Adds `widget` in `rect`, left-aligned and vertically centred.
fn put_left(ui: &mut Ui, rect: Rect, widget: impl egui::Widget) -> Response {
    ui.scope_builder(
        egui::UiBuilder::new()
            .max_rect(rect)
            .layout(egui::Layout::left_to_right(egui::Align::Center)),
        |ui| ui.add(widget),
    )
    .inner
}

/// Zoom factor of one W or S press.
pub const KEY_ZOOM: f64 = 1.25;
/// Fraction of the view one A or D press pans.
pub const KEY_PAN: f64 = 0.1;

/// Zoom, pan and scroll from the keyboard and mouse (shared with the
/// memory view, which shows the same time window).
pub(crate) fn handle_input(
    ui: &Ui,
    state: &mut TimelineState,
    response: &Response,
    area: Rect,
    content_h: f32,
) {
    if response.dragged() && state.area_anchor.is_none() {
        let d = response.drag_delta();
        state.start_ns -= f64::from(d.x / area.width().max(1.0)) * state.width_ns;
        state.scroll_y -= d.y;
        state.follow_live = false;
    }
    let hover = response.hover_pos();
    let at = hover.map_or(state.start_ns + state.width_ns / 2.0, |p| {
        state.t_of(area, p.x.max(area.left()))
    });
    if hover.is_some() {
        let (scroll, zoom) = ui.input(|i| (i.smooth_scroll_delta(), i.zoom_delta()));
        if (f64::from(zoom) - 1.0).abs() > 1e-6 {
            state.zoom(f64::from(zoom), at);
        }
        if scroll.x != 0.0 {
            state.start_ns -= f64::from(scroll.x / area.width().max(1.0)) * state.width_ns;
        }
        if scroll.y != 0.0 {
            if content_h > area.height() {
                state.scroll_y -= scroll.y;
            } else {
                // Nothing to scroll: the wheel zooms.
                state.zoom((f64::from(scroll.y) * 0.003).exp(), at);
            }
        }
    }
    // W/A/S/D as in Perfetto and chrome://tracing (not while typing).
    if !ui.ctx().text_edit_focused() {
        let keys = ui.input(|i| {
            [Key::W, Key::S, Key::A, Key::D, Key::PageUp, Key::PageDown].map(|k| i.num_presses(k))
        });
        let [w, s, a, d, up, down] = keys.map(|n| n as i32);
        if w != s {
            state.zoom(KEY_ZOOM.powi(w - s), at);
        }
        if a != d {
            state.pan(KEY_PAN * f64::from(d - a));
            state.follow_live = false;
        }
        if up != down {
            state.scroll_y += (down - up) as f32 * area.height() * 0.8;
        }
    }
}

/// Starts an area selection (a drag with Shift held, or any drag that
/// starts on the ruler) and clears it on Esc; returns whether it was
/// cleared.
fn area_input(
    ui: &Ui,
    state: &mut TimelineState,
    response: &Response,
    rect: Rect,
    area: Rect,
) -> bool {
    // The anchor is where the button went down: a drag starts only once
    // the pointer has moved a few points from there.
    if response.drag_started()
        && let Some(p) = ui.input(|i| i.pointer.press_origin())
        && p.x >= area.left()
    {
        let on_ruler = p.y < area.top() && p.y >= rect.top();
        if on_ruler || ui.input(|i| i.modifiers.shift) {
            let t = state.t_of(area, p.x);
            let y = (!on_ruler).then(|| p.y - area.top() + state.scroll_y);
            state.area_anchor = Some((t, y));
        }
    }
    if state.area.is_some()
        && !ui.ctx().text_edit_focused()
        && ui.input(|i| i.key_pressed(Key::Escape))
    {
        state.area = None;
        state.area_anchor = None;
        return true;
    }
    false
}

/// The selection from the drag's anchor to `pos`: the lanes whose rows
/// the two heights span (every lane for a drag on the ruler), the time
/// between the two points.
fn area_selection(
    state: &TimelineState,
    view: &TraceView,
    offsets: &[Option<f32>],
    area: Rect,
    pos: Pos2,
) -> Selection {
    let Some((t_anchor, y_anchor)) = state.area_anchor else {
        return Selection::default();
    };
    let t = state.t_of(area, pos.x.clamp(area.left(), area.right()));
    let (t0, t1) = (t_anchor.min(t).max(0.0), t_anchor.max(t).max(0.0));
    let lanes = match y_anchor {
        None => (0..view.lanes.len())
            .filter(|&p| offsets[p].is_some())
            .collect(),
        Some(ya) => {
            let y = pos.y - area.top() + state.scroll_y;
            let (y0, y1) = (ya.min(y), ya.max(y));
            (0..view.lanes.len())
                .filter(|&p| {
                    offsets[p].is_some_and(|off| {
                        let h = view.lanes[p].rows.len().max(1) as f32 * state.layout.row_h;
                        off < y1 && off + h > y0
                    })
                })
                .collect()
        }
    };
    Selection {
        lanes,
        t0: t0 as u64,
        t1: t1.ceil() as u64,
    }
}

/// Shades the area selection: its window across the ruler and every
/// lane, brighter over the selected lanes, with its length on the ruler.
fn draw_area(ui: &Ui, state: &TimelineState, view: &TraceView, rect: Rect, area: Rect) {
    let Some(sel) = &state.area else {
        return;
    };
    let x0 = state.x_of(area, sel.t0 as f64).max(area.left());
    let x1 = state.x_of(area, sel.t1 as f64).min(area.right());
    if x1 < area.left() || x0 > area.right() {
        return;
    }
    let painter = ui.painter_at(Rect::from_min_max(
        pos2(area.left(), rect.top()),
        rect.right_bottom(),
    ));
    let accent = Color32::from_rgb(255, 214, 0);
    painter.rect_filled(
        Rect::from_min_max(pos2(x0, rect.top()), pos2(x1.max(x0 + 1.0), rect.bottom())),
        0.0,
        accent.gamma_multiply(0.06),
    );
    let lane_painter = ui.painter_at(area);
    for &pos in &sel.lanes {
        if let Some(Some(top)) = state.layout.lane_tops.get(pos) {
            let h =
                view.lanes.get(pos).map_or(1, |l| l.rows.len().max(1)) as f32 * state.layout.row_h;
            lane_painter.rect_filled(
                Rect::from_min_max(pos2(x0, *top), pos2(x1.max(x0 + 1.0), top + h)),
                0.0,
                accent.gamma_multiply(0.14),
            );
        }
    }
    for x in [x0, x1] {
        painter.line_segment(
            [pos2(x, rect.top()), pos2(x, rect.bottom())],
            Stroke::new(1.0, accent),
        );
    }
    painter.text(
        pos2((x0 + x1) / 2.0, area.top() - 2.0),
        Align2::CENTER_BOTTOM,
        format_ns(sel.len_ns() as f64),
        FontId::monospace(10.0),
        accent,
    );
}

/// A live session's edge between spans on disk and spans in memory.
fn draw_memory_edge(ui: &Ui, state: &TimelineState, area: Rect, t: u64) {
    let x = state.x_of(area, t as f64);
    if x < area.left() || x > area.right() {
        return;
    }
    let painter = ui.painter_at(area);
    let color = Color32::from_rgb(120, 170, 255);
    painter.line_segment(
        [pos2(x, area.top()), pos2(x, area.bottom())],
        Stroke::new(1.5, color),
    );
    painter.text(
        pos2(x + 4.0, area.top() + 2.0),
        Align2::LEFT_TOP,
        "\u{2190} on disk | in memory \u{2192}",
        egui::FontId::proportional(11.0),
        color,
    );
}

fn draw_ruler(ui: &Ui, state: &TimelineState, view: &TraceView, rect: Rect, area: Rect) {
    let painter = ui.painter_at(rect);
    let ruler = Rect::from_min_max(
        pos2(area.left(), rect.top()),
        pos2(rect.right(), area.top()),
    );
    painter.rect_filled(
        Rect::from_min_max(rect.left_top(), ruler.right_bottom()),
        0.0,
        ui.visuals().panel_fill,
    );
    // Times count from the trace's start.
    let origin = view.bounds.0 as f64;
    let step = nice_step(state.width_ns / f64::from((area.width() / 90.0).max(1.0)));
    let mut t = ((state.start_ns - origin) / step).floor() * step;
    let end = state.start_ns + state.width_ns - origin;
    let text = ui.visuals().text_color();
    let grid = ui.visuals().widgets.noninteractive.bg_stroke.color;
    while t <= end {
        let x = state.x_of(area, origin + t);
        if x >= area.left() {
            painter.line_segment(
                [pos2(x, ruler.bottom() - 6.0), pos2(x, ruler.bottom())],
                Stroke::new(1.0, text),
            );
            painter.line_segment(
                [pos2(x, area.top()), pos2(x, rect.bottom())],
                Stroke::new(1.0, grid.gamma_multiply(0.4)),
            );
            painter.text(
                pos2(x + 3.0, ruler.top() + 2.0),
                Align2::LEFT_TOP,
                format_ns(t),
                FontId::monospace(10.0),
                text,
            );
        }
        t += step;
    }
}

fn draw_instants(ui: &Ui, state: &TimelineState, view: &TraceView, area: Rect) {
    if view.trace.instants.len() > 50_000 {
        return;
    }
    let painter = ui.painter_at(area);
    for m in &view.trace.instants {
        let x = state.x_of(area, m.ts_ns as f64);
        if x < area.left() || x > area.right() {
            continue;
        }
        let Some(top) = state.row_top(view, m.lane, 0) else {
            continue;
        };
        let c = pos2(x, top + 4.0);
        painter.add(egui::Shape::convex_polygon(
            vec![
                c + vec2(0.0, -4.0),
                c + vec2(4.0, 0.0),
                c + vec2(0.0, 4.0),
                c + vec2(-4.0, 0.0),
            ],
            Color32::from_rgb(255, 235, 59),
            Stroke::new(1.0, Color32::BLACK),
        ));
    }
}

/// The screen position of flow `fi`'s two ends (at the middle of the row
/// of the span each end binds to).
fn flow_points(
    state: &TimelineState,
    view: &TraceView,
    area: Rect,
    fi: u32,
) -> Option<(Pos2, Pos2)> {
    let f = view.trace.flows.get(fi as usize)?;
    let (sa, sb) = view
        .flow_spans
        .get(fi as usize)
        .copied()
        .unwrap_or((None, None));
    let depth = |s: Option<u32>| {
        s.and_then(|s| view.depth.get(s as usize).copied())
            .unwrap_or(0)
    };
    let h = state.layout.row_h / 2.0;
    let ya = state.row_top(view, f.from.lane, depth(sa))? + h;
    let yb = state.row_top(view, f.to.lane, depth(sb))? + h;
    Some((
        pos2(state.x_of(area, f.from.ts_ns as f64), ya),
        pos2(state.x_of(area, f.to.ts_ns as f64), yb),
    ))
}

fn arrow(painter: &egui::Painter, pa: Pos2, pb: Pos2, stroke: Stroke) {
    painter.line_segment([pa, pb], stroke);
    let v = pb - pa;
    if v.length() < 8.0 {
        return;
    }
    let dir = v.normalized();
    let back = pb - dir * 6.0;
    let side = dir.rot90() * 3.0;
    painter.add(egui::Shape::convex_polygon(
        vec![pb, back + side, back - side],
        stroke.color,
        Stroke::NONE,
    ));
}

/// Draws the flows reaching into the window, merged per pixel: flows whose
/// ends fall on the same pixels are one line, so the drawing cost is
/// bounded by the screen, not by the flow count. Unless `all`, only when
/// at most [`READABLE_FLOWS`] reach into the window. The selection's chain
/// is drawn on top, thicker. Returns the lines drawn.
fn draw_flows(
    ui: &Ui,
    state: &TimelineState,
    view: &TraceView,
    area: Rect,
    hl: Highlight<'_>,
    all: bool,
) -> usize {
    let t0 = (state.start_ns - view.max_flow_len as f64).max(0.0) as u64;
    let t1 = (state.start_ns + state.width_ns).max(0.0) as u64;
    let a = view.flow_times.partition_point(|&t| t < t0);
    let mut b = view.flow_times.partition_point(|&t| t <= t1);
    if !all && b - a > READABLE_FLOWS {
        // Those that start before the window and end in it are counted
        // too: an overestimate, never a mesh.
        b = a;
    }
    let painter = ui.painter_at(area);
    let mut seen: std::collections::HashSet<(i32, i32, i32, i32, bool)> =
        std::collections::HashSet::new();
    let mut drawn = 0;
    let dim = hl.selected.is_some();
    for &fi in &view.flows_by_time[a..b] {
        let Some((pa, pb)) = flow_points(state, view, area, fi) else {
            continue;
        };
        if pa.x.max(pb.x) < area.left() || pa.x.min(pb.x) > area.right() {
            continue;
        }
        if pa.y.max(pb.y) < area.top() || pa.y.min(pb.y) > area.bottom() {
            continue;
        }
        let kind = view.trace.flows[fi as usize].kind;
        let key = (
            pa.x as i32,
            pa.y as i32,
            pb.x as i32,
            pb.y as i32,
            kind == FlowKind::Launch,
        );
        if !seen.insert(key) {
            continue;
        }
        let c = flow_color(kind);
        let c = if dim { c.gamma_multiply(0.35) } else { c };
        arrow(&painter, pa, pb, Stroke::new(1.2, c));
        drawn += 1;
    }
    for &fi in hl.chain_flows {
        if let Some((pa, pb)) = flow_points(state, view, area, fi) {
            arrow(&painter, pa, pb, Stroke::new(2.5, CHAIN));
            drawn += 1;
        }
    }
    drawn
}

/// The outline of the selection's flow chain.
pub const CHAIN: Color32 = Color32::from_rgb(255, 214, 0);
/// The most search matches looked at per frame to outline them.
pub const MAX_MARKS_SCANNED: usize = 200_000;
/// The outline of search matches.
pub const MATCH: Color32 = Color32::from_rgb(255, 64, 160);

/// Outlines search matches in the window (merged per pixel column and
/// row), the selection's chain and the selection. Returns the match
/// outlines drawn.
/// The positions in `starts` (sorted) of spans that reach into the
/// window: starting in it, or before it by at most `max_dur`.
fn reaching_window(state: &TimelineState, starts: &[u64], max_dur: u64) -> (usize, usize) {
    let t0 = (state.start_ns - max_dur as f64).max(0.0) as u64;
    let t1 = (state.start_ns + state.width_ns).max(0.0) as u64;
    (
        starts.partition_point(|&t| t < t0),
        starts.partition_point(|&t| t <= t1),
    )
}

fn draw_marks(
    ui: &Ui,
    state: &TimelineState,
    view: &TraceView,
    area: Rect,
    hl: Highlight<'_>,
) -> usize {
    let painter = ui.painter_at(area);
    let mut drawn = 0;
    let search = &state.search;
    if !search.matches.is_empty() {
        let (a, b) = reaching_window(state, &search.starts, search.max_dur);
        let mut seen = std::collections::HashSet::new();
        if b - a > MAX_MARKS_SCANNED {
            // Outlining costs a look at every match in the window: past
            // this many, say so instead of slowing every frame down.
            painter.text(
                area.right_top() + vec2(-6.0, 4.0),
                Align2::RIGHT_TOP,
                format!("{} matches in view: zoom in to see them outlined", b - a),
                FontId::proportional(11.0),
                MATCH,
            );
        }
        let scanned = if b - a > MAX_MARKS_SCANNED {
            &[][..]
        } else {
            &search.matches[a..b]
        };
        for &m in scanned {
            let Some(r) = state.span_rect(view, m) else {
                continue;
            };
            if !seen.insert((r.left() as i32, r.top() as i32)) {
                continue;
            }
            let r = if r.width() < 3.0 {
                Rect::from_center_size(r.center(), vec2(3.0, r.height()))
            } else {
                r
            };
            painter.rect_stroke(r, 2.0, Stroke::new(1.5, MATCH), egui::StrokeKind::Outside);
            drawn += 1;
        }
    }
    if let Some(ch) = hl.changes {
        // As the search matches, one outline per pixel.
        let (a, b) = reaching_window(state, &ch.starts, ch.max_dur);
        if b - a <= MAX_MARKS_SCANNED {
            let mut seen = std::collections::HashSet::new();
            for k in a..b {
                let Some(r) = state.span_rect(view, ch.spans[k]) else {
                    continue;
                };
                if r.width() < 2.0 || !seen.insert((r.left() as i32, r.top() as i32)) {
                    continue;
                }
                let color = if ch.slower[k] { SLOWER } else { FASTER };
                painter.rect_stroke(r, 2.0, Stroke::new(2.0, color), egui::StrokeKind::Inside);
                drawn += 1;
            }
        }
    }
    for &c in hl.chain {
        if Some(c) == hl.selected {
            continue;
        }
        if let Some(r) = state.span_rect(view, c) {
            painter.rect_stroke(r, 2.0, Stroke::new(2.0, CHAIN), egui::StrokeKind::Inside);
        }
    }
    if let Some(sel) = hl.selected
        && let Some(r) = state.span_rect(view, sel)
    {
        painter.rect_stroke(
            r,
            2.0,
            Stroke::new(2.0, Color32::WHITE),
            egui::StrokeKind::Inside,
        );
    }
    drawn
}

/// The hover tooltip of a span.
pub fn span_tooltip(ui: &mut Ui, view: &TraceView, span: u32) {
    let Some(s) = view.trace.spans.get(span as usize) else {
        return;
    };
    ui.strong(s.name.as_str());
    ui.label(format!("{} | {}", s.kind, format_ns(s.dur_ns as f64)));
    ui.label(format!(
        "start {} (from the trace's start)",
        format_ns(s.start_ns.saturating_sub(view.bounds.0) as f64)
    ));
    for (k, v) in &s.args {
        ui.label(format!("{k}: {v}"));
    }
}
