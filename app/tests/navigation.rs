//! The timeline's navigation driven by egui_kittest on the real app
//! (snapshots `analysis` and `search` in `tests/snapshots/`):
//! search (Ctrl+F, Enter / Shift+Enter), W/A/S/D, collapsible groups,
//! flow-chain highlighting, the import report, what a PyTorch trace
//! shows first (GPU stream labels, times from the trace's start).

use egui::{Key, Modifiers, Pos2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use keel::profiler::{
    Flow, FlowEnd, FlowKind, ImportReport, Lane, LaneKind, Span, SpanKind, Trace, TraceDevice,
};
use keel_profiler::cli::Options;
use keel_profiler::view::synthetic_trace;
use keel_profiler::{App, Tab};

fn harness(app: App) -> Harness<'static, App> {
    Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app)
}

fn click(h: &mut Harness<'_, App>, pos: Pos2) {
    h.hover_at(pos);
    h.step();
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    h.step();
    h.step();
}

fn app_with(trace: Trace) -> App {
    let mut app = App::new(&Options::default());
    app.set_trace(trace, "test");
    app
}

/// Epoch-based times as Kineto writes them (about 2023-09-27 in ns).
const EPOCH: u64 = 1_695_835_545_000_000_000;

fn span(lane: u32, name: &str, kind: SpanKind, start: u64, dur: u64) -> Span {
    Span {
        lane,
        name: name.into(),
        kind,
        start_ns: EPOCH + start,
        dur_ns: dur,
        op: 0,
        args: Vec::new(),
    }
}

fn flow(id: u64, kind: FlowKind, from: (u32, u64), to: (u32, u64)) -> Flow {
    Flow {
        id,
        kind,
        from: FlowEnd {
            lane: from.0,
            ts_ns: EPOCH + from.1,
        },
        to: FlowEnd {
            lane: to.0,
            ts_ns: EPOCH + to.1,
        },
    }
}

/// A PyTorch-like trace: GPU 0 streams 7 and 8, a host thread of a
/// `python3.10` process. A launch -> a kernel on stream 7 -> an event
/// record -> a wait on stream 8; an unrelated launch and kernel.
fn pytorch_like() -> Trace {
    let stream = |s: i64| Lane {
        kind: LaneKind::Stream {
            device: 0,
            stream: s,
            thread: 0,
        },
        name: format!("stream {s}"),
        group: String::new(),
    };
    let mut t = Trace {
        devices: vec![TraceDevice {
            device: "cuda:0".to_owned(),
            name: "NVIDIA A100".to_owned(),
            properties: Vec::new(),
        }],
        lanes: vec![
            Lane {
                kind: LaneKind::Host { thread: 77 },
                name: "thread 77".to_owned(),
                group: "python3.10 (pid 42)".to_owned(),
            },
            stream(7),
            stream(8),
        ],
        ..Trace::default()
    };
    t.spans = vec![
        span(0, "cudaLaunchKernel", SpanKind::Kernel, 0, 40_000), // 0
        span(1, "gemm_kernel", SpanKind::Kernel, 100_000, 400_000), // 1
        span(1, "cudaEventRecord", SpanKind::EventRecord, 500_000, 20_000), // 2
        span(2, "wait for event", SpanKind::Wait, 600_000, 100_000), // 3
        span(0, "cudaLaunchKernel", SpanKind::Kernel, 700_000, 40_000), // 4
        span(2, "relu_kernel", SpanKind::Kernel, 800_000, 150_000), // 5
    ];
    t.flows = vec![
        flow(1, FlowKind::Launch, (0, 1_000), (1, 100_000)),
        flow(2, FlowKind::EventWait, (1, 510_000), (2, 650_000)),
        flow(3, FlowKind::Launch, (0, 701_000), (2, 800_000)),
    ];
    t.import = Some(ImportReport {
        format: "Chrome trace (PyTorch/Kineto)".to_owned(),
        events: 12,
        imported: 9,
        skipped: vec![
            ("unsupported phase 'P'".to_owned(), 2),
            ("no timestamp".to_owned(), 1),
        ],
    });
    t
}

#[test]
fn a_pytorch_trace_shows_gpu_streams_and_times_from_its_start() {
    let mut h = harness(app_with(pytorch_like()));
    h.run_steps(3);
    for label in [
        "GPU 0 · stream 7",
        "GPU 0 · stream 8",
        "thread 77",
        "GPU 0 · NVIDIA A100 (2 lanes)",
        "python3.10 (pid 42) (1 lane)",
    ] {
        assert!(h.query_by_label(label).is_some(), "{label} shown");
    }
    assert!(h.query_by_label_contains("host stream").is_none());
    // A file does not follow live data.
    assert!(!h.state().timeline.follow_live);
    // The first span starts at 0 from the trace's start, not at epoch
    // seconds; the view starts just before it.
    let rect = {
        let app = h.state();
        let view = app.view.as_ref().expect("trace");
        assert_eq!(view.bounds.0, EPOCH);
        app.timeline
            .span_rect(view, 1)
            .expect("the kernel is visible")
    };
    click(&mut h, rect.center());
    assert_eq!(h.state().selected, Some(1));
    assert!(
        h.query_all_by_label("100.00 us").count() >= 1,
        "start from the trace's start"
    );
    assert!(
        h.query_by_label_contains("1695835").is_none(),
        "no epoch time"
    );
}

#[test]
fn selecting_a_launch_highlights_its_whole_flow_chain() {
    let mut h = harness(app_with(pytorch_like()));
    h.run_steps(3);
    let rect = {
        let app = h.state();
        let view = app.view.as_ref().expect("trace");
        app.timeline
            .span_rect(view, 0)
            .expect("the launch is visible")
    };
    click(&mut h, rect.center());
    let app = h.state();
    assert_eq!(app.selected, Some(0));
    // launch -> kernel; the kernel's record -> the wait is another span's
    // flow, so the chain from the launch is the launch and the kernel.
    assert_eq!(app.chain, vec![0, 1]);
    assert_eq!(app.chain_flows, vec![0]);
    assert!(h.query_by_label("Flow chain (1 more spans):").is_some());
    assert!(
        h.query_by_label("gemm_kernel on GPU 0 · stream 7")
            .is_some()
    );
    // From the wait: the record that it waited for, both directions.
    let rect = {
        let view = app.view.as_ref().expect("trace");
        app.timeline
            .span_rect(view, 3)
            .expect("the wait is visible")
    };
    click(&mut h, rect.center());
    assert_eq!(h.state().selected, Some(3));
    assert_eq!(h.state().chain, vec![2, 3]);
    assert!(
        h.state().timeline.flows_drawn >= 3,
        "flows and the chain drawn"
    );
    // Clicking empty space clears the chain (once the side panel has
    // settled its width).
    h.run_steps(3);
    let area = h.state().timeline.layout.area;
    click(&mut h, Pos2::new(area.center().x, area.bottom() - 10.0));
    assert_eq!(h.state().selected, None);
    assert!(h.state().chain.is_empty());
}

#[test]
fn the_import_report_is_shown() {
    let mut h = harness(app_with(pytorch_like()));
    h.run_steps(3);
    h.get_by_label("imported 9 of 12 events, 3 skipped").click();
    h.run_steps(3);
    assert_eq!(h.state().tab, Tab::Analysis);
    assert!(h.query_by_label("Import report").is_some());
    assert!(
        h.query_by_label("format: Chrome trace (PyTorch/Kineto)")
            .is_some()
    );
    assert!(
        h.query_by_label("12 events in the file: 9 imported, 3 skipped")
            .is_some()
    );
    assert!(h.query_by_label("unsupported phase 'P'").is_some());
    assert!(h.query_by_label("no timestamp").is_some());
    // And the analysis of the same trace.
    assert!(h.query_by_label("GPU time per stream").is_some());
    assert!(h.query_by_label("gemm_kernel").is_some());
    assert!(
        h.query_by_label_contains("2 launches (host launch start -> device start): p50 100.00 us")
            .is_some()
    );
    h.snapshot("analysis");
}

#[test]
fn groups_collapse_and_expand() {
    let mut h = harness(app_with(pytorch_like()));
    h.run_steps(3);
    h.get_by_label("GPU 0 · NVIDIA A100 (2 lanes)").click();
    h.run_steps(2);
    assert!(h.query_by_label("GPU 0 · stream 7").is_none(), "collapsed");
    assert!(h.query_by_label("thread 77").is_some());
    {
        let app = h.state();
        let view = app.view.as_ref().expect("trace");
        assert!(app.timeline.span_rect(view, 1).is_none(), "kernel hidden");
        assert!(app.timeline.span_rect(view, 0).is_some(), "host shown");
    }
    h.get_by_label("GPU 0 · NVIDIA A100 (2 lanes)").click();
    h.run_steps(2);
    assert!(h.query_by_label("GPU 0 · stream 7").is_some(), "expanded");
}

fn view_range(h: &Harness<'_, App>) -> (f64, f64) {
    let t = &h.state().timeline;
    (t.start_ns, t.width_ns)
}

#[test]
fn w_a_s_d_zoom_and_pan() {
    let mut h = harness(app_with(synthetic_trace(3_000)));
    h.run_steps(3);
    let (s0, w0) = view_range(&h);
    // Without the pointer over the timeline, W zooms around the centre.
    h.key_press(Key::W);
    h.run_steps(2);
    let (s1, w1) = view_range(&h);
    assert!(
        (w1 - w0 / 1.25).abs() < 1e-6 * w0,
        "W zooms in: {w0} -> {w1}"
    );
    let c0 = s0 + w0 / 2.0;
    assert!((s1 + w1 / 2.0 - c0).abs() < 1e-6 * w0, "around the centre");
    h.key_press(Key::D);
    h.run_steps(2);
    let (s2, w2) = view_range(&h);
    assert_eq!(w2, w1);
    assert!((s2 - (s1 + 0.1 * w1)).abs() < 1e-6 * w1, "D pans later");
    h.key_press(Key::A);
    h.key_press(Key::A);
    h.run_steps(2);
    let (s3, _) = view_range(&h);
    assert!((s3 - (s2 - 0.2 * w1)).abs() < 1e-6 * w1, "A pans earlier");
    h.key_press(Key::S);
    h.run_steps(2);
    let (_, w4) = view_range(&h);
    assert!((w4 - w1 * 1.25).abs() < 1e-6 * w1, "S zooms out");
}

#[test]
fn search_highlights_matches_and_moves_between_them() {
    let mut h = harness(app_with(synthetic_trace(3_000)));
    h.run_steps(3);
    let expected: Vec<u32> = {
        let view = h.state().view.as_ref().expect("trace");
        let mut m: Vec<u32> = (0..view.trace.spans.len() as u32)
            .filter(|&i| view.trace.spans[i as usize].name == "saxpy")
            .collect();
        m.sort_by_key(|&i| view.trace.spans[i as usize].start_ns);
        m
    };
    assert!(expected.len() > 10);
    h.key_press_modifiers(Modifiers::COMMAND, Key::F);
    h.run_steps(2);
    h.event(egui::Event::Text("SAXPY".to_owned()));
    h.run_steps(2);
    let n = expected.len();
    assert!(
        h.query_by_label(&format!("{n} matches")).is_some(),
        "{n} matches counted"
    );
    assert_eq!(h.state().timeline.search.matches, expected);
    assert!(
        h.state().timeline.matches_drawn > 0,
        "matches outlined on the timeline"
    );
    h.snapshot("search");
    // Enter: the first match, selected and centred.
    h.key_press(Key::Enter);
    h.run_steps(2);
    assert_eq!(h.state().selected, Some(expected[0]));
    assert!(h.query_by_label(&format!("1 of {n} matches")).is_some());
    h.key_press(Key::Enter);
    h.run_steps(2);
    assert_eq!(h.state().selected, Some(expected[1]));
    assert!(h.query_by_label(&format!("2 of {n} matches")).is_some());
    h.key_press_modifiers(Modifiers::SHIFT, Key::Enter);
    h.run_steps(2);
    assert_eq!(h.state().selected, Some(expected[0]));
    h.key_press_modifiers(Modifiers::SHIFT, Key::Enter);
    h.run_steps(2);
    assert_eq!(h.state().selected, Some(expected[n - 1]), "wraps around");
    {
        let app = h.state();
        let view = app.view.as_ref().expect("trace");
        let s = &view.trace.spans[expected[n - 1] as usize];
        let mid = s.start_ns as f64 + s.dur_ns as f64 / 2.0;
        let t = &app.timeline;
        assert!(
            (t.start_ns + t.width_ns / 2.0 - mid).abs() < 1.0,
            "the match is centred"
        );
        assert!(t.span_rect(view, expected[n - 1]).is_some(), "and visible");
    }
    // The buttons do the same.
    h.get_by_label("Next").click();
    h.run_steps(2);
    assert_eq!(h.state().selected, Some(expected[0]));
    h.get_by_label("Previous").click();
    h.run_steps(2);
    assert_eq!(h.state().selected, Some(expected[n - 1]));
}

/// A real trace's thousands of flows are not drawn as a mesh: by default
/// only where few enough reach into the window (here 125 flows in 3,000
/// spans: none at the whole-trace view), all when asked, and the
/// selection's chain always.
#[test]
fn flows_are_drawn_where_they_can_be_read() {
    use keel_profiler::panels::timeline::{FlowMode, READABLE_FLOWS};

    let mut h = harness(app_with(synthetic_trace(3_000)));
    h.run_steps(3);
    let flows = h.state().view.as_ref().expect("trace").trace.flows.len();
    assert!(flows > READABLE_FLOWS, "{flows} flows");
    assert_eq!(h.state().timeline.flows, FlowMode::Readable);
    assert_eq!(
        h.state().timeline.flows_drawn,
        0,
        "no mesh at the whole-trace view"
    );
    h.state_mut().timeline.flows = FlowMode::All;
    h.run_steps(2);
    assert!(
        h.state().timeline.flows_drawn > READABLE_FLOWS,
        "all drawn when asked"
    );
    // Zoomed in to a few flows' width, they are drawn again.
    h.state_mut().timeline.flows = FlowMode::Readable;
    let width = h.state().timeline.width_ns;
    h.state_mut().timeline.width_ns = width / 40.0;
    h.run_steps(2);
    let drawn = h.state().timeline.flows_drawn;
    assert!(
        drawn > 0 && drawn <= READABLE_FLOWS,
        "{drawn} drawn zoomed in"
    );
    h.state_mut().timeline.flows = FlowMode::Off;
    h.run_steps(2);
    assert_eq!(h.state().timeline.flows_drawn, 0);
}

/// A lane pinned from its label's context menu moves to a "Pinned" group
/// at the top, and unpinning puts it back.
#[test]
fn lanes_pin_to_the_top_from_their_label() {
    use keel_profiler::panels::timeline::LABEL_W;

    let mut h = harness(app_with(synthetic_trace(3_000)));
    h.run_steps(3);
    let last = h.state().view.as_ref().expect("trace").lanes.len() - 1;
    let top = |h: &Harness<'_, App>, pos: usize| {
        h.state().timeline.layout.lane_tops[pos].expect("lane shown")
    };
    assert!(top(&h, last) > top(&h, 0));
    // Right-click the last lane's label, then "Pin to top".
    let at = Pos2::new(
        h.state().timeline.layout.area.left() - LABEL_W + 30.0,
        top(&h, last) + 4.0,
    );
    h.hover_at(at);
    h.step();
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Secondary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    h.run_steps(2);
    h.get_by_label("Pin to top").click();
    h.run_steps(3);
    assert_eq!(h.state().timeline.pinned, vec![last]);
    assert!(h.query_by_label("Pinned (1 lane)").is_some());
    assert!(top(&h, last) < top(&h, 0), "pinned above every group");
    h.state_mut().timeline.toggle_pin(last);
    h.run_steps(2);
    assert!(h.query_by_label("Pinned (1 lane)").is_none());
    assert!(top(&h, last) > top(&h, 0));
}

/// Counters (memory curves, user counters) are tracks on the timeline,
/// below the groups, in a group of their own that collapses.
#[test]
fn counters_are_tracks_below_the_lanes() {
    let mut t = pytorch_like();
    t.counters.push(keel::profiler::Counter {
        device: 0,
        name: "allocated (bytes)".to_owned(),
        points: vec![(0, 0), (200_000, 4096), (600_000, 1024), (900_000, 0)],
    });
    let mut h = harness(app_with(t));
    h.run_steps(3);
    assert!(h.query_by_label("Counters (1 track)").is_some());
    assert!(h.query_by_label("GPU 0 · allocated (bytes)").is_some());
    let with = h.state().timeline.layout.content_h;
    h.get_by_label("Counters (1 track)").click();
    h.run_steps(2);
    assert!(
        h.query_by_label("GPU 0 · allocated (bytes)").is_none(),
        "collapsed"
    );
    assert!(h.state().timeline.layout.content_h < with);
}

/// A search stays current as live fragments arrive, looking only at their
/// spans: the same matches as searching the grown trace again, in order,
/// with the match moved to kept, also when a fragment goes back in time.
#[test]
fn search_keeps_up_with_live_fragments() {
    use keel_profiler::panels::timeline::SearchState;
    use keel_profiler::view::TraceView;
    let whole = synthetic_trace(4_000);
    let part = |a: usize, b: usize| {
        let mut t = whole.tables_only();
        t.spans = whole.spans[a..b].to_vec();
        t
    };
    let mut view = TraceView::new(part(0, 2_000), "live");
    let mut s = SearchState::default();
    s.query = "saxpy".to_owned();
    s.update(&view);
    s.current = Some(3);
    let moved_to = s.matches[3];
    for (a, b) in [(3_000, 4_000), (2_000, 3_000)] {
        let before = view.trace.spans.len();
        view.append(part(a, b)).expect("append");
        s.extend(&view, before);
        let mut full = SearchState::default();
        full.query = "saxpy".to_owned();
        full.update(&view);
        assert_eq!(s.matches, full.matches);
        assert!(s.matches.len() > 300);
        assert!((0..view.trace.spans.len() as u32).all(|i| s.is_match(i) == full.is_match(i)));
        assert_eq!(s.current.map(|k| s.matches[k]), Some(moved_to));
    }
}
