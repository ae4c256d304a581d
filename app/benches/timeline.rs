//! The timeline's cost per frame on a synthetic 1,000,000-span trace,
//! run headless (`egui::Context::run_ui` with a fixed screen, no renderer),
//! and the time to open (construct + index) a 10,000,000-span trace.
//!
//! It also appends nested live fragments (a parent after its children)
//! to a view of 2,000,000 spans, the default live retention.
//!
//! Run: `cargo bench -p keel-profiler --bench timeline`
//! (`KEEL_BENCH_10M=0` skips the 10M open).
//!
//! `KEEL_BENCH_INDEX=FILE` instead times an indexed file as the app shows
//! it (`big_index make` in keel-trace makes one): opening it to the first
//! frame drawn, then 400 frames of panning and zooming at 60 frames a
//! second, windows read in the background as the app reads them; it
//! prints the frame times and the process's peak memory.

use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;
use keel_profiler::panels::timeline::{self, FlowMode, TimelineState};
use keel_profiler::view::{TraceView, nested_trace, synthetic_trace};

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

/// `fragment` as the `k`-th of a live session: `k` periods later, its
/// flows' ids past every earlier fragment's.
fn shifted(fragment: &keel_trace::Trace, k: u64, period: u64) -> keel_trace::Trace {
    let mut f = fragment.clone();
    for s in &mut f.spans {
        s.start_ns += k * period;
    }
    for fl in &mut f.flows {
        fl.id += k * 1_000_000_000;
        fl.from.ts_ns += k * period;
        fl.to.ts_ns += k * period;
    }
    f
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
    // What a live session pays: fragments appended to one view that
    // keeps growing (its vectors grow as a live view's do), each later in
    // time than the last.
    let period = fragment.spans.iter().map(|s| s.end_ns()).max().unwrap_or(0) + 1_000;
    let mut growing = base.clone();
    let mut k = 0u64;
    g.bench_function("append to one growing view", |b| {
        b.iter_custom(|iters| {
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..iters {
                k += 1;
                let f = shifted(&fragment, k, period);
                let t = Instant::now();
                growing.append(f).expect("merged");
                spent += t.elapsed();
            }
            spent
        })
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
    // The first frame makes the rows' coarser levels; later ones use them.
    let t = Instant::now();
    frame(&ctx, &mut state, &view);
    let first = t.elapsed();
    let t = Instant::now();
    for _ in 0..10 {
        frame(&ctx, &mut state, &view);
    }
    let per_frame = t.elapsed() / 10;
    // A live session at 10M spans: 100 fragments of 1,000 spans appended.
    let mut view = view;
    let fragment = synthetic_trace(1_000);
    let period = view.bounds.1 + 1_000;
    let mut appends = Vec::new();
    for k in 1..=100u64 {
        let f = shifted(&fragment, k, period);
        let t = Instant::now();
        view.append(f).expect("merged");
        appends.push(t.elapsed().as_secs_f64() * 1e3);
    }
    appends.sort_by(f64::total_cmp);
    println!(
        "append 1,000 spans to 10,000,000: median {:.3} ms, max {:.3} ms (100 fragments)",
        appends[50], appends[99]
    );
    println!(
        "open 10,000,000 spans: construct {:.2} s, index {:.2} s; first frame (whole trace, levels made) {:.0} ms, then a frame (whole trace) {:.2} ms",
        built.as_secs_f64(),
        indexed.as_secs_f64(),
        first.as_secs_f64() * 1e3,
        per_frame.as_secs_f64() * 1e3
    );
}

/// The process's peak resident memory, MB (`VmHWM`).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn indexed_frames(path: &str) {
    use keel_profiler::indexed::IndexedSession;
    let px = 1920.0 - 200.0;
    let start = Instant::now();
    let trace = keel_trace::indexed::IndexedTrace::open(std::path::Path::new(path))
        .expect("an indexed file");
    let mut s = IndexedSession::new(keel_profiler::indexed::Indexed::File(Box::new(trace)));
    let (lo, hi) = s.trace.bounds();
    let ctx = egui::Context::default();
    let mut state = TimelineState::default();
    let whole = (hi - lo) as f64;
    let first = s
        .read_now(lo as f64 - whole * 0.02, whole * 1.04, px)
        .expect("the first window");
    let mut view = Some(std::sync::Arc::new(s.show(first)));
    frame(&ctx, &mut state, view.as_ref().expect("a view"));
    let first_frame = start.elapsed();
    // Pan and zoom as a user does: zoom in 1.1x a frame towards a point
    // for 100 frames, pan by 2% of the screen a frame for 100, zoom out
    // for 100, pan back for 100; a frame every 16.7 ms.
    let target = lo as f64 + whole * 0.6137;
    let mut times = Vec::new();
    let mut windows = 0;
    let mut most = 0;
    for f in 0..400 {
        let t = Instant::now();
        match f / 100 {
            0 => state.zoom(1.1, target),
            1 => state.pan(0.02),
            2 => state.zoom(1.0 / 1.1, target),
            _ => state.pan(-0.02),
        }
        if let Some(Ok(w)) = s.take() {
            s.replace(&mut view, w);
            windows += 1;
        }
        let view = view.as_ref().expect("a view");
        most = most.max(view.trace.spans.len());
        s.request(state.start_ns, state.width_ns, px, || {});
        frame(&ctx, &mut state, view);
        let took = t.elapsed();
        times.push(took.as_secs_f64() * 1e3);
        std::thread::sleep(std::time::Duration::from_micros(16_667).saturating_sub(took));
    }
    times.sort_by(f64::total_cmp);
    println!(
        "indexed {path}: {} spans; first frame {:.0} ms after opening; 400 frames panning and zooming: median {:.2} ms, p99 {:.2} ms, max {:.2} ms; {windows} windows read (at most {most} spans); peak RSS {:.0} MB",
        s.trace.span_count(),
        first_frame.as_secs_f64() * 1e3,
        times[200],
        times[396],
        times[399],
        peak_rss_mb()
    );
}

/// What a live session's view pays per fragment at the size a retention
/// keeps it (2,000,000 spans by default; the session's spans beyond it
/// are on disk and cost an append nothing): 1,000-span fragments of
/// nested spans whose parent arrives last, the rows' levels made (a view
/// zoomed out) so appending extends them.
fn append_nested() {
    let steps = 2_000;
    let mut view = TraceView::new(nested_trace(steps, 333, 0, 1_000_000), "live");
    for l in &view.lanes {
        for r in &l.rows {
            let _ = r.levels();
        }
    }
    let mut appends = Vec::new();
    for k in 0..200 {
        let f = nested_trace(1, 333, (steps + k) * 1_000_000, 1_000_000);
        let t = Instant::now();
        view.append(f).expect("merged");
        appends.push(t.elapsed().as_secs_f64() * 1e3);
    }
    appends.sort_by(f64::total_cmp);
    println!(
        "append 1,000 nested spans (parent last) to {}: median {:.3} ms, p99 {:.3} ms, max {:.3} ms (200 fragments, levels extended)",
        view.trace.spans.len(),
        appends[100],
        appends[197],
        appends[199]
    );
}

fn main() {
    if let Ok(path) = std::env::var("KEEL_BENCH_INDEX") {
        indexed_frames(&path);
        return;
    }
    append_nested();
    if std::env::var("KEEL_BENCH_10M").map_or(true, |v| v != "0") {
        open_10m();
    }
    let mut c = Criterion::default().configure_from_args();
    frames(&mut c);
    live(&mut c);
    c.final_summary();
}
