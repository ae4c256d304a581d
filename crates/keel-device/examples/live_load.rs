//! A program that streams its profile live at a chosen rate: host ranges
//! recorded by Keel's recorder ([`keel_device::profiler::range`], a step
//! range every millisecond holding the rest) and served by
//! [`keel_device::profiler::live::serve_with`]. The load of the viewer's
//! soak benchmark (`scripts/live-soak.sh`).
//!
//! Usage: `live_load ADDR SPANS_PER_SECOND SECONDS [NAME]`. It waits (up
//! to a minute) for a viewer, records for SECONDS, then prints what it
//! sent and what its server dropped. NAME is the program name viewers
//! show (`live_load` without it).

use std::borrow::Cow;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use keel_device::profiler::{self, live};

const NAMES: [&str; 8] = [
    "forward",
    "backward",
    "optimizer",
    "all_reduce",
    "load",
    "copy",
    "matmul",
    "softmax",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, rate, secs, name) = match args.as_slice() {
        [a, r, s] => (a, r, s, "live_load"),
        [a, r, s, n] => (a, r, s, n.as_str()),
        _ => {
            eprintln!("usage: live_load ADDR SPANS_PER_SECOND SECONDS [NAME]");
            return ExitCode::from(2);
        }
    };
    let (Ok(rate), Ok(secs)) = (rate.parse::<u64>(), secs.parse::<f64>()) else {
        eprintln!(
            "live_load: expected a span rate and seconds, found {:?} and {:?}",
            rate.chars().take(24).collect::<String>(),
            secs.chars().take(24).collect::<String>()
        );
        return ExitCode::from(2);
    };
    let options = live::LiveOptions {
        program_name: Some(name.to_owned()),
        ..live::LiveOptions::default()
    };
    let server = match live::serve_with(addr.as_str(), options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("live_load: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("live_load: serving on {}", server.addr());
    let waited = Instant::now();
    while server.viewers_served() == 0 {
        if waited.elapsed() > Duration::from_secs(60) {
            eprintln!("live_load: no viewer in 60 s");
            return ExitCode::FAILURE;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Each millisecond: a step (one span) holding `per_ms - 1` ranges.
    let per_ms = (rate / 1_000).max(2);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tick = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        profiler::step();
        for i in 0..per_ms - 1 {
            let _r = profiler::range(Cow::Borrowed(NAMES[(i % 8) as usize]));
        }
        sent += per_ms;
        tick += 1;
        let due = start + Duration::from_millis(tick);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    // The last fragments go out before the server stops.
    std::thread::sleep(Duration::from_millis(500));
    println!(
        "live_load: recorded {sent} spans in {:.1} s ({:.0} a second); server dropped {} chunks",
        start.elapsed().as_secs_f64(),
        sent as f64 / start.elapsed().as_secs_f64(),
        server.dropped_chunks()
    );
    server.stop();
    ExitCode::SUCCESS
}
