//! [`Trace::merge`]: joining trace fragments (what a live server sends, or
//! what a session assembles in several steps) into one trace, and
//! [`Trace::tables_only`].

use std::collections::HashMap;

use super::{LaneKind, Trace};
use crate::error::{Error, Result};

/// The error of a fragment that names a device or lane it does not have.
fn malformed(message: String) -> Error {
    Error::Merge(message)
}

impl Trace {
    /// Merges `fragment` into `self`: devices and lanes are matched by
    /// identity (device string; lane kind and device), events are appended
    /// with their indices remapped, counters of one device and name are
    /// joined, memory events stay in time order, the first calibration of a device is kept and drop counts
    /// add up; `self.version` stays. A fragment that names a device or lane
    /// outside its own tables is an error (what was merged before it
    /// stays).
    pub fn merge(&mut self, fragment: Trace) -> Result<()> {
        let mut device_map = Vec::with_capacity(fragment.devices.len());
        for d in fragment.devices {
            let i = match self.devices.iter().position(|x| x.device == d.device) {
                Some(i) => i,
                None => {
                    self.devices.push(d);
                    self.devices.len() - 1
                }
            };
            device_map.push(i as u32);
        }
        let dev = |i: u32| {
            device_map
                .get(i as usize)
                .copied()
                .ok_or_else(|| malformed(format!("fragment: device index {i} out of range")))
        };
        let mut lane_map = Vec::with_capacity(fragment.lanes.len());
        let mut existing: HashMap<LaneKind, usize> = self
            .lanes
            .iter()
            .enumerate()
            .map(|(i, l)| (l.kind.clone(), i))
            .collect();
        for mut l in fragment.lanes {
            if let LaneKind::Stream { device, .. } = &mut l.kind {
                *device = dev(*device)?;
            }
            let i = *existing.entry(l.kind.clone()).or_insert_with(|| {
                self.lanes.push(l);
                self.lanes.len() - 1
            });
            lane_map.push(i as u32);
        }
        let lane = |i: u32| {
            lane_map
                .get(i as usize)
                .copied()
                .ok_or_else(|| malformed(format!("fragment: lane index {i} out of range")))
        };
        for mut s in fragment.spans {
            s.lane = lane(s.lane)?;
            self.spans.push(s);
        }
        for mut i in fragment.instants {
            i.lane = lane(i.lane)?;
            self.instants.push(i);
        }
        for mut f in fragment.flows {
            f.from.lane = lane(f.from.lane)?;
            f.to.lane = lane(f.to.lane)?;
            self.flows.push(f);
        }
        for mut c in fragment.counters {
            c.device = dev(c.device)?;
            match self
                .counters
                .iter_mut()
                .find(|x| x.device == c.device && x.name == c.name)
            {
                Some(x) => x.points.extend(c.points),
                None => self.counters.push(c),
            }
        }
        let in_order = match (self.memory.last(), fragment.memory.first()) {
            (Some(last), Some(first)) => last.ts_ns <= first.ts_ns,
            _ => true,
        };
        self.memory.reserve(fragment.memory.len());
        for mut m in fragment.memory {
            m.device = dev(m.device)?;
            self.memory.push(m);
        }
        if !in_order {
            self.memory.sort_by_key(|m| m.ts_ns);
        }
        for mut c in fragment.calibrations {
            c.device = dev(c.device)?;
            if !self.calibrations.iter().any(|x| x.device == c.device) {
                self.calibrations.push(c);
            }
        }
        self.dropped += fragment.dropped;
        Ok(())
    }

    /// The device and lane tables of this trace, with no events.
    pub fn tables_only(&self) -> Trace {
        Trace {
            version: self.version,
            devices: self.devices.clone(),
            lanes: self.lanes.clone(),
            ..Trace::default()
        }
    }

    /// Makes this trace one program's among several shown on one clock (a
    /// live session's sources): devices are named `label · device` (what
    /// the viewer's device labels show as the program's), host lanes are
    /// grouped under `label`, host thread numbers and flow ids are made
    /// `key`'s (two programs' thread 1 stay two lanes), and every time
    /// moves by `offset_ns` (the program's time 0 on the shared clock),
    /// clamped to the clock's range.
    pub fn label_source(&mut self, label: &str, key: u16, offset_ns: i64) {
        let tag = u64::from(key) << 48;
        let at = |t: u64| t.saturating_add_signed(offset_ns);
        for d in &mut self.devices {
            d.device = format!("{label} \u{b7} {}", d.device);
        }
        for l in &mut self.lanes {
            if let LaneKind::Host { thread } = &mut l.kind {
                *thread ^= tag;
                l.group = if l.group.is_empty() {
                    label.to_owned()
                } else {
                    format!("{label} \u{b7} {}", l.group)
                };
            }
        }
        if offset_ns != 0 {
            for s in &mut self.spans {
                s.start_ns = at(s.start_ns);
            }
            for i in &mut self.instants {
                i.ts_ns = at(i.ts_ns);
            }
            for c in &mut self.counters {
                for p in &mut c.points {
                    p.0 = at(p.0);
                }
            }
            for m in &mut self.memory {
                m.ts_ns = at(m.ts_ns);
            }
        }
        for f in &mut self.flows {
            f.id ^= tag;
            f.from.ts_ns = at(f.from.ts_ns);
            f.to.ts_ns = at(f.to.ts_ns);
        }
    }
}
