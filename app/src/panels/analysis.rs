//! The analysis panel: the import report of a file from another tool, and
//! HolisticTraceAnalysis-style tables (GPU time per stream, top kernels,
//! launch delay distribution with a histogram), and for several files
//! opened as one (the ranks of a distributed job) the ranks side by side.

use egui::Ui;
use egui_plot::{Bar, BarChart, Plot};

use crate::analysis::Analysis;
use crate::view::{TraceView, format_ns};

/// Shows the import report of `view`'s trace (nothing for Keel's own).
pub fn import_report(ui: &mut Ui, view: &TraceView) {
    let Some(r) = &view.trace.import else {
        return;
    };
    ui.heading("Import report");
    let skipped: u64 = r.skipped.iter().map(|(_, n)| n).sum();
    ui.label(format!("format: {}", r.format));
    ui.label(format!(
        "{} events in the file: {} imported, {} skipped",
        r.events, r.imported, skipped
    ));
    if r.skipped.is_empty() {
        ui.label("Nothing was skipped.");
    } else {
        egui::Grid::new("import skipped")
            .striped(true)
            .num_columns(2)
            .show(ui, |ui| {
                ui.strong("skipped");
                ui.strong("reason");
                ui.end_row();
                for (reason, n) in &r.skipped {
                    ui.label(n.to_string());
                    ui.label(reason);
                    ui.end_row();
                }
            });
    }
    ui.separator();
}

/// The ranks side by side: alignment, skew, communication against
/// computation, and who enters collectives last.
fn rank_table(ui: &mut Ui, r: &keel_trace::ranks::RankAnalysis) {
    ui.heading("Ranks");
    ui.label(format!(
        "{} files on one timeline, aligned on {}; {} collectives compared per rank",
        r.ranks.len(),
        r.alignment.map_or("nothing", |a| a.name()),
        r.compared
    ));
    if let Some(late) = r.late.and_then(|k| r.ranks.get(k)) {
        ui.colored_label(
            egui::Color32::from_rgb(255, 183, 77),
            format!(
                "{} enters collectives last: in {} of {}, {} after the others on average",
                late.label,
                late.last_in,
                r.compared,
                format_ns(late.lag_ns as f64)
            ),
        );
    }
    egui::Grid::new("ranks")
        .striped(true)
        .num_columns(9)
        .show(ui, |ui| {
            for h in [
                "rank",
                "clock skew",
                "collectives",
                "communication",
                "computation",
                "overlap",
                "exposed comm.",
                "last in",
                "",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for (k, s) in r.ranks.iter().enumerate() {
                ui.label(&s.label);
                ui.label(s.skew_ns.map_or("-".to_owned(), |ns| {
                    let sign = if ns < 0 { "-" } else { "+" };
                    format!("{sign}{}", format_ns(ns.unsigned_abs() as f64))
                }))
                .on_hover_text(
                    "against the reference rank's clock, from the ends of the collectives",
                );
                ui.label(s.collectives.to_string());
                for ns in [s.comm_ns, s.compute_ns, s.overlap_ns, s.exposed_comm_ns] {
                    ui.label(format_ns(ns as f64));
                }
                ui.label(s.last_in.to_string());
                if r.late == Some(k) {
                    ui.colored_label(egui::Color32::from_rgb(255, 183, 77), "late");
                } else {
                    ui.label("");
                }
                ui.end_row();
            }
        });
}

/// Shows the analysis `a` of `view`, and `ranks` for a trace of several
/// files.
pub fn show(
    ui: &mut Ui,
    view: &TraceView,
    a: &Analysis,
    ranks: Option<&keel_trace::ranks::RankAnalysis>,
) {
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            import_report(ui, view);
            if let Some(r) = ranks {
                rank_table(ui, r);
                ui.separator();
            }
            ui.heading("GPU time per stream");
            if a.streams.is_empty() {
                ui.label("No device streams with kernels, copies or memsets.");
            }
            egui::Grid::new("stream times")
                .striped(true)
                .num_columns(6)
                .show(ui, |ui| {
                    for h in ["stream", "window", "kernels", "copies", "memsets", "idle"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for s in &a.streams {
                        ui.label(&s.label);
                        ui.label(format_ns(s.window_ns as f64));
                        for ns in [s.kernel_ns, s.copy_ns, s.memset_ns, s.idle_ns] {
                            ui.label(format!(
                                "{} ({:.1}%)",
                                format_ns(ns as f64),
                                s.percent(ns)
                            ));
                        }
                        ui.end_row();
                    }
                });
            ui.separator();
            ui.heading("Top kernels by total time");
            if a.kernels.is_empty() {
                ui.label("No kernels on device streams.");
            }
            egui::Grid::new("top kernels")
                .striped(true)
                .num_columns(7)
                .show(ui, |ui| {
                    for h in ["kernel", "count", "total", "share", "mean", "min", "max"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for k in &a.kernels {
                        ui.label(crate::analysis::short(&k.name, 60))
                            .on_hover_text(&k.name);
                        ui.label(k.count.to_string());
                        ui.label(format_ns(k.total_ns as f64));
                        ui.label(format!("{:.1}%", k.percent));
                        ui.label(format_ns(k.mean_ns));
                        ui.label(format_ns(k.min_ns as f64));
                        ui.label(format_ns(k.max_ns as f64));
                        ui.end_row();
                    }
                });
            ui.separator();
            ui.heading("Launch delay");
            let d = &a.delays;
            match (
                d.percentile(50.0),
                d.percentile(90.0),
                d.percentile(99.0),
                d.sorted_ns.last(),
            ) {
                (Some(p50), Some(p90), Some(p99), Some(&max)) => {
                    ui.label(format!(
                        "{} launches (host launch start -> device start): p50 {}, p90 {}, p99 {}, max {}",
                        d.sorted_ns.len(),
                        format_ns(p50 as f64),
                        format_ns(p90 as f64),
                        format_ns(p99 as f64),
                        format_ns(max as f64)
                    ));
                    if d.unbound > 0 {
                        ui.label(format!(
                            "{} launch flows bound to no span (their own times were used)",
                            d.unbound
                        ));
                    }
                    let bars: Vec<Bar> = d
                        .histogram(40)
                        .into_iter()
                        .map(|(x, w, c)| Bar::new((x + w / 2.0) / 1e3, c as f64).width(w / 1e3))
                        .collect();
                    Plot::new("launch delay histogram")
                        .height(160.0)
                        .x_axis_label("launch delay (us)")
                        .y_axis_label("launches")
                        .allow_scroll(false)
                        .show(ui, |p| p.bar_chart(BarChart::new("launch delay", bars)));
                }
                _ => {
                    ui.label("No launch flows in this trace.");
                }
            }
        });
}
