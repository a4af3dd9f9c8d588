//! The main job: `probe --writer-sizes 64M,128M` (or observe mode with `--duration`).

use std::sync::atomic::AtomicBool;

use anyhow::Result;

use super::{Output, ProbeArgs, TargetArgs};
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::export::{RunStatus, prepare_out_dir};
use crate::report;
use crate::run::{self, Notice, RunOptions};
use crate::target::Target;
use crate::units::format_size;

/// Runs the main job; returns the exit status.
pub fn run(
    target_args: &TargetArgs,
    probe_args: &ProbeArgs,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<i32> {
    let options = probe_args.to_options()?;
    let spec = target_args.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
    if let Some(dir) = &options.out {
        prepare_out_dir(dir, probe_args.force)?;
    }
    let mut target = Target::open(&spec)?;
    describe_target(&target, out);
    preflight(&options, &target, out)?;
    describe_plan(&options, out);

    let steps_total = options.writer.as_ref().map_or(0, |w| w.steps().len());
    let observe_secs = options.duration.map_or(0, |d| d.as_secs());
    if steps_total > 0 {
        out.start_progress(steps_total as u64, "writes");
    } else if observe_secs >= 3 {
        out.start_progress(observe_secs, "s");
    }
    let report = run::run(&options, &target, interrupt, &mut |notice| match notice {
        Notice::Started { run_id, .. } => out.note(&format!(
            "run {run_id}: keys under {}:{run_id}:",
            run::KEY_NAMESPACE
        )),
        Notice::Write { record, summary } => out.line(&report::write_line(record, summary)),
        Notice::Stall(stall) if options.writer.is_none() => {
            out.line(&report::stall_line(stall, &[]));
        }
        Notice::Stall(_) => {}
        Notice::Tick {
            elapsed,
            probes,
            writes,
        } => {
            let position = if steps_total > 0 {
                writes as u64
            } else {
                elapsed.as_secs()
            };
            out.progress(position, format!("{probes} probes"));
        }
    });
    target.shutdown();
    out.finish_progress();
    let report = report?;
    if out.stdout_closed() {
        return Ok(EXIT_INTERRUPTED);
    }
    for line in report::trust_lines(&report.analysis, &options) {
        out.line(&line);
    }
    if !report.server_settings.is_empty() {
        out.note(&format!(
            "server settings changed for the run and restored: {}",
            report.server_settings.join(", ")
        ));
    }
    for line in report::closing_lines(
        &report.analysis,
        options.stall_threshold_us,
        options.writer.is_some(),
    ) {
        out.line(&line);
    }
    for warning in &report.warnings {
        out.warn(warning);
    }
    if let Some(dir) = &options.out {
        out.note(&format!("results in {}", dir.display()));
    }
    let failed_writes = report.writes.iter().filter(|w| !w.ok).count();
    Ok(match report.status {
        RunStatus::Interrupted if out.stdout_closed() => EXIT_INTERRUPTED,
        RunStatus::Interrupted => {
            out.error(&format!(
                "{}; results measured so far were kept",
                report.status_reason.as_deref().unwrap_or("interrupted")
            ));
            EXIT_INTERRUPTED
        }
        RunStatus::Failed => {
            out.error(&format!(
                "{}; results measured so far were kept",
                report.status_reason.as_deref().unwrap_or("the run failed")
            ));
            EXIT_FAILURE
        }
        _ if failed_writes > 0 => {
            out.error(&format!("{failed_writes} write(s) failed (see above)"));
            EXIT_FAILURE
        }
        _ => EXIT_OK,
    })
}

fn describe_target(target: &Target, out: &Output) {
    let server = &target.server;
    match (&target.embedded, &server.binary) {
        (Some(embedded), Some(binary)) => out.note(&format!(
            "started {} {} ({binary}) on 127.0.0.1:{}, persistence off; it is stopped when the run ends",
            server.flavor,
            server.version,
            embedded.port()
        )),
        _ => out.note(&format!(
            "measuring {} ({} {})",
            target.conn, server.flavor, server.version
        )),
    }
    for warning in target.persistence_warnings() {
        out.warn(&warning);
    }
}

/// Checks that need the server: refuses a size the server would reject, warns about what the
/// run will do to someone else's server.
fn preflight(options: &RunOptions, target: &Target, out: &Output) -> Result<()> {
    let Some(writer) = &options.writer else {
        return Ok(());
    };
    if let Some(limit) = target.server.proto_max_bulk_len_bytes
        && let Some(&too_big) = writer.sizes.iter().find(|&&s| s > limit)
    {
        return Err(UsageError::invalid(
            "--writer-sizes",
            format_size(too_big),
            format!(
                "larger than the server's proto-max-bulk-len ({}): raise it with CONFIG SET proto-max-bulk-len, or --server-arg \"proto-max-bulk-len 1gb\" for the embedded server",
                format_size(limit)
            ),
        )
        .into());
    }
    if !options.force_memory {
        crate::writer::check_plan_memory(writer, target)?;
    }
    if !target.server.embedded {
        out.warn(&format!(
            "deleting a large key stalls the server (~60-80 us per MiB on Redis 7.0): this run deletes each value it writes (largest {}), on a server others may be using",
            format_size(writer.max_size())
        ));
    }
    Ok(())
}

fn describe_plan(options: &RunOptions, out: &Output) {
    let every_us = 1e6 / (options.probe_rate * f64::from(options.probe_threads));
    let mut text = format!(
        "probing: {} thread(s) x {}/s {} (together every {every_us:.0} us)",
        options.probe_threads,
        options.probe_rate,
        options.probe_cmd.name().to_uppercase(),
    );
    match &options.writer {
        Some(w) => {
            let sizes: Vec<String> = w.sizes.iter().map(|&s| format_size(s)).collect();
            text.push_str(&format!(
                "; writer: {} x {}, gap {:?}{}{}",
                sizes.join(","),
                w.repeat,
                w.gap,
                if w.overwrite { ", overwrite" } else { "" },
                if w.keep { ", keep" } else { "" }
            ));
        }
        None => {
            if let Some(d) = options.duration {
                text.push_str(&format!("; observing for {d:?}"));
            }
        }
    }
    out.note(&text);
}
