//! Several indexed files read as one trace: the segments a live session
//! writes as its oldest spans leave memory, one after another.

use std::collections::HashMap;
use std::sync::Arc;

use super::{IndexedTrace, Matches, NameTotal, Window, WindowView};
use crate::error::{Error, Result};
use crate::model::{Span, Trace};
use crate::view::TraceView;

/// Indexed files read as one trace, in the order they were written.
///
/// Each part numbers lanes and devices as the parts after it do (a live
/// view only ever adds lanes), so the latest part's tables describe every
/// part. Spans are numbered across the parts: part `p`'s record `r` is
/// the set's span `base(p) + r`.
/// Cloning shares the parts (a window can be read on another thread while
/// the set grows).
#[derive(Default, Clone)]
pub struct IndexedSet {
    parts: Vec<Arc<IndexedTrace>>,
    bases: Vec<u64>,
    spans: u64,
}

impl std::fmt::Debug for IndexedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedSet")
            .field("parts", &self.parts.len())
            .field("spans", &self.spans)
            .finish()
    }
}

impl IndexedSet {
    /// An empty set.
    pub fn new() -> IndexedSet {
        IndexedSet::default()
    }

    /// Adds the next part.
    pub fn push(&mut self, part: IndexedTrace) {
        self.bases.push(self.spans);
        self.spans += part.span_count();
        self.parts.push(Arc::new(part));
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Arc<IndexedTrace>] {
        &self.parts
    }

    /// Spans over every part.
    pub fn span_count(&self) -> u64 {
        self.spans
    }

    /// Earliest start and latest end over every part (`None`: no part
    /// holds anything).
    pub fn bounds(&self) -> Option<(u64, u64)> {
        self.parts
            .iter()
            .filter(|p| p.span_count() > 0)
            .map(|p| p.bounds())
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
    }

    /// The part holding set span `id`, and the record in it.
    fn locate(&self, id: u64) -> Option<(usize, u32)> {
        let p = self.bases.partition_point(|&b| b <= id).checked_sub(1)?;
        let r = id - self.bases[p];
        (r < self.parts[p].span_count()).then_some((p, r as u32))
    }

    /// Set span `id`.
    pub fn span(&self, id: u64) -> Result<Span> {
        let (p, r) = self.locate(id).ok_or_else(|| {
            Error::Format(format!(
                "indexed set: expected a span id below {}, found {id}",
                self.spans
            ))
        })?;
        self.parts[p].span(r)
    }

    /// Reads a window from every part it overlaps, as one view: rows are
    /// each part's own, [`WindowView::records`] are set span ids (`None`
    /// for runs and for ids past `u32::MAX`), and the view's bounds are
    /// the whole set's. `max_spans` bounds the spans of all parts
    /// together.
    pub fn window(&self, w: &Window) -> Result<WindowView> {
        let mut spans = Vec::new();
        let mut depths = Vec::new();
        let mut records = Vec::new();
        let mut trace = self
            .parts
            .last()
            .map_or_else(Trace::default, |p| p.tables().tables_only());
        if let Some(last) = self.parts.last() {
            let t = last.tables();
            trace.calibrations = t.calibrations.clone();
            trace.origin_ns = t.origin_ns;
        }
        let mut level = 0;
        let mut rows: HashMap<u32, usize> = HashMap::new();
        for (p, part) in self.parts.iter().enumerate() {
            let (b0, b1) = part.bounds();
            if part.span_count() == 0 || b1 < w.t0 || b0 > w.t1 {
                continue;
            }
            let left = w.max_spans.checked_sub(spans.len()).ok_or_else(|| {
                Error::Format(format!(
                    "the window {}..{} ns holds more than {} spans; choose a shorter one",
                    w.t0, w.t1, w.max_spans
                ))
            })?;
            let part_window = Window {
                max_spans: left,
                ..w.clone()
            };
            let wv = part.window(&part_window)?;
            level = level.max(wv.level);
            let base = self.bases[p];
            for li in &wv.view.lanes {
                let n = rows.entry(li.lane).or_default();
                *n = (*n).max(li.rows.len());
            }
            let view = wv.view;
            records.extend(
                wv.records
                    .iter()
                    .map(|r| r.and_then(|r| u32::try_from(base + u64::from(r)).ok())),
            );
            depths.extend_from_slice(&view.depth);
            let t = view.trace;
            spans.extend(t.spans);
            trace.instants.extend(t.instants);
            trace.flows.extend(t.flows);
            for (i, c) in t.counters.into_iter().enumerate() {
                match trace.counters.get_mut(i) {
                    Some(have) => have.points.extend(c.points),
                    None => trace.counters.push(c),
                }
            }
        }
        trace.spans = spans;
        let mut view = TraceView::from_depths(trace, &depths, "history");
        if let Some(b) = self.bounds() {
            view.bounds = b;
        }
        for li in &mut view.lanes {
            let n = rows.get(&li.lane).copied().unwrap_or(0);
            if li.rows.len() < n {
                li.rows.resize_with(n, Default::default);
            }
        }
        Ok(WindowView {
            view,
            records,
            level,
            t0: w.t0,
            t1: w.t1.max(w.t0),
        })
    }

    /// The matches of `query` in every part (see
    /// [`IndexedTrace::search`]), and their total.
    pub fn search(&self, query: &str) -> Result<(Vec<Matches>, u64)> {
        let mut all = Vec::with_capacity(self.parts.len());
        let mut total = 0u64;
        for p in &self.parts {
            let m = p.search(query)?;
            total = total.saturating_add(m.total);
            all.push(m);
        }
        Ok((all, total))
    }

    /// The match after set span `from` (`None`: the first at or after
    /// `at_ns`), or before it when `forward` is false; wraps around at the
    /// set's ends. `matches` is what [`Self::search`] returned.
    pub fn step(
        &self,
        matches: &[Matches],
        from: Option<u64>,
        at_ns: u64,
        forward: bool,
    ) -> Result<Option<u64>> {
        let n = self.parts.len().min(matches.len());
        if n == 0 {
            return Ok(None);
        }
        let (start, mut local) = match from.and_then(|id| self.locate(id)) {
            Some((p, r)) => (p, Some(r)),
            None => {
                let p = self
                    .parts
                    .iter()
                    .position(|p| p.bounds().1 >= at_ns)
                    .unwrap_or(n - 1)
                    .min(n - 1);
                (p, None)
            }
        };
        let mut at = at_ns;
        for k in 0..=n {
            let p = if forward {
                (start + k) % n
            } else {
                (start + n - k % n) % n
            };
            if let Some(r) = self.parts[p].step(&matches[p], local, at, forward)? {
                // A part's step wraps around inside the part: a result on
                // the wrong side of where it started means this part has
                // no more, so the next part is asked.
                let wrapped = match local {
                    Some(l) => (forward && r <= l) || (!forward && r >= l),
                    None => {
                        let s = self.parts[p].span(r)?.start_ns;
                        k == 0 && ((forward && s < at) || (!forward && s > at))
                    }
                };
                if !wrapped || k == n {
                    return Ok(Some(self.bases[p] + u64::from(r)));
                }
            }
            local = None;
            at = if forward { 0 } else { u64::MAX };
        }
        Ok(None)
    }

    /// Every name's count and total time over all parts, longest total
    /// first.
    pub fn name_totals(&self) -> Result<Vec<NameTotal>> {
        let mut by: HashMap<String, (u64, u64)> = HashMap::new();
        for p in &self.parts {
            for t in p.name_totals()? {
                let e = by.entry(t.name).or_default();
                e.0 += t.count;
                e.1 += t.total_ns;
            }
        }
        let mut out: Vec<NameTotal> = by
            .into_iter()
            .map(|(name, (count, total_ns))| NameTotal {
                name,
                count,
                total_ns,
            })
            .collect();
        out.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(out)
    }
}
