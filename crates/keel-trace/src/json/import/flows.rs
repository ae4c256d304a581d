//! The flows tracker: `s`/`t`/`f` events matched by (cat, name, id) in any
//! file order (Kineto writes an `f` before its `s`), and flows v2
//! (`bind_id` with `flow_out`/`flow_in` on slices), joined into flows at
//! the end, when the slices they bind to are placed. An `f` or `t` with
//! `"bp":"e"` binds to the enclosing slice, otherwise to the next slice.

use std::collections::{HashMap, hash_map::Entry};

use super::Clock;
use super::event::Key;
use super::lanes::Remap;
use super::report::Report;
use crate::model::{Flow, FlowEnd, FlowKind, Span};

/// One event of a flow.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlowPoint {
    /// 0 `s`/out, 1 `t`, 2 `f`/in.
    pub phase: u8,
    pub lane: u32,
    pub ts: i64,
    /// Binds to the next slice starting at or after `ts`.
    pub next_slice: bool,
}

#[derive(Debug, Default)]
struct FlowGroup {
    kind: Option<FlowKind>,
    points: Vec<FlowPoint>,
    /// Flow v2 points come from slices, which are counted as spans.
    v2: bool,
}

#[derive(Debug, Default)]
pub(super) struct Flows {
    groups: HashMap<(String, String, Key), FlowGroup>,
    v2: HashMap<Key, FlowGroup>,
    /// Flows paired as they were read: (from, to, kind).
    paired: Vec<(FlowPoint, FlowPoint, FlowKind)>,
}

impl Flows {
    /// A flow event of the flow (`cat`, `name`, `id`).
    pub(super) fn point(
        &mut self,
        cat: String,
        name: String,
        id: Key,
        kind: FlowKind,
        point: FlowPoint,
    ) {
        let ac2g = cat == "ac2g";
        match self.groups.entry((cat, name, id)) {
            Entry::Vacant(slot) => {
                slot.insert(FlowGroup {
                    kind: Some(kind),
                    points: vec![point],
                    v2: false,
                });
            }
            Entry::Occupied(mut group) => {
                group.get_mut().points.push(point);
                // Kineto's launch flows (ids are correlation ids, one s and
                // one f each, no steps) are paired as soon as both ends are
                // read, so a big trace never holds them all unpaired.
                if ac2g
                    && let [a, b] = group.get().points[..]
                    && a.phase + b.phase == 2
                    && a.phase != 1
                {
                    group.remove();
                    let (from, to) = if a.phase == 0 { (a, b) } else { (b, a) };
                    self.paired.push((from, to, kind));
                }
            }
        }
    }

    /// A slice that is an end of the v2 flow `bind`.
    pub(super) fn v2_point(&mut self, bind: Key, point: FlowPoint) {
        let group = self.v2.entry(bind).or_default();
        group.v2 = true;
        group.points.push(point);
    }

    /// The flows between the placed `spans` (whose lanes and times are the
    /// trace's), numbered in time order; flow events without a partner are
    /// counted in `report`.
    pub(super) fn close(
        self,
        spans: &[Span],
        lanes: usize,
        remap: &Remap,
        clock: &Clock,
        report: &mut Report,
    ) -> Vec<Flow> {
        // Per lane, span starts for binding to the next slice.
        let mut starts: Vec<Vec<u64>> = vec![Vec::new(); lanes];
        for span in spans {
            if let Some(s) = starts.get_mut(span.lane as usize) {
                s.push(span.start_ns);
            }
        }
        for s in &mut starts {
            s.sort_unstable();
        }
        let end_of = |p: &FlowPoint| -> FlowEnd {
            let lane = remap.lane(p.lane);
            let mut ts = clock.rebase_signed(p.ts);
            if p.next_slice
                && let Some(s) = starts.get(lane as usize)
            {
                let at = s.partition_point(|&x| x < ts);
                if let Some(&next) = s.get(at) {
                    ts = next;
                }
            }
            FlowEnd { lane, ts_ns: ts }
        };
        let mut flows: Vec<(FlowEnd, FlowEnd, FlowKind)> = self
            .paired
            .iter()
            .map(|(a, b, kind)| (end_of(a), end_of(b), *kind))
            .collect();
        let mut unpaired = 0u64;
        for mut g in self.groups.into_values().chain(self.v2.into_values()) {
            let kind = g.kind.unwrap_or(FlowKind::Launch);
            let total = g.points.len() as u64;
            let starts_n = g.points.iter().filter(|p| p.phase == 0).count();
            let ends_n = g.points.iter().filter(|p| p.phase == 2).count();
            let mut used = vec![false; g.points.len()];
            if g.points.len() == 2 && starts_n == 1 && ends_n == 1 {
                // The usual case, whatever the file order or clock skew.
                g.points.sort_by_key(|p| p.phase);
                flows.push((end_of(&g.points[0]), end_of(&g.points[1]), kind));
                used = vec![true; 2];
            } else {
                // Chains in time order: s, then t steps, then f.
                g.points.sort_by_key(|p| (p.ts, p.phase));
                let mut current: Option<usize> = None;
                for (j, p) in g.points.iter().enumerate() {
                    if p.phase == 0 {
                        current = Some(j);
                    } else if let Some(c) = current {
                        flows.push((end_of(&g.points[c]), end_of(p), kind));
                        used[c] = true;
                        used[j] = true;
                        current = (p.phase == 1).then_some(j);
                    }
                }
            }
            // Flow v2 ends are slices, already counted.
            if !g.v2 {
                unpaired += total - used.iter().filter(|&&u| u).count() as u64;
            }
        }
        report.skip_n(
            "flow event without a matching start or finish".to_owned(),
            unpaired,
        );
        flows.sort_by_key(|f| (f.0.ts_ns, f.0.lane, f.1.ts_ns));
        flows
            .into_iter()
            .enumerate()
            .map(|(i, (from, to, kind))| Flow {
                id: i as u64 + 1,
                kind,
                from,
                to,
            })
            .collect()
    }
}
