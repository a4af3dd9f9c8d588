//! Where a load run's findings go: the `--out` files (load_timeline.csv, load_latency.hgrm,
//! load_writes.csv and run.json, rewritten whole about every second and at the end) and the
//! caller's notices (the terminal).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::report::{LoadNotice, LoadReport};
use crate::output::export::{
    LOAD_LATENCY_HGRM, LOAD_TIMELINE_CSV, LOAD_WRITES_CSV, RUN_JSON, columns, csv_bytes,
    write_atomic,
};
use crate::session::sink::{Sink, Sinks};

/// What the load's collector finds.
#[derive(Debug)]
pub(super) enum LoadFinding<'a> {
    /// Something to show while the run goes.
    Notice(LoadNotice<'a>),
    /// The run's findings as they stand (a checkpoint), or at the end.
    Report(&'a LoadReport),
}

/// A load run's sinks.
pub(super) type LoadSinks<'n> = Sinks<dyn for<'f> Sink<LoadFinding<'f>> + 'n>;

/// The `--out` directory: every file rewritten whole from the report (atomically, so a kill
/// keeps the last one).
pub(super) struct LoadFiles {
    dir: PathBuf,
    /// The run has a writer: load_writes.csv too.
    with_writer: bool,
}

impl LoadFiles {
    pub fn new(dir: &Path, with_writer: bool) -> LoadFiles {
        LoadFiles {
            dir: dir.to_path_buf(),
            with_writer,
        }
    }

    fn write(&mut self, report: &LoadReport) -> Result<()> {
        write_atomic(
            &self.dir.join(LOAD_TIMELINE_CSV),
            &csv_bytes(&report.timeline, columns::LOAD_TIMELINE)?,
        )?;
        write_atomic(
            &self.dir.join(LOAD_LATENCY_HGRM),
            crate::load::hgrm::percentile_distribution(&report.latency).as_bytes(),
        )?;
        if self.with_writer {
            write_atomic(
                &self.dir.join(LOAD_WRITES_CSV),
                &csv_bytes(&report.writes_under_load, columns::LOAD_WRITES)?,
            )?;
        }
        let bytes = serde_json::to_vec_pretty(&report.run_json).context("encoding run.json")?;
        write_atomic(&self.dir.join(RUN_JSON), &bytes)
    }
}

impl Sink<LoadFinding<'_>> for LoadFiles {
    fn emit(&mut self, finding: &LoadFinding<'_>) -> Result<()> {
        match finding {
            LoadFinding::Report(report) => self.write(report),
            LoadFinding::Notice(_) => Ok(()),
        }
    }

    fn takes_checkpoints(&self) -> bool {
        true
    }
}

/// The caller's notices (the `probe load` command shows them).
pub(super) struct LoadTerminal<'n>(pub &'n mut dyn FnMut(LoadNotice<'_>));

impl Sink<LoadFinding<'_>> for LoadTerminal<'_> {
    fn emit(&mut self, finding: &LoadFinding<'_>) -> Result<()> {
        if let LoadFinding::Notice(notice) = finding {
            (self.0)(*notice);
        }
        Ok(())
    }

    fn is_terminal(&self) -> bool {
        true
    }
}
