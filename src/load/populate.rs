//! Filling and emptying the load key space.
//!
//! [`populate`] streams pipelined `SET` commands on one connection from one thread while
//! another reads the replies, so the server never waits for the client between batches. Values
//! are random bytes from a seeded PRNG, of uniformly random size. Existing keys are kept
//! (`SET ... NX`) unless the plan overwrites them.
//!
//! [`clean`] walks the prefix with `SCAN` and removes what it finds with `UNLINK`, batch by
//! batch, then scans again until a whole pass finds nothing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use rand::{Rng, RngExt, SeedableRng};
use serde::Serialize;

use super::keyspace::{
    KeyNaming, LOAD_PREFIX, PopulationMeta, ValueSize, mean_bytes_per_key, read_meta, write_meta,
};
use super::scanner::{ReplyScanner, Scanned};
use crate::measure::resp::RawConn;
use crate::measure::target::{ConnInfo, info_field};

/// What to write.
#[derive(Debug, Clone, Serialize)]
pub struct PopulatePlan {
    /// Keys `0..keys`.
    pub keys: u64,
    /// Value sizes.
    pub value_size: ValueSize,
    /// Replace keys that exist (plain `SET`) instead of keeping them (`SET NX`).
    pub overwrite: bool,
    /// Seed of sizes and bytes.
    pub seed: u64,
    /// Key names; [`KeyNaming::load`] for the tool's own population.
    pub naming: KeyNaming,
    /// Store the population's description in [`super::keyspace::META_KEY`] (only for the
    /// tool's own naming).
    pub write_meta: bool,
    /// On a cluster: write only these key indices (one master's, see
    /// [`super::cluster::SlotMap::partition`]); `None`: every index `0..keys`.
    #[serde(skip)]
    pub indices: Option<std::sync::Arc<Vec<u32>>>,
}

/// What a populate did.
#[derive(Debug, Clone, Serialize)]
pub struct PopulateOutcome {
    /// SET commands answered OK: keys created, or replaced with `overwrite`.
    pub written: u64,
    /// Keys that existed and were kept (`SET NX` answered nil).
    pub kept: u64,
    /// Commands the server refused (e.g. OOM): the first error is in `first_error`.
    pub errors: u64,
    /// The server's first error reply.
    pub first_error: Option<String>,
    /// Value bytes sent.
    pub value_bytes: u64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
    /// Stopped early by an interrupt: keys `0..written+kept` are in.
    pub interrupted: bool,
    /// `used_memory` before and after, bytes.
    pub used_memory_before_bytes: u64,
    /// See `used_memory_before_bytes`.
    pub used_memory_after_bytes: u64,
    /// Memory growth per written key, when enough keys were new to tell.
    pub measured_bytes_per_key: Option<u64>,
    /// The population as now described by the metadata key.
    pub meta: Option<PopulationMeta>,
    /// Set where keys of a larger previous population, past those this populate covered, were
    /// found gone: its description was cut to the keys covered now.
    pub previous_gone: Option<PreviousGone>,
}

/// A larger previous population found partly gone (removed or evicted) past this populate's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PreviousGone {
    /// Sampled keys found gone.
    pub missing: u64,
    /// Keys sampled past this populate's range.
    pub sampled: u64,
    /// Keys the previous population was described with.
    pub previous_keys: u64,
    /// Keys this populate covered: the population's description now.
    pub covered: u64,
}

/// Keys sampled past this populate's range to tell whether the previous population is still
/// there.
const PREVIOUS_SAMPLE: u64 = 32;

/// Of a previous population larger than the `covered` keys just written, how many of up to
/// [`PREVIOUS_SAMPLE`] keys spread over the rest (its last one among them) are gone, and how
/// many were sampled. A population whose keys were removed by hand was still announced whole,
/// and `probe load` then read mostly missing keys (the hostile trial).
fn gone_past(
    control: &mut redis::Connection,
    naming: &KeyNaming,
    covered: u64,
    previous_keys: u64,
) -> Result<(u64, u64)> {
    let span = previous_keys.saturating_sub(covered);
    if span == 0 {
        return Ok((0, 0));
    }
    let sampled = span.min(PREVIOUS_SAMPLE);
    let mut pipe = redis::pipe();
    for i in 0..sampled {
        // Evenly spread from the first key past `covered` to the last one.
        let index = match sampled {
            1 => covered + span - 1,
            _ => covered + i * (span - 1) / (sampled - 1),
        };
        pipe.cmd("EXISTS").arg(naming.key(index));
    }
    let found: Vec<u64> = pipe
        .query(control)
        .context("EXISTS of the previous population's keys")?;
    Ok((found.iter().filter(|&&n| n == 0).count() as u64, sampled))
}

/// Commands buffered before one write to the socket.
const WRITE_CHUNK: usize = 256 * 1024;

/// Fills a cluster: each master, on a thread of its own, with the keys of its slots
/// (`masters`: its connection and its key indices), then the population's description on
/// `meta_conn` (the master of [`super::keyspace::META_KEY`]'s slot). The figures are the sums
/// over the masters; `progress(done)` as [`populate`]'s, over all of them.
pub fn populate_cluster(
    masters: &[(ConnInfo, std::sync::Arc<Vec<u32>>)],
    meta_conn: &ConnInfo,
    plan: &PopulatePlan,
    interrupt: &AtomicBool,
    progress: &mut dyn FnMut(u64),
) -> Result<PopulateOutcome> {
    let mut control = meta_conn.redis_connection()?;
    let previous = if plan.write_meta {
        read_meta(&mut control)?
    } else {
        None
    };
    let done: Vec<AtomicU64> = masters.iter().map(|_| AtomicU64::new(0)).collect();
    let finished = AtomicU64::new(0);
    let started = Instant::now();
    let outcomes: Vec<Result<PopulateOutcome>> = std::thread::scope(|scope| {
        let handles: Vec<_> = masters
            .iter()
            .zip(&done)
            .map(|((conn, indices), done)| {
                let finished = &finished;
                let plan = PopulatePlan {
                    write_meta: false,
                    indices: Some(std::sync::Arc::clone(indices)),
                    ..plan.clone()
                };
                scope.spawn(move || {
                    let outcome = populate(conn, &plan, interrupt, &mut |n| {
                        done.store(n, Ordering::Relaxed)
                    })
                    .with_context(|| format!("populating the master {conn}"));
                    finished.fetch_add(1, Ordering::Release);
                    outcome
                })
            })
            .collect();
        while (finished.load(Ordering::Acquire) as usize) < masters.len() {
            std::thread::sleep(Duration::from_millis(100));
            progress(done.iter().map(|d| d.load(Ordering::Relaxed)).sum());
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a populate thread panicked")))
            })
            .collect()
    });
    let mut total = PopulateOutcome {
        written: 0,
        kept: 0,
        errors: 0,
        first_error: None,
        value_bytes: 0,
        elapsed_s: started.elapsed().as_secs_f64(),
        interrupted: interrupt.load(Ordering::Relaxed),
        used_memory_before_bytes: 0,
        used_memory_after_bytes: 0,
        measured_bytes_per_key: None,
        meta: None,
        // On a cluster the keys past this populate's are on other nodes: not sampled.
        previous_gone: None,
    };
    for outcome in outcomes {
        let o = outcome?;
        total.written += o.written;
        total.kept += o.kept;
        total.errors += o.errors;
        total.value_bytes += o.value_bytes;
        total.used_memory_before_bytes += o.used_memory_before_bytes;
        total.used_memory_after_bytes += o.used_memory_after_bytes;
        if total.first_error.is_none() {
            total.first_error = o.first_error;
        }
    }
    total.measured_bytes_per_key = (total.written >= 1000 && !plan.overwrite)
        .then(|| {
            total
                .used_memory_after_bytes
                .saturating_sub(total.used_memory_before_bytes)
                / total.written
        })
        .filter(|&b| b > 0);
    let answered = total.written + total.kept + total.errors;
    total.meta = if plan.write_meta && answered > 0 && !total.interrupted && total.errors == 0 {
        let meta = merged_meta(
            previous.as_ref(),
            plan,
            plan.keys,
            total.measured_bytes_per_key,
        );
        write_meta(&mut control, &meta)?;
        Some(meta)
    } else {
        previous
    };
    Ok(total)
}

/// What the server's population says of itself after `plan` covered keys `0..covered`, on top
/// of the `previous` population: the larger key range, the union of the sizes unless this
/// populate overwrote every key the previous one had, and the memory per key measured by this
/// populate or else the previous one.
fn merged_meta(
    previous: Option<&PopulationMeta>,
    plan: &PopulatePlan,
    covered: u64,
    measured_bytes_per_key: Option<u64>,
) -> PopulationMeta {
    PopulationMeta {
        keys: previous.map_or(covered, |p| p.keys.max(covered)),
        value_size: match previous {
            Some(p) if p.keys > covered || !plan.overwrite => p.value_size.union(&plan.value_size),
            _ => plan.value_size,
        },
        seed: plan.seed,
        measured_bytes_per_key: measured_bytes_per_key
            .or(previous.and_then(|p| p.measured_bytes_per_key)),
        updated_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// Fills keys `0..plan.keys` (or `plan.indices`). `progress(done)` is called about every 100 ms with the number of
/// keys answered. Stops early (keeping what was written) when `interrupt` is set.
pub fn populate(
    conn: &ConnInfo,
    plan: &PopulatePlan,
    interrupt: &AtomicBool,
    progress: &mut dyn FnMut(u64),
) -> Result<PopulateOutcome> {
    let mut control = conn.redis_connection()?;
    let used_before = used_memory(&mut control)?;
    let previous = if plan.write_meta {
        read_meta(&mut control)?
    } else {
        None
    };
    let stream = RawConn::connect(conn)
        .context("opening the populate connection")?
        .into_stream()
        .context("handing the populate connection to its reader")?;
    stream
        .set_read_timeout(Some(conn.command_timeout))
        .context("setting the read timeout")?;
    let started = Instant::now();
    let sent = AtomicU64::new(0);
    let writer_done = AtomicBool::new(false);
    let stream_ref = &stream;

    let (read_result, write_result) = std::thread::scope(|scope| {
        let sent = &sent;
        let writer_done = &writer_done;
        let writer = scope.spawn(move || {
            let result = send_sets(stream_ref, plan, interrupt, sent);
            writer_done.store(true, Ordering::Release);
            if result.is_err() {
                // Unblocks the reader: no more replies will come.
                let _ = stream_ref.shutdown(std::net::Shutdown::Both);
            }
            result
        });
        let read_result = read_replies(stream_ref, sent, writer_done, progress);
        let write_result = writer
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the populate writer thread panicked")));
        (read_result, write_result)
    });
    let value_bytes = write_result?;
    let mut counts = read_result?;
    counts.value_bytes = value_bytes;
    let elapsed_s = started.elapsed().as_secs_f64();
    let interrupted = interrupt.load(Ordering::Relaxed);
    let used_after = used_memory(&mut control)?;
    let measured_bytes_per_key = (counts.written >= 1000 && !plan.overwrite)
        .then(|| used_after.saturating_sub(used_before) / counts.written)
        .filter(|&b| b > 0);

    let answered = counts.written + counts.kept + counts.errors;
    let covered = if counts.errors == 0 {
        answered
    } else {
        counts.written + counts.kept
    };
    // A previous population larger than this one: still there past what was written now, or
    // its description is cut to the keys covered now (an interrupted populate keeps it).
    let mut previous = previous;
    let mut previous_gone = None;
    if let Some(p) = previous.as_mut()
        && plan.write_meta
        && !interrupted
        && p.keys > covered
        && covered > 0
    {
        let (missing, sampled) = gone_past(&mut control, &plan.naming, covered, p.keys)?;
        if missing > 0 {
            previous_gone = Some(PreviousGone {
                missing,
                sampled,
                previous_keys: p.keys,
                covered,
            });
            p.keys = covered;
        }
    }
    // Nothing stored (every SET refused): no population to describe, and none announced.
    let meta = if plan.write_meta && covered > 0 {
        let meta = merged_meta(previous.as_ref(), plan, covered, measured_bytes_per_key);
        write_meta(&mut control, &meta)?;
        Some(meta)
    } else {
        previous
    };
    Ok(PopulateOutcome {
        written: counts.written,
        kept: counts.kept,
        errors: counts.errors,
        first_error: counts.first_error,
        value_bytes: counts.value_bytes,
        elapsed_s,
        interrupted,
        used_memory_before_bytes: used_before,
        used_memory_after_bytes: used_after,
        measured_bytes_per_key,
        meta,
        previous_gone,
    })
}

#[derive(Debug, Default)]
struct ReplyCounts {
    written: u64,
    kept: u64,
    errors: u64,
    first_error: Option<String>,
    value_bytes: u64,
}

/// Streams the SETs, then one PING whose PONG tells the reader the stream is over. Returns
/// the value bytes sent.
fn send_sets(
    mut stream: &TcpStream,
    plan: &PopulatePlan,
    interrupt: &AtomicBool,
    sent: &AtomicU64,
) -> Result<u64> {
    let mut value_bytes = 0u64;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(plan.seed);
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_CHUNK + 2 * plan.value_size.max_bytes as usize);
    let mut key = Vec::with_capacity(64);
    let mut count_in_buf = 0u64;
    let header: &[u8] = if plan.overwrite {
        b"*3\r\n$3\r\nSET\r\n"
    } else {
        b"*4\r\n$3\r\nSET\r\n"
    };
    let all = 0..plan.keys;
    let mut listed = plan
        .indices
        .as_deref()
        .map(|v| v.iter().map(|&i| u64::from(i)));
    let mut every = (listed.is_none()).then_some(all);
    let mut next_index = move || match (&mut listed, &mut every) {
        (Some(list), _) => list.next(),
        (None, Some(range)) => range.next(),
        (None, None) => None,
    };
    while let Some(index) = next_index() {
        let len = if plan.value_size.min_bytes == plan.value_size.max_bytes {
            plan.value_size.min_bytes
        } else {
            rng.random_range(plan.value_size.min_bytes..=plan.value_size.max_bytes)
        } as usize;
        value_bytes += len as u64;
        key.clear();
        plan.naming.push_key(index, &mut key);
        buf.extend_from_slice(header);
        push_bulk_header(&mut buf, key.len());
        buf.extend_from_slice(&key);
        buf.extend_from_slice(b"\r\n");
        push_bulk_header(&mut buf, len);
        let at = buf.len();
        buf.resize(at + len, 0);
        rng.fill_bytes(&mut buf[at..]);
        buf.extend_from_slice(b"\r\n");
        if !plan.overwrite {
            buf.extend_from_slice(b"$2\r\nNX\r\n");
        }
        count_in_buf += 1;
        if buf.len() >= WRITE_CHUNK {
            stream
                .write_all(&buf)
                .context("sending SET commands to the server")?;
            sent.fetch_add(count_in_buf, Ordering::Release);
            buf.clear();
            count_in_buf = 0;
            if interrupt.load(Ordering::Relaxed) {
                break;
            }
        }
    }
    buf.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    stream
        .write_all(&buf)
        .context("sending SET commands to the server")?;
    sent.fetch_add(count_in_buf, Ordering::Release);
    Ok(value_bytes)
}

fn push_bulk_header(buf: &mut Vec<u8>, len: usize) {
    buf.push(b'$');
    super::keyspace::push_decimal(len as u64, 0, buf);
    buf.extend_from_slice(b"\r\n");
}

/// Reads replies until the closing PONG. `progress` gets the number answered so far.
fn read_replies(
    mut stream: &TcpStream,
    sent: &AtomicU64,
    writer_done: &AtomicBool,
    progress: &mut dyn FnMut(u64),
) -> Result<ReplyCounts> {
    let mut scanner = ReplyScanner::new();
    let mut counts = ReplyCounts::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut finished = false;
    let mut last_progress = Instant::now();
    while !finished {
        let n = match stream.read(&mut buf) {
            Ok(0) => {
                if writer_done.load(Ordering::Acquire) {
                    bail!(
                        "the connection closed after {} of {} replies",
                        counts.written + counts.kept + counts.errors,
                        sent.load(Ordering::Acquire)
                    );
                }
                bail!("the server closed the populate connection");
            }
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err).context("reading SET replies"),
        };
        scanner
            .feed(&buf[..n], |reply| match reply {
                Scanned::Status { ok: true } => counts.written += 1,
                Scanned::Nil => counts.kept += 1,
                Scanned::Status { ok: false } => finished = true,
                Scanned::Error(text) => {
                    counts.errors += 1;
                    counts.first_error.get_or_insert(text);
                }
                Scanned::Integer | Scanned::Bulk { .. } => {
                    counts.errors += 1;
                    counts
                        .first_error
                        .get_or_insert_with(|| "unexpected reply to SET".into());
                }
            })
            .context("reading SET replies")?;
        if last_progress.elapsed() >= Duration::from_millis(100) {
            last_progress = Instant::now();
            progress(counts.written + counts.kept + counts.errors);
        }
    }
    progress(counts.written + counts.kept + counts.errors);
    Ok(counts)
}

/// `used_memory` from INFO memory.
pub fn used_memory(control: &mut redis::Connection) -> Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(control)
        .context("INFO memory")?;
    Ok(info_field(&info, "used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// Estimated server memory per key of a plan (before anything is measured).
pub fn estimated_bytes_per_key(plan_keys: u64, naming: &KeyNaming, size: ValueSize) -> u64 {
    let key_len = naming.key_len(plan_keys.saturating_sub(1)) as u64;
    mean_bytes_per_key(key_len, size)
}

/// What a clean did.
#[derive(Debug, Clone, Serialize)]
pub struct CleanOutcome {
    /// Keys removed.
    pub removed: u64,
    /// SCAN passes over the key space (the last one found nothing, unless `remaining > 0`).
    pub passes: u32,
    /// Keys under the prefix the last pass still found (0: nothing left behind).
    pub remaining: u64,
    /// Stopped early by an interrupt.
    pub interrupted: bool,
}

/// Most passes `clean` makes before it gives up on a prefix someone keeps writing to.
const MAX_CLEAN_PASSES: u32 = 5;

/// Removes every key under [`LOAD_PREFIX`] (the metadata too), `batch` keys per SCAN and per
/// UNLINK (on a cluster node, `cluster_node`: one UNLINK per slot); `progress(removed)` is called
/// after each batch.
pub fn clean(
    conn: &ConnInfo,
    batch: u64,
    cluster_node: bool,
    interrupt: &AtomicBool,
    progress: &mut dyn FnMut(u64),
) -> Result<CleanOutcome> {
    let mut control = conn.redis_connection()?;
    let pattern = format!("{LOAD_PREFIX}*");
    let mut removed = 0u64;
    let mut passes = 0u32;
    loop {
        passes += 1;
        let mut found_this_pass = 0u64;
        let mut cursor: u64 = 0;
        loop {
            if interrupt.load(Ordering::Relaxed) {
                return Ok(CleanOutcome {
                    removed,
                    passes,
                    remaining: count_keys(&mut control, &pattern, batch)?,
                    interrupted: true,
                });
            }
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(batch)
                .query(&mut control)
                .context("SCAN of the load keys")?;
            if !keys.is_empty() {
                let gone: u64 = if cluster_node {
                    // A cluster node takes a multi-key UNLINK only within one slot: one per
                    // slot, pipelined.
                    let mut by_slot: std::collections::BTreeMap<u16, Vec<&Vec<u8>>> =
                        std::collections::BTreeMap::new();
                    for key in &keys {
                        by_slot
                            .entry(crate::measure::slots::key_slot(key))
                            .or_default()
                            .push(key);
                    }
                    let mut pipe = redis::pipe();
                    for group in by_slot.values() {
                        pipe.cmd("UNLINK").arg(group);
                    }
                    let counts: Vec<u64> =
                        pipe.query(&mut control).context("UNLINK of load keys")?;
                    counts.iter().sum()
                } else {
                    redis::cmd("UNLINK")
                        .arg(&keys)
                        .query(&mut control)
                        .context("UNLINK of load keys")?
                };
                removed += gone;
                found_this_pass += keys.len() as u64;
                progress(removed);
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        if found_this_pass == 0 || passes >= MAX_CLEAN_PASSES {
            let remaining = if found_this_pass == 0 {
                0
            } else {
                count_keys(&mut control, &pattern, batch)?
            };
            return Ok(CleanOutcome {
                removed,
                passes,
                remaining,
                interrupted: false,
            });
        }
    }
}

/// Keys matching `pattern`, by a full SCAN.
pub fn count_keys(control: &mut redis::Connection, pattern: &str, batch: u64) -> Result<u64> {
    let mut cursor: u64 = 0;
    let mut count = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(batch)
            .query(control)
            .context("SCAN of the load keys")?;
        count += keys.len() as u64;
        cursor = next;
        if cursor == 0 {
            return Ok(count);
        }
    }
}
