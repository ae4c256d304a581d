//! What several test files of the app share: running the binary headless.

use std::ffi::OsStr;

/// Runs `keel-profiler --headless ARGS` with no display and returns its
/// standard output, failing the test (with its stderr) if it fails.
pub fn headless<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keel-profiler"))
        .arg("--headless")
        .args(args)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
