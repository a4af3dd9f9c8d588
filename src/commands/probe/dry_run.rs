//! The main job's `--dry-run`: the plan, the memory it needs and the commands it would send,
//! without starting, connecting to or sending anything.

use anyhow::Result;

use crate::measure::target::{ServerBinary, TargetSpec};
use crate::run::{self, RunOptions};

/// `target: ...` of a dry run: the server named (never its password), or the binary that would
/// be started (located, never run).
pub(crate) fn dry_run_target(spec: &TargetSpec) -> Result<String> {
    Ok(match spec {
        TargetSpec::External(conn) => format!(
            "target: {conn} (password: {})",
            if conn.password.is_some() {
                "given, not shown"
            } else {
                "none"
            }
        ),
        // Located, not run: not even `--version` (a dry run starts nothing).
        TargetSpec::Embedded { binary, .. } => format!(
            "target: start {} on a free loopback port, persistence off, in a temporary directory; stopped at the end",
            ServerBinary::locate(binary.as_deref())?.display(),
        ),
    })
}

/// The plan of a run, without starting, connecting to or sending anything.
pub(super) fn dry_run_plan(options: &RunOptions, spec: &TargetSpec) -> Result<Vec<String>> {
    let mut lines = vec!["dry run: nothing is started, connected to or sent".to_string()];
    lines.push(dry_run_target(spec)?);
    let every_us = options.aggregate_interval_us();
    lines.push(format!(
        "probes: {} thread(s) x {}/s {} on their own connections (together every {every_us:.0} us), for the whole run",
        options.probe_threads,
        options.probe_rate,
        options.probe_cmd.name().to_uppercase()
    ));
    let run_prefix = format!("{}:<run-id>:", run::KEY_NAMESPACE);
    lines.push(format!(
        "before the run: INFO server, INFO replication, CONFIG GET maxmemory / proto-max-bulk-len / save / appendonly / client-query-buffer-limit / lazyfree-lazy-* / io-threads, EXISTS on the run's keys{}",
        if options.probe_cmd == crate::record::ProbeCmd::Get {
            format!(", SET {run_prefix}probe <20 bytes>")
        } else {
            String::new()
        }
    ));
    let embedded = matches!(spec, TargetSpec::Embedded { .. });
    match &options.writer {
        Some(plan) => {
            let steps = plan.steps(&run_prefix);
            // What the session resets before each write (src/session/probes.rs, ViewSetup).
            let resets = if embedded {
                ", CONFIG RESETSTAT and LATENCY RESET"
            } else {
                ""
            };
            lines.push(format!(
                "writes: {} events, each followed by {:?} of quiet probing (at least {:.1} s); around each, the server-view reads (before: INFO memory, SLOWLOG GET 1, INFO debug, LATENCY LATEST{resets}; after: SLOWLOG GET 256, COMMANDLOG GET 16 large-request, LATENCY LATEST, INFO debug, INFO memory):",
                steps.len(),
                plan.gap,
                plan.minimum_duration().as_secs_f64()
            ));
            lines.extend(plan.step_lines(&steps));
            // A collection's client holds the bytes its elements are cut from and one build
            // command (a batch of elements: 40 MB at --element-size 2M, shown as 64K before).
            let largest = if plan.is_string() {
                plan.value_buffer_bytes()
            } else {
                // A command holds at most the batch, and never more elements than the value has.
                let command = plan
                    .shapes()
                    .iter()
                    .map(|s| {
                        plan.batch_elements.min(s.elements).saturating_mul(
                            s.element_bytes * s.value_kind().bytes_per_element_factor(),
                        )
                    })
                    .max()
                    .unwrap_or(0);
                plan.value_buffer_bytes() + command
            };
            let server_peak = crate::measure::writer::plan_server_peak(plan);
            let expire = plan.has_op(crate::record::WriteOp::Expire);
            let evict = plan.has_op(crate::record::WriteOp::Evict);
            let settings = if evict {
                "CONFIG SET slowlog-log-slower-than 0, slowlog-max-len 16384 (if lower), latency-monitor-threshold 1, notify-keyspace-events +Exe (for the expiries and evictions, and to name the keys a stall removed); around each evict op maxmemory and maxmemory-policy (put back after it)"
            } else if expire {
                "CONFIG SET slowlog-log-slower-than 0, slowlog-max-len 16384 (if lower), latency-monitor-threshold 1, notify-keyspace-events +Exe (for the expiries, and to name the keys a stall removed)"
            } else {
                "CONFIG SET slowlog-log-slower-than 0, slowlog-max-len 16384 (if lower), latency-monitor-threshold 1, notify-keyspace-events +Exe (to name the keys a stall removed)"
            };
            lines.push(if embedded || options.tune_server {
                format!("server settings: {settings}, each restored at the end")
            } else {
                format!(
                    "server settings: none changed (--tune-server would {settings}, restoring them at the end)"
                )
            });
            lines.push(format!(
                "memory: client about {} ({}); server up to {} ({}){}",
                crate::analyze::pressure::human_bytes(largest),
                if plan.is_string() {
                    "one buffer of the largest value, sliced for every write"
                } else {
                    "the random bytes the elements are cut from, and one build command at a time"
                },
                crate::analyze::pressure::human_bytes(server_peak),
                if plan.is_string() {
                    "a SET holds its value twice while it executes; the allocator may round each up by 25%"
                } else {
                    "the value and, while a build command executes, its request"
                },
                if plan.keep {
                    " (--keep holds every value until the end)"
                } else if plan.overwrite {
                    " (an overwrite holds the old and the new value for a moment)"
                } else {
                    " (one value at a time)"
                }
            ));
            // A server this host starts cannot hold more than the host has: say so now, as the
            // run's memory check would refuse it.
            let host = crate::measure::hostmem::HostMemorySampler::new().sample();
            if embedded && host.total_bytes > 0 && server_peak > host.total_bytes {
                lines.push(format!(
                    "warning: the server would need up to {}, more than this host's memory ({}): the run would refuse the writes that do not fit (--force-memory sends them anyway)",
                    crate::analyze::pressure::human_bytes(server_peak),
                    crate::analyze::pressure::human_bytes(host.total_bytes)
                ));
            }
        }
        None => {
            lines.push(match options.duration {
                Some(d) => format!("observe: no writes; probing for {d:?}"),
                None => "observe: no writes; probing until Ctrl-C or SIGTERM".to_string(),
            });
            let tuned = matches!(spec, TargetSpec::Embedded { .. }) || options.tune_server;
            let settings = format!(
                "CONFIG SET slowlog-log-slower-than {} (if higher), slowlog-max-len 128 (if lower), latency-monitor-threshold {} (if higher or off) and notify-keyspace-events +Exe (to name the keys a stall removed)",
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
        "the run's own keys while it goes: a marker ({run_prefix}marker) and a lease ({run_prefix}lease, PX 10 s, renewed) with the run's id in the set {}:markers, so that a later run can clean up after one that died",
        run::KEY_NAMESPACE
    ));
    lines.push(format!(
        "after the run: UNLINK (DEL where the server has none) of any key left under {run_prefix}, and the run's id taken out of {}:markers",
        run::KEY_NAMESPACE
    ));
    Ok(lines)
}
