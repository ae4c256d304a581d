//! Area selection on the real GPT-2 training trace of an H200, checked
//! against brute-force computations over the trace's spans.

use std::collections::HashMap;
use std::path::PathBuf;

use keel_trace::analysis::{activity, stream_times};
use keel_trace::selection::{Selection, analyse, text};
use keel_trace::view::TraceView;
use keel_trace::{Span, load_trace};

fn gpt2() -> TraceView {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import/gpt2_train_h200.pt.trace.json.gz");
    TraceView::new(load_trace(&path).expect("the real trace imports"), "gpt2")
}

fn clip(s: &Span, t0: u64, t1: u64) -> u64 {
    s.end_ns().min(t1).saturating_sub(s.start_ns.max(t0))
}

fn in_window(s: &Span, t0: u64, t1: u64) -> bool {
    if s.dur_ns == 0 {
        t0 <= s.start_ns && s.start_ns <= t1
    } else {
        s.start_ns < t1 && s.end_ns() > t0
    }
}

/// Measure of the union of `[a, b)` intervals.
fn union(mut iv: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    iv.retain(|(a, b)| b > a);
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in iv {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn measure(iv: &[(u64, u64)]) -> u64 {
    iv.iter().map(|(a, b)| b - a).sum()
}

/// Whether the spans of trace lane `lane` nest (no two overlap without
/// one containing the other).
fn nests(view: &TraceView, lane: u32) -> bool {
    let mut spans: Vec<&Span> = view.trace.spans.iter().filter(|s| s.lane == lane).collect();
    spans.sort_by_key(|s| (s.start_ns, std::cmp::Reverse(s.end_ns())));
    let mut open: Vec<u64> = Vec::new();
    for s in spans {
        while open.last().is_some_and(|&e| e <= s.start_ns) {
            open.pop();
        }
        if open.last().is_some_and(|&e| e < s.end_ns()) {
            return false;
        }
        open.push(s.end_ns());
    }
    true
}

#[test]
fn spans_by_name_match_a_brute_force_count() {
    let view = gpt2();
    let (lo, hi) = view.bounds;
    // The middle third of the trace, every lane.
    let (t0, t1) = (lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3);
    let sel = Selection {
        lanes: (0..view.lanes.len()).collect(),
        t0,
        t1,
    };
    let sum = analyse(&view, &sel);
    let mut expect: HashMap<(&str, bool), (u64, u64, Vec<u64>)> = HashMap::new();
    for s in view.trace.spans.iter().filter(|s| in_window(s, t0, t1)) {
        let device = view.lanes[view.lane_pos[s.lane as usize]].device;
        let e = expect.entry((s.name.as_str(), device)).or_default();
        e.0 += 1;
        e.1 += clip(s, t0, t1);
        e.2.push(s.dur_ns);
    }
    assert!(expect.len() > 50, "the window holds many names");
    assert!(
        expect
            .keys()
            .any(|(n, d)| *d && expect.contains_key(&(n, false))),
        "some names are on host and device lanes, in rows of their own"
    );
    assert_eq!(sum.names.len(), expect.len());
    assert_eq!(
        sum.spans,
        expect.values().map(|e| e.0).sum::<u64>(),
        "every span in the window counted once"
    );
    for row in &sum.names {
        let (count, total, durs) = expect
            .get_mut(&(row.name.as_str(), row.device))
            .expect("a name in the window");
        durs.sort_unstable();
        assert_eq!(row.count, *count, "{}", row.name);
        assert_eq!(row.total_ns, *total, "{}", row.name);
        assert!(row.self_ns <= row.total_ns, "{}", row.name);
        assert_eq!(row.max_ns, *durs.last().expect("spans"), "{}", row.name);
        let rank = |p: f64| durs[((p / 100.0 * durs.len() as f64).ceil() as usize).max(1) - 1];
        assert_eq!(row.p50_ns, rank(50.0), "{}", row.name);
        assert_eq!(row.p99_ns, rank(99.0), "{}", row.name);
        let mean = durs.iter().sum::<u64>() as f64 / durs.len() as f64;
        assert!(
            (row.mean_ns - mean).abs() < 1e-6 * mean.max(1.0),
            "{}",
            row.name
        );
    }
    // Most time first.
    assert!(sum.names.windows(2).all(|w| w[0].total_ns >= w[1].total_ns));
    // The same window reversed is the same selection; lanes out of range
    // and repeated are ignored.
    let mut odd = sel.clone();
    (odd.t0, odd.t1) = (t1, t0);
    odd.lanes.extend([0, 10_000]);
    assert_eq!(analyse(&view, &odd), sum);
}

#[test]
fn self_time_and_the_flame_graph_add_up_on_nesting_host_lanes() {
    let view = gpt2();
    let (lo, hi) = view.bounds;
    let (t0, t1) = (lo + (hi - lo) / 4, hi - (hi - lo) / 4);
    let lanes: Vec<usize> = (0..view.lanes.len())
        .filter(|&p| !view.lanes[p].device && nests(&view, view.lanes[p].lane))
        .collect();
    let busy_spans: usize = lanes.iter().map(|&p| view.lanes[p].span_count).sum();
    assert!(
        busy_spans > 5_000,
        "host lanes that nest hold most spans: {busy_spans}"
    );
    let sum = analyse(
        &view,
        &Selection {
            lanes: lanes.clone(),
            t0,
            t1,
        },
    );
    // On nesting lanes, self times partition each lane's busy time.
    let busy: u64 = lanes
        .iter()
        .map(|&p| {
            let lane = view.lanes[p].lane;
            measure(&union(
                view.trace
                    .spans
                    .iter()
                    .filter(|s| s.lane == lane)
                    .map(|s| (s.start_ns.max(t0), s.end_ns().min(t1)))
                    .collect(),
            ))
        })
        .sum();
    let self_total: u64 = sum.names.iter().map(|r| r.self_ns).sum();
    assert_eq!(self_total, busy);
    // The flame graph holds the same time, each frame's width its self
    // time plus its children's widths, children inside their parent.
    let flame = &sum.flame;
    assert_eq!(flame.total_ns, busy);
    assert_eq!(flame.frames.iter().map(|f| f.self_ns).sum::<u64>(), busy);
    assert!(flame.depth >= 3, "a training step nests: {}", flame.depth);
    for (k, f) in flame.frames.iter().enumerate() {
        let children: Vec<_> = flame
            .frames
            .iter()
            .filter(|c| c.parent == Some(k as u32))
            .collect();
        assert_eq!(
            f.total_ns,
            f.self_ns + children.iter().map(|c| c.total_ns).sum::<u64>(),
            "{}",
            f.name
        );
        for c in children {
            assert_eq!(c.depth, f.depth + 1);
            assert!(c.x_ns >= f.x_ns && c.x_ns + c.total_ns <= f.x_ns + f.total_ns);
            assert!(
                flame.frames.iter().position(|x| std::ptr::eq(x, c)) > Some(k),
                "children come after their parent"
            );
        }
    }
    // Every top-level span's time is in a depth-0 frame of its name.
    let top_time: u64 = flame
        .frames
        .iter()
        .filter(|f| f.depth == 0)
        .map(|f| f.total_ns)
        .sum();
    assert_eq!(top_time, busy);
}

#[test]
fn device_busy_idle_and_overlap_match_the_stream_analysis() {
    let view = gpt2();
    let streams: Vec<usize> = (0..view.lanes.len())
        .filter(|&p| view.lanes[p].device)
        .collect();
    assert!(streams.len() >= 2, "compute and copy streams");
    let (lo, hi) = view.bounds;
    // The whole trace: each stream's busy time is HTA's kernel + copy +
    // memset time of that stream.
    let sum = analyse(
        &view,
        &Selection {
            lanes: streams.clone(),
            t0: lo,
            t1: hi,
        },
    );
    let hta = stream_times(&view);
    let streams_seen: Vec<_> = sum.devices.iter().flat_map(|d| &d.streams).collect();
    assert_eq!(streams_seen.len(), hta.len());
    for st in streams_seen {
        let h = hta
            .iter()
            .find(|h| h.lane == view.lanes[st.lane].lane)
            .expect("the stream in the HTA table");
        assert_eq!(
            st.busy_ns,
            h.kernel_ns + h.copy_ns + h.memset_ns,
            "{}",
            st.label
        );
    }
    // A window: busy, idle and overlap from the intervals themselves.
    let (t0, t1) = (lo + (hi - lo) / 5, lo + (hi - lo) / 2);
    let sum = analyse(
        &view,
        &Selection {
            lanes: streams.clone(),
            t0,
            t1,
        },
    );
    let per_stream: Vec<Vec<(u64, u64)>> = streams
        .iter()
        .map(|&p| {
            let lane = view.lanes[p].lane;
            union(
                view.trace
                    .spans
                    .iter()
                    .filter(|s| s.lane == lane && activity(s).is_some())
                    .map(|s| (s.start_ns.max(t0), s.end_ns().min(t1)))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(sum.devices.len(), 1, "one GPU");
    let d = &sum.devices[0];
    let all = union(per_stream.iter().flatten().copied().collect());
    assert_eq!(d.busy_ns, measure(&all));
    assert_eq!(d.idle_ns, (t1 - t0) - measure(&all));
    // Overlap: the sum of the streams' busy time minus the union, when at
    // most two streams ever run at once (checked by the sum of pairwise
    // intersections below).
    let busy_sum: u64 = per_stream.iter().map(|s| measure(s)).sum();
    let mut pairwise = 0;
    for i in 0..per_stream.len() {
        for j in i + 1..per_stream.len() {
            for a in &per_stream[i] {
                for b in &per_stream[j] {
                    pairwise += a.1.min(b.1).saturating_sub(a.0.max(b.0));
                }
            }
        }
    }
    if busy_sum - measure(&all) == pairwise {
        assert_eq!(d.overlap_ns, pairwise);
    }
    assert!(d.overlap_ns <= pairwise);
    // This run's two input copies ran while the compute stream was idle:
    // move each into one of the longest kernels, and the overlap is
    // exactly their durations.
    assert_eq!(pairwise, 0);
    let mut trace = view.trace.clone();
    let lane_of = |p: usize| view.lanes[p].lane;
    let (compute, side) = if view.lanes[streams[0]].span_count > view.lanes[streams[1]].span_count {
        (lane_of(streams[0]), lane_of(streams[1]))
    } else {
        (lane_of(streams[1]), lane_of(streams[0]))
    };
    let mut kernels: Vec<(u64, u64)> = trace
        .spans
        .iter()
        .filter(|s| s.lane == compute && activity(s).is_some())
        .map(|s| (s.dur_ns, s.start_ns))
        .collect();
    kernels.sort_unstable_by(|a, b| b.cmp(a));
    let mut moved = 0;
    let copies = trace
        .spans
        .iter_mut()
        .filter(|s| s.lane == side && activity(s).is_some());
    for (s, &(dur, start)) in copies.zip(&kernels) {
        assert!(dur > s.dur_ns + 20, "a kernel longer than the copy");
        s.start_ns = start + 10;
        moved += s.dur_ns;
    }
    trace.flows.clear();
    let shifted = TraceView::new(trace, "gpt2, copies moved");
    let all = analyse(
        &shifted,
        &Selection {
            lanes: streams.clone(),
            t0: lo,
            t1: hi,
        },
    );
    assert!(moved > 0);
    assert_eq!(all.devices[0].overlap_ns, moved);
    // Host lanes only: the devices over the same window all the same.
    let host: Vec<usize> = (0..view.lanes.len())
        .filter(|&p| !view.lanes[p].device)
        .collect();
    let h = analyse(
        &view,
        &Selection {
            lanes: host,
            t0,
            t1,
        },
    );
    assert_eq!(h.devices, sum.devices);
    assert!(h.flame.frames.len() > 10);
}

#[test]
fn empty_and_degenerate_selections() {
    let view = gpt2();
    let (lo, hi) = view.bounds;
    let none = analyse(
        &view,
        &Selection {
            lanes: Vec::new(),
            t0: lo,
            t1: hi,
        },
    );
    assert_eq!(none.spans, 0);
    assert!(none.names.is_empty() && none.flame.frames.is_empty());
    // Past the trace's end: nothing, every device idle the whole window.
    let past = analyse(
        &view,
        &Selection {
            lanes: (0..view.lanes.len()).collect(),
            t0: hi + 10,
            t1: hi + 1_010,
        },
    );
    assert_eq!(past.spans, 0);
    assert!(
        past.devices
            .iter()
            .all(|d| d.busy_ns == 0 && d.idle_ns == 1_000)
    );
    // A zero-width window holds no time.
    let mid = lo + (hi - lo) / 2;
    let zero = analyse(
        &view,
        &Selection {
            lanes: (0..view.lanes.len()).collect(),
            t0: mid,
            t1: mid,
        },
    );
    assert!(zero.names.iter().all(|r| r.total_ns == 0));
}

#[test]
fn the_text_report_is_tab_separated_tables() {
    let view = gpt2();
    let (lo, hi) = view.bounds;
    let sum = analyse(
        &view,
        &Selection {
            lanes: (0..view.lanes.len()).collect(),
            t0: lo,
            t1: hi,
        },
    );
    let t = text(&sum, 20);
    let tables: Vec<&str> = t.split("\n\n").collect();
    assert_eq!(tables.len(), 4, "{t}");
    assert!(tables[0].starts_with(&format!("selection\t{lo}..{hi} ns")));
    for table in &tables[1..] {
        let mut lines = table.lines();
        let cols = lines.next().expect("a header").split('\t').count();
        let rows: Vec<&str> = lines.collect();
        assert!(!rows.is_empty(), "{table}");
        for r in rows {
            assert_eq!(r.split('\t').count(), cols, "{r}");
        }
    }
    // Names are shortened; the first is the longest in time.
    let first = tables[1].lines().nth(1).expect("a row");
    assert!(first.starts_with(&keel_trace::analysis::short(&sum.names[0].name, 80)));
}
