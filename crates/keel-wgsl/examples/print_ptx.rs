//! Prints the PTX keel-wgsl generates for a WGSL compute entry point, as
//! the CUDA backend would load it (for reading, Nsight or `ptxas`).
//!
//! Run: `cargo run -p keel-wgsl --example print_ptx -- FILE.wgsl ENTRY`

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, entry] = &args[..] else {
        eprintln!("usage: print_ptx FILE.wgsl ENTRY");
        return ExitCode::from(2);
    };
    let source = match std::fs::read_to_string(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ptx = keel_wgsl::compile(&source, entry)
        .map_err(|e| format!("{file}:{e}"))
        .and_then(|p| keel_wgsl::ptx::emit(&p).map_err(|e| e.to_string()));
    match ptx {
        Ok(ptx) => {
            print!("{ptx}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
