//! An observe run's wait of the server's main thread for a CPU inside its stalls, over a run of
//! any length: the thread's cumulative wait is read at each settle (every 50 ms), and the wait
//! inside stalls is the sum over those intervals of the lesser of the interval's wait and the
//! stalls' time in it (an upper bound: the wait could have fallen outside them).
//!
//! An hour-long watch would keep 72,000 readings and every stall's span; the readings kept to
//! the end were halved at 65,536 (each interval twice as long), which loosened the bound toward
//! the whole wait after hours (hostile review, F3). Instead, the intervals older than
//! [`SETTLED_AFTER_US`] are summed as they age, with the spans they needed, and forgotten: a
//! stall that began before then has ended and been recorded (the probes give up on a server
//! that answers none of them after `--timeout`, and the run ends).

use super::report::cpu_wait_in_stalls_ms;

/// How old an interval is before it is summed and its readings forgotten: no stall still open
/// began before then.
const SETTLED_AFTER_US: u64 = 10 * 60 * 1_000_000;

/// How many readings are kept before the old ones are summed: twice the settled age's worth
/// at one per 50 ms settle, so that summing is rare.
const FOLD_AT: usize = 24_000;

/// The readings, the stalls' spans not yet forgotten, and what the forgotten ones summed to.
#[derive(Debug, Default)]
pub(super) struct StallCpuWait {
    /// (run clock µs, cumulative wait ns), oldest first.
    samples: Vec<(u64, u64)>,
    /// The stalls found, (start, end) on the run clock, µs, each once, in the order found.
    spans: Vec<(u64, u64)>,
    /// The wait inside stalls over the intervals already summed, ms.
    folded_ms: f64,
}

impl StallCpuWait {
    /// Takes the stalls found since the last call.
    pub(super) fn add_stalls(&mut self, spans: impl IntoIterator<Item = (u64, u64)>) {
        self.spans.extend(spans);
    }

    /// Adds a reading; once many are kept, sums the intervals older than [`SETTLED_AFTER_US`]
    /// and forgets them, with the stall spans that end before what is kept.
    pub(super) fn add(&mut self, reading: (u64, u64)) {
        self.samples.push(reading);
        if self.samples.len() < FOLD_AT {
            return;
        }
        let settled_before = reading.0.saturating_sub(SETTLED_AFTER_US);
        // The readings at or before that time: the intervals between them are settled.
        let settled = self.samples.partition_point(|s| s.0 <= settled_before);
        if settled < 2 {
            return;
        }
        let last = settled - 1;
        self.folded_ms += cpu_wait_in_stalls_ms(&self.samples[..=last], &self.spans);
        self.samples.drain(..last);
        // A span that crosses the first reading kept counts in the kept intervals only for its
        // part after it (each interval takes the part of a span inside it).
        let from = self.samples[0].0;
        self.spans.retain(|&(_, end)| end > from);
    }

    /// The wait inside the stalls over the whole run, ms.
    pub(super) fn total_ms(&self) -> f64 {
        self.folded_ms + cpu_wait_in_stalls_ms(&self.samples, &self.spans)
    }

    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        (self.samples.len(), self.spans.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two hours of readings every 50 ms with 1 ms of waiting in each, and a 20 ms stall every
    /// minute: the readings kept stay bounded, the forgotten spans go, and the bound is what
    /// all the readings give (1 ms per stall), not the loosened one of halved readings.
    #[test]
    fn an_unending_watch_keeps_a_bounded_number_of_readings_and_an_exact_bound() {
        let mut wait = StallCpuWait::default();
        let mut all_spans = Vec::new();
        let mut all = Vec::new();
        for i in 0..144_000u64 {
            let at = i * 50_000;
            if i % 1_200 == 600 {
                // A stall inside this interval's predecessor, recorded once it ended.
                let span = (at - 40_000, at - 20_000);
                wait.add_stalls([span]);
                all_spans.push(span);
            }
            wait.add((at, i * 1_000_000));
            all.push((at, i * 1_000_000));
            assert!(wait.kept().0 <= FOLD_AT, "{:?}", wait.kept());
        }
        assert!(wait.kept().1 < 30, "{:?} kept", wait.kept());
        let exact = cpu_wait_in_stalls_ms(&all, &all_spans);
        assert_eq!(all_spans.len(), 120);
        assert!((exact - 120.0).abs() < 1e-9, "{exact}");
        assert!(
            (wait.total_ms() - exact).abs() < 1e-6,
            "{}",
            wait.total_ms()
        );
    }

    /// A stall that spans the readings kept and those summed counts once, whole.
    #[test]
    fn a_stall_across_the_summed_readings_counts_once() {
        let mut wait = StallCpuWait::default();
        let mut all = Vec::new();
        // Every interval waits all its 50 ms; one stall of 30 s sits where the summing cuts.
        let total = FOLD_AT as u64 + 10;
        let cut_at = (total - 1) * 50_000 - SETTLED_AFTER_US;
        let span = (cut_at - 15_000_000, cut_at + 15_000_000);
        wait.add_stalls([span]);
        for i in 0..total {
            let reading = (i * 50_000, i * 50_000_000);
            wait.add(reading);
            all.push(reading);
        }
        assert!(wait.kept().0 < total as usize, "nothing was summed");
        let exact = cpu_wait_in_stalls_ms(&all, &[span]);
        assert!((exact - 30_000.0).abs() < 1e-6, "{exact}");
        assert!(
            (wait.total_ms() - exact).abs() < 1e-6,
            "{}",
            wait.total_ms()
        );
    }
}
