//! What the writer checks before anything is sent: the server's limits (`proto-max-bulk-len`,
//! `client-query-buffer-limit`), the commands the plan needs, and the memory the plan takes on
//! the server and on this host.

use anyhow::Result;

use super::WriterPlan;
use crate::analyze::pressure::{ServerRoom, check_host, check_maxmemory};
use crate::measure::hostmem::HostMemorySampler;
use crate::measure::resp::{RawConn, Reply};
use crate::measure::target::{ConnInfo, info_field};
use crate::record::WriteOp;
use crate::units::format_size;

/// What the server's query buffer may hold besides one argument: the rest of one read (16 KiB)
/// and the protocol's headers, with room to spare.
const QUERY_BUFFER_SLACK: u64 = 64 * 1024;

/// Refuses, before anything is sent, what the server would refuse after it was sent: a string
/// larger than its `proto-max-bulk-len` (it would answer the SET with an error after the whole
/// value went out), a collection's element past that limit, or one past its
/// `client-query-buffer-limit` (it would close the connection); each error says how to change
/// the flag or raise the limit.
pub fn check_bulk_len(
    plan: &WriterPlan,
    server: &crate::measure::target::ServerFacts,
) -> Result<(), crate::error::UsageError> {
    use crate::error::UsageError;
    let raise = |setting: &str, to: &str| {
        if server.embedded {
            format!("--server-arg \"{setting} {to}\"")
        } else {
            format!("CONFIG SET {setting} on that server")
        }
    };
    if let Some(limit) = server.proto_max_bulk_len_bytes {
        if plan.is_string() {
            if let Some(&too_big) = plan.sizes.iter().find(|&&s| s > limit) {
                return Err(UsageError::invalid(
                    "--writer-sizes",
                    format_size(too_big),
                    format!(
                        "larger than the server's proto-max-bulk-len ({}): raise it with {}",
                        format_size(limit),
                        raise("proto-max-bulk-len", &bulk_len_for(too_big))
                    ),
                ));
            }
        } else if plan.element_bytes > limit {
            return Err(UsageError::invalid(
                "--element-size",
                format_size(plan.element_bytes),
                format!(
                    "larger than the server's proto-max-bulk-len ({}): choose smaller elements, or raise it with {}",
                    format_size(limit),
                    raise("proto-max-bulk-len", &bulk_len_for(plan.element_bytes))
                ),
            ));
        }
    }
    // The server holds one argument at a time in its query buffer (a large one whole, in a
    // buffer of its own; the parsed ones move to the command's arguments), so its
    // `client-query-buffer-limit` bounds the largest argument, not a command's or a pipeline's
    // total: on Redis 6.2, 7.0, 8.2 and Valkey 9.1 with the limit at 1 MiB, one HSET of 1000
    // fields and values of 1 KiB each (2 MiB) and 100 pipelined XADDs of 100 KiB were taken, a
    // single 2 MiB argument closed the connection. Room is left for one read of what follows.
    if let (Some(limit), false) = (server.client_query_buffer_limit_bytes, plan.is_string()) {
        let one = plan.element_bytes.saturating_add(QUERY_BUFFER_SLACK);
        if one > limit {
            return Err(UsageError::invalid(
                "--element-size",
                format_size(plan.element_bytes),
                format!(
                    "each {} element is sent as an argument of {} bytes, and the server's client-query-buffer-limit ({}) closes the connection of a client whose query buffer passes it (one argument at a time, with about {} of what follows): choose smaller elements, or raise the limit with {}",
                    plan.value_type,
                    plan.element_bytes,
                    format_size(limit),
                    format_size(QUERY_BUFFER_SLACK),
                    raise("client-query-buffer-limit", "2gb")
                ),
            ));
        }
    }
    Ok(())
}

/// A `proto-max-bulk-len` that takes `bytes` (1gb at least; `99999999G` was told 1gb): the next
/// power of two, in the server's units.
fn bulk_len_for(bytes: u64) -> String {
    let needed = bytes
        .max(1 << 30)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    if needed.is_multiple_of(1 << 30) {
        format!("{}gb", needed >> 30)
    } else {
        needed.to_string()
    }
}

/// Refuses an `evict` op on a server the tool did not start (`embedded` false; `address`, as
/// the message names it): the op lowers `maxmemory` until the server evicts a key with a TTL,
/// and anywhere else that key could be someone's. The command line asks before anything
/// starts; the writer again before its first command, for a library caller.
pub fn check_evict(
    plan: &WriterPlan,
    embedded: bool,
    address: &str,
) -> Result<(), crate::error::UsageError> {
    if !plan.has_op(WriteOp::Evict) || embedded {
        return Ok(());
    }
    Err(crate::error::UsageError::invalid(
        "--ops",
        plan.chosen_ops_text().unwrap_or_default(),
        format!(
            "evict lowers maxmemory until the server evicts a key with a TTL, which on {address} (a server the tool did not start) could be another client's key: run it on a server the tool starts (no --url; --server-bin to choose the binary)"
        ),
    ))
}

/// Refuses an `expire` on someone else's server where the run cannot tell its key's expiry
/// from another's: without keyspace notifications (off, and no `--tune-server` to turn them on
/// for the run) the writer waits for INFO stats' `expired_keys` to grow, which any other key
/// with a TTL moves too (its window would close on someone else's expiry). A server with no
/// other key with a TTL in the run's database, or whose notifications are on, passes; one that
/// refuses CONFIG or INFO is not refused here.
pub fn check_expire_watch(
    plan: &WriterPlan,
    conn: &ConnInfo,
    embedded: bool,
    tune_server: bool,
) -> Result<()> {
    if !plan.has_op(WriteOp::Expire) || embedded || tune_server {
        return Ok(());
    }
    let mut control = RawConn::connect(conn)?;
    if let Ok(Reply::Array(Some(pair))) =
        control.command(&[b"CONFIG", b"GET", b"notify-keyspace-events"])
        && let Some(Reply::Bulk(Some(flags))) = pair.get(1)
        && crate::measure::keyspace::notifications_on(&String::from_utf8_lossy(flags))
    {
        return Ok(());
    }
    let Ok(Reply::Bulk(Some(text))) = control.command(&[b"INFO", b"keyspace"]) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&text);
    // The count of expired keys is the server's, over every database: a TTL in db 0 moves it
    // for a run in db 3 (the hostile trial: an expiry read as done in 0.3 ms).
    let by_db = expiring_keys_by_db(&text);
    let expires: u64 = by_db.iter().map(|(_, n)| n).sum();
    if expires == 0 {
        return Ok(());
    }
    let dbs: Vec<String> = by_db
        .iter()
        .map(|(db, n)| format!("{n} in db {db}"))
        .collect();
    Err(crate::error::UsageError::invalid(
        "--ops",
        plan.chosen_ops_text().unwrap_or_default(),
        format!(
            "expire waits for the server's count of expired keys (over every database), which the other keys with a TTL on {} move too ({}): pass --tune-server (keyspace notifications name the key; the setting is restored afterwards)",
            conn.address(),
            dbs.join(", ")
        ),
    )
    .into())
}

/// `INFO keyspace`'s keys with a TTL, by database (those with none left out).
fn expiring_keys_by_db(info: &str) -> Vec<(u32, u64)> {
    info.lines()
        .filter_map(|line| {
            let (db, fields) = line.trim().split_once(':')?;
            let db = db.strip_prefix("db")?.parse::<u32>().ok()?;
            let n = fields
                .split(',')
                .find_map(|f| f.strip_prefix("expires="))?
                .parse::<u64>()
                .ok()?;
            (n > 0).then_some((db, n))
        })
        .collect()
}

/// Refuses, before anything is sent, a plan whose commands the server does not have (`COMMAND
/// INFO` answers nil for an unknown or renamed command): the kind's build and read commands
/// (`--type`), and each op's (`--ops`). A server that refuses `COMMAND` itself only loses this
/// check.
pub fn check_commands(plan: &WriterPlan, conn: &ConnInfo) -> Result<()> {
    use crate::error::UsageError;
    let kind = plan
        .shapes()
        .first()
        .map(|s| s.value_kind())
        .unwrap_or(&crate::workload::kinds::string::STRING);
    let mut wanted: Vec<(&'static str, &'static str, String)> = Vec::new();
    let mut want = |flag: &'static str, command: &'static str, what: String| {
        if !wanted.iter().any(|(_, c, _)| *c == command) {
            wanted.push((flag, command, what));
        }
    };
    want(
        "--type",
        kind.build_command(),
        format!("to make a {}", kind.name()),
    );
    // Every op the plan makes, the defaults too (a string's DEL without --ops: a server with
    // DEL renamed away was written to and then kept the value; the hostile trial).
    let mut ops: Vec<WriteOp> = Vec::new();
    for step in plan.steps("") {
        if !ops.contains(&step.op) {
            ops.push(step.op);
        }
    }
    let ops_named = ops.iter().map(|op| op.name()).collect::<Vec<_>>().join(",");
    for &op in &ops {
        let command = match op {
            WriteOp::Read => kind.read_command().0,
            WriteOp::Delete => "DEL",
            WriteOp::Unlink => "UNLINK",
            WriteOp::Expire | WriteOp::Evict => "PEXPIRE",
            WriteOp::Overwrite if !plan.is_string() => "RENAME",
            _ => continue,
        };
        want("--ops", command, format!("for its {} op", op.name()));
    }
    // An eviction is made by lowering maxmemory (the hostile trial's server with CONFIG
    // renamed away built its value, then failed the evict with the raw error).
    if ops.contains(&WriteOp::Evict) {
        want(
            "--ops",
            "CONFIG",
            "for its evict op (CONFIG SET maxmemory)".into(),
        );
    }
    let Ok(mut raw) = RawConn::connect(conn) else {
        return Ok(());
    };
    let mut args: Vec<&[u8]> = vec![b"COMMAND", b"INFO"];
    args.extend(wanted.iter().map(|(_, c, _)| c.as_bytes()));
    let Ok(Reply::Array(Some(infos))) = raw.command(&args) else {
        return Ok(());
    };
    for ((flag, command, what), info) in wanted.iter().zip(infos) {
        if matches!(info, Reply::Array(None) | Reply::Bulk(None)) {
            return Err(UsageError::invalid(
                flag,
                if *flag == "--type" {
                    plan.value_type.clone()
                } else if plan.ops.is_empty() {
                    format!("{ops_named} (the default)")
                } else {
                    ops_named.clone()
                },
                format!(
                    "the server has no {command} command (COMMAND INFO {command} is empty: too old, or renamed), which the plan needs {what}"
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// Checks, before anything is sent, that the whole plan fits: under the server's maxmemory
/// (INFO memory) and, on this host, in the memory available without swapping (the tool's own
/// value buffer, plus the server's copies when the server runs here). The error says how much
/// memory the plan needs. `--force-memory` skips it.
pub fn check_plan_memory(plan: &WriterPlan, target: &crate::measure::target::Target) -> Result<()> {
    use crate::error::UsageError;

    let server_peak = plan_server_peak(plan);
    let buffer = plan.value_buffer_bytes();
    let (flag, sizes): (&'static str, Vec<String>) = if plan.elements.is_empty() {
        (
            "--writer-sizes",
            plan.sizes.iter().map(|&s| format_size(s)).collect(),
        )
    } else {
        (
            "--elements",
            plan.elements.iter().map(|n| n.to_string()).collect(),
        )
    };
    let refuse = |reason: String| -> anyhow::Error {
        UsageError::invalid(
            flag,
            sizes.join(","),
            format!("{reason}; choose smaller sizes, or pass --force-memory to run anyway"),
        )
        .into()
    };
    // A server that refuses INFO (renamed on some managed services) only loses this check.
    let info: String = target
        .conn
        .redis_connection()
        .ok()
        .and_then(|mut control| redis::cmd("INFO").arg("memory").query(&mut control).ok())
        .unwrap_or_default();
    let number = |name: &str| info_field(&info, name).and_then(|v| v.parse::<u64>().ok());
    if let Some(used_bytes) = number("used_memory") {
        let room = ServerRoom {
            used_bytes,
            maxmemory_bytes: number("maxmemory").unwrap_or(0),
            policy: info_field(&info, "maxmemory_policy").map(str::to_string),
        };
        let what = if plan.keep {
            "the plan (--keep holds every value until the end)".to_string()
        } else {
            format!("the largest value ({})", format_size(plan.max_size()))
        };
        check_maxmemory(server_peak, &room, &what).map_err(refuse)?;
    }
    let host = HostMemorySampler::new().sample();
    let (need, what) = if target.server.local {
        (
            buffer.saturating_add(server_peak),
            format!(
                "the run (the tool's {} value buffer and the server's copy{} on this host)",
                format_size(buffer),
                if plan.keep { "ies of every value" } else { "" }
            ),
        )
    } else {
        (
            buffer,
            format!("the tool's {} value buffer", format_size(buffer)),
        )
    };
    check_host(need, host.room(), &what).map_err(refuse)
}

/// The most the server holds at once for the plan: its values as the server stores them (a
/// collection's elements cost more than their payload), twice the largest while an overwrite
/// holds the old and the new one or a read's reply holds a copy in the output buffer.
pub fn plan_server_peak(plan: &WriterPlan) -> u64 {
    let held: Vec<u64> = plan
        .shapes()
        .iter()
        .map(|shape| shape.server_bytes_estimate())
        .collect();
    let doubled = plan.has_op(WriteOp::Overwrite) || plan.has_op(WriteOp::Read);
    crate::analyze::pressure::plan_server_peak_bytes(&held, plan.repeat, doubled, plan.keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_a_ttl_are_counted_in_every_database() {
        let info = "# Keyspace\r\ndb0:keys=8000,expires=8000,avg_ttl=9000\r\ndb3:keys=2,expires=0,avg_ttl=0\r\ndb5:keys=9,expires=4,avg_ttl=1\r\n";
        assert_eq!(expiring_keys_by_db(info), vec![(0, 8000), (5, 4)]);
        assert!(expiring_keys_by_db("# Keyspace\r\n").is_empty());
    }
}

#[cfg(test)]
mod bulk_len_tests {
    #[test]
    fn the_suggested_bulk_len_takes_the_value() {
        assert_eq!(super::bulk_len_for(600 << 20), "1gb");
        assert_eq!(super::bulk_len_for(3 << 30), "4gb");
        assert_eq!(super::bulk_len_for(99_999_999 << 30), "134217728gb");
    }
}
