//! Comparing two traces (`keel_trace::diff`): writes a big baseline and a
//! candidate with known changes, or diffs two trace files and reports how
//! long loading and diffing took.
//!
//! ```text
//! cargo run --release -p keel-trace --example trace_diff -- write base.json cand.json 1024
//! /usr/bin/time -v target/release/examples/trace_diff diff base.json cand.json
//! ```
//!
//! `write BASE CAND MIB` writes a Kineto-shaped trace of about MIB MiB
//! (`benches/kineto_gen.rs`) to BASE and a copy to CAND in which the
//! convolution kernel runs 1.2 times as long and every 97th batch-norm
//! operator is gone (its launch and kernel stay, as if fused into the
//! operator before it). `diff BASE CAND` loads both (one after the other,
//! or both at once with `--parallel`), diffs them, and prints the times,
//! the summary and the first rows of `diff::text`; any two trace files do.

#[path = "../benches/kineto_gen.rs"]
mod kineto_gen;

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use keel_trace::{Trace, diff};

/// The candidate's changes, line by line (the generator writes one event
/// per line).
fn rewrite(base: &str, cand: &str) -> std::io::Result<(u64, u64)> {
    let input = BufReader::with_capacity(1 << 20, std::fs::File::open(base)?);
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(cand)?);
    let (mut stretched, mut removed, mut norms) = (0u64, 0u64, 0u64);
    for line in input.lines() {
        let line = line?;
        if line.contains("\"cat\": \"cpu_op\", \"name\": \"aten::cudnn_batch_norm\"") {
            norms += 1;
            if norms % 97 == 0 {
                removed += 1;
                continue;
            }
        }
        if line.contains("\"cat\": \"kernel\", \"name\": \"sm80_xmma_fprop")
            && line.contains("\"dur\": 25.000")
        {
            stretched += 1;
            writeln!(
                out,
                "{}",
                line.replace("\"dur\": 25.000", "\"dur\": 30.000")
            )?;
            continue;
        }
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok((stretched, removed))
}

fn load(path: &str) -> Result<(Trace, f64), String> {
    let start = Instant::now();
    let t = keel_trace::load_trace(Path::new(path)).map_err(|e| format!("{path}: {e}"))?;
    Ok((t, start.elapsed().as_secs_f64()))
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["write", base, cand, mib] => {
            let mib: u64 = mib
                .parse()
                .map_err(|_| format!("expected a size in MiB, found {mib:?}"))?;
            let f = std::fs::File::create(base).map_err(|e| format!("{base}: {e}"))?;
            let (bytes, events) =
                kineto_gen::write_kineto(f, mib << 20, 0).map_err(|e| format!("{base}: {e}"))?;
            let (stretched, removed) = rewrite(base, cand).map_err(|e| format!("{cand}: {e}"))?;
            println!(
                "wrote {base} ({bytes} bytes, {events} events) and {cand}: \
                 {stretched} kernels stretched, {removed} operators removed"
            );
            Ok(())
        }
        ["diff", base, cand, ref rest @ ..] => {
            let start = Instant::now();
            let ((b, tb), (c, tc)) = if rest == ["--parallel"] {
                std::thread::scope(|s| {
                    let other = s.spawn(|| load(cand));
                    let b = load(base);
                    let c = other
                        .join()
                        .map_err(|_| "the loading thread panicked".to_owned());
                    Ok::<_, String>((b?, c??))
                })?
            } else {
                (load(base)?, load(cand)?)
            };
            let loaded = start.elapsed().as_secs_f64();
            let at = Instant::now();
            let d = diff::diff(&b, &c).map_err(|e| e.to_string())?;
            let diffed = at.elapsed().as_secs_f64();
            let at = Instant::now();
            let text = diff::text(&d);
            let printed = at.elapsed().as_secs_f64();
            println!(
                "loaded {base} ({} spans) in {tb:.2} s and {cand} ({} spans) in {tc:.2} s: \
                 {loaded:.2} s; diff {diffed:.2} s; text {printed:.3} s; total {:.2} s",
                b.spans.len(),
                c.spans.len(),
                start.elapsed().as_secs_f64()
            );
            for line in text.lines().take(24) {
                println!("{}", line.chars().take(160).collect::<String>());
            }
            Ok(())
        }
        _ => Err(
            "usage: trace_diff write BASE CAND MIB | trace_diff diff BASE CAND [--parallel]"
                .to_owned(),
        ),
    }
}
