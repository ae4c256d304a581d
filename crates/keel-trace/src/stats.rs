//! Statistics over a trace: per kernel, per lane, event pairs, memory.
//! Computed once per trace (not per frame) by [`Stats::new`].

use std::collections::BTreeMap;

use crate::{SpanKind, Text, Trace};

use crate::view::TraceView;

/// Summary of a set of durations (ns).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// How many.
    pub count: usize,
    /// Sum, ns.
    pub total: u64,
    /// Mean, ns.
    pub mean: f64,
    /// Median, ns.
    pub median: u64,
    /// 99th percentile (nearest rank), ns.
    pub p99: u64,
    /// Shortest, ns.
    pub min: u64,
    /// Longest, ns.
    pub max: u64,
}

impl Summary {
    /// Summarises `durs` (sorted in place); `None` when empty.
    pub fn of(durs: &mut [u64]) -> Option<Summary> {
        if durs.is_empty() {
            return None;
        }
        durs.sort_unstable();
        let n = durs.len();
        let total: u64 = durs.iter().sum();
        let rank = |p: f64| durs[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Summary {
            count: n,
            total,
            mean: total as f64 / n as f64,
            median: rank(0.5),
            p99: rank(0.99),
            min: durs[0],
            max: durs[n - 1],
        })
    }
}

/// One row of a statistics table.
#[derive(Debug, Clone)]
pub struct StatRow {
    /// What the row is about (`saxpy (device)`, `vulkan:0 stream 3`).
    pub name: String,
    /// The numbers.
    pub summary: Summary,
    /// The sorted durations (for the histogram).
    pub durations: Vec<u64>,
}

/// A pair of consecutive event records on one device stream.
#[derive(Debug, Clone)]
pub struct EventPair {
    /// The lane's label.
    pub lane: String,
    /// The first event.
    pub from: String,
    /// The second event.
    pub to: String,
    /// Time between the two records, ms.
    pub elapsed_ms: f64,
}

/// Everything the statistics panel shows.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Per kernel name (device spans; host launches when a kernel has no
    /// device span), sorted by total time, longest first.
    pub kernels: Vec<StatRow>,
    /// Per lane, in display order.
    pub lanes: Vec<StatRow>,
    /// Consecutive event records per device stream.
    pub event_pairs: Vec<EventPair>,
}

fn event_name(args: &[(Text, Text)], fallback: &str) -> String {
    args.iter()
        .find(|(k, _)| k == "event")
        .map_or_else(|| fallback.to_owned(), |(_, v)| format!("event {v}"))
}

impl Stats {
    /// Computes the statistics of `view`.
    pub fn new(view: &TraceView) -> Stats {
        let trace: &Trace = &view.trace;
        let device_lane = |lane: u32| view.lane_index(lane).is_some_and(|l| l.device);
        let mut device_kernels: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        let mut host_kernels: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for s in &trace.spans {
            if s.kind == SpanKind::Kernel {
                let map = if device_lane(s.lane) {
                    &mut device_kernels
                } else {
                    &mut host_kernels
                };
                map.entry(s.name.as_str()).or_default().push(s.dur_ns);
            }
        }
        let mut kernels = Vec::new();
        for (name, mut durs) in device_kernels {
            if let Some(summary) = Summary::of(&mut durs) {
                kernels.push(StatRow {
                    name: format!("{name} (device)"),
                    summary,
                    durations: durs,
                });
            }
        }
        for (name, mut durs) in host_kernels {
            if let Some(summary) = Summary::of(&mut durs) {
                kernels.push(StatRow {
                    name: format!("{name} (host launch)"),
                    summary,
                    durations: durs,
                });
            }
        }
        kernels.sort_by_key(|r| std::cmp::Reverse(r.summary.total));

        let mut lanes = Vec::new();
        let mut event_pairs = Vec::new();
        for l in &view.lanes {
            let mut durs: Vec<u64> = l
                .rows
                .iter()
                .flat_map(|r| r.spans.iter())
                .map(|&i| trace.spans[i as usize].dur_ns)
                .collect();
            if let Some(summary) = Summary::of(&mut durs) {
                lanes.push(StatRow {
                    name: l.label.clone(),
                    summary,
                    durations: durs,
                });
            }
            if l.device {
                let mut records: Vec<&crate::Span> = l
                    .rows
                    .iter()
                    .flat_map(|r| r.spans.iter())
                    .map(|&i| &trace.spans[i as usize])
                    .filter(|s| s.kind == SpanKind::EventRecord)
                    .collect();
                records.sort_by_key(|s| s.start_ns);
                for w in records.windows(2) {
                    event_pairs.push(EventPair {
                        lane: l.label.clone(),
                        from: event_name(&w[0].args, &w[0].name),
                        to: event_name(&w[1].args, &w[1].name),
                        elapsed_ms: (w[1].start_ns.saturating_sub(w[0].start_ns)) as f64 / 1e6,
                    });
                }
            }
        }
        Stats {
            kernels,
            lanes,
            event_pairs,
        }
    }
}

/// Fixed-width histogram bins over sorted values (durations, delays) in
/// ns, each read as `f64` by `ns`: (bin start ns, bin width ns, count).
pub fn histogram<T: Copy>(sorted: &[T], bins: usize, ns: fn(T) -> f64) -> Vec<(f64, f64, usize)> {
    let (Some(&lo), Some(&hi)) = (sorted.first(), sorted.last()) else {
        return Vec::new();
    };
    let (lo, hi) = (ns(lo), ns(hi));
    let bins = bins.max(1);
    let width = ((hi - lo) / bins as f64).max(1.0);
    let mut counts = vec![0usize; bins];
    for &d in sorted {
        let b = (((ns(d) - lo) / width) as usize).min(bins - 1);
        counts[b] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (lo + i as f64 * width, width, c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_numbers() {
        let mut d: Vec<u64> = (1..=100).collect();
        let s = Summary::of(&mut d).expect("non-empty");
        assert_eq!(
            (s.count, s.total, s.median, s.p99, s.min, s.max),
            (100, 5050, 50, 99, 1, 100)
        );
        assert!(Summary::of(&mut []).is_none());
        let h = histogram(&d, 10, |d| d as f64);
        assert_eq!(h.iter().map(|b| b.2).sum::<usize>(), 100);
    }
}
