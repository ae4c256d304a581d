//! Test kernels for host-thread backends: a gate that holds a stream until
//! the test opens it (so "not yet complete" is observable without timing
//! races), and a sleep for timing tests.
#![allow(dead_code)]

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use keel::Kernel;
use keel::kernel::{CpuInvocation, as_f32s_mut};

struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

static GATES: [Gate; 32] = [const {
    Gate {
        open: Mutex::new(false),
        cv: Condvar::new(),
    }
}; 32];

/// Opens gate `id`, releasing every kernel waiting on it.
pub fn open(id: u32) {
    let g = &GATES[id as usize];
    *g.open.lock().expect("gate") = true;
    g.cv.notify_all();
}

fn gated_fill(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let id = inv.param_u32(0)? as usize;
    let value = inv.param_f32(4)?;
    let g = GATES.get(id).ok_or_else(|| format!("no gate {id}"))?;
    let mut open = g.open.lock().map_err(|e| e.to_string())?;
    while !*open {
        open = g.cv.wait(open).map_err(|e| e.to_string())?;
    }
    drop(open);
    for b in inv.buffers.iter_mut() {
        as_f32s_mut(0, b)?.fill(value);
    }
    Ok(())
}

/// Waits for gate `params.u32[0]`, then fills its one buffer with
/// `params.f32[1]`.
pub const GATED_FILL: Kernel = Kernel {
    name: "gated_fill",
    workgroup_size: [1, 1, 1],
    bindings: 1,
    wgsl: None,
    ptx: None,
    cpu: Some(gated_fill),
};

/// Parameters for [`GATED_FILL`].
pub fn gate_params(gate: u32, value: f32) -> Vec<u8> {
    [gate.to_le_bytes(), value.to_le_bytes()].concat()
}

fn sleep(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    std::thread::sleep(Duration::from_millis(u64::from(inv.param_u32(0)?)));
    Ok(())
}

/// Sleeps `params.u32[0]` milliseconds.
pub const SLEEP: Kernel = Kernel {
    name: "sleep",
    workgroup_size: [1, 1, 1],
    bindings: 0,
    wgsl: None,
    ptx: None,
    cpu: Some(sleep),
};

fn panics(_inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    panic!("kernel bug");
}

/// Panics: a bug in a user's kernel.
pub const PANICS: Kernel = Kernel {
    name: "panics",
    workgroup_size: [1, 1, 1],
    bindings: 0,
    wgsl: None,
    ptx: None,
    cpu: Some(panics),
};

/// Deterministic test bytes.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}
