//! Large writes under load, correlated: pure functions from what was recorded (per-request
//! samples of the written server, its requests per second, the writer's events) to one finding
//! per write. No sockets, threads or clock.

use serde::Serialize;

use crate::record::{WriteOp, WriteRecord};
use crate::units::format_size;

/// One load request of the written server: when its latency started counting and how long it
/// took (until its reply, or until it was given up on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Run clock, µs: the write of the request (closed loop) or its intended send (open loop).
    pub start_us: u64,
    /// Round trip, µs (for a request without reply: until it was counted lost).
    pub latency_us: u32,
    /// False for error replies, broken connections and timeouts.
    pub ok: bool,
}

impl Sample {
    /// When the reply came (or the request was given up), run clock µs.
    pub fn end_us(&self) -> u64 {
        self.start_us + u64::from(self.latency_us)
    }

    /// True when the request was waiting at some moment of `[from_us, to_us]`.
    pub fn overlaps(&self, from_us: u64, to_us: u64) -> bool {
        self.start_us <= to_us && self.end_us() >= from_us
    }
}

/// What the load clients saw during one writer event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteUnderLoad {
    /// Write number, from 1 (as in the prober's writes.csv).
    pub seq: u32,
    /// `set`, `overwrite` or `delete`.
    pub op: WriteOp,
    /// Value size, bytes.
    pub size_bytes: u64,
    /// The writer's own time from its first byte to the reply, ms.
    pub set_ms: f64,
    /// The writer began sending, run clock µs.
    pub start_us: u64,
    /// Its reply came, run clock µs.
    pub reply_us: u64,
    /// The write succeeded.
    pub ok: bool,
    /// Load requests of the written server waiting at some moment of the write's window.
    pub requests_in_window: u64,
    /// The worst latency among them, µs (empty: no request overlapped).
    pub worst_latency_us: Option<u64>,
    /// How many of them took longer than the stall threshold.
    pub delayed_requests: u64,
    /// The second (since the load started) in which the write began.
    pub second: u64,
    /// Seconds the write's window touches.
    pub seconds: u64,
    /// Requests per second of the written server over those seconds.
    pub rps_during: f64,
    /// Requests per second over the neighbouring seconds (one before, one after) that hold no
    /// write; empty when neither is available.
    pub rps_around: Option<f64>,
    /// `(rps_around - rps_during) / rps_around`, percent: the throughput lost (negative: none,
    /// within noise).
    pub throughput_lost_pct: Option<f64>,
    /// `(rps_around - rps_during) × seconds`: requests the write cost the load.
    pub requests_lost: Option<f64>,
}

impl WriteUnderLoad {
    /// `seq:op:size`, as in the timeline's `writes` column.
    pub fn tag(record: &WriteRecord) -> String {
        format!(
            "{}:{}:{}",
            record.seq,
            record.op.name(),
            format_size(record.size_bytes)
        )
    }
}

/// Inputs of [`writes_under_load`].
#[derive(Debug, Clone, Copy)]
pub struct LoadTimeline<'a> {
    /// Run clock of the load's second 0, µs.
    pub load_start_us: u64,
    /// Requests per second of the written server, index = second; only complete seconds.
    pub requests_per_second: &'a [u64],
    /// A request slower than this is delayed, µs.
    pub threshold_us: u64,
}

/// One finding per write event.
pub fn writes_under_load(
    writes: &[WriteRecord],
    samples: &[Sample],
    timeline: LoadTimeline<'_>,
) -> Vec<WriteUnderLoad> {
    let second_of = |us: u64| us.saturating_sub(timeline.load_start_us) / 1_000_000;
    let busy: Vec<(u64, u64)> = writes
        .iter()
        .map(|w| (second_of(w.start_us), second_of(w.reply_us)))
        .collect();
    let has_write = |second: u64| busy.iter().any(|&(a, b)| a <= second && second <= b);
    let rps = |second: u64| timeline.requests_per_second.get(second as usize).copied();

    writes
        .iter()
        .map(|write| {
            let mut in_window = 0u64;
            let mut worst: Option<u64> = None;
            let mut delayed = 0u64;
            for sample in samples {
                if sample.overlaps(write.start_us, write.reply_us) {
                    in_window += 1;
                    let latency = u64::from(sample.latency_us);
                    worst = Some(worst.map_or(latency, |w| w.max(latency)));
                    if latency > timeline.threshold_us {
                        delayed += 1;
                    }
                }
            }
            let first = second_of(write.start_us);
            let last = second_of(write.reply_us);
            let seconds = last - first + 1;
            let during: Option<Vec<u64>> = (first..=last).map(rps).collect();
            let rps_during = during.as_ref().map_or(0.0, |d| {
                d.iter().sum::<u64>() as f64 / d.len().max(1) as f64
            });
            let neighbours: Vec<u64> = [first.checked_sub(1), Some(last + 1)]
                .into_iter()
                .flatten()
                .filter(|&s| !has_write(s))
                .filter_map(rps)
                .collect();
            let rps_around = (!neighbours.is_empty() && during.is_some())
                .then(|| neighbours.iter().sum::<u64>() as f64 / neighbours.len() as f64);
            let lost = rps_around.map(|around| around - rps_during);
            WriteUnderLoad {
                seq: write.seq,
                op: write.op,
                size_bytes: write.size_bytes,
                set_ms: write.set_ms,
                start_us: write.start_us,
                reply_us: write.reply_us,
                ok: write.ok,
                requests_in_window: in_window,
                worst_latency_us: worst,
                delayed_requests: delayed,
                second: first,
                seconds,
                rps_during,
                rps_around,
                throughput_lost_pct: rps_around
                    .zip(lost)
                    .filter(|&(around, _)| around > 0.0)
                    .map(|(around, lost)| 100.0 * lost / around),
                requests_lost: lost.map(|l| l * seconds as f64),
            }
        })
        .collect()
}

/// Column names of `load_writes.csv`; a unit test checks them against [`WriteUnderLoad`].
pub const WRITES_UNDER_LOAD_COLUMNS: &[&str] = &[
    "seq",
    "op",
    "size_bytes",
    "set_ms",
    "start_us",
    "reply_us",
    "ok",
    "requests_in_window",
    "worst_latency_us",
    "delayed_requests",
    "second",
    "seconds",
    "rps_during",
    "rps_around",
    "throughput_lost_pct",
    "requests_lost",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn write(seq: u32, start_us: u64, reply_us: u64) -> WriteRecord {
        WriteRecord {
            seq,
            op: WriteOp::Set,
            size_bytes: 64 << 20,
            start_us,
            sent_us: reply_us,
            reply_us,
            set_ms: (reply_us - start_us) as f64 / 1e3,
            ok: true,
            error: None,
            host_mem_pct: 0.0,
            host_swap_pct: 0.0,
            server_rss_bytes: None,
            key: "k".into(),
            server_exec_us: None,
            server_latency_event_ms: None,
            server_latency_event: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
        }
    }

    fn sample(start_us: u64, latency_us: u32) -> Sample {
        Sample {
            start_us,
            latency_us,
            ok: true,
        }
    }

    #[test]
    fn worst_latency_delays_and_lost_throughput() {
        // Load starts at 1 s on the run clock; the write spans 3.2 s - 3.3 s (load second 2).
        let writes = [write(1, 3_200_000, 3_300_000)];
        let samples = [
            sample(3_000_000, 400),    // before the write
            sample(3_150_000, 60_000), // sent before, answered inside: overlaps
            sample(3_250_000, 51_000), // inside, delayed
            sample(3_299_000, 500),    // inside, fast
            sample(3_400_000, 300),    // after
        ];
        let rps = [1000, 1000, 800, 1000, 1000];
        let found = writes_under_load(
            &writes,
            &samples,
            LoadTimeline {
                load_start_us: 1_000_000,
                requests_per_second: &rps,
                threshold_us: 1_000,
            },
        );
        let f = &found[0];
        assert_eq!(f.requests_in_window, 3);
        assert_eq!(f.worst_latency_us, Some(60_000));
        assert_eq!(f.delayed_requests, 2);
        assert_eq!((f.second, f.seconds), (2, 1));
        assert_eq!(f.rps_during, 800.0);
        assert_eq!(f.rps_around, Some(1000.0));
        assert_eq!(f.throughput_lost_pct, Some(20.0));
        assert_eq!(f.requests_lost, Some(200.0));
    }

    #[test]
    fn neighbours_holding_writes_or_missing_are_skipped() {
        // Two writes in seconds 1 and 2; the second's only clean neighbour is second 3, the
        // first's is second 0.
        let writes = [
            write(1, 1_100_000, 1_200_000),
            write(2, 2_100_000, 2_900_000),
        ];
        let rps = [900, 500, 600, 1000];
        let found = writes_under_load(
            &writes,
            &[],
            LoadTimeline {
                load_start_us: 0,
                requests_per_second: &rps,
                threshold_us: 1_000,
            },
        );
        assert_eq!(found[0].rps_around, Some(900.0));
        assert_eq!(found[1].rps_around, Some(1000.0));
        assert_eq!(found[0].worst_latency_us, None);
        assert_eq!(found[0].requests_in_window, 0);
        // A write in a second not yet complete has no throughput figure.
        let late = writes_under_load(
            &[write(3, 9_000_000, 9_100_000)],
            &[],
            LoadTimeline {
                load_start_us: 0,
                requests_per_second: &rps,
                threshold_us: 1_000,
            },
        );
        assert_eq!(late[0].rps_around, None);
        assert_eq!(late[0].throughput_lost_pct, None);
    }

    #[test]
    fn a_write_spanning_seconds_averages_them() {
        let writes = [write(1, 1_500_000, 2_500_000)];
        let rps = [1000, 700, 900, 1000];
        let found = writes_under_load(
            &writes,
            &[],
            LoadTimeline {
                load_start_us: 0,
                requests_per_second: &rps,
                threshold_us: 1_000,
            },
        );
        assert_eq!(found[0].seconds, 2);
        assert_eq!(found[0].rps_during, 800.0);
        assert_eq!(found[0].rps_around, Some(1000.0));
        assert_eq!(found[0].requests_lost, Some(400.0));
    }

    #[test]
    fn columns_match_the_struct() {
        let found = writes_under_load(
            &[write(1, 0, 1)],
            &[],
            LoadTimeline {
                load_start_us: 0,
                requests_per_second: &[],
                threshold_us: 1,
            },
        );
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.serialize(&found[0]).unwrap();
        let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        assert_eq!(header, WRITES_UNDER_LOAD_COLUMNS);
        assert_eq!(WriteUnderLoad::tag(&write(7, 0, 1)), "7:set:64M");
    }
}
