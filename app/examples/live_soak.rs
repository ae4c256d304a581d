//! The viewer's side of the live soak benchmark (`scripts/live-soak.sh`):
//! the real app, headless (`egui::Context::run_ui` on a 1920x1080 screen,
//! no renderer), streaming from a live server for a while at 60 frames a
//! second, following live. Every ten seconds it prints what is in memory
//! and on disk, the process's resident memory and the frame times of
//! those ten seconds; every 30 s the whole session is fitted in view for a
//! second (the zoomed-out frames). Memory is the process's resident set,
//! also split into heap (`RssAnon`) and mapped files (`RssFile`: the
//! program's code and the segments read back).
//!
//! Usage: `live_soak ADDR SECONDS [RETAIN_SPANS]`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use keel_profiler::App;
use keel_profiler::cli::Options;

fn rss_mb(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, secs, retain) = match args.as_slice() {
        [a, s] => (a, s.parse::<f64>(), Ok(2_000_000)),
        [a, s, r] => (a, s.parse::<f64>(), r.parse::<usize>()),
        _ => {
            eprintln!("usage: live_soak ADDR SECONDS [RETAIN_SPANS]");
            return ExitCode::from(2);
        }
    };
    let (Ok(secs), Ok(retain)) = (secs, retain) else {
        eprintln!("live_soak: expected seconds and a span count");
        return ExitCode::from(2);
    };
    let mut app = App::new(&Options {
        connect: vec![addr.clone()],
        retain,
        ..Options::default()
    });
    let ctx = egui::Context::default();
    let input = || egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1920.0, 1080.0),
        )),
        ..Default::default()
    };
    let start = Instant::now();
    let mut frames: Vec<Duration> = Vec::new();
    let mut all: Vec<Duration> = Vec::new();
    let mut report = 10.0;
    let mut rss_full: Option<f64> = None;
    println!(
        "t_s\tin_memory\ton_disk\tsegments\trss_mb\theap_mb\tmapped_mb\tframe_p50_ms\tframe_p99_ms\tframe_max_ms\tviewer_dropped"
    );
    while start.elapsed().as_secs_f64() < secs {
        let t = start.elapsed().as_secs_f64();
        // Every 30 s, a second with the whole session in view.
        let whole = t % 30.0 >= 29.0;
        if whole && app.timeline.follow_live {
            app.timeline.follow_live = false;
            app.timeline.fit_pending = true;
        } else if !whole {
            app.timeline.follow_live = true;
        }
        let f = Instant::now();
        let mut out = ctx.run_ui(input(), |ui| app.ui(ui));
        // No renderer takes the textures (a debug build checks).
        out.textures_delta.clear();
        std::hint::black_box(out.shapes.len());
        frames.push(f.elapsed());
        if let Some(e) = app.error.take() {
            eprintln!("live_soak: {e}");
        }
        if t >= report && !frames.is_empty() {
            report += 10.0;
            frames.sort();
            let q = |p: f64| frames[((frames.len() - 1) as f64 * p) as usize];
            let resident = app
                .live
                .as_ref()
                .and_then(|l| l.parked.as_ref())
                .or(app.view.as_ref())
                .map_or(0, |v| v.trace.spans.len());
            let (disk, parts, dropped) = app.live.as_ref().map_or((0, 0, 0), |l| {
                (
                    l.history.span_count(),
                    l.history.parts().len(),
                    l.viewer_dropped(),
                )
            });
            let rss = rss_mb("VmRSS:");
            if disk > 0 && rss_full.is_none() {
                rss_full = Some(rss);
            }
            println!(
                "{t:.0}\t{resident}\t{disk}\t{parts}\t{rss:.0}\t{:.0}\t{:.0}\t{:.2}\t{:.2}\t{:.2}\t{dropped}",
                rss_mb("RssAnon:"),
                rss_mb("RssFile:"),
                ms(q(0.5)),
                ms(q(0.99)),
                ms(q(1.0))
            );
            all.append(&mut frames);
        }
        let next = f + Duration::from_micros(16_667);
        if let Some(w) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
    }
    all.append(&mut frames);
    all.sort();
    if all.is_empty() {
        eprintln!("live_soak: no frame ran");
        return ExitCode::FAILURE;
    }
    let q = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
    let status = app.timeline.live_status.clone().unwrap_or_default();
    let recorder = app
        .live
        .as_ref()
        .and_then(|l| l.parked.as_ref())
        .or(app.view.as_ref())
        .map_or(0, |v| v.trace.dropped);
    println!("live_soak: {status}");
    println!(
        "live_soak: {} frames, p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms; RSS when spans first went to disk {:.0} MB, at the end {:.0} MB, peak {:.0} MB; recorder drops {recorder}",
        all.len(),
        ms(q(0.5)),
        ms(q(0.99)),
        ms(q(0.999)),
        ms(q(1.0)),
        rss_full.unwrap_or(f64::NAN),
        rss_mb("VmRSS:"),
        rss_mb("VmHWM:")
    );
    ExitCode::SUCCESS
}
