//! Area selection speed: `selection::analyse` over 1,000,000 spans (the
//! whole trace, every lane; and a window of 1% of it), against the
//! baseline of the Analysis tab's tables over the same trace
//! (`analysis::Analysis::new`, one pass over every span).
//!
//! `cargo bench -p keel-trace --bench selection`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use keel_trace::analysis::Analysis;
use keel_trace::selection::{Selection, analyse};
use keel_trace::view::{TraceView, synthetic_trace};

const SPANS: usize = 1_000_000;
fn bench(c: &mut Criterion) {
    let view = TraceView::new(synthetic_trace(SPANS), "bench");
    let (lo, hi) = view.bounds;
    let lanes: Vec<usize> = (0..view.lanes.len()).collect();
    let whole = Selection {
        lanes: lanes.clone(),
        t0: lo,
        t1: hi,
    };
    let mid = lo + (hi - lo) / 2;
    let part = Selection {
        lanes,
        t0: mid,
        t1: mid + (hi - lo) / 100,
    };
    let mut g = c.benchmark_group("selection");
    g.sample_size(10);
    for (name, sel) in [("whole", &whole), ("1%", &part)] {
        g.bench_function(format!("analyse {name}"), |b| {
            b.iter(|| black_box(analyse(&view, black_box(sel))))
        });
    }
    g.bench_function("HTA tables (baseline)", |b| {
        b.iter(|| black_box(Analysis::new(black_box(&view))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
