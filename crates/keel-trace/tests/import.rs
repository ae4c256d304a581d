//! Importing other tools' traces: the fixtures in `tests/data/import/`
//! (a PyTorch/Kineto trace, plain and gzipped and zstd-compressed; a
//! Chrome trace using the rest of the format, left unterminated), each
//! with the exact counts expected; several files as one; and inputs
//! mutated thousands of ways, which must give an error or an import whose
//! report accounts for every event, never a panic.

mod common;

use common::{Rng, mutate, starts_of};

use std::path::{Path, PathBuf};

use keel_trace::file::{from_bytes, load_traces};
use keel_trace::{
    ALLOCATED_COUNTER, BlockState, FlowKind, ImportReport, LaneKind, MemoryAction, MemoryMap,
    RESERVED_COUNTER, SpanKind, Trace, load_trace,
};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).expect("fixture")
}

fn report(t: &Trace) -> &ImportReport {
    t.import.as_ref().expect("an import report")
}

fn skipped(t: &Trace) -> Vec<(&str, u64)> {
    report(t)
        .skipped
        .iter()
        .map(|(r, n)| (r.as_str(), *n))
        .collect()
}

fn span<'t>(t: &'t Trace, name: &str) -> &'t keel_trace::Span {
    t.spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span named {name:?}"))
}

fn arg<'a, K: AsRef<str>, V: AsRef<str>>(args: &'a [(K, V)], key: &str) -> Option<&'a str> {
    args.iter()
        .find(|(k, _)| k.as_ref() == key)
        .map(|(_, v)| v.as_ref())
}

/// What every import must keep: the report adds up, and everything refers
/// to lanes and devices that exist.
fn consistent(t: &Trace) {
    let r = report(t);
    let skipped: u64 = r.skipped.iter().map(|(_, n)| n).sum();
    assert_eq!(r.imported + skipped, r.events, "{r:?}");
    assert!(
        r.skipped.windows(2).all(|w| w[0].1 >= w[1].1),
        "most frequent first: {r:?}"
    );
    let lanes = t.lanes.len() as u32;
    assert!(t.spans.iter().all(|s| s.lane < lanes));
    assert!(t.instants.iter().all(|i| i.lane < lanes));
    assert!(
        t.flows
            .iter()
            .all(|f| f.from.lane < lanes && f.to.lane < lanes)
    );
    let devices = t.devices.len() as u32;
    assert!(t.counters.iter().all(|c| c.device < devices));
    assert!(t.memory.iter().all(|m| m.device < devices));
    assert!(t.lanes.iter().all(|l| match l.kind {
        LaneKind::Stream { device, .. } => device < devices,
        LaneKind::Host { .. } => true,
    }));
}

fn check_kineto(t: &Trace, format: &str) {
    consistent(t);
    let r = report(t);
    assert_eq!(r.format, format);
    assert_eq!((r.events, r.imported), (35, 34));
    assert_eq!(
        skipped(t),
        [("flow event without a matching start or finish", 1)]
    );
    assert_eq!(t.spans.len(), 16);
    assert_eq!(t.flows.len(), 4);
    // The `[memory]` instant is an allocator event of GPU 0 (no `Device
    // Type`, as older PyTorch wrote it) with its two curves.
    assert_eq!(t.instants.len(), 1);
    assert_eq!(t.memory.len(), 1);
    assert_eq!(
        (t.memory[0].action, t.memory[0].bytes, t.memory[0].device),
        (MemoryAction::Alloc, 512, 0)
    );
    assert_eq!(t.counters.len(), 2);

    // The GPU: named "python3.10" with "GPU 0" in its labels, described by
    // deviceProperties.
    assert_eq!(t.devices.len(), 1);
    assert_eq!(t.devices[0].device, "cuda:0");
    assert_eq!(t.devices[0].name, "NVIDIA A100-SXM4-40GB");
    assert_eq!(arg(&t.devices[0].properties, "numSms"), Some("108"));

    // Lanes: host threads of each process (tid -1 and string pids too),
    // then the GPU's two streams.
    let names: Vec<&str> = t.lanes.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "thread -1",
            "thread 4242 (python3.10)",
            "thread 4250 (pt_autograd_0)",
            "thread PyTorch Profiler",
            "thread PyTorch Profiler",
            "stream 7",
            "stream 20",
        ]
    );
    let groups: Vec<&str> = t.lanes.iter().map(|l| l.group.as_str()).collect();
    assert_eq!(
        groups,
        [
            "python3.10 (pid 4242)",
            "python3.10 (pid 4242)",
            "python3.10 (pid 4242)",
            "Spans",
            "Traces",
            "",
            "",
        ]
    );
    assert_eq!(
        t.lanes[5].kind,
        LaneKind::Stream {
            device: 0,
            stream: 7,
            thread: 0
        }
    );
    assert_eq!(
        t.lanes[6].kind,
        LaneKind::Stream {
            device: 0,
            stream: 20,
            thread: 0
        }
    );

    // Kinds from Kineto's categories; times from the earliest event (the
    // "Trace" span at 990 us), exact to the ns.
    let kernel = span(t, "void conv_kernel<float>(float const*, float*)");
    assert_eq!(kernel.kind, SpanKind::Kernel);
    assert_eq!(kernel.lane, 5);
    assert_eq!((kernel.start_ns, kernel.dur_ns), (40_000, 40_000));
    assert_eq!(arg(&kernel.args, "correlation"), Some("101"));
    assert_eq!(arg(&kernel.args, "grid"), Some("[1,2,3]"));
    assert_eq!(
        span(t, "Memcpy HtoD (Pageable -> Device)").kind,
        SpanKind::Copy
    );
    assert_eq!(span(t, "Memset (Device)").kind, SpanKind::Copy);
    assert_eq!(span(t, "ProfilerStep#1").kind, SpanKind::Annotation);
    assert_eq!(span(t, "ProfilerStep#1").start_ns, 10_000);
    assert_eq!(span(t, "cudaMemcpyAsync").kind, SpanKind::Copy);
    let launches: Vec<_> = t
        .spans
        .iter()
        .filter(|s| s.name == "cudaLaunchKernel")
        .collect();
    assert_eq!(launches.len(), 2);
    assert!(launches.iter().all(|s| s.kind == SpanKind::Kernel));
    assert_eq!(
        arg(&span(t, "PyTorch Profiler (0)").args, "cat"),
        Some("Trace")
    );

    // The memcpy and memset overlap on stream 20 without nesting: both kept.
    let stream20: Vec<_> = t.spans.iter().filter(|s| s.lane == 6).collect();
    assert_eq!(stream20.len(), 2);
    assert!(t.check().is_err(), "the overlap is reported by check");

    // Flows: Kineto writes an ac2g's f before its s; fwdbwd is a
    // dependency between host threads.
    let launch: Vec<_> = t
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::Launch)
        .collect();
    assert_eq!(launch.len(), 3);
    assert!(launch.iter().all(|f| f.from.lane == 1 && f.to.lane >= 5));
    let first = launch
        .iter()
        .find(|f| f.to.lane == 5 && f.to.ts_ns == 40_000)
        .expect("the conv kernel's launch flow");
    assert_eq!(first.from.ts_ns, 30_000);
    let fwdbwd: Vec<_> = t
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::EventWait)
        .collect();
    assert_eq!(fwdbwd.len(), 1);
    assert_eq!((fwdbwd[0].from.lane, fwdbwd[0].to.lane), (1, 2));
    // Every flow end lies in a span of its lane.
    for f in &t.flows {
        for end in [f.from, f.to] {
            assert!(
                t.spans.iter().any(|s| s.lane == end.lane
                    && s.start_ns <= end.ts_ns
                    && end.ts_ns <= s.end_ns()),
                "{f:?}"
            );
        }
    }
}

#[test]
fn kineto_trace_imports_every_event() {
    let t = load_trace(&data("kineto.json")).expect("import");
    check_kineto(&t, "Chrome trace (PyTorch/Kineto)");
    // From bytes, the same.
    let same = from_bytes(&read("kineto.json")).expect("import from bytes");
    assert_eq!(same, t);
}

#[test]
fn compressed_traces_are_recognised_by_their_bytes() {
    let t = load_trace(&data("kineto.json.gz")).expect("gzip import");
    check_kineto(&t, "Chrome trace (PyTorch/Kineto), gzip");
    // Made by the zstd tools: a frame of pzstd's (after the skippable frame
    // pzstd puts before each), then one of zstd's.
    let zstd = read("kineto.json.zst");
    let t = from_bytes(&zstd).expect("zstd import");
    check_kineto(&t, "Chrome trace (PyTorch/Kineto), zstd");
    // Whatever the file is called.
    let dir = std::env::temp_dir().join(format!("keel-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("trace.json");
    std::fs::write(&path, &zstd).expect("write");
    check_kineto(
        &load_trace(&path).expect("zstd file"),
        "Chrome trace (PyTorch/Kineto), zstd",
    );
    // A compressed native trace too.
    let sample =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample.keeltrace"))
            .expect("golden native");
    let zipped = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample.keeltrace.zst"),
    )
    .expect("golden native, zstd");
    assert_eq!(
        from_bytes(&zipped).expect("compressed native"),
        from_bytes(&sample).expect("native")
    );
    // A damaged stream is a clear error.
    let mut bad = read("kineto.json.gz");
    let n = bad.len();
    bad.truncate(n / 2);
    let result = from_bytes(&bad);
    match result {
        Err(e) => assert!(e.to_string().contains("gzip") || e.to_string().contains("read")),
        Ok(t) => consistent(&t),
    }
    // Cut inside the skippable frame, inside a frame, before the last
    // checksum byte: each is an error naming zstd.
    for cut in [9, 20, zstd.len() / 2, zstd.len() - 1] {
        let e = from_bytes(&zstd[..cut]).expect_err("a zstd stream cut short");
        assert!(e.to_string().contains("zstd"), "cut at {cut}: {e}");
    }
    let cut = zipped.len() - 3;
    let e = from_bytes(&zipped[..cut]).expect_err("a native trace cut short");
    assert!(e.to_string().contains("zstd"), "{e}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn chrome_trace_shapes_import_with_exact_counts() {
    let t = load_trace(&data("chrome_misc.json")).expect("import");
    consistent(&t);
    let r = report(&t);
    assert_eq!(r.format, "Chrome trace, unterminated");
    assert_eq!((r.events, r.imported), (34, 23));
    let mut reasons = skipped(&t);
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("B event without a matching E", 1),
            ("C event without a numeric argument", 1),
            ("E event without a matching B", 1),
            ("X event without a numeric ts", 1),
            ("async e event without a matching b", 1),
            (
                "event fields of the wrong type (ph, name, cat, bp and s must be strings, args an object)",
                1
            ),
            ("event without \"ph\"", 1),
            ("flow event without a matching start or finish", 1),
            ("not a JSON object", 1),
            ("phase \"O\" (object events) not shown", 1),
            ("unknown phase \"Z\"", 1),
        ]
    );
    assert_eq!(t.spans.len(), 8);
    assert_eq!(t.instants.len(), 4);
    assert_eq!(t.flows.len(), 3);
    assert_eq!(t.devices.len(), 2, "one per process with counters");
    assert!(t.devices.iter().all(|d| d.device == "host"));
    assert_eq!(t.devices[0].name, "process 1");
    assert_eq!(t.devices[1].name, "Renderer (pid renderer)");

    let names: Vec<&str> = t.lanes.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "CrRendererMain",
            "thread 1",
            "thread 2",
            "thread 3",
            "thread 4",
            "async: load",
            "thread 0",
        ]
    );
    assert_eq!(t.lanes[0].group, "Renderer (pid renderer)");

    // B/E with string times, nested, E args merged; times from the
    // earliest event (100 us).
    let outer = span(&t, "outer");
    assert_eq!((outer.start_ns, outer.dur_ns), (0, 50_250));
    let inner = span(&t, "inner");
    assert_eq!((inner.start_ns, inner.dur_ns), (10_500, 9_500));
    assert_eq!(arg(&inner.args, "result"), Some("ok"));
    // Overlapping X slices stay on their lane.
    assert_eq!(span(&t, "x1").lane, span(&t, "x2").lane);
    assert_eq!(span(&t, "x1").dur_ns, 10_000);
    // Async b/e as a span on its own lane, n as an instant there.
    let load = span(&t, "load");
    assert_eq!(
        (load.lane, load.start_ns, load.dur_ns),
        (5, 200_000, 20_000)
    );
    let progress = t.instants.iter().find(|i| i.name == "progress").expect("n");
    assert_eq!(progress.lane, 5);
    let global = t
        .instants
        .iter()
        .find(|i| i.name == "global mark")
        .expect("global");
    assert_eq!(arg(&global.args, "scope"), Some("global"));

    // Flows: v2 (bind_id, hex and decimal alike) and an s/t/f chain whose
    // ids are hex strings in either case; the f binds to the next slice.
    let x3 = span(&t, "x3").lane;
    let x4 = span(&t, "x4").lane;
    let mut flows: Vec<_> = t
        .flows
        .iter()
        .map(|f| (f.from.lane, f.from.ts_ns, f.to.lane, f.to.ts_ns))
        .collect();
    flows.sort();
    let x1 = span(&t, "x1").lane;
    assert_eq!(
        flows,
        [
            (x1, 101_000, x3, 131_000),
            (x3, 130_000, x4, 140_000),
            (x3, 131_000, x4, 140_000),
        ]
    );

    // Counters: one series per key, strings and floats as numbers.
    let mut counters: Vec<_> = t
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.points.clone()))
        .collect();
    counters.sort();
    assert_eq!(
        counters,
        [
            ("fps", vec![(105_000, 60)]),
            ("heap.free", vec![(100_000, 90), (110_000, 88)]),
            ("heap.used", vec![(100_000, 10), (110_000, 13)]),
        ]
    );
}

#[test]
fn several_files_open_as_one_trace_grouped_by_rank() {
    let dir = std::env::temp_dir().join(format!("keel-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let text = String::from_utf8(read("kineto.json")).expect("UTF-8");
    let rank1 = dir.join("rank1.json");
    std::fs::write(
        &rank1,
        text.replace("\"rank\": 0", "\"rank\": 1")
            .replace("\"ts\": 9", "\"ts\": 5009")
            .replace("\"ts\": 1", "\"ts\": 501"),
    )
    .expect("write");
    let no_rank = dir.join("other.json");
    std::fs::write(
        &no_rank,
        text.replace("\"distributedInfo\"", "\"somethingElse\""),
    )
    .expect("write");
    let t = load_traces(&[data("kineto.json"), rank1.clone(), no_rank]).expect("three files");
    consistent(&t);
    assert_eq!(t.lanes.len(), 21);
    assert_eq!(t.spans.len(), 48);
    assert_eq!(t.flows.len(), 12);
    assert_eq!(t.devices.len(), 3);
    assert_eq!(
        t.devices
            .iter()
            .map(|d| d.device.as_str())
            .collect::<Vec<_>>(),
        [
            "rank 0 \u{b7} cuda:0",
            "rank 1 \u{b7} cuda:0",
            "other.json \u{b7} cuda:0"
        ]
    );
    assert_eq!(t.lanes[1].group, "rank 0 \u{b7} python3.10 (pid 4242)");
    assert_eq!(t.lanes[8].group, "rank 1 \u{b7} python3.10 (pid 4242)");
    assert_eq!(t.lanes[15].group, "other.json \u{b7} python3.10 (pid 4242)");
    // Rank 1's times are 0.5 s later on the same clock, so its recording
    // (0.7 ms long) shares no instant with rank 0's: clocks that cannot
    // be one job's. With no collectives to align on either, each file is
    // on its own earliest event, and the shifted rank lines up with rank
    // 0.
    let steps = starts_of(&t, "ProfilerStep#1");
    assert_eq!(steps, [10_000, 10_000, 10_000]);
    let ranks = t.ranks.as_ref().expect("a record of the files");
    assert_eq!(ranks.alignment, keel_trace::Alignment::Start);
    assert_eq!(t.origin_ns, None, "no one clock");
    let labels: Vec<(&str, Option<i64>, std::ops::Range<u32>)> = ranks
        .files
        .iter()
        .map(|f| (f.label.as_str(), f.rank, f.lanes.clone()))
        .collect();
    assert_eq!(
        labels,
        [
            ("rank 0", Some(0), 0..7),
            ("rank 1", Some(1), 7..14),
            ("other.json", None, 14..21)
        ]
    );
    let r = report(&t);
    assert_eq!((r.events, r.imported), (105, 102));
    assert!(t.flows.iter().all(|f| {
        let (a, b) = (f.from.lane / 7, f.to.lane / 7);
        a == b
    }));
    // 0.2 ms later instead: the recordings overlap, so the files' clocks
    // are taken as one, and rank 1 stays 0.2 ms later (the default).
    std::fs::write(
        &rank1,
        text.replace("\"rank\": 0", "\"rank\": 1")
            .replace("1700000000000000000", "1700000000000200000"),
    )
    .expect("write");
    let t = load_traces(&[data("kineto.json"), rank1]).expect("two files");
    assert_eq!(
        t.ranks.as_ref().map(|r| r.alignment),
        Some(keel_trace::Alignment::Clock)
    );
    let steps = starts_of(&t, "ProfilerStep#1");
    assert_eq!(steps, [10_000, 210_000]);
    assert_eq!(t.origin_ns, Some(1_700_000_000_000_990_000));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"null",
    b"-1",
    b"1e999",
    b"\"0x\"",
    b"{\"ph\":\"E\"}",
    b"{\"ph\":\"f\",\"id\":1,\"pid\":0,\"ts\":1}",
    b"\xff",
    b"\"ts\":\"-9223372036854775808\"",
    b"{\"ph\":\"b\",\"id\":1,\"pid\":1,\"ts\":18446744073709551615}",
    b"{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":-9.2e18,\"dur\":9.2e18}",
];

#[test]
fn mutated_and_garbage_inputs_never_panic() {
    let keel_json = keel_trace::json::to_json_string(&keel_trace::Trace {
        version: keel_trace::TRACE_VERSION,
        ..Trace::default()
    })
    .expect("export");
    let fixtures: Vec<Vec<u8>> = vec![
        read("kineto.json"),
        read("chrome_misc.json"),
        read("kineto.json.gz"),
        read("kineto_memory.json"),
        keel_json.into_bytes(),
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample.trace.json"))
            .expect("golden"),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut imported = 0;
    let cases = 4000;
    for (f, input) in fixtures.iter().enumerate() {
        for case in 0..cases {
            let bytes = mutate(&mut rng, input, TOKENS);
            let result = std::panic::catch_unwind(|| from_bytes(&bytes));
            let Ok(result) = result else {
                panic!(
                    "fixture {f}, case {case} panicked on {:?}",
                    String::from_utf8_lossy(&bytes)
                );
            };
            if let Ok(t) = result
                && t.import.is_some()
            {
                consistent(&t);
                assert!(
                    t.memory.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
                    "memory events in time order"
                );
                imported += 1;
            }
        }
    }
    // Most mutations leave something to import.
    assert!(imported > cases, "only {imported} imports");
    // Pure garbage.
    for len in [0, 1, 7, 100, 5000] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = from_bytes(&bytes);
    }
}

#[test]
fn an_unterminated_string_costs_its_event_not_unbounded_memory() {
    // The file ends inside a string inside an event: the event is counted
    // as cut, what came before is kept.
    let text = b"{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,\"name\":\"a\"},{\"ph\":\"X\",\"name\":\"never closed";
    let t = from_bytes(text).expect("partial import");
    consistent(&t);
    assert_eq!(t.spans.len(), 1);
    assert_eq!(
        skipped(&t),
        [("the last event, cut by the end of the file", 1)]
    );
    // A byte order mark is fine.
    let t = from_bytes(
        b"\xef\xbb\xbf[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,\"name\":\"a\"}]",
    )
    .expect("BOM");
    assert_eq!(t.spans.len(), 1);
    // An event larger than the limit is skipped without being kept.
    let mut big = b"[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,\"name\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 17 << 20));
    big.extend_from_slice(
        b"\"},{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":2,\"dur\":1,\"name\":\"b\"}]",
    );
    let t = from_bytes(&big).expect("import");
    assert_eq!(t.spans.len(), 1);
    assert_eq!(skipped(&t), [("event larger than 16 MiB", 1)]);
}

#[test]
fn error_messages_quote_a_short_prefix() {
    let long = "x".repeat(1 << 20);
    let text = format!("{{\"{long}\" 1}}");
    let message = from_bytes(text.as_bytes())
        .expect_err("bad JSON")
        .to_string();
    assert!(message.len() < 300, "{} bytes", message.len());
    assert!(message.contains("bytes)"), "{message}");
    assert_eq!(
        keel_trace::json::short(&long),
        format!("{}... (1048576 bytes)", "x".repeat(64))
    );
}

/// An imported trace saved by Keel (JSON or native) loads back exactly,
/// with its lane groups and import report.
#[test]
fn imported_traces_save_and_load_exactly() {
    let dir = std::env::temp_dir().join(format!("keel-resave-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for fixture in ["kineto.json", "chrome_misc.json"] {
        let t = load_trace(&data(fixture)).expect("import");
        for name in ["again.json", "again.keeltrace"] {
            let path = dir.join(name);
            keel_trace::save_trace(&t, &path).expect("save");
            let back = load_trace(&path).expect("load");
            assert_eq!(back, t, "{fixture} through {name}");
        }
    }
    // Keel's own recordings have no origin section: the directory lists
    // the nine sections every file has.
    let own = keel_trace::native::to_native_bytes(&Trace {
        version: keel_trace::TRACE_VERSION,
        ..Trace::default()
    })
    .expect("native");
    assert_eq!(own[12..16], 9u32.to_le_bytes(), "sections 1 to 9 only");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Many unmatched begins followed by ends of other names stay linear (an
/// end looks only near the top of the open events).
#[test]
fn unmatched_begins_do_not_make_the_import_quadratic() {
    let n = 100_000;
    let mut text = String::from("[");
    for i in 0..n {
        text.push_str(&format!(
            "{{\"ph\":\"B\",\"name\":\"b{i}\",\"pid\":1,\"tid\":1,\"ts\":{i}}},"
        ));
    }
    for i in 0..n {
        text.push_str(&format!(
            "{{\"ph\":\"E\",\"name\":\"other\",\"pid\":1,\"tid\":1,\"ts\":{}}},",
            n + i
        ));
    }
    text.push(']');
    let start = std::time::Instant::now();
    let t = from_bytes(text.as_bytes()).expect("import");
    consistent(&t);
    assert_eq!(t.spans.len(), n);
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
}

/// PyTorch's allocator events (`profile_memory=True`): blocks on two GPUs
/// and the CPU, a free, an out-of-memory; each becomes a memory event of
/// its device, with the allocated and reserved curves, and the segment map
/// shows each block as a row of its own.
#[test]
fn kineto_memory_events_become_allocator_events_and_curves() {
    let t = load_trace(&data("kineto_memory.json")).expect("import");
    consistent(&t);
    assert_eq!(t.check(), Ok(()));
    let r = report(&t);
    assert_eq!((r.events, r.imported), (11, 11));
    assert_eq!(t.spans.len(), 2);
    assert_eq!(t.instants.len(), 0);
    let devices: Vec<&str> = t.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(devices, ["cuda:0", "cpu", "cuda:1"]);
    assert_eq!(t.devices[0].name, "NVIDIA H100 80GB HBM3");
    let memory: Vec<(u64, u32, MemoryAction, u64, u64)> = t
        .memory
        .iter()
        .map(|m| (m.ts_ns, m.device, m.action, m.bytes, m.allocated))
        .collect();
    assert_eq!(
        memory,
        [
            (1500, 0, MemoryAction::Alloc, 512, 512),
            (2000, 0, MemoryAction::Alloc, 1024, 1536),
            (3000, 1, MemoryAction::Alloc, 4096, 4096),
            (4000, 0, MemoryAction::Free, 512, 1024),
            (5000, 2, MemoryAction::Alloc, 20 << 20, 20 << 20),
            (6000, 0, MemoryAction::Oom, 90_000_000_000, 1024),
            (7000, 1, MemoryAction::Free, 4096, 0),
        ]
    );
    assert!(
        t.memory
            .iter()
            .all(|m| m.segment == m.addr && m.stream.is_none())
    );
    assert_eq!(t.memory[5].addr, 0);
    let curve = |device: u32, name: &str| {
        t.counters
            .iter()
            .find(|c| c.device == device && c.name == name)
            .map(|c| c.points.clone())
            .unwrap_or_else(|| panic!("no {name} of device {device}"))
    };
    assert_eq!(t.counters.len(), 6);
    assert_eq!(
        curve(0, ALLOCATED_COUNTER),
        [(1500, 512), (2000, 1536), (4000, 1024)]
    );
    assert_eq!(curve(0, RESERVED_COUNTER), [(1500, 2 << 20)]);
    assert_eq!(curve(1, ALLOCATED_COUNTER), [(3000, 4096), (7000, 0)]);
    assert_eq!(curve(1, RESERVED_COUNTER), [(3000, 0)]);
    assert_eq!(curve(2, RESERVED_COUNTER), [(5000, 20 << 20)]);
    // The curves' values are the events' totals.
    for m in &t.memory {
        let at = |name: &str| {
            let points = curve(m.device, name);
            let i = points.partition_point(|p| p.0 <= m.ts_ns);
            points[i - 1].1 as u64
        };
        assert_eq!(at(ALLOCATED_COUNTER), m.allocated, "{m:?}");
        assert_eq!(at(RESERVED_COUNTER), m.reserved, "{m:?}");
    }
    // GPU 0: two live blocks, then the second alone.
    let rows = |ts| -> Vec<(u64, u64, BlockState)> {
        MemoryMap::at(&t, 0, ts)
            .rows()
            .iter()
            .flat_map(|r| r.blocks.iter().map(|b| (b.addr, b.bytes, b.state)))
            .collect()
    };
    assert_eq!(
        rows(2000),
        [
            (139_800_000_000_000, 512, BlockState::Active),
            (139_800_000_000_512, 1024, BlockState::Active)
        ]
    );
    assert_eq!(
        rows(4000),
        [(139_800_000_000_512, 1024, BlockState::Active)]
    );
    // Exported and read back as Keel's own: the same trace.
    let json = keel_trace::json::to_json_string(&t).expect("export");
    assert_eq!(keel_trace::json::read_json(&json).expect("read"), t);
}

/// A real PyTorch profiler trace: two training steps of GPT-2 small on an
/// NVIDIA H200 (`record_shapes`, `profile_memory`, `with_flops`; bf16
/// autocast; input copies on a side stream). The expected counts are the
/// file's own, read with Python's `json` module: 30,989 events of which
/// 17,782 complete (`X`) events, 3,662 flow starts with a matching end
/// (2,428 `ac2g` launch -> kernel, 1,234 `fwdbwd`), 5,384 `[memory]`
/// instants (5,140 of `cuda:0`, 244 of the CPU), GPU work on streams 7
/// and 13 of GPU 0 (2,212 kernels, 214 memsets, 2 copies, 6 GPU user
/// annotations), and cuda:0's
/// peaks of 7,722,653,184 bytes allocated and 8,084,520,960 reserved.
#[test]
fn a_real_pytorch_training_trace_imports_whole() {
    let t = load_trace(&data("gpt2_train_h200.pt.trace.json.gz")).expect("import");
    consistent(&t);
    assert_eq!(t.check(), Ok(()));
    let r = report(&t);
    assert_eq!(r.events, 30_989, "{r:?}");
    assert_eq!(t.spans.len(), 17_782);
    assert_eq!(t.flows.len(), 3_662);
    assert_eq!(t.memory.len(), 5_384);
    let gpu = t
        .devices
        .iter()
        .position(|d| d.device == "cuda:0")
        .expect("GPU 0") as u32;
    let mut gpu_streams: Vec<i64> = t
        .lanes
        .iter()
        .filter_map(|l| match l.kind {
            LaneKind::Stream { device, stream, .. } if device == gpu => Some(stream),
            _ => None,
        })
        .collect();
    gpu_streams.sort_unstable();
    assert_eq!(gpu_streams, [7, 13]);
    let on_gpu = |s: &&keel_trace::Span| matches!(t.lanes[s.lane as usize].kind, LaneKind::Stream { device, .. } if device == gpu);
    assert_eq!(t.spans.iter().filter(on_gpu).count(), 2_212 + 214 + 2 + 6);
    let of_gpu = t.memory.iter().filter(|m| m.device == gpu).count();
    assert_eq!((of_gpu, t.memory.len() - of_gpu), (5_140, 244));
    let peak = |f: fn(&keel_trace::MemoryEvent) -> u64| {
        t.memory.iter().filter(|m| m.device == gpu).map(f).max()
    };
    assert_eq!(peak(|m| m.allocated), Some(7_722_653_184));
    assert_eq!(peak(|m| m.reserved), Some(8_084_520_960));
    // Every launch -> kernel flow ends on the GPU.
    let launches = t
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::Launch)
        .count();
    assert_eq!(launches, 2_428);
    assert!(
        t.flows
            .iter()
            .filter(|f| f.kind == FlowKind::Launch)
            .all(|f| matches!(t.lanes[f.to.lane as usize].kind, LaneKind::Stream { .. }))
    );
}
