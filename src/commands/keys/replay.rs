//! `probe keys --replay N`: the scan's N worst keys checked without touching the user's data.
//! Each key's shape (type, element count, element size; never its contents) is built on a
//! server the tool starts from `--server-bin`, with the scanned server's `lazyfree-lazy-*` and
//! encoding settings copied onto it, and its DEL, UNLINK, expiry, eviction and whole read
//! measured under the probes by the main job's writer (one run per key, its
//! `--type/--elements/--element-size/--ops` plan). Predicted and measured go side by side on
//! the screen and in replay.csv; the rows, the shapes and the table are pure, in
//! [`crate::keys::replay`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};

use super::super::Output;
use super::super::deployment::{Deployment, describe_target};
use crate::cli::sections::workload::WorkloadArgs;
use crate::error::UsageError;
use crate::keys::replay::{ReplayRow, replay_shape, unmeasured_row};
use crate::keys::report::KeyRow;
use crate::measure::local_cluster::LocalTopologySpec;
use crate::measure::target::{ConnInfo, TargetSpec};
use crate::output::export::{REPLAY_CSV, RowAppender, RunStatus, columns, prepare_out_dir};
use crate::record::WriteOp;
use crate::run::{self, Notice, RunOptions};
use crate::workload::ValueKind;
use crate::workload::lazyfree::LazyfreeSettings;

/// A collection's ops: each way `--replay` measures it, the value built again before each.
pub const REPLAY_OPS: &str = "build,read,delete,build,unlink,build,expire,build,evict";
/// A string's.
pub const REPLAY_STRING_OPS: &str = "set,read,delete,set,unlink,set,expire,set,evict";
/// The quiet gap around each op.
pub const REPLAY_GAP: &str = "200ms";
/// The most keys `--replay` takes: each is a run of its own (seconds for a big one).
pub const MAX_REPLAY: u64 = 100;

/// The settings of the scanned server copied onto the replay server: which thread frees a
/// value (what the predictions applied), and where a collection changes encoding.
const COPIED_SETTINGS: [&str; 7] = [
    "lazyfree-lazy-*",
    "hash-max-*",
    "set-max-*",
    "zset-max-*",
    "list-max-*",
    "list-compress-depth",
    "stream-node-max-*",
];

/// `--replay`'s part of the plan.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    /// How many of the worst keys.
    pub keys: usize,
    /// The server the shapes are built on (`--server-bin`, `--server-arg`).
    pub server: TargetSpec,
}

/// Checks `--replay N` with the `--server-bin` it needs (`server`: the embedded spec of the
/// target flags, `None` when no `--server-bin` was given).
pub fn replay_plan(text: &str, server: Option<TargetSpec>) -> Result<ReplayPlan, UsageError> {
    let keys = crate::cli::sections::parse_count("--replay", text, 1, MAX_REPLAY)? as usize;
    let server = server.ok_or_else(|| {
        UsageError::Conflict(
            "--replay needs --server-bin PATH: the keys' shapes are built on a server the tool starts, never on yours".into(),
        )
    })?;
    if let TargetSpec::Embedded {
        binary: Some(binary),
        ..
    } = &server
        && !binary.is_file()
    {
        return Err(UsageError::invalid(
            "--server-bin",
            binary.display(),
            if binary.is_dir() {
                "a directory, not a server binary"
            } else {
                "no such file"
            },
        ));
    }
    Ok(ReplayPlan { keys, server })
}

/// The most elements a calibration value holds: enough to be in the big encoding with its
/// per-element bookkeeping, few enough to be built in a moment.
const CALIBRATION_ELEMENTS: u64 = 100_000;

/// The elements of a calibration value for a key of `elements`: the count halved (rounding up)
/// until it is at most [`CALIBRATION_ELEMENTS`]. A hash table's slots are a power of two, and a
/// table that has just doubled holds both its tables until as many adds (or lookups) have
/// moved its entries: a value of the same count over a power of two has the same slots per
/// element, and, built by adds as the key most likely was, the same share of its rehash done.
/// (100k calibration elements against a 1M-member set: 15.7 bytes of slots per element against
/// 8.4, which read its 16-byte members as 9 bytes: the hostile trial.)
fn calibration_count(elements: u64) -> u64 {
    let mut count = elements;
    while count > CALIBRATION_ELEMENTS {
        count = count.div_ceil(2);
    }
    count
}
/// The element sizes of the two calibration values.
const CALIBRATION_BYTES: [u64; 2] = [16, 64];

/// `MEMORY USAGE` per element of a `kind` of `count` elements of `element_bytes`, built on the
/// replay server under `key` (and removed), counted whole (`SAMPLES 0`): the figure the scan's
/// 5-sample estimate is an estimate of. The samples are a sorted set's first 5 skiplist nodes,
/// each of a random height, so a 5-sample calibration added its own few bytes of scatter to
/// the key's (the tool's server, never the user's, is counted whole); with its encoding.
fn memory_per_element(
    conn: &mut redis::Connection,
    kind: &'static dyn ValueKind,
    key: &str,
    count: u64,
    element_bytes: u64,
) -> Option<(f64, String)> {
    use redis::ConnectionLike;
    let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(conn);
    let fill: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut first = 0;
    while first < count {
        let batch = (count - first).min(crate::workload::DEFAULT_BATCH_ELEMENTS);
        let mut bytes = Vec::new();
        let commands = kind.build_batch(
            key.as_bytes(),
            first,
            batch,
            element_bytes as usize,
            &fill,
            &mut bytes,
        );
        conn.req_packed_commands(&bytes, 0, commands).ok()?;
        first += batch;
    }
    let memory: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query(conn)
        .ok();
    let encoding: Option<String> = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query(conn)
        .ok();
    let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(conn);
    Some((memory? as f64 / count as f64, encoding?))
}

/// A collection's element size measured rather than assumed: two values of its type built on
/// the replay server (of [`calibration_count`] elements, 16 and 64 bytes each), their memory
/// per element, and the size at which the scanned key's memory per element falls on the line
/// between them. `None` (and the estimate of [`replay_shape`] stands) for a string, without
/// the key's memory, or where a calibration value is in another encoding than the key.
pub fn calibrated_element_bytes(
    conn: &mut redis::Connection,
    key_prefix: &str,
    row: &KeyRow,
    kind: &'static dyn ValueKind,
    elements: u64,
) -> Option<u64> {
    if kind.name() == "string" {
        return None;
    }
    let memory = row.memory_bytes? as f64 / elements as f64;
    let count = calibration_count(elements);
    let key = format!("{key_prefix}calibration");
    let mut line = [(0u64, 0.0f64); 2];
    for (point, bytes) in line.iter_mut().zip(CALIBRATION_BYTES) {
        let (per_element, encoding) = memory_per_element(conn, kind, &key, count, bytes)?;
        if encoding != row.encoding {
            return None;
        }
        *point = (bytes, per_element);
    }
    let bytes = crate::keys::replay::element_bytes_from_calibration(memory, line)?;
    kind.check_elements(elements, bytes).ok().map(|()| bytes)
}

/// The writer's plan of one key's replay, through the main job's own checks.
fn writer_plan(
    kind: &'static dyn ValueKind,
    elements: u64,
    element_bytes: u64,
) -> Result<crate::measure::writer::WriterPlan, String> {
    let string = kind.name() == "string";
    let workload = WorkloadArgs {
        writer_sizes: string.then(|| element_bytes.to_string()),
        repeat: "1".into(),
        gap: REPLAY_GAP.into(),
        overwrite: false,
        keep: false,
        same_connection: false,
        seed: crate::run::DEFAULT_SEED,
        value_type: Some(kind.name().to_string()),
        elements: (!string).then(|| elements.to_string()),
        element_size: (!string).then(|| element_bytes.to_string()),
        batch: None,
        ops: Some(
            if string {
                REPLAY_STRING_OPS
            } else {
                REPLAY_OPS
            }
            .to_string(),
        ),
    };
    workload
        .to_plan()
        .map_err(|err| err.to_string())?
        .ok_or_else(|| "nothing to build".to_string())
}

/// The scanned server's settings of [`COPIED_SETTINGS`] (those CONFIG tells).
pub fn copied_settings(conn: &ConnInfo) -> Vec<(String, String)> {
    let Ok(mut c) = conn.redis_connection() else {
        return Vec::new();
    };
    let mut pairs = Vec::new();
    for pattern in COPIED_SETTINGS {
        let flat: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(pattern)
            .query(&mut c)
            .unwrap_or_default();
        for pair in flat.chunks(2) {
            if let [name, value] = pair
                && !pairs.iter().any(|(n, _): &(String, String)| n == name)
            {
                pairs.push((name.clone(), value.clone()));
            }
        }
    }
    pairs
}

/// The row of a key whose replay measured `summaries` (its run's writes).
fn measured_row(
    key: &KeyRow,
    shape: (u64, u64),
    report: &crate::run::RunReport,
    probe_interval_ms: f64,
) -> ReplayRow {
    let summary = |op: WriteOp| report.analysis.writes.iter().find(|w| w.op == op);
    let mut under = Vec::new();
    let mut errors = Vec::new();
    let mut measured = |op: WriteOp| -> Option<f64> {
        let row = summary(op)?;
        if !row.ok {
            let why = report
                .writes
                .iter()
                .find(|w| w.seq == row.seq)
                .and_then(|w| w.error.clone())
                .unwrap_or_else(|| "failed".into());
            errors.push(format!("{}: {why}", op.name()));
            return None;
        }
        if row.hol_delay_ms.is_none() {
            under.push(op.name());
        }
        row.hol_delay_ms
    };
    let delete = measured(WriteOp::Delete);
    let unlink = measured(WriteOp::Unlink);
    let expire = measured(WriteOp::Expire);
    let evict = measured(WriteOp::Evict);
    let read = measured(WriteOp::Read);
    if report.status != RunStatus::Complete {
        errors.push(
            report
                .status_reason
                .clone()
                .unwrap_or_else(|| "the run stopped early".into()),
        );
    }
    let build = if key.kind == "string" {
        WriteOp::Set
    } else {
        WriteOp::Build
    };
    ReplayRow {
        built_encoding: summary(build).and_then(|w| w.encoding.clone()),
        delete_measured_ms: delete,
        unlink_measured_ms: unlink,
        expire_measured_ms: expire,
        expire_freed_by: summary(WriteOp::Expire)
            .and_then(|w| w.freed_by)
            .map(|t| t.name().to_string()),
        evict_measured_ms: evict,
        read_measured_ms: read,
        under_one_interval: under.join(";"),
        run_id: Some(report.run_id.clone()),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
        ..unmeasured_row(key, shape, probe_interval_ms, None)
    }
}

/// Replays `keys` (the scan's worst, worst first) on a server started from the plan's
/// `--server-bin`, with `settings` (the scanned server's) copied onto it. `out_dir`: the scan's
/// `--out`, where replay.csv and each key's run (`replay-<rank>/`) go. Stops at Ctrl-C with the
/// rows measured so far. Returns the replay server's name (`redis 7.0.15`), the rows, and the
/// warnings of the keys' runs that concern this host (said as they come, too).
#[allow(clippy::too_many_arguments)] // the scan's results, its plan's parts and the run's I/O
pub fn run(
    replay: &ReplayPlan,
    keys: &[KeyRow],
    settings: &[(String, String)],
    nodes_lazyfree: &std::collections::BTreeMap<String, LazyfreeSettings>,
    options: &RunOptions,
    out_dir: Option<&PathBuf>,
    force: bool,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<(String, Vec<ReplayRow>, Vec<String>)> {
    let keys = &keys[..keys.len().min(replay.keys)];
    if keys.len() < replay.keys {
        out.warn(&format!(
            "--replay {}: the scan found {} key(s) to replay",
            replay.keys,
            keys.len()
        ));
    }
    let probe_interval_ms =
        crate::measure::probe::aggregate_interval_us(options.probe_threads, options.probe_rate)
            / 1e3;
    let mut csv = match out_dir {
        Some(dir) => Some(RowAppender::create(&dir.join(REPLAY_CSV), columns::REPLAY)?),
        None => None,
    };
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    if keys.is_empty() {
        return Ok((String::new(), rows, notes));
    }
    let deployment = Deployment::start(&replay.server, &LocalTopologySpec::default(), out)?;
    describe_target(
        &deployment.target,
        "replaying the worst keys' shapes (never their contents) on",
        out,
    );
    let target = &deployment.target;
    let server = format!("{} {}", target.server.flavor, target.server.version);
    let mut conn = target
        .conn
        .redis_connection()
        .context("connecting to the replay server")?;
    let mut refused = Vec::new();
    for (name, value) in settings {
        let set: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut conn);
        if set.is_err() {
            refused.push(format!("{name} {value}"));
        }
    }
    if !refused.is_empty() {
        out.warn(&format!(
            "the replay server refused the scanned server's {}: it keeps its own",
            refused.join(", ")
        ));
    }
    let calibration_prefix = format!("holprobe:replay-{}:", std::process::id());
    let plans: Vec<_> = keys
        .iter()
        .map(|key| {
            replay_shape(key).and_then(|(kind, elements, bytes)| {
                let bytes =
                    calibrated_element_bytes(&mut conn, &calibration_prefix, key, kind, elements)
                        .unwrap_or(bytes);
                writer_plan(kind, elements, bytes).map(|plan| (plan, (elements, bytes)))
            })
        })
        .collect();
    drop(conn);
    let steps: usize = plans
        .iter()
        .filter_map(|p| p.as_ref().ok())
        .map(|(plan, _)| plan.step_count())
        .sum();
    out.start_progress(steps.max(1) as u64, "ops");
    let mut done = 0u64;
    let mut applied: Option<LazyfreeSettings> = None;
    for (rank, (key, plan)) in keys.iter().zip(plans).enumerate() {
        if interrupt.load(Ordering::SeqCst) {
            break;
        }
        // Where a cluster's nodes differ, a key is replayed under its own node's lazyfree
        // settings (the predictions applied them), set when they change from the last key's.
        if let Some(node) = nodes_lazyfree.get(&key.node)
            && applied != Some(*node)
        {
            applied = Some(*node);
            let mut conn = target
                .conn
                .redis_connection()
                .context("connecting to the replay server")?;
            for (name, value) in node.to_config() {
                let _: redis::RedisResult<()> = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query(&mut conn);
            }
        }
        let row = match plan {
            Err(why) => unmeasured_row(key, (0, 0), probe_interval_ms, Some(why)),
            Ok((writer, shape)) => {
                let run_dir = out_dir.map(|d| d.join(format!("replay-{}", rank + 1)));
                let _lock = match &run_dir {
                    Some(dir) => Some(prepare_out_dir(dir, force)?),
                    None => None,
                };
                let options = RunOptions {
                    writer: Some(writer),
                    out: run_dir.clone(),
                    ..options.clone()
                };
                let label = key.key.clone();
                match run::run(&options, target, interrupt, &mut |notice| {
                    if let Notice::Write { .. } = notice {
                        done += 1;
                        out.progress(done, label.clone());
                    }
                }) {
                    Ok(report) => {
                        // The host's CPU shortage, said as the main job says it: a replay on a
                        // busy host read 897 ms for a DEL the scanned server did in 437 ms, with
                        // only the key's own run.json saying why (the hostile trial).
                        let host = [
                            crate::session::cpu_wait_note(&report.analysis.writes),
                            crate::session::late_probe_note(
                                &report.analysis.writes,
                                options.realtime,
                            ),
                        ];
                        for note in host.into_iter().flatten() {
                            let note =
                                format!("replay of key {} (\"{}\"): {note}", rank + 1, key.key);
                            out.warn(&note);
                            notes.push(note);
                        }
                        measured_row(key, shape, &report, probe_interval_ms)
                    }
                    Err(err) => {
                        unmeasured_row(key, shape, probe_interval_ms, Some(format!("{err:#}")))
                    }
                }
            }
        };
        if let Some(csv) = csv.as_mut() {
            csv.push(&row)?;
        }
        rows.push(row);
    }
    out.finish_progress();
    Ok((server, rows, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::kind_named;

    /// A calibration value has the key's count over a power of two: its table the same slots
    /// per element.
    #[test]
    fn a_calibration_value_keeps_the_key_s_fill() {
        assert_eq!(calibration_count(1_000_000), 62_500);
        assert_eq!(calibration_count(4_000_000), 62_500);
        assert_eq!(calibration_count(300_000), 75_000);
        assert_eq!(calibration_count(100_000), 100_000);
        assert_eq!(calibration_count(20_000), 20_000);
        for elements in [100_001u64, 123_457, 1_000_000, 7_654_321] {
            let count = calibration_count(elements);
            assert!(count <= CALIBRATION_ELEMENTS && count > CALIBRATION_ELEMENTS / 2);
            let fill = |n: u64| n as f64 / n.next_power_of_two() as f64;
            assert!((fill(count) - fill(elements)).abs() < 1e-3, "{elements}");
        }
    }

    #[test]
    fn each_shape_makes_a_writer_plan_of_every_op() {
        let plan = writer_plan(kind_named("hash").unwrap(), 200_000, 16).unwrap();
        assert_eq!(plan.elements, [200_000]);
        assert_eq!(plan.element_bytes, 16);
        assert_eq!(
            plan.ops,
            [
                WriteOp::Build,
                WriteOp::Read,
                WriteOp::Delete,
                WriteOp::Build,
                WriteOp::Unlink,
                WriteOp::Build,
                WriteOp::Expire,
                WriteOp::Build,
                WriteOp::Evict
            ]
        );
        let plan = writer_plan(kind_named("string").unwrap(), 1, 1 << 20).unwrap();
        assert_eq!(plan.sizes, [1 << 20]);
        assert_eq!(plan.ops[0], WriteOp::Set);
    }

    #[test]
    fn bad_counts_and_a_missing_binary_name_their_flag() {
        let server = || {
            Some(TargetSpec::Embedded {
                binary: None,
                extra_args: Vec::new(),
                connect_timeout: std::time::Duration::from_secs(1),
                command_timeout: std::time::Duration::from_secs(1),
            })
        };
        assert_eq!(replay_plan("5", server()).unwrap().keys, 5);
        for text in ["0", "-1", "101", "many"] {
            let err = replay_plan(text, server()).unwrap_err().to_string();
            assert!(err.contains("--replay"), "{text}: {err}");
        }
        let err = replay_plan("2", None).unwrap_err().to_string();
        assert!(err.contains("--server-bin"), "{err}");
        let missing = Some(TargetSpec::Embedded {
            binary: Some("/nonexistent/redis-server".into()),
            extra_args: Vec::new(),
            connect_timeout: std::time::Duration::from_secs(1),
            command_timeout: std::time::Duration::from_secs(1),
        });
        let err = replay_plan("2", missing).unwrap_err().to_string();
        assert!(
            err.contains("--server-bin") && err.contains("no such file"),
            "{err}"
        );
    }
}
