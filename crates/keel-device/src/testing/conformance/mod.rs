//! The backend conformance suite: what every Keel backend must do, written
//! once and run against every backend, in-tree or third-party.
//!
//! # Instantiating it
//!
//! A backend's test file instantiates the whole suite in one line: one
//! `#[test]` per suite test, each running on the device the picker returns.
//!
//! ```ignore
//! use keel_device::testing::conformance::{Config, KernelSource, device};
//!
//! keel_device::conformance_suite!(
//!     || device(keel_device::DeviceType::Vulkan),
//!     Config { kernel_source: KernelSource::Wgsl, slow_spin: (4096, 200_000), ..Config::default() }
//! );
//! ```
//!
//! Several instances may share one test binary (in modules of their own):
//! `tests/conformance_wgpu.rs` runs it once per wgpu adapter.
//!
//! # Which device, and when a test skips
//!
//! The picker ([`device`], [`wgpu_adapter`], [`device_where`]) returns the
//! device to test, or `None` with the reason printed, and the test passes
//! without running. Two reasons are told apart:
//!
//! - *filtered out by the user*: an environment filter of the backend hides
//!   the device (`WGPU_BACKEND=vulkan` hides wgpu's GL adapter; see
//!   [`filtered_out`] for every filter understood). Such a test always
//!   skips, printing "filtered out by WGPU_BACKEND=vulkan".
//! - *unavailable*: no driver, no device. The test skips, unless the
//!   device's type is named in `KEEL_REQUIRE_BACKENDS` (a comma list of
//!   device type names, such as `vulkan,wgpu`): then it fails. CI sets it,
//!   so a backend it must test never silently skips.
//!
//! # Per-backend expectations
//!
//! What legitimately differs between backends is declared in the
//! instance's [`Config`], never in per-backend copies of a test: which
//! kernel source the backend runs ([`KernelSource`], which decides what a
//! broken kernel looks like and when its error surfaces), whether
//! submission blocks, and, test by test, where a test is expected to fail
//! or cannot run ([`Expect`], in the manner of wgpu's test expectations:
//! an expected failure that passes is reported, so expectations never go
//! stale). Facts a backend reports about itself (the device's maximum
//! grid, timestamp support) come from its [`properties`](crate::properties)
//! instead.
//!
//! # Concurrency
//!
//! Suite tests run in parallel threads, like any tests, on every instance
//! of the binary at once. A few tests change or observe process-wide state
//! (a profiler session records every thread; deliberately failing kernels
//! leave errors on pool streams that other tests share): those run alone,
//! holding [`EXCLUSIVE`] for writing while every other suite test holds it
//! for reading. Tests outside the suite that start profiler sessions or
//! fail kernels on purpose should not share a binary with an instance.
//!
//! This module never changes Keel's behaviour; it only calls the public
//! API, as a user would.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{PoisonError, RwLock};

use crate::core::Device;

mod config;
mod probes;
mod select;
pub mod tests;

pub use config::{Config, Expect, KernelSource, Outcome};
pub use probes::timed_events_past_the_slots;
pub use select::{
    builtin_devices, device, device_where, filtered_out, required, usable_devices, wgpu_adapter,
};

/// The error bound of `d`'s calibration in `trace`, in ns: how far a
/// device span placed on the host clock may lie outside the host interval
/// that enclosed its work. Panics where the trace has no calibration of
/// `d` (a device that timed nothing).
pub fn calibration_bound(trace: &crate::profiler::Trace, d: crate::Device) -> u64 {
    let name = d.to_string();
    trace
        .calibrations
        .iter()
        .find(|c| {
            trace
                .devices
                .get(c.device as usize)
                .is_some_and(|t| t.device == name)
        })
        .unwrap_or_else(|| panic!("{d} is calibrated in the trace"))
        .error_bound_ns
}

/// Whether a suite test may run beside others (see the [module
/// docs](self#concurrency)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Runs in parallel with other shared tests.
    Shared,
    /// Runs alone: it changes or observes process-wide state.
    Exclusive,
}

/// Held for reading by every running suite test, for writing by the
/// [`Access::Exclusive`] ones; shared by every instance in the process.
pub static EXCLUSIVE: RwLock<()> = RwLock::new(());

/// Runs suite test `name` (body `test`) on the device `pick` returns,
/// under `cfg`'s expectations. Called by the tests
/// [`conformance_suite!`](crate::conformance_suite) generates.
pub fn run(
    name: &str,
    access: Access,
    pick: impl FnOnce() -> Option<Device>,
    cfg: Config,
    test: fn(Device, &Config),
) {
    let Some(d) = pick() else {
        return;
    };
    let expectation = cfg.expectation(name).copied();
    if let Some(Expect {
        outcome: Outcome::Skip,
        reason,
        ..
    }) = expectation
    {
        eprintln!("skipping {name} on {d}: expected not to run: {reason}");
        return;
    }
    // A test that panicked poisons these locks; the next ones still run.
    let _held = match access {
        Access::Shared => (
            Some(EXCLUSIVE.read().unwrap_or_else(PoisonError::into_inner)),
            None,
        ),
        Access::Exclusive => (
            None,
            Some(EXCLUSIVE.write().unwrap_or_else(PoisonError::into_inner)),
        ),
    };
    let Some(Expect {
        outcome, reason, ..
    }) = expectation
    else {
        test(d, &cfg);
        (cfg.after)();
        return;
    };
    let passed = catch_unwind(AssertUnwindSafe(|| test(d, &cfg))).is_ok();
    match (outcome, passed) {
        (Outcome::Fails, true) => panic!(
            "{name} on {d} unexpectedly passed; it was expected to fail ({reason}): \
             remove the expectation from the suite's Config"
        ),
        (Outcome::Fails, false) => eprintln!("{name} on {d} failed, as expected: {reason}"),
        (Outcome::Flaky | Outcome::Skip, true) => {
            eprintln!("{name} on {d} passed (expected to be flaky: {reason})");
            (cfg.after)();
        }
        (Outcome::Flaky | Outcome::Skip, false) => {
            eprintln!("{name} on {d} failed, tolerated as flaky: {reason}")
        }
    }
}

/// Checks that every expectation of `cfg` names one of `tests` (the
/// suite's tests), so that a typo cannot silently disable nothing.
pub fn check_expectations(cfg: &Config, tests: &[&str]) {
    for e in &cfg.expect {
        assert!(
            tests.contains(&e.test),
            "Config::expect names '{}', expected one of the suite's tests: {tests:?}",
            e.test
        );
    }
}

/// Instantiates the conformance suite: one `#[test]` per suite test, each
/// running on the device `pick()` returns (`None`: skip) with the
/// [`Config`] `cfg` (an expression, evaluated once per test).
///
/// ```ignore
/// keel_device::conformance_suite!(
///     || keel_device::testing::conformance::device(keel_device::DeviceType::Cpu),
///     keel_device::testing::conformance::Config::default()
/// );
/// ```
///
/// Needs the `testing` feature of `keel` (in `[dev-dependencies]`).
#[macro_export]
macro_rules! conformance_suite {
    ($pick:expr, $cfg:expr $(,)?) => {
        $crate::__conformance_tests!($pick, $cfg;
            shared:
                properties_describe_the_device,
                in_order_within_a_stream,
                producer_consumer_across_streams,
                query_before_and_after_completion,
                queries_alone_see_completion,
                synchronize_waits_for_everything,
                elapsed_time_matches_host_time,
                event_misuse_is_a_clear_error,
                copies_round_trip,
                transfers_in_flight_keep_their_data,
                copies_within_one_buffer,
                moves_between_devices,
                vector_add_is_correct,
                wgsl_feature_corpus_runs,
                stream_pool_round_robin,
                guards_switch_device_and_stream,
                bad_requests_are_clear_errors;
            exclusive:
                kernel_errors_are_clear,
                profiler_records_this_backend,
                profiler_places_device_spans_within_host_time,
                freed_blocks_wait_for_recorded_streams,
                suballocated_buffers_bind_together,
                memory_statistics_follow_buffers,
                out_of_memory_retries_then_reports,
                direct_mode_goes_to_the_backend,
                garbage_collection_releases_before_growing
        );
    };
}

/// The expansion of [`conformance_suite!`]; not a public interface.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($pick:expr, $cfg:expr; shared: $($shared:ident),*; exclusive: $($exclusive:ident),*) => {
        $(
            #[test]
            fn $shared() {
                $crate::testing::conformance::run(
                    stringify!($shared),
                    $crate::testing::conformance::Access::Shared,
                    $pick,
                    $cfg,
                    $crate::testing::conformance::tests::$shared,
                );
            }
        )*
        $(
            #[test]
            fn $exclusive() {
                $crate::testing::conformance::run(
                    stringify!($exclusive),
                    $crate::testing::conformance::Access::Exclusive,
                    $pick,
                    $cfg,
                    $crate::testing::conformance::tests::$exclusive,
                );
            }
        )*
        #[test]
        fn suite_expectations_name_suite_tests() {
            $crate::testing::conformance::check_expectations(
                &$cfg,
                &[$(stringify!($shared),)* $(stringify!($exclusive)),*],
            );
        }
    };
}

#[cfg(test)]
mod unit {
    use super::*;

    fn cpu() -> Option<Device> {
        Some(Device::cpu())
    }

    fn with(expect: Expect) -> Config {
        Config {
            expect: vec![expect],
            ..Config::default()
        }
    }

    #[test]
    fn expectations_decide_what_a_failure_or_a_pass_means() {
        let fails: fn(Device, &Config) = |_, _| panic!("the backend does not conform");
        let passes: fn(Device, &Config) = |_, _| {};
        run(
            "t",
            Access::Shared,
            cpu,
            with(Expect::fails("t", "r")),
            fails,
        );
        run(
            "t",
            Access::Shared,
            cpu,
            with(Expect::flaky("t", "r")),
            fails,
        );
        run(
            "t",
            Access::Shared,
            cpu,
            with(Expect::flaky("t", "r")),
            passes,
        );
        run(
            "t",
            Access::Exclusive,
            cpu,
            with(Expect::skip("t", "r")),
            fails,
        );
        run("t", Access::Shared, || None, Config::default(), fails);
        let unexpected = catch_unwind(|| {
            run(
                "t",
                Access::Shared,
                cpu,
                with(Expect::fails("t", "r")),
                passes,
            );
        });
        assert!(unexpected.is_err(), "an expected failure that passes fails");
        let plain = catch_unwind(|| run("t", Access::Shared, cpu, Config::default(), fails));
        assert!(plain.is_err(), "no expectation: a failure fails");
    }

    #[test]
    fn expectations_must_name_suite_tests() {
        check_expectations(&with(Expect::fails("a", "r")), &["a", "b"]);
        let typo = catch_unwind(|| check_expectations(&with(Expect::fails("c", "r")), &["a"]));
        assert!(typo.is_err());
    }
}
