//! Trace analysis in the manner of PyTorch's HolisticTraceAnalysis, over
//! any trace (Keel's own recordings and imported Kineto/Chrome files):
//!
//! - [`StreamTime`]: per GPU stream (device lane), the time in kernels,
//!   copies and memsets and the idle time, from the stream's first to its
//!   last activity. Where activities overlap on one stream an instant
//!   counts once, for the first of kernel, copy, memset that is running,
//!   so the four parts add up to the stream's window exactly.
//! - [`KernelRow`]: kernels by total device time (count, total, mean, min,
//!   max, share of all kernel time).
//! - [`LaunchDelays`]: for every launch flow, the time from the start of
//!   the host span that launched the work to the start of the device span
//!   it ran as; as percentiles and a histogram.
//!
//! Pure functions of a [`TraceView`]; no egui here.

use std::collections::HashMap;

use crate::{FlowKind, LaneKind, Span};

use crate::view::{TraceView, format_ns};

pub use crate::model::Activity;

/// The activity of a device span ([`Span::activity`]).
pub fn activity(s: &Span) -> Option<Activity> {
    s.activity()
}

/// Time on one GPU stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTime {
    /// The lane's label (`GPU 0 · stream 7`).
    pub label: String,
    /// Index into the trace's lanes.
    pub lane: u32,
    /// From the first start to the last end of the stream's activity, ns.
    pub window_ns: u64,
    /// Time running kernels, ns.
    pub kernel_ns: u64,
    /// Time copying (and not running a kernel), ns.
    pub copy_ns: u64,
    /// Time setting memory (and nothing above), ns.
    pub memset_ns: u64,
    /// Time with nothing running, ns.
    pub idle_ns: u64,
}

impl StreamTime {
    /// A part of the window as a percentage.
    pub fn percent(&self, ns: u64) -> f64 {
        if self.window_ns == 0 {
            0.0
        } else {
            100.0 * ns as f64 / self.window_ns as f64
        }
    }
}

/// Splits `intervals` (start, end, activity) into time per activity; an
/// instant covered by several counts once, for the smallest activity.
fn breakdown(mut intervals: Vec<(u64, u64, Activity)>) -> (u64, [u64; 3]) {
    let mut parts = [0u64; 3];
    if intervals.is_empty() {
        return (0, parts);
    }
    // Sweep over start/end points with a count of running spans per kind.
    let mut points: Vec<(u64, bool, Activity)> = Vec::with_capacity(intervals.len() * 2);
    let lo = intervals.iter().map(|i| i.0).min().unwrap_or(0);
    let hi = intervals.iter().map(|i| i.1).max().unwrap_or(0);
    for (s, e, a) in intervals.drain(..) {
        points.push((s, true, a));
        points.push((e, false, a));
    }
    points.sort_unstable_by_key(|&(t, start, _)| (t, start));
    let mut running = [0usize; 3];
    let mut last = lo;
    for (t, start, a) in points {
        if t > last {
            if let Some(k) = running.iter().position(|&n| n > 0) {
                parts[k] += t - last;
            }
            last = t;
        }
        let n = &mut running[a as usize];
        if start {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
        }
    }
    (hi - lo, parts)
}

/// Per GPU stream time, in display order.
pub fn stream_times(view: &TraceView) -> Vec<StreamTime> {
    let mut per_lane: Vec<Vec<(u64, u64, Activity)>> = vec![Vec::new(); view.trace.lanes.len()];
    for s in &view.trace.spans {
        let Some(lane) = view.trace.lanes.get(s.lane as usize) else {
            continue;
        };
        if !matches!(lane.kind, LaneKind::Stream { .. }) {
            continue;
        }
        if let Some(a) = activity(s) {
            per_lane[s.lane as usize].push((s.start_ns, s.end_ns(), a));
        }
    }
    view.lanes
        .iter()
        .filter(|l| l.device)
        .filter_map(|l| {
            let intervals = std::mem::take(&mut per_lane[l.lane as usize]);
            if intervals.is_empty() {
                return None;
            }
            let (window_ns, [kernel_ns, copy_ns, memset_ns]) = breakdown(intervals);
            Some(StreamTime {
                label: l.label.clone(),
                lane: l.lane,
                window_ns,
                kernel_ns,
                copy_ns,
                memset_ns,
                idle_ns: window_ns - kernel_ns - copy_ns - memset_ns,
            })
        })
        .collect()
}

/// One kernel name's device time.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRow {
    /// The kernel's name.
    pub name: String,
    /// How many ran.
    pub count: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Mean duration, ns.
    pub mean_ns: f64,
    /// Shortest, ns.
    pub min_ns: u64,
    /// Longest, ns.
    pub max_ns: u64,
    /// Share of the time of all kernels, percent.
    pub percent: f64,
}

/// Kernels (device spans whose [`activity`] is [`Activity::Kernel`]) by
/// name, longest total first (ties by name); at most `top` rows.
pub fn top_kernels(view: &TraceView, top: usize) -> Vec<KernelRow> {
    let mut by_name: HashMap<&str, KernelRow> = HashMap::new();
    let mut all = 0u64;
    for s in &view.trace.spans {
        let device = matches!(
            view.trace.lanes.get(s.lane as usize).map(|l| &l.kind),
            Some(LaneKind::Stream { .. })
        );
        if !device || activity(s) != Some(Activity::Kernel) {
            continue;
        }
        all += s.dur_ns;
        let r = by_name.entry(s.name.as_str()).or_insert_with(|| KernelRow {
            name: s.name.to_string(),
            count: 0,
            total_ns: 0,
            mean_ns: 0.0,
            min_ns: u64::MAX,
            max_ns: 0,
            percent: 0.0,
        });
        r.count += 1;
        r.total_ns += s.dur_ns;
        r.min_ns = r.min_ns.min(s.dur_ns);
        r.max_ns = r.max_ns.max(s.dur_ns);
    }
    let mut rows: Vec<KernelRow> = by_name
        .into_values()
        .map(|mut r| {
            r.mean_ns = r.total_ns as f64 / r.count as f64;
            r.percent = if all == 0 {
                0.0
            } else {
                100.0 * r.total_ns as f64 / all as f64
            };
            r
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
    rows.truncate(top);
    rows
}

/// The distribution of launch delays.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchDelays {
    /// Every delay, ns, sorted (negative where the device clock puts the
    /// kernel before its launch: a calibration problem worth seeing).
    pub sorted_ns: Vec<i64>,
    /// Launch flows whose ends bound to no span (their flow times were
    /// used instead).
    pub unbound: usize,
}

impl LaunchDelays {
    /// The nearest-rank percentile `p` (0..=100), if any delay.
    pub fn percentile(&self, p: f64) -> Option<i64> {
        let n = self.sorted_ns.len();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
        Some(self.sorted_ns[rank - 1])
    }

    /// The mean, ns.
    pub fn mean(&self) -> Option<f64> {
        let n = self.sorted_ns.len();
        (n > 0).then(|| self.sorted_ns.iter().map(|&d| d as f64).sum::<f64>() / n as f64)
    }

    /// `bins` equal buckets from the smallest to the largest delay, as
    /// (bucket start, bucket width, count), ns.
    pub fn histogram(&self, bins: usize) -> Vec<(f64, f64, usize)> {
        crate::stats::histogram(&self.sorted_ns, bins, |d| d as f64)
    }
}

/// Launch delays over every [`FlowKind::Launch`] flow: from the start of
/// the span the flow leaves (the host launch call) to the start of the
/// span it arrives at (the kernel or copy on the device); where an end
/// binds to no span, that end's own time stands in.
pub fn launch_delays(view: &TraceView) -> LaunchDelays {
    let mut out = LaunchDelays::default();
    for (i, f) in view.trace.flows.iter().enumerate() {
        if f.kind != FlowKind::Launch {
            continue;
        }
        let (a, b) = view.flow_spans.get(i).copied().unwrap_or((None, None));
        let start = |s: Option<u32>, fallback: u64| {
            s.and_then(|s| view.trace.spans.get(s as usize))
                .map_or(fallback, |s| s.start_ns)
        };
        if a.is_none() || b.is_none() {
            out.unbound += 1;
        }
        let host = start(a, f.from.ts_ns);
        let device = start(b, f.to.ts_ns);
        let d = if device >= host {
            i64::try_from(device - host).unwrap_or(i64::MAX)
        } else {
            i64::try_from(host - device).map_or(i64::MIN, |d| -d)
        };
        out.sorted_ns.push(d);
    }
    out.sorted_ns.sort_unstable();
    out
}

/// Everything the analysis panel and `--headless --open` show.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// Per GPU stream.
    pub streams: Vec<StreamTime>,
    /// The top kernels.
    pub kernels: Vec<KernelRow>,
    /// Launch delays.
    pub delays: LaunchDelays,
}

/// How many kernels [`Analysis::new`] keeps.
pub const TOP_KERNELS: usize = 20;

impl Analysis {
    /// Analyses `view`.
    pub fn new(view: &TraceView) -> Analysis {
        Analysis {
            streams: stream_times(view),
            kernels: top_kernels(view, TOP_KERNELS),
            delays: launch_delays(view),
        }
    }

    /// The tables as text (what `--headless --open` prints).
    pub fn text(&self) -> String {
        let mut out = String::from("GPU time per stream:\n");
        if self.streams.is_empty() {
            out.push_str("  (no device streams with kernels, copies or memsets)\n");
        } else {
            out.push_str(&format!(
                "  {:<28} {:>12} {:>18} {:>18} {:>18} {:>18}\n",
                "stream", "window", "kernels", "copies", "memsets", "idle"
            ));
            for s in &self.streams {
                let part = |ns: u64| format!("{} ({:.1}%)", format_ns(ns as f64), s.percent(ns));
                out.push_str(&format!(
                    "  {:<28} {:>12} {:>18} {:>18} {:>18} {:>18}\n",
                    s.label,
                    format_ns(s.window_ns as f64),
                    part(s.kernel_ns),
                    part(s.copy_ns),
                    part(s.memset_ns),
                    part(s.idle_ns)
                ));
            }
        }
        out.push_str("Top kernels by total time:\n");
        if self.kernels.is_empty() {
            out.push_str("  (no kernels on device streams)\n");
        } else {
            out.push_str(&format!(
                "  {:<40} {:>7} {:>12} {:>7} {:>12} {:>12} {:>12}\n",
                "kernel", "count", "total", "share", "mean", "min", "max"
            ));
            for k in &self.kernels {
                out.push_str(&format!(
                    "  {:<40} {:>7} {:>12} {:>6.1}% {:>12} {:>12} {:>12}\n",
                    short(&k.name, 40),
                    k.count,
                    format_ns(k.total_ns as f64),
                    k.percent,
                    format_ns(k.mean_ns),
                    format_ns(k.min_ns as f64),
                    format_ns(k.max_ns as f64)
                ));
            }
        }
        out.push_str("Launch delay (host launch start -> device start):\n");
        let d = &self.delays;
        match (
            d.percentile(50.0),
            d.percentile(90.0),
            d.percentile(99.0),
            d.sorted_ns.last(),
        ) {
            (Some(p50), Some(p90), Some(p99), Some(&max)) => out.push_str(&format!(
                "  {} launches: p50 {}, p90 {}, p99 {}, max {}{}\n",
                d.sorted_ns.len(),
                format_ns(p50 as f64),
                format_ns(p90 as f64),
                format_ns(p99 as f64),
                format_ns(max as f64),
                if d.unbound > 0 {
                    format!(" ({} with an end bound to no span)", d.unbound)
                } else {
                    String::new()
                }
            )),
            _ => out.push_str("  (no launch flows)\n"),
        }
        out
    }
}

/// `s` cut to `max` characters (with an ellipsis).
pub fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let elided = elide_cpp(s);
    let n = elided.chars().count();
    if n <= max {
        return elided;
    }
    // Both ends: a kernel's name starts with its family and ends with
    // its variant.
    let keep = max.saturating_sub(1);
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut t: String = elided.chars().take(head).collect();
    t.push('…');
    t.extend(elided.chars().skip(n - tail));
    t
}

/// A C++ function's name as a table shows it: no return type (`void `),
/// template arguments and parameters collapsed to `<…>` and `(…)`
/// (`at::native::vectorized_elementwise_kernel<…>(…)`).
fn elide_cpp(s: &str) -> String {
    let s = s.strip_prefix("void ").unwrap_or(s);
    let mut out = String::with_capacity(s.len().min(256));
    let (mut angle, mut paren) = (0usize, 0usize);
    let mut inner = false;
    for c in s.chars() {
        match c {
            '<' if paren == 0 => {
                if angle == 0 {
                    out.push('<');
                    inner = false;
                }
                angle += 1;
            }
            '>' if paren == 0 && angle > 0 => {
                angle -= 1;
                if angle == 0 {
                    out.push_str(if inner { "…>" } else { ">" });
                }
            }
            '(' if angle == 0 => {
                if paren == 0 {
                    out.push('(');
                    inner = false;
                }
                paren += 1;
            }
            ')' if angle == 0 && paren > 0 => {
                paren -= 1;
                if paren == 0 {
                    out.push_str(if inner { "…)" } else { ")" });
                }
            }
            _ if angle == 0 && paren == 0 => out.push(c),
            c if !c.is_whitespace() => inner = true,
            _ => {}
        }
    }
    out
}

/// The import report as text (what `--headless --open` prints).
pub fn import_text(report: Option<&crate::ImportReport>) -> String {
    match report {
        None => "Import: Keel trace (nothing to convert)\n".to_owned(),
        Some(r) => {
            let skipped: u64 = r.skipped.iter().map(|(_, n)| n).sum();
            let mut out = format!(
                "Import: {}: {} events, {} imported, {} skipped\n",
                r.format, r.events, r.imported, skipped
            );
            for (reason, n) in &r.skipped {
                out.push_str(&format!("  skipped {n}: {reason}\n"));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpanKind;
    use crate::{Flow, FlowEnd, Lane, Trace, TraceDevice};

    fn span(lane: u32, name: &str, kind: SpanKind, start: u64, dur: u64) -> Span {
        Span {
            lane,
            name: name.into(),
            kind,
            start_ns: start,
            dur_ns: dur,
            op: 0,
            args: Vec::new(),
        }
    }

    /// GPU 0 with streams 7 and 8, one host thread.
    fn trace() -> Trace {
        let mut t = Trace {
            devices: vec![TraceDevice {
                device: "cuda:0".to_owned(),
                name: "GPU".to_owned(),
                properties: Vec::new(),
            }],
            ..Trace::default()
        };
        for (kind, name) in [
            (
                LaneKind::Stream {
                    device: 0,
                    stream: 7,
                    thread: 0,
                },
                "stream 7",
            ),
            (
                LaneKind::Stream {
                    device: 0,
                    stream: 8,
                    thread: 0,
                },
                "stream 8",
            ),
            (LaneKind::Host { thread: 1 }, "main"),
        ] {
            t.lanes.push(Lane {
                kind,
                name: name.to_owned(),
                group: String::new(),
            });
        }
        // Stream 7: kernel A [100, 200), copy [150, 260) overlapping it,
        // a memset [300, 320) (by category), kernel B [400, 500); a wait
        // that is no activity.
        t.spans.push(span(0, "A", SpanKind::Kernel, 100, 100));
        t.spans
            .push(span(0, "Memcpy HtoD", SpanKind::Copy, 150, 110));
        let mut ms = span(0, "fill", SpanKind::Kernel, 300, 20);
        ms.args.push(("cat".into(), "gpu_memset".into()));
        t.spans.push(ms);
        t.spans.push(span(0, "B", SpanKind::Kernel, 400, 100));
        t.spans.push(span(0, "wait", SpanKind::Wait, 500, 1_000));
        // Stream 8: kernel A [1000, 1300), and Memset by name [1300, 1350).
        t.spans.push(span(1, "A", SpanKind::Kernel, 1_000, 300));
        t.spans
            .push(span(1, "Memset (Device)", SpanKind::Copy, 1_300, 50));
        // Host launches: [90, 95) -> A@100, [380, 390) -> B@400,
        // [900, 950) -> A@1000; a host span that is no device time.
        t.spans
            .push(span(2, "cudaLaunchKernel", SpanKind::Kernel, 90, 5));
        t.spans
            .push(span(2, "cudaLaunchKernel", SpanKind::Kernel, 380, 10));
        t.spans
            .push(span(2, "cudaLaunchKernel", SpanKind::Kernel, 900, 50));
        for (id, (h, d, lane)) in [(90u64, 100u64, 0u32), (385, 400, 0), (900, 1_000, 1)]
            .into_iter()
            .enumerate()
        {
            t.flows.push(Flow {
                id: id as u64,
                kind: FlowKind::Launch,
                from: FlowEnd { lane: 2, ts_ns: h },
                to: FlowEnd { lane, ts_ns: d },
            });
        }
        t
    }

    #[test]
    fn stream_breakdown_adds_up() {
        let v = TraceView::new(trace(), "test");
        let s = stream_times(&v);
        assert_eq!(s.len(), 2);
        // Window [100, 500): kernels 100 + 100, the copy outside the
        // kernel [200, 260) = 60, memset 20, idle 400 - 280 = 120.
        assert_eq!(
            s[0],
            StreamTime {
                label: "GPU 0 · stream 7".to_owned(),
                lane: 0,
                window_ns: 400,
                kernel_ns: 200,
                copy_ns: 60,
                memset_ns: 20,
                idle_ns: 120,
            }
        );
        assert_eq!(s[1].window_ns, 350);
        assert_eq!(
            (s[1].kernel_ns, s[1].copy_ns, s[1].memset_ns, s[1].idle_ns),
            (300, 0, 50, 0)
        );
        assert_eq!(s[0].percent(s[0].idle_ns), 30.0);
    }

    #[test]
    fn top_kernels_by_total() {
        let v = TraceView::new(trace(), "test");
        let k = top_kernels(&v, 10);
        // Host launches, copies and memsets are not kernels.
        assert_eq!(k.len(), 2);
        assert_eq!(
            k[0],
            KernelRow {
                name: "A".to_owned(),
                count: 2,
                total_ns: 400,
                mean_ns: 200.0,
                min_ns: 100,
                max_ns: 300,
                percent: 80.0,
            }
        );
        assert_eq!((k[1].name.as_str(), k[1].total_ns), ("B", 100));
        assert_eq!(top_kernels(&v, 1).len(), 1);
    }

    #[test]
    fn launch_delays_through_flows() {
        let v = TraceView::new(trace(), "test");
        let d = launch_delays(&v);
        // Span starts: 100 - 90, 400 - 380 (the flow leaves at 385, inside
        // the launch span that started at 380), 1000 - 900.
        assert_eq!(d.sorted_ns, vec![10, 20, 100]);
        assert_eq!(d.unbound, 0);
        assert_eq!(d.percentile(50.0), Some(20));
        assert_eq!(d.percentile(90.0), Some(100));
        assert_eq!(d.percentile(0.0), Some(10));
        assert_eq!(d.mean(), Some(130.0 / 3.0));
        let h = d.histogram(9);
        assert_eq!(h.len(), 9);
        assert_eq!(h.iter().map(|b| b.2).sum::<usize>(), 3);
        assert_eq!((h[0].2, h[1].2, h[2].2, h[8].2), (1, 1, 0, 1));
        assert!(LaunchDelays::default().percentile(50.0).is_none());
    }

    #[test]
    fn unbound_flows_use_their_own_times() {
        let mut t = trace();
        t.flows.push(Flow {
            id: 9,
            kind: FlowKind::Launch,
            from: FlowEnd {
                lane: 2,
                ts_ns: 5_000,
            },
            to: FlowEnd {
                lane: 0,
                ts_ns: 4_000,
            },
        });
        let d = launch_delays(&TraceView::new(t, "test"));
        assert_eq!(d.unbound, 1);
        assert_eq!(d.sorted_ns[0], -1_000);
    }

    #[test]
    fn text_tables() {
        let v = TraceView::new(trace(), "test");
        let a = Analysis::new(&v);
        let text = a.text();
        assert!(text.contains("GPU 0 · stream 7"), "{text}");
        assert!(text.contains("120 ns (30.0%)"), "{text}");
        assert!(text.contains("3 launches: p50 20 ns, p90 100 ns, p99 100 ns, max 100 ns"));
        let r = crate::ImportReport {
            format: "Chrome trace (PyTorch/Kineto)".to_owned(),
            events: 10,
            imported: 7,
            skipped: vec![("unknown phase 'Z'".to_owned(), 3)],
        };
        assert_eq!(
            import_text(Some(&r)),
            "Import: Chrome trace (PyTorch/Kineto): 10 events, 7 imported, 3 skipped\n  \
             skipped 3: unknown phase 'Z'\n"
        );
        assert_eq!(short("abcdef", 4), "ab…f");
        assert_eq!(short("abc", 4), "abc");
        let cpp = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)";
        assert_eq!(
            short(cpp, 60),
            "at::native::vectorized_elementwise_kernel<…>(…)"
        );
        assert_eq!(short("void f<>()", 5), "f<>()");
        let long = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";
        let s40 = short(long, 40);
        assert_eq!(s40.chars().count(), 40);
        assert!(
            s40.starts_with("sm90_xmma_gemm") && s40.ends_with("5x_cublas"),
            "{s40}"
        );
        // Unbalanced brackets never panic.
        assert!(short("a<<<(((b", 3).chars().count() <= 3);
    }
}
