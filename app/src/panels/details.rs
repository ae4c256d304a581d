//! The details side panel: everything about the selected span.

use egui::Ui;

use crate::view::{TraceView, format_ns};

/// Shows span `span` of `view` and the spans of the same operation (the
/// host call and its device work). Returns a span to select instead, if
/// the user clicked one of those.
pub fn show(
    ui: &mut Ui,
    view: &TraceView,
    span: u32,
    related: &[u32],
    chain: &[u32],
) -> Option<u32> {
    let s = view.trace.spans.get(span as usize)?;
    let mut jump = None;
    ui.heading("Selected span");
    egui::Grid::new("span details")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            let lane = view.lane_index(s.lane).map_or("?", |l| l.label.as_str());
            let rows: Vec<(&str, String)> = vec![
                ("name", s.name.to_string()),
                ("kind", s.kind.to_string()),
                ("lane", lane.to_owned()),
                // Times count from the trace's start, as on the ruler.
                (
                    "start",
                    format_ns(s.start_ns.saturating_sub(view.bounds.0) as f64),
                ),
                ("duration", format_ns(s.dur_ns as f64)),
                (
                    "end",
                    format_ns(s.end_ns().saturating_sub(view.bounds.0) as f64),
                ),
                ("op", s.op.to_string()),
            ];
            for (k, v) in rows {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            }
            for (k, v) in &s.args {
                ui.label(k.as_str());
                ui.label(v.as_str());
                ui.end_row();
            }
        });
    let linked: Vec<u32> = chain.iter().copied().filter(|&c| c != span).collect();
    if !linked.is_empty() {
        ui.separator();
        ui.label(format!("Flow chain ({} more spans):", linked.len()));
        for &c in linked.iter().take(32) {
            if let Some(o) = view.trace.spans.get(c as usize) {
                let lane = view.lane_index(o.lane).map_or("?", |l| l.label.as_str());
                let name = crate::analysis::short(&o.name, super::stats::NAME_CHARS);
                if ui
                    .link(format!("{name} on {lane}"))
                    .on_hover_text(&*o.name)
                    .clicked()
                {
                    jump = Some(c);
                }
            }
        }
    }
    if !related.is_empty() {
        ui.separator();
        ui.label("Same operation:");
        for &r in related {
            if let Some(o) = view.trace.spans.get(r as usize) {
                let lane = view.lane_index(o.lane).map_or("?", |l| l.label.as_str());
                let name = crate::analysis::short(&o.name, super::stats::NAME_CHARS);
                if ui
                    .link(format!("{name} on {lane} ({})", format_ns(o.dur_ns as f64)))
                    .on_hover_text(&*o.name)
                    .clicked()
                {
                    jump = Some(r);
                }
            }
        }
    }
    jump
}
