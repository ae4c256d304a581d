//! Trace export speed: Chrome JSON and the native format for 1,000,000
//! spans, against the baseline of cloning the spans.
//!
//! `cargo bench --no-default-features --features cpu --bench profiler_export`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use keel_trace::json::write_json;
use keel_trace::native::write_native;
use keel_trace::{
    Flow, FlowEnd, FlowKind, Lane, LaneKind, Span, SpanKind, TRACE_VERSION, Trace, TraceDevice,
};

const SPANS: usize = 1_000_000;
const LANES: u32 = 8;
const NAMES: usize = 300;

/// 8 lanes (2 host threads, 6 streams on 2 devices), spans laid end to end
/// on each lane with a kernel-like mix of kinds, a few hundred names, an
/// op id on every span, an arg on every 16th and a launch flow for every
/// 64th (counted as two events, `s` and `f`).
fn synthetic() -> Trace {
    let names: Vec<String> = (0..NAMES)
        .map(|i| format!("void gemm_kernel<{i}, float>"))
        .collect();
    let mut trace = Trace {
        version: TRACE_VERSION,
        devices: (0..2)
            .map(|d| TraceDevice {
                device: format!("cuda:{d}"),
                name: "NVIDIA H100".to_owned(),
                properties: vec![("sm_count".to_owned(), "132".to_owned())],
            })
            .collect(),
        ..Trace::default()
    };
    for lane in 0..LANES {
        trace.lanes.push(match lane {
            0 | 1 => Lane {
                kind: LaneKind::Host {
                    thread: u64::from(lane) + 1,
                },
                name: format!("thread {}", lane + 1),
                group: String::new(),
            },
            _ => Lane {
                kind: LaneKind::Stream {
                    device: lane % 2,
                    stream: i64::from(lane),
                    thread: 0,
                },
                name: format!("stream {lane}"),
                group: String::new(),
            },
        });
    }
    let mut clock = [1_000_000u64; LANES as usize];
    trace.spans.reserve(SPANS);
    for i in 0..SPANS {
        let lane = (i % LANES as usize) as u32;
        let host = lane < 2;
        let kind = match i % 10 {
            0 => SpanKind::Copy,
            1 if host => SpanKind::Sync,
            2 if !host => SpanKind::EventRecord,
            _ => SpanKind::Kernel,
        };
        let start = clock[lane as usize] + (i as u64 * 7) % 500;
        let dur = 1_000 + (i as u64 * 37) % 20_000;
        clock[lane as usize] = start + dur;
        let args = if i % 16 == 0 {
            vec![("grid".into(), "[128, 1, 1]".into())]
        } else {
            Vec::new()
        };
        trace.spans.push(Span {
            lane,
            name: names[i % NAMES].as_str().into(),
            kind,
            start_ns: start,
            dur_ns: dur,
            op: i as u64 + 1,
            args,
        });
        if i % 64 == 2 {
            // Lane 2 (a stream) launched from lane 0 (a host thread).
            let from = &trace.spans[i - 2];
            trace.flows.push(Flow {
                id: i as u64,
                kind: FlowKind::Launch,
                from: FlowEnd {
                    lane: from.lane,
                    ts_ns: from.start_ns,
                },
                to: FlowEnd { lane, ts_ns: start },
            });
        }
    }
    trace
}

fn export(c: &mut Criterion) {
    let trace = synthetic();
    let events = trace.spans.len() + 2 * trace.flows.len();
    let mut json = Vec::new();
    write_json(&trace, &mut json).expect("json");
    let mut native = Vec::new();
    write_native(&trace, &mut native).expect("native");
    let name_bytes: usize = trace.spans.iter().map(|s| s.name.len()).sum();
    eprintln!(
        "{} spans (names {:.1} bytes on average), {} flows: JSON {} bytes ({:.1} bytes/event), native {} bytes ({:.1} bytes/event)",
        trace.spans.len(),
        name_bytes as f64 / trace.spans.len() as f64,
        trace.flows.len(),
        json.len(),
        json.len() as f64 / events as f64,
        native.len(),
        native.len() as f64 / events as f64,
    );

    let mut group = c.benchmark_group("profiler_export");
    group.sample_size(10);
    group.throughput(Throughput::Elements(trace.spans.len() as u64));
    group.bench_function("clone spans (baseline)", |b| {
        b.iter(|| black_box(trace.spans.clone()));
    });
    group.bench_function("write_json", |b| {
        let mut out = Vec::with_capacity(json.len() + 4096);
        b.iter(|| {
            out.clear();
            write_json(black_box(&trace), &mut out).expect("json");
            black_box(out.len())
        });
    });
    group.bench_function("write_native", |b| {
        let mut out = Vec::with_capacity(native.len() + 4096);
        b.iter(|| {
            out.clear();
            write_native(black_box(&trace), &mut out).expect("native");
            black_box(out.len())
        });
    });
    group.finish();
}

criterion_group!(benches, export);
criterion_main!(benches);
