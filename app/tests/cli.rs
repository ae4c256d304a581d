//! The `keel-profiler` binary's command line: `--version`, errors for bad
//! arguments, and `--headless --open FILE` (import report, summary line,
//! analysis tables; no devices probed, no workloads run).

use std::process::Command;

use keel::profiler::{Flow, FlowEnd, FlowKind, Lane, LaneKind, Span, SpanKind, Trace, TraceDevice};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_keel-profiler"));
    c.env_remove("DISPLAY").env_remove("WAYLAND_DISPLAY");
    c
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_help_and_bad_arguments() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!("keel-profiler {}", env!("CARGO_PKG_VERSION"))
    );
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--headless") && out.contains("--open <FILE>"),
        "{out}"
    );
    let (code, _, err) = run(&["--bogus"]);
    assert_eq!(code, 2, "usage error");
    assert!(err.contains("unexpected argument '--bogus'"), "{err}");
    let (code, _, err) = run(&["--open"]);
    assert_eq!(code, 2);
    assert!(err.contains("--open <FILE>"), "{err}");
    let (code, _, err) = run(&["--headless", "--device", "gpu zero"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected a device such as cpu:0"), "{err}");
}

fn lane(kind: LaneKind, name: &str) -> Lane {
    Lane {
        kind,
        name: name.to_owned(),
        group: String::new(),
    }
}

fn span(lane: u32, name: &str, kind: SpanKind, start: u64, dur: u64) -> Span {
    Span {
        lane,
        name: name.into(),
        kind,
        start_ns: start,
        dur_ns: dur,
        op: 0,
        args: Vec::new(),
    }
}

#[test]
fn headless_open_prints_the_analysis_without_probing_devices() {
    let mut t = Trace {
        version: keel::profiler::TRACE_VERSION,
        devices: vec![TraceDevice {
            device: "cuda:0".to_owned(),
            name: "GPU".to_owned(),
            properties: Vec::new(),
        }],
        lanes: vec![
            lane(LaneKind::Host { thread: 1 }, "main"),
            lane(
                LaneKind::Stream {
                    device: 0,
                    stream: 7,
                },
                "stream 7",
            ),
        ],
        ..Trace::default()
    };
    t.spans = vec![
        span(0, "cudaLaunchKernel", SpanKind::Kernel, 1_000, 2_000),
        span(1, "gemm", SpanKind::Kernel, 6_000, 3_000),
        span(0, "cudaLaunchKernel", SpanKind::Kernel, 10_000, 2_000),
        span(1, "gemm", SpanKind::Kernel, 12_000, 5_000),
    ];
    for (id, (h, d)) in [(1_500u64, 6_000u64), (10_500, 12_000)]
        .into_iter()
        .enumerate()
    {
        t.flows.push(Flow {
            id: id as u64,
            kind: FlowKind::Launch,
            from: FlowEnd { lane: 0, ts_ns: h },
            to: FlowEnd { lane: 1, ts_ns: d },
        });
    }
    let dir = std::env::temp_dir().join(format!("keel-profiler-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("t.keeltrace");
    keel::profiler::save_trace(&t, &path).expect("saved");
    let (code, out, err) = run(&["--headless", "--open", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 0, "{out}\n{err}");
    // The line scripts read, unchanged.
    assert!(
        out.contains("\nTrace: 2 lanes, 4 spans, 2 flows\n"),
        "{out}"
    );
    assert!(out.starts_with("Import: "), "{out}");
    // Window [6000, 17000) = 11 us: 8 us of kernels, 3 us idle.
    assert!(out.contains("GPU 0 · stream 7"), "{out}");
    assert!(out.contains("8.00 us (72.7%)"), "{out}");
    assert!(out.contains("3.00 us (27.3%)"), "{out}");
    assert!(out.contains("Top kernels by total time:"), "{out}");
    // Launch delays: 6000 - 1000 and 12000 - 10000.
    assert!(
        out.contains("2 launches: p50 2.00 us, p90 5.00 us, p99 5.00 us, max 5.00 us"),
        "{out}"
    );
    assert!(!out.contains("Devices:"), "no device probing: {out}");
    assert!(!out.contains("demo workloads"), "no workloads: {out}");
    // A missing file is an error, not a panic.
    let (code, _, err) = run(&["--headless", "--open", "/nonexistent/t.json"]);
    assert_eq!(code, 1);
    assert!(err.contains("could not open /nonexistent/t.json"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
