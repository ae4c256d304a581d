//! The record a trace keeps of the files it was opened from when several
//! were opened as one (one per rank of a distributed job): which lanes and
//! devices came from which file, where each file's clock was placed on
//! the common timeline, and how ([`Ranks`], [`Alignment`]).
//!
//! Note [Rank of a lane]: `file::merge_files` appends each file's lanes
//! and devices after the previous file's, so each file owns one
//! contiguous range of each table. The record keeps those ranges
//! ([`RankFile::lanes`], [`RankFile::devices`]), and
//! [`Ranks::file_of_lane`] / [`Ranks::file_of_device`] find a lane's or a
//! device's file by binary search. The labels merging writes (`rank 1 ·
//! python3 (pid 42)`, `rank 1 · cuda:0`) are for people: a label can hold
//! anything a file's process is called, so nothing parses them back.
//!
//! This module only describes; the alignment itself is computed where
//! files are merged (`file.rs`, feature `import`) with the collective
//! kernels [`ranks`](crate::ranks) finds.

use std::fmt;
use std::ops::Range;

/// How the clocks of several files opened as one are put on one timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Alignment {
    /// On the files' own clocks: a file's time `t` is placed at its
    /// [`Trace::origin_ns`](crate::Trace::origin_ns)` + t`, less the
    /// earliest origin. Skew between the ranks' clocks is kept, as it is
    /// when every rank's profiler reads one clock (one host, or hosts kept
    /// in step by NTP or PTP): Kineto's times are Unix-epoch times.
    #[default]
    Clock,
    /// On the ends of the ranks' collective kernels (NCCL, RCCL): the
    /// `n`-th collective of every rank is one collective, which ends on
    /// every rank at about the same time; each file is moved by the median
    /// of its ends' differences from the reference file's (rank 0's).
    Collectives,
    /// Every file on its own earliest event (as HolisticTraceAnalysis
    /// compares ranks whose clocks say nothing of each other).
    Start,
}

impl Alignment {
    /// Every alignment, in a stable order.
    pub const ALL: [Alignment; 3] = [Alignment::Clock, Alignment::Collectives, Alignment::Start];

    /// A short lower-case name (`clock`, `collectives`, `start`).
    pub fn name(self) -> &'static str {
        match self {
            Alignment::Clock => "clock",
            Alignment::Collectives => "collectives",
            Alignment::Start => "start",
        }
    }

    /// The alignment with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Alignment> {
        Alignment::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for Alignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The files a trace was opened from, when it was opened from several
/// (see `file::load_traces_with`), and how their clocks were aligned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ranks {
    /// The alignment applied, after falling back (see
    /// `file::load_traces_with`): [`Alignment::Clock`] when every file's
    /// origin is known and their recordings share an instant on those
    /// clocks, else [`Alignment::Collectives`] when every file has
    /// collectives, else [`Alignment::Start`].
    pub alignment: Alignment,
    /// How many collectives of each file were matched: the first
    /// `matched` collectives of every file (the common prefix, when files
    /// have different numbers), 0 when some file has none.
    pub matched: u64,
    /// One entry per file, in the order the files were given. Skews are
    /// measured against the reference file: the one whose
    /// `distributedInfo.rank` is 0, else the first.
    pub files: Vec<RankFile>,
}

/// One file of several opened as one trace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankFile {
    /// The label its lanes' groups and its devices carry: `rank N` from
    /// the file's `distributedInfo.rank`, else the file's name.
    pub label: String,
    /// The file's `distributedInfo.rank`, when it has one.
    pub rank: Option<i64>,
    /// Its lanes: indices into [`Trace::lanes`](crate::Trace::lanes).
    pub lanes: Range<u32>,
    /// Its devices: indices into [`Trace::devices`](crate::Trace::devices).
    pub devices: Range<u32>,
    /// The file's own time of its t=0 in ns (its trace's
    /// [`origin_ns`](crate::Trace::origin_ns)), when known.
    pub origin_ns: Option<i64>,
    /// Where its t=0 lies on the merged timeline: a time `t` of the file
    /// is `t + offset_ns` in the merged trace.
    pub offset_ns: u64,
    /// How far this file's clock is ahead of the reference file's (see
    /// [`Ranks::files`]), in ns, as the ends of their collectives say
    /// (whatever the alignment applied): the median over the matched
    /// collectives of (end here - end in the reference file), each on its
    /// file's own clock (or from each file's start when some origin is
    /// unknown). `None` when some file has no collectives.
    pub skew_ns: Option<i64>,
    /// Collective kernels found on its devices.
    pub collectives: u64,
}

impl Ranks {
    /// The index in [`files`](Self::files) of the file lane `lane` came
    /// from (Note [Rank of a lane]).
    pub fn file_of_lane(&self, lane: u32) -> Option<usize> {
        find(&self.files, lane, |f| &f.lanes)
    }

    /// The index in [`files`](Self::files) of the file device `device`
    /// came from.
    pub fn file_of_device(&self, device: u32) -> Option<usize> {
        find(&self.files, device, |f| &f.devices)
    }
}

/// The file whose range holds `i`; ranges are in increasing order, as
/// merging makes them (a hand-made record that is not still finds a
/// holder when it has one, by falling back to a scan).
fn find(files: &[RankFile], i: u32, range: impl Fn(&RankFile) -> &Range<u32>) -> Option<usize> {
    let at = files.partition_point(|f| range(f).end <= i);
    if files.get(at).is_some_and(|f| range(f).contains(&i)) {
        return Some(at);
    }
    files.iter().position(|f| range(f).contains(&i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(lanes: Range<u32>, devices: Range<u32>) -> RankFile {
        RankFile {
            lanes,
            devices,
            ..RankFile::default()
        }
    }

    #[test]
    fn lanes_and_devices_find_their_file() {
        let ranks = Ranks {
            files: vec![file(0..3, 0..1), file(3..3, 1..1), file(3..7, 1..3)],
            ..Ranks::default()
        };
        let of_lane: Vec<Option<usize>> = (0..8).map(|l| ranks.file_of_lane(l)).collect();
        assert_eq!(
            of_lane,
            [
                Some(0),
                Some(0),
                Some(0),
                Some(2),
                Some(2),
                Some(2),
                Some(2),
                None
            ]
        );
        let of_device: Vec<Option<usize>> = (0..4).map(|d| ranks.file_of_device(d)).collect();
        assert_eq!(of_device, [Some(0), Some(2), Some(2), None]);
        for a in Alignment::ALL {
            assert_eq!(Alignment::from_name(a.name()), Some(a));
        }
    }
}
