//! Comparing two traces (`keel_trace::diff`) on the real GPT-2 training
//! trace of an H200: against itself, against copies of it with known
//! edits (a kernel stretched, an operator removed, steps renumbered, the
//! clock shifted), without its steps, and against bad partners.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::OnceLock;

use keel_trace::diff::{self, Alignment, COLUMNS, Diff, NameKind, Presence, Side};
use keel_trace::{LaneKind, Span, SpanKind, Trace};
use proptest::prelude::*;

fn gpt2() -> &'static Trace {
    static TRACE: OnceLock<Trace> = OnceLock::new();
    TRACE.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/import/gpt2_train_h200.pt.trace.json.gz");
        keel_trace::load_trace(&path).expect("the GPT-2 trace loads")
    })
}

fn on_device(t: &Trace, s: &Span) -> bool {
    matches!(t.lanes[s.lane as usize].kind, LaneKind::Stream { .. })
}

/// The name-table row a span counts in, by the rules the module documents
/// (Note [What is an operator]; device activity as `analysis::activity`).
fn row_of(t: &Trace, s: &Span) -> Option<(NameKind, String)> {
    use keel_trace::analysis::{Activity, activity};
    let kind = if on_device(t, s) {
        match activity(s)? {
            Activity::Kernel => NameKind::Kernel,
            Activity::Copy => NameKind::Copy,
            Activity::Memset => NameKind::Memset,
        }
    } else {
        let plain = !s
            .args
            .iter()
            .any(|(k, _)| k == "cbid" || k == "Python id" || k == "cat");
        let op = s.kind == SpanKind::Operator || (s.kind == SpanKind::Annotation && plain);
        if !op || diff::step_number(&s.name).is_some() {
            return None;
        }
        NameKind::Operator
    };
    Some((kind, s.name.to_string()))
}

/// The host step span of number `n`.
fn step(t: &Trace, n: u64) -> (usize, &Span) {
    t.spans
        .iter()
        .enumerate()
        .find(|(_, s)| !on_device(t, s) && diff::step_number(&s.name) == Some(n))
        .expect("the step")
}

/// The operators directly under step `n` on its lane (depth 1 below the
/// step span), by start: what the diff aligns.
fn top_level_ops(t: &Trace, n: u64) -> Vec<usize> {
    let (_, st) = step(t, n);
    top_level_on(t, st.lane, st.start_ns, st.end_ns())
}

/// The operators of `lane` starting in `[lo, hi)` inside no other one, by
/// start.
fn top_level_on(t: &Trace, lane: u32, lo: u64, hi: u64) -> Vec<usize> {
    let mut on_lane: Vec<usize> = (0..t.spans.len())
        .filter(|&i| {
            let s = &t.spans[i];
            s.lane == lane
                && s.start_ns >= lo
                && s.start_ns < hi
                && row_of(t, s).is_some_and(|r| r.0 == NameKind::Operator)
        })
        .collect();
    on_lane.sort_by_key(|&i| (t.spans[i].start_ns, std::cmp::Reverse(t.spans[i].dur_ns)));
    let mut out = Vec::new();
    let mut open_end = 0;
    for i in on_lane {
        let s = &t.spans[i];
        if s.start_ns >= open_end {
            out.push(i);
            open_end = s.end_ns();
        }
    }
    out
}

/// The lane of PyTorch's autograd thread.
fn autograd_lane(t: &Trace) -> u32 {
    t.spans
        .iter()
        .find(|s| s.name.starts_with("autograd::engine::evaluate_function: "))
        .expect("a backward operator")
        .lane
}

/// Span `root`, the spans nested in it on its lane and the device spans
/// its launches ran (the ends of flows from it to device lanes; Kineto's
/// forward-to-backward flows end on a host thread and are not followed).
fn subtree(t: &Trace, root: usize) -> HashSet<usize> {
    let r = &t.spans[root];
    let mut out: HashSet<usize> = (0..t.spans.len())
        .filter(|&i| {
            let s = &t.spans[i];
            s.lane == r.lane && s.start_ns >= r.start_ns && s.end_ns() <= r.end_ns()
        })
        .collect();
    for f in &t.flows {
        let to_device = matches!(t.lanes[f.to.lane as usize].kind, LaneKind::Stream { .. });
        if to_device
            && f.from.lane == r.lane
            && f.from.ts_ns >= r.start_ns
            && f.from.ts_ns <= r.end_ns()
        {
            out.extend((0..t.spans.len()).filter(|&i| {
                let s = &t.spans[i];
                s.lane == f.to.lane && s.start_ns <= f.to.ts_ns && f.to.ts_ns <= s.end_ns()
            }));
        }
    }
    out
}

/// Known edits of a trace.
#[derive(Debug, Clone, Default)]
struct Edits {
    /// Kernel names whose device spans get `dur * num / den`.
    stretch: Vec<(String, u64, u64)>,
    /// Spans removed (baseline indices).
    remove: HashSet<usize>,
    /// Added to every time.
    shift: u64,
    /// Added to every step number.
    renumber: u64,
}

/// `base` with `e` applied, and for each span of the result the index of
/// the span of `base` it came from.
fn edit(base: &Trace, e: &Edits) -> (Trace, Vec<u32>) {
    let mut t = base.clone();
    let mut origin = Vec::new();
    t.spans.clear();
    for (i, s) in base.spans.iter().enumerate() {
        if e.remove.contains(&i) {
            continue;
        }
        let mut s = s.clone();
        s.start_ns += e.shift;
        if on_device(base, &s)
            && let Some((_, num, den)) = e.stretch.iter().find(|(n, _, _)| *n == *s.name)
        {
            s.dur_ns = s.dur_ns * num / den;
        }
        if let Some(n) = diff::step_number(&s.name) {
            s.name = format!("ProfilerStep#{}", n + e.renumber).into();
        }
        t.spans.push(s);
        origin.push(i as u32);
    }
    for f in &mut t.flows {
        f.from.ts_ns += e.shift;
        f.to.ts_ns += e.shift;
    }
    for c in &mut t.counters {
        for p in &mut c.points {
            p.0 += e.shift;
        }
    }
    for m in &mut t.memory {
        m.ts_ns += e.shift;
    }
    for i in &mut t.instants {
        i.ts_ns += e.shift;
    }
    (t, origin)
}

/// The (count, ns) change per row the edits make, over the given
/// baseline spans (those the diff counts: in paired regions).
fn expected_changes(
    base: &Trace,
    edited: &Trace,
    origin: &[u32],
    counted: &HashSet<usize>,
) -> BTreeMap<(NameKind, String), (i64, i64)> {
    let mut out: BTreeMap<(NameKind, String), (i64, i64)> = BTreeMap::new();
    let mut kept = HashSet::new();
    for (ci, &bi) in origin.iter().enumerate() {
        kept.insert(bi as usize);
        let (b, c) = (&base.spans[bi as usize], &edited.spans[ci]);
        if counted.contains(&(bi as usize))
            && c.dur_ns != b.dur_ns
            && let Some(r) = row_of(base, b)
        {
            out.entry(r).or_default().1 += c.dur_ns as i64 - b.dur_ns as i64;
        }
    }
    for i in counted.iter().filter(|i| !kept.contains(i)) {
        let s = &base.spans[*i];
        if let Some(r) = row_of(base, s) {
            let e = out.entry(r).or_default();
            e.0 -= 1;
            e.1 -= s.dur_ns as i64;
        }
    }
    out.retain(|_, v| *v != (0, 0));
    out
}

/// The rows of the diff that changed, as (count change, ns change).
fn changes(d: &Diff) -> BTreeMap<(NameKind, String), (i64, i64)> {
    d.names
        .iter()
        .filter(|r| r.baseline != r.candidate)
        .map(|r| {
            let dc = r.candidate.count as i64 - r.baseline.count as i64;
            ((r.kind, r.name.to_string()), (dc, r.delta_ns()))
        })
        .collect()
}

/// The spans the diff counts when both sides have steps: those whose
/// host time lies in a step's host range, a device span's host time being
/// that of the launch whose flow ends in it.
fn in_steps(t: &Trace) -> HashSet<usize> {
    let steps: Vec<(u64, u64)> = t
        .spans
        .iter()
        .filter(|s| !on_device(t, s) && diff::step_number(&s.name).is_some())
        .map(|s| (s.start_ns, s.end_ns()))
        .collect();
    let launches: BTreeMap<(u32, u64), u64> = t
        .flows
        .iter()
        .filter(|f| f.kind == keel_trace::FlowKind::Launch)
        .map(|f| ((f.to.lane, f.to.ts_ns), f.from.ts_ns))
        .collect();
    (0..t.spans.len())
        .filter(|&i| {
            let s = &t.spans[i];
            let at = if on_device(t, s) {
                launches
                    .range((s.lane, s.start_ns)..=(s.lane, s.end_ns()))
                    .next()
                    .map_or(s.start_ns, |(_, &host)| host)
            } else {
                s.start_ns
            };
            steps.iter().any(|&(a, b)| a <= at && at < b)
        })
        .collect()
}

/// The kernel name with the most device spans, and how many.
fn most_launched_kernel(t: &Trace) -> (String, usize) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in t
        .spans
        .iter()
        .filter(|s| on_device(t, s) && s.kind == SpanKind::Kernel)
    {
        *counts.entry(s.name.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .max_by_key(|(n, c)| (**c, std::cmp::Reverse(**n)))
        .map(|(n, c)| (n.to_string(), *c))
        .expect("kernels")
}

/// Parses `text`'s table: header, then rows of nine fields.
fn table(text: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| l.starts_with("# "));
    let header = lines.next().expect("a header");
    assert_eq!(header.split('\t').collect::<Vec<_>>(), COLUMNS);
    lines
        .map(|l| {
            let f: Vec<String> = l.split('\t').map(str::to_owned).collect();
            assert_eq!(f.len(), COLUMNS.len(), "{l}");
            f
        })
        .collect()
}

#[test]
fn a_trace_against_itself_matches_every_span_with_itself() {
    let t = gpt2();
    let d = diff::diff(t, t).expect("diff");
    assert_eq!(d.alignment, Alignment::StepsByNumber);
    assert!(d.unpaired.is_empty());
    // The file's two steps: ProfilerStep#2 79,941.093 us, #3 77,687.140 us.
    let steps: Vec<(Option<u64>, u64)> = d
        .pairs
        .iter()
        .map(|p| (p.baseline.number, p.baseline.duration_ns()))
        .collect();
    assert_eq!(steps, [(Some(2), 79_941_093), (Some(3), 77_687_140)]);
    for p in &d.pairs {
        assert_eq!(p.baseline, p.candidate);
        assert_eq!(p.delta_ns(), 0);
        assert_eq!(p.matched_operators, p.baseline.operators.count);
        assert!(p.baseline.operators.count > 500, "{:?}", p.baseline);
        let dev = p.baseline.device.expect("kernels ran");
        assert!(
            dev.0 >= p.baseline.host.0,
            "launched in the step, run after"
        );
    }
    // Every span but the profiler's own span and one before the first step
    // lies in a step, and matches itself.
    assert_eq!(d.spans, (17_780, 17_780));
    assert_eq!(d.span_deltas.len(), 17_780);
    for m in &d.span_deltas {
        assert_eq!(m.candidate, m.baseline);
        assert_eq!(m.delta_ns(), 0);
        assert_eq!(d.candidate_match(m.candidate), Some(m));
        assert_eq!(d.baseline_match(m.baseline), Some(m));
    }
    // The file's counts: 12,478 cpu_op events and 4 optimizer ranges,
    // 2,212 kernels, 214 memsets, 2 copies.
    let count = |k| d.totals(k).0.count;
    assert_eq!(count(NameKind::Operator), 12_478 + 4);
    assert_eq!(count(NameKind::Kernel), 2_212);
    assert_eq!(count(NameKind::Memset), 214);
    assert_eq!(count(NameKind::Copy), 2);
    assert!(
        d.names
            .iter()
            .all(|r| r.delta_ns() == 0 && r.presence() == Presence::Both)
    );
    let rows = table(&diff::text(&d));
    assert_eq!(rows.len(), 2 + d.names.len());
    assert!(
        rows.iter()
            .all(|r| r[6] == "0" && r[7] == "1.0000" && r[8] == "both")
    );
    assert_eq!(
        rows[0][..2],
        ["step".to_owned(), "ProfilerStep#2".to_owned()]
    );
}

/// The third `aten::layer_norm` at the top of step 3 whose neighbours in
/// the operator sequence have other names (so removing it is one
/// unambiguous edit).
fn layer_norm_to_remove(t: &Trace) -> usize {
    let ops = top_level_ops(t, 3);
    let name = |i: usize| t.spans[ops[i]].name.as_str();
    let found: Vec<usize> = (1..ops.len() - 1)
        .filter(|&i| {
            name(i) == "aten::layer_norm"
                && name(i - 1) != "aten::layer_norm"
                && name(i + 1) != "aten::layer_norm"
        })
        .map(|i| ops[i])
        .collect();
    assert!(found.len() >= 3, "layer norms in step 3: {}", found.len());
    found[2]
}

#[test]
fn known_edits_are_found_exactly() {
    let base = gpt2();
    // The kernel with the most launches, 3/2 as long; a layer norm of step
    // 3 with everything under it removed; steps 2, 3 renumbered 12, 13;
    // the clock 1.5 s later.
    let (kernel, launches) = most_launched_kernel(base);
    let root = layer_norm_to_remove(base);
    let remove = subtree(base, root);
    assert!(remove.len() > 3, "the layer norm has children and kernels");
    let edits = Edits {
        stretch: vec![(kernel.clone(), 3, 2)],
        remove: remove.clone(),
        shift: 1_500_000_000,
        renumber: 10,
    };
    let (cand, origin) = edit(base, &edits);
    let d = diff::diff(base, &cand).expect("diff");

    assert_eq!(d.alignment, Alignment::StepsByOrder, "12, 13 against 2, 3");
    let numbers: Vec<(Option<u64>, Option<u64>)> = d
        .pairs
        .iter()
        .map(|p| (p.baseline.number, p.candidate.number))
        .collect();
    assert_eq!(numbers, [(Some(2), Some(12)), (Some(3), Some(13))]);
    for p in &d.pairs {
        assert_eq!(p.candidate.host.0, p.baseline.host.0 + 1_500_000_000);
        assert_eq!(p.delta_ns(), 0, "host steps keep their length");
    }
    assert_eq!(
        d.pairs[0].matched_operators,
        d.pairs[0].baseline.operators.count
    );
    assert_eq!(
        d.pairs[1].matched_operators,
        d.pairs[1].baseline.operators.count - 1,
        "all but the removed layer norm"
    );

    let counted = in_steps(base);
    let want = expected_changes(base, &cand, &origin, &counted);
    assert!(want.contains_key(&(NameKind::Kernel, kernel.clone())));
    assert!(want.contains_key(&(NameKind::Operator, "aten::layer_norm".to_owned())));
    assert_eq!(changes(&d), want);
    // The biggest change leads the table.
    let top = want
        .values()
        .map(|v| v.1.unsigned_abs())
        .max()
        .expect("changes");
    assert_eq!(d.names[0].delta_ns().unsigned_abs(), top);
    let stretched = d
        .names
        .iter()
        .find(|r| r.kind == NameKind::Kernel && *r.name == *kernel)
        .expect("the stretched kernel's row");
    assert_eq!(stretched.baseline.count as usize, launches);
    let r = stretched.ratio().expect("ratio");
    assert!((r - 1.5).abs() < 1e-3, "{r}");

    // Every span the edits kept matches the span it came from; only the
    // stretched kernels changed.
    let kept_in_steps = origin
        .iter()
        .filter(|&&b| counted.contains(&(b as usize)))
        .count();
    assert_eq!(d.span_deltas.len(), kept_in_steps);
    for m in &d.span_deltas {
        let s = &cand.spans[m.candidate as usize];
        if on_device(&cand, s) && *s.name == *kernel {
            assert_eq!(m.candidate_ns, m.baseline_ns * 3 / 2);
        } else {
            assert_eq!(m.delta_ns(), 0, "{}", s.name);
        }
    }
    for &i in &remove {
        assert_eq!(d.baseline_match(i as u32), None, "removed span {i} matched");
    }

    // The text: the renumbered steps, then the changed rows first.
    let rows = table(&diff::text(&d));
    assert_eq!(rows[0][1], "ProfilerStep#2 -> ProfilerStep#12");
    assert_eq!(rows[1][1], "ProfilerStep#3 -> ProfilerStep#13");
    let changed: Vec<&Vec<String>> = rows[2..].iter().filter(|r| r[6] != "0").collect();
    assert_eq!(changed.len(), want.len());
    assert!(rows[2..2 + want.len()].iter().all(|r| r[6] != "0"));
}

/// PyTorch runs backward passes on an autograd thread: its top-level
/// operators are aligned too, so removing one backward operator (with
/// everything under it) shifts no other match, though its name recurs
/// (one per layer) on that thread in the same step.
#[test]
fn a_removed_backward_operator_shifts_no_other_match() {
    let base = gpt2();
    let (_, st) = step(base, 3);
    let backward = autograd_lane(base);
    assert_ne!(backward, st.lane, "backward runs on its own thread");
    let ops = top_level_on(base, backward, st.start_ns, st.end_ns());
    let name = |i: usize| base.spans[ops[i]].name.as_str();
    let norms: Vec<usize> = (1..ops.len() - 1)
        .filter(|&i| {
            name(i).ends_with("NativeLayerNormBackward0")
                && name(i - 1) != name(i)
                && name(i + 1) != name(i)
        })
        .collect();
    assert!(norms.len() >= 20, "{} layer norm backwards", norms.len());
    let remove = subtree(base, ops[norms[3]]);
    let edits = Edits {
        remove,
        ..Edits::default()
    };
    let (cand, origin) = edit(base, &edits);
    let d = diff::diff(base, &cand).expect("diff");
    let counted = in_steps(base);
    assert_eq!(
        changes(&d),
        expected_changes(base, &cand, &origin, &counted)
    );
    let kept = origin
        .iter()
        .filter(|&&b| counted.contains(&(b as usize)))
        .count();
    assert_eq!(d.span_deltas.len(), kept);
    for m in &d.span_deltas {
        assert_eq!(m.baseline, origin[m.candidate as usize]);
    }
}

#[test]
fn without_steps_the_operator_sequences_align() {
    let no_steps = |t: &Trace| {
        let mut t = t.clone();
        t.spans.retain(|s| diff::step_number(&s.name).is_none());
        t
    };
    let base = no_steps(gpt2());
    let d = diff::diff(&base, &base).expect("diff");
    assert_eq!(d.alignment, Alignment::Operators);
    assert_eq!(d.pairs.len(), 1);
    let p = &d.pairs[0];
    assert_eq!(p.matched_operators, p.baseline.operators.count);
    // The main thread's top-level operators of both steps (the steps'
    // content and what lies between them).
    assert!(p.baseline.operators.count >= 1_000, "{:?}", p.baseline);
    assert_eq!(d.span_deltas.len() as u64, d.spans.1);
    assert!(d.span_deltas.iter().all(|m| m.candidate == m.baseline));

    // The same edits as with steps (but renumbering): the same changes.
    let root = layer_norm_to_remove(gpt2());
    let base_root = base
        .spans
        .iter()
        .position(|s| *s == gpt2().spans[root])
        .expect("the layer norm is kept");
    let edits = Edits {
        stretch: vec![(most_launched_kernel(&base).0, 2, 1)],
        remove: subtree(&base, base_root),
        shift: 7,
        renumber: 0,
    };
    let (cand, origin) = edit(&base, &edits);
    let d = diff::diff(&base, &cand).expect("diff");
    assert_eq!(d.alignment, Alignment::Operators);
    let all: HashSet<usize> = (0..base.spans.len()).collect();
    let want = expected_changes(&base, &cand, &origin, &all);
    assert_eq!(changes(&d), want);
    assert_eq!(
        d.pairs[0].matched_operators,
        d.pairs[0].baseline.operators.count - 1
    );
    for m in &d.span_deltas {
        assert_eq!(m.baseline, origin[m.candidate as usize]);
    }
    assert_eq!(d.span_deltas.len(), cand.spans.len());
}

#[test]
fn bad_partners_are_errors_or_partial_results() {
    let t = gpt2();
    // An empty trace, on either side.
    let empty = Trace::default();
    let e = diff::diff(&empty, t)
        .expect_err("empty baseline")
        .to_string();
    assert!(e.contains("baseline: expected a trace with spans"), "{e}");
    let e = diff::diff(t, &empty)
        .expect_err("empty candidate")
        .to_string();
    assert!(e.contains("candidate: expected a trace with spans"), "{e}");

    // Only the GPU's spans: no host spans to align by.
    let mut device_only = t.clone();
    device_only.spans.retain(|s| on_device(t, s));
    let e = diff::diff(t, &device_only)
        .expect_err("nothing to align")
        .to_string();
    assert!(
        e.contains("candidate: expected ProfilerStep#N spans or operators on a host thread")
            && e.contains("0 of them on host threads"),
        "{e}"
    );

    // A candidate with step 3 cut off: step 2 pairs, step 3 is reported
    // unpaired and counts nowhere.
    let (three, _) = step(t, 3);
    let mut two = t.clone();
    two.spans.remove(three);
    let d = diff::diff(t, &two).expect("a partial result");
    assert_eq!(d.alignment, Alignment::StepsByNumber);
    assert_eq!(d.pairs.len(), 1);
    assert_eq!(d.pairs[0].baseline.number, Some(2));
    assert_eq!(d.unpaired.len(), 1);
    assert_eq!(d.unpaired[0].0, Side::Baseline);
    assert_eq!(d.unpaired[0].1.number, Some(3));
    assert!(d.names.iter().all(|r| r.delta_ns() == 0));
    let rows = table(&diff::text(&d));
    assert_eq!(
        rows[1][..2],
        ["step".to_owned(), "ProfilerStep#3".to_owned()]
    );
    assert_eq!(rows[1][8], "vanished");

    // Steps on one side only: both are aligned by operators.
    let mut no_steps = t.clone();
    no_steps
        .spans
        .retain(|s| diff::step_number(&s.name).is_none());
    let d = diff::diff(t, &no_steps).expect("aligned by operators");
    assert_eq!(d.alignment, Alignment::Operators);
    assert!(d.names.iter().all(|r| r.delta_ns() == 0));
    assert_eq!(
        d.pairs[0].matched_operators,
        d.pairs[0].baseline.operators.count
    );
}

#[test]
fn names_with_tabs_stay_one_field() {
    let mut t = gpt2().clone();
    let (_, st) = step(&t, 2);
    let lane = st.lane;
    let at = st.start_ns + 1;
    t.spans.push(Span {
        lane,
        name: "odd\tname\nwith \\ escapes".into(),
        kind: SpanKind::Operator,
        start_ns: at,
        dur_ns: 0,
        op: 0,
        args: Vec::new(),
    });
    let d = diff::diff(gpt2(), &t).expect("diff");
    let rows = table(&diff::text(&d));
    let odd = rows
        .iter()
        .find(|r| r[1] == "odd\\tname\\nwith \\\\ escapes")
        .expect("the escaped name");
    assert_eq!(odd[8], "new");
    assert_eq!(odd[7], "-", "no ratio against nothing");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random edits of the GPT-2 trace: the name table changes by exactly
    /// what the edits change, matches pair equal names, and without
    /// removals every span matches the one it came from.
    #[test]
    fn random_edits_are_accounted_for(
        kernels in proptest::collection::vec((0usize..1000, 1u64..5, 1u64..5), 0..4),
        removals in proptest::collection::vec((0usize..2, any::<bool>(), 0usize..10_000), 0..4),
        shift in 0u64..(1 << 40),
        renumber in prop_oneof![Just(0u64), 1u64..100],
    ) {
        let base = gpt2();
        let mut names: Vec<&str> = base
            .spans
            .iter()
            .filter(|s| on_device(base, s))
            .map(|s| s.name.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        let stretch = kernels
            .iter()
            .map(|&(k, num, den)| (names[k % names.len()].to_owned(), num, den))
            .collect();
        // Top-level operators of a step, on the main thread or the
        // autograd thread.
        let mut remove = HashSet::new();
        for &(step_k, main, k) in &removals {
            let (_, st) = step(base, 2 + step_k as u64);
            let lane = if main { st.lane } else { autograd_lane(base) };
            let ops = top_level_on(base, lane, st.start_ns, st.end_ns());
            remove.extend(subtree(base, ops[k % ops.len()]));
        }
        let e = Edits { stretch, remove, shift, renumber };
        let (cand, origin) = edit(base, &e);
        let d = diff::diff(base, &cand).expect("diff");
        let counted = in_steps(base);
        prop_assert_eq!(changes(&d), expected_changes(base, &cand, &origin, &counted));
        let mut last = None;
        for m in &d.span_deltas {
            prop_assert!(last < Some(m.candidate), "sorted, unique");
            last = Some(m.candidate);
            let (b, c) = (&base.spans[m.baseline as usize], &cand.spans[m.candidate as usize]);
            prop_assert_eq!(&b.name.as_str().replace(char::is_numeric, ""), &c.name.as_str().replace(char::is_numeric, ""));
            prop_assert_eq!(b.kind, c.kind);
            prop_assert_eq!(on_device(base, b), on_device(&cand, c));
        }
        if e.remove.is_empty() {
            prop_assert_eq!(d.span_deltas.len(), counted.len());
            for m in &d.span_deltas {
                prop_assert_eq!(m.baseline, origin[m.candidate as usize]);
            }
        }
        let text = diff::text(&d);
        prop_assert_eq!(table(&text).len(), d.pairs.len() + d.unpaired.len() + d.names.len());
    }
}

/// A small trace of arbitrary content: any lanes, spans anywhere (up to
/// the largest time), step names with any number, flows between any
/// lanes, lanes the trace does not have.
fn arbitrary_trace() -> impl Strategy<Value = Trace> {
    let lane = prop_oneof![
        (0u64..3).prop_map(|thread| LaneKind::Host { thread }),
        (0i64..3).prop_map(|stream| LaneKind::Stream {
            device: 0,
            stream,
            thread: 0
        }),
    ];
    let name = prop_oneof![
        Just("aten::mm".to_owned()),
        Just("gemm_kernel".to_owned()),
        Just("Memset (Device)".to_owned()),
        (0u64..4).prop_map(|n| format!("ProfilerStep#{n}")),
        Just("ProfilerStep#x".to_owned()),
        "[a-z#:]{0,6}",
    ];
    let time = prop_oneof![0u64..1_000, Just(u64::MAX - 5), any::<u64>()];
    let kind = proptest::sample::select(SpanKind::ALL.to_vec());
    let span = (0u32..5, name, kind, time.clone(), time.clone()).prop_map(
        |(lane, name, kind, start_ns, dur_ns)| Span {
            lane,
            name: name.into(),
            kind,
            start_ns,
            dur_ns,
            op: 0,
            args: Vec::new(),
        },
    );
    let flow = (0u32..5, time.clone(), 0u32..5, time).prop_map(|(a, ta, b, tb)| keel_trace::Flow {
        id: 0,
        kind: keel_trace::FlowKind::Launch,
        from: keel_trace::FlowEnd { lane: a, ts_ns: ta },
        to: keel_trace::FlowEnd { lane: b, ts_ns: tb },
    });
    (
        proptest::collection::vec(lane, 0..4),
        proptest::collection::vec(span, 0..40),
        proptest::collection::vec(flow, 0..10),
    )
        .prop_map(|(kinds, spans, flows)| Trace {
            lanes: kinds
                .into_iter()
                .map(|kind| keel_trace::Lane {
                    kind,
                    name: String::new(),
                    group: String::new(),
                })
                .collect(),
            spans,
            flows,
            ..Trace::default()
        })
}

proptest! {
    /// Whatever two traces hold, the diff is a result or a format error,
    /// never a panic, and what it returns is consistent.
    #[test]
    fn arbitrary_traces_never_panic(b in arbitrary_trace(), c in arbitrary_trace()) {
        match diff::diff(&b, &c) {
            Err(keel_trace::Error::Format(m)) => {
                prop_assert!(m.starts_with("baseline: ") || m.starts_with("candidate: "), "{}", m);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
            Ok(d) => {
                for m in &d.span_deltas {
                    let (x, y) = (&b.spans[m.baseline as usize], &c.spans[m.candidate as usize]);
                    prop_assert_eq!(x.kind, y.kind);
                    prop_assert_eq!(d.baseline_match(m.baseline), Some(m));
                }
                prop_assert!(d.span_deltas.windows(2).all(|w| w[0].candidate < w[1].candidate));
                let rows = table(&diff::text(&d));
                prop_assert_eq!(rows.len(), d.pairs.len() + d.unpaired.len() + d.names.len());
            }
        }
    }
}
