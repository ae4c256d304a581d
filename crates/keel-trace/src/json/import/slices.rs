//! The slices tracker: spans from `X` events, `B`/`E` pairs (matched per
//! lane, innermost first, `E` args merged) and async `b`/`e` pairs
//! (matched by pid, cat and id, on a lane per async name), with their
//! names and arguments interned. A `B` or `b` that never ends is dropped
//! and counted at the end.
//!
//! Spans that overlap on one lane without nesting are kept (viewers stack
//! them in extra rows).

use std::collections::HashMap;

use super::event::Key;
use super::report::Report;
use crate::model::{Interner, Span, SpanKind, Text};

/// An open `B` event.
#[derive(Debug)]
struct OpenB {
    span: usize,
    name: String,
}

/// An open async `b` event.
#[derive(Debug)]
pub(super) struct OpenAsync {
    pub lane: u32,
    pub name: String,
    pub ts: i64,
    pub cat: String,
    pub args: Vec<(String, String)>,
}

/// What matches an async `b` with its `e`: (pid, cat, id).
pub(super) type AsyncKey = (Key, String, Key);

/// Why an end event found no begin.
pub(super) enum Unmatched {
    /// No open begin (of its name, within reach).
    NoBegin,
    /// Its begin is later than it.
    BeforeBegin,
}

#[derive(Debug)]
pub(super) struct Slices {
    /// Span start times are kept as wrapped `i64` ns until the trace's
    /// start is known.
    spans: Vec<Span>,
    /// Span names and argument names, shared across spans.
    names: Interner,
    /// Argument values, shared where they repeat (the table fills with
    /// the first distinct values: ids that never repeat stop it growing).
    values: Interner,
    open_b: HashMap<u32, Vec<OpenB>>,
    open_async: HashMap<AsyncKey, Vec<OpenAsync>>,
}

impl Default for Slices {
    fn default() -> Self {
        Slices {
            spans: Vec::new(),
            names: Interner::default(),
            values: Interner::new(1 << 16),
            open_b: HashMap::new(),
            open_async: HashMap::new(),
        }
    }
}

impl Slices {
    /// A span name or argument name, shared with earlier equal ones.
    pub(super) fn name(&mut self, text: &str) -> Text {
        self.names.intern(text)
    }

    /// An argument value, shared with earlier equal ones.
    pub(super) fn value(&mut self, text: &str) -> Text {
        self.values.intern(text)
    }

    /// A slice that starts at `ts` on `lane`: complete (`X`, with its
    /// `dur`), or a `B` whose `E` is to come.
    pub(super) fn slice(&mut self, span: Span, begin: bool) {
        if begin {
            self.open_b.entry(span.lane).or_default().push(OpenB {
                span: self.spans.len(),
                name: span.name.to_string(),
            });
        }
        self.spans.push(span);
    }

    /// An `E` at `ts` on `lane`: ends the innermost open `B` (of the same
    /// name, when the `E` has one), merging in `args`.
    pub(super) fn end(
        &mut self,
        lane: u32,
        name: Option<&str>,
        ts: i64,
        args: Vec<(String, String)>,
    ) -> Result<(), Unmatched> {
        let stack = self.open_b.entry(lane).or_default();
        let at = match name {
            Some(name) if !name.is_empty() => innermost(stack, |b| b.name == name),
            _ => stack.len().checked_sub(1),
        };
        let Some(at) = at else {
            return Err(Unmatched::NoBegin);
        };
        let open = stack.remove(at);
        let start = self.spans.get(open.span).map(|s| s.start_ns as i64);
        let Some(dur) = start
            .and_then(|start| ts.checked_sub(start))
            .filter(|d| *d >= 0)
        else {
            // The B stays open (and is counted as such at the end).
            self.open_b.entry(lane).or_default().insert(at, open);
            return Err(Unmatched::BeforeBegin);
        };
        let Some(span) = self.spans.get_mut(open.span) else {
            return Ok(());
        };
        span.dur_ns = dur as u64;
        for (k, v) in args {
            if !span.args.iter().any(|(j, _)| **j == *k) {
                span.args
                    .push((self.names.intern(&k), self.values.intern(&v)));
            }
        }
        Ok(())
    }

    /// The lane of the innermost open async event of `key`.
    pub(super) fn async_lane(&self, key: &AsyncKey) -> Option<u32> {
        self.open_async.get(key)?.last().map(|o| o.lane)
    }

    /// An async `b`.
    pub(super) fn async_begin(&mut self, key: AsyncKey, open: OpenAsync) {
        self.open_async.entry(key).or_default().push(open);
    }

    /// An async `e` named `name` at `ts`: the span from its `b` (the
    /// innermost of that name), with `args` merged in.
    pub(super) fn async_end(
        &mut self,
        key: AsyncKey,
        name: &str,
        ts: i64,
        args: Vec<(String, String)>,
    ) -> Result<(), Unmatched> {
        let stack = self.open_async.entry(key).or_default();
        let at = innermost(stack, |o| o.name == name);
        let Some((at, dur)) = at.and_then(|at| {
            let dur = ts.checked_sub(stack.get(at)?.ts).filter(|d| *d >= 0)?;
            Some((at, dur))
        }) else {
            return Err(Unmatched::NoBegin);
        };
        let open = stack.remove(at);
        let mut all = open.args;
        for (k, v) in args {
            if !all.iter().any(|(j, _)| *j == k) {
                all.push((k, v));
            }
        }
        if !is_known_category(&open.cat) {
            all.push(("cat".to_owned(), open.cat.clone()));
        }
        let args = all
            .iter()
            .map(|(k, v)| (self.names.intern(k), self.values.intern(v)))
            .collect();
        let span = Span {
            lane: open.lane,
            name: self.names.intern(&open.name),
            kind: span_kind(&open.cat, ""),
            start_ns: open.ts as u64,
            dur_ns: dur as u64,
            op: 0,
            args,
        };
        self.spans.push(span);
        Ok(())
    }

    /// The spans, without those whose `B` never ended; what never ended is
    /// counted in `report`.
    pub(super) fn close(self, report: &mut Report) -> Vec<Span> {
        let open_async: u64 = self.open_async.values().map(|s| s.len() as u64).sum();
        report.skip_n("async b event without a matching e".to_owned(), open_async);
        let mut unended: Vec<usize> = self
            .open_b
            .values()
            .flat_map(|s| s.iter().map(|b| b.span))
            .collect();
        let mut spans = self.spans;
        if !unended.is_empty() {
            report.skip_n(
                "B event without a matching E".to_owned(),
                unended.len() as u64,
            );
            unended.sort_unstable();
            let mut i = 0;
            let mut next = 0;
            spans.retain(|_| {
                let keep = unended.get(next) != Some(&i);
                if !keep {
                    next += 1;
                }
                i += 1;
                keep
            });
        }
        spans
    }
}

/// How deep into a stack of open events an end looks for its begin's name:
/// bounded, so that a file of unmatched begins cannot make the import
/// quadratic.
const MATCH_DEPTH: usize = 64;

/// The index of the innermost open event that `matches` (within
/// [`MATCH_DEPTH`] of the top), else the top's.
fn innermost<T>(stack: &[T], matches: impl Fn(&T) -> bool) -> Option<usize> {
    let from = stack.len().saturating_sub(MATCH_DEPTH);
    stack[from..]
        .iter()
        .rposition(matches)
        .map(|i| from + i)
        .or(stack.len().checked_sub(1))
}

/// The kind of an imported span: by Kineto category, then by the CUDA
/// call's name for runtime and driver calls.
pub(super) fn span_kind(cat: &str, name: &str) -> SpanKind {
    match cat {
        "kernel" => SpanKind::Kernel,
        "gpu_memcpy" | "gpu_memset" => SpanKind::Copy,
        "gpu_memory" => SpanKind::Alloc,
        "cuda_sync" => SpanKind::Sync,
        "cuda_event" => SpanKind::EventRecord,
        "cuda_runtime" | "cuda_driver" => runtime_kind(name),
        _ => SpanKind::Annotation,
    }
}

/// The kind of a CUDA runtime or driver call, by name.
fn runtime_kind(name: &str) -> SpanKind {
    let n = name
        .trim_start_matches("cuda")
        .trim_start_matches("cu")
        .trim_start_matches("hip");
    if n.contains("Launch") {
        SpanKind::Kernel
    } else if n.starts_with("Memcpy") || n.starts_with("Memset") {
        SpanKind::Copy
    } else if n.starts_with("Malloc") || n.starts_with("MemAlloc") || n.starts_with("HostAlloc") {
        SpanKind::Alloc
    } else if n.starts_with("Free") || n.starts_with("MemFree") {
        SpanKind::Free
    } else if n.starts_with("EventRecord") {
        SpanKind::EventRecord
    } else if n.starts_with("StreamWaitEvent") {
        SpanKind::Wait
    } else if n.contains("Synchronize") || n.starts_with("EventQuery") {
        SpanKind::Sync
    } else {
        SpanKind::Annotation
    }
}

/// Categories Kineto gives events that run on a GPU.
pub(super) fn is_device_category(cat: &str) -> bool {
    matches!(
        cat,
        "kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation"
    )
}

/// Categories whose kind says all there is; any other is kept as a `cat`
/// argument.
pub(super) fn is_known_category(cat: &str) -> bool {
    matches!(
        cat,
        "" | "kernel"
            | "gpu_memcpy"
            | "gpu_memset"
            | "gpu_memory"
            | "cuda_sync"
            | "cuda_event"
            | "cuda_runtime"
            | "cuda_driver"
            | "cpu_op"
            | "user_annotation"
            | "gpu_user_annotation"
            | "python_function"
    )
}
