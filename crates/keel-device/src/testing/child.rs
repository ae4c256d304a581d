//! Running one of a test binary's own tests in a child process: for what
//! a process reads once (`KEEL_ALLOC_CONF`, `KEEL_LAUNCH_BLOCKING`, driver
//! and adapter filters), what must not load at all (a missing Vulkan
//! driver), and what holds a whole device resource for a while.
//!
//! The child is the test binary itself, asked for one test by its full
//! name; that test is `#[ignore]`d, so it runs only when asked. Names are
//! given as `module_path!()` and the function's name, so a test keeps
//! working when its file becomes a module of a bigger test binary.
//!
//! ```no_run
//! use keel_device::testing::child;
//!
//! #[test]
//! #[ignore = "run in a child process by conf_from_the_environment"]
//! fn probe_conf() {
//!     // ... checks that need a fresh process ...
//!     println!("probe ok");
//! }
//!
//! #[test]
//! fn conf_from_the_environment() {
//!     let out = child::probe(module_path!(), "probe_conf", &[("KEEL_ALLOC_CONF", "backend:direct")]);
//!     assert!(out.contains("probe ok"));
//! }
//! ```

use std::process::{Command, Output};

/// The test harness's name of the test function `name` declared in the
/// module `module` (`module_path!()`: the binary's crate name comes first,
/// which the harness leaves out).
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_owned(),
    }
}

/// Runs this test binary with `args` (test filters and harness options)
/// and `env` set, and returns what it did.
///
/// # Panics
///
/// When the binary cannot be found or started (a broken test setup).
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the test binary starts again as a child")
}

/// Runs the ignored test `name` of `module` (`module_path!()`) alone in a
/// child process with `env` set, and returns its standard output.
///
/// # Panics
///
/// When the child fails or the test did not run (a renamed probe), with
/// the child's output: the calling test fails.
pub fn probe(module: &str, name: &str, env: &[(&str, &str)]) -> String {
    let full = test_name(module, name);
    let out = run(&[&full, "--exact", "--ignored", "--nocapture"], env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the probe {full} failed or did not run ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[cfg(test)]
mod tests {
    use super::test_name;

    #[test]
    fn a_test_name_drops_the_crate_and_keeps_the_modules() {
        assert_eq!(test_name("backends::vulkan", "probe"), "vulkan::probe");
        assert_eq!(test_name("allocator", "probe"), "probe");
        assert_eq!(test_name("ops::npu::inner", "p"), "npu::inner::p");
    }
}
