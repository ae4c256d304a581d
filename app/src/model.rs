//! The viewer's index over a [`Trace`]: what the timeline needs to draw a
//! frame in time proportional to what is visible, not to the trace size.
//!
//! For every lane, spans are split into depth rows (spans on one lane nest,
//! so a span's depth is the number of spans enclosing it). Inside one row
//! spans never overlap, so sorted by start they are also sorted by end: the
//! first visible span is one binary search on the end, the last one a
//! binary search on the start, and a run of sub-pixel spans is skipped with
//! one more binary search per pixel column. This module never touches egui.

use keel::profiler::{LaneKind, SpanKind, Trace};

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
}

impl Row {
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
    /// The label shown left of the lane (`vulkan:0 stream 3`, `host main`).
    pub label: String,
    /// Whether it is a device stream.
    pub device: bool,
    /// Depth rows, outermost first.
    pub rows: Vec<Row>,
    /// Number of spans on the lane.
    pub span_count: usize,
}

/// A [`Trace`] and the index the views need.
#[derive(Debug, Clone)]
pub struct TraceView {
    /// The trace itself.
    pub trace: Trace,
    /// Lanes in display order: device streams (by device, stream), then host
    /// threads.
    pub lanes: Vec<LaneIndex>,
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
    /// Earliest start and latest end over every span, instant and counter.
    pub bounds: (u64, u64),
    /// Where the trace came from (file path, workload, address).
    pub source: String,
}

impl TraceView {
    /// Indexes `trace`. Spans naming a missing lane are ignored (the trace
    /// checker reports them); spans that do not nest get a deeper row.
    pub fn new(trace: Trace, source: impl Into<String>) -> TraceView {
        let n_lanes = trace.lanes.len();
        let mut order: Vec<u32> = (0..n_lanes as u32).collect();
        let key = |l: u32| match &trace.lanes[l as usize].kind {
            LaneKind::Stream { device, stream } => (0u8, u64::from(*device), *stream as u64),
            LaneKind::Host { thread } => (1u8, *thread, 0),
        };
        order.sort_by_key(|&l| key(l));
        let mut lane_pos = vec![usize::MAX; n_lanes];
        for (pos, &l) in order.iter().enumerate() {
            lane_pos[l as usize] = pos;
        }

        // Bucket span indices per lane, then sort each by (start, longer first).
        let mut per_lane: Vec<Vec<u32>> = vec![Vec::new(); n_lanes];
        for (i, s) in trace.spans.iter().enumerate() {
            if let Some(v) = per_lane.get_mut(s.lane as usize) {
                v.push(i as u32);
            }
        }
        let spans = &trace.spans;
        let mut depth = vec![0u16; spans.len()];
        let mut lanes: Vec<LaneIndex> = order
            .iter()
            .map(|&l| {
                let lane = &trace.lanes[l as usize];
                let (label, device) = match &lane.kind {
                    LaneKind::Stream { device, .. } => (
                        format!(
                            "{} {}",
                            trace
                                .devices
                                .get(*device as usize)
                                .map_or("?", |d| d.device.as_str()),
                            lane.name
                        ),
                        true,
                    ),
                    LaneKind::Host { .. } => (format!("host {}", lane.name), false),
                };
                LaneIndex {
                    lane: l,
                    label,
                    device,
                    rows: Vec::new(),
                    span_count: 0,
                }
            })
            .collect();
        for (l, mut ids) in per_lane.into_iter().enumerate() {
            ids.sort_unstable_by_key(|&i| {
                let s = &spans[i as usize];
                (s.start_ns, std::cmp::Reverse(s.dur_ns))
            });
            let li = &mut lanes[lane_pos[l]];
            li.span_count = ids.len();
            // The ends of the open spans per depth (a stack).
            let mut open: Vec<u64> = Vec::new();
            for i in ids {
                let s = &spans[i as usize];
                let (start, end) = (s.start_ns, s.end_ns());
                while open.last().is_some_and(|&e| e <= start) {
                    open.pop();
                }
                // Malformed input (a span sticking out of its parent) still
                // goes one row deeper; the row check below keeps rows disjoint.
                let d = open.len();
                open.push(end);
                let d16 = u16::try_from(d).unwrap_or(u16::MAX);
                depth[i as usize] = d16;
                let d = usize::from(d16);
                if li.rows.len() <= d {
                    li.rows.resize_with(d + 1, Row::default);
                }
                let row = &mut li.rows[d];
                // Keep rows non-overlapping even for malformed input.
                if row.ends.last().is_some_and(|&e| e > start) {
                    continue;
                }
                row.spans.push(i);
                row.starts.push(start);
                row.ends.push(end);
            }
        }

        let mut flows_by_time: Vec<u32> = (0..trace.flows.len() as u32).collect();
        let first = |f: &keel::profiler::Flow| f.from.ts_ns.min(f.to.ts_ns);
        flows_by_time.sort_unstable_by_key(|&i| first(&trace.flows[i as usize]));
        let flow_times = flows_by_time
            .iter()
            .map(|&i| first(&trace.flows[i as usize]))
            .collect();
        let max_flow_len = trace
            .flows
            .iter()
            .map(|f| f.from.ts_ns.abs_diff(f.to.ts_ns))
            .max()
            .unwrap_or(0);

        let mut lo = u64::MAX;
        let mut hi = 0u64;
        for s in &trace.spans {
            lo = lo.min(s.start_ns);
            hi = hi.max(s.end_ns());
        }
        for i in &trace.instants {
            lo = lo.min(i.ts_ns);
            hi = hi.max(i.ts_ns);
        }
        for c in &trace.counters {
            for &(t, _) in &c.points {
                lo = lo.min(t);
                hi = hi.max(t);
            }
        }
        if lo > hi {
            (lo, hi) = (0, 1_000);
        }
        TraceView {
            trace,
            lanes,
            lane_pos,
            depth,
            flows_by_time,
            flow_times,
            max_flow_len,
            bounds: (lo, hi.max(lo + 1)),
            source: source.into(),
        }
    }

    /// The display lane of trace lane `lane`.
    pub fn lane_index(&self, lane: u32) -> Option<&LaneIndex> {
        self.lanes.get(*self.lane_pos.get(lane as usize)?)
    }
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
    use keel::profiler::{Flow, FlowEnd, FlowKind, Lane, Span, TraceDevice};
    let mut t = Trace {
        version: keel::profiler::TRACE_VERSION,
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
            name: NAMES[(x >> 33) as usize % NAMES.len()].to_owned(),
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
    fn units() {
        assert_eq!(format_ns(12.0), "12 ns");
        assert_eq!(format_ns(1_500.0), "1.50 us");
        assert_eq!(format_ns(2_000_000.0), "2.000 ms");
        assert_eq!(format_ns(3e9), "3.000 s");
    }
}
