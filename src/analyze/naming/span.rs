//! The timing rule every source of evidence is matched by: the server stamps what it logs with
//! the whole second in which it ended, so a logged run is placed only to within that second.

/// A stall's interval on the wall clock (unix time), to match against the server's own stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallSpan {
    /// Start, unix µs.
    pub start_unix_us: i64,
    /// End, unix µs.
    pub end_unix_us: i64,
}

impl WallSpan {
    /// Length, µs (0 when the end is before the start).
    pub fn duration_us(&self) -> i64 {
        self.end_unix_us.saturating_sub(self.start_unix_us).max(0)
    }
}

/// Slack on the upper bound of a match, µs: the probes' interval at slow rates, ms-truncated
/// latency figures.
pub(super) const MATCH_SLACK_US: i64 = 2_000;

/// Whether a run of `duration_us` that ended within the second `logged_unix_s` can overlap the
/// stall.
pub(super) fn overlaps(logged_unix_s: i64, duration_us: i64, stall: WallSpan) -> bool {
    let second_start = logged_unix_s.saturating_mul(1_000_000);
    let earliest_start = second_start.saturating_sub(duration_us.max(0));
    let latest_end = second_start.saturating_add(1_000_000);
    earliest_start <= stall.end_unix_us && latest_end > stall.start_unix_us
}

/// Whether a command of `duration_us` accounts for a silence of `length_us`.
pub(super) fn explains(duration_us: i64, length_us: i64) -> bool {
    duration_us.saturating_mul(2) >= length_us && !too_long(duration_us, length_us)
}

/// A run longer than the silence by more than a quarter and the slack would have made a longer
/// silence.
pub(super) fn too_long(duration_us: i64, length_us: i64) -> bool {
    duration_us
        > length_us
            .saturating_add(length_us / 4)
            .saturating_add(MATCH_SLACK_US)
}
