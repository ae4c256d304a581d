//! PyTorch memory snapshots in the app, on the real GPT-2 snapshot of an
//! H200 and the profiler trace of the same run, driven by egui_kittest:
//! the Snapshot tab at the peak, a block's frames once clicked, another
//! point of the history through the slider, a block's operator linked to
//! the timeline; `--headless` printing the snapshot's report.

mod common;

use std::path::PathBuf;

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use keel_profiler::cli::Options;
use keel_profiler::{App, Tab};
use keel_trace::snapshot::{Action, load_snapshot, operator_at, state_at, text, timeline};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import")
        .join(name)
}

const SNAPSHOT: &str = "gpt2_train_memory_snapshot.pickle.gz";
const TRACE: &str = "gpt2_train_h200.pt.trace.json.gz";

fn harness(app: App) -> Harness<'static, App> {
    let mut h = Harness::builder()
        .with_size([1280.0, 900.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.run_steps(3);
    h
}

#[test]
fn the_snapshot_tab_shows_the_peak_blocks_frames_and_operators() {
    let app = App::new(&Options {
        open: vec![data(TRACE), data(SNAPSHOT)],
        ..Options::default()
    });
    assert_eq!(app.error, None);
    assert_eq!(app.tab, Tab::Snapshot, "a snapshot opened shows first");
    let s = load_snapshot(&data(SNAPSHOT)).expect("the snapshot");
    let trace = app.view.as_ref().expect("the trace too").trace.clone();
    let origin = trace.origin_ns.expect("a Kineto trace keeps its clock");
    let mut h = harness(app);

    // At the peak: the allocator there, its largest blocks.
    let peak = timeline(&s, 0).peak.entry;
    let at_peak = state_at(&s, 0, peak);
    h.get_by_label_contains("(the peak)");
    h.get_by_label_contains(&format!("{} segments:", at_peak.segments().len()));
    h.get_by_label("Largest blocks alive at the peak (20)");
    // The largest block's frames, once its size is clicked.
    let largest = at_peak.largest(1)[0];
    h.get_all_by_label(&keel_profiler::panels::memory::format_bytes(largest.size))
        .next()
        .expect("the largest block's size")
        .click();
    h.run_steps(3);
    assert_eq!(h.state().snapshot_state.picked, Some(largest));
    h.get_by_label(&format!("Block {:#x}", largest.address));
    // Its whole stack, beyond the top frame the table shows.
    h.get_by_label("fixed_cross_entropy (loss_utils.py:40)");

    // A point inside the profiler trace where a block among the largest
    // was allocated by an operator of the trace.
    let entries = &s.device_traces[0];
    let (k, block, span) = (0..entries.len())
        .rev()
        .filter(|&k| entries[k].action == Action::Alloc)
        .find_map(|k| {
            let st = state_at(&s, 0, Some(k));
            st.largest(20).into_iter().find_map(|b| {
                let t = entries[b.alloc?].time_us?;
                operator_at(&trace, origin, t).map(|span| (k, b, span))
            })
        })
        .expect("a linked block inside the trace");
    h.get_by_role(Role::Slider).set_value_accesskit(k as f64);
    h.run_steps(3);
    assert_eq!(h.state().snapshot_state.cursor, Some(k));
    h.get_by_label("Largest blocks alive at this point (20)");
    // Pick the block, follow its operator to the timeline.
    h.state_mut().snapshot_state.picked = Some(block);
    h.run_steps(2);
    let name = keel_profiler::analysis::short(&trace.spans[span as usize].name, 60);
    // The details' link comes first (the table below may name the same
    // operator for other blocks).
    h.get_all_by_label(&name)
        .next()
        .expect("the picked block's operator")
        .click();
    h.run_steps(3);
    let app = h.state();
    assert_eq!(app.tab, Tab::Timeline);
    assert_eq!(app.selected, Some(span));
    let sp = &trace.spans[span as usize];
    let (t0, t1) = (
        app.timeline.start_ns,
        app.timeline.start_ns + app.timeline.width_ns,
    );
    assert!(
        t0 <= sp.start_ns as f64 && sp.end_ns() as f64 <= t1,
        "the operator in view"
    );
}

#[test]
fn a_snapshot_alone_and_two_snapshots() {
    let app = App::new(&Options {
        open: vec![data(SNAPSHOT)],
        ..Options::default()
    });
    assert_eq!(app.error, None);
    assert!(app.view.is_none() && app.snapshot.is_some());
    let h = harness(app);
    h.get_by_label("Largest blocks alive at the peak (20)");
    // No trace: no operator links, the table says so.
    assert!(h.query_by_label("show it on the timeline").is_none());
    let mut app = h.into_state();
    app.open_files(&[data(SNAPSHOT), data(SNAPSHOT)]);
    let e = app.error.expect("two snapshots");
    assert!(
        e.contains("expected at most one memory snapshot, found 2"),
        "{e}"
    );
}

#[test]
fn headless_prints_the_snapshot_report() {
    let out = common::headless([PathBuf::from("--open"), data(SNAPSHOT)]);
    let s = load_snapshot(&data(SNAPSHOT)).expect("the snapshot");
    assert_eq!(out, text(&s, 10));
}
