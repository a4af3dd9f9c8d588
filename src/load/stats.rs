//! Load figures: per-second aggregates with their HdrHistograms, the timeline rows built from
//! them, and the seed's block (counts, rates, round-trip percentiles) per server and in total.

use serde::{Deserialize, Serialize};

pub use crate::measure::generator::{SecondAgg, new_histogram, record};

/// One row of `load_timeline.csv`: one second, for all servers together (`server = all`) or
/// for one of several.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadSecondRow {
    /// Seconds since the load started (the row covers `[second, second + 1)`; the last row
    /// may be partial and also holds the replies drained after the stop).
    pub second: u64,
    /// Requests answered as expected in this second (counted when the reply came).
    pub requests: u64,
    /// Value bytes transferred (GET payloads received, SET values sent).
    pub bytes: u64,
    /// Median round-trip latency, µs (empty in a second without an answered request: after
    /// the server went, say).
    pub p50_us: Option<u64>,
    /// 99th percentile round-trip latency, µs (empty as `p50_us`).
    pub p99_us: Option<u64>,
    /// Worst round-trip latency, µs (empty as `p50_us`).
    pub max_us: Option<u64>,
    /// Error replies and requests lost with a broken connection.
    pub errors: u64,
    /// `all`, or the server's `host:port` (per-server rows only with several `--url`).
    pub server: String,
    /// Requests unanswered within `--timeout`.
    pub timeouts: u64,
    /// GETs of missing keys (nil replies; counted in `requests` too).
    pub misses: u64,
    /// Requests slower than `--stall-threshold`.
    pub delayed: u64,
    /// Start of the second on the run clock, µs (the clock of `load_writes.csv` and run.json).
    pub start_us: u64,
    /// Writer events whose window (start to reply) overlaps this second, as `seq:op:size`,
    /// space-separated; empty when none.
    pub writes: String,
    /// CPU use of the busiest load thread in this second, percent (empty where unknown).
    pub client_cpu_pct: Option<f64>,
    /// Longest time a load thread waited for a CPU (runnable, not running) in this second,
    /// percent (empty where unknown): high when the client host is oversubscribed.
    pub client_wait_pct: Option<f64>,
}

impl LoadSecondRow {
    /// The row of one second's aggregate.
    pub fn from_agg(
        second: u64,
        server: &str,
        agg: &SecondAgg,
        start_us: u64,
        cpu: Option<f64>,
        wait: Option<f64>,
    ) -> LoadSecondRow {
        LoadSecondRow {
            second,
            requests: agg.requests,
            bytes: agg.bytes,
            p50_us: (agg.requests > 0).then(|| agg.quantile_us(0.5)),
            p99_us: (agg.requests > 0).then(|| agg.quantile_us(0.99)),
            max_us: (agg.requests > 0).then(|| agg.max_us()),
            errors: agg.errors,
            server: server.to_string(),
            timeouts: agg.timeouts,
            misses: agg.misses,
            delayed: agg.delayed,
            start_us,
            writes: String::new(),
            client_cpu_pct: cpu.map(|c| (c * 10.0).round() / 10.0),
            client_wait_pct: wait.map(|c| (c * 10.0).round() / 10.0),
        }
    }
}

/// The seed's block for one server or for all: what `probe load` prints and run.json keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadBlock {
    /// `all`, or the server's `host:port`.
    pub server: String,
    /// Connections.
    pub clients: u32,
    /// Length of the load, seconds (the planned `--duration` unless stopped early).
    pub runtime_s: f64,
    /// Requests answered as expected.
    pub total_requests: u64,
    /// `total_requests / runtime_s`.
    pub avg_rps: f64,
    /// Value bytes transferred (GET payloads received, SET values sent).
    pub bytes_transferred: u64,
    /// The same in MB of 2^20 bytes, as the seed counted them.
    pub mb_transferred: f64,
    /// `mb_transferred / runtime_s`.
    pub mb_per_s: f64,
    /// Round-trip latency percentiles, µs.
    pub p50_us: u64,
    /// 75th percentile, µs.
    pub p75_us: u64,
    /// 90th percentile, µs.
    pub p90_us: u64,
    /// 95th percentile, µs.
    pub p95_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// 99.9th percentile, µs.
    pub p999_us: u64,
    /// Worst, µs.
    pub max_us: u64,
    /// Error replies and requests lost with a broken connection.
    pub errors: u64,
    /// Requests unanswered within `--timeout`.
    pub timeouts: u64,
    /// GETs of missing keys.
    pub misses: u64,
    /// Requests slower than `--stall-threshold`.
    pub delayed: u64,
    /// Cluster `MOVED` replies, each followed to the node it names (0 while the slot map holds).
    pub moved: u64,
    /// Cluster `ASK` replies, each followed (after `ASKING`).
    pub asked: u64,
    /// On a cluster: the node's part, `master` or `replica`, and its shard (`master, shard 0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

const MIB: f64 = (1u64 << 20) as f64;

impl LoadBlock {
    /// The block of a whole-run aggregate.
    pub fn from_agg(server: &str, clients: u32, runtime_s: f64, agg: &SecondAgg) -> LoadBlock {
        let per_s = |x: f64| if runtime_s > 0.0 { x / runtime_s } else { 0.0 };
        let mb = agg.bytes as f64 / MIB;
        LoadBlock {
            server: server.to_string(),
            clients,
            runtime_s,
            total_requests: agg.requests,
            avg_rps: per_s(agg.requests as f64),
            bytes_transferred: agg.bytes,
            mb_transferred: mb,
            mb_per_s: per_s(mb),
            p50_us: agg.quantile_us(0.5),
            p75_us: agg.quantile_us(0.75),
            p90_us: agg.quantile_us(0.9),
            p95_us: agg.quantile_us(0.95),
            p99_us: agg.quantile_us(0.99),
            p999_us: agg.quantile_us(0.999),
            max_us: agg.max_us(),
            errors: agg.errors,
            timeouts: agg.timeouts,
            misses: agg.misses,
            delayed: agg.delayed,
            moved: agg.moved,
            asked: agg.asked,
            role: None,
        }
    }

    /// The seed's lines, line for line, then errors and timeouts (and misses when any).
    pub fn lines(&self) -> Vec<String> {
        let runtime = if self.runtime_s.fract() == 0.0 {
            format!("{}", self.runtime_s as u64)
        } else {
            format!("{:.2}", self.runtime_s)
        };
        let mut lines = vec![
            format!("Concurrent clients: {}", self.clients),
            format!("Runtime: {runtime} s"),
            format!("Total requests: {}", self.total_requests),
            format!("Requests per second: {:.2}", self.avg_rps),
            format!("Bytes transferred: {:.2} MiB", self.mb_transferred),
            format!("Bytes per second: {:.2} MiB/s", self.mb_per_s),
            format!(
                "Roundtrip latencies: 50th: {}us 75th: {}us 90th: {}us 95th: {}us 99th: {}us 99.9: {}us",
                self.p50_us, self.p75_us, self.p90_us, self.p95_us, self.p99_us, self.p999_us
            ),
            format!("Errors: {}", self.errors),
            format!("Timeouts: {}", self.timeouts),
        ];
        if self.misses > 0 {
            lines.push(format!(
                "Misses: {} (GETs of keys not there: evicted, removed or never populated)",
                self.misses
            ));
        }
        if self.moved + self.asked > 0 {
            lines.push(format!(
                "Redirects: {} MOVED, {} ASK (the slot map changed during the run; each request sent again where it said)",
                self.moved, self.asked
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_prints_the_seeds_lines() {
        let mut agg = SecondAgg::new();
        for latency in 1..=1000 {
            agg.record_ok(latency, 2560, 1000);
        }
        let block = LoadBlock::from_agg("all", 50, 30.0, &agg);
        let lines = block.lines();
        assert_eq!(lines[0], "Concurrent clients: 50");
        assert_eq!(lines[1], "Runtime: 30 s");
        assert_eq!(lines[2], "Total requests: 1000");
        assert_eq!(lines[3], "Requests per second: 33.33");
        assert_eq!(lines[4], "Bytes transferred: 2.44 MiB");
        assert_eq!(lines[5], "Bytes per second: 0.08 MiB/s");
        assert_eq!(
            lines[6],
            "Roundtrip latencies: 50th: 500us 75th: 750us 90th: 900us 95th: 950us 99th: 990us 99.9: 999us"
        );
        assert_eq!(lines[7], "Errors: 0");
        assert_eq!(lines[8], "Timeouts: 0");
        assert_eq!(lines.len(), 9);
        let short = LoadBlock::from_agg("all", 4, 2.5, &agg);
        assert_eq!(short.lines()[1], "Runtime: 2.50 s");
        assert_eq!(block.delayed, 0);
    }

    #[test]
    fn the_seeds_bytes_are_mebibytes() {
        // The seed: 2937017 requests of 1024..4096-byte values (mean 2560) printed 7170.76 MB.
        let mut agg = SecondAgg::new();
        agg.requests = 2_937_017;
        agg.bytes = 2_937_017 * 2560;
        let block = LoadBlock::from_agg("all", 50, 30.0, &agg);
        assert_eq!(format!("{:.2}", block.mb_transferred), "7170.45");
        assert_eq!(format!("{:.2}", block.avg_rps), "97900.57");
    }

    #[test]
    fn large_latencies_are_kept_not_clamped() {
        let mut agg = SecondAgg::new();
        agg.record_ok(100, 0, 1000);
        agg.record_ok(250_000, 0, 1000);
        assert_eq!(agg.hist.min(), 100);
        assert!(agg.hist.max() >= 250_000, "{}", agg.hist.max());
        assert_eq!(agg.quantile_us(1.0), agg.hist.max());
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = SecondAgg::new();
        a.record_ok(100, 10, 50);
        a.errors = 1;
        let mut b = SecondAgg::new();
        b.record_ok(10, 5, 50);
        b.timeouts = 2;
        b.misses = 1;
        a.merge(&b);
        assert_eq!(
            (
                a.requests, a.bytes, a.errors, a.timeouts, a.misses, a.delayed
            ),
            (2, 15, 1, 2, 1, 1)
        );
        assert_eq!(a.hist.len(), 2);
        let row = LoadSecondRow::from_agg(3, "all", &a, 4_000_000, Some(12.34), None);
        assert_eq!(row.max_us, Some(100));
        assert_eq!(row.client_cpu_pct, Some(12.3));
    }

    #[test]
    fn timeline_columns_match_the_struct() {
        let row = LoadSecondRow::from_agg(0, "all", &SecondAgg::new(), 0, None, None);
        // A second without an answered request has no latency (it read 0 µs).
        assert_eq!((row.p50_us, row.p99_us, row.max_us), (None, None, None));
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.serialize(&row).unwrap();
        let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        assert_eq!(header, crate::output::export::columns::LOAD_TIMELINE);
    }
}
