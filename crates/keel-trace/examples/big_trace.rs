//! Big PyTorch traces: writes one, or opens one and reports how long it
//! took (the numbers in docs/BENCHMARKS.md; peak memory from
//! `/usr/bin/time -v`).
//!
//! ```text
//! cargo run --release -p keel-trace --example big_trace -- write trace.json 1024
//! /usr/bin/time -v target/release/examples/big_trace open trace.json
//! ```
//!
//! `write FILE MIB` writes a Kineto-shaped trace of about MIB MiB (see
//! `benches/kineto_gen.rs`); `open FILE` loads it with
//! `keel_trace::load_trace` and prints the time and what was imported;
//! `save FILE OUT` loads FILE and saves it as OUT (`.json` for Keel's own
//! JSON, `.keeltrace` for the native format), to time reading those:
//!
//! ```text
//! target/release/examples/big_trace save trace.json keel.trace.json
//! /usr/bin/time -v target/release/examples/big_trace open keel.trace.json
//! ```

#[path = "../benches/kineto_gen.rs"]
mod kineto_gen;

use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["write", file, mib] => {
            let mib: u64 = mib
                .parse()
                .map_err(|_| format!("expected a size in MiB, found {mib:?}"))?;
            let f = std::fs::File::create(file).map_err(|e| format!("{file}: {e}"))?;
            let start = Instant::now();
            let (bytes, events) =
                kineto_gen::write_kineto(f, mib << 20, 0).map_err(|e| format!("{file}: {e}"))?;
            println!(
                "wrote {file}: {bytes} bytes, {events} events in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        ["open", file] => {
            let start = Instant::now();
            let t = keel_trace::load_trace(Path::new(file)).map_err(|e| e.to_string())?;
            let secs = start.elapsed().as_secs_f64();
            let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
            println!(
                "opened {file} ({size} bytes) in {secs:.2} s: {} lanes, {} spans, {} flows, {} instants, {} counters",
                t.lanes.len(),
                t.spans.len(),
                t.flows.len(),
                t.instants.len(),
                t.counters.len()
            );
            if let Some(r) = &t.import {
                println!(
                    "{}: {} events, {} imported, skipped {:?}",
                    r.format, r.events, r.imported, r.skipped
                );
            }
            Ok(())
        }
        ["save", file, out] => {
            let t = keel_trace::load_trace(Path::new(file)).map_err(|e| e.to_string())?;
            keel_trace::save_trace(&t, Path::new(out)).map_err(|e| e.to_string())?;
            let size = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
            println!("saved {out} ({size} bytes)");
            Ok(())
        }
        _ => Err(
            "usage: big_trace write FILE MIB | big_trace open FILE | big_trace save FILE OUT"
                .to_owned(),
        ),
    }
}
