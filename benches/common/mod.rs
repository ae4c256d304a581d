//! What several benches share: two variants measured in the same
//! iterations. This VM's speed drifts by tens of percent within a minute
//! (shared cores, llvmpipe's worker threads), so each iteration runs both
//! variants back to back and each bench counts only its own: both see the
//! same conditions.

use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;

/// One variant: its bench name and a run that returns its own time.
pub type Variant<'a> = (&'a str, &'a dyn Fn() -> Duration);

/// Benches `a` and `b` in `g`, both run in every iteration.
pub fn interleaved(g: &mut BenchmarkGroup<'_, WallTime>, a: Variant<'_>, b: Variant<'_>) {
    let (name_a, run_a) = a;
    let (name_b, run_b) = b;
    g.bench_function(name_a, |bench| {
        bench.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let t = run_a();
                    run_b();
                    t
                })
                .sum()
        })
    });
    g.bench_function(name_b, |bench| {
        bench.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    run_a();
                    run_b()
                })
                .sum()
        })
    });
}
