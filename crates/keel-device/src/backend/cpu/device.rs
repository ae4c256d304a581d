//! Host-thread devices: a default stream and a stream pool whose native
//! streams are created on first use; and what the CPU reports about
//! itself.

use std::fmt;

use super::stream::HostStream;
use crate::backend::pool::{PoolCursors, Streams};
use crate::backend::{DeviceKind, DeviceProperties, TimestampSupport};
use crate::core::{Device, DeviceIndex, DeviceType, StreamId, StreamKind};
use crate::error::Result;

/// One host-thread device: its default stream and its stream pool (the
/// native streams behind pool ids, created on first use).
pub struct HostDevice {
    ty: DeviceType,
    index: DeviceIndex,
    inline_default: bool,
    streams: Streams<HostStream>,
}

impl fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostDevice")
            .field("type", &self.ty)
            .field("index", &self.index)
            .field("inline_default", &self.inline_default)
            .field("streams", &self.streams)
            .finish()
    }
}

impl HostDevice {
    /// Device `index` of `ty` with `levels` priority levels. When
    /// `inline_default` is true the default stream runs work on the
    /// submitting thread (like Keel's CPU); otherwise it has a worker too
    /// (like an accelerator's default queue).
    pub fn new(ty: DeviceType, index: DeviceIndex, levels: usize, inline_default: bool) -> Self {
        HostDevice {
            ty,
            index,
            inline_default,
            streams: Streams::new(ty, index, levels),
        }
    }

    /// The pool's cursors (priority levels, round robin).
    pub fn cursors(&self) -> &PoolCursors {
        self.streams.cursors()
    }

    /// The native stream behind `id`, created on first use.
    pub fn stream(&self, id: StreamId) -> Result<&HostStream> {
        self.streams.get_or_create(id, |kind| {
            let name = match kind {
                StreamKind::Pool { level, index } => format!("p{level}.{index}"),
                _ if self.inline_default => return Ok(HostStream::inline()),
                _ => "default".to_owned(),
            };
            HostStream::spawn(format!("keel-{}{}-{name}", self.ty, self.index))
        })
    }

    /// Waits for every stream of the device that has been used; returns the
    /// first error any of them kept.
    pub fn synchronize(&self) -> Result<()> {
        self.streams.try_for_each_created(HostStream::synchronize)
    }
}

/// Reads a `key : value` field from a `/proc` file, if the OS has one.
fn proc_field(file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

/// What the host reports about itself, as device `at`.
pub(super) fn cpu_properties(at: Device, levels: usize) -> DeviceProperties {
    let name = proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "host CPU".to_owned());
    let mut p = DeviceProperties::new(at, name, DeviceKind::Cpu);
    p.vendor = proc_field("/proc/cpuinfo", "vendor_id").unwrap_or_default();
    p.native_backend = "host threads".to_owned();
    p.driver = "keel host streams".to_owned();
    // Host code (the translations, the interpreter) never fuses or
    // reorders float operations.
    p.strict_float = true;
    p.driver_info = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    p.total_memory = proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024);
    p.compute_units = std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok());
    p.timestamps = Some(TimestampSupport {
        period_ns: 1.0,
        valid_bits: 64,
    });
    p.extra
        .push(("stream priority levels".to_owned(), levels.to_string()));
    p.extra.push((
        "default stream".to_owned(),
        "inline (submitting thread)".to_owned(),
    ));
    p
}
