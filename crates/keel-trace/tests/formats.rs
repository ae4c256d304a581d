//! The profiler's trace formats: `Trace::check`, Chrome JSON and the native
//! binary format (round trips, golden files, malformed input).

mod common;

use common::section_body;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use keel_trace::Error;
use keel_trace::json::{read_json, read_json_bytes, to_json_string};
use keel_trace::native::{MAGIC, read_native, to_native_bytes};
use keel_trace::{
    Calibration, Counter, Flow, FlowEnd, FlowKind, InstantEvent, Lane, LaneKind, MemoryAction,
    MemoryEvent, Span, SpanKind, TRACE_VERSION, Text, Trace, TraceDevice, load_trace, save_trace,
};
use proptest::prelude::*;

fn s(v: &str) -> String {
    v.to_owned()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (s(k), s(v))).collect()
}

fn text_pairs(list: &[(&str, &str)]) -> Vec<(Text, Text)> {
    list.iter().map(|&(k, v)| (k.into(), v.into())).collect()
}

#[allow(clippy::too_many_arguments)]
fn span(
    lane: u32,
    name: &str,
    kind: SpanKind,
    start_ns: u64,
    dur_ns: u64,
    op: u64,
    args: &[(&str, &str)],
) -> Span {
    Span {
        lane,
        name: name.into(),
        kind,
        start_ns,
        dur_ns,
        op,
        args: text_pairs(args),
    }
}

/// A deterministic trace using every part of the model.
fn sample() -> Trace {
    use SpanKind::*;
    let tricky = "quote \" backslash \\ newline \n tab \t cr \r bell \u{7} del \u{7f} \
                  unicode ünïcødé ✓ \u{1F600} ls \u{2028} nul \u{0} end";
    Trace {
        version: TRACE_VERSION,
        devices: vec![
            TraceDevice {
                device: s("vulkan:0"),
                name: s("llvmpipe (LLVM 19.1.7, 256 bits)"),
                properties: pairs(&[
                    ("api", "Vulkan 1.3"),
                    ("memory", "\"8 GiB\""),
                    ("api", "duplicate keys are kept"),
                ]),
            },
            TraceDevice {
                device: s("cuda:1"),
                name: s("NVIDIA H100 \"SXM\" \\ 80GB"),
                properties: vec![],
            },
        ],
        lanes: vec![
            Lane {
                kind: LaneKind::Host { thread: 7 },
                name: s("main"),
                group: String::new(),
            },
            Lane {
                kind: LaneKind::Stream {
                    device: 0,
                    stream: 33,
                    thread: 0,
                },
                name: s("stream 33"),
                group: String::new(),
            },
            Lane {
                kind: LaneKind::Stream {
                    device: 0,
                    stream: 34,
                    thread: 0,
                },
                name: s("stream 34"),
                group: String::new(),
            },
            Lane {
                kind: LaneKind::Stream {
                    device: 1,
                    stream: -2,
                    thread: 0,
                },
                name: s("stream -2 \"ext\""),
                group: String::new(),
            },
            Lane {
                kind: LaneKind::Host { thread: u64::MAX },
                name: s("idle thread"),
                group: String::new(),
            },
        ],
        spans: vec![
            // Host: nested annotations and the calls inside them.
            span(
                0,
                "step \"1\"",
                Annotation,
                1_000,
                100_000,
                0,
                &[("step", "1")],
            ),
            span(0, "forward\\pass", Annotation, 2_000, 50_000, 0, &[]),
            span(
                0,
                "launch add",
                Kernel,
                3_000,
                2_000,
                1,
                &[("grid", "[4, 1, 1]")],
            ),
            span(0, "copy host->device", Copy, 6_000, 1_500, 2, &[]),
            span(0, "record event", EventRecord, 8_000, 500, 3, &[]),
            span(0, "wait event", Wait, 9_000, 400, 4, &[]),
            span(0, "alloc", Alloc, 10_000, 300, 5, &[("bytes", "4096")]),
            span(0, "free", Free, 11_000, 200, 6, &[]),
            span(0, "launch mul", Kernel, 11_500, 100, 7, &[]),
            span(0, "synchronize", Sync, 60_000, 20_000, 0, &[]),
            span(0, "zero length", Annotation, 60_000, 0, 0, &[]),
            // Device 0, stream 33.
            span(
                1,
                "add_kernel",
                Kernel,
                20_000,
                5_000,
                1,
                &[
                    ("note", tricky),
                    (tricky, "tricky key"),
                    ("keel_kind", "a user arg named like keel's own"),
                    ("keel_arg_x", "and one named like the escape"),
                ],
            ),
            span(1, "copy host->device", Copy, 26_000, 3_000, 2, &[]),
            span(1, "record event", EventRecord, 29_000, 10, 3, &[]),
            span(1, "alloc", Alloc, 12_000, 100, 5, &[]),
            span(1, "free", Free, 13_000, 100, 6, &[]),
            span(1, "sync on device", Sync, 40_000, 7, 0, &[]),
            // Device 0, stream 34.
            span(2, "wait event", Wait, 30_000, 10, 4, &[]),
            span(
                2,
                "mul_kernel",
                Kernel,
                30_100,
                7_001,
                7,
                &[("grid", "2x1x1"), ("block", "64x1x1")],
            ),
            // Device 1: a long kernel far from the epoch, one inside it.
            span(3, "relu", Kernel, 123_456_789_012, 1_234_567, u64::MAX, &[]),
            span(
                3,
                "annotation on a stream",
                Annotation,
                123_456_789_013,
                1,
                8,
                &[],
            ),
        ],
        instants: vec![
            InstantEvent {
                lane: 0,
                name: s("marker \"A\""),
                ts_ns: 5_001,
                args: pairs(&[("keel_op", "user value"), ("k", "v\nw")]),
            },
            InstantEvent {
                lane: 1,
                name: s("device marker"),
                ts_ns: 0,
                args: vec![],
            },
        ],
        flows: vec![
            Flow {
                id: 1,
                kind: FlowKind::Launch,
                from: FlowEnd {
                    lane: 0,
                    ts_ns: 3_000,
                },
                to: FlowEnd {
                    lane: 1,
                    ts_ns: 20_000,
                },
            },
            Flow {
                id: 2,
                kind: FlowKind::EventWait,
                from: FlowEnd {
                    lane: 1,
                    ts_ns: 29_010,
                },
                to: FlowEnd {
                    lane: 2,
                    ts_ns: 30_000,
                },
            },
            Flow {
                id: 1 << 60,
                kind: FlowKind::Launch,
                from: FlowEnd {
                    lane: 0,
                    ts_ns: 11_550,
                },
                to: FlowEnd {
                    lane: 2,
                    ts_ns: 30_100,
                },
            },
        ],
        counters: vec![
            Counter {
                device: 0,
                name: s("memory in use (bytes)"),
                points: vec![
                    (12_000, 4096),
                    (13_000, 0),
                    (13_000, -5),
                    (14_000, i64::MAX),
                ],
            },
            Counter {
                device: 1,
                name: s("empty counter"),
                points: vec![],
            },
        ],
        calibrations: vec![
            Calibration {
                device: 0,
                method: s("paired sampling"),
                error_bound_ns: 250,
            },
            Calibration {
                device: 1,
                method: s("host clock"),
                error_bound_ns: 0,
            },
        ],
        memory: sample_memory(),
        dropped: 3,
        import: None,
        origin_ns: None,
        ranks: None,
    }
}

/// Allocator events using every action, with and without a stream, both
/// pools and extreme values.
fn sample_memory() -> Vec<MemoryEvent> {
    use MemoryAction::*;
    let base = 0x7f00_0000_0000;
    let event =
        |ts_ns, device, action, addr, segment, bytes, stream, small_pool, allocated, reserved| {
            MemoryEvent {
                ts_ns,
                device,
                action,
                addr,
                segment,
                bytes,
                stream,
                small_pool,
                allocated,
                reserved,
            }
        };
    vec![
        event(
            11_000,
            0,
            SegmentAlloc,
            base,
            base,
            2 << 20,
            None,
            true,
            0,
            2 << 20,
        ),
        event(
            11_500,
            0,
            Alloc,
            base,
            base,
            512,
            Some(7),
            true,
            512,
            2 << 20,
        ),
        event(
            11_500,
            0,
            Alloc,
            base + 512,
            base,
            1024,
            Some(-3),
            true,
            1536,
            2 << 20,
        ),
        event(
            12_000,
            1,
            Alloc,
            u64::MAX - 4096,
            1 << 40,
            4096,
            Some(0),
            false,
            4096,
            u64::MAX,
        ),
        event(
            12_500,
            0,
            Free,
            base,
            base,
            512,
            Some(7),
            true,
            1024,
            2 << 20,
        ),
        event(13_000, 0, Oom, 0, 0, u64::MAX, None, false, 1024, 2 << 20),
        event(
            14_000,
            0,
            Free,
            base + 512,
            base,
            1024,
            Some(-3),
            true,
            0,
            2 << 20,
        ),
        event(
            14_000,
            0,
            SegmentFree,
            base,
            base,
            2 << 20,
            None,
            true,
            0,
            0,
        ),
    ]
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn format_error(result: keel_trace::Result<Trace>) -> String {
    match result {
        Err(Error::Format(message)) => message,
        Err(other) => panic!("expected a Format error, got {other:?}"),
        Ok(_) => panic!("expected an error, got a trace"),
    }
}

#[test]
fn sample_passes_check() {
    assert_eq!(sample().check(), Ok(()));
}

#[test]
fn check_reports_problems() {
    let mut t = sample();
    // Overlaps "add_kernel" [20000, 25000] without nesting.
    t.spans.push(span(
        1,
        "overlapper",
        SpanKind::Kernel,
        24_000,
        2_000,
        0,
        &[],
    ));
    t.flows.push(Flow {
        id: 99,
        kind: FlowKind::Launch,
        from: FlowEnd {
            lane: 0,
            ts_ns: 500,
        },
        to: FlowEnd {
            lane: 1,
            ts_ns: 20_000,
        },
    });
    t.flows.push(Flow {
        id: 2,
        kind: FlowKind::Launch,
        from: FlowEnd {
            lane: 0,
            ts_ns: 3_000,
        },
        to: FlowEnd {
            lane: 1,
            ts_ns: 20_000,
        },
    });
    t.spans
        .push(span(42, "lost", SpanKind::Kernel, 0, 1, 0, &[]));
    t.instants.push(InstantEvent {
        lane: 17,
        name: s("nowhere"),
        ts_ns: 0,
        args: vec![],
    });
    t.lanes.push(Lane {
        kind: LaneKind::Stream {
            device: 5,
            stream: 0,
            thread: 0,
        },
        name: s("orphan"),
        group: String::new(),
    });
    t.counters.push(Counter {
        device: 9,
        name: s("c"),
        points: vec![(5, 1), (4, 1)],
    });
    t.calibrations.push(Calibration {
        device: 2,
        method: s("m"),
        error_bound_ns: 0,
    });
    t.spans.push(span(
        0,
        "dup args",
        SpanKind::Annotation,
        200_000,
        1,
        0,
        &[("a", "1"), ("a", "2")],
    ));
    let problems = t.check().expect_err("a broken trace");
    let all = problems.join("\n");
    for expected in [
        "overlap without nesting: 'add_kernel' [20000, 25000] ns and 'overlapper' [24000, 26000] ns",
        "flow 3 (id 99): its start at 500 ns on lane 0 lies inside no span of that lane",
        "flow 4 reuses flow id 2",
        "span 22 ('lost') is on lane 42, but the trace has 6 lane(s)",
        "instant 2 ('nowhere') is on lane 17",
        "lane 5 ('orphan') is a stream of device 5, but the trace has 2 device(s)",
        "counter 2 ('c') is for device 9",
        "counter 2 ('c') is not in time order",
        "calibration 2 is for device 2",
        "has two arguments named 'a'",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    assert_eq!(problems.len(), 10, "{all}");
}

#[test]
fn check_accepts_touching_and_equal_spans() {
    let mut t = sample();
    t.spans
        .push(span(2, "touching", SpanKind::Kernel, 37_101, 10, 0, &[]));
    t.spans.push(span(
        2,
        "same as mul",
        SpanKind::Kernel,
        30_100,
        7_001,
        0,
        &[],
    ));
    assert_eq!(t.check(), Ok(()));
}

#[test]
fn json_round_trip() {
    let t = sample();
    let text = to_json_string(&t).expect("export");
    let back = read_json(&text).expect("import");
    assert_eq!(back, t);
    assert_eq!(to_json_string(&back).expect("export again"), text);
}

#[test]
fn native_round_trip() {
    let t = sample();
    let bytes = to_native_bytes(&t).expect("export");
    assert_eq!(read_native(&bytes).expect("import"), t);
    assert_eq!(
        read_native(&to_native_bytes(&Trace::default()).expect("empty")),
        Ok(Trace::default())
    );
    assert_eq!(
        read_json(&to_json_string(&Trace::default()).expect("empty")),
        Ok(Trace::default())
    );
}

#[test]
fn json_micros_are_exact() {
    let mut t = sample();
    for (i, ns) in [0, 1, 999, 1_000, 1_001, 123_456_789, u64::MAX - 1, u64::MAX]
        .into_iter()
        .enumerate()
    {
        t.instants.push(InstantEvent {
            lane: 4,
            name: format!("t{i}"),
            ts_ns: ns,
            args: vec![],
        });
    }
    let text = to_json_string(&t).expect("export");
    assert!(text.contains("\"ts\":18446744073709551.615"), "u64::MAX ns");
    assert!(text.contains("\"ts\":0.001,"));
    assert_eq!(read_json(&text).expect("import"), t);
}

/// Compares `bytes` with the golden file `name`, or rewrites it when
/// `UPDATE_GOLDEN=1`.
fn golden(name: &str, bytes: &[u8]) {
    let path = data_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(data_dir()).expect("create tests/data");
        std::fs::write(&path, bytes).expect("write golden file");
        return;
    }
    let pinned = std::fs::read(&path).unwrap_or_default();
    assert!(
        pinned == bytes,
        "{} differs from the current output ({} bytes pinned, {} now). If the format \
         change is intended, regenerate with: UPDATE_GOLDEN=1 cargo test \
         --no-default-features --features cpu --test profiler_formats (and check that \
         old files still load)",
        path.display(),
        pinned.len(),
        bytes.len()
    );
}

#[test]
fn golden_json() {
    golden(
        "sample.trace.json",
        to_json_string(&sample()).expect("export").as_bytes(),
    );
}

#[test]
fn golden_native() {
    golden(
        "sample.v2.keeltrace",
        &to_native_bytes(&sample()).expect("export"),
    );
}

#[test]
fn committed_golden_files_still_load() {
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        return; // being rewritten by the golden_* tests
    }
    let json = std::fs::read(data_dir().join("sample.trace.json")).expect("golden JSON");
    assert_eq!(read_json_bytes(&json).expect("golden JSON loads"), sample());
    // Written before Kineto's fields (device, stream, correlation, grid,
    // the cudaLaunchKernel slices) were added for PyTorch's tools, and
    // before the sample's device kernel had a grid and a block.
    let old = std::fs::read(data_dir().join("sample.before-kineto-fields.trace.json"))
        .expect("older golden JSON");
    let mut expected = Trace {
        memory: Vec::new(),
        ..sample()
    };
    for span in &mut expected.spans {
        if &*span.name == "mul_kernel" {
            span.args.clear();
        }
    }
    assert_eq!(
        read_json_bytes(&old).expect("older golden JSON loads"),
        expected
    );
    // The native format: version 2 (with the section directory) and the
    // same trace written in version 1 (sections one after another) open
    // to the same trace.
    let v2 = std::fs::read(data_dir().join("sample.v2.keeltrace")).expect("golden native");
    assert_eq!(v2[8..12], 2u32.to_le_bytes());
    assert_eq!(read_native(&v2).expect("golden native loads"), sample());
    let v1 = std::fs::read(data_dir().join("sample.keeltrace")).expect("golden native v1");
    assert_eq!(v1[8..12], 1u32.to_le_bytes());
    assert_eq!(read_native(&v1).expect("version 1 loads"), sample());
    // Written before allocator events existed: the same trace without them.
    let without_memory = Trace {
        memory: Vec::new(),
        ..sample()
    };
    let old = std::fs::read(data_dir().join("sample.before-memory.keeltrace"))
        .expect("older golden native");
    assert_eq!(
        read_native(&old).expect("older golden native loads"),
        without_memory
    );
    let old = std::fs::read(data_dir().join("sample.before-memory.trace.json"))
        .expect("older golden JSON");
    assert_eq!(
        read_json_bytes(&old).expect("older golden JSON loads"),
        without_memory
    );
    assert_eq!(
        load_trace(&data_dir().join("sample.trace.json")),
        Ok(sample())
    );
    for name in ["sample.keeltrace", "sample.v2.keeltrace"] {
        assert_eq!(load_trace(&data_dir().join(name)), Ok(sample()), "{name}");
    }
}

#[test]
fn save_and_load_pick_the_format() {
    let dir = std::env::temp_dir().join(format!("keel-formats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let t = sample();
    let json = dir.join("a.trace.json");
    let native = dir.join("a.keeltrace");
    save_trace(&t, &json).expect("save json");
    save_trace(&t, &native).expect("save native");
    assert!(
        std::fs::read(&json)
            .expect("read")
            .starts_with(b"{\"schemaVersion\": 1,")
    );
    assert!(std::fs::read(&native).expect("read").starts_with(MAGIC));
    assert_eq!(load_trace(&json), Ok(t.clone()));
    assert_eq!(load_trace(&native), Ok(t.clone()));
    // Sniffing, not the extension, decides on load.
    let renamed = dir.join("native-named.json");
    std::fs::copy(&native, &renamed).expect("copy");
    assert_eq!(load_trace(&renamed), Ok(t.clone()));
    let message = format_error(save_trace(&t, &dir.join("a.txt")).map(|()| Trace::default()));
    assert!(
        message.contains(
            "expected a trace file name ending in .json or .keeltrace, found extension .txt"
        ),
        "{message}"
    );
    let message = format_error(load_trace(&dir.join("missing.keeltrace")));
    assert!(message.contains("could not read trace file"), "{message}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn native_errors_are_clear() {
    let bytes = to_native_bytes(&sample()).expect("export");

    let message = format_error(read_native(&bytes[..bytes.len() - 5]));
    assert!(message.contains("truncated"), "{message}");
    assert!(message.contains("byte offset"), "{message}");

    let message = format_error(read_native(&bytes[..10]));
    assert!(
        message
            .contains("at byte offset 8: expected a u32 format version, found the end of the file"),
        "{message}"
    );

    let mut bad = bytes.clone();
    bad[0] = b'X';
    let message = format_error(read_native(&bad));
    assert!(
        message
            .contains("at byte offset 0: expected the magic \"KEELTRC\\0\", found \"XEELTRC\\0\""),
        "{message}"
    );
    assert!(format_error(read_native(b"")).contains("expected the magic"));

    let mut future = bytes.clone();
    future[8..12].copy_from_slice(&3u32.to_le_bytes());
    let message = format_error(read_native(&future));
    assert!(
        message.contains(
            "at byte offset 8: expected format version 1 or 2, found version 3 (written by a newer Keel)"
        ),
        "{message}"
    );

    let mut trailing = bytes.clone();
    trailing.push(0);
    let message = format_error(read_native(&trailing));
    assert!(
        message.contains("expected the end of the file after the last section, found 1 more bytes"),
        "{message}"
    );

    // A huge string count in a tiny file is refused, not allocated.
    let mut huge = Vec::from(&MAGIC[..]);
    huge.extend_from_slice(&1u32.to_le_bytes());
    huge.extend_from_slice(&[1, 2, 1, 0]); // header: version 1, dropped 0
    huge.extend_from_slice(&[
        2, 10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0,
    ]);
    let message = format_error(read_native(&huge));
    assert!(
        message.contains("strings at byte offset 18: expected a count of strings that fits in the"),
        "{message}"
    );

    // A string index out of range and an unknown span kind.
    let mut t = Trace::default();
    t.lanes.push(Lane {
        kind: LaneKind::Host { thread: 1 },
        name: s("a"),
        group: String::new(),
    });
    let good = to_native_bytes(&t).expect("export");
    let mut bad_index = good.clone();
    // The lanes section: one lane, host (1), thread 1, name string 0.
    let lanes = section_body(&good, 4);
    assert_eq!(&good[lanes.clone()], &[1, 1, 1, 0]);
    let lane_name = lanes.end - 1;
    bad_index[lane_name] = 7;
    let message = format_error(read_native(&bad_index));
    assert!(message.contains("lanes at byte offset"), "{message}");
    assert!(
        message.contains("expected a lane name (a string index below 1), found index 7"),
        "{message}"
    );
    let mut bad_kind = good.clone();
    bad_kind[lane_name - 2] = 9;
    let message = format_error(read_native(&bad_kind));
    assert!(
        message.contains("expected a lane kind (0 stream, 1 host, 2 a stream's thread), found 9"),
        "{message}"
    );
}

/// Removes the first event line containing `needle` (events are one per
/// line).
fn without_event(json: &str, needle: &str) -> String {
    let lines: Vec<&str> = json.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(needle))
        .expect("the event to remove");
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    out.remove(at);
    // Keep the list valid: the line before may now end with a comma.
    if out[at].starts_with(']') {
        let prev = &mut out[at - 1];
        if prev.ends_with(',') {
            prev.pop();
        }
    }
    out.join("\n")
}

#[test]
fn json_errors_are_clear() {
    let json = to_json_string(&sample()).expect("export");
    let cases: Vec<(String, &str)> = vec![
        (
            s("not json"),
            "expected a JSON trace (an object with \"traceEvents\" or an array of events), found 'n' at byte offset 0",
        ),
        (
            s("42"),
            "expected a JSON trace (an object with \"traceEvents\" or an array of events), found '4'",
        ),
        (
            s("{\"events\":[]}"),
            "expected a top-level field \"traceEvents\" holding an array, found none",
        ),
        (
            s("{\"traceEvents\":{}}"),
            "expected a top-level field \"traceEvents\" holding an array, found none",
        ),
        (s(""), "expected a JSON trace, found an empty file"),
        (
            s("{\"traceEvents\" []}"),
            "expected ':' after field \"traceEvents\", found '['",
        ),
        (
            json.replacen("\"ts\":1.000,", "", 1),
            ": expected a field \"ts\", found none",
        ),
        (
            json.replacen("\"ts\":1.000,", "\"ts\":\"1\",", 1),
            ".ts: expected a number of microseconds, found a string",
        ),
        (
            json.replacen("\"ts\":1.000,", "\"ts\":1.0001,", 1),
            ".ts: expected a non-negative number of microseconds with at most 3 decimals below 2^64 ns, found 1.0001",
        ),
        (json.replacen("\"ts\":1.000,", "\"ts\":-1,", 1), "found -1"),
        (
            without_event(&json, "\"ph\":\"f\""),
            "expected an \"f\" event ending flow id 1, found none",
        ),
        (
            without_event(&json, "\"ph\":\"s\""),
            "expected an \"s\" event before this \"f\" of flow id 1, found none",
        ),
        (
            json.replacen(
                "\"pid\":1,\"tid\":2,\"ts\"",
                "\"pid\":1,\"tid\":9,\"ts\"",
                1,
            ),
            "found unknown lane pid 1 tid 9",
        ),
        (
            json.replacen("\"version\":1,", "\"version\":7,", 1),
            "keel.version: expected a trace version up to 1, found 7 (written by a newer Keel)",
        ),
        (
            json.replacen("\"dropped\":3", "\"dropped\":\"3\"", 1),
            "keel.dropped: expected an unsigned integer, found the string \"3\"",
        ),
        (
            json.replacen("\"keel_kind\":\"copy\"", "\"keel_kind\":\"teleport\"", 1),
            "args.keel_kind: expected one of kernel, copy, alloc, free, event_record, wait, sync, annotation, operator, found \"teleport\"",
        ),
        (
            without_event(
                &json,
                "\"name\":\"thread_name\",\"args\":{\"name\":\"stream 34\"",
            ),
            "expected a thread_name event for every lane, found none for lane 2 (tid 3)",
        ),
    ];
    for (input, expected) in cases {
        let result = read_json(&input);
        assert!(result.is_err(), "expected an error with {expected:?}");
        let message = format_error(result);
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    // Keel's own files are read exactly: invalid UTF-8 is an error...
    let mut bytes = json.clone().into_bytes();
    let at = json.find("\"main\"").expect("a lane name") + 1;
    bytes[at] = 0xff;
    let message = format_error(read_json_bytes(&bytes));
    assert!(
        message.contains(&format!(
            "expected a UTF-8 JSON trace, found invalid UTF-8 at byte offset {at}"
        )),
        "{message}"
    );
    // ...while in another tool's file it costs the one event.
    let t = read_json_bytes(b"{\"traceEvents\":[\xff, {\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":1,\"name\":\"a\"}]}")
        .expect("partial import");
    assert_eq!(t.spans.len(), 1);
    let report = t.import.expect("import report");
    assert_eq!((report.events, report.imported), (2, 1));
    assert_eq!(report.skipped, vec![(s("not a JSON object"), 1)]);
}

/// Keel's own files stream through the scanner with JSON's rules: what a
/// lenient import forgives in other tools' files is an error naming its
/// byte offset, and nothing about a valid file depends on where in it its
/// tables are.
#[test]
fn keel_json_is_read_strictly_as_it_streams() {
    let json = to_json_string(&sample()).expect("export");
    let cases: Vec<(String, String)> = vec![
        (
            json.replacen("\n],", ",\n],", 1),
            format!(
                "traceEvents: expected an event after ',', found ']' at byte offset {}",
                json.find("\n],").expect("the end of the events") + 2
            ),
        ),
        (
            json.replacen("},\n{", "}\n{", 1),
            format!(
                "traceEvents: expected ',' or ']' after an event, found '{{' at byte offset {}",
                json.find("},\n{").expect("two events") + 2
            ),
        ),
        (
            format!("{json} x"),
            format!(
                "expected the end of the file after the trace, found 'x' at byte offset {}",
                json.len() + 1
            ),
        ),
        (
            json[..json.len() / 2].to_owned(),
            "found the end of the file (truncated?)".to_owned(),
        ),
        (
            json.replacen("\"ph\":\"X\",", "\"ph\":\"X\",,", 1),
            format!(
                "expected valid JSON, found invalid JSON (key must be a string) at byte offset {}",
                json.find("\"ph\":\"X\",").expect("a span") + 9
            ),
        ),
        (
            json.replacen("\"keel\":{", "\"keel\":{,", 1),
            "keel: expected valid JSON, found invalid JSON".to_owned(),
        ),
        (
            json.replacen(
                "\"traceEvents\":[",
                "\"traceEvents\":[],\"traceEvents\":[",
                1,
            ),
            "expected one top-level field \"traceEvents\", found a second one".to_owned(),
        ),
    ];
    for (input, expected) in cases {
        let message = format_error(read_json(&input));
        assert!(
            message.contains(&expected),
            "expected {expected:?} in {message:?}"
        );
    }

    // A lane may be declared after its first event, the `keel` object
    // comes last: both are tables the first pass reads.
    let lines: Vec<&str> = json.lines().collect();
    let declaration = lines
        .iter()
        .position(|l| l.contains("\"name\":\"thread_name\",\"args\":{\"name\":\"main\""))
        .expect("the main lane's thread_name");
    let end = lines
        .iter()
        .position(|l| *l == "],")
        .expect("the end of the events");
    let mut moved: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let line = moved.remove(declaration);
    moved.insert(end - 1, line);
    // The last event line ends without a comma: give it one, take it
    // from the moved line.
    let last = end - 2;
    moved[last].push(',');
    moved[end - 1] = moved[end - 1].trim_end_matches(',').to_owned();
    assert_eq!(read_json(&moved.join("\n")), Ok(sample()));

    // A repeated key takes its last value, as a JSON tree has it.
    let repeated = json.replacen(
        "\"name\":\"main\"",
        "\"name\":\"first\",\"name\":\"main\"",
        1,
    );
    assert_eq!(read_json(&repeated), Ok(sample()));

    // No event is too large for Keel's own files (the limit that protects
    // imports from huge events does not apply: the input bounds them).
    let mut big = sample();
    big.spans[0]
        .args
        .push(("blob".into(), "x".repeat(17 << 20).into()));
    let text = to_json_string(&big).expect("export");
    assert_eq!(read_json(&text), Ok(big));

    // Compressed, the same file reads exactly (the decompressed stream is
    // read once per pass).
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, json.as_bytes()).expect("gzip");
    let gz = gz.finish().expect("gzip");
    assert_eq!(keel_trace::file::from_bytes(&gz), Ok(sample()));

    // A file that looks like Keel's (its first events carry "keel_lane")
    // but has no `keel` object is another tool's, imported; until that is
    // known it is held to JSON's rules.
    let cut = json.find("\n],").expect("the end of the events");
    let foreign = format!("{}\n]}}", &json[..cut]);
    let t = read_json(&foreign).expect("imported");
    assert!(t.import.is_some());
    let broken = foreign.replacen("},\n{", "},\n{,", 1);
    let message = format_error(read_json(&broken));
    assert!(message.contains("expected valid JSON"), "{message}");
}

#[test]
fn foreign_traces_import_what_they_can() {
    let kineto = r#"{"schemaVersion": 1, "traceEvents": [
      {"ph": "M", "name": "process_name", "pid": 4242, "args": {"name": "python3"}},
      {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
      {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
      {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 4242, "tid": 4242, "ts": 10.5, "dur": 20.25, "args": {"External id": 3, "Input Dims": [[2], [2]]}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 12, "dur": 5, "args": {"correlation": 9}},
      {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 1.5e1, "dur": 2.0001, "args": {"correlation": 9}},
      {"ph": "s", "id": 9, "pid": 4242, "tid": 4242, "ts": 12, "cat": "ac2g", "name": "ac2g"},
      {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 15, "cat": "ac2g", "name": "ac2g", "bp": "e"},
      {"ph": "B", "name": "ignored", "pid": 1, "tid": 1, "ts": 0},
      {"ph": "X", "name": "no timestamp is skipped", "pid": 1, "tid": 1},
      {"ph": "C", "name": "mem", "pid": 0, "ts": 1, "args": {"value": 5}}
    ]}"#;
    let t = read_json(kineto).expect("foreign import");
    assert_eq!(t.devices.len(), 1);
    assert_eq!(t.devices[0].device, "cuda:0");
    assert_eq!(t.spans.len(), 3, "{:#?}", t.spans);
    assert_eq!(t.spans[0].kind, SpanKind::Annotation);
    assert_eq!(t.spans[0].start_ns, 10_500);
    assert_eq!(t.spans[0].dur_ns, 20_250);
    assert_eq!(t.spans[1].kind, SpanKind::Kernel);
    assert_eq!(t.spans[2].start_ns, 15_000);
    assert_eq!(t.spans[2].dur_ns, 2_000);
    assert!(
        t.spans[0]
            .args
            .contains(&("Input Dims".into(), "[[2],[2]]".into()))
    );
    let device_lane = &t.lanes[t.spans[2].lane as usize];
    assert_eq!(
        device_lane.kind,
        LaneKind::Stream {
            device: 0,
            stream: 7,
            thread: 0
        }
    );
    assert_eq!(device_lane.name, "stream 7");
    assert_eq!(t.flows.len(), 1);
    assert_eq!(t.flows[0].kind, FlowKind::Launch);
    assert_eq!(t.counters.len(), 1);
    assert_eq!(t.check(), Ok(()));
    // The array form of the format.
    let t =
        read_json(r#"[{"ph":"X","name":"a","pid":1,"tid":2,"ts":1,"dur":1}]"#).expect("array form");
    assert_eq!(t.spans.len(), 1);
}

/// Exact ns from a JSON number of microseconds (test-side, independent).
fn ns(v: &serde_json::Value) -> u64 {
    let text = v.to_string();
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let frac = format!("{frac:0<3}");
    int.parse::<u64>().expect("integer part") * 1000 + frac.parse::<u64>().expect("fraction")
}

#[test]
fn exported_json_nests_and_pairs_flows() {
    let text = to_json_string(&sample()).expect("export");
    let root: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(root["displayTimeUnit"], "ns");
    let events = root["traceEvents"].as_array().expect("traceEvents");
    let mut slices: HashMap<(u64, u64), Vec<(u64, u64)>> = HashMap::new();
    let mut starts = HashMap::new();
    let mut finishes = HashMap::new();
    for e in events {
        let key = || {
            (
                e["pid"].as_u64().expect("pid"),
                e["tid"].as_u64().expect("tid"),
            )
        };
        match e["ph"].as_str().expect("ph") {
            "X" => {
                let ts = ns(&e["ts"]);
                slices
                    .entry(key())
                    .or_default()
                    .push((ts, ts + ns(&e["dur"])));
                assert!(e["cat"].is_string() && e["name"].is_string());
            }
            ph @ ("s" | "f") => {
                assert_eq!(e["bp"], "e");
                let v = (key(), ns(&e["ts"]), e["cat"].clone(), e["name"].clone());
                let map = if ph == "s" {
                    &mut starts
                } else {
                    &mut finishes
                };
                assert!(
                    map.insert(e["id"].as_u64().expect("id"), v).is_none(),
                    "duplicate id"
                );
            }
            _ => {}
        }
    }
    for (lane, list) in &mut slices {
        list.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut open: Vec<(u64, u64)> = Vec::new();
        for &(start, end) in list.iter() {
            while open.last().is_some_and(|top| top.1 <= start) {
                open.pop();
            }
            if let Some(top) = open.last() {
                assert!(
                    end <= top.1,
                    "slices on {lane:?} overlap: {top:?} and {:?}",
                    (start, end)
                );
            }
            open.push((start, end));
        }
    }
    assert_eq!(starts.len(), sample().flows.len());
    let enclosed =
        |lane: &(u64, u64), ts: u64| slices[lane].iter().any(|&(a, b)| a <= ts && ts <= b);
    for (id, s) in &starts {
        let f = finishes.get(id).expect("every s has an f");
        assert_eq!((&s.2, &s.3), (&f.2, &f.3), "cat and name match");
        assert!(
            enclosed(&s.0, s.1) && enclosed(&f.0, f.1),
            "flow {id} binds to a slice"
        );
    }
    assert_eq!(starts.len(), finishes.len());
    let cats: HashSet<&str> = events.iter().filter_map(|e| e["cat"].as_str()).collect();
    for cat in [
        "cuda_runtime",
        "cuda_sync",
        "user_annotation",
        "kernel",
        "gpu_memcpy",
        "gpu_memory",
        "cuda_event",
        "ac2g",
        "event_wait",
    ] {
        assert!(cats.contains(cat), "{cat}");
    }
}

fn golden_native_bytes() -> Vec<u8> {
    to_native_bytes(&sample()).expect("export")
}

fn golden_json_text() -> String {
    to_json_string(&sample()).expect("export")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn native_reader_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_native(&bytes);
        for version in [1u32, 2] {
            let mut with_magic = Vec::from(&MAGIC[..]);
            with_magic.extend_from_slice(&version.to_le_bytes());
            with_magic.extend_from_slice(&bytes);
            let _ = read_native(&with_magic);
        }
    }

    /// Directories of a few sections with any kinds, offsets and lengths
    /// over a golden file's bodies.
    #[test]
    fn native_reader_never_panics_on_directories(
        entries in proptest::collection::vec((0u32..14, 0u64..2000, 0u64..2000), 0..14),
    ) {
        let golden = golden_native_bytes();
        let mut bytes = golden[..12].to_vec();
        bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (kind, offset, length) in &entries {
            bytes.extend_from_slice(&kind.to_le_bytes());
            bytes.extend_from_slice(&offset.to_le_bytes());
            bytes.extend_from_slice(&length.to_le_bytes());
        }
        let start = 16 + 20 * usize::try_from(u32::from_le_bytes([golden[12], golden[13], golden[14], golden[15]])).expect("count");
        bytes.extend_from_slice(&golden[start..]);
        let _ = read_native(&bytes);
    }

    #[test]
    fn native_reader_never_panics_on_mutations(
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
    ) {
        let golden = golden_native_bytes();
        let mut bytes = golden.clone();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        let _ = read_native(&bytes);
        let _ = read_native(&bytes[..cut.index(bytes.len() + 1)]);
        let _ = read_native(&golden[..cut.index(golden.len())]).expect_err("a truncated file fails");
    }

    #[test]
    fn json_reader_never_panics_on_strings(text in ".{0,200}") {
        let _ = read_json(&text);
        let _ = read_json(&format!("{{\"traceEvents\":[{text}]}}"));
        let _ = read_json(&format!("{{\"traceEvents\":[{text}],\"keel\":{{}}}}"));
    }

    #[test]
    fn json_reader_never_panics_on_mutations(
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        line in any::<prop::sample::Index>(),
        replacement in prop::sample::select(vec![
            "", "{}", "null", "{\"ph\":\"X\"}", "{\"ph\":\"f\",\"id\":1,\"pid\":0,\"tid\":1,\"ts\":1}",
            "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":18446744073709551615,\"args\":{\"name\":\"x\",\"keel_lane\":\"host\",\"thread\":1}}",
            "{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":1e400,\"dur\":-0.0,\"name\":\"x\"}",
            "{\"ph\":\"C\",\"pid\":1,\"ts\":1,\"name\":\"memory in use (bytes)\",\"args\":{\"value\":1.5}}",
        ]),
    ) {
        let golden = golden_json_text();
        let mut bytes = golden.clone().into_bytes();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        let _ = read_json_bytes(&bytes);
        let _ = read_json_bytes(&bytes[..cut.index(bytes.len() + 1)]);
        let mut lines: Vec<&str> = golden.lines().collect();
        let i = line.index(lines.len());
        lines[i] = replacement;
        let _ = read_json(&lines.join("\n"));
    }
}

/// Version 2's directory: where each section is, checked before any body
/// is read; sections a newer writer adds are skipped.
#[test]
fn native_directory_problems_are_clear() {
    let good = golden_native_bytes();
    let count = u32::from_le_bytes([good[12], good[13], good[14], good[15]]) as usize;
    assert_eq!(count, 10, "sections 1 to 9 and the memory section");
    let entry = |i: usize| 16 + 20 * i;
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = good.clone();
        edit(&mut bytes);
        format_error(read_native(&bytes))
    };
    let set = |bytes: &mut Vec<u8>, at: usize, v: u64, n: usize| {
        bytes[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
    };
    let cases: Vec<(String, &str)> = vec![
        (
            with(&|b| set(b, 12, 1000, 4)),
            "section directory at byte offset 12: expected a directory of 1000 sections (20000 bytes), found only",
        ),
        (
            // The spans section's offset into the directory.
            with(&|b| set(b, entry(4) + 4, 20, 8)),
            "expected the spans section to start after the directory (at byte offset 216 or later), found byte offset 20",
        ),
        (
            with(&|b| set(b, entry(4) + 12, 1 << 40, 8)),
            "found it ending past them (truncated?)",
        ),
        (
            // The devices section listed twice.
            with(&|b| set(b, entry(3), 3, 4)),
            "expected one entry for the devices section, found a second one",
        ),
        (
            // The lanes section made longer, into the spans section.
            with(&|b| {
                let len = section_body(b, 4).len() as u64;
                set(b, entry(3) + 12, len + 1, 8);
            }),
            "expected sections that do not overlap, found the lanes section",
        ),
        (
            // The calibrations entry turned into an unknown kind: skipped,
            // so the required section is missing.
            with(&|b| set(b, entry(8), 40, 4)),
            "expected the calibrations section (kind 9) in the directory, found none",
        ),
        (
            // A body with a byte too many for what it holds.
            with(&|b| {
                let len = section_body(b, 4).len() as u64;
                set(b, entry(3) + 12, len - 1, 8);
            }),
            "native trace, lanes at byte offset",
        ),
    ];
    for (message, expected) in cases {
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    // A section of a kind this reader does not know is skipped: one more
    // entry, pointing at a body appended to the file.
    let mut newer = good[..12].to_vec();
    newer.extend_from_slice(&(count as u32 + 1).to_le_bytes());
    for i in 0..count {
        let at = entry(i);
        newer.extend_from_slice(&good[at..at + 4]);
        let offset = u64::from_le_bytes(good[at + 4..at + 12].try_into().expect("8 bytes"));
        newer.extend_from_slice(&(offset + 20).to_le_bytes());
        newer.extend_from_slice(&good[at + 12..at + 20]);
    }
    newer.extend_from_slice(&99u32.to_le_bytes());
    newer.extend_from_slice(&(good.len() as u64 + 20).to_le_bytes());
    newer.extend_from_slice(&3u64.to_le_bytes());
    newer.extend_from_slice(&good[entry(count)..]);
    newer.extend_from_slice(b"new");
    assert_eq!(
        read_native(&newer).expect("an unknown section is skipped"),
        sample()
    );
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn section(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// One 64 KiB string referenced by 4,096 device properties: a 74 KB file
/// that would decode to 512 MiB of copies. The reader refuses it once the
/// copies pass its budget (128 times the file's size plus 16 MiB).
#[test]
fn native_strings_are_bounded_by_the_input_size() {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    section(&mut bytes, 1, &[1, 0]);
    let mut strings = Vec::new();
    varint(&mut strings, 1);
    varint(&mut strings, 64 << 10);
    strings.extend(std::iter::repeat_n(b'x', 64 << 10));
    section(&mut bytes, 2, &strings);
    let mut devices = vec![1, 0, 0];
    varint(&mut devices, 4096);
    for _ in 0..4096 {
        devices.extend_from_slice(&[0, 0]);
    }
    section(&mut bytes, 3, &devices);
    for tag in 4..=9 {
        section(&mut bytes, tag, &[0]);
    }
    assert!(bytes.len() < 80_000, "{} bytes", bytes.len());
    assert_eq!(
        keel_trace::native::string_budget(bytes.len()),
        128 * bytes.len() as u64 + (16 << 20)
    );
    let message = format_error(read_native(&bytes));
    assert!(
        message.contains("a string of 65536 bytes referenced too often"),
        "{message}"
    );
    // The same file with few references loads.
    let mut small = MAGIC.to_vec();
    small.extend_from_slice(&1u32.to_le_bytes());
    section(&mut small, 1, &[1, 0]);
    section(&mut small, 2, &strings);
    let mut devices = vec![1, 0, 0];
    varint(&mut devices, 64);
    for _ in 0..64 {
        devices.extend_from_slice(&[0, 0]);
    }
    section(&mut small, 3, &devices);
    for tag in 4..=9 {
        section(&mut small, tag, &[0]);
    }
    let t = read_native(&small).expect("64 references fit the budget");
    assert_eq!(t.devices[0].properties.len(), 64);
}

/// A Kineto trace imported and exported again: its kernels' `grid` and
/// `block` (imported as the strings `[1,2,3]`) are arrays again.
#[test]
fn an_imported_kineto_trace_exports_grid_and_block_as_arrays() {
    let t = load_trace(&data_dir().join("import/kineto.json")).expect("fixture");
    let text = to_json_string(&t).expect("export");
    let root: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let events = root["traceEvents"].as_array().expect("events");
    let dims: Vec<(&str, &serde_json::Value, &serde_json::Value)> = events
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| {
            (
                e["name"].as_str().expect("a name"),
                &e["args"]["grid"],
                &e["args"]["block"],
            )
        })
        .collect();
    let conv = "void conv_kernel<float>(float const*, float*)";
    let (one, two, three, four) = (
        serde_json::json!([1, 2, 3]),
        serde_json::json!([128, 1, 1]),
        serde_json::json!([4, 1, 1]),
        serde_json::json!([256, 1, 1]),
    );
    assert_eq!(
        dims,
        [(conv, &one, &two), ("elementwise_kernel", &three, &four)]
    );
}

/// What PyTorch's tools read (HolisticTraceAnalysis): Kineto's fields on
/// device work, a `cudaLaunchKernel` slice with the same correlation on the
/// host, the rank in `distributedInfo`; Keel's reader still gets the exact
/// trace back.
#[test]
fn export_carries_kinetos_fields_and_round_trips() {
    use SpanKind::*;
    let grid = &[
        ("grid", "4x2x1"),
        ("block", "256x1x1"),
        ("stream", "user's own"),
    ];
    let t = Trace {
        version: TRACE_VERSION,
        devices: vec![TraceDevice {
            device: s("cuda:0"),
            name: s("GPU"),
            properties: pairs(&[("memory", "80 GiB")]),
        }],
        lanes: vec![
            Lane {
                kind: LaneKind::Host { thread: 1 },
                name: s("main"),
                group: String::new(),
            },
            Lane {
                kind: LaneKind::Stream {
                    device: 0,
                    stream: 0,
                    thread: 0,
                },
                name: s("stream 0"),
                group: String::new(),
            },
        ],
        spans: vec![
            span(0, "saxpy", Kernel, 1_000, 500, 5, grid),
            span(1, "saxpy", Kernel, 2_000, 700, 5, grid),
        ],
        flows: vec![Flow {
            id: 1,
            kind: FlowKind::Launch,
            from: FlowEnd {
                lane: 0,
                ts_ns: 1_000,
            },
            to: FlowEnd {
                lane: 1,
                ts_ns: 2_000,
            },
        }],
        ..Trace::default()
    };
    let text = to_json_string(&t).expect("export");
    assert!(text.contains("\"rank\": 0"), "HTA's rank pattern");
    let root: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(root["deviceProperties"][0]["name"], "GPU");
    assert_eq!(root["deviceProperties"][0]["memory"], "80 GiB");
    let events = root["traceEvents"].as_array().expect("events");
    let kernel = events
        .iter()
        .find(|e| e["cat"] == "kernel")
        .expect("device kernel");
    assert_eq!(kernel["args"]["device"], 0);
    assert_eq!(kernel["args"]["stream"], 2, "the lane's tid, positive");
    assert_eq!(kernel["args"]["correlation"], 5);
    assert_eq!(kernel["args"]["grid"], serde_json::json!([4, 2, 1]));
    assert_eq!(kernel["args"]["block"], serde_json::json!([256, 1, 1]));
    // The user's arguments survive too, as Keel's own strings.
    assert_eq!(kernel["args"]["keel_arg_block"], "256x1x1");
    assert_eq!(kernel["args"]["keel_arg_stream"], "user's own");
    let launch = events
        .iter()
        .find(|e| e["name"] == "cudaLaunchKernel")
        .expect("runtime slice");
    assert_eq!(launch["cat"], "cuda_runtime");
    assert_eq!(launch["args"]["correlation"], 5);
    assert_eq!(
        (launch["ts"].to_string(), launch["dur"].to_string()),
        (s("1.000"), s("0.500")),
        "the host span's interval"
    );
    let host = events
        .iter()
        .find(|e| e["cat"] == "cpu_op")
        .expect("host span");
    assert_eq!(host["name"], "saxpy");
    assert_eq!(read_json(&text), Ok(t));
}

#[test]
fn memory_events_export_as_pytorch_writes_them() {
    let text = to_json_string(&sample()).expect("export");
    let root: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let events = root["traceEvents"].as_array().expect("traceEvents");
    let memory: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["cat"] == "cpu_instant_event")
        .collect();
    assert_eq!(memory.len(), sample_memory().len());
    let names: Vec<&str> = memory
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "[memory segment]",
            "[memory]",
            "[memory]",
            "[memory]",
            "[memory]",
            "[OutOfMemory]",
            "[memory]",
            "[memory segment]"
        ]
    );
    for e in &memory {
        assert_eq!((&e["ph"], &e["s"]), (&"i".into(), &"t".into()));
    }
    // The first block on vulkan:0 (c10's Vulkan is 10), then its free
    // (negative bytes), and a block on cuda:1.
    let alloc = &memory[1]["args"];
    assert_eq!(alloc["Device Type"], 10);
    assert_eq!(alloc["Device Id"], 0);
    assert_eq!(alloc["Addr"], 0x7f00_0000_0000_u64);
    assert_eq!(alloc["Bytes"], 512);
    assert_eq!(alloc["Total Allocated"], 512);
    assert_eq!(alloc["Total Reserved"], 2 << 20);
    assert_eq!(alloc["keel_action"], "alloc");
    assert_eq!(alloc["keel_stream"], 7);
    assert_eq!(memory[4]["args"]["Bytes"], -512);
    assert_eq!(memory[3]["args"]["Device Type"], 1);
    assert_eq!(memory[3]["args"]["Device Id"], 1);
    assert_eq!(ns(&memory[3]["ts"]), 12_000);
    // Read back exactly.
    assert_eq!(read_json(&text).expect("read").memory, sample_memory());
}

#[test]
fn memory_event_problems_are_reported() {
    let mut t = sample();
    t.memory[3].device = 9;
    t.memory.swap(4, 5);
    let problems = t.check().expect_err("problems");
    assert_eq!(
        problems,
        [
            "memory event 3 (alloc) is for device 9, but the trace has 2 device(s)",
            "memory events are not in time order: event 5 at 12500 ns comes after 13000 ns",
        ]
    );
    // Malformed input is a clear error in both formats.
    let text = to_json_string(&sample()).expect("export");
    let bad = text.replacen("\"keel_action\":\"free\"", "\"keel_action\":\"leak\"", 1);
    let message = format_error(read_json(&bad));
    assert!(
        message.contains("keel_action: expected one of alloc, free, segment_alloc, segment_free, oom, found \"leak\""),
        "{message}"
    );
    // Every cut of a file fails, the one before its memory section too:
    // version 2 lists the section in its directory...
    let bytes = to_native_bytes(&sample()).expect("export");
    for cut in 0..bytes.len() {
        assert!(read_native(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let memory = section_body(&bytes, 11);
    assert_eq!(memory.end, bytes.len(), "the memory section comes last");
    let message = format_error(read_native(&bytes[..memory.start]));
    assert!(
        message.contains("expected the memory section (")
            && message.contains("found it ending past them (truncated?)"),
        "{message}"
    );
    // ...and version 1's header says one follows: the cut is not an older
    // file.
    let v1 = std::fs::read(data_dir().join("sample.keeltrace")).expect("golden native v1");
    for cut in 0..v1.len() {
        assert!(read_native(&v1[..cut]).is_err(), "cut at {cut}");
    }
    let without = std::fs::read(data_dir().join("sample.before-memory.keeltrace"))
        .expect("older golden native");
    // One byte more: the header's flags.
    let message = format_error(read_native(&v1[..without.len() + 1]));
    assert!(
        message.contains("expected the memory section, found the end of the file"),
        "{message}"
    );
}

#[test]
fn merged_fragments_keep_memory_events_in_time_order() {
    let mut whole = Trace {
        memory: sample_memory()[4..].to_vec(),
        ..sample().tables_only()
    };
    let earlier = Trace {
        memory: sample_memory()[..4].to_vec(),
        ..sample().tables_only()
    };
    whole.merge(earlier).expect("merge");
    assert_eq!(whole.memory, sample_memory());
    assert_eq!(whole.check(), Ok(()));
}

/// A stream's lanes for threads' inline work (the CPU's default stream)
/// survive both formats: the stream's own lane and a thread's lane of the
/// same stream stay two lanes. JSON writes the thread next to the stream;
/// files without it (older ones, other tools') read as the stream's own
/// lane.
#[test]
fn a_streams_thread_lanes_round_trip() {
    let mut t = sample();
    let device = 0;
    t.lanes.push(Lane {
        kind: LaneKind::Stream {
            device,
            stream: 33,
            thread: 7,
        },
        name: s("stream 33 · main"),
        group: String::new(),
    });
    let lane = t.lanes.len() as u32 - 1;
    t.spans.push(Span {
        lane,
        name: s("inline kernel").into(),
        kind: SpanKind::Kernel,
        start_ns: 4_000,
        dur_ns: 500,
        op: 0,
        args: Vec::new(),
    });
    assert_eq!(t.check(), Ok(()));
    let json = to_json_string(&t).expect("export");
    assert!(
        json.contains("\"keel_lane\":\"stream\",\"device\":0,\"stream\":33,\"thread\":7"),
        "the thread next to the stream"
    );
    assert_eq!(read_json_bytes(json.as_bytes()).expect("JSON loads"), t);
    let native = to_native_bytes(&t).expect("export");
    assert_eq!(read_native(&native).expect("native loads"), t);
    // Without the thread: the stream's own lane.
    let older = json.replace("\"stream\":33,\"thread\":7", "\"stream\":33");
    let read = read_json_bytes(older.as_bytes()).expect("JSON without the thread loads");
    assert_eq!(
        read.lanes[lane as usize].kind,
        LaneKind::Stream {
            device,
            stream: 33,
            thread: 0
        }
    );
}
