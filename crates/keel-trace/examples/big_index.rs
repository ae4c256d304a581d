//! Traces larger than memory: makes an indexed file of any size from the
//! real GPT-2 trace, converts a trace file, and opens an indexed file and
//! reads windows as the timeline does, reporting times and peak memory
//! (the numbers in docs/BENCHMARKS.md).
//!
//! ```text
//! cargo build --release -p keel-trace --example big_index
//! target/release/examples/big_index make /tmp/gpt2-10g.keelidx 10
//! target/release/examples/big_index open /tmp/gpt2-10g.keelidx
//! target/release/examples/big_index convert trace.json trace.keelidx
//! ```
//!
//! `make OUT GB` repeats the real GPT-2 training trace of an H200 (its
//! spans, flows, instants and counters, shifted in time, ids and
//! operations) as many times as a Kineto JSON of GB gigabytes holds it
//! (the trace's JSON is 10,399,988 bytes) and streams it into an indexed
//! file, never holding more than one copy. `open FILE` maps it, reads the
//! whole trace at 1,920 pixels (the first frame), then 200 windows of a
//! pan and zoom sequence at screen resolution, and prints each step's
//! time and the process's peak resident memory (`VmHWM`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use keel_trace::indexed::{IndexWriter, IndexedTrace, Window};
use keel_trace::{Counter, InstantEvent, Trace};

/// Bytes of the GPT-2 trace as Kineto JSON.
const GPT2_JSON_BYTES: f64 = 10_399_988.0;

fn gpt2() -> Result<Trace, String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import/gpt2_train_h200.pt.trace.json.gz");
    keel_trace::load_trace(&p).map_err(|e| e.to_string())
}

/// Resident memory now: anonymous (the process's own) and file-backed
/// (mapped pages of the index, which the kernel may drop), in MB.
fn rss_now() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    format!(
        "anonymous {:.0} MB + mapped file {:.0} MB",
        field("RssAnon:"),
        field("RssFile:")
    )
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn make(out: &Path, gb: f64) -> Result<(), String> {
    let one = gpt2()?;
    let copies = (gb * 1e9 / GPT2_JSON_BYTES).ceil().max(1.0) as u64;
    let (lo, hi) = one.spans.iter().fold((u64::MAX, 0), |(lo, hi), s| {
        (lo.min(s.start_ns), hi.max(s.end_ns()))
    });
    let period = hi - lo + 1_000_000;
    let max_op = one.spans.iter().map(|s| s.op).max().unwrap_or(0) + 1;
    let max_flow = one.flows.iter().map(|f| f.id).max().unwrap_or(0) + 1;
    let start = Instant::now();
    // The tables: instants and counter points of every copy.
    let mut tables = one.tables_only();
    tables.instants = (0..copies)
        .flat_map(|c| {
            one.instants.iter().map(move |i| InstantEvent {
                ts_ns: i.ts_ns + c * period,
                ..i.clone()
            })
        })
        .collect();
    tables.counters = one
        .counters
        .iter()
        .map(|k| Counter {
            points: (0..copies)
                .flat_map(|c| k.points.iter().map(move |&(t, v)| (t + c * period, v)))
                .collect(),
            ..k.clone()
        })
        .collect();
    tables.calibrations = one.calibrations.clone();
    tables.import = one.import.clone();
    let mut order: Vec<usize> = (0..one.spans.len()).collect();
    order.sort_by_key(|&i| {
        (
            one.spans[i].start_ns,
            std::cmp::Reverse(one.spans[i].dur_ns),
        )
    });
    let mut w = IndexWriter::create(out, &tables).map_err(|e| e.to_string())?;
    for c in 0..copies {
        for &i in &order {
            let mut s = one.spans[i].clone();
            s.start_ns += c * period;
            if s.op != 0 {
                s.op += c * max_op;
            }
            w.push(&s).map_err(|e| e.to_string())?;
        }
        for f in &one.flows {
            let mut f = f.clone();
            f.id += c * max_flow;
            f.from.ts_ns += c * period;
            f.to.ts_ns += c * period;
            w.push_flow(&f);
        }
    }
    w.finish(None).map_err(|e| e.to_string())?;
    let size = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    println!(
        "made {} from {copies} copies of the GPT-2 trace ({} spans, as Kineto JSON about {:.2} GB): {size} bytes in {:.1} s, peak RSS {:.0} MB",
        out.display(),
        copies * one.spans.len() as u64,
        copies as f64 * GPT2_JSON_BYTES / 1e9,
        start.elapsed().as_secs_f64(),
        peak_rss_mb()
    );
    Ok(())
}

fn window(t0: f64, width: f64, px: f64) -> Window {
    Window {
        t0: t0.max(0.0) as u64,
        t1: (t0 + width).max(0.0) as u64,
        ns_per_px: width / px,
        lanes: None,
        max_spans: 5_000_000,
    }
}

fn open(path: &Path) -> Result<(), String> {
    let px = 1_920.0;
    let start = Instant::now();
    let t = IndexedTrace::open(path).map_err(|e| e.to_string())?;
    let opened = start.elapsed();
    let (lo, hi) = t.bounds();
    let whole = (hi - lo) as f64;
    // The first frame reads the window three screens wide, as the app does.
    let first = t
        .window(&window(lo as f64 - whole, 3.0 * whole, 3.0 * px))
        .map_err(|e| e.to_string())?;
    let first_at = start.elapsed();
    println!(
        "opened {} ({} spans) in {:.1} ms; first window ({} spans read, level {}) at {:.1} ms; peak RSS {:.0} MB ({})",
        path.display(),
        t.span_count(),
        opened.as_secs_f64() * 1e3,
        first.view.trace.spans.len(),
        first.level,
        first_at.as_secs_f64() * 1e3,
        peak_rss_mb(),
        rss_now()
    );
    drop(first);
    // Pan and zoom: zoom in by 2x per step towards a point, pan by half a
    // screen, and zoom back out, reading each window three screens wide.
    let mut times = Vec::new();
    let mut most = 0;
    let (mut t0, mut width) = (lo as f64, whole);
    let target = lo as f64 + whole * 0.6137;
    for step in 0..200 {
        match step % 40 {
            0..=19 => {
                width /= 2.0;
                t0 = target - width / 2.0;
            }
            20..=29 => t0 += width / 2.0,
            _ => {
                width *= 4.0;
                t0 = (target - width / 2.0).max(lo as f64);
            }
        }
        width = width.clamp(10_000.0, whole);
        let s = Instant::now();
        let w = t
            .window(&window(t0 - width, 3.0 * width, 3.0 * px))
            .map_err(|e| e.to_string())?;
        times.push(s.elapsed().as_secs_f64() * 1e3);
        most = most.max(w.view.trace.spans.len());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "200 windows while panning and zooming: read median {:.1} ms, p90 {:.1} ms, max {:.1} ms; at most {most} spans a window; peak RSS {:.0} MB ({})",
        times[100],
        times[180],
        times[199],
        peak_rss_mb(),
        rss_now()
    );
    let s = Instant::now();
    let m = t.search("aten::mm").map_err(|e| e.to_string())?;
    let mut cur = None;
    for _ in 0..100 {
        cur = t.step(&m, cur, lo, true).map_err(|e| e.to_string())?;
    }
    println!(
        "search \"aten::mm\": {} matches, counted and stepped 100 times in {:.1} ms; peak RSS {:.0} MB",
        m.total,
        s.elapsed().as_secs_f64() * 1e3,
        peak_rss_mb()
    );
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["make", out, gb] => make(
            Path::new(out),
            gb.parse()
                .map_err(|_| format!("expected a size in GB, found {gb:?}"))?,
        ),
        ["open", file] => open(Path::new(file)),
        ["convert", input, out] => {
            let start = Instant::now();
            keel_trace::indexed::convert(Path::new(input), Path::new(out))
                .map_err(|e| e.to_string())?;
            println!(
                "converted {input} to {out} in {:.1} s, peak RSS {:.0} MB",
                start.elapsed().as_secs_f64(),
                peak_rss_mb()
            );
            Ok(())
        }
        _ => Err(
            "usage: big_index make OUT GB | big_index open FILE | big_index convert TRACE OUT"
                .to_owned(),
        ),
    }
}
