//! The main job: `probe --writer-sizes 64M,128M` (or observe mode with `--duration`): its flags
//! and plan (`args.rs`), its dry run (`dry_run.rs`), the `--report-every` lines of observe mode
//! (`history.rs`), its runs over several binaries or against a baseline (`versions.rs`), and
//! the run itself (here).

mod args;
mod dry_run;
mod history;
pub mod versions;

use std::sync::atomic::AtomicBool;

use anyhow::Result;

pub use args::{MainPlan, ProbeArgs};
pub(crate) use dry_run::dry_run_target;
use history::History;

use super::Output;
use super::deployment::{Deployment, describe_target};
use crate::error::{EXIT_INTERRUPTED, EXIT_OK};
use crate::measure::target::Target;
use crate::output::format::{self, Format};
use crate::output::metrics::MetricsEndpoint;
use crate::output::report;
use crate::run::{self, Notice, RunOptions};
use crate::units::format_size;

/// Runs the main job as `plan` says; returns the exit status.
pub fn run(plan: &MainPlan, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let options = &plan.run;
    // An eviction on someone else's server is refused before anything is started or sent (a
    // dry run listed its CONFIG SET maxmemory under "none changed"; the real run refused it
    // only after connecting; the hostile trial).
    if let (Some(writer), crate::measure::target::TargetSpec::External(conn)) =
        (&options.writer, &plan.target)
    {
        crate::measure::writer::check_evict(writer, false, &conn.address())?;
    }
    if plan.dry_run {
        let lines = dry_run::dry_run_plan(options, &plan.target)?;
        crate::commands::output::print_dry_run(out, "probe", &lines, plan.output.format)?;
        return Ok(EXIT_OK);
    }
    // Held until the run's end: another run into the same --out is refused meanwhile.
    let _out_lock = plan.output.prepare()?;
    // Bound before anything starts, so a busy or bad address is a usage error; served until
    // the run's end (dropped on every way out of here).
    let endpoint = match &options.metrics_addr {
        Some(addr) => Some(MetricsEndpoint::bind(addr)?),
        None => None,
    };
    // A throwaway cluster (or master with replicas): its nodes live as long as the deployment.
    let mut deployment = Deployment::start(&plan.target, &plan.topology.local, out)?;
    if let Some(endpoint) = &endpoint {
        out.note(&format!("metrics at {} while the run goes", endpoint.url()));
    }
    describe_target(&deployment.target, "measuring", out);
    // Every node of the deployment, each probed on its own; the writes go to the chosen
    // shard's master, which may not be the --url server.
    deployment.discover(
        &plan.topology,
        options.writer.is_some(),
        options.probe_cmd,
        out,
    )?;
    let written_target = deployment.written();
    let probed = &deployment.probed;
    let format = plan.output.format;
    let verbose = plan.verbose;
    let show_stalls = plan.show_stalls;
    let mut groups = report::WriteGroups::new(probed.nodes.len() - 1).verbose(verbose);
    let mut started_unix_us = 0;
    let mut header_shown = false;
    preflight(options, written_target, out)?;
    describe_plan(options, out);

    let steps_total = options.writer.as_ref().map_or(0, |w| w.step_count());
    let observe_secs = options.duration.map_or(0, |d| d.as_secs());
    if steps_total > 0 {
        out.start_progress(steps_total as u64, "writes");
    } else if observe_secs >= 3 {
        out.start_progress(observe_secs, "s");
    }
    // Observe mode prints a line per --report-every when the run lasts that long at least.
    let mut history = match plan.report_every {
        Some(every) if options.writer.is_none() && options.duration.is_none_or(|d| d >= every) => {
            Some(History::new(every))
        }
        _ => None,
    };
    let mut silence = super::output::SilenceWatch::new(written_target.conn.command_timeout);
    let silent_server = written_target.conn.clone();
    let report = run::run_nodes(
        options,
        written_target,
        probed,
        endpoint
            .as_ref()
            .map(|e| std::sync::Arc::clone(e.metrics())),
        interrupt,
        &mut |notice| match notice {
            Notice::Started {
                run_id,
                started_unix_us: started,
                ..
            } => {
                started_unix_us = started;
                out.note(&format!(
                    "run {run_id}: keys under {}:{run_id}:",
                    run::KEY_NAMESPACE
                ));
            }
            // JSON and Markdown are one block at the end.
            Notice::Write { .. } | Notice::NodeWrite { .. } if !format.is_text() => {}
            Notice::Write { record, summary } => {
                let line = if verbose {
                    report::write_line(record, summary)
                } else {
                    report::write_row(record, summary, started_unix_us)
                };
                groups.first(summary.seq, line);
                for line in groups.ready() {
                    if !header_shown && !verbose {
                        out.line(&report::write_header());
                    }
                    header_shown = true;
                    out.line(&line);
                }
            }
            Notice::NodeWrite {
                node,
                same_shard,
                summary,
            } => {
                groups.node(node, same_shard, summary);
                for line in groups.ready() {
                    out.line(&line);
                }
            }
            Notice::Stall(_) => {}
            Notice::Node(event) => out.warn(&report::node_event_line(event)),
            Notice::Interval {
                interval,
                started_unix_us,
            } => {
                if let Some(line) = history
                    .as_mut()
                    .and_then(|h| h.add(interval, started_unix_us))
                {
                    // The --report-every lines are the text report's; JSON and Markdown hold
                    // the run's findings only (timeline.csv has every interval).
                    if format.is_text() {
                        out.line(&line);
                    } else {
                        out.note(&line);
                    }
                }
            }
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
                if let Some(line) = silence.tick(elapsed, probes, &silent_server) {
                    out.warn(&line);
                }
            }
        },
    );
    for line in groups.rest() {
        out.line(&line);
    }
    // The servers the tool started stop now, as the run ends.
    drop(deployment);
    out.finish_progress();
    let report = report?;
    if out.stdout_closed() {
        return Ok(EXIT_INTERRUPTED);
    }
    if !report.server_settings.is_empty() {
        out.note(&format!(
            "server settings changed for the run and restored: {}",
            report.server_settings.join(", ")
        ));
    }
    match format {
        Format::Json => out.line(format::json(&report.run_json)?.trim_end()),
        Format::Markdown => {
            let text = format::run_markdown(&report.run_json, &report.writes, show_stalls);
            for line in text.lines() {
                out.line(line);
            }
        }
        Format::Text => {
            for line in report::trust_lines(&report.analysis, options) {
                out.line(&line);
            }
            let footer = report::FooterOptions {
                threshold_us: options.stall_threshold_us,
                show_stalls,
                verbose,
            };
            for line in report::closing_lines(
                &report.analysis,
                footer,
                report.stalls_found,
                report.stall_ms_total,
                report.hiccups_found,
            ) {
                out.line(&line);
            }
            for line in &report.run_json.notes {
                out.line(line);
            }
            if !report.nodes.is_empty() {
                out.line(&format!(
                    "the other nodes ({}; their stalls are in stalls.csv and run.json):",
                    report.nodes.len()
                ));
                for node in &report.nodes {
                    out.line(&report::node_summary_line(node));
                }
            }
        }
    }
    for warning in &report.warnings {
        out.warn(warning);
    }
    if let Some(dir) = &options.out {
        out.note(&format!("results in {}", dir.display()));
    }
    Ok(super::output::run_exit_status(
        out,
        report.status,
        report.status_reason.as_deref(),
        &report.writes,
    ))
}

/// Checks that need the server: refuses a size the server would reject, warns about what the
/// run will do to someone else's server.
fn preflight(options: &RunOptions, target: &Target, out: &Output) -> Result<()> {
    let Some(writer) = &options.writer else {
        return Ok(());
    };
    if target.server.role.as_deref() == Some("slave") {
        anyhow::bail!(
            "{} is a read-only replica: point --url at the primary to measure writes, or observe the replica with --duration (no --writer-sizes)",
            target.conn
        );
    }
    crate::measure::writer::check_bulk_len(writer, &target.server)?;
    crate::measure::writer::check_evict(writer, target.server.embedded, &target.server.address)?;
    crate::measure::writer::check_commands(writer, &target.conn)?;
    crate::measure::writer::check_expire_watch(
        writer,
        &target.conn,
        target.server.embedded,
        options.tune_server,
    )?;
    if !options.force_memory {
        crate::measure::writer::check_plan_memory(writer, target)?;
    }
    if !target.server.embedded {
        if options.tune_server {
            warn_slowlog_pushed_out(target, out);
        }
        out.warn(&if writer.is_string() {
            format!(
                "deleting a large key stalls the server (~45-80 us per MiB, measured on Redis 7.0): this run deletes each value it writes (largest {}), on a server others may be using",
                format_size(writer.max_size())
            )
        } else {
            format!(
                "removing a large collection stalls the server (a 1M-field hash's DEL froze Redis 7.0 for ~400 ms): this run builds and removes values of type {} of up to {} elements, on a server others may be using",
                writer.value_type,
                writer.shapes().iter().map(|s| s.elements).max().unwrap_or(0)
            )
        });
    }
    Ok(())
}

/// With `--tune-server` the main job logs every command: the probes' entries push out what the
/// server's slow log held (`slowlog-max-len` comes back afterwards, the entries do not). Said
/// before anything changes, while the operator can still read them.
fn warn_slowlog_pushed_out(target: &Target, out: &Output) {
    let held = target.conn.redis_connection().ok().and_then(|mut conn| {
        redis::cmd("SLOWLOG")
            .arg("LEN")
            .query::<i64>(&mut conn)
            .ok()
    });
    if let Some(held) = held.filter(|&n| n > 0) {
        out.warn(&format!(
            "the server's slow log holds {held} entries: with --tune-server the run logs every command, and its own entries push those out (the settings come back afterwards, the entries do not); read them first (SLOWLOG GET {held}) if they matter"
        ));
    }
}

fn describe_plan(options: &RunOptions, out: &Output) {
    let every_us = options.aggregate_interval_us();
    let mut text = format!(
        "probing: {} thread(s) x {}/s {} (together every {every_us:.0} us)",
        options.probe_threads,
        options.probe_rate,
        options.probe_cmd.name().to_uppercase(),
    );
    match &options.writer {
        Some(w) => {
            let sizes: Vec<String> = if w.is_string() {
                w.sizes.iter().map(|&s| format_size(s)).collect()
            } else {
                w.shapes()
                    .iter()
                    .map(|s| format!("{} of {}x{}B", s.kind, s.elements, s.element_bytes))
                    .collect()
            };
            let ops = w
                .chosen_ops_text()
                .map_or_else(String::new, |ops| format!(", ops {ops}"));
            text.push_str(&format!(
                "; writer: {}{ops} x {}, gap {:?}{}{}",
                sizes.join(","),
                w.repeat,
                w.gap,
                if w.overwrite { ", overwrite" } else { "" },
                if w.keep { ", keep" } else { "" }
            ));
        }
        None => match options.duration {
            Some(d) => text.push_str(&format!("; observing for {d:?}")),
            None => text.push_str(
                "; observing until Ctrl-C (--duration to stop on its own, --writer-sizes to measure large writes)",
            ),
        },
    }
    out.note(&text);
    if options.out.is_some() {
        match options.probes_export {
            crate::run::ProbesExport::All => {}
            crate::run::ProbesExport::Delayed => out.note(
                "probes.csv: only the probes that waited past --stall-threshold or failed (--probes all keeps every one; every figure counts them all)",
            ),
            crate::run::ProbesExport::None => out.note(
                "probes.csv: header only (--probes none; every figure counts all the probes)",
            ),
        }
    }
}
