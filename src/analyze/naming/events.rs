//! Naming by the LATENCY monitor's events (`LATENCY LATEST`): every event in the stall's
//! seconds short enough to be part of it, the largest first.

use super::label::printable;
use super::span::{WallSpan, overlaps, too_long};

/// One row of `LATENCY LATEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyEvent {
    /// Event name: `command`, `fast-command`, `expire-cycle`, ...
    pub name: String,
    /// Unix time of the latest spike, s.
    pub at_unix_s: i64,
    /// The latest spike, ms.
    pub latest_ms: i64,
    /// The all-time worst, ms.
    pub max_ms: i64,
}

/// Most events named for one stall.
const MAX_EVENTS: usize = 3;

pub(super) fn event_label(stall: WallSpan, events: &[LatencyEvent]) -> Option<String> {
    let length_us = stall.duration_us();
    let mut found: Vec<&LatencyEvent> = events
        .iter()
        .filter(|event| {
            let latest_us = event.latest_ms.saturating_mul(1_000);
            overlaps(event.at_unix_s, latest_us, stall) && !too_long(latest_us, length_us)
        })
        .collect();
    found.sort_by(|a, b| {
        b.latest_ms
            .cmp(&a.latest_ms)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.at_unix_s.cmp(&b.at_unix_s))
    });
    found.dedup_by(|a, b| a.name == b.name && a.at_unix_s == b.at_unix_s);
    if found.is_empty() {
        return None;
    }
    let parts: Vec<String> = found
        .iter()
        .take(MAX_EVENTS)
        .map(|event| format!("{} {}ms", printable(event.name.as_bytes()), event.latest_ms))
        .collect();
    Some(parts.join(", "))
}

/// Rows of `after` that are new or changed since `before` (a row changes when its latest
/// second or figure does).
pub fn latency_changes(before: &[LatencyEvent], after: &[LatencyEvent]) -> Vec<LatencyEvent> {
    after
        .iter()
        .filter(|row| {
            !before.iter().any(|b| {
                b.name == row.name && b.at_unix_s == row.at_unix_s && b.latest_ms == row.latest_ms
            })
        })
        .cloned()
        .collect()
}
