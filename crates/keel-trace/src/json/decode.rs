//! What the reader of Keel's own files and the importer of other tools'
//! share: field access with JSON paths in the errors, exact microseconds,
//! user arguments, and the walk over `traceEvents` that both drive with
//! their own [`Tables`] (how events find their lane and counter, and how
//! strict to be).

use std::collections::{HashMap, hash_map::Entry};

use serde_json::{Map, Value};

use super::kind_for_category;
use crate::error::{Error, Result};
use crate::model::{
    Flow, FlowEnd, FlowKind, InstantEvent, LaneKind, MemoryAction, MemoryEvent, Span, SpanKind,
    Trace,
};

pub(super) fn err(message: String) -> Error {
    Error::Format(message)
}

/// At most the first 64 characters of `s`, for quoting a bad value in an
/// error message (with the full length when it was cut).
pub fn short(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        None => s.to_owned(),
        Some((cut, _)) => format!("{}... ({} bytes)", &s[..cut], s.len()),
    }
}

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field access with JSON paths in the errors.
pub(super) struct Obj<'a> {
    map: &'a Map<String, Value>,
    /// Where the object is (`traceEvents[3]`), for errors.
    pub path: &'a str,
}

impl<'a> Obj<'a> {
    pub(super) fn new(value: &'a Value, path: &'a str) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            other => Err(err(format!(
                "{path}: expected an object, found {}",
                type_name(other)
            ))),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    pub(super) fn req(&self, key: &str) -> Result<&'a Value> {
        self.map.get(key).ok_or_else(|| {
            err(format!(
                "{}: expected a field \"{key}\", found none",
                self.path
            ))
        })
    }

    pub(super) fn str(&self, key: &str) -> Result<&'a str> {
        match self.req(key)? {
            Value::String(s) => Ok(s),
            other => Err(err(format!(
                "{}.{key}: expected a string, found {}",
                self.path,
                type_name(other)
            ))),
        }
    }

    pub(super) fn u64(&self, key: &str) -> Result<u64> {
        let v = self.req(key)?;
        v.as_u64().ok_or_else(|| {
            err(format!(
                "{}.{key}: expected an unsigned integer, found {}",
                self.path,
                describe(v)
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
                describe(v)
            ))
        })
    }

    pub(super) fn array(&self, key: &str) -> Result<&'a [Value]> {
        match self.req(key)? {
            Value::Array(a) => Ok(a),
            other => Err(err(format!(
                "{}.{key}: expected an array, found {}",
                self.path,
                type_name(other)
            ))),
        }
    }

    /// Microseconds (a JSON number) as exact ns.
    pub(super) fn micros(&self, key: &str, exact: bool) -> Result<u64> {
        let v = self.req(key)?;
        let Value::Number(n) = v else {
            return Err(err(format!(
                "{}.{key}: expected a number of microseconds, found {}",
                self.path,
                type_name(v)
            )));
        };
        parse_micros(n.as_str(), exact).ok_or_else(|| {
            err(format!(
                "{}.{key}: expected a non-negative number of microseconds{} below 2^64 ns, found {}",
                self.path,
                if exact { " with at most 3 decimals" } else { "" },
                short(n.as_str())
            ))
        })
    }
}

/// A short description of a value for error messages.
pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => short(n.as_str()),
        Value::String(s) => format!("the string \"{}\"", short(s)),
        other => type_name(other).to_owned(),
    }
}

/// Parses a decimal number of microseconds into ns without floating point.
/// With `exact`, more than three decimals (or an exponent) is refused;
/// without, the value is rounded to the nearest ns.
fn parse_micros(text: &str, exact: bool) -> Option<u64> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(int) && (frac.is_empty() || digits(frac)) && (frac.len() <= 3 || !exact) {
        let mut ns: u64 = int.parse::<u64>().ok()?.checked_mul(1000)?;
        let mut scale = 100;
        for b in frac.bytes().take(3) {
            ns = ns.checked_add(u64::from(b - b'0') * scale)?;
            scale /= 10;
        }
        if frac.as_bytes().get(3).is_some_and(|&b| b >= b'5') {
            ns = ns.checked_add(1)?;
        }
        return Some(ns);
    }
    if exact {
        return None;
    }
    // Exponents and the like, from other tools: floating point is fine.
    let us: f64 = text.parse().ok()?;
    let ns = (us * 1000.0).round();
    (ns.is_finite() && (0.0..1.8e19).contains(&ns)).then_some(ns as u64)
}

/// The user arguments of an event in a Keel file: keel's own are skipped,
/// `keel_arg_` names restored. Keel writes every user argument as a string;
/// other values are the fields Keel adds for PyTorch's tools (`device`,
/// `stream`, `correlation`, `grid`, `block`: see `write.rs`) and are
/// skipped.
fn user_args(args: Option<&Map<String, Value>>) -> Vec<(String, String)> {
    let Some(args) = args else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(args.len());
    for (k, v) in args {
        let key = if let Some(rest) = k.strip_prefix("keel_arg_") {
            rest.to_owned()
        } else if k.starts_with("keel_") {
            continue;
        } else {
            k.clone()
        };
        let Value::String(value) = v else {
            continue;
        };
        out.push((key, value.clone()));
    }
    out
}

/// Whether an instant is an allocator event Keel wrote: its `args` carry
/// `keel_action` (a user argument of that name is written as
/// `keel_arg_keel_action`, so nothing else has it).
fn is_memory_event(ev: &Obj<'_>) -> bool {
    matches!(ev.get("args"), Some(Value::Object(args)) if args.contains_key("keel_action"))
}

pub(super) fn event_path(i: usize) -> String {
    format!("traceEvents[{i}]")
}

/// How events find their lanes and counters, and how strict to be: what
/// differs between Keel's own files and other tools'.
pub(super) trait Tables {
    /// Keel's own files are read strictly (every problem is an error, times
    /// have at most three decimals); other tools' leniently (what cannot be
    /// used is skipped).
    const STRICT: bool;

    /// The lane of event `ev`; `None` skips the event.
    fn lane(&mut self, trace: &mut Trace, ev: &Obj<'_>) -> Result<Option<u32>>;

    /// The device of counter event `ev`, whose pid is `pid`; `None` skips
    /// the event.
    fn counter_device(&mut self, trace: &Trace, ev: &Obj<'_>, pid: u64) -> Result<Option<u32>>;

    /// The index in `trace.counters` of the counter `name` of `device`.
    fn counter(
        &mut self,
        trace: &mut Trace,
        ev: &Obj<'_>,
        device: u32,
        name: &str,
    ) -> Result<usize>;
}

/// Reads every event of `events` into `trace`, whose tables `tables` knows.
pub(super) fn walk<T: Tables>(tables: T, trace: Trace, events: &[Value]) -> Result<Trace> {
    Walk { tables, trace }.run(events)
}

struct Walk<T> {
    tables: T,
    trace: Trace,
}

impl<T: Tables> Walk<T> {
    fn is_host(&self, lane: u32) -> bool {
        self.trace
            .lanes
            .get(lane as usize)
            .is_some_and(|l| matches!(l.kind, LaneKind::Host { .. }))
    }

    /// An event's `args` object, if any.
    fn args<'a>(&self, ev: &Obj<'a>) -> Result<Option<&'a Map<String, Value>>> {
        match ev.get("args") {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) if T::STRICT => Err(err(format!(
                "{}.args: expected an object, found {}",
                ev.path,
                type_name(other)
            ))),
            Some(_) => Ok(None),
        }
    }

    fn run(mut self, events: &[Value]) -> Result<Trace> {
        // Flow id -> index in `pending`.
        let mut ids: HashMap<u64, usize> = HashMap::new();
        let mut pending: Vec<PendingFlow> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let path = event_path(i);
            let ev = match Obj::new(e, &path) {
                Ok(ev) => ev,
                Err(e) if T::STRICT => return Err(e),
                Err(_) => continue,
            };
            let ph = match ev.get("ph") {
                Some(Value::String(ph)) => ph.as_str(),
                Some(other) if T::STRICT => {
                    return Err(err(format!(
                        "{path}.ph: expected a string, found {}",
                        type_name(other)
                    )));
                }
                _ if T::STRICT => {
                    return Err(err(format!("{path}: expected a field \"ph\", found none")));
                }
                _ => continue,
            };
            let result = match ph {
                "X" => self.span(&ev),
                "i" | "I" if is_memory_event(&ev) => self.memory(&ev),
                "i" | "I" => self.instant(&ev),
                "C" => self.counter(&ev),
                "s" | "f" => self.flow_end(&ev, ph == "s", i, &mut ids, &mut pending),
                _ => Ok(()),
            };
            match result {
                Ok(()) => {}
                Err(e) if T::STRICT => return Err(e),
                Err(_) => {}
            }
        }
        for flow in pending {
            match flow.to {
                Some(to) => self.trace.flows.push(Flow {
                    id: flow.id,
                    kind: flow.kind,
                    from: flow.from,
                    to,
                }),
                None if T::STRICT => {
                    return Err(err(format!(
                        "{}: expected an \"f\" event ending flow id {}, found none",
                        event_path(flow.event),
                        flow.id
                    )));
                }
                None => {}
            }
        }
        Ok(self.trace)
    }

    fn span(&mut self, ev: &Obj<'_>) -> Result<()> {
        // The runtime-call slices Keel adds for PyTorch's tools.
        if let Some(Value::Object(args)) = ev.get("args")
            && args.contains_key("keel_extra")
        {
            return Ok(());
        }
        let Some(lane) = self.tables.lane(&mut self.trace, ev)? else {
            return Ok(());
        };
        let host = self.is_host(lane);
        let start_ns = ev.micros("ts", T::STRICT)?;
        let dur_ns = ev.micros("dur", T::STRICT)?;
        let name = ev.str("name")?.to_owned();
        let cat = match ev.get("cat") {
            Some(Value::String(c)) => c.as_str(),
            _ => "",
        };
        let args = self.args(ev)?;
        let kind = match args.and_then(|a| a.get("keel_kind")) {
            Some(Value::String(k)) => SpanKind::from_name(k).ok_or_else(|| {
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
                    type_name(other)
                )));
            }
            None => match kind_for_category(cat, host) {
                Some(kind) => kind,
                None if T::STRICT => {
                    return Err(err(format!(
                        "{}: expected \"args.keel_kind\" or a known \"cat\", found cat \"{}\"",
                        ev.path,
                        short(cat)
                    )));
                }
                None if host => SpanKind::Annotation,
                None => SpanKind::Kernel,
            },
        };
        let op = match args.and_then(|a| a.get("keel_op")) {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| {
                err(format!(
                    "{}.args.keel_op: expected an unsigned integer, found {}",
                    ev.path,
                    describe(v)
                ))
            })?,
        };
        self.trace.spans.push(Span {
            lane,
            name: name.into(),
            kind,
            start_ns,
            dur_ns,
            op,
            args: user_args(args)
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        });
        Ok(())
    }

    fn instant(&mut self, ev: &Obj<'_>) -> Result<()> {
        let Some(lane) = self.tables.lane(&mut self.trace, ev)? else {
            return Ok(());
        };
        let ts_ns = ev.micros("ts", T::STRICT)?;
        let name = ev.str("name")?.to_owned();
        let args = user_args(self.args(ev)?);
        self.trace.instants.push(InstantEvent {
            lane,
            name,
            ts_ns,
            args,
        });
        Ok(())
    }

    /// An allocator event (see [`is_memory_event`]).
    fn memory(&mut self, ev: &Obj<'_>) -> Result<()> {
        let pid = ev.u64("pid")?;
        let Some(device) = self.tables.counter_device(&self.trace, ev, pid)? else {
            return Ok(());
        };
        let ts_ns = ev.micros("ts", T::STRICT)?;
        let args_path = format!("{}.args", ev.path);
        let args = Obj::new(ev.req("args")?, &args_path)?;
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
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(err(format!(
                    "{args_path}.keel_small_pool: expected a boolean, found {}",
                    describe(other)
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

    fn counter(&mut self, ev: &Obj<'_>) -> Result<()> {
        let pid = ev.u64("pid")?;
        let Some(device) = self.tables.counter_device(&self.trace, ev, pid)? else {
            return Ok(());
        };
        let ts = ev.micros("ts", T::STRICT)?;
        let name = ev.str("name")?;
        let args_path = format!("{}.args", ev.path);
        let args = Obj::new(ev.req("args")?, &args_path)?;
        let value = args.i64("value")?;
        let index = self.tables.counter(&mut self.trace, ev, device, name)?;
        if let Some(counter) = self.trace.counters.get_mut(index) {
            counter.points.push((ts, value));
        }
        Ok(())
    }

    fn flow_end(
        &mut self,
        ev: &Obj<'_>,
        start: bool,
        index: usize,
        ids: &mut HashMap<u64, usize>,
        pending: &mut Vec<PendingFlow>,
    ) -> Result<()> {
        let id = ev.u64("id")?;
        let Some(lane) = self.tables.lane(&mut self.trace, ev)? else {
            return Ok(());
        };
        let end = FlowEnd {
            lane,
            ts_ns: ev.micros("ts", T::STRICT)?,
        };
        let name = ev.get("name").and_then(Value::as_str).unwrap_or("");
        let cat = ev.get("cat").and_then(Value::as_str).unwrap_or("");
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
            match ids.entry(id) {
                Entry::Occupied(_) => Err(err(format!(
                    "{}: expected one \"s\" event per flow id, found a second one for id {id}",
                    ev.path
                ))),
                Entry::Vacant(slot) => {
                    slot.insert(pending.len());
                    pending.push(PendingFlow {
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
            let Some(flow) = ids.get(&id).and_then(|&i| pending.get_mut(i)) else {
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

/// A flow whose `s` event was read.
struct PendingFlow {
    id: u64,
    kind: FlowKind,
    from: FlowEnd,
    to: Option<FlowEnd>,
    /// Index of the `s` event, for errors.
    event: usize,
}
