//! Load mode: many concurrent clients GETting small values, joined to the prober's writer
//! (the module map of the whole crate is in ARCHITECTURE.md).
//!
//! ```text
//! populate / clean   keyspace + populate    fill or empty holprobe:load:* (pipelined SET, SCAN+UNLINK)
//! load               runner                 generator threads + optional writer, one clock, one channel
//!                      engine               mio event loops, hand-written pipelined RESP (scanner)
//!                      stats                per-second HdrHistograms -> timeline rows, the seed's block
//!                      analyze              pure: the written server's requests -> the session's
//!                                           streaming correlator -> per-write request figures;
//!                                           per-second counts -> throughput lost
//!                      hgrm                 HdrHistogram percentile text export
//!                      cluster              pure: keys by shard, nodes and their clients
//! ```
//!
//! On a cluster (`--topology auto`, the default, against a cluster node) every command works
//! node by node: populate fills each master with the keys of its slots (pipelined, one
//! connection per master), `holprobe:load:meta` lives on the master of its own slot, load binds
//! each connection to one node and reports a block per node, clean scans every master.
//!
//! `probe load` runs through the measuring session (`session::Session`) as every
//! measuring command does, with the load generator as its instrument (`runner`'s
//! `LoadInstrument`) and the main job's writer as its actor: the run id, key prefix, key ledger
//! and settings guard, the one event channel, the stop order (the writer first, so a write under
//! way is finished while the load goes on) and the end-of-run reasons are the session's; the
//! correlator that decides which requests overlapped a write is the probes'. What is the load's
//! own: its generator threads (mio event loops that report per second, not the probe threads'
//! one record each), its collector of per-second figures, and its exports.

pub mod analyze;
pub mod cluster;
pub mod engine;
pub mod hgrm;
pub mod keyspace;
pub mod populate;
pub mod report;
pub mod runner;
pub mod scanner;
pub mod stats;
