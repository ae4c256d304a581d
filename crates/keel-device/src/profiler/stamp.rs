//! Host timestamps at the CPU counter's cost, for every host record.
//!
//! `Instant::now` is a `clock_gettime` call (tens of nanoseconds where the
//! OS clock is not read from the TSC, as on the development VM:
//! docs/BENCHMARKS.md); a user range takes two. Every host record of the
//! profiler (user ranges, marks, steps, stream operations, operators,
//! allocator events) is stamped with [`Stamp::now`] instead, which reads
//! the CPU's time-stamp counter through `quanta` (where the CPU's counter
//! is invariant; `quanta` falls back to the OS clock elsewhere) and keeps
//! the raw ticks. A session turns ticks into host time when it builds the
//! trace ([`StampMap`]): from a pair (`Instant`, ticks) taken when the
//! session opened and a pair taken at each collection, so the tick rate is
//! measured over the recording itself and the mapping needs no separate
//! calibration.
//!
//! One tick source for all host records matters: records on one thread
//! nest (a range around a launch), and the trace checks that they do. Two
//! clocks, each converted with its own error, could put a range's end a
//! few nanoseconds before the end of the launch inside it; one monotone
//! mapping of one counter cannot. (Device times are calibrated against
//! `Instant` pairs, `clock.rs`; the mapping here lands on the same
//! `Instant` clock, to within the pairs' width, tens of nanoseconds.)

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The process's counter (its calibration runs once, on first use).
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// A host timestamp in raw counter ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Stamp(u64);

impl Stamp {
    /// Now.
    #[inline]
    pub(super) fn now() -> Stamp {
        Stamp(clock().raw())
    }
}

/// Maps one session's stamps onto host time; see the module docs.
#[derive(Debug, Clone, Copy)]
pub(super) struct StampMap {
    origin: (Instant, u64),
    latest: (Instant, u64),
}

/// The host time and the counter read together: the counter between two
/// `Instant`s, taken as their midpoint, the narrowest of a few tries (a
/// thread preempted inside one would widen it). The counter is set up
/// first, so its one-time calibration is not inside the pair.
fn pair() -> (Instant, u64) {
    let c = clock();
    let mut best: Option<(Duration, Instant, u64)> = None;
    for _ in 0..5 {
        let before = Instant::now();
        let ticks = c.raw();
        let width = before.elapsed();
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, ticks));
        }
    }
    best.map_or_else(|| (Instant::now(), c.raw()), |(_, at, ticks)| (at, ticks))
}

/// The shortest interval between the two pairs that measures the tick
/// rate; below it, `quanta`'s own calibration converts.
const MIN_SPAN: Duration = Duration::from_millis(1);

impl StampMap {
    /// A map whose origin is now.
    pub(super) fn new() -> Self {
        let origin = pair();
        StampMap {
            origin,
            latest: origin,
        }
    }

    /// Takes a new latest pair: stamps up to now convert by the rate
    /// measured from the origin to now.
    pub(super) fn refresh(&mut self) {
        self.latest = pair();
    }

    /// The host time of `stamp`.
    pub(super) fn instant(&self, stamp: Stamp) -> Instant {
        let (i0, r0) = self.origin;
        let (i1, r1) = self.latest;
        let span = i1.saturating_duration_since(i0);
        let ticks = stamp.0.wrapping_sub(r0) as i64;
        let ns = if span >= MIN_SPAN && r1 > r0 {
            (ticks as f64 * span.as_nanos() as f64 / (r1 - r0) as f64) as i64
        } else if ticks >= 0 {
            clock().delta_as_nanos(r0, stamp.0) as i64
        } else {
            -(clock().delta_as_nanos(stamp.0, r0) as i64)
        };
        if ns >= 0 {
            i0 + Duration::from_nanos(ns as u64)
        } else {
            i0.checked_sub(Duration::from_nanos(ns.unsigned_abs()))
                .unwrap_or(i0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Stamp, StampMap};
    use std::time::{Duration, Instant};

    #[test]
    fn stamps_land_between_the_instants_around_them() {
        let mut map = StampMap::new();
        let mut around = Vec::new();
        for _ in 0..5 {
            let before = Instant::now();
            let s = Stamp::now();
            let after = Instant::now();
            around.push((before, s, after));
            std::thread::sleep(Duration::from_millis(3));
        }
        map.refresh();
        // Within the rate's error over ~15 ms, plus the reads themselves.
        let slack = Duration::from_micros(100);
        for (before, s, after) in around {
            let t = map.instant(s);
            assert!(t + slack >= before, "{t:?} before {before:?}");
            assert!(t <= after + slack, "{t:?} after {after:?}");
        }
    }

    #[test]
    fn a_stamp_before_the_origin_maps_before_it() {
        let early = Stamp::now();
        std::thread::sleep(Duration::from_millis(2));
        let mut map = StampMap::new();
        std::thread::sleep(Duration::from_millis(2));
        map.refresh();
        assert!(map.instant(early) <= map.origin.0);
    }
}
