//! The importer of other tools' Chrome trace files (no `keel` object),
//! PyTorch's profiler (Kineto) first: lenient, and losing nothing silently.
//!
//! A trace processor in three stages: the tokenizer (`stream.rs`) finds
//! each event's bytes; the parser (`parse.rs`) reads one event into a
//! borrowed [`RawEvent`](event::RawEvent) and feeds what it says to the
//! trackers, which hold the state that spans events; at the end
//! [`Importer::finish`] closes the trackers into the [`Trace`] and its
//! [`ImportReport`](crate::model::ImportReport). No JSON tree of
//! the file is ever held.
//!
//! - `lanes.rs`: processes, threads and lanes, keyed by (pid, tid) as met
//!   and only decided at the end, when every metadata event has been read
//!   (Kineto may write a process's labels after its events). A process is
//!   a GPU when its `process_labels` (Kineto: `GPU 0`) or `process_name`
//!   (`cuda:0 ...`) names one, or when it holds device events (categories
//!   `kernel`, `gpu_memcpy`, `gpu_memset`, `gpu_user_annotation`). Its
//!   threads are the device's streams; the device takes its name and
//!   properties from Kineto's top-level `deviceProperties` (matched by
//!   `id`). Every other thread is a host lane whose [`Lane::group`] is its
//!   process (`python3.10 (pid 42)`). Lanes are ordered host processes
//!   first (by `process_sort_index`, then first appearance), then devices;
//!   threads by `thread_sort_index`.
//! - `slices.rs`: `X`; `B`/`E` (matched per lane, innermost first, `E`
//!   args merged); async `b`/`e` (matched by pid, cat and id, on a lane per
//!   async name).
//! - `flows.rs`: flows `s`/`t`/`f` matched by (cat, name, id) in any file
//!   order (Kineto writes an `f` before its `s`), ids as numbers or hex
//!   strings, `f`/`t` binding to the enclosing slice with `"bp":"e"` and
//!   to the next slice otherwise; flows v2 (`bind_id` with
//!   `flow_out`/`flow_in` on slices). A flow's kind is
//!   [`FlowKind::Launch`](crate::model::FlowKind::Launch) except
//!   for event waits and Kineto's `fwdbwd` (forward -> backward), which are
//!   dependencies
//!   ([`FlowKind::EventWait`](crate::model::FlowKind::EventWait)).
//! - `counters.rs`: `C` counters (one series per numeric argument: `name`
//!   for `value`, else `name.key`; a host process's counters hang on a
//!   device entry `host` named after the process).
//! - `memory.rs`: PyTorch's allocator events (`[memory]` and
//!   `[OutOfMemory]` instants, written with `profile_memory=True`: `Device
//!   Type`, `Device Id`, `Addr`, `Bytes` (negative for a free), `Total
//!   Allocated`, `Total Reserved`) become
//!   [`MemoryEvent`](crate::model::MemoryEvent)s of their device
//!   with the allocated and reserved curves.
//! - `report.rs`: every element of `traceEvents` counted either imported
//!   or skipped with a reason.
//!
//! Other events: `i`/`I`/`R` instants (scope in the `scope` argument) and
//! async `n` instants (on their async lane) go straight into the trace;
//! `M` metadata into the lanes tracker.
//!
//! Times: `ts`/`dur` are microseconds as numbers or numeric strings (any
//! precision, rounded to the ns); the whole trace is moved so its earliest
//! event is at 0 ([`Clock`]), and the file's own time of that 0 is kept as
//! the trace's [`origin_ns`](crate::model::Trace::origin_ns), so that
//! several ranks' files can still be put on one clock and other records of
//! the run (PyTorch's memory snapshots) found on the trace's timeline.
//! Kineto's `ts` count from the top-level `baseTimeNanoseconds` (Unix-epoch
//! ns: HolisticTraceAnalysis reads event times as `baseTimeNanoseconds +
//! ts`), so the origin is that plus the earliest `ts`; without the field,
//! the earliest `ts` as it is. A `baseTimeNanoseconds` that is not an
//! integer leaves the origin unknown rather than guess which clock the
//! times are on. `displayTimeUnit` only says how to display times, never
//! how to read them.

mod counters;
mod event;
mod flows;
mod lanes;
mod memory;
mod parse;
mod report;
mod slices;

use serde_json::Value;

use super::stream::{self, Ending, Sink, Syntax};
use super::value::Fields;
use crate::error::Result;
use crate::model::{InstantEvent, Lane, TRACE_VERSION, Trace};
use counters::Counters;
use event::Key;
use flows::Flows;
use lanes::Lanes;
use memory::Memory;
use report::Report;
use slices::Slices;

/// What one import produced.
pub(crate) struct Imported {
    /// The trace, with its [`ImportReport`](crate::model::ImportReport).
    pub trace: Trace,
    /// The file had a top-level `keel` object: it is Keel's own and should
    /// be read exactly instead.
    pub keel: bool,
    /// `distributedInfo.rank`, when the file has one.
    pub rank: Option<i64>,
}

/// Imports another tool's JSON trace read from `input`; `compression`
/// names how it was compressed, for the report (`None`: plain).
pub(crate) fn import(
    input: impl std::io::Read + Send,
    compression: Option<&str>,
) -> Result<Imported> {
    let mut importer = Importer::default();
    let ending = stream::scan_ahead(input, Syntax::Lenient, &mut importer)?;
    Ok(importer.finish(ending, compression))
}

/// The time base: times are kept as read (wrapped `i64` ns) until the
/// end, when the earliest event's becomes 0.
#[derive(Debug, Default)]
struct Clock {
    earliest: Option<i64>,
    /// Kineto's `baseTimeNanoseconds`: `Some(Ok(ns))`, or `Some(Err(()))`
    /// for a value that is not an integer.
    base: Option<std::result::Result<i64, ()>>,
}

impl Clock {
    /// The file's own time of the trace's 0, in ns (see the module docs).
    fn origin(&self) -> Option<i64> {
        let earliest = self.earliest?;
        match self.base {
            None => Some(earliest),
            Some(Ok(base)) => base.checked_add(earliest),
            Some(Err(())) => None,
        }
    }

    fn see(&mut self, ts: i64) {
        self.earliest = Some(self.earliest.map_or(ts, |m| m.min(ts)));
    }

    /// A time kept in a `u64` field, from the trace's start.
    fn rebase(&self, t: u64) -> u64 {
        self.rebase_signed(t as i64)
    }

    /// A time as read, from the trace's start.
    fn rebase_signed(&self, ts: i64) -> u64 {
        ts.wrapping_sub(self.earliest.unwrap_or(0)) as u64
    }
}

/// The parser's state: the trackers, and what the file's top-level fields
/// say.
#[derive(Debug, Default)]
struct Importer {
    report: Report,
    clock: Clock,
    lanes: Lanes,
    slices: Slices,
    flows: Flows,
    counters: Counters,
    memory: Memory,
    instants: Vec<InstantEvent>,
    /// Kineto's `deviceProperties`.
    device_properties: Option<Value>,
    rank: Option<i64>,
    keel: bool,
}

impl Sink for Importer {
    fn event(&mut self, _: u64, bytes: Option<&[u8]>) -> Result<()> {
        self.report.events += 1;
        let Some(bytes) = bytes else {
            self.report
                .skip(format!("event larger than {} MiB", stream::MAX_VALUE >> 20));
            return Ok(());
        };
        match serde_json::from_slice(bytes) {
            Ok(ev) => self.event(ev),
            Err(e) => {
                let reason = if matches!(bytes.first(), Some(b'{')) {
                    if e.is_syntax() || e.is_eof() {
                        "invalid JSON in an event"
                    } else {
                        "event fields of the wrong type (ph, name, cat, bp and s must be strings, args an object)"
                    }
                } else {
                    "not a JSON object"
                };
                self.report.skip(reason.to_owned());
            }
        }
        Ok(())
    }

    fn truncated_event(&mut self) -> Result<()> {
        self.report.events += 1;
        self.report
            .skip("the last event, cut by the end of the file".to_owned());
        Ok(())
    }

    fn wants(&self, key: &str) -> bool {
        matches!(
            key,
            "deviceProperties"
                | "distributedInfo"
                | "schemaVersion"
                | "keel"
                | "baseTimeNanoseconds"
        )
    }

    fn field(&mut self, key: &str, _: u64, value: Option<&[u8]>) -> Result<()> {
        match key {
            "keel" => self.keel = true,
            "schemaVersion" => self.report.kineto = true,
            "deviceProperties" => {
                self.report.kineto = true;
                self.device_properties = value.and_then(|v| serde_json::from_slice(v).ok());
            }
            "baseTimeNanoseconds" => {
                self.clock.base = Some(
                    value
                        .and_then(|v| serde_json::from_slice::<i64>(v).ok())
                        .ok_or(()),
                );
            }
            "distributedInfo" => {
                let info: Option<Fields<'_>> = value.and_then(|v| serde_json::from_slice(v).ok());
                self.rank = info
                    .as_ref()
                    .and_then(|i| i.get("rank"))
                    .and_then(Key::of)
                    .and_then(|k| match k {
                        Key::Num(n) => Some(n),
                        Key::Str(_) => None,
                    });
            }
            _ => {}
        }
        Ok(())
    }
}

impl Importer {
    /// Closes the trackers into the trace. Their order matters where one
    /// needs another's result: devices are the GPU processes, then the
    /// host processes with counters, then the devices only allocator
    /// events name; flows bind to the placed spans.
    fn finish(self, ending: Ending, compression: Option<&str>) -> Imported {
        let Importer {
            mut report,
            clock,
            lanes,
            slices,
            flows,
            counters,
            memory,
            mut instants,
            device_properties,
            rank,
            keel,
        } = self;
        let mut spans = slices.close(&mut report);
        let mut devices = lanes.devices(device_properties.as_ref());
        let mut counters = counters.close(&mut devices, &lanes, &clock);
        let (memory, curves) = memory.close(&mut devices, &clock);
        counters.extend(curves);
        let (lanes, remap): (Vec<Lane>, _) = lanes.close(&devices);
        for span in &mut spans {
            span.lane = remap.lane(span.lane);
            span.start_ns = clock.rebase(span.start_ns);
        }
        for instant in &mut instants {
            instant.lane = remap.lane(instant.lane);
            instant.ts_ns = clock.rebase(instant.ts_ns);
        }
        let flows = flows.close(&spans, lanes.len(), &remap, &clock, &mut report);
        let origin_ns = clock.origin();
        let trace = Trace {
            version: TRACE_VERSION,
            devices: devices.list,
            lanes,
            spans,
            instants,
            flows,
            counters,
            memory,
            calibrations: Vec::new(),
            dropped: 0,
            import: Some(report.close(ending, compression)),
            origin_ns,
            ranks: None,
        };
        Imported { trace, keel, rank }
    }
}
