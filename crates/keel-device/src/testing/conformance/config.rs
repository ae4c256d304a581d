//! A suite instance's configuration: the kernel source its backend runs,
//! its timing knobs, and its expectations (tests that fail, may fail, or
//! cannot run there, each with the reason).

/// The kernel source a backend runs (see [`Kernel`](crate::Kernel)). It
/// decides what the suite expects of kernel errors: WGSL and PTX are
/// compiled when launched, so a broken source is a synchronous launch
/// error; host kernels are plain functions, so their failures (an `Err`, a
/// panic, a binding too short) surface asynchronously, once, from the
/// stream's next `synchronize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelSource {
    /// WGSL (Vulkan through naga, wgpu).
    Wgsl,
    /// PTX (CUDA).
    Ptx,
    /// The kernel's host function (the CPU and host-thread backends).
    Host,
}

impl KernelSource {
    /// How a backend names the sources a kernel lacks in its error
    /// ("has no WGSL source, which the Vulkan backend runs"): CUDA runs a
    /// PTX override or the PTX generated from WGSL, host backends a Rust
    /// override or the WGSL.
    pub fn missing(self) -> &'static str {
        match self {
            KernelSource::Wgsl => "no WGSL source",
            KernelSource::Ptx => "neither PTX nor WGSL",
            KernelSource::Host => "neither WGSL nor a host implementation",
        }
    }
}

/// What happens to one suite test on one backend, where it does not
/// simply pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The test runs and must fail; if it passes, the instance fails with
    /// "unexpectedly passed" so that the expectation is removed.
    Fails,
    /// The test runs and may fail (a race not yet fixed); a failure is
    /// printed and tolerated, a pass is printed too. Prefer [`Fails`]
    /// (which notices the fix) wherever the failure is deterministic.
    ///
    /// [`Fails`]: Outcome::Fails
    Flaky,
    /// The test does not run (it would hang or crash the process).
    Skip,
}

/// One expectation: `test` (a suite test's name, checked) has `outcome`
/// on this backend, because of `reason` (printed when it applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// The suite test's name, as in [`tests`](super::tests).
    pub test: &'static str,
    /// What happens instead of a pass.
    pub outcome: Outcome,
    /// Why (a bug to fix, a documented limitation).
    pub reason: &'static str,
}

impl Expect {
    /// `test` fails on this backend, because `reason`.
    pub const fn fails(test: &'static str, reason: &'static str) -> Expect {
        Expect {
            test,
            outcome: Outcome::Fails,
            reason,
        }
    }

    /// `test` may fail on this backend, because `reason`.
    pub const fn flaky(test: &'static str, reason: &'static str) -> Expect {
        Expect {
            test,
            outcome: Outcome::Flaky,
            reason,
        }
    }

    /// `test` cannot run on this backend, because `reason`.
    pub const fn skip(test: &'static str, reason: &'static str) -> Expect {
        Expect {
            test,
            outcome: Outcome::Skip,
            reason,
        }
    }
}

/// Per-backend knobs and expectations of one suite instance. Start from
/// [`Config::default`] (a host-kernel backend, nothing expected to fail)
/// and set what differs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The kernel source this backend runs.
    pub kernel_source: KernelSource,
    /// `(n, iters)` for a [`SPIN`](crate::kernels::SPIN) launch that takes
    /// tens of milliseconds or more on this backend (long enough to observe
    /// "not yet complete"). The suite measures it once per device and
    /// scales `iters` up until a launch takes at least 200 ms, so a device
    /// faster than the one it was chosen on still holds the work back
    /// long enough. Host backends with asynchronous streams are
    /// held by a [`Gate`](crate::testing::Gate) instead, and use it only
    /// for its `n`.
    pub slow_spin: (u32, u32),
    /// The backend runs work before a submission returns (wgpu on GL), so
    /// "still running" can never be observed. Queries may still answer
    /// "not yet" until the backend notices the completion; the suite
    /// checks that they notice without any thread synchronizing.
    pub blocking_submit: bool,
    /// A submission may not return until the work submitted before it on
    /// the device has run (lavapipe's `vkQueueSubmit` under wgpu, which
    /// chains submissions). Work enqueued behind a slow kernel by a later
    /// submission may then already be complete when the test looks, or
    /// not: the suite asserts only what holds either way (a query that
    /// says "running" is consistent with everything else, and every result
    /// is right).
    pub submit_waits_for_previous: bool,
    /// Runs after every test that ran (for example: no validation errors).
    pub after: fn(),
    /// Tests that fail, may fail, or cannot run on this backend, each with
    /// the reason (checked against the suite's test names).
    pub expect: Vec<Expect>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kernel_source: KernelSource::Host,
            slow_spin: (64, 400_000),
            blocking_submit: false,
            submit_waits_for_previous: false,
            after: || {},
            expect: Vec::new(),
        }
    }
}

impl Config {
    /// The expectation for `test`, if any.
    pub fn expectation(&self, test: &str) -> Option<&Expect> {
        self.expect.iter().find(|e| e.test == test)
    }
}
