//! Naming by the server's longest event-loop cycle (INFO DEBUG `eventloop_duration_max`) in the
//! poll windows a stall falls in.

use super::span::{MATCH_SLACK_US, WallSpan, too_long};

/// One poll window's longest event-loop cycle: every cycle that ended between two polls
/// (`start_unix_us`, `end_unix_us`] of the server's wall clock, as this host reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopWindow {
    /// The previous poll's start, µs since the Unix epoch.
    pub start_unix_us: i64,
    /// This poll's start, µs since the Unix epoch (its INFO reading came a little later).
    pub end_unix_us: i64,
    /// The longest cycle, µs.
    pub max_us: u64,
}

/// The event loop's longest cycle in the poll windows a stall falls in, as `event loop max
/// 50.1ms`: a cycle as long as the stall says the server was busy in one go; a much shorter one
/// says the server was not what held the others (the host, the network). `None` when no window
/// covers the stall, or its longest cycle is too long to be this stall's (it made a longer
/// silence of its own in the same window).
pub fn eventloop_label(stall: WallSpan, windows: &[LoopWindow]) -> Option<String> {
    let length_us = stall.duration_us();
    let max_us = windows
        .iter()
        .filter(|w| {
            w.start_unix_us < stall.end_unix_us
                && w.end_unix_us.saturating_add(MATCH_SLACK_US) > stall.start_unix_us
        })
        .map(|w| w.max_us)
        .max()?;
    (!too_long(i64::try_from(max_us).unwrap_or(i64::MAX), length_us))
        .then(|| format!("event loop max {:.1}ms", max_us as f64 / 1e3))
}
