//! A real window: runs the `keel-profiler` binary with `--screenshot` on an
//! X server (the test run's `DISPLAY`, or an `Xvfb` it starts itself) and
//! checks the PNG. Without any X server it says why and skips, except
//! under `KEEL_REQUIRE_BACKENDS` (CI), where that is a failure.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Xvfb(Child);

impl Drop for Xvfb {
    /// SIGTERM, so that the server removes its lock file and socket
    /// (`Child::kill` sends SIGKILL, which leaves both behind); SIGKILL
    /// only if that fails.
    fn drop(&mut self) {
        let terminated = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !terminated {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// A display to use: the environment's, or a fresh Xvfb.
fn display() -> Result<(String, Option<Xvfb>), String> {
    if let Some(d) = std::env::var_os("DISPLAY").filter(|d| !d.is_empty()) {
        return Ok((d.to_string_lossy().into_owned(), None));
    }
    let n = 100 + std::process::id() % 400;
    let child = Command::new("Xvfb")
        .args([
            format!(":{n}").as_str(),
            "-screen",
            "0",
            "1600x1000x24",
            "-nolisten",
            "tcp",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!("no DISPLAY and Xvfb could not start ({e}); install the `xvfb` package")
        })?;
    let xvfb = Xvfb(child);
    let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        if Instant::now() > deadline {
            return Err(format!("Xvfb :{n} did not come up in 10 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((format!(":{n}"), Some(xvfb)))
}

#[test]
fn screenshot_of_a_real_window() {
    let required = std::env::var_os("KEEL_REQUIRE_BACKENDS").is_some();
    let (display, _xvfb) = match display() {
        Ok(d) => d,
        Err(why) if !required => {
            eprintln!("skipping the window test: {why}");
            return;
        }
        Err(why) => panic!("window test: {why} (KEEL_REQUIRE_BACKENDS is set)"),
    };
    let out = std::env::temp_dir().join(format!("keel-profiler-shot-{}.png", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let runtime = std::env::temp_dir().join("keel-xdg-runtime");
    let _ = std::fs::create_dir_all(&runtime);
    let output = Command::new(env!("CARGO_BIN_EXE_keel-profiler"))
        .args(["--device", "cpu:0", "--screenshot"])
        .arg(&out)
        .env("DISPLAY", &display)
        .env_remove("WAYLAND_DISPLAY")
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("the binary runs");
    let log = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "keel-profiler failed: {log}");
    let img = image::open(&out)
        .unwrap_or_else(|e| panic!("no PNG at {}: {e}\n{log}", out.display()))
        .to_rgba8();
    assert_eq!(img.dimensions(), (1280, 800), "the window's size");
    let first = img.get_pixel(0, 0);
    assert!(img.pixels().any(|p| p != first), "not a single flat colour");
    let colours: std::collections::HashSet<[u8; 4]> = img.pixels().map(|p| p.0).collect();
    assert!(
        colours.len() > 20,
        "a real picture: {} colours",
        colours.len()
    );
    let _ = std::fs::remove_file(&out);
}
