//! Big PyTorch memory snapshots: writes one, or opens one and reports how
//! long reading it and computing its active-memory timeline took (peak
//! memory from `/usr/bin/time -v`).
//!
//! ```text
//! cargo run --release -p keel-trace --example big_snapshot -- write big.pickle 1024
//! /usr/bin/time -v target/release/examples/big_snapshot open big.pickle
//! ```
//!
//! `write FILE MIB` writes a snapshot of about MIB MiB: the real GPT-2
//! snapshot of `tests/data/import/` with its segments and history
//! repeated, shifted in address and time (`benches/snapshot_gen.rs`; the
//! file opens in Python's `pickle` too). `open FILE` loads it with
//! `keel_trace::snapshot::load_snapshot`, computes every device's
//! timeline, then the allocator state at the peak, and prints each step's
//! time.

#[path = "../benches/snapshot_gen.rs"]
mod snapshot_gen;

use std::path::Path;
use std::time::Instant;

use keel_trace::snapshot;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["write", file, mib] => {
            let mib: u64 = mib
                .parse()
                .map_err(|_| format!("expected a size in MiB, found {mib:?}"))?;
            let real = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/import/gpt2_train_memory_snapshot.pickle.gz");
            let real = snapshot::load_snapshot(&real).map_err(|e| e.to_string())?;
            let f = std::fs::File::create(file).map_err(|e| format!("{file}: {e}"))?;
            let start = Instant::now();
            let (bytes, entries) = snapshot_gen::write_snapshot(f, &real, mib << 20)
                .map_err(|e| format!("{file}: {e}"))?;
            println!(
                "wrote {file}: {bytes} bytes, {entries} trace entries in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        ["open", file] => {
            let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
            let start = Instant::now();
            let s = snapshot::load_snapshot(Path::new(file)).map_err(|e| e.to_string())?;
            let read = start.elapsed().as_secs_f64();
            let t = Instant::now();
            let timelines = snapshot::timelines(&s);
            let timeline = t.elapsed().as_secs_f64();
            println!(
                "opened {file} ({size} bytes) in {read:.2} s: {} segments, {} entries, {} frames, {} stacks",
                s.segments.len(),
                s.entries(),
                s.frames().len(),
                s.stack_count()
            );
            println!(
                "timelines in {timeline:.3} s; open + timeline {:.2} s",
                read + timeline
            );
            for tl in &timelines {
                let t = Instant::now();
                let state = snapshot::state_at(&s, tl.device, tl.peak.entry);
                println!(
                    "device {}: peak {} B after entry {:?}; state at the peak in {:.2} s ({} segments, {} mismatches)",
                    tl.device,
                    tl.peak.bytes,
                    tl.peak.entry,
                    t.elapsed().as_secs_f64(),
                    state.segments().len(),
                    state.mismatches()
                );
            }
            Ok(())
        }
        _ => Err("usage: big_snapshot write FILE MIB | big_snapshot open FILE".to_owned()),
    }
}
