//! Output: what a person or another program reads: the terminal report, the files of an
//! `--out` directory (CSV, run.json, the HdrHistogram interval log) and the Prometheus endpoint
//! while the run goes.

pub mod export;
pub mod format;
pub mod hlog;
pub mod metrics;
pub mod report;
