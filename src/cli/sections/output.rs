//! Where a measuring command's results go: `--out`, `--force`, `--format`, declared once and
//! worded for each command.

use std::path::PathBuf;

use clap::Args;

use crate::output::export::{OutDirLock, prepare_out_dir};
use crate::output::format::Format;

/// The output flags, worded for the main job.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Write probes.csv, writes.csv, stalls.csv, summary.csv, timeline.csv, probes.hlog and
    /// run.json here, as the run goes.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Replace a run already in --out.
    #[arg(long)]
    pub force: bool,

    /// What stdout gets: `text`, a line per write (time, op, size, others blocked, own time,
    /// stalled, delayed probes) and a short footer; `json`, one document at the end with the
    /// findings run.json has (notes and progress stay on stderr); `markdown`, the per-write
    /// table and the footer.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// The output flags worded for `probe calibrate`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("out", |a| a.help("Write the run's exports and calibration.csv here")),
    mut_arg("format", |a| a.help("What stdout gets: `text` (a line per injection, per length, the verdict), `json` (one document: calibration.json's content with the run's findings as run.json has them under `run`; notes stay on stderr) or `markdown` (the tables)"))
)]
pub struct CalibrateOutputArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The output flags worded for `probe load`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("out", |a| a.help("Write load_timeline.csv, load_latency.hgrm, load_writes.csv and run.json here")),
    mut_arg("format", |a| a.help("What stdout gets: `text` (the report above), `json` (one document at the end with the findings load's run.json has; notes and progress stay on stderr) or `markdown` (the per-write table and a row per server)"))
)]
pub struct LoadOutputArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// [`OutputArgs`], checked.
#[derive(Debug, Clone)]
pub struct OutputPlan {
    /// Where the exports go.
    pub out: Option<PathBuf>,
    /// Replace a run already there.
    pub force: bool,
    /// What stdout gets.
    pub format: Format,
}

impl OutputArgs {
    /// The plan (every value is checked by clap already).
    pub fn to_plan(&self) -> OutputPlan {
        OutputPlan {
            out: self.out.clone(),
            force: self.force,
            format: self.format,
        }
    }
}

impl OutputPlan {
    /// Makes `--out` ready for a new run (refusing one already there without `--force`, and
    /// one another run is using), before anything connects. Hold the lock for the whole run.
    pub fn prepare(&self) -> anyhow::Result<Option<OutDirLock>> {
        match &self.out {
            Some(dir) => prepare_out_dir(dir, self.force).map(Some),
            None => Ok(None),
        }
    }
}
