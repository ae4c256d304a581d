//! Comparing two traces: a baseline and a candidate of the same program
//! (before and after a change), as Perfetto's "compare two traces" asks.
//!
//! [`diff`] answers three questions:
//!
//! - **What pairs with what.** Both traces are cut into *regions*: the
//!   profiler's steps (host spans named `ProfilerStep#N`, as PyTorch's
//!   profiler writes them) when both traces have them, paired step N with
//!   step N when the numbers of the trace with fewer steps all occur in the
//!   other, the k-th with the k-th otherwise (a renumbered run); when
//!   either trace has no steps, each trace is one region. Inside each pair
//!   of regions the top-level operators of each host thread are aligned by
//!   name with those of its partner (see [`Alignment`] and Note [Bounded
//!   alignment] in `align.rs`): the main thread (the steps' thread, or the
//!   one whose operators span the longest time) with the main thread, the
//!   other threads (PyTorch's autograd thread) in the order of their first
//!   operator in the region. Every span falls into a *slot*: the top-level
//!   operator of its thread it starts in, or the region's head (before its
//!   thread's first one, or on a thread without any); a device span counts
//!   from the host span that launched it, through its launch flow. A span
//!   of the candidate matches the baseline span of the paired slot that
//!   has the same side (host or device), kind and name and the same
//!   occurrence index among those, in time order: an operator removed or
//!   added shifts no match outside its own slot.
//! - **What got slower or faster.** Per operator name and per kernel name
//!   (and copies and memsets on the device), count and total time on both
//!   sides over the paired regions ([`NameRow`]), largest absolute change
//!   first, names only one side has flagged; per region pair the durations
//!   and time ranges on both sides ([`RegionPair`]), so a viewer can show
//!   two steps side by side; per matched candidate span its baseline span
//!   and both durations ([`SpanDelta`]), so a viewer can mark it.
//! - **How to read it without a viewer.** [`text`]: a short summary, then
//!   one tab-separated table with fixed columns in a stable order.
//!
//! Note [What is an operator]: a host span of kind [`SpanKind::Operator`]
//! (Keel's recordings), or of kind [`SpanKind::Annotation`] that is none
//! of: a CUDA runtime or driver call (Kineto gives those a `cbid`
//! argument), a Python frame (a `Python id` argument), an event of a
//! category Kineto's importer does not know (a `cat` argument) or a step
//! itself. Imported Kineto files need the second rule: their `cpu_op`
//! events are read as annotations, like `user_annotation` ranges, which
//! therefore count as operators too (`Optimizer.step#AdamW.step`).
//!
//! ```
//! use keel_trace::{Lane, LaneKind, Span, SpanKind, Trace, diff};
//!
//! // One host thread: step 1 and, in it, a matrix product of `mm_ns`.
//! let trace = |mm_ns: u64| {
//!     let span = |name: &str, kind, start_ns, dur_ns| Span {
//!         lane: 0,
//!         name: name.into(),
//!         kind,
//!         start_ns,
//!         dur_ns,
//!         op: 0,
//!         args: Vec::new(),
//!     };
//!     Trace {
//!         lanes: vec![Lane {
//!             kind: LaneKind::Host { thread: 1 },
//!             name: "main".to_owned(),
//!             group: String::new(),
//!         }],
//!         spans: vec![
//!             span("ProfilerStep#1", SpanKind::Annotation, 0, 1_000),
//!             span("aten::mm", SpanKind::Operator, 10, mm_ns),
//!         ],
//!         ..Trace::default()
//!     }
//! };
//! let d = diff::diff(&trace(100), &trace(150))?;
//! assert_eq!(d.alignment, diff::Alignment::StepsByNumber);
//! assert_eq!((d.names[0].name.as_str(), d.names[0].delta_ns()), ("aten::mm", 50));
//! let mm = d.candidate_match(1).expect("the product matched");
//! assert_eq!((mm.baseline, mm.delta_ns()), (1, 50));
//! assert!(diff::text(&d).contains("operator\taten::mm\t1\t1\t100\t150\t50\t1.5000\tboth\n"));
//! # Ok::<(), keel_trace::Error>(())
//! ```
//!
//! Everything here is a pure function of two [`Trace`]s (a viewer passes
//! its [`TraceView`](crate::view::TraceView)s' `trace`); span indices are
//! indices into [`Trace::spans`], the same the view uses. Memory is linear
//! in the two traces' spans; nothing here panics on a trace's content.

mod align;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::BuildHasherDefault;

use crate::model::Activity;
use crate::{Error, FlowKind, LaneKind, Result, Span, SpanKind, Text, Trace};

/// Which of the two traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The trace compared against.
    Baseline,
    /// The trace compared.
    Candidate,
}

impl Side {
    /// `baseline` or `candidate`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Candidate => "candidate",
        }
    }
}

/// How the two traces were cut into regions and paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// Profiler steps, step N with step N.
    StepsByNumber,
    /// Profiler steps, the k-th with the k-th (the numbers differ).
    StepsByOrder,
    /// No steps on one side or both: each trace is one region, aligned by
    /// its top-level operators.
    Operators,
}

impl Alignment {
    /// A short description (`steps by number`).
    pub fn name(self) -> &'static str {
        match self {
            Alignment::StepsByNumber => "steps by number",
            Alignment::StepsByOrder => "steps by order",
            Alignment::Operators => "operator sequence",
        }
    }
}

/// How many spans and how long in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// How many.
    pub count: u64,
    /// Sum of their durations, ns.
    pub total_ns: u64,
}

impl Totals {
    fn add(&mut self, dur_ns: u64) {
        self.count += 1;
        self.total_ns = self.total_ns.saturating_add(dur_ns);
    }
}

/// One side's region: a profiler step, or the whole trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The `ProfilerStep#N` span (index into [`Trace::spans`]); `None` when
    /// the trace is one region.
    pub step: Option<u32>,
    /// The step's number N.
    pub number: Option<u64>,
    /// The host time range `[start, end)`: the step span's (its end cut at
    /// the next step's start if they overlap), or from the first top-level
    /// operator's start to the last one's end.
    pub host: (u64, u64),
    /// From the first start to the last end of the device activity
    /// (kernels, copies, memsets) launched in the region; `None` without
    /// any.
    pub device: Option<(u64, u64)>,
    /// Device activity launched in the region.
    pub kernels: Totals,
    /// Top-level operators of the host threads in the region.
    pub operators: Totals,
}

impl Region {
    /// The host range's length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.host.1.saturating_sub(self.host.0)
    }
}

/// Two regions paired, with their top-level operators aligned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionPair {
    /// The baseline's region.
    pub baseline: Region,
    /// The candidate's region.
    pub candidate: Region,
    /// Top-level operators of the host threads paired with one of the
    /// other side.
    pub matched_operators: u64,
}

impl RegionPair {
    /// Candidate duration minus baseline duration, ns.
    pub fn delta_ns(&self) -> i64 {
        signed_delta(self.baseline.duration_ns(), self.candidate.duration_ns())
    }
}

/// What a row of the name table counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameKind {
    /// Host operators (see Note [What is an operator]).
    Operator,
    /// Device kernels.
    Kernel,
    /// Device copies.
    Copy,
    /// Device memsets.
    Memset,
}

impl NameKind {
    /// Every kind, in a stable order (the order of [`Diff::names`] ties).
    pub const ALL: [NameKind; 4] = [
        NameKind::Operator,
        NameKind::Kernel,
        NameKind::Copy,
        NameKind::Memset,
    ];

    /// `operator`, `kernel`, `copy` or `memset`.
    pub fn name(self) -> &'static str {
        match self {
            NameKind::Operator => "operator",
            NameKind::Kernel => "kernel",
            NameKind::Copy => "copy",
            NameKind::Memset => "memset",
        }
    }
}

/// Whether a name occurs on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// In both traces.
    Both,
    /// Only in the candidate.
    New,
    /// Only in the baseline.
    Vanished,
}

impl Presence {
    /// `both`, `new` or `vanished`.
    pub fn name(self) -> &'static str {
        match self {
            Presence::Both => "both",
            Presence::New => "new",
            Presence::Vanished => "vanished",
        }
    }
}

/// One operator or device-activity name, over the paired regions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRow {
    /// What is counted.
    pub kind: NameKind,
    /// The name.
    pub name: Text,
    /// In the baseline.
    pub baseline: Totals,
    /// In the candidate.
    pub candidate: Totals,
}

impl NameRow {
    /// Candidate total minus baseline total, ns.
    pub fn delta_ns(&self) -> i64 {
        signed_delta(self.baseline.total_ns, self.candidate.total_ns)
    }

    /// Candidate total over baseline total; `None` when the baseline's is 0.
    pub fn ratio(&self) -> Option<f64> {
        ratio(self.baseline.total_ns, self.candidate.total_ns)
    }

    /// Which sides have it.
    pub fn presence(&self) -> Presence {
        match (self.baseline.count, self.candidate.count) {
            (0, _) => Presence::New,
            (_, 0) => Presence::Vanished,
            _ => Presence::Both,
        }
    }
}

/// A candidate span and the baseline span it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanDelta {
    /// Index into the candidate's [`Trace::spans`].
    pub candidate: u32,
    /// Index into the baseline's [`Trace::spans`].
    pub baseline: u32,
    /// The baseline span's duration, ns.
    pub baseline_ns: u64,
    /// The candidate span's duration, ns.
    pub candidate_ns: u64,
}

impl SpanDelta {
    /// Candidate minus baseline duration, ns: positive when it got slower.
    pub fn delta_ns(&self) -> i64 {
        signed_delta(self.baseline_ns, self.candidate_ns)
    }

    /// Candidate over baseline duration; `None` when the baseline's is 0.
    pub fn ratio(&self) -> Option<f64> {
        ratio(self.baseline_ns, self.candidate_ns)
    }
}

/// The comparison of two traces; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// How the traces were cut and paired.
    pub alignment: Alignment,
    /// Paired regions, in the baseline's time order.
    pub pairs: Vec<RegionPair>,
    /// Regions of either side left without a partner (steps only one trace
    /// has), in time order per side, the baseline's first. Their spans are
    /// in neither the name table nor the matches.
    pub unpaired: Vec<(Side, Region)>,
    /// Top-level operators of the host threads in paired regions, per side
    /// (baseline, candidate); [`RegionPair::matched_operators`] of them
    /// paired.
    pub operators: (u64, u64),
    /// Per name, over the paired regions: largest absolute time change
    /// first, then by kind and name.
    pub names: Vec<NameRow>,
    /// Matched spans, by candidate span index.
    pub span_deltas: Vec<SpanDelta>,
    /// Spans in paired regions, per side (baseline, candidate).
    pub spans: (u64, u64),
    /// For every baseline span, its position in `span_deltas` ([`NONE`]:
    /// unmatched).
    by_baseline: Vec<u32>,
}

impl Diff {
    /// The match of candidate span `span`, if it has one.
    pub fn candidate_match(&self, span: u32) -> Option<&SpanDelta> {
        let i = self
            .span_deltas
            .binary_search_by_key(&span, |d| d.candidate)
            .ok()?;
        self.span_deltas.get(i)
    }

    /// The match of baseline span `span`, if it has one.
    pub fn baseline_match(&self, span: u32) -> Option<&SpanDelta> {
        let i = *self.by_baseline.get(span as usize)?;
        self.span_deltas.get(i as usize)
    }

    /// Top-level operators matched, over all pairs.
    pub fn matched_operators(&self) -> u64 {
        self.pairs.iter().map(|p| p.matched_operators).sum()
    }

    /// Totals over every row of the name table of kind `kind` (baseline,
    /// candidate).
    pub fn totals(&self, kind: NameKind) -> (Totals, Totals) {
        let mut t = (Totals::default(), Totals::default());
        for r in self.names.iter().filter(|r| r.kind == kind) {
            t.0.count += r.baseline.count;
            t.0.total_ns = t.0.total_ns.saturating_add(r.baseline.total_ns);
            t.1.count += r.candidate.count;
            t.1.total_ns = t.1.total_ns.saturating_add(r.candidate.total_ns);
        }
        t
    }
}

fn signed_delta(baseline: u64, candidate: u64) -> i64 {
    let d = i128::from(candidate) - i128::from(baseline);
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn ratio(baseline: u64, candidate: u64) -> Option<f64> {
    (baseline != 0).then(|| candidate as f64 / baseline as f64)
}

/// The number N of a span named `ProfilerStep#N`.
pub fn step_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ProfilerStep#")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The name id every step span matches by, whatever its number: renumbered
/// steps' spans (the device's copies of the step range) still pair.
const STEP_NAME: u32 = 0;

/// Names of both traces as small integers, so sequences and keys compare
/// as numbers; and what each device name is.
struct Names<'a> {
    ids: HashMap<&'a str, u32>,
    /// Ids by the address and length of a name's bytes: readers intern
    /// names, so the spans of one name mostly share their bytes, and a
    /// lookup hashes 16 bytes instead of the name (a kernel's runs to
    /// hundreds).
    by_addr: HashMap<(usize, usize), u32, BuildHasherDefault<AddrHasher>>,
    texts: Vec<Text>,
    /// The activity of device spans by (name id, kind, the address and
    /// length of the Kineto category's text, interned like names): finding
    /// `memset` in a long kernel name once per name, not per span.
    activities: HashMap<(u32, u8, usize, usize), Option<Activity>, BuildHasherDefault<AddrHasher>>,
}

/// Hashes the addresses and lengths [`Names`] looks names up by: values
/// no file chooses (where the interned names lie in memory), so a multiply
/// and a rotation do, where SipHash (whose resistance to chosen keys a
/// file's texts need) took a quarter of a diff's instructions. A dozen
/// lines here, not a hashing crate for every user of the device layer.
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

impl<'a> Names<'a> {
    fn new() -> Self {
        Names {
            ids: HashMap::new(),
            by_addr: HashMap::default(),
            texts: vec![Text::from("ProfilerStep#*")],
            activities: HashMap::default(),
        }
    }

    fn id(&mut self, name: &'a Text) -> u32 {
        let addr = (name.as_ptr() as usize, name.len());
        if let Some(&id) = self.by_addr.get(&addr) {
            return id;
        }
        let id = if step_number(name).is_some() {
            STEP_NAME
        } else if let Some(&id) = self.ids.get(name.as_str()) {
            id
        } else {
            let id = self.texts.len() as u32;
            self.ids.insert(name.as_str(), id);
            self.texts.push(Text::clone(name));
            id
        };
        self.by_addr.insert(addr, id);
        id
    }

    /// [`activity`] of device span `s`, whose name has id `name`.
    fn activity(&mut self, name: u32, s: &'a Span) -> Option<Activity> {
        let arg = |key: &str| {
            s.args
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let cat = arg("cat").or_else(|| arg("category")).unwrap_or("");
        let key = (name, s.kind as u8, cat.as_ptr() as usize, cat.len());
        *self.activities.entry(key).or_insert_with(|| s.activity())
    }
}

fn is_operator(s: &Span) -> bool {
    match s.kind {
        SpanKind::Operator => true,
        SpanKind::Annotation => {
            step_number(&s.name).is_none()
                && !s
                    .args
                    .iter()
                    .any(|(k, _)| k == "cbid" || k == "Python id" || k == "cat")
        }
        _ => false,
    }
}

/// Whether a span is on a device lane (`Some(true)`), a host lane, or a
/// lane the trace does not have (`None`; the checker reports those).
fn on_device(trace: &Trace, s: &Span) -> Option<bool> {
    match trace.lanes.get(s.lane as usize).map(|l| &l.kind) {
        Some(LaneKind::Host { .. }) => Some(false),
        Some(LaneKind::Stream { .. }) => Some(true),
        None => None,
    }
}

/// A span's end, saturating: a trace not read from a file (readers check
/// it) may hold a span that would end past the largest time.
fn end(s: &Span) -> u64 {
    s.start_ns.saturating_add(s.dur_ns)
}

/// A step span found in a trace.
#[derive(Clone, Copy)]
struct Step {
    span: u32,
    number: u64,
    start: u64,
    end: u64,
}

/// The steps of `trace`: the `ProfilerStep#N` spans of the host lane that
/// has the most of them (the lowest lane on a tie), by start.
fn find_steps(trace: &Trace) -> (Option<u32>, Vec<Step>) {
    let mut per_lane: HashMap<u32, Vec<Step>> = HashMap::new();
    for (i, s) in trace.spans.iter().enumerate() {
        if !matches!(
            trace.lanes.get(s.lane as usize).map(|l| &l.kind),
            Some(LaneKind::Host { .. })
        ) {
            continue;
        }
        if let Some(number) = step_number(&s.name) {
            per_lane.entry(s.lane).or_default().push(Step {
                span: i as u32,
                number,
                start: s.start_ns,
                end: end(s),
            });
        }
    }
    let Some((&lane, _)) = per_lane
        .iter()
        .max_by_key(|&(&lane, steps)| (steps.len(), std::cmp::Reverse(lane)))
    else {
        return (None, Vec::new());
    };
    let mut steps = per_lane.remove(&lane).unwrap_or_default();
    steps.sort_unstable_by_key(|s| (s.start, s.span));
    // Steps do not overlap; one that does is cut at the next one's start,
    // so every instant belongs to at most one step.
    for i in 1..steps.len() {
        let next = steps[i].start;
        let prev = &mut steps[i - 1];
        prev.end = prev.end.min(next).max(prev.start);
    }
    (Some(lane), steps)
}

/// What one trace offers the diff, before the two are paired.
struct Prepared<'a> {
    trace: &'a Trace,
    side: Side,
    /// Per span: whether it is an operator (on a host lane).
    operator: Vec<bool>,
    /// Per span, the host time it counts from: for a device span, the host
    /// end of the launch flow that ends in it (the first one at or after
    /// its start), otherwise its start.
    host_time: Vec<u64>,
    /// Per span, the host lane it counts on: its own, or for a device span
    /// that of the launch (its own lane without one).
    host_lane: Vec<u32>,
    /// Host lanes with operators, in order.
    op_lanes: Vec<u32>,
    /// Operators per host lane, by (start, longest first, index).
    ops_by_lane: Vec<Vec<u32>>,
    /// The steps' lane and the steps.
    steps: (Option<u32>, Vec<Step>),
}

impl<'a> Prepared<'a> {
    fn new(trace: &'a Trace, side: Side) -> Result<Prepared<'a>> {
        if trace.spans.is_empty() {
            return Err(Error::Format(format!(
                "{}: expected a trace with spans to compare, found none ({} lanes, {} devices)",
                side.name(),
                trace.lanes.len(),
                trace.devices.len()
            )));
        }
        let spans = &trace.spans;
        let mut operator = vec![false; spans.len()];
        let mut host_time: Vec<u64> = spans.iter().map(|s| s.start_ns).collect();
        let mut host_lane: Vec<u32> = spans.iter().map(|s| s.lane).collect();
        let mut ops_by_lane: Vec<Vec<u32>> = vec![Vec::new(); trace.lanes.len()];
        // Device spans by (lane, start), walked beside the launches in the
        // same order: one merge instead of a search per span.
        let mut device: Vec<(u32, u64, u32)> = Vec::new();
        for (i, s) in spans.iter().enumerate() {
            match on_device(trace, s) {
                Some(false) if is_operator(s) => {
                    operator[i] = true;
                    ops_by_lane[s.lane as usize].push(i as u32);
                }
                Some(true) => device.push((s.lane, s.start_ns, i as u32)),
                _ => {}
            }
        }
        for ops in &mut ops_by_lane {
            ops.sort_unstable_by_key(|&i| {
                let s = &spans[i as usize];
                (s.start_ns, std::cmp::Reverse(s.dur_ns), i)
            });
        }
        let mut launches: Vec<(u32, u64, u64, u32)> = trace
            .flows
            .iter()
            .filter(|f| f.kind == FlowKind::Launch)
            .map(|f| (f.to.lane, f.to.ts_ns, f.from.ts_ns, f.from.lane))
            .collect();
        launches.sort_unstable();
        device.sort_unstable();
        let mut k = 0;
        for (lane, start, i) in device {
            while launches
                .get(k)
                .is_some_and(|&(l, ts, _, _)| (l, ts) < (lane, start))
            {
                k += 1;
            }
            if let Some(&(l, ts, host, from)) = launches.get(k)
                && l == lane
                && ts <= end(&spans[i as usize])
            {
                host_time[i as usize] = host;
                host_lane[i as usize] = from;
            }
        }
        Ok(Prepared {
            trace,
            side,
            operator,
            host_time,
            host_lane,
            op_lanes: (0..ops_by_lane.len() as u32)
                .filter(|&l| !ops_by_lane[l as usize].is_empty())
                .collect(),
            ops_by_lane,
            steps: find_steps(trace),
        })
    }

    /// The main thread when there are no steps: the host lane whose
    /// operators cover the longest stretch of time, first start to last
    /// end (the thread that drives the program; PyTorch's autograd thread
    /// can run more operators, but only during backward passes), then the
    /// one with more operators, then the lowest lane.
    fn main_lane(&self) -> Result<u32> {
        let spans = &self.trace.spans;
        let mut best: Option<(u64, usize, std::cmp::Reverse<u32>)> = None;
        for (lane, ops) in self.ops_by_lane.iter().enumerate() {
            let lane = lane as u32;
            if ops.is_empty() {
                continue;
            }
            let first = ops.first().map_or(0, |&i| spans[i as usize].start_ns);
            let last = ops
                .iter()
                .map(|&i| end(&spans[i as usize]))
                .max()
                .unwrap_or(0);
            let key = (last - first.min(last), ops.len(), std::cmp::Reverse(lane));
            if best.is_none_or(|b| key > b) {
                best = Some(key);
            }
        }
        best.map(|(_, _, lane)| lane.0).ok_or_else(|| {
            let t = self.trace;
            let host = t
                .spans
                .iter()
                .filter(|s| {
                    matches!(
                        t.lanes.get(s.lane as usize).map(|l| &l.kind),
                        Some(LaneKind::Host { .. })
                    )
                })
                .count();
            Error::Format(format!(
                "{}: expected ProfilerStep#N spans or operators on a host thread to align by, \
                 found neither ({} spans, {host} of them on host threads)",
                self.side.name(),
                t.spans.len()
            ))
        })
    }

    /// The top-level operators of `lane` (inside no other operator of the
    /// lane) that start in `[lo, hi)`, by start, as span indices.
    fn top_level(&self, lane: u32, lo: u64, hi: u64) -> Vec<u32> {
        let Some(ops) = self.ops_by_lane.get(lane as usize) else {
            return Vec::new();
        };
        let spans = &self.trace.spans;
        let first = ops.partition_point(|&i| spans[i as usize].start_ns < lo);
        let mut out = Vec::new();
        let mut open_end = 0u64;
        for &i in &ops[first..] {
            let s = &spans[i as usize];
            if s.start_ns >= hi {
                break;
            }
            if out.is_empty() || s.start_ns >= open_end {
                out.push(i);
                open_end = end(s);
            }
        }
        out
    }
}

/// One side cut into regions and slots.
struct Layout {
    /// Regions in time order; `[lo, hi)` decides which spans are in.
    regions: Vec<Reg>,
    /// Top-level operator starts, region by region.
    op_starts: Vec<u64>,
    /// Their name ids.
    op_names: Vec<u32>,
    /// For every slot, the pair of slots it belongs to ([`NONE`]: none).
    slot_pair: Vec<u32>,
    /// How many slot pairs there are (on both sides).
    pairs: u32,
}

struct Reg {
    lo: u64,
    hi: u64,
    /// Its head slot (spans before their thread's first top-level
    /// operator, or on a thread without any, or on no thread).
    first_slot: u32,
    /// Per host thread with top-level operators in it, the main thread
    /// first, the others by their first operator's start.
    tracks: Vec<Track>,
    /// Whether it is paired.
    paired: bool,
    out: Region,
}

/// One host thread's top-level operators in a region.
struct Track {
    lane: u32,
    /// Its operators, in `op_starts`.
    ops: std::ops::Range<usize>,
    /// The slot of its first operator; the k-th is `first_slot + k`.
    first_slot: u32,
}

const NONE: u32 = u32::MAX;

impl Layout {
    fn new<'a>(
        p: &Prepared<'a>,
        names: &mut Names<'a>,
        main: u32,
        cuts: Vec<(u64, u64, Option<Step>)>,
    ) -> Layout {
        let mut l = Layout {
            regions: Vec::with_capacity(cuts.len()),
            op_starts: Vec::new(),
            op_names: Vec::new(),
            slot_pair: Vec::new(),
            pairs: 0,
        };
        let mut slot = 0usize;
        for (lo, hi, step) in cuts {
            let head = slot;
            slot += 1;
            // The main thread always has a track (maybe empty), so the
            // main threads pair whatever the others do.
            let mut lanes = vec![(0u64, main, p.top_level(main, lo, hi))];
            let mut others: Vec<(u64, u32, Vec<u32>)> = p
                .op_lanes
                .iter()
                .filter(|&&lane| lane != main)
                .map(|&lane| (lane, p.top_level(lane, lo, hi)))
                .filter_map(|(lane, ops)| {
                    let first = p.trace.spans[*ops.first()? as usize].start_ns;
                    Some((first, lane, ops))
                })
                .collect();
            others.sort_unstable_by_key(|o| (o.0, o.1));
            lanes.extend(others);
            let mut operators = Totals::default();
            let (mut first, mut last) = (u64::MAX, 0u64);
            let mut tracks = Vec::with_capacity(lanes.len());
            for (_, lane, ops) in lanes {
                let from = l.op_starts.len();
                for &i in &ops {
                    let s = &p.trace.spans[i as usize];
                    l.op_starts.push(s.start_ns);
                    l.op_names.push(names.id(&s.name));
                    operators.add(s.dur_ns);
                    first = first.min(s.start_ns);
                    last = last.max(end(s));
                }
                tracks.push(Track {
                    lane,
                    ops: from..l.op_starts.len(),
                    first_slot: slot as u32,
                });
                slot += ops.len();
            }
            let host = match step {
                Some(s) => (s.start, s.end),
                None if operators.count == 0 => (0, 0),
                None => (first, last),
            };
            l.regions.push(Reg {
                lo,
                hi,
                first_slot: head as u32,
                tracks,
                paired: false,
                out: Region {
                    step: step.map(|s| s.span),
                    number: step.map(|s| s.number),
                    host,
                    device: None,
                    kernels: Totals::default(),
                    operators,
                },
            });
        }
        l.slot_pair = vec![NONE; slot];
        l
    }

    /// The region and slot of a span counting at host time `t` on host
    /// lane `lane`, if a region holds it; `hint` is the region of the
    /// previous span, tried first (spans come in file order, which is
    /// mostly time order).
    fn place(&self, t: u64, lane: u32, hint: usize) -> Option<(usize, usize)> {
        let r = match self.regions.get(hint) {
            Some(h) if h.lo <= t && t < h.hi => hint,
            _ => self.regions.partition_point(|r| r.lo <= t).checked_sub(1)?,
        };
        let reg = &self.regions[r];
        if t >= reg.hi {
            return None;
        }
        let head = reg.first_slot as usize;
        let Some(track) = reg.tracks.iter().find(|tr| tr.lane == lane) else {
            return Some((r, head));
        };
        let k = self.op_starts[track.ops.clone()].partition_point(|&s| s <= t);
        Some((
            r,
            if k == 0 {
                head
            } else {
                track.first_slot as usize + k - 1
            },
        ))
    }
}

/// Pairs steps by number when every number of the side with fewer steps
/// occurs on the other (numbers unique on both), by position otherwise.
fn pair_steps(b: &[Step], c: &[Step]) -> (Alignment, Vec<(usize, usize)>) {
    let index = |s: &[Step]| -> Option<HashMap<u64, usize>> {
        let map: HashMap<u64, usize> = s.iter().enumerate().map(|(i, s)| (s.number, i)).collect();
        (map.len() == s.len()).then_some(map)
    };
    if let (Some(bi), Some(ci)) = (index(b), index(c)) {
        let (fewer, more) = if b.len() <= c.len() {
            (&bi, &ci)
        } else {
            (&ci, &bi)
        };
        if fewer.keys().all(|n| more.contains_key(n)) {
            let pairs = b
                .iter()
                .enumerate()
                .filter_map(|(i, s)| ci.get(&s.number).map(|&j| (i, j)))
                .collect();
            return (Alignment::StepsByNumber, pairs);
        }
    }
    let n = b.len().min(c.len());
    (Alignment::StepsByOrder, (0..n).map(|k| (k, k)).collect())
}

/// A span's matching key: (slot pair, device and kind, name, host time,
/// span index); spans of one slot pair with equal (device, kind, name)
/// match in time order.
type Key = (u32, u8, u32, u64, u32);

/// Compares `candidate` with `baseline`; see the module docs.
///
/// Errors ([`Error::Format`], naming the side): a trace without spans; with
/// no profiler steps on one side, a trace with no operator on any host
/// thread (nothing to align by). Steps only one trace has are a partial
/// result, not an error: they are listed in [`Diff::unpaired`].
pub fn diff(baseline: &Trace, candidate: &Trace) -> Result<Diff> {
    let b = Prepared::new(baseline, Side::Baseline)?;
    let c = Prepared::new(candidate, Side::Candidate)?;
    let mut names = Names::new();
    let steps = |p: &Prepared<'_>| -> Vec<(u64, u64, Option<Step>)> {
        p.steps
            .1
            .iter()
            .map(|s| (s.start, s.end, Some(*s)))
            .collect()
    };
    let (alignment, region_pairs, mut lb, mut lc) = match (b.steps.0, c.steps.0) {
        (Some(main_b), Some(main_c)) => {
            let (alignment, pairs) = pair_steps(&b.steps.1, &c.steps.1);
            let lb = Layout::new(&b, &mut names, main_b, steps(&b));
            let lc = Layout::new(&c, &mut names, main_c, steps(&c));
            (alignment, pairs, lb, lc)
        }
        _ => {
            let (main_b, main_c) = (b.main_lane()?, c.main_lane()?);
            let whole = || vec![(0, u64::MAX, None)];
            let lb = Layout::new(&b, &mut names, main_b, whole());
            let lc = Layout::new(&c, &mut names, main_c, whole());
            (Alignment::Operators, vec![(0, 0)], lb, lc)
        }
    };

    // Slot pairs: the heads of paired regions, then their aligned
    // top-level operators.
    let mut matched_ops = Vec::with_capacity(region_pairs.len());
    let mut next = 0u32;
    for &(rb, rc) in &region_pairs {
        let (hb, hc) = (
            lb.regions[rb].first_slot as usize,
            lc.regions[rc].first_slot as usize,
        );
        lb.regions[rb].paired = true;
        lc.regions[rc].paired = true;
        lb.slot_pair[hb] = next;
        lc.slot_pair[hc] = next;
        next += 1;
        // Threads pair in track order: main with main, then the others.
        let mut matched = 0u64;
        for (x, y) in lb.regions[rb].tracks.iter().zip(&lc.regions[rc].tracks) {
            let m = align::align(&lb.op_names[x.ops.clone()], &lc.op_names[y.ops.clone()]);
            for &(i, j) in &m {
                lb.slot_pair[x.first_slot as usize + i as usize] = next;
                lc.slot_pair[y.first_slot as usize + j as usize] = next;
                next += 1;
            }
            matched += m.len() as u64;
        }
        matched_ops.push(matched);
    }
    (lb.pairs, lc.pairs) = (next, next);

    let mut table: Vec<[Totals; 2]> = Vec::new();
    let (keys_b, spans_b) = walk(&b, &mut lb, &mut names, &mut table, 0);
    let (keys_c, spans_c) = walk(&c, &mut lc, &mut names, &mut table, 1);
    let span_deltas = match_spans(baseline, candidate, &keys_b, &keys_c);
    drop((keys_b, keys_c));
    let mut by_baseline = vec![NONE; baseline.spans.len()];
    for (k, m) in span_deltas.iter().enumerate() {
        by_baseline[m.baseline as usize] = k as u32;
    }

    let mut rows: Vec<NameRow> = table
        .into_iter()
        .enumerate()
        .filter(|(_, t)| t[0].count + t[1].count > 0)
        .map(|(k, [baseline, candidate])| NameRow {
            kind: NameKind::ALL[k % NameKind::ALL.len()],
            name: Text::clone(&names.texts[k / NameKind::ALL.len()]),
            baseline,
            candidate,
        })
        .collect();
    rows.sort_by(|x, y| {
        y.delta_ns()
            .unsigned_abs()
            .cmp(&x.delta_ns().unsigned_abs())
            .then(x.kind.cmp(&y.kind))
            .then_with(|| x.name.cmp(&y.name))
    });

    let mut pairs: Vec<RegionPair> = region_pairs
        .iter()
        .zip(&matched_ops)
        .map(|(&(rb, rc), &m)| RegionPair {
            baseline: lb.regions[rb].out.clone(),
            candidate: lc.regions[rc].out.clone(),
            matched_operators: m,
        })
        .collect();
    pairs.sort_by_key(|p| p.baseline.host);
    let operators = (
        pairs.iter().map(|p| p.baseline.operators.count).sum(),
        pairs.iter().map(|p| p.candidate.operators.count).sum(),
    );
    let mut unpaired = Vec::new();
    for (side, l) in [(Side::Baseline, &lb), (Side::Candidate, &lc)] {
        for r in l.regions.iter().filter(|r| !r.paired) {
            unpaired.push((side, r.out.clone()));
        }
    }
    Ok(Diff {
        alignment,
        pairs,
        unpaired,
        operators,
        names: rows,
        span_deltas,
        spans: (spans_b, spans_c),
        by_baseline,
    })
}

/// Places every span of one side: region totals, the name table (paired
/// regions only) and the matching keys (spans in paired slots); returns
/// the keys, sorted, and how many spans lie in paired regions.
fn walk<'a>(
    p: &Prepared<'a>,
    layout: &mut Layout,
    names: &mut Names<'a>,
    table: &mut Vec<[Totals; 2]>,
    side: usize,
) -> (Vec<Key>, u64) {
    let mut keys = Vec::with_capacity(p.trace.spans.len());
    let mut in_pairs = 0u64;
    let mut hint = 0;
    for (i, s) in p.trace.spans.iter().enumerate() {
        let Some(device) = on_device(p.trace, s) else {
            continue;
        };
        let t = p.host_time[i];
        let lane = p.host_lane[i];
        let Some((r, slot)) = layout.place(t, lane, hint) else {
            continue;
        };
        hint = r;
        let reg = &mut layout.regions[r];
        let name = names.id(&s.name);
        let kind = if device {
            names.activity(name, s).map(|a| {
                reg.out.kernels.add(s.dur_ns);
                let (lo, hi) = reg.out.device.unwrap_or((u64::MAX, 0));
                reg.out.device = Some((lo.min(s.start_ns), hi.max(end(s))));
                match a {
                    Activity::Kernel => NameKind::Kernel,
                    Activity::Copy => NameKind::Copy,
                    Activity::Memset => NameKind::Memset,
                }
            })
        } else {
            p.operator[i].then_some(NameKind::Operator)
        };
        if !reg.paired {
            continue;
        }
        in_pairs += 1;
        if let Some(kind) = kind {
            let k = name as usize * NameKind::ALL.len() + kind as usize;
            if table.len() <= k {
                table.resize(k + 1, Default::default());
            }
            table[k][side].add(s.dur_ns);
        }
        let pair = layout.slot_pair[slot];
        if pair != NONE {
            let class = (u8::from(device) << 7) | s.kind as u8;
            keys.push((pair, class, name, t, i as u32));
        }
    }
    (sort_by_pair(keys, layout.pairs), in_pairs)
}

/// Sorts keys: a counting sort by slot pair (dense, `0..pairs`), then each
/// pair's few keys by the rest; a comparison sort of them all spent a
/// quarter of a diff's instructions.
fn sort_by_pair(keys: Vec<Key>, pairs: u32) -> Vec<Key> {
    let mut start = vec![0usize; pairs as usize + 1];
    for k in &keys {
        start[k.0 as usize + 1] += 1;
    }
    for p in 1..start.len() {
        start[p] += start[p - 1];
    }
    let mut next = start.clone();
    let mut out = vec![(0, 0, 0, 0, 0); keys.len()];
    for k in keys {
        let at = &mut next[k.0 as usize];
        out[*at] = k;
        *at += 1;
    }
    for w in start.windows(2) {
        out[w[0]..w[1]].sort_unstable();
    }
    out
}

/// Zips the sorted keys of both sides group by group (slot pair, class,
/// name): the k-th of a group in the candidate matches the k-th in the
/// baseline. The result is by candidate span.
fn match_spans(baseline: &Trace, candidate: &Trace, kb: &[Key], kc: &[Key]) -> Vec<SpanDelta> {
    let group = |k: &Key| (k.0, k.1, k.2);
    // Groups are small (one name in one slot): a linear scan, not a search
    // over the rest of the keys.
    let end_of = |keys: &[Key], from: usize| {
        let g = group(&keys[from]);
        from + keys[from..].iter().take_while(|k| group(k) == g).count()
    };
    let mut out = Vec::with_capacity(kb.len().min(kc.len()));
    let (mut i, mut j) = (0, 0);
    while i < kb.len() && j < kc.len() {
        match group(&kb[i]).cmp(&group(&kc[j])) {
            std::cmp::Ordering::Less => i = end_of(kb, i),
            std::cmp::Ordering::Greater => j = end_of(kc, j),
            std::cmp::Ordering::Equal => {
                let (ie, je) = (end_of(kb, i), end_of(kc, j));
                for (x, y) in kb[i..ie].iter().zip(&kc[j..je]) {
                    out.push(SpanDelta {
                        candidate: y.4,
                        baseline: x.4,
                        baseline_ns: baseline.spans[x.4 as usize].dur_ns,
                        candidate_ns: candidate.spans[y.4 as usize].dur_ns,
                    });
                }
                (i, j) = (ie, je);
            }
        }
    }
    // By candidate span: each appears once, so a pass over an index of
    // the candidate's spans orders them without a sort.
    let mut at = vec![NONE; candidate.spans.len()];
    for (k, d) in out.iter().enumerate() {
        at[d.candidate as usize] = k as u32;
    }
    at.into_iter()
        .filter(|&k| k != NONE)
        .map(|k| out[k as usize])
        .collect()
}

/// The columns of [`text`]'s table, tab-separated.
pub const COLUMNS: [&str; 9] = [
    "kind",
    "name",
    "baseline_count",
    "candidate_count",
    "baseline_ns",
    "candidate_ns",
    "delta_ns",
    "ratio",
    "presence",
];

/// The diff as text for scripts: summary lines starting with `# `, then
/// one tab-separated table with a header line ([`COLUMNS`]).
///
/// The table's rows are the region pairs first (kind `step`, or `trace`
/// when aligned by operators; counts 1 on each side that has it, times the
/// host durations; name `ProfilerStep#N`, `ProfilerStep#N ->
/// ProfilerStep#M` when renumbered), unpaired steps after them (`vanished`
/// or `new`), then [`Diff::names`] in its order. Times are integer
/// nanoseconds; `ratio` is candidate over baseline with four decimals, `-`
/// when the baseline's is 0; tabs, newlines and backslashes in names are
/// written `\t`, `\n`, `\\`.
pub fn text(d: &Diff) -> String {
    let mut s = String::new();
    let ns = |v: u64| crate::view::format_ns(v as f64);
    let _ = writeln!(
        s,
        "# keel trace diff (baseline -> candidate), aligned by {}",
        d.alignment.name()
    );
    let unpaired = |side| d.unpaired.iter().filter(|u| u.0 == side).count();
    let _ = writeln!(
        s,
        "# regions: {} paired, {} only in the baseline, {} only in the candidate",
        d.pairs.len(),
        unpaired(Side::Baseline),
        unpaired(Side::Candidate)
    );
    let host = |f: fn(&RegionPair) -> &Region| d.pairs.iter().map(|p| f(p).duration_ns()).sum();
    let (hb, hc): (u64, u64) = (host(|p| &p.baseline), host(|p| &p.candidate));
    let _ = writeln!(
        s,
        "# paired host time: {} -> {} ({})",
        ns(hb),
        ns(hc),
        change(hb, hc)
    );
    let _ = writeln!(
        s,
        "# top-level operators: {} matched; {} in the baseline, {} in the candidate",
        d.matched_operators(),
        d.operators.0,
        d.operators.1
    );
    let slower = d.span_deltas.iter().filter(|m| m.delta_ns() > 0).count();
    let faster = d.span_deltas.iter().filter(|m| m.delta_ns() < 0).count();
    let _ = writeln!(
        s,
        "# spans matched: {} ({} slower, {} faster); {} in the baseline, {} in the candidate",
        d.span_deltas.len(),
        slower,
        faster,
        d.spans.0,
        d.spans.1
    );
    for kind in NameKind::ALL {
        let (b, c) = d.totals(kind);
        if b.count + c.count == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "# {} time: {} -> {} ({}); {} -> {} spans",
            kind.name(),
            ns(b.total_ns),
            ns(c.total_ns),
            change(b.total_ns, c.total_ns),
            b.count,
            c.count
        );
    }
    let presence = |p| d.names.iter().filter(|r| r.presence() == p).count();
    let _ = writeln!(
        s,
        "# names: {} in both, {} new, {} vanished",
        presence(Presence::Both),
        presence(Presence::New),
        presence(Presence::Vanished)
    );
    s.push_str(&COLUMNS.join("\t"));
    s.push('\n');
    let region_name = |r: &Region| match r.number {
        Some(n) => format!("ProfilerStep#{n}"),
        None => "trace".to_owned(),
    };
    let kind = if d.alignment == Alignment::Operators {
        "trace"
    } else {
        "step"
    };
    for p in &d.pairs {
        let (nb, nc) = (region_name(&p.baseline), region_name(&p.candidate));
        let name = if nb == nc {
            nb
        } else {
            format!("{nb} -> {nc}")
        };
        row(
            &mut s,
            kind,
            &name,
            (1, p.baseline.duration_ns()),
            (1, p.candidate.duration_ns()),
            "both",
        );
    }
    for (side, r) in &d.unpaired {
        let (one, none) = ((1, r.duration_ns()), (0, 0));
        let name = region_name(r);
        match side {
            Side::Baseline => row(&mut s, kind, &name, one, none, "vanished"),
            Side::Candidate => row(&mut s, kind, &name, none, one, "new"),
        }
    }
    for r in &d.names {
        row(
            &mut s,
            r.kind.name(),
            &r.name,
            (r.baseline.count, r.baseline.total_ns),
            (r.candidate.count, r.candidate.total_ns),
            r.presence().name(),
        );
    }
    s
}

/// `+1.20 ms, x1.0150`: a change as a signed time and a ratio.
fn change(b: u64, c: u64) -> String {
    let delta = signed_delta(b, c);
    let sign = if delta > 0 { "+" } else { "" };
    match ratio(b, c) {
        Some(r) => format!("{sign}{}, x{r:.4}", crate::view::format_ns(delta as f64)),
        None => format!("{sign}{}", crate::view::format_ns(delta as f64)),
    }
}

fn row(s: &mut String, kind: &str, name: &str, b: (u64, u64), c: (u64, u64), presence: &str) {
    let ratio = ratio(b.1, c.1).map_or_else(|| "-".to_owned(), |r| format!("{r:.4}"));
    let _ = writeln!(
        s,
        "{kind}\t{}\t{}\t{}\t{}\t{}\t{}\t{ratio}\t{presence}",
        escape(name),
        b.0,
        c.0,
        b.1,
        c.1,
        signed_delta(b.1, c.1)
    );
}

/// A name as one field of a tab-separated line.
fn escape(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['\t', '\n', '\r', '\\']) {
        return name.into();
    }
    let mut out = String::with_capacity(name.len() + 8);
    for ch in name.chars() {
        match ch {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\\' => out.push_str("\\\\"),
            _ => out.push(ch),
        }
    }
    out.into()
}
