//! The counters tracker: `C` events, one series per process and numeric
//! argument (`name` for `value`, else `name.key`). A series hangs on its
//! process's device: a GPU's, or for a host process a device entry `host`
//! named after the process, made at the end.

use std::collections::HashMap;

use super::Clock;
use super::event::Key;
use super::lanes::{Devices, Lanes};
use crate::model::{Counter, TraceDevice};

#[derive(Debug, Default)]
pub(super) struct Counters {
    /// (pid, series name) -> index in `list`.
    series: HashMap<(Key, String), usize>,
    /// Each series' pid (its device until the end).
    pids: Vec<Key>,
    list: Vec<Counter>,
}

impl Counters {
    /// A point (`ts`, `value`) of the series `name` of process `pid`.
    pub(super) fn point(&mut self, pid: &Key, name: String, ts: i64, value: i64) {
        let index = match self.series.get(&(pid.clone(), name.clone())) {
            Some(&i) => i,
            None => {
                self.list.push(Counter {
                    device: 0,
                    name: name.clone(),
                    points: Vec::new(),
                });
                self.pids.push(pid.clone());
                let i = self.list.len() - 1;
                self.series.insert((pid.clone(), name), i);
                i
            }
        };
        if let Some(c) = self.list.get_mut(index) {
            c.points.push((ts as u64, value));
        }
    }

    /// The counters, on their devices (host processes' added to
    /// `devices`), in time from the trace's start.
    pub(super) fn close(self, devices: &mut Devices, lanes: &Lanes, clock: &Clock) -> Vec<Counter> {
        let mut host_devices: HashMap<&Key, u32> = HashMap::new();
        let mut list = self.list;
        for (counter, pid) in list.iter_mut().zip(&self.pids) {
            counter.device = match devices.of_pid(pid) {
                Some(d) => d,
                None => *host_devices.entry(pid).or_insert_with(|| {
                    devices.push(TraceDevice {
                        device: "host".to_owned(),
                        name: lanes.process_label(pid),
                        properties: Vec::new(),
                    })
                }),
            };
            for p in &mut counter.points {
                p.0 = clock.rebase(p.0);
            }
            counter.points.sort_by_key(|p| p.0);
        }
        list
    }
}
