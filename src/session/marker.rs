//! A run's way back after `kill -9`: before it changes a setting or writes a value on someone
//! else's server, a run writes a marker key under its own prefix (`holprobe:<run-id>:marker`)
//! saying what it will leave there (its keys, each setting it changes with the value before),
//! and a lease beside it (`holprobe:<run-id>:lease`, `PX` [`LEASE`]) that a thread of its own
//! renews every [`RENEW_EVERY`] while the run lives. Both are named in a registry set
//! (`holprobe:markers`, with the run's hash tag on a cluster so that all three share a slot),
//! so that finding them needs no SCAN of the server's keyspace.
//!
//! A run that ends by any other way than `kill -9` (or a lost server) removes its keys, puts the
//! settings back and then its marker. The next run against the same server and `probe clean`
//! look at every marker of the registry: one whose lease lapsed belongs to a run that died
//! without cleaning up, and is reclaimed ([`reclaim_dead_runs`]): its settings restored where
//! they still hold the value the dead run set (where someone changed one since, it is left as it
//! is, and said), its keys removed, its marker forgotten. A marker whose lease is fresh belongs
//! to a live run and is left alone.
//!
//! The lease lives on the server's clock (a key's expiry), so the tool's and the server's clocks
//! never have to agree.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::KEY_NAMESPACE;
use crate::measure::serverview::{Changed, could_have_changed};
use crate::measure::target::ConnInfo;

/// How long a marker's lease lasts without renewal: a run frozen longer than this (or its
/// server) may be taken for dead, so it is several renewals long.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often a live run renews its lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long a run waits for each step of its marker before it leaves the marker to its lease
/// thread (which writes it again, within the reply limit) and goes on: a server whose writes
/// are paused (`CLIENT PAUSE WRITE`) holds it, and would hold the run's start with it (the
/// run's own first write is held as well, and measured so).
pub const MARKER_WAIT: Duration = Duration::from_millis(100);

/// The registry of markers on the server (with `{tag}` on a cluster: the run's shard).
pub fn registry_key(tag: Option<&str>) -> String {
    match tag {
        Some(tag) => format!("{KEY_NAMESPACE}:markers:{{{tag}}}"),
        None => format!("{KEY_NAMESPACE}:markers"),
    }
}

/// The marker key of a run whose keys start with `key_prefix`.
pub fn marker_key(key_prefix: &str) -> String {
    format!("{key_prefix}marker")
}

/// The lease key of a run whose keys start with `key_prefix`.
pub fn lease_key(key_prefix: &str) -> String {
    format!("{key_prefix}lease")
}

/// What a marker holds (JSON): everything a later run needs to undo this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMarker {
    /// The run's id.
    pub run_id: String,
    /// The prefix of every key the run creates.
    pub key_prefix: String,
    /// The keys the run may create (deleting one never made does nothing).
    pub keys: Vec<String>,
    /// Every setting the run changes: its value before, the value the run sets.
    pub settings: Vec<MarkedSetting>,
    /// When the run started, Unix seconds (the tool's clock; for messages only).
    pub started_unix_s: i64,
    /// The host the tool ran on.
    pub host: String,
    /// The tool's process id there.
    pub pid: u32,
    /// This machine's seal of the rest ([`super::seal`]): a later run restores the marker's
    /// settings only where it verifies. Absent where the machine had no key to seal with.
    /// Sealed is the JSON of the other fields as this struct writes them, so a field added to
    /// the struct later makes the markers of versions before it read as unsealed (their
    /// settings then said, not restored): add one with care.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
    /// The server's `run_id` (INFO server) when the marker was written: the settings it names
    /// are that server process's (CONFIG SET is neither replicated nor kept over a restart),
    /// so a marker read on another server (a copy, or the slot's new master after a failover)
    /// or after a restart has none of its settings to put back there. Sealed with the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_run_id: Option<String>,
}

impl RunMarker {
    /// The marker's JSON without its seal: what the seal is made of.
    fn unsealed_json(&self) -> String {
        let mut bare = self.clone();
        bare.seal = None;
        serde_json::to_string(&bare).expect("a marker encodes as JSON")
    }

    /// Seals the marker with this machine's key, and records its run here as not ended; why
    /// not where there is no key or no record.
    pub fn seal(&mut self) -> Result<(), String> {
        super::seal::record_run(&self.run_id)?;
        self.seal = Some(super::seal::seal(&self.unsealed_json())?);
        Ok(())
    }

    /// Whether this machine sealed the marker and its run has not ended (nor been undone).
    pub fn sealed_here(&self) -> bool {
        self.sealed_by_this_machine() && super::seal::run_recorded(&self.run_id)
    }

    fn sealed_by_this_machine(&self) -> bool {
        self.seal
            .as_deref()
            .is_some_and(|seal| super::seal::verify(&self.unsealed_json(), seal))
    }
}

/// A setting a run changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkedSetting {
    /// Setting name.
    pub name: String,
    /// Its value before the run, as CONFIG GET returned it.
    pub old: String,
    /// The value the run sets.
    pub new: String,
}

impl From<&Changed> for MarkedSetting {
    fn from(c: &Changed) -> Self {
        MarkedSetting {
            name: c.name.clone(),
            old: c.old.clone(),
            new: c.new.clone(),
        }
    }
}

/// A live run's marker: its lease renewed by a thread until the run is over. Dropping it stops
/// the renewal (the lease then lapses by itself) but leaves the marker: only [`Self::remove`]
/// removes it, once the run has undone what the marker says.
pub struct MarkerGuard {
    run_id: String,
    conn: ConnInfo,
    marker: String,
    lease: String,
    registry: String,
    stop: Arc<AtomicBool>,
    renewer: Option<JoinHandle<()>>,
}

impl MarkerGuard {
    /// Writes `marker` (with its lease, in its registry) on `conn`'s server in one
    /// transaction, and starts renewing the lease.
    pub fn write(conn: &ConnInfo, tag: Option<&str>, marker: &RunMarker) -> Result<MarkerGuard> {
        let json = serde_json::to_string(marker).context("encoding the run's marker")?;
        let marker_key = marker_key(&marker.key_prefix);
        let lease = lease_key(&marker.key_prefix);
        let registry = registry_key(tag);
        let mut control = conn.redis_connection()?;
        let wait = conn.command_timeout.min(MARKER_WAIT);
        control
            .set_read_timeout(Some(wait))
            .context("setting the read timeout")?;
        // One command at a time, in an order where a kill between two leaves nothing that
        // lasts: a registry entry without its marker is forgotten by the next look, a lease
        // expires; only the marker, last, makes the run findable.
        let steps = [
            redis::cmd("SADD").arg(&registry).arg(&marker_key).clone(),
            redis::cmd("SET")
                .arg(&lease)
                .arg(marker.pid)
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .clone(),
            redis::cmd("SET").arg(&marker_key).arg(&json).clone(),
        ];
        let mut held = false;
        for step in &steps {
            match step.query::<redis::Value>(&mut control) {
                Ok(_) => {}
                // Held (writes paused, or a slow link): the lease thread writes every step
                // again (each is idempotent) before it first renews the lease.
                Err(err) if crate::measure::target::is_timeout(&err) => {
                    held = true;
                    break;
                }
                Err(err) => {
                    return Err(anyhow::Error::from(err))
                        .with_context(|| format!("writing the run's marker {marker_key}"));
                }
            }
        }
        drop(control);
        let later = if held { steps.to_vec() } else { Vec::new() };
        let stop = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (conn, lease, stop) = (conn.clone(), lease.clone(), Arc::clone(&stop));
            let pid = marker.pid;
            std::thread::Builder::new()
                .name("marker-lease".into())
                .spawn(move || renew(&conn, &lease, pid, later, &stop))
                .context("starting the marker's lease thread")?
        };
        Ok(MarkerGuard {
            run_id: marker.run_id.clone(),
            conn: conn.clone(),
            marker: marker_key,
            lease,
            registry,
            stop,
            renewer: Some(renewer),
        })
    }

    /// The marker's key.
    pub fn key(&self) -> &str {
        &self.marker
    }

    /// Stops the renewal and removes the marker, its lease and its registry entry: the run has
    /// undone everything the marker says.
    pub fn remove(mut self) -> Result<()> {
        self.stop_renewing();
        // The marker first: once it is gone the run is no longer found, whatever stays. UNLINK
        // where DEL is renamed away, as the run's keys.
        let keys = [self.marker.clone(), self.lease.clone()];
        self.on_marker_slot(|control| {
            crate::measure::target::unlink_or_del(control, &keys)?;
            Ok(())
        })?;
        let srem = redis::cmd("SREM")
            .arg(&self.registry)
            .arg(&self.marker)
            .clone();
        self.on_marker_slot(|control| {
            srem.query::<redis::Value>(control)?;
            Ok(())
        })?;
        // The run has undone everything: a copy of its marker is not acted on.
        super::seal::forget_run(&self.run_id);
        Ok(())
    }

    /// Runs `step` on the server that holds the marker's slot, following it there: a cluster
    /// that failed over during the run serves the slot elsewhere now.
    fn on_marker_slot(
        &mut self,
        step: impl Fn(&mut redis::Connection) -> Result<()>,
    ) -> Result<()> {
        let (_, at) = super::on_slot_owner(&self.conn, |conn| step(&mut conn.redis_connection()?))
            .with_context(|| {
                format!("removing the run's marker {} on {}", self.marker, self.conn)
            })?;
        self.conn = at;
        Ok(())
    }

    /// Stops the renewing thread; waits for it only briefly (it may be waiting on a frozen
    /// server, within the reply limit: it ends by itself then).
    fn stop_renewing(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = self.renewer.take() {
            handle.thread().unpark();
            let deadline = Instant::now() + Duration::from_millis(200);
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for MarkerGuard {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

/// The renewing thread: first the marker's steps the server held (`later`), then `SET lease
/// pid PX LEASE` every [`RENEW_EVERY`] until `stop`, on a connection made again after any
/// failure.
fn renew(conn: &ConnInfo, lease: &str, pid: u32, mut later: Vec<redis::Cmd>, stop: &AtomicBool) {
    let mut conn = conn.clone();
    let mut control: Option<redis::Connection> = None;
    let mut first = !later.is_empty();
    loop {
        let wake = Instant::now() + if first { Duration::ZERO } else { RENEW_EVERY };
        first = false;
        // Parked till then: the stop unparks it.
        if crate::measure::park_until(wake, stop) {
            return;
        }
        if control.is_none() {
            control = conn.redis_connection().ok();
        }
        let Some(c) = control.as_mut() else {
            continue;
        };
        if !later.is_empty() {
            match later
                .iter()
                .try_for_each(|step| step.query::<redis::Value>(c).map(drop))
            {
                Ok(()) => later.clear(),
                Err(_) => control = None,
            }
            continue;
        }
        let renewed = redis::cmd("SET")
            .arg(lease)
            .arg(pid)
            .arg("PX")
            .arg(LEASE.as_millis() as u64)
            .query::<()>(c);
        if let Err(err) = renewed {
            // A cluster failed over: the lease's slot is served elsewhere now.
            if let Some((address, _)) = err.redirect_node()
                && let Ok(moved) = conn.for_node(address)
            {
                conn = moved;
            }
            control = None;
        }
    }
}

/// What became of one marker found on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A dead run's marker, reclaimed: what was done, in words.
    Reclaimed {
        /// The dead run's id.
        run_id: String,
        /// One line saying what was restored, removed and left.
        line: String,
    },
    /// A live run's marker (its lease is fresh), left alone.
    Live {
        /// The live run's id.
        run_id: String,
        /// One line saying so.
        line: String,
    },
    /// A dead run's marker, found by a command that changes nothing ([`dead_runs`]): left.
    Dead {
        /// Its run id.
        run_id: String,
        /// One line saying so.
        line: String,
    },
    /// A registry member that is no run marker of the tool's, or one that does not read as
    /// one: left alone.
    Unreadable {
        /// The member's key.
        key: String,
        /// One line saying so.
        line: String,
    },
}

impl Found {
    /// The same, said to be in database `db`.
    fn in_db(self, db: i64) -> Found {
        let said = |line: String| format!("db {db}: {line}");
        match self {
            Found::Reclaimed { run_id, line } => Found::Reclaimed {
                run_id,
                line: said(line),
            },
            Found::Live { run_id, line } => Found::Live {
                run_id,
                line: said(line),
            },
            Found::Dead { run_id, line } => Found::Dead {
                run_id,
                line: said(line),
            },
            Found::Unreadable { key, line } => Found::Unreadable {
                key,
                line: said(line),
            },
        }
    }

    /// The line to print.
    pub fn line(&self) -> &str {
        match self {
            Found::Reclaimed { line, .. }
            | Found::Live { line, .. }
            | Found::Dead { line, .. }
            | Found::Unreadable { line, .. } => line,
        }
    }
}

/// Looks at every marker in the registry of `conn`'s server (`tag`: a cluster shard's hash tag)
/// and reclaims the dead runs' (see the module comment). A registry entry whose marker is gone
/// is forgotten silently; a marker that does not read as one is reported and left.
pub fn reclaim_dead_runs(conn: &ConnInfo, tag: Option<&str>) -> Result<Vec<Found>> {
    look_at_markers(conn, tag, true)
}

/// What [`reclaim_dead_runs`] would find, changing nothing: a dead run's marker is said
/// ([`Found::Dead`]), with what `probe clean` would undo, and left.
pub fn dead_runs(conn: &ConnInfo, tag: Option<&str>) -> Result<Vec<Found>> {
    look_at_markers(conn, tag, false)
}

/// The markers of every database of the server that holds keys, `conn`'s own first: a run's
/// marker lies in the database its `--url` named, while the settings it changed are the
/// whole server's (trial 37, J3: a run on `/3` killed with -9 was invisible to `probe clean`
/// on db 0, which said "none left" with the settings still changed). A cluster has db 0 only.
fn look_at_markers(conn: &ConnInfo, tag: Option<&str>, reclaim_them: bool) -> Result<Vec<Found>> {
    let mut found = look_at_markers_in(conn, tag, reclaim_them)?;
    if tag.is_some() {
        return Ok(found);
    }
    let mut control = conn.redis_connection()?;
    let Ok(info) = redis::cmd("INFO")
        .arg("keyspace")
        .query::<String>(&mut control)
    else {
        return Ok(found);
    };
    let others: Vec<i64> = info
        .lines()
        .filter_map(|line| line.strip_prefix("db")?.split_once(':')?.0.parse().ok())
        .filter(|&db| db != conn.db)
        .collect();
    for db in others {
        let mut other = conn.clone();
        other.db = db;
        // A server that refuses SELECT (or a proxy with one database) has nothing more to show.
        let Ok(more) = look_at_markers_in(&other, tag, reclaim_them) else {
            continue;
        };
        found.extend(more.into_iter().map(|f| f.in_db(db)));
    }
    Ok(found)
}

fn look_at_markers_in(
    conn: &ConnInfo,
    tag: Option<&str>,
    reclaim_them: bool,
) -> Result<Vec<Found>> {
    let registry = registry_key(tag);
    let mut control = conn.redis_connection()?;
    let markers: Vec<String> = redis::cmd("SMEMBERS")
        .arg(&registry)
        .query(&mut control)
        .with_context(|| format!("reading the run markers ({registry}) of {conn}"))?;
    let mut found = Vec::new();
    for key in markers {
        // Only the tool's own markers are read or forgotten: a member that is not one names
        // someone else's key (the hostile trial's own set under this name lost its member).
        if !(key.starts_with(&format!("{KEY_NAMESPACE}:")) && key.ends_with(":marker")) {
            found.push(Found::Unreadable {
                key: key.clone(),
                line: format!(
                    "left {key} in {registry} alone: it is not a run marker of the tool's"
                ),
            });
            continue;
        }
        let text: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query(&mut control)
            .with_context(|| format!("reading the run marker {key}"))?;
        let Some(text) = text else {
            let _: i64 = redis::cmd("SREM")
                .arg(&registry)
                .arg(&key)
                .query(&mut control)?;
            continue;
        };
        let marker: RunMarker = match serde_json::from_str(&text) {
            Ok(marker) => marker,
            Err(err) => {
                found.push(Found::Unreadable {
                    key: key.clone(),
                    line: format!("left {key} alone: it does not read as a run marker ({err})"),
                });
                continue;
            }
        };
        // Only what the tool itself writes in a marker is acted on: anyone who may write a
        // key under the namespace could plant one (the hostile trial's marker named the owner's
        // keys and `maxmemory 1`, and the next run deleted the one and set the other).
        if let Err(reason) = check_marker(&key, &marker) {
            found.push(Found::Unreadable {
                key: key.clone(),
                line: format!("left {key} alone: it is not a marker the tool wrote ({reason})"),
            });
            continue;
        }
        let lease = lease_key(&marker.key_prefix);
        let alive: i64 = redis::cmd("EXISTS")
            .arg(&lease)
            .query(&mut control)
            .with_context(|| format!("reading the lease {lease}"))?;
        if alive > 0 {
            // The lease's TTL says when it lapses. Not judged by the pid: another machine may
            // share this host's name (cloud machines are all "vm"), and a run killed a moment
            // ago is only known dead once its lease lapses (the trial read "still running" for
            // a run killed with -9).
            let left_ms: i64 = redis::cmd("PTTL")
                .arg(&lease)
                .query(&mut control)
                .unwrap_or(-1);
            found.push(Found::Live {
                run_id: marker.run_id.clone(),
                line: format!(
                    "left run {} alone: its lease is fresh (pid {} on {}): it is running, or stopped less than {} s ago{}",
                    marker.run_id,
                    marker.pid,
                    marker.host,
                    LEASE.as_secs(),
                    if left_ms > 0 {
                        format!(" (the lease lapses in {:.1} s; run `probe clean` again then)", left_ms as f64 / 1e3)
                    } else {
                        String::new()
                    }
                ),
            });
            continue;
        }
        if reclaim_them {
            found.push(reclaim(&mut control, &registry, &key, &marker)?);
        } else {
            let settings: Vec<String> = marker
                .settings
                .iter()
                .map(|s| format!("{} {} (it was {})", s.name, shown(&s.new), shown(&s.old)))
                .collect();
            found.push(Found::Dead {
                run_id: marker.run_id.clone(),
                line: format!(
                    "run {} (pid {} on {}) ended without cleaning up: it may have left {} key(s) under {}{}; this command changes nothing, `probe clean` undoes it{}",
                    marker.run_id,
                    marker.pid,
                    marker.host,
                    marker.keys.len(),
                    marker.key_prefix,
                    if settings.is_empty() {
                        String::new()
                    } else {
                        format!(" and set {}", settings.join(", "))
                    },
                    if settings.is_empty() || marker.sealed_here() {
                        String::new()
                    } else {
                        format!(
                            " (its keys; its settings it only says, since this machine did not seal the marker: {})",
                            unsealed_why(&marker)
                        )
                    }
                ),
            });
        }
    }
    Ok(found)
}

/// The settings a run may change on a server it did not start, and so name in its marker: the
/// server view's ([`crate::measure::serverview`]: the slow log, the LATENCY monitor, keyspace
/// notifications). A marker naming another setting was not written by the tool.
pub const MARKED_SETTINGS: [&str; 4] = [
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "notify-keyspace-events",
];

/// Whether the marker read from `key` is shaped as the tool writes one: its prefix
/// `holprobe:<8 hex digits>:` (with a `{tag}:` on a cluster) under which its own key, its lease
/// and every key it lists lie, and settings of [`MARKED_SETTINGS`] only. Else why not. Each
/// setting's values are judged on their own ([`setting_doubt`]).
pub fn check_marker(key: &str, marker: &RunMarker) -> Result<(), String> {
    let prefix = &marker.key_prefix;
    let id_ok = marker.run_id.len() == 8 && marker.run_id.chars().all(|c| c.is_ascii_hexdigit());
    let base = format!("{KEY_NAMESPACE}:{}:", marker.run_id);
    let tail = prefix.strip_prefix(&base);
    let tag_ok = match tail {
        Some("") => true,
        Some(tail) => {
            tail.starts_with('{')
                && tail.ends_with("}:")
                && tail[1..tail.len() - 2]
                    .chars()
                    .all(|c| c != '{' && c != '}')
        }
        None => false,
    };
    if !(id_ok && tag_ok) {
        return Err(format!("its key prefix {prefix:?} is not a run's"));
    }
    if key != marker_key(prefix) {
        return Err(format!("it does not lie under its own prefix {prefix:?}"));
    }
    if let Some(outside) = marker.keys.iter().find(|k| !k.starts_with(prefix.as_str())) {
        return Err(format!("it lists a key outside its prefix, {outside:?}"));
    }
    if let Some(setting) = marker
        .settings
        .iter()
        .find(|s| !MARKED_SETTINGS.contains(&s.name.as_str()))
    {
        return Err(format!(
            "it names a setting the tool never changes, {}",
            setting.name
        ));
    }
    Ok(())
}

/// Why a marked setting is not one this version of the tool could have changed
/// ([`could_have_changed`]: its new value what a run sets where it reads the old, so what is
/// put back only logs or notifies less than the marker's new value); `None` where it is.
pub fn setting_doubt(setting: &MarkedSetting) -> Option<String> {
    (!could_have_changed(&setting.name, &setting.old, &setting.new)).then(|| {
        format!(
            "no run sets {} to {} where it reads {}",
            setting.name,
            shown(&setting.new),
            shown(&setting.old)
        )
    })
}

/// Undoes what a dead run's marker says, then forgets the marker.
fn reclaim(
    control: &mut redis::Connection,
    registry: &str,
    key: &str,
    marker: &RunMarker,
) -> Result<Found> {
    let mut said = Vec::new();
    // Only a marker this machine sealed has its settings put back: anyone who may write under
    // the namespace could have planted one whose "old" values are the owner's loss.
    // And only on the server process it was written on (a copy elsewhere, a restart since).
    let here = server_run_id(control);
    let other_server = marker
        .server_run_id
        .as_ref()
        .is_some_and(|written| here.as_ref().is_some_and(|here| here != written));
    let sealed_here = marker.sealed_here();
    let sealed = sealed_here && !other_server;
    // Read once: each is a seal check (and a file's look).
    let why_unsealed = if other_server && sealed_here {
        "it was written on another server process (run_id differs: a copy, a failover or a restart since, which CONFIG SET does not outlive)".to_string()
    } else {
        format!(
            "this machine did not seal the marker ({})",
            unsealed_why(marker)
        )
    };
    // Kept for the machine that sealed it where settings are left for it, unless this one did
    // (a copy of a marker whose run ended here has no one to wait for): deleted, its settings
    // would be lost to that machine too (hostile review of stop 40, F3).
    let another_machines = !marker.sealed_by_this_machine();
    let mut keep_marker = false;
    // In reverse order, as the run itself restores them.
    for setting in marker.settings.iter().rev() {
        let pairs: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(&setting.name)
            .query(control)
            .with_context(|| format!("reading {} to restore it", setting.name))?;
        let Some(current) = pairs.get(1) else {
            continue;
        };
        if same_value(current, &setting.old) {
            said.push(format!(
                "{} already back at {}",
                setting.name,
                shown(&setting.old)
            ));
        } else if !same_value(current, &setting.new) {
            said.push(format!(
                "left {} at {} (the run had set {}, changed since; it was {} before the run)",
                setting.name,
                shown(current),
                shown(&setting.new),
                shown(&setting.old)
            ));
        } else if let Some(doubt) = setting_doubt(setting) {
            said.push(format!(
                "left {} at {} (the marker says the run set it from {}, but {doubt})",
                setting.name,
                shown(current),
                shown(&setting.old)
            ));
        } else if !sealed {
            keep_marker |= another_machines;
            said.push(format!(
                "left {} at {} (the marker says the run set it from {}, but {}, so it is not acted on: `CONFIG SET {} {}` puts it back if that run set it)",
                setting.name,
                shown(current),
                shown(&setting.old),
                why_unsealed,
                setting.name,
                if setting.old.is_empty() { "\"\"".to_string() } else { setting.old.clone() }
            ));
        } else {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(&setting.name)
                .arg(&setting.old)
                .query::<()>(control)
                .with_context(|| {
                    format!("restoring {} to {}", setting.name, shown(&setting.old))
                })?;
            said.push(format!(
                "restored {} {} -> {}",
                setting.name,
                shown(&setting.new),
                shown(&setting.old)
            ));
        }
    }
    let removed: i64 = if marker.keys.is_empty() {
        0
    } else {
        crate::measure::target::unlink_or_del(control, &marker.keys)
            .with_context(|| format!("removing the keys under {}", marker.key_prefix))?
    };
    said.push(format!(
        "removed {removed} of its {} key(s) under {}",
        marker.keys.len(),
        marker.key_prefix
    ));
    if keep_marker {
        said.push(format!(
            "kept its marker for the machine that sealed it (`probe clean` there puts them back; if no run of the tool set them: DEL {key}, SREM {registry} {key})"
        ));
    } else {
        redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(key)
            .ignore()
            .cmd("SREM")
            .arg(registry)
            .arg(key)
            .ignore()
            .query::<()>(control)
            .with_context(|| format!("removing the marker {key}"))?;
        // Undone: a copy of the marker planted again is not acted on.
        if sealed {
            super::seal::forget_run(&marker.run_id);
        }
    }
    Ok(Found::Reclaimed {
        run_id: marker.run_id.clone(),
        line: format!(
            "run {} (pid {} on {}) ended without cleaning up: {}",
            marker.run_id,
            marker.pid,
            marker.host,
            said.join(", ")
        ),
    })
}

/// The server's `run_id` (INFO server), where it says.
pub fn server_run_id(control: &mut redis::Connection) -> Option<String> {
    let info: String = redis::cmd("INFO").arg("server").query(control).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// Why this machine's seal is not on `marker`, in a few words.
fn unsealed_why(marker: &RunMarker) -> String {
    if marker.sealed_by_this_machine() {
        return format!(
            "this machine sealed it, but its run {} ended or was undone before: a copy of an old marker",
            marker.run_id
        );
    }
    match (&marker.seal, super::seal::key_path()) {
        (None, _) => format!("it carries no seal; written on {}", marker.host),
        (Some(_), Some(path)) => format!(
            "its seal is not of this machine's key {}; written on {}",
            path.display(),
            marker.host
        ),
        (Some(_), None) => "this machine has no key to check it with".into(),
    }
}

/// Whether a setting's value as read is the one set: a flags setting
/// (`notify-keyspace-events`) reads back with its letters in the server's order (`Exe` as
/// `xeE`), and with `A` for the type letters where all of them are set (`KAE` set as
/// `Kg$lshzetdEx`). The module letter `d`, in `A` on some versions only, is not compared.
pub(crate) fn same_value(read: &str, set: &str) -> bool {
    let letters = |text: &str| {
        let mut chars: Vec<char> = text
            .chars()
            .flat_map(|c| {
                if c == 'A' {
                    "g$lshzxet".chars().collect()
                } else {
                    vec![c]
                }
            })
            .filter(|&c| c != 'd')
            .collect();
        chars.sort_unstable();
        chars.dedup();
        chars
    };
    read == set || (set.parse::<i64>().is_err() && letters(read) == letters(set))
}

/// A setting's value in a message (`""` for the empty one).
pub(crate) fn shown(value: &str) -> String {
    if value.is_empty() {
        "\"\"".into()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(name: &str, old: &str, new: &str) -> MarkedSetting {
        MarkedSetting {
            name: name.into(),
            old: old.into(),
            new: new.into(),
        }
    }

    fn marker(prefix: &str, keys: &[&str], settings: &[(&str, &str, &str)]) -> RunMarker {
        RunMarker {
            run_id: "0badf00d".into(),
            key_prefix: prefix.into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            settings: settings
                .iter()
                .map(|&(name, old, new)| setting(name, old, new))
                .collect(),
            started_unix_s: 0,
            host: "vm".into(),
            pid: 1,
            seal: None,
            server_run_id: None,
        }
    }

    /// Only a marker the tool could have written is acted on (the hostile trial planted one
    /// that named the owner's keys and `maxmemory 1`).
    #[test]
    fn a_marker_the_tool_did_not_write_is_refused() {
        let p = "holprobe:0badf00d:";
        let ok = marker(
            p,
            &["holprobe:0badf00d:w:1"],
            &[
                ("slowlog-max-len", "128", "16384"),
                ("notify-keyspace-events", "K$", "K$Exe"),
                ("slowlog-log-slower-than", "10000", "0"),
                ("latency-monitor-threshold", "0", "1"),
            ],
        );
        assert_eq!(check_marker("holprobe:0badf00d:marker", &ok), Ok(()));
        let tagged = marker(
            "holprobe:0badf00d:{hp3}:",
            &["holprobe:0badf00d:{hp3}:w:1"],
            &[],
        );
        assert_eq!(
            check_marker("holprobe:0badf00d:{hp3}:marker", &tagged),
            Ok(())
        );
        for (name, old, new) in [
            ("slowlog-max-len", "128", "16384"),
            ("notify-keyspace-events", "K$", "K$Exe"),
            ("slowlog-log-slower-than", "10000", "0"),
            ("latency-monitor-threshold", "0", "1"),
        ] {
            assert_eq!(setting_doubt(&setting(name, old, new)), None, "{name}");
        }
        // What would be put back must log or notify no more than the marker's new value: a log
        // without end, every command logged, every event published.
        for (name, old, new) in [
            ("slowlog-max-len", "1 2", "3"),
            ("slowlog-max-len", "1000000000000", "128"),
            ("slowlog-log-slower-than", "0", "10000"),
            ("latency-monitor-threshold", "1", "100"),
            ("notify-keyspace-events", "KEA", "Exe"),
            ("slowlog-max-len", "128", "1000000"),
        ] {
            let doubt = setting_doubt(&setting(name, old, new)).unwrap();
            assert!(doubt.starts_with(&format!("no run sets {name}")), "{doubt}");
        }
        for (key, bad, why) in [
            (
                "holprobe:0badf00d:marker",
                marker(p, &["owner:precious"], &[]),
                "outside its prefix",
            ),
            (
                "holprobe:0badf00d:marker",
                marker(p, &[], &[("maxmemory", "1", "0")]),
                "never changes, maxmemory",
            ),
            (
                "holprobe:0badf00d:marker",
                marker("holprobe:", &["holprobe:load:1"], &[]),
                "not a run's",
            ),
            (
                "holprobe:0badf00d:marker",
                marker("holprobe:0badf00d:x:", &[], &[]),
                "not a run's",
            ),
            (
                "holprobe:other:marker",
                marker(p, &[], &[]),
                "under its own prefix",
            ),
        ] {
            let err = check_marker(key, &bad).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    /// Every setting a run may change where it writes a marker is one a marker may name.
    #[test]
    fn every_setting_a_run_changes_may_be_marked() {
        use crate::measure::serverview::*;
        for wants in [
            settings_for_key_events(),
            settings_for_writes(),
            settings_for_calibration(),
            settings_for_observing(1000),
        ] {
            for (name, want) in wants {
                assert!(MARKED_SETTINGS.contains(&name), "{name}");
                // What a run sets from any value it may read passes the marker check.
                for old in ["-1", "0", "1", "128", "10000", "", "K$", "AKE", "xE"] {
                    if let Some(new) = want.change_text(old) {
                        assert!(could_have_changed(name, old, &new), "{name} {old} -> {new}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_markers_keys_share_the_runs_slot() {
        assert_eq!(registry_key(None), "holprobe:markers");
        assert_eq!(registry_key(Some("hp3")), "holprobe:markers:{hp3}");
        assert_eq!(marker_key("holprobe:ab:{hp3}:"), "holprobe:ab:{hp3}:marker");
        assert_eq!(lease_key("holprobe:ab:"), "holprobe:ab:lease");
        let slot = crate::measure::slots::key_slot;
        assert_eq!(
            slot(registry_key(Some("hp3")).as_bytes()),
            slot(marker_key("holprobe:ab:{hp3}:").as_bytes())
        );
    }

    #[test]
    fn flags_read_back_in_any_order() {
        assert!(same_value("xeE", "Exe"));
        assert!(same_value("10000", "10000"));
        assert!(!same_value("xE", "Exe"));
        assert!(!same_value("0100", "100"));
        // The server writes every type letter as A.
        assert!(same_value("AKE", "Kg$lshzetEx"));
        assert!(!same_value("AKE", "KgE"));
    }

    #[test]
    fn a_marker_reads_back_as_written() {
        let marker = RunMarker {
            run_id: "0badcafe".into(),
            key_prefix: "holprobe:0badcafe:".into(),
            keys: vec!["holprobe:0badcafe:w0".into()],
            settings: vec![MarkedSetting {
                name: "notify-keyspace-events".into(),
                old: String::new(),
                new: "Exe".into(),
            }],
            started_unix_s: 1,
            host: "h".into(),
            pid: 7,
            seal: None,
            server_run_id: None,
        };
        let text = serde_json::to_string(&marker).unwrap();
        assert!(!text.contains("seal"), "{text}");
        assert_eq!(serde_json::from_str::<RunMarker>(&text).unwrap(), marker);
        assert!(!marker.sealed_here());
    }

    /// A sealed marker verifies on the machine that sealed it, and no longer once anything in
    /// it is changed (a planted copy of a real marker with the owner's values put in).
    #[test]
    fn a_marker_sealed_here_verifies_until_changed() {
        let mut marker = marker(
            "holprobe:0badf00d:",
            &["holprobe:0badf00d:w:1"],
            &[("notify-keyspace-events", "AK", "AKE")],
        );
        if super::super::seal::key_path().is_none() {
            return; // no HOME to keep a key in: nothing is sealed (said by the run)
        }
        marker.run_id = format!("{:08x}", rand::random::<u32>());
        marker.seal().expect("a seal where there is a HOME");
        assert!(marker.sealed_here());
        let text = serde_json::to_string(&marker).unwrap();
        let read: RunMarker = serde_json::from_str(&text).unwrap();
        assert!(read.sealed_here());
        let mut changed = read.clone();
        changed.settings[0].old = "".into();
        assert!(!changed.sealed_here());
        let mut other = read.clone();
        other.seal = Some("00".repeat(32));
        assert!(!other.sealed_here());
        // Once its run is over (or undone), the same sealed marker is a copy: not acted on.
        super::super::seal::forget_run(&read.run_id);
        assert!(!read.sealed_here());
    }
}
