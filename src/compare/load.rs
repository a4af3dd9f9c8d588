//! Reads a run back from its `--out` directory: `run.json` (server, host, options, status),
//! `summary.csv` (per write: set_ms, hol_delay_ms) and `writes.csv` (per write: outcome and
//! error). Readers go by column name and ignore columns they do not know, so runs made by a
//! later version (with more columns) still read.
//!
//! Every problem with a directory is a [`UsageError`] naming the directory and the file: the
//! user gave the tool something it cannot compare (exit 2).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::UsageError;
use crate::output::export::{RUN_JSON, SUMMARY_CSV, WRITES_CSV};

/// What the compare needs to know about a run, from its `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunMeta {
    /// The directory as given.
    pub dir: PathBuf,
    /// Run id (keys were under `holprobe:<run_id>:`).
    pub run_id: String,
    /// `complete`, `interrupted`, `failed` or `running`.
    pub status: String,
    /// Version of the tool that made the run.
    pub tool_version: String,
    /// `redis` or `valkey`.
    pub server_flavor: String,
    /// Server version, e.g. `7.0.15`.
    pub server_version: String,
    /// The binary the tool started (embedded runs).
    pub server_binary: Option<String>,
    /// The server's `appendonly` setting, when CONFIG said.
    pub server_appendonly: Option<String>,
    /// Host name of the machine the tool ran on.
    pub hostname: Option<String>,
    /// Its logical CPUs.
    pub cpus: Option<u64>,
    /// Probe threads.
    pub probe_threads: Option<u64>,
    /// Probes per second per thread.
    pub probe_rate: Option<f64>,
    /// `ping` or `get`.
    pub probe_cmd: Option<String>,
    /// Stall threshold, µs.
    pub stall_threshold_us: Option<u64>,
    /// Writes per size.
    pub repeat: Option<u64>,
    /// Quiet gap around each write, ms.
    pub gap_ms: Option<f64>,
    /// `--overwrite`.
    pub overwrite: Option<bool>,
    /// `--keep`.
    pub keep: Option<bool>,
    /// Sizes the run planned, bytes.
    pub planned_sizes_bytes: Vec<u64>,
    /// The run's clock zero as Unix time, µs.
    pub started_unix_us: Option<u64>,
    /// The probe engine that took the run's probes (`probe_engine.version`;
    /// [`PROBE_ENGINE_BEFORE_KEY`] when run.json has no `probe_engine`). Engines differ in what
    /// `hol_delay_ms` counts, so it is not comparable across them.
    pub probe_engine_version: u32,
}

/// The engine of runs recorded before run.json had `probe_engine`: one probe at a time per
/// connection, each waiting for the reply before the next, so under load its `hol_delay_ms`
/// also counted the probes' own backlog.
pub const PROBE_ENGINE_BEFORE_KEY: u32 = 1;

impl RunMeta {
    /// `redis 7.0.15`, plus `appendonly` when the server appended to an AOF.
    pub fn server_label(&self) -> String {
        let mut label = format!("{} {}", self.server_flavor, self.server_version);
        if self.server_appendonly.as_deref() == Some("yes") {
            label.push_str(" appendonly");
        }
        label
    }

    /// One aggregate probe interval, ms: the resolution of head-of-line delay.
    pub fn probe_interval_ms(&self) -> Option<f64> {
        match (self.probe_threads, self.probe_rate) {
            (Some(threads), Some(rate)) if threads > 0 && rate > 0.0 => {
                Some(1e3 / (threads as f64 * rate))
            }
            _ => None,
        }
    }
}

/// One write event as the compare uses it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteSample {
    /// Write number in its run.
    pub seq: u32,
    /// `set`, `overwrite`, `delete` (or an operation a later version adds).
    pub op: String,
    /// Value size, bytes.
    pub size_bytes: u64,
    /// The writer's own time, ms.
    pub set_ms: f64,
    /// Head-of-line delay, ms; `None` when no probe overlapped the write.
    pub hol_delay_ms: Option<f64>,
}

/// A run read back from its directory: its metadata and its successful writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunData {
    /// From run.json.
    pub meta: RunMeta,
    /// Writes that succeeded, in write order.
    pub writes: Vec<WriteSample>,
    /// Writes that failed (left out of every figure), with their error.
    pub failed_writes: Vec<String>,
    /// Problems found while reading that do not stop the compare.
    pub warnings: Vec<String>,
}

impl RunData {
    /// Successful writes grouped by (size, op), in size order.
    pub fn groups(&self) -> BTreeMap<(u64, String), Vec<&WriteSample>> {
        let mut groups: BTreeMap<(u64, String), Vec<&WriteSample>> = BTreeMap::new();
        for write in &self.writes {
            groups
                .entry((write.size_bytes, write.op.clone()))
                .or_default()
                .push(write);
        }
        groups
    }
}

#[derive(Debug, Deserialize)]
struct SummaryRow {
    seq: u32,
    op: String,
    size_bytes: u64,
    set_ms: f64,
    hol_delay_ms: Option<f64>,
    #[serde(default)]
    ok: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct WritesRow {
    seq: u32,
    op: String,
    size_bytes: u64,
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

const SUMMARY_REQUIRED: &[&str] = &["seq", "op", "size_bytes", "set_ms", "hol_delay_ms"];
const WRITES_REQUIRED: &[&str] = &["seq", "op", "size_bytes", "ok"];

/// Reads the run in `dir`. `role` names the argument in messages (`BASELINE`, `CANDIDATE`,
/// `--baseline`).
pub fn load_run(role: &'static str, dir: &Path) -> Result<RunData, UsageError> {
    let shown = dir.display().to_string();
    let bad = |reason: String| UsageError::invalid(role, &shown, reason);
    if !dir.exists() {
        return Err(bad("no such directory".into()));
    }
    if !dir.is_dir() {
        return Err(bad(
            "not a directory (expected a probe --out directory)".into()
        ));
    }
    let meta = read_run_json(dir).map_err(&bad)?;
    let mut warnings = Vec::new();
    let summary: Vec<SummaryRow> =
        read_csv(&dir.join(SUMMARY_CSV), SUMMARY_REQUIRED).map_err(&bad)?;
    let writes: Vec<WritesRow> = read_csv(&dir.join(WRITES_CSV), WRITES_REQUIRED).map_err(&bad)?;
    let outcome: BTreeMap<u32, &WritesRow> = writes.iter().map(|w| (w.seq, w)).collect();

    let mut samples = Vec::new();
    let mut failed_writes = Vec::new();
    for row in summary {
        let recorded = outcome.get(&row.seq);
        if let Some(w) = recorded
            && (w.op != row.op || w.size_bytes != row.size_bytes)
        {
            return Err(bad(format!(
                "{SUMMARY_CSV} and {WRITES_CSV} disagree on write {} ({} {} vs {} {}): the files come from different runs",
                row.seq, row.op, row.size_bytes, w.op, w.size_bytes
            )));
        }
        let ok = row.ok.unwrap_or(true) && recorded.is_none_or(|w| w.ok);
        if !ok {
            let error = recorded
                .and_then(|w| w.error.clone())
                .unwrap_or_else(|| "failed".into());
            failed_writes.push(format!(
                "write {} ({} {}): {error}",
                row.seq,
                row.op,
                crate::units::format_size(row.size_bytes)
            ));
            continue;
        }
        if !row.set_ms.is_finite() || row.hol_delay_ms.is_some_and(|v| !v.is_finite()) {
            return Err(bad(format!(
                "{SUMMARY_CSV}: write {} has a value that is not a number",
                row.seq
            )));
        }
        samples.push(WriteSample {
            seq: row.seq,
            op: row.op,
            size_bytes: row.size_bytes,
            set_ms: row.set_ms,
            hol_delay_ms: row.hol_delay_ms,
        });
    }
    let summarized = samples.len() + failed_writes.len();
    if writes.len() > summarized {
        warnings.push(format!(
            "{shown}: {WRITES_CSV} has {} write(s) that {SUMMARY_CSV} does not (the run stopped before its last checkpoint): they are left out",
            writes.len() - summarized
        ));
    }
    if meta.status != "complete" {
        warnings.push(format!(
            "{shown}: the run's status is '{}', not complete: compared on the {} write(s) it made",
            meta.status,
            samples.len()
        ));
    }
    if !failed_writes.is_empty() {
        warnings.push(format!(
            "{shown}: {} failed write(s) left out: {}",
            failed_writes.len(),
            failed_writes.join("; ")
        ));
    }
    Ok(RunData {
        meta,
        writes: samples,
        failed_writes,
        warnings,
    })
}

fn read_run_json(dir: &Path) -> Result<RunMeta, String> {
    let path = dir.join(RUN_JSON);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("no {RUN_JSON} there: not a probe --out directory"));
        }
        Err(err) => return Err(format!("cannot read {RUN_JSON}: {err}")),
    };
    let json: Value = serde_json::from_str(&text)
        .map_err(|err| format!("{RUN_JSON} is not valid JSON ({err})"))?;
    let str_at = |pointer: &str| {
        json.pointer(pointer)
            .and_then(Value::as_str)
            .map(String::from)
    };
    let u64_at = |pointer: &str| json.pointer(pointer).and_then(Value::as_u64);
    if str_at("/tool/name").as_deref() != Some("holprobe") {
        return Err(format!(
            "{RUN_JSON} was not written by holprobe (no tool.name)"
        ));
    }
    let writer = json.pointer("/options/writer");
    if writer.is_none_or(Value::is_null) {
        return Err("an observe-mode run (no --writer-sizes): it has no writes to compare".into());
    }
    let planned_sizes_bytes = json
        .pointer("/options/writer/sizes")
        .and_then(Value::as_array)
        .map(|sizes| sizes.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let probe_engine_version = match json.get("probe_engine").filter(|v| !v.is_null()) {
        None => PROBE_ENGINE_BEFORE_KEY,
        Some(engine) => engine
            .get("version")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                format!("{RUN_JSON} has a probe_engine without a numeric probe_engine.version")
            })?,
    };
    let required = |pointer: &str| {
        str_at(pointer)
            .ok_or_else(|| format!("{RUN_JSON} has no {}", &pointer[1..].replace('/', ".")))
    };
    Ok(RunMeta {
        dir: dir.to_path_buf(),
        run_id: required("/run_id")?,
        status: required("/status")?,
        tool_version: str_at("/tool/version").unwrap_or_default(),
        server_flavor: required("/server/flavor")?,
        server_version: required("/server/version")?,
        server_binary: str_at("/server/binary"),
        server_appendonly: str_at("/server/appendonly"),
        hostname: str_at("/host/hostname"),
        cpus: u64_at("/host/cpus"),
        probe_threads: u64_at("/options/probe_threads"),
        probe_rate: json.pointer("/options/probe_rate").and_then(Value::as_f64),
        probe_cmd: str_at("/options/probe_cmd"),
        stall_threshold_us: u64_at("/options/stall_threshold_us"),
        repeat: u64_at("/options/writer/repeat"),
        gap_ms: json.pointer("/options/writer/gap").and_then(Value::as_f64),
        overwrite: json
            .pointer("/options/writer/overwrite")
            .and_then(Value::as_bool),
        keep: json
            .pointer("/options/writer/keep")
            .and_then(Value::as_bool),
        planned_sizes_bytes,
        started_unix_us: u64_at("/started_unix_us"),
        probe_engine_version,
    })
}

/// Reads a CSV by column name, after checking the columns the compare needs are there.
fn read_csv<T: for<'de> Deserialize<'de>>(
    path: &Path,
    required: &[&str],
) -> Result<Vec<T>, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut reader = match csv::Reader::from_path(path) {
        Ok(reader) => reader,
        Err(err) => {
            return Err(match err.kind() {
                csv::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                    format!("no {name} there (the run's exports are incomplete)")
                }
                _ => format!("cannot read {name}: {err}"),
            });
        }
    };
    let headers = reader
        .headers()
        .map_err(|err| format!("{name}: cannot read its header ({err})"))?
        .clone();
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|column| !headers.iter().any(|h| h == *column))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{name} has no column {} (is it a holprobe export?)",
            missing.join(", ")
        ));
    }
    let mut rows = Vec::new();
    for (index, record) in reader.deserialize::<T>().enumerate() {
        let row = record.map_err(|err| {
            let line = err
                .position()
                .map_or(index as u64 + 2, |position| position.line());
            let what = match err.kind() {
                csv::ErrorKind::Deserialize { err, .. } => err.to_string(),
                other => format!("{other:?}"),
            };
            format!("{name} line {line} is malformed: {what}")
        })?;
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN_JSON_TEXT: &str = r#"{
        "tool": {"name": "holprobe", "version": "0.1.0"},
        "status": "complete", "run_id": "abcd1234", "started_unix_us": 1,
        "server": {"flavor": "redis", "version": "7.0.15", "binary": "/usr/bin/redis-server", "appendonly": "no"},
        "host": {"hostname": "vm", "cpus": 2},
        "options": {"probe_threads": 2, "probe_rate": 1000.0, "probe_cmd": "ping",
                    "stall_threshold_us": 1000,
                    "writer": {"sizes": [1048576], "repeat": 2, "gap": 500.0, "overwrite": false, "keep": false}},
        "future_field": [1, 2, 3]
    }"#;

    fn write_run(dir: &Path, summary: &str, writes: &str) {
        fs::write(dir.join(RUN_JSON), RUN_JSON_TEXT).unwrap();
        fs::write(dir.join(SUMMARY_CSV), summary).unwrap();
        fs::write(dir.join(WRITES_CSV), writes).unwrap();
    }

    #[test]
    fn reads_a_run_and_ignores_unknown_columns() {
        let dir = tempfile::tempdir().unwrap();
        write_run(
            dir.path(),
            "seq,op,size_bytes,set_ms,hol_delay_ms,new_column,ok\n\
             1,set,1048576,1.5,0.8,x,true\n\
             2,delete,1048576,0.2,,y,true\n\
             3,set,1048576,1.7,0.9,z,false\n",
            "seq,op,size_bytes,start_us,ok,error,extra\n\
             1,set,1048576,0,true,,a\n2,delete,1048576,5,true,,b\n3,set,1048576,9,false,OOM out of memory,c\n",
        );
        let run = load_run("BASELINE", dir.path()).unwrap();
        assert_eq!(run.meta.server_label(), "redis 7.0.15");
        assert_eq!(run.meta.probe_interval_ms(), Some(0.5));
        assert_eq!(run.meta.gap_ms, Some(500.0));
        // No probe_engine: recorded before engine 2.
        assert_eq!(run.meta.probe_engine_version, PROBE_ENGINE_BEFORE_KEY);
        assert_eq!(run.writes.len(), 2);
        assert_eq!(run.writes[1].hol_delay_ms, None);
        assert_eq!(run.failed_writes.len(), 1);
        assert!(
            run.failed_writes[0].contains("OOM"),
            "{:?}",
            run.failed_writes
        );
        assert!(run.warnings.iter().any(|w| w.contains("failed write")));
        let groups = run.groups();
        assert_eq!(groups.len(), 2);
    }

    #[test]
    fn the_probe_engine_version_is_read_and_a_broken_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write_run(
            dir.path(),
            "seq,op,size_bytes,set_ms,hol_delay_ms\n1,set,1,1.0,1.0\n",
            "seq,op,size_bytes,ok\n1,set,1,true\n",
        );
        let with_engine = |engine: &str| {
            let text = RUN_JSON_TEXT.replace(
                "\"future_field\"",
                &format!("\"probe_engine\": {engine}, \"future_field\""),
            );
            fs::write(dir.path().join(RUN_JSON), text).unwrap();
            load_run("CANDIDATE", dir.path())
        };
        let run =
            with_engine(r#"{"version": 2, "mode": "pipelined", "reply_clock": "kernel"}"#).unwrap();
        assert_eq!(run.meta.probe_engine_version, 2);
        assert_eq!(
            with_engine("null").unwrap().meta.probe_engine_version,
            PROBE_ENGINE_BEFORE_KEY
        );
        for broken in [r#"{"mode": "pipelined"}"#, r#"{"version": "2"}"#, "2"] {
            let err = with_engine(broken).unwrap_err().to_string();
            assert!(
                err.contains("CANDIDATE") && err.contains("probe_engine.version"),
                "{broken}: {err}"
            );
        }
    }

    #[test]
    fn problems_name_the_argument_the_directory_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = load_run("BASELINE", &missing).unwrap_err().to_string();
        assert!(
            err.contains("BASELINE") && err.contains("no such directory"),
            "{err}"
        );

        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("CANDIDATE") && err.contains("no run.json"),
            "{err}"
        );

        write_run(
            dir.path(),
            "seq,op,size_bytes,set_ms\n1,set,1,1.0\n",
            "seq,op,size_bytes,ok\n1,set,1,true\n",
        );
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("summary.csv has no column hol_delay_ms"),
            "{err}"
        );

        write_run(
            dir.path(),
            "seq,op,size_bytes,set_ms,hol_delay_ms\n1,set,1,fast,1.0\n",
            "seq,op,size_bytes,ok\n1,set,1,true\n",
        );
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("summary.csv line 2 is malformed"), "{err}");

        write_run(
            dir.path(),
            "seq,op,size_bytes,set_ms,hol_delay_ms\n1,set,1,1.0,1.0\n",
            "seq,op,size_bytes,ok\n1,delete,1,true\n",
        );
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("disagree"), "{err}");

        fs::remove_file(dir.path().join(WRITES_CSV)).unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("no writes.csv"), "{err}");

        fs::write(dir.path().join(RUN_JSON), "{not json").unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }
}
