//! The ranks of a distributed job, side by side: their collective kernels
//! (what lines their clocks up when the clocks themselves disagree), and
//! per rank the time in communication and computation, how much of the
//! communication hides behind computation, the clock skew found, and
//! which rank keeps the others waiting at collectives.
//!
//! A rank is one of the files a trace was opened from (its
//! [`Ranks`] record, Note [Rank of a lane] in `model/ranks.rs`); a trace
//! opened from one file (or recorded by Keel) is one rank.
//!
//! - Collectives are the kernels NCCL and RCCL run ([`is_collective`]):
//!   names starting `ncclKernel`, `ncclDevKernel` (NCCL 2.19 and later) or
//!   `rccl`, with or without the `void ` a demangled template name starts
//!   with, on device lanes. The `n`-th collective of every rank (by start)
//!   is taken to be one collective: every rank issues the same
//!   collectives in the same order, which NCCL requires of a process
//!   group. Ranks with different numbers (profile windows that close at
//!   different points) are compared over the common prefix, and how many
//!   were compared is reported.
//! - Communication is the time a rank's GPU runs a collective,
//!   computation the time it runs any other kernel (copies and memsets are
//!   neither), each counted once where kernels overlap; their overlap is
//!   the time both run, and exposed communication the communication that
//!   nothing computes beside. With several GPUs in one rank's file each
//!   GPU is counted on its own and the times added.
//! - A collective ends on every rank at about the same time (each waits
//!   for the last to arrive), so the differences of their ends measure the
//!   ranks' clock skew ([`median_skew`]), and after taking that away the
//!   rank whose collective starts last is the one the others waited for.
//!   The late rank is the one last most often, flagged when it is last in
//!   more than half of the collectives (ranks late at random share the
//!   last place about evenly); its lag is how much later than the median
//!   start of the other ranks it started, on average over the collectives
//!   it was last in.
//!
//! Nothing here reads files or aligns anything: [`file`](mod@crate::file)
//! aligns ranks when it opens them, with [`collectives`] and
//! [`median_skew`].

use crate::model::Activity;
use crate::model::{Alignment, LaneKind, Ranks, Trace};

/// The name prefixes of collective kernels ([`is_collective`]).
pub const COLLECTIVE_PREFIXES: [&str; 3] = ["ncclKernel", "ncclDevKernel", "rccl"];

/// Whether a device kernel of this name is a collective of NCCL or RCCL
/// (see the module docs).
pub fn is_collective(name: &str) -> bool {
    let name = name.strip_prefix("void ").unwrap_or(name);
    COLLECTIVE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// One collective kernel on a device lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collective {
    /// Its lane, an index into [`Trace::lanes`].
    pub lane: u32,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
}

/// Which rank lane `lane` belongs to: its file's index in the trace's
/// [`Ranks`] record, 0 without one. `None` for a lane no file holds.
fn rank_of_lane(ranks: Option<&Ranks>, lane: u32) -> Option<usize> {
    match ranks {
        Some(r) => r.file_of_lane(lane),
        None => Some(0),
    }
}

/// The number of ranks of `trace` (1 without a [`Ranks`] record).
fn rank_count(trace: &Trace) -> usize {
    trace.ranks.as_ref().map_or(1, |r| r.files.len())
}

/// The collective kernels of each rank of `trace`, in order of start
/// (then end): one list per file of its [`Ranks`] record, or one list
/// for a trace of one file.
pub fn collectives(trace: &Trace) -> Vec<Vec<Collective>> {
    let ranks = trace.ranks.as_ref();
    let mut out = vec![Vec::new(); rank_count(trace)];
    for s in &trace.spans {
        let on_device = trace
            .lanes
            .get(s.lane as usize)
            .is_some_and(|l| matches!(l.kind, LaneKind::Stream { .. }));
        if !on_device || s.activity() != Some(Activity::Kernel) || !is_collective(&s.name) {
            continue;
        }
        if let Some(list) = rank_of_lane(ranks, s.lane).and_then(|r| out.get_mut(r)) {
            list.push(Collective {
                lane: s.lane,
                start_ns: s.start_ns,
                end_ns: s.end_ns(),
            });
        }
    }
    for list in &mut out {
        list.sort_unstable_by_key(|c| (c.start_ns, c.end_ns, c.lane));
    }
    out
}

/// The median of `values` (the mean of the middle two, rounded down, for
/// an even count); `None` for none.
fn median(values: &mut [i64]) -> Option<i64> {
    values.sort_unstable();
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => {
            Some(((i128::from(values[n / 2 - 1]) + i128::from(values[n / 2])).div_euclid(2)) as i64)
        }
    }
}

/// How far `other`'s clock is ahead of `reference`'s, in ns, by their
/// first `n` collectives: the median of the differences of their ends
/// (robust to the odd collective that one rank's profiler timed late).
/// `None` when `n` is 0 or either has fewer than `n`.
pub fn median_skew(reference: &[Collective], other: &[Collective], n: usize) -> Option<i64> {
    let (reference, other) = (reference.get(..n)?, other.get(..n)?);
    let mut diffs: Vec<i64> = reference
        .iter()
        .zip(other)
        .map(|(r, o)| clamp(i128::from(o.end_ns) - i128::from(r.end_ns)))
        .collect();
    median(&mut diffs)
}

/// `v` as an `i64`, saturating.
pub(crate) fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// One rank's figures ([`RankAnalysis`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankStats {
    /// The file's label (`rank 3`, or its name); `trace` for a trace of
    /// one file.
    pub label: String,
    /// The file's `distributedInfo.rank`, when it has one.
    pub rank: Option<i64>,
    /// Collective kernels on its devices.
    pub collectives: u64,
    /// Time its GPUs run collectives, ns.
    pub comm_ns: u64,
    /// Time its GPUs run other kernels, ns.
    pub compute_ns: u64,
    /// Time its GPUs run both, ns.
    pub overlap_ns: u64,
    /// Communication with no computation beside it
    /// (`comm_ns - overlap_ns`), ns.
    pub exposed_comm_ns: u64,
    /// Its clock's skew against the reference rank's, as found when the files
    /// were opened ([`RankFile::skew_ns`](crate::RankFile::skew_ns)).
    pub skew_ns: Option<i64>,
    /// Of the compared collectives, how many it started last.
    pub last_in: u64,
    /// On average over those, how much later than the median start of
    /// the other ranks it started, ns (0 when it was never last).
    pub lag_ns: u64,
}

/// The ranks of a trace side by side (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankAnalysis {
    /// How the ranks' clocks were aligned (`None` for a trace of one file).
    pub alignment: Option<Alignment>,
    /// Collectives compared per rank: the common prefix of the ranks'
    /// collectives (0 with one rank, or when a rank has none).
    pub compared: u64,
    /// One per rank, in the order of the trace's files.
    pub ranks: Vec<RankStats>,
    /// The index in `ranks` of the rank flagged as entering collectives
    /// last: last in more than half of the compared collectives.
    pub late: Option<usize>,
}

/// Time in communication, computation and both, from the kernels of one
/// GPU as (start, end, is a collective).
fn comm_compute(mut kernels: Vec<(u64, u64, bool)>) -> (u64, u64, u64) {
    // A sweep over starts and ends, counting what runs.
    let mut points: Vec<(u64, i8, bool)> = Vec::with_capacity(kernels.len() * 2);
    for (start, end, comm) in kernels.drain(..) {
        points.push((start, 1, comm));
        points.push((end, -1, comm));
    }
    points.sort_unstable_by_key(|&(t, _, _)| t);
    let (mut comm, mut compute, mut both) = (0u64, 0u64, 0u64);
    let (mut running_comm, mut running_compute) = (0i64, 0i64);
    let mut last = points.first().map_or(0, |p| p.0);
    for (t, delta, is_comm) in points {
        let dt = t - last;
        if running_comm > 0 {
            comm += dt;
        }
        if running_compute > 0 {
            compute += dt;
        }
        if running_comm > 0 && running_compute > 0 {
            both += dt;
        }
        last = t;
        if is_comm {
            running_comm += i64::from(delta);
        } else {
            running_compute += i64::from(delta);
        }
    }
    (comm, compute, both)
}

impl RankAnalysis {
    /// Analyses the ranks of `trace` (see the module docs).
    pub fn new(trace: &Trace) -> RankAnalysis {
        let record = trace.ranks.as_ref();
        let n = rank_count(trace);
        let mut ranks: Vec<RankStats> = match record {
            Some(r) => r
                .files
                .iter()
                .map(|f| RankStats {
                    label: f.label.clone(),
                    rank: f.rank,
                    skew_ns: f.skew_ns,
                    ..RankStats::default()
                })
                .collect(),
            None => vec![RankStats {
                label: "trace".to_owned(),
                ..RankStats::default()
            }],
        };

        // Kernels per device; a device's rank is its file's.
        let mut per_device: Vec<Vec<(u64, u64, bool)>> = vec![Vec::new(); trace.devices.len()];
        for s in &trace.spans {
            let Some(LaneKind::Stream { device, .. }) =
                trace.lanes.get(s.lane as usize).map(|l| &l.kind)
            else {
                continue;
            };
            if s.activity() != Some(Activity::Kernel) {
                continue;
            }
            if let Some(list) = per_device.get_mut(*device as usize) {
                list.push((s.start_ns, s.end_ns(), is_collective(&s.name)));
            }
        }
        for (device, kernels) in per_device.into_iter().enumerate() {
            let rank = match record {
                Some(r) => r.file_of_device(device as u32),
                None => Some(0),
            };
            let Some(stats) = rank.and_then(|r| ranks.get_mut(r)) else {
                continue;
            };
            let (comm, compute, both) = comm_compute(kernels);
            stats.comm_ns += comm;
            stats.compute_ns += compute;
            stats.overlap_ns += both;
            stats.exposed_comm_ns += comm - both;
        }

        let lists = collectives(trace);
        for (stats, list) in ranks.iter_mut().zip(&lists) {
            stats.collectives = list.len() as u64;
        }
        let compared = if n > 1 {
            lists.iter().map(Vec::len).min().unwrap_or(0)
        } else {
            0
        };
        let late = last_in(&lists, compared, &mut ranks);
        RankAnalysis {
            alignment: record.map(|r| r.alignment),
            compared: compared as u64,
            ranks,
            late,
        }
    }

    /// The analysis as tab-separated text, stable for scripts: two
    /// `key<TAB>value` lines, then a table with a header row and one row
    /// per rank (times in microseconds with three decimals, exact from the
    /// ns; `-` for a value not known), here with the tabs shown as two
    /// spaces:
    ///
    /// ```text
    /// alignment  collectives
    /// compared  48
    /// file  rank  label  collectives  comm_us  compute_us  overlap_us  exposed_comm_us  skew_us  last_in  lag_us  late
    /// 0  0  rank 0  48  1520.004  61804.100  1402.811  117.193  0.000  0  0.000  no
    /// 3  3  rank 3  48  1402.500  61804.100  1380.002  22.498  -2.504  48  41.250  yes
    /// ```
    ///
    /// `alignment` is `clock`, `collectives`, `start`, or `none` for a
    /// trace of one file; tabs and line breaks in labels become spaces.
    pub fn text(&self) -> String {
        let mut out = format!(
            "alignment\t{}\ncompared\t{}\n",
            self.alignment.map_or("none", Alignment::name),
            self.compared
        );
        out.push_str(
            "file\trank\tlabel\tcollectives\tcomm_us\tcompute_us\toverlap_us\texposed_comm_us\tskew_us\tlast_in\tlag_us\tlate\n",
        );
        for (i, r) in self.ranks.iter().enumerate() {
            let label: String = r
                .label
                .chars()
                .map(|c| {
                    if c == '\t' || c == '\n' || c == '\r' {
                        ' '
                    } else {
                        c
                    }
                })
                .collect();
            out.push_str(&format!(
                "{i}\t{}\t{label}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                r.rank.map_or("-".to_owned(), |n| n.to_string()),
                r.collectives,
                micros(i128::from(r.comm_ns)),
                micros(i128::from(r.compute_ns)),
                micros(i128::from(r.overlap_ns)),
                micros(i128::from(r.exposed_comm_ns)),
                r.skew_ns.map_or("-".to_owned(), |s| micros(i128::from(s))),
                r.last_in,
                micros(i128::from(r.lag_ns)),
                if self.late == Some(i) { "yes" } else { "no" }
            ));
        }
        out
    }
}

/// `ns` as microseconds with exactly three decimals.
fn micros(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

/// Counts, over the first `compared` collectives of every rank, which rank
/// started each last once the clock skew the collectives' ends show is
/// taken away, into `ranks`' `last_in` and `lag_ns`; returns the rank
/// flagged late (see the module docs).
fn last_in(lists: &[Vec<Collective>], compared: usize, ranks: &mut [RankStats]) -> Option<usize> {
    if compared == 0 || lists.len() < 2 {
        return None;
    }
    // The skew left on this timeline (about 0 when aligned on collectives,
    // the clocks' own skew when aligned on clocks).
    let skew: Vec<i64> = lists
        .iter()
        .map(|l| median_skew(&lists[0], l, compared).unwrap_or(0))
        .collect();
    let mut lag_total = vec![0i128; lists.len()];
    let mut starts: Vec<i128> = Vec::with_capacity(lists.len());
    let mut others: Vec<i64> = Vec::with_capacity(lists.len());
    for n in 0..compared {
        starts.clear();
        starts.extend(
            lists
                .iter()
                .zip(&skew)
                .map(|(l, &s)| i128::from(l[n].start_ns) - i128::from(s)),
        );
        let Some((last, &latest)) = starts
            .iter()
            .enumerate()
            .max_by_key(|&(i, &t)| (t, std::cmp::Reverse(i)))
        else {
            continue;
        };
        others.clear();
        others.extend(
            starts
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != last)
                .map(|(_, &t)| clamp(t)),
        );
        let typical = median(&mut others).unwrap_or(clamp(latest));
        if let Some(r) = ranks.get_mut(last) {
            r.last_in += 1;
        }
        lag_total[last] += latest - i128::from(typical);
    }
    for (r, total) in ranks.iter_mut().zip(&lag_total) {
        if r.last_in > 0 {
            r.lag_ns = u64::try_from(total / i128::from(r.last_in)).unwrap_or(0);
        }
    }
    let (most, r) = ranks
        .iter()
        .enumerate()
        .max_by_key(|&(i, r)| (r.last_in, r.lag_ns, std::cmp::Reverse(i)))?;
    (r.last_in * 2 > compared as u64).then_some(most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_are_told_by_their_names() {
        for name in [
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
            "void ncclKernel_ReduceScatter_RING_SIMPLE_Sum_float<2>(ncclDevComm*)",
            "rcclGenericKernel<1, false>(ncclDevComm*)",
        ] {
            assert!(is_collective(name), "{name}");
        }
        for name in [
            "nccl:all_reduce",
            "void at::native::vectorized_elementwise_kernel<4>",
            "Memcpy DtoD (Device -> Device)",
            "my_ncclKernel",
        ] {
            assert!(!is_collective(name), "{name}");
        }
    }

    #[test]
    fn medians_resist_outliers() {
        let c = |end_ns| Collective {
            lane: 0,
            start_ns: 0,
            end_ns,
        };
        let a: Vec<Collective> = [100, 200, 300, 400, 500].map(c).to_vec();
        let b: Vec<Collective> = [150, 250, 350, 9_000, 548].map(c).to_vec();
        assert_eq!(median_skew(&a, &b, 5), Some(50));
        assert_eq!(median_skew(&a, &b, 4), Some(50));
        assert_eq!(median_skew(&b, &a, 2), Some(-50));
        assert_eq!(median_skew(&a, &b, 6), None);
        assert_eq!(median_skew(&a, &b, 0), None);
        assert_eq!(micros(-2_504), "-2.504");
        assert_eq!(micros(41_250), "41.250");
    }

    #[test]
    fn overlap_counts_each_instant_once() {
        // Compute 0..100 and 50..120 (overlapping each other); comm 90..200
        // and 150..160 inside it.
        let (comm, compute, both) = comm_compute(vec![
            (0, 100, false),
            (50, 120, false),
            (90, 200, true),
            (150, 160, true),
        ]);
        assert_eq!((comm, compute, both), (110, 120, 30));
        assert_eq!(comm_compute(Vec::new()), (0, 0, 0));
    }
}
