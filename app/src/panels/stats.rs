//! Events and statistics: per-kernel and per-lane tables, a duration
//! histogram, timed event pairs and every counter over time (the memory
//! curves have their own view, [`memory`](super::memory)).

use egui::Ui;
use egui_plot::{Bar, BarChart, Legend, Line, Plot};

use crate::stats::{StatRow, Stats, histogram};
use crate::view::{TraceView, format_ns};

/// The most characters of a name a table row shows.
pub const NAME_CHARS: usize = 60;

/// The panel's own state.
#[derive(Debug, Clone, Default)]
pub struct StatsState {
    /// The row whose histogram is shown (index into the kernel table).
    pub histogram_of: usize,
}

fn table(ui: &mut Ui, id: &str, rows: &[StatRow], mut on_click: impl FnMut(usize)) {
    egui::Grid::new(id)
        .striped(true)
        .num_columns(8)
        .show(ui, |ui| {
            for h in [
                "name", "count", "total", "mean", "median", "p99", "min", "max",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for (i, r) in rows.iter().enumerate() {
                // Long C++ names shortened (`kernel<…>(…)`), whole on hover.
                let link = ui.link(crate::analysis::short(&r.name, NAME_CHARS));
                if link.on_hover_text(&r.name).clicked() {
                    on_click(i);
                }
                let s = &r.summary;
                ui.label(s.count.to_string());
                ui.label(format_ns(s.total as f64));
                ui.label(format_ns(s.mean));
                ui.label(format_ns(s.median as f64));
                ui.label(format_ns(s.p99 as f64));
                ui.label(format_ns(s.min as f64));
                ui.label(format_ns(s.max as f64));
                ui.end_row();
            }
        });
}

/// Shows the statistics of `view` (computed in `stats`).
pub fn show(ui: &mut Ui, state: &mut StatsState, view: &TraceView, stats: &Stats) {
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            ui.heading("Kernels");
            if stats.kernels.is_empty() {
                ui.label("No kernels in this trace.");
            }
            table(ui, "kernel stats", &stats.kernels, |i| {
                state.histogram_of = i
            });
            if let Some(r) = stats.kernels.get(
                state
                    .histogram_of
                    .min(stats.kernels.len().saturating_sub(1)),
            ) {
                ui.label(format!(
                    "Duration histogram: {} (click a name to change)",
                    r.name
                ));
                let bars: Vec<Bar> = histogram(&r.durations, 30, |d| d as f64)
                    .into_iter()
                    .map(|(x, w, c)| Bar::new((x + w / 2.0) / 1e3, c as f64).width(w / 1e3))
                    .collect();
                Plot::new("histogram")
                    .height(160.0)
                    .x_axis_label("duration (us)")
                    .y_axis_label("count")
                    .allow_scroll(false)
                    .show(ui, |p| p.bar_chart(BarChart::new(r.name.clone(), bars)));
            }
            ui.separator();
            ui.heading("Lanes");
            table(ui, "lane stats", &stats.lanes, |_| {});
            ui.separator();
            ui.heading("Timed event pairs");
            if stats.event_pairs.is_empty() {
                ui.label("No event records on device streams.");
            }
            egui::Grid::new("event pairs")
                .striped(true)
                .num_columns(4)
                .show(ui, |ui| {
                    for h in ["stream", "from", "to", "elapsed"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for p in stats.event_pairs.iter().take(500) {
                        ui.label(&p.lane);
                        ui.label(&p.from);
                        ui.label(&p.to);
                        ui.label(format!("{:.3} ms", p.elapsed_ms));
                        ui.end_row();
                    }
                });
            ui.separator();
            ui.heading("Counters");
            if view.trace.counters.is_empty() {
                ui.label("No counters in this trace.");
            } else {
                Plot::new("memory")
                    .height(180.0)
                    .legend(Legend::default())
                    .x_axis_label("time (ms)")
                    .y_axis_label("MiB")
                    .allow_scroll(false)
                    .show(ui, |p| {
                        for c in &view.trace.counters {
                            let dev = view
                                .trace
                                .devices
                                .get(c.device as usize)
                                .map_or("?", |d| d.device.as_str());
                            // A step line: hold each value until the next point.
                            let mut pts = Vec::with_capacity(c.points.len() * 2);
                            let mut last: Option<f64> = None;
                            for &(t, v) in &c.points {
                                // From the trace's start, as on the ruler.
                                let x = t.saturating_sub(view.bounds.0) as f64 / 1e6;
                                if let Some(prev) = last {
                                    pts.push([x, prev]);
                                }
                                let y = v as f64 / (1u64 << 20) as f64;
                                pts.push([x, y]);
                                last = Some(y);
                            }
                            p.line(Line::new(format!("{dev} {}", c.name), pts));
                        }
                    });
            }
        });
}
