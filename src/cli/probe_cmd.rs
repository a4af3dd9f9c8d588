//! The main job: `probe --writer-sizes 64M,128M` (or observe mode with `--duration`).

use std::sync::atomic::AtomicBool;

use anyhow::Result;

use super::{Output, ProbeArgs, TargetArgs};
use crate::cli::topology_args::choose_shard;
use crate::error::{EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::measure::target::{ServerBinary, Target, TargetSpec};
use crate::measure::topology::{Topology, TopologyKind, TopologyMode, discover};
use crate::output::export::prepare_out_dir;
use crate::output::format::{self, Format};
use crate::output::metrics::MetricsEndpoint;
use crate::output::report;
use crate::run::{self, Notice, RunOptions};
use crate::session::Probed;
use crate::units::format_size;

/// Runs the main job; returns the exit status.
pub fn run(
    target_args: &TargetArgs,
    probe_args: &ProbeArgs,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<i32> {
    let mut options = probe_args.to_options()?;
    let report_every = probe_args.report_every()?;
    let show_stalls = probe_args.show_stalls()?;
    let spec = target_args.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
    let topology_mode = probe_args.topology.mode()?;
    let address_map = probe_args.topology.address_map()?;
    let local = probe_args.topology.local(target_args.url.is_some())?;
    if probe_args.dry_run {
        for line in dry_run_plan(&options, &spec)? {
            out.line(&line);
        }
        return Ok(EXIT_OK);
    }
    if let Some(dir) = &options.out {
        prepare_out_dir(dir, probe_args.force)?;
    }
    // Bound before anything starts, so a busy or bad address is a usage error; served until
    // the run's end (dropped on every way out of here).
    let endpoint = match &options.metrics_addr {
        Some(addr) => Some(MetricsEndpoint::bind(addr)?),
        None => None,
    };
    if let Some(endpoint) = &endpoint {
        options.metrics = Some(std::sync::Arc::clone(endpoint.metrics()));
    }
    // A throwaway cluster (or master with replicas): its nodes live until this returns.
    let cluster = match (&spec, local.is_single_server()) {
        (
            TargetSpec::Embedded {
                binary, extra_args, ..
            },
            false,
        ) => {
            let cluster = local.start(binary.as_deref(), extra_args)?;
            out.note(&describe_local(&cluster));
            Some(cluster)
        }
        _ => None,
    };
    let mut target = match (&cluster, &spec) {
        (
            Some(cluster),
            TargetSpec::Embedded {
                connect_timeout,
                command_timeout,
                ..
            },
        ) => {
            let mut conn = cluster.conn_info();
            conn.connect_timeout = *connect_timeout;
            conn.command_timeout = *command_timeout;
            let mut target = Target::open(&TargetSpec::External(conn))?;
            // The tool's own servers: it may tune them, as its single embedded one.
            target.server.embedded = true;
            target.server.binary = Some(cluster.binary().path.display().to_string());
            target
        }
        _ => super::target_args::open_target(&spec)?,
    };
    if let Some(endpoint) = &endpoint {
        out.note(&format!("metrics at {} while the run goes", endpoint.url()));
    }
    describe_target(&target, "measuring", out);
    // Every node of the deployment, each probed on its own; the writes go to the chosen
    // shard's master, which may not be the --url server.
    let (probed, written) = match topology_mode {
        TopologyMode::Single => (Probed::single(&target), None),
        TopologyMode::Auto => {
            let (topology, notes) = discover(&target.conn, &address_map)?;
            for note in &notes {
                out.warn(note);
            }
            // A replica named by --url (cluster mode off) is where the writes would go: it
            // refuses them below, as before; the other nodes are still probed in observe mode.
            let url_is_replica = topology.kind == TopologyKind::Standalone
                && topology
                    .node(&target.conn.address())
                    .is_some_and(|n| n.role == crate::record::NodeRole::Replica);
            if topology.nodes().len() <= 1 || (url_is_replica && options.writer.is_some()) {
                (Probed::single(&target), None)
            } else {
                let shard = choose_shard(probe_args.topology.shard.as_deref(), &topology)?;
                let probed =
                    Probed::from_topology(&topology, shard, &target.conn, options.probe_cmd)?;
                out.note(&describe_topology(&topology, shard));
                let master = &topology.shards[shard].master.address;
                let written = if *master == target.conn.address() {
                    None
                } else {
                    let mut written =
                        Target::open(&TargetSpec::External(target.conn.for_node(master)?))?;
                    written.server.embedded = target.server.embedded;
                    written.server.binary = target.server.binary.clone();
                    Some(written)
                };
                (probed, written)
            }
        }
    };
    let written_target = written.as_ref().unwrap_or(&target);
    let format = probe_args.format;
    let verbose = probe_args.verbose;
    let mut groups = report::WriteGroups::new(probed.nodes.len() - 1).verbose(verbose);
    let mut started_unix_us = 0;
    let mut header_shown = false;
    preflight(&options, written_target, out)?;
    describe_plan(&options, out);

    let steps_total = options.writer.as_ref().map_or(0, |w| w.steps().len());
    let observe_secs = options.duration.map_or(0, |d| d.as_secs());
    if steps_total > 0 {
        out.start_progress(steps_total as u64, "writes");
    } else if observe_secs >= 3 {
        out.start_progress(observe_secs, "s");
    }
    // Observe mode prints a line per --report-every when the run lasts that long at least.
    let mut history = match report_every {
        Some(every) if options.writer.is_none() && options.duration.is_none_or(|d| d >= every) => {
            Some(History::new(every))
        }
        _ => None,
    };
    let report = run::run_nodes(
        &options,
        written_target,
        &probed,
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
            }
        },
    );
    for line in groups.rest() {
        out.line(&line);
    }
    target.shutdown();
    if let Some(mut cluster) = cluster {
        cluster.stop();
    }
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
            for line in report::trust_lines(&report.analysis, &options) {
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

/// Says which server the command works on: the one it started, or the one at `--url`
/// (`verb`: "measuring", "loading"), and warns about its persistence.
pub(super) fn describe_target(target: &Target, verb: &str, out: &Output) {
    let server = &target.server;
    match (&target.embedded, &server.binary) {
        (Some(embedded), Some(binary)) => out.note(&format!(
            "started {} {} ({binary}) on 127.0.0.1:{}, persistence off; it is stopped when the run ends",
            server.flavor,
            server.version,
            embedded.port()
        )),
        _ => out.note(&format!(
            "{verb} {} ({} {})",
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
    if target.server.role.as_deref() == Some("slave") {
        anyhow::bail!(
            "{} is a read-only replica: point --url at the primary to measure writes, or observe the replica with --duration (no --writer-sizes)",
            target.conn
        );
    }
    if let Some(limit) = target.server.proto_max_bulk_len_bytes
        && let Some(&too_big) = writer.sizes.iter().find(|&&s| s > limit)
    {
        return Err(UsageError::invalid(
            "--writer-sizes",
            format_size(too_big),
            format!(
                "larger than the server's proto-max-bulk-len ({}): raise it with {}",
                format_size(limit),
                if target.server.embedded {
                    "--server-arg \"proto-max-bulk-len 1gb\""
                } else {
                    "CONFIG SET proto-max-bulk-len on that server"
                }
            ),
        )
        .into());
    }
    if !options.force_memory {
        crate::measure::writer::check_plan_memory(writer, target)?;
    }
    if !target.server.embedded {
        out.warn(&format!(
            "deleting a large key stalls the server (~45-80 us per MiB, measured on Redis 7.0): this run deletes each value it writes (largest {}), on a server others may be using",
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

/// `target: ...` of a dry run: the server named (never its password), or the binary that would
/// be started (resolved, but not run beyond `--version`).
pub(super) fn dry_run_target(spec: &TargetSpec) -> Result<String> {
    Ok(match spec {
        TargetSpec::External(conn) => format!(
            "target: {conn} (password: {})",
            if conn.password.is_some() {
                "given, not shown"
            } else {
                "none"
            }
        ),
        TargetSpec::Embedded { binary, .. } => {
            let binary = ServerBinary::resolve(binary.as_deref())?;
            format!(
                "target: start {} ({:?} {}) on a free loopback port, persistence off, in a temporary directory; stopped at the end",
                binary.path.display(),
                binary.flavor,
                binary.version
            )
        }
    })
}

/// The plan of a run, without starting, connecting to or sending anything.
fn dry_run_plan(options: &RunOptions, spec: &TargetSpec) -> Result<Vec<String>> {
    let mut lines = vec!["dry run: nothing is started, connected to or sent".to_string()];
    lines.push(dry_run_target(spec)?);
    let every_us = 1e6 / (options.probe_rate * f64::from(options.probe_threads));
    lines.push(format!(
        "probes: {} thread(s) x {}/s {} on their own connections (together every {every_us:.0} us), for the whole run",
        options.probe_threads,
        options.probe_rate,
        options.probe_cmd.name().to_uppercase()
    ));
    let run_prefix = format!("{}:<run-id>:", run::KEY_NAMESPACE);
    lines.push(format!(
        "before the run: INFO server, INFO replication, CONFIG GET maxmemory / proto-max-bulk-len / save / appendonly, EXISTS on the run's keys{}",
        if options.probe_cmd == crate::record::ProbeCmd::Get {
            format!(", SET {run_prefix}probe <20 bytes>")
        } else {
            String::new()
        }
    ));
    let embedded = matches!(spec, TargetSpec::Embedded { .. });
    match &options.writer {
        Some(plan) => {
            let mut plan = plan.clone();
            plan.key_prefix = run_prefix.clone();
            let steps = plan.steps();
            // What the session resets before each write (src/session/probes.rs, ViewSetup).
            let resets = if embedded {
                ", CONFIG RESETSTAT and LATENCY RESET"
            } else if options.tune_server {
                ", LATENCY RESET if the run switched the latency monitor on"
            } else {
                ""
            };
            lines.push(format!(
                "writes: {} events, each followed by {:?} of quiet probing (at least {:.1} s); around each, the server-view reads (before: INFO memory, INFO debug, LATENCY LATEST{resets}; after: SLOWLOG GET 256, COMMANDLOG GET 16 large-request, LATENCY LATEST, INFO debug, INFO memory):",
                steps.len(),
                plan.gap,
                plan.minimum_duration().as_secs_f64()
            ));
            for (index, step) in steps.iter().enumerate() {
                let command = match (step.op, &step.command) {
                    (_, Some(args)) => args.join(" "),
                    (crate::record::WriteOp::Delete, None) => format!("DEL {}", step.key),
                    _ => format!(
                        "SET {} <{} random bytes>",
                        step.key,
                        format_size(step.size_bytes)
                    ),
                };
                lines.push(format!(
                    "  {:>3}  {:<9}  {command}",
                    index + 1,
                    step.op.name()
                ));
            }
            let largest = plan.max_size();
            let server_peak = crate::analyze::pressure::plan_server_peak_bytes(
                &plan.sizes,
                plan.repeat,
                plan.overwrite,
                plan.keep,
            );
            let settings = "CONFIG SET slowlog-log-slower-than 0, slowlog-max-len 1024 (if lower), latency-monitor-threshold 1";
            lines.push(if embedded || options.tune_server {
                format!("server settings: {settings}, each restored at the end")
            } else {
                format!(
                    "server settings: none changed (--tune-server would {settings}, restoring them at the end)"
                )
            });
            lines.push(format!(
                "memory: client about {} (one buffer of the largest value, sliced for every write); server up to {} (a SET holds its value twice while it executes; the allocator may round each up by 25%){}",
                format_size(largest),
                crate::analyze::pressure::human_bytes(server_peak),
                if plan.keep {
                    " (--keep holds every value until the end)"
                } else if plan.overwrite {
                    " (an overwrite holds the old and the new value for a moment)"
                } else {
                    " (one value at a time)"
                }
            ));
        }
        None => {
            lines.push(match options.duration {
                Some(d) => format!("observe: no writes; probing for {d:?}"),
                None => "observe: no writes; probing until Ctrl-C or SIGTERM".to_string(),
            });
            let tuned = matches!(spec, TargetSpec::Embedded { .. }) || options.tune_server;
            let settings = format!(
                "CONFIG SET slowlog-log-slower-than {} (if higher), slowlog-max-len 128 (if lower) and latency-monitor-threshold {} (if higher or off)",
                options.stall_threshold_us,
                (options.stall_threshold_us / 1000).max(1)
            );
            lines.push(if tuned {
                format!("server settings: {settings}, each restored at the end")
            } else {
                format!("server settings: none changed (--tune-server would {settings}, restoring them at the end)")
            });
        }
    }
    if options.writer.is_none() {
        lines.push(
            "while the run goes, to name the stalls: SLOWLOG GET 1 (COMMANDLOG GET 1 slow on Valkey 8.1+), the new entries, and LATENCY LATEST, every 250 ms on a connection of its own".to_string(),
        );
    }
    lines.push(format!(
        "after the run: DEL of any key left under {run_prefix}"
    ));
    Ok(lines)
}

/// Intervals gathered into one `--report-every` line.
struct History {
    every_us: u64,
    latency: Option<hdrhistogram::Histogram<u64>>,
    from_us: Option<u64>,
    errors: u64,
    stalls: u64,
    stall_ms: f64,
    longest_stall_ms: f64,
}

impl History {
    fn new(every: std::time::Duration) -> History {
        History {
            every_us: every.as_micros() as u64,
            latency: None,
            from_us: None,
            errors: 0,
            stalls: 0,
            stall_ms: 0.0,
            longest_stall_ms: 0.0,
        }
    }

    /// Adds an interval of a run that started at `started_unix_us`; returns a line when `every`
    /// is covered.
    fn add(
        &mut self,
        interval: &crate::analyze::findings::Interval,
        started_unix_us: u64,
    ) -> Option<String> {
        let from = *self.from_us.get_or_insert(interval.start_us);
        match self.latency.as_mut() {
            Some(hist) => {
                let _ = hist.add(&interval.latency);
            }
            None => self.latency = Some(interval.latency.clone()),
        }
        self.errors += interval.errors;
        self.stalls += interval.stalls;
        self.stall_ms += interval.stall_ms;
        self.longest_stall_ms = self.longest_stall_ms.max(interval.longest_stall_ms);
        let end = interval.start_us + interval.length_us;
        if end - from < self.every_us {
            return None;
        }
        let latency = self.latency.take()?;
        let line = report::report_every_line(
            &crate::measure::clock::wall_time(started_unix_us + end),
            (end - from) as f64 / 1e6,
            &latency,
            self.errors,
            self.stalls,
            self.stall_ms,
            self.longest_stall_ms,
        );
        *self = History::new(std::time::Duration::from_micros(self.every_us));
        Some(line)
    }
}

/// One line on what the run probes: `topology: cluster of 3 shards, 6 nodes (3 replicas);
/// writes go to shard 0 (127.0.0.1:7000, slots 0-5460)`.
fn describe_topology(topology: &Topology, written: usize) -> String {
    let nodes = topology.nodes().len();
    let replicas: usize = topology.shards.iter().map(|s| s.replicas.len()).sum();
    let shard = &topology.shards[written];
    match topology.kind {
        TopologyKind::Cluster => format!(
            "topology: cluster of {} shard(s), {nodes} nodes ({replicas} replicas), each probed; writes go to shard {written} ({})",
            topology.shards.len(),
            shard.master.announced,
        ),
        TopologyKind::Standalone => format!(
            "topology: {} with {replicas} replica(s), each probed",
            shard.master.announced
        ),
    }
}

/// `started a cluster of 3 masters with 1 replica each (redis 7.0.15) on 127.0.0.1:40001..40006,
/// persistence off; they are stopped when the run ends`.
fn describe_local(cluster: &crate::measure::local_cluster::LocalCluster) -> String {
    let nodes = cluster.nodes();
    let masters = nodes
        .iter()
        .filter(|n| n.role() == crate::record::NodeRole::Master)
        .count();
    let replicas = (nodes.len() - masters) / masters.max(1);
    let ports: Vec<String> = nodes.iter().map(|n| n.port().to_string()).collect();
    let what = if cluster.is_cluster() {
        format!("a cluster of {masters} master(s) with {replicas} replica(s) each")
    } else {
        format!("a master with {replicas} replica(s)")
    };
    format!(
        "started {what} ({} {}) on 127.0.0.1 ports {}, persistence off; they are stopped when the run ends",
        cluster.binary().flavor.name(),
        cluster.binary().version,
        ports.join(",")
    )
}
