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
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("keel-profiler: {e}");
            return ExitCode::from(2);
        }
    };
    if options.help {
        print!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    if options.headless {
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
