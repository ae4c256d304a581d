//! The viewer's index over a [`Trace`]: what the timeline needs to draw a
//! frame in time proportional to what is visible, not to the trace size.
//!
//! For every lane, spans are split into depth rows: a span nested in
//! another goes below it, and spans that overlap without nesting (imported
//! traces have them) go to extra rows, so inside one row spans never
//! overlap and, sorted by start, they are also sorted by end: the
//! first visible span is one binary search on the end, the last one a
//! binary search on the start, and a run of sub-pixel spans is skipped with
//! one more binary search per pixel column. Zoomed far out, a row is read
//! from one of its coarser levels instead ([`Row::level_for`]): spans too
//! short to tell apart at a resolution merged into runs, so a frame costs
//! a few items per pixel column, not a binary search per column into
//! millions of spans. This module never touches egui.

use crate::{LaneKind, SpanKind, Trace};

/// One depth row of a lane: span indices sorted by start (and by end).
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Indices into [`Trace::spans`].
    pub spans: Vec<u32>,
    /// `starts[i]` is the start of `spans[i]` (kept apart for cache-friendly
    /// binary searches).
    pub starts: Vec<u64>,
    /// `ends[i]` is the end of `spans[i]`.
    pub ends: Vec<u64>,
    /// Coarser levels and how many of the row's first spans they cover,
    /// made when first asked for; extended over the newer spans once they
    /// are an eighth of the row (Note [Levels of a growing row]).
    levels: std::sync::OnceLock<(Vec<Level>, usize)>,
}

/// A row at a coarser resolution: items that are one span, or a run of
/// consecutive spans each shorter than [`Level::res`] with gaps shorter
/// than it (what one pixel of that many nanoseconds cannot tell apart).
#[derive(Debug, Clone, Default)]
pub struct Level {
    /// Nanoseconds: every merged span and gap is shorter.
    pub res: u64,
    /// Item starts, sorted.
    pub starts: Vec<u64>,
    /// Item ends (the running maximum, so sorted).
    pub ends: Vec<u64>,
    /// The item's first span: its position in the row.
    pub first: Vec<u32>,
    /// Spans in the item (1: the span itself).
    pub count: Vec<u32>,
}

impl Level {
    /// The index range of items that overlap `[t0, t1]`.
    pub fn visible(&self, t0: u64, t1: u64) -> std::ops::Range<usize> {
        let first = self.ends.partition_point(|&e| e < t0);
        let last = self.starts.partition_point(|&s| s <= t1);
        first..last.max(first)
    }
}

/// The resolution of level `k` of a row (0: the spans themselves): 256 ns,
/// then four times coarser each level.
pub fn level_res(k: u32) -> u64 {
    if k == 0 {
        0
    } else {
        256u64.saturating_mul(1u64.checked_shl(2 * (k - 1)).unwrap_or(u64::MAX))
    }
}

/// The level to read for `ns_per_px` nanoseconds per pixel: the coarsest
/// whose resolution is at most that.
pub fn level_for(ns_per_px: f64) -> u32 {
    let mut k = 0;
    while k < 31 && (level_res(k + 1) as f64) <= ns_per_px {
        k += 1;
    }
    k
}

/// An item of a level: start, end (running maximum), first span (its
/// position in the row), span count.
pub(crate) type Item = (u64, u64, u32, u32);

/// The levels of a row whose items (start, end (running maximum), first
/// span, span count) are `base`, finest first: each of [`level_res`]`(k)`
/// for k = 1, 2, ..., kept when it has at most three quarters of the
/// items of the last one kept, until one item is left.
pub(crate) fn build_levels(mut prev: Vec<Item>) -> Vec<(u64, Vec<Item>)> {
    let mut out = Vec::new();
    let mut kept = prev.len();
    let mut k = 1;
    while prev.len() > 1 && k < 32 {
        let r = level_res(k);
        let next = coarsen(&prev, r);
        if next.len() * 4 <= kept * 3 {
            kept = next.len();
            out.push((r, next.clone()));
        }
        prev = next;
        k += 1;
    }
    out
}

/// One level coarser: consecutive items merge while each is a run or
/// shorter than `r`, and the gap between them is shorter than `r`.
fn coarsen(prev: &[Item], r: u64) -> Vec<Item> {
    let small = |&(s, e, _, c): &Item| c > 1 || e.saturating_sub(s) < r;
    let mut out: Vec<Item> = Vec::with_capacity(prev.len() / 2 + 1);
    for it in prev {
        match out.last_mut() {
            Some(last) if small(last) && small(it) && it.0.saturating_sub(last.1) < r => {
                last.1 = last.1.max(it.1);
                last.3 = last.3.saturating_add(it.3);
            }
            _ => out.push(*it),
        }
    }
    out
}

impl Row {
    /// Appends span `id` (`[start, end]`, starting no earlier than the
    /// row's last), keeping `ends` the running maximum.
    pub(crate) fn push(&mut self, id: u32, start: u64, end: u64) {
        self.spans.push(id);
        self.starts.push(start);
        self.ends
            .push(end.max(self.ends.last().copied().unwrap_or(0)));
    }

    /// Note [Levels of a growing row]: a live row keeps its levels for the
    /// spans they cover and draws the newer ones span by span until those
    /// are an eighth of the row; then the newer spans are coarsened on
    /// their own and their items appended to each level (an item never
    /// spans the seam, one extra item boundary a level). That costs the
    /// new spans, a constant amount per span pushed, never the row: a
    /// frame of a growing live view never makes a whole row's levels.
    fn extend_levels(&mut self) {
        let n = self.spans.len();
        let Some((levels, covered)) = self.levels.get_mut() else {
            return;
        };
        if n - *covered <= *covered / 8 {
            return;
        }
        if levels.is_empty() {
            // None was worth keeping when the row was short: judged again
            // over the whole row when next asked for.
            self.levels = std::sync::OnceLock::new();
            return;
        }
        let mut prev: Vec<Item> = (*covered..n)
            .map(|i| (self.starts[i], self.ends[i], i as u32, 1))
            .collect();
        for l in levels.iter_mut() {
            let next = coarsen(&prev, l.res);
            for it in &next {
                l.starts.push(it.0);
                l.ends.push(it.1.max(l.ends.last().copied().unwrap_or(0)));
                l.first.push(it.2);
                l.count.push(it.3);
            }
            prev = next;
        }
        *covered = n;
    }

    /// Keeps the row's first `k` spans, and of its levels the items wholly
    /// among them (the newer spans are placed again, then the levels
    /// extended over them).
    fn truncate(&mut self, k: usize) {
        self.spans.truncate(k);
        self.starts.truncate(k);
        self.ends.truncate(k);
        let Some((levels, covered)) = self.levels.get_mut() else {
            return;
        };
        if *covered <= k {
            return;
        }
        // Coarser items are unions of finer ones: the earliest start of an
        // item reaching past `k`, over the levels, is an item boundary of
        // every level.
        let cut = levels
            .iter()
            .filter_map(|l| {
                // Items are contiguous: the last starting at or before `k`
                // is the one reaching past it, if any does.
                let j = l
                    .first
                    .partition_point(|&f| f as usize <= k)
                    .checked_sub(1)?;
                let (f, c) = (l.first[j] as usize, l.count[j] as usize);
                Some(if f + c > k { f } else { f + c })
            })
            .min()
            .unwrap_or(k);
        for l in levels.iter_mut() {
            let i = l.first.partition_point(|&f| (f as usize) < cut);
            l.starts.truncate(i);
            l.ends.truncate(i);
            l.first.truncate(i);
            l.count.truncate(i);
        }
        *covered = cut;
    }

    /// Drops the spans below `k` and numbers the rest from 0 (the trace's
    /// first `k` spans were removed), with ends the running maximum of
    /// the spans kept (`spans` is the trace after the removal).
    fn drop_below(&mut self, k: u32, spans: &[crate::Span]) {
        let mut w = 0;
        let mut end = 0;
        for r in 0..self.spans.len() {
            let id = self.spans[r];
            if id < k {
                continue;
            }
            let id = id - k;
            end = spans.get(id as usize).map_or(end, |s| end.max(s.end_ns()));
            self.spans[w] = id;
            self.starts[w] = self.starts[r];
            self.ends[w] = end;
            w += 1;
        }
        self.spans.truncate(w);
        self.starts.truncate(w);
        self.ends.truncate(w);
        self.levels = std::sync::OnceLock::new();
    }

    /// The row's coarser levels, finest first (made on the first call),
    /// and how many of the row's first spans they cover (the rest came
    /// later).
    pub fn levels(&self) -> (&[Level], usize) {
        let (levels, covered) = self.levels.get_or_init(|| {
            let base = (0..self.spans.len())
                .map(|i| (self.starts[i], self.ends[i], i as u32, 1))
                .collect();
            let levels = build_levels(base)
                .into_iter()
                .map(|(res, items)| Level {
                    res,
                    starts: items.iter().map(|i| i.0).collect(),
                    ends: items.iter().map(|i| i.1).collect(),
                    first: items.iter().map(|i| i.2).collect(),
                    count: items.iter().map(|i| i.3).collect(),
                })
                .collect();
            (levels, self.spans.len())
        });
        (levels, *covered)
    }

    /// The coarsest level to draw at `ns_per_px` nanoseconds per pixel and
    /// how many of the row's first spans it covers (`None`: the spans
    /// themselves). Rows of fewer spans than a screen has pixels are never
    /// worth one.
    pub fn level_for(&self, ns_per_px: f64) -> Option<(&Level, usize)> {
        if self.spans.len() < 4096 || ns_per_px < level_res(1) as f64 {
            return None;
        }
        let res = level_res(level_for(ns_per_px));
        let (levels, covered) = self.levels();
        levels
            .iter()
            .rev()
            .find(|l| l.res <= res)
            .map(|l| (l, covered))
    }

    /// The index range of spans that overlap `[t0, t1]`.
    pub fn visible(&self, t0: u64, t1: u64) -> std::ops::Range<usize> {
        let first = self.ends.partition_point(|&e| e < t0);
        let last = self.starts.partition_point(|&s| s <= t1);
        first..last.max(first)
    }

    /// The first index in `from..to` whose span ends after `t`.
    pub fn first_ending_after(&self, from: usize, to: usize, t: u64) -> usize {
        from + self.ends[from..to].partition_point(|&e| e <= t)
    }

    /// The span (trace index) at time `t`, if one covers it.
    pub fn at(&self, t0: u64, t1: u64) -> Option<u32> {
        let r = self.visible(t0, t1);
        // Prefer the span that covers the middle of the window.
        let mid = t0 / 2 + t1 / 2;
        r.clone()
            .find(|&i| self.starts[i] <= mid && self.ends[i] >= mid)
            .or_else(|| r.clone().next())
            .map(|i| self.spans[i])
    }
}

/// A lane of the timeline, in display order.
#[derive(Debug, Clone)]
pub struct LaneIndex {
    /// Index into [`Trace::lanes`].
    pub lane: u32,
    /// The label shown left of the lane (`vulkan:0 · stream 3`,
    /// `GPU 0 · stream 7`, `main`, `python3 4242`).
    pub label: String,
    /// Whether it is a device stream.
    pub device: bool,
    /// Depth rows, outermost first.
    pub rows: Vec<Row>,
    /// Number of spans on the lane.
    pub span_count: usize,
    /// The spans still open at the latest start placed (end, row), for
    /// appending spans that start later without re-indexing the lane.
    open: Vec<(u64, u16)>,
    /// The latest start placed on the lane.
    last_start: u64,
}

/// A group of consecutive display lanes: one device's streams, or one
/// process's host threads (by [`crate::Lane::group`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The header (`GPU 0 · NVIDIA A100`, `host`, `python3.10 (pid 42)`).
    pub label: String,
    /// Whether it holds device streams.
    pub device: bool,
    /// Its lanes: positions in [`TraceView::lanes`].
    pub lanes: std::ops::Range<usize>,
}

/// A [`Trace`] and the index the views need.
#[derive(Debug, Clone)]
pub struct TraceView {
    /// The trace itself.
    pub trace: Trace,
    /// Lanes in display order: device streams (by device, stream), then host
    /// threads (by group, thread).
    pub lanes: Vec<LaneIndex>,
    /// Groups of [`Self::lanes`], in display order, covering every lane.
    pub groups: Vec<Group>,
    /// For every lane of the trace, its position in [`Self::lanes`].
    pub lane_pos: Vec<usize>,
    /// For every span, its depth row on its lane.
    pub depth: Vec<u16>,
    /// Flow indices sorted by the earlier end's time, and those times.
    pub flows_by_time: Vec<u32>,
    /// `flow_times[i]` is the earlier end of `flows_by_time[i]`.
    pub flow_times: Vec<u64>,
    /// Latest flow duration (later end minus earlier end).
    pub max_flow_len: u64,
    /// For every flow, the spans its two ends bind to (the deepest span of
    /// the end's lane that contains the end's time), if any.
    pub flow_spans: Vec<(Option<u32>, Option<u32>)>,
    /// (span, flow) for both bound ends of every flow, sorted: the flows
    /// touching a span are one binary search away.
    span_flows: Vec<(u32, u32)>,
    /// Flow ends bound to no span yet, by time: (time, flow, 0 for the
    /// start or 1 for the end). Live data retries those its new spans'
    /// time range covers, not all of them.
    unbound_flows: std::collections::BTreeSet<(u64, u32, u8)>,
    /// Earliest start and latest end over every span, instant, counter
    /// point and memory event; `(0, 1000)` when the trace has none of
    /// them ([`TraceView::holds_times`] tells the two apart).
    pub bounds: (u64, u64),
    /// Earliest start and latest end over spans and instants (`(MAX, 0)`
    /// when there are none), kept for appending.
    extent: (u64, u64),
    /// Where the trace came from (file path, workload, address).
    pub source: String,
}

/// The short name of a trace device: `GPU N` for `cuda:N` (what PyTorch
/// users know their GPUs by), the device string otherwise. A device of one
/// of several files opened together keeps its file's label (`rank 1 ·
/// cuda:0` is `rank 1 · GPU 0`, see the `file` module's `load_traces`).
pub fn device_label(device: &str) -> String {
    let (file, device) = match device.rsplit_once(" \u{b7} ") {
        Some((file, device)) => (Some(file), device),
        None => (None, device),
    };
    let short = match device.strip_prefix("cuda:") {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => format!("GPU {n}"),
        _ => device.to_owned(),
    };
    match file {
        Some(file) => format!("{file} \u{b7} {short}"),
        None => short,
    }
}

fn lane_label(trace: &Trace, l: u32) -> (String, bool) {
    let lane = &trace.lanes[l as usize];
    match &lane.kind {
        LaneKind::Stream { device, stream, .. } => {
            let dev = trace
                .devices
                .get(*device as usize)
                .map_or_else(|| format!("device {device}"), |d| device_label(&d.device));
            let name = if lane.name.is_empty() {
                format!("stream {stream}")
            } else {
                lane.name.clone()
            };
            (format!("{dev} · {name}"), true)
        }
        LaneKind::Host { .. } => (thread_label(&lane.name), false),
    }
}

/// A host thread's title under its process: Kineto's `thread 4242
/// (python3)` as Perfetto shows it, `python3 4242`; a thread whose id is a
/// name (`thread PyTorch Profiler`) by that name; other names as they are.
pub fn thread_label(name: &str) -> String {
    let Some(rest) = name.strip_prefix("thread ") else {
        return name.to_owned();
    };
    if let Some((tid, thread)) = rest.split_once(" (")
        && let Some(thread) = thread.strip_suffix(')')
        && tid.parse::<i64>().is_ok()
    {
        return format!("{thread} {tid}");
    }
    if rest.parse::<i64>().is_err() && !rest.is_empty() {
        return rest.to_owned();
    }
    name.to_owned()
}

/// The display order key of a lane: devices by (device, stream, the
/// stream's thread lanes after its own), then host threads by (group,
/// thread).
fn order_key(trace: &Trace, l: u32) -> (u8, u64, &str, i64, u64) {
    let lane = &trace.lanes[l as usize];
    match &lane.kind {
        LaneKind::Stream {
            device,
            stream,
            thread,
        } => (0, u64::from(*device), "", *stream, *thread),
        LaneKind::Host { thread } => (1, 0, lane.group.as_str(), 0, *thread),
    }
}

fn group_of(trace: &Trace, l: u32) -> (String, bool) {
    let lane = &trace.lanes[l as usize];
    match &lane.kind {
        LaneKind::Stream { device, .. } => {
            let label = match trace.devices.get(*device as usize) {
                Some(d) if !d.name.is_empty() && d.name != d.device => {
                    format!("{} · {}", device_label(&d.device), d.name)
                }
                Some(d) => device_label(&d.device),
                None => format!("device {device}"),
            };
            (label, true)
        }
        LaneKind::Host { .. } if lane.group.is_empty() => ("host".to_owned(), false),
        LaneKind::Host { .. } => (lane.group.clone(), false),
    }
}

impl LaneIndex {
    pub(crate) fn new(trace: &Trace, l: u32) -> LaneIndex {
        let (label, device) = lane_label(trace, l);
        LaneIndex {
            lane: l,
            label,
            device,
            rows: Vec::new(),
            span_count: 0,
            open: Vec::new(),
            last_start: 0,
        }
    }

    /// Places span `i` (`[start, end]`), which starts no earlier than every
    /// span placed before; returns its row. A span inside the innermost
    /// open span goes one row below it; one that overlaps an open span
    /// without nesting in it (imported traces have them: kernels on one
    /// stream can overlap) goes to the first row below that is free at its
    /// start, so no row holds overlapping spans and nothing is dropped.
    pub(crate) fn place(&mut self, i: u32, start: u64, end: u64) -> u16 {
        while self.open.last().is_some_and(|&(e, _)| e <= start) {
            self.open.pop();
        }
        let min_row = self.open.last().map_or(0, |&(_, r)| usize::from(r) + 1);
        let mut d = min_row;
        while self
            .rows
            .get(d)
            .is_some_and(|r| r.ends.last().is_some_and(|&e| e > start))
        {
            d += 1;
        }
        // Past u16::MAX rows (pathological input) spans share the last row;
        // its order by start is kept, only its disjointness is not.
        let d16 = u16::try_from(d).unwrap_or(u16::MAX);
        let d = usize::from(d16);
        if self.rows.len() <= d {
            self.rows.resize_with(d + 1, Row::default);
        }
        self.rows[d].push(i, start, end);
        self.open.push((end, d16));
        self.last_start = start;
        self.span_count += 1;
        d16
    }

    /// Places `ids` (spans of this lane, the earliest starting at `from`,
    /// before the latest start placed) by placing again every span
    /// starting at or after `from` with them: a live parent span arrives
    /// when it ends, after the spans it encloses. Costs the spans since
    /// `from`, not the lane.
    fn replace_tail(&mut self, trace: &Trace, from: u64, mut ids: Vec<u32>, depth: &mut [u16]) {
        let spans = &trace.spans;
        for row in &mut self.rows {
            let k = row.starts.partition_point(|&s| s < from);
            ids.extend_from_slice(&row.spans[k..]);
            self.span_count -= row.spans.len() - k;
            row.truncate(k);
        }
        // What is open at `from`: each row's last span that ends after it,
        // outermost first (rows nest outside in).
        self.open.clear();
        for (r, row) in self.rows.iter().enumerate() {
            if let Some(&id) = row.spans.last()
                && let Some(sp) = spans.get(id as usize)
                && sp.end_ns() > from
            {
                self.open
                    .push((sp.end_ns(), u16::try_from(r).unwrap_or(u16::MAX)));
            }
        }
        self.last_start = self
            .rows
            .iter()
            .filter_map(|r| r.starts.last().copied())
            .max()
            .unwrap_or(0);
        ids.sort_unstable_by_key(|&i| {
            let s = &spans[i as usize];
            (s.start_ns, std::cmp::Reverse(s.dur_ns))
        });
        for i in ids {
            let s = &spans[i as usize];
            depth[i as usize] = self.place(i, s.start_ns, s.end_ns());
        }
    }

    /// Re-indexes the lane from `ids` (all of its spans).
    fn rebuild(&mut self, trace: &Trace, mut ids: Vec<u32>, depth: &mut [u16]) {
        let spans = &trace.spans;
        ids.sort_unstable_by_key(|&i| {
            let s = &spans[i as usize];
            (s.start_ns, std::cmp::Reverse(s.dur_ns))
        });
        self.rows.clear();
        self.open.clear();
        self.span_count = 0;
        self.last_start = 0;
        for i in ids {
            let s = &spans[i as usize];
            depth[i as usize] = self.place(i, s.start_ns, s.end_ns());
        }
    }

    /// The deepest span of this lane containing `t` (preferring one that
    /// starts at or before `t` and ends after it).
    pub fn span_at(&self, t: u64) -> Option<u32> {
        let mut touching = None;
        for row in self.rows.iter().rev() {
            let k = row.starts.partition_point(|&s| s <= t);
            if k == 0 {
                continue;
            }
            let i = k - 1;
            let s = row.starts[i];
            // `ends` is kept non-decreasing; the span's own end is not
            // smaller than its start, so compare the running end.
            let e = row.ends[i];
            if s <= t && t < e {
                return Some(row.spans[i]);
            }
            if e == t && touching.is_none() {
                touching = Some(row.spans[i]);
            }
        }
        touching
    }
}

impl TraceView {
    /// Indexes `trace`. Spans naming a missing lane are ignored (the trace
    /// checker reports them); spans that overlap without nesting get extra
    /// rows of their lane.
    pub fn new(trace: Trace, source: impl Into<String>) -> TraceView {
        let mut v = TraceView::empty(trace, source.into());
        v.index_lanes(Vec::new());
        let n = v.trace.spans.len();
        v.depth = vec![0; n];
        let mut per_lane: Vec<Vec<u32>> = vec![Vec::new(); v.trace.lanes.len()];
        for (i, s) in v.trace.spans.iter().enumerate() {
            if let Some(l) = per_lane.get_mut(s.lane as usize) {
                l.push(i as u32);
            }
        }
        for (l, ids) in per_lane.into_iter().enumerate() {
            let pos = v.lane_pos[l];
            v.lanes[pos].rebuild(&v.trace, ids, &mut v.depth);
        }
        v.index_flows(0, None);
        v.extend_bounds(0, 0);
        v.make_levels();
        v
    }

    /// Makes the coarser levels of every row long enough to have them
    /// ([`Row::level_for`]), on every core: while the trace opens, not on
    /// the first frame that shows it whole.
    pub fn make_levels(&self) {
        let rows: Vec<&Row> = self
            .lanes
            .iter()
            .flat_map(|l| &l.rows)
            .filter(|r| r.spans.len() >= 4096)
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(rows.len());
        if threads <= 1 {
            rows.iter().for_each(|r| {
                r.levels();
            });
            return;
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(r) = rows.get(i) else { break };
                        r.levels();
                    }
                });
            }
        });
    }

    /// Indexes `trace` with every span's depth row given (`depths[i]` for
    /// span `i`), as a part of a bigger trace whose rows were placed
    /// before: a window read from an indexed file
    /// (`indexed::IndexedTrace::window`, feature `import`) keeps the rows the
    /// whole trace has, where placing only the window's spans could move
    /// them. `depths` of another length than the spans places them as
    /// [`TraceView::new`] does. Appending to such a view re-places the
    /// lanes it touches.
    pub fn from_depths(trace: Trace, depths: &[u16], source: impl Into<String>) -> TraceView {
        if depths.len() != trace.spans.len() {
            return TraceView::new(trace, source);
        }
        let mut v = TraceView::empty(trace, source.into());
        v.index_lanes(Vec::new());
        v.depth = depths.to_vec();
        let spans = &v.trace.spans;
        let mut ids: Vec<u32> = (0..spans.len() as u32).collect();
        ids.sort_unstable_by_key(|&i| {
            let s = &spans[i as usize];
            (s.start_ns, std::cmp::Reverse(s.dur_ns))
        });
        for i in ids {
            let s = &spans[i as usize];
            let Some(&pos) = v.lane_pos.get(s.lane as usize) else {
                continue;
            };
            let li = &mut v.lanes[pos];
            let d = usize::from(depths[i as usize]);
            if li.rows.len() <= d {
                li.rows.resize_with(d + 1, Row::default);
            }
            li.rows[d].push(i, s.start_ns, s.end_ns());
            li.span_count += 1;
            // Nothing is open for appending: a later span re-places the lane.
            li.last_start = u64::MAX;
        }
        v.index_flows(0, None);
        v.extend_bounds(0, 0);
        v
    }

    fn empty(trace: Trace, source: String) -> TraceView {
        TraceView {
            trace,
            lanes: Vec::new(),
            groups: Vec::new(),
            lane_pos: Vec::new(),
            depth: Vec::new(),
            flows_by_time: Vec::new(),
            flow_times: Vec::new(),
            max_flow_len: 0,
            flow_spans: Vec::new(),
            span_flows: Vec::new(),
            unbound_flows: Default::default(),
            bounds: (0, 1_000),
            extent: (u64::MAX, 0),
            source,
        }
    }

    /// Orders the lanes (keeping the indexes in `old`, by trace lane) and
    /// builds the groups.
    fn index_lanes(&mut self, old: Vec<LaneIndex>) {
        let trace = &self.trace;
        let n = trace.lanes.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|&a, &b| order_key(trace, a).cmp(&order_key(trace, b)));
        let mut by_lane: Vec<Option<LaneIndex>> = (0..n).map(|_| None).collect();
        for li in old {
            let l = li.lane as usize;
            if l < n {
                by_lane[l] = Some(li);
            }
        }
        self.lane_pos = vec![usize::MAX; n];
        self.lanes = Vec::with_capacity(n);
        self.groups.clear();
        for (pos, &l) in order.iter().enumerate() {
            self.lane_pos[l as usize] = pos;
            let li = by_lane[l as usize]
                .take()
                .unwrap_or_else(|| LaneIndex::new(trace, l));
            self.lanes.push(li);
            let (label, device) = group_of(trace, l);
            match self.groups.last_mut() {
                Some(g) if g.label == label && g.device == device => g.lanes.end = pos + 1,
                _ => self.groups.push(Group {
                    label,
                    device,
                    lanes: pos..pos + 1,
                }),
            }
        }
    }

    /// Indexes flows `from..`: their order by time and the spans they
    /// bind; ends bound to nothing before are retried when spans added
    /// since (`added`: their earliest start and latest end) cover their
    /// time. Costs the new flows and the retried ends, not every flow.
    fn index_flows(&mut self, from: usize, added: Option<(u64, u64)>) {
        let first = |f: &crate::Flow| f.from.ts_ns.min(f.to.ts_ns);
        let flows = &self.trace.flows;
        let bind = |e: &crate::FlowEnd| {
            self.lane_pos
                .get(e.lane as usize)
                .and_then(|&p| self.lanes.get(p))
                .and_then(|l| l.span_at(e.ts_ns))
        };
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        let mut bound = Vec::new();
        if let Some((lo, hi)) = added {
            for &(ts, i, end) in self
                .unbound_flows
                .range((lo, 0, 0)..=(hi, u32::MAX, u8::MAX))
            {
                let f = &flows[i as usize];
                let span = bind(if end == 0 { &f.from } else { &f.to });
                if let Some(s) = span {
                    bound.push((ts, i, end, s));
                }
            }
        }
        for (ts, i, end, s) in bound {
            self.unbound_flows.remove(&(ts, i, end));
            let ends = &mut self.flow_spans[i as usize];
            if end == 0 {
                ends.0 = Some(s);
            } else {
                ends.1 = Some(s);
            }
            pairs.push((s, i));
        }
        let old = self.flows_by_time.len();
        for (i, f) in flows.iter().enumerate().skip(from) {
            let i = i as u32;
            self.max_flow_len = self.max_flow_len.max(f.from.ts_ns.abs_diff(f.to.ts_ns));
            let ends = (bind(&f.from), bind(&f.to));
            for s in [ends.0, ends.1].into_iter().flatten() {
                pairs.push((s, i));
            }
            if ends.0.is_none() {
                self.unbound_flows.insert((f.from.ts_ns, i, 0));
            }
            if ends.1.is_none() {
                self.unbound_flows.insert((f.to.ts_ns, i, 1));
            }
            self.flow_spans.push(ends);
            self.flows_by_time.push(i);
        }
        // The new flows in time order; all of them after the earlier ones
        // (what a live session sends) is the common case, else the two
        // sorted runs are merged.
        self.flows_by_time[old..].sort_by_key(|&i| first(&flows[i as usize]));
        let in_order = match (self.flow_times.last(), self.flows_by_time.get(old)) {
            (Some(&last), Some(&i)) => last <= first(&flows[i as usize]),
            _ => true,
        };
        if in_order {
            let new = self.flows_by_time[old..]
                .iter()
                .map(|&i| first(&flows[i as usize]));
            self.flow_times.extend(new);
        } else {
            self.flows_by_time
                .sort_by_key(|&i| first(&flows[i as usize]));
            self.flow_times = self
                .flows_by_time
                .iter()
                .map(|&i| first(&flows[i as usize]))
                .collect();
        }
        pairs.sort_unstable();
        let after = match (self.span_flows.last(), pairs.first()) {
            (Some(last), Some(new)) => last <= new,
            _ => true,
        };
        self.span_flows.extend(pairs);
        if !after {
            // New flows bound to earlier spans: two sorted runs, merged.
            self.span_flows.sort();
        }
    }

    fn extend_bounds(&mut self, spans: usize, instants: usize) {
        let (mut lo, mut hi) = self.extent;
        for s in &self.trace.spans[spans..] {
            lo = lo.min(s.start_ns);
            hi = hi.max(s.end_ns());
        }
        for i in &self.trace.instants[instants..] {
            lo = lo.min(i.ts_ns);
            hi = hi.max(i.ts_ns);
        }
        self.extent = (lo, hi);
        // Counters' points and memory events are in time order; a live
        // merge may extend any of them.
        for c in &self.trace.counters {
            if let (Some(first), Some(last)) = (c.points.first(), c.points.last()) {
                lo = lo.min(first.0);
                hi = hi.max(last.0);
            }
        }
        if let (Some(first), Some(last)) = (self.trace.memory.first(), self.trace.memory.last()) {
            lo = lo.min(first.ts_ns);
            hi = hi.max(last.ts_ns);
        }
        if lo > hi {
            (lo, hi) = (0, 1_000);
        }
        self.bounds = (lo, hi.max(lo + 1));
    }

    /// Whether the trace has anything with a time (a span, an instant, a
    /// counter point, a memory event): whether [`TraceView::bounds`] is
    /// its extent rather than the empty trace's default.
    pub fn holds_times(&self) -> bool {
        let t = &self.trace;
        !t.spans.is_empty()
            || !t.instants.is_empty()
            || !t.memory.is_empty()
            || t.counters.iter().any(|c| !c.points.is_empty())
    }

    /// Appends a live fragment: merges it into the trace and indexes only
    /// what it added (a lane is re-indexed only when a new span starts
    /// before the latest one already placed on it). What merged before an
    /// error stays shown.
    pub fn append(&mut self, fragment: Trace) -> crate::Result<()> {
        let (spans, instants, flows, lanes) = (
            self.trace.spans.len(),
            self.trace.instants.len(),
            self.trace.flows.len(),
            self.trace.lanes.len(),
        );
        let merged = self.trace.merge(fragment);
        if self.trace.lanes.len() != lanes {
            let old = std::mem::take(&mut self.lanes);
            self.index_lanes(old);
        }
        self.depth.resize(self.trace.spans.len(), 0);
        let mut new: Vec<u32> = (spans as u32..self.trace.spans.len() as u32).collect();
        {
            let all = &self.trace.spans;
            new.sort_unstable_by_key(|&i| {
                let s = &all[i as usize];
                (s.start_ns, std::cmp::Reverse(s.dur_ns))
            });
        }
        // Per lane, the new spans that start before the latest one placed
        // there (and the earliest such start): that lane's tail is placed
        // again from there.
        let mut late: Vec<Option<(u64, Vec<u32>)>> = vec![None; self.lanes.len()];
        for &i in &new {
            let s = &self.trace.spans[i as usize];
            let Some(&pos) = self.lane_pos.get(s.lane as usize) else {
                continue;
            };
            let li = &mut self.lanes[pos];
            if let Some((_, ids)) = &mut late[pos] {
                ids.push(i);
                continue;
            }
            if li.span_count > 0 && s.start_ns < li.last_start {
                late[pos] = Some((s.start_ns, vec![i]));
                continue;
            }
            self.depth[i as usize] = li.place(i, s.start_ns, s.end_ns());
        }
        for (pos, l) in late.into_iter().enumerate() {
            if let Some((from, ids)) = l {
                let lane = &mut self.lanes[pos];
                if lane.last_start == u64::MAX {
                    // Placed from given depths (a window): nothing is open
                    // for appending, so the whole lane is placed again.
                    let l = lane.lane;
                    let all: Vec<u32> = (0..self.trace.spans.len() as u32)
                        .filter(|&i| self.trace.spans[i as usize].lane == l)
                        .collect();
                    lane.rebuild(&self.trace, all, &mut self.depth);
                } else {
                    lane.replace_tail(&self.trace, from, ids, &mut self.depth);
                }
            }
        }
        for lane in &mut self.lanes {
            for row in &mut lane.rows {
                row.extend_levels();
            }
        }
        let added = self.trace.spans[spans..]
            .iter()
            .fold(None, |r: Option<(u64, u64)>, s| {
                let (lo, hi) = r.unwrap_or((u64::MAX, 0));
                Some((lo.min(s.start_ns), hi.max(s.end_ns())))
            });
        self.index_flows(flows, added);
        self.extend_bounds(spans, instants);
        merged
    }

    /// Removes the trace's first `k` spans (the oldest a live session
    /// received), then the flows, instants, counter points and memory
    /// events wholly before the earliest start left, and returns them as
    /// a trace with this one's devices and lanes (for writing to disk).
    /// Span ids shift down by `k`; a flow end bound to a removed span is
    /// bound to none. Costs the spans kept, not the trace ever received.
    pub fn evict_front(&mut self, k: usize) -> Trace {
        let k = k.min(self.trace.spans.len());
        let t = &self.trace;
        let mut out = Trace {
            calibrations: t.calibrations.clone(),
            origin_ns: t.origin_ns,
            counters: t
                .counters
                .iter()
                .map(|c| crate::Counter {
                    device: c.device,
                    name: c.name.clone(),
                    points: Vec::new(),
                })
                .collect(),
            ..t.tables_only()
        };
        out.spans = self.trace.spans.drain(..k).collect();
        self.depth.drain(..k);
        let cut = self
            .trace
            .spans
            .iter()
            .map(|s| s.start_ns)
            .min()
            .unwrap_or(u64::MAX);
        let k32 = k as u32;
        for lane in &mut self.lanes {
            for row in &mut lane.rows {
                row.drop_below(k32, &self.trace.spans);
            }
            lane.span_count = lane.rows.iter().map(|r| r.spans.len()).sum();
        }
        // Flows: those ending before the cut leave; the rest are numbered
        // again.
        let flows = std::mem::take(&mut self.trace.flows);
        let mut renumber = vec![u32::MAX; flows.len()];
        for (i, f) in flows.into_iter().enumerate() {
            if f.from.ts_ns.max(f.to.ts_ns) < cut {
                out.flows.push(f);
            } else {
                renumber[i] = self.trace.flows.len() as u32;
                self.trace.flows.push(f);
            }
        }
        let kept = |i: u32| renumber.get(i as usize).copied().filter(|&n| n != u32::MAX);
        let span = |s: Option<u32>| s.and_then(|s| s.checked_sub(k32));
        let (by_time, times): (Vec<u32>, Vec<u64>) = self
            .flows_by_time
            .iter()
            .zip(&self.flow_times)
            .filter_map(|(&i, &t)| Some((kept(i)?, t)))
            .unzip();
        self.flows_by_time = by_time;
        self.flow_times = times;
        let mut flow_spans = vec![(None, None); self.trace.flows.len()];
        for (i, &(a, b)) in self.flow_spans.iter().enumerate() {
            if let Some(n) = kept(i as u32) {
                flow_spans[n as usize] = (span(a), span(b));
            }
        }
        self.flow_spans = flow_spans;
        self.span_flows = self
            .span_flows
            .iter()
            .filter_map(|&(s, f)| Some((s.checked_sub(k32)?, kept(f)?)))
            .collect();
        self.unbound_flows = self
            .unbound_flows
            .iter()
            .filter_map(|&(t, f, e)| Some((t, kept(f)?, e)))
            .collect();
        // Instants, counter points and memory events before the cut; a
        // counter keeps its last point before it (the value it starts at).
        let (old, new): (Vec<_>, Vec<_>) = std::mem::take(&mut self.trace.instants)
            .into_iter()
            .partition(|i| i.ts_ns < cut);
        out.instants = old;
        self.trace.instants = new;
        for (c, o) in self.trace.counters.iter_mut().zip(&mut out.counters) {
            let n = c.points.partition_point(|p| p.0 < cut);
            if n > 1 {
                o.points = c.points.drain(..n - 1).collect();
                o.points.push(c.points[0]);
            }
        }
        let n = self.trace.memory.partition_point(|m| m.ts_ns < cut);
        out.memory = self.trace.memory.drain(..n).collect();
        self.extent = (u64::MAX, 0);
        self.extend_bounds(0, 0);
        out
    }

    /// Makes room for `additional` more spans, in the trace and in each
    /// row already holding many, so a live view growing by that much never
    /// copies a big array within a frame (the room is address space until
    /// used).
    pub fn reserve(&mut self, additional: usize) {
        self.trace.spans.reserve(additional);
        self.depth.reserve(additional);
        for lane in &mut self.lanes {
            for row in &mut lane.rows {
                if row.spans.len() >= 4096 {
                    row.spans.reserve(additional);
                    row.starts.reserve(additional);
                    row.ends.reserve(additional);
                }
            }
        }
    }

    /// The display lane of trace lane `lane`.
    pub fn lane_index(&self, lane: u32) -> Option<&LaneIndex> {
        self.lanes.get(*self.lane_pos.get(lane as usize)?)
    }

    /// The flows with an end bound to span `span`.
    pub fn flows_of(&self, span: u32) -> impl Iterator<Item = u32> + '_ {
        let a = self.span_flows.partition_point(|&(s, _)| s < span);
        self.span_flows[a..]
            .iter()
            .take_while(move |&&(s, _)| s == span)
            .map(|&(_, f)| f)
    }

    /// The flow chain of `span`: every span reachable from it through flows
    /// in either direction (a host launch, its kernel, the event recorded
    /// after it and the wait on another stream that consumed it, ...), and
    /// the flows walked, both sorted; at most `limit` spans.
    pub fn flow_chain(&self, span: u32, limit: usize) -> (Vec<u32>, Vec<u32>) {
        let mut spans = vec![span];
        let mut flows = Vec::new();
        let mut seen_spans = std::collections::HashSet::from([span]);
        let mut seen_flows = std::collections::HashSet::new();
        let mut next = 0;
        while next < spans.len() && spans.len() < limit.max(1) {
            let s = spans[next];
            next += 1;
            for f in self.flows_of(s) {
                if !seen_flows.insert(f) {
                    continue;
                }
                flows.push(f);
                let (a, b) = self.flow_spans[f as usize];
                for o in [a, b].into_iter().flatten() {
                    if seen_spans.insert(o) {
                        spans.push(o);
                    }
                }
            }
        }
        spans.sort_unstable();
        flows.sort_unstable();
        (spans, flows)
    }

    /// Spans whose name contains `query` (ignoring ASCII case), sorted by
    /// start time; empty for an empty query.
    pub fn search(&self, query: &str) -> Vec<u32> {
        self.search_from(query, 0)
    }

    /// [`Self::search`] over the spans from index `from` on (those a live
    /// fragment added).
    pub fn search_from(&self, query: &str, from: usize) -> Vec<u32> {
        let q = query.trim().to_ascii_lowercase();
        if q.is_empty() {
            return Vec::new();
        }
        let spans = self.trace.spans.get(from..).unwrap_or(&[]);
        let mut out: Vec<u32> = spans
            .iter()
            .enumerate()
            .filter(|(_, s)| contains_ignore_case(&s.name, &q))
            .map(|(i, _)| (from + i) as u32)
            .collect();
        out.sort_by_key(|&i| (self.trace.spans[i as usize].start_ns, i));
        out
    }
}

/// Whether `hay` contains `needle_lower` (already ASCII lower case),
/// ignoring ASCII case, without allocating.
pub(crate) fn contains_ignore_case(hay: &str, needle_lower: &str) -> bool {
    let (h, n) = (hay.as_bytes(), needle_lower.as_bytes());
    n.len() <= h.len()
        && h.windows(n.len())
            .any(|w| w.iter().zip(n).all(|(a, b)| a.to_ascii_lowercase() == *b))
}

/// Formats a duration or time in ns with a fitting unit (ns, us, ms, s).
pub fn format_ns(ns: f64) -> String {
    let a = ns.abs();
    if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.3} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

/// A synthetic trace for benchmarks and tests: `spans` spans spread over
/// 4 device streams and 2 host threads, kernels nested under annotations on
/// the host, with a launch flow every 16 spans.
pub fn synthetic_trace(spans: usize) -> Trace {
    use crate::{Flow, FlowEnd, FlowKind, Lane, Span, TraceDevice};
    let mut t = Trace {
        version: crate::TRACE_VERSION,
        devices: vec![TraceDevice {
            device: "vulkan:0".to_owned(),
            name: "synthetic".to_owned(),
            properties: Vec::new(),
        }],
        ..Trace::default()
    };
    for s in 0..4 {
        t.lanes.push(Lane {
            kind: LaneKind::Stream {
                device: 0,
                stream: s,
                thread: 0,
            },
            name: format!("stream {s}"),
            group: String::new(),
        });
    }
    for h in 0..2 {
        t.lanes.push(Lane {
            kind: LaneKind::Host { thread: h },
            name: format!("thread {h}"),
            group: String::new(),
        });
    }
    const NAMES: [&str; 4] = ["vector_add", "saxpy", "spin", "copy host->device"];
    const KINDS: [SpanKind; 6] = [
        SpanKind::Kernel,
        SpanKind::Kernel,
        SpanKind::Kernel,
        SpanKind::Copy,
        SpanKind::EventRecord,
        SpanKind::Wait,
    ];
    let lanes = t.lanes.len();
    t.spans.reserve(spans);
    let mut clock = vec![0u64; lanes];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..spans {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lane = i % lanes;
        let dur = 200 + x % 5_000;
        let gap = 50 + (x >> 20) % 1_000;
        let start = clock[lane] + gap;
        clock[lane] = start + dur;
        let kind = if lane >= 4 {
            SpanKind::Annotation
        } else {
            KINDS[(x >> 40) as usize % KINDS.len()]
        };
        t.spans.push(Span {
            lane: lane as u32,
            name: NAMES[(x >> 33) as usize % NAMES.len()].into(),
            kind,
            start_ns: start,
            dur_ns: dur,
            op: i as u64 + 1,
            args: Vec::new(),
        });
        if i % 16 == 0 && lane < 4 {
            t.flows.push(Flow {
                id: i as u64,
                kind: FlowKind::Launch,
                from: FlowEnd {
                    lane: 4,
                    ts_ns: start.saturating_sub(gap),
                },
                to: FlowEnd {
                    lane: lane as u32,
                    ts_ns: start + dur / 2,
                },
            });
        }
    }
    t
}

/// Nested host spans as a recorder sends them, each when it ends, so a
/// parent after the spans it holds: `steps` steps of `period_ns` from
/// `t0`, each holding `ops` ops of two launches each (`3 * ops + 1` spans
/// a step), on one host thread. A live view's hardest order to place,
/// for tests and benchmarks.
pub fn nested_trace(steps: u64, ops: u64, t0: u64, period_ns: u64) -> Trace {
    let mut t = Trace {
        version: crate::TRACE_VERSION,
        lanes: vec![crate::Lane {
            kind: LaneKind::Host { thread: 1 },
            name: "main".to_owned(),
            group: String::new(),
        }],
        ..Trace::default()
    };
    let span = |name: &'static str, start: u64, dur: u64| crate::Span {
        lane: 0,
        name: name.into(),
        kind: SpanKind::Annotation,
        start_ns: start,
        dur_ns: dur,
        op: 0,
        args: Vec::new(),
    };
    let slot = period_ns.saturating_sub(200) / ops.max(1);
    for i in 0..steps {
        let base = t0 + i * period_ns;
        for j in 0..ops {
            let op = base + 100 + j * slot;
            t.spans.push(span("launch", op + slot / 30, slot * 3 / 10));
            t.spans
                .push(span("launch", op + slot * 4 / 10, slot * 3 / 10));
            t.spans.push(span("op", op, slot * 9 / 10));
        }
        t.spans
            .push(span("step", base, period_ns.saturating_sub(100)));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sorted_and_disjoint() {
        let v = TraceView::new(synthetic_trace(10_000), "synthetic");
        let mut total = 0;
        for l in &v.lanes {
            for r in &l.rows {
                total += r.spans.len();
                assert!(r.starts.windows(2).all(|w| w[0] <= w[1]));
                assert!(r.ends.windows(2).all(|w| w[0] <= w[1]));
            }
        }
        assert_eq!(total, 10_000);
        let r = &v.lanes[0].rows[0];
        let (a, b) = (r.starts[10], r.ends[20]);
        assert_eq!(r.visible(a, b), 10..21);
    }

    #[test]
    fn levels_merge_only_runs_of_short_spans() {
        let mut v = TraceView::new(synthetic_trace(200_000), "synthetic");
        let spans = &v.trace.spans;
        let row = &v.lanes[0].rows[0];
        assert!(row.spans.len() > 4096);
        let (levels, covered) = row.levels();
        assert_eq!(covered, row.spans.len());
        assert!(!levels.is_empty());
        let mut last = row.spans.len();
        for l in levels {
            assert!(l.starts.len() * 4 <= last * 3, "each kept level is smaller");
            last = l.starts.len();
        }
        assert_levels_cover(row, spans);
        // The level drawn: coarse enough, fine enough.
        let ns = 1e6;
        let (l, _) = row.level_for(ns).expect("a level at 1 ms a pixel");
        assert!(l.res as f64 <= ns);
        assert!(
            levels.iter().all(|m| m.res <= l.res || m.res as f64 > ns),
            "the coarsest kept"
        );
        assert!(
            row.level_for(100.0).is_none(),
            "spans themselves below 256 ns"
        );
        // A row that grows keeps its levels for the spans they cover.
        let extra = crate::Trace {
            spans: vec![crate::Span {
                start_ns: v.bounds.1 + 1_000,
                dur_ns: 10,
                ..v.trace.spans[v.lanes[0].rows[0].spans[0] as usize].clone()
            }],
            ..v.trace.tables_only()
        };
        v.append(extra).expect("append");
        let row = &v.lanes[0].rows[0];
        let (levels, covered) = row.levels();
        let total: u32 = levels[0].count.iter().sum();
        assert_eq!(total as usize, covered);
        assert_eq!(covered + 1, row.spans.len());
        // Grown by more than an eighth, the levels are made again.
        let last = v.bounds.1;
        let template = v.trace.spans[v.lanes[0].rows[0].spans[0] as usize].clone();
        let n = covered / 8 + 2;
        let more = crate::Trace {
            spans: (0..n as u64)
                .map(|k| crate::Span {
                    start_ns: last + 1_000 + k * 100,
                    dur_ns: 10,
                    ..template.clone()
                })
                .collect(),
            ..v.trace.tables_only()
        };
        v.append(more).expect("append");
        let row = &v.lanes[0].rows[0];
        let (_, covered) = row.levels();
        assert_eq!(covered, row.spans.len(), "extended over the new spans");
        assert_levels_cover(row, &v.trace.spans);
    }

    /// Each level's items cover the row's first `covered` spans in order,
    /// each once, with their starts and ends, and merge only spans and
    /// gaps shorter than the level's resolution.
    fn assert_levels_cover(row: &Row, spans: &[crate::Span]) {
        let (levels, covered) = row.levels();
        for l in levels {
            let mut next = 0usize;
            for k in 0..l.starts.len() {
                let (f, c) = (l.first[k] as usize, l.count[k] as usize);
                assert_eq!(f, next);
                next += c;
                assert_eq!(l.starts[k], row.starts[f]);
                assert_eq!(l.ends[k], row.ends[f + c - 1]);
                if c > 1 {
                    for i in f..f + c {
                        assert!(spans[row.spans[i] as usize].dur_ns < l.res);
                        if i > f {
                            assert!(row.starts[i].saturating_sub(row.ends[i - 1]) < l.res);
                        }
                    }
                }
            }
            assert_eq!(next, covered);
        }
    }

    #[test]
    fn a_live_rows_levels_grow_with_it_and_survive_late_parents() {
        let whole = nested_trace(6_000, 3, 0, 10_000);
        let mut v = TraceView::new(whole.tables_only(), "live");
        let mut at = 0;
        let mut checked = 0;
        while at < whole.spans.len() {
            let mut f = whole.tables_only();
            f.spans = whole.spans[at..(at + 997).min(whole.spans.len())].to_vec();
            at += 997;
            v.append(f).expect("merged");
            // Room made for growth changes nothing shown.
            v.reserve(500);
            for row in &v.lanes[0].rows {
                if row.spans.len() >= 4096 {
                    // Drawn zoomed out: levels made once, then extended
                    // (and cut back where a late parent re-placed spans).
                    let (_, covered) = row.levels();
                    assert!(row.spans.len() - covered <= covered / 8 + 997);
                    assert_levels_cover(row, &v.trace.spans);
                    checked += 1;
                }
            }
        }
        assert!(checked > 10);
        let at_once = TraceView::new(whole, "at once");
        assert_eq!(v.depth, at_once.depth, "placed as at once");
    }

    #[test]
    fn bounds_of_a_trace_without_times_are_told_apart() {
        let whole = nested_trace(100, 2, 5_000, 1_000);
        let mut v = TraceView::new(whole.tables_only(), "live");
        assert!(!v.holds_times());
        assert_eq!(v.bounds, (0, 1_000), "the empty trace's default");
        v.append(whole.clone()).expect("merged");
        assert!(v.holds_times());
        let first = whole.spans.iter().map(|s| s.start_ns).min();
        assert_eq!(Some(v.bounds.0), first);
    }

    fn lane(kind: LaneKind, name: &str, group: &str) -> crate::Lane {
        crate::Lane {
            kind,
            name: name.to_owned(),
            group: group.to_owned(),
        }
    }

    fn span(lane: u32, name: &str, start: u64, dur: u64) -> crate::Span {
        crate::Span {
            lane,
            name: name.into(),
            kind: SpanKind::Kernel,
            start_ns: start,
            dur_ns: dur,
            op: 0,
            args: Vec::new(),
        }
    }

    fn flow(id: u64, from: (u32, u64), to: (u32, u64)) -> crate::Flow {
        use crate::{Flow, FlowEnd, FlowKind};
        Flow {
            id,
            kind: FlowKind::Launch,
            from: FlowEnd {
                lane: from.0,
                ts_ns: from.1,
            },
            to: FlowEnd {
                lane: to.0,
                ts_ns: to.1,
            },
        }
    }

    /// cuda:0 stream 7, a host thread of process A, one of process B.
    fn small() -> Trace {
        Trace {
            devices: vec![crate::TraceDevice {
                device: "cuda:0".to_owned(),
                name: "NVIDIA A100".to_owned(),
                properties: Vec::new(),
            }],
            lanes: vec![
                lane(
                    LaneKind::Host { thread: 5 },
                    "thread 5",
                    "python3.10 (pid 42)",
                ),
                lane(
                    LaneKind::Stream {
                        device: 0,
                        stream: 7,
                        thread: 0,
                    },
                    "stream 7",
                    "",
                ),
                lane(
                    LaneKind::Host { thread: 1 },
                    "thread 1",
                    "python3.10 (pid 42)",
                ),
                lane(LaneKind::Host { thread: 9 }, "main", ""),
            ],
            ..Trace::default()
        }
    }

    #[test]
    fn overlapping_spans_get_extra_rows_and_nested_ones_go_below() {
        let mut t = small();
        // On the stream: A [0, 100) with B [10, 20) nested; C [50, 150)
        // overlaps A without nesting; D [60, 70) nests in both; E [160,
        // 170) after everything.
        for (n, s, d) in [
            ("A", 0, 100),
            ("B", 10, 10),
            ("C", 50, 100),
            ("D", 60, 10),
            ("E", 160, 10),
        ] {
            t.spans.push(span(1, n, s, d));
        }
        let v = TraceView::new(t, "test");
        let l = v.lane_index(1).expect("stream lane");
        assert_eq!(l.span_count, 5);
        // Nothing is dropped; every row is disjoint and sorted.
        let placed: usize = l.rows.iter().map(|r| r.spans.len()).sum();
        assert_eq!(placed, 5);
        for r in &l.rows {
            for w in r.spans.windows(2) {
                let (a, b) = (&v.trace.spans[w[0] as usize], &v.trace.spans[w[1] as usize]);
                assert!(
                    a.end_ns() <= b.start_ns,
                    "{} and {} overlap",
                    a.name,
                    b.name
                );
            }
        }
        // A row 0, B below A (1), C overlaps A: first free row below A is
        // 1 (B ended), D below C (2), E back on row 0.
        assert_eq!(v.depth, vec![0, 1, 1, 2, 0]);
        assert_eq!(l.span_at(65), Some(3));
        assert_eq!(l.span_at(15), Some(1));
        assert_eq!(l.span_at(120), Some(2));
        assert_eq!(l.span_at(155), None);
    }

    #[test]
    fn thread_labels_read_as_perfetto_shows_them() {
        assert_eq!(thread_label("thread 4242 (python3.10)"), "python3.10 4242");
        assert_eq!(thread_label("thread PyTorch Profiler"), "PyTorch Profiler");
        assert_eq!(thread_label("thread -1"), "thread -1");
        assert_eq!(thread_label("thread 7"), "thread 7");
        assert_eq!(thread_label("main"), "main");
        assert_eq!(thread_label("thread x (y"), "x (y");
    }

    #[test]
    fn labels_and_groups() {
        let v = TraceView::new(small(), "test");
        let labels: Vec<&str> = v.lanes.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["GPU 0 · stream 7", "main", "thread 1", "thread 5"]);
        assert_eq!(
            v.groups,
            vec![
                Group {
                    label: "GPU 0 · NVIDIA A100".to_owned(),
                    device: true,
                    lanes: 0..1
                },
                Group {
                    label: "host".to_owned(),
                    device: false,
                    lanes: 1..2
                },
                Group {
                    label: "python3.10 (pid 42)".to_owned(),
                    device: false,
                    lanes: 2..4
                },
            ]
        );
        assert_eq!(device_label("cuda:12"), "GPU 12");
        assert_eq!(device_label("vulkan:0"), "vulkan:0");
        assert_eq!(device_label("cuda:"), "cuda:");
        assert_eq!(device_label("rank 3 · cuda:1"), "rank 3 · GPU 1");
        assert_eq!(device_label("a.json · vulkan:0"), "a.json · vulkan:0");
    }

    /// A stream whose work ran inline on several threads (the CPU's
    /// default stream): its lanes per thread sit right after the stream's
    /// own, in thread order, under the device, labelled with the thread.
    #[test]
    fn a_streams_thread_lanes_follow_it_under_its_device() {
        let stream = |stream: i64, thread: u64, name: &str| {
            lane(
                LaneKind::Stream {
                    device: 0,
                    stream,
                    thread,
                },
                name,
                "",
            )
        };
        let t = Trace {
            devices: vec![crate::TraceDevice {
                device: "cpu:0".to_owned(),
                name: "AMD EPYC".to_owned(),
                properties: Vec::new(),
            }],
            lanes: vec![
                stream(0, 4, "stream 0 · worker"),
                stream(1, 0, "stream 1"),
                stream(0, 2, "stream 0 · main"),
                stream(0, 0, "stream 0"),
            ],
            ..Trace::default()
        };
        let v = TraceView::new(t, "test");
        let labels: Vec<&str> = v.lanes.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "cpu:0 · stream 0",
                "cpu:0 · stream 0 · main",
                "cpu:0 · stream 0 · worker",
                "cpu:0 · stream 1"
            ]
        );
        assert_eq!(v.groups.len(), 1, "one device group");
        assert!(v.groups[0].device);
    }

    /// Two ranks' files opened together: each file's devices and processes
    /// are groups of their own, labelled with the rank, GPUs named as
    /// PyTorch users know them.
    #[test]
    fn groups_show_per_rank() {
        let dir = std::env::temp_dir().join(format!("keel-profiler-ranks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import");
        let text = std::fs::read_to_string(data.join("kineto.json")).expect("fixture");
        let rank1 = dir.join("rank1.json");
        std::fs::write(&rank1, text.replace("\"rank\": 0", "\"rank\": 1")).expect("write");
        let trace = crate::load_traces(&[data.join("kineto.json.gz"), rank1]).expect("two ranks");
        let v = TraceView::new(trace, "ranks");
        let groups: Vec<(&str, bool, usize)> = v
            .groups
            .iter()
            .map(|g| (g.label.as_str(), g.device, g.lanes.len()))
            .collect();
        assert_eq!(
            groups,
            [
                ("rank 0 · GPU 0 · NVIDIA A100-SXM4-40GB", true, 2),
                ("rank 1 · GPU 0 · NVIDIA A100-SXM4-40GB", true, 2),
                ("rank 0 · Spans", false, 1),
                ("rank 0 · Traces", false, 1),
                ("rank 0 · python3.10 (pid 4242)", false, 3),
                ("rank 1 · Spans", false, 1),
                ("rank 1 · Traces", false, 1),
                ("rank 1 · python3.10 (pid 4242)", false, 3),
            ]
        );
        assert_eq!(v.lanes.len(), 14);
        assert_eq!(v.lanes[0].label, "rank 0 · GPU 0 · stream 7");
        assert_eq!(v.lanes[2].label, "rank 1 · GPU 0 · stream 7");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A host launch -> kernel, the kernel's event record -> a wait on
    /// another stream, and an unrelated launch.
    fn chained() -> Trace {
        let mut t = small();
        t.lanes.push(lane(
            LaneKind::Stream {
                device: 0,
                stream: 8,
                thread: 0,
            },
            "stream 8",
            "",
        ));
        t.spans.push(span(0, "launch", 0, 10)); // 0
        t.spans.push(span(1, "kernel", 20, 50)); // 1
        t.spans.push(span(1, "record", 70, 5)); // 2
        t.spans.push(span(4, "wait", 80, 10)); // 3
        t.spans.push(span(0, "launch", 100, 10)); // 4
        t.spans.push(span(1, "other", 120, 10)); // 5
        t.flows.push(flow(1, (0, 2), (1, 20)));
        t.flows.push(flow(2, (1, 72), (4, 85)));
        t.flows.push(flow(3, (0, 100), (1, 120)));
        t
    }

    #[test]
    fn flow_chains_follow_both_directions() {
        let v = TraceView::new(chained(), "test");
        assert_eq!(v.flow_spans[0], (Some(0), Some(1)));
        assert_eq!(v.flow_spans[1], (Some(2), Some(3)));
        let (spans, flows) = v.flow_chain(0, 100);
        assert_eq!((spans, flows), (vec![0, 1], vec![0]));
        // From the wait back to the record only: the kernel and the record
        // are different spans.
        let (spans, flows) = v.flow_chain(3, 100);
        assert_eq!((spans, flows), (vec![2, 3], vec![1]));
        let (spans, _) = v.flow_chain(5, 100);
        assert_eq!(spans, vec![4, 5]);
    }

    #[test]
    fn transitive_chain() {
        let mut t = chained();
        // The kernel itself records: a flow from inside the kernel.
        t.flows.push(flow(4, (1, 60), (4, 85)));
        let v = TraceView::new(t, "test");
        let (spans, flows) = v.flow_chain(0, 100);
        assert_eq!(
            spans,
            vec![0, 1, 2, 3],
            "launch -> kernel -> wait <- record"
        );
        assert_eq!(flows, vec![0, 1, 3]);
        let (spans, flows) = v.flow_chain(0, 2);
        assert_eq!(
            (spans, flows),
            (vec![0, 1], vec![0]),
            "the limit stops the walk"
        );
    }

    #[test]
    fn search_is_case_insensitive_and_by_time() {
        let v = TraceView::new(chained(), "test");
        assert_eq!(v.search("LAUNCH"), vec![0, 4]);
        assert_eq!(v.search("er"), vec![1, 5], "kernel, other");
        assert!(v.search("  ").is_empty());
        assert!(v.search("nothing").is_empty());
    }

    #[test]
    fn appending_equals_indexing_at_once() {
        let whole = synthetic_trace(4_000);
        let at_once = TraceView::new(whole.clone(), "at once");
        let mut v = TraceView::new(Trace::default(), "live");
        // Fragments in time order, each with its own tables, as a live
        // server sends them; the third one goes back in time.
        let mut chunks: Vec<Trace> = Vec::new();
        for k in 0..4 {
            let mut f = whole.clone();
            f.spans = whole.spans[k * 1_000..(k + 1) * 1_000].to_vec();
            f.flows = whole
                .flows
                .iter()
                .filter(|fl| {
                    let i = fl.id as usize;
                    i >= k * 1_000 && i < (k + 1) * 1_000
                })
                .cloned()
                .collect();
            chunks.push(f);
        }
        chunks.swap(2, 3);
        for c in chunks {
            v.append(c).expect("merged");
        }
        assert_eq!(v.trace.spans.len(), 4_000);
        assert_eq!(v.bounds, at_once.bounds);
        assert_eq!(v.flow_times, at_once.flow_times);
        let labels = |v: &TraceView| v.lanes.iter().map(|l| l.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&v), labels(&at_once));
        for (a, b) in v.lanes.iter().zip(&at_once.lanes) {
            assert_eq!(a.span_count, b.span_count);
            assert_eq!(a.rows.len(), b.rows.len());
            for (ra, rb) in a.rows.iter().zip(&b.rows) {
                let names = |r: &Row, t: &Trace| -> Vec<(u64, u64)> {
                    r.spans
                        .iter()
                        .map(|&i| (t.spans[i as usize].start_ns, t.spans[i as usize].dur_ns))
                        .collect()
                };
                assert_eq!(names(ra, &v.trace), names(rb, &at_once.trace));
            }
        }
        // Every flow binds as when indexed at once.
        let bound = |v: &TraceView| {
            v.flow_spans
                .iter()
                .filter(|f| f.0.is_some() && f.1.is_some())
                .count()
        };
        assert_eq!(bound(&v), bound(&at_once));
        // Flows that come before their spans bind when the spans come,
        // whichever fragment brings them.
        let mut flows_first = whole.tables_only();
        flows_first.flows = whole.flows.clone();
        let mut v = TraceView::new(flows_first, "live");
        assert_eq!(bound(&v), 0);
        assert!(bound(&at_once) > 100);
        for k in 0..4 {
            let mut f = whole.tables_only();
            f.spans = whole.spans[k * 1_000..(k + 1) * 1_000].to_vec();
            v.append(f).expect("merged");
        }
        assert_eq!(v.flow_spans, at_once.flow_spans);
        assert_eq!(v.span_flows, at_once.span_flows);
        assert_eq!(v.flow_times, at_once.flow_times);
        assert_eq!(
            v.unbound_flows.len(),
            at_once.unbound_flows.len(),
            "what stays unbound"
        );
    }

    #[test]
    fn parents_arriving_after_their_children_nest_as_at_once() {
        let whole = nested_trace(200, 3, 0, 10_000);
        let at_once = TraceView::new(whole.clone(), "at once");
        let mut v = TraceView::new(whole.tables_only(), "live");
        let mut x = 7u64;
        let mut at = 0;
        while at < whole.spans.len() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = 1 + (x >> 33) as usize % 9;
            let mut f = whole.tables_only();
            f.spans = whole.spans[at..(at + n).min(whole.spans.len())].to_vec();
            at += n;
            v.append(f).expect("merged");
        }
        assert_eq!(v.depth, at_once.depth, "every span in its row");
        assert_eq!(at_once.lanes[0].rows.len(), 3);
        for (a, b) in v.lanes[0].rows.iter().zip(&at_once.lanes[0].rows) {
            assert_eq!(a.spans, b.spans);
            assert_eq!(a.ends, b.ends);
        }
    }

    #[test]
    fn evicting_the_oldest_spans_keeps_the_rest_indexed() {
        let mut whole = synthetic_trace(4_000);
        whole.instants = (0..40)
            .map(|i| crate::InstantEvent {
                lane: 4,
                name: format!("mark {i}"),
                ts_ns: i * 50_000,
                args: Vec::new(),
            })
            .collect();
        whole.counters = vec![crate::Counter {
            device: 0,
            name: "allocated (bytes)".to_owned(),
            points: (0..100).map(|i| (i * 20_000, i as i64)).collect(),
        }];
        let mut v = TraceView::new(whole.clone(), "live");
        let k = 1_500;
        let out = v.evict_front(k);
        assert_eq!(out.spans, whole.spans[..k]);
        assert_eq!(v.trace.spans, whole.spans[k..]);
        assert_eq!(out.lanes, whole.lanes, "the evicted part keeps the tables");
        let cut = v
            .trace
            .spans
            .iter()
            .map(|s| s.start_ns)
            .min()
            .expect("spans");
        // Each kept span in exactly one row, rows sorted, ends the running
        // maximum of the kept spans' ends.
        let mut seen = vec![0u8; v.trace.spans.len()];
        for lane in &v.lanes {
            for row in &lane.rows {
                let mut end = 0;
                for (i, &id) in row.spans.iter().enumerate() {
                    let s = &v.trace.spans[id as usize];
                    seen[id as usize] += 1;
                    assert_eq!(row.starts[i], s.start_ns);
                    end = end.max(s.end_ns());
                    assert_eq!(row.ends[i], end);
                    assert_eq!(usize::from(v.depth[id as usize]), lane_row(lane, row));
                }
                assert!(row.starts.is_sorted());
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        // Flows: none lost, those left bound to the spans holding their
        // ends, in time order.
        assert_eq!(out.flows.len() + v.trace.flows.len(), whole.flows.len());
        assert!(out.flows.iter().all(|f| f.from.ts_ns.max(f.to.ts_ns) < cut));
        assert!(!out.flows.is_empty() && !v.trace.flows.is_empty());
        for (i, f) in v.trace.flows.iter().enumerate() {
            for (end, bound) in [(&f.from, v.flow_spans[i].0), (&f.to, v.flow_spans[i].1)] {
                if let Some(s) = bound {
                    let s = &v.trace.spans[s as usize];
                    assert!(
                        s.lane == end.lane && s.start_ns <= end.ts_ns && end.ts_ns <= s.end_ns()
                    );
                }
            }
        }
        let fresh = TraceView::new(v.trace.clone(), "fresh");
        assert_eq!(v.flow_times, fresh.flow_times);
        assert_eq!(v.search("saxpy"), fresh.search("saxpy"));
        // Instants and counter points before the cut left; a counter keeps
        // the point it starts from.
        assert_eq!(out.instants.len() + v.trace.instants.len(), 40);
        assert!(v.trace.instants.iter().all(|i| i.ts_ns >= cut));
        let kept = &v.trace.counters[0].points;
        assert!(kept[0].0 < cut && kept[1].0 >= cut);
        assert_eq!(out.counters[0].points.last(), kept.first());
        assert_eq!(v.bounds.0, cut.min(kept[0].0));
        // The view goes on taking fragments.
        let mut more = whole.tables_only();
        more.spans = synthetic_trace(100).spans;
        for s in &mut more.spans {
            s.start_ns += whole.spans.iter().map(|s| s.end_ns()).max().unwrap_or(0);
        }
        v.append(more).expect("appended");
        assert_eq!(v.trace.spans.len(), 4_000 - k + 100);
        // Evicting everything leaves an empty, usable view.
        let rest = v.evict_front(usize::MAX);
        assert_eq!(rest.spans.len(), 4_000 - k + 100);
        assert!(v.trace.spans.is_empty() && v.trace.flows.is_empty());
        assert!(v.lanes.iter().all(|l| l.span_count == 0));
    }

    fn lane_row(lane: &LaneIndex, row: &Row) -> usize {
        lane.rows
            .iter()
            .position(|r| std::ptr::eq(r, row))
            .expect("a row of the lane")
    }

    #[test]
    fn two_programs_labelled_stay_apart_on_one_clock() {
        let a = synthetic_trace(100);
        let mut b = a.clone();
        let mut merged = crate::Trace::default();
        let mut first = a.clone();
        first.label_source("train (pid 1)", 1, 0);
        b.label_source("loader (pid 2)", 2, 5_000);
        merged.merge(first).expect("first");
        merged.merge(b.clone()).expect("second");
        assert_eq!(merged.lanes.len(), 2 * a.lanes.len(), "no lane shared");
        assert_eq!(merged.devices.len(), 2);
        assert_eq!(merged.devices[1].device, "loader (pid 2) \u{b7} vulkan:0");
        assert_eq!(b.spans[0].start_ns, a.spans[0].start_ns + 5_000);
        assert_eq!(b.flows[0].to.ts_ns, a.flows[0].to.ts_ns + 5_000);
        let v = TraceView::new(merged, "live");
        let groups: Vec<&str> = v.groups.iter().map(|g| g.label.as_str()).collect();
        assert!(groups.contains(&"loader (pid 2)") && groups.contains(&"train (pid 1)"));
        assert!(groups.contains(&"loader (pid 2) \u{b7} vulkan:0 \u{b7} synthetic"));
        // A time before the clock's start clamps to it.
        let mut early = a.clone();
        early.label_source("early", 3, -1_000_000_000);
        assert!(early.spans.iter().all(|s| s.start_ns == 0));
    }

    #[test]
    fn units() {
        assert_eq!(format_ns(12.0), "12 ns");
        assert_eq!(format_ns(1_500.0), "1.50 us");
        assert_eq!(format_ns(2_000_000.0), "2.000 ms");
        assert_eq!(format_ns(3e9), "3.000 s");
    }
}
