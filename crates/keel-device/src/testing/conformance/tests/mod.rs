//! The suite's tests, one function each, run on one device `d` under the
//! instance's [`Config`]. Each asserts (panics) where the backend does not
//! conform; [`run`](super::run) applies the instance's expectations.
//!
//! The tests are grouped by topic, one file each (devices, guards,
//! streams, events, copies, kernels, profiler, allocator), and share the
//! helpers here. The list the macro instantiates is in
//! [`conformance_suite!`](crate::conformance_suite); a new test is a `pub
//! fn` in the file of its topic, re-exported here, plus its name there (in
//! `exclusive:` if it starts a profiler session or leaves errors on streams
//! on purpose).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Config, KernelSource};
use crate::core::StreamKind;
use crate::kernels::{SAXPY, SPIN, VECTOR_ADD, spin_reference};
use crate::profiler::{ALLOCATED_COUNTER, FlowKind, LaneKind, MemoryAction, SpanKind, Trace};
use crate::testing::{GATED_FILL, Gate, PANICS, SLEEP, pattern};
use crate::{Buffer, Device, DeviceGuard, DeviceType, Error, Event, Kernel, Stream, StreamGuard};

fn pool(d: Device) -> Stream {
    crate::get_stream_from_pool(d, false).expect("pool stream")
}

/// Launches [`SPIN`] on `s` over the first `n` elements of `out`, `iters`
/// steps each.
fn launch_spin(s: &Stream, out: &Buffer, n: u32, iters: u32) {
    s.launch(
        &SPIN,
        SPIN.grid_for(u64::from(n)),
        &[out],
        &spin_params(n, iters),
    )
    .expect("spin");
}

fn spin_params(n: u32, iters: u32) -> Vec<u8> {
    [n.to_le_bytes(), iters.to_le_bytes()].concat()
}

/// The least time one slow [`SPIN`] launch must take on the device under
/// test: long enough that the submissions a test makes after it (an
/// event, a wait, a launch, a read with its staging memory), on a host
/// busy with every other test, all come before it ends.
const SLOW_SPIN_AT_LEAST: Duration = Duration::from_millis(200);

/// `(n, iters)` of a slow [`SPIN`] on `d`: the instance's
/// [`slow_spin`](Config::slow_spin), with its iterations scaled up until
/// one launch takes at least [`SLOW_SPIN_AT_LEAST`] on this device.
///
/// A fixed count is a guess at one device's speed (lavapipe runs
/// Vulkan's `(4096, 200_000)` in 150-240 ms); a fast GPU runs it in far
/// less, and a check that work queued behind the spin is still waiting
/// ("the consumer still waits") then fails whenever the host's next few
/// submissions come after the spin has ended (as on an H200:
/// docs/BENCHMARKS.md, 2026-11-26). The count is measured once per device
/// and configuration (a warm-up launch loads the kernel, then one launch
/// of the configured size is timed from the host, which can only
/// overstate it) and never scaled down.
fn slow_spin(d: Device, cfg: &Config) -> (u32, u32) {
    /// Per device and configured `(n, iters)`: the iterations to use.
    type Sized = HashMap<(Device, (u32, u32)), u32>;
    static MEASURED: Mutex<Option<Sized>> = Mutex::new(None);
    let (n, iters) = cfg.slow_spin;
    if gated(cfg) {
        // Busy work is gated there, and timed tests sleep: no spin to size.
        return (n, iters);
    }
    // Held while measuring: one thread measures, the others wait for it.
    let mut measured = MEASURED.lock().unwrap_or_else(PoisonError::into_inner);
    let known = measured.get_or_insert_with(HashMap::new);
    if let Some(&scaled) = known.get(&(d, cfg.slow_spin)) {
        return (n, scaled);
    }
    let s = pool(d);
    let out = Buffer::new(d, 4 * n as usize).expect("spin out");
    let spin = |iters: u32| {
        launch_spin(&s, &out, n, iters);
        s.synchronize().expect("spin sync");
    };
    spin(1);
    let t0 = Instant::now();
    spin(iters);
    let took = t0.elapsed().max(Duration::from_micros(1));
    let factor = SLOW_SPIN_AT_LEAST.as_secs_f64() / took.as_secs_f64();
    // `as` saturates: u32::MAX iterations at most.
    let scaled = (f64::from(iters) * factor.max(1.0)) as u32;
    println!("{d}: a spin of {iters} iterations took {took:?}; using {scaled}");
    known.insert((d, cfg.slow_spin), scaled);
    (n, scaled)
}

fn saxpy_params(n: u32, alpha: f32) -> Vec<u8> {
    [n.to_le_bytes(), alpha.to_le_bytes()].concat()
}

fn saxpy(s: &Stream, x: &Buffer, y: &Buffer, n: u32, alpha: f32) {
    s.launch(
        &SAXPY,
        SAXPY.grid_for(u64::from(n)),
        &[x, y],
        &saxpy_params(n, alpha),
    )
    .expect("saxpy");
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1.0)
}

/// Every device present, other than `d`: the other devices of its type and
/// the first device that opens of every other available type.
fn other_devices(d: Device) -> Vec<Device> {
    let ty = d.device_type();
    let mut v: Vec<Device> = super::usable_devices(ty)
        .into_iter()
        .filter(|&o| o != d)
        .collect();
    for other in DeviceType::ALL {
        if other != ty && crate::is_available(other) {
            // The first that opens (opening the rest would be wasted).
            v.extend(
                crate::devices(other)
                    .into_iter()
                    .find(|&o| crate::properties(o).is_ok()),
            );
        }
    }
    v
}

/// Whether [`Busy`] work is held by a [`Gate`] on this backend (host
/// kernels on asynchronous streams) rather than by a slow [`SPIN`].
fn gated(cfg: &Config) -> bool {
    cfg.kernel_source == KernelSource::Host && !cfg.blocking_submit
}

/// What a [`Busy`] gated fill writes.
const GATE_VALUE: f32 = 3.0;

/// Work that keeps a stream busy until released, writing `out` (`4 * n`
/// bytes, `n = cfg.slow_spin.0`). On host backends with asynchronous
/// streams it is a [`GATED_FILL`] held by a [`Gate`], so "not yet
/// complete" is certain; elsewhere it is the slow [`SPIN`], released by
/// time.
struct Busy {
    gate: Option<Gate>,
    iters: u32,
}

impl Busy {
    fn launch(s: &Stream, cfg: &Config, out: &Buffer, iters: u32) -> Busy {
        let n = cfg.slow_spin.0;
        if gated(cfg) {
            let gate = Gate::new();
            s.launch(&GATED_FILL, [1, 1, 1], &[out], &gate.params(GATE_VALUE))
                .expect("gated fill");
            Busy {
                gate: Some(gate),
                iters,
            }
        } else {
            launch_spin(s, out, n, iters);
            Busy { gate: None, iters }
        }
    }

    /// The value the work leaves in `out[i]`.
    fn value(&self, i: u32) -> f32 {
        match self.gate {
            Some(_) => GATE_VALUE,
            None => spin_reference(i, self.iters),
        }
    }

    /// Lets the work finish (a spin finishes by itself).
    fn release(&self) {
        if let Some(g) = &self.gate {
            g.open();
        }
    }
}

mod allocator;
mod copies;
mod devices;
mod events;
mod guards;
mod kernels;
mod profiler;
mod streams;
mod wgsl;

pub use allocator::{
    direct_mode_goes_to_the_backend, freed_blocks_wait_for_recorded_streams,
    garbage_collection_releases_before_growing, memory_statistics_follow_buffers,
    out_of_memory_retries_then_reports, suballocated_buffers_bind_together,
};
pub use copies::{
    copies_round_trip, copies_within_one_buffer, transfers_in_flight_keep_their_data,
};
pub use devices::{
    bad_requests_are_clear_errors, moves_between_devices, properties_describe_the_device,
};
pub use events::{elapsed_time_matches_host_time, event_misuse_is_a_clear_error};
pub use guards::guards_switch_device_and_stream;
pub use kernels::{kernel_errors_are_clear, vector_add_is_correct};
pub use profiler::{profiler_places_device_spans_within_host_time, profiler_records_this_backend};
pub use streams::{
    in_order_within_a_stream, producer_consumer_across_streams, queries_alone_see_completion,
    query_before_and_after_completion, stream_pool_round_robin, synchronize_waits_for_everything,
};
pub use wgsl::wgsl_feature_corpus_runs;
