//! Host test kernels: they have only a host implementation, so they run on
//! the CPU backend and on host-thread backends (such as the `npu` of
//! `examples/custom_backend`), never on a GPU.
//!
//! - [`GATED_FILL`] holds its stream until the test opens a [`Gate`], so
//!   "not yet complete" is observable without timing races.
//! - [`SLEEP`] keeps its stream busy for a known time (timing tests).
//! - [`PANICS`] panics, as a bug in a user's kernel would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::kernel::{CpuInvocation, Kernel, as_f32s_mut};

#[derive(Debug, Default)]
struct GateState {
    open: Mutex<bool>,
    cv: Condvar,
}

/// Ids handed out so far; an id below this that is no longer in [`GATES`]
/// belongs to a gate that was dropped (and so opened).
static NEXT_ID: AtomicU32 = AtomicU32::new(0);
static GATES: LazyLock<Mutex<HashMap<u32, Arc<GateState>>>> = LazyLock::new(Default::default);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A one-shot gate for [`GATED_FILL`]: kernels launched with its
/// [`params`](Gate::params) wait until it is [opened](Gate::open). Dropping
/// a gate opens it, so a failing test never leaves a stream held. Every
/// gate has its own id, so tests running in parallel never share one.
#[derive(Debug)]
pub struct Gate {
    id: u32,
    state: Arc<GateState>,
}

impl Gate {
    /// A new, closed gate.
    pub fn new() -> Gate {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(GateState::default());
        lock(&GATES).insert(id, Arc::clone(&state));
        Gate { id, state }
    }

    /// The gate's id (the first parameter of [`GATED_FILL`]).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Parameters for [`GATED_FILL`]: wait for this gate, then fill the
    /// bound buffer with `value`.
    pub fn params(&self, value: f32) -> Vec<u8> {
        [self.id.to_le_bytes(), value.to_le_bytes()].concat()
    }

    /// Opens the gate, releasing every kernel waiting on it (and every one
    /// launched later).
    pub fn open(&self) {
        *lock(&self.state.open) = true;
        self.state.cv.notify_all();
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        lock(&GATES).remove(&self.id);
    }
}

fn gated_fill(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let id = inv.param_u32(0)?;
    let value = inv.param_f32(4)?;
    let state = lock(&GATES).get(&id).cloned();
    match state {
        Some(g) => {
            let mut open = lock(&g.open);
            while !*open {
                open = g.cv.wait(open).unwrap_or_else(PoisonError::into_inner);
            }
        }
        // Dropped, and so opened.
        None if id < NEXT_ID.load(Ordering::Relaxed) => {}
        None => return Err(format!("expected the id of a Gate, found {id}")),
    }
    for (i, b) in inv.buffers.iter_mut().enumerate() {
        as_f32s_mut(i, b)?.fill(value);
    }
    Ok(())
}

/// Waits for the [`Gate`] whose id is `params.u32[0]`, then fills its one
/// buffer with `params.f32[1]` ([`Gate::params`] builds both).
pub const GATED_FILL: Kernel = Kernel {
    name: "gated_fill",
    workgroup_size: [1, 1, 1],
    bindings: 1,
    wgsl: None,
    ptx: None,
    cpu: Some(gated_fill),
    strict_float: false,
};

fn sleep(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    std::thread::sleep(Duration::from_millis(u64::from(inv.param_u32(0)?)));
    Ok(())
}

/// Sleeps `params.u32[0]` milliseconds. Binds no buffer.
pub const SLEEP: Kernel = Kernel {
    name: "sleep",
    workgroup_size: [1, 1, 1],
    bindings: 0,
    wgsl: None,
    ptx: None,
    cpu: Some(sleep),
    strict_float: false,
};

fn panics(_inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    panic!("kernel bug");
}

/// Panics with "kernel bug": a bug in a user's kernel, which a host stream
/// must catch and report as its error.
pub const PANICS: Kernel = Kernel {
    name: "panics",
    workgroup_size: [1, 1, 1],
    bindings: 0,
    wgsl: None,
    ptx: None,
    cpu: Some(panics),
    strict_float: false,
};
