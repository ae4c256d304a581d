//! What several benches share: two variants measured in the same
//! iterations. A shared machine's speed drifts by tens of percent within
//! a minute (shared cores, llvmpipe's worker threads), so each iteration
//! runs both variants back to back and each bench counts only its own:
//! both see the same conditions. The order alternates from one iteration
//! to the next: the second run of a pair is not timed like the first (on
//! llvmpipe whichever wgpu loop runs second is 5-15% slower:
//! docs/BENCHMARKS.md, 2026-11-26, "Order bias in paired measurements").

#![allow(dead_code, reason = "each bench uses a part of this module")]

use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;

/// One variant: its bench name and a run that returns its own time.
pub type Variant<'a> = (&'a str, &'a dyn Fn() -> Duration);

/// Runs `a` and `b` back to back, `a` first on even `i`: their times.
fn pair(i: u64, a: &dyn Fn() -> Duration, b: &dyn Fn() -> Duration) -> (Duration, Duration) {
    if i.is_multiple_of(2) {
        let ta = a();
        (ta, b())
    } else {
        let tb = b();
        (a(), tb)
    }
}

/// Benches `a` and `b` in `g`, both run in every iteration.
pub fn interleaved(g: &mut BenchmarkGroup<'_, WallTime>, a: Variant<'_>, b: Variant<'_>) {
    let (name_a, run_a) = a;
    let (name_b, run_b) = b;
    g.bench_function(name_a, |bench| {
        bench.iter_custom(|iters| (0..iters).map(|i| pair(i, run_a, run_b).0).sum())
    });
    g.bench_function(name_b, |bench| {
        bench.iter_custom(|iters| (0..iters).map(|i| pair(i, run_a, run_b).1).sum())
    });
}

/// `rounds` pairs of runs of `a` and `b`, the order alternating.
pub struct Paired {
    /// The per-round ratios `a / b`, sorted.
    pub ratios: Vec<f64>,
    /// Each side's fastest run.
    pub min_a: Duration,
    pub min_b: Duration,
}

impl Paired {
    /// Measures `rounds` (at least 1) pairs.
    pub fn measure(rounds: usize, a: &dyn Fn() -> Duration, b: &dyn Fn() -> Duration) -> Paired {
        let mut ratios = Vec::with_capacity(rounds);
        let (mut min_a, mut min_b) = (Duration::MAX, Duration::MAX);
        for i in 0..rounds.max(1) as u64 {
            let (ta, tb) = pair(i, a, b);
            min_a = min_a.min(ta);
            min_b = min_b.min(tb);
            ratios.push(ta.as_secs_f64() / tb.as_secs_f64());
        }
        ratios.sort_by(f64::total_cmp);
        Paired {
            ratios,
            min_a,
            min_b,
        }
    }

    /// The median per-round ratio (robust to a preempted run).
    pub fn median(&self) -> f64 {
        self.ratios[self.ratios.len() / 2]
    }

    /// The ratio of the fastest runs.
    pub fn of_minimums(&self) -> f64 {
        self.min_a.as_secs_f64() / self.min_b.as_secs_f64()
    }
}

/// Measures `rounds` paired rounds of `a` and `b` and prints
/// "`label` paired_ratio `names`: median, min and max of the per-round
/// ratios a / b".
pub fn print_paired(
    label: &str,
    names: &str,
    rounds: usize,
    a: &dyn Fn() -> Duration,
    b: &dyn Fn() -> Duration,
) {
    let p = Paired::measure(rounds, a, b);
    println!(
        "{label} paired_ratio {names}: median {:.3} (min {:.3}, max {:.3}, {rounds} rounds, order alternating)",
        p.median(),
        p.ratios[0],
        p.ratios[p.ratios.len() - 1]
    );
}

/// Whether to measure devices of `ty`: every type, unless
/// `KEEL_BENCH_DEVICES` lists the ones to measure (lowercase names, comma
/// separated: `KEEL_BENCH_DEVICES=cpu,vulkan`).
pub fn wanted(ty: keel::DeviceType) -> bool {
    match std::env::var("KEEL_BENCH_DEVICES") {
        Ok(list) => list.split(',').any(|n| n.trim() == ty.name_lower()),
        Err(_) => true,
    }
}

/// Every device that runs here: the CPU, then CUDA, Vulkan and wgpu
/// devices (as [`devices_of`] finds them).
pub fn every_device() -> Vec<keel::Device> {
    let mut out = Vec::new();
    if wanted(keel::DeviceType::Cpu) {
        out.push(keel::Device::cpu());
    }
    out.extend(devices_of(&[
        keel::DeviceType::Cuda,
        keel::DeviceType::Vulkan,
        keel::DeviceType::Wgpu,
    ]));
    out
}

/// The devices of `types` that run here, in order: a backend that is
/// unavailable, and a device that is listed but does not open (wgpu's GL
/// adapter on NVIDIA's headless EGL, say), are printed as skipped.
pub fn devices_of(types: &[keel::DeviceType]) -> Vec<keel::Device> {
    let mut out = Vec::new();
    for &ty in types {
        if !wanted(ty) {
            eprintln!("skipping {ty}: not in KEEL_BENCH_DEVICES");
            continue;
        }
        if let Err(e) = keel::availability(ty) {
            eprintln!("skipping {ty}: {e}");
            continue;
        }
        for d in keel::devices(ty) {
            match keel::properties(d) {
                Ok(_) => out.push(d),
                Err(e) => eprintln!("skipping {d}: it does not open: {e}"),
            }
        }
    }
    out
}
