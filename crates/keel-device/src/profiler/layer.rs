//! [`TracingLayer`]: any crate's `tracing` spans and events, recorded in
//! the profiler's session beside Keel's own work.
//!
//! A span is recorded each time it is entered and exited on a thread, as
//! a host span of kind [`SpanKind::Annotation`](keel_trace::SpanKind) on
//! that thread's lane, named by the span's name, with its fields as
//! arguments (`tracing-tracy` records zones the same way: an async span
//! entered on several threads, or several times, is several spans). An
//! event is a marker on its thread's lane, named by its `message` (its
//! name when it has none), with its other fields as arguments. Records go
//! to the same per-thread buffers as Keel's own, so they reach a saved
//! trace and a live viewer alike, and a thread's buffer bound counts what
//! does not fit as dropped.
//!
//! # Cost
//! With no session recording, each callback is one relaxed load
//! ([`enabled`]) and no record is kept, so the layer can stay installed.
//! With one, a span pays two counter reads (`stamp.rs`), a push on the
//! thread's stack of open spans and one record; its fields are formatted
//! once, when the span is made or recorded, and only if it has any
//! (`benches/profiler.rs`, `tracing_*`).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::record::{self, Detail, FieldText, enabled};
use super::stamp::Stamp;

/// A `tracing-subscriber` [`Layer`] that records `tracing` spans and
/// events into the running profiler session: each entry of a span is a
/// host span of kind `Annotation` on its thread's lane, with the span's
/// fields as arguments (formatted once, when the span is made or
/// recorded); each event is a marker named by its `message`. With no
/// session recording, every callback is one relaxed load, so the layer
/// can stay installed.
///
/// ```
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let subscriber = tracing_subscriber::registry().with(keel_device::profiler::TracingLayer::new());
/// tracing::subscriber::with_default(subscriber, || {
///     let session = keel_device::profiler::start().expect("no other session");
///     tracing::info_span!("load", file = "weights.bin").in_scope(|| {
///         tracing::info!(bytes = 4096, "read");
///     });
///     let trace = session.stop();
///     let load = trace.spans.iter().find(|s| s.name == "load").expect("the span");
///     assert_eq!(load.args[0].1, "weights.bin");
///     assert!(trace.instants.iter().any(|i| i.name == "read"));
/// });
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingLayer {
    _private: (),
}

impl TracingLayer {
    /// The layer; add it to a `tracing_subscriber::registry()`.
    pub fn new() -> Self {
        TracingLayer::default()
    }
}

/// A span's fields, kept in its registry extensions while it lives.
struct Fields(Arc<FieldText>);

thread_local! {
    /// The spans this thread entered and has not exited, with their
    /// start: spans nest on a thread, so an exit is almost always the
    /// last entry.
    static OPEN: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
    /// The span this thread made last and its metadata: instrumented code
    /// mostly enters a span right after making it
    /// (`info_span!(..).entered()`), which then needs no registry lookup.
    static MADE: Cell<Option<(u64, &'static Metadata<'static>)>> = const { Cell::new(None) };
}

/// A span this thread entered: its id, start and metadata.
struct Open {
    id: Id,
    start: Stamp,
    meta: &'static Metadata<'static>,
}

/// Formats a span's fields into one string.
struct SpanFields<'a>(&'a mut FieldText);

impl SpanFields<'_> {
    fn close(&mut self, field: &Field) {
        self.close_named(field.name());
    }

    /// Ends the value of field `name` where the text ends now.
    fn close_named(&mut self, name: &'static str) {
        let end = u32::try_from(self.0.text.len()).unwrap_or(u32::MAX);
        self.0.fields.push((name, end));
    }
}

impl Visit for SpanFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.text.push_str(value);
        self.close(field);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Writing into a `String` cannot fail.
        let _ = write!(self.0.text, "{value:?}");
        self.close(field);
    }
}

/// An event's fields as text pairs, its `message` apart.
#[derive(Default)]
struct EventFields {
    args: Vec<(String, String)>,
    message: Option<String>,
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let value = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(value);
        } else {
            self.args.push((field.name().to_owned(), value));
        }
    }
}

impl<S> Layer<S> for TracingLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !enabled() {
            return;
        }
        MADE.set(Some((id.into_u64(), attrs.metadata())));
        if attrs.values().is_empty() {
            return;
        }
        let mut fields = FieldText::default();
        attrs.record(&mut SpanFields(&mut fields));
        if let Some(span) = ctx.span(id)
            && !fields.fields.is_empty()
        {
            span.extensions_mut().insert(Fields(Arc::new(fields)));
        }
    }

    /// Values recorded later replace the ones the span was made with
    /// (rare: the span's fields are formatted again).
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !enabled() {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut recorded = FieldText::default();
        values.record(&mut SpanFields(&mut recorded));
        let mut ext = span.extensions_mut();
        let old = ext.remove::<Fields>().map(|f| f.0).unwrap_or_default();
        let mut merged = FieldText::default();
        let new: Vec<_> = recorded.iter().collect();
        for (name, value) in old.iter().filter(|(n, _)| new.iter().all(|(m, _)| m != n)) {
            merged.text.push_str(value);
            SpanFields(&mut merged).close_named(name);
        }
        for (name, value) in new {
            merged.text.push_str(value);
            SpanFields(&mut merged).close_named(name);
        }
        ext.insert(Fields(Arc::new(merged)));
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if !enabled() {
            return;
        }
        let made = MADE.get().filter(|(made, _)| *made == id.into_u64());
        let Some(meta) = made.map(|(_, meta)| meta).or_else(|| ctx.metadata(id)) else {
            return;
        };
        let start = Stamp::now();
        OPEN.with(|open| {
            open.borrow_mut().push(Open {
                id: id.clone(),
                start,
                meta,
            })
        });
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        // Taken even with no session: an entry left from a session that
        // stopped meanwhile must not pair with a later exit. With no entry
        // (no session), the clock is not read.
        let Some((open, end)) = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let i = open.iter().rposition(|o| o.id == *id)?;
            let end = Stamp::now();
            Some((open.remove(i), end))
        }) else {
            return;
        };
        if !enabled() {
            return;
        }
        // Only a span with fields has any to look up.
        let detail = if open.meta.fields().is_empty() {
            Detail::None
        } else {
            ctx.span(id)
                .and_then(|span| {
                    span.extensions()
                        .get::<Fields>()
                        .map(|f| Detail::Fields(Arc::clone(&f.0)))
                })
                .unwrap_or(Detail::None)
        };
        record::annotation(Cow::Borrowed(open.meta.name()), open.start, end, detail);
    }

    /// A closed span's id may be reused: it is no longer the one made
    /// last.
    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        if MADE.get().is_some_and(|(made, _)| made == id.into_u64()) {
            MADE.set(None);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !enabled() {
            return;
        }
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let name = fields
            .message
            .unwrap_or_else(|| event.metadata().name().to_owned());
        record::mark_with(name, fields.args);
    }
}
