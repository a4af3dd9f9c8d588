//! `probe calibrate`: inject stalls of known length while probing as the main job does, and show
//! whether the measured stalls are within the accuracy the tool claims. Its flags and plan are
//! in `args.rs`, its text and Markdown reports in `report.rs`; calibration.json's type and the
//! run are here.

mod args;
mod report;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

pub use args::{CalibrateArgs, CalibratePlan};

use super::Output;
use super::deployment::Deployment;
use crate::calibrate::{
    Injector, StallMethod, busy_script_limit_ms, by_length, choose_method, evaluate, judge,
    tolerance_ms, verdict_lines,
};
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::measure::local_cluster::LocalTopologySpec;
use crate::output::export::{
    CALIBRATION_CSV, CALIBRATION_JSON, CalibrationJson, Mode, RunStatus, ToolInfo, columns,
    csv_bytes, write_atomic,
};
use crate::output::format::{self, Format};
use crate::run::Notice;

/// `probe calibrate --format json`: calibration.json's content and the run's findings.
#[derive(serde::Serialize)]
struct CalibrateDocument<'a> {
    #[serde(flatten)]
    calibration: &'a CalibrationJson,
    /// The run's findings (and its status), as its run.json has them.
    run: &'a crate::output::export::RunJson,
}

/// Runs `probe calibrate`; returns the exit status (0 when every length's median error is within
/// the claimed accuracy with at most the allowed share of single outliers, 1 otherwise).
pub fn run(args: &CalibrateArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let validated = args.validate()?;
    // Held until the run's end: another run into the same --out is refused meanwhile.
    let _out_lock = validated.output.prepare()?;
    let deployment = Deployment::start(&validated.target, &LocalTopologySpec::default(), out)?;
    let target = &deployment.target;
    let server = &target.server;
    out.note(&match &target.embedded {
        Some(embedded) => format!(
            "started {} {} on 127.0.0.1:{}; it is stopped when the calibration ends",
            server.flavor,
            server.version,
            embedded.port()
        ),
        None => format!(
            "calibrating against {} ({} {})",
            target.conn, server.flavor, server.version
        ),
    });
    let choice = choose_method(&target.conn, validated.method)?;
    let longest_us = validated.plan.stalls_us.iter().copied().max().unwrap_or(0);
    if choice.method != StallMethod::DebugSleep {
        let limit_ms = busy_script_limit_ms(&target.conn);
        if longest_us >= limit_ms * 1000 {
            return Err(UsageError::invalid(
                "--stalls",
                &args.stalls,
                format!(
                    "a Lua stall must stay under the server's busy-script limit ({limit_ms} ms), past which it answers BUSY instead of stalling"
                ),
            )
            .into());
        }
    }
    let mut method_text = format!("injecting with {}: {}", choice.method.name(), choice.reason);
    if let Some(rate) = choice.loop_iterations_per_us {
        method_text.push_str(&format!(" ({:.1} iterations/us)", rate));
    }
    out.note(&method_text);
    if !server.embedded {
        out.warn(&format!(
            "calibration freezes this server {} times, up to {:.0} ms each: every client waits",
            validated.plan.order().len(),
            longest_us as f64 / 1e3
        ));
    }
    let options = &validated.options;
    let interval_us = options.aggregate_interval_us();
    if !validated.short_stalls.is_empty() {
        out.warn(&format!(
            "stall(s) {} are not longer than --stall-threshold plus one probe interval ({:.0} us): a probe may not land inside them, and an unseen stall counts as outside the accuracy",
            validated.short_stalls.join(","),
            interval_us + options.stall_threshold_us as f64
        ));
    }
    out.note(&format!(
        "probing: {} thread(s) x {}/s {} (together every {interval_us:.0} us)",
        options.probe_threads,
        options.probe_rate,
        options.probe_cmd.name().to_uppercase()
    ));

    let injections = Arc::new(Mutex::new(Vec::new()));
    let injector = Injector::new(
        validated.plan.clone(),
        choice.clone(),
        Arc::clone(&injections),
    );
    let steps = validated.plan.order().len();
    out.start_progress(steps as u64, "stalls");
    let report =
        crate::calibrate::run_injector(options, target, injector, interrupt, &mut |notice| {
            if let Notice::Tick { probes, writes, .. } = notice {
                out.progress(writes as u64, format!("{probes} probes"));
            }
        });
    // The server the tool started stops now, as the run ends.
    drop(deployment);
    out.finish_progress();
    let report = report?;
    let injections = injections
        .lock()
        .map(|list| list.clone())
        .unwrap_or_default();
    let tolerance = tolerance_ms(interval_us, report.analysis.baseline.p99_us);
    let rows = evaluate(&injections, &report.analysis, tolerance);

    let lengths = by_length(&rows);
    let verdict = judge(&rows, &lengths, tolerance);
    let summary = CalibrationJson {
        tool: ToolInfo::default(),
        mode: Mode::Calibrate,
        run_id: report.run_id.clone(),
        method: choice.clone(),
        plan: validated.plan.clone(),
        probe_threads: options.probe_threads,
        probe_rate: options.probe_rate,
        aggregate_interval_us: interval_us,
        baseline_p99_us: report.analysis.baseline.p99_us,
        tolerance_ms: tolerance,
        injections: rows.len(),
        within: rows.iter().filter(|r| r.within).count(),
        by_length: lengths.clone(),
        rows: rows.clone(),
        verdict: Some(verdict.clone()),
    };
    match validated.output.format {
        Format::Text => {
            for line in
                report::text_lines(&report, &rows, &lengths, tolerance, interval_us, options)
            {
                out.line(&line);
            }
        }
        Format::Json => out.line(
            format::json(&CalibrateDocument {
                calibration: &summary,
                run: &report.run_json,
            })?
            .trim_end(),
        ),
        Format::Markdown => {
            for line in report::markdown(&rows, &lengths, tolerance).lines() {
                out.line(line);
            }
        }
    }
    if !report.server_settings.is_empty() {
        out.note(&format!(
            "server settings changed for the calibration and restored: {}",
            report.server_settings.join(", ")
        ));
    }
    for warning in &report.warnings {
        out.warn(warning);
    }
    let baseline = &report.analysis.baseline;
    if baseline.p99_us as f64 > 4.0 * interval_us.max(250.0) {
        out.warn(&format!(
            "the baseline p99 ({:.2} ms, median {:.2} ms) dominates the tolerance: this host (or the probe rate) is too busy for precise figures, so 'within' says little; compare the median errors per length instead",
            baseline.p99_us as f64 / 1e3,
            baseline.p50_us as f64 / 1e3
        ));
    }
    if let Some(dir) = &options.out {
        let bytes = csv_bytes(&rows, columns::CALIBRATION)?;
        write_atomic(&dir.join(CALIBRATION_CSV), &bytes)
            .with_context(|| format!("writing {CALIBRATION_CSV}"))?;
        let json = serde_json::to_vec_pretty(&summary).context("encoding calibration.json")?;
        write_atomic(&dir.join(CALIBRATION_JSON), &json)?;
        out.note(&format!("results in {}", dir.display()));
    }
    let within = rows.iter().filter(|r| r.within).count();
    match report.status {
        RunStatus::Interrupted => {
            out.error("interrupted; results measured so far were kept");
            return Ok(EXIT_INTERRUPTED);
        }
        RunStatus::Failed => {
            out.error(&format!(
                "{}; results measured so far were kept",
                report
                    .status_reason
                    .as_deref()
                    .unwrap_or("the calibration failed")
            ));
            return Ok(EXIT_FAILURE);
        }
        _ => {}
    }
    if rows.is_empty() {
        out.error("no stall was injected");
        return Ok(EXIT_FAILURE);
    }
    let mut said = vec![format!(
        "calibration: {within}/{} injections within +-{tolerance:.2} ms",
        rows.len()
    )];
    said.extend(verdict_lines(&verdict, &rows, tolerance));
    // JSON's stdout is one document: its verdict is calibration.json's `verdict`.
    for line in &said {
        match validated.output.format {
            Format::Json => out.note(line),
            _ => out.line(line),
        }
    }
    Ok(if verdict.pass { EXIT_OK } else { EXIT_FAILURE })
}
