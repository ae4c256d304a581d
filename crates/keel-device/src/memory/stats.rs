//! The allocator's statistics as PyTorch shows them: the flat map of
//! `torch.cuda.memory_stats` and the table of `torch.cuda.memory_summary`.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::allocator::{Stat, StatArray, Stats};
use crate::core::Device;

/// The statistics with PyTorch's names, in the order of its summary.
fn arrays(s: &Stats) -> [(&'static str, &StatArray); 9] {
    [
        ("allocation", &s.allocation),
        ("segment", &s.segment),
        ("active", &s.active),
        ("inactive_split", &s.inactive_split),
        ("allocated_bytes", &s.allocated_bytes),
        ("reserved_bytes", &s.reserved_bytes),
        ("active_bytes", &s.active_bytes),
        ("inactive_split_bytes", &s.inactive_split_bytes),
        ("requested_bytes", &s.requested_bytes),
    ]
}

fn stat_entries(out: &mut BTreeMap<String, i64>, prefix: &str, s: &Stat) {
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    out.insert(format!("{prefix}.current"), s.current);
    out.insert(format!("{prefix}.peak"), s.peak);
    out.insert(format!("{prefix}.allocated"), clamp(s.allocated));
    out.insert(format!("{prefix}.freed"), clamp(s.freed));
}

/// `stats` as `torch.cuda.memory_stats` names them:
/// `"{stat}.{pool}.{metric}"` for `stat` in `allocation`, `segment`,
/// `active`, `inactive_split`, `allocated_bytes`, `reserved_bytes`,
/// `active_bytes`, `inactive_split_bytes`, `requested_bytes`; `pool` in
/// `all`, `small_pool`, `large_pool`; `metric` in `current`, `peak`,
/// `allocated`, `freed`. Then `oversize_allocations.{metric}`,
/// `oversize_segments.{metric}`, `num_alloc_retries`, `num_ooms`,
/// `num_device_alloc`, `num_device_free` and `num_sync_all_streams`
/// (always 0: the allocator never synchronizes a device).
pub fn memory_stats_of(stats: &Stats) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (name, a) in arrays(stats) {
        stat_entries(&mut out, &format!("{name}.all"), &a.all);
        stat_entries(&mut out, &format!("{name}.small_pool"), &a.small_pool);
        stat_entries(&mut out, &format!("{name}.large_pool"), &a.large_pool);
    }
    stat_entries(
        &mut out,
        "oversize_allocations",
        &stats.oversize_allocations,
    );
    stat_entries(&mut out, "oversize_segments", &stats.oversize_segments);
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    out.insert(
        "num_alloc_retries".to_owned(),
        clamp(stats.num_alloc_retries),
    );
    out.insert("num_ooms".to_owned(), clamp(stats.num_ooms));
    out.insert("num_device_alloc".to_owned(), clamp(stats.num_device_alloc));
    out.insert("num_device_free".to_owned(), clamp(stats.num_device_free));
    out.insert("num_sync_all_streams".to_owned(), 0);
    out
}

/// Bytes the way PyTorch's summary prints them (`B`, `KiB`, `MiB`, ...).
fn format_size(v: i64) -> String {
    let units = ["B ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v as f64;
    let mut u = 0;
    while x.abs() >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:>6} {}", units[0])
    } else {
        format!("{x:>6.2} {}", units[u])
    }
}

fn format_count(v: i64) -> String {
    if v.unsigned_abs() >= 10_000_000 {
        format!("{:>7}M ", v / 1_000_000)
    } else if v.unsigned_abs() >= 10_000 {
        format!("{:>7}K ", v / 1000)
    } else {
        format!("{v:>8} ")
    }
}

const WIDTH: usize = 75;

/// A readable table of `stats` for `device`, shaped like
/// `torch.cuda.memory_summary`: one block per statistic (all, then the
/// large and the small pool) with current, peak, total allocated and total
/// freed.
pub fn memory_summary_of(device: Device, stats: &Stats) -> String {
    let mut out = String::new();
    let rule = |c: char| format!("|{}|\n", c.to_string().repeat(WIDTH));
    let line = |text: &str| format!("|{text:^WIDTH$}|\n");
    out.push_str(&rule('='));
    out.push_str(&line(&format!(
        "Keel caching allocator memory summary, device: {device}"
    )));
    out.push_str(&rule('-'));
    let _ = writeln!(
        out,
        "|{:^37}|{:^37}|",
        format!("Out of memory errors: {}", stats.num_ooms),
        format!(
            "Retries after freeing the cache: {}",
            stats.num_alloc_retries
        )
    );
    out.push_str(&rule('='));
    let _ = writeln!(
        out,
        "| {:<21} | {:^10} | {:^10} | {:^10} | {:^10} |",
        "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"
    );
    let rows: [(&str, &StatArray, bool); 8] = [
        ("Allocated memory", &stats.allocated_bytes, true),
        ("Active memory", &stats.active_bytes, true),
        ("Requested memory", &stats.requested_bytes, true),
        ("Reserved memory", &stats.reserved_bytes, true),
        ("Non-releasable memory", &stats.inactive_split_bytes, true),
        ("Allocations", &stats.allocation, false),
        ("Active allocs", &stats.active, false),
        ("Reserved segments", &stats.segment, false),
    ];
    for (name, a, bytes) in rows {
        out.push_str(&rule('-'));
        let f = |v: i64| {
            if bytes {
                format_size(v)
            } else {
                format_count(v)
            }
        };
        for (label, s) in [
            (name, &a.all),
            ("      from large pool", &a.large_pool),
            ("      from small pool", &a.small_pool),
        ] {
            let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let _ = writeln!(
                out,
                "| {:<21} | {:>10} | {:>10} | {:>10} | {:>10} |",
                label,
                f(s.current),
                f(s.peak),
                f(clamp(s.allocated)),
                f(clamp(s.freed))
            );
        }
    }
    out.push_str(&rule('-'));
    let _ = writeln!(
        out,
        "| {:<21} | {:>10} | {:>10} | {:>10} | {:>10} |",
        "Oversize allocations",
        format_count(stats.oversize_allocations.current),
        format_count(stats.oversize_allocations.peak),
        format_count(i64::try_from(stats.oversize_allocations.allocated).unwrap_or(i64::MAX)),
        format_count(i64::try_from(stats.oversize_allocations.freed).unwrap_or(i64::MAX))
    );
    let _ = writeln!(
        out,
        "| {:<21} | {:>10} | {:>10} | {:>10} | {:>10} |",
        "Oversize segments",
        format_count(stats.oversize_segments.current),
        format_count(stats.oversize_segments.peak),
        format_count(i64::try_from(stats.oversize_segments.allocated).unwrap_or(i64::MAX)),
        format_count(i64::try_from(stats.oversize_segments.freed).unwrap_or(i64::MAX))
    );
    out.push_str(&rule('='));
    out
}
