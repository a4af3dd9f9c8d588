//! `probe keys --refit`: a cost model fitted from the tool's own measured ops on a server it
//! starts from `--server-bin`. One main-job run per value type (the writer's `--type`,
//! `--elements`, `--ops` plan, as `data/record_collections.sh` runs it), on one server with every
//! `lazyfree-lazy-*` set to `no` (a model prices main-thread frees), their summary rows turned
//! into fit rows ([`crate::keys::refit`]) and fitted. Also reads recorded runs back
//! ([`tool_rows_of_run`]), which is how the shipped models are refitted from data/collections.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};

use super::super::Output;
use super::super::deployment::{Deployment, describe_target};
use super::{KeysPlan, lazyfree_settings};
use crate::analyze::findings::WriteSummary;
use crate::cli::sections::workload::WorkloadArgs;
use crate::compare::runs::{RunMeta, load_run};
use crate::error::{EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::keys::fit::FitRow;
use crate::keys::model::ModelServer;
use crate::keys::refit::{fit_rows, refit_model};
use crate::measure::local_cluster::LocalTopologySpec;
use crate::measure::writer::WriterPlan;
use crate::output::export::{SUMMARY_CSV, prepare_out_dir, write_atomic};
use crate::output::format::{self, Format};
use crate::run::{self, Notice};

/// The ops of every collection run: each way the tool frees or reads a value, the value built
/// again before each (the plan of data/collections).
pub const REFIT_OPS: &str =
    "build,read,delete,build,unlink,build,expire,build,overwrite,delete,build,evict";
/// The ops of every string run: the same ways out and the whole read (the plan of
/// data/collections' strings, then an eviction). A string refit measured only SET and DEL while
/// the model claimed every op: a key's read came out unknown.
pub const REFIT_STRING_OPS: &str = "set,overwrite,read,delete,set,unlink,set,expire,set,evict";
/// A string's sizes: its DEL is per MiB, and these take a fraction of a second each.
pub const REFIT_STRING_SIZES: &str = "16M,64M";
/// The quiet gap around each op.
pub const REFIT_GAP: &str = "200ms";
/// The model file written into `--out`.
pub use crate::output::export::MODEL_JSON;

/// The fewest elements `--refit-elements` takes (the hostile trial's `--refit-elements 1`
/// fitted a list read of 5898 ms per MiB).
pub const MIN_REFIT_ELEMENTS: u64 = 1000;

/// What `--refit` measures: one writer plan per type.
#[derive(Debug, Clone)]
pub struct RefitPlan {
    /// The writer of each type's run, in order.
    pub writers: Vec<WriterPlan>,
    /// The flags as given, for `measured_how`.
    pub described: String,
    /// `--refit-elements` as given, for an error that names it.
    pub elements_text: String,
}

/// Checks `--refit-types`, `--refit-elements` and `--refit-repeat` into one writer plan per
/// type, through the main job's own checks (an error names the refit flag).
pub fn refit_plan(types: &str, elements: &str, repeat: &str) -> Result<RefitPlan, UsageError> {
    let rename = |flag: &'static str, err: UsageError| match err {
        UsageError::InvalidValue { value, reason, .. } => UsageError::InvalidValue {
            flag,
            value,
            reason,
        },
        other => other,
    };
    let mut writers: Vec<WriterPlan> = Vec::new();
    for name in types.split(',').map(str::trim) {
        let Some(kind) = crate::workload::kind_named(name) else {
            return Err(UsageError::invalid(
                "--refit-types",
                types,
                format!(
                    "'{name}' is not a type: expected a list of {}",
                    crate::workload::kinds::kind_names()
                ),
            ));
        };
        if writers.iter().any(|w| w.value_type == kind.name()) {
            return Err(UsageError::invalid(
                "--refit-types",
                types,
                format!("{name} is named twice"),
            ));
        }
        let string = kind.name() == "string";
        let workload = WorkloadArgs {
            writer_sizes: string.then(|| REFIT_STRING_SIZES.to_string()),
            repeat: repeat.to_string(),
            gap: REFIT_GAP.to_string(),
            overwrite: false,
            keep: false,
            same_connection: false,
            seed: crate::run::DEFAULT_SEED,
            value_type: Some(kind.name().to_string()),
            elements: (!string).then(|| elements.to_string()),
            element_size: None,
            batch: None,
            ops: Some(if string { REFIT_STRING_OPS } else { REFIT_OPS }.to_string()),
        };
        let plan = workload
            .to_plan()
            .map_err(|err| match &err {
                UsageError::InvalidValue { flag, .. } if *flag == "--repeat" => {
                    rename("--refit-repeat", err)
                }
                UsageError::InvalidValue { flag, .. } if *flag == "--elements" => {
                    rename("--refit-elements", err)
                }
                _ => err,
            })?
            .ok_or_else(|| UsageError::invalid("--refit-types", types, "nothing to measure"))?;
        if let Some(&small) = plan.elements.iter().find(|&&n| n < MIN_REFIT_ELEMENTS) {
            return Err(UsageError::invalid(
                "--refit-elements",
                elements,
                format!(
                    "{small} elements is too few to fit a cost from: at least {MIN_REFIT_ELEMENTS} (a smaller value's op takes about one probe interval whatever its size, and its slope per MiB comes out absurd)"
                ),
            ));
        }
        // One size named twice fits no growth (a refit of 10k,10k came out a one-size fit
        // with every exponent 1; the hostile trial).
        let mut seen = std::collections::BTreeSet::new();
        if let Some(&twice) = plan.elements.iter().find(|&&n| !seen.insert(n)) {
            return Err(UsageError::invalid(
                "--refit-elements",
                elements,
                format!("{twice} elements is named twice: a fit needs distinct sizes"),
            ));
        }
        writers.push(plan);
    }
    Ok(RefitPlan {
        writers,
        described: format!(
            "--refit-types {types} --refit-elements {elements} --refit-repeat {repeat}"
        ),
        elements_text: elements.to_string(),
    })
}

/// The fit rows of a recorded run (a probe `--out` directory), read back through the types that
/// wrote it, with the run's metadata. An op no probe overlapped counts as one probe interval of
/// the run (from run.json's probe rate and threads).
pub fn tool_rows_of_run(dir: &Path) -> Result<(RunMeta, Vec<FitRow>), UsageError> {
    let run = load_run("DIR", dir)?;
    let shown = dir.display().to_string();
    let interval_ms = run.meta.probe_interval_ms().ok_or_else(|| {
        UsageError::invalid(
            "DIR",
            &shown,
            "run.json names no probe rate and threads (the probe interval)",
        )
    })?;
    let path = dir.join(SUMMARY_CSV);
    let summary: Vec<WriteSummary> = csv::Reader::from_path(&path)
        .and_then(|mut r| r.deserialize().collect::<Result<Vec<_>, _>>())
        .map_err(|err| UsageError::invalid("DIR", &shown, format!("{SUMMARY_CSV}: {err}")))?;
    // The host's pace of the run, for the held-out checks (not kept in a model file).
    let mut rows = fit_rows(&summary, interval_ms);
    for row in &mut rows {
        row.pace_us = run.meta.baseline_p50_us;
    }
    Ok((run.meta, rows))
}

/// Runs `probe keys --refit`; returns the exit status.
pub fn run(
    plan: &KeysPlan,
    refit: &RefitPlan,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<i32> {
    let _lock = match &plan.out {
        Some(dir) => Some(prepare_out_dir(dir, plan.force)?),
        None => None,
    };
    let deployment = Deployment::start(&plan.target, &LocalTopologySpec::default(), out)?;
    describe_target(&deployment.target, "refitting the cost model on", out);
    let target = &deployment.target;
    let server = target.server.clone();
    // The model prices a main-thread free: every removal measured as one (UNLINK aside).
    let mut conn = target
        .conn
        .redis_connection()
        .context("connecting to the started server")?;
    for setting in [
        "lazyfree-lazy-user-del",
        "lazyfree-lazy-server-del",
        "lazyfree-lazy-expire",
        "lazyfree-lazy-eviction",
    ] {
        // A server older than a setting has not got it, and frees on the main thread anyway.
        let _: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg(setting)
            .arg("no")
            .query(&mut conn);
    }
    let lazyfree = lazyfree_settings(&target.conn);
    let options = plan.options.clone();
    let interval_ms =
        crate::measure::probe::aggregate_interval_us(options.probe_threads, options.probe_rate)
            / 1e3;
    let steps: usize = refit.writers.iter().map(WriterPlan::step_count).sum();
    out.start_progress(steps as u64, "ops");
    let mut done = 0usize;
    let mut rows: Vec<FitRow> = Vec::new();
    let mut runs: Vec<String> = Vec::new();
    for writer in &refit.writers {
        let run_dir: Option<PathBuf> = plan.out.as_ref().map(|d| d.join(&writer.value_type));
        let _run_lock = match &run_dir {
            Some(dir) => Some(prepare_out_dir(dir, plan.force)?),
            None => None,
        };
        let options = crate::run::RunOptions {
            writer: Some(writer.clone()),
            out: run_dir.clone(),
            ..options.clone()
        };
        let report = run::run(&options, target, interrupt, &mut |notice| {
            if let Notice::Write { .. } = notice {
                done += 1;
                out.progress(done as u64, writer.value_type.clone());
            }
        })?;
        rows.extend(fit_rows(&report.analysis.writes, interval_ms));
        runs.push(format!(
            "{} (run {}, {} ops)",
            writer.value_type,
            report.run_id,
            report.analysis.writes.len()
        ));
        if report.status != crate::output::export::RunStatus::Complete {
            out.finish_progress();
            out.warn(&format!(
                "the {} run did not complete ({}): no model written",
                writer.value_type,
                report.status_reason.as_deref().unwrap_or("stopped")
            ));
            return Ok(EXIT_INTERRUPTED);
        }
    }
    out.finish_progress();
    drop(deployment);
    let bounded = rows.iter().filter(|r| r.under_one_interval).count();
    // A group whose every op was under one probe interval has only an upper bound to fit:
    // from 16-byte values its slope was absurd (the hostile trial: --refit-elements 1 wrote a
    // list DEL of 32768 ms per MiB, 21.9 s predicted for a 100k list). Such groups get no
    // entry (the scan then prices them as their DEL, else as one allocation), and a refit with
    // nothing else is refused.
    let grouped = crate::keys::fit::groups(&rows);
    let bounded_only: Vec<_> = grouped
        .iter()
        .filter(|(_, group)| group.iter().all(|r| r.under_one_interval))
        .map(|(key, _)| key.clone())
        .collect();
    if bounded_only.len() == grouped.len() {
        return Err(UsageError::invalid(
            "--refit-elements",
            &refit.elements_text,
            format!(
                "every op measured was under one probe interval ({interval_ms:.3} ms): too small to fit a cost from; measure larger values"
            ),
        )
        .into());
    }
    drop(grouped);
    if !bounded_only.is_empty() {
        rows.retain(|r| !bounded_only.contains(&crate::keys::fit::group_key(r)));
        let names: Vec<String> = bounded_only
            .iter()
            .map(crate::keys::fit::group_name)
            .collect();
        out.warn(&format!(
            "no entry for {}: every op of it was under one probe interval ({interval_ms:.3} ms)",
            names.join(", ")
        ));
    }
    let binary = match &plan.target {
        crate::measure::target::TargetSpec::Embedded { binary, .. } => binary
            .as_ref()
            .map_or("redis-server on PATH".to_string(), |b| {
                b.display().to_string()
            }),
        _ => "the --url server".to_string(),
    };
    let measured_how = vec![
        format!(
            "source tool: the tool's own hol_delay_ms of {} ops on {} {} started from {binary}, every lazyfree-lazy-* set to no; runs: {}",
            rows.len(),
            server.flavor,
            server.version,
            runs.join(", ")
        ),
        format!(
            "{bounded} of those ops had no probe in their window (under one probe interval): counted as one interval, {interval_ms:.3} ms"
        ),
        format!(
            "command: probe keys --refit --server-bin {binary} {} (ops {REFIT_OPS}; strings {REFIT_STRING_SIZES}, ops {REFIT_STRING_OPS}; gap {REFIT_GAP}, probes {} x {}/s)",
            refit.described, options.probe_threads, options.probe_rate
        ),
    ];
    let (model, _) = refit_model(
        ModelServer {
            flavor: server.flavor.clone(),
            version: server.version.clone(),
        },
        lazyfree,
        measured_how,
        rows,
        None,
    );
    let text = serde_json::to_string_pretty(&model)? + "\n";
    if let Some(dir) = &plan.out {
        write_atomic(&dir.join(MODEL_JSON), text.as_bytes())
            .with_context(|| format!("writing {}", dir.join(MODEL_JSON).display()))?;
    }
    match plan.format {
        Format::Json => out.line(format::json(&model)?.trim_end()),
        Format::Text | Format::Markdown => {
            out.line(&format!(
                "cost model of {} ({} entries, fitted from {} of the tool's ops)",
                model.server_name(),
                model.entries.len(),
                model.rows.len()
            ));
            out.line(&format!(
                "{:<7} {:<10} {:<10} {:<11} {:>12} {:>8} {:>11} {:>11} {:>10}",
                "type",
                "encoding",
                "op",
                "freed by",
                "us/element",
                "exponent",
                "ms/MiB",
                "median err",
                "worst ms"
            ));
            for e in &model.entries {
                out.line(&format!(
                    "{:<7} {:<10} {:<10} {:<11} {:>12.4} {:>8.3} {:>11.4} {:>11} {:>10.1}",
                    e.kind,
                    e.encoding,
                    e.op.name(),
                    e.freed_by.map_or("-", |t| t.name()),
                    e.per_element_us,
                    e.elements_exponent,
                    e.per_mib_ms,
                    e.error
                        .median_abs_pct
                        .map_or("-".to_string(), |p| format!("{p:.0}%")),
                    e.error.max_abs_ms
                ));
            }
        }
    }
    match &plan.out {
        Some(dir) => out.note(&format!(
            "model in {} (each type's run beside it); copy it to data/models/ to ship it",
            dir.join(MODEL_JSON).display()
        )),
        None => out.note("no --out: the model was not written (--format json prints it)"),
    }
    Ok(EXIT_OK)
}
