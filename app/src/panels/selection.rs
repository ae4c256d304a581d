//! The selection panel: what an area of the timeline holds (Shift+drag
//! over lanes and time), as Perfetto's area selection and Tracy's range
//! statistics show it: the spans by name, a flame graph of the host
//! spans, and what each GPU did in the window. The numbers come from
//! [`crate::selection::analyse`]; this panel only draws them.

use egui::{Align2, Color32, FontId, Rect, Sense, Stroke, Ui, pos2, vec2};

use crate::analysis::short;
use crate::selection::{Flame, SelectionSummary};
use crate::view::format_ns;

/// Which table the panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelectionTab {
    /// Spans aggregated by name.
    #[default]
    Names,
    /// The host spans' flame graph.
    Flame,
    /// Busy, idle and overlapping time per device and stream.
    Gpu,
}

/// The panel's state.
#[derive(Debug, Clone, Default)]
pub struct SelectionPanel {
    /// The table shown.
    pub tab: SelectionTab,
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectionAction {
    /// Clear the area selection.
    Clear,
    /// Search the timeline for spans of this name.
    Search(String),
}

/// The most name rows drawn (the rest are counted).
pub const MAX_NAME_ROWS: usize = 500;
/// Height of one flame graph row, points.
pub const FLAME_ROW_H: f32 = 17.0;

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// Shows `sum`; returns what the user asked for.
pub fn show(
    ui: &mut Ui,
    state: &mut SelectionPanel,
    sum: &SelectionSummary,
) -> Option<SelectionAction> {
    let mut action = None;
    let window = sum.t1 - sum.t0;
    ui.horizontal(|ui| {
        ui.strong("Selection");
        ui.label(format!(
            "{} | {} lane{} | {} span{}",
            format_ns(window as f64),
            sum.lanes,
            if sum.lanes == 1 { "" } else { "s" },
            sum.spans,
            if sum.spans == 1 { "" } else { "s" },
        ));
        ui.separator();
        ui.selectable_value(&mut state.tab, SelectionTab::Names, "By name");
        ui.selectable_value(&mut state.tab, SelectionTab::Flame, "Flame graph");
        ui.selectable_value(&mut state.tab, SelectionTab::Gpu, "GPU");
        ui.separator();
        if ui.button("Clear (Esc)").clicked() {
            action = Some(SelectionAction::Clear);
        }
    });
    ui.separator();
    match state.tab {
        SelectionTab::Names => {
            if let Some(a) = names(ui, sum) {
                action = Some(a);
            }
        }
        SelectionTab::Flame => flame(ui, &sum.flame, window),
        SelectionTab::Gpu => gpu(ui, sum),
    }
    action
}

fn names(ui: &mut Ui, sum: &SelectionSummary) -> Option<SelectionAction> {
    let mut action = None;
    if sum.names.is_empty() {
        ui.label("No spans in the selection.");
        return None;
    }
    egui::ScrollArea::vertical()
        .id_salt("selection names")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            egui::Grid::new("selection names grid")
                .striped(true)
                .num_columns(9)
                .show(ui, |ui| {
                    for h in [
                        "name", "kind", "count", "time", "self", "mean", "p50", "p99", "max",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for r in sum.names.iter().take(MAX_NAME_ROWS) {
                        let b = ui
                            .add(egui::Label::new(short(&r.name, 60)).sense(Sense::click()))
                            .on_hover_text(format!("{}\n(click: search the timeline)", r.name));
                        if b.clicked() {
                            action = Some(SelectionAction::Search(r.name.to_string()));
                        }
                        ui.label(if r.device {
                            format!("{} (device)", r.kind)
                        } else {
                            r.kind.to_string()
                        });
                        ui.label(r.count.to_string());
                        ui.label(format_ns(r.total_ns as f64));
                        ui.label(format_ns(r.self_ns as f64));
                        ui.label(format_ns(r.mean_ns));
                        ui.label(format_ns(r.p50_ns as f64));
                        ui.label(format_ns(r.p99_ns as f64));
                        ui.label(format_ns(r.max_ns as f64));
                        ui.end_row();
                    }
                });
            if sum.names.len() > MAX_NAME_ROWS {
                ui.weak(format!(
                    "{} more names (the table shows the {MAX_NAME_ROWS} with most time)",
                    sum.names.len() - MAX_NAME_ROWS
                ));
            }
        });
    action
}

/// A warm colour per name, stable across frames and selections.
fn frame_color(name: &str) -> Color32 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let r = 200 + (h % 56) as u8;
    let g = 90 + ((h >> 8) % 110) as u8;
    let b = 30 + ((h >> 16) % 50) as u8;
    Color32::from_rgb(r, g, b)
}

fn flame(ui: &mut Ui, flame: &Flame, window: u64) {
    if flame.frames.is_empty() {
        ui.label("No host spans in the selection (select host threads to see a flame graph).");
        return;
    }
    ui.weak(format!(
        "{} frames, {} deep; widths are time inside the selection ({} of {} summed over threads)",
        flame.frames.len(),
        flame.depth,
        format_ns(flame.total_ns as f64),
        format_ns(window as f64)
    ));
    egui::ScrollArea::vertical()
        .id_salt("selection flame")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            let w = ui.available_width().max(100.0);
            let h = f32::from(flame.depth) * FLAME_ROW_H;
            let (rect, response) = ui.allocate_exact_size(vec2(w, h), Sense::hover());
            let painter = ui.painter_at(rect);
            let scale = w / flame.total_ns.max(1) as f32;
            let hover = response.hover_pos();
            let mut hovered = None;
            let text = Color32::from_rgb(20, 20, 20);
            for (k, f) in flame.frames.iter().enumerate() {
                let fw = f.total_ns as f32 * scale;
                if fw < 0.5 {
                    continue;
                }
                let r = Rect::from_min_size(
                    pos2(
                        rect.left() + f.x_ns as f32 * scale,
                        rect.top() + f32::from(f.depth) * FLAME_ROW_H,
                    ),
                    vec2(fw, FLAME_ROW_H - 1.0),
                );
                painter.rect_filled(r, 1.0, frame_color(&f.name));
                if hover.is_some_and(|p| r.contains(p)) {
                    hovered = Some(k);
                    painter.rect_stroke(
                        r,
                        1.0,
                        Stroke::new(1.5, Color32::WHITE),
                        egui::StrokeKind::Inside,
                    );
                }
                if fw > 40.0 {
                    let chars = ((fw - 6.0) / 6.2).max(1.0) as usize;
                    painter.with_clip_rect(r).text(
                        pos2(r.left() + 3.0, r.center().y),
                        Align2::LEFT_CENTER,
                        short(&f.name, chars),
                        FontId::monospace(10.0),
                        text,
                    );
                }
            }
            if let Some(k) = hovered {
                let f = &flame.frames[k];
                response.on_hover_ui_at_pointer(|ui| {
                    ui.label(f.name.as_str());
                    ui.label(format!(
                        "{} in the selection ({} of it), self {}, {} span{}",
                        format_ns(f.total_ns as f64),
                        percent(f.total_ns, flame.total_ns),
                        format_ns(f.self_ns as f64),
                        f.count,
                        if f.count == 1 { "" } else { "s" }
                    ));
                });
            }
        });
}

fn gpu(ui: &mut Ui, sum: &SelectionSummary) {
    if sum.devices.is_empty() {
        ui.label("No device streams in this trace.");
        return;
    }
    let window = sum.t1 - sum.t0;
    egui::ScrollArea::vertical()
        .id_salt("selection gpu")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            egui::Grid::new("selection gpu grid")
                .striped(true)
                .num_columns(5)
                .show(ui, |ui| {
                    for h in [
                        "device / stream",
                        "busy",
                        "idle",
                        "streams overlapping",
                        "activities",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for d in &sum.devices {
                        ui.strong(&d.device);
                        ui.label(format!(
                            "{} ({})",
                            format_ns(d.busy_ns as f64),
                            percent(d.busy_ns, window)
                        ));
                        ui.label(format!(
                            "{} ({})",
                            format_ns(d.idle_ns as f64),
                            percent(d.idle_ns, window)
                        ));
                        ui.label(format!(
                            "{} ({})",
                            format_ns(d.overlap_ns as f64),
                            percent(d.overlap_ns, window)
                        ));
                        ui.label(
                            d.streams
                                .iter()
                                .map(|s| s.activities)
                                .sum::<u64>()
                                .to_string(),
                        );
                        ui.end_row();
                        for s in &d.streams {
                            ui.label(format!("    {}", s.label));
                            ui.label(format!(
                                "{} ({})",
                                format_ns(s.busy_ns as f64),
                                percent(s.busy_ns, window)
                            ));
                            let idle = window.saturating_sub(s.busy_ns);
                            ui.label(format!(
                                "{} ({})",
                                format_ns(idle as f64),
                                percent(idle, window)
                            ));
                            ui.label("");
                            ui.label(s.activities.to_string());
                            ui.end_row();
                        }
                    }
                });
        });
}
