//! The parser: one event of another tool's file, by its phase, into the
//! trackers (or skipped, with its reason in the report). What an event
//! cannot be read for is decided here; what it means together with other
//! events is the trackers' business.

use super::super::value::Lite;
use super::super::value::short;
use super::Importer;
use super::event::{Key, RawEvent, int_of};
use super::flows::FlowPoint;
use super::slices::{OpenAsync, Unmatched, is_device_category, is_known_category, span_kind};
use crate::model::{FlowKind, InstantEvent, Span, Text};

/// The user arguments of an event, values other than strings as JSON.
fn args_of(ev: &mut RawEvent<'_>) -> Vec<(String, String)> {
    let Some(args) = ev.args.take() else {
        return Vec::new();
    };
    args.0
        .into_iter()
        .map(|(k, v)| (k.into_owned(), v.into_text()))
        .collect()
}

impl Importer {
    /// One event, by its phase.
    pub(super) fn event(&mut self, ev: RawEvent<'_>) {
        let Some(ph) = ev.ph.clone() else {
            self.report.skip("event without \"ph\"".to_owned());
            return;
        };
        let ph = &*ph;
        match ph {
            "X" | "B" => self.slice(ev, ph == "B"),
            "E" => self.end_slice(ev),
            "i" | "I" | "R" | "n" => self.instant(ev),
            "C" => self.counter(ev),
            "M" => self.metadata(ev),
            "s" | "t" | "f" => self.flow(ev),
            "b" | "e" => self.async_event(ev),
            other => {
                let what = match other {
                    "S" | "T" | "p" | "F" => "deprecated async events",
                    "P" => "samples",
                    "N" | "O" | "D" => "object events",
                    "c" => "clock sync",
                    "V" | "v" => "memory dumps",
                    "(" | ")" => "context events",
                    _ => "",
                };
                self.report.skip(if what.is_empty() {
                    format!("unknown phase \"{}\"", short(other))
                } else {
                    format!("phase \"{other}\" ({what}) not shown")
                });
            }
        }
    }

    /// `X` and `B`.
    fn slice(&mut self, mut ev: RawEvent<'_>, begin: bool) {
        let ph = if begin { "B" } else { "X" };
        let Some((pid, tid)) = ev.pid_tid() else {
            self.report.skip(format!("{ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts() else {
            self.report.skip(format!("{ph} event without a numeric ts"));
            return;
        };
        let dur = if begin {
            0
        } else {
            match ev.dur.as_ref().map(super::event::ns_of) {
                None => 0,
                Some(Some(d)) if d >= 0 => d,
                Some(_) => {
                    self.report
                        .skip("X event with a negative or non-numeric dur".to_owned());
                    return;
                }
            }
        };
        let cat = ev.cat();
        if cat == "cpu_op" || cat == "cuda_runtime" || cat == "kernel" {
            self.report.kineto = true;
        }
        if is_device_category(cat) {
            let device = ev.arg("device").and_then(Lite::as_i64);
            self.lanes.device_events(&pid, device);
        }
        let lane = self.lanes.lane(pid, tid);
        self.clock.see(ts);
        if ts.checked_add(dur).is_none() {
            self.report
                .skip("X event ending past the largest time".to_owned());
            return;
        }
        // Flows v2: the slice itself is an end.
        if let Some(bind) = ev.bind_id.as_ref().and_then(Key::of) {
            let truthy = |v: &Option<Lite<'_>>| matches!(v, Some(Lite::Bool(true)));
            for (on, phase) in [(truthy(&ev.flow_out), 0), (truthy(&ev.flow_in), 2)] {
                if on {
                    self.flows.v2_point(
                        bind.clone(),
                        FlowPoint {
                            phase,
                            lane,
                            ts,
                            next_slice: false,
                        },
                    );
                }
            }
        }
        let kind = span_kind(ev.cat(), ev.name());
        let name = self.slices.name(ev.name());
        let known = is_known_category(ev.cat());
        let mut args: Vec<(Text, Text)> =
            Vec::with_capacity(ev.args.as_ref().map_or(0, |a| a.len()) + usize::from(!known));
        if let Some(fields) = ev.args.take() {
            for (k, v) in fields.0 {
                args.push((self.slices.name(&k), self.slices.value(&v.text())));
            }
        }
        if !known {
            args.push((self.slices.name("cat"), self.slices.value(ev.cat())));
        }
        self.slices.slice(
            Span {
                lane,
                name,
                kind,
                start_ns: ts as u64,
                dur_ns: dur as u64,
                op: 0,
                args,
            },
            begin,
        );
    }

    /// `E`.
    fn end_slice(&mut self, mut ev: RawEvent<'_>) {
        let Some((pid, tid)) = ev.pid_tid() else {
            self.report.skip("E event without a pid".to_owned());
            return;
        };
        let Some(ts) = ev.ts() else {
            self.report.skip("E event without a numeric ts".to_owned());
            return;
        };
        let Some(lane) = self.lanes.find(pid, tid) else {
            self.report.skip("E event without a matching B".to_owned());
            return;
        };
        let name = ev.name.take();
        match self.slices.end(lane, name.as_deref(), ts, args_of(&mut ev)) {
            Ok(()) => self.clock.see(ts),
            Err(Unmatched::NoBegin) => {
                self.report.skip("E event without a matching B".to_owned());
            }
            Err(Unmatched::BeforeBegin) => self.report.skip("E event before its B".to_owned()),
        }
    }

    /// `i`, `I`, `R` and async `n`; PyTorch's allocator events among them
    /// go to the memory tracker.
    fn instant(&mut self, mut ev: RawEvent<'_>) {
        let ph = ev.ph.as_deref().unwrap_or("i").to_owned();
        let Some(pid) = ev.pid().or_else(|| {
            // Global instants may leave the pid out.
            (ev.s.as_deref() == Some("g")).then_some(Key::Num(0))
        }) else {
            self.report.skip(format!("{ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts() else {
            self.report.skip(format!("{ph} event without a numeric ts"));
            return;
        };
        let name = ev.name().to_owned();
        if ph != "n" && self.memory.event(&name, ev.args.as_ref(), ts) {
            self.clock.see(ts);
            return;
        }
        let lane = if ph == "n" {
            let key = ev.id().map(|id| (pid.clone(), ev.cat().to_owned(), id));
            match key.and_then(|key| self.slices.async_lane(&key)) {
                Some(lane) => lane,
                None => self.lanes.async_lane(pid, &name),
            }
        } else {
            self.lanes.lane(pid, ev.tid())
        };
        let mut args = args_of(&mut ev);
        match ev.s.as_deref() {
            Some("g") => args.push(("scope".to_owned(), "global".to_owned())),
            Some("p") => args.push(("scope".to_owned(), "process".to_owned())),
            _ => {}
        }
        if let Some(cat) = ev.cat.as_deref()
            && !is_known_category(cat)
        {
            args.push(("cat".to_owned(), cat.to_owned()));
        }
        self.clock.see(ts);
        self.instants.push(InstantEvent {
            lane,
            name,
            ts_ns: ts as u64,
            args,
        });
    }

    /// `C`: a point per numeric argument.
    fn counter(&mut self, mut ev: RawEvent<'_>) {
        let Some(pid) = ev.pid() else {
            self.report.skip("C event without a pid".to_owned());
            return;
        };
        let Some(ts) = ev.ts() else {
            self.report.skip("C event without a numeric ts".to_owned());
            return;
        };
        let args = ev.args.take();
        let name = ev.name();
        let mut points = 0;
        for (key, value) in args.map(|a| a.0).into_iter().flatten() {
            let Some(v) = int_of(&value) else { continue };
            let series = if key == "value" {
                name.to_owned()
            } else {
                format!("{name}.{key}")
            };
            self.counters.point(&pid, series, ts, v);
            points += 1;
        }
        if points == 0 {
            self.report
                .skip("C event without a numeric argument".to_owned());
            return;
        }
        self.lanes.process(&pid);
        self.clock.see(ts);
    }

    /// `M`: process and thread names and sort orders.
    fn metadata(&mut self, ev: RawEvent<'_>) {
        let Some(pid) = ev.pid() else {
            self.report.skip("M event without a pid".to_owned());
            return;
        };
        let text = |key: &str| ev.arg(key).map(|v| v.clone().into_text());
        let sort = ev.arg("sort_index").and_then(Lite::as_i64);
        let meta = ev.name();
        let used = match meta {
            "process_name" | "process_labels" | "process_sort_index" => {
                let (name, labels) = (text("name"), text("labels"));
                let p = self.lanes.process(&pid);
                match meta {
                    "process_name" if name.is_some() => {
                        p.name = name;
                        true
                    }
                    "process_labels" if labels.is_some() => {
                        p.labels = labels;
                        true
                    }
                    "process_sort_index" if sort.is_some() => {
                        p.sort = sort;
                        true
                    }
                    _ => false,
                }
            }
            "thread_name" | "thread_sort_index" => {
                let name = text("name");
                let t = self.lanes.thread(pid, ev.tid());
                match meta {
                    "thread_name" if name.is_some() => {
                        t.name = name;
                        true
                    }
                    "thread_sort_index" if sort.is_some() => {
                        t.sort = sort;
                        true
                    }
                    _ => false,
                }
            }
            other => {
                self.report
                    .skip(format!("metadata \"{}\" not used", short(other)));
                return;
            }
        };
        if !used {
            self.report
                .skip(format!("{meta} metadata without its value"));
        }
    }

    /// `s`, `t` and `f`.
    fn flow(&mut self, ev: RawEvent<'_>) {
        let ph = ev.ph.as_deref().unwrap_or("s");
        let Some((pid, tid)) = ev.pid_tid() else {
            self.report.skip(format!("flow {ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts() else {
            self.report
                .skip(format!("flow {ph} event without a numeric ts"));
            return;
        };
        let Some(id) = ev.id() else {
            self.report.skip(format!("flow {ph} event without an id"));
            return;
        };
        let (cat, name) = (ev.cat(), ev.name());
        let kind = if cat == "event_wait" || name == "event_wait" || cat == "fwdbwd" {
            FlowKind::EventWait
        } else {
            FlowKind::Launch
        };
        if cat == "ac2g" || cat == "fwdbwd" {
            self.report.kineto = true;
        }
        let lane = self.lanes.lane(pid, tid);
        self.clock.see(ts);
        let phase = match ph {
            "s" => 0,
            "t" => 1,
            _ => 2,
        };
        let point = FlowPoint {
            phase,
            lane,
            ts,
            next_slice: phase != 0 && ev.bp.as_deref() != Some("e"),
        };
        self.flows
            .point(cat.to_owned(), name.to_owned(), id, kind, point);
    }

    /// Async `b` and `e`.
    fn async_event(&mut self, mut ev: RawEvent<'_>) {
        let ph = ev.ph.as_deref().unwrap_or("b").to_owned();
        let Some(pid) = ev.pid() else {
            self.report.skip(format!("async {ph} event without a pid"));
            return;
        };
        let Some(ts) = ev.ts() else {
            self.report
                .skip(format!("async {ph} event without a numeric ts"));
            return;
        };
        let Some(id) = ev.id() else {
            self.report.skip(format!("async {ph} event without an id"));
            return;
        };
        let cat = ev.cat().to_owned();
        let name = ev.name().to_owned();
        let key = (pid.clone(), cat.clone(), id);
        if ph == "b" {
            let lane = match self.slices.async_lane(&key) {
                Some(outer) => outer,
                None => self.lanes.async_lane(pid, &name),
            };
            self.clock.see(ts);
            let args = args_of(&mut ev);
            self.slices.async_begin(
                key,
                OpenAsync {
                    lane,
                    name,
                    ts,
                    cat,
                    args,
                },
            );
            return;
        }
        match self.slices.async_end(key, &name, ts, args_of(&mut ev)) {
            Ok(()) => self.clock.see(ts),
            Err(_) => self
                .report
                .skip("async e event without a matching b".to_owned()),
        }
    }
}
