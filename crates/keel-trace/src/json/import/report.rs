//! The import report: every element of `traceEvents` counted, imported or
//! skipped with a reason, and what the file turned out to be.

use std::collections::HashMap;

use super::super::stream::Ending;
use crate::model::ImportReport;

/// The longest list of distinct skip reasons kept; more are counted under
/// one "other" reason.
const MAX_REASONS: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Report {
    /// Elements of `traceEvents` read.
    pub events: u64,
    skipped: HashMap<String, u64>,
    /// The file is PyTorch's profiler's (Kineto's fields or categories).
    pub kineto: bool,
}

impl Report {
    /// One event skipped for `reason`.
    pub(super) fn skip(&mut self, reason: String) {
        self.skip_n(reason, 1);
    }

    /// `n` events skipped for `reason` (none: nothing noted).
    pub(super) fn skip_n(&mut self, reason: String, n: u64) {
        if n == 0 {
            return;
        }
        if self.skipped.len() >= MAX_REASONS && !self.skipped.contains_key(&reason) {
            *self.skipped.entry("other reasons".to_owned()).or_default() += n;
        } else {
            *self.skipped.entry(reason).or_default() += n;
        }
    }

    /// The report of an input that ended as `ending`, compressed with
    /// `compression`.
    pub(super) fn close(self, ending: Ending, compression: Option<&str>) -> ImportReport {
        let skipped_total: u64 = self.skipped.values().sum();
        let mut skipped: Vec<(String, u64)> = self.skipped.into_iter().collect();
        skipped.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut format = if self.kineto {
            "Chrome trace (PyTorch/Kineto)".to_owned()
        } else {
            "Chrome trace".to_owned()
        };
        if let Some(c) = compression {
            format.push_str(", ");
            format.push_str(c);
        }
        if ending == Ending::Unterminated {
            format.push_str(", unterminated");
        }
        ImportReport {
            format,
            events: self.events,
            imported: self.events.saturating_sub(skipped_total),
            skipped,
        }
    }
}
