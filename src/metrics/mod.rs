//! The run's figures for Prometheus while it goes (`--metrics-addr`): probe latency as a
//! histogram, probes, probe errors, stalls and stall seconds as counters, and the longest recent
//! stall as a gauge, every one labelled with the measured server's `target="host:port"`.
//!
//! This file registers and updates them (no sockets, no threads, no clock: the caller passes
//! the time); [`serve`] answers `GET /metrics` on a thread of its own. Only the collector
//! updates them, and every update is an atomic add or store: a scrape never makes it wait, and
//! the probe threads never see the metrics at all. A scrape may land between the updates of one
//! probe and show its bucket before its sum; `_count` is the buckets' total, so it always
//! matches the `+Inf` bucket.

pub mod serve;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::correlate::Stall;
use crate::record::ProbeRecord;

pub use serve::{MetricsServer, MetricsServing};

/// Upper bounds of the latency histogram's buckets, µs: 1-2-5 steps from 10 µs (about a
/// loopback round trip) to 10 s; slower replies (up to `--timeout`) count in `+Inf`.
pub const LATENCY_BOUNDS_US: [u64; 19] = [
    10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000,
    500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
];

/// How long a stall stays in `holprobe_longest_stall_seconds` after it was counted, µs. Scraped
/// at least this often, the gauge shows every stall; the counters catch them all either way.
pub const LONGEST_STALL_WINDOW_US: u64 = 10_000_000;

/// Prefix of every metric name.
pub const METRIC_PREFIX: &str = "holprobe";

/// The run's metrics: the handles the collector updates (the registry holds clones of them).
#[derive(Debug)]
pub struct RunMetrics {
    probes: Counter,
    probe_errors: Counter,
    latency: LatencyHistogram,
    stalls: Counter,
    stall_seconds: Counter<f64, AtomicU64>,
    longest_stall: Gauge<f64, AtomicU64>,
    recent_stalls: RecentStalls,
}

impl RunMetrics {
    /// Registers every metric under `holprobe_`, labelled `target` (the server's `host:port`,
    /// never a password), and returns the registry to serve with the handles to update.
    pub fn register(target: &str) -> (Registry, RunMetrics) {
        let labels = [(Cow::Borrowed("target"), Cow::Owned(target.to_string()))];
        let mut registry = Registry::with_prefix_and_labels(METRIC_PREFIX, labels.into_iter());
        let metrics = RunMetrics {
            probes: Counter::default(),
            probe_errors: Counter::default(),
            latency: LatencyHistogram::default(),
            stalls: Counter::default(),
            stall_seconds: Counter::default(),
            longest_stall: Gauge::default(),
            recent_stalls: RecentStalls::new(LONGEST_STALL_WINDOW_US),
        };
        registry.register_with_unit(
            "probe_latency",
            "Open-loop latency of answered probes: from the intended send time to the reply",
            Unit::Seconds,
            metrics.latency.clone(),
        );
        registry.register(
            "probes",
            "Probes recorded, answered or not",
            metrics.probes.clone(),
        );
        registry.register(
            "probe_errors",
            "Probes that got an error reply or no reply",
            metrics.probe_errors.clone(),
        );
        registry.register(
            "stalls",
            "Stall episodes (the server answered no probe for longer than --stall-threshold while one waited), counted once final",
            metrics.stalls.clone(),
        );
        registry.register_with_unit(
            "stall",
            "Total length of the counted stall episodes",
            Unit::Seconds,
            metrics.stall_seconds.clone(),
        );
        registry.register_with_unit(
            "longest_stall",
            "Longest stall counted in the last 10 s (0 when none)",
            Unit::Seconds,
            metrics.longest_stall.clone(),
        );
        (registry, metrics)
    }

    /// Counts one recorded probe; an answered one also goes into the latency histogram.
    pub fn observe_probe(&self, probe: &ProbeRecord) {
        self.probes.inc();
        if !probe.ok {
            self.probe_errors.inc();
        } else if let Some(latency_us) = probe.latency_us {
            self.latency.observe_us(latency_us);
        }
    }

    /// Counts one stall episode that became final at `now_us` (run clock).
    pub fn observe_stall(&mut self, stall: &Stall, now_us: u64) {
        let duration_us = stall.end_us.saturating_sub(stall.start_us);
        self.stalls.inc();
        self.stall_seconds.inc_by(duration_us as f64 / 1e6);
        self.recent_stalls.push(now_us, duration_us);
        self.refresh(now_us);
    }

    /// Brings the longest-stall gauge up to `now_us`: stalls counted longer ago than
    /// [`LONGEST_STALL_WINDOW_US`] leave it.
    pub fn refresh(&mut self, now_us: u64) {
        let longest_us = self.recent_stalls.longest_us(now_us);
        self.longest_stall.set(longest_us as f64 / 1e6);
    }
}

/// The stalls counted within a sliding window, for the longest-stall gauge.
#[derive(Debug, Clone)]
pub struct RecentStalls {
    window_us: u64,
    /// (counted at, duration), µs, in the order counted.
    stalls: VecDeque<(u64, u64)>,
}

impl RecentStalls {
    /// An empty window of `window_us`.
    pub fn new(window_us: u64) -> RecentStalls {
        RecentStalls {
            window_us,
            stalls: VecDeque::new(),
        }
    }

    /// A stall of `duration_us` counted at `counted_us`.
    pub fn push(&mut self, counted_us: u64, duration_us: u64) {
        self.stalls.push_back((counted_us, duration_us));
    }

    /// The longest stall counted in the window ending at `now_us` (0 when none); forgets older
    /// ones.
    pub fn longest_us(&mut self, now_us: u64) -> u64 {
        let since = now_us.saturating_sub(self.window_us);
        while self
            .stalls
            .front()
            .is_some_and(|&(counted_us, _)| counted_us < since)
        {
            self.stalls.pop_front();
        }
        self.stalls.iter().map(|&(_, d)| d).max().unwrap_or(0)
    }
}

/// A latency histogram in seconds whose updates are atomic adds. (prometheus-client's own
/// `Histogram` takes a mutex, which a scrape holds while it encodes: the collector would wait
/// for it.)
#[derive(Debug, Clone, Default)]
pub struct LatencyHistogram {
    inner: Arc<HistogramCounts>,
}

#[derive(Debug, Default)]
struct HistogramCounts {
    /// One per bound of [`LATENCY_BOUNDS_US`], then `+Inf`; not cumulative.
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl LatencyHistogram {
    /// Adds one latency, µs.
    pub fn observe_us(&self, latency_us: u64) {
        let bucket = LATENCY_BOUNDS_US.partition_point(|&bound| bound < latency_us);
        self.inner.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.inner.sum_us.fetch_add(latency_us, Ordering::Relaxed);
    }

    /// (upper bound in seconds, count in that bucket alone), the last bound `+Inf`.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BOUNDS_US
            .iter()
            .map(|&bound| bound as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.inner.buckets)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect()
    }

    /// Sum of the latencies, seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.inner.sum_us.load(Ordering::Relaxed) as f64 / 1e6
    }
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets = self.buckets();
        let count = buckets.iter().map(|&(_, n)| n).sum();
        encoder.encode_histogram::<NoLabelSet>(self.sum_seconds(), count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The two text formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (`Accept: application/openmetrics-text`, what Prometheus asks for).
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (anything else: curl, a browser).
    Prometheus,
}

impl Format {
    /// The format an `Accept` header asks for.
    pub fn for_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The registry's metrics as text.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut text, registry)?,
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, registry)?
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ProbeCmd;

    fn probe(latency_us: Option<u64>, ok: bool) -> ProbeRecord {
        ProbeRecord {
            thread: 0,
            seq: 0,
            cmd: ProbeCmd::Ping,
            intended_us: 0,
            sent_us: 0,
            reply_us: latency_us,
            latency_us,
            ok,
            error: (!ok).then(|| "ERR".to_string()),
            read_us: latency_us,
        }
    }

    fn stall(start_us: u64, end_us: u64) -> Stall {
        Stall {
            start_us,
            end_us,
            duration_ms: (end_us - start_us) as f64 / 1e3,
            probes_delayed: 1,
            write_seq: None,
        }
    }

    /// The value of the sample line that starts with `name_and_labels` followed by a space.
    fn sample(text: &str, name_and_labels: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no sample {name_and_labels} in:\n{text}"))
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn every_metric_is_named_and_labelled_with_the_target() {
        let (registry, metrics) = RunMetrics::register("db1:6379");
        metrics.observe_probe(&probe(Some(30), true));
        for format in [Format::OpenMetrics, Format::Prometheus] {
            let text = encode(&registry, format).unwrap();
            for name in [
                "holprobe_probes_total",
                "holprobe_probe_errors_total",
                "holprobe_stalls_total",
                "holprobe_stall_seconds_total",
                "holprobe_longest_stall_seconds",
                "holprobe_probe_latency_seconds_count",
                "holprobe_probe_latency_seconds_sum",
            ] {
                let labelled = format!("{name}{{target=\"db1:6379\"}} ");
                assert!(
                    text.contains(&labelled),
                    "{format:?}: {labelled} in\n{text}"
                );
            }
            assert!(
                text.contains(
                    "holprobe_probe_latency_seconds_bucket{le=\"+Inf\",target=\"db1:6379\"} 1"
                ) || text.contains(
                    "holprobe_probe_latency_seconds_bucket{target=\"db1:6379\",le=\"+Inf\"} 1"
                ),
                "{format:?}:\n{text}"
            );
            assert!(
                text.contains("# TYPE holprobe_probe_latency_seconds histogram"),
                "{text}"
            );
        }
        let open = encode(&registry, Format::OpenMetrics).unwrap();
        assert!(open.ends_with("# EOF\n"), "{open}");
    }

    #[test]
    fn the_histogram_counts_answered_probes_into_their_buckets() {
        let (registry, metrics) = RunMetrics::register("127.0.0.1:6379");
        // 10 µs is on a bound (le is inclusive), 11 µs the next bucket up, 20 s past every bound.
        for latency_us in [10, 11, 20, 1_500, 1_500, 20_000_000] {
            metrics.observe_probe(&probe(Some(latency_us), true));
        }
        metrics.observe_probe(&probe(None, false));
        metrics.observe_probe(&probe(Some(40), false));
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = encode(&registry, format).unwrap();
            let metric =
                |name: &str| sample(&text, &format!("{name}{{target=\"127.0.0.1:6379\"}}"));
            assert_eq!(metric("holprobe_probes_total"), 8.0);
            assert_eq!(metric("holprobe_probe_errors_total"), 2.0);
            assert_eq!(metric("holprobe_probe_latency_seconds_count"), 6.0);
            let sum = metric("holprobe_probe_latency_seconds_sum");
            assert!((sum - 20.003041).abs() < 1e-9, "{sum}");
            // (le, cumulative count), as Prometheus reads them; the formats spell le apart
            // (1e-05, 1e-5).
            let buckets: Vec<(f64, u64)> = text
                .lines()
                .filter(|line| line.starts_with("holprobe_probe_latency_seconds_bucket"))
                .map(|line| {
                    let le = line
                        .split("le=\"")
                        .nth(1)
                        .unwrap()
                        .split('"')
                        .next()
                        .unwrap();
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    };
                    (le, line.rsplit(' ').next().unwrap().parse().unwrap())
                })
                .collect();
            assert_eq!(buckets.len(), LATENCY_BOUNDS_US.len() + 1, "{text}");
            let bucket = |le: f64| buckets.iter().find(|&&(b, _)| b == le).unwrap().1;
            assert_eq!(bucket(1e-5), 1, "{format:?}");
            assert_eq!(bucket(2e-5), 3, "{format:?}");
            assert_eq!(bucket(0.001), 3, "{format:?}");
            assert_eq!(bucket(0.002), 5, "{format:?}");
            assert_eq!(bucket(10.0), 5, "{format:?}");
            assert_eq!(bucket(f64::INFINITY), 6, "{format:?}");
        }
    }

    #[test]
    fn stalls_add_up_and_the_gauge_keeps_the_last_ten_seconds() {
        let (registry, mut metrics) = RunMetrics::register("t:1");
        metrics.observe_stall(&stall(1_000_000, 1_100_000), 2_000_000);
        metrics.observe_stall(&stall(3_000_000, 3_020_000), 4_000_000);
        let text = encode(&registry, Format::Prometheus).unwrap();
        let metric = |text: &str, name: &str| sample(text, &format!("{name}{{target=\"t:1\"}}"));
        assert_eq!(metric(&text, "holprobe_stalls_total"), 2.0);
        assert!((metric(&text, "holprobe_stall_seconds_total") - 0.12).abs() < 1e-9);
        assert_eq!(metric(&text, "holprobe_longest_stall_seconds"), 0.1);
        // The 100 ms stall was counted at 2 s: at 12.5 s only the 20 ms one is left, at 14.5 s none.
        metrics.refresh(12_500_000);
        let text = encode(&registry, Format::Prometheus).unwrap();
        assert_eq!(metric(&text, "holprobe_longest_stall_seconds"), 0.02);
        metrics.refresh(14_500_000);
        let text = encode(&registry, Format::Prometheus).unwrap();
        assert_eq!(metric(&text, "holprobe_longest_stall_seconds"), 0.0);
        assert_eq!(metric(&text, "holprobe_stalls_total"), 2.0);
    }

    #[test]
    fn the_window_forgets_only_what_is_older_than_it() {
        let mut recent = RecentStalls::new(10);
        assert_eq!(recent.longest_us(0), 0);
        recent.push(5, 7);
        recent.push(8, 3);
        assert_eq!(recent.longest_us(15), 7);
        assert_eq!(recent.longest_us(16), 3);
        assert_eq!(recent.longest_us(18), 3);
        assert_eq!(recent.longest_us(19), 0);
    }

    #[test]
    fn the_format_follows_the_accept_header() {
        assert_eq!(Format::for_accept(None), Format::Prometheus);
        assert_eq!(Format::for_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(
            Format::for_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            )),
            Format::OpenMetrics
        );
    }
}
