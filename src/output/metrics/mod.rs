//! `--metrics-addr HOST:PORT`: the run's figures for Prometheus while it goes, as OpenMetrics
//! text at `GET /metrics`: probe latency as a histogram in seconds, probes, probe errors, stalls
//! and stall seconds as counters, and the longest stall of the last interval as a gauge, each
//! labelled with the measured server's `target="host:port"`.
//!
//! Two halves, kept apart so the measuring never waits for the serving:
//!
//! - [`ProbeMetrics`]: the figures. The collector updates them with atomic adds and stores (one
//!   read-locked map lookup by target first); a scrape reads the same atomics. No update waits
//!   for a scrape, whatever the scraper does.
//! - [`MetricsEndpoint`]: the HTTP server (hyper 1.x, HTTP/1.1 only) on one thread of its own
//!   running a single-threaded tokio runtime. Whatever a client does, its cost stays on that
//!   thread and is bounded: at most [`MAX_CONNECTIONS`] connections (the oldest is closed to
//!   make room for a new one, so a flood cannot lock a real scraper out), a request head must
//!   arrive within [`HEADER_READ_TIMEOUT`] of connecting and must fit in
//!   [`MAX_REQUEST_HEAD_BYTES`], every connection is closed after [`CONNECTION_DEADLINE`]
//!   whether or not its client reads (and holds at most [`SEND_BUFFER_BYTES`] unread), one
//!   request per connection (`Connection: close`), and a request body is never read: a declared
//!   `Content-Length` of any size costs nothing. [`MetricsEndpoint::shutdown`] (or dropping it)
//!   returns within [`SHUTDOWN_WAIT`] with such clients still connected.
//!
//! The address is bound in [`MetricsEndpoint::bind`], before anything is measured, so a bad or
//! busy address is a usage error naming `--metrics-addr`, not a failure halfway through a run.
//!
//! `figures`: the metrics and their encoding; `endpoint`: the address flag and the HTTP server.

mod endpoint;
mod figures;
#[cfg(test)]
mod tests;

pub use endpoint::{
    CONNECTION_DEADLINE, CONTENT_TYPE_OPENMETRICS, FLAG, HEADER_READ_TIMEOUT, MAX_CONNECTIONS,
    MAX_REQUEST_HEAD_BYTES, METRICS_PATH, MetricsEndpoint, SEND_BUFFER_BYTES, SHUTDOWN_WAIT,
    parse_metrics_addr,
};
pub use figures::{LATENCY_BOUNDS_US, LatencyHistogram, METRIC_PREFIX, ProbeMetrics, target_label};
