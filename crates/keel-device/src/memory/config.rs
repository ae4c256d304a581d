//! `KEEL_ALLOC_CONF`: the keys and their parsing ([`AllocConfig`]).

use crate::error::{Error, Result};

/// Where buffers' memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AllocBackend {
    /// The caching allocator.
    #[default]
    Native,
    /// Straight to the backend for every buffer (no caching).
    Direct,
}

/// `KEEL_ALLOC_CONF`: the caching allocator's configuration, in the form of
/// `PYTORCH_CUDA_ALLOC_CONF` (`key:value` pairs separated by commas).
///
/// | key | value | meaning |
/// |---|---|---|
/// | `backend` | `native` (default) or `direct` | `direct`: every buffer straight from the backend and back to it when dropped, no caching (for debugging) |
/// | `max_split_size_mb` | a whole number of MiB, at least 1 | blocks at or above this size are never split |
/// | `garbage_collection_threshold` | a fraction in (0, 1) | before reserving a new segment, release free cached segments while the reserved memory would be above this fraction of the device's capacity (its budget, or its total memory) |
/// | `memory_budget_mb` | a whole number of MiB | the most memory the allocator reserves on each device; beyond it, allocations fail as out of memory |
///
/// A malformed value or an unknown key is an error naming the key.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct AllocConfig {
    /// Caching or direct.
    pub backend: AllocBackend,
    /// Blocks at or above this many bytes are never split.
    pub max_split_size: Option<u64>,
    /// Fraction of the capacity above which free segments are released
    /// before reserving more.
    pub garbage_collection_threshold: Option<f64>,
    /// The most bytes the allocator may reserve on a device.
    pub memory_budget: Option<u64>,
}

fn short(value: &str) -> String {
    let mut s: String = value.chars().take(24).collect();
    if s.len() < value.len() {
        s.push_str("...");
    }
    s
}

fn bad(key: &str, expected: &str, found: &str) -> Error {
    Error::invalid(format!(
        "KEEL_ALLOC_CONF: {key}: expected {expected}, found '{}'",
        short(found)
    ))
}

fn mib(key: &str, value: &str, min: u64) -> Result<u64> {
    value
        .parse::<u64>()
        .ok()
        .filter(|v| *v >= min)
        .and_then(|v| v.checked_mul(1 << 20))
        .ok_or_else(|| {
            bad(
                key,
                &format!("a whole number of MiB of at least {min}"),
                value,
            )
        })
}

impl AllocConfig {
    /// Parses a `KEEL_ALLOC_CONF` value (empty: the defaults).
    pub fn parse(conf: &str) -> Result<AllocConfig> {
        let mut c = AllocConfig::default();
        for item in conf.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once(':') else {
                return Err(Error::invalid(format!(
                    "KEEL_ALLOC_CONF: expected key:value, found '{}'",
                    short(item)
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "backend" => {
                    c.backend = match value {
                        "native" => AllocBackend::Native,
                        "direct" => AllocBackend::Direct,
                        _ => return Err(bad(key, "native or direct", value)),
                    }
                }
                "max_split_size_mb" => c.max_split_size = Some(mib(key, value, 1)?),
                "memory_budget_mb" => c.memory_budget = Some(mib(key, value, 0)?),
                "garbage_collection_threshold" => {
                    let t = value
                        .parse::<f64>()
                        .ok()
                        .filter(|t| *t > 0.0 && *t < 1.0)
                        .ok_or_else(|| bad(key, "a fraction between 0 and 1", value))?;
                    c.garbage_collection_threshold = Some(t);
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "KEEL_ALLOC_CONF: unknown key '{}' (expected backend, max_split_size_mb, garbage_collection_threshold or memory_budget_mb)",
                        short(key)
                    )));
                }
            }
        }
        Ok(c)
    }

    /// The process's configuration: `KEEL_ALLOC_CONF`, read once (a
    /// malformed value is an error on every allocation).
    pub fn from_env() -> Result<AllocConfig> {
        static CONF: std::sync::OnceLock<Result<AllocConfig>> = std::sync::OnceLock::new();
        CONF.get_or_init(|| match std::env::var("KEEL_ALLOC_CONF") {
            Ok(v) => AllocConfig::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(AllocConfig::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::invalid(
                "KEEL_ALLOC_CONF: expected UTF-8 text, found other bytes",
            )),
        })
        .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key() {
        let c = AllocConfig::parse(
            "backend:direct, max_split_size_mb:64,garbage_collection_threshold:0.6,memory_budget_mb:8",
        )
        .expect("valid");
        assert_eq!(c.backend, AllocBackend::Direct);
        assert_eq!(c.max_split_size, Some(64 << 20));
        assert_eq!(c.garbage_collection_threshold, Some(0.6));
        assert_eq!(c.memory_budget, Some(8 << 20));
        assert_eq!(
            AllocConfig::parse("").expect("empty"),
            AllocConfig::default()
        );
    }

    #[test]
    fn malformed_values_name_their_key() {
        let cases = [
            (
                "backend:cuda",
                "KEEL_ALLOC_CONF: backend: expected native or direct, found 'cuda'",
            ),
            (
                "max_split_size_mb:-3",
                "KEEL_ALLOC_CONF: max_split_size_mb: expected a whole number of MiB of at least 1, found '-3'",
            ),
            (
                "max_split_size_mb:0",
                "KEEL_ALLOC_CONF: max_split_size_mb: expected a whole number of MiB of at least 1, found '0'",
            ),
            (
                "garbage_collection_threshold:1.5",
                "KEEL_ALLOC_CONF: garbage_collection_threshold: expected a fraction between 0 and 1, found '1.5'",
            ),
            (
                "memory_budget_mb:lots",
                "KEEL_ALLOC_CONF: memory_budget_mb: expected a whole number of MiB of at least 0, found 'lots'",
            ),
            (
                "expandable_segments:True",
                "KEEL_ALLOC_CONF: unknown key 'expandable_segments' (expected backend, max_split_size_mb, garbage_collection_threshold or memory_budget_mb)",
            ),
            (
                "backend",
                "KEEL_ALLOC_CONF: expected key:value, found 'backend'",
            ),
            (
                "memory_budget_mb:99999999999999999999999999999",
                "KEEL_ALLOC_CONF: memory_budget_mb: expected a whole number of MiB of at least 0, found '999999999999999999999999...'",
            ),
        ];
        for (conf, msg) in cases {
            let e = AllocConfig::parse(conf).expect_err(conf);
            assert_eq!(e.to_string(), msg, "{conf}");
        }
    }
}
