//! The timeline's cost per frame on a synthetic 1,000,000-span trace,
//! run headless (`egui::Context::run_ui` with a fixed screen, no renderer),
//! and the time to open (construct + index) a 10,000,000-span trace.
//!
//! Run: `cargo bench -p keel-profiler --bench timeline`
//! (`KEEL_BENCH_10M=0` skips the 10M open).

use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;
use keel_profiler::panels::timeline::{self, FlowMode, TimelineState};
use keel_profiler::view::{TraceView, synthetic_trace};

fn frame(ctx: &egui::Context, state: &mut TimelineState, view: &TraceView) {
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1920.0, 1080.0),
        )),
        ..Default::default()
    };
    let out = ctx.run_ui(input, |ui| {
        egui::CentralPanel::default().show(ui, |ui| {
            timeline::show(ui, state, view, timeline::Highlight::default(), false);
        });
    });
    black_box(out.shapes.len());
}

fn frames(c: &mut Criterion) {
    let view = TraceView::new(synthetic_trace(1_000_000), "synthetic");
    let ctx = egui::Context::default();
    let mut g = c.benchmark_group("timeline 1M spans");
    // Every flow drawn (merged per pixel): the worst case, not the
    // default (which draws the selection's chain only at this density).
    let mut fit = TimelineState {
        flows: FlowMode::All,
        ..TimelineState::default()
    };
    g.bench_function("frame, whole trace visible", |b| {
        b.iter(|| frame(&ctx, &mut fit, &view))
    });
    // Baseline for the flows: the same frame with flow arrows off (the
    // trace has 62,500 flows, all in view, merged per pixel when drawn).
    let mut no_flows = TimelineState {
        flows: FlowMode::Off,
        ..TimelineState::default()
    };
    g.bench_function("frame, whole trace visible, flows off", |b| {
        b.iter(|| frame(&ctx, &mut no_flows, &view))
    });
    let mut zoomed = TimelineState {
        fit_pending: false,
        ..TimelineState::default()
    };
    zoomed.fit(&view);
    zoomed.start_ns += zoomed.width_ns * 0.5;
    zoomed.width_ns = 2e6;
    g.bench_function("frame, 2 ms window", |b| {
        b.iter(|| frame(&ctx, &mut zoomed, &view))
    });
    g.finish();
}

/// A live view growing by 1,000-span fragments: appending a fragment to
/// the index, against merging it and re-indexing the whole trace (the
/// baseline: what appending saves).
fn live(c: &mut Criterion) {
    let whole = synthetic_trace(1_001_000);
    let mut head = whole.clone();
    head.spans.truncate(1_000_000);
    head.flows.retain(|f| f.id < 1_000_000);
    let mut fragment = whole.clone();
    fragment.spans = whole.spans[1_000_000..].to_vec();
    fragment.flows.retain(|f| f.id >= 1_000_000);
    let base = TraceView::new(head.clone(), "live");
    let mut g = c.benchmark_group("live fragment of 1,000 spans on 1,000,000");
    g.sample_size(10);
    g.bench_function("append to the index", |b| {
        b.iter_batched(
            || (base.clone(), fragment.clone()),
            // The view is returned: criterion drops it outside the timing.
            |(mut v, f)| {
                v.append(f).expect("merged");
                v
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("re-index the merged trace (baseline)", |b| {
        b.iter_batched(
            || (head.clone(), fragment.clone()),
            |(mut t, f)| {
                t.merge(f).expect("merged");
                TraceView::new(t, "live")
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn open_10m() {
    let t = Instant::now();
    let trace = synthetic_trace(10_000_000);
    let built = t.elapsed();
    let t = Instant::now();
    let view = TraceView::new(trace, "synthetic");
    let indexed = t.elapsed();
    let ctx = egui::Context::default();
    let mut state = TimelineState::default();
    let t = Instant::now();
    for _ in 0..10 {
        frame(&ctx, &mut state, &view);
    }
    let per_frame = t.elapsed() / 10;
    println!(
        "open 10,000,000 spans: construct {:.2} s, index {:.2} s; frame (whole trace) {:.2} ms",
        built.as_secs_f64(),
        indexed.as_secs_f64(),
        per_frame.as_secs_f64() * 1e3
    );
}

fn main() {
    if std::env::var("KEEL_BENCH_10M").map_or(true, |v| v != "0") {
        open_10m();
    }
    let mut c = Criterion::default().configure_from_args();
    frames(&mut c);
    live(&mut c);
    c.final_summary();
}
