//! The key scan as the session's actor: SCAN with a few cheap commands per key, pipelined per
//! batch (TYPE, OBJECT ENCODING, PTTL, MEMORY USAGE ... SAMPLES 5, then the count command its
//! type has), paced by [`crate::keys::pacing`] from the probes' intervals and its own round
//! trips. It writes no key and sends no write event: the probes measure the whole run, and the
//! report compares the probes during the scan with those of the quiet lead-in before it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};

use crate::keys::model::{CostModel, KeyShape, predict};
use crate::keys::pacing::{BatchCost, Pacer};
use crate::keys::report::{KeyRow, Tally};
use crate::measure::actor::{Actor, ActorContext};
use crate::measure::culprit::{KEYS_CLIENT_NAME, run_client_name};
use crate::measure::event::Event;
use crate::measure::resp::{RawConn, Reply, encode_command_into};
use crate::measure::serverview::Want;
use crate::measure::target::ConnInfo;
use crate::output::export::RowAppender;
use crate::workload::lazyfree::LazyfreeSettings;
use crate::workload::{ValueKind, kind_named};

/// Quiet probing before the first SCAN: what the probes see without the scan, to set against
/// what they see during it.
pub const LEAD_IN: Duration = Duration::from_millis(500);

/// The most elements a compact encoding holds under the servers' defaults
/// (`set-max-intset-entries` 512; the `*-max-listpack-entries` are 128): past it, a value has
/// its kind's large encoding whatever its element sizes.
const LARGEST_COMPACT_ELEMENTS: u64 = 512;

/// One node to scan.
#[derive(Debug, Clone)]
pub struct ScanNode {
    /// `host:port`, as in the exports.
    pub name: String,
    /// How to reach it.
    pub conn: ConnInfo,
    /// A cluster replica: READONLY first, or it answers MOVED.
    pub readonly: bool,
    /// The `lazyfree-lazy-*` settings its keys are priced with: its own, or for a replica its
    /// master's (where a DEL or an expiry of its keys runs). Nodes of one cluster may differ.
    pub lazyfree: LazyfreeSettings,
}

/// What the scan shares with the command while it goes.
#[derive(Debug)]
pub struct ScanShared {
    /// Keys looked at so far.
    pub keys_scanned: AtomicU64,
    /// The worst probe latency of the intervals that ended since the scan last looked, µs.
    pub probe_worst_us: AtomicU64,
    /// Set by the command once the lead-in's intervals are in.
    pub state: Mutex<ScanState>,
}

/// The scan's findings.
#[derive(Debug)]
pub struct ScanState {
    /// Every key counted.
    pub tally: Tally,
    /// When the first SCAN went out and the last reply came, µs on the run's clock.
    pub scan_window_us: Option<(u64, u64)>,
    /// SCAN batches sent.
    pub batches: u64,
    /// Times the pacing slowed the scan down.
    pub backoffs: u64,
    /// The smallest COUNT the pacing went down to.
    pub smallest_count: u64,
    /// Commands the server refused, each with its first error (one line each).
    pub refused: Vec<(String, String)>,
    /// Keys of types the cost model has no costs for (Redis 8's `vectorset`, a module's type),
    /// by TYPE's name: how many, and the largest by MEMORY USAGE. Counted, not priced.
    pub other_types: std::collections::BTreeMap<String, (u64, Option<u64>)>,
    /// Keys left out because they changed under the scan (their type, or gone between the
    /// batch's two round trips).
    pub changed: u64,
    /// Nodes scanned to the end.
    pub nodes_done: Vec<String>,
    /// keys.csv rows written.
    pub rows_written: u64,
    /// Why the scan failed, if it did.
    pub failure: Option<String>,
}

/// The scan's settings.
pub struct ScanSpec {
    /// Where.
    pub nodes: Vec<ScanNode>,
    /// `--match`.
    pub pattern: Option<String>,
    /// `--type`.
    pub kind: Option<&'static dyn ValueKind>,
    /// `--count`.
    pub count: u64,
    /// `--stall-threshold`, µs.
    pub threshold_us: u64,
    /// `--size-floor`, bytes.
    pub size_floor_bytes: u64,
    /// The cost model.
    pub model: CostModel,
}

/// The actor.
pub struct KeyScanner {
    spec: ScanSpec,
    shared: Arc<ScanShared>,
    csv: Option<RowAppender>,
}

impl KeyScanner {
    /// A scan that writes its rows to `csv` (keys.csv) as it goes.
    pub fn new(spec: ScanSpec, shared: Arc<ScanShared>, csv: Option<RowAppender>) -> KeyScanner {
        KeyScanner { spec, shared, csv }
    }
}

impl Actor for KeyScanner {
    fn steps_total(&self) -> usize {
        0
    }

    /// None: a scan of someone's server changes none of its settings.
    fn server_settings(&self) -> Vec<(&'static str, Want)> {
        Vec::new()
    }

    /// A scan changes nothing on the server: what dead runs left is said, not undone.
    fn reclaims_dead_runs(&self) -> bool {
        false
    }

    fn spawn(self: Box<Self>, ctx: ActorContext) -> Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("key-scan".into())
            .spawn(move || {
                let events = ctx.events.clone();
                let mut scanner = *self;
                let result = scanner.run(&ctx);
                if let Some(csv) = scanner.csv.as_mut() {
                    let _ = csv.flush();
                }
                match result {
                    Ok(()) => {
                        let _ = events.send(Event::WriterDone);
                    }
                    Err(err) => {
                        // The scan's own words: the shared hint for NOPERM lists what a run's
                        // writer needs (SET, DEL on holprobe:*), which a scan never sends (the
                        // hostile trial, an ACL user without TYPE).
                        let plain = crate::error::chain_line(&err);
                        let text = if plain.contains("NOPERM") && plain.contains("keys used as arguments") {
                            // Commands allowed, keys not: an ACL key pattern (`~app:*`).
                            format!(
                                "the scan stopped: {plain} (the ACL user may read only some keys: give --match with a pattern inside its key permissions, e.g. the user's ~pattern)"
                            )
                        } else if plain.contains("NOPERM") {
                            format!(
                                "the scan stopped: {plain} (the ACL user may not run this command: probe keys needs INFO, PING (the probes), SCAN, TYPE, PTTL and the count commands STRLEN, HLEN, LLEN, SCARD, ZCARD, XLEN, with OBJECT, MEMORY, CONFIG and CLIENT optional; or give --type to scan one type without TYPE)"
                            )
                        } else {
                            format!("the scan stopped: {}", crate::error::one_line(&err))
                        };
                        if let Ok(mut state) = scanner.shared.state.lock() {
                            state.failure = Some(text.clone());
                        }
                        let _ = events.send(Event::WriterFailed(text));
                    }
                }
            })
            .context("starting the key scan's thread")
    }
}

/// A reply that says the command is not allowed or not there (ACL, `rename-command`).
fn refused(reply: &Reply) -> Option<&str> {
    let text = reply.error()?;
    let upper = text.to_ascii_uppercase();
    (upper.starts_with("NOPERM")
        || upper.contains("NO PERMISSIONS")
        || upper.contains("UNKNOWN COMMAND")
        || upper.contains("UNKNOWN SUBCOMMAND"))
    .then_some(text)
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `TIME`'s reply, µs on the server's clock.
fn server_time_us(reply: &Reply) -> Option<u64> {
    let Reply::Array(Some(parts)) = reply else {
        return None;
    };
    let number = |part: Option<&Reply>| match part {
        Some(Reply::Bulk(Some(bytes))) => std::str::from_utf8(bytes).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    Some(number(parts.first())? * 1_000_000 + number(parts.get(1))?)
}

/// The scan's own keys (its run's marker and lease, under its prefix) and the markers' registry
/// (`holprobe:markers`, shared by every run on the server): the tool's bookkeeping, not the
/// user's data, so not reported.
fn is_own_bookkeeping(key: &[u8], key_prefix: &str, registry: &str) -> bool {
    key.starts_with(key_prefix.as_bytes())
        || key
            .strip_prefix(registry.as_bytes())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(b":"))
}

/// Commands encoded back to back into one buffer, and how many.
#[derive(Default)]
struct Batch {
    buf: Vec<u8>,
    commands: usize,
}

impl Batch {
    fn push(&mut self, args: &[&[u8]]) {
        encode_command_into(&mut self.buf, args);
        self.commands += 1;
    }

    fn is_empty(&self) -> bool {
        self.commands == 0
    }
}

/// Sends `commands` at once and reads their replies, in order; with what the batch cost the
/// server, µs. With `timed` the batch goes between two `TIME`s and the cost is the span of the
/// server's clock between them: the time the server spent on the batch (and, between its reads
/// of the batch, on other clients), which is what a probe can have waited behind it. The round
/// trip, the fallback where TIME is refused, also holds the client's and the network's time,
/// which on a busy host is much of it and no one else's wait (ms where the server spent 0.1 ms).
/// `timed` is cleared when the server refuses TIME.
fn pipeline(conn: &mut RawConn, batch: &Batch, timed: &mut bool) -> Result<(Vec<Reply>, u64)> {
    let time: &[&[u8]] = &[b"TIME"];
    let mut buf = Vec::with_capacity(batch.buf.len() + 32);
    if *timed {
        encode_command_into(&mut buf, time);
    }
    buf.extend_from_slice(&batch.buf);
    if *timed {
        encode_command_into(&mut buf, time);
    }
    let start = Instant::now();
    conn.send_raw(&buf).context("sending a batch")?;
    let read = |conn: &mut RawConn| conn.read_reply().context("reading a batch's replies");
    let before = if *timed { Some(read(conn)?) } else { None };
    let mut replies = Vec::with_capacity(batch.commands);
    for _ in 0..batch.commands {
        replies.push(read(conn)?);
    }
    let after = if *timed { Some(read(conn)?) } else { None };
    let round_trip_us = start.elapsed().as_micros() as u64;
    let span_us = match (
        before.as_ref().and_then(server_time_us),
        after.as_ref().and_then(server_time_us),
    ) {
        (Some(from), Some(to)) => Some(to.saturating_sub(from)),
        _ => None,
    };
    if *timed && span_us.is_none() {
        *timed = false;
    }
    Ok((replies, span_us.unwrap_or(round_trip_us)))
}

impl KeyScanner {
    fn stopped(&self, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Relaxed)
    }

    /// Sleeps up to `pause`, waking for a stop.
    fn pause(&self, pause: Duration, stop: &AtomicBool) {
        let until = Instant::now() + pause;
        while !self.stopped(stop) {
            let now = Instant::now();
            if now >= until {
                return;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }

    fn run(&mut self, ctx: &ActorContext) -> Result<()> {
        self.pause(LEAD_IN, &ctx.stop);
        // What the probes saw before the scan is not the scan's doing.
        self.shared.probe_worst_us.store(0, Ordering::SeqCst);
        let first_us = ctx.clock.now_us();
        let mut pacer = Pacer::new(self.spec.count, self.spec.threshold_us);
        // Commands found refused: not sent again.
        let mut skip_object = false;
        let mut skip_memory = false;
        // Each batch between two TIMEs, until the server refuses TIME.
        let mut timed = true;
        let mut smallest = self.spec.count;
        let registry = crate::session::marker::registry_key(None);
        let nodes = self.spec.nodes.clone();
        let client_name = run_client_name(KEYS_CLIENT_NAME, &ctx.key_prefix);
        let result = (|| -> Result<()> {
            for node in &nodes {
                let mut conn = RawConn::connect_named(&node.conn, &client_name)
                    .with_context(|| format!("connecting to {}", node.name))?;
                // The count commands would mark each key as just used, and so change which keys
                // the server evicts next (the hostile trial: OBJECT IDLETIME 12 -> 0, LFU
                // counters up on every scan). Redis 7.2+ and Valkey leave them alone for a
                // client that says NO-TOUCH; older servers refuse it, and are touched: said.
                let reply = conn.command(&[b"CLIENT", b"NO-TOUCH", b"ON"])?;
                if let Some(text) = refused(&reply) {
                    self.refuse(
                        "CLIENT NO-TOUCH",
                        text,
                        "leaving keys' last access alone: the count commands mark each key they count as just used (OBJECT IDLETIME back to 0, LFU counters up), which can change the keys an LRU or LFU maxmemory-policy evicts next",
                    );
                }
                if node.readonly {
                    let reply = conn.command(&[b"READONLY"])?;
                    if let Some(err) = reply.error() {
                        return Err(anyhow!("READONLY on {}: {err}", node.name));
                    }
                }
                let mut cursor = b"0".to_vec();
                loop {
                    if self.stopped(&ctx.stop) {
                        return Ok(());
                    }
                    let step = pacer.step();
                    smallest = smallest.min(step.count);
                    self.pause(step.pause, &ctx.stop);
                    if self.stopped(&ctx.stop) {
                        return Ok(());
                    }
                    let count = step.count.to_string();
                    let mut scan: Vec<&[u8]> = vec![b"SCAN", &cursor];
                    if let Some(pattern) = &self.spec.pattern {
                        scan.extend([b"MATCH".as_slice(), pattern.as_bytes()]);
                    }
                    scan.extend([b"COUNT".as_slice(), count.as_bytes()]);
                    if let Some(kind) = self.spec.kind {
                        scan.extend([b"TYPE".as_slice(), kind.name().as_bytes()]);
                    }
                    let mut batch = Batch::default();
                    batch.push(&scan);
                    let (replies, scan_us) = pipeline(&mut conn, &batch, &mut timed)?;
                    let (next, mut keys) = parse_scan(&replies[0])
                        .with_context(|| format!("SCAN on {}", node.name))?;
                    cursor = next;
                    keys.retain(|key| !is_own_bookkeeping(key, &ctx.key_prefix, &registry));
                    let mut batch_us = scan_us;
                    if !keys.is_empty() {
                        let round_trip = self.look_at(
                            &mut conn,
                            node,
                            &keys,
                            &mut skip_object,
                            &mut skip_memory,
                            &mut timed,
                        )?;
                        batch_us = batch_us.max(round_trip);
                    }
                    let probe_worst = self.shared.probe_worst_us.swap(0, Ordering::SeqCst);
                    pacer.observe(BatchCost {
                        worst_probe_us: (probe_worst > 0).then_some(probe_worst),
                        batch_us,
                    });
                    if let Ok(mut state) = self.shared.state.lock() {
                        state.batches += 1;
                        state.backoffs = pacer.backoffs();
                        state.smallest_count = smallest;
                        state.scan_window_us = Some((first_us, ctx.clock.now_us()));
                    }
                    if cursor == b"0" {
                        break;
                    }
                }
                if let Ok(mut state) = self.shared.state.lock() {
                    state.nodes_done.push(node.name.clone());
                }
            }
            Ok(())
        })();
        if let Ok(mut state) = self.shared.state.lock() {
            state.scan_window_us = Some((first_us, ctx.clock.now_us()));
        }
        result
    }

    /// The cheap commands for one batch of keys, two pipelined round trips (the count command
    /// depends on the type); returns the longer round trip, µs.
    fn look_at(
        &mut self,
        conn: &mut RawConn,
        node: &ScanNode,
        keys: &[Vec<u8>],
        skip_object: &mut bool,
        skip_memory: &mut bool,
        timed: &mut bool,
    ) -> Result<u64> {
        let known_kind = self.spec.kind;
        let mut first = Batch {
            buf: Vec::with_capacity(keys.len() * 96),
            commands: 0,
        };
        for key in keys {
            if known_kind.is_none() {
                first.push(&[b"TYPE", key]);
            }
            if !*skip_object {
                first.push(&[b"OBJECT", b"ENCODING", key]);
            }
            first.push(&[b"PTTL", key]);
            if !*skip_memory {
                // A few samples, never 0: SAMPLES 0 walks the whole value and can itself
                // freeze the server.
                first.push(&[b"MEMORY", b"USAGE", key, b"SAMPLES", b"5"]);
            }
        }
        let (replies, first_us) = pipeline(conn, &first, timed)?;
        let mut replies = replies.into_iter();
        struct Seen {
            kind: Option<&'static dyn ValueKind>,
            /// TYPE's name where the model knows no such type.
            other_type: Option<String>,
            encoding: Option<String>,
            ttl_ms: Option<u64>,
            memory: Option<u64>,
            gone: bool,
        }
        let (object_was_skipped, memory_was_skipped) = (*skip_object, *skip_memory);
        let mut seen = Vec::with_capacity(keys.len());
        for _ in keys {
            let mut s = Seen {
                kind: known_kind,
                other_type: None,
                encoding: None,
                ttl_ms: None,
                memory: None,
                gone: false,
            };
            if known_kind.is_none() {
                match replies.next() {
                    Some(Reply::Status(name)) if name == "none" => s.gone = true,
                    Some(Reply::Status(name)) => {
                        s.kind = kind_named(&name);
                        if s.kind.is_none() {
                            s.other_type = Some(name);
                        }
                    }
                    Some(reply) => {
                        return Err(anyhow!(
                            "TYPE on {}: {}",
                            node.name,
                            reply.error().unwrap_or("unexpected reply")
                        ));
                    }
                    None => {}
                }
            }
            if !object_was_skipped {
                match replies.next() {
                    Some(Reply::Bulk(Some(bytes))) => {
                        s.encoding = Some(String::from_utf8_lossy(&bytes).into_owned())
                    }
                    Some(reply) => {
                        if let Some(text) = refused(&reply) {
                            self.refuse(
                                "OBJECT ENCODING",
                                text,
                                "encodings (a collection of over 512 elements is taken to have its type's large encoding)",
                            );
                            *skip_object = true;
                        }
                    }
                    None => {}
                }
            }
            match replies.next() {
                Some(Reply::Integer(-2)) => s.gone = true,
                Some(Reply::Integer(ms)) if ms >= 0 => s.ttl_ms = Some(ms as u64),
                Some(reply) => {
                    if let Some(text) = refused(&reply) {
                        return Err(anyhow!("PTTL on {} is refused: {text}", node.name));
                    }
                }
                None => {}
            }
            if !memory_was_skipped {
                match replies.next() {
                    Some(Reply::Integer(bytes)) if bytes >= 0 => s.memory = Some(bytes as u64),
                    Some(reply) => {
                        if let Some(text) = refused(&reply) {
                            self.refuse(
                                "MEMORY USAGE",
                                text,
                                "each key's bytes (STRLEN stands in for a string's)",
                            );
                            *skip_memory = true;
                        }
                    }
                    None => {}
                }
            }
            seen.push(s);
        }
        // The counts, by type.
        let mut second = Batch::default();
        let mut asked = Vec::new();
        for (index, (key, s)) in keys.iter().zip(&seen).enumerate() {
            if let (false, Some(kind)) = (s.gone, s.kind) {
                second.push(&[kind.count_command().as_bytes(), key]);
                asked.push(index);
            }
        }
        let (counts, second_us) = if second.is_empty() {
            (Vec::new(), 0)
        } else {
            pipeline(conn, &second, timed)?
        };
        let mut elements = vec![None; keys.len()];
        let mut changed = 0u64;
        for (index, reply) in asked.into_iter().zip(counts) {
            match reply {
                // A hash, list, set or sorted set is never empty: a count of 0 is a key gone
                // (expired, deleted) since the first round trip. (A stream can be empty.)
                Reply::Integer(0)
                    if seen[index]
                        .kind
                        .is_some_and(|k| !matches!(k.name(), "string" | "stream")) =>
                {
                    seen[index].gone = true;
                    changed += 1;
                }
                Reply::Integer(n) if n >= 0 => elements[index] = Some(n as u64),
                Reply::Error(text) if text.starts_with("WRONGTYPE") => {
                    // Deleted and written again as another type since its TYPE was read: the
                    // first round trip's figures are of a key that is no more.
                    seen[index].gone = true;
                    changed += 1;
                }
                other => {
                    if let Some(text) = refused(&other) {
                        let kind = seen[index].kind.map_or("?", |k| k.count_command());
                        self.refuse(kind, text, "that type's element counts");
                    }
                }
            }
        }
        let now_ms = now_unix_ms();
        let mut rows = Vec::new();
        let mut others: Vec<(String, Option<u64>)> = Vec::new();
        for ((key, s), count) in keys.iter().zip(seen).zip(elements) {
            if s.gone {
                continue;
            }
            let Some(kind) = s.kind else {
                if let Some(name) = s.other_type {
                    others.push((name, s.memory));
                }
                continue;
            };
            // Encoding unknown (OBJECT refused): a value of more elements than any default
            // listpack or intset holds has its kind's large encoding; a smaller one is left
            // unknown (it prices as one allocation, which such a value mostly is). The ACL
            // trial's 100k-field hash was priced as one allocation: 0.5 ms against 26.5.
            let encoding = s.encoding.or_else(|| {
                count
                    .is_some_and(|n| n > LARGEST_COMPACT_ELEMENTS)
                    .then(|| kind.large_encoding().to_string())
            });
            let shape = KeyShape {
                kind,
                encoding,
                elements: count,
                memory_bytes: s.memory,
            };
            let prediction = predict(&self.spec.model, &shape, &node.lazyfree);
            rows.push(KeyRow::new(
                &node.name,
                key,
                &shape,
                s.ttl_ms,
                now_ms,
                &prediction,
            ));
        }
        let mut written = 0;
        if let Some(csv) = self.csv.as_mut() {
            let threshold_ms = self.spec.threshold_us as f64 / 1e3;
            for row in &rows {
                let bytes = row.memory_bytes.or(if row.kind == "string" {
                    row.elements
                } else {
                    None
                });
                // Bytes unknown (MEMORY refused): the floor cannot be judged, so a key whose
                // predicted freeze passes the threshold is written, not left out.
                let kept = match bytes {
                    Some(bytes) => bytes >= self.spec.size_floor_bytes,
                    None => row.worst_ms.is_none_or(|ms| ms >= threshold_ms),
                };
                if kept {
                    csv.push(row)?;
                    written += 1;
                }
            }
            csv.flush()?;
        }
        self.shared
            .keys_scanned
            .fetch_add((rows.len() + others.len()) as u64, Ordering::Relaxed);
        if let Ok(mut state) = self.shared.state.lock() {
            for row in &rows {
                state.tally.add(row);
            }
            state.rows_written += written;
            state.changed += changed;
            for (name, bytes) in others {
                let entry = state.other_types.entry(name).or_insert((0, None));
                entry.0 += 1;
                entry.1 = entry.1.max(bytes);
            }
        }
        Ok(first_us.max(second_us))
    }

    /// Notes a refused command once: the scan goes on without `missing`.
    fn refuse(&self, command: &str, text: &str, missing: &str) {
        if let Ok(mut state) = self.shared.state.lock()
            && !state.refused.iter().any(|(c, _)| c == command)
        {
            state.refused.push((
                command.to_string(),
                format!(
                    "the server refuses {command} ({}): the scan goes on without {missing}",
                    text.lines().next().unwrap_or(text)
                ),
            ));
        }
    }
}

/// SCAN's reply: the next cursor and the keys.
fn parse_scan(reply: &Reply) -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
    match reply {
        Reply::Array(Some(parts)) if parts.len() == 2 => {
            let cursor = match &parts[0] {
                Reply::Bulk(Some(c)) => c.clone(),
                other => return Err(anyhow!("unexpected cursor {other:?}")),
            };
            let keys = match &parts[1] {
                Reply::Array(Some(keys)) => keys
                    .iter()
                    .filter_map(|k| match k {
                        Reply::Bulk(Some(bytes)) => Some(bytes.clone()),
                        _ => None,
                    })
                    .collect(),
                other => return Err(anyhow!("unexpected keys {other:?}")),
            };
            Ok((cursor, keys))
        }
        Reply::Error(text) => Err(anyhow!("{text}")),
        other => Err(anyhow!("unexpected reply {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_scans_own_marker_and_the_registry_are_not_the_users_keys() {
        let registry = crate::session::marker::registry_key(None);
        let is_own_bookkeeping =
            |key: &[u8], prefix| super::is_own_bookkeeping(key, prefix, &registry);
        let prefix = "holprobe:1234abcd:";
        assert!(is_own_bookkeeping(b"holprobe:1234abcd:marker", prefix));
        assert!(is_own_bookkeeping(b"holprobe:1234abcd:lease", prefix));
        assert!(is_own_bookkeeping(b"holprobe:markers", prefix));
        assert!(is_own_bookkeeping(b"holprobe:markers:{hp3}", prefix));
        // Another run's keys and the load keyspace are data on the server like any other.
        assert!(!is_own_bookkeeping(b"holprobe:99999999:marker", prefix));
        assert!(!is_own_bookkeeping(b"holprobe:load:17", prefix));
        assert!(!is_own_bookkeeping(b"big:hash", prefix));
        assert!(!is_own_bookkeeping(b"holprobe:markersx", prefix));
    }
}
