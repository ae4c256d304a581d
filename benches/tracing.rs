//! What a `tracing` span costs through `keel::profiler::TracingLayer`
//! against the same span in `tracing-subscriber`'s registry alone (goal:
//! <= 1.5x while a session records), measured in the same iterations
//! (`common::Paired`). A span is made, entered, exited and closed:
//! `info_span!(..).entered()` dropped, as instrumented code does. With no
//! session the layer should cost about nothing over the registry.
//!
//! Run: `cargo bench --bench tracing --features tracing`. Results in
//! docs/BENCHMARKS.md.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

/// Spans per timed run: a session's buffer keeps 2^20 records, so a run
/// never drops.
const SPANS: u64 = 100_000;

/// `SPANS` spans under `dispatch` (fields when `fields`), timed; inside a
/// session when `session`.
fn run(dispatch: &Dispatch, session: bool, fields: bool) -> Duration {
    tracing::dispatcher::with_default(dispatch, || {
        let s = session.then(|| keel::profiler::start().expect("start"));
        let t = Instant::now();
        if fields {
            for i in 0..SPANS {
                drop(black_box(tracing::info_span!("work", i).entered()));
            }
        } else {
            for _ in 0..SPANS {
                drop(black_box(tracing::info_span!("work").entered()));
            }
        }
        let took = t.elapsed();
        if let Some(s) = s {
            let trace = s.stop();
            assert_eq!(trace.dropped, 0);
            assert_eq!(trace.spans.len() as u64, SPANS);
        }
        took
    })
}

fn main() {
    let registry = Dispatch::new(tracing_subscriber::registry());
    let layered =
        Dispatch::new(tracing_subscriber::registry().with(keel::profiler::TracingLayer::new()));
    let rounds = 30;
    for fields in [false, true] {
        let what = if fields { "span with a field" } else { "span" };
        let per_span = |d: Duration| d.as_secs_f64() * 1e9 / SPANS as f64;
        let p = common::Paired::measure(rounds, &|| run(&layered, true, fields), &|| {
            run(&registry, false, fields)
        });
        println!(
            "tracing {what}: layer with a session {:.1} ns, registry alone {:.1} ns (fastest runs); paired ratio median {:.3} (min {:.3}, max {:.3}, {rounds} rounds)",
            per_span(p.min_a),
            per_span(p.min_b),
            p.median(),
            p.ratios[0],
            p.ratios[p.ratios.len() - 1]
        );
        let p = common::Paired::measure(rounds, &|| run(&layered, false, fields), &|| {
            run(&registry, false, fields)
        });
        println!(
            "tracing {what}: layer with no session {:.1} ns, registry alone {:.1} ns; paired ratio median {:.3} (min {:.3}, max {:.3})",
            per_span(p.min_a),
            per_span(p.min_b),
            p.median(),
            p.ratios[0],
            p.ratios[p.ratios.len() - 1]
        );
    }
}
