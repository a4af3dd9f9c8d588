//! holprobe measures how long a Redis (or Valkey) server keeps its other clients waiting while
//! it handles very large values.
//!
//! A run is a pipeline, and the modules follow it:
//!
//! ```text
//! cli (clap) -> RunOptions (validated) -> target (connect, or spawn redis-server)
//!   -> probe threads + writer thread, one event channel, one clock (run, probe, writer)
//!   -> correlate (pure: timeline in, findings out)
//!   -> report (terminal) and export (CSV, JSON)
//!
//! compare: --out directories (load) -> per size/op statistics and verdicts (pure) -> render
//! ```
//!
//! The library is what the binary uses: examples and other programs can start or connect to a
//! server ([`target::Target`]), run probes and writes ([`run::run`]), and correlate any recorded
//! timeline ([`correlate::correlate`]).

pub mod actor;
pub mod calibrate;
pub mod cli;
pub mod clock;
pub mod compare;
pub mod correlate;
pub mod culprit;
pub mod error;
pub mod event;
pub mod export;
pub mod findings;
pub mod hostmem;
pub mod load;
pub mod pressure;
pub mod probe;
pub mod record;
pub mod report;
pub mod resp;
pub mod run;
pub mod serverview;
pub mod stats;
pub mod target;
pub mod units;
pub mod writer;
