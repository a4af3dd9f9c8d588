//! `probe keys`: which keys of a live server would freeze it, for how long, and when. Its flags
//! and plan are in `args.rs`, the scan (the session's actor) in `scan.rs`, its text and Markdown
//! in `report.rs`; the model, the pacing and the tally are pure, in [`crate::keys`].
//!
//! The scan runs as the actor of an ordinary measuring session, so the probes watch the server
//! (every node of a cluster) while it goes: their intervals pace the scan, and the report says
//! what the scan cost other clients. Nothing is written to the server. `--replay` then rebuilds
//! the worst keys' shapes on a server of the tool's own and measures them (`replay.rs`).

mod args;
pub mod refit;
pub mod replay;
mod report;
mod scan;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

pub use args::{KeysArgs, KeysPlan};
use scan::{KeyScanner, LEAD_IN, ScanNode, ScanShared, ScanSpec, ScanState};

use super::Output;
use super::deployment::{Deployment, describe_target};
use crate::cli::sections::topology::TopologyPlan;
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::keys::model::{CostModel, choose, fits_server, shipped};
use crate::keys::report::Tally;
use crate::load::cluster::ReadFrom;
use crate::measure::local_cluster::LocalTopologySpec;
use crate::measure::topology::TopologyKind;
use crate::output::export::{
    HostInfo, KEYS_CSV, KeysModelUsed, KeysRunJson, KeysScanSettings, Mode, RUN_JSON, RowAppender,
    RunStatus, ScanCost, ToolInfo, columns, prepare_out_dir, write_atomic,
};
use crate::output::format::{self, Format};
use crate::run::Notice;
use crate::workload::lazyfree::LazyfreeSettings;

/// The server's `lazyfree-lazy-*` settings (`None` each where CONFIG is refused).
fn lazyfree_settings(conn: &crate::measure::target::ConnInfo) -> LazyfreeSettings {
    let pairs: Vec<(String, String)> = conn
        .redis_connection()
        .ok()
        .and_then(|mut c| {
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("lazyfree-lazy-*")
                .query::<Vec<String>>(&mut c)
                .ok()
        })
        .map(|flat| {
            flat.chunks(2)
                .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
                .collect()
        })
        .unwrap_or_default();
    LazyfreeSettings::from_config(pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())))
}

/// The master (`host:port`) of the server at `conn` when it is a replica (INFO replication).
fn master_of_replica(conn: &crate::measure::target::ConnInfo) -> Option<String> {
    let mut c = conn.redis_connection().ok()?;
    let info: String = redis::cmd("INFO").arg("replication").query(&mut c).ok()?;
    let field = |name| crate::measure::target::info_field(&info, name);
    if field("role")? != "slave" {
        return None;
    }
    Some(format!(
        "{}:{}",
        field("master_host")?,
        field("master_port")?
    ))
}

/// Runs `probe keys`; returns the exit status.
pub fn run(args: &KeysArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let plan = args.validate()?;
    if let Some(refit) = &plan.refit {
        return refit::run(&plan, refit, interrupt, out);
    }
    if let Some(dir) = &plan.out {
        prepare_out_dir(dir, plan.force)?;
    }
    let mut deployment = Deployment::start(&plan.target, &LocalTopologySpec::default(), out)?;
    describe_target(&deployment.target, "scanning", out);
    deployment.discover(
        &TopologyPlan {
            discovery: plan.discovery.clone(),
            shard: None,
            local: LocalTopologySpec::default(),
        },
        false,
        plan.options.probe_cmd,
        out,
    )?;
    let target = &deployment.target;
    let server = target.server.clone();
    let mut warnings: Vec<String> = Vec::new();

    // The nodes whose keys are scanned: a cluster's masters (or replicas), else the --url
    // server (a master's replicas hold the same keys).
    let mut nodes = Vec::new();
    match &deployment.probed.topology {
        Some(topology) if topology.kind == TopologyKind::Cluster => {
            for shard in &topology.shards {
                match plan.read_from {
                    ReadFrom::Masters => {
                        let conn = target.conn.for_node(&shard.master.address)?;
                        nodes.push(ScanNode {
                            name: shard.master.announced.clone(),
                            lazyfree: lazyfree_settings(&conn),
                            conn,
                            readonly: false,
                        });
                    }
                    ReadFrom::Replicas => {
                        let replica = shard.replicas.first().ok_or_else(|| {
                            UsageError::invalid(
                                "--read-from",
                                "replicas",
                                format!(
                                    "shard {} (master {}) has no reachable replica to scan",
                                    shard.index, shard.master.announced
                                ),
                            )
                        })?;
                        nodes.push(ScanNode {
                            name: replica.announced.clone(),
                            conn: target.conn.for_node(&replica.address)?,
                            readonly: true,
                            lazyfree: lazyfree_settings(
                                &target.conn.for_node(&shard.master.address)?,
                            ),
                        });
                    }
                }
            }
        }
        _ => {
            // A replica is priced with its master's settings, as a cluster's replicas are: a
            // DEL goes to the master, and its expiries too (a replica frees a key when the
            // master's DEL reaches it). A replica started with lazyfree-lazy-user-del yes priced
            // a 1M hash's DEL at 0.2 ms, its master's at 435 ms (the hostile trial).
            let lazyfree = match master_of_replica(&target.conn) {
                Some(master) => match target
                    .conn
                    .for_node(&master)
                    .and_then(|conn| conn.redis_connection().map(|_| conn))
                {
                    Ok(conn) => lazyfree_settings(&conn),
                    Err(err) => {
                        let warning = format!(
                            "{} is a replica of {master}, whose lazyfree settings could not be read ({}): its removals are priced with the replica's own",
                            target.conn.address(),
                            crate::error::one_line(&err)
                        );
                        out.warn(&warning);
                        warnings.push(warning);
                        lazyfree_settings(&target.conn)
                    }
                },
                None => lazyfree_settings(&target.conn),
            };
            nodes.push(ScanNode {
                name: target.conn.address(),
                conn: target.conn.clone(),
                readonly: false,
                lazyfree,
            })
        }
    }

    // The replay's binary, checked before the scan (a wrong one failed only after a whole
    // scan), and set against the scanned server's version (the hostile trial compared a Redis
    // 7.0 scan's predictions with Valkey 9.1's measurements, unsaid).
    if let Some(replay) = &plan.replay
        && let crate::measure::target::TargetSpec::Embedded { binary, .. } = &replay.server
    {
        let found =
            crate::measure::target::ServerBinary::resolve(binary.as_deref()).map_err(|err| {
                UsageError::invalid(
                    "--server-bin",
                    binary
                        .as_deref()
                        .map_or("redis-server".into(), |b| b.display().to_string()),
                    format!("{err:#}"),
                )
            })?;
        let scanned = (
            target.server.flavor.as_str(),
            target.server.version.as_str(),
        );
        if found.flavor.name() != scanned.0
            || found
                .version
                .split('.')
                .take(2)
                .ne(scanned.1.split('.').take(2))
        {
            let warning = format!(
                "--replay: the replay server is {} {} and the scanned one {} {}: the measured figures are another server's, set against predictions for the scanned one",
                found.flavor.name(),
                found.version,
                scanned.0,
                scanned.1
            );
            out.warn(&warning);
            warnings.push(warning);
        }
    }
    // One node scanned (a replica's: its master's settings): its; else the --url node's.
    let lazyfree = match nodes.as_slice() {
        [only] => only.lazyfree,
        _ => lazyfree_settings(&target.conn),
    };
    // What the replay server copies of this one, read now: the scan's connection ends with it.
    let replay_settings = match &plan.replay {
        Some(_) => replay::copied_settings(&target.conn),
        None => Vec::new(),
    };
    if nodes.iter().any(|n| n.lazyfree.lazy_expire.is_none()) {
        // On the screen too: the thread of every removal is a guess (the hostile trial found
        // it in run.json only, and the screen's "on the ? thread").
        let warning = "the server did not tell its lazyfree-lazy-* settings (CONFIG GET refused): removals are predicted as main-thread frees, their thread unknown, and no lazyfree setting is advised".to_string();
        out.warn(&warning);
        warnings.push(warning);
    }
    // Each key is priced with its own node's settings (a cluster's were all taken for the
    // --url node's: the hostile trial's 100k sorted set on a node without lazyfree was
    // predicted to free in the background, 0.02 ms against 20.9 measured).
    let nodes_lazyfree: std::collections::BTreeMap<String, LazyfreeSettings> = if nodes
        .iter()
        .any(|n| n.lazyfree != nodes[0].lazyfree)
    {
        let warning = "the nodes' lazyfree-lazy-* settings differ: each key is priced with its own node's (run.json nodes_lazyfree)".to_string();
        out.warn(&warning);
        warnings.push(warning);
        nodes.iter().map(|n| (n.name.clone(), n.lazyfree)).collect()
    } else {
        Default::default()
    };
    let models = shipped();
    let (model, nearest, from): (CostModel, bool, String) = match &plan.model {
        Some((path, model)) => {
            // Another version's model is the user's choice, used as the tool uses the nearest
            // shipped one where none was fitted on the server's version: with a warning.
            if !fits_server(model, &server.flavor, &server.version) {
                let warning = format!(
                    "--model {}: fitted on {}, the server is {} {}; its predictions may be off for this server",
                    path.display(),
                    model.server_name(),
                    server.flavor,
                    server.version
                );
                out.warn(&warning);
                warnings.push(warning);
            }
            let missing = model.missing_entries();
            if !missing.is_empty() {
                let warning = format!(
                    "--model {} has no entry for {}: those ops are priced from another entry where one stands in (expiry, eviction and overwrite as DEL), else left unpriced (`?`, empty in keys.csv)",
                    path.display(),
                    missing.join(", ")
                );
                out.warn(&warning);
                warnings.push(warning);
            }
            (model.clone(), false, path.display().to_string())
        }
        None => {
            let (model, warning) = choose(&models, &server.flavor, &server.version)
                .context("no cost model is shipped with this build")?;
            let nearest = warning.is_some();
            if let Some(warning) = warning {
                out.warn(&warning);
                warnings.push(warning);
            }
            (model.clone(), nearest, "shipped".into())
        }
    };
    let (worst_median, worst) = model.worst_errors_pct();
    let (median_error, worst_entry) = model.error_overview();
    let model_used = KeysModelUsed {
        server: model.server_name(),
        from,
        nearest,
        provisional: model.has_provisional(),
        worst_median_error_pct: worst_median,
        worst_error_pct: worst,
        median_error_pct: median_error,
        worst_entry_max_ms: worst_entry.as_ref().map(|w| w.1),
        worst_entry: worst_entry.map(|w| w.0.to_string()),
        later_checks: model.later_checks.clone(),
        measured_how: model.measured_how.clone(),
    };

    let threshold_ms = plan.options.stall_threshold_us as f64 / 1e3;
    let shared = Arc::new(ScanShared {
        keys_scanned: AtomicU64::new(0),
        probe_worst_us: AtomicU64::new(0),
        state: Mutex::new(ScanState {
            // The table shows --top keys; --replay may take more of the worst.
            tally: Tally::new(
                plan.top.max(plan.replay.as_ref().map_or(0, |r| r.keys)),
                threshold_ms,
            ),
            scan_window_us: None,
            batches: 0,
            backoffs: 0,
            smallest_count: plan.count,
            refused: Vec::new(),
            other_types: Default::default(),
            changed: 0,
            nodes_done: Vec::new(),
            rows_written: 0,
            failure: None,
        }),
    });
    let csv = match &plan.out {
        Some(dir) => Some(RowAppender::create(&dir.join(KEYS_CSV), columns::KEYS)?),
        None => None,
    };
    let mut total = 0u64;
    for node in &nodes {
        total += node
            .conn
            .redis_connection()
            .ok()
            .and_then(|mut c| redis::cmd("DBSIZE").query::<u64>(&mut c).ok())
            .unwrap_or(0);
    }
    let scanner = KeyScanner::new(
        ScanSpec {
            nodes: nodes.clone(),
            pattern: plan.pattern.clone(),
            kind: plan.kind,
            count: plan.count,
            threshold_us: plan.options.stall_threshold_us,
            size_floor_bytes: plan.size_floor_bytes,
            model: model.clone(),
        },
        Arc::clone(&shared),
        csv,
    );
    let started = crate::measure::clock::wall_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64),
    );
    // Probe intervals: (start, end, worst, p99, probes), µs.
    let mut intervals: Vec<(u64, u64, u64, u64, u64)> = Vec::new();
    let mut refusals_shown = 0;
    out.start_progress(total.max(1), "keys");
    // The session's own server is the probed deployment's first node, as for a run's writes
    // (in a cluster shard 0's master, not the --url node; for a replica, its master): the probe
    // key it checks and removes lives there, and a replica refuses the removal.
    let report = crate::session::measure_nodes(
        &plan.options,
        deployment.written(),
        &deployment.probed,
        Some(Box::new(scanner)),
        crate::session::RunSpec::new(crate::output::export::Mode::Keys),
        interrupt,
        &mut |notice| match notice {
            Notice::Interval { interval, .. } => {
                shared
                    .probe_worst_us
                    .fetch_max(interval.max_us, Ordering::SeqCst);
                intervals.push((
                    interval.start_us,
                    interval.start_us + interval.length_us,
                    interval.max_us,
                    interval.p99_us,
                    interval.probes,
                ));
            }
            Notice::Tick { .. } => {
                let scanned = shared.keys_scanned.load(Ordering::Relaxed);
                out.progress(scanned, String::new());
                if let Ok(state) = shared.state.lock() {
                    for (_, line) in state.refused.iter().skip(refusals_shown) {
                        out.warn(line);
                    }
                    refusals_shown = state.refused.len();
                }
            }
            _ => {}
        },
    );
    out.finish_progress();
    let report = report?;
    let state = shared
        .state
        .lock()
        .map_err(|_| anyhow::anyhow!("the scan's thread panicked"))?;
    for (_, line) in state.refused.iter().skip(refusals_shown) {
        out.warn(line);
    }
    warnings.extend(state.refused.iter().map(|(_, line)| line.clone()));
    let mut late = Vec::new();
    if !state.other_types.is_empty() {
        let kinds: Vec<String> = state
            .other_types
            .iter()
            .map(|(name, (n, largest))| match largest {
                Some(b) => format!(
                    "{name}: {n}, the largest {}",
                    crate::analyze::pressure::human_bytes(*b)
                ),
                None => format!("{name}: {n}"),
            })
            .collect();
        late.push(format!(
            "{} key(s) of a type the cost model has no figures for ({}): counted, not priced, not in keys.csv (the tool measures strings, hashes, lists, sets, sorted sets and streams only)",
            state.other_types.values().map(|v| v.0).sum::<u64>(),
            kinds.join("; ")
        ));
    }
    if state.changed > 0 {
        late.push(format!(
            "{} key(s) changed under the scan (gone, or another type, between its two round trips): left out",
            state.changed
        ));
    }
    for line in &late {
        out.warn(line);
    }
    warnings.extend(late);
    // What other runs of the tool left or are doing on the server is said on screen too (the
    // scan leaves a dead run's keys and settings as they are: the line says so).
    // So are failed probes: the scan's cost to others is read from them.
    for line in report.warnings.iter().filter(|w| {
        w.contains("ended without cleaning up")
            || w.contains("another run of the tool")
            || w.contains("probe(s) failed")
    }) {
        out.warn(line);
    }
    warnings.extend(report.warnings.iter().cloned());

    let (from_us, to_us) = state
        .scan_window_us
        .unwrap_or((LEAD_IN.as_micros() as u64, 0));
    let during: Vec<_> = intervals
        .iter()
        .filter(|i| i.1 > from_us && i.0 < to_us)
        .collect();
    let before: Vec<_> = intervals.iter().filter(|i| i.1 <= from_us).collect();
    let worst = |list: &[&(u64, u64, u64, u64, u64)],
                 pick: fn(&(u64, u64, u64, u64, u64)) -> u64| {
        list.iter()
            .filter(|i| i.4 > 0)
            .map(|i| pick(i))
            .max()
            .map(|us| us as f64 / 1e3)
    };
    let stalls: Vec<_> = report
        .analysis
        .stalls
        .iter()
        .filter(|s| s.end_us > from_us && s.start_us < to_us)
        .collect();
    let tally = &state.tally;
    if !tally.unpriced.is_empty() {
        let count: u64 = tally.unpriced.values().sum();
        let kinds: Vec<String> = tally
            .unpriced
            .iter()
            .map(|(kind, n)| format!("{kind}: {n}"))
            .collect();
        let warning = format!(
            "{count} key(s) of a type or encoding the model has no entry for ({}): their freezes are not predicted (worst_ms empty in keys.csv), and they are not among the keys counted over the threshold",
            kinds.join(", ")
        );
        out.warn(&warning);
        warnings.push(warning);
    }
    if let Some(warning) = tally.past_fitted_warning() {
        out.warn(&warning);
        warnings.push(warning);
    }
    let mut doc = KeysRunJson {
        tool: ToolInfo::default(),
        mode: Mode::Keys,
        run_id: report.run_id.clone(),
        status: report.status,
        status_reason: report.status_reason.clone().or(state.failure.clone()),
        started,
        host: HostInfo::read(),
        server: server.clone(),
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        nodes_done: state.nodes_done.clone(),
        scan: KeysScanSettings {
            pattern: plan.pattern.clone(),
            kind: plan.kind.map(|k| k.name().to_string()),
            count: plan.count,
            threshold_ms,
            top: plan.top,
            size_floor_bytes: plan.size_floor_bytes,
            rows_written: state.rows_written,
        },
        lazyfree,
        nodes_lazyfree: nodes_lazyfree.clone(),
        model: model_used,
        keys_scanned: tally.keys_scanned,
        keys_over_threshold: tally.keys_over_threshold,
        sum_over_threshold_ms: (tally.sum_over_threshold_ms * 1e3).round() / 1e3,
        keys_with_ttl: tally.keys_with_ttl,
        top: tally.top.iter().take(plan.top).cloned().collect(),
        expiring: tally.expiring.clone(),
        expiring_count: tally.expiring_count,
        advice: tally.advice(),
        scan_cost: ScanCost {
            wall_s: to_us.saturating_sub(from_us) as f64 / 1e6,
            batches: state.batches,
            backoffs: state.backoffs,
            smallest_count: state.smallest_count,
            probes_during: during.iter().map(|i| i.4).sum(),
            worst_probe_ms_during: worst(&during, |i| i.2),
            p99_probe_ms_during: worst(&during, |i| i.3),
            worst_probe_ms_before: worst(&before, |i| i.2),
            stalls_during: stalls.len() as u64,
            stalls_during_at_least: report.stalls_found > report.analysis.stalls.len() as u64,
            longest_stall_ms: stalls.iter().map(|s| s.duration_ms).reduce(f64::max),
        },
        warnings,
        replay: Vec::new(),
    };
    let worst_keys = tally.top.clone();
    drop(state);
    drop(deployment);
    if let Some(dir) = &plan.out {
        // A replay to come: the run is not over until it is (a kill -9 during it left a run.json
        // that said `complete` with no replay: the hostile trial).
        let json = if plan.replay.is_some() && doc.status == RunStatus::Complete {
            let mut pending = doc.clone();
            pending.status = RunStatus::Running;
            pending.status_reason = Some("the scan is whole; --replay under way".into());
            serde_json::to_vec_pretty(&pending)
        } else {
            serde_json::to_vec_pretty(&doc)
        }
        .context("encoding run.json")?;
        write_atomic(&dir.join(RUN_JSON), &json)?;
    }
    match plan.format {
        Format::Text => {
            for line in report::text_lines(&doc) {
                out.line(&line);
            }
        }
        // After the replay, with its rows.
        Format::Json => {}
        Format::Markdown => {
            for line in report::markdown(&doc).lines() {
                out.line(line);
            }
        }
    }
    let mut replay_failed: Option<String> = None;
    let mut replay_interrupted = false;
    let mut replay_server = String::new();
    if let Some(replay_plan) = &plan.replay {
        if doc.status != RunStatus::Complete {
            out.warn("--replay: the scan did not complete; nothing replayed");
        } else {
            match replay::run(
                replay_plan,
                &worst_keys,
                &replay_settings,
                &nodes_lazyfree,
                &plan.options,
                plan.out.as_ref(),
                plan.force,
                interrupt,
                out,
            ) {
                Ok((server, rows, notes)) => {
                    replay_server = server;
                    doc.warnings.extend(notes);
                    // Every key failed: the check did not happen.
                    if !rows.is_empty() && rows.iter().all(|r| r.run_id.is_none()) {
                        replay_failed = Some(format!(
                            "every one of the {} key(s) replayed failed",
                            rows.len()
                        ));
                    }
                    doc.replay = rows;
                }
                Err(err) => {
                    out.error(&format!("--replay: {err:#}"));
                    replay_failed = Some(crate::error::one_line(&err));
                }
            }
            // A failed replay fails the run in run.json as in the exit status (it read
            // `complete` with exit 1: hostile review, F6); the scan itself is whole.
            if let Some(why) = &replay_failed {
                doc.status = RunStatus::Failed;
                doc.status_reason = Some(format!(
                    "--replay failed ({why}): the scan is whole, its predictions unchecked"
                ));
            }
            // A replay cut short says so in run.json (it read `complete`: the hostile trial).
            if interrupt.load(Ordering::SeqCst) {
                replay_interrupted = true;
                doc.status = RunStatus::Interrupted;
                doc.status_reason = Some(
                    "interrupted by a signal during --replay: the scan is whole, the replay a part"
                        .into(),
                );
            }
            // Always written again: the one before the replay said it was under way.
            if let Some(dir) = &plan.out {
                let json = serde_json::to_vec_pretty(&doc).context("encoding run.json")?;
                write_atomic(&dir.join(RUN_JSON), &json)?;
            }
            if (!doc.replay.is_empty() || doc.status == RunStatus::Interrupted)
                && plan.format != Format::Json
            {
                out.line("");
                for line in crate::keys::replay::text_lines(&doc.replay, &replay_server) {
                    out.line(&line);
                }
            }
        }
    }
    if plan.format == Format::Json {
        out.line(format::json(&doc)?.trim_end());
    }
    if let Some(dir) = &plan.out {
        out.note(&format!("results in {}", dir.display()));
    }
    Ok(match doc.status {
        _ if replay_interrupted => {
            if !out.stdout_closed() {
                out.error("interrupted; the keys scanned, and those replayed so far, were kept");
            }
            EXIT_INTERRUPTED
        }
        RunStatus::Interrupted => {
            if !out.stdout_closed() {
                out.error("interrupted; the keys scanned so far were kept");
            }
            EXIT_INTERRUPTED
        }
        // Said above, as it failed.
        _ if replay_failed.is_some() => EXIT_FAILURE,
        RunStatus::Failed => {
            out.error(&format!(
                "{}; the keys scanned so far were kept",
                doc.status_reason.as_deref().unwrap_or("the scan failed")
            ));
            EXIT_FAILURE
        }
        _ => EXIT_OK,
    })
}
