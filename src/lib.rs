//! holprobe measures how long a Redis (or Valkey) server keeps its other clients waiting while
//! it handles very large values.
//!
//! The modules are grouped by role, in the order the data flows (ARCHITECTURE.md has the map):
//! [`measure`] (threads, connections, one clock, one event stream) -> [`analyze`] (pure:
//! timeline in, findings out) -> [`output`] (terminal, files). The library's runs ([`run`] for
//! the main job and observe mode, [`calibrate`], [`load`], [`compare`]) are built from them;
//! [`cli`] parses the command line into the flag sections, and [`commands`] has a folder per
//! subcommand (its plan, its dry run, its run).
//!
//! The library is what the binary uses: examples and other programs can start or connect to a
//! server ([`measure::target::Target`]), run probes and writes ([`run::run`]), and correlate any
//! recorded timeline ([`analyze::correlate::correlate`]).

pub mod analyze;
pub mod calibrate;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod error;
pub mod keys;
pub mod load;
pub mod measure;
pub mod options;
pub mod output;
pub mod record;
pub mod run;
pub mod session;
pub mod units;
pub mod workload;
