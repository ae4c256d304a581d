//! The ranks of a distributed job: makes them from the real GPT-2 trace
//! (with known clock skews and a late rank, see `tests/gen/ranks.rs`),
//! or opens any ranks' files as one trace, aligned, and prints the
//! per-rank analysis and how long loading took.
//!
//! ```text
//! cargo run --release -p keel-trace --example ranks -- make /tmp/ranks 8
//! /usr/bin/time -v target/release/examples/ranks open /tmp/ranks/*.json.gz
//! target/release/examples/ranks open --align collectives /tmp/ranks/*.json.gz
//! ```
//!
//! `open` first loads every file on its own (`load_trace`, the baseline:
//! what opening them costs without merging or aligning), then all of them
//! as one trace with `load_traces_with`, and times both, best of three;
//! `load` only loads them as one, once (for the peak memory of that
//! alone, under `/usr/bin/time -v`).

// The tests' generator; the example uses only part of what they check.
#[allow(dead_code)]
#[path = "../tests/gen/ranks.rs"]
mod gen_ranks;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use keel_trace::Alignment;
use keel_trace::ranks::RankAnalysis;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["make", dir, n] => {
            let n: usize = n
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("expected a number of ranks, found {n:?}"))?;
            std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
            let start = Instant::now();
            let job = gen_ranks::Job::new(n);
            for (r, bytes) in gen_ranks::make(&gen_ranks::source(), &job)
                .into_iter()
                .enumerate()
            {
                let path = Path::new(dir).join(format!("rank{r}.pt.trace.json.gz"));
                let file = std::fs::File::create(&path).map_err(|e| format!("{dir}: {e}"))?;
                let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
                gz.write_all(&bytes)
                    .and_then(|()| gz.finish().map(drop))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            println!(
                "wrote {n} ranks to {dir} in {:.1} s: skews {:?} ns, windows opening {:?} ns late, rank {} late",
                start.elapsed().as_secs_f64(),
                job.skews_ns,
                job.trims_ns,
                job.late
            );
            Ok(())
        }
        ["load", ref files @ ..] => {
            let start = Instant::now();
            let t = keel_trace::load_traces(files).map_err(|e| e.to_string())?;
            println!(
                "{} files, {} spans as one trace in {:.3} s",
                files.len(),
                t.spans.len(),
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        ["open", ref rest @ ..] => {
            let (alignment, files) = match rest {
                ["--align", name, files @ ..] => (
                    Alignment::from_name(name).ok_or_else(|| {
                        format!("expected clock, collectives or start, found {name:?}")
                    })?,
                    files,
                ),
                files => (Alignment::Clock, files),
            };
            let paths: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
            if paths.is_empty() {
                return Err("expected trace files to open, found none".to_owned());
            }
            let mut alone = f64::MAX;
            let mut together = f64::MAX;
            let mut merging = f64::MAX;
            let mut trace = None;
            for _ in 0..3 {
                drop(trace.take());
                let start = Instant::now();
                let mut loaded = Vec::with_capacity(paths.len());
                for p in &paths {
                    let t = keel_trace::load_trace(p).map_err(|e| e.to_string())?;
                    loaded.push((p.display().to_string(), t));
                }
                alone = alone.min(start.elapsed().as_secs_f64());
                // What merging and aligning add to loading.
                let start = Instant::now();
                let merged = keel_trace::file::merge_files_with(loaded, alignment)
                    .map_err(|e| e.to_string())?;
                merging = merging.min(start.elapsed().as_secs_f64());
                drop(merged);
                let start = Instant::now();
                let t =
                    keel_trace::load_traces_with(&paths, alignment).map_err(|e| e.to_string())?;
                together = together.min(start.elapsed().as_secs_f64());
                trace = Some(t);
            }
            let t = trace.ok_or("nothing loaded")?;
            let start = Instant::now();
            let analysis = RankAnalysis::new(&t);
            let analysed = start.elapsed().as_secs_f64();
            print!("{}", analysis.text());
            println!(
                "{} files, {} spans: each alone {:.3} s, as one trace ({alignment}) {:.3} s ({:.2}x); merging and aligning loaded traces {:.1} ms, analysis {:.1} ms",
                paths.len(),
                t.spans.len(),
                alone,
                together,
                together / alone,
                merging * 1e3,
                analysed * 1e3
            );
            Ok(())
        }
        _ => Err(
            "usage: ranks make DIR N | ranks open [--align clock|collectives|start] FILE... | ranks load FILE..."
                .to_owned(),
        ),
    }
}
