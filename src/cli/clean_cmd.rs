//! `probe clean`: remove every key under `holprobe:load:`.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Args;

use super::load_cmd::{open_external, parse_count};
use super::{Output, TargetArgs};
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK};
use crate::load::keyspace::{LOAD_PREFIX, META_KEY, read_meta};
use crate::load::populate::clean;

/// Remove every key under holprobe:load: (the load data and its description), with SCAN and
/// UNLINK in batches; nothing else on the server is touched.
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
    #[arg(long, value_name = "N", default_value = "1000")]
    batch: String,
}

/// Runs `probe clean`; returns the exit status.
pub fn run(args: &CleanArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let batch = parse_count("--batch", &args.batch, 1, 100_000)?;
    let target = open_external(&args.target, "clean", true)?;
    let mut control = target.conn.redis_connection()?;
    let meta = read_meta(&mut control)?;
    // The population's keys and its description, holprobe:load:meta.
    let expected = meta.as_ref().map(|m| m.keys + 1);
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut control).unwrap_or(0);
    out.start_progress(expected.unwrap_or(dbsize).max(1), "keys");
    let started = std::time::Instant::now();
    let outcome = clean(&target.conn, batch, interrupt, &mut |removed| {
        out.progress(removed, String::new());
    });
    out.finish_progress();
    let outcome = outcome?;
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
        target.conn,
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
    Ok(EXIT_OK)
}
