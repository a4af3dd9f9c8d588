//! `probe clean`: remove every key under `holprobe:load:`, and undo what runs that died without
//! cleaning up left (their markers, [`crate::session::marker`]).

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;

use super::Output;
use super::deployment::KeyspaceDeployment;
use crate::cli::sections::parse_count;
use crate::cli::sections::target::TargetArgs;
use crate::cli::sections::topology::LoadTopologyArgs;
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK};
use crate::load::keyspace::{LOAD_PREFIX, META_KEY, read_meta};
use crate::load::populate::{CleanOutcome, clean};
use crate::measure::slots::hash_tag_for;
use crate::measure::target::ConnInfo;
use crate::session::marker::reclaim_dead_runs;

/// Remove every key under holprobe:load: (the load data and its description), with SCAN and
/// UNLINK in batches, and undo what runs killed before their cleanup left (their keys and the
/// settings --tune-server changed, found by their markers); nothing else on the server is
/// touched, and a run still alive is left alone.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("url", |a| a.help("The server to remove the load keys from: redis://[user:password@]host:port[/db] or rediss:// (or --host/--port). The password may instead come from REDISCLI_AUTH or --password. Required")),
    // clean never starts a server.
    mut_arg("server_bin", |a| a.hide(true)),
    mut_arg("server_arg", |a| a.hide(true))
)]
pub struct CleanArgs {
    #[command(flatten)]
    target: TargetArgs,

    /// Keys per SCAN (COUNT) and per UNLINK.
    #[arg(
        long,
        value_name = "N",
        default_value = "1000",
        allow_negative_numbers = true
    )]
    batch: String,

    #[command(flatten)]
    topology: LoadTopologyArgs,
}

/// Runs `probe clean`; returns the exit status.
pub fn run(args: &CleanArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let batch = parse_count("--batch", &args.batch, 1, 100_000)?;
    let discovery = args.topology.discovery.to_plan()?;
    let deployment = KeyspaceDeployment::open(&args.target, &discovery, "clean", true, out)?;
    let (target, cluster) = (&deployment.target, &deployment.cluster);
    // On a cluster every master is scanned, one after the other.
    let masters = match &cluster {
        Some(cluster) => cluster
            .topology
            .shards
            .iter()
            .map(|shard| target.conn.for_node(&shard.master.address))
            .collect::<Result<Vec<_>>>()?,
        None => vec![target.conn.clone()],
    };
    // Runs that died before their cleanup: each master's markers (a cluster's under the hash
    // tag of its shard, as the runs wrote them).
    let marker_homes: Vec<(ConnInfo, Option<String>)> = match &cluster {
        Some(cluster) => cluster
            .topology
            .shards
            .iter()
            .map(|shard| {
                Ok((
                    target.conn.for_node(&shard.master.address)?,
                    hash_tag_for(&shard.slots),
                ))
            })
            .collect::<Result<Vec<_>>>()?,
        None => vec![(target.conn.clone(), None)],
    };
    let mut reclaim_failed = false;
    for (conn, tag) in &marker_homes {
        match reclaim_dead_runs(conn, tag.as_deref()) {
            Ok(found) => {
                for one in &found {
                    out.line(one.line());
                }
            }
            Err(err) => {
                reclaim_failed = true;
                out.error(&format!(
                    "could not undo what dead runs left on {conn}: {}",
                    crate::error::one_line(&err)
                ));
            }
        }
    }
    let meta_conn = deployment.meta_conn();
    // The description only sizes the progress bar: a damaged one (another type, garbage) is
    // removed with the rest, not a reason to remove nothing (the hostile trial).
    let meta = match read_meta(&mut meta_conn.redis_connection()?) {
        Ok(meta) => meta,
        Err(err) => {
            out.warn(&format!(
                "{}: removed with the rest",
                crate::error::one_line(&err)
            ));
            None
        }
    };
    // The population's keys and its description, holprobe:load:meta.
    let expected = meta.as_ref().map(|m| m.keys + 1);
    let mut dbsize = 0u64;
    for conn in &masters {
        dbsize += redis::cmd("DBSIZE")
            .query::<u64>(&mut conn.redis_connection()?)
            .unwrap_or(0);
    }
    out.start_progress(expected.unwrap_or(dbsize).max(1), "keys");
    let started = std::time::Instant::now();
    let mut outcome = CleanOutcome {
        removed: 0,
        passes: 0,
        remaining: 0,
        interrupted: false,
    };
    for conn in &masters {
        let before = outcome.removed;
        let one = clean(conn, batch, cluster.is_some(), interrupt, &mut |removed| {
            out.progress(before + removed, String::new());
        });
        let one = match one {
            Ok(one) => one,
            Err(err) => {
                out.finish_progress();
                return Err(err.context(format!("cleaning {conn}")));
            }
        };
        outcome.removed += one.removed;
        outcome.passes = outcome.passes.max(one.passes);
        outcome.remaining += one.remaining;
        outcome.interrupted |= one.interrupted;
        if one.interrupted {
            break;
        }
    }
    out.finish_progress();
    out.line(&format!(
        "removed {} keys under {LOAD_PREFIX}{} from {} in {:.2} s ({} SCAN pass{}); {}",
        outcome.removed,
        match &meta {
            Some(m) => format!(
                " (a population of {} and its description, {META_KEY})",
                m.keys
            ),
            None => String::new(),
        },
        match &cluster {
            Some(c) => format!(
                "the {} masters of the cluster of {}",
                c.topology.shards.len(),
                target.conn
            ),
            None => target.conn.to_string(),
        },
        started.elapsed().as_secs_f64(),
        outcome.passes,
        if outcome.passes == 1 { "" } else { "es" },
        if outcome.remaining == 0 {
            "none left".to_string()
        } else {
            format!("{} still there", outcome.remaining)
        }
    ));
    if outcome.interrupted {
        out.error("interrupted before every key was removed");
        return Ok(EXIT_INTERRUPTED);
    }
    if outcome.remaining > 0 {
        out.error(&format!(
            "{} keys under {LOAD_PREFIX} remain: something keeps writing them",
            outcome.remaining
        ));
        return Ok(EXIT_FAILURE);
    }
    if reclaim_failed {
        return Ok(EXIT_FAILURE);
    }
    Ok(EXIT_OK)
}
