//! Area selection: what a rectangle dragged over lanes and time holds, as
//! Perfetto's area selection and Tracy's statistics over a range show it.
//!
//! A [`Selection`] is a set of display lanes and a time window. For it,
//! [`analyse`] gives:
//!
//! - the spans it holds aggregated by name ([`NameRow`]): count, time in
//!   the window, self time in the window, and the mean, median, 99th
//!   percentile and maximum of the spans' whole durations;
//! - a flame graph of its host spans ([`Flame`]): call paths merged by
//!   name across the selected threads, each frame as wide as its time in
//!   the window;
//! - what each device's streams did in the window ([`DeviceWindow`]): busy
//!   time per stream, the device's busy and idle time, and the time two or
//!   more of its streams ran at once.
//!
//! Times "in the window" are clipped to it, so a span that began before the
//! selection counts only what lies inside; durations for the percentiles
//! are whole, since a kernel cut in half by the selection's edge is not a
//! kernel that took half as long. Work is proportional to the spans in the
//! window (each row is found by binary search), not to the trace.

use std::collections::HashMap;

use crate::analysis::{activity, short};
use crate::view::{TraceView, format_ns};
use crate::{LaneKind, SpanKind, Text};

/// A rectangle of the timeline: display lanes and a time window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Positions in [`TraceView::lanes`] (any order; repeats ignored).
    pub lanes: Vec<usize>,
    /// Start of the window, ns.
    pub t0: u64,
    /// End of the window, ns (`t1 >= t0`; a reversed window is swapped).
    pub t1: u64,
}

impl Selection {
    /// The window's length, ns.
    pub fn len_ns(&self) -> u64 {
        self.t1.abs_diff(self.t0)
    }

    fn window(&self) -> (u64, u64) {
        (self.t0.min(self.t1), self.t0.max(self.t1))
    }
}

/// Spans of one name in the selection, on host lanes or on device lanes.
#[derive(Debug, Clone, PartialEq)]
pub struct NameRow {
    /// The span name.
    pub name: Text,
    /// The kind of its first span (names rarely mix kinds).
    pub kind: SpanKind,
    /// Whether its spans are on device lanes.
    pub device: bool,
    /// Spans overlapping the window.
    pub count: u64,
    /// Their time inside the window, ns.
    pub total_ns: u64,
    /// Their time inside the window not covered by a span nested in them
    /// on the same lane, ns.
    pub self_ns: u64,
    /// Mean whole duration, ns.
    pub mean_ns: f64,
    /// Median whole duration (nearest rank), ns.
    pub p50_ns: u64,
    /// 99th-percentile whole duration (nearest rank), ns.
    pub p99_ns: u64,
    /// Longest whole duration, ns.
    pub max_ns: u64,
}

/// One frame of the flame graph: a call path's last name, laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameFrame {
    /// The span name.
    pub name: Text,
    /// Depth: 0 for top-level spans of a thread.
    pub depth: u16,
    /// Index of the parent frame in [`Flame::frames`] (`None` at depth 0).
    pub parent: Option<u32>,
    /// Offset from the graph's left edge, ns (siblings sorted by time,
    /// longest first).
    pub x_ns: u64,
    /// Time of the path inside the window, ns: the frame's width.
    pub total_ns: u64,
    /// Of which not in a deeper frame, ns.
    pub self_ns: u64,
    /// Spans merged into the frame.
    pub count: u64,
}

/// The flame graph of a selection's host spans; frames in depth-first
/// order, each after its parent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Flame {
    /// The frames.
    pub frames: Vec<FlameFrame>,
    /// The sum of the top-level frames' widths, ns.
    pub total_ns: u64,
    /// The deepest frame's depth plus one.
    pub depth: u16,
}

/// A device stream's busy time in the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamBusy {
    /// Position in [`TraceView::lanes`].
    pub lane: usize,
    /// Its label (`GPU 0 · stream 7`).
    pub label: String,
    /// Time with a kernel, copy or memset running, ns.
    pub busy_ns: u64,
    /// Activities (kernels, copies, memsets) overlapping the window.
    pub activities: u64,
}

/// What one device did in the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceWindow {
    /// The device's short name (`GPU 0`, `vulkan:0`).
    pub device: String,
    /// Its streams in the selection, in display order.
    pub streams: Vec<StreamBusy>,
    /// Time with any of those streams busy, ns.
    pub busy_ns: u64,
    /// The window's length minus [`Self::busy_ns`], ns.
    pub idle_ns: u64,
    /// Time with two or more of those streams busy at once, ns.
    pub overlap_ns: u64,
}

/// The analysis of a [`Selection`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SelectionSummary {
    /// The window, ordered.
    pub t0: u64,
    /// End of the window.
    pub t1: u64,
    /// Lanes selected.
    pub lanes: usize,
    /// Spans overlapping the window on those lanes.
    pub spans: u64,
    /// Spans by name, most time in the window first.
    pub names: Vec<NameRow>,
    /// The host spans' flame graph.
    pub flame: Flame,
    /// Devices whose streams are selected, in display order. When the
    /// selection holds only host lanes, every device's streams over the
    /// same window: what the GPU did while those threads ran.
    pub devices: Vec<DeviceWindow>,
}

/// Intersection of `[s, e)` with `[t0, t1)`, ns.
fn clip(s: u64, e: u64, t0: u64, t1: u64) -> u64 {
    e.min(t1).saturating_sub(s.max(t0))
}

/// The spans of a display lane overlapping `[t0, t1]`, sorted by start
/// and, for equal starts, longest first (parents before children).
fn lane_spans(view: &TraceView, pos: usize, t0: u64, t1: u64) -> Vec<u32> {
    // (start, MAX - end, span): sorting plain keys, not through the spans.
    let mut out: Vec<(u64, u64, u32)> = Vec::new();
    for row in &view.lanes[pos].rows {
        for k in row.visible(t0, t1) {
            let i = row.spans[k];
            let s = &view.trace.spans[i as usize];
            // `visible` works on the row's running end and takes spans
            // touching the window's edges; keep those with time inside it
            // (and instants inside it).
            let inside = if s.dur_ns == 0 {
                t0 <= s.start_ns && s.start_ns <= t1
            } else {
                s.start_ns < t1 && s.end_ns() > t0
            };
            if inside {
                out.push((s.start_ns, u64::MAX - s.end_ns(), i));
            }
        }
    }
    out.sort_unstable();
    out.into_iter().map(|(_, _, i)| i).collect()
}

/// Names as small ids, so the per-name and per-frame tables index vectors
/// and hash integers; a name's text is hashed once per span.
#[derive(Default)]
struct NameIds<'a> {
    by_text: HashMap<&'a str, u32>,
    texts: Vec<&'a Text>,
}

impl<'a> NameIds<'a> {
    fn id(&mut self, t: &'a Text) -> u32 {
        let next = self.texts.len() as u32;
        let id = *self.by_text.entry(t.as_str()).or_insert(next);
        if id == next {
            self.texts.push(t);
        }
        id
    }
}

#[derive(Default)]
struct Acc {
    kind: Option<SpanKind>,
    total: u64,
    self_ns: u64,
    durs: Vec<u64>,
}

struct FlameNode {
    name: u32,
    depth: u16,
    total: u64,
    self_ns: u64,
    count: u64,
    children: Vec<u32>,
}

#[derive(Default)]
struct FlameBuilder {
    nodes: Vec<FlameNode>,
    roots: Vec<u32>,
    index: HashMap<(Option<u32>, u32), u32>,
}

impl FlameBuilder {
    fn node(&mut self, parent: Option<u32>, name: u32) -> u32 {
        if let Some(&n) = self.index.get(&(parent, name)) {
            return n;
        }
        let id = self.nodes.len() as u32;
        let depth = parent.map_or(0, |p| self.nodes[p as usize].depth + 1);
        self.nodes.push(FlameNode {
            name,
            depth,
            total: 0,
            self_ns: 0,
            count: 0,
            children: Vec::new(),
        });
        match parent {
            Some(p) => self.nodes[p as usize].children.push(id),
            None => self.roots.push(id),
        }
        self.index.insert((parent, name), id);
        id
    }

    /// Lays the frames out depth first, siblings longest first.
    fn finish(mut self, names: &NameIds<'_>) -> Flame {
        let mut flame = Flame::default();
        let key = |nodes: &[FlameNode], n: &u32| {
            let node = &nodes[*n as usize];
            (
                std::cmp::Reverse(node.total),
                names.texts[node.name as usize].as_str(),
            )
        };
        let mut roots = std::mem::take(&mut self.roots);
        roots.sort_by_cached_key(|n| key(&self.nodes, n));
        flame.total_ns = roots.iter().map(|&r| self.nodes[r as usize].total).sum();
        // (node, x, parent frame)
        let mut stack: Vec<(u32, u64, Option<u32>)> = Vec::new();
        let mut x = flame.total_ns;
        for &r in roots.iter().rev() {
            x -= self.nodes[r as usize].total;
            stack.push((r, x, None));
        }
        while let Some((n, x, parent)) = stack.pop() {
            let frame = flame.frames.len() as u32;
            let mut children = std::mem::take(&mut self.nodes[n as usize].children);
            children.sort_by_cached_key(|c| key(&self.nodes, c));
            let node = &self.nodes[n as usize];
            flame.depth = flame.depth.max(node.depth + 1);
            flame.frames.push(FlameFrame {
                name: names.texts[node.name as usize].clone(),
                depth: node.depth,
                parent,
                x_ns: x,
                total_ns: node.total,
                self_ns: node.self_ns,
                count: node.count,
            });
            let mut cx = x + children
                .iter()
                .map(|&c| self.nodes[c as usize].total)
                .sum::<u64>();
            for &c in children.iter().rev() {
                cx -= self.nodes[c as usize].total;
                stack.push((c, cx, Some(frame)));
            }
        }
        flame
    }
}

/// Nearest-rank percentile of sorted `v` (not empty).
fn percentile(v: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Busy time, and time with two or more running, of `intervals` clipped
/// to the window.
fn busy_and_overlap(intervals: &mut [(u64, i32)]) -> (u64, u64) {
    intervals.sort_unstable();
    let (mut busy, mut overlap) = (0, 0);
    let mut running = 0i32;
    let mut last = 0;
    for &(t, d) in intervals.iter() {
        if running >= 1 {
            busy += t - last;
        }
        if running >= 2 {
            overlap += t - last;
        }
        running += d;
        last = t;
    }
    (busy, overlap)
}

/// Analyses what `sel` holds in `view`; see the module docs. Lanes out of
/// range are ignored.
pub fn analyse(view: &TraceView, sel: &Selection) -> SelectionSummary {
    let (t0, t1) = sel.window();
    let mut lanes: Vec<usize> = sel
        .lanes
        .iter()
        .copied()
        .filter(|&p| p < view.lanes.len())
        .collect();
    lanes.sort_unstable();
    lanes.dedup();
    let mut out = SelectionSummary {
        t0,
        t1,
        lanes: lanes.len(),
        ..SelectionSummary::default()
    };
    // Host and device spans of one name (a `ProfilerStep#2` annotation on
    // the thread and on the GPU stream) are different rows: accumulator
    // `2 * name + device`.
    let mut ids = NameIds::default();
    let mut accs: Vec<Acc> = Vec::new();
    let mut flame = FlameBuilder::default();
    for &pos in &lanes {
        let device = view.lanes[pos].device;
        let spans = lane_spans(view, pos, t0, t1);
        out.spans += spans.len() as u64;
        // Nesting by a stack of open spans: (end, clipped time, children's
        // clipped time, accumulator, flame node).
        let mut stack: Vec<(u64, u64, u64, usize, Option<u32>)> = Vec::new();
        let close = |entry: (u64, u64, u64, usize, Option<u32>),
                     accs: &mut Vec<Acc>,
                     flame: &mut FlameBuilder| {
            let (_, time, children, acc, node) = entry;
            let own = time.saturating_sub(children);
            accs[acc].self_ns += own;
            if let Some(n) = node {
                flame.nodes[n as usize].self_ns += own;
            }
        };
        for &i in &spans {
            let s = &view.trace.spans[i as usize];
            let end = s.end_ns();
            // Close what ends before this span starts, and what this span
            // sticks out of (overlapping without nesting: a sibling).
            while let Some(top) = stack.last() {
                if top.0 <= s.start_ns || top.0 < end {
                    let entry = stack.pop().expect("the stack has a top");
                    close(entry, &mut accs, &mut flame);
                } else {
                    break;
                }
            }
            let time = clip(s.start_ns, end, t0, t1);
            if let Some(parent) = stack.last_mut() {
                parent.2 += time;
            }
            let id = ids.id(&s.name);
            let a = 2 * id as usize + usize::from(device);
            if a >= accs.len() {
                accs.resize_with(a + 1, Acc::default);
            }
            let acc = &mut accs[a];
            acc.kind.get_or_insert(s.kind);
            acc.total += time;
            acc.durs.push(s.dur_ns);
            let node = if device {
                None
            } else {
                let parent = stack.last().and_then(|e| e.4);
                let n = flame.node(parent, id);
                let node = &mut flame.nodes[n as usize];
                node.total += time;
                node.count += 1;
                Some(n)
            };
            stack.push((end, time, 0, a, node));
        }
        while let Some(entry) = stack.pop() {
            close(entry, &mut accs, &mut flame);
        }
    }
    out.names = accs
        .into_iter()
        .enumerate()
        .filter(|(_, acc)| !acc.durs.is_empty())
        .map(|(a, mut acc)| {
            acc.durs.sort_unstable();
            let n = acc.durs.len().max(1);
            NameRow {
                kind: acc.kind.unwrap_or(SpanKind::Annotation),
                device: a % 2 == 1,
                count: acc.durs.len() as u64,
                total_ns: acc.total,
                self_ns: acc.self_ns,
                mean_ns: acc.durs.iter().map(|&d| d as f64).sum::<f64>() / n as f64,
                p50_ns: percentile(&acc.durs, 50.0),
                p99_ns: percentile(&acc.durs, 99.0),
                max_ns: acc.durs.last().copied().unwrap_or(0),
                name: ids.texts[a / 2].clone(),
            }
        })
        .collect();
    out.names.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| b.count.cmp(&a.count))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.device.cmp(&b.device))
    });
    out.flame = flame.finish(&ids);
    let any_device = lanes.iter().any(|&p| view.lanes[p].device);
    let device_lanes: Vec<usize> = if any_device {
        lanes
            .into_iter()
            .filter(|&p| view.lanes[p].device)
            .collect()
    } else {
        (0..view.lanes.len())
            .filter(|&p| view.lanes[p].device)
            .collect()
    };
    out.devices = device_windows(view, &device_lanes, t0, t1);
    out
}

/// Busy, idle and overlap per device over `lanes` (display positions of
/// device streams, sorted).
fn device_windows(view: &TraceView, lanes: &[usize], t0: u64, t1: u64) -> Vec<DeviceWindow> {
    // (trace device, its window, its streams' busy edges: +1 / -1)
    type Edges = Vec<(u64, i32)>;
    let mut out: Vec<(u32, DeviceWindow, Edges)> = Vec::new();
    for &pos in lanes {
        let li = &view.lanes[pos];
        let Some(lane) = view.trace.lanes.get(li.lane as usize) else {
            continue;
        };
        let LaneKind::Stream { device, .. } = lane.kind else {
            continue;
        };
        let mut own: Vec<(u64, i32)> = Vec::new();
        let mut activities = 0;
        for i in lane_spans(view, pos, t0, t1) {
            let s = &view.trace.spans[i as usize];
            if activity(s).is_none() {
                continue;
            }
            let (a, b) = (s.start_ns.max(t0), s.end_ns().min(t1));
            activities += 1;
            if b > a {
                own.push((a, 1));
                own.push((b, -1));
            }
        }
        let (busy_ns, _) = busy_and_overlap(&mut own);
        let k = match out.iter().position(|(d, ..)| *d == device) {
            Some(k) => k,
            None => {
                let name = view
                    .trace
                    .devices
                    .get(device as usize)
                    .map_or_else(|| format!("device {device}"), |d| d.device.clone());
                out.push((
                    device,
                    DeviceWindow {
                        device: crate::view::device_label(&name),
                        streams: Vec::new(),
                        busy_ns: 0,
                        idle_ns: 0,
                        overlap_ns: 0,
                    },
                    Vec::new(),
                ));
                out.len() - 1
            }
        };
        // A stream's own overlapping activities (nested annotations are
        // not activity; imported streams may still overlap) count once.
        let mut merged: Vec<(u64, i32)> = Vec::with_capacity(own.len());
        let mut running = 0;
        for (t, d) in own {
            let before = running;
            running += d;
            if (before == 0) != (running == 0) {
                merged.push((t, d));
            }
        }
        out[k].2.extend(merged);
        out[k].1.streams.push(StreamBusy {
            lane: pos,
            label: li.label.clone(),
            busy_ns,
            activities,
        });
    }
    out.into_iter()
        .map(|(_, mut w, mut points)| {
            (w.busy_ns, w.overlap_ns) = busy_and_overlap(&mut points);
            w.idle_ns = (t1 - t0).saturating_sub(w.busy_ns);
            w
        })
        .collect()
}

/// The summary as text, stable for scripts: a header line with the
/// window, then tab-separated tables (spans by name, devices and streams,
/// the flame graph's top frames) each under a header row.
pub fn text(s: &SelectionSummary, top: usize) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "selection\t{}..{} ns\t{}\t{} lanes\t{} spans",
        s.t0,
        s.t1,
        format_ns((s.t1 - s.t0) as f64),
        s.lanes,
        s.spans
    );
    let _ = writeln!(
        o,
        "\nname\tlanes\tkind\tcount\ttotal_ns\tself_ns\tmean_ns\tp50_ns\tp99_ns\tmax_ns"
    );
    for r in s.names.iter().take(top) {
        let _ = writeln!(
            o,
            "{}\t{}\t{}\t{}\t{}\t{}\t{:.0}\t{}\t{}\t{}",
            short(&r.name, 80),
            if r.device { "device" } else { "host" },
            r.kind,
            r.count,
            r.total_ns,
            r.self_ns,
            r.mean_ns,
            r.p50_ns,
            r.p99_ns,
            r.max_ns
        );
    }
    let _ = writeln!(
        o,
        "\ndevice\tstream\tbusy_ns\tidle_ns\toverlap_ns\tactivities"
    );
    for d in &s.devices {
        let n: u64 = d.streams.iter().map(|x| x.activities).sum();
        let _ = writeln!(
            o,
            "{}\t*\t{}\t{}\t{}\t{}",
            d.device, d.busy_ns, d.idle_ns, d.overlap_ns, n
        );
        for st in &d.streams {
            let _ = writeln!(
                o,
                "{}\t{}\t{}\t{}\t-\t{}",
                d.device,
                st.label,
                st.busy_ns,
                (s.t1 - s.t0).saturating_sub(st.busy_ns),
                st.activities
            );
        }
    }
    let _ = writeln!(o, "\ndepth\tframe\ttotal_ns\tself_ns\tcount");
    let mut frames: Vec<&FlameFrame> = s.flame.frames.iter().filter(|f| f.depth < 3).collect();
    frames.truncate(top);
    for f in frames {
        let _ = writeln!(
            o,
            "{}\t{}\t{}\t{}\t{}",
            f.depth,
            short(&f.name, 80),
            f.total_ns,
            f.self_ns,
            f.count
        );
    }
    o
}
