//! Load mode: many concurrent clients GETting small values, joined to the prober's writer
//! (the module map of the whole crate is in ARCHITECTURE.md).
//!
//! ```text
//! populate / clean   keyspace + populate    fill or empty holprobe:load:* (pipelined SET, SCAN+UNLINK)
//! load               runner                 generator threads + optional writer, one clock, one channel
//!                      engine               mio event loops, hand-written pipelined RESP (scanner)
//!                      stats                per-second HdrHistograms -> timeline rows, the seed's block
//!                      analyze              pure: writes x samples x seconds -> per-write findings
//!                      hgrm                 HdrHistogram percentile text export
//! ```

pub mod analyze;
pub mod engine;
pub mod hgrm;
pub mod keyspace;
pub mod populate;
pub mod report;
pub mod runner;
pub mod scanner;
pub mod stats;
