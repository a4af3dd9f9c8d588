//! `probe load --dry-run`: the plan of a load run, as the main job's `--dry-run` gives its own.

use anyhow::Result;

use super::EMBEDDED_DEFAULT_KEYS_CAP;
use super::args::LoadPlan;
use crate::load::keyspace::{LOAD_PREFIX, META_KEY, ValueSize};
use crate::measure::target::TargetSpec;

/// The plan of a load run, as the main job's `--dry-run` gives its own: nothing is started,
/// connected to or sent.
pub(super) fn dry_run_plan(plan: &LoadPlan) -> Result<Vec<String>> {
    let options = &plan.run;
    let mut lines = vec!["dry run: nothing is started, connected to or sent".to_string()];
    for spec in &plan.specs {
        lines.push(crate::commands::probe::dry_run_target(spec)?);
    }
    let embedded = plan
        .specs
        .iter()
        .any(|s| matches!(s, TargetSpec::Embedded { .. }));
    lines.push(format!(
        "before the load, on each server: INFO server, INFO replication, CONFIG GET maxmemory / proto-max-bulk-len / save / appendonly, HGETALL {META_KEY}{}",
        if embedded {
            format!(
                "; the started server is first populated with {} keys {LOAD_PREFIX}0.. of {} bytes (INFO memory to check they fit, then SETs in pipelines)",
                plan.keys.map_or_else(
                    || format!("as populate's default (at most {EMBEDDED_DEFAULT_KEYS_CAP})"),
                    |k| k.to_string()
                ),
                plan.value_size.unwrap_or(ValueSize::SEED)
            )
        } else {
            String::new()
        }
    ));
    let mode = match options.rate {
        Some(rate) => format!("open loop at {rate} requests/s in total"),
        None => "closed loop".to_string(),
    };
    let threads = options.threads.map_or_else(
        || "generator threads by the cores".to_string(),
        |t| format!("{t} generator thread(s)"),
    );
    let length = match options.duration {
        Some(d) => format!("for {d:?}"),
        None => "until the writer is done".to_string(),
    };
    let keys = plan.keys.map_or_else(
        || "the whole population".to_string(),
        |k| format!("keys 0..{}", k - 1),
    );
    let set_size = plan.value_size.map_or_else(
        || "the population's sizes".to_string(),
        |v| format!("{v} bytes"),
    );
    lines.push(format!(
        "load: {} clients over {} server(s), {threads}, {mode}, pipeline {}, {length}; requests SET:GET {}:{}: GET {LOAD_PREFIX}<i>{} over {keys}, uniformly",
        options.clients,
        plan.specs.len(),
        options.pipeline,
        options.set_weight,
        options.get_weight,
        if options.set_weight > 0 {
            format!(", SET {LOAD_PREFIX}<i> <random value of {set_size}>")
        } else {
            String::new()
        }
    ));
    if let Some(plan) = &options.writer {
        let key_prefix = format!("{}:<run-id>:", crate::run::KEY_NAMESPACE);
        let steps = plan.steps(&key_prefix);
        lines.push(format!(
            "writer on the first server: {} events, each with {:?} of load before and after:",
            steps.len(),
            plan.gap
        ));
        lines.extend(plan.step_lines(&steps));
        lines.push(format!(
            "after the load: UNLINK (DEL where the server has none) of any key left under {key_prefix}"
        ));
    }
    if let Some(dir) = &options.out {
        lines.push(format!(
            "exports: load_timeline.csv, load_latency.hgrm, load_writes.csv and run.json in {}",
            dir.display()
        ));
    }
    Ok(lines)
}
