//! The timeline: one lane per device stream and per host thread, spans
//! coloured by kind, flow arrows, a time ruler, zoom (wheel), pan (drag),
//! hover tooltips and selection.
//!
//! Per frame the work depends on what is visible: every depth row is cut
//! to the visible time window by binary search ([`Row::visible`]), and a
//! run of spans thinner than a pixel is drawn as one block per pixel column
//! by jumping over it with one more binary search.

use egui::{
    Align2, Color32, CornerRadius, FontId, Pos2, Rect, Response, Sense, Stroke, Ui, pos2, vec2,
};
use keel::profiler::{FlowKind, SpanKind};

use crate::model::{Row, TraceView, format_ns};

/// Height of one depth row, points.
pub const ROW_H: f32 = 18.0;
/// Gap between lanes, points.
pub const LANE_GAP: f32 = 6.0;
/// Width of the lane label column, points.
pub const LABEL_W: f32 = 170.0;
/// Height of the time ruler, points.
pub const RULER_H: f32 = 22.0;
/// The most flows drawn in one frame (more: "zoom in to see flows").
pub const MAX_FLOWS: usize = 4_000;

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
    /// The span area (right of the labels, below the ruler).
    pub area: Rect,
    /// Top of every display lane.
    pub lane_tops: Vec<f32>,
    /// Height of one depth row (shrinks from [`ROW_H`] when lanes would
    /// not fit).
    pub row_h: f32,
}

/// The timeline's view state.
#[derive(Debug, Clone)]
pub struct TimelineState {
    /// Left edge, ns.
    pub start_ns: f64,
    /// Visible duration, ns.
    pub width_ns: f64,
    /// Keep the newest data in view while a live connection streams.
    pub follow_live: bool,
    /// Fit the whole trace on the next frame.
    pub fit_pending: bool,
    /// The last frame's layout.
    pub layout: Layout,
    /// Spans drawn last frame (merged blocks count once).
    pub drawn: usize,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            area: Rect::NOTHING,
            lane_tops: Vec::new(),
            row_h: ROW_H,
        }
    }
}

impl Default for TimelineState {
    fn default() -> Self {
        TimelineState {
            start_ns: 0.0,
            width_ns: 1e6,
            follow_live: true,
            fit_pending: true,
            layout: Layout::default(),
            drawn: 0,
        }
    }
}

impl TimelineState {
    /// Shows the whole trace.
    pub fn fit(&mut self, view: &TraceView) {
        let (lo, hi) = view.bounds;
        let pad = (hi - lo) as f64 * 0.02;
        self.start_ns = lo as f64 - pad;
        self.width_ns = ((hi - lo) as f64 + 2.0 * pad).max(1_000.0);
    }

    /// Shows the newest `width_ns` of the trace.
    pub fn follow(&mut self, view: &TraceView) {
        let hi = view.bounds.1 as f64;
        self.start_ns = hi - self.width_ns * 0.95;
    }

    fn x_of(&self, area: Rect, t: f64) -> f32 {
        area.left() + ((t - self.start_ns) / self.width_ns) as f32 * area.width()
    }

    fn t_of(&self, area: Rect, x: f32) -> f64 {
        self.start_ns + f64::from((x - area.left()) / area.width()) * self.width_ns
    }

    /// The screen rectangle of span `span` in the last frame, if visible.
    pub fn span_rect(&self, view: &TraceView, span: u32) -> Option<Rect> {
        let s = view.trace.spans.get(span as usize)?;
        let pos = *view.lane_pos.get(s.lane as usize)?;
        let top = *self.layout.lane_tops.get(pos)?;
        let d = f32::from(*view.depth.get(span as usize)?);
        let area = self.layout.area;
        let x0 = self.x_of(area, s.start_ns as f64).max(area.left());
        let x1 = self.x_of(area, s.end_ns() as f64).min(area.right());
        let h = self.layout.row_h;
        (x1 > x0)
            .then(|| Rect::from_min_max(pos2(x0, top + d * h), pos2(x1, top + (d + 1.0) * h - 1.0)))
    }

    /// The span under `pos` (with one pixel of slack), from the last layout.
    pub fn hit(&self, view: &TraceView, pos: Pos2) -> Option<u32> {
        let area = self.layout.area;
        if !area.contains(pos) {
            return None;
        }
        let lane = self
            .layout
            .lane_tops
            .iter()
            .rposition(|&top| top <= pos.y)?;
        let top = self.layout.lane_tops[lane];
        let row = ((pos.y - top) / self.layout.row_h) as usize;
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
fn draw_row(
    ui: &Ui,
    state: &TimelineState,
    view: &TraceView,
    row: &Row,
    area: Rect,
    y0: f32,
    selected: Option<u32>,
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
    while i < end {
        let s = &view.trace.spans[row.spans[i] as usize];
        let x0 = state.x_of(area, s.start_ns as f64);
        let x1 = state.x_of(area, s.end_ns() as f64);
        if x1 - x0 >= 2.0 {
            flush(&mut block, &mut drawn);
            let r = Rect::from_min_max(
                pos2(x0.max(area.left() - 1.0), y0),
                pos2(x1.min(area.right() + 1.0), y1),
            );
            painter.rect_filled(r, CornerRadius::same(2), kind_color(s.kind));
            if selected == Some(row.spans[i]) {
                painter.rect_stroke(
                    r,
                    2.0,
                    Stroke::new(2.0, Color32::WHITE),
                    egui::StrokeKind::Inside,
                );
            }
            if r.width() > 30.0 {
                let text_rect = r.shrink2(vec2(3.0, 0.0));
                let galley = painter.layout_no_wrap(s.name.clone(), font.clone(), Color32::BLACK);
                let clipped = painter.with_clip_rect(text_rect.intersect(area));
                clipped.galley(
                    pos2(text_rect.left(), r.center().y - galley.size().y / 2.0),
                    galley,
                    Color32::BLACK,
                );
            }
            drawn += 1;
            i += 1;
        } else {
            // Everything ending inside this pixel column merges into it.
            let col = x0.floor();
            let col_end_t = state.start_ns + f64::from(col + 1.0 - area.left()) * ns_per_px;
            let next = row
                .first_ending_after(i, end, col_end_t.max(0.0) as u64)
                .max(i + 1);
            let count = next - i;
            let bx1 = x1.max(col + 1.0);
            block = match block {
                Some((bx0, px1, n, k)) if col <= px1 + 0.5 => {
                    Some((bx0, bx1.max(px1), n + count, k))
                }
                mut other => {
                    flush(&mut other, &mut drawn);
                    Some((col, bx1, count, s.kind))
                }
            };
            i = next;
        }
    }
    flush(&mut block, &mut drawn);
    drawn
}

/// What the timeline reports back to the app.
#[derive(Debug, Default)]
pub struct TimelineOutput {
    /// A span was clicked (Some) or empty space was clicked (Some(None)).
    pub clicked: Option<Option<u32>>,
}

/// Shows the timeline of `view`.
pub fn show(
    ui: &mut Ui,
    state: &mut TimelineState,
    view: &TraceView,
    selected: Option<u32>,
    live: bool,
) -> TimelineOutput {
    let mut out = TimelineOutput::default();
    ui.horizontal(|ui| {
        if ui.button("Fit to view").clicked() {
            state.fit_pending = true;
        }
        ui.add_enabled(
            live,
            egui::Checkbox::new(&mut state.follow_live, "Follow live"),
        );
        ui.label(format!(
            "{} lanes, {} spans, {} flows | window {} | drawn {}",
            view.lanes.len(),
            view.trace.spans.len(),
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
    });
    ui.horizontal_wrapped(|ui| {
        for k in SpanKind::ALL {
            let (r, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
            ui.painter().rect_filled(r, 2.0, kind_color(k));
            ui.label(k.name());
        }
    });

    let rows: usize = view.lanes.iter().map(|l| l.rows.len().max(1)).sum();
    let avail = ui.available_size();
    // Shrink rows (down to 8 points) so that every lane fits.
    let room = avail.y - RULER_H - LANE_GAP * view.lanes.len() as f32;
    let row_h = (room / rows.max(1) as f32).clamp(8.0, ROW_H);
    let lanes_h = rows as f32 * row_h + LANE_GAP * view.lanes.len() as f32;
    let height = (RULER_H + lanes_h).max(avail.y);
    let (rect, response) = ui.allocate_exact_size(vec2(avail.x, height), Sense::click_and_drag());
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
    handle_input(ui, state, &response, area);

    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
    draw_ruler(ui, state, rect, area);

    state.layout.row_h = row_h;
    // Lanes.
    let mut y = area.top();
    let mut tops = Vec::with_capacity(view.lanes.len());
    let mut drawn = 0;
    for (li, lane) in view.lanes.iter().enumerate() {
        tops.push(y);
        let h = lane.rows.len().max(1) as f32 * row_h;
        if li % 2 == 1 {
            painter.rect_filled(
                Rect::from_min_max(
                    pos2(rect.left(), y - LANE_GAP / 2.0),
                    pos2(rect.right(), y + h + LANE_GAP / 2.0),
                ),
                0.0,
                ui.visuals().faint_bg_color,
            );
        }
        let label_rect =
            Rect::from_min_size(pos2(rect.left() + 4.0, y), vec2(LABEL_W - 8.0, row_h));
        ui.put(
            label_rect,
            egui::Label::new(egui::RichText::new(&lane.label).small().strong()).truncate(),
        );
        for (d, row) in lane.rows.iter().enumerate() {
            drawn += draw_row(ui, state, view, row, area, y + d as f32 * row_h, selected);
        }
        y += h + LANE_GAP;
    }
    state.layout = Layout {
        area,
        lane_tops: tops,
        row_h,
    };
    state.drawn = drawn;
    draw_instants(ui, state, view, area);
    draw_flows(ui, state, view, area);

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

fn handle_input(ui: &Ui, state: &mut TimelineState, response: &Response, area: Rect) {
    if response.dragged() {
        let dx = response.drag_delta().x;
        state.start_ns -= f64::from(dx / area.width().max(1.0)) * state.width_ns;
        state.follow_live = false;
    }
    if let Some(pos) = response.hover_pos() {
        let (scroll, zoom) = ui.input(|i| (i.smooth_scroll_delta(), i.zoom_delta()));
        let factor = f64::from(zoom) * (f64::from(scroll.y) * 0.003).exp();
        if (factor - 1.0).abs() > 1e-6 {
            let t = state.t_of(area, pos.x.max(area.left()));
            let w = (state.width_ns / factor).clamp(10.0, 1e13);
            state.start_ns = t - (t - state.start_ns) * (w / state.width_ns);
            state.width_ns = w;
        }
        if scroll.x != 0.0 {
            state.start_ns -= f64::from(scroll.x / area.width().max(1.0)) * state.width_ns;
        }
    }
}

fn draw_ruler(ui: &Ui, state: &TimelineState, rect: Rect, area: Rect) {
    let painter = ui.painter_at(rect);
    let ruler = Rect::from_min_max(
        pos2(area.left(), rect.top()),
        pos2(rect.right(), area.top()),
    );
    painter.rect_filled(ruler, 0.0, ui.visuals().panel_fill);
    let step = nice_step(state.width_ns / f64::from((area.width() / 90.0).max(1.0)));
    let mut t = (state.start_ns / step).floor() * step;
    let end = state.start_ns + state.width_ns;
    let text = ui.visuals().text_color();
    let grid = ui.visuals().widgets.noninteractive.bg_stroke.color;
    while t <= end {
        let x = state.x_of(area, t);
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
        let Some(&pos) = view.lane_pos.get(m.lane as usize) else {
            continue;
        };
        let Some(&top) = state.layout.lane_tops.get(pos) else {
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

fn draw_flows(ui: &Ui, state: &TimelineState, view: &TraceView, area: Rect) {
    let t0 = (state.start_ns - view.max_flow_len as f64).max(0.0) as u64;
    let t1 = (state.start_ns + state.width_ns).max(0.0) as u64;
    let a = view.flow_times.partition_point(|&t| t < t0);
    let b = view.flow_times.partition_point(|&t| t <= t1);
    if b.saturating_sub(a) > MAX_FLOWS {
        ui.painter().text(
            area.right_top() + vec2(-6.0, 4.0),
            Align2::RIGHT_TOP,
            "zoom in to see flows",
            FontId::proportional(11.0),
            ui.visuals().weak_text_color(),
        );
        return;
    }
    let painter = ui.painter_at(area);
    let y_of = |lane: u32| -> Option<f32> {
        let pos = *view.lane_pos.get(lane as usize)?;
        Some(*state.layout.lane_tops.get(pos)? + state.layout.row_h / 2.0)
    };
    for &fi in &view.flows_by_time[a..b] {
        let f = &view.trace.flows[fi as usize];
        let (Some(ya), Some(yb)) = (y_of(f.from.lane), y_of(f.to.lane)) else {
            continue;
        };
        let pa = pos2(state.x_of(area, f.from.ts_ns as f64), ya);
        let pb = pos2(state.x_of(area, f.to.ts_ns as f64), yb);
        if pa.x.max(pb.x) < area.left() || pa.x.min(pb.x) > area.right() {
            continue;
        }
        let c = flow_color(f.kind);
        let stroke = Stroke::new(1.2, c);
        painter.line_segment([pa, pb], stroke);
        let dir = (pb - pa).normalized();
        if dir.is_finite() && dir != egui::Vec2::ZERO {
            let back = pb - dir * 6.0;
            let side = dir.rot90() * 3.0;
            painter.add(egui::Shape::convex_polygon(
                vec![pb, back + side, back - side],
                c,
                Stroke::NONE,
            ));
        }
    }
}

/// The hover tooltip of a span.
pub fn span_tooltip(ui: &mut Ui, view: &TraceView, span: u32) {
    let Some(s) = view.trace.spans.get(span as usize) else {
        return;
    };
    ui.strong(&s.name);
    ui.label(format!("{} | {}", s.kind, format_ns(s.dur_ns as f64)));
    ui.label(format!("start {}", format_ns(s.start_ns as f64)));
    for (k, v) in &s.args {
        ui.label(format!("{k}: {v}"));
    }
}
