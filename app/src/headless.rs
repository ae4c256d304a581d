//! `--headless`: the profiler without a window. With `--open FILE...` it
//! prints the files' import report, summary and analysis (HTA-style
//! tables; several files are one trace, one group of lanes per file)
//! without probing devices; otherwise it prints the device table,
//! runs the demo workloads, prints per-kernel statistics and writes the
//! trace to a file.

use std::path::PathBuf;

use keel::Device;

use crate::cli::Options;
use crate::stats::Stats;
use crate::view::{TraceView, format_ns};
use crate::workloads::{RunMessage, Workload, run_jobs};

/// The demo jobs: every workload on `device`, or on every device found.
pub fn demo_jobs(device: Option<Device>) -> Vec<(Workload, Device)> {
    let devices: Vec<Device> = match device {
        Some(d) => vec![d],
        None => keel::DeviceType::ALL
            .into_iter()
            .flat_map(keel::devices)
            .collect(),
    };
    devices
        .into_iter()
        .flat_map(|d| Workload::ALL.into_iter().map(move |w| (w, d)))
        .collect()
}

/// Runs `jobs` on this thread; returns the trace (printing progress when
/// `print` is set).
pub fn record(jobs: &[(Workload, Device)], print: bool) -> Result<keel::profiler::Trace, String> {
    let result = std::cell::RefCell::new(None);
    run_jobs(jobs, &|m| match m {
        RunMessage::Progress { done, total, line } => {
            if print {
                println!("[{done}/{total}] {line}");
            }
        }
        RunMessage::Finished(r) => *result.borrow_mut() = Some(r.map(|t| *t)),
    });
    result
        .into_inner()
        .unwrap_or_else(|| Err("the workloads ended without a trace".to_owned()))
}

/// The per-kernel statistics table as text.
pub fn kernel_table(stats: &Stats) -> String {
    let mut out = format!(
        "{:<48} {:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
        "kernel", "count", "total", "mean", "median", "p99", "min", "max"
    );
    for r in &stats.kernels {
        let s = &r.summary;
        out.push_str(&format!(
            "{:<48} {:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
            crate::analysis::short(&r.name, 48),
            s.count,
            format_ns(s.total as f64),
            format_ns(s.mean),
            format_ns(s.median as f64),
            format_ns(s.p99 as f64),
            format_ns(s.min as f64),
            format_ns(s.max as f64)
        ));
    }
    out
}

/// What `--headless --open FILE...` prints: the import report (added up
/// over the files), the one-line summary scripts read (`Trace: N lanes, M
/// spans, K flows`), the lane groups, the allocator events per device, the
/// analysis tables and the per-kernel statistics. Probes no device, runs nothing.
pub fn report(view: &TraceView) -> String {
    let mut out = crate::analysis::import_text(view.trace.import.as_ref());
    out.push_str(&summary_line(view));
    out.push_str(&groups_text(view));
    out.push_str(&memory_text(view));
    out.push_str(&crate::analysis::Analysis::new(view).text());
    if view.trace.ranks.is_some() {
        out.push_str("Ranks (tab-separated):\n");
        out.push_str(&keel_trace::ranks::RankAnalysis::new(&view.trace).text());
    }
    out.push_str("Per-kernel statistics:\n");
    out.push_str(&kernel_table(&Stats::new(view)));
    out
}

/// The lane groups in display order, with their lane counts (several
/// files opened together have one group per file and device or process).
fn groups_text(view: &TraceView) -> String {
    let mut out = format!("Lane groups: {}\n", view.groups.len());
    for g in &view.groups {
        let n = g.lanes.len();
        out.push_str(&format!(
            "  {} ({n} lane{})\n",
            g.label,
            if n == 1 { "" } else { "s" }
        ));
    }
    out
}

/// The allocator events per device: how many, the peaks of the allocated
/// and reserved curves, out-of-memory events (nothing without events).
pub fn memory_text(view: &TraceView) -> String {
    use keel::profiler::MemoryAction;
    let memory = &view.trace.memory;
    if memory.is_empty() {
        return String::new();
    }
    let mut out = format!("Memory: {} allocator events\n", memory.len());
    let mut devices: Vec<u32> = memory.iter().map(|m| m.device).collect();
    devices.sort_unstable();
    devices.dedup();
    for d in devices {
        let of = || memory.iter().filter(move |m| m.device == d);
        let name = view
            .trace
            .devices
            .get(d as usize)
            .map_or_else(|| format!("device {d}"), |x| x.device.clone());
        let peak_allocated = of().map(|m| m.allocated).max().unwrap_or(0);
        let peak_reserved = of().map(|m| m.reserved).max().unwrap_or(0);
        let ooms = of().filter(|m| m.action == MemoryAction::Oom).count();
        out.push_str(&format!(
            "  {name}: {} events, peak allocated {}, peak reserved {}, {ooms} out of memory\n",
            of().count(),
            crate::panels::memory::format_bytes(peak_allocated),
            crate::panels::memory::format_bytes(peak_reserved),
        ));
    }
    out
}

fn summary_line(view: &TraceView) -> String {
    format!(
        "Trace: {} lanes, {} spans, {} flows\n",
        view.lanes.len(),
        view.trace.spans.len(),
        view.trace.flows.len()
    )
}

/// Every lane of `view` over `window` (ns from the trace's start), as
/// `--select` asks.
pub fn everything(view: &TraceView, window: (u64, u64)) -> crate::selection::Selection {
    let origin = view.bounds.0;
    crate::selection::Selection {
        lanes: (0..view.lanes.len()).collect(),
        t0: origin.saturating_add(window.0),
        t1: origin.saturating_add(window.1),
    }
}

/// What `--headless --open FILE` prints for a trace opened through its
/// index: the summary line, the lane groups and every span name's count
/// and time over the whole file (the 30 with most time); with `window`,
/// the tables of that area read at full resolution instead.
pub fn indexed_report(
    path: &std::path::Path,
    window: Option<(u64, u64)>,
) -> Result<String, String> {
    let fail = |e: keel_trace::Error| format!("could not open {}: {e}", path.display());
    let (t, made) = keel_trace::indexed::open_or_convert(path).map_err(fail)?;
    let (lo, hi) = t.bounds();
    let w = t
        .window(&keel_trace::indexed::Window {
            t0: lo,
            t1: hi,
            ns_per_px: (hi - lo) as f64 / 1_000.0,
            lanes: None,
            max_spans: crate::indexed::MAX_WINDOW_SPANS,
        })
        .map_err(fail)?;
    if let Some(window) = window {
        let sel = everything(&w.view, window);
        let lanes = (0..t.tables().lanes.len() as u32).collect();
        let area = t
            .window(&keel_trace::indexed::Window {
                t0: sel.t0,
                t1: sel.t1,
                ns_per_px: 0.0,
                lanes: Some(lanes),
                max_spans: crate::indexed::MAX_WINDOW_SPANS,
            })
            .map_err(fail)?;
        return Ok(crate::selection::text(
            &crate::selection::analyse(&area.view, &sel),
            30,
        ));
    }
    let mut out = format!(
        "Indexed trace{}: {} lanes, {} spans, {} long\n",
        if made { " (index made now)" } else { "" },
        t.tables().lanes.len(),
        t.span_count(),
        format_ns((hi - lo) as f64)
    );
    out.push_str(&groups_text(&w.view));
    out.push_str("Spans by name (tab-separated, most time first):\nname\tcount\ttotal_ns\n");
    for n in t.name_totals().map_err(fail)?.iter().take(30) {
        out.push_str(&format!(
            "{}\t{}\t{}\n",
            crate::analysis::short(&n.name, 80),
            n.count,
            n.total_ns
        ));
    }
    Ok(out)
}

/// Runs headless. With `--open FILE...`: prints [`report`] of the files
/// (or, with `--select`, the selection's tables), opened as one trace
/// (see [`keel::profiler::load_traces`]), and returns
/// `None`. Without: prints the devices, runs the demo workloads,
/// prints the summary and per-kernel statistics, writes the trace to a
/// temporary file and returns its path.
pub fn run(options: &Options) -> Result<Option<PathBuf>, String> {
    if let [input, output] = options.convert.as_slice() {
        let started = std::time::Instant::now();
        keel_trace::indexed::convert(input, output)
            .map_err(|e| format!("could not convert {}: {e}", input.display()))?;
        let t = keel_trace::indexed::IndexedTrace::open(output).map_err(|e| e.to_string())?;
        println!(
            "converted {} to {} ({} spans) in {:.1} s",
            input.display(),
            output.display(),
            t.span_count(),
            started.elapsed().as_secs_f64()
        );
        return Ok(None);
    }
    if let [baseline, candidate] = options.diff.as_slice() {
        let load = |p: &PathBuf| {
            keel::profiler::load_trace(p)
                .map_err(|e| format!("could not open {}: {e}", p.display()))
        };
        let d = keel_trace::diff::diff(&load(baseline)?, &load(candidate)?).map_err(|e| {
            format!(
                "could not compare {} with {}: {e}",
                baseline.display(),
                candidate.display()
            )
        })?;
        print!("{}", keel_trace::diff::text(&d));
        return Ok(None);
    }
    if !options.open.is_empty() {
        let (snapshots, traces) = crate::split_snapshots(&options.open)?;
        for path in &snapshots {
            let s = keel_trace::snapshot::load_snapshot(path)
                .map_err(|e| format!("could not open {}: {e}", path.display()))?;
            print!("{}", keel_trace::snapshot::text(&s, 10));
        }
        if traces.is_empty() {
            return Ok(None);
        }
        if let [path] = traces.as_slice()
            && (options.index || crate::indexed::wants_index(path))
        {
            print!("{}", indexed_report(path, options.select)?);
            return Ok(None);
        }
        let source = crate::files_label(&traces);
        let trace = keel_trace::load_traces_with(&traces, options.align)
            .map_err(|e| format!("could not open {source}: {e}"))?;
        let view = TraceView::new(trace, source);
        match options.select {
            Some(window) => print!(
                "{}",
                crate::selection::text(
                    &crate::selection::analyse(&view, &everything(&view, window)),
                    30
                )
            ),
            None => print!("{}", report(&view)),
        }
        return Ok(None);
    }
    println!("Devices:");
    print!("{}", crate::devices::table(&crate::devices::probe()));
    let device = match &options.device {
        Some(s) => Some(
            s.parse::<Device>()
                .map_err(|e| format!("--device {s}: {e}"))?,
        ),
        None => None,
    };
    println!("Running the demo workloads:");
    let trace = record(&demo_jobs(device), true)?;
    let view = TraceView::new(trace, "headless");
    let stats = Stats::new(&view);
    print!("{}", summary_line(&view));
    println!("Per-kernel statistics:");
    print!("{}", kernel_table(&stats));
    let path = std::env::temp_dir().join(format!("keel-profiler-{}.json", std::process::id()));
    keel::profiler::save_trace(&view.trace, &path)
        .map_err(|e| format!("could not write {}: {e}", path.display()))?;
    println!("Wrote trace: {}", path.display());
    Ok(Some(path))
}
