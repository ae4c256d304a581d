//! Traces larger than memory on the real app (egui_kittest): the real
//! GPT-2 trace opened through its index, zoomed until the window is read
//! again at full resolution, searched over the whole file, an area
//! analysed as the in-memory trace analyses it; and the command line's
//! `--convert` and `--index`.

mod common;

use std::path::PathBuf;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use keel_profiler::cli::Options;
use keel_profiler::selection::{Selection, text};
use keel_profiler::{App, Tab};

fn gpt2() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import/gpt2_train_h200.pt.trace.json.gz")
}

/// A copy of the GPT-2 trace in a directory of its own (its index is made
/// beside it).
fn copy(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("app-indexed-{name}"));
    // What an earlier run left.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join("gpt2.json.gz");
    std::fs::copy(gpt2(), &p).expect("copy");
    p
}

fn harness(app: App) -> Harness<'static, App> {
    Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app)
}

/// Runs frames until no window is being read, showing what was read.
fn settle(h: &mut Harness<'_, App>) {
    for _ in 0..20 {
        h.step();
        let app = h.state_mut();
        let Some(s) = app.indexed.as_mut() else {
            return;
        };
        match s.wait() {
            Some(Ok(w)) => app.show_window(w),
            Some(Err(e)) => panic!("{e}"),
            None => return,
        }
    }
    panic!("the window never settled");
}

#[test]
fn the_timeline_reads_the_window_it_shows() {
    let path = copy("timeline");
    let app = App::new(&Options {
        open: vec![path.clone()],
        index: true,
        ..Options::default()
    });
    assert!(app.error.is_none(), "{:?}", app.error);
    let total = app.indexed.as_ref().expect("indexed").trace.span_count();
    assert_eq!(total, 17_782);
    assert!(keel_trace::indexed::index_path(&path).exists());
    let mut h = harness(app);
    settle(&mut h);
    {
        let app = h.state();
        assert_eq!(app.tab, Tab::Timeline);
        let view = app.view.as_ref().expect("view");
        // The whole trace in view, read coarsely: fewer spans than the file.
        assert!(
            view.trace.spans.len() < total as usize / 2,
            "{}",
            view.trace.spans.len()
        );
        assert_eq!(view.bounds, app.indexed.as_ref().expect("i").trace.bounds());
    }
    // Zoom to 200 us around the first ProfilerStep's start: the window is
    // read again, every span as it is, and covers the screen.
    let (lo, _) = h.state().view.as_ref().expect("view").bounds;
    {
        let t = &mut h.state_mut().timeline;
        t.start_ns = lo as f64;
        t.width_ns = 200_000.0;
    }
    settle(&mut h);
    let app = h.state();
    let s = app.indexed.as_ref().expect("indexed");
    let shown = s.shown.as_ref().expect("shown");
    assert_eq!(shown.level, 0, "full resolution at 200 us");
    assert!(shown.records.iter().all(Option::is_some));
    assert!(shown.t0 as f64 <= app.timeline.start_ns);
    assert!(app.timeline.start_ns + app.timeline.width_ns <= shown.t1 as f64);
    assert!(app.timeline.drawn > 0, "something drawn");
}

#[test]
fn search_counts_and_moves_over_the_whole_file() {
    let path = copy("search");
    let in_memory =
        keel_profiler::view::TraceView::new(keel_trace::load_trace(&path).expect("load"), "gpt2");
    let want = in_memory.search("aten::mm").len() as u64;
    let app = App::new(&Options {
        open: vec![path],
        index: true,
        ..Options::default()
    });
    let mut h = harness(app);
    settle(&mut h);
    {
        let s = &mut h.state_mut().timeline.search;
        s.open = true;
        s.query = "aten::mm".to_owned();
    }
    h.step();
    assert_eq!(
        h.state().timeline.search.whole.as_ref().map(|w| w.total),
        Some(want)
    );
    // "Next" moves to a match: the window is read around it and it is
    // selected there.
    h.get_by_label("Next").click();
    h.step();
    settle(&mut h);
    let app = h.state();
    let sel = app.selected.expect("a match is selected");
    let view = app.view.as_ref().expect("view");
    let span = &view.trace.spans[sel as usize];
    assert!(span.name.contains("aten::mm"), "{}", span.name);
    let mid = app.timeline.start_ns + app.timeline.width_ns / 2.0;
    assert!((span.start_ns as f64) <= mid && mid <= span.end_ns() as f64 + 1.0);
}

#[test]
fn an_area_analyses_as_in_memory() {
    let path = copy("area");
    let in_memory =
        keel_profiler::view::TraceView::new(keel_trace::load_trace(&path).expect("load"), "gpt2");
    let app = App::new(&Options {
        open: vec![path],
        index: true,
        ..Options::default()
    });
    let (lo, _) = in_memory.bounds;
    for (lanes, a, b) in [
        (
            (0..in_memory.lanes.len()).collect::<Vec<_>>(),
            10_000_000,
            40_000_000,
        ),
        (vec![0, 5], 0, 190_000_000),
    ] {
        let sel = Selection {
            lanes,
            t0: lo + a,
            t1: lo + b,
        };
        let got = app.analyse_area(&sel).expect("analyse");
        let want = keel_profiler::selection::analyse(&in_memory, &sel);
        assert_eq!(text(&got, 1000), text(&want, 1000));
    }
}

#[test]
fn the_command_line_converts_and_opens_indexed() {
    let path = copy("cli");
    let out = path.with_file_name("converted.keelidx");
    let printed = common::headless(["--convert".as_ref(), path.as_os_str(), out.as_os_str()]);
    assert!(printed.contains("(17782 spans)"), "{printed}");
    let report = common::headless(["--open".as_ref(), out.as_os_str()]);
    assert!(
        report.starts_with("Indexed trace: 7 lanes, 17782 spans"),
        "{report}"
    );
    assert!(report.contains("aten::addmm\t192\t"), "{report}");
    // The selection of an indexed file prints what the trace's does.
    let args = |p: &PathBuf| {
        vec![
            "--open".into(),
            p.clone().into_os_string(),
            "--select".into(),
            "10ms..40ms".into(),
        ]
    };
    assert_eq!(common::headless(args(&out)), common::headless(args(&path)));
}

/// Rows drawn from their coarser levels cover what rows walked span by
/// span cover: the same frames of the real trace repeated, whole and
/// zoomed, both ways, and again after a live fragment grew the rows.
#[test]
fn levels_draw_what_the_spans_draw() {
    // The real trace eight times over: rows of thousands of spans, with
    // the structure of a training step.
    let one = keel_trace::load_trace(&gpt2()).expect("load");
    let (lo, hi) = one.spans.iter().fold((u64::MAX, 0), |(lo, hi), s| {
        (lo.min(s.start_ns), hi.max(s.end_ns()))
    });
    let mut t = one.tables_only();
    for c in 0..8 {
        t.spans.extend(one.spans.iter().map(|s| keel_trace::Span {
            start_ns: s.start_ns + c * (hi - lo + 1_000_000),
            ..s.clone()
        }));
    }
    let mut app = App::new(&Options::default());
    app.set_trace(t, "gpt2 x8");
    let rows = app.view.as_ref().expect("view").lanes[0].rows[0]
        .spans
        .len();
    assert!(rows > 4096, "{rows} spans: rows this long have levels");
    let mut h = harness(app);
    h.step();
    h.step();
    // The last step: a ninth copy, appended live, drawn span by span
    // until the levels cover it (then the whole picture is compared again).
    let ninth = {
        let mut f = one.tables_only();
        f.spans = one
            .spans
            .iter()
            .map(|s| keel_trace::Span {
                start_ns: s.start_ns + 8 * (hi - lo + 1_000_000),
                ..s.clone()
            })
            .collect();
        f
    };
    for (step, zoom) in [(0, 1.0), (0, 3.0), (0, 20.0), (1, 1.0), (1, 3.0)] {
        if step == 1 && zoom == 1.0 {
            let app = h.state_mut();
            std::sync::Arc::get_mut(app.view.as_mut().expect("view"))
                .expect("the view is the app's alone")
                .append(ninth.clone())
                .expect("append");
        }
        let mut images = Vec::new();
        for levels in [true, false] {
            {
                let app = h.state_mut();
                let v = app.view.as_ref().expect("view");
                app.timeline.fit(v);
                app.timeline
                    .zoom(zoom, app.timeline.start_ns + app.timeline.width_ns * 0.3);
                app.timeline.levels = levels;
            }
            h.step();
            images.push(h.render().expect("a renderer (lavapipe)"));
        }
        let (a, b) = (&images[0], &images[1]);
        assert_eq!(a.dimensions(), b.dimensions());
        // Where spans are drawn (bright) against the dark lanes; a merged
        // block's colour is its first span's kind, and where a block
        // starts differs between the two ways, so colours are not compared.
        let bright = |p: &image::Rgba<u8>| p.0[..3].iter().any(|&c| c > 90);
        let differ = a
            .pixels()
            .zip(b.pixels())
            .filter(|(p, q)| bright(p) != bright(q))
            .count();
        let total = (a.width() * a.height()) as usize;
        assert!(
            differ * 200 < total,
            "at zoom {zoom}: {differ} of {total} pixels differ"
        );
    }
}
