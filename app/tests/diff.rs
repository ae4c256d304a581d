//! Two traces compared in the app: the real GPT-2 trace of an H200 as the
//! baseline and, as the candidate, the same file with its most-launched
//! kernel made 1.5x slower. The headless table, the Diff tab (steps side
//! by side, names), the changed spans outlined on the timeline.

mod common;

use std::io::Read;
use std::path::PathBuf;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use keel_profiler::cli::Options;
use keel_profiler::{App, Tab};

fn real() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import/gpt2_train_h200.pt.trace.json.gz")
}

/// The candidate file and the kernel made slower.
fn candidate(name: &str) -> (PathBuf, String) {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(real()).expect("the trace"))
        .read_to_end(&mut text)
        .expect("gunzip");
    let mut json: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
    let events = json["traceEvents"].as_array_mut().expect("events");
    let mut counts = std::collections::HashMap::<String, usize>::new();
    for e in events.iter().filter(|e| e["cat"] == "kernel") {
        *counts
            .entry(e["name"].as_str().expect("a name").to_owned())
            .or_default() += 1;
    }
    let (kernel, _) = counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .expect("kernels");
    for e in events
        .iter_mut()
        .filter(|e| e["cat"] == "kernel" && e["name"] == kernel.as_str())
    {
        let dur = e["dur"].as_f64().expect("a duration");
        e["dur"] = serde_json::json!((dur * 1.5 * 1000.0).round() / 1000.0);
    }
    let path = std::env::temp_dir().join(format!("keel-diff-{name}-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(&json).expect("encode")).expect("write");
    (path, kernel)
}

#[test]
fn headless_diff_prints_the_table_with_the_slower_kernel_first() {
    let (cand, kernel) = candidate("headless");
    let text = common::headless([PathBuf::from("--diff"), real(), cand.clone()]);
    let (b, c) = (
        keel::profiler::load_trace(&real()).expect("baseline"),
        keel::profiler::load_trace(&cand).expect("candidate"),
    );
    let d = keel_trace::diff::diff(&b, &c).expect("a diff");
    assert_eq!(text, keel_trace::diff::text(&d));
    // The stretched kernel is the kernel row that changed most, 1.5x.
    let row = d
        .names
        .iter()
        .find(|r| r.kind == keel_trace::diff::NameKind::Kernel)
        .expect("a kernel row");
    assert_eq!(row.name.as_str(), kernel);
    let ratio = row.ratio().expect("a ratio");
    assert!((ratio - 1.5).abs() < 0.01, "{ratio}");
    let _ = std::fs::remove_file(cand);
}

#[test]
fn the_diff_tab_shows_steps_side_by_side_and_the_timeline_outlines_changes() {
    let (cand, kernel) = candidate("window");
    let app = App::new(&Options {
        diff: vec![real(), cand.clone()],
        ..Options::default()
    });
    assert_eq!(app.error, None);
    assert_eq!(app.tab, Tab::Diff);
    let dv = app.diff.as_ref().expect("a diff");
    assert_eq!(dv.diff.pairs.len(), 2, "two steps paired");
    assert!(!dv.changes.spans.is_empty());
    // Every outlined span is the stretched kernel, slower.
    let view = app.view.as_ref().expect("the candidate");
    for (k, &s) in dv.changes.spans.iter().enumerate() {
        assert_eq!(view.trace.spans[s as usize].name.as_str(), kernel);
        assert!(dv.changes.slower[k]);
    }
    let mut h = Harness::builder()
        .with_size([1280.0, 900.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.run_steps(3);
    h.get_by_label_contains("aligned by steps by number");
    let short = keel_profiler::analysis::short(&kernel, 60);
    // (kernels whose names differ only in template arguments shorten
    // alike; the whole name is on hover)
    assert!(h.get_all_by_label(&short).next().is_some(), "{short}");
    // Step #3 side by side: both windows on its ranges, equally wide.
    h.get_by_label_contains("#3: ").click();
    h.run_steps(3);
    let dv = h.state().diff.as_ref().expect("a diff");
    assert_eq!(dv.pair, 1);
    let p = &dv.diff.pairs[1];
    let (b, c) = (&dv.baseline_timeline, &dv.candidate_timeline);
    assert!((b.width_ns - c.width_ns).abs() < 1.0, "one scale");
    assert!(
        b.start_ns <= p.baseline.host.0 as f64
            && p.baseline.host.0 as f64 <= b.start_ns + b.width_ns
    );
    assert!(
        c.start_ns <= p.candidate.host.0 as f64
            && p.candidate.host.0 as f64 <= c.start_ns + c.width_ns
    );
    // The main timeline, zoomed on a stretched kernel, outlines it.
    let span = dv.changes.spans[dv.changes.spans.len() / 2];
    {
        let app = h.state_mut();
        app.tab = Tab::Timeline;
        let view = app.view.as_ref().expect("the candidate").clone();
        app.timeline.fit_pending = false;
        app.timeline.center_on(&view, span);
        app.timeline.width_ns = view.trace.spans[span as usize].dur_ns as f64 * 20.0;
        app.timeline.center_on(&view, span);
    }
    h.run_steps(3);
    assert!(
        h.state().timeline.matches_drawn >= 1,
        "the slower kernel outlined"
    );
    let _ = std::fs::remove_file(cand);
}
