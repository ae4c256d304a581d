//! Indexed files: the real GPT-2 trace converted and read back window by
//! window against the in-memory index, search against the in-memory
//! search, coarse levels against what they merge, conversion on first
//! open, and damaged files (never a panic, always the file named).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{Rng, mutate};
use keel_trace::indexed::{self, IndexWriter, IndexedTrace, Window, level_for, level_res};
use keel_trace::view::TraceView;
use keel_trace::{Span, Trace, load_trace};

fn gpt2_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import/gpt2_train_h200.pt.trace.json.gz")
}

fn gpt2() -> &'static TraceView {
    static V: OnceLock<TraceView> = OnceLock::new();
    V.get_or_init(|| TraceView::new(load_trace(&gpt2_path()).expect("import"), "gpt2"))
}

/// A scratch directory of one test, emptied (under cargo's `target/tmp`).
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("indexed-{name}"));
    // What an earlier run left.
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn gpt2_index() -> &'static (PathBuf, IndexedTrace) {
    static I: OnceLock<(PathBuf, IndexedTrace)> = OnceLock::new();
    I.get_or_init(|| {
        let path = scratch("gpt2").join("gpt2.keelidx");
        indexed::write_trace(&gpt2().trace, &path, None).expect("write");
        let t = IndexedTrace::open(&path).expect("open");
        (path, t)
    })
}

fn all(t0: u64, t1: u64) -> Window {
    Window {
        t0,
        t1,
        ns_per_px: 0.0,
        lanes: None,
        max_spans: usize::MAX,
    }
}

type Key = (u32, String, u64, u64, String, Vec<(String, String)>, u16);

fn key(s: &Span, depth: u16) -> Key {
    (
        s.lane,
        s.name.to_string(),
        s.start_ns,
        s.dur_ns,
        s.kind.to_string(),
        s.args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        depth,
    )
}

/// The spans of `v` overlapping `[t0, t1]` as the viewer finds them (per
/// row, by binary search), with their depth rows.
fn visible(v: &TraceView, t0: u64, t1: u64) -> Vec<Key> {
    let mut out = Vec::new();
    for li in &v.lanes {
        for (d, row) in li.rows.iter().enumerate() {
            for i in row.visible(t0, t1) {
                let s = row.spans[i];
                out.push(key(&v.trace.spans[s as usize], d as u16));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn whole_trace_at_full_resolution_is_the_trace() {
    let v = gpt2();
    let (_, idx) = gpt2_index();
    assert_eq!(idx.span_count(), v.trace.spans.len() as u64);
    assert_eq!(idx.tables().lanes, v.trace.lanes);
    assert_eq!(idx.tables().devices, v.trace.devices);
    let names = |c: &[keel_trace::Counter]| {
        c.iter()
            .map(|c| (c.device, c.name.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&idx.tables().counters), names(&v.trace.counters));
    assert!(
        idx.tables().memory.is_empty(),
        "allocator events are not kept"
    );
    let (lo, hi) = v.bounds;
    let w = idx.window(&all(lo, hi)).expect("window");
    assert_eq!(w.level, 0);
    assert!(
        w.records.iter().all(Option::is_some),
        "no runs at full resolution"
    );
    let got = visible(&w.view, lo, hi);
    assert_eq!(got.len(), v.trace.spans.len());
    assert_eq!(got, visible(v, lo, hi), "spans, their args and their rows");
    // Every lane keeps its whole trace's rows, and the whole trace's bounds.
    for (a, b) in w.view.lanes.iter().zip(&v.lanes) {
        assert_eq!(
            (a.lane, a.rows.len(), &a.label),
            (b.lane, b.rows.len(), &b.label)
        );
    }
    assert_eq!(w.view.bounds, v.bounds);
    assert_eq!(w.view.trace.flows.len(), v.trace.flows.len());
    assert_eq!(w.view.trace.counters, v.trace.counters);
    // A record read alone is the span the window holds.
    for (i, r) in w.records.iter().enumerate().step_by(97) {
        let r = r.expect("a record");
        assert_eq!(idx.span(r).expect("span"), w.view.trace.spans[i]);
        assert_eq!(w.local(r), Some(i as u32));
    }
}

#[test]
fn windows_hold_what_the_viewer_shows_there() {
    let v = gpt2();
    let (_, idx) = gpt2_index();
    let (lo, hi) = v.bounds;
    let mut rng = Rng(0x1d3);
    for _ in 0..40 {
        let a = lo + rng.below((hi - lo) as usize) as u64;
        let b = (a + rng.below(((hi - lo) / 20) as usize) as u64).min(hi);
        let w = idx.window(&all(a, b)).expect("window");
        assert_eq!(visible(&w.view, a, b), visible(v, a, b), "window {a}..{b}");
        // Flows whose earlier end is in the window are there.
        let want = v
            .trace
            .flows
            .iter()
            .filter(|f| (a..=b).contains(&f.from.ts_ns.min(f.to.ts_ns)))
            .count();
        let got = w
            .view
            .trace
            .flows
            .iter()
            .filter(|f| (a..=b).contains(&f.from.ts_ns.min(f.to.ts_ns)))
            .count();
        assert_eq!(got, want);
    }
    // Only some lanes.
    let lanes = vec![0, 2];
    let w = idx
        .window(&Window {
            lanes: Some(lanes.clone()),
            ..all(lo, hi)
        })
        .expect("window");
    assert!(!w.view.trace.spans.is_empty());
    assert!(w.view.trace.spans.iter().all(|s| lanes.contains(&s.lane)));
    // A window past its span budget is an error, not a huge read.
    let e = idx
        .window(&Window {
            max_spans: 100,
            ..all(lo, hi)
        })
        .expect_err("too many spans");
    assert!(e.to_string().contains("more than 100 spans"), "{e}");
}

#[test]
fn coarse_levels_merge_only_what_a_pixel_cannot_show() {
    let v = gpt2();
    let (_, idx) = gpt2_index();
    let (lo, hi) = v.bounds;
    let full = visible(v, lo, hi).len();
    // Finer resolutions read at least as many items.
    let mut last = 0;
    for px in [1_000.0, 10_000.0, 100_000.0, 1e6, 1e7] {
        let ns_per_px = (hi - lo) as f64 / px;
        let w = idx
            .window(&Window {
                ns_per_px,
                ..all(lo, hi)
            })
            .expect("window");
        let res = level_res(w.level);
        assert!(w.level == level_for(ns_per_px) && res as f64 <= ns_per_px);
        let spans = &w.view.trace.spans;
        // Every span is either itself or a run whose count adds up.
        let mut count = 0u64;
        for (s, r) in spans.iter().zip(&w.records) {
            match r {
                Some(id) => {
                    count += 1;
                    assert_eq!(idx.span(*id).expect("span").start_ns, s.start_ns);
                }
                None => {
                    let n: u64 = s.arg("merged spans").expect("count").parse().expect("n");
                    assert!(n > 1);
                    count += n;
                }
            }
        }
        assert_eq!(
            count as usize, full,
            "at {px} px every span is counted once"
        );
        // At most a few items per resolution step on every row.
        let rows: usize = w.view.lanes.iter().map(|l| l.rows.len()).sum();
        if let Some(steps) = (hi - lo).checked_div(res) {
            let bound = rows * (3 * steps as usize + 2);
            assert!(spans.len() <= bound, "{} items > {bound}", spans.len());
        }
        assert!(spans.len() >= last, "{} items after {last}", spans.len());
        last = spans.len();
        // Spans on one row stay disjoint and in order, as the viewer needs.
        for l in &w.view.lanes {
            for row in &l.rows {
                assert!(row.starts.windows(2).all(|p| p[0] <= p[1]));
            }
        }
    }
    // Counters keep each pixel column's lowest and highest points.
    // Few columns read coarse groups of points instead of the points.
    for cols in [500.0, 50.0, 5.0] {
        let w = idx
            .window(&Window {
                ns_per_px: (hi - lo) as f64 / cols,
                ..all(lo, hi)
            })
            .expect("window");
        for (c, full) in w.view.trace.counters.iter().zip(&v.trace.counters) {
            assert!(
                c.points.len() <= 4 * cols as usize + 8,
                "{}",
                c.points.len()
            );
            assert!(c.points.len() <= full.points.len());
            let range =
                |p: &[(u64, i64)]| (p.iter().map(|p| p.1).min(), p.iter().map(|p| p.1).max());
            assert_eq!(range(&c.points), range(&full.points), "{}", c.name);
            assert!(c.points.windows(2).all(|p| p[0].0 <= p[1].0));
            assert!(c.points.iter().all(|p| full.points.contains(p)));
        }
    }
    // Spans at least one resolution long are never merged.
    let ns_per_px = (hi - lo) as f64 / 2_000.0;
    let w = idx
        .window(&Window {
            ns_per_px,
            ..all(lo, hi)
        })
        .expect("window");
    let res = level_res(w.level);
    let kept: std::collections::HashSet<(u32, u64, u64)> = w
        .view
        .trace
        .spans
        .iter()
        .zip(&w.records)
        .filter(|(_, r)| r.is_some())
        .map(|(s, _)| (s.lane, s.start_ns, s.dur_ns))
        .collect();
    for s in &v.trace.spans {
        if s.dur_ns >= res {
            assert!(
                kept.contains(&(s.lane, s.start_ns, s.dur_ns)),
                "{} merged",
                s.name
            );
        }
    }
    assert!(w.view.trace.spans.len() < v.trace.spans.len() / 4);
}

#[test]
fn search_counts_and_steps_through_every_match_in_order() {
    let v = gpt2();
    let (_, idx) = gpt2_index();
    for q in ["aten::", "GEMM", "nccl", "ProfilerStep", "no such name"] {
        let want = v.search(q);
        let m = idx.search(q).expect("search");
        assert_eq!(m.total, want.len() as u64, "{q}");
        let mut got = Vec::new();
        let mut cur = None;
        for _ in 0..want.len() {
            let r = idx.step(&m, cur, 0, true).expect("step").expect("a match");
            let s = idx.span(r).expect("span");
            got.push((s.start_ns, s.name.to_string()));
            cur = Some(r);
        }
        let mut want: Vec<(u64, String)> = want
            .iter()
            .map(|&i| {
                let s = &v.trace.spans[i as usize];
                (s.start_ns, s.name.to_string())
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{q}");
        if let Some(c) = cur {
            // Past the last match it wraps to the first, and back.
            let first = idx.step(&m, Some(c), 0, true).expect("step");
            assert_eq!(idx.step(&m, first, 0, false).expect("step"), Some(c));
        } else {
            assert_eq!(idx.step(&m, None, 0, true).expect("step"), None);
        }
    }
    // From a time: the first match starting there or later.
    let m = idx.search("aten::mm").expect("search");
    let mid = (v.bounds.0 + v.bounds.1) / 2;
    let r = idx.step(&m, None, mid, true).expect("step").expect("match");
    let want = v
        .search("aten::mm")
        .into_iter()
        .map(|i| v.trace.spans[i as usize].start_ns)
        .filter(|&s| s >= mid)
        .min();
    assert_eq!(Some(idx.span(r).expect("span").start_ns), want);
}

#[test]
fn name_totals_add_up() {
    let v = gpt2();
    let (_, idx) = gpt2_index();
    let mut want: HashMap<String, (u64, u64)> = HashMap::new();
    for s in &v.trace.spans {
        let e = want.entry(s.name.to_string()).or_default();
        e.0 += 1;
        e.1 += s.dur_ns;
    }
    let got = idx.name_totals().expect("names");
    assert_eq!(got.len(), want.len());
    for n in &got {
        assert_eq!(want[&n.name], (n.count, n.total_ns), "{}", n.name);
    }
    assert!(got.windows(2).all(|p| p[0].total_ns >= p[1].total_ns));
}

#[test]
fn a_trace_converts_on_first_open_only() {
    let dir = scratch("convert");
    let src = dir.join("gpt2.json.gz");
    std::fs::copy(gpt2_path(), &src).expect("copy");
    let (a, made) = indexed::open_or_convert(&src).expect("convert");
    assert!(made);
    assert_eq!(a.span_count(), gpt2().trace.spans.len() as u64);
    assert!(indexed::index_path(&src).exists());
    let (_, made) = indexed::open_or_convert(&src).expect("reopen");
    assert!(!made, "the index is reused");
    // The index itself opens as it is.
    let (_, made) = indexed::open_or_convert(&indexed::index_path(&src)).expect("index");
    assert!(!made);
    // A changed source is converted again.
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&src)
        .expect("open");
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000))
        .expect("mtime");
    drop(f);
    let (_, made) = indexed::open_or_convert(&src).expect("reconvert");
    assert!(made, "an index older than its source is rebuilt");
    // Nothing else is left beside it.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["gpt2.json.gz", "gpt2.json.gz.keelidx"]);
}

#[test]
fn spans_out_of_order_are_refused() {
    let t = gpt2();
    let path = scratch("order").join("bad.keelidx");
    let mut w = IndexWriter::create(&path, &t.trace).expect("create");
    let mut s = t.trace.spans[0].clone();
    s.start_ns = 2_000;
    w.push(&s).expect("first");
    s.start_ns = 1_000;
    let e = w.push(&s).expect_err("earlier");
    assert!(e.to_string().contains("start order"), "{e}");
    s.lane = 1 << 30;
    s.start_ns = 3_000;
    let e = w.push(&s).expect_err("lane");
    assert!(e.to_string().contains("lanes"), "{e}");
}

fn small_index() -> Vec<u8> {
    let v = gpt2();
    // The first 300 spans, and flows: small enough to mutate many times.
    let mut t: Trace = v.trace.tables_only();
    let mut spans = v.trace.spans.clone();
    spans.sort_by_key(|s| s.start_ns);
    t.spans = spans.into_iter().take(300).collect();
    t.flows = v.trace.flows.iter().take(40).cloned().collect();
    t.counters = v.trace.counters.clone();
    let path = scratch("small").join("small.keelidx");
    indexed::write_trace(&t, &path, None).expect("write");
    std::fs::read(&path).expect("read")
}

fn exercise(t: &IndexedTrace) {
    let (lo, hi) = t.bounds();
    for px in [0.0, (hi - lo) as f64 / 100.0] {
        let _ = t.window(&Window {
            ns_per_px: px,
            max_spans: 10_000,
            ..all(lo, hi)
        });
    }
    if let Ok(m) = t.search("a") {
        let _ = t.step(&m, None, lo, true);
        let _ = t.step(&m, Some(3), lo, false);
    }
    let _ = t.name_totals();
    for id in [0, 1, 299, 300, u32::MAX] {
        let _ = t.span(id);
    }
}

#[test]
fn damaged_files_never_panic_and_name_the_file() {
    let good = small_index();
    let t = IndexedTrace::from_bytes(good.clone(), "small.keelidx").expect("good");
    assert_eq!(t.span_count(), 300);
    exercise(&t);
    let tokens: &[&[u8]] = &[b"KEELIDX\0", &[0xff; 8], &[0; 8], &[0x80; 10]];
    let mut rng = Rng(0x005e_ed1d);
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..6_000 {
        let bad = mutate(&mut rng, &good, tokens);
        match IndexedTrace::from_bytes(bad, "small.keelidx") {
            Ok(t) => {
                opened += 1;
                exercise(&t);
            }
            Err(e) => {
                refused += 1;
                let s = e.to_string();
                assert!(s.contains("small.keelidx"), "{s}");
                assert!(
                    s.contains("expected")
                        || s.contains("outside")
                        || s.contains("overlaps")
                        || s.contains("twice")
                        || s.contains("tables")
                        || s.contains("cannot hold")
                        || s.contains("row"),
                    "{s}"
                );
            }
        }
    }
    assert!(
        opened > 100 && refused > 100,
        "{opened} opened, {refused} refused"
    );
    // Specific damage: a short file, another magic, a newer version.
    for (bytes, what) in [
        (good[..100].to_vec(), "expected at least"),
        ([b"KEELTRC\0", &good[8..]].concat(), "KEELTRC"),
        (
            [&good[..8], &9u32.to_le_bytes()[..], &good[12..]].concat(),
            "version 1, found 9",
        ),
    ] {
        let e = IndexedTrace::from_bytes(bytes, "x.keelidx").expect_err(what);
        assert!(e.to_string().contains(what), "{e}");
    }
    let e = IndexedTrace::open(Path::new("/no/such/file.keelidx")).expect_err("missing");
    assert!(e.to_string().contains("/no/such/file.keelidx"), "{e}");
}

/// The real trace streamed into a live view a fragment at a time, its
/// oldest spans evicted to segment files as a bounded viewer does: the
/// segments read as one trace hold every evicted span, window, search
/// and totals alike.
#[test]
fn evicted_segments_read_as_one_trace() {
    let whole = &gpt2().trace;
    let dir = scratch("segments");
    let mut live = TraceView::new(whole.tables_only(), "live");
    let mut set = indexed::IndexedSet::new();
    let mut evicted: Vec<Span> = Vec::new();
    let chunk = whole.spans.len() / 7 + 1;
    for (i, part) in whole.spans.chunks(chunk).enumerate() {
        let mut f = whole.tables_only();
        f.spans = part.to_vec();
        live.append(f).expect("append");
        if live.trace.spans.len() > chunk {
            let out = live.evict_front(chunk / 2);
            evicted.extend(out.spans.iter().cloned());
            let path = dir.join(format!("segment-{i}.keelidx"));
            indexed::write_trace(&out, &path, None).expect("write segment");
            set.push(IndexedTrace::open(&path).expect("open segment"));
        }
    }
    assert!(set.parts().len() >= 5, "{} parts", set.parts().len());
    assert_eq!(set.span_count(), evicted.len() as u64);
    assert_eq!(
        evicted.len() + live.trace.spans.len(),
        whole.spans.len(),
        "nothing lost"
    );
    // The whole set at full resolution: every evicted span, once.
    let (b0, b1) = set.bounds().expect("bounds");
    let w = set.window(&all(b0, b1)).expect("window");
    let names = |spans: &mut dyn Iterator<Item = &Span>| {
        let mut v: Vec<(u32, u64, u64, String)> = spans
            .map(|s| (s.lane, s.start_ns, s.dur_ns, s.name.to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&mut w.view.trace.spans.iter()),
        names(&mut evicted.iter())
    );
    for (i, r) in w.records.iter().enumerate() {
        let s = set.span(u64::from(r.expect("a record"))).expect("span");
        assert_eq!(s.start_ns, w.view.trace.spans[i].start_ns);
    }
    assert_eq!(w.view.bounds, (b0, b1));
    // A coarse window of the whole set: fewer items, every span counted.
    let coarse = set
        .window(&Window {
            ns_per_px: (b1 - b0) as f64 / 1_000.0,
            ..all(b0, b1)
        })
        .expect("coarse");
    let counted: u64 = coarse
        .view
        .trace
        .spans
        .iter()
        .zip(&coarse.records)
        .map(|(s, r)| match r {
            Some(_) => 1,
            None => s.args[0].1.parse::<u64>().expect("a run's count"),
        })
        .sum();
    assert_eq!(counted, evicted.len() as u64);
    assert!(
        coarse.view.trace.spans.len() < evicted.len() / 2,
        "{} items for {} spans",
        coarse.view.trace.spans.len(),
        evicted.len()
    );
    // Search and stepping go through every part's matches, in order.
    let wanted = evicted
        .iter()
        .filter(|s| s.name.to_ascii_lowercase().contains("aten::"))
        .count() as u64;
    let (matches, total) = set.search("ATen::").expect("search");
    assert!(wanted > 100);
    assert_eq!(total, wanted);
    let mut at = None;
    let mut starts = Vec::new();
    for _ in 0..total {
        let id = set
            .step(&matches, at, 0, true)
            .expect("step")
            .expect("a match");
        starts.push((set.span(id).expect("span").start_ns, id));
        at = Some(id);
    }
    let mut ids: Vec<u64> = starts.iter().map(|s| s.1).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len() as u64, total, "each match once before wrapping");
    let back = set
        .step(&matches, at, 0, true)
        .expect("step")
        .expect("wraps");
    assert_eq!(back, starts[0].1, "past the last match: the first again");
    let prev = set
        .step(&matches, Some(starts[1].1), 0, false)
        .expect("step")
        .expect("a match");
    assert_eq!(prev, starts[0].1);
    let totals = set.name_totals().expect("totals");
    assert_eq!(
        totals.iter().map(|t| t.count).sum::<u64>(),
        evicted.len() as u64
    );
}
