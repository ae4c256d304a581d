//! The `keel-profiler` binary's command line: `--version`, errors for bad
//! arguments, and `--headless --open FILE...` (import report, summary line,
//! lane groups, analysis tables; no devices probed, no workloads run; several
//! files as one trace).

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
                    thread: 0,
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

/// Two ranks of a distributed job (a gzipped Kineto file and the same
/// trace as rank 1): one trace, one group of lanes per rank and device or
/// process. Both files are one recording on one clock, so they stay on
/// it (`--align clock`, the default) and the ranks table says so.
#[test]
fn headless_open_of_several_files_groups_them_per_rank() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import");
    let dir = std::env::temp_dir().join(format!("keel-profiler-cli-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let text = std::fs::read_to_string(data.join("kineto.json")).expect("fixture");
    let rank1 = dir.join("rank1.json");
    std::fs::write(&rank1, text.replace("\"rank\": 0", "\"rank\": 1")).expect("write");
    let rank0 = data.join("kineto.json.gz");
    let (r0, r1) = (
        rank0.to_str().expect("utf-8 path"),
        rank1.to_str().expect("utf-8 path"),
    );

    // One file: 7 lanes, 16 spans, 4 flows.
    let (code, one, err) = run(&["--headless", "--open", r0]);
    assert_eq!(code, 0, "{one}\n{err}");
    assert!(
        one.contains("\nTrace: 7 lanes, 16 spans, 4 flows\n"),
        "{one}"
    );
    assert!(one.contains("\nLane groups: 4\n"), "{one}");

    // Both, after one --open: twice as much, in twice as many groups.
    let (code, out, err) = run(&["--headless", "--open", r0, r1]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with(
            "Import: Chrome trace (PyTorch/Kineto), gzip: 70 events, 68 imported, 2 skipped\n"
        ),
        "the reports added up: {out}"
    );
    assert!(
        out.contains("\nTrace: 14 lanes, 32 spans, 8 flows\n"),
        "{out}"
    );
    let groups = "Lane groups: 8\n\
        \x20 rank 0 · GPU 0 · NVIDIA A100-SXM4-40GB (2 lanes)\n\
        \x20 rank 1 · GPU 0 · NVIDIA A100-SXM4-40GB (2 lanes)\n\
        \x20 rank 0 · Spans (1 lane)\n\
        \x20 rank 0 · Traces (1 lane)\n\
        \x20 rank 0 · python3.10 (pid 4242) (3 lanes)\n\
        \x20 rank 1 · Spans (1 lane)\n\
        \x20 rank 1 · Traces (1 lane)\n\
        \x20 rank 1 · python3.10 (pid 4242) (3 lanes)\n";
    assert!(out.contains(groups), "{out}");
    // The analysis per rank's streams, the ranks' kernels together.
    for rank in ["rank 0", "rank 1"] {
        assert!(
            out.contains(&format!("  {rank} · GPU 0 · stream 7 ")),
            "{rank}: {out}"
        );
    }
    assert!(
        out.contains("6 launches: p50 10.00 us"),
        "launch delays of both ranks: {out}"
    );
    assert!(
        out.contains("Ranks (tab-separated):\nalignment\tclock\ncompared\t0\n"),
        "the ranks table: {out}"
    );
    // The same with one --open per file.
    let (code, again, _) = run(&["--headless", "--open", r0, "--open", r1]);
    assert_eq!(code, 0);
    assert_eq!(again, out);

    // A bad file among several: the error names it.
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, b"{ not a trace").expect("write");
    let g = garbage.to_str().expect("utf-8 path");
    let (code, _, err) = run(&["--headless", "--open", r0, g]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("could not open {r0}, {g}:")), "{err}");
    assert!(
        err.contains(&format!("trace format error: {g}: ")),
        "names the bad file: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--headless --open` of a PyTorch trace with allocator events
/// (`profile_memory=True`): their count and each device's peaks.
#[test]
fn headless_open_prints_the_memory_peaks() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import/kineto_memory.json");
    let (code, out, err) = run(&["--headless", "--open", file.to_str().expect("utf-8 path")]);
    assert_eq!(code, 0, "{out}\n{err}");
    let memory = "Memory: 7 allocator events\n\
        \x20 cuda:0: 4 events, peak allocated 1.50 KiB, peak reserved 2.00 MiB, 1 out of memory\n\
        \x20 cpu: 2 events, peak allocated 4.00 KiB, peak reserved 0 B, 0 out of memory\n\
        \x20 cuda:1: 1 events, peak allocated 20.00 MiB, peak reserved 20.00 MiB, 0 out of memory\n";
    assert!(out.contains(memory), "{out}");
}

/// On a machine with no display session (no `XDG_RUNTIME_DIR`), probing
/// the backends prints the device list and nothing from libwayland.
#[test]
fn a_headless_first_run_prints_no_wayland_noise() {
    let out = bin()
        .env_remove("XDG_RUNTIME_DIR")
        .args(["--headless", "--device", "cpu:0"])
        .output()
        .expect("the binary runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Devices:") && stdout.contains("cpu:0"),
        "{stdout}"
    );
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
}

/// `--headless --select` on the real GPT-2 trace prints exactly the
/// selection's tables over every lane of that window.
#[test]
fn headless_select_prints_the_selection_tables() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import/gpt2_train_h200.pt.trace.json.gz");
    let path = file.to_str().expect("utf-8 path");
    let (code, out, err) = run(&["--headless", "--open", path, "--select", "100ms..150ms"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let view =
        keel_profiler::view::TraceView::new(keel::profiler::load_trace(&file).expect("opens"), "");
    let o = view.bounds.0;
    let sel = keel_profiler::selection::Selection {
        lanes: (0..view.lanes.len()).collect(),
        t0: o + 100_000_000,
        t1: o + 150_000_000,
    };
    let sum = keel_profiler::selection::analyse(&view, &sel);
    assert!(sum.spans > 100, "the window holds a part of a step");
    assert_eq!(out, keel_profiler::selection::text(&sum, 30));
    let (code, _, err) = run(&["--headless", "--open", path, "--select", "150ms..100ms"]);
    assert_eq!(code, 2, "clap's usage error");
    assert!(err.contains("expected START before END"), "{err}");
}
