//! Observe mode's `--report-every` lines: the intervals of the run gathered into one line per
//! that long, as redis-cli --latency-history prints them.

use crate::output::report;

/// Intervals gathered into one `--report-every` line.
pub(super) struct History {
    every_us: u64,
    latency: Option<hdrhistogram::Histogram<u64>>,
    from_us: Option<u64>,
    errors: u64,
    stalls: u64,
    stall_ms: f64,
    longest_stall_ms: f64,
}

impl History {
    pub(super) fn new(every: std::time::Duration) -> History {
        History {
            every_us: every.as_micros() as u64,
            latency: None,
            from_us: None,
            errors: 0,
            stalls: 0,
            stall_ms: 0.0,
            longest_stall_ms: 0.0,
        }
    }

    /// Adds an interval of a run that started at `started_unix_us`; returns a line when `every`
    /// is covered.
    pub(super) fn add(
        &mut self,
        interval: &crate::analyze::findings::Interval,
        started_unix_us: u64,
    ) -> Option<String> {
        let from = *self.from_us.get_or_insert(interval.start_us);
        match self.latency.as_mut() {
            Some(hist) => {
                let _ = hist.add(&interval.latency);
            }
            None => self.latency = Some(interval.latency.clone()),
        }
        self.errors += interval.errors;
        self.stalls += interval.stalls;
        self.stall_ms += interval.stall_ms;
        self.longest_stall_ms = self.longest_stall_ms.max(interval.longest_stall_ms);
        let end = interval.start_us + interval.length_us;
        if end - from < self.every_us {
            return None;
        }
        let latency = self.latency.take()?;
        let line = report::report_every_line(
            &crate::measure::clock::wall_time(started_unix_us + end),
            (end - from) as f64 / 1e6,
            &latency,
            self.errors,
            self.stalls,
            self.stall_ms,
            self.longest_stall_ms,
        );
        *self = History::new(std::time::Duration::from_micros(self.every_us));
        Some(line)
    }
}
