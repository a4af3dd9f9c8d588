//! `probe load`: the concurrent-clients benchmark the tool grew from, optionally with the
//! prober's writer storing large values while it runs. Its flags and plan are in `args.rs`,
//! its dry run in `dry_run.rs`, its `--format json|markdown` in `format.rs`; what it works on
//! is opened by [`crate::commands::deployment`]; the run is here.

mod args;
mod dry_run;
mod format;

use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};

pub use args::{LoadArgs, LoadPlan, MAX_CLIENTS, parse_ratio};

use super::Output;
use super::deployment::{LoadCluster, LoadDeployment};
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::load::cluster::{ReadFrom, clients_per_node, load_nodes};
use crate::load::engine::OpMix;
use crate::load::keyspace::{
    KeyNaming, LOAD_PREFIX, META_KEY, MemoryRoom, PopulationMeta, ValueSize, check_fit,
    check_set_growth, default_keys, read_meta, write_meta,
};
use crate::load::populate::{PopulatePlan, estimated_bytes_per_key, populate};
use crate::load::report::{block_lines, generator_lines, write_line};
use crate::load::runner::{LoadNotice, LoadOptions, LoadServer, run_load};
use crate::measure::slots::hash_tag_for;
use crate::measure::target::{Target, TargetSpec};
use crate::units::format_size;

/// Keys the embedded server is populated with at most by default (a quick start).
pub const EMBEDDED_DEFAULT_KEYS_CAP: u64 = 100_000;

/// Runs `probe load`; returns the exit status.
pub fn run(args: &LoadArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let plan = args.to_plan(std::env::var("REDISCLI_AUTH").ok())?;
    if args.dry_run {
        let lines = dry_run::dry_run_plan(&plan)?;
        crate::commands::output::print_dry_run(out, "load", &lines, plan.output.format)?;
        return Ok(EXIT_OK);
    }
    // Held until the run's end: another run into the same --out is refused meanwhile.
    let _out_lock = plan.output.prepare()?;
    // Every server the tool started is stopped when the deployment drops, on every way out.
    let deployment = LoadDeployment::open(&plan.specs, &plan.discovery, out)?;
    run_deployment(&deployment, &plan, interrupt, out)
}

/// A cluster node (alone) runs the cluster load; other servers today's load.
fn run_deployment(
    deployment: &LoadDeployment,
    plan: &LoadPlan,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<i32> {
    let format = plan.output.format;
    let opened = &deployment.opened;
    match &deployment.cluster {
        Some(cluster) => run_cluster(plan, &opened[0], cluster, interrupt, out, format),
        None if plan.read_from == ReadFrom::Replicas => Err(UsageError::invalid(
            "--read-from",
            "replicas",
            "applies to a cluster: the --url server is not a cluster node",
        )
        .into()),
        None => run_opened(plan, opened, interrupt, out, format),
    }
}

/// The load on a cluster: every node a server of the report, each connection bound to one
/// node and sending only keys of its shard (see [`crate::load::cluster`]).
fn run_cluster(
    plan: &LoadPlan,
    url_target: &Target,
    cluster: &LoadCluster,
    interrupt: &AtomicBool,
    out: &mut Output,
    format: crate::output::format::Format,
) -> Result<i32> {
    let options = &plan.run;
    let mut control = cluster.meta_conn.redis_connection()?;
    let Some(meta) = read_meta(&mut control)? else {
        return Err(UsageError::Conflict(format!(
            "the cluster of {} holds no load keys ({META_KEY} not found on {}): fill it first with `probe populate --url {}`",
            url_target.conn,
            cluster.meta_conn.address(),
            url_target.conn
        ))
        .into());
    };
    let keys = match plan.keys {
        Some(keys) if keys > meta.keys => {
            return Err(UsageError::invalid(
                "--keys",
                keys,
                format!(
                    "the cluster holds only {} load keys: lower --keys or run probe populate --keys {keys}",
                    meta.keys
                ),
            )
            .into());
        }
        Some(keys) => keys,
        None => meta.keys,
    };
    let (by_shard, _) = cluster.slots.partition(&KeyNaming::load(), keys);
    if let Some(empty) = by_shard.iter().position(Vec::is_empty) {
        return Err(UsageError::invalid(
            "--keys",
            keys,
            format!("too few: no load key falls in the slots of shard {empty}"),
        )
        .into());
    }
    let by_shard: Vec<std::sync::Arc<Vec<u32>>> =
        by_shard.into_iter().map(std::sync::Arc::new).collect();
    let nodes = load_nodes(
        &cluster.topology,
        plan.read_from,
        options.set_weight,
        options.get_weight,
    )?;
    let counts = clients_per_node(
        &nodes,
        options.clients,
        options.set_weight,
        options.get_weight,
    )?;
    let mut opened = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let mut conn = url_target.conn.for_node(&node.address)?;
        conn.readonly = node.role == crate::measure::topology::Role::Replica;
        opened.push(
            Target::open(&TargetSpec::External(conn))
                .with_context(|| format!("opening the cluster node {}", node.address))?,
        );
    }
    // The writer's keys carry the hash tag of shard 0, whose master it writes to.
    let writer_hash_tag = hash_tag_for(&cluster.topology.shards[0].slots);
    preflight_writer(options, &opened, out)?;
    let set_size = plan.value_size.unwrap_or(meta.value_size);
    if options.set_weight > 0 {
        for (node, target) in nodes.iter().zip(&opened) {
            if node.role == crate::measure::topology::Role::Replica {
                continue;
            }
            let mut control = target.conn.redis_connection()?;
            let room = MemoryRoom::read(&mut control, &target.server)?;
            let shard_keys = by_shard[node.shard].len() as u64;
            check_set_growth(shard_keys, meta.value_size, set_size, &room, &node.address)?;
        }
    }
    let load_servers: Vec<LoadServer<'_>> = nodes
        .iter()
        .zip(&opened)
        .zip(&counts)
        .map(|((node, target), &clients)| LoadServer {
            target,
            keys,
            set_size,
            population: Some(meta.clone()),
            clients: Some(clients),
            key_indices: Some(std::sync::Arc::clone(&by_shard[node.shard])),
            ops: node.ops.unwrap_or(OpMix::Ratio),
            role: Some(node.describe()),
        })
        .collect();
    let spread: Vec<String> = nodes
        .iter()
        .zip(&counts)
        .filter(|(_, c)| **c > 0)
        .map(|(node, c)| format!("{c} on {} ({})", node.announced, node.describe()))
        .collect();
    out.note(&format!(
        "load: {} clients over the cluster ({}), SET:GET {}:{}, GETs from the {}, keys 0..{} each sent to its shard{}",
        options.clients,
        spread.join(", "),
        options.set_weight,
        options.get_weight,
        match plan.read_from {
            ReadFrom::Masters => "masters",
            ReadFrom::Replicas => "replicas",
        },
        keys - 1,
        if options.writer.is_some() {
            format!("; writer on shard 0's master {}", opened[0].conn)
        } else {
            String::new()
        }
    ));
    drive(
        options,
        &load_servers,
        writer_hash_tag.as_deref(),
        interrupt,
        out,
        format,
    )
}

/// The share of requests answered with an error from which a load run fails (exit 1).
const ERRORS_FAIL_SHARE: f64 = 0.01;

fn run_opened(
    plan: &LoadPlan,
    opened: &[Target],
    interrupt: &AtomicBool,
    out: &mut Output,
    format: crate::output::format::Format,
) -> Result<i32> {
    let options = &plan.run;
    let mut servers = Vec::new();
    for target in opened {
        let mut control = target.conn.redis_connection()?;
        if target.embedded.is_some() {
            populate_embedded(target, plan, &mut control, interrupt, out)?;
        }
        let Some(meta) = read_meta(&mut control)? else {
            return Err(UsageError::Conflict(format!(
                "{} holds no load keys ({LOAD_PREFIX}*): fill it first with `probe populate --url {}`",
                target.conn, target.conn
            ))
            .into());
        };
        let keys = match plan.keys {
            Some(keys) if keys > meta.keys && target.embedded.is_none() => {
                return Err(UsageError::invalid(
                    "--keys",
                    keys,
                    format!(
                        "{} holds only {} load keys: lower --keys or run probe populate --keys {keys}",
                        target.conn, meta.keys
                    ),
                )
                .into());
            }
            Some(keys) => keys.min(meta.keys),
            None => meta.keys,
        };
        let set_size = plan.value_size.unwrap_or(meta.value_size);
        if options.set_weight > 0 {
            let room = MemoryRoom::read(&mut control, &target.server)?;
            check_set_growth(
                keys,
                meta.value_size,
                set_size,
                &room,
                &target.conn.address(),
            )?;
        }
        servers.push((target, keys, set_size, meta));
    }
    preflight_writer(options, opened, out)?;
    describe_plan(options, &servers, out);
    let load_servers: Vec<LoadServer<'_>> = servers
        .iter()
        .map(|(target, keys, set_size, meta)| LoadServer {
            target,
            keys: *keys,
            set_size: *set_size,
            population: Some(meta.clone()),
            clients: None,
            key_indices: None,
            ops: OpMix::Ratio,
            role: None,
        })
        .collect();
    let driven = drive(options, &load_servers, None, interrupt, out, format);
    // The SETs overwrote population keys with values of their own size: the description says
    // so from now on (a later load read 598 bytes a GET of a population still described as
    // 1024..4096; the hostile trial). Once the load ran, not before a refusal.
    let refused = matches!(&driven, Err(err) if err.chain().any(|c| c.is::<UsageError>()));
    if options.set_weight > 0 && !refused {
        for (target, _, set_size, meta) in &servers {
            let sizes = meta.value_size.union(set_size);
            if sizes == meta.value_size {
                continue;
            }
            let updated = PopulationMeta {
                value_size: sizes,
                ..meta.clone()
            };
            match target
                .conn
                .redis_connection()
                .and_then(|mut c| write_meta(&mut c, &updated))
            {
                Ok(()) => out.note(&format!(
                    "the SETs wrote values of {set_size} bytes into {}'s population: its description now says {sizes} bytes",
                    target.conn
                )),
                Err(err) => out.warn(&format!(
                    "the SETs wrote values of {set_size} bytes into {}'s population, but its description could not be updated ({}): it still says {} bytes",
                    target.conn,
                    crate::error::one_line(&err),
                    meta.value_size
                )),
            }
        }
    }
    driven
}

/// Runs the load on `load_servers` with progress, the write lines, the blocks and the exit
/// status.
fn drive(
    options: &LoadOptions,
    load_servers: &[LoadServer<'_>],
    writer_hash_tag: Option<&str>,
    interrupt: &AtomicBool,
    out: &mut Output,
    format: crate::output::format::Format,
) -> Result<i32> {
    let steps = options.writer.as_ref().map_or(0, |w| w.step_count() as u64);
    let secs = options.duration.map_or(0, |d| d.as_secs());
    if steps > 0 && options.duration.is_none() {
        out.start_progress(steps, "writes");
    } else if secs >= 3 {
        out.start_progress(secs, "s");
    }
    let mut writes_seen = 0u64;
    let threshold_us = options.stall_threshold_us;
    let report = run_load(
        options,
        load_servers,
        writer_hash_tag,
        interrupt,
        &mut |notice| {
            match notice {
        LoadNotice::Started { run_id, threads } => out.note(&format!(
            "run {run_id}: {threads} generator thread(s); the writer's keys (if any) under {}:{run_id}:",
            crate::run::KEY_NAMESPACE
        )),
        LoadNotice::Tick {
            elapsed,
            last_second_requests,
        } => {
            let position = if steps > 0 && options.duration.is_none() {
                writes_seen
            } else {
                elapsed.as_secs()
            };
            out.progress(position, format!("{last_second_requests} req/s"));
        }
        LoadNotice::Write { finding, .. } => {
            writes_seen += 1;
            if format.is_text() {
                out.line(&write_line(finding, threshold_us));
            }
        }
        LoadNotice::Problem(text) => out.warn(text),
    }
        },
    );
    out.finish_progress();
    let report = report?;
    if out.stdout_closed() {
        return Ok(EXIT_INTERRUPTED);
    }
    if !format::print(format, &report, out)? {
        for line in block_lines(&report.blocks) {
            out.line(&line);
        }
        for line in generator_lines(&report) {
            out.line(&line);
        }
    }
    for warning in &report.warnings {
        out.warn(warning);
    }
    if let Some(dir) = &options.out {
        out.note(&format!("results in {}", dir.display()));
    }
    let code = super::output::run_exit_status(
        out,
        report.status,
        report.status_reason.as_deref(),
        &report.writes,
    );
    if code == EXIT_OK && report.generator.disconnected_at_end > 0 {
        out.error("connections to a server were lost and could not be reopened");
        return Ok(EXIT_FAILURE);
    }
    // A load whose requests the server refused in numbers (an ACL without SET, OOM) is not a
    // measurement of serving them: it exited 0 with a fifth of its requests errors.
    if code == EXIT_OK
        && let Some(all) = report.blocks.iter().find(|b| b.server == "all")
        && all.errors > 0
        && all.errors as f64 >= ERRORS_FAIL_SHARE * (all.errors + all.total_requests) as f64
    {
        out.error(&format!(
            "{} of {} requests were answered with an error (the warnings above quote the server): the figures are not of a load the server served",
            all.errors,
            all.errors + all.total_requests
        ));
        return Ok(EXIT_FAILURE);
    }
    // GETs of keys not there are nil replies, not values: a population removed or evicted
    // under the load's feet read as a GET throughput with 0 bytes, exit 0 (the hostile trial).
    if let Some(all) = report.blocks.iter().find(|b| b.server == "all")
        && all.misses > 0
    {
        let weights = options.set_weight + options.get_weight;
        let gets = (all.total_requests as f64 * options.get_weight as f64
            / f64::from(weights.max(1)))
        .round()
        .max(all.misses as f64);
        let share = all.misses as f64 / gets.max(1.0);
        // Known exactly only without SETs: no value bytes moved at all.
        if code == EXIT_OK && options.set_weight == 0 && all.bytes_transferred == 0 {
            out.error(&format!(
                "every GET ({}) found no key: no value was read, the figures are of nil replies (is the population there? `probe populate` makes it)",
                all.misses
            ));
            return Ok(EXIT_FAILURE);
        }
        if share >= MISSES_WARN_SHARE {
            out.warn(&format!(
                "{} of about {gets:.0} GETs ({:.0}%) found no key (evicted, removed or never populated): those are nil replies, not values, in the figures above",
                all.misses,
                share * 100.0
            ));
        }
    }
    Ok(code)
}

/// The share of GETs finding no key from which the load says so.
const MISSES_WARN_SHARE: f64 = 0.01;

/// Fills the started server: `--keys` (default as populate's, at most 100000) values of
/// `--value-size` (default 1024..4096), refusing a population that will not fit.
fn populate_embedded(
    target: &Target,
    plan: &LoadPlan,
    control: &mut redis::Connection,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<()> {
    let value_size = plan.value_size.unwrap_or(ValueSize::SEED);
    let naming = KeyNaming::load();
    let room = MemoryRoom::read(control, &target.server)?;
    let estimate = estimated_bytes_per_key(plan.keys.unwrap_or(100_000), &naming, value_size);
    let keys = match plan.keys {
        Some(keys) => keys,
        None => {
            let (keys, why) = default_keys(&room, estimate);
            let keys = keys.min(EMBEDDED_DEFAULT_KEYS_CAP);
            out.note(&format!(
                "populating the started server with {keys} keys (default: {why}, at most {EMBEDDED_DEFAULT_KEYS_CAP} for a server the tool starts; use --keys for more)"
            ));
            keys
        }
    };
    check_fit(keys, 0, estimate, value_size, &room)?;
    let populate_plan = PopulatePlan {
        keys,
        value_size,
        overwrite: false,
        seed: 0x5eed,
        naming,
        write_meta: true,
        indices: None,
    };
    out.start_progress(keys, "keys populated");
    let outcome = populate(&target.conn, &populate_plan, interrupt, &mut |done| {
        out.progress(done, String::new());
    });
    out.finish_progress();
    let outcome = outcome?;
    if outcome.interrupted {
        return Err(crate::error::Interrupted {
            signal: "signal".into(),
        }
        .into());
    }
    if outcome.errors > 0 {
        anyhow::bail!(
            "populating the started server failed: {}",
            outcome.first_error.as_deref().unwrap_or("unknown error")
        );
    }
    out.note(&format!(
        "populated {} keys of {value_size} bytes in {:.1} s",
        outcome.written, outcome.elapsed_s
    ));
    Ok(())
}

/// Refuses a write size the server would reject; warns before deleting on someone's server.
fn preflight_writer(options: &LoadOptions, opened: &[Target], out: &Output) -> Result<()> {
    // SETs to a replica are refused by it one by one: thousands of errors and a run that
    // exited 0 (the hostile trial). The main job refuses it up front; so does the load.
    if options.set_weight > 0
        && let Some(replica) = opened
            .iter()
            .find(|t| t.server.role.as_deref() == Some("slave"))
    {
        return Err(UsageError::invalid(
            "--ratio",
            format!("{}:{}", options.set_weight, options.get_weight),
            format!(
                "its SETs go to {}, a replica (read-only): point --url at the primary, or read only with --ratio 0:1",
                replica.conn
            ),
        )
        .into());
    }
    let Some(writer) = &options.writer else {
        return Ok(());
    };
    let target = &opened[0];
    if target.server.role.as_deref() == Some("slave") {
        anyhow::bail!(
            "{} is a read-only replica: point --url at the primary for --writer-sizes",
            target.conn
        );
    }
    crate::measure::writer::check_bulk_len(writer, &target.server)?;
    crate::measure::writer::check_evict(writer, target.server.embedded, &target.server.address)?;
    crate::measure::writer::check_commands(writer, &target.conn)?;
    if !target.server.embedded {
        out.warn(&format!(
            "deleting a large key stalls the server (~60-80 us per MiB on Redis 7.0): this run writes and deletes values up to {} on {}, a server others may be using",
            format_size(writer.max_size()),
            target.conn
        ));
    }
    Ok(())
}

fn describe_plan(
    options: &LoadOptions,
    servers: &[(&Target, u64, ValueSize, PopulationMeta)],
    out: &Output,
) {
    let mode = match options.rate {
        Some(rate) => format!("open loop at {rate} req/s in total"),
        None => "closed loop".to_string(),
    };
    let length = match (options.duration, &options.writer) {
        (Some(d), _) => format!("{d:?}"),
        (None, _) => "until the writer is done".to_string(),
    };
    let keys: Vec<String> = servers
        .iter()
        .map(|(t, keys, _, _)| format!("{} keys on {}", keys, t.conn))
        .collect();
    out.note(&format!(
        "load: {} clients over {} server(s), {mode}, pipeline {}, SET:GET {}:{}, {length}; {}",
        options.clients,
        servers.len(),
        options.pipeline,
        options.set_weight,
        options.get_weight,
        keys.join(", ")
    ));
    if let Some(w) = &options.writer {
        let sizes: Vec<String> = w.sizes.iter().map(|&s| format_size(s)).collect();
        out.note(&format!(
            "writer on {}: {} x {}, gap {:?}{}{}",
            servers[0].0.conn,
            sizes.join(","),
            w.repeat,
            w.gap,
            if w.overwrite { ", overwrite" } else { "" },
            if w.keep { ", keep" } else { "" }
        ));
    }
}
