//! The reader of Keel's own JSON files (those with the `keel` object):
//! strict, an exact round trip of what [`write_json`](super::write_json)
//! wrote. The device, counter and calibration tables come from the `keel`
//! object, the lanes from `thread_name` metadata; an event that names
//! anything else is an error.

use std::collections::HashMap;

use serde_json::Value;

use super::decode::{Obj, Tables, describe, err, event_path, walk};
use super::lane_pid;
use crate::error::Result;
use crate::model::{
    Calibration, Counter, ImportReport, Lane, LaneKind, TRACE_VERSION, Trace, TraceDevice,
};

/// Reads a Keel file: `events` are its `traceEvents`, `keel` its `keel`
/// object.
pub(super) fn keel(events: &[Value], keel: &Value) -> Result<Trace> {
    let (tables, trace) = KeelTables::new(events, keel)?;
    walk(tables, trace, events)
}

/// The lanes and counters a Keel file declares.
struct KeelTables {
    /// (pid, tid) -> lane index
    lanes: HashMap<(u64, u64), u32>,
    /// (device, name) -> counter index
    counters: HashMap<(u32, String), usize>,
}

impl KeelTables {
    /// The tables of a Keel file, and its trace with them filled in.
    fn new(events: &[Value], keel: &Value) -> Result<(KeelTables, Trace)> {
        let k = Obj::new(keel, "keel")?;
        let version = k.u32("version")?;
        if version > TRACE_VERSION {
            return Err(err(format!(
                "keel.version: expected a trace version up to {TRACE_VERSION}, found {version} (written by a newer Keel)"
            )));
        }
        let mut trace = Trace {
            version,
            dropped: k.u64("dropped")?,
            ..Trace::default()
        };
        for (i, d) in k.array("devices")?.iter().enumerate() {
            let path = format!("keel.devices[{i}]");
            let d = Obj::new(d, &path)?;
            let mut properties = Vec::new();
            for (j, p) in d.array("properties")?.iter().enumerate() {
                match p.as_array().map(Vec::as_slice) {
                    Some([Value::String(k), Value::String(v)]) => {
                        properties.push((k.clone(), v.clone()));
                    }
                    _ => {
                        return Err(err(format!(
                            "{path}.properties[{j}]: expected a [name, value] pair of strings, found {}",
                            describe(p)
                        )));
                    }
                }
            }
            trace.devices.push(TraceDevice {
                device: d.str("device")?.to_owned(),
                name: d.str("name")?.to_owned(),
                properties,
            });
        }
        let devices = trace.devices.len();
        let device_index = |path: &str, device: u32| -> Result<u32> {
            if (device as usize) < devices {
                Ok(device)
            } else {
                Err(err(format!(
                    "{path}.device: expected a device index below {devices}, found {device}"
                )))
            }
        };
        let mut counters = HashMap::new();
        if k.get("counters").is_some() {
            for (i, c) in k.array("counters")?.iter().enumerate() {
                let path = format!("keel.counters[{i}]");
                let c = Obj::new(c, &path)?;
                let device = device_index(&path, c.u32("device")?)?;
                let name = c.str("name")?.to_owned();
                counters
                    .entry((device, name.clone()))
                    .or_insert(trace.counters.len());
                trace.counters.push(Counter {
                    device,
                    name,
                    points: Vec::new(),
                });
            }
        }
        for (i, c) in k.array("calibrations")?.iter().enumerate() {
            let path = format!("keel.calibrations[{i}]");
            let c = Obj::new(c, &path)?;
            trace.calibrations.push(Calibration {
                device: device_index(&path, c.u32("device")?)?,
                method: c.str("method")?.to_owned(),
                error_bound_ns: c.u64("error_bound_ns")?,
            });
        }

        if k.get("import").is_some() {
            let i = Obj::new(k.req("import")?, "keel.import")?;
            let mut skipped = Vec::new();
            for (j, p) in i.array("skipped")?.iter().enumerate() {
                match p.as_array().map(Vec::as_slice) {
                    Some([Value::String(reason), n]) if n.as_u64().is_some() => {
                        skipped.push((reason.clone(), n.as_u64().unwrap_or(0)));
                    }
                    _ => {
                        return Err(err(format!(
                            "keel.import.skipped[{j}]: expected a [reason, count] pair, found {}",
                            describe(p)
                        )));
                    }
                }
            }
            trace.import = Some(ImportReport {
                format: i.str("format")?.to_owned(),
                events: i.u64("events")?,
                imported: i.u64("imported")?,
                skipped,
            });
        }

        // Lanes: every thread_name event with "keel_lane" args.
        let mut slots: Vec<Option<Lane>> = Vec::new();
        let mut lanes = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let path = event_path(i);
            let ev = Obj::new(e, &path)?;
            if ev.get("ph").and_then(Value::as_str) != Some("M")
                || ev.get("name").and_then(Value::as_str) != Some("thread_name")
            {
                continue;
            }
            let args_path = format!("{path}.args");
            let args = Obj::new(ev.req("args")?, &args_path)?;
            if args.get("keel_lane").is_none() {
                continue;
            }
            let (pid, tid) = (ev.u64("pid")?, ev.u64("tid")?);
            let kind = match args.str("keel_lane")? {
                "stream" => LaneKind::Stream {
                    device: device_index(&args_path, args.u32("device")?)?,
                    stream: args.i64("stream")?,
                    thread: match args.get("thread") {
                        None => 0,
                        Some(_) => args.u64("thread")?,
                    },
                },
                "host" => LaneKind::Host {
                    thread: args.u64("thread")?,
                },
                other => {
                    return Err(err(format!(
                        "{args_path}.keel_lane: expected \"stream\" or \"host\", found \"{}\"",
                        super::decode::short(other)
                    )));
                }
            };
            let group = match args.get("keel_group") {
                None => String::new(),
                Some(_) => args.str("keel_group")?.to_owned(),
            };
            let lane = Lane {
                kind,
                name: args.str("name")?.to_owned(),
                group,
            };
            let want_pid = lane_pid(&lane);
            if pid != want_pid {
                return Err(err(format!(
                    "{path}.pid: expected {want_pid} for a lane of kind {:?}, found {pid}",
                    lane.kind
                )));
            }
            // tid = lane index + 1; one thread_name per lane, so a tid past
            // the number of events cannot be right (and bounds the slots).
            let index = tid
                .checked_sub(1)
                .filter(|&t| t < events.len() as u64 && t < u64::from(u32::MAX))
                .ok_or_else(|| {
                    err(format!(
                        "{path}.tid: expected a lane number between 1 and {}, found {tid}",
                        events.len()
                    ))
                })? as usize;
            if slots.len() <= index {
                slots.resize(index + 1, None);
            }
            if slots[index].is_some() {
                return Err(err(format!(
                    "{path}: expected one thread_name per lane, found a second one for tid {tid}"
                )));
            }
            slots[index] = Some(lane);
            lanes.insert((pid, tid), index as u32);
        }
        for (i, slot) in slots.into_iter().enumerate() {
            trace.lanes.push(slot.ok_or_else(|| {
                err(format!(
                    "expected a thread_name event for every lane, found none for lane {i} (tid {})",
                    i + 1
                ))
            })?);
        }
        Ok((KeelTables { lanes, counters }, trace))
    }
}

impl Tables for KeelTables {
    const STRICT: bool = true;

    fn lane(&mut self, _: &mut Trace, ev: &Obj<'_>) -> Result<Option<u32>> {
        let (pid, tid) = (ev.u64("pid")?, ev.u64("tid")?);
        match self.lanes.get(&(pid, tid)) {
            Some(&lane) => Ok(Some(lane)),
            None => Err(err(format!(
                "{}: expected the pid/tid of a lane declared by a thread_name event, found unknown lane pid {pid} tid {tid}",
                ev.path
            ))),
        }
    }

    fn counter_device(&mut self, trace: &Trace, ev: &Obj<'_>, pid: u64) -> Result<Option<u32>> {
        pid.checked_sub(1)
            .and_then(|d| u32::try_from(d).ok())
            .filter(|&d| (d as usize) < trace.devices.len())
            .map(Some)
            .ok_or_else(|| {
                err(format!(
                    "{}.pid: expected the pid of a device (1 to {}), found {pid}",
                    ev.path,
                    trace.devices.len()
                ))
            })
    }

    fn counter(&mut self, _: &mut Trace, ev: &Obj<'_>, device: u32, name: &str) -> Result<usize> {
        match self.counters.get(&(device, name.to_owned())) {
            Some(&index) => Ok(index),
            None => Err(err(format!(
                "{}: expected a counter listed in keel.counters, found \"{}\" of device {device}",
                ev.path,
                super::decode::short(name)
            ))),
        }
    }
}
