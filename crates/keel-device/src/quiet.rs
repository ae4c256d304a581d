//! Keeps one known, harmless line of a system library off stderr while
//! wgpu's instance is created and its adapters listed.
//!
//! wgpu's Vulkan instance enables `VK_KHR_wayland_surface`. Mesa's
//! device-select layer (Mesa 22.3, Debian 12) then asks libwayland for a
//! compositor to pick the default GPU, and libwayland prints `error:
//! XDG_RUNTIME_DIR is invalid or not set in the environment.` when there
//! is no runtime directory, once per instance: on a machine with no
//! display session it reads as a failure but means only that no Wayland
//! session runs, and the layer falls back to its other ways of choosing.
//! While wgpu starts without a runtime directory (once per process),
//! stderr goes through a pipe and every other line, from any thread, is
//! passed on unchanged when it ends.

/// Runs `probe`, dropping libwayland's missing-runtime-directory lines
/// from what it writes to stderr. Where a runtime directory is set (a
/// desktop session) or stderr cannot be redirected, `probe` runs as is.
pub(crate) fn probing<T>(probe: impl FnOnce() -> T) -> T {
    #[cfg(unix)]
    {
        if !runtime_dir_missing() {
            return probe();
        }
        captured(probe)
    }
    #[cfg(not(unix))]
    probe()
}

/// Runs `probe` with stderr captured and filtered (see [`probing`]).
#[cfg(unix)]
fn captured<T>(probe: impl FnOnce() -> T) -> T {
    // Stderr is one per process: a second capture started while one runs
    // would save the first one's pipe as "stderr" and hold it open, so the
    // first one's reader would never end. Captures take turns.
    static STDERR: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = STDERR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let capture = unix::Capture::start();
    let out = probe();
    drop(capture);
    out
}

/// Whether libwayland would find no runtime directory.
#[cfg(unix)]
fn runtime_dir_missing() -> bool {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        None => true,
        Some(dir) => !std::path::Path::new(&dir).is_dir(),
    }
}

/// Whether `line` is libwayland's complaint about the runtime directory
/// (its wording since 1.20, and the older one).
fn is_runtime_dir_noise(line: &str) -> bool {
    let line = line.trim_end();
    line == "error: XDG_RUNTIME_DIR is invalid or not set in the environment."
        || line == "error: XDG_RUNTIME_DIR not set in the environment."
}

/// Everything in `captured` but the runtime-directory lines.
fn without_noise(captured: &[u8]) -> Vec<u8> {
    captured
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| !is_runtime_dir_noise(&String::from_utf8_lossy(line)))
        .flatten()
        .copied()
        .collect()
}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, OwnedFd};
    use std::thread::JoinHandle;

    /// Stderr redirected into a pipe that a thread drains (so a chatty
    /// library never blocks on a full pipe); dropping it restores stderr
    /// and passes the captured lines on, also when the probe panics.
    pub(super) struct Capture {
        saved: OwnedFd,
        reader: Option<JoinHandle<Vec<u8>>>,
    }

    impl Capture {
        /// `None` when stderr cannot be redirected (then nothing changes).
        pub(super) fn start() -> Option<Capture> {
            let saved = rustix::io::dup(std::io::stderr().as_fd()).ok()?;
            let (read, write) = rustix::pipe::pipe().ok()?;
            rustix::stdio::dup2_stderr(&write).ok()?;
            // Stderr now holds the pipe open; the reader sees its end when
            // stderr is restored.
            drop(write);
            let reader = std::thread::spawn(move || {
                let mut captured = Vec::new();
                // A read error ends the capture with what was read.
                let _ = File::from(read).read_to_end(&mut captured);
                captured
            });
            Some(Capture {
                saved,
                reader: Some(reader),
            })
        }
    }

    impl Drop for Capture {
        fn drop(&mut self) {
            if rustix::stdio::dup2_stderr(&self.saved).is_err() {
                // Stderr still points into the pipe, whose reader would
                // never finish: leave it running rather than hang.
                return;
            }
            if let Some(captured) = self.reader.take().and_then(|r| r.join().ok()) {
                let kept = super::without_noise(&captured);
                // Where stderr itself fails there is nowhere to report it.
                let _ = std::io::stderr().write_all(&kept);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes started together on several threads (tests building apps
    /// in parallel) each finish: captures of the one stderr take turns.
    #[cfg(unix)]
    #[test]
    fn captures_on_several_threads_all_finish() {
        let start = std::sync::Arc::new(std::sync::Barrier::new(4));
        let (done, finished) = std::sync::mpsc::channel();
        for k in 0..4 {
            let (start, done) = (start.clone(), done.clone());
            std::thread::spawn(move || {
                start.wait();
                let out = captured(|| {
                    eprintln!("error: XDG_RUNTIME_DIR not set in the environment.");
                    k * 10
                });
                let _ = done.send(out);
            });
        }
        let mut got: Vec<i32> = (0..4)
            .map(|_| {
                finished
                    .recv_timeout(std::time::Duration::from_secs(60))
                    .expect("every capture ends")
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, [0, 10, 20, 30]);
    }

    #[test]
    fn only_the_runtime_directory_lines_are_dropped() {
        let captured = b"warning: one\nerror: XDG_RUNTIME_DIR is invalid or not set in the environment.\nerror: XDG_RUNTIME_DIR not set in the environment.\nerror: XDG_RUNTIME_DIR is set but a real failure\nlast line without newline";
        assert_eq!(
            String::from_utf8(without_noise(captured)).expect("utf-8"),
            "warning: one\nerror: XDG_RUNTIME_DIR is set but a real failure\nlast line without newline"
        );
    }
}
