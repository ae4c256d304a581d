//! `keel-profiler`: parses arguments and starts the app (everything else
//! lives in the library, see `lib.rs`).

use std::process::ExitCode;

use keel_profiler::window::WindowError;
use keel_profiler::{cli, headless, window};

fn headless(options: &cli::Options) -> ExitCode {
    match headless::run(options) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-profiler: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // Help and version print and exit 0; bad arguments print clap's error
    // and exit 2.
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => e.exit(),
    };
    if options.headless || !options.convert.is_empty() {
        return headless(&options);
    }
    match window::run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(WindowError::NoDisplay(why)) => {
            println!("keel-profiler: no display available ({why}); running headless");
            headless(&options)
        }
        Err(WindowError::Failed(e)) => {
            eprintln!("keel-profiler: {e}");
            ExitCode::FAILURE
        }
    }
}
