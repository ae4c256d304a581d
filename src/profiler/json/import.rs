//! The importer of other tools' Chrome trace files (no `keel` object):
//! lenient, takes what it can. Devices come from `process_name` metadata
//! that names one (`cuda:0 ...`, Kineto's `GPU 0`); every other process is
//! host threads; lanes are made as events name them; events that cannot
//! be used are skipped.

use std::collections::{HashMap, hash_map::Entry};

use serde_json::Value;

use super::decode::{Obj, Tables, walk};
use crate::error::Result;
use crate::profiler::trace::{Counter, Lane, LaneKind, TRACE_VERSION, Trace, TraceDevice};

/// Imports another tool's `traceEvents`.
pub(super) fn foreign(events: &[Value]) -> Result<Trace> {
    let (tables, trace) = ForeignTables::new(events);
    walk(tables, trace, events)
}

/// Devices and lanes found so far.
struct ForeignTables {
    /// (pid, tid) -> lane index
    lanes: HashMap<(u64, u64), u32>,
    /// The device index of each device pid.
    device_pids: HashMap<u64, u32>,
    /// (device, name) -> counter index
    counters: HashMap<(u32, String), usize>,
}

impl ForeignTables {
    /// Devices from `process_name` metadata and lanes from `thread_name`
    /// metadata, in a trace that holds them.
    fn new(events: &[Value]) -> (ForeignTables, Trace) {
        let mut trace = Trace {
            version: TRACE_VERSION,
            ..Trace::default()
        };
        let mut device_pids = HashMap::new();
        let mut names = HashMap::new();
        for e in events {
            let Some(ev) = e.as_object() else { continue };
            if ev.get("ph").and_then(Value::as_str) != Some("M") {
                continue;
            }
            let (Some(pid), Some(name)) = (
                ev.get("pid").and_then(Value::as_u64),
                ev.get("args")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str),
            ) else {
                continue;
            };
            match ev.get("name").and_then(Value::as_str) {
                Some("process_name") => {
                    if let Entry::Vacant(slot) = device_pids.entry(pid)
                        && let Some((device, rest)) = device_name(name)
                    {
                        slot.insert(trace.devices.len() as u32);
                        trace.devices.push(TraceDevice {
                            device,
                            name: rest,
                            properties: Vec::new(),
                        });
                    }
                }
                Some("thread_name") => {
                    if let Some(tid) = ev.get("tid").and_then(Value::as_u64) {
                        names.entry((pid, tid)).or_insert_with(|| name.to_owned());
                    }
                }
                _ => {}
            }
        }
        let mut tables = ForeignTables {
            lanes: HashMap::new(),
            device_pids,
            counters: HashMap::new(),
        };
        // Lanes in the order of their thread_name events, then as met.
        let mut named: Vec<_> = names.into_iter().collect();
        named.sort();
        for ((pid, tid), name) in named {
            tables.foreign_lane(&mut trace, pid, tid, Some(name));
        }
        (tables, trace)
    }

    fn foreign_lane(&mut self, trace: &mut Trace, pid: u64, tid: u64, name: Option<String>) -> u32 {
        if let Some(&lane) = self.lanes.get(&(pid, tid)) {
            return lane;
        }
        let kind = match self.device_pids.get(&pid) {
            Some(&device) => LaneKind::Stream {
                device,
                stream: tid as i64,
            },
            None => LaneKind::Host { thread: tid },
        };
        let name = name.unwrap_or_else(|| match kind {
            LaneKind::Stream { .. } => format!("stream {tid}"),
            LaneKind::Host { .. } => format!("thread {tid}"),
        });
        let index = trace.lanes.len() as u32;
        trace.lanes.push(Lane {
            kind,
            name,
            group: String::new(),
        });
        self.lanes.insert((pid, tid), index);
        index
    }
}

impl Tables for ForeignTables {
    const STRICT: bool = false;

    /// `None` (skip it) for an event with no usable pid/tid.
    fn lane(&mut self, trace: &mut Trace, ev: &Obj<'_>) -> Result<Option<u32>> {
        let pid = ev.get("pid").and_then(Value::as_u64);
        let tid = ev.get("tid").and_then(Value::as_u64);
        Ok(match (pid, tid) {
            (Some(pid), Some(tid)) => Some(self.foreign_lane(trace, pid, tid, None)),
            _ => None,
        })
    }

    /// Counters of processes that are no device are skipped.
    fn counter_device(&mut self, _: &Trace, _: &Obj<'_>, pid: u64) -> Result<Option<u32>> {
        Ok(self.device_pids.get(&pid).copied())
    }

    fn counter(
        &mut self,
        trace: &mut Trace,
        _: &Obj<'_>,
        device: u32,
        name: &str,
    ) -> Result<usize> {
        let key = (device, name.to_owned());
        if let Some(&index) = self.counters.get(&key) {
            return Ok(index);
        }
        trace.counters.push(Counter {
            device,
            name: name.to_owned(),
            points: Vec::new(),
        });
        self.counters.insert(key, trace.counters.len() - 1);
        Ok(trace.counters.len() - 1)
    }
}

/// Splits a foreign process name into (device string, name) when it names
/// a device: `cuda:0 NVIDIA H100` or Kineto's `GPU 0`.
fn device_name(name: &str) -> Option<(String, String)> {
    let (first, rest) = name.split_once(' ').unwrap_or((name, ""));
    if let Some((ty, index)) = first.split_once(':')
        && !ty.is_empty()
        && ty.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
        && !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
    {
        return Some((first.to_owned(), rest.to_owned()));
    }
    if first == "GPU" && !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        return Some((format!("cuda:{rest}"), name.to_owned()));
    }
    None
}
