//! Command-line options of `keel-profiler`, parsed by `clap` (derive):
//! `--help`, `--version` and errors for bad arguments come from clap.

use std::path::PathBuf;

use clap::Parser;

/// Keel's desktop profiler: devices, live workloads, timeline, statistics,
/// and trace files from Keel, PyTorch (Kineto) and Chrome.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(name = "keel-profiler", version, about, long_about = None)]
pub struct Options {
    /// Show trace files (Chrome/PyTorch JSON, optionally gzip or zstd
    /// compressed, or .keeltrace). Several files (one per rank of a
    /// distributed job) open as one trace: one group of lanes per file,
    /// on one clock as --align says.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub open: Vec<PathBuf>,
    /// How several files' clocks are put on one timeline: `clock` (their
    /// own clocks, skew kept; falls back to collectives, then start, when
    /// the clocks share no instant), `collectives` (the ends of their
    /// NCCL/RCCL collective kernels), `start` (each on its earliest event).
    #[arg(long, value_name = "HOW", value_parser = alignment, default_value = "clock")]
    pub align: keel_trace::Alignment,
    /// Compare two trace files: the first is the baseline, the second the
    /// candidate (shown, with what got slower or faster outlined, and a
    /// Diff tab). With --headless: the diff table, tab-separated.
    #[arg(long, value_names = ["BASELINE", "CANDIDATE"], num_args = 2, conflicts_with = "open")]
    pub diff: Vec<PathBuf>,
    /// With --open FILE: show it through its index, a file beside it
    /// (FILE.keelidx) made on first open and reused while FILE is
    /// unchanged, read one window at a time: for traces larger than
    /// memory. Files of 2 GiB or more and .keelidx files always open so.
    #[arg(long)]
    pub index: bool,
    /// Convert a trace file (any format --open reads) into an indexed
    /// file, then exit.
    #[arg(long, value_names = ["TRACE", "INDEX"], num_args = 2, conflicts_with_all = ["open", "diff"])]
    pub convert: Vec<PathBuf>,
    /// Connect to live profiler servers (host:port; several: programs
    /// shown side by side on one clock). Lost connections come back on
    /// their own.
    #[arg(long, value_name = "ADDR", value_parser = non_empty, num_args = 1..)]
    pub connect: Vec<String>,
    /// Spans of a live session kept in memory; older ones go to disk,
    /// where the timeline still scrolls, searches and analyses them.
    #[arg(long, value_name = "SPANS", value_parser = retain_spans, default_value_t = 2_000_000)]
    pub retain: usize,
    /// Keep only this much of a live session's newest time in memory too
    /// (`30s`, `500ms`; units ns, us, ms, s).
    #[arg(long, value_name = "TIME", value_parser = time_ns)]
    pub retain_time: Option<u64>,
    /// Device for the built-in workloads (cpu:0, vulkan:0, ...).
    #[arg(long, value_name = "DEV", value_parser = device_string)]
    pub device: Option<String>,
    /// No window. With --open: print the import report, the trace summary,
    /// the lane groups and the analysis tables of the files (no devices
    /// probed, no workloads run). Without: print devices, run the demo workloads, print
    /// per-kernel statistics, write a trace file.
    #[arg(long)]
    pub headless: bool,
    /// Open a window, render a few frames, save a PNG, quit.
    #[arg(long, value_name = "PATH")]
    pub screenshot: Option<PathBuf>,
    /// With --open: select every lane over a window of the trace, times
    /// from its start (`120ms..180ms`; units ns, us, ms, s; a bare number
    /// is ms). The window shows the selection panel; --headless prints the
    /// selection's tables (spans by name, devices, flame graph).
    #[arg(long, value_name = "START..END", value_parser = time_window, allow_hyphen_values = true)]
    pub select: Option<(u64, u64)>,
}

impl Default for Options {
    /// What no arguments give.
    fn default() -> Self {
        Options {
            open: Vec::new(),
            align: keel_trace::Alignment::default(),
            diff: Vec::new(),
            index: false,
            convert: Vec::new(),
            connect: Vec::new(),
            retain: crate::live::Retention::default().spans,
            retain_time: None,
            device: None,
            headless: false,
            screenshot: None,
            select: None,
        }
    }
}

fn alignment(s: &str) -> Result<keel_trace::Alignment, String> {
    keel_trace::Alignment::from_name(s).ok_or_else(|| {
        format!(
            "expected clock, collectives or start, found {:?}",
            s.chars().take(24).collect::<String>()
        )
    })
}

/// A time with an optional unit (`ns`, `us`, `ms`, `s`; ms without one),
/// in ns.
fn time_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        _ if num.trim().is_empty() => f64::NAN,
        "ns" => 1.0,
        "us" => 1e3,
        "" | "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("expected a unit ns, us, ms or s, found {unit:?}")),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if scale.is_finite() && v.is_finite() && v >= 0.0 && v * scale < u64::MAX as f64 => {
            Ok((v * scale).round() as u64)
        }
        _ => Err(format!(
            "expected a non-negative number, found {:?}",
            t.chars().take(24).collect::<String>()
        )),
    }
}

/// `START..END`, each a time of [`time_ns`], START before END.
fn time_window(s: &str) -> Result<(u64, u64), String> {
    let Some((a, b)) = s.split_once("..") else {
        return Err(format!(
            "expected START..END such as 120ms..180ms, found {:?}",
            s.chars().take(24).collect::<String>()
        ));
    };
    let (a, b) = (time_ns(a)?, time_ns(b)?);
    if a >= b {
        return Err(format!("expected START before END, found {a} ns..{b} ns"));
    }
    Ok((a, b))
}

/// Checks the device string's syntax (`type[:index]`); whether the device
/// exists is checked once devices are probed.
fn device_string(s: &str) -> Result<String, String> {
    s.parse::<keel::Device>()
        .map(|_| s.to_owned())
        .map_err(|e| format!("expected a device such as cpu:0 or vulkan:0 ({e})"))
}

/// A span count of at least 10,000 (below it a session would write a
/// segment every few fragments).
fn retain_spans(s: &str) -> Result<usize, String> {
    match s.trim().replace('_', "").parse::<usize>() {
        Ok(n) if n >= 10_000 => Ok(n),
        _ => Err(format!(
            "expected a span count of at least 10000, found {:?}",
            s.chars().take(24).collect::<String>()
        )),
    }
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("expected an address such as 127.0.0.1:7878, found an empty string".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

/// Parses `args` (without the program name). `--help` and `--version`
/// come back as errors of kind `DisplayHelp` / `DisplayVersion` whose
/// text is the help or version (as `clap::Error::exit` prints it).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, clap::Error> {
    Options::try_parse_from(std::iter::once("keel-profiler".to_owned()).chain(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn p(a: &[&str]) -> Result<Options, clap::Error> {
        parse(a.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn parses_and_rejects() {
        let o = p(&["--open", "t.json", "--device", "cpu:0", "--headless"]).expect("valid");
        assert_eq!(o.open, [PathBuf::from("t.json")]);
        assert_eq!(o.device.as_deref(), Some("cpu:0"));
        assert!(o.headless);
        assert!(o.connect.is_empty());
        let o = p(&["--open=t.json.gz", "--connect", "127.0.0.1:7878"]).expect("valid");
        assert_eq!(o.open, [PathBuf::from("t.json.gz")]);
        assert_eq!(o.connect, ["127.0.0.1:7878"]);
        let o = p(&[
            "--connect",
            "127.0.0.1:1",
            "127.0.0.1:2",
            "--retain",
            "50_000",
        ])
        .expect("valid");
        assert_eq!(o.connect, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(o.retain, 50_000);
        let o = p(&["--retain-time", "30s"]).expect("valid");
        assert_eq!(o.retain_time, Some(30_000_000_000));
        let e = p(&["--retain", "10"]).expect_err("too few");
        assert!(
            e.to_string().contains("at least 10000, found \"10\""),
            "{e}"
        );
        // Several files: after one --open, or one --open each.
        let o = p(&["--open", "r0.json", "r1.json.gz", "--headless"]).expect("valid");
        assert_eq!(
            o.open,
            [PathBuf::from("r0.json"), PathBuf::from("r1.json.gz")]
        );
        assert!(o.headless);
        let o = p(&["--open", "r0.json", "--open", "r1.json"]).expect("valid");
        assert_eq!(o.open, [PathBuf::from("r0.json"), PathBuf::from("r1.json")]);
        assert_eq!(p(&[]).expect("no arguments"), Options::default());

        let e = p(&["--open"]).expect_err("missing value");
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        let e = p(&["--bogus"]).expect_err("unknown flag");
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--bogus"), "{e}");
        let e = p(&["--device", "gpu zero"]).expect_err("bad device");
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("expected a device"), "{e}");
        let e = p(&["--connect", " "]).expect_err("empty address");
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        let e = p(&["--headless", "--headless"]).expect_err("repeated flag");
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict);

        let o = p(&["--open", "t.json", "--select", "1.5ms..2s"]).expect("valid");
        assert_eq!(o.select, Some((1_500_000, 2_000_000_000)));
        let o = p(&["--select", "120..180"]).expect("ms by default");
        assert_eq!(o.select, Some((120_000_000, 180_000_000)));
        let o = p(&["--open", "a.json", "b.json", "--align", "collectives"]).expect("valid");
        assert_eq!(o.align, keel_trace::Alignment::Collectives);
        assert_eq!(p(&[]).expect("none").align, keel_trace::Alignment::Clock);
        let e = p(&["--align", "median"]).expect_err("bad alignment");
        assert!(
            e.to_string()
                .contains("expected clock, collectives or start"),
            "{e}"
        );
        let o = p(&["--diff", "a.json", "b.json.gz"]).expect("valid");
        assert_eq!(
            o.diff,
            [PathBuf::from("a.json"), PathBuf::from("b.json.gz")]
        );
        let e = p(&["--diff", "a.json"]).expect_err("one file");
        assert_eq!(e.kind(), ErrorKind::WrongNumberOfValues);
        let e = p(&["--diff", "a.json", "b.json", "--open", "c.json"]).expect_err("both");
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
        let o = p(&["--select", "10us..20000ns"]).expect("valid");
        assert_eq!(o.select, Some((10_000, 20_000)));
        for (bad, says) in [
            ("12ms", "START..END"),
            ("5ms..1ms", "START before END"),
            ("1h..2h", "unit"),
            ("x..2ms", "non-negative number"),
            ("-1..2", "non-negative number"),
        ] {
            let e = p(&["--select", bad]).expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::ValueValidation);
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn help_and_version() {
        let e = p(&["--version"]).expect_err("version is not an options set");
        assert_eq!(e.kind(), ErrorKind::DisplayVersion);
        assert!(
            e.to_string().contains(env!("CARGO_PKG_VERSION")),
            "{}",
            e.to_string()
        );
        let e = p(&["--help"]).expect_err("help");
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        let help = e.to_string();
        for flag in [
            "--open",
            "--connect",
            "--device",
            "--headless",
            "--screenshot",
            "--select",
            "--align",
            "--diff",
        ] {
            assert!(help.contains(flag), "{flag} in the help: {help}");
        }
    }

    #[test]
    fn definition_is_consistent() {
        use clap::CommandFactory;
        Options::command().debug_assert();
    }
}
