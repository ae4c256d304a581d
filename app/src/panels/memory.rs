//! The memory view: per device, the caching allocator's two curves
//! (allocated and reserved bytes) on the timeline's time axis, and below
//! them the segment map at the time under the cursor, in the manner of
//! PyTorch's memory visualiser but live: one row per segment, its blocks
//! as ranges coloured by state (active in its stream's colour, free
//! cached ranges grey), with a hover tooltip (address, size, stream, since
//! when).
//!
//! The time window is the timeline's ([`TimelineState`]), so zooming or
//! panning here moves the timeline too, with the same keys and mouse
//! (W/S zoom, A/D pan, drag, Ctrl+wheel). The cursor follows the pointer
//! over the curves; a click pins it (the map stays at that time while the
//! pointer moves on), another click follows the pointer again.
//!
//! Per frame the curves cost what is visible (points found by binary
//! search, merged per pixel column); the map is rebuilt incrementally as
//! the cursor moves forward or a live trace grows
//! ([`MemoryMap::seek`]), and only when its time changes.

use egui::{Align2, Color32, FontId, Rect, Sense, Stroke, Ui, pos2, vec2};
use keel::profiler::{
    ALLOCATED_COUNTER, BlockState, Counter, MemoryMap, RESERVED_COUNTER, SegmentRow,
};

use crate::panels::timeline::{LABEL_W, TimelineState, handle_input};
use crate::view::{TraceView, format_ns};

/// Height of one device's curve strip, points.
pub const CURVE_H: f32 = 80.0;
/// Height of one segment row, points.
pub const SEGMENT_H: f32 = 16.0;
/// The colour of the allocated curve.
pub const ALLOCATED: Color32 = Color32::from_rgb(66, 133, 244);
/// The colour of the reserved curve.
pub const RESERVED: Color32 = Color32::from_rgb(255, 152, 0);
/// The colour of free (cached) ranges.
pub const FREE: Color32 = Color32::from_rgb(97, 97, 97);

/// Colours of active blocks, one per stream (by stream id).
const STREAMS: [Color32; 8] = [
    Color32::from_rgb(66, 133, 244),
    Color32::from_rgb(52, 168, 83),
    Color32::from_rgb(171, 71, 188),
    Color32::from_rgb(0, 172, 193),
    Color32::from_rgb(251, 188, 5),
    Color32::from_rgb(234, 67, 53),
    Color32::from_rgb(121, 85, 72),
    Color32::from_rgb(233, 30, 99),
];

/// The colour of a block: active blocks by stream, free ranges grey.
pub fn block_color(state: BlockState, stream: Option<i64>) -> Color32 {
    match (state, stream) {
        (BlockState::Free, _) => FREE,
        (BlockState::Active, None) => STREAMS[0],
        (BlockState::Active, Some(s)) => STREAMS[s.rem_euclid(STREAMS.len() as i64) as usize],
    }
}

/// Bytes as a short text (`512 B`, `1.50 KiB`, `2.00 MiB`, `3.00 GiB`).
pub fn format_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes < 1 << 10 {
        format!("{bytes} B")
    } else if bytes < 1 << 20 {
        format!("{:.2} KiB", b / 1024.0)
    } else if bytes < 1 << 30 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    }
}

/// Where the last frame drew a block (tests hover them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DrawnBlock {
    /// Its rectangle on screen.
    pub rect: Rect,
    /// Index of its segment in [`MemoryState::rows`].
    pub row: usize,
    /// Index of the block in the row.
    pub block: usize,
}

/// The memory view's state.
#[derive(Debug, Clone)]
pub struct MemoryState {
    /// The device whose segment map is shown (index into the trace's
    /// devices); the first with allocator events when unset.
    pub device: Option<u32>,
    /// The time the map shows, ns from the epoch (`None`: the end of the
    /// trace).
    pub cursor_ns: Option<u64>,
    /// Whether a click pinned the cursor.
    pub pinned: bool,
    /// The segment map at the cursor.
    pub map: Option<MemoryMap>,
    /// Its rows, rebuilt when the map moves.
    pub rows: Vec<SegmentRow>,
    /// (device, time, events seen) the rows were made for.
    rows_key: Option<(u32, u64, usize)>,
    /// The curves' area in the last frame.
    pub curves_area: Rect,
    /// Devices with memory and each one's largest curve value, with the
    /// (memory events, counter points) they were computed for (a live
    /// trace grows).
    devices: (usize, usize, Vec<(u32, i64)>),
    /// Blocks drawn in the last frame.
    pub drawn: Vec<DrawnBlock>,
}

impl Default for MemoryState {
    fn default() -> Self {
        MemoryState {
            device: None,
            cursor_ns: None,
            pinned: false,
            map: None,
            rows: Vec::new(),
            rows_key: None,
            curves_area: Rect::NOTHING,
            devices: (usize::MAX, 0, Vec::new()),
            drawn: Vec::new(),
        }
    }
}

impl MemoryState {
    /// Forgets the map (a new trace).
    pub fn reset(&mut self) {
        *self = MemoryState::default();
    }
}

/// Devices with allocator events or memory curves, in device order, with
/// the largest value of their curves (the strip's scale); recomputed only
/// when the trace grew.
fn devices_and_scales(state: &mut MemoryState, view: &TraceView) -> Vec<(u32, i64)> {
    let points: usize = view.trace.counters.iter().map(|c| c.points.len()).sum();
    let key = (view.trace.memory.len(), points);
    if (state.devices.0, state.devices.1) != key {
        let list = memory_devices(view)
            .into_iter()
            .map(|d| {
                let max = [ALLOCATED_COUNTER, RESERVED_COUNTER]
                    .into_iter()
                    .filter_map(|n| curve(view, d, n))
                    .flat_map(|c| c.points.iter().map(|p| p.1))
                    .max()
                    .unwrap_or(0)
                    .max(1);
                (d, max)
            })
            .collect();
        state.devices = (key.0, key.1, list);
    }
    state.devices.2.clone()
}

/// Devices with allocator events or memory curves, in device order.
pub fn memory_devices(view: &TraceView) -> Vec<u32> {
    let mut devices: Vec<u32> = view
        .trace
        .counters
        .iter()
        .filter(|c| c.name == ALLOCATED_COUNTER || c.name == RESERVED_COUNTER)
        .map(|c| c.device)
        .collect();
    let mut seen = std::collections::HashSet::new();
    for m in &view.trace.memory {
        if seen.insert(m.device) {
            devices.push(m.device);
        }
    }
    devices.sort_unstable();
    devices.dedup();
    devices
}

fn curve<'t>(view: &'t TraceView, device: u32, name: &str) -> Option<&'t Counter> {
    view.trace
        .counters
        .iter()
        .find(|c| c.device == device && c.name == name)
}

fn device_label(view: &TraceView, device: u32) -> String {
    view.trace
        .devices
        .get(device as usize)
        .map_or_else(|| format!("device {device}"), |d| d.device.clone())
}

/// Brings the map to the cursor's time (incrementally) and its rows up
/// to date.
fn update_map(state: &mut MemoryState, view: &TraceView, device: u32) {
    let t = state.cursor_ns.unwrap_or(u64::MAX);
    let map = state.map.get_or_insert_with(|| MemoryMap::new(device));
    if map.device() != device {
        *map = MemoryMap::new(device);
    }
    let key = (device, t, view.trace.memory.len());
    if state.rows_key != Some(key) {
        map.seek(&view.trace.memory, t);
        state.rows = map.rows();
        state.rows_key = Some(key);
    }
}

/// Shows the memory view of `view` on `timeline`'s time window.
pub fn show(
    ui: &mut Ui,
    state: &mut MemoryState,
    timeline: &mut TimelineState,
    view: &TraceView,
    live: bool,
) {
    let scales = devices_and_scales(state, view);
    let devices: Vec<u32> = scales.iter().map(|d| d.0).collect();
    if devices.is_empty() {
        ui.label(
            "No allocator events in this trace: Keel records them for every buffer; PyTorch traces have them with profile_memory=True.",
        );
        return;
    }
    let device = match state.device.filter(|d| devices.contains(d)) {
        Some(d) => d,
        None => devices[0],
    };
    state.device = Some(device);
    update_map(state, view, device);

    ui.horizontal(|ui| {
        let mut chosen = device;
        egui::ComboBox::from_label("Segment map of this device")
            .selected_text(device_label(view, device))
            .show_ui(ui, |ui| {
                for &d in &devices {
                    ui.selectable_value(&mut chosen, d, device_label(view, d));
                }
            });
        if chosen != device {
            state.device = Some(chosen);
            state.rows_key = None;
        }
        if ui.button("Fit to view").clicked() {
            timeline.fit_pending = true;
        }
        let map = state.map.as_ref();
        let at = match state.cursor_ns {
            Some(t) => format_ns(t.saturating_sub(view.bounds.0) as f64),
            None => "the end".to_owned(),
        };
        ui.label(format!(
            "at {at}{}: allocated {}, reserved {}, {} segments",
            if state.pinned { " (pinned)" } else { "" },
            format_bytes(map.map_or(0, MemoryMap::allocated)),
            format_bytes(map.map_or(0, MemoryMap::reserved)),
            state.rows.len()
        ));
        if let Some(oom) = map.and_then(MemoryMap::last_oom) {
            ui.colored_label(
                Color32::from_rgb(240, 100, 90),
                format!(
                    "out of memory at {}: {} asked",
                    format_ns(oom.ts_ns.saturating_sub(view.bounds.0) as f64),
                    format_bytes(oom.bytes)
                ),
            );
        }
    });
    ui.horizontal_wrapped(|ui| {
        for (c, name) in [(ALLOCATED, "allocated"), (RESERVED, "reserved")] {
            let (r, _) = ui.allocate_exact_size(vec2(14.0, 3.0), Sense::hover());
            ui.painter().rect_filled(r, 0.0, c);
            ui.label(name);
        }
        ui.separator();
        for s in 0..4 {
            let (r, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
            ui.painter()
                .rect_filled(r, 2.0, block_color(BlockState::Active, Some(s)));
        }
        ui.label("active (a colour per stream)");
        let (r, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
        ui.painter().rect_filled(r, 2.0, FREE);
        ui.label("free (cached)");
        ui.weak("| W/S zoom, A/D pan, drag pans; the map follows the pointer, click pins it");
    });

    // The curves, one strip per device, on the timeline's time axis.
    let strips = devices.len() as f32;
    let (rect, response) = ui.allocate_exact_size(
        vec2(ui.available_width(), CURVE_H * strips + 4.0),
        Sense::click_and_drag(),
    );
    let area = Rect::from_min_max(pos2(rect.left() + LABEL_W, rect.top()), rect.right_bottom());
    state.curves_area = area;
    if timeline.fit_pending && area.width() > 10.0 {
        timeline.fit(view);
        timeline.fit_pending = false;
    } else if live && timeline.follow_live {
        timeline.follow(view);
    }
    handle_input(ui, timeline, &response, area, 0.0);
    let t_of = |x: f32| {
        timeline.start_ns + f64::from((x - area.left()) / area.width()) * timeline.width_ns
    };
    if let Some(p) = response.hover_pos()
        && !state.pinned
        && p.x >= area.left()
    {
        state.cursor_ns = Some(t_of(p.x).max(0.0) as u64);
    }
    if response.clicked() {
        state.pinned = !state.pinned;
        if let Some(p) = response.interact_pointer_pos()
            && p.x >= area.left()
        {
            state.cursor_ns = Some(t_of(p.x).max(0.0) as u64);
        }
    }
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
    for (i, &(d, max)) in scales.iter().enumerate() {
        let top = rect.top() + i as f32 * CURVE_H + 2.0;
        let strip = Rect::from_min_max(
            pos2(area.left(), top + 4.0),
            pos2(area.right(), top + CURVE_H - 4.0),
        );
        let allocated = curve(view, d, ALLOCATED_COUNTER);
        let reserved = curve(view, d, RESERVED_COUNTER);
        painter.text(
            pos2(rect.left() + 8.0, top + 4.0),
            Align2::LEFT_TOP,
            device_label(view, d),
            FontId::proportional(12.0),
            ui.visuals().strong_text_color(),
        );
        painter.text(
            pos2(rect.left() + 8.0, top + 22.0),
            Align2::LEFT_TOP,
            format!("0 to {}", format_bytes(max as u64)),
            FontId::proportional(10.0),
            ui.visuals().weak_text_color(),
        );
        painter.line_segment(
            [strip.left_bottom(), strip.right_bottom()],
            Stroke::new(1.0, ui.visuals().weak_text_color().gamma_multiply(0.5)),
        );
        for (c, color) in [(reserved, RESERVED), (allocated, ALLOCATED)] {
            if let Some(c) = c {
                draw_curve(&painter, timeline, strip, c, max, color);
            }
        }
    }
    if let Some(t) = state.cursor_ns {
        let x = area.left()
            + ((t as f64 - timeline.start_ns) / timeline.width_ns) as f32 * area.width();
        if x >= area.left() && x <= area.right() {
            painter.line_segment(
                [pos2(x, rect.top()), pos2(x, rect.bottom())],
                Stroke::new(1.0, ui.visuals().text_color()),
            );
        }
    }

    ui.separator();
    draw_map(ui, state, view);
}

/// Draws counter `c` as a step line in `strip` (0 at the bottom, `max`
/// at the top), merged per pixel column: what it costs depends on the
/// window, not on the number of points.
fn draw_curve(
    painter: &egui::Painter,
    tl: &TimelineState,
    strip: Rect,
    c: &Counter,
    max: i64,
    color: Color32,
) {
    let t0 = tl.start_ns.max(0.0) as u64;
    let t1 = (tl.start_ns + tl.width_ns).max(0.0) as u64;
    let a = c.points.partition_point(|p| p.0 < t0).saturating_sub(1);
    let b = (c.points.partition_point(|p| p.0 <= t1) + 1).min(c.points.len());
    let x_of = |t: u64| {
        (strip.left() + ((t as f64 - tl.start_ns) / tl.width_ns) as f32 * strip.width())
            .clamp(strip.left() - 1.0, strip.right() + 1.0)
    };
    let y_of = |v: i64| strip.bottom() - (v.max(0) as f32 / max as f32) * strip.height();
    let mut line: Vec<egui::Pos2> = Vec::new();
    let mut column: Option<(i32, f32, f32, f32)> = None; // (x, min y, max y, last y)
    let stroke = Stroke::new(1.5, color);
    let mut prev_y: Option<f32> = None;
    for &(t, v) in &c.points[a..b] {
        let x = x_of(t);
        let y = y_of(v);
        match &mut column {
            Some((cx, lo, hi, last)) if *cx == x as i32 => {
                *lo = lo.min(y);
                *hi = hi.max(y);
                *last = y;
            }
            _ => {
                if let Some((cx, lo, hi, last)) = column.take() {
                    let cx = cx as f32;
                    if hi - lo > 0.5 {
                        painter.line_segment([pos2(cx, lo), pos2(cx, hi)], stroke);
                    }
                    line.push(pos2(cx, last));
                }
                if let Some(py) = prev_y {
                    // Hold the previous value until this point.
                    line.push(pos2(x, py));
                }
                line.push(pos2(x, y));
                column = Some((x as i32, y, y, y));
            }
        }
        prev_y = Some(y);
    }
    if let Some((cx, lo, hi, last)) = column {
        if hi - lo > 0.5 {
            painter.line_segment([pos2(cx as f32, lo), pos2(cx as f32, hi)], stroke);
        }
        line.push(pos2(cx as f32, last));
    }
    if let Some(py) = prev_y {
        line.push(pos2(strip.right(), py));
    }
    if line.len() >= 2 {
        painter.add(egui::Shape::line(line, stroke));
    }
}

/// The segment map: a row per segment, scaled to the largest one, blocks
/// merged per pixel, a tooltip for the block under the pointer.
fn draw_map(ui: &mut Ui, state: &mut MemoryState, view: &TraceView) {
    state.drawn.clear();
    if state.rows.is_empty() {
        ui.label("No segments at this time.");
        return;
    }
    let largest = state.rows.iter().map(|r| r.bytes).max().unwrap_or(1).max(1);
    let rows = &state.rows;
    let drawn = &mut state.drawn;
    let mut hovered = None;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show_rows(ui, SEGMENT_H, rows.len(), |ui, range| {
            for ri in range {
                let row = &rows[ri];
                let (rect, response) =
                    ui.allocate_exact_size(vec2(ui.available_width(), SEGMENT_H), Sense::hover());
                let painter = ui.painter_at(rect);
                painter.text(
                    pos2(rect.left() + 8.0, rect.center().y),
                    Align2::LEFT_CENTER,
                    format!(
                        "{:#x} · {}{}",
                        row.base,
                        format_bytes(row.bytes),
                        if row.small_pool { " · small" } else { "" }
                    ),
                    FontId::monospace(10.0),
                    ui.visuals().text_color(),
                );
                let bar = Rect::from_min_max(
                    pos2(rect.left() + LABEL_W, rect.top() + 2.0),
                    pos2(rect.right() - 4.0, rect.bottom() - 2.0),
                );
                let width = (bar.width() * (row.bytes as f64 / largest as f64) as f32).max(2.0);
                let scale = width / row.bytes.max(1) as f32;
                let mut last_px: Option<(i32, i32)> = None;
                for (bi, b) in row.blocks.iter().enumerate() {
                    let x0 = bar.left() + (b.addr - row.base) as f32 * scale;
                    let x1 = (x0 + b.bytes as f32 * scale).max(x0 + 1.0);
                    let key = (x0 as i32, x1 as i32);
                    let r = Rect::from_min_max(pos2(x0, bar.top()), pos2(x1, bar.bottom()));
                    if last_px != Some(key) {
                        painter.rect_filled(r, 1.0, block_color(b.state, b.stream));
                        if b.state == BlockState::Active && x1 - x0 > 3.0 {
                            painter.rect_stroke(
                                r,
                                1.0,
                                Stroke::new(1.0, Color32::from_black_alpha(90)),
                                egui::StrokeKind::Inside,
                            );
                        }
                        last_px = Some(key);
                    }
                    drawn.push(DrawnBlock {
                        rect: r,
                        row: ri,
                        block: bi,
                    });
                    if let Some(p) = response.hover_pos()
                        && r.expand2(vec2(0.5, 0.0)).contains(p)
                    {
                        hovered = Some((response.clone(), ri, bi));
                    }
                }
            }
        });
    if let Some((response, ri, bi)) = hovered {
        let row = &state.rows[ri];
        response.on_hover_ui_at_pointer(|ui| block_tooltip(ui, view, row, bi));
    }
}

/// The hover tooltip of block `block` of segment `row`.
pub fn block_tooltip(ui: &mut Ui, view: &TraceView, row: &SegmentRow, block: usize) {
    let Some(b) = row.blocks.get(block) else {
        return;
    };
    ui.strong(match b.state {
        BlockState::Active => "active block",
        BlockState::Free => "free (cached)",
    });
    ui.label(format!("address {:#x}", b.addr));
    ui.label(format!(
        "size {} ({} bytes)",
        format_bytes(b.bytes),
        b.bytes
    ));
    match b.stream {
        Some(s) if b.state == BlockState::Active => ui.label(format!("stream {s}")),
        Some(s) => ui.label(format!("last used on stream {s}")),
        None => ui.label("stream unknown"),
    };
    ui.label(format!(
        "since {} (from the trace's start)",
        format_ns(b.since_ns.saturating_sub(view.bounds.0) as f64)
    ));
    ui.weak(format!(
        "segment {:#x}, {}{}{}",
        row.base,
        format_bytes(row.bytes),
        if row.small_pool {
            ", small pool"
        } else {
            ", large pool"
        },
        if row.known {
            ""
        } else {
            ", reserved before the recording or unknown"
        }
    ));
}
