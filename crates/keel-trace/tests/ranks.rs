//! Ranks of a distributed job on one clock: the origin every import keeps,
//! ranks made from the real GPT-2 trace with known clock skews, profile
//! windows and a late rank (`gen/ranks.rs`), aligned on their clocks, on
//! their collectives and on their starts, and analysed per rank against a
//! brute-force count over the spans; the record of the files a trace came
//! from, through both formats (golden files) and malformed.

mod common;

use common::{section_body, starts_of};

#[path = "gen/ranks.rs"]
mod gen_ranks;

use std::path::{Path, PathBuf};

use gen_ranks::{COLLECTIVE, Job, MARKED_COUNT};
use keel_trace::file::{load_traces_with, merge_files_with};
use keel_trace::ranks::{RankAnalysis, collectives};
use keel_trace::{
    Alignment, Lane, LaneKind, RankFile, Ranks, Span, SpanKind, Trace, TraceDevice, load_trace,
    load_traces,
};

/// `baseTimeNanoseconds` of the real trace.
const BASE_NS: i64 = 1_790_857_026_000_000_000;
/// Its earliest `ts` (the profiler's own span), in ns.
const FIRST_TS_NS: i64 = 4_983_219_173_160_350;

fn import_data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import")
        .join(name)
}

/// A temporary directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The ranks every test here opens: four, the last one late. Made once
/// per test run into Cargo's directory for test files (each written
/// under a temporary name and renamed, so runs at the same time never
/// read half a file).
fn ranks_files() -> &'static (Job, Vec<PathBuf>) {
    static FILES: std::sync::OnceLock<(Job, Vec<PathBuf>)> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let job = Job::new(4);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ranks");
        std::fs::create_dir_all(&dir).expect("a directory for test files");
        let paths = gen_ranks::make(&gen_ranks::source(), &job)
            .into_iter()
            .enumerate()
            .map(|(r, bytes)| {
                let path = dir.join(format!("rank{r}.pt.trace.json"));
                let partial = dir.join(format!("rank{r}.{}.partial", std::process::id()));
                std::fs::write(&partial, bytes).expect("write a rank");
                std::fs::rename(&partial, &path).expect("rename a rank");
                path
            })
            .collect();
        (job, paths)
    })
}

fn record(t: &Trace) -> &Ranks {
    t.ranks.as_ref().expect("a record of the files")
}

/// The median of `v`, as the alignment takes it.
fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]).div_euclid(2)
    }
}

/// Per rank, the differences of its collectives' ends from rank 0's on
/// the merged timeline.
fn end_differences(t: &Trace) -> Vec<Vec<i64>> {
    let lists = collectives(t);
    lists
        .iter()
        .map(|l| {
            l.iter()
                .zip(&lists[0])
                .map(|(c, c0)| c.end_ns as i64 - c0.end_ns as i64)
                .collect()
        })
        .collect()
}

/// Communication, computation and their overlap on the device lanes of
/// `lanes`, by brute force: every elementary interval between two span
/// boundaries, checked against every kernel.
fn brute_force(t: &Trace, lanes: std::ops::Range<u32>) -> (u64, u64, u64) {
    let kernels: Vec<(u64, u64, bool)> = t
        .spans
        .iter()
        .filter(|s| {
            lanes.contains(&s.lane)
                && s.kind == SpanKind::Kernel
                && matches!(t.lanes[s.lane as usize].kind, LaneKind::Stream { .. })
        })
        .map(|s| (s.start_ns, s.end_ns(), s.name.starts_with(COLLECTIVE)))
        .collect();
    let mut points: Vec<u64> = kernels.iter().flat_map(|k| [k.0, k.1]).collect();
    points.sort_unstable();
    points.dedup();
    let (mut comm, mut compute, mut both) = (0, 0, 0);
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let covered = |c: bool| kernels.iter().any(|k| k.2 == c && k.0 <= a && k.1 >= b);
        let (m, p) = (covered(true), covered(false));
        comm += u64::from(m) * (b - a);
        compute += u64::from(p) * (b - a);
        both += u64::from(m && p) * (b - a);
    }
    (comm, compute, both)
}

/// What holds of the late rank (file `late` of the trace) whatever the
/// alignment: it is last in every collective, by the delay it was given
/// (the others' starts are compared once the skews the ends show are
/// taken away, each within two jitters).
fn late_rank_is_flagged(t: &Trace, job: &Job, late: usize) {
    let a = RankAnalysis::new(t);
    assert_eq!(a.compared, MARKED_COUNT as u64);
    assert_eq!(a.late, Some(late), "{}", a.text());
    let (index, late) = (late, &a.ranks[late]);
    assert_eq!(late.last_in, MARKED_COUNT as u64);
    let mean_delay: u64 = (0..MARKED_COUNT).map(Job::delay_ns).sum::<u64>() / MARKED_COUNT as u64;
    let tolerance = 4 * job.jitter_ns;
    assert!(
        late.lag_ns.abs_diff(mean_delay) <= tolerance,
        "lag {} ns, delays {mean_delay} ns on average",
        late.lag_ns
    );
    for (i, r) in a.ranks.iter().enumerate() {
        if i != index {
            assert_eq!(r.last_in, 0, "rank {i}");
        }
    }
}

/// Four ranks on their files' clocks (the default): the skews stay on
/// the timeline, the collectives measure them, the late rank is flagged,
/// and each rank's times add up against a brute-force count.
#[test]
fn ranks_on_their_clocks_keep_their_skews() {
    let (job, paths) = ranks_files();
    let t = load_traces(paths).expect("four ranks");
    assert_eq!(t.check(), Ok(()));
    let ranks = record(&t);
    assert_eq!(ranks.alignment, Alignment::Clock);
    assert_eq!(ranks.matched, MARKED_COUNT as u64);
    let labels: Vec<(&str, Option<i64>, u64)> = ranks
        .files
        .iter()
        .map(|f| (f.label.as_str(), f.rank, f.collectives))
        .collect();
    assert_eq!(
        labels,
        [
            ("rank 0", Some(0), 50),
            ("rank 1", Some(1), 50),
            ("rank 2", Some(2), 50),
            ("rank 3", Some(3), 50)
        ]
    );
    // Rank 0 is the real trace's clock: its epoch time of its first event.
    assert_eq!(ranks.files[0].origin_ns, Some(BASE_NS + FIRST_TS_NS));
    let origins: Vec<i64> = ranks
        .files
        .iter()
        .map(|f| f.origin_ns.expect("an origin"))
        .collect();
    let least = *origins.iter().min().expect("origins");
    assert_eq!(t.origin_ns, Some(least), "the shared clock's t=0");
    for (r, f) in ranks.files.iter().enumerate() {
        // On the shared clock, each file where its origin says; its
        // window opens its trim (and a little: the next event) later.
        assert_eq!(f.offset_ns as i64, origins[r] - least, "rank {r}");
        let opened = origins[r] - job.skews_ns[r] - (BASE_NS + FIRST_TS_NS);
        assert!(
            (job.trims_ns[r] as i64..job.trims_ns[r] as i64 + 50_000).contains(&opened),
            "rank {r} opens {opened} ns after rank 0's first event"
        );
        // Every rank's lanes and devices are its own.
        for lane in f.lanes.clone() {
            assert_eq!(ranks.file_of_lane(lane), Some(r));
            let group = &t.lanes[lane as usize].group;
            assert!(group.is_empty() || group.starts_with(&f.label), "{group}");
        }
        for device in f.devices.clone() {
            assert!(t.devices[device as usize].device.starts_with(&f.label));
        }
    }
    // The skews found against the known ones, and kept on the timeline.
    let tolerance = 2 * job.jitter_ns as i64;
    let diffs = end_differences(&t);
    for (r, diffs) in diffs.into_iter().enumerate() {
        let known = job.skews_ns[r] - job.skews_ns[0];
        let found = ranks.files[r].skew_ns.expect("a skew");
        assert!(
            (found - known).abs() <= tolerance,
            "rank {r}: found {found} ns, known {known} ns"
        );
        let kept = median(diffs);
        assert!(
            (kept - known).abs() <= tolerance,
            "rank {r}: collectives end {kept} ns after rank 0's, skew {known} ns"
        );
    }
    late_rank_is_flagged(&t, job, job.late);

    // Per rank: comm, compute and overlap as a brute-force count has them.
    let a = RankAnalysis::new(&t);
    for (r, f) in ranks.files.iter().enumerate() {
        let s = &a.ranks[r];
        let (comm, compute, both) = brute_force(&t, f.lanes.clone());
        assert_eq!(
            (s.comm_ns, s.compute_ns, s.overlap_ns),
            (comm, compute, both),
            "rank {r}"
        );
        assert_eq!(s.exposed_comm_ns + s.overlap_ns, s.comm_ns);
        assert!(s.overlap_ns > 0, "collectives run beside computation");
        assert_eq!(s.skew_ns, f.skew_ns);
        assert_eq!(s.collectives, 50);
    }
    // Ranks that waited for the late one spent longer in collectives.
    assert!(a.ranks[0].comm_ns > a.ranks[job.late].comm_ns);

    // The text for scripts: the header, and one row per rank with the
    // late one marked.
    let text = a.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "alignment\tclock");
    assert_eq!(lines[1], "compared\t50");
    assert_eq!(
        lines[2],
        "file\trank\tlabel\tcollectives\tcomm_us\tcompute_us\toverlap_us\texposed_comm_us\tskew_us\tlast_in\tlag_us\tlate"
    );
    assert_eq!(lines.len(), 3 + 4);
    for (r, line) in lines[3..].iter().enumerate() {
        let cells: Vec<&str> = line.split('\t').collect();
        assert_eq!(cells.len(), 12, "{line}");
        assert_eq!(
            cells[..4],
            [
                &*r.to_string(),
                &*r.to_string(),
                &*format!("rank {r}"),
                "50"
            ]
        );
        assert_eq!(cells[11], if r == job.late { "yes" } else { "no" });
        let us: f64 = cells[4].parse().expect("comm_us");
        assert_eq!((us * 1000.0).round() as u64, a.ranks[r].comm_ns);
    }
}

/// The same ranks aligned on their collectives: the ends line up within
/// the jitter, the skews found are the same, and the merged trace counts
/// on rank 0's clock, whatever the order of the files.
#[test]
fn ranks_aligned_on_collectives_line_their_ends_up() {
    let (job, paths) = ranks_files();
    let t = load_traces_with(paths, Alignment::Collectives).expect("four ranks");
    assert_eq!(t.check(), Ok(()));
    let ranks = record(&t);
    assert_eq!(ranks.alignment, Alignment::Collectives);
    let jitter = job.jitter_ns as i64;
    for (r, diffs) in end_differences(&t).into_iter().enumerate() {
        assert!(median(diffs.clone()).abs() <= 1, "rank {r}");
        assert!(
            diffs.iter().all(|d| d.abs() <= 4 * jitter),
            "rank {r}: {:?}",
            diffs.iter().max_by_key(|d| d.abs())
        );
        let known = job.skews_ns[r] - job.skews_ns[0];
        let found = ranks.files[r].skew_ns.expect("a skew");
        assert!((found - known).abs() <= 2 * jitter, "rank {r}");
    }
    let f0 = &ranks.files[0];
    assert_eq!(
        t.origin_ns,
        Some(f0.origin_ns.expect("an origin") - f0.offset_ns as i64),
        "rank 0's clock"
    );
    assert!(ranks.files.iter().any(|f| f.offset_ns == 0));
    late_rank_is_flagged(&t, job, job.late);

    // Rank 0 is the reference wherever its file is.
    let back =
        load_traces_with(&[&paths[3], &paths[0]], Alignment::Collectives).expect("two ranks");
    let files = &record(&back).files;
    assert_eq!(files[0].label, "rank 3");
    assert_eq!(files[0].skew_ns, ranks.files[3].skew_ns);
    assert_eq!(files[1].skew_ns, Some(0));
    assert_eq!(
        files[0].offset_ns as i64 - files[1].offset_ns as i64,
        ranks.files[3].offset_ns as i64 - ranks.files[0].offset_ns as i64
    );
    // Either way, origin + t is rank 0's clock: its first span is at the
    // same time on it.
    let first_of = |t: &Trace, file: usize| {
        let lanes = record(t).files[file].lanes.clone();
        let first = t
            .spans
            .iter()
            .filter(|s| lanes.contains(&s.lane))
            .map(|s| s.start_ns)
            .min();
        t.origin_ns.expect("an origin") + first.expect("spans") as i64
    };
    assert_eq!(first_of(&back, 1), first_of(&t, 0));
    assert_eq!(
        first_of(&t, 0),
        ranks.files[0].origin_ns.expect("an origin")
    );
    late_rank_is_flagged(&back, job, 0);

    // On their starts: every rank's first event at 0.
    let t = load_traces_with(&[&paths[0], &paths[3]], Alignment::Start).expect("two ranks");
    let ranks = record(&t);
    assert_eq!(ranks.alignment, Alignment::Start);
    assert_eq!(t.origin_ns, None, "no one clock");
    for (r, f) in ranks.files.iter().enumerate() {
        assert_eq!(f.offset_ns, 0);
        let first = t
            .spans
            .iter()
            .filter(|s| f.lanes.contains(&s.lane))
            .map(|s| s.start_ns)
            .min();
        assert_eq!(first, Some(0), "rank {r}");
    }
    late_rank_is_flagged(&t, job, 1);
}

/// Files whose origin is unknown (native files written without one) fall
/// back from clocks to collectives; the skews are then those of the
/// files' starts.
#[test]
fn without_origins_clocks_fall_back_to_collectives() {
    let (job, paths) = ranks_files();
    let dir = TempDir::new("ranks-no-origin");
    let mut natives = Vec::new();
    let mut origins = Vec::new();
    for (r, path) in paths.iter().enumerate() {
        let mut t = load_trace(path).expect("a rank");
        origins.push(t.origin_ns.expect("an origin"));
        t.origin_ns = None;
        let native = dir.0.join(format!("rank{r}.keeltrace"));
        keel_trace::save_trace(&t, &native).expect("save");
        natives.push(native);
    }
    let t = load_traces(&natives).expect("four native files");
    let ranks = record(&t);
    assert_eq!(ranks.alignment, Alignment::Collectives);
    assert_eq!(t.origin_ns, None);
    for r in 0..4 {
        // From each file's start: the clocks' skew less how much later its
        // first event came on its own clock.
        let known = (job.skews_ns[r] - job.skews_ns[0]) - (origins[r] - origins[0]);
        let found = ranks.files[r].skew_ns.expect("a skew");
        assert!(
            (found - known).abs() <= 2 * job.jitter_ns as i64,
            "rank {r}: found {found}, known {known}"
        );
        // Native files carry no rank: labelled by file name.
        assert_eq!(ranks.files[r].label, format!("rank{r}.keeltrace"));
        assert_eq!(ranks.files[r].rank, None);
    }
    late_rank_is_flagged(&t, job, job.late);

    // Asking for collectives with a file that has none is an error that
    // names it.
    let e = load_traces_with(
        &[natives[0].clone(), import_data("kineto.json")],
        Alignment::Collectives,
    )
    .expect_err("no collectives in kineto.json");
    let message = e.to_string();
    assert!(message.contains("kineto.json (rank 0)"), "{message}");
    assert!(
        message.contains("expected collective kernels (names starting ncclKernel, ncclDevKernel, rccl) to align the ranks on, found none among its 2 device kernels"),
        "{message}"
    );
    // Clocks that cannot be the same (the small trace is from 2023) and a
    // file without collectives: each on its start.
    let t = load_traces(&[paths[0].clone(), import_data("kineto.json")]).expect("two files");
    assert_eq!(record(&t).alignment, Alignment::Start);
    assert_eq!(record(&t).matched, 0);
    assert_eq!(record(&t).files[1].skew_ns, None);
}

/// Every import keeps its file's own time of t=0: Kineto's
/// `baseTimeNanoseconds` plus the earliest `ts`, or the earliest `ts`
/// alone; unknown when the base is not an integer.
#[test]
fn imports_keep_their_clock_origin() {
    let t = load_trace(&import_data("gpt2_train_h200.pt.trace.json.gz")).expect("import");
    assert_eq!(t.origin_ns, Some(BASE_NS + FIRST_TS_NS));
    // That is Unix time in 2026 (the recording's day, 2026-11-28).
    let days = (BASE_NS + FIRST_TS_NS) / 86_400_000_000_000;
    assert_eq!(days, 20_785);
    let t = load_trace(&import_data("kineto.json")).expect("import");
    assert_eq!(t.origin_ns, Some(1_700_000_000_000_000_000 + 990_000));
    let t = load_trace(&import_data("chrome_misc.json")).expect("import");
    let first = t.spans.iter().map(|s| s.start_ns).min();
    assert_eq!(first, Some(0));
    assert!(t.origin_ns.is_some());
    let text = std::fs::read_to_string(import_data("kineto.json")).expect("fixture");
    for (base, origin) in [
        ("\"x\"", None),
        ("1.5e18", None),
        ("-5000", Some(-5000 + 990_000)),
    ] {
        let bytes = text.replace("1700000000000000000", base);
        let t = keel_trace::file::from_bytes(bytes.as_bytes()).expect("import");
        assert_eq!(t.origin_ns, origin, "baseTimeNanoseconds {base}");
    }
    let bytes = text.replace("\"baseTimeNanoseconds\"", "\"somethingElse\"");
    let t = keel_trace::file::from_bytes(bytes.as_bytes()).expect("import");
    assert_eq!(t.origin_ns, Some(990_000), "the earliest ts alone");
}

fn lane(kind: LaneKind, name: &str, group: &str) -> Lane {
    Lane {
        kind,
        name: name.to_owned(),
        group: group.to_owned(),
    }
}

fn kernel(lane: u32, name: &str, start_ns: u64, dur_ns: u64) -> Span {
    Span {
        lane,
        name: name.into(),
        kind: SpanKind::Kernel,
        start_ns,
        dur_ns,
        op: 0,
        args: Vec::new(),
    }
}

/// Two ranks as merging leaves them, with every field of the record set
/// (and left unknown), for the golden files.
fn two_ranks() -> Trace {
    let stream = |device| LaneKind::Stream {
        device,
        stream: 7,
        thread: 0,
    };
    Trace {
        version: keel_trace::TRACE_VERSION,
        devices: ["rank 0 \u{b7} cuda:0", "rank 1 \u{b7} cuda:0"]
            .map(|d| TraceDevice {
                device: d.to_owned(),
                name: "NVIDIA H200".to_owned(),
                properties: Vec::new(),
            })
            .to_vec(),
        lanes: vec![
            lane(
                LaneKind::Host { thread: 1 },
                "main",
                "rank 0 \u{b7} python3 (pid 1)",
            ),
            lane(stream(0), "stream 7", ""),
            lane(
                LaneKind::Host { thread: 1 },
                "main",
                "rank 1 \u{b7} python3 (pid 1)",
            ),
            lane(stream(1), "stream 7", ""),
        ],
        spans: vec![
            kernel(1, "gemm", 1_000, 5_000),
            kernel(1, COLLECTIVE, 6_000, 3_000),
            kernel(3, "gemm", 2_500, 5_000),
            kernel(3, COLLECTIVE, 8_000, 1_000),
        ],
        origin_ns: Some(-1_790_857_026_000_000_123),
        ranks: Some(Ranks {
            alignment: Alignment::Collectives,
            matched: 1,
            files: vec![
                RankFile {
                    label: "rank 0".to_owned(),
                    rank: Some(0),
                    lanes: 0..2,
                    devices: 0..1,
                    origin_ns: Some(1_790_857_026_000_000_123),
                    offset_ns: 0,
                    skew_ns: Some(0),
                    collectives: 1,
                },
                RankFile {
                    label: "a \"quoted\" file\tname.json".to_owned(),
                    rank: None,
                    lanes: 2..4,
                    devices: 1..2,
                    origin_ns: None,
                    offset_ns: 1_500,
                    skew_ns: None,
                    collectives: 1,
                },
            ],
        }),
        ..Trace::default()
    }
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Compares `bytes` with the golden file `name`, or rewrites it when
/// `UPDATE_GOLDEN=1`.
fn golden(name: &str, bytes: &[u8]) {
    let path = data_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, bytes).expect("write golden file");
        return;
    }
    let pinned = std::fs::read(&path).unwrap_or_default();
    assert!(
        pinned == bytes,
        "{} differs from the current output; if the format change is intended, \
         regenerate with UPDATE_GOLDEN=1 cargo test -p keel-trace --test ranks",
        path.display()
    );
}

/// The record and the origin through both formats, pinned by golden
/// files; files written before them load with neither (the `formats`
/// goldens).
#[test]
fn the_record_of_ranks_round_trips_and_is_pinned() {
    let t = two_ranks();
    assert_eq!(t.check(), Ok(()));
    let json = keel_trace::json::to_json_string(&t).expect("JSON");
    let native = keel_trace::native::to_native_bytes(&t).expect("native");
    golden("ranks.trace.json", json.as_bytes());
    golden("ranks.keeltrace", &native);
    assert_eq!(keel_trace::json::read_json(&json), Ok(t.clone()));
    assert_eq!(keel_trace::native::read_native(&native), Ok(t.clone()));
    for name in ["ranks.trace.json", "ranks.keeltrace"] {
        assert_eq!(load_trace(&data_dir().join(name)), Ok(t.clone()), "{name}");
    }
    assert!(json.contains(
        "\"origin_ns\":-1790857026000000123,\"ranks\":{\"alignment\":\"collectives\",\"matched\":1,\"files\":[{\"label\":\"rank 0\",\"rank\":0,\"lanes\":[0,2],\"devices\":[0,1],\"origin_ns\":1790857026000000123,\"offset_ns\":0,\"skew_ns\":0,\"collectives\":1}"
    ));
    // Only the origin, or nothing: both formats keep exactly that.
    for t in [
        Trace {
            ranks: None,
            ..two_ranks()
        },
        Trace {
            ranks: None,
            origin_ns: None,
            ..two_ranks()
        },
    ] {
        let json = keel_trace::json::to_json_string(&t).expect("JSON");
        assert_eq!(keel_trace::json::read_json(&json), Ok(t.clone()));
        let native = keel_trace::native::to_native_bytes(&t).expect("native");
        assert_eq!(keel_trace::native::read_native(&native), Ok(t.clone()));
    }
    // The analysis of a hand-made record: rank 1 started its collective
    // 2 us after rank 0 and is last in the only one.
    let a = RankAnalysis::new(&t);
    assert_eq!(a.alignment, Some(Alignment::Collectives));
    assert_eq!(a.late, Some(1));
    assert_eq!(a.ranks[1].lag_ns, 2_000);
    assert_eq!(
        (
            a.ranks[0].comm_ns,
            a.ranks[0].compute_ns,
            a.ranks[0].overlap_ns
        ),
        (3_000, 5_000, 0)
    );
    assert!(a.text().contains("\ta \"quoted\" file name.json\t"));
}

/// A record that does not fit its trace is an error saying what was
/// expected, in both formats.
#[test]
fn malformed_records_are_clear_errors() {
    let json = keel_trace::json::to_json_string(&two_ranks()).expect("JSON");
    for (from, to, expected) in [
        (
            "\"alignment\":\"collectives\"",
            "\"alignment\":\"sideways\"",
            "keel.ranks.alignment: expected \"clock\", \"collectives\" or \"start\", found \"sideways\"",
        ),
        (
            "\"lanes\":[2,4]",
            "\"lanes\":[2,40]",
            "keel.ranks.files[1].lanes: expected [start, end] from 2 or later to at most 4, found [2, 40]",
        ),
        (
            "\"lanes\":[2,4]",
            "\"lanes\":[1,4]",
            "keel.ranks.files[1].lanes: expected [start, end] from 2 or later to at most 4, found [1, 4]",
        ),
        (
            "\"devices\":[0,1]",
            "\"devices\":\"all\"",
            "keel.ranks.files[0].devices: expected a [start, end] pair, found the string \"all\"",
        ),
        (
            "\"skew_ns\":0",
            "\"skew_ns\":0.5",
            "keel.ranks.files[0].skew_ns: expected an integer, found 0.5",
        ),
        (
            "\"origin_ns\":-1790857026000000123",
            "\"origin_ns\":\"soon\"",
            "keel.origin_ns: expected an integer, found the string \"soon\"",
        ),
    ] {
        assert!(json.contains(from), "{from}");
        let bad = json.replace(from, to);
        let message = keel_trace::json::read_json(&bad)
            .expect_err("a bad record")
            .to_string();
        assert!(message.contains(expected), "{message}");
    }

    let native = keel_trace::native::to_native_bytes(&two_ranks()).expect("native");
    let clock = section_body(&native, 12);
    // origin: flag, then a 9-byte svarint; ranks flag; alignment.
    let alignment = clock.start + 1 + 9 + 1;
    assert_eq!(native[alignment], 1, "collectives");
    let mut bad = native.clone();
    bad[alignment] = 7;
    let message = keel_trace::native::read_native(&bad)
        .expect_err("a bad alignment")
        .to_string();
    assert!(
        message.contains("clock at byte offset")
            && message.contains("expected an alignment below 3, found 7"),
        "{message}"
    );
    let mut bad = native.clone();
    bad[clock.start] = 2;
    let message = keel_trace::native::read_native(&bad)
        .expect_err("a bad flag")
        .to_string();
    assert!(
        message.contains("expected a flag for the trace's origin (0 or 1), found 2"),
        "{message}"
    );
    // The second file's lanes start where the first file's do.
    let t = Trace {
        ranks: two_ranks().ranks.map(|mut r| {
            r.files[1].lanes = 1..4;
            r
        }),
        ..two_ranks()
    };
    let message =
        keel_trace::native::read_native(&keel_trace::native::to_native_bytes(&t).expect("native"))
            .expect_err("overlapping files")
            .to_string();
    assert!(
        message.contains(
            "expected a file's lanes as a range from 2 or later to at most 4, found 1..4"
        ),
        "{message}"
    );
    // Cut anywhere inside the section: an error, never a panic.
    for cut in clock.clone() {
        let mut bytes = native.clone();
        bytes.truncate(cut);
        assert!(keel_trace::native::read_native(&bytes).is_err());
    }
}

/// Merging by hand (what the viewer does with dropped bytes) keeps the
/// same record, labelled as given.
#[test]
fn merging_loaded_traces_records_their_files() {
    let a = load_trace(&import_data("kineto.json")).expect("import");
    let mut b = a.clone();
    b.origin_ns = b.origin_ns.map(|o| o + 100_000);
    let t = merge_files_with(
        vec![("a".to_owned(), a.clone()), ("b".to_owned(), b)],
        Alignment::Clock,
    )
    .expect("merge");
    let ranks = record(&t);
    assert_eq!(ranks.alignment, Alignment::Clock);
    assert_eq!(
        ranks.files.iter().map(|f| f.offset_ns).collect::<Vec<_>>(),
        [0, 100_000]
    );
    assert_eq!(
        ranks.files[1].lanes,
        a.lanes.len() as u32..2 * a.lanes.len() as u32
    );
    assert_eq!(t.origin_ns, a.origin_ns);
    // Rank 1's copy of each span lies 100 us later.
    let steps = starts_of(&t, "ProfilerStep#1");
    assert_eq!(steps, [10_000, 110_000]);
    assert_eq!(
        merge_files_with(vec![("a".to_owned(), a)], Alignment::Collectives)
            .expect_err("no collectives")
            .to_string(),
        "trace format error: a: expected collective kernels (names starting ncclKernel, ncclDevKernel, rccl) to align the ranks on, found none among its 2 device kernels"
    );
}

/// A rank whose profile window closed five collectives early: the ranks
/// are aligned on the 45 they have in common, and the record says so.
#[test]
fn ranks_with_different_numbers_of_collectives_align_on_the_common_prefix() {
    let (job, paths) = ranks_files();
    let first = load_trace(&paths[0]).expect("rank 0");
    let mut late = load_trace(&paths[3]).expect("rank 3");
    let mut starts: Vec<u64> = late
        .spans
        .iter()
        .filter(|s| s.name == COLLECTIVE)
        .map(|s| s.start_ns)
        .collect();
    starts.sort_unstable();
    let cut = starts[MARKED_COUNT - 5];
    late.spans
        .retain(|s| s.name != COLLECTIVE || s.start_ns < cut);
    let t = merge_files_with(
        vec![("rank 0".to_owned(), first), ("rank 3".to_owned(), late)],
        Alignment::Collectives,
    )
    .expect("two ranks");
    let ranks = record(&t);
    assert_eq!(ranks.matched, 45);
    assert_eq!(
        ranks
            .files
            .iter()
            .map(|f| f.collectives)
            .collect::<Vec<_>>(),
        [50, 45]
    );
    let known = job.skews_ns[3] - job.skews_ns[0];
    let found = ranks.files[1].skew_ns.expect("a skew");
    assert!((found - known).abs() <= 2 * job.jitter_ns as i64);
    let a = RankAnalysis::new(&t);
    assert_eq!((a.compared, a.late), (45, Some(1)));
    assert_eq!(a.ranks[1].last_in, 45);
}
