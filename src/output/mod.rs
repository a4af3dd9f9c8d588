//! What a run shows while it goes and leaves behind besides its CSV and JSON exports: the
//! Prometheus endpoint ([`metrics`]) and the HdrHistogram interval log ([`hlog`]).

pub mod hlog;
pub mod metrics;
