//! The measuring session every command that measures runs through: the main job, observe
//! mode and `probe calibrate` with the probes as their instrument (`probes.rs`), `probe load`
//! with the load generator (`crate::load::runner`). The session owns the run's scope (run id and
//! key prefix, the server-settings guard, the key ledger and its cleanup), the run's clock, the
//! one event channel every thread sends into, the actor's thread (the writer, the stall
//! injector; none to observe), the collector loop, the stop order and the end-of-run reasons.
//! A command supplies only what differs: its actor, and its `Instrument` (what watches the
//! server while the actor acts: its threads, its collector of their events, its exports).
//!
//! # The loop
//! Every event of the channel goes to the instrument, but for the actor's last word (done,
//! failed), which is the session's. About every 50 ms the session reads the actor's
//! [`WriteMark`], drains the channel and has the instrument move its horizon on and file what
//! became final (and write its checkpoint when one is due). The loop ends when the actor is done
//! (unless the run lasts its `--duration` whatever the actor does, as a load does), failed or
//! its thread died, the duration is over, `interrupt` is set, the instrument says its threads
//! cannot go on, or an export cannot be written.
//!
//! # Every way out
//! Whatever ended the loop: the actor is stopped first and its events taken until its thread
//! ends (a write under way is finished and recorded while the instrument still measures, so its
//! figures cover all of it); then the instrument's threads are stopped and joined; then the
//! run's keys are removed while the server is reachable and its settings restored. Only then
//! does the command write its final exports (after an export error, as far as the disk takes
//! them, with run.json `failed`) and return the error, if there was one.

mod context;
pub mod marker;
mod probes;
pub mod seal;
pub(crate) mod sink;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::measure::event::{EventSender, event_channel};
use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, TryRecvError};

use crate::measure::actor::{Actor, ActorContext, WriteMark};
use crate::measure::clock::RunClock;
use crate::measure::event::Event;
use crate::measure::serverview::{ServerTuning, ViewSetup, Want};
use crate::measure::target::{ConnInfo, Target};
use crate::output::export::{HostInfo, RunStatus};
use crate::record::{WriteOp, WriteRecord};

pub use context::{RunContext, RunName, RunSpec};
#[cfg(test)]
pub(crate) use probes::query_buffer_note;
pub use probes::{KEEP_STALLS, Notice, Probed, ProbedNode, RunReport, measure_nodes, spawn_poller};
#[cfg(test)]
#[cfg(test)]
pub(crate) use probes::{cpu_wait_in_stalls_ms, observe_cpu_wait_note};
pub(crate) use probes::{cpu_wait_note, late_probe_note};

/// Prefix of every key the tool creates.
pub const KEY_NAMESPACE: &str = "holprobe";

/// A new run id: 8 hex digits, random.
pub fn new_run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// The prefix of every key a run creates, `holprobe:<run-id>:` (load mode's writer too).
pub fn run_key_prefix(run_id: &str) -> String {
    format!("{KEY_NAMESPACE}:{run_id}:")
}

/// How a run ended: its status, and the reason run.json's `status_reason` gives.
pub(crate) type EndOfRun = (RunStatus, Option<String>);

/// Ctrl-C or SIGTERM (every command says it in the same words).
pub(crate) fn interrupted_by_signal() -> EndOfRun {
    (
        RunStatus::Interrupted,
        Some("interrupted by a signal (Ctrl-C or SIGTERM)".into()),
    )
}

/// `--duration` ran out while the writer still had writes to make.
pub(crate) fn duration_before_plan() -> EndOfRun {
    (
        RunStatus::Interrupted,
        Some("--duration ended before the writer's plan".into()),
    )
}

/// The end an actor's (the writer's) last event says: done, or failed; `None` for any other
/// event.
pub(crate) fn actor_end(event: &Event) -> Option<EndOfRun> {
    match event {
        Event::WriterDone => Some((RunStatus::Complete, None)),
        // Each actor words its own failure (the writer's, the key scan's, the injector's).
        Event::WriterFailed(error) => Some((RunStatus::Failed, Some(error.clone()))),
        Event::Probe(_)
        | Event::Write(_)
        | Event::Memory(_)
        | Event::ServerLog(_)
        | Event::NodeState { .. }
        | Event::Skipped { .. }
        | Event::Topology { .. }
        | Event::Load(_) => None,
    }
}

/// What a run holds from its first contact with the server to its last, for every command
/// (the probes' commands and load mode): the guard of the server settings it changed, and the
/// ledger of the keys it may create (under its [`RunName`]'s prefix).
pub(crate) struct RunScope {
    /// The run's keys still on the server.
    pub keys: KeyLedger,
    /// The settings changed for the run, restored on every way out.
    pub tuning: ServerTuning,
    /// What opening the scope had to say (settings changed or left alone, dead runs' markers
    /// reclaimed).
    pub warnings: Vec<String>,
    /// The run's marker on the server, its way back after a `kill -9` (none on the embedded
    /// server, which dies with the tool, nor when the run changes nothing there).
    marker: Option<marker::MarkerGuard>,
    /// Where the keys and settings are, and the keys' prefix (for the drop's safety net and the
    /// cleanup's messages; the run's name itself is the session's).
    conn: ConnInfo,
    key_prefix: String,
    /// [`Self::close`] was called: the run's own cleanup is over, whatever it achieved.
    closed: bool,
    /// The server is the one the tool started (it goes with the run: nothing to restore).
    embedded: bool,
    /// Set when the cleanup could not restore the settings (see [`Self::left_changed`]).
    left_changed: Option<String>,
}

impl RunScope {
    /// The server's settings tuned toward `wants` (changed only when `may_tune`); then the
    /// actor prepared under the run's new prefix (`prepare`, once: it names the keys the run
    /// will create) and every key it names checked free (the prefix is new by
    /// construction: still, the run never touches a key that is already there) and put in the
    /// ledger from the start, so that one written by a thread that dies before reporting it is
    /// still removed (DEL of a key never made does nothing).
    pub fn open(
        target: &Target,
        name: &RunName,
        wants: &[(&str, Want)],
        may_tune: bool,
        reclaim: bool,
        prepare: impl FnOnce(&str) -> Result<Vec<String>>,
    ) -> Result<RunScope> {
        let (run_id, key_prefix) = (&name.run_id, &name.key_prefix);
        let tag = name.hash_tag.as_deref();
        let mut warnings = Vec::new();
        // A run killed before it could clean up left a marker: undone before this run reads
        // the settings (it would take the dead run's for the server's own).
        let marked = !target.server.embedded;
        if marked {
            let found = if reclaim {
                marker::reclaim_dead_runs(&target.conn, tag)
            } else {
                marker::dead_runs(&target.conn, tag)
            };
            match found {
                // A live run's is said too: the settings it changed are in effect for this
                // run, which reads them as the server's own (a run started within 10 s of a
                // kill -9 said nothing and ran on the dead run's settings).
                Ok(found) => warnings.extend(found.iter().map(|f| match f {
                    marker::Found::Reclaimed { line, .. } => line.clone(),
                    marker::Found::Live { line, .. } => format!(
                        "{line}; another run of the tool on this server at the same time: any setting it changed is in effect for this run too, and this run's figures share the server with its writes"
                    ),
                    marker::Found::Unreadable { line, .. } | marker::Found::Dead { line, .. } => {
                        line.clone()
                    }
                })),
                Err(err) => warnings.push(format!(
                    "could not look for the markers of runs that died: {}",
                    crate::error::one_line(&err)
                )),
            }
            warnings.extend(naming_refused(&target.conn, &name.run_id));
        }
        let own_keys = prepare(key_prefix)?;
        let mut keys = KeyLedger::default();
        if !own_keys.is_empty() {
            let mut control = target.conn.redis_connection()?;
            let existing: i64 = redis::cmd("EXISTS")
                .arg(&own_keys)
                .query(&mut control)
                .context("checking that the run's keys are free")?;
            anyhow::ensure!(
                existing == 0,
                "{existing} key(s) under {key_prefix} already exist on the server: refusing to touch them"
            );
            for key in &own_keys {
                keys.created(key);
            }
        }
        // The marker first, then the settings: a kill at any moment after leaves a way back.
        let mut guard = None;
        let mut marker_error = None;
        let mut seal_error = None;
        let mut tuning = ServerTuning::apply_after(&target.conn, wants, may_tune, |planned| {
            if !marked || (planned.is_empty() && own_keys.is_empty()) {
                return;
            }
            let mut marker = marker::RunMarker {
                run_id: run_id.clone(),
                key_prefix: key_prefix.clone(),
                keys: own_keys.clone(),
                settings: planned.iter().map(marker::MarkedSetting::from).collect(),
                started_unix_s: crate::measure::serverview::unix_now_s(),
                host: sysinfo::System::host_name().unwrap_or_else(|_| "an unknown host".into()),
                pid: std::process::id(),
                seal: None,
                server_run_id: target
                    .conn
                    .redis_connection()
                    .ok()
                    .and_then(|mut control| marker::server_run_id(&mut control)),
            };
            if let Err(why) = marker.seal()
                && !planned.is_empty()
            {
                seal_error = Some(why);
            }
            match marker::MarkerGuard::write(&target.conn, tag, &marker) {
                Ok(written) => guard = Some(written),
                // A replica takes no key: the run writes none there either, and changes no
                // setting, so there is nothing to leave a way back from.
                Err(err) if planned.is_empty() && format!("{err:#}").contains("READONLY") => {
                    seal::forget_run(run_id);
                }
                Err(err) => {
                    seal::forget_run(run_id);
                    marker_error = Some(err);
                }
            }
        });
        warnings.append(&mut tuning.notes);
        if let Some(why) = seal_error {
            warnings.push(format!(
                "this machine has no key to seal the run's marker with ({why}): if the run is killed, the next one removes its keys but only says which settings to put back"
            ));
        }
        if let Some(err) = marker_error {
            warnings.push(format!(
                "no marker for this run ({}): if it is killed, its keys and settings stay on the server",
                crate::error::one_line(&err)
            ));
        }
        Ok(RunScope {
            keys,
            tuning,
            warnings,
            marker: guard,
            conn: target.conn.clone(),
            key_prefix: key_prefix.clone(),
            closed: false,
            embedded: target.server.embedded,
            left_changed: None,
        })
    }

    /// What the run's cleanup could not put back on the server (its settings), in a few words:
    /// such a run did not end well, whatever it measured.
    pub fn left_changed(&self) -> Option<&str> {
        self.left_changed.as_deref()
    }

    /// Once the keys are removed and the settings restored: removes the run's marker (kept
    /// while either is left, so that the next run or `probe clean` finishes the job).
    pub fn close(&mut self, warnings: &mut Vec<String>) {
        self.closed = true;
        if !self.keys.is_empty() || !self.tuning.changed().is_empty() {
            return;
        }
        if let Some(guard) = self.marker.take()
            && let Err(err) = guard.remove()
        {
            warnings.push(format!("could not remove the run's marker: {err:#}"));
        }
    }

    /// The settings changed, as `name old -> new`.
    pub fn server_settings(&self) -> Vec<String> {
        self.tuning
            .changed()
            .iter()
            .map(|c| {
                format!(
                    "{} {} -> {}",
                    c.name,
                    marker::shown(&c.old),
                    marker::shown(&c.new)
                )
            })
            .collect()
    }

    /// The run's own cleanup, within one reply limit (`--timeout`) and a second, so that a
    /// server that stopped answering ends the run about one limit after the probes said so: the
    /// keys left ([`KeyLedger::remove_all`], two tries in that limit), then the settings with
    /// what is left of it, and never less than a second or the whole limit where that is
    /// shorter ([`RESTORE_AT_LEAST`]: a DEL that took the whole limit on a server still
    /// answering leaves it the time to put them back). What could not be done is a warning, and
    /// stays in the run's marker for the next run or `probe clean`. The keys of other shards
    /// (a cluster's GET probes') are removed meanwhile, each server within its own limit.
    pub fn clean_up(&mut self, target: &Target, warnings: &mut Vec<String>) {
        let limit = target.conn.command_timeout;
        let deadline = std::time::Instant::now() + limit;
        self.remove_keys(target, warnings);
        let at_least = std::time::Instant::now() + limit.min(RESTORE_AT_LEAST);
        self.restore_settings(Some(deadline.max(at_least)), warnings);
    }

    /// Removes the run's keys left on the server (see [`KeyLedger::remove_all`]).
    pub fn remove_keys(&mut self, target: &Target, warnings: &mut Vec<String>) {
        self.keys
            .remove_all(&target.conn, &self.key_prefix, warnings);
    }

    /// Puts the changed settings back (every wait over by `deadline`); a failure is a warning.
    fn restore_settings(
        &mut self,
        deadline: Option<std::time::Instant>,
        warnings: &mut Vec<String>,
    ) {
        match self.tuning.restore_until(deadline) {
            Ok(said) => warnings.extend(said),
            Err(err) if self.embedded => {
                // The tool's own server goes with the run; one that does not answer now has
                // most likely died (the hostile trial's kill -9 read "set them back by hand").
                self.tuning.give_up();
                warnings.push(format!(
                    "the server the tool started did not answer at the end ({err:#}): it may have exited"
                ));
            }
            Err(err) => {
                // Those still changed (a restore can fail half-way).
                let settings = self.server_settings();
                if deadline.is_some() {
                    // The cleanup's limit is spent: the marker holds them (and stays, as they do);
                    // without one, the warning names them. The drop would only wait again.
                    self.tuning.give_up();
                }
                self.left_changed = Some(format!(
                    "the run could not restore the server's settings ({}): {}",
                    settings.join(", "),
                    crate::error::one_line(&err)
                ));
                warnings.push(format!(
                "could not restore the server's settings ({}): {err:#}{}",
                settings.join(", "),
                if self.marker.is_some() {
                    "; the run's marker keeps them for the next run against this server or `probe clean`"
                } else {
                    "; set them back by hand (CONFIG SET name old)"
                }
            ));
            }
        }
    }
}

/// What to say where the server refuses this user `CLIENT SETNAME` (an ACL without `CLIENT`):
/// the run's connections go unnamed, so the tool's own commands that name no key are taken for
/// another client's, and each refusal is an entry in the server's ACL LOG (the hostile trial of
/// stop 39 found them there, unsaid). Asked once, on a connection of its own.
fn naming_refused(conn: &crate::measure::target::ConnInfo, run_id: &str) -> Option<String> {
    let mut raw = crate::measure::resp::RawConn::connect(conn).ok()?;
    let name = format!("holprobe-session-{run_id}");
    match raw.command(&[b"CLIENT", b"SETNAME", name.as_bytes()]) {
        Ok(crate::measure::resp::Reply::Error(text)) => Some(format!(
            "the server refuses this user CLIENT SETNAME ({}): the run's connections go unnamed, so a stall from one of its own commands that names no key is taken for another client's, and each connection's refused CLIENT SETNAME or CLIENT INFO is an entry in the server's ACL LOG",
            text.lines().next().unwrap_or_default()
        )),
        _ => None,
    }
}

impl Drop for RunScope {
    /// The safety net of a run that ended before its session's cleanup (an early `?`): its
    /// keys removed, its settings restored, then its marker; what fails leaves the marker for
    /// the next run.
    fn drop(&mut self) {
        if self.closed || self.marker.is_none() {
            return;
        }
        let mut ignored = Vec::new();
        let conn = self.conn.clone();
        self.keys.remove_all(&conn, &self.key_prefix, &mut ignored);
        let _ = self.tuning.restore();
        self.close(&mut ignored);
    }
}

/// The least time the cleanup gives the settings' restore, whatever the keys' removal took
/// (see [`RunScope::clean_up`]).
const RESTORE_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(1);

/// `DEL keys` on `conn`'s server. In a cluster whose master failed over during the run the
/// keys' slot has moved: the MOVED error names where, and they are deleted there (keys of one
/// run share a hash tag, so one slot).
fn delete_keys(conn: &ConnInfo, keys: &[&String]) -> Result<i64> {
    on_slot_owner(conn, |conn| conn.del_keys(keys)).map(|(deleted, _)| deleted)
}

/// `op` on `conn`'s server, and once more on the node a cluster's MOVED names when the slot
/// moved (a failover during the run); returns its result and where it ran.
pub(crate) fn on_slot_owner<T>(
    conn: &ConnInfo,
    op: impl Fn(&ConnInfo) -> Result<T>,
) -> Result<(T, ConnInfo)> {
    match op(conn) {
        Ok(value) => Ok((value, conn.clone())),
        Err(err) => match err
            .downcast_ref::<redis::RedisError>()
            .and_then(|e| e.redirect_node())
        {
            Some((address, _slot)) => {
                let moved = conn.for_node(address)?;
                Ok((op(&moved)?, moved))
            }
            None => Err(err),
        },
    }
}

/// The keys a run created and has not deleted: removed at the end while the server is
/// reachable, whatever ended the run.
#[derive(Debug, Default)]
pub struct KeyLedger {
    live: BTreeSet<String>,
    /// Keys on other servers than the target (GET probes' keys on other shards' masters).
    elsewhere: Vec<(ConnInfo, String)>,
}

impl KeyLedger {
    /// A key the run is about to create.
    pub fn created(&mut self, key: &str) {
        self.live.insert(key.to_string());
    }

    /// A key the run is about to create on another server than the target (a cluster's other
    /// master); removed from there at the end.
    pub fn created_on(&mut self, server: &ConnInfo, key: &str) {
        if !self.elsewhere.iter().any(|(_, k)| k == key) {
            self.elsewhere.push((server.clone(), key.to_string()));
        }
    }

    /// No key of the run is left on any server.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.elsewhere.is_empty()
    }

    /// A key the run deleted.
    pub fn deleted(&mut self, key: &str) {
        self.live.remove(key);
    }

    /// Files a write event.
    pub fn track(&mut self, write: &WriteRecord) {
        match write.op {
            WriteOp::Set | WriteOp::Overwrite | WriteOp::Build => self.created(&write.key),
            WriteOp::Delete | WriteOp::Unlink | WriteOp::Expire | WriteOp::Evict if write.ok => {
                self.deleted(&write.key)
            }
            // A custom command may have removed the key: the final cleanup deletes it again,
            // which is harmless.
            WriteOp::Delete
            | WriteOp::Unlink
            | WriteOp::Expire
            | WriteOp::Evict
            | WriteOp::Read
            | WriteOp::Command
            | WriteOp::Inject => {}
        }
    }

    /// Deletes every key left, on a fresh connection (the run's may be broken); a failure is a
    /// warning, never an error that hides the results. The keys on other servers (a cluster's
    /// other shards' GET probe keys, one per server) are deleted at the same time, a thread each, so
    /// the whole removal takes one reply limit however many servers are slow or frozen, and
    /// each server gets the whole of it.
    pub fn remove_all(&mut self, conn: &ConnInfo, key_prefix: &str, warnings: &mut Vec<String>) {
        let elsewhere = std::mem::take(&mut self.elsewhere);
        let live = &mut self.live;
        let remove_one = |server: &ConnInfo, key: &String| {
            delete_keys(server, &[key])
                .err()
                .map(|err| format!("could not remove {key} from {server}: {err:#}"))
        };
        let failed_elsewhere: Vec<String> = std::thread::scope(|scope| {
            // A thread that cannot be made (the system's limit) leaves its key to this one,
            // after the run's own: slower, never a panic.
            let others: Vec<_> = elsewhere
                .iter()
                .map(|(server, key)| {
                    std::thread::Builder::new()
                        .name("cleanup".into())
                        .spawn_scoped(scope, move || remove_one(server, key))
                        .map_err(|_| (server, key))
                })
                .collect();
            if !live.is_empty() {
                let keys: Vec<&String> = live.iter().collect();
                match delete_keys(conn, &keys) {
                    Ok(_) => live.clear(),
                    // The ledger holds every key the run may have made, not only those it
                    // did: a run cut short after 2 of 10 writes read "could not remove 8".
                    Err(err) => warnings.push(format!(
                        "could not remove the run's keys under {key_prefix} (any of the {} it may have made): {err:#}",
                        keys.len()
                    )),
                }
            }
            others
                .into_iter()
                .filter_map(|other| match other {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Some(format!("removing a key from another server panicked{BUG}"))
                    }),
                    Err((server, key)) => remove_one(server, key),
                })
                .collect()
        });
        warnings.extend(failed_elsewhere);
    }
}

/// What a failure that is the tool's own fault adds.
pub(crate) const BUG: &str = " (a bug in holprobe: please report it)";

/// Joins a thread that has ended: what it panicked with, if it did.
pub(crate) fn panicked(handle: JoinHandle<()>) -> Option<String> {
    let payload = handle.join().err()?;
    Some(
        payload
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string()),
    )
}

/// Why a thread that should still run has ended: its panic, or that it stopped unexpectedly.
fn thread_died(what: &str, handle: JoinHandle<()>) -> String {
    match panicked(handle) {
        Some(panic) => format!("{what} panicked: {panic}{BUG}"),
        None => format!("{what} stopped unexpectedly{BUG}"),
    }
}

/// How often the loop moves the instrument's horizon on and takes its findings. Each settle is a
/// wake-up of the session's thread, and on a small virtual host a wake-up costs more than the
/// records it takes: at 20 ms the session's thread used 36-40 ms of CPU in a 5 s run at 2 x
/// 1000 probes/s, at 50 ms 26-28 ms.
pub(crate) const SETTLE_EVERY: Duration = Duration::from_millis(50);
/// How often the instrument is asked to show progress.
const TICK_EVERY: Duration = Duration::from_millis(100);

/// What watches the server while the actor acts: the probe threads with their correlators and
/// exports (the main job, observe mode, calibrate), or the load generator with its per-second
/// collector and exports (`probe load`). Its threads send into the session's channel
/// ([`Session::events`]); the session hands it every event but the actor's last word, and
/// stops its threads after the actor's.
pub(crate) trait Instrument {
    /// Files one event (the actor's writes too).
    fn take(&mut self, event: Event, keys: &mut KeyLedger) -> Result<()>;
    /// Moves the horizon on (`writes_from_us`: the actor's [`WriteMark`], read before the
    /// channel was drained, so a write it no longer marks is in) and files what became final;
    /// writes the exports as they stand when a checkpoint is due (`warnings`: the run's so far).
    fn settle(&mut self, writes_from_us: u64, warnings: &[String]) -> Result<()>;
    /// About every 100 ms: progress for the terminal.
    fn tick(&mut self);
    /// Looks at its threads: the run's end when they cannot go on (one died or lost the
    /// server) or are all done.
    fn check(&mut self) -> Option<EndOfRun>;
    /// Stops and joins its threads (the actor is done by now), taking what they send meanwhile
    /// from `events`: what the first thread that panicked said, if one did.
    fn stop(&mut self, events: &Receiver<Event>, keys: &mut KeyLedger) -> Option<String>;
    /// Once stopped: a failure of its threads that makes a run otherwise complete `failed`.
    fn failure(&self) -> Option<String>;
}

/// When a session's loop ends on its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Run clock, µs: `--duration` is over.
    pub deadline_us: Option<u64>,
    /// The actor's being done ends the run (the main job, calibrate); false: the run lasts
    /// until the deadline (load with `--duration`: the load goes on after the writer's plan).
    pub ends_with_actor: bool,
}

/// How a session's loop ended, its threads stopped and its keys removed.
pub(crate) struct Ended {
    /// The run's status.
    pub status: RunStatus,
    /// Why, when not complete.
    pub status_reason: Option<String>,
    /// An export that could not be written: the run fails with it once the final exports are
    /// written as far as they can be.
    pub export_error: Option<anyhow::Error>,
}

impl Ended {
    /// Files what an event taken after the loop says: an end only when the run was complete
    /// so far (the actor failing as it finished its last write), an export error only when
    /// it is the first.
    fn late(&mut self, step: Result<Option<EndOfRun>>) {
        match step {
            Ok(Some((status, reason))) if self.status == RunStatus::Complete => {
                (self.status, self.status_reason) = (status, reason);
            }
            Ok(_) => {}
            Err(err) => {
                self.export_error.get_or_insert(err);
            }
        }
    }
}

/// One run: its scope, clock, channel and actor; see the module comment.
pub(crate) struct Session<'t> {
    /// The server the actor works on (its keys are removed from it at the end).
    pub target: &'t Target,
    /// The run id, key prefix, key ledger and settings guard.
    pub scope: RunScope,
    /// What exists only now the run has begun (its id and key prefix, its clock, ...): the
    /// actor's and the instrument's.
    pub run: RunContext,
    /// The run's warnings so far (opening the scope's first).
    pub warnings: Vec<String>,
    events: Option<EventSender>,
    rx: Receiver<Event>,
    actor: Option<JoinHandle<()>>,
    actor_stop: Arc<AtomicBool>,
    write_mark: Arc<WriteMark>,
    actor_ended: bool,
}

impl<'t> Session<'t> {
    /// Starts the run's clock and its channel of `capacity` events, and makes the run's
    /// context (the scope is open, the actor prepared: nothing of that is measured).
    pub fn start(
        target: &'t Target,
        mut scope: RunScope,
        name: RunName,
        spec: RunSpec,
        capacity: usize,
    ) -> Session<'t> {
        let warnings = std::mem::take(&mut scope.warnings);
        let (tx, rx) = event_channel(capacity);
        let host = HostInfo::read();
        let run = RunContext {
            mode: spec.mode,
            name,
            clock: RunClock::start(),
            host,
            metrics: spec.metrics,
        };
        Session {
            target,
            scope,
            run,
            warnings,
            events: Some(tx),
            rx,
            actor: None,
            actor_stop: Arc::new(AtomicBool::new(false)),
            write_mark: Arc::new(WriteMark::default()),
            actor_ended: false,
        }
    }

    /// A sender into the run's channel, for a thread of the instrument's (once the loop has
    /// begun, one into a closed channel: no thread may start then).
    pub fn events(&self) -> EventSender {
        self.events.clone().unwrap_or_else(|| {
            // Its receiver dropped: every send says the channel is closed.
            let (closed, _) = event_channel(usize::MAX);
            closed
        })
    }

    /// Starts the actor's thread on the target (`replicas`: the target's replicas the run
    /// probes, whose application of each write the writer waits for).
    pub fn spawn_actor(
        &mut self,
        actor: Box<dyn Actor>,
        view: ViewSetup,
        cluster_nodes: Vec<ConnInfo>,
        replicas: usize,
        probes_started: crate::measure::actor::ProbesStarted,
    ) -> Result<()> {
        let handle = actor.spawn(ActorContext {
            key_prefix: self.run.name.key_prefix.clone(),
            conn: self.target.conn.clone(),
            clock: self.run.clock,
            events: self.events(),
            stop: Arc::clone(&self.actor_stop),
            mark: Arc::clone(&self.write_mark),
            view,
            server_local: self.target.server.local,
            server_embedded: self.target.server.embedded,
            cluster_nodes,
            replicas,
            probes_started,
        })?;
        self.actor = Some(handle);
        Ok(())
    }

    /// Gives up a run whose threads could not all start (the caller has stopped those that
    /// did): the keys go, the settings are restored as the scope drops.
    pub fn abandon(&mut self) {
        self.actor_stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.actor.take() {
            let _ = handle.join();
        }
        self.scope.clean_up(self.target, &mut self.warnings);
        self.scope.close(&mut self.warnings);
    }

    /// Runs the loop until the run ends (see the module comment), then stops the actor and the
    /// instrument's threads in that order, removes the run's keys and restores the settings.
    pub fn run(
        &mut self,
        instrument: &mut dyn Instrument,
        limits: Limits,
        interrupt: &AtomicBool,
    ) -> Ended {
        // Only the threads hold senders now: the channel's end is theirs.
        self.events = None;
        let has_actor = self.actor.is_some();
        let mut end: Option<EndOfRun> = None;
        let mut export_error: Option<anyhow::Error> = None;
        let mut last_tick = Instant::now();
        let mut last_settle = Instant::now();
        loop {
            // What is in the channel is taken; when it is empty, the loop sleeps till the next
            // settle instead of blocking on the channel: a blocked receiver is woken by every
            // batch a probe thread sends (a futex call, and the channel's spin and yields
            // before each block: about 700 sched_yield and 1700 futex calls in a 5 s run at
            // 2 x 1000/s), a sleeping one once per settle. Nothing waits on the session: the
            // threads' sends only queue (the channel holds far more than a settle's events).
            match self.rx.try_recv() {
                Ok(event) => match self.take(instrument, event, limits) {
                    Ok(Some(e)) => {
                        end = Some(e);
                        break;
                    }
                    Ok(None) => {}
                    Err(err) => {
                        export_error = Some(err);
                        break;
                    }
                },
                Err(TryRecvError::Empty) => {
                    let next = last_settle + SETTLE_EVERY;
                    let now = Instant::now();
                    if next > now {
                        // Not past the run's end (`--duration`).
                        let left = limits.deadline_us.map_or(Duration::MAX, |deadline| {
                            Duration::from_micros(deadline.saturating_sub(self.run.clock.now_us()))
                        });
                        std::thread::sleep((next - now).min(left));
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            }
            // The actor's thread ended: its last word, if it sent one, is in the channel behind
            // what came before it. Taken now, it ends the run as it would have any other time
            // (or not: load with --duration goes on); a thread that ended without one died (see
            // after the stop).
            if !self.actor_ended && self.actor.as_ref().is_some_and(|h| h.is_finished()) {
                match self.drain(instrument, limits) {
                    Ok(Some(e)) => {
                        end = Some(e);
                        break;
                    }
                    Ok(None) if self.actor_ended => {}
                    Ok(None) => break,
                    Err(err) => {
                        export_error = Some(err);
                        break;
                    }
                }
            }
            if let Some(e) = instrument.check() {
                end = Some(e);
                break;
            }
            if interrupt.load(Ordering::Relaxed) {
                end = Some(interrupted_by_signal());
                break;
            }
            if let Some(deadline) = limits.deadline_us
                && self.run.clock.now_us() >= deadline
            {
                if has_actor && !self.actor_ended {
                    end = Some(duration_before_plan());
                }
                break;
            }
            if last_tick.elapsed() >= TICK_EVERY {
                last_tick = Instant::now();
                instrument.tick();
            }
            if last_settle.elapsed() >= SETTLE_EVERY {
                last_settle = Instant::now();
                match self.settle(instrument, limits) {
                    Ok(None) => {}
                    Ok(Some(e)) => {
                        end = Some(e);
                        break;
                    }
                    Err(err) => {
                        export_error = Some(err);
                        break;
                    }
                }
            }
        }
        let (status, status_reason) = end.unwrap_or((RunStatus::Complete, None));
        let mut ended = Ended {
            status,
            status_reason,
            export_error,
        };

        // The actor first: a write under way is finished and recorded while the instrument
        // still measures. Its events keep being taken meanwhile (it sends them whatever the channel holds).
        self.actor_stop.store(true, Ordering::Relaxed);
        let late = Limits {
            ends_with_actor: true,
            ..limits
        };
        let mut actor_panic = None;
        if let Some(handle) = self.actor.take() {
            while !handle.is_finished() {
                if let Ok(event) = self.rx.recv_timeout(SETTLE_EVERY) {
                    ended.late(self.take(instrument, event, late));
                }
            }
            actor_panic = panicked(handle);
        }
        // Everything the actor sent, before the instrument's threads stop.
        while let Ok(event) = self.rx.try_recv() {
            ended.late(self.take(instrument, event, late));
        }
        let stop_panic = instrument.stop(&self.rx, &mut self.scope.keys);
        while let Ok(event) = self.rx.try_recv() {
            ended.late(self.take(instrument, event, late));
        }
        if ended.status == RunStatus::Complete {
            let failure = instrument.failure().or_else(|| {
                if has_actor && !self.actor_ended {
                    // Its thread is gone and it never said done or failed: it died.
                    Some(match &actor_panic {
                        Some(panic) => format!("the writer thread panicked: {panic}{BUG}"),
                        None => {
                            format!("the writer thread stopped without finishing its plan{BUG}")
                        }
                    })
                } else {
                    actor_panic
                        .map(|panic| format!("the writer thread panicked: {panic}{BUG}"))
                        .or(stop_panic)
                }
            });
            if let Some(failure) = failure {
                (ended.status, ended.status_reason) = (RunStatus::Failed, Some(failure));
            }
        }
        self.scope.clean_up(self.target, &mut self.warnings);
        self.scope.close(&mut self.warnings);
        // A run that leaves the server's settings changed did not end well (trial 37, J6: exit
        // 0 and `complete` with four settings left changed).
        if ended.status == RunStatus::Complete
            && let Some(what) = self.scope.left_changed()
        {
            (ended.status, ended.status_reason) = (RunStatus::Failed, Some(what.to_string()));
        }
        ended
    }

    /// One event: the actor's last word is the session's (it ends the run when the actor's
    /// end does, or when it failed), every other goes to the instrument.
    fn take(
        &mut self,
        instrument: &mut dyn Instrument,
        event: Event,
        limits: Limits,
    ) -> Result<Option<EndOfRun>> {
        if let Some(end) = actor_end(&event) {
            self.actor_ended = true;
            let ends = limits.ends_with_actor || end.0 == RunStatus::Failed;
            return Ok(ends.then_some(end));
        }
        instrument.take(event, &mut self.scope.keys)?;
        Ok(None)
    }

    /// Every event in the channel: the run's end when one says it.
    fn drain(
        &mut self,
        instrument: &mut dyn Instrument,
        limits: Limits,
    ) -> Result<Option<EndOfRun>> {
        while let Ok(event) = self.rx.try_recv() {
            if let Some(end) = self.take(instrument, event, limits)? {
                return Ok(Some(end));
            }
        }
        Ok(None)
    }

    /// The actor's mark, then every event in the channel, then the instrument's settle (not
    /// when an event ended the run: its final exports come after the stop).
    fn settle(
        &mut self,
        instrument: &mut dyn Instrument,
        limits: Limits,
    ) -> Result<Option<EndOfRun>> {
        let writes_from_us = self.write_mark.writes_from(self.run.clock);
        if let Some(end) = self.drain(instrument, limits)? {
            return Ok(Some(end));
        }
        instrument.settle(writes_from_us, &self.warnings)?;
        Ok(None)
    }
}
