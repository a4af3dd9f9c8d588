//! CSV rows from the same `Serialize` structs the run records, so columns cannot drift.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::open_fresh;

/// Appends rows to a CSV file in whole rows: rows are serialized into memory and written to the
/// file in one call per batch, so the file never ends in half a row, whatever stops the run.
pub struct RowAppender {
    path: PathBuf,
    file: File,
    pending: Vec<u8>,
    rows_pending: usize,
    header_written: bool,
    /// Bytes of whole rows on disk: a write cut short (a full disk) is cut back to this.
    written_bytes: u64,
    /// A write failed: no more are tried (on a full disk they would only eat the space kept
    /// for the final run.json), and the file ends in whole rows.
    failed: bool,
}

/// Rows kept in memory before they are written out.
const BATCH_ROWS: usize = 4096;

impl RowAppender {
    /// Creates (or truncates) the file. `header` is written at once, so even a run that measures
    /// nothing leaves a valid CSV with its columns.
    pub fn create(path: &Path, header: &[&str]) -> Result<RowAppender> {
        let file = open_fresh(path)?;
        let mut appender = RowAppender {
            path: path.to_path_buf(),
            file,
            pending: Vec::new(),
            rows_pending: 0,
            header_written: true,
            written_bytes: 0,
            failed: false,
        };
        appender
            .encoder()
            .write_record(header)
            .context("encoding a CSV header")?;
        appender.flush()?;
        Ok(appender)
    }

    /// Adds one row; writes the batch out when it is full.
    pub fn push<T: Serialize>(&mut self, row: &T) -> Result<()> {
        debug_assert!(self.header_written);
        let encoded = self.encoder().serialize(row);
        encoded.with_context(|| format!("encoding a row of {}", self.path.display()))?;
        self.rows_pending += 1;
        if self.rows_pending >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// A CSV encoder appending to the pending rows (its own buffer is flushed when it drops).
    fn encoder(&mut self) -> csv::Writer<&mut Vec<u8>> {
        csv::WriterBuilder::new()
            .has_headers(false)
            .buffer_capacity(512)
            .from_writer(&mut self.pending)
    }

    /// Writes every pending row to the file.
    pub fn flush(&mut self) -> Result<()> {
        if self.failed {
            self.pending.clear();
            anyhow::bail!("{}: an earlier write failed", self.path.display());
        }
        if !self.pending.is_empty() {
            if let Err(err) = self.file.write_all(&self.pending) {
                // Whole rows only, also on a full disk: what a write cut short left goes.
                self.failed = true;
                self.pending.clear();
                let _ = self.file.set_len(self.written_bytes);
                let _ = self.file.seek(SeekFrom::Start(self.written_bytes));
                if let Some(dir) = self.path.parent() {
                    super::release_reserve(dir);
                }
                return Err(err).with_context(|| format!("writing {}", self.path.display()));
            }
            self.written_bytes += self.pending.len() as u64;
            self.pending.clear();
        }
        self.rows_pending = 0;
        Ok(())
    }
}

impl Drop for RowAppender {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// A whole CSV file (header from the struct's fields) in memory, for atomic rewrites. `header`
/// is used when there are no rows, so an empty result still names its columns.
pub fn csv_bytes<T: Serialize>(rows: &[T], header: &[&str]) -> Result<Vec<u8>> {
    if rows.is_empty() {
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer
            .write_record(header)
            .context("encoding a CSV header")?;
        return writer.into_inner().context("encoding CSV");
    }
    let mut writer = csv::Writer::from_writer(Vec::new());
    for row in rows {
        writer.serialize(row).context("encoding a CSV row")?;
    }
    writer.into_inner().context("encoding CSV")
}
