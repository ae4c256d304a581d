//! The lanes and processes tracker: every (pid, tid) as met, the
//! processes' and threads' metadata, and at the end which processes are
//! GPUs ([`Devices`]) and the lanes in their order ([`Remap`]).
//!
//! Nothing is decided while events are read: Kineto may write a process's
//! labels after its events.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::event::Key;
use crate::model::{Lane, LaneKind, TraceDevice};

/// A process seen in the file.
#[derive(Debug, Default)]
pub(super) struct Process {
    pub name: Option<String>,
    pub labels: Option<String>,
    pub sort: Option<i64>,
    /// Holds device events (Kineto's GPU categories).
    device_events: bool,
    /// `args.device` of its device events.
    device_arg: Option<i64>,
    /// First appearance.
    order: usize,
}

/// A thread's metadata.
#[derive(Debug, Default)]
pub(super) struct Thread {
    pub name: Option<String>,
    pub sort: Option<i64>,
}

/// A lane before lanes are decided.
#[derive(Debug)]
struct RawLane {
    pid: Key,
    tid: Key,
    /// A lane made for async events of this name.
    async_name: Option<String>,
}

/// Where a lane goes: host or device, process order, thread order, as met.
type LaneOrder = (u8, i64, usize, i64, usize);

#[derive(Debug, Default)]
pub(super) struct Lanes {
    processes: HashMap<Key, Process>,
    threads: HashMap<(Key, Key), Thread>,
    lanes: Vec<RawLane>,
    index: HashMap<(Key, Key), u32>,
    async_lanes: HashMap<(Key, String), u32>,
}

impl Lanes {
    /// Process `pid`, noted in order of first appearance.
    pub(super) fn process(&mut self, pid: &Key) -> &mut Process {
        let order = self.processes.len();
        self.processes
            .entry(pid.clone())
            .or_insert_with(|| Process {
                order,
                ..Process::default()
            })
    }

    /// Thread `tid` of process `pid`, for its metadata.
    pub(super) fn thread(&mut self, pid: Key, tid: Key) -> &mut Thread {
        self.process(&pid);
        self.threads.entry((pid, tid)).or_default()
    }

    /// Notes that process `pid` holds device events (Kineto's GPU
    /// categories), the first of them with `device` as `args.device`.
    pub(super) fn device_events(&mut self, pid: &Key, device: Option<i64>) {
        let p = self.process(pid);
        p.device_events = true;
        if p.device_arg.is_none() {
            p.device_arg = device;
        }
    }

    /// The lane of thread `tid` of process `pid`, made when first met.
    pub(super) fn lane(&mut self, pid: Key, tid: Key) -> u32 {
        if let Some(&lane) = self.index.get(&(pid.clone(), tid.clone())) {
            return lane;
        }
        self.process(&pid);
        let index = self.lanes.len() as u32;
        self.lanes.push(RawLane {
            pid: pid.clone(),
            tid: tid.clone(),
            async_name: None,
        });
        self.index.insert((pid, tid), index);
        index
    }

    /// The lane of thread `tid` of process `pid`, if it was met.
    pub(super) fn find(&self, pid: Key, tid: Key) -> Option<u32> {
        self.index.get(&(pid, tid)).copied()
    }

    /// The lane for async events named `name` in process `pid`.
    pub(super) fn async_lane(&mut self, pid: Key, name: &str) -> u32 {
        if let Some(&lane) = self.async_lanes.get(&(pid.clone(), name.to_owned())) {
            return lane;
        }
        self.process(&pid);
        let index = self.lanes.len() as u32;
        self.lanes.push(RawLane {
            pid: pid.clone(),
            tid: Key::Str(format!("async {name}").into()),
            async_name: Some(name.to_owned()),
        });
        self.async_lanes.insert((pid, name.to_owned()), index);
        index
    }

    /// How process `pid` is named in lane groups and device names:
    /// `python3.10 (pid 42)`.
    pub(super) fn process_label(&self, pid: &Key) -> String {
        label(pid, self.processes.get(pid))
    }

    /// The devices: one per process that is a GPU, described by Kineto's
    /// `deviceProperties` (`properties`).
    pub(super) fn devices(&self, properties: Option<&Value>) -> Devices {
        let mut devices = Devices::default();
        let mut procs: Vec<(&Key, &Process)> = self.processes.iter().collect();
        procs.sort_by_key(|(_, p)| p.order);
        for (pid, p) in procs {
            let from_label = p.labels.as_deref().and_then(gpu_label);
            let from_name = p.name.as_deref().and_then(device_name);
            if from_label.is_none() && from_name.is_none() && !p.device_events {
                continue;
            }
            let index = from_label
                .or_else(|| from_name.as_ref().and_then(|d| d.1))
                .or(p.device_arg)
                .or(match pid {
                    Key::Num(n) if (0..1024).contains(n) => Some(*n),
                    _ => None,
                });
            let (device, name) = match from_name {
                Some((device, _, rest)) => (device, rest),
                None => match index {
                    Some(i) => (format!("cuda:{i}"), format!("GPU {i}")),
                    None => (format!("gpu (pid {pid})"), format!("GPU (pid {pid})")),
                },
            };
            let mut device = TraceDevice {
                device,
                name,
                properties: Vec::new(),
            };
            if let Some(props) = index.and_then(|i| device_properties(properties, i)) {
                if let Some((_, name)) = props.iter().find(|(k, _)| k == "name") {
                    device.name = name.clone();
                }
                device.properties = props;
            }
            let d = devices.push(device);
            devices.of_pid.insert(pid.clone(), d);
            devices.gpus.push(index);
        }
        devices
    }

    /// The lanes, ordered: host processes first (by `process_sort_index`,
    /// then first appearance), then devices; threads by
    /// `thread_sort_index`. A GPU process's threads are its streams.
    pub(super) fn close(self, devices: &Devices) -> (Vec<Lane>, Remap) {
        let mut used_threads = HashSet::new();
        let mut lanes: Vec<(Lane, LaneOrder)> = Vec::with_capacity(self.lanes.len());
        for (i, raw) in self.lanes.iter().enumerate() {
            let process = self.processes.get(&raw.pid);
            let thread = self.threads.get(&(raw.pid.clone(), raw.tid.clone()));
            let p_order = process.map_or(0, |p| p.order);
            let p_sort = process.and_then(|p| p.sort).unwrap_or(p_order as i64);
            let t_sort = thread.and_then(|t| t.sort).unwrap_or(match raw.tid {
                Key::Num(n) => n,
                Key::Str(_) => i64::MAX,
            });
            let name = thread
                .and_then(|t| t.name.as_deref())
                .map(|n| n.trim().to_owned());
            let lane = match (devices.of_pid.get(&raw.pid), raw.async_name.is_none()) {
                (Some(&device), true) => {
                    let stream = match raw.tid {
                        Key::Num(n) => n,
                        Key::Str(_) => i as i64,
                    };
                    Lane {
                        kind: LaneKind::Stream {
                            device,
                            stream,
                            thread: 0,
                        },
                        name: name.unwrap_or_else(|| format!("stream {}", raw.tid)),
                        group: String::new(),
                    }
                }
                _ => {
                    let thread = match raw.tid {
                        Key::Num(n) if n >= 0 && used_threads.insert(n as u64) => n as u64,
                        _ => (1 << 48) + i as u64,
                    };
                    let name = match &raw.async_name {
                        Some(a) => format!("async: {a}"),
                        None => name.unwrap_or_else(|| format!("thread {}", raw.tid)),
                    };
                    Lane {
                        kind: LaneKind::Host { thread },
                        name,
                        group: label(&raw.pid, process),
                    }
                }
            };
            let key = match lane.kind {
                LaneKind::Host { .. } => (0, p_sort, p_order, t_sort, i),
                LaneKind::Stream { device, stream, .. } => (1, i64::from(device), 0, stream, i),
            };
            lanes.push((lane, key));
        }
        let mut order: Vec<usize> = (0..lanes.len()).collect();
        order.sort_by_key(|&i| lanes[i].1);
        let mut new_index = vec![0u32; lanes.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new as u32;
        }
        let mut slots: Vec<Option<Lane>> = lanes.into_iter().map(|(l, _)| Some(l)).collect();
        let lanes = order.iter().filter_map(|&i| slots[i].take()).collect();
        (lanes, Remap(new_index))
    }
}

/// A process's title, as Perfetto titles them: its name and pid; an
/// unnamed one by its pid; one whose pid is a name (Kineto's `Spans` and
/// `Traces`) by that name.
fn label(pid: &Key, p: Option<&Process>) -> String {
    match (p.and_then(|p| p.name.as_deref()), pid) {
        (Some(name), Key::Str(s)) if name == &**s => name.to_owned(),
        (Some(name), _) => format!("{name} (pid {pid})"),
        (None, Key::Num(n)) => format!("process {n}"),
        (None, Key::Str(s)) if s.trim().is_empty() => "process (no pid)".to_owned(),
        (None, Key::Str(s)) => s.to_string(),
    }
}

/// A lane's index as met -> its index in the trace.
#[derive(Debug)]
pub(super) struct Remap(Vec<u32>);

impl Remap {
    pub(super) fn lane(&self, lane: u32) -> u32 {
        self.0.get(lane as usize).copied().unwrap_or(lane)
    }
}

/// The trace's devices as they are decided: the GPU processes' first, then
/// what counters and allocator events add.
#[derive(Debug, Default)]
pub(super) struct Devices {
    pub list: Vec<TraceDevice>,
    /// The device of each GPU process.
    of_pid: HashMap<Key, u32>,
    /// The GPU index of each GPU process's device, in device order.
    gpus: Vec<Option<i64>>,
}

impl Devices {
    /// Adds `device`; returns its index.
    pub(super) fn push(&mut self, device: TraceDevice) -> u32 {
        self.list.push(device);
        (self.list.len() - 1) as u32
    }

    /// The device of process `pid`, if it is a GPU.
    pub(super) fn of_pid(&self, pid: &Key) -> Option<u32> {
        self.of_pid.get(pid).copied()
    }

    /// The device of the GPU process whose GPU index is `index`.
    pub(super) fn gpu(&self, index: i64) -> Option<u32> {
        self.gpus
            .iter()
            .position(|&i| i == Some(index))
            .map(|d| d as u32)
    }
}

/// Kineto's `deviceProperties` entry with `id` `index`, as pairs.
fn device_properties(list: Option<&Value>, index: i64) -> Option<Vec<(String, String)>> {
    let entry = list?
        .as_array()?
        .iter()
        .find(|d| d.get("id").and_then(Value::as_i64) == Some(index))?
        .as_object()?;
    Some(
        entry
            .iter()
            .filter(|(k, _)| k.as_str() != "id")
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
    )
}

/// The GPU index in Kineto's `process_labels` (`GPU 0`, `GPU 1,...`).
fn gpu_label(labels: &str) -> Option<i64> {
    labels.split(',').find_map(|l| {
        let rest = l.trim().strip_prefix("GPU")?.trim();
        rest.parse().ok()
    })
}

/// A process name that names a device: `cuda:0 NVIDIA H100` (device
/// string, its index, the rest) or `GPU 0`.
fn device_name(name: &str) -> Option<(String, Option<i64>, String)> {
    let (first, rest) = name.split_once(' ').unwrap_or((name, ""));
    if let Some((ty, index)) = first.split_once(':')
        && !ty.is_empty()
        && ty.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
        && !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
    {
        return Some((first.to_owned(), index.parse().ok(), rest.to_owned()));
    }
    let index = gpu_label(name).filter(|_| name.trim_start().starts_with("GPU"))?;
    Some((format!("cuda:{index}"), Some(index), name.to_owned()))
}
