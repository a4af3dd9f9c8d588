//! The writer's flags (`--writer-sizes`, `--repeat`, `--gap`, `--overwrite`, `--keep`, `--seed`),
//! declared once for the main job and load mode, and checked into a [`WriterPlan`].
//!
//! This is where a workload grows: a new flag of what is written (a value type, its elements,
//! the operations on each key) goes in [`WorkloadArgs`], and its checked value in the plan
//! [`WorkloadArgs::to_plan`] builds.

use std::time::Duration;

use clap::Args;

use super::parse_count;
use crate::error::UsageError;
use crate::measure::writer::WriterPlan;
use crate::units::{parse_duration, parse_size_list};

/// What the writer stores, worded for the main job.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    // --help: value sizes to write, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "LIST",
        allow_hyphen_values = true,
        help = crate::size_help!(
            "Value sizes to write, comma-separated, e.g. 1M,64M,512M. Without it the tool observes: for --duration, or until Ctrl-C."
        )
    )]
    pub writer_sizes: Option<String>,

    /// Writes per size.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    pub repeat: String,

    /// Quiet probing before and after each write, so the baseline shows.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "500ms"
    )]
    pub gap: String,

    /// Write each size twice to the same key: the second SET also frees the first value on the
    /// server's main thread.
    #[arg(long)]
    pub overwrite: bool,

    /// Keep every written key until the end (server memory grows with the sum of the sizes)
    /// instead of deleting each after its gap. Deletions are measured either way.
    #[arg(long)]
    pub keep: bool,

    /// Seed of the random value bytes, so runs repeat.
    #[arg(long, value_name = "N", default_value_t = 0x5eed)]
    pub seed: u64,
}

/// Default of load mode's `--gap`.
pub const LOAD_GAP: &str = "2s";

/// The writer's flags worded for load mode, where the writer runs beside the load clients.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("writer_sizes", |a| a.help(crate::size_help!(
        "Run the writer meanwhile: value sizes to write, comma-separated, e.g. 16M,64M."
    ))),
    mut_arg("gap", |a| a.default_value(LOAD_GAP).help("Quiet load before and after each write; at least 1s so that the seconds around a write hold none")),
    mut_arg("overwrite", |a| a.help("Write each size twice to the same key (the second write also frees the first value)")),
    mut_arg("keep", |a| a.help("Keep every written value until the end instead of deleting each after its gap")),
    mut_arg("seed", |a| a.help("Seed of key choice, SET bytes and the writer's value"))
)]
pub struct LoadWorkloadArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

impl WorkloadArgs {
    /// The writer's plan; `None` without `--writer-sizes` (then the flags only a writer uses
    /// are the command's to refuse, see [`WorkloadArgs::writer_only_flags`]).
    pub fn to_plan(&self) -> Result<Option<WriterPlan>, UsageError> {
        let Some(list) = &self.writer_sizes else {
            return Ok(None);
        };
        Ok(Some(WriterPlan {
            sizes: parse_size_list("--writer-sizes", list)?,
            repeat: parse_count("--repeat", &self.repeat, 1, 10_000)? as u32,
            gap: self.gap()?,
            overwrite: self.overwrite,
            keep: self.keep,
            commands: Vec::new(),
        }))
    }

    /// `--gap`, checked.
    pub fn gap(&self) -> Result<Duration, UsageError> {
        parse_duration("--gap", &self.gap)
    }

    /// The switches that mean nothing without a writer, each with whether it was given.
    pub fn writer_only_flags(&self) -> [(&'static str, bool); 2] {
        [("--overwrite", self.overwrite), ("--keep", self.keep)]
    }
}
