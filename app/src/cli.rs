//! Command-line options of `keel-profiler`.

use std::path::PathBuf;

/// Parsed command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `--open FILE`: a trace file to show.
    pub open: Option<PathBuf>,
    /// `--connect ADDR`: a live server to connect to.
    pub connect: Option<String>,
    /// `--device DEV`: the device workloads run on.
    pub device: Option<String>,
    /// `--headless`: no window.
    pub headless: bool,
    /// `--screenshot PATH`: render a few frames, save a PNG, quit.
    pub screenshot: Option<PathBuf>,
    /// `--help`.
    pub help: bool,
}

/// The usage text.
pub const USAGE: &str = "\
keel-profiler: Keel's desktop profiler

USAGE: keel-profiler [OPTIONS]

  --open FILE         show a trace file (.json Chrome trace or .keeltrace)
  --connect ADDR      connect to a live profiler server (host:port)
  --device DEV        device for the built-in workloads (cpu:0, vulkan:0, ...)
  --headless          no window: print devices, run the demo workloads,
                      print per-kernel statistics, write a trace file
  --screenshot PATH   open a window, render a few frames, save a PNG, quit
  --help              this text
";

/// Parses `args` (without the program name).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} expects a value (see --help)"))
        };
        match a.as_str() {
            "--open" => o.open = Some(PathBuf::from(value("--open")?)),
            "--connect" => o.connect = Some(value("--connect")?),
            "--device" => o.device = Some(value("--device")?),
            "--screenshot" => o.screenshot = Some(PathBuf::from(value("--screenshot")?)),
            "--headless" => o.headless = true,
            "--help" | "-h" => o.help = true,
            other => return Err(format!("unknown argument '{other}' (see --help)")),
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: &[&str]) -> Result<Options, String> {
        parse(a.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn parses_and_rejects() {
        let o = p(&["--open", "t.json", "--device", "cpu:0", "--headless"]).expect("valid");
        assert_eq!(o.open, Some(PathBuf::from("t.json")));
        assert_eq!(o.device.as_deref(), Some("cpu:0"));
        assert!(o.headless);
        assert!(p(&["--open"]).is_err());
        assert!(p(&["--bogus"]).is_err());
    }
}
