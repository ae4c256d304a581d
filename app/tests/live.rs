//! Live sessions over real sockets on 127.0.0.1: two programs at once on
//! one clock, a program that restarts (the gap drawn, the timeline
//! continued), retention (memory bounded, the rest on disk and still
//! reachable), and a flood the viewer cannot take (dropped and counted).
//! The programs are `keel::profiler::live::publish` servers sending
//! traces as a bridge or generator would.

use std::time::{Duration, Instant};

use egui_kittest::Harness;
use keel::profiler::live::{self, LiveOptions, Publisher};
use keel::profiler::{Lane, LaneKind, Span, SpanKind, Trace};
use keel_profiler::App;
use keel_profiler::cli::Options;

fn program(name: &str, addr: &str) -> Publisher {
    let options = LiveOptions {
        program_name: Some(name.to_owned()),
        queue_chunks: 4_096,
        ..LiveOptions::default()
    };
    live::publish(addr, options).expect("publish")
}

/// `n` spans named `name` on one host thread, from `t0` ns, 1 us apart.
fn spans(name: &str, t0: u64, n: u64) -> Trace {
    Trace {
        version: keel::profiler::TRACE_VERSION,
        lanes: vec![Lane {
            kind: LaneKind::Host { thread: 1 },
            name: "main".to_owned(),
            group: String::new(),
        }],
        spans: (0..n)
            .map(|i| Span {
                lane: 0,
                name: name.into(),
                kind: SpanKind::Annotation,
                start_ns: t0 + i * 1_000,
                dur_ns: 600,
                op: 0,
                args: Vec::new(),
            })
            .collect(),
        ..Trace::default()
    }
}

/// Steps `app` (no window) until `done`, at most 30 s.
fn until(app: &mut App, what: &str, done: impl Fn(&App) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(app) {
        assert!(
            Instant::now() < deadline,
            "{what}: not in 30 s (error: {:?}, sources: {:?})",
            app.error,
            app.sources.live
        );
        std::thread::sleep(Duration::from_millis(5));
        app.poll();
    }
}

/// Waits until `p` has a viewer (one that will receive what it sends).
fn viewed(p: &Publisher) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.viewers() == 0 {
        assert!(Instant::now() < deadline, "no viewer came");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn named<'a>(app: &'a App, name: &'a str) -> impl Iterator<Item = &'a Span> + 'a {
    app.view
        .iter()
        .flat_map(|v| &v.trace.spans)
        .filter(move |s| s.name == name)
}

#[test]
fn two_programs_stream_side_by_side_on_one_clock() {
    let trainer = program("trainer", "127.0.0.1:0");
    std::thread::sleep(Duration::from_millis(30));
    let loader = program("loader", "127.0.0.1:0");
    let mut app = App::new(&Options {
        connect: vec![trainer.addr().to_string(), loader.addr().to_string()],
        ..Options::default()
    });
    viewed(&trainer);
    viewed(&loader);
    trainer.send(&spans("step", 1_000_000, 10)).expect("send");
    loader
        .send(&spans("load batch", 1_000_000, 10))
        .expect("send");
    until(&mut app, "both programs' spans", |a| {
        named(a, "step").count() == 10 && named(a, "load batch").count() == 10
    });
    let view = app.view.as_ref().expect("live view");
    // Each program is its own group, its lanes apart from the other's.
    let groups: Vec<&str> = view.groups.iter().map(|g| g.label.as_str()).collect();
    assert!(groups.contains(&"trainer"), "{groups:?}");
    assert!(groups.contains(&"loader"), "{groups:?}");
    let step = named(&app, "step").next().expect("step");
    let load = named(&app, "load batch").next().expect("load");
    assert_ne!(step.lane, load.lane);
    // One clock: both sent time 1 ms of their own clocks, which differ by
    // the programs' origins.
    let apart = loader.program().origin_unix_ns - trainer.program().origin_unix_ns;
    assert!(apart >= 30_000_000, "{apart}");
    assert_eq!(load.start_ns as i64 - step.start_ns as i64, apart);
    let status = app.timeline.live_status.clone().expect("status line");
    assert!(status.contains("2 of 2 connected"), "{status}");
    let sources = app.sources.live.clone().expect("sources");
    assert!(
        sources.contains("trainer pid") && sources.contains("loader pid"),
        "{sources}"
    );
    // The timeline, fitted, draws both programs' spans (a block each at
    // least) in a real egui context.
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.state_mut().timeline.follow_live = false;
    h.state_mut().timeline.fit_pending = true;
    h.run_steps(3);
    let t = &h.state().timeline;
    assert!(
        t.drawn >= 2,
        "{} drawn in {} + {} ns",
        t.drawn,
        t.start_ns,
        t.width_ns
    );
}

#[test]
fn a_restarted_program_continues_the_timeline_after_a_gap() {
    let first = program("trainer", "127.0.0.1:0");
    let addr = first.addr();
    let mut app = App::new(&Options {
        connect: vec![addr.to_string()],
        ..Options::default()
    });
    viewed(&first);
    first.send(&spans("step", 0, 5)).expect("send");
    until(&mut app, "the first run's spans", |a| {
        named(a, "step").count() == 5
    });
    let lanes_before = app.view.as_ref().map_or(0, |v| v.trace.lanes.len());
    // The program exits, and starts again on the same address.
    first.stop();
    until(&mut app, "the loss noticed", |a| {
        a.live.as_ref().is_some_and(|l| l.sources[0].lost.is_some())
    });
    std::thread::sleep(Duration::from_millis(200));
    let second = program("trainer", &addr.to_string());
    let restarted = Instant::now();
    viewed(&second);
    let back = restarted.elapsed();
    second.send(&spans("step", 0, 5)).expect("send");
    until(&mut app, "the second run's spans", |a| {
        named(a, "step").count() == 10
    });
    let live = app.live.as_ref().expect("session");
    let source = &live.sources[0];
    assert_eq!(source.reconnects, 1);
    assert!(back < Duration::from_secs(1), "reconnected in {back:?}");
    println!("reconnected to the restarted program in {back:?}");
    // Same timeline, same lanes (the program's name labels them), the
    // second run after the first on the session clock.
    let view = app.view.as_ref().expect("view");
    let runs: Vec<&Span> = named(&app, "step").collect();
    assert!(runs.iter().all(|s| s.lane == runs[0].lane));
    assert!(runs[5].start_ns > runs[4].start_ns + 200_000_000);
    // The gap, on the source's connection lane, between the two runs.
    let gap = named(&app, "no connection").next().expect("the gap");
    // From the loss to the connection coming back, which is after the
    // second run started (its server listened before the viewer got in).
    assert!(gap.start_ns > runs[4].end_ns(), "{gap:?}");
    assert!(gap.end_ns() >= runs[5].start_ns, "{gap:?}");
    assert!(gap.end_ns() < runs[5].start_ns + 1_000_000_000, "{gap:?}");
    assert!(gap.dur_ns >= 200_000_000, "{}", gap.dur_ns);
    let lane = &view.trace.lanes[gap.lane as usize];
    assert_eq!(
        (lane.name.as_str(), lane.group.as_str()),
        ("connection", "trainer")
    );
    assert_eq!(
        view.trace.lanes.len(),
        lanes_before + 1,
        "only the gap's lane is new"
    );
}

#[test]
fn retention_bounds_memory_and_the_rest_stays_reachable_on_disk() {
    let p = program("trainer", "127.0.0.1:0");
    let mut app = App::new(&Options {
        connect: vec![p.addr().to_string()],
        retain: 10_000,
        ..Options::default()
    });
    viewed(&p);
    let total = 60_000u64;
    let mut most = 0;
    for k in 0..total / 1_000 {
        p.send(&spans(&format!("op {}", k % 7), k * 1_000_000, 1_000))
            .expect("send");
        // The viewer keeps up (the flood case is another test).
        until(&mut app, "the fragment", |a| {
            a.live.as_ref().map_or(0, |l| l.sources[0].chunks) >= k + 2
        });
        let resident = app.view.as_ref().map_or(0, |v| v.trace.spans.len());
        most = most.max(resident);
    }
    // The retention, and the fragment that went over it (the next view is
    // made on another thread while that one is still drawn).
    assert!(most <= 11_000, "at most the retention in memory: {most}");
    app.settle_live().expect("settled");
    let resident = app.view.as_ref().map_or(0, |v| v.trace.spans.len()) as u64;
    let live = app.live.as_ref().expect("session");
    assert_eq!(live.history.span_count() + resident, total, "nothing lost");
    assert!(live.history.parts().len() >= 15);
    // Search counts what is on disk too.
    app.timeline.search.query = "op 3".to_owned();
    app.poll();
    let on_disk = app.timeline.search.on_disk.expect("counted on disk");
    let in_memory = app.view.as_ref().map_or(0, |v| v.search("op 3").len()) as u64;
    assert_eq!(
        on_disk + in_memory,
        (0..60).filter(|k| k % 7 == 3).count() as u64 * 1_000
    );
    // Scrolled back before what is in memory: the history is shown.
    // The session's start: where the view's bounds begin.
    let first = app.view.as_ref().map_or(0, |v| v.bounds.0);
    app.timeline.follow_live = false;
    app.timeline.start_ns = first as f64;
    app.timeline.width_ns = 100_000.0;
    app.poll();
    assert!(app.indexed.is_some(), "the history is shown");
    let shown = app.view.as_ref().expect("history window");
    assert!(shown.trace.spans.iter().any(|s| s.name == "op 0"));
    let end = app
        .live
        .as_ref()
        .and_then(|l| l.parked.as_ref())
        .map(|v| v.bounds.1);
    assert_eq!(
        Some(shown.bounds.1),
        end,
        "the timeline reaches what is in memory"
    );
    // More arrives while the history is shown: it goes to memory.
    p.send(&spans("late", total * 1_000_000, 10)).expect("send");
    until(&mut app, "the late spans", |a| {
        a.live
            .as_ref()
            .and_then(|l| l.parked.as_ref())
            .is_some_and(|v| v.trace.spans.iter().any(|s| s.name == "late"))
    });
    // Following live again shows what is in memory.
    app.timeline.follow_live = true;
    app.poll();
    assert!(app.indexed.is_none());
    assert_eq!(named(&app, "late").count(), 10);
    // The whole session saves as a directory of segments, and opens
    // again as one trace: every span, searchable.
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("live-session.keelsession");
    let _ = std::fs::remove_dir_all(&dir);
    app.save(&dir);
    assert!(app.error.is_none(), "{:?}", app.error);
    let mut reopened = App::new(&Options::default());
    reopened.open(&dir);
    assert!(reopened.error.is_none(), "{:?}", reopened.error);
    let s = reopened
        .indexed
        .as_mut()
        .expect("opened a window at a time");
    assert_eq!(s.trace.span_count(), total + 10);
    s.search("late").expect("search");
    assert_eq!(s.matches.total, 10);
    s.search("op 3").expect("search");
    assert_eq!(s.matches.total, on_disk + in_memory);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_flood_the_viewer_cannot_take_is_dropped_and_counted() {
    let p = program("flood", "127.0.0.1:0");
    let mut app = App::new(&Options {
        connect: vec![p.addr().to_string()],
        ..Options::default()
    });
    viewed(&p);
    // The app does not poll while 2,000 fragments come: its queue holds
    // a bounded number, the rest are dropped and counted.
    let sent = 2_000;
    for k in 0..sent {
        p.send(&spans("burst", k * 10_000, 5)).expect("send");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while app.live.as_ref().map_or(0, |l| l.viewer_dropped()) + p.dropped_chunks() == 0 {
        assert!(Instant::now() < deadline, "nothing dropped");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    app.poll();
    let live = app.live.as_ref().expect("session");
    let got = live.sources[0].chunks;
    let dropped = live.viewer_dropped() + live.sources[0].server_dropped.max(p.dropped_chunks());
    assert!(got <= keel_profiler::live::QUEUE as u64 + 1, "{got} queued");
    assert!(got + dropped <= sent + 1);
    let status = app.timeline.live_status.clone().expect("status");
    assert!(
        status.contains(&format!("{} by this viewer", live.viewer_dropped())),
        "{status}"
    );
}

/// A viewer that crashed leaves its segments in the temp dir; the next
/// session removes every scratch directory whose owner lock nobody holds,
/// and leaves one a live session holds, one without a lock file, and
/// anything not Keel's.
#[test]
fn scratch_left_by_a_crashed_session_is_swept() {
    let root = std::env::temp_dir().join(format!("keel-sweep-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let make = |name: &str, lock: bool| {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        std::fs::write(dir.join("segment-00000.keelidx"), b"segment").expect("a segment");
        if lock {
            std::fs::File::create(dir.join("owner.lock")).expect("a lock file");
        }
        dir
    };
    let crashed = make("keel-live-111-1", true);
    let alive = make("keel-live-222-2", true);
    let unlocked = make("keel-live-333-3", false);
    let other = make("not-keel", true);
    let held = std::fs::File::open(alive.join("owner.lock")).expect("open the lock");
    held.try_lock().expect("the live session's lock");

    assert_eq!(
        live_sweep(&root, Duration::from_secs(3600)),
        0,
        "young directories stay"
    );
    assert_eq!(live_sweep(&root, Duration::ZERO), 1);
    assert!(!crashed.exists(), "the crashed session's scratch is gone");
    for kept in [&alive, &unlocked, &other] {
        assert!(
            kept.join("segment-00000.keelidx").exists(),
            "{} stays",
            kept.display()
        );
    }
    drop(held);
    assert_eq!(
        live_sweep(&root, Duration::ZERO),
        1,
        "unlocked, it goes too"
    );
    assert!(!alive.exists());
    std::fs::remove_dir_all(&root).expect("the test's root");
}

fn live_sweep(root: &std::path::Path, min_age: Duration) -> usize {
    keel_profiler::live::sweep_stale_sessions(root, min_age)
}

/// The session starts at its first span, not at 0, when the program's
/// first fragment (its lanes, no spans) is shown on its own.
#[test]
fn a_first_fragment_without_spans_leaves_the_start_at_the_first_span() {
    let p = program("trainer", "127.0.0.1:0");
    let mut app = App::new(&Options {
        connect: vec![p.addr().to_string()],
        ..Options::default()
    });
    viewed(&p);
    until(&mut app, "the program's first fragment", |a| {
        a.live.as_ref().map_or(0, |l| l.sources[0].chunks) >= 1
    });
    p.send(&spans("op", 5_000_000, 10)).expect("send");
    until(&mut app, "the spans", |a| named(a, "op").count() == 10);
    let v = app.view.as_ref().expect("the live view");
    let first = v.trace.spans.iter().map(|s| s.start_ns).min();
    assert_eq!(
        Some(v.bounds.0),
        first,
        "the session's start is its first span"
    );
}
