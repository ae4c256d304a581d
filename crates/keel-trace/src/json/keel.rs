//! The reader of Keel's own JSON files (those with the `keel` object):
//! strict, an exact round trip of what [`write_json`](super::write_json)
//! wrote, streamed through the same scanner as imports (strict syntax).
//!
//! Events refer to tables the file gives elsewhere: the devices, counters
//! and calibrations of the `keel` object, which comes after the events,
//! and the lanes of `thread_name` metadata, which may come after an event
//! on the lane. So the input is read twice, and neither pass holds more
//! than one event:
//!
//! 1. the tables ([`Tables`]): the `keel` object and the `thread_name`
//!    events with `"keel_lane"` (every other event is only checked to be
//!    UTF-8; top-level fields to be valid JSON);
//! 2. the events ([`Walk`]): each parsed on its own and read into the
//!    trace; an event that names anything the tables lack is an error.
//!
//! A problem is reported in this order: what the first pass meets (invalid
//! UTF-8, broken syntax), the `keel` object's, the lanes' (in file order),
//! then the events' (in file order).

use std::io::Read;

use serde::de::IgnoredAny;

use super::decode::{Obj, Path, Tables, Walk, err, invalid, parse, parse_object, utf8};
use super::lane_pid;
use super::stream::{self, Sink, Syntax};
use super::value::{Lite, short};
use crate::error::Result;
use crate::model::{
    Alignment, Calibration, Counter, ImportReport, Lane, LaneKind, RankFile, Ranks, TRACE_VERSION,
    Trace, TraceDevice,
};

/// Reads a Keel file from the inputs `open` gives (one per pass); `None`
/// when the file has no `keel` object (it is another tool's).
pub(super) fn read<R: Read + Send>(mut open: impl FnMut() -> Result<R>) -> Result<Option<Trace>> {
    let mut first = FirstPass::default();
    stream::scan_ahead(open()?, Syntax::Strict, &mut first)?;
    let Some((at, keel)) = first.keel.take() else {
        return Ok(None);
    };
    let (tables, trace) = first.tables(&keel, at)?;
    let mut walk = Walk::new(tables, trace);
    stream::scan_ahead(open()?, Syntax::Strict, &mut walk)?;
    walk.finish().map(Some)
}

/// Checks that `input` is well-formed JSON to the last event: a file that
/// looks like Keel's is held to JSON's rules even when it turns out to
/// have no `keel` object.
pub(super) fn validate(input: impl Read + Send) -> Result<()> {
    stream::scan_ahead(input, Syntax::Strict, &mut Validate(0)).map(drop)
}

/// The sink of [`validate`]: every value parsed, none kept.
struct Validate(usize);

impl Sink for Validate {
    fn event(&mut self, at: u64, bytes: Option<&[u8]>) -> Result<()> {
        let path = Path::Event(self.0);
        self.0 += 1;
        valid(path, bytes.unwrap_or_default(), at)
    }

    fn truncated_event(&mut self) -> Result<()> {
        Ok(())
    }

    fn wants(&self, _: &str) -> bool {
        true
    }

    fn field(&mut self, key: &str, at: u64, value: Option<&[u8]>) -> Result<()> {
        valid(Path::Text(key), value.unwrap_or_default(), at)
    }
}

/// Checks that `bytes` (starting at byte offset `at`) are one valid JSON
/// value.
fn valid(path: Path<'_>, bytes: &[u8], at: u64) -> Result<()> {
    serde_json::from_str::<IgnoredAny>(utf8(bytes, at)?)
        .map(drop)
        .map_err(|e| invalid(path, &e, bytes, at))
}

/// What the first pass keeps: the `keel` object and, in file order, the
/// events the lane table is made of.
#[derive(Default)]
struct FirstPass {
    /// Elements of `traceEvents`.
    events: usize,
    /// The `keel` object's byte offset and bytes (the last, when the file
    /// repeats it, as a JSON tree would have it).
    keel: Option<(u64, Vec<u8>)>,
    declared: Vec<Declared>,
}

/// An event the lane table is made of.
enum Declared {
    /// A `thread_name` metadata event: its index, byte offset and bytes.
    ThreadName(usize, u64, Vec<u8>),
    /// An element that is not an object (an error, reported in its turn),
    /// and what it is.
    NotObject(usize, &'static str),
}

/// Whether an event's bytes could be a `thread_name` metadata event: they
/// spell `thread_name`, or hold an escape (`\u`) that could spell it.
fn may_declare_a_lane(bytes: &[u8]) -> bool {
    const NAME: &[u8] = b"thread_name";
    // Every spelling has the name's `_` (its seventh byte) or the escape's
    // backslash: only words holding one are looked at byte by byte.
    let at = |i: usize| match bytes[i] {
        b'_' => i >= 6 && bytes[i - 6..].starts_with(NAME),
        b'\\' => bytes.get(i + 1) == Some(&b'u'),
        _ => false,
    };
    let words = bytes.len() / 8;
    for w in 0..words {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[8 * w..8 * w + 8]);
        let word = u64::from_le_bytes(word);
        if (holds(word, b'_') || holds(word, b'\\')) && (8 * w..8 * w + 8).any(at) {
            return true;
        }
    }
    (8 * words..bytes.len()).any(at)
}

/// Whether any byte of `word` is `b` (the bit trick that finds a zero
/// byte, on `word` with `b` cleared).
fn holds(word: u64, b: u8) -> bool {
    const ONES: u64 = u64::MAX / 255;
    let x = word ^ (ONES * u64::from(b));
    x.wrapping_sub(ONES) & !x & (ONES << 7) != 0
}

impl Sink for FirstPass {
    fn event(&mut self, at: u64, bytes: Option<&[u8]>) -> Result<()> {
        let index = self.events;
        self.events += 1;
        let bytes = bytes.unwrap_or_default();
        utf8(bytes, at)?;
        if matches!(self.declared.last(), Some(Declared::NotObject(..))) {
            // The lane table fails there: nothing later matters to it.
            return Ok(());
        }
        // Only an event that spells `thread_name` (or could, with an
        // escape) can be a lane's; the rest wait for the second pass.
        if bytes.first() == Some(&b'{') && !may_declare_a_lane(bytes) {
            return Ok(());
        }
        match parse_object(Path::Event(index), bytes, at)? {
            Ok(fields) => {
                let is =
                    |key: &str, value: &str| fields.get(key).and_then(Lite::as_str) == Some(value);
                if is("ph", "M") && is("name", "thread_name") {
                    self.declared
                        .push(Declared::ThreadName(index, at, bytes.to_vec()));
                }
            }
            Err(found) => self.declared.push(Declared::NotObject(index, found)),
        }
        Ok(())
    }

    fn truncated_event(&mut self) -> Result<()> {
        Ok(())
    }

    fn wants(&self, _: &str) -> bool {
        true
    }

    fn field(&mut self, key: &str, at: u64, value: Option<&[u8]>) -> Result<()> {
        let bytes = value.unwrap_or_default();
        valid(Path::Text(key), bytes, at)?;
        if key == "keel" {
            self.keel = Some((at, bytes.to_vec()));
        }
        Ok(())
    }
}

impl FirstPass {
    /// The tables of the file whose `keel` object is `keel` (at byte
    /// offset `at`), and its trace with them filled in.
    fn tables(&self, keel: &[u8], at: u64) -> Result<(Tables, Trace)> {
        let keel = parse(Path::Text("keel"), keel, at)?;
        let k = Obj::new(&keel, Path::Text("keel"))?;
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
            let d = Obj::new(d, Path::Text(&path))?;
            let mut properties = Vec::new();
            for (j, p) in d.array("properties")?.iter().enumerate() {
                match p.elements().as_deref() {
                    Some([Lite::Str(k), Lite::Str(v)]) => {
                        properties.push((k.to_string(), v.to_string()));
                    }
                    _ => {
                        return Err(err(format!(
                            "{path}.properties[{j}]: expected a [name, value] pair of strings, found {}",
                            p.describe()
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
        let device_index = |path: &dyn std::fmt::Display, device: u32| -> Result<u32> {
            if (device as usize) < devices {
                Ok(device)
            } else {
                Err(err(format!(
                    "{path}.device: expected a device index below {devices}, found {device}"
                )))
            }
        };
        let mut tables = Tables::default();
        if k.get("counters").is_some() {
            for (i, c) in k.array("counters")?.iter().enumerate() {
                let path = format!("keel.counters[{i}]");
                let c = Obj::new(c, Path::Text(&path))?;
                let device = device_index(&path, c.u32("device")?)?;
                let name = c.str("name")?.to_owned();
                tables
                    .counters
                    .entry(device)
                    .or_default()
                    .entry(name.clone())
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
            let c = Obj::new(c, Path::Text(&path))?;
            trace.calibrations.push(Calibration {
                device: device_index(&path, c.u32("device")?)?,
                method: c.str("method")?.to_owned(),
                error_bound_ns: c.u64("error_bound_ns")?,
            });
        }
        if k.get("import").is_some() {
            let i = Obj::new(k.req("import")?, Path::Text("keel.import"))?;
            let mut skipped = Vec::new();
            for (j, p) in i.array("skipped")?.iter().enumerate() {
                match p.elements().as_deref() {
                    Some([Lite::Str(reason), n]) if n.as_u64().is_some() => {
                        skipped.push((reason.to_string(), n.as_u64().unwrap_or(0)));
                    }
                    _ => {
                        return Err(err(format!(
                            "keel.import.skipped[{j}]: expected a [reason, count] pair, found {}",
                            p.describe()
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
        for declared in &self.declared {
            let (index, at, bytes) = match declared {
                Declared::ThreadName(index, at, bytes) => (*index, *at, bytes),
                Declared::NotObject(index, found) => {
                    return Err(err(format!(
                        "{}: expected an object, found {found}",
                        Path::Event(*index)
                    )));
                }
            };
            let path = Path::Event(index);
            let ev = match parse_object(path, bytes, at)? {
                Ok(fields) => Obj::of(fields, path),
                Err(found) => {
                    return Err(err(format!("{path}: expected an object, found {found}")));
                }
            };
            let args_path = Path::Args(index);
            let args = Obj::new(ev.req("args")?, args_path)?;
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
                        short(other)
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
            let events = self.events;
            let index = tid
                .checked_sub(1)
                .filter(|&t| t < events as u64 && t < u64::from(u32::MAX))
                .ok_or_else(|| {
                    err(format!(
                        "{path}.tid: expected a lane number between 1 and {events}, found {tid}"
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
            tables.lanes.insert((pid, tid), index as u32);
        }
        for (i, slot) in slots.into_iter().enumerate() {
            trace.lanes.push(slot.ok_or_else(|| {
                err(format!(
                    "expected a thread_name event for every lane, found none for lane {i} (tid {})",
                    i + 1
                ))
            })?);
        }
        // After the lanes: the files' lane ranges are checked against them.
        if k.get("origin_ns").is_some() {
            trace.origin_ns = opt_i64(&k, "origin_ns")?;
        }
        if k.get("ranks").is_some() {
            trace.ranks = Some(ranks(&k, trace.lanes.len(), trace.devices.len())?);
        }
        Ok((tables, trace))
    }
}

/// `obj.key`: an integer, or `null` for none.
fn opt_i64(obj: &Obj<'_, '_>, key: &str) -> Result<Option<i64>> {
    match obj.req(key)? {
        Lite::Null => Ok(None),
        _ => obj.i64(key).map(Some),
    }
}

/// `keel.ranks`, its files' ranges checked against tables of `lanes` lanes
/// and `devices` devices (each file's after the previous file's).
fn ranks(k: &Obj<'_, '_>, lanes: usize, devices: usize) -> Result<Ranks> {
    let r = Obj::new(k.req("ranks")?, Path::Text("keel.ranks"))?;
    let name = r.str("alignment")?;
    let alignment = Alignment::from_name(name).ok_or_else(|| {
        err(format!(
            "keel.ranks.alignment: expected \"clock\", \"collectives\" or \"start\", found \"{}\"",
            short(name)
        ))
    })?;
    let mut out = Ranks {
        alignment,
        matched: r.u64("matched")?,
        files: Vec::new(),
    };
    let (mut lanes_from, mut devices_from) = (0, 0);
    for (i, f) in r.array("files")?.iter().enumerate() {
        let path = format!("keel.ranks.files[{i}]");
        let f = Obj::new(f, Path::Text(&path))?;
        let range = |key: &str, from: u32, len: usize| -> Result<std::ops::Range<u32>> {
            let v = f.req(key)?;
            match v.elements().as_deref() {
                Some([a, b]) => match (a.as_u64(), b.as_u64()) {
                    (Some(a), Some(b)) if a >= u64::from(from) && a <= b && b <= len as u64 => {
                        Ok(a as u32..b as u32)
                    }
                    _ => Err(err(format!(
                        "{path}.{key}: expected [start, end] from {from} or later to at most {len}, found [{}, {}]",
                        a.describe(),
                        b.describe()
                    ))),
                },
                _ => Err(err(format!(
                    "{path}.{key}: expected a [start, end] pair, found {}",
                    v.describe()
                ))),
            }
        };
        let lanes = range("lanes", lanes_from, lanes)?;
        let devices = range("devices", devices_from, devices)?;
        (lanes_from, devices_from) = (lanes.end, devices.end);
        out.files.push(RankFile {
            label: f.str("label")?.to_owned(),
            rank: opt_i64(&f, "rank")?,
            lanes,
            devices,
            origin_ns: opt_i64(&f, "origin_ns")?,
            offset_ns: f.u64("offset_ns")?,
            skew_ns: opt_i64(&f, "skew_ns")?,
            collectives: f.u64("collectives")?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::may_declare_a_lane;

    #[test]
    fn the_first_pass_parses_only_events_that_could_declare_a_lane() {
        // The name anywhere in the bytes, across the 8-byte words.
        for pad in 0..17 {
            let text = format!("{}\"thread_name\"{}", " ".repeat(pad), " ".repeat(pad % 5));
            assert!(may_declare_a_lane(text.as_bytes()), "{text:?}");
        }
        // Or spelled with an escape.
        assert!(may_declare_a_lane(br#"{"name":"thread\u005fname"}"#));
        assert!(!may_declare_a_lane(
            br#"{"ph":"X","name":"thread name_x","cat":"a_b","args":{"x":"\n"}}"#
        ));
        assert!(!may_declare_a_lane(b"_"));
        assert!(!may_declare_a_lane(b"hread_name"));
    }
}
