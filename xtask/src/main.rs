//! `cargo xtask <task>`: the project's scripted jobs.
//!
//! - `cargo xtask test`: everything CI checks, in order, stopping at the
//!   first failure: rustfmt, clippy with `-D warnings` on every target and
//!   feature, then every test of the workspace (unit, integration, doc,
//!   and examples built).

use std::process::{Command, ExitCode};

fn run(step: &str, program: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: {step}: {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .status()
        .map_err(|e| format!("{step}: could not start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step} failed ({status})"))
    }
}

fn test() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run("rustfmt", &cargo, &["fmt", "--all", "--", "--check"])?;
    run(
        "clippy",
        &cargo,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    run("tests", &cargo, &["test", "--workspace", "--all-features"])?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        other => Err(format!(
            "expected a task (test), found {}",
            other.map_or("nothing".to_owned(), |o| format!("'{o}'"))
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
