//! The diff view: a baseline and a candidate trace compared
//! ([`keel_trace::diff`]): the paired steps with their durations, the two
//! steps of a pair side by side on two timelines over the same length of
//! time, and per operator and kernel name the count and time in both with
//! the change. On the main timeline the candidate's spans that got slower
//! or faster than their matched baseline span are outlined ([`Changes`]).

use egui::{Color32, Ui, vec2};
use keel_trace::diff::{Diff, Presence};

use crate::panels::timeline::{Changes, FASTER, Highlight, SLOWER, TimelineState};
use crate::view::{TraceView, format_ns};

/// The smallest change outlined: this share of the baseline span's time.
pub const MIN_RATIO: f64 = 0.10;
/// The smallest change outlined, ns (below it, timer noise).
pub const MIN_DELTA_NS: u64 = 1_000;
/// Name rows drawn (the rest are counted).
pub const MAX_ROWS: usize = 300;

/// The spans of `candidate` that `diff` matched and whose time changed by
/// at least [`MIN_RATIO`] of the baseline's and [`MIN_DELTA_NS`].
pub fn changes(diff: &Diff, candidate: &TraceView) -> Changes {
    let mut marked: Vec<(u64, u32, bool)> = diff
        .span_deltas
        .iter()
        .filter(|d| {
            let delta = d.delta_ns().unsigned_abs();
            delta >= MIN_DELTA_NS && delta as f64 >= MIN_RATIO * d.baseline_ns as f64
        })
        .filter_map(|d| {
            let s = candidate.trace.spans.get(d.candidate as usize)?;
            Some((s.start_ns, d.candidate, d.delta_ns() > 0))
        })
        .collect();
    marked.sort_unstable();
    Changes {
        max_dur: marked
            .iter()
            .map(|&(_, i, _)| candidate.trace.spans[i as usize].dur_ns)
            .max()
            .unwrap_or(0),
        starts: marked.iter().map(|m| m.0).collect(),
        spans: marked.iter().map(|m| m.1).collect(),
        slower: marked.iter().map(|m| m.2).collect(),
    }
}

/// A baseline opened against the shown trace, and the view's state.
#[derive(Debug)]
pub struct DiffView {
    /// The baseline.
    pub baseline: TraceView,
    /// The comparison (the candidate is the app's shown trace).
    pub diff: Diff,
    /// What the main timeline outlines.
    pub changes: Changes,
    /// The pair shown side by side (index into [`Diff::pairs`]).
    pub pair: usize,
    /// The baseline's timeline of the pair.
    pub baseline_timeline: TimelineState,
    /// The candidate's timeline of the pair.
    pub candidate_timeline: TimelineState,
    /// Whether the side-by-side windows follow [`Self::pair`] on the next
    /// frame.
    fit: bool,
}

impl DiffView {
    /// Compares `baseline` with `candidate`.
    pub fn new(baseline: TraceView, candidate: &TraceView) -> keel_trace::Result<DiffView> {
        let diff = keel_trace::diff::diff(&baseline.trace, &candidate.trace)?;
        let changes = changes(&diff, candidate);
        Ok(DiffView {
            baseline,
            diff,
            changes,
            pair: 0,
            baseline_timeline: TimelineState::default(),
            candidate_timeline: TimelineState::default(),
            fit: true,
        })
    }

    /// Shows pair `k` side by side.
    pub fn show_pair(&mut self, k: usize) {
        self.pair = k;
        self.fit = true;
    }
}

/// Puts `tl`'s window on `range` (host ns) at `width_ns` wide, so both
/// sides show the same length of time.
fn fit(tl: &mut TimelineState, range: (u64, u64), width_ns: u64) {
    tl.fit_pending = false;
    tl.follow_live = false;
    let w = (width_ns as f64 * 1.04).max(1_000.0);
    tl.start_ns = range.0 as f64 - w * 0.02;
    tl.width_ns = w;
}

/// Shows `dv` against `candidate` (the app's trace).
pub fn show(ui: &mut Ui, dv: &mut DiffView, candidate: &TraceView) {
    let d = &dv.diff;
    ui.horizontal(|ui| {
        ui.strong("Diff");
        ui.label(format!(
            "baseline {} | candidate {} | aligned by {} | {} of {} / {} top-level operators matched | {} spans matched",
            dv.baseline.source,
            candidate.source,
            d.alignment.name(),
            d.matched_operators(),
            d.operators.0,
            d.operators.1,
            d.span_deltas.len()
        ));
    });
    if !d.unpaired.is_empty() {
        ui.colored_label(
            Color32::YELLOW,
            format!(
                "{} step(s) without a partner (left out of the tables)",
                d.unpaired.len()
            ),
        );
    }
    egui::Panel::bottom("diff names")
        .resizable(true)
        .default_size(260.0)
        .show(ui, |ui| names(ui, d));
    // The steps, one button each: the chosen one side by side.
    let mut chosen = None;
    ui.horizontal_wrapped(|ui| {
        ui.label("steps:");
        for (k, p) in d.pairs.iter().enumerate() {
            let label = match (p.baseline.number, p.candidate.number) {
                (Some(a), Some(b)) if a == b => format!("#{a}"),
                (Some(a), Some(b)) => format!("#{a} / #{b}"),
                _ => "whole trace".to_owned(),
            };
            let change = |a: u64, b: u64| {
                let d = b as i64 - a as i64;
                format!(
                    "{} -> {} ({}{})",
                    format_ns(a as f64),
                    format_ns(b as f64),
                    if d >= 0 { "+" } else { "-" },
                    format_ns(d.unsigned_abs() as f64)
                )
            };
            let mut text = format!(
                "{label}: host {}",
                change(p.baseline.duration_ns(), p.candidate.duration_ns())
            );
            if let (Some(a), Some(b)) = (p.baseline.device, p.candidate.device) {
                text.push_str(&format!(", GPU {}", change(a.1 - a.0, b.1 - b.0)));
            }
            if ui.selectable_label(k == dv.pair, text).clicked() {
                chosen = Some(k);
            }
        }
    });
    if let Some(k) = chosen {
        dv.show_pair(k);
    }
    let Some(pair) = dv.diff.pairs.get(dv.pair) else {
        ui.label("No steps or operators paired.");
        return;
    };
    if dv.fit {
        let width = pair
            .baseline
            .duration_ns()
            .max(pair.candidate.duration_ns());
        fit(&mut dv.baseline_timeline, pair.baseline.host, width);
        fit(&mut dv.candidate_timeline, pair.candidate.host, width);
        dv.fit = false;
    }
    let h = (ui.available_height() / 2.0 - 4.0).max(120.0);
    let w = ui.available_width();
    ui.allocate_ui(vec2(w, h), |ui| {
        ui.push_id("diff baseline", |ui| {
            ui.label("baseline");
            crate::panels::timeline::show(
                ui,
                &mut dv.baseline_timeline,
                &dv.baseline,
                Highlight::default(),
                false,
            );
        });
    });
    ui.allocate_ui(vec2(w, h), |ui| {
        ui.push_id("diff candidate", |ui| {
            ui.label("candidate (outlined: slower in red, faster in green)");
            crate::panels::timeline::show(
                ui,
                &mut dv.candidate_timeline,
                candidate,
                Highlight {
                    changes: Some(&dv.changes),
                    ..Highlight::default()
                },
                false,
            );
        });
    });
}

fn names(ui: &mut Ui, d: &Diff) {
    egui::ScrollArea::vertical()
        .id_salt("diff names scroll")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            egui::Grid::new("diff names grid")
                .striped(true)
                .num_columns(8)
                .show(ui, |ui| {
                    for h in [
                        "kind",
                        "name",
                        "baseline",
                        "candidate",
                        "change",
                        "ratio",
                        "count",
                        "",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for r in d.names.iter().take(MAX_ROWS) {
                        ui.label(r.kind.name());
                        ui.label(crate::analysis::short(&r.name, 60))
                            .on_hover_text(r.name.as_str());
                        ui.label(format_ns(r.baseline.total_ns as f64));
                        ui.label(format_ns(r.candidate.total_ns as f64));
                        let delta = r.delta_ns();
                        let text = format!(
                            "{}{}",
                            if delta >= 0 { "+" } else { "-" },
                            format_ns(delta.unsigned_abs() as f64)
                        );
                        match delta.signum() {
                            1 => ui.colored_label(SLOWER, text),
                            -1 => ui.colored_label(FASTER, text),
                            _ => ui.label(text),
                        };
                        ui.label(r.ratio().map_or("-".to_owned(), |x| format!("{x:.2}x")));
                        ui.label(format!("{} -> {}", r.baseline.count, r.candidate.count));
                        match r.presence() {
                            Presence::Both => ui.label(""),
                            p => ui.colored_label(Color32::YELLOW, p.name()),
                        };
                        ui.end_row();
                    }
                });
            if d.names.len() > MAX_ROWS {
                ui.weak(format!(
                    "{} more names (the table shows the {MAX_ROWS} that changed most)",
                    d.names.len() - MAX_ROWS
                ));
            }
        });
}
