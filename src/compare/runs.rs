//! Reads a run back from its `--out` directory through the types that wrote it: `run.json`
//! ([`RunJson`]: server, host, options, status; its `mode` first, so that a `probe load` or
//! `probe calibrate` run is named as such), `summary.csv` ([`WriteSummary`]: per write,
//! set_ms and hol_delay_ms) and `writes.csv` ([`WriteRecord`]: per write, outcome and error).
//! Fields those types gained after the first release have defaults, so runs recorded by older
//! builds still read; unknown fields and columns are ignored, so runs made by a later version
//! (with more of them) still read too.
//!
//! Every problem with a directory is a [`UsageError`] naming the directory and the file: the
//! user gave the tool something it cannot compare (exit 2).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::analyze::correlate::Analysis;
use crate::analyze::findings::WriteSummary;
use crate::error::UsageError;
use crate::measure::writer::RecordedWriter;
use crate::output::export::{
    CALIBRATION_JSON, Mode, RUN_JSON, RunJson, SUMMARY_CSV, ToolInfo, WRITES_CSV, columns,
};
use crate::record::WriteRecord;

/// The longest time a summary row may hold, ms: a day (no write of the tool's takes that long).
const MOST_MS: f64 = 86_400_000.0;
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
    /// Its CPU's model (absent in runs recorded before it was read).
    pub cpu_model: Option<String>,
    /// Its operating system and kernel.
    pub os: Option<String>,
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
    /// `--same-connection` (false in runs recorded before it).
    #[serde(default)]
    pub same_connection: Option<bool>,
    /// Sizes the run planned, bytes.
    pub planned_sizes_bytes: Vec<u64>,
    /// The collections the run planned, as compare names them (`hash 300k`); empty for a
    /// string run.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub planned_values: Vec<String>,
    /// The run's clock zero as Unix time, µs.
    pub started_unix_us: Option<u64>,
    /// The probes' median latency outside the write windows (run.json `baseline.p50_us`), µs:
    /// how fast the host answered a PING while nothing big was going on.
    #[serde(default)]
    pub baseline_p50_us: Option<u64>,
    /// The probe engine that took the run's probes (`probe_engine.version`;
    /// [`PROBE_ENGINE_BEFORE_KEY`] when run.json has no `probe_engine`). Engines differ in what
    /// `hol_delay_ms` counts, so it is not comparable across them.
    pub probe_engine_version: u32,
    /// The rule its figures were analysed by (`analysis_version`; 1 when run.json has none).
    pub analysis_version: u32,
    /// The server the writes went to (`host:port`), when run.json says (runs over several
    /// nodes have a summary.csv row per write per node: only this node's are compared).
    pub written_node: Option<String>,
    /// Successful writes per (size, op), counted from the rows (not run.json's `repeat`, which
    /// says what was planned): what the statistics had.
    pub repeats_read: RepeatsRead,
}

/// The fewest and most successful writes of any (size, op) of a run: its repeats as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RepeatsRead {
    /// The fewest of any (size, op).
    pub fewest: usize,
    /// The most of any (size, op).
    pub most: usize,
}

impl RepeatsRead {
    /// `5`, or `3-5` when the (size, op)s differ; empty when nothing was read.
    pub fn describe(self) -> Option<String> {
        match (self.fewest, self.most) {
            (_, 0) => None,
            (a, b) if a == b => Some(a.to_string()),
            (a, b) => Some(format!("{a}-{b}")),
        }
    }
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
            (Some(threads), Some(rate)) if threads > 0 && rate > 0.0 => u16::try_from(threads)
                .ok()
                .map(|threads| crate::measure::probe::aggregate_interval_us(threads, rate) / 1e3),
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
    /// A collection's kind and elements (`hash 300k`); empty for a string (and in runs
    /// recorded before value types). A string and a hash of the same bytes are not the same
    /// row.
    pub value: String,
    /// The writer's own time, ms.
    pub set_ms: f64,
    /// Head-of-line delay, ms; `None` when no probe overlapped the write.
    pub hol_delay_ms: Option<f64>,
}

/// What the rows of a compare are keyed by: the value's bytes, its kind and elements (empty for
/// a string: [`WriteSample::value`]) and the op.
pub type GroupKey = (u64, String, String);

/// A collection's kind and elements as the compare names it (`hash 300k`); empty for a string.
pub fn value_label(value_type: Option<&str>, elements: Option<u64>) -> String {
    match (value_type, elements) {
        (Some(kind), Some(elements)) if kind != "string" => {
            format!("{kind} {}", crate::output::report::format_count(elements))
        }
        _ => String::new(),
    }
}

/// A run read back from its directory: its metadata and its successful writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunData {
    /// From run.json.
    pub meta: RunMeta,
    /// Writes that succeeded, in write order.
    pub writes: Vec<WriteSample>,
    /// Writes that failed (left out of every figure): one entry per size, op and error, with
    /// the writes' numbers (`writes 4, 10 (set 8M): OOM ...`).
    pub failed_writes: Vec<String>,
    /// The (size, value, op) of every failed write, with the first one's error.
    #[serde(skip)]
    pub failed_groups: BTreeMap<GroupKey, String>,
    /// Problems found while reading that do not stop the compare.
    pub warnings: Vec<String>,
}

impl RunData {
    /// The repeats the rows hold: the fewest and most successful writes of any (size, op).
    pub fn repeats_read(&self) -> RepeatsRead {
        let groups = self.groups();
        RepeatsRead {
            fewest: groups.values().map(Vec::len).min().unwrap_or(0),
            most: groups.values().map(Vec::len).max().unwrap_or(0),
        }
    }

    /// Successful writes grouped by (size, value, op), in size order.
    pub fn groups(&self) -> BTreeMap<GroupKey, Vec<&WriteSample>> {
        let mut groups: BTreeMap<GroupKey, Vec<&WriteSample>> = BTreeMap::new();
        for write in &self.writes {
            groups
                .entry((write.size_bytes, write.value.clone(), write.op.clone()))
                .or_default()
                .push(write);
        }
        groups
    }
}

/// The columns summary.csv has had since the first release (its first 14: columns are only ever
/// added at the end), checked first so that a file
/// without one is named as such; a file of only these reads (a test checks it), the columns
/// added later having defaults in [`WriteSummary`].
const SUMMARY_REQUIRED: &[&str] = columns::SUMMARY.split_at(14).0;
/// The columns writes.csv has had since the first release, likewise for [`WriteRecord`].
const WRITES_REQUIRED: &[&str] = columns::WRITES.split_at(13).0;

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
    let (meta, expected) = read_run_json(dir).map_err(&bad)?;
    let mut warnings = Vec::new();
    let summary: Vec<WriteSummary> =
        read_csv(&dir.join(SUMMARY_CSV), SUMMARY_REQUIRED).map_err(&bad)?;
    // A run over several nodes: the written server's rows only (the others' figures are of
    // other servers, not more repeats).
    let nodes: Vec<SummaryNode> = read_csv(&dir.join(SUMMARY_CSV), &[]).map_err(&bad)?;
    let summarised: Vec<u32> = summary.iter().map(|row| row.seq).collect();
    // Rows that all name another server than the one this run wrote to are another run's
    // (its embedded server had another port): said so, not "no successful writes".
    if let Some(written) = meta.written_node.as_deref()
        && !nodes.is_empty()
        && nodes.iter().all(|n| !n.is_written(Some(written)))
    {
        let mut named: Vec<&str> = nodes.iter().filter_map(|n| n.node.as_deref()).collect();
        named.sort_unstable();
        named.dedup();
        return Err(bad(format!(
            "{SUMMARY_CSV}'s rows are of {}, not of {written}, the server run.json says this run wrote to: the files come from different runs",
            named.join(", ")
        )));
    }
    let summary: Vec<WriteSummary> = summary
        .into_iter()
        .zip(nodes)
        .filter(|(_, node)| node.is_written(meta.written_node.as_deref()))
        .map(|(row, _)| row)
        .collect();
    // Every summarised write has a row of the written server: one whose rows all name
    // another node (a replica) was dropped without a word, and its size read as never made
    // (the hostile trial, on a run of one server).
    let written: std::collections::BTreeSet<u32> = summary.iter().map(|row| row.seq).collect();
    if let Some(seq) = summarised.iter().find(|seq| !written.contains(seq)) {
        return Err(bad(format!(
            "{SUMMARY_CSV} has rows of write {seq}, but none of the server it was written to (every row a replica's or another shard's): was the file edited?"
        )));
    }
    let writes: Vec<WriteRecord> =
        read_csv(&dir.join(WRITES_CSV), WRITES_REQUIRED).map_err(&bad)?;
    let outcome = check_rows(&summary, &summarised, &writes, &meta, &expected).map_err(&bad)?;

    let mut samples = Vec::new();
    let mut failed_writes: Vec<(String, Vec<u32>)> = Vec::new();
    let mut failed_groups = BTreeMap::new();
    for row in summary {
        let recorded = outcome.get(&row.seq);
        if let Some(w) = recorded
            && (w.op != row.op || w.size_bytes != row.size_bytes)
        {
            return Err(bad(format!(
                "{SUMMARY_CSV} and {WRITES_CSV} disagree on write {} ({} {} vs {} {}): the files come from different runs",
                row.seq,
                row.op.name(),
                row.size_bytes,
                w.op.name(),
                w.size_bytes
            )));
        }
        let ok = row.ok && recorded.is_none_or(|w| w.ok);
        if !ok {
            // One line of it: the warning that quotes it is one line.
            let error = recorded
                .and_then(|w| w.error.as_deref())
                .and_then(|e| e.lines().find(|l| !l.trim().is_empty()))
                .unwrap_or("failed")
                .to_string();
            failed_groups
                .entry((
                    row.size_bytes,
                    value_label(row.value_type.as_deref(), row.elements),
                    row.op.name().to_string(),
                ))
                .or_insert_with(|| error.clone());
            // Writes of one size and op that failed alike are named once, with their numbers.
            let what = format!(
                "({} {}): {error}",
                row.op.name(),
                crate::units::format_size(row.size_bytes)
            );
            match failed_writes.iter_mut().find(|(w, _)| *w == what) {
                Some((_, seqs)) => seqs.push(row.seq),
                None => failed_writes.push((what, vec![row.seq])),
            }
            continue;
        }
        if !row.set_ms.is_finite() || row.hol_delay_ms.is_some_and(|v| !v.is_finite()) {
            return Err(bad(format!(
                "{SUMMARY_CSV}: write {} has a value that is not a number",
                row.seq
            )));
        }
        // A time the tool cannot have written: below zero, or past a day (an edited file read
        // -5 as "<0.50" and 1e308 as a 300-digit figure; the hostile trial).
        let sane = |ms: f64| (0.0..=MOST_MS).contains(&ms);
        if !sane(row.set_ms) || row.hol_delay_ms.is_some_and(|v| !sane(v)) {
            return Err(bad(format!(
                "{SUMMARY_CSV}: write {} has a time below 0 or past a day (set_ms {}, hol_delay_ms {})",
                row.seq,
                row.set_ms,
                row.hol_delay_ms
                    .map_or_else(|| "empty".to_string(), |v| v.to_string())
            )));
        }
        samples.push(WriteSample {
            seq: row.seq,
            op: row.op.name().to_string(),
            size_bytes: row.size_bytes,
            value: value_label(row.value_type.as_deref(), row.elements),
            // `-0` (an edited file) is 0: it printed as "-0.00 [-0.00--0.00]".
            set_ms: row.set_ms + 0.0,
            hol_delay_ms: row.hol_delay_ms.map(|v| v + 0.0),
        });
    }
    let failed_count: usize = failed_writes.iter().map(|(_, seqs)| seqs.len()).sum();
    let failed_writes: Vec<String> = failed_writes
        .into_iter()
        .map(|(what, seqs)| {
            let seqs: Vec<String> = seqs.iter().map(u32::to_string).collect();
            let label = if seqs.len() == 1 { "write" } else { "writes" };
            format!("{label} {} {what}", seqs.join(", "))
        })
        .collect();
    let summarized = samples.len() + failed_count;
    if writes.len() > summarized && meta.status == "complete" {
        return Err(bad(format!(
            "{WRITES_CSV} has {} write(s) that {SUMMARY_CSV} does not, though {RUN_JSON} says the run completed: was a file edited?",
            writes.len() - summarized
        )));
    }
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
            failed_count,
            failed_writes.join("; ")
        ));
    }
    let mut run = RunData {
        meta,
        writes: samples,
        failed_writes,
        failed_groups,
        warnings,
    };
    run.meta.repeats_read = run.repeats_read();
    Ok(run)
}

/// What run.json says the CSVs must agree with.
struct Expected {
    /// Every key of the run is under it (`holprobe:<run_id>:`).
    key_prefix: String,
    /// The writes its plan lays out ([`crate::measure::writer::WriterPlan::step_count`]):
    /// numbered 1 to this, each once; all of them in a complete run.
    planned_writes: usize,
    /// Every (op, size) its plan lays out; `None` for a plan too long to lay out here
    /// ([`PLAN_STEPS_CHECKED`]).
    planned_steps: Option<std::collections::BTreeSet<(&'static str, u64)>>,
}

/// The most writes a run's plan is laid out for, to check its rows' ops and sizes against: far
/// past any real run's, and short of what an edited `repeat` would make the check allocate.
const PLAN_STEPS_CHECKED: usize = 200_000;

/// The rows are the run's own, each once: no write twice in either file (a file edited, or
/// two joined, would count its values twice and fake repeats the run did not make), no key
/// outside the run's prefix (writes.csv of another run).
/// `summary` holds the written node's rows, `summarised` the writes of every row (a run over
/// several nodes has a row per node for each write). Returns writes.csv's rows by write.
fn check_rows<'a>(
    summary: &[WriteSummary],
    summarised: &[u32],
    writes: &'a [WriteRecord],
    meta: &RunMeta,
    expected: &Expected,
) -> Result<BTreeMap<u32, &'a WriteRecord>, String> {
    let twice = |name: &str, seqs: Vec<u32>| -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        match seqs.into_iter().find(|&seq| !seen.insert(seq)) {
            Some(seq) => Err(format!(
                "{name} holds write {seq} more than once: a run records each write once (was the file edited or joined with another?)"
            )),
            None => Ok(()),
        }
    };
    twice(SUMMARY_CSV, summary.iter().map(|row| row.seq).collect())?;
    twice(WRITES_CSV, writes.iter().map(|w| w.seq).collect())?;
    // Each row is of an op and size the plan makes: a 64M row relabelled 3M moved its
    // regression out of the compare, and a gate passed (the hostile trial).
    if let Some(steps) = &expected.planned_steps
        && let Some(row) = summary
            .iter()
            .find(|row| !steps.contains(&(row.op.name(), row.size_bytes)))
    {
        return Err(format!(
            "{SUMMARY_CSV} write {} is a {} of {} bytes, which the plan {RUN_JSON} records never makes: was the file edited?",
            row.seq,
            row.op.name(),
            row.size_bytes
        ));
    }
    // No probe in the window is what leaves hol_delay_ms empty: empty beside probes that were
    // in it, it read as "under one probe interval" and made a regression an improvement (the
    // hostile trial).
    if let Some(row) = summary
        .iter()
        .find(|row| row.ok && row.hol_delay_ms.is_none() && row.probes_in_window > 0)
    {
        return Err(format!(
            "{SUMMARY_CSV} write {} has no hol_delay_ms but {} probe(s) in its window: the tool leaves it empty only when no probe was (was the file edited?)",
            row.seq, row.probes_in_window
        ));
    }
    // The writes are the plan's: numbered from 1 to its count, every one of them in a complete
    // run (rows copied under new numbers made 20 repeats of a plan of 5, and a size taken out
    // of both files of a complete run passed as never planned; the hostile trial).
    let planned = expected.planned_writes;
    if let Some(w) = writes
        .iter()
        .find(|w| w.seq == 0 || w.seq as usize > planned)
    {
        return Err(format!(
            "{WRITES_CSV} holds write {}, but the plan {RUN_JSON} records makes writes 1 to {planned}: was the file edited or joined with another?",
            w.seq
        ));
    }
    if meta.status == "complete" && writes.len() != planned {
        return Err(format!(
            "{WRITES_CSV} holds {} write(s), but {RUN_JSON} says the run completed a plan of {planned}: was the file edited?",
            writes.len()
        ));
    }
    // Every summarised write is in writes.csv, and both say alike whether it succeeded: a row
    // only summary.csv has cannot be checked against the run's key prefix (an edited file was
    // counted as a repeat, or dropped without a word: the hostile trial).
    let recorded: BTreeMap<u32, &WriteRecord> = writes.iter().map(|w| (w.seq, w)).collect();
    if let Some(seq) = summarised.iter().find(|seq| !recorded.contains_key(seq)) {
        return Err(format!(
            "{SUMMARY_CSV} holds write {seq} that {WRITES_CSV} does not: a run records every write it summarises (was a file edited or joined with another?)"
        ));
    }
    if let Some((row, w)) = summary
        .iter()
        .map(|row| (row, recorded[&row.seq]))
        .find(|(row, w)| w.ok != row.ok)
    {
        return Err(format!(
            "{SUMMARY_CSV} and {WRITES_CSV} disagree on whether write {} succeeded (ok {} vs {}): was a file edited?",
            row.seq, row.ok, w.ok
        ));
    }
    if let Some(w) = writes
        .iter()
        .find(|w| !w.key.is_empty() && !w.key.starts_with(&expected.key_prefix))
    {
        return Err(format!(
            "{WRITES_CSV} write {} is of key '{}', not under this run's prefix '{}' (run {} in {RUN_JSON}): the files come from different runs",
            w.seq, w.key, expected.key_prefix, meta.run_id
        ));
    }
    Ok(recorded)
}

fn read_run_json(dir: &Path) -> Result<(RunMeta, Expected), String> {
    let path = dir.join(RUN_JSON);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            // The --out of several --server-bin holds one run per binary, each in its own
            // directory: name them.
            let mut runs: Vec<String> = fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.join(RUN_JSON).is_file())
                        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                        .collect()
                })
                .unwrap_or_default();
            runs.sort();
            if !runs.is_empty() {
                return Err(format!(
                    "no {RUN_JSON} there, but its directories {} each hold a run (the --out of several --server-bin): name one of them",
                    runs.join(", ")
                ));
            }
            return Err(format!("no {RUN_JSON} there: not a probe --out directory"));
        }
        Err(err) => return Err(format!("cannot read {RUN_JSON}: {err}")),
    };
    let json: Value = serde_json::from_str(&text)
        .map_err(|err| format!("{RUN_JSON} is not valid JSON ({err})"))?;
    // Whose file it is and which command wrote it come first, so that another tool's JSON,
    // or the run.json of `probe load` (another type), is named as such rather than by a field
    // it lacks.
    let mode = match Stamp::deserialize(&json) {
        Ok(stamp) if stamp.tool.name == "holprobe" => match stamp.mode.as_deref() {
            None => Mode::probe(),
            Some(name) => Mode::from_name(name).ok_or_else(|| {
                format!(
                    "{RUN_JSON}: mode '{name}' is not one this version knows (probe, load, calibrate): a run of a later version?"
                )
            })?,
        },
        _ => {
            return Err(format!(
                "{RUN_JSON} was not written by holprobe (no tool.name)"
            ));
        }
    };
    // `probe calibrate` writes the probe run's run.json (its injections as the writes) and its
    // own findings beside it; its run.json says `calibrate`, but one recorded before it did
    // says `probe`, and only calibration.json beside it tells.
    let mode = match mode {
        Mode::Probe if dir.join(CALIBRATION_JSON).is_file() => Mode::Calibrate,
        mode => mode,
    };
    if mode != Mode::Probe {
        return Err(format!(
            "a `probe {}` run: compare reads the runs of `probe --writer-sizes`",
            mode.name()
        ));
    }
    let run: RunJson = serde_path_to_error::deserialize(&json).map_err(|err| {
        // The findings are flattened into run.json, and an error inside them comes without its
        // path: read them alone to find it.
        if err.path().iter().next().is_none()
            && let Err(in_findings) = serde_path_to_error::deserialize::<_, Analysis>(&json)
        {
            return describe_json_error(in_findings);
        }
        describe_json_error(err)
    })?;
    let Some(writer) = &run.options.writer else {
        return Err("an observe-mode run (no --writer-sizes): it has no writes to compare".into());
    };
    // The probing the resolution of every head-of-line figure comes from: only what the tool
    // can record (an edited probe_rate of 0.001 made one probe interval 1000 s, and every
    // delay "<500000 ms, no regression"; the hostile trial).
    use crate::cli::sections::probing::{MAX_PROBE_RATE, MAX_PROBE_THREADS};
    let (rate, threads) = (run.options.probe_rate, run.options.probe_threads);
    if !(crate::units::MIN_RATE_PER_S..=MAX_PROBE_RATE).contains(&rate) {
        return Err(format!(
            "{RUN_JSON}: options.probe_rate {rate} is not a rate the tool probes at ({} to {MAX_PROBE_RATE} a second)",
            crate::units::MIN_RATE_PER_S
        ));
    }
    if !(1..=MAX_PROBE_THREADS).contains(&threads) {
        return Err(format!(
            "{RUN_JSON}: options.probe_threads {threads} is not a count the tool probes with (1 to {MAX_PROBE_THREADS})"
        ));
    }
    // The rules its figures were measured and analysed by: only those this build knows (an
    // edited engine version 9 took hol_delay_ms out of the verdict, and an analysis version 99
    // was explained as version 1; the hostile trial). A later version's run is compared by
    // that version.
    use crate::analyze::correlate::ANALYSIS_VERSION;
    use crate::measure::probe::PROBE_ENGINE_VERSION;
    if let Some(engine) = &run.probe_engine
        && !(PROBE_ENGINE_BEFORE_KEY..=PROBE_ENGINE_VERSION).contains(&engine.version)
    {
        return Err(format!(
            "{RUN_JSON}: probe_engine.version {} is not an engine this version knows ({PROBE_ENGINE_BEFORE_KEY} to {PROBE_ENGINE_VERSION}): a run of a later version? compare it with that version",
            engine.version
        ));
    }
    if let Some(analysis) = run.analysis_version
        && !(1..=ANALYSIS_VERSION).contains(&analysis)
    {
        return Err(format!(
            "{RUN_JSON}: analysis_version {analysis} is not an analysis this version knows (1 to {ANALYSIS_VERSION}): a run of a later version? compare it with that version"
        ));
    }
    let planned_writes = writer.plan.step_count();
    let expected = Expected {
        key_prefix: run.key_prefix.clone(),
        planned_writes,
        planned_steps: (planned_writes <= PLAN_STEPS_CHECKED).then(|| {
            writer
                .plan
                .steps(&run.key_prefix)
                .iter()
                .map(|step| (step.op.name(), step.size_bytes))
                .collect()
        }),
    };
    Ok((RunMeta::of(dir, &run, writer), expected))
}

/// The node columns of a summary.csv row (absent in runs recorded before them).
#[derive(Deserialize)]
struct SummaryNode {
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    same_shard: Option<bool>,
}

impl SummaryNode {
    /// Whether the row is of the server the writes went to: the node run.json names, or else
    /// the written shard's master; every row of a run without node columns.
    fn is_written(&self, written: Option<&str>) -> bool {
        match (written, self.node.as_deref()) {
            (_, None | Some("")) => true,
            (Some(written), Some(node)) => node == written,
            (None, Some(_)) => {
                self.role.as_deref() != Some("replica") && self.same_shard != Some(false)
            }
        }
    }
}

/// The part of run.json read before the rest.
#[derive(Deserialize)]
struct Stamp {
    tool: ToolInfo,
    /// [`Mode`]'s name (absent in probe runs recorded before it was written); read as text so
    /// that a mode this version does not know is named as such.
    #[serde(default)]
    mode: Option<String>,
}

/// One line naming run.json and the field: `run.json has no server.flavor` for a field that is
/// not there, `run.json: options.probe_rate: invalid type: ...` for one that does not read.
fn describe_json_error(err: serde_path_to_error::Error<serde_json::Error>) -> String {
    // The path is that of the object a missing field is missing from; serde names the field in
    // its message only.
    let path = err.path().to_string();
    let error = err.into_inner().to_string();
    let missing = error
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'));
    let field = match (path.as_str(), missing) {
        (".", Some(name)) => name.to_string(),
        (".", None) => String::new(),
        (path, Some(name)) => format!("{path}.{name}"),
        (path, None) => path.to_string(),
    };
    if field == "probe_engine" || field == "probe_engine.version" {
        return format!("{RUN_JSON} has a probe_engine without a numeric probe_engine.version");
    }
    match (missing, field.is_empty()) {
        (Some(_), _) => format!("{RUN_JSON} has no {field}"),
        (None, true) => format!("{RUN_JSON}: {error}"),
        (None, false) => format!("{RUN_JSON}: {field}: {error}"),
    }
}

impl RunMeta {
    /// What the compare needs of a run with writes.
    fn of(dir: &Path, run: &RunJson, writer: &RecordedWriter) -> RunMeta {
        let options = &run.options;
        RunMeta {
            dir: dir.to_path_buf(),
            run_id: run.run_id.clone(),
            status: run.status.name().to_string(),
            tool_version: run.tool.version.clone(),
            server_flavor: run.server.flavor.clone(),
            server_version: run.server.version.clone(),
            server_binary: run.server.binary.clone(),
            server_appendonly: run.server.appendonly.clone(),
            hostname: run.host.hostname.clone(),
            cpus: Some(run.host.cpus as u64),
            cpu_model: run.host.cpu_model.clone(),
            os: run.host.os.clone(),
            probe_threads: Some(u64::from(options.probe_threads)),
            probe_rate: Some(options.probe_rate),
            probe_cmd: Some(options.probe_cmd.name().to_string()),
            stall_threshold_us: Some(options.stall_threshold_us),
            repeat: Some(u64::from(writer.repeat)),
            gap_ms: Some(writer.gap.as_secs_f64() * 1e3),
            overwrite: Some(writer.overwrite),
            keep: Some(writer.keep),
            same_connection: writer.connection_recorded.then_some(writer.same_connection),
            planned_sizes_bytes: writer.sizes.clone(),
            planned_values: writer
                .elements
                .iter()
                .map(|&e| value_label(Some(&writer.value_type), Some(e)))
                .filter(|label| !label.is_empty())
                .collect(),
            started_unix_us: Some(run.started_unix_us),
            baseline_p50_us: Some(run.analysis.baseline.p50_us),
            written_node: run.node.as_ref().map(|n| n.node.clone()),
            probe_engine_version: run
                .probe_engine
                .as_ref()
                .map_or(PROBE_ENGINE_BEFORE_KEY, |engine| engine.version),
            analysis_version: run.analysis_version.unwrap_or(1),
            repeats_read: RepeatsRead::default(),
        }
    }
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
                csv::ErrorKind::UnequalLengths {
                    expected_len, len, ..
                } => format!(
                    "{len} fields where the header has {expected_len} (a file cut short or edited?)"
                ),
                csv::ErrorKind::Utf8 { .. } => "not UTF-8 text".to_string(),
                csv::ErrorKind::Io(err) => err.to_string(),
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
    use crate::output::export::csv_bytes;
    use crate::output::export::sample::{self, ADDED_LATER, remove};

    /// A run over several nodes is compared on the written server's rows alone.
    #[test]
    fn only_the_written_nodes_rows_are_compared() {
        let row = |node: Option<&str>, role: Option<&str>, same: Option<bool>| SummaryNode {
            node: node.map(String::from),
            role: role.map(String::from),
            same_shard: same,
        };
        let written = Some("m:1");
        assert!(row(Some("m:1"), Some("master"), Some(true)).is_written(written));
        assert!(!row(Some("r:1"), Some("replica"), Some(true)).is_written(written));
        assert!(!row(Some("m:2"), Some("master"), Some(false)).is_written(written));
        // Older runs: no node columns, every row is the one server's.
        assert!(row(None, None, None).is_written(written));
        assert!(row(None, None, None).is_written(None));
        // run.json without `node`: the written shard's master.
        assert!(row(Some("m:1"), Some("master"), Some(true)).is_written(None));
        assert!(!row(Some("r:1"), Some("replica"), Some(true)).is_written(None));
        assert!(!row(Some("m:2"), Some("master"), Some(false)).is_written(None));
    }

    /// Writes `run` as the run itself would: run.json, summary.csv and writes.csv.
    fn write_run(dir: &Path, run: &RunJson) {
        write_json(dir, &plan_of_its_rows(serde_json::to_value(run).unwrap()));
        let summary = csv_bytes(&run.analysis.writes, columns::SUMMARY).unwrap();
        let writes = csv_bytes(&sample::write_records(run), columns::WRITES).unwrap();
        fs::write(dir.join(SUMMARY_CSV), summary).unwrap();
        fs::write(dir.join(WRITES_CSV), writes).unwrap();
    }

    fn write_json(dir: &Path, json: &Value) {
        fs::write(dir.join(RUN_JSON), serde_json::to_vec_pretty(json).unwrap()).unwrap();
    }

    /// Rewrites the CSV `name` in `dir`, keeping only the columns `keep` says yes to.
    fn keep_columns(dir: &Path, name: &str, keep: impl Fn(&str) -> bool) {
        let path = dir.join(name);
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let headers = reader.headers().unwrap().clone();
        let kept: Vec<usize> = (0..headers.len()).filter(|&i| keep(&headers[i])).collect();
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer
            .write_record(kept.iter().map(|&i| &headers[i]))
            .unwrap();
        for record in reader.records() {
            let record = record.unwrap();
            writer
                .write_record(kept.iter().map(|&i| &record[i]))
                .unwrap();
        }
        fs::write(path, writer.into_inner().unwrap()).unwrap();
    }

    fn sample_json() -> Value {
        plan_of_its_rows(serde_json::to_value(sample::run_json()).unwrap())
    }

    /// The sample run (the exports' golden files) with a plan that makes its rows: its custom
    /// command removes each key, so its plan has no DEL, while its third row is one (the compare
    /// refuses a row its plan does not make). The same number of writes either way.
    fn plan_of_its_rows(mut json: Value) -> Value {
        json["options"]["writer"]["commands"] = Value::Array(Vec::new());
        json
    }

    /// The round trip: every field compare reads, written by the run's own types with a value
    /// other than its default, comes back.
    #[test]
    fn a_run_reads_back_through_the_types_that_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let written = sample::run_json();
        write_run(dir.path(), &written);
        let run = load_run("BASELINE", dir.path()).unwrap();
        let plan = written.options.writer.as_ref().unwrap();
        assert_eq!(
            run.meta,
            RunMeta {
                dir: dir.path().to_path_buf(),
                run_id: "feedf00d".into(),
                status: "interrupted".into(),
                tool_version: "0.0.0-golden".into(),
                server_flavor: "valkey".into(),
                server_version: "9.1.0".into(),
                server_binary: Some("/usr/bin/valkey-server".into()),
                server_appendonly: Some("yes".into()),
                hostname: Some("bench-host".into()),
                cpus: Some(8),
                cpu_model: Some("AMD EPYC".into()),
                os: Some("Linux (Debian GNU/Linux 12) (kernel 6.1.0)".into()),
                probe_threads: Some(3),
                probe_rate: Some(750.5),
                probe_cmd: Some("get".into()),
                stall_threshold_us: Some(2500),
                repeat: Some(4),
                gap_ms: Some(250.0),
                overwrite: Some(true),
                keep: Some(true),
                same_connection: Some(false),
                planned_sizes_bytes: plan.sizes.clone(),
                planned_values: vec![],
                started_unix_us: Some(1_796_053_782_168_721),
                baseline_p50_us: Some(31),
                probe_engine_version: 2,
                analysis_version: 2,
                written_node: Some("127.0.0.1:6379".into()),
                repeats_read: RepeatsRead { fewest: 1, most: 1 },
            }
        );
        assert_eq!(run.meta.server_label(), "valkey 9.1.0 appendonly");
        let expected: Vec<WriteSample> = written
            .analysis
            .writes
            .iter()
            .filter(|w| w.ok)
            .map(|w| WriteSample {
                seq: w.seq,
                op: w.op.name().into(),
                size_bytes: w.size_bytes,
                value: String::new(),
                set_ms: w.set_ms,
                hol_delay_ms: w.hol_delay_ms,
            })
            .collect();
        assert_eq!(run.writes, expected);
        assert_eq!(
            run.failed_writes,
            ["write 3 (delete 3M): OOM command not allowed"]
        );
        assert!(
            run.warnings.iter().any(|w| w.contains("'interrupted'")),
            "{:?}",
            run.warnings
        );
    }

    /// The mode is read first: a probe run says `probe` (or nothing, before it was written); a
    /// directory holding calibration.json is `probe calibrate`'s, whose run.json is a probe
    /// run's.
    #[test]
    fn the_mode_says_whose_run_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let written = sample::run_json();
        write_run(dir.path(), &written);
        assert_eq!(sample_json()["mode"], "probe");
        assert_eq!(
            load_run("BASELINE", dir.path()).unwrap().meta.run_id,
            "feedf00d"
        );
        fs::write(dir.path().join(CALIBRATION_JSON), "{}").unwrap();
        let err = load_run("BASELINE", dir.path()).unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.contains("BASELINE") && err.contains("a `probe calibrate` run"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_and_columns_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), &sample::run_json());
        let mut json = sample_json();
        json["future_field"] = serde_json::json!([1, 2, 3]);
        json["options"]["future_option"] = serde_json::json!({"a": 1});
        json["server"]["future_fact"] = serde_json::json!("x");
        write_json(dir.path(), &json);
        for name in [SUMMARY_CSV, WRITES_CSV] {
            let text = fs::read_to_string(dir.path().join(name)).unwrap();
            let widened: String = text
                .lines()
                .enumerate()
                .map(|(i, line)| {
                    let extra = if i == 0 { "new_column" } else { "x" };
                    format!("{extra},{line},{extra}\n")
                })
                .collect();
            fs::write(dir.path().join(name), widened).unwrap();
        }
        let run = load_run("BASELINE", dir.path()).unwrap();
        assert_eq!(run.writes.len(), 2);
        assert_eq!(run.failed_writes.len(), 1);
        assert_eq!(run.groups().len(), 2);
    }

    /// A run of the first release's shape: none of the fields run.json, summary.csv and
    /// writes.csv gained since, so no `probe_engine` either (engine 1).
    #[test]
    fn a_run_of_the_first_release_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), &sample::run_json());
        let mut json = sample_json();
        for (pointer, key) in ADDED_LATER {
            remove(&mut json, pointer, key);
        }
        write_json(dir.path(), &json);
        keep_columns(dir.path(), SUMMARY_CSV, |c| SUMMARY_REQUIRED.contains(&c));
        keep_columns(dir.path(), WRITES_CSV, |c| WRITES_REQUIRED.contains(&c));
        let run = load_run("BASELINE", dir.path()).unwrap();
        assert_eq!(run.meta.probe_engine_version, PROBE_ENGINE_BEFORE_KEY);
        assert_eq!(run.meta.gap_ms, Some(250.0));
        assert_eq!(run.writes.len(), 2);
        assert_eq!(run.writes[1].hol_delay_ms, Some(5.4375));
        assert_eq!(run.failed_writes.len(), 1);
    }

    /// The required columns are columns of the files.
    #[test]
    fn required_columns_are_export_columns() {
        for column in SUMMARY_REQUIRED {
            assert!(columns::SUMMARY.contains(column), "{column}");
        }
        for column in WRITES_REQUIRED {
            assert!(columns::WRITES.contains(column), "{column}");
        }
    }

    /// The runs shipped in data/ (engine 2, recorded before stalls_found and the named stalls)
    /// read, and read as engine 1 without their probe_engine.
    #[test]
    fn the_shipped_runs_read() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
        let mut dirs = vec![];
        let mut pending = vec![data];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                }
            }
            if dir.join(RUN_JSON).is_file() {
                dirs.push(dir);
            }
        }
        assert!(dirs.len() >= 5, "{dirs:?}");
        for dir in &dirs {
            let run = load_run("BASELINE", dir).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(run.meta.probe_engine_version, 2, "{}", dir.display());
            assert_eq!(run.meta.status, "complete");
            assert!(!run.writes.is_empty());
        }
        let old = tempfile::tempdir().unwrap();
        for name in [SUMMARY_CSV, WRITES_CSV] {
            fs::copy(dirs[0].join(name), old.path().join(name)).unwrap();
        }
        let mut json: Value =
            serde_json::from_str(&fs::read_to_string(dirs[0].join(RUN_JSON)).unwrap()).unwrap();
        remove(&mut json, "", "probe_engine");
        if json.get("analysis_version").is_some() {
            remove(&mut json, "", "analysis_version");
        }
        write_json(old.path(), &json);
        let run = load_run("CANDIDATE", old.path()).unwrap();
        assert_eq!(run.meta.probe_engine_version, PROBE_ENGINE_BEFORE_KEY);
        // A run analysed before run.json said by which rule: the first.
        assert_eq!(run.meta.analysis_version, 1);
    }

    #[test]
    fn the_probe_engine_version_is_read_and_a_broken_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), &sample::run_json());
        let with_engine = |engine: Value| {
            let mut json = sample_json();
            json["probe_engine"] = engine;
            write_json(dir.path(), &json);
            load_run("CANDIDATE", dir.path())
        };
        let mut engine = sample_json()["probe_engine"].clone();
        engine["version"] = 1.into();
        let run = with_engine(engine.clone()).unwrap();
        assert_eq!(run.meta.probe_engine_version, 1);
        // An engine this version does not know: not compared (an edited 9, or 0, took
        // hol_delay_ms out of the verdict; the hostile trial).
        for unknown in [0, 3, 9] {
            engine["version"] = unknown.into();
            let err = with_engine(engine.clone()).unwrap_err().to_string();
            assert!(
                err.contains(&format!(
                    "probe_engine.version {unknown} is not an engine this version knows (1 to 2)"
                )),
                "{err}"
            );
        }
        assert_eq!(
            with_engine(Value::Null).unwrap().meta.probe_engine_version,
            PROBE_ENGINE_BEFORE_KEY
        );
        for broken in [
            serde_json::json!({"mode": "pipelined"}),
            serde_json::json!({"version": "2"}),
            serde_json::json!(2),
        ] {
            let err = with_engine(broken.clone()).unwrap_err().to_string();
            assert!(
                err.contains("CANDIDATE") && err.contains("probe_engine.version"),
                "{broken}: {err}"
            );
        }
    }

    /// An analysis version this build does not know is refused, not explained as version 1.
    #[test]
    fn an_unknown_analysis_version_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), &sample::run_json());
        for (version, ok) in [(1, true), (2, true), (0, false), (3, false), (99, false)] {
            let mut json = sample_json();
            json["analysis_version"] = version.into();
            write_json(dir.path(), &json);
            match load_run("CANDIDATE", dir.path()) {
                Ok(run) => {
                    assert!(ok, "{version}");
                    assert_eq!(run.meta.analysis_version, version);
                }
                Err(err) => {
                    assert!(!ok, "{version}: {err}");
                    assert!(
                        err.to_string().contains(&format!(
                            "analysis_version {version} is not an analysis this version knows (1 to 2)"
                        )),
                        "{err}"
                    );
                }
            }
        }
    }

    /// The writes are the plan's: numbered within it, all of them in a complete run, each with
    /// a row of the written server. The hostile trial's edits: rows copied under new numbers
    /// (20 repeats of a plan of 5), a size taken out of both files of a complete run, every
    /// row of some writes marked a replica's (dropped without a word).
    #[test]
    fn rows_the_plan_does_not_make_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let written = sample::run_json();
        let planned = written.options.writer.as_ref().unwrap().plan.step_count();
        type Edit<'a> = &'a dyn Fn(&mut Vec<Vec<String>>, &mut Vec<String>, bool);
        let load = |status: &str, edit: Edit| {
            write_run(dir.path(), &written);
            let mut json = sample_json();
            json["status"] = status.into();
            write_json(dir.path(), &json);
            for name in [SUMMARY_CSV, WRITES_CSV] {
                let path = dir.path().join(name);
                let mut reader = csv::Reader::from_path(&path).unwrap();
                let mut headers: Vec<String> =
                    reader.headers().unwrap().iter().map(String::from).collect();
                let mut rows: Vec<Vec<String>> = reader
                    .records()
                    .map(|r| r.unwrap().iter().map(String::from).collect())
                    .collect();
                edit(&mut rows, &mut headers, name == SUMMARY_CSV);
                let mut writer = csv::Writer::from_writer(Vec::new());
                writer.write_record(&headers).unwrap();
                for row in rows {
                    writer.write_record(&row).unwrap();
                }
                fs::write(path, writer.into_inner().unwrap()).unwrap();
            }
            load_run("CANDIDATE", dir.path())
        };
        let unchanged = |_: &mut Vec<Vec<String>>, _: &mut Vec<String>, _: bool| {};
        // The sample is an interrupted run of three of its plan's writes.
        assert!(written.analysis.writes.len() < planned);
        load("interrupted", &unchanged).unwrap();
        // Complete, with fewer writes than its plan: rows taken out.
        let err = load("complete", &unchanged).unwrap_err().to_string();
        assert!(
            err.contains(&format!("says the run completed a plan of {planned}")),
            "{err}"
        );
        // Rows copied under numbers past the plan.
        let copied = |rows: &mut Vec<Vec<String>>, headers: &mut Vec<String>, _: bool| {
            let seq = headers.iter().position(|h| h == "seq").unwrap();
            let copies: Vec<Vec<String>> = rows
                .iter()
                .map(|row| {
                    let mut row = row.clone();
                    row[seq] = (row[seq].parse::<usize>().unwrap() + planned).to_string();
                    row
                })
                .collect();
            rows.extend(copies);
        };
        let err = load("interrupted", &copied).unwrap_err().to_string();
        assert!(
            err.contains("but the plan run.json records makes writes 1 to"),
            "{err}"
        );
        // Every row of a write marked another node's (the written server's row gone).
        let replica = |rows: &mut Vec<Vec<String>>, headers: &mut Vec<String>, summary: bool| {
            if !summary {
                return;
            }
            headers.extend(["node".to_string(), "role".to_string()]);
            for (at, row) in rows.iter_mut().enumerate() {
                let (node, role) = match at {
                    0 => ("127.0.0.1:1", "replica"),
                    _ => ("127.0.0.1:6379", "master"),
                };
                row.extend([node.to_string(), role.to_string()]);
            }
        };
        let err = load("interrupted", &replica).unwrap_err().to_string();
        assert!(
            err.contains("none of the server it was written to"),
            "{err}"
        );
    }

    /// Each problem with run.json is one line naming the file and the field.
    #[test]
    fn run_json_problems_name_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), &sample::run_json());
        let load_with = |edit: &dyn Fn(&mut Value)| {
            let mut json = sample_json();
            edit(&mut json);
            write_json(dir.path(), &json);
            let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
            assert!(!err.contains('\n'), "{err}");
            assert!(err.contains("CANDIDATE"), "{err}");
            err
        };
        for (pointer, key, field) in [
            ("", "run_id", "run_id"),
            ("", "status", "status"),
            ("/server", "flavor", "server.flavor"),
            ("/server", "version", "server.version"),
            ("/options", "probe_rate", "options.probe_rate"),
            ("/options/writer", "sizes", "options.writer.sizes"),
        ] {
            let err = load_with(&|json| remove(json, pointer, key));
            assert!(err.contains(&format!("run.json has no {field}")), "{err}");
        }
        let err = load_with(&|json| json["options"]["probe_rate"] = "fast".into());
        assert!(
            err.contains("run.json: options.probe_rate: invalid type: string \"fast\""),
            "{err}"
        );
        // A probing the tool cannot have recorded: one probe interval of 1000 s hid every
        // head-of-line difference under "<500000".
        for rate in [0.001, 1e-300, 0.0, -1.0, 1e9] {
            let err = load_with(&|json| json["options"]["probe_rate"] = rate.into());
            assert!(
                err.contains(&format!(
                    "options.probe_rate {rate} is not a rate the tool probes at"
                )),
                "{rate}: {err}"
            );
        }
        for threads in [0, 65] {
            let err = load_with(&|json| json["options"]["probe_threads"] = threads.into());
            assert!(
                err.contains(&format!(
                    "options.probe_threads {threads} is not a count the tool probes with"
                )),
                "{threads}: {err}"
            );
        }
        let err = load_with(&|json| json["status"] = "paused".into());
        assert!(
            err.contains("run.json: status: unknown variant `paused`"),
            "{err}"
        );
        for foreign in [
            serde_json::json!({}),
            serde_json::json!([1]),
            serde_json::json!({"tool": {"name": "other", "version": "1"}}),
            serde_json::json!({"tool": "holprobe"}),
        ] {
            let err = load_with(&|json| *json = foreign.clone());
            assert!(
                err.contains("run.json was not written by holprobe (no tool.name)"),
                "{foreign}: {err}"
            );
        }
        let err = load_with(&|json| json["options"]["writer"]["gap"] = (-5.0).into());
        assert!(
            err.contains("run.json: options.writer.gap: expected a duration in milliseconds"),
            "{err}"
        );
        // Inside the findings, which run.json holds flattened.
        let err = load_with(&|json| remove(json, "", "baseline"));
        assert!(err.contains("run.json has no baseline"), "{err}");
        let err = load_with(&|json| remove(json, "/summary", "stall_ms"));
        assert!(err.contains("run.json has no summary[0].stall_ms"), "{err}");
        let err = load_with(&|json| json["stalls"][0]["end_us"] = "x".into());
        assert!(
            err.contains("run.json: stalls[0].end_us: invalid type: string \"x\""),
            "{err}"
        );
        let err = load_with(&|json| json["mode"] = "load".into());
        assert!(err.contains("a `probe load` run"), "{err}");
        let err = load_with(&|json| json["mode"] = "calibrate".into());
        assert!(err.contains("a `probe calibrate` run"), "{err}");
        let err = load_with(&|json| json["mode"] = "scan".into());
        assert!(
            err.contains("run.json: mode 'scan' is not one this version knows"),
            "{err}"
        );
        let err = load_with(&|json| json["options"]["writer"] = Value::Null);
        assert!(err.contains("observe-mode"), "{err}");
    }

    /// Issue 22: a summary.csv with every row repeated read as "5 repeats" and its p-values
    /// shrank into a regression; a writes.csv of another run was accepted. Both are refused in
    /// one line naming the file, and the repeats are counted from the rows.
    #[test]
    fn duplicated_rows_and_files_of_another_run_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let written = sample::run_json();
        write_run(dir.path(), &written);
        let run = load_run("CANDIDATE", dir.path()).unwrap();
        assert_eq!(run.meta.repeats_read, RepeatsRead { fewest: 1, most: 1 });
        assert_eq!(run.repeats_read().describe().as_deref(), Some("1"));
        for name in [SUMMARY_CSV, WRITES_CSV] {
            write_run(dir.path(), &written);
            let path = dir.path().join(name);
            let text = fs::read_to_string(&path).unwrap();
            let (header, rows) = text.split_once('\n').unwrap();
            fs::write(&path, format!("{header}\n{}", rows.repeat(51))).unwrap();
            let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
            assert!(!err.contains('\n'), "{err}");
            assert!(
                err.contains("CANDIDATE")
                    && err.contains(&format!("{name} holds write 1 more than once")),
                "{err}"
            );
        }
        // writes.csv of another run: the same plan, so seq, op and size agree, but its keys
        // name another run id.
        write_run(dir.path(), &written);
        let path = dir.path().join(WRITES_CSV);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("holprobe:feedf00d:"), "{text}");
        fs::write(
            &path,
            text.replace("holprobe:feedf00d:", "holprobe:0badc0de:"),
        )
        .unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.contains("writes.csv write 1 is of key 'holprobe:0badc0de:")
                && err.contains("not under this run's prefix 'holprobe:feedf00d:'")
                && err.contains("different runs"),
            "{err}"
        );
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

        let run = sample::run_json();
        write_run(dir.path(), &run);
        keep_columns(dir.path(), SUMMARY_CSV, |c| c != "hol_delay_ms");
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("summary.csv has no column hol_delay_ms"),
            "{err}"
        );

        write_run(dir.path(), &run);
        let path = dir.path().join(SUMMARY_CSV);
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replacen(",2.5,", ",fast,", 1)).unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("summary.csv line 2 is malformed"), "{err}");

        write_run(dir.path(), &run);
        let path = dir.path().join(WRITES_CSV);
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replacen(",set,", ",delete,", 1)).unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("disagree"), "{err}");

        // A summarised write writes.csv lacks, and the two files disagreeing on its success
        // (edited files went through: the hostile trial); a row cut short is named plainly.
        write_run(dir.path(), &run);
        let text = fs::read_to_string(&path).unwrap();
        let kept: Vec<&str> = text.lines().collect();
        fs::write(&path, kept[..kept.len() - 1].join("\n") + "\n").unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("that writes.csv does not"), "{err}");
        write_run(dir.path(), &run);
        let summary = dir.path().join(SUMMARY_CSV);
        let text = fs::read_to_string(&summary).unwrap();
        fs::write(&summary, text.replacen(",true,", ",false,", 1)).unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("disagree on whether write"), "{err}");
        write_run(dir.path(), &run);
        let text = fs::read_to_string(&summary).unwrap();
        fs::write(&summary, text + "1,set,5\n").unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("fields where the header has"), "{err}");
        write_run(dir.path(), &run);

        fs::remove_file(dir.path().join(WRITES_CSV)).unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("no writes.csv"), "{err}");

        fs::write(dir.path().join(RUN_JSON), "{not json").unwrap();
        let err = load_run("CANDIDATE", dir.path()).unwrap_err().to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }
}
