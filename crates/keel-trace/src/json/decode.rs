//! Keel's own files, one value at a time: parsing with the byte offset of
//! any problem, field access with JSON paths in the errors ([`Obj`]),
//! exact microseconds, user arguments, and the walk over `traceEvents`
//! ([`Walk`]) that builds the trace from the tables `keel.rs` read first.
//! Everything here is strict: a Keel file is what Keel wrote, so anything
//! else in it is an error naming where.

use std::collections::{HashMap, hash_map::Entry};
use std::fmt;

use super::kind_for_category;
use super::stream::Sink;
use super::value::{Fields, Lite, json_error, short};
use crate::error::{Error, Result};
use crate::model::{
    Flow, FlowEnd, FlowKind, InstantEvent, Interner, LaneKind, MemoryAction, MemoryEvent, Span,
    SpanKind, Text, Trace,
};

pub(super) fn err(message: String) -> Error {
    Error::Format(message)
}

/// `bytes` (a value starting at byte offset `at` of the input) as text.
pub(super) fn utf8(bytes: &[u8], at: u64) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| {
        err(format!(
            "expected a UTF-8 JSON trace, found invalid UTF-8 at byte offset {}",
            at + e.valid_up_to() as u64
        ))
    })
}

/// The error for invalid JSON at `path`, in `bytes` starting at byte
/// offset `at`.
pub(super) fn invalid(path: Path<'_>, e: &serde_json::Error, bytes: &[u8], at: u64) -> Error {
    let (message, offset) = json_error(e, bytes, at);
    err(format!(
        "{path}: expected valid JSON, found invalid JSON ({message}) at byte offset {offset}"
    ))
}

/// Parses one value at `path` (its `bytes` start at byte offset `at`).
pub(super) fn parse<'a>(path: Path<'_>, bytes: &'a [u8], at: u64) -> Result<Lite<'a>> {
    serde_json::from_str(utf8(bytes, at)?).map_err(|e| invalid(path, &e, bytes, at))
}

/// Parses the object at `path` (an element of `traceEvents`), or `None`
/// when the value is not an object (with what it is).
pub(super) fn parse_object<'a>(
    path: Path<'_>,
    bytes: &'a [u8],
    at: u64,
) -> Result<std::result::Result<Fields<'a>, &'static str>> {
    if bytes.first() != Some(&b'{') {
        return Ok(Err(parse(path, bytes, at)?.type_name()));
    }
    let fields: Fields<'a> =
        serde_json::from_str(utf8(bytes, at)?).map_err(|e| invalid(path, &e, bytes, at))?;
    Ok(Ok(fields.dedup()))
}

/// Where a value is, for errors: built only when one is reported.
#[derive(Debug, Clone, Copy)]
pub(super) enum Path<'p> {
    /// `traceEvents[i]`.
    Event(usize),
    /// `traceEvents[i].args`.
    Args(usize),
    /// Anything else, spelled out (`keel.devices[0]`).
    Text(&'p str),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Event(i) => write!(f, "traceEvents[{i}]"),
            Path::Args(i) => write!(f, "traceEvents[{i}].args"),
            Path::Text(t) => f.write_str(t),
        }
    }
}

/// An object's fields with JSON paths in the errors.
pub(super) struct Obj<'a, 'p> {
    fields: Fields<'a>,
    /// Where the object is (`traceEvents[3]`), for errors.
    pub path: Path<'p>,
}

impl<'a, 'p> Obj<'a, 'p> {
    /// `value`, which must be an object.
    pub(super) fn new(value: &Lite<'a>, path: Path<'p>) -> Result<Self> {
        match value.fields() {
            Some(fields) => Ok(Obj::of(fields.dedup(), path)),
            None => Err(err(format!(
                "{path}: expected an object, found {}",
                value.type_name()
            ))),
        }
    }

    /// An object already parsed (and deduplicated).
    pub(super) fn of(fields: Fields<'a>, path: Path<'p>) -> Self {
        Obj { fields, path }
    }

    pub(super) fn get(&self, key: &str) -> Option<&Lite<'a>> {
        self.fields.get(key)
    }

    pub(super) fn fields(&self) -> &Fields<'a> {
        &self.fields
    }

    pub(super) fn req(&self, key: &str) -> Result<&Lite<'a>> {
        self.get(key).ok_or_else(|| {
            err(format!(
                "{}: expected a field \"{key}\", found none",
                self.path
            ))
        })
    }

    pub(super) fn str(&self, key: &str) -> Result<&str> {
        match self.req(key)? {
            Lite::Str(s) => Ok(s),
            other => Err(err(format!(
                "{}.{key}: expected a string, found {}",
                self.path,
                other.type_name()
            ))),
        }
    }

    pub(super) fn u64(&self, key: &str) -> Result<u64> {
        let v = self.req(key)?;
        v.as_u64().ok_or_else(|| {
            err(format!(
                "{}.{key}: expected an unsigned integer, found {}",
                self.path,
                v.describe()
            ))
        })
    }

    pub(super) fn u32(&self, key: &str) -> Result<u32> {
        let v = self.u64(key)?;
        u32::try_from(v).map_err(|_| {
            err(format!(
                "{}.{key}: expected an integer below 2^32, found {v}",
                self.path
            ))
        })
    }

    pub(super) fn i64(&self, key: &str) -> Result<i64> {
        let v = self.req(key)?;
        v.as_i64().ok_or_else(|| {
            err(format!(
                "{}.{key}: expected an integer, found {}",
                self.path,
                v.describe()
            ))
        })
    }

    pub(super) fn array(&self, key: &str) -> Result<Vec<Lite<'a>>> {
        let v = self.req(key)?;
        v.elements().ok_or_else(|| {
            err(format!(
                "{}.{key}: expected an array, found {}",
                self.path,
                v.type_name()
            ))
        })
    }

    /// Microseconds (a JSON number with at most three decimals) as exact
    /// ns.
    pub(super) fn micros(&self, key: &str) -> Result<u64> {
        let v = self.req(key)?;
        let Lite::Num(n) = v else {
            return Err(err(format!(
                "{}.{key}: expected a number of microseconds, found {}",
                self.path,
                v.type_name()
            )));
        };
        parse_micros(n).ok_or_else(|| {
            err(format!(
                "{}.{key}: expected a non-negative number of microseconds with at most 3 decimals below 2^64 ns, found {}",
                self.path,
                short(n)
            ))
        })
    }
}

/// Parses a decimal number of microseconds with at most three decimals
/// into ns, without floating point.
fn parse_micros(text: &str) -> Option<u64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(int) && (frac.is_empty() || digits(frac)) && frac.len() <= 3) {
        return None;
    }
    let mut ns: u64 = int.parse::<u64>().ok()?.checked_mul(1000)?;
    let mut scale = 100;
    for b in frac.bytes() {
        ns = ns.checked_add(u64::from(b - b'0') * scale)?;
        scale /= 10;
    }
    Some(ns)
}

/// The user arguments of an event in a Keel file: keel's own are skipped,
/// `keel_arg_` names restored. Keel writes every user argument as a string;
/// other values are the fields Keel adds for PyTorch's tools (`device`,
/// `stream`, `correlation`, `grid`, `block`: see `write.rs`) and are
/// skipped.
fn user_args<'f>(args: Option<&'f Obj<'_, '_>>) -> impl Iterator<Item = (&'f str, &'f str)> {
    args.into_iter().flat_map(|args| {
        args.fields().0.iter().filter_map(|(k, v)| {
            let key = match k.strip_prefix("keel_arg_") {
                Some(rest) => rest,
                None if k.starts_with("keel_") => return None,
                None => k,
            };
            Some((key, v.as_str()?))
        })
    })
}

/// How events find their lanes and counters: what the tables of a Keel
/// file say (see `keel.rs`).
#[derive(Debug, Default)]
pub(super) struct Tables {
    /// (pid, tid) -> lane index
    pub lanes: HashMap<(u64, u64), u32>,
    /// device -> counter name -> counter index
    pub counters: HashMap<u32, HashMap<String, usize>>,
}

impl Tables {
    fn lane(&self, ev: &Obj<'_, '_>) -> Result<u32> {
        let (pid, tid) = (ev.u64("pid")?, ev.u64("tid")?);
        match self.lanes.get(&(pid, tid)) {
            Some(&lane) => Ok(lane),
            None => Err(err(format!(
                "{}: expected the pid/tid of a lane declared by a thread_name event, found unknown lane pid {pid} tid {tid}",
                ev.path
            ))),
        }
    }

    fn counter_device(trace: &Trace, ev: &Obj<'_, '_>, pid: u64) -> Result<u32> {
        pid.checked_sub(1)
            .and_then(|d| u32::try_from(d).ok())
            .filter(|&d| (d as usize) < trace.devices.len())
            .ok_or_else(|| {
                err(format!(
                    "{}.pid: expected the pid of a device (1 to {}), found {pid}",
                    ev.path,
                    trace.devices.len()
                ))
            })
    }

    fn counter(&self, ev: &Obj<'_, '_>, device: u32, name: &str) -> Result<usize> {
        match self.counters.get(&device).and_then(|c| c.get(name)) {
            Some(&index) => Ok(index),
            None => Err(err(format!(
                "{}: expected a counter listed in keel.counters, found \"{}\" of device {device}",
                ev.path,
                short(name)
            ))),
        }
    }
}

/// The second pass over a Keel file: every event into the trace, whose
/// tables are known.
pub(super) struct Walk {
    tables: Tables,
    trace: Trace,
    /// Elements of `traceEvents` so far.
    events: usize,
    /// Span names and argument names, shared across spans.
    names: Interner,
    /// Argument values, shared where they repeat.
    values: Interner,
    /// Flow id -> index in `pending`.
    ids: HashMap<u64, usize>,
    pending: Vec<PendingFlow>,
}

/// A flow whose `s` event was read.
struct PendingFlow {
    id: u64,
    kind: FlowKind,
    from: FlowEnd,
    to: Option<FlowEnd>,
    /// Index of the `s` event, for errors.
    event: usize,
}

impl Sink for Walk {
    fn event(&mut self, at: u64, bytes: Option<&[u8]>) -> Result<()> {
        let index = self.events;
        self.events += 1;
        let path = Path::Event(index);
        let ev = match parse_object(path, bytes.unwrap_or_default(), at)? {
            Ok(fields) => Obj::of(fields, path),
            Err(found) => {
                return Err(err(format!("{path}: expected an object, found {found}")));
            }
        };
        let ph = match ev.get("ph") {
            Some(Lite::Str(ph)) => ph.clone(),
            Some(other) => {
                return Err(err(format!(
                    "{path}.ph: expected a string, found {}",
                    other.type_name()
                )));
            }
            None => return Err(err(format!("{path}: expected a field \"ph\", found none"))),
        };
        match &*ph {
            "X" | "i" | "I" | "C" => {
                // `args`, when it is an object (the kinds of events say
                // what else it may be).
                let args = match ev.get("args") {
                    Some(v @ Lite::Object(_)) => Some(Obj::new(v, Path::Args(index))?),
                    _ => None,
                };
                let args = args.as_ref();
                match &*ph {
                    "X" => self.span(&ev, args),
                    "C" => self.counter(&ev, args),
                    _ if args.is_some_and(|a| a.get("keel_action").is_some()) => {
                        self.memory(&ev, args)
                    }
                    _ => self.instant(&ev, args),
                }
            }
            "s" | "f" => self.flow_end(&ev, ph == "s", index),
            _ => Ok(()),
        }
    }

    fn truncated_event(&mut self) -> Result<()> {
        Ok(())
    }

    fn wants(&self, _: &str) -> bool {
        false
    }

    fn field(&mut self, _: &str, _: u64, _: Option<&[u8]>) -> Result<()> {
        Ok(())
    }
}

impl Walk {
    /// A walk filling `trace`, whose tables `tables` holds.
    pub(super) fn new(tables: Tables, trace: Trace) -> Walk {
        Walk {
            tables,
            trace,
            events: 0,
            names: Interner::default(),
            values: Interner::new(1 << 16),
            ids: HashMap::new(),
            pending: Vec::new(),
        }
    }

    /// The trace, once every flow found its end.
    pub(super) fn finish(mut self) -> Result<Trace> {
        for flow in self.pending {
            let Some(to) = flow.to else {
                return Err(err(format!(
                    "{}: expected an \"f\" event ending flow id {}, found none",
                    Path::Event(flow.event),
                    flow.id
                )));
            };
            self.trace.flows.push(Flow {
                id: flow.id,
                kind: flow.kind,
                from: flow.from,
                to,
            });
        }
        Ok(self.trace)
    }

    fn is_host(&self, lane: u32) -> bool {
        self.trace
            .lanes
            .get(lane as usize)
            .is_some_and(|l| matches!(l.kind, LaneKind::Host { .. }))
    }

    /// An event's `args`, which must be an object when present (`parsed`
    /// holds it when it is one).
    fn args<'o, 'a, 'p>(
        ev: &Obj<'_, '_>,
        parsed: Option<&'o Obj<'a, 'p>>,
    ) -> Result<Option<&'o Obj<'a, 'p>>> {
        match (ev.get("args"), parsed) {
            (None, _) => Ok(None),
            (Some(_), Some(args)) => Ok(Some(args)),
            (Some(other), None) => Err(err(format!(
                "{}.args: expected an object, found {}",
                ev.path,
                other.type_name()
            ))),
        }
    }

    fn span(&mut self, ev: &Obj<'_, '_>, args: Option<&Obj<'_, '_>>) -> Result<()> {
        // The runtime-call slices Keel adds for PyTorch's tools.
        if args.is_some_and(|a| a.get("keel_extra").is_some()) {
            return Ok(());
        }
        let lane = self.tables.lane(ev)?;
        let host = self.is_host(lane);
        let start_ns = ev.micros("ts")?;
        let dur_ns = ev.micros("dur")?;
        let name = self.names.intern(ev.str("name")?);
        let cat = ev.get("cat").and_then(Lite::as_str).unwrap_or("");
        let args = Self::args(ev, args)?;
        let kind = match args.and_then(|a| a.get("keel_kind")) {
            Some(Lite::Str(k)) => SpanKind::from_name(k).ok_or_else(|| {
                err(format!(
                    "{}.args.keel_kind: expected one of {}, found \"{}\"",
                    ev.path,
                    SpanKind::ALL.map(SpanKind::name).join(", "),
                    short(k)
                ))
            })?,
            Some(other) => {
                return Err(err(format!(
                    "{}.args.keel_kind: expected a string, found {}",
                    ev.path,
                    other.type_name()
                )));
            }
            None => kind_for_category(cat, host).ok_or_else(|| {
                err(format!(
                    "{}: expected \"args.keel_kind\" or a known \"cat\", found cat \"{}\"",
                    ev.path,
                    short(cat)
                ))
            })?,
        };
        let op = match args.and_then(|a| a.get("keel_op")) {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| {
                err(format!(
                    "{}.args.keel_op: expected an unsigned integer, found {}",
                    ev.path,
                    v.describe()
                ))
            })?,
        };
        let args: Vec<(Text, Text)> = user_args(args)
            .map(|(k, v)| (self.names.intern(k), self.values.intern(v)))
            .collect();
        self.trace.spans.push(Span {
            lane,
            name,
            kind,
            start_ns,
            dur_ns,
            op,
            args,
        });
        Ok(())
    }

    fn instant(&mut self, ev: &Obj<'_, '_>, args: Option<&Obj<'_, '_>>) -> Result<()> {
        let lane = self.tables.lane(ev)?;
        let ts_ns = ev.micros("ts")?;
        let name = ev.str("name")?.to_owned();
        let args = user_args(Self::args(ev, args)?)
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        self.trace.instants.push(InstantEvent {
            lane,
            name,
            ts_ns,
            args,
        });
        Ok(())
    }

    /// An allocator event Keel wrote: its `args` carry `keel_action` (a
    /// user argument of that name is written as `keel_arg_keel_action`,
    /// so nothing else has it).
    fn memory(&mut self, ev: &Obj<'_, '_>, args: Option<&Obj<'_, '_>>) -> Result<()> {
        let pid = ev.u64("pid")?;
        let device = Tables::counter_device(&self.trace, ev, pid)?;
        let ts_ns = ev.micros("ts")?;
        let Some(args) = args else {
            return Err(err(format!(
                "{}: expected a field \"args\", found none",
                ev.path
            )));
        };
        let args_path = &args.path;
        let action = args.str("keel_action")?;
        let action = MemoryAction::from_name(action).ok_or_else(|| {
            err(format!(
                "{args_path}.keel_action: expected one of {}, found \"{}\"",
                MemoryAction::ALL.map(MemoryAction::name).join(", "),
                short(action)
            ))
        })?;
        let stream = match args.get("keel_stream") {
            None => None,
            Some(_) => Some(args.i64("keel_stream")?),
        };
        let small_pool = match args.get("keel_small_pool") {
            None => false,
            Some(Lite::Bool(b)) => *b,
            Some(other) => {
                return Err(err(format!(
                    "{args_path}.keel_small_pool: expected a boolean, found {}",
                    other.describe()
                )));
            }
        };
        self.trace.memory.push(MemoryEvent {
            ts_ns,
            device,
            action,
            addr: args.u64("Addr")?,
            segment: args.u64("keel_segment")?,
            bytes: args.u64("keel_bytes")?,
            stream,
            small_pool,
            allocated: args.u64("Total Allocated")?,
            reserved: args.u64("Total Reserved")?,
        });
        Ok(())
    }

    fn counter(&mut self, ev: &Obj<'_, '_>, args: Option<&Obj<'_, '_>>) -> Result<()> {
        let pid = ev.u64("pid")?;
        let device = Tables::counter_device(&self.trace, ev, pid)?;
        let ts = ev.micros("ts")?;
        let name = ev.str("name")?;
        let args = match (args, ev.req("args")?) {
            (Some(args), _) => args,
            (None, other) => {
                return Err(err(format!(
                    "{}.args: expected an object, found {}",
                    ev.path,
                    other.type_name()
                )));
            }
        };
        let value = args.i64("value")?;
        let index = self.tables.counter(ev, device, name)?;
        if let Some(counter) = self.trace.counters.get_mut(index) {
            counter.points.push((ts, value));
        }
        Ok(())
    }

    fn flow_end(&mut self, ev: &Obj<'_, '_>, start: bool, index: usize) -> Result<()> {
        let id = ev.u64("id")?;
        let lane = self.tables.lane(ev)?;
        let end = FlowEnd {
            lane,
            ts_ns: ev.micros("ts")?,
        };
        let name = ev.get("name").and_then(Lite::as_str).unwrap_or("");
        let cat = ev.get("cat").and_then(Lite::as_str).unwrap_or("");
        let kind = match FlowKind::from_name(name) {
            Some(kind) => kind,
            None if cat == "ac2g" => FlowKind::Launch,
            None => {
                return Err(err(format!(
                    "{}.name: expected a flow kind (\"launch\" or \"event_wait\"), found \"{}\"",
                    ev.path,
                    short(name)
                )));
            }
        };
        if start {
            match self.ids.entry(id) {
                Entry::Occupied(_) => Err(err(format!(
                    "{}: expected one \"s\" event per flow id, found a second one for id {id}",
                    ev.path
                ))),
                Entry::Vacant(slot) => {
                    slot.insert(self.pending.len());
                    self.pending.push(PendingFlow {
                        id,
                        kind,
                        from: end,
                        to: None,
                        event: index,
                    });
                    Ok(())
                }
            }
        } else {
            let Some(flow) = self.ids.get(&id).and_then(|&i| self.pending.get_mut(i)) else {
                return Err(err(format!(
                    "{}: expected an \"s\" event before this \"f\" of flow id {id}, found none",
                    ev.path
                )));
            };
            if flow.to.is_some() {
                return Err(err(format!(
                    "{}: expected one \"f\" event per flow id, found a second one for id {id}",
                    ev.path
                )));
            }
            if flow.kind != kind {
                return Err(err(format!(
                    "{}: expected a \"{}\" flow like its \"s\" event, found \"{}\"",
                    ev.path,
                    flow.kind.name(),
                    kind.name()
                )));
            }
            flow.to = Some(end);
            Ok(())
        }
    }
}
