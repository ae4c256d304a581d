//! Prints the PTX of one entry point: `print_ptx <file.wgsl> <entry>`.

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: print_ptx <file.wgsl> <entry>");
    let entry = std::env::args()
        .nth(2)
        .expect("usage: print_ptx <file.wgsl> <entry>");
    let src = std::fs::read_to_string(&path).expect("the WGSL file reads");
    let program = keel_wgsl::compile(&src, &entry).expect("the entry point compiles");
    println!(
        "{}",
        keel_wgsl::ptx::emit(&program).expect("the program prints as PTX")
    );
}
