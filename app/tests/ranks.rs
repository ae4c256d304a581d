//! Ranks of a distributed job in the app: four ranks made from the real
//! GPT-2 trace (keel-trace's generator: known clock skews, NCCL
//! all-reduces, the last rank entering them late) opened as one trace,
//! from the command line (`--align`, the ranks table) and in the window
//! (the Analysis tab's ranks, driven by egui_kittest).

mod common;

#[allow(dead_code)]
#[path = "../../crates/keel-trace/tests/gen/ranks.rs"]
mod gen_ranks;

use std::io::Read;
use std::path::{Path, PathBuf};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gen_ranks::Job;
use keel_profiler::cli::Options;
use keel_profiler::{App, Tab};

/// Writes the ranks of `job` into a fresh directory; returns the files.
fn ranks(name: &str, job: &Job) -> Vec<PathBuf> {
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/keel-trace/tests/data/import/gpt2_train_h200.pt.trace.json.gz");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(real).expect("the GPT-2 trace"))
        .read_to_end(&mut text)
        .expect("gunzip");
    let dir = std::env::temp_dir().join(format!("keel-profiler-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    gen_ranks::make(&text, job)
        .into_iter()
        .enumerate()
        .map(|(r, bytes)| {
            let path = dir.join(format!("rank{r}.json"));
            std::fs::write(&path, bytes).expect("write a rank");
            path
        })
        .collect()
}

fn strs(paths: &[PathBuf]) -> Vec<&str> {
    paths
        .iter()
        .map(|p| p.to_str().expect("utf-8 path"))
        .collect()
}

#[test]
fn headless_ranks_on_their_collectives_flag_the_late_rank() {
    let job = Job::new(4);
    let files = ranks("headless", &job);
    let mut args = vec!["--open"];
    args.extend(strs(&files));
    args.extend(["--align", "collectives"]);
    let text = common::headless(&args);
    let table = text
        .split("Ranks (tab-separated):\n")
        .nth(1)
        .expect("the ranks table");
    let mut lines = table.lines();
    assert_eq!(lines.next(), Some("alignment\tcollectives"));
    assert_eq!(lines.next(), Some("compared\t50"));
    let header = lines.next().expect("a header");
    let col = |name: &str| {
        header
            .split('\t')
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("column {name} in {header}"))
    };
    let rows: Vec<Vec<&str>> = lines.take(4).map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 4);
    for (r, row) in rows.iter().enumerate() {
        assert_eq!(row[col("rank")], r.to_string());
        // Each rank's skew against rank 0, within the jitter's bound.
        let skew_us: f64 = row[col("skew_us")].parse().expect("a skew");
        let known = (job.skews_ns[r] - job.skews_ns[0]) as f64 / 1e3;
        assert!(
            (skew_us - known).abs() <= 4.0,
            "rank {r}: {skew_us} vs {known}"
        );
        let late = if r == job.late { "yes" } else { "no" };
        assert_eq!(row[col("late")], late, "rank {r}");
    }
    assert_eq!(rows[job.late][col("last_in")], "50");
    let _ = std::fs::remove_dir_all(files[0].parent().expect("a directory"));
}

#[test]
fn the_analysis_tab_shows_the_ranks_and_the_late_one() {
    let job = Job::new(3);
    let files = ranks("window", &job);
    let options = Options {
        open: files.clone(),
        align: keel_trace::Alignment::Clock,
        ..Options::default()
    };
    let mut app = App::new(&options);
    assert_eq!(app.error, None);
    let trace = &app.view.as_ref().expect("opened").trace;
    let record = trace.ranks.as_ref().expect("opened as ranks");
    assert_eq!(record.files.len(), 3);
    app.tab = Tab::Analysis;
    let mut h = Harness::builder()
        .with_size([1280.0, 900.0])
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.run_steps(3);
    h.get_by_label("Ranks");
    h.get_by_label_contains("aligned on clock");
    h.get_by_label_contains(&format!("rank {} enters collectives last", job.late));
    h.get_by_label("late");
    for r in 0..3 {
        h.get_by_label(&format!("rank {r}"));
    }
    let _ = std::fs::remove_dir_all(files[0].parent().expect("a directory"));
}
