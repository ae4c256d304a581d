//! `TracingLayer` (feature `tracing`): another crate's `tracing` spans and
//! events reach a session's trace, and a live viewer, beside Keel's work.

use std::time::{Duration, Instant};

use keel_device::profiler::live::{self, Chunk, Client, LiveOptions};
use keel_device::profiler::{LaneKind, SpanKind, Trace, TracingLayer};
use tracing_subscriber::layer::SubscriberExt;

use crate::live::work;
use crate::serial;

/// A subscriber as a program would install it: the registry and Keel's
/// layer.
fn subscriber() -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::registry().with(TracingLayer::new())
}

fn span<'t>(trace: &'t Trace, name: &str) -> &'t keel_device::profiler::Span {
    trace
        .spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name}"))
}

fn arg<'a>(
    args: &'a [(keel_device::profiler::Text, keel_device::profiler::Text)],
    key: &str,
) -> Option<&'a str> {
    args.iter()
        .find(|(k, _)| k.as_str() == key)
        .map(|(_, v)| v.as_str())
}

#[test]
fn tracing_spans_and_events_become_host_spans_and_markers() {
    let _s = serial();
    tracing::subscriber::with_default(subscriber(), || {
        // Before any session: nothing is kept.
        tracing::info_span!("before").in_scope(|| tracing::info!("not kept"));
        let session = keel_device::profiler::start().expect("start");
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        {
            let outer = tracing::info_span!("step", n = 7u64).entered();
            let inner = tracing::debug_span!("forward", batch = tracing::field::Empty);
            inner.record("batch", 32);
            inner.in_scope(|| {
                tracing::warn!(loss = 0.5, "diverging");
                work(1);
            });
            drop(outer);
        }
        std::thread::Builder::new()
            .name("loader".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    tracing::info_span!("load")
                        .in_scope(|| tracing::info!(target: "io", bytes = 10));
                });
            })
            .expect("spawn")
            .join()
            .expect("join");
        let trace = session.stop();
        trace.check().expect("a well-formed trace");

        assert!(trace.spans.iter().all(|s| s.name != "before"));
        assert!(trace.instants.iter().all(|i| i.name != "not kept"));

        let step = span(&trace, "step");
        let forward = span(&trace, "forward");
        assert_eq!(step.kind, SpanKind::Annotation);
        assert_eq!(arg(&step.args, "n"), Some("7"));
        // A field recorded after the span was made is there.
        assert_eq!(arg(&forward.args, "batch"), Some("32"));
        // Nested on one host lane, with Keel's launch inside.
        assert_eq!(step.lane, forward.lane);
        assert!(matches!(
            trace.lanes[step.lane as usize].kind,
            LaneKind::Host { .. }
        ));
        assert!(step.start_ns <= forward.start_ns);
        assert!(forward.start_ns + forward.dur_ns <= step.start_ns + step.dur_ns);
        let launch = trace
            .spans
            .iter()
            .find(|s| s.name == "spin" && s.lane == forward.lane)
            .expect("the launch's host span on the same lane");
        assert!(forward.start_ns <= launch.start_ns);
        assert!(launch.start_ns + launch.dur_ns <= forward.start_ns + forward.dur_ns);

        let warn = trace
            .instants
            .iter()
            .find(|i| i.name == "diverging")
            .expect("the event");
        assert_eq!(warn.lane, forward.lane);
        assert_eq!(warn.args, [("loss".to_owned(), "0.5".to_owned())]);
        assert!(forward.start_ns <= warn.ts_ns && warn.ts_ns <= forward.start_ns + forward.dur_ns);

        // Another thread: its own lane, named after it; an event without
        // a message is named by its callsite.
        let load = span(&trace, "load");
        assert_ne!(load.lane, step.lane);
        assert_eq!(trace.lanes[load.lane as usize].name, "loader");
        let io = trace
            .instants
            .iter()
            .find(|i| i.args.iter().any(|(k, v)| k == "bytes" && v == "10"))
            .expect("the loader's event");
        assert_eq!(io.lane, load.lane);
        assert!(io.name.starts_with("event "), "{}", io.name);
    });
}

#[test]
fn a_span_open_when_the_session_stops_is_not_carried_into_the_next() {
    let _s = serial();
    tracing::subscriber::with_default(subscriber(), || {
        let session = keel_device::profiler::start().expect("start");
        let open = tracing::info_span!("straddles").entered();
        drop(session.stop());
        drop(open);
        let session = keel_device::profiler::start().expect("start");
        tracing::info_span!("later").in_scope(|| {});
        let trace = session.stop();
        assert!(trace.spans.iter().any(|s| s.name == "later"));
        assert!(trace.spans.iter().all(|s| s.name != "straddles"));
    });
}

#[test]
fn tracing_spans_reach_a_live_viewer() {
    let _s = serial();
    tracing::subscriber::with_default(subscriber(), || {
        let options = LiveOptions {
            interval: Duration::from_millis(20),
            ..LiveOptions::default()
        };
        let server = live::serve_with("127.0.0.1:0", options).expect("serve");
        let mut client = Client::connect(server.addr()).expect("connect");
        let mut merged = Trace::default();
        let deadline = Instant::now() + Duration::from_secs(20);
        let seen = |t: &Trace| t.spans.iter().filter(|s| s.name == "frame").count();
        while seen(&merged) < 3 && Instant::now() < deadline {
            tracing::info_span!("frame").in_scope(|| work(1));
            match client.next_chunk().expect("chunk") {
                Chunk::Fragment(f) => merged.merge(*f).expect("merge"),
                Chunk::Dropped(n) => panic!("a fast viewer dropped {n} chunks"),
            }
        }
        assert!(seen(&merged) >= 3, "frames arrived live: {}", seen(&merged));
        server.stop();
    });
}
