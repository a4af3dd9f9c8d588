//! The run's figures as Prometheus metric families, updated by the collector with atomic adds
//! and encoded as OpenMetrics text for a scrape.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

/// Prefix of every metric name.
pub const METRIC_PREFIX: &str = "holprobe";

/// Upper bounds of the latency histogram's buckets, µs: 1-2-5 steps from 50 µs (a loopback
/// round trip) to 10 s; slower replies (up to the probe timeout) count in `+Inf` only.
pub const LATENCY_BOUNDS_US: [u64; 17] = [
    50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
    1_000_000, 2_000_000, 5_000_000, 10_000_000,
];

/// A measured server as Prometheus sees it: `host:port`, an IPv6 host in brackets the way it is
/// written in a URL (`[::1]:6379`), so the label reads the same as the address a user typed.
pub fn target_label(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The label every family carries.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
}

/// The run's metrics, shared by the collector (which updates them) and the endpoint (which
/// encodes them). Cheap to update from one thread thousands of times a second: a read-locked
/// map lookup by target, then atomic adds; the lock is taken for writing only the first time a
/// target is seen.
#[derive(Debug)]
pub struct ProbeMetrics {
    registry: Registry,
    families: Families,
    /// The per-target handles (clones sharing the families' atomics), looked up by `&str`
    /// without allocating, unlike a family's own lookup by label set.
    targets: RwLock<HashMap<String, TargetMetrics>>,
}

/// The registered families, kept to create a new target's handles.
#[derive(Debug, Default)]
struct Families {
    probes: Family<TargetLabels, Counter>,
    probe_errors: Family<TargetLabels, Counter>,
    latency: Family<TargetLabels, LatencyHistogram>,
    stalls: Family<TargetLabels, Counter>,
    stall_seconds: Family<TargetLabels, Counter<f64, AtomicU64>>,
    longest_stall: Family<TargetLabels, Gauge<f64, AtomicU64>>,
}

/// One target's handles into the families.
#[derive(Debug, Clone)]
struct TargetMetrics {
    probes: Counter,
    probe_errors: Counter,
    latency: LatencyHistogram,
    stalls: Counter,
    stall_seconds: Counter<f64, AtomicU64>,
    longest_stall: Gauge<f64, AtomicU64>,
}

impl Default for ProbeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeMetrics {
    /// Registers every family under `holprobe_`; a target's series appear with its first update.
    pub fn new() -> ProbeMetrics {
        let families = Families::default();
        let mut registry = Registry::with_prefix(METRIC_PREFIX);
        registry.register_with_unit(
            "probe_latency",
            "Open-loop latency of answered probes, from each probe's intended send time to its reply",
            Unit::Seconds,
            families.latency.clone(),
        );
        registry.register(
            "probes",
            "Probes recorded, answered or not",
            families.probes.clone(),
        );
        registry.register(
            "probe_errors",
            "Probes that got an error reply or no reply",
            families.probe_errors.clone(),
        );
        registry.register(
            "stalls",
            "Stall episodes: the server answered no probe for longer than the stall threshold while one waited",
            families.stalls.clone(),
        );
        registry.register_with_unit(
            "stall",
            "Total length of the stall episodes",
            Unit::Seconds,
            families.stall_seconds.clone(),
        );
        registry.register_with_unit(
            "longest_stall",
            "Longest stall of the last interval (0 when none)",
            Unit::Seconds,
            families.longest_stall.clone(),
        );
        ProbeMetrics {
            registry,
            families,
            targets: RwLock::new(HashMap::new()),
        }
    }

    /// Counts one recorded probe to `target` (see [`target_label`]). `latency_us` is `None` when
    /// no reply came; an answered probe (`ok`, with a latency) also goes into the histogram, so
    /// its `_count` is the answered probes and an error reply's quick answer does not flatter it.
    pub fn probe(&self, target: &str, latency_us: Option<u64>, ok: bool) {
        self.with_target(target, |metrics| {
            metrics.probes.inc();
            if !ok {
                metrics.probe_errors.inc();
            } else if let Some(latency_us) = latency_us {
                metrics.latency.observe_us(latency_us);
            }
        });
    }

    /// Counts one stall episode of `duration_us` on `target`, once it is final.
    pub fn stall(&self, target: &str, duration_us: u64) {
        self.with_target(target, |metrics| {
            metrics.stalls.inc();
            metrics.stall_seconds.inc_by(duration_us as f64 / 1e6);
        });
    }

    /// Sets `holprobe_longest_stall_seconds` for `target`: the caller passes the longest stall
    /// of each interval it reports (0 for none), so the gauge shows what a scrape interval
    /// would otherwise average away.
    pub fn set_longest_stall(&self, target: &str, duration_us: u64) {
        self.with_target(target, |metrics| {
            metrics.longest_stall.set(duration_us as f64 / 1e6);
        });
    }

    /// Every family as OpenMetrics text, ending in `# EOF`: what a scrape gets.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }

    fn with_target(&self, target: &str, update: impl FnOnce(&TargetMetrics)) {
        // No code panics while holding the lock; a poisoned one still holds valid handles.
        if let Some(metrics) = self
            .targets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(target)
        {
            update(metrics);
            return;
        }
        let mut targets = self.targets.write().unwrap_or_else(PoisonError::into_inner);
        let metrics = targets
            .entry(target.to_string())
            .or_insert_with(|| self.families.register(target));
        update(metrics);
    }
}

impl Families {
    /// Creates `target`'s series in every family (so they all show from its first update, at 0)
    /// and returns handles sharing their atomics.
    fn register(&self, target: &str) -> TargetMetrics {
        let labels = TargetLabels {
            target: target.to_string(),
        };
        TargetMetrics {
            probes: self.probes.get_or_create_owned(&labels),
            probe_errors: self.probe_errors.get_or_create_owned(&labels),
            latency: self.latency.get_or_create_owned(&labels),
            stalls: self.stalls.get_or_create_owned(&labels),
            stall_seconds: self.stall_seconds.get_or_create_owned(&labels),
            longest_stall: self.longest_stall.get_or_create_owned(&labels),
        }
    }
}

/// A latency histogram in seconds whose updates are atomic adds. (prometheus-client's own
/// `Histogram` takes a lock that a scrape holds while it encodes: the collector would wait.)
/// A scrape may land between a probe's bucket add and its sum add; `_count` is computed from the
/// buckets, so it always equals the `+Inf` bucket.
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
    /// Adds one latency, µs (a bound is inclusive, as Prometheus's `le` is).
    pub fn observe_us(&self, latency_us: u64) {
        let bucket = LATENCY_BOUNDS_US.partition_point(|&bound| bound < latency_us);
        self.inner.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.inner.sum_us.fetch_add(latency_us, Ordering::Relaxed);
    }

    /// (upper bound in seconds, count in that bucket alone), the last bound `+Inf`: what the
    /// encoder takes (it writes them cumulated).
    fn bucket_counts(&self) -> Vec<(f64, u64)> {
        LATENCY_BOUNDS_US
            .iter()
            .map(|&bound| bound as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.inner.buckets)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect()
    }
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets = self.bucket_counts();
        let count = buckets.iter().map(|&(_, n)| n).sum();
        let sum = self.inner.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}
