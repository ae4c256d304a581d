//! The memory events tracker: PyTorch's allocator events (`[memory]` and
//! `[OutOfMemory]` instants, written with `profile_memory=True`), held
//! until the devices are known, then [`MemoryEvent`]s of their device in
//! time order with its allocated and reserved curves.
//!
//! c10's device type numbers name the device: `cuda:N` is the GPU process
//! of index N, anything else gets a device entry of its own (`cpu`,
//! `cuda:1` when no process is that GPU). PyTorch's traces have no
//! segments: each block is its own segment ([`MemoryEvent::segment`] =
//! `Addr`) and no stream is known.

use std::collections::HashMap;

use super::super::value::Fields;
use super::Clock;
use super::event::int_of;
use super::lanes::Devices;
use crate::model::{
    ALLOCATED_COUNTER, Counter, MemoryAction, MemoryEvent, RESERVED_COUNTER, TraceDevice,
};

/// A PyTorch allocator event, its device not decided yet.
#[derive(Debug)]
struct RawMemory {
    ts: i64,
    /// c10's device type number and the device index.
    device: (i64, i64),
    action: MemoryAction,
    addr: u64,
    bytes: u64,
    allocated: u64,
    reserved: u64,
}

/// A counter's points: (ns, value).
type Curve = Vec<(u64, i64)>;

#[derive(Debug, Default)]
pub(super) struct Memory {
    /// In file order.
    events: Vec<RawMemory>,
}

impl Memory {
    /// Takes the instant `name` at `ts` with `args` if it is an allocator
    /// event: a `[memory]` (block allocated, `Bytes` > 0, or freed, `Bytes`
    /// < 0) or `[OutOfMemory]` instant with numeric `Bytes` (missing
    /// totals and addresses read as 0). False when it is not one.
    pub(super) fn event(&mut self, name: &str, args: Option<&Fields<'_>>, ts: i64) -> bool {
        if name != "[memory]" && name != "[OutOfMemory]" {
            return false;
        }
        let Some(args) = args else {
            return false;
        };
        let int = |key: &str| args.get(key).and_then(int_of);
        let Some(bytes) = int("Bytes") else {
            return false;
        };
        let action = match (name, bytes < 0) {
            ("[OutOfMemory]", _) => MemoryAction::Oom,
            (_, false) => MemoryAction::Alloc,
            (_, true) => MemoryAction::Free,
        };
        let unsigned = |key: &str| int(key).map_or(0, |v| v.max(0) as u64);
        // Older traces have no `Device Type`: a device index is a GPU's, -1
        // the CPU's.
        let index = int("Device Id").unwrap_or(-1);
        let ty = int("Device Type").unwrap_or(if index >= 0 { 1 } else { 0 });
        self.events.push(RawMemory {
            ts,
            device: (ty, index),
            action,
            addr: if action == MemoryAction::Oom {
                0
            } else {
                unsigned("Addr")
            },
            bytes: bytes.unsigned_abs(),
            allocated: unsigned("Total Allocated"),
            reserved: unsigned("Total Reserved"),
        });
        true
    }

    /// The events on their devices (added to `devices` where no GPU
    /// process is theirs), in time order from the trace's start, and each
    /// device's allocated and reserved curves.
    pub(super) fn close(
        self,
        devices: &mut Devices,
        clock: &Clock,
    ) -> (Vec<MemoryEvent>, Vec<Counter>) {
        let mut device_of: HashMap<(i64, i64), u32> = HashMap::new();
        let mut raw = self.events;
        raw.sort_by_key(|m| m.ts);
        let mut events = Vec::with_capacity(raw.len());
        for m in raw {
            let device = *device_of.entry(m.device).or_insert_with(|| {
                let (ty, index) = m.device;
                let gpu = if ty == 1 { devices.gpu(index) } else { None };
                gpu.unwrap_or_else(|| {
                    let (device, name) = device_name(ty, index);
                    devices.push(TraceDevice {
                        device,
                        name,
                        properties: Vec::new(),
                    })
                })
            });
            events.push(MemoryEvent {
                ts_ns: clock.rebase_signed(m.ts),
                device,
                action: m.action,
                addr: m.addr,
                segment: m.addr,
                bytes: m.bytes,
                stream: None,
                small_pool: false,
                allocated: m.allocated,
                reserved: m.reserved,
            });
        }
        let curves = curves(&events);
        (events, curves)
    }
}

/// Each device's allocated and reserved curves: a point where a total
/// changes.
fn curves(events: &[MemoryEvent]) -> Vec<Counter> {
    let mut curves: Vec<(u32, [Curve; 2])> = Vec::new();
    for m in events {
        let i = match curves.iter().position(|c| c.0 == m.device) {
            Some(i) => i,
            None => {
                curves.push((m.device, [Vec::new(), Vec::new()]));
                curves.len() - 1
            }
        };
        let [allocated, reserved] = &mut curves[i].1;
        for (points, v) in [(allocated, m.allocated), (reserved, m.reserved)] {
            let v = i64::try_from(v).unwrap_or(i64::MAX);
            if points.last().is_none_or(|p| p.1 != v) {
                points.push((m.ts_ns, v));
            }
        }
    }
    let mut counters = Vec::with_capacity(2 * curves.len());
    for (device, [allocated, reserved]) in curves {
        for (name, points) in [(ALLOCATED_COUNTER, allocated), (RESERVED_COUNTER, reserved)] {
            counters.push(Counter {
                device,
                name: name.to_owned(),
                points,
            });
        }
    }
    counters
}

/// The device string and name of a device only PyTorch's allocator events
/// name (c10's device type number, index): `cpu`, `cuda:1`, ...
fn device_name(ty: i64, index: i64) -> (String, String) {
    let kind = match ty {
        0 => return ("cpu".to_owned(), "CPU".to_owned()),
        1 => "cuda",
        6 => "hip",
        10 => "vulkan",
        12 => "xpu",
        13 => "mps",
        20 => "privateuseone",
        _ => {
            return (
                format!("device type {ty}:{index}"),
                format!("device type {ty} {index}"),
            );
        }
    };
    let name = if ty == 1 {
        format!("GPU {index}")
    } else {
        format!("{kind} {index}")
    };
    (format!("{kind}:{index}"), name)
}
