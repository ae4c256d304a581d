//! [`Trace::check`]: the invariants of the [trace model](super), checked.

use std::collections::{HashMap, HashSet};

use super::{FlowEnd, LaneKind, Span, Trace};

/// The spans of one lane, sorted for nesting and containment queries.
struct LaneSpans<'a> {
    /// Spans sorted by (start ascending, duration descending).
    spans: Vec<&'a Span>,
    /// `max_end[i]`: the largest end among `spans[..=i]`.
    max_end: Vec<u64>,
}

impl LaneSpans<'_> {
    /// Whether some span has `start <= ts <= end`.
    fn contains(&self, ts: u64) -> bool {
        let n = self.spans.partition_point(|s| s.start_ns <= ts);
        n > 0 && self.max_end[n - 1] >= ts
    }
}

impl Trace {
    /// Checks the invariants of a well-formed trace:
    ///
    /// - every span, instant and flow end names an existing lane, every
    ///   stream lane, counter and calibration an existing device;
    /// - no span ends past `u64::MAX` ns;
    /// - spans on one lane nest (touching ends are fine);
    /// - every flow end lies inside (`start <= ts <= end`) a span of its lane;
    /// - flow ids are unique;
    /// - counters are unique per (device, name) and their points are in
    ///   time order;
    /// - memory events name an existing device and are in time order;
    /// - the arguments of one span or instant have distinct names (the JSON
    ///   format stores them as an object).
    ///
    /// Returns every problem found, as readable messages.
    pub fn check(&self) -> std::result::Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let lanes = self.lanes.len();
        let devices = self.devices.len();
        let lane_ok = |lane: u32| (lane as usize) < lanes;

        for (i, lane) in self.lanes.iter().enumerate() {
            if let LaneKind::Stream { device, .. } = lane.kind
                && device as usize >= devices
            {
                problems.push(format!(
                    "lane {i} ('{}') is a stream of device {device}, but the trace has {devices} device(s)",
                    lane.name
                ));
            }
        }

        let mut per_lane: Vec<Vec<&Span>> = vec![Vec::new(); lanes];
        for (i, span) in self.spans.iter().enumerate() {
            if span.start_ns.checked_add(span.dur_ns).is_none() {
                problems.push(format!(
                    "span {i} ('{}') ends past u64::MAX ns (start {}, duration {})",
                    span.name, span.start_ns, span.dur_ns
                ));
                continue;
            }
            match per_lane.get_mut(span.lane as usize) {
                Some(list) => list.push(span),
                None => problems.push(format!(
                    "span {i} ('{}') is on lane {}, but the trace has {lanes} lane(s)",
                    span.name, span.lane
                )),
            }
            if let Some(key) = duplicate_key(&span.args) {
                problems.push(format!(
                    "span {i} ('{}') has two arguments named '{key}'",
                    span.name
                ));
            }
        }

        let mut sorted = Vec::with_capacity(lanes);
        for (lane, mut spans) in per_lane.into_iter().enumerate() {
            spans.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(b.dur_ns.cmp(&a.dur_ns)));
            // A stack of open spans: each one contains the next.
            let mut open: Vec<&Span> = Vec::new();
            for span in &spans {
                while open.last().is_some_and(|top| top.end_ns() <= span.start_ns) {
                    open.pop();
                }
                if let Some(top) = open.last()
                    && span.end_ns() > top.end_ns()
                {
                    problems.push(format!(
                        "spans on lane {lane} overlap without nesting: '{}' [{}, {}] ns and '{}' [{}, {}] ns",
                        top.name,
                        top.start_ns,
                        top.end_ns(),
                        span.name,
                        span.start_ns,
                        span.end_ns()
                    ));
                    continue;
                }
                open.push(span);
            }
            let mut max_end = Vec::with_capacity(spans.len());
            let mut running = 0;
            for span in &spans {
                running = running.max(span.end_ns());
                max_end.push(running);
            }
            sorted.push(LaneSpans { spans, max_end });
        }

        for (i, instant) in self.instants.iter().enumerate() {
            if !lane_ok(instant.lane) {
                problems.push(format!(
                    "instant {i} ('{}') is on lane {}, but the trace has {lanes} lane(s)",
                    instant.name, instant.lane
                ));
            }
            if let Some(key) = duplicate_key(&instant.args) {
                problems.push(format!(
                    "instant {i} ('{}') has two arguments named '{key}'",
                    instant.name
                ));
            }
        }

        let mut ids = HashSet::with_capacity(self.flows.len());
        for (i, flow) in self.flows.iter().enumerate() {
            if !ids.insert(flow.id) {
                problems.push(format!("flow {i} reuses flow id {}", flow.id));
            }
            for (which, end) in [("start", flow.from), ("end", flow.to)] {
                check_flow_end(&mut problems, &sorted, i, flow.id, which, end);
            }
        }

        let mut counters = HashSet::new();
        for (i, counter) in self.counters.iter().enumerate() {
            if counter.device as usize >= devices {
                problems.push(format!(
                    "counter {i} ('{}') is for device {}, but the trace has {devices} device(s)",
                    counter.name, counter.device
                ));
            }
            if !counters.insert((counter.device, counter.name.as_str())) {
                problems.push(format!(
                    "counter {i} ('{}') repeats a counter of device {}",
                    counter.name, counter.device
                ));
            }
            if let Some(w) = counter.points.windows(2).position(|w| w[1].0 < w[0].0) {
                problems.push(format!(
                    "counter {i} ('{}') is not in time order: point {} at {} ns comes after {} ns",
                    counter.name,
                    w + 1,
                    counter.points[w + 1].0,
                    counter.points[w].0
                ));
            }
        }

        for (i, m) in self.memory.iter().enumerate() {
            if m.device as usize >= devices {
                problems.push(format!(
                    "memory event {i} ({}) is for device {}, but the trace has {devices} device(s)",
                    m.action, m.device
                ));
            }
        }
        if let Some(w) = self.memory.windows(2).position(|w| w[1].ts_ns < w[0].ts_ns) {
            problems.push(format!(
                "memory events are not in time order: event {} at {} ns comes after {} ns",
                w + 1,
                self.memory[w + 1].ts_ns,
                self.memory[w].ts_ns
            ));
        }

        for (i, calibration) in self.calibrations.iter().enumerate() {
            if calibration.device as usize >= devices {
                problems.push(format!(
                    "calibration {i} is for device {}, but the trace has {devices} device(s)",
                    calibration.device
                ));
            }
        }

        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

fn check_flow_end(
    problems: &mut Vec<String>,
    lanes: &[LaneSpans<'_>],
    index: usize,
    id: u64,
    which: &str,
    end: FlowEnd,
) {
    match lanes.get(end.lane as usize) {
        None => problems.push(format!(
            "flow {index} (id {id}): its {which} is on lane {}, but the trace has {} lane(s)",
            end.lane,
            lanes.len()
        )),
        Some(spans) if !spans.contains(end.ts_ns) => problems.push(format!(
            "flow {index} (id {id}): its {which} at {} ns on lane {} lies inside no span of that lane",
            end.ts_ns, end.lane
        )),
        Some(_) => {}
    }
}

/// The first argument name that appears twice.
fn duplicate_key<K: AsRef<str>, V>(args: &[(K, V)]) -> Option<&str> {
    if args.len() < 2 {
        return None;
    }
    if args.len() <= 8 {
        return args
            .iter()
            .enumerate()
            .find(|(i, (k, _))| args[..*i].iter().any(|(j, _)| j.as_ref() == k.as_ref()))
            .map(|(_, (k, _))| k.as_ref());
    }
    let mut seen = HashMap::with_capacity(args.len());
    args.iter()
        .find(|(k, _)| seen.insert(k.as_ref(), ()).is_some())
        .map(|(k, _)| k.as_ref())
}
