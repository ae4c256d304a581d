//! The memory snapshot view: a PyTorch memory snapshot (the pickle
//! `torch.cuda.memory._dump_snapshot` writes), as PyTorch's memory viewer
//! shows it but with no browser and no size limit: per device the active
//! memory timeline (allocated and reserved bytes after every allocator
//! action), the allocator's segments and blocks at a chosen point of the
//! history (a click on the timeline, the slider, or "peak"), each block's
//! stack frames (on hover, and in full once clicked), and the largest
//! blocks alive there (at the peak until another point is picked). When a
//! profiler trace of the same run is open too (same clock: Kineto's epoch
//! times), a block names the operator that allocated it and a click shows
//! it on the timeline.
//!
//! The numbers come from [`keel_trace::snapshot`]; this panel draws them.
//! The curves are cut to a few thousand points (each bucket's lowest and
//! highest value) once per snapshot, so a frame costs the same for ten
//! thousand entries as for ten million.

use egui::{Align2, Color32, FontId, Rect, Sense, Stroke, Ui, pos2, vec2};
use egui_plot::{Line, Plot, VLine};
use keel::profiler::BlockState as MapState;
use keel_trace::snapshot::{
    AllocatorState, BlockAt, BlockState, Snapshot, Timeline, TraceEntry, entry_at, operator_at,
    short_frames, state_at, timelines,
};

use crate::panels::memory::{SEGMENT_H, block_color, format_bytes};
use crate::view::{TraceView, format_ns};

/// Points per curve after cutting (a bucket's low and high each).
const CURVE_POINTS: usize = 4_000;
/// Blocks listed as the largest at the peak.
pub const TOP_BLOCKS: usize = 20;
/// Frames shown for a block.
const FRAMES: usize = 12;

/// A loaded snapshot and what is computed once from it.
#[derive(Debug)]
pub struct SnapshotView {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Where it came from (the file's path).
    pub source: String,
    /// Per device with a history, its curves.
    pub timelines: Vec<Timeline>,
    /// Per device (as [`Self::timelines`]), the cut curves: (x in ms
    /// from the history's first entry, allocated, reserved) per point.
    curves: Vec<Vec<[f64; 3]>>,
}

impl SnapshotView {
    /// Computes the curves and the peaks' largest blocks of `snapshot`.
    pub fn new(snapshot: Snapshot, source: impl Into<String>) -> SnapshotView {
        let timelines: Vec<Timeline> = timelines(&snapshot);
        let curves = timelines.iter().map(|t| cut(&snapshot, t)).collect();
        SnapshotView {
            snapshot,
            source: source.into(),
            timelines,
            curves,
        }
    }

    /// The history's entries of `device`.
    fn entries(&self, device: usize) -> &[TraceEntry] {
        self.snapshot
            .device_traces
            .get(device)
            .map_or(&[][..], Vec::as_slice)
    }

    /// The x of entry `i` of `device` ([`entry_x`]).
    fn x_of(&self, device: usize, i: usize) -> f64 {
        entry_x(self.entries(device), i)
    }

    /// The last entry of `device` at or before `x` (see [`entry_x`]).
    fn entry_at_x(&self, device: usize, x: f64) -> Option<usize> {
        let entries = self.entries(device);
        match entries.first().and_then(|e| e.time_us) {
            Some(t0) => entry_at(&self.snapshot, device, t0 + (x * 1e3).floor() as i64),
            // No times: x counts entries.
            None => (x >= 0.0).then(|| (x as usize).min(entries.len().saturating_sub(1))),
        }
    }
}

/// The x of entry `i` of a history: ms from its first entry, or the
/// entry's index when the snapshot has no times.
fn entry_x(entries: &[TraceEntry], i: usize) -> f64 {
    match (
        entries.first().and_then(|f| f.time_us),
        entries.get(i).and_then(|x| x.time_us),
    ) {
        (Some(t0), Some(t)) => (t - t0) as f64 / 1e3,
        _ => i as f64,
    }
}

/// The curves of `t` cut to about [`CURVE_POINTS`] points: per bucket of
/// entries, the points of its lowest and highest allocated value (in
/// entry order), with the reserved value at each.
fn cut(s: &Snapshot, t: &Timeline) -> Vec<[f64; 3]> {
    let entries = s.device_traces.get(t.device).map_or(&[][..], Vec::as_slice);
    let x = |i: usize| entry_x(entries, i);
    let n = t.allocated.len();
    let mut out = Vec::with_capacity(CURVE_POINTS + 2);
    out.push([x(0), t.initial_allocated as f64, t.initial_reserved as f64]);
    let per = n.div_ceil(CURVE_POINTS / 2).max(1);
    let mut i = 0;
    while i < n {
        let end = (i + per).min(n);
        let lo = (i..end).min_by_key(|&k| t.allocated[k]).unwrap_or(i);
        let hi = (i..end).max_by_key(|&k| t.allocated[k]).unwrap_or(i);
        for k in if lo <= hi { [lo, hi] } else { [hi, lo] } {
            out.push([x(k), t.allocated[k] as f64, t.reserved[k] as f64]);
        }
        i = end;
    }
    out
}

/// The view's state.
#[derive(Debug, Default)]
pub struct SnapshotState {
    /// Position in [`SnapshotView::timelines`] of the device shown.
    pub device: usize,
    /// The entry the map shows the allocator after (`None`: the peak,
    /// until the user picks another point).
    pub cursor: Option<usize>,
    /// The allocator at [`Self::cursor`] (moved with `seek`).
    state: Option<AllocatorState>,
    /// The block clicked (in the map or the table), shown in full.
    pub picked: Option<BlockAt>,
}

impl SnapshotState {
    /// Forgets the device and cursor (a new snapshot).
    pub fn reset(&mut self) {
        *self = SnapshotState::default();
    }
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotAction {
    /// Show this span (an operator that allocated a block) on the
    /// timeline.
    ShowSpan(u32),
}

/// The operator of `trace` that allocated a block: the innermost host
/// operator span around the block's `alloc` entry, on the trace's clock.
fn operator_of(
    view: &SnapshotView,
    device: usize,
    b: &BlockAt,
    trace: Option<&TraceView>,
) -> Option<u32> {
    let trace = trace?;
    let origin = trace.trace.origin_ns?;
    let time = view.entries(device).get(b.alloc?)?.time_us?;
    operator_at(&trace.trace, origin, time)
}

/// Shows `view`; returns what the user asked for.
pub fn show(
    ui: &mut Ui,
    state: &mut SnapshotState,
    view: &SnapshotView,
    trace: Option<&TraceView>,
) -> Option<SnapshotAction> {
    let mut action = None;
    if view.timelines.is_empty() {
        ui.label(format!(
            "{}: {} segments and no allocator history (the snapshot was taken without \
             `torch.cuda.memory._record_memory_history`)",
            view.source,
            view.snapshot.segments.len()
        ));
        return None;
    }
    state.device = state.device.min(view.timelines.len() - 1);
    let t = &view.timelines[state.device];
    let device = t.device;
    let entries = view.entries(device).len();
    ui.horizontal(|ui| {
        ui.strong("Memory snapshot");
        ui.label(&view.source);
        ui.separator();
        egui::ComboBox::from_label("device")
            .selected_text(format!("cuda:{device}"))
            .show_ui(ui, |ui| {
                for (k, tl) in view.timelines.iter().enumerate() {
                    if ui
                        .selectable_label(k == state.device, format!("cuda:{}", tl.device))
                        .clicked()
                    {
                        state.device = k;
                        state.cursor = None;
                        state.state = None;
                    }
                }
            });
        ui.label(format!(
            "{entries} allocator actions, peak {} allocated",
            format_bytes(t.peak.bytes.max(0) as u64)
        ));
        if ui.button("Go to peak").clicked() {
            state.cursor = None;
        }
    });
    let peak_entry = t.peak.entry;
    let cursor = state.cursor.or(peak_entry);
    // The curves; a click picks the point of the history.
    let curve = &view.curves[state.device];
    let gib = 1024.0 * 1024.0 * 1024.0;
    let allocated: Vec<[f64; 2]> = curve.iter().map(|p| [p[0], p[1] / gib]).collect();
    let reserved: Vec<[f64; 2]> = curve.iter().map(|p| [p[0], p[2] / gib]).collect();
    let cursor_x = cursor.map_or(0.0, |i| view.x_of(device, i));
    let timed = view
        .entries(device)
        .first()
        .is_some_and(|e| e.time_us.is_some());
    let plot = Plot::new("snapshot timeline")
        .height(170.0)
        .x_axis_label(if timed {
            "ms from the first action"
        } else {
            "action"
        })
        .y_axis_label("GiB")
        .allow_scroll(false)
        .legend(egui_plot::Legend::default())
        .show(ui, |p| {
            p.line(Line::new("allocated", allocated).color(crate::panels::memory::ALLOCATED));
            p.line(Line::new("reserved", reserved).color(crate::panels::memory::RESERVED));
            p.vline(VLine::new("shown", cursor_x).color(Color32::from_rgb(255, 214, 0)));
            p.pointer_coordinate()
        });
    if plot.response.clicked()
        && let Some(pt) = plot.inner
    {
        state.cursor = view.entry_at_x(device, pt.x);
        if state.cursor.is_none() {
            state.cursor = Some(0);
        }
    }
    let mut pick = cursor.unwrap_or(0);
    ui.horizontal(|ui| {
        let label = ui.label("after action");
        let last = entries.saturating_sub(1);
        if ui
            .add(
                egui::Slider::new(&mut pick, 0..=last)
                    .clamping(egui::SliderClamping::Always)
                    .show_value(false),
            )
            .labelled_by(label.id)
            .changed()
        {
            state.cursor = Some(pick);
        }
        if let Some(e) = cursor.and_then(|i| view.entries(device).get(i)) {
            ui.label(format!(
                "{pick}: {} of {} at {}{}",
                e.action.name(),
                format_bytes(e.size),
                format_ns(view.x_of(device, pick) * 1e6),
                if Some(pick) == peak_entry {
                    " (the peak)"
                } else {
                    ""
                }
            ));
        }
    });
    // The allocator at the cursor, moved from where it was.
    let cursor = state.cursor.or(peak_entry);
    match &mut state.state {
        Some(s) if s.device() == device => {
            if s.after() != cursor {
                s.seek(&view.snapshot, cursor);
            }
        }
        slot => *slot = Some(state_at(&view.snapshot, device, cursor)),
    }
    let Some(alloc) = &state.state else {
        return None;
    };
    ui.separator();
    let mut picked = state.picked;
    ui.columns(2, |cols| {
        segment_map(&mut cols[0], view, device, alloc, trace, &mut picked);
        if let Some(b) = picked
            && let Some(a) = block_details(&mut cols[1], view, device, &b, trace)
        {
            action = Some(a);
        }
        let top = alloc.largest(TOP_BLOCKS);
        let title = if cursor == peak_entry {
            "Largest blocks alive at the peak"
        } else {
            "Largest blocks alive at this point"
        };
        if let Some(a) = top_blocks(&mut cols[1], view, title, &top, device, trace, &mut picked) {
            action = Some(a);
        }
    });
    state.picked = picked;
    action
}

/// The picked block in full: where it lies, who allocated it and when, the
/// operator (a link to it on the timeline) and every frame.
fn block_details(
    ui: &mut Ui,
    view: &SnapshotView,
    device: usize,
    b: &BlockAt,
    trace: Option<&TraceView>,
) -> Option<SnapshotAction> {
    let mut action = None;
    ui.strong(format!("Block {:#x}", b.address));
    ui.label(format!(
        "{}: {} (requested {}), stream {}",
        b.state.name(),
        format_bytes(b.size),
        format_bytes(b.requested),
        b.stream
    ));
    match b.alloc {
        Some(i) => {
            ui.label(format!(
                "allocated by action {i} at {}",
                format_ns(view.x_of(device, i) * 1e6)
            ));
        }
        None => {
            ui.label("allocated before the history begins");
        }
    }
    if let (Some(tr), Some(span)) = (trace, operator_of(view, device, b, trace)) {
        ui.horizontal(|ui| {
            ui.label("in operator");
            let name = crate::analysis::short(&tr.trace.spans[span as usize].name, 60);
            if ui
                .link(name)
                .on_hover_text("show it on the timeline")
                .clicked()
            {
                action = Some(SnapshotAction::ShowSpan(span));
            }
        });
    }
    egui::ScrollArea::vertical()
        .id_salt("snapshot frames")
        .max_height(160.0)
        .show(ui, |ui| {
            let frames = short_frames(&view.snapshot, b.stack, usize::MAX);
            if frames.is_empty() {
                ui.weak("(no frames recorded)");
            }
            for f in frames {
                ui.monospace(f);
            }
        });
    ui.separator();
    action
}

fn block_tip(
    ui: &mut Ui,
    view: &SnapshotView,
    device: usize,
    b: &BlockAt,
    trace: Option<&TraceView>,
) {
    ui.label(format!(
        "{} at {:#x}: {} (requested {}), stream {}",
        b.state.name(),
        b.address,
        format_bytes(b.size),
        format_bytes(b.requested),
        b.stream
    ));
    if let Some(i) = b.alloc {
        ui.label(format!(
            "allocated by action {i} at {}",
            format_ns(view.x_of(device, i) * 1e6)
        ));
    }
    if let (Some(tr), Some(span)) = (trace, operator_of(view, device, b, trace)) {
        ui.label(format!(
            "in operator {} (click the block, then the link)",
            tr.trace.spans[span as usize].name
        ));
    }
    for f in short_frames(&view.snapshot, b.stack, FRAMES) {
        ui.monospace(f);
    }
}

fn segment_map(
    ui: &mut Ui,
    view: &SnapshotView,
    device: usize,
    alloc: &AllocatorState,
    trace: Option<&TraceView>,
    picked: &mut Option<BlockAt>,
) {
    let segments = alloc.segments();
    ui.label(format!(
        "{} segments: {} reserved, {} allocated",
        segments.len(),
        format_bytes(alloc.reserved_bytes()),
        format_bytes(alloc.active_bytes())
    ));
    egui::ScrollArea::vertical()
        .id_salt("snapshot segments")
        .auto_shrink([false, false])
        .show_rows(ui, SEGMENT_H + 2.0, segments.len(), |ui, rows| {
            for seg in &segments[rows] {
                let w = ui.available_width().max(200.0);
                let (rect, response) = ui.allocate_exact_size(vec2(w, SEGMENT_H), Sense::click());
                let painter = ui.painter_at(rect);
                let label_w = 150.0;
                painter.text(
                    pos2(rect.left(), rect.center().y),
                    Align2::LEFT_CENTER,
                    format!("{:#x} {}", seg.address, format_bytes(seg.total_size)),
                    FontId::monospace(9.0),
                    ui.visuals().text_color(),
                );
                let bar = Rect::from_min_max(
                    pos2(rect.left() + label_w, rect.top()),
                    rect.right_bottom(),
                );
                let scale = bar.width() / seg.total_size.max(1) as f32;
                let hover = response.hover_pos();
                let mut hovered = None;
                for b in &seg.blocks {
                    let x0 = bar.left() + (b.address.saturating_sub(seg.address)) as f32 * scale;
                    let r = Rect::from_min_max(
                        pos2(x0, bar.top()),
                        pos2((x0 + b.size as f32 * scale).max(x0 + 1.0), bar.bottom()),
                    );
                    let color = if b.state == BlockState::Inactive {
                        block_color(MapState::Free, None)
                    } else {
                        block_color(MapState::Active, Some(b.stream))
                    };
                    painter.rect_filled(r, 0.0, color);
                    if hover.is_some_and(|p| r.contains(p)) {
                        hovered = Some(*b);
                        painter.rect_stroke(
                            r,
                            0.0,
                            Stroke::new(1.5, Color32::WHITE),
                            egui::StrokeKind::Inside,
                        );
                    }
                }
                if let Some(b) = hovered {
                    if response.clicked() {
                        *picked = Some(b);
                    }
                    response.on_hover_ui_at_pointer(|ui| block_tip(ui, view, device, &b, trace));
                }
            }
        });
}

#[allow(clippy::too_many_arguments)]
fn top_blocks(
    ui: &mut Ui,
    view: &SnapshotView,
    title: &str,
    top: &[BlockAt],
    device: usize,
    trace: Option<&TraceView>,
    picked: &mut Option<BlockAt>,
) -> Option<SnapshotAction> {
    let mut action = None;
    ui.label(format!("{title} ({})", top.len()));
    egui::ScrollArea::vertical()
        .id_salt("snapshot top blocks")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            egui::Grid::new("snapshot top grid")
                .striped(true)
                .num_columns(3)
                .show(ui, |ui| {
                    for h in ["size", "allocated in", "operator"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for b in top {
                        let size = ui
                            .add(egui::Label::new(format_bytes(b.size)).sense(Sense::click()))
                            .on_hover_ui(|ui| block_tip(ui, view, device, b, trace));
                        if size.clicked() {
                            *picked = Some(*b);
                        }
                        let frame = short_frames(&view.snapshot, b.stack, 1)
                            .into_iter()
                            .next()
                            .unwrap_or_else(|| "(no frames)".to_owned());
                        ui.label(crate::analysis::short(&frame, 48))
                            .on_hover_ui(|ui| block_tip(ui, view, device, b, trace));
                        match (trace, operator_of(view, device, b, trace)) {
                            (Some(tr), Some(span)) => {
                                let name =
                                    crate::analysis::short(&tr.trace.spans[span as usize].name, 36);
                                if ui
                                    .link(name)
                                    .on_hover_text("show it on the timeline")
                                    .clicked()
                                {
                                    action = Some(SnapshotAction::ShowSpan(span));
                                }
                            }
                            _ => {
                                ui.weak("-");
                            }
                        }
                        ui.end_row();
                    }
                });
        });
    action
}
