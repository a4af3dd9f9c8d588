//! `probe populate`: fill `holprobe:load:*` with keys for `probe load`.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;

use super::Output;
use super::deployment::KeyspaceDeployment;
use crate::cli::sections::parse_count;
use crate::cli::sections::target::TargetArgs;
use crate::cli::sections::topology::LoadTopologyArgs;
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK};
use crate::load::keyspace::{
    KeyNaming, LOAD_PREFIX, MemoryRoom, ValueSize, check_fit, default_keys, read_meta,
};
use crate::load::populate::{PopulatePlan, estimated_bytes_per_key, populate, populate_cluster};
use crate::units::mib;

/// Fill holprobe:load:0..N-1 with random values for `probe load` (keys already there are kept
/// unless --overwrite). Needs --url: the keys outlive the command.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("url", |a| a.help("The server to fill: redis://[user:password@]host:port[/db] (or --host/--port). The password may instead come from REDISCLI_AUTH or --password. Required: the keys outlive the command")),
    // populate never starts a server, and its clients speak plain TCP.
    mut_arg("server_bin", |a| a.hide(true)),
    mut_arg("server_arg", |a| a.hide(true)),
    mut_arg("tls_ca", |a| a.hide(true)),
    mut_arg("tls_cert", |a| a.hide(true)),
    mut_arg("tls_key", |a| a.hide(true)),
    mut_arg("insecure", |a| a.hide(true))
)]
pub struct PopulateArgs {
    #[command(flatten)]
    target: TargetArgs,

    /// Keys to fill, holprobe:load:0 .. N-1; K and M suffixes are decimal (10M = 10,000,000)
    /// [default: a quarter of the server's free memory, at most 10M; see docs/load.md].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    keys: Option<String>,

    // --help: value sizes, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "SIZE|MIN..MAX",
        default_value = "1024..4096",
        help = crate::size_help!(
            "Value sizes: MIN..MAX for uniformly random sizes, or one size."
        )
    )]
    value_size: String,

    /// Replace keys that already exist instead of keeping them.
    #[arg(long)]
    overwrite: bool,

    /// Start of the random numbers (value sizes and bytes), so populates repeat.
    #[arg(
        long = "random-state",
        alias = "seed",
        value_name = "N",
        default_value_t = crate::options::DEFAULT_SEED,
        allow_negative_numbers = true
    )]
    seed: u64,

    #[command(flatten)]
    topology: LoadTopologyArgs,
}

/// Runs `probe populate`; returns the exit status.
pub fn run(args: &PopulateArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let keys = args
        .keys
        .as_deref()
        .map(|k| parse_count("--keys", k, 1, 1_000_000_000))
        .transpose()?;
    let value_size = ValueSize::parse("--value-size", &args.value_size)?;
    let discovery = args.topology.discovery.to_plan()?;
    let deployment = KeyspaceDeployment::open(&args.target, &discovery, "populate", false, out)?;
    let (target, cluster) = (&deployment.target, &deployment.cluster);
    let mut control = deployment.meta_conn().redis_connection()?;
    let previous = read_meta(&mut control)?;
    let room = MemoryRoom::read(&mut control, &target.server)?;
    let naming = KeyNaming::load();
    let estimate = estimated_bytes_per_key(keys.unwrap_or(1_000_000), &naming, value_size);
    let keys = match keys {
        Some(keys) => keys,
        None => {
            let (keys, why) = default_keys(&room, estimate);
            out.note(&format!("--keys defaults to {keys}: {why}"));
            keys
        }
    };
    let existing = previous.as_ref().map_or(0, |p| p.keys).min(keys);
    check_fit(keys - existing, existing, estimate, value_size, &room)?;
    out.note(&format!(
        "populating {LOAD_PREFIX}0..{} on {} ({} {}) with values of {value_size} bytes{}; about {} of server memory for new keys",
        keys - 1,
        target.conn,
        target.server.flavor,
        target.server.version,
        if args.overwrite {
            ", replacing existing keys"
        } else if existing > 0 {
            ", keeping existing keys"
        } else {
            ""
        },
        crate::analyze::pressure::human_bytes((keys - existing) * estimate)
    ));
    let plan = PopulatePlan {
        keys,
        value_size,
        overwrite: args.overwrite,
        seed: args.seed,
        naming,
        write_meta: true,
        indices: None,
    };
    out.start_progress(keys, "keys");
    let started = std::time::Instant::now();
    let mut progress = |done: u64| {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3);
        out.progress(done, format!("{rate:.0} keys/s"));
    };
    let outcome = match &cluster {
        // Each master gets the keys of its slots, on a connection of its own.
        Some(cluster) => {
            let masters = cluster.masters(&target.conn, keys)?;
            populate_cluster(
                &masters,
                &cluster.meta_conn,
                &plan,
                interrupt,
                &mut progress,
            )
        }
        None => populate(&target.conn, &plan, interrupt, &mut progress),
    };
    out.finish_progress();
    let outcome = outcome?;
    let growth = outcome
        .used_memory_after_bytes
        .saturating_sub(outcome.used_memory_before_bytes);
    let per_key = match outcome.measured_bytes_per_key {
        Some(measured) => format!("{measured} bytes per key (estimated {estimate})"),
        None => format!("about {estimate} bytes per key (estimated)"),
    };
    // Interrupted, the keys are those of the population's record (a prefix of the plan's on one
    // server; on a cluster no prefix at all), not the whole range planned.
    let range = match (&outcome.meta, outcome.interrupted) {
        (Some(meta), true) if cluster.is_none() && meta.keys > 0 && meta.keys < keys => {
            format!("{LOAD_PREFIX}0..{} of the {keys} planned", meta.keys - 1)
        }
        (_, true) if cluster.is_some() => format!("part of {LOAD_PREFIX}0..{}", keys - 1),
        _ => format!("{LOAD_PREFIX}0..{}", keys - 1),
    };
    out.line(&format!(
        "populated {range} on {}: {} written, {} kept, {} errors in {:.2} s ({:.1} MiB of values sent, {:.1} MiB/s); server memory +{:.1} MiB, {per_key}",
        target.conn,
        outcome.written,
        outcome.kept,
        outcome.errors,
        outcome.elapsed_s,
        mib(outcome.value_bytes),
        mib(outcome.value_bytes) / outcome.elapsed_s.max(1e-6),
        mib(growth),
    ));
    if let Some(gone) = outcome.previous_gone {
        out.warn(&format!(
            "the previous population was of {} keys, but {} of {} sampled past {LOAD_PREFIX}{} are gone (removed or evicted): it is now described as the {} keys written here",
            gone.previous_keys,
            gone.missing,
            gone.sampled,
            gone.covered - 1,
            gone.covered
        ));
    }
    if let Some(meta) = &outcome.meta {
        out.note(&format!(
            "the server now holds a population of {} keys, values {} bytes; `probe load --url {}` reads it, `probe clean --url {}` removes it",
            meta.keys, meta.value_size, target.conn, target.conn
        ));
    }
    if outcome.interrupted && cluster.is_some() {
        out.error("interrupted: the keys written so far were kept; the population's description was not updated (on a cluster the keys written are not a prefix 0..n)");
        return Ok(EXIT_INTERRUPTED);
    }
    if outcome.interrupted {
        out.error("interrupted: the keys written so far were kept and recorded");
        return Ok(EXIT_INTERRUPTED);
    }
    if outcome.errors > 0 {
        out.error(&format!(
            "{} SET(s) failed; the first error: {}",
            outcome.errors,
            outcome.first_error.as_deref().unwrap_or("unknown")
        ));
        return Ok(EXIT_FAILURE);
    }
    Ok(EXIT_OK)
}
