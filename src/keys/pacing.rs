//! How fast the key scan may go: a small controller, pure, fed after every SCAN batch with what
//! that batch cost others, answering how many keys the next SCAN asks for (`COUNT`) and how long
//! to wait before sending it.
//!
//! What a batch cost others comes from two places: the probes (the worst probe latency of the
//! probe intervals that ended since the last batch; they arrive a little late, so a backoff may
//! come one or two batches after the batch that caused it) and the batch's own time on the
//! server (the span between two `TIME`s sent around it, else its round trip, which bounds it),
//! known at once. Either past `--stall-threshold` halves the count and doubles the pause
//! (multiplicative decrease); both under half of it let the count grow back by a quarter of
//! itself, at most an eighth of the ceiling, and the pause shrink by a quarter, so the scan
//! settles just under what the server takes without delaying anyone past the threshold. (Growing
//! by an eighth of the ceiling at once, a `--count 10000` scan went from 10 keys back to 1260,
//! past what the server took, and backed off again: the hostile trial's 45,417 keys in 60 s with
//! 153 stalls, against 400k keys in 3-4 s at `--count 100`.)
//!
//! A delayed probe is the scan's doing only when the scan's batches of that time were long
//! enough to be a good part of why: a single-threaded server keeps a probe waiting behind one of
//! the scan's batches at most as long as it spends on that batch. So a probe delay counts in
//! full when the batches since the previous probe report (and the ones before, as the reports
//! come late) took half the threshold or more, and not at all otherwise. Without that (and with
//! round trips for the batches' time), another client's slow command or a busy host drove the
//! scan down to one key a second: 2,001 keys of a replica took 58 s, on a host that delayed the
//! probes 8 ms before the scan and 24 ms during it.

use std::time::Duration;

/// The most keys the first batch asks for, whatever `--count` allows: each key's commands are
/// pipelined, and the server runs a batch's commands in one go, so a first batch of `--count
/// 100000` held others 75 ms before any probe could say so. The count grows from there.
pub const START_COUNT: u64 = 100;

/// The shortest pause after a backoff.
const MIN_BACKOFF_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between two batches.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What one batch cost others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchCost {
    /// The worst probe latency reported since the previous batch, µs (`None`: no probe
    /// interval ended since).
    pub worst_probe_us: Option<u64>,
    /// What the batch took on the server, µs: the span between two `TIME`s sent around it
    /// (its round trip where TIME is refused).
    pub batch_us: u64,
}

/// The next batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// `SCAN ... COUNT`.
    pub count: u64,
    /// Wait before sending it.
    pub pause: Duration,
}

/// The controller.
#[derive(Debug, Clone)]
pub struct Pacer {
    ceiling: u64,
    threshold_us: u64,
    step: Step,
    backoffs: u64,
    /// The longest batch since the last probe report, and of those before it, µs: what the
    /// probes' latest intervals can have seen of the scan.
    batch_window_us: (u64, u64),
}

impl Pacer {
    /// Starts at `count` (the `--count` ceiling, at least 1), at most [`START_COUNT`], without a
    /// pause.
    pub fn new(count: u64, threshold_us: u64) -> Pacer {
        let ceiling = count.max(1);
        Pacer {
            ceiling,
            threshold_us: threshold_us.max(1),
            step: Step {
                count: ceiling.min(START_COUNT),
                pause: Duration::ZERO,
            },
            backoffs: 0,
            batch_window_us: (0, 0),
        }
    }

    /// The next batch.
    pub fn step(&self) -> Step {
        self.step
    }

    /// Times the scan slowed down.
    pub fn backoffs(&self) -> u64 {
        self.backoffs
    }

    /// Takes what the last batch cost and returns the next batch.
    pub fn observe(&mut self, cost: BatchCost) -> Step {
        let (before, since) = self.batch_window_us;
        let since = since.max(cost.batch_us);
        let charged = match cost.worst_probe_us {
            Some(probe_us) => {
                let busiest_us = before.max(since);
                self.batch_window_us = (since, 0);
                // Shorter batches may add to a probe's wait, but never past half the
                // threshold, where the pace grows anyway.
                if busiest_us >= self.threshold_us / 2 {
                    probe_us
                } else {
                    0
                }
            }
            None => {
                self.batch_window_us = (before, since);
                0
            }
        };
        let worst = charged.max(cost.batch_us);
        let Step { count, pause } = self.step;
        self.step = if worst > self.threshold_us {
            self.backoffs += 1;
            Step {
                count: (count / 2).max(1),
                pause: (pause * 2).clamp(MIN_BACKOFF_PAUSE, MAX_PAUSE),
            }
        } else if worst <= self.threshold_us / 2 {
            let pause = pause * 3 / 4;
            Step {
                count: (count + (count / 4).clamp(1, (self.ceiling / 8).max(1))).min(self.ceiling),
                pause: if pause < Duration::from_millis(1) {
                    Duration::ZERO
                } else {
                    pause
                },
            }
        } else {
            self.step
        };
        self.step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(probe_us: Option<u64>, batch_us: u64) -> BatchCost {
        BatchCost {
            worst_probe_us: probe_us,
            batch_us,
        }
    }

    #[test]
    fn a_quiet_server_is_scanned_at_full_count_without_pauses() {
        let mut pacer = Pacer::new(1000, 1000);
        // From START_COUNT up, a quarter more a batch.
        assert_eq!(pacer.step().count, START_COUNT);
        for _ in 0..20 {
            pacer.observe(cost(Some(200), 300));
        }
        for _ in 0..100 {
            let step = pacer.observe(cost(Some(200), 300));
            assert_eq!(
                step,
                Step {
                    count: 1000,
                    pause: Duration::ZERO
                }
            );
        }
        assert_eq!(pacer.backoffs(), 0);
    }

    #[test]
    fn a_delayed_probe_halves_the_count_and_pauses() {
        let mut pacer = Pacer::new(100, 1000);
        // Batches of 0.6 ms: long enough (half the threshold) to be why a probe waited.
        let step = pacer.observe(cost(Some(5_000), 600));
        assert_eq!(
            step,
            Step {
                count: 50,
                pause: MIN_BACKOFF_PAUSE
            }
        );
        let step = pacer.observe(cost(Some(5_000), 600));
        assert_eq!(
            step,
            Step {
                count: 25,
                pause: MIN_BACKOFF_PAUSE * 2
            }
        );
        assert_eq!(pacer.backoffs(), 2);
    }

    #[test]
    fn a_slow_batch_backs_off_before_the_probes_report() {
        let mut pacer = Pacer::new(100, 1000);
        let step = pacer.observe(cost(None, 2_500));
        assert_eq!(step.count, 50);
        assert!(step.pause >= MIN_BACKOFF_PAUSE);
    }

    #[test]
    fn it_recovers_gradually_and_never_passes_its_ceiling() {
        let mut pacer = Pacer::new(800, 1000);
        for _ in 0..10 {
            pacer.observe(cost(Some(50_000), 600));
        }
        let low = pacer.step();
        assert_eq!(low.count, 1);
        assert_eq!(low.pause, MAX_PAUSE);
        let next = pacer.observe(cost(Some(100), 100));
        assert_eq!(next.count, 2);
        assert!(next.pause < MAX_PAUSE && next.pause > Duration::ZERO);
        for _ in 0..100 {
            pacer.observe(cost(Some(100), 100));
        }
        assert_eq!(
            pacer.step(),
            Step {
                count: 800,
                pause: Duration::ZERO
            }
        );
    }

    #[test]
    fn between_half_and_the_threshold_it_holds() {
        let mut pacer = Pacer::new(1000, 1000);
        pacer.observe(cost(Some(2_000), 600));
        let held = pacer.step();
        assert_eq!(pacer.observe(cost(Some(700), 0)), held);
    }

    #[test]
    fn probes_delayed_by_others_do_not_slow_a_light_scan() {
        // The host or another client delays the probes by 40 ms; the scan's batches take
        // 0.2 ms, which cannot have kept anyone waiting 40 ms.
        let mut pacer = Pacer::new(100, 1000);
        for _ in 0..100 {
            let step = pacer.observe(cost(Some(40_000), 200));
            assert_eq!(
                step,
                Step {
                    count: 100,
                    pause: Duration::ZERO
                }
            );
        }
        assert_eq!(pacer.backoffs(), 0);
        // Once its batches take half the threshold, the same delay is the scan's to answer for.
        assert_eq!(pacer.observe(cost(Some(40_000), 500)).count, 50);
        assert_eq!(pacer.backoffs(), 1);
    }

    #[test]
    fn a_late_report_blames_the_heavy_batches_before_it() {
        let mut pacer = Pacer::new(100, 1000);
        // A batch of 0.7 ms, then light ones: the report that comes two batches later is
        // charged, and so is the next one (its intervals may still cover the heavy batch).
        pacer.observe(cost(None, 700));
        pacer.observe(cost(None, 100));
        assert_eq!(pacer.observe(cost(Some(5_000), 100)).count, 50);
        assert_eq!(pacer.observe(cost(Some(5_000), 100)).count, 25);
        // By the third report only light batches are in view: no more backoff.
        assert_eq!(pacer.observe(cost(Some(5_000), 100)).count, 25 + 6);
        assert_eq!(pacer.backoffs(), 2);
    }

    #[test]
    fn a_large_ceiling_is_won_back_in_steps_the_server_can_take() {
        // A batch of 300 keys takes the threshold (1 ms) on the server: past that a batch
        // delays others past the threshold. The count must settle near it, not swing between
        // a few keys and the ceiling's eighth.
        let mut pacer = Pacer::new(10_000, 1000);
        let mut counts = Vec::new();
        for _ in 0..200 {
            let count = pacer.step().count;
            let batch_us = count * 1000 / 300;
            pacer.observe(cost(Some(batch_us), batch_us));
            counts.push(count);
        }
        let late = &counts[100..];
        assert!(late.iter().all(|&c| (100..=400).contains(&c)), "{late:?}");
    }

    #[test]
    fn a_count_of_one_still_moves() {
        let mut pacer = Pacer::new(0, 0);
        assert_eq!(pacer.step().count, 1);
        assert_eq!(pacer.observe(cost(Some(10), 10)).count, 1);
    }
}
