//! `probe calibrate`: inject stalls of known length while probing as the main job does, and show
//! whether the measured stalls are within the accuracy the tool claims.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use super::{Output, TargetArgs, parse_rate};
use crate::calibrate::{
    CalibrationRow, InjectionPlan, Injector, StallMethod, busy_script_limit_ms, by_length,
    choose_method, evaluate, tolerance_ms,
};
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::output::export::{
    CALIBRATION_CSV, CALIBRATION_JSON, CalibrationJson, Mode, RunStatus, ToolInfo, columns,
    csv_bytes, prepare_out_dir, write_atomic,
};
use crate::output::format::{self, Format};
use crate::output::report;
use crate::record::ProbeCmd;
use crate::run::{self, Notice, RunOptions};
use crate::units::parse_duration;

/// Longest stall calibration injects.
const MAX_STALL: Duration = Duration::from_secs(10);

/// Flags of `probe calibrate`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("url", |a| a.help("Calibrate against an existing server: redis://[user:password@]host:port[/db] (or --host/--port). The password may instead come from REDISCLI_AUTH or --password. Without it the tool starts its own redis-server on a free loopback port and stops it afterwards")),
    mut_arg("server_bin", |a| a.help("The server binary to start when no --url is given [default: redis-server from PATH]; one only")),
    mut_arg("server_arg", |a| a.help("An extra setting for the started server, \"NAME VALUE\" (repeatable), e.g. --server-arg \"maxmemory 2gb\""))
)]
pub struct CalibrateArgs {
    #[command(flatten)]
    target: TargetArgs,

    /// Stall lengths to inject, comma-separated; a plain number is milliseconds, or give a
    /// unit (250us, 20ms, 0.5s).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "5,20,50,100,250",
        allow_hyphen_values = true
    )]
    stalls: String,

    /// Injections per length (interleaved across the lengths).
    #[arg(
        long,
        value_name = "N",
        default_value = "3",
        allow_negative_numbers = true
    )]
    times: String,

    /// How to inject [default: debug-sleep where DEBUG is allowed, else lua-time, else
    /// lua-loop where TIME stands still inside scripts].
    #[arg(long, value_enum)]
    method: Option<StallMethod>,

    /// Quiet probing before and after each injection.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "300ms"
    )]
    gap: String,

    /// Dedicated probe threads, as in the main job.
    #[arg(long, value_name = "N", default_value_t = 2)]
    probe_threads: u32,

    /// Probes per second per thread, as in the main job.
    #[arg(
        long,
        value_name = "R",
        default_value = "1000",
        allow_negative_numbers = true
    )]
    probe_rate: String,

    /// The probe command.
    #[arg(long, value_enum, default_value_t = ProbeCmd::Ping)]
    probe_cmd: ProbeCmd,

    /// A probe waiting longer than this is delayed; a silence longer than this is a stall.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "1ms"
    )]
    stall_threshold: String,

    /// Give the probe threads real-time (SCHED_FIFO) priority where permitted, as in the main
    /// job.
    #[arg(long)]
    realtime: bool,

    /// On a server given by --url, lower slowlog-log-slower-than and switch the latency
    /// monitor on for the run (restored afterwards).
    #[arg(long)]
    tune_server: bool,

    /// Write the run's exports and calibration.csv here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Replace a run already in --out.
    #[arg(long)]
    force: bool,

    /// What stdout gets: `text` (a line per injection, per length, the verdict), `json` (one
    /// document: calibration.json's content with the run's findings as run.json has them under
    /// `run`; notes stay on stderr) or `markdown` (the tables).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// `probe calibrate --format json`: calibration.json's content and the run's findings.
#[derive(serde::Serialize)]
struct CalibrateDocument<'a> {
    #[serde(flatten)]
    calibration: &'a CalibrationJson,
    /// The run's findings (and its status), as its run.json has them.
    run: &'a crate::output::export::RunJson,
}

struct Validated {
    options: RunOptions,
    plan: InjectionPlan,
    /// Stalls no longer than the threshold plus one probe interval: a probe may miss them.
    short_stalls: Vec<String>,
}

impl CalibrateArgs {
    fn validate(&self) -> Result<Validated, UsageError> {
        let probe_threads = super::parse_probe_threads(self.probe_threads)?;
        let probe_rate = parse_rate("--probe-rate", &self.probe_rate)?;
        let threshold = super::parse_stall_threshold(&self.stall_threshold)?;
        let interval = Duration::from_secs_f64(1.0 / (probe_rate * f64::from(probe_threads)));
        let mut stalls_us = Vec::new();
        let mut short_stalls = Vec::new();
        for part in self.stalls.split(',') {
            let stall = parse_stall(part)?;
            if stall <= threshold {
                return Err(UsageError::invalid(
                    "--stalls",
                    part.trim(),
                    format!(
                        "must be longer than --stall-threshold ({}): a shorter silence is never a stall",
                        self.stall_threshold
                    ),
                ));
            }
            if stall <= threshold + interval {
                short_stalls.push(part.trim().to_string());
            }
            stalls_us.push(stall.as_micros() as u64);
        }
        let times: u32 = self
            .times
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                UsageError::invalid(
                    "--times",
                    &self.times,
                    "expected a whole number from 1 to 1000",
                )
            })?;
        let gap = parse_duration("--gap", &self.gap)?;
        if gap < Duration::from_millis(20) {
            return Err(UsageError::invalid(
                "--gap",
                &self.gap,
                "must be at least 20ms, so a baseline shows between injections",
            ));
        }
        Ok(Validated {
            options: RunOptions {
                probe_threads,
                probe_rate,
                probe_cmd: self.probe_cmd,
                writer: None,
                duration: None,
                stall_threshold_us: threshold.as_micros() as u64,
                seed: 0,
                realtime: self.realtime,
                out: self.out.clone(),
                tune_server: self.tune_server,
                force_memory: false,
                predict_bytes: Vec::new(),
                probes_export: crate::run::ProbesExport::All,
                interval: crate::run::DEFAULT_INTERVAL,
                metrics_addr: None,
                metrics: None,
            },
            plan: InjectionPlan {
                stalls_us,
                times,
                gap,
            },
            short_stalls,
        })
    }
}

/// One stall length: a plain number is ms.
fn parse_stall(text: &str) -> Result<Duration, UsageError> {
    let trimmed = text.trim();
    let stall = match trimmed.parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms > 0.0 => Duration::from_secs_f64(ms / 1e3),
        Ok(_) => {
            return Err(UsageError::invalid(
                "--stalls",
                trimmed,
                "a stall length must be more than 0",
            ));
        }
        Err(_) => parse_duration("--stalls", trimmed)?,
    };
    if stall.is_zero() || stall > MAX_STALL {
        return Err(UsageError::invalid(
            "--stalls",
            trimmed,
            "expected a length from 1us to 10s",
        ));
    }
    Ok(stall)
}

/// Runs `probe calibrate`; returns the exit status (0 when every injection was measured within
/// the claimed accuracy, 1 otherwise).
pub fn run(args: &CalibrateArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let validated = args.validate()?;
    let spec = args.target.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
    let timeout = match &spec {
        crate::measure::target::TargetSpec::External(conn) => conn.command_timeout,
        crate::measure::target::TargetSpec::Embedded {
            command_timeout, ..
        } => *command_timeout,
    };
    if let Some(&longest) = validated.plan.stalls_us.iter().max()
        && Duration::from_micros(longest) >= timeout
    {
        return Err(UsageError::invalid(
            "--stalls",
            &args.stalls,
            format!(
                "a stall of {:.0} ms would outlast --timeout ({:?}): the probes would give up on the server",
                longest as f64 / 1e3,
                timeout
            ),
        )
        .into());
    }
    if let Some(dir) = &validated.options.out {
        prepare_out_dir(dir, args.force)?;
    }
    let mut target = super::target_args::open_target(&spec)?;
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
    let choice = choose_method(&target.conn, args.method)?;
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
    let interval_us = 1e6 / (options.probe_rate * f64::from(options.probe_threads));
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
    let report = run::run_with_actor(
        options,
        &target,
        Some(Box::new(injector)),
        interrupt,
        &mut |notice| {
            if let Notice::Tick { probes, writes, .. } = notice {
                out.progress(writes as u64, format!("{probes} probes"));
            }
        },
    );
    target.shutdown();
    out.finish_progress();
    let report = report?;
    let injections = injections
        .lock()
        .map(|list| list.clone())
        .unwrap_or_default();
    let tolerance = tolerance_ms(interval_us, report.analysis.baseline.p99_us);
    let rows = evaluate(&injections, &report.analysis, tolerance);

    let lengths = by_length(&rows);
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
    };
    match args.format {
        Format::Text => {
            for line in text_lines(&report, &rows, &lengths, tolerance, interval_us, options) {
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
            for line in markdown(&rows, &lengths, tolerance).lines() {
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
    let verdict = format!(
        "calibration: {within}/{} injections within +-{tolerance:.2} ms",
        rows.len()
    );
    // JSON's stdout is one document: its verdict is `within` / `injections`.
    match args.format {
        Format::Json => out.note(&verdict),
        _ => out.line(&verdict),
    }
    Ok(if within == rows.len() {
        EXIT_OK
    } else {
        EXIT_FAILURE
    })
}

/// The text report: the claimed accuracy, a line per injection, per length, the footer.
fn text_lines(
    report: &crate::run::RunReport,
    rows: &[CalibrationRow],
    lengths: &[crate::calibrate::LengthSummary],
    tolerance: f64,
    interval_us: f64,
    options: &RunOptions,
) -> Vec<String> {
    let mut lines = vec![
        format!(
            "claimed accuracy: +-{tolerance:.2} ms = one probe interval ({:.2} ms) + baseline p99 ({:.2} ms)",
            interval_us / 1e3,
            report.analysis.baseline.p99_us as f64 / 1e3
        ),
        format!(
            "{:>4}  {:>9}  {:>9} {:<9}  {:>9}  {:>8}  {:>11}  {:>8}  within",
            "seq", "requested", "injected", "(source)", "stall", "error", "worst delay", "error"
        ),
    ];
    lines.extend(rows.iter().map(row_line));
    lines.push("per length (median error over its injections):".to_string());
    for length in lengths {
        let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3}ms"));
        lines.push(format!(
            "  {:>7.1}ms  x{}  stall error {}  delay error {}  worst |error| {}  within {}/{}",
            length.requested_ms,
            length.injections,
            ms(length.stall_error_median_ms),
            ms(length.delay_error_median_ms),
            length
                .worst_abs_error_ms
                .map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}ms")),
            length.within,
            length.injections
        ));
    }
    let footer = report::FooterOptions {
        threshold_us: options.stall_threshold_us,
        show_stalls: 0,
        verbose: false,
    };
    lines.extend(report::closing_lines(
        &report.analysis,
        footer,
        report.stalls_found,
        report.stall_ms_total,
        report.hiccups_found,
    ));
    lines
}

/// The Markdown report: a row per injection, a row per length.
fn markdown(
    rows: &[CalibrationRow],
    lengths: &[crate::calibrate::LengthSummary],
    tolerance: f64,
) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}"));
    let signed = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3}"));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.seq.to_string(),
                format!("{:.1}", row.requested_ms),
                format!("{:.3} ({})", row.injected_ms, row.injected_source),
                ms(row.stall_ms),
                signed(row.stall_error_ms),
                ms(row.worst_delay_ms),
                signed(row.delay_error_ms),
                if row.within { "yes" } else { "NO" }.to_string(),
            ]
        })
        .collect();
    let mut text = format!("**claimed accuracy**: +-{tolerance:.2} ms\n\n");
    text.push_str(&format::md_table(
        &[
            "seq",
            "requested (ms)",
            "injected (ms)",
            "stall (ms)",
            "error (ms)",
            "worst delay (ms)",
            "error (ms)",
            "within",
        ],
        &[true, true, true, true, true, true, true, false],
        &cells,
    ));
    text.push('\n');
    let cells: Vec<Vec<String>> = lengths
        .iter()
        .map(|l| {
            vec![
                format!("{:.1}", l.requested_ms),
                l.injections.to_string(),
                signed(l.stall_error_median_ms),
                signed(l.delay_error_median_ms),
                ms(l.worst_abs_error_ms),
                format!("{}/{}", l.within, l.injections),
            ]
        })
        .collect();
    text.push_str(&format::md_table(
        &[
            "length (ms)",
            "injections",
            "median stall error (ms)",
            "median delay error (ms)",
            "worst abs error (ms)",
            "within",
        ],
        &[true, true, true, true, true, true],
        &cells,
    ));
    text
}

fn row_line(row: &CalibrationRow) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}ms"));
    let err = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3}ms"));
    let mut line = format!(
        "{:>4}  {:>7.1}ms  {:>9} {:<9}  {:>9}  {:>8}  {:>11}  {:>8}  {}",
        row.seq,
        row.requested_ms,
        format!("{:.3}ms", row.injected_ms),
        format!("({})", row.injected_source),
        ms(row.stall_ms),
        err(row.stall_error_ms),
        ms(row.worst_delay_ms),
        err(row.delay_error_ms),
        if row.within { "yes" } else { "NO" }
    );
    if let Some(error) = &row.error {
        line.push_str(&format!("  ({error})"));
    }
    line
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: CalibrateArgs,
    }

    fn validate(argv: &[&str]) -> Result<Validated, UsageError> {
        let mut full = vec!["calibrate"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full)
            .expect("clap parse")
            .args
            .validate()
    }

    #[test]
    fn defaults_are_the_issues() {
        let v = validate(&[]).unwrap();
        assert_eq!(v.plan.stalls_us, [5_000, 20_000, 50_000, 100_000, 250_000]);
        assert_eq!(v.plan.times, 3);
        assert_eq!(v.options.probe_threads, 2);
        assert_eq!(v.options.probe_rate, 1000.0);
        let v = validate(&[
            "--stalls",
            "250us,2ms,0.5s",
            "--stall-threshold",
            "100us",
            "--probe-rate",
            "10000",
        ])
        .unwrap();
        assert_eq!(v.plan.stalls_us, [250, 2_000, 500_000]);
        assert!(v.short_stalls.is_empty());
        let v = validate(&["--probe-rate", "100"]).unwrap();
        assert_eq!(v.short_stalls, ["5"]);
    }

    #[test]
    fn bad_values_name_their_flag() {
        for (argv, flag) in [
            (vec!["--stalls", "5,x"], "--stalls"),
            (vec!["--stalls", "0"], "--stalls"),
            (vec!["--stalls", "-5"], "--stalls"),
            (vec!["--stalls", "11s"], "--stalls"),
            (vec!["--stalls", "1"], "--stalls"), // not above the 1 ms threshold
            (vec!["--times", "0"], "--times"),
            (vec!["--gap", "5ms"], "--gap"),
            (vec!["--probe-rate", "0"], "--probe-rate"),
            (vec!["--probe-threads", "0"], "--probe-threads"),
        ] {
            let err = match validate(&argv) {
                Ok(_) => panic!("{argv:?} accepted"),
                Err(err) => err.to_string(),
            };
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }
}
