//! The writer: one dedicated thread and connection that stores large values, each surrounded by
//! quiet probing, and records for every write when it started, when its last byte went to the
//! kernel, and when the reply came.
//!
//! The value bytes are generated once, at the largest size, and every write sends a prefix slice
//! of that one buffer straight to the socket ([`RawConn::send_set`]): the client holds about one
//! largest value, never the sum.
//!
//! What the writer does is its plan (`plan.rs`: the steps, the custom commands, how run.json
//! records it); the thread that carries it out is here.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::Sender;
use rand::{Rng, SeedableRng};

use crate::analyze::pressure::{
    HostRoom, ServerRoom, check_host, check_maxmemory, server_growth_bytes,
};
use crate::measure::actor::{Actor, ActorContext, WriteMark};
use crate::measure::clock::RunClock;
use crate::measure::event::Event;
use crate::measure::hostmem::HostMemorySampler;
use crate::measure::resp::{RawConn, Reply, ReplyLimits};
use crate::measure::serverview::{ServerFigures, ServerView, ViewSetup};
use crate::measure::target::{ConnInfo, info_field};
use crate::record::{WriteOp, WriteRecord};
use crate::units::format_size;

mod plan;

pub use plan::{
    CustomCommand, DEFAULT_GAP, KEY_PLACEHOLDER, RecordedWriter, WriteStep, WriterPlan,
};

/// Refuses, before anything is sent, a value larger than the server's `proto-max-bulk-len`
/// (it would answer the SET with an error after the whole value was sent), saying how to raise
/// the limit.
pub fn check_bulk_len(
    plan: &WriterPlan,
    server: &crate::measure::target::ServerFacts,
) -> Result<(), crate::error::UsageError> {
    let Some(limit) = server.proto_max_bulk_len_bytes else {
        return Ok(());
    };
    match plan.sizes.iter().find(|&&s| s > limit) {
        Some(&too_big) => Err(crate::error::UsageError::invalid(
            "--writer-sizes",
            format_size(too_big),
            format!(
                "larger than the server's proto-max-bulk-len ({}): raise it with {}",
                format_size(limit),
                if server.embedded {
                    "--server-arg \"proto-max-bulk-len 1gb\""
                } else {
                    "CONFIG SET proto-max-bulk-len on that server"
                }
            ),
        )),
        None => Ok(()),
    }
}

/// Checks, before anything is sent, that the whole plan fits: under the server's maxmemory
/// (INFO memory) and, on this host, in the memory available without swapping (the tool's own
/// value buffer, plus the server's copies when the server runs here). The error says how much
/// memory the plan needs. `--force-memory` skips it.
pub fn check_plan_memory(plan: &WriterPlan, target: &crate::measure::target::Target) -> Result<()> {
    use crate::analyze::pressure::{HostRoom, plan_server_peak_bytes};
    use crate::error::UsageError;

    let server_peak = plan_server_peak_bytes(&plan.sizes, plan.repeat, plan.overwrite, plan.keep);
    let sizes: Vec<String> = plan.sizes.iter().map(|&s| format_size(s)).collect();
    let refuse = |reason: String| -> anyhow::Error {
        UsageError::invalid(
            "--writer-sizes",
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
            plan.max_size().saturating_add(server_peak),
            format!(
                "the run (the tool's {} value buffer and the server's copy{} on this host)",
                format_size(plan.max_size()),
                if plan.keep { "ies of every value" } else { "" }
            ),
        )
    } else {
        (
            plan.max_size(),
            format!("the tool's {} value buffer", format_size(plan.max_size())),
        )
    };
    check_host(
        need,
        HostRoom {
            total_bytes: host.total_bytes,
            available_bytes: host.available_bytes,
        },
        &what,
    )
    .map_err(refuse)
}

/// Fills `len` bytes from a seeded PRNG: incompressible, and the same for the same seed.
pub fn random_value(len: u64, seed: u64) -> Vec<u8> {
    let mut value = vec![0u8; len as usize];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    rng.fill_bytes(&mut value);
    value
}

/// What the writer checks and gathers around each write, beside timing it.
#[derive(Debug, Clone, Default)]
pub struct WriterChecks {
    /// Which server-side readings may reset counters (see [`ViewSetup`]).
    pub view: ViewSetup,
    /// The server runs on this host: a value also takes host memory there.
    pub server_local: bool,
    /// Send values even when they would pass the server's maxmemory or push the host into swap
    /// (`--force-memory`).
    pub force_memory: bool,
    /// In a cluster, every node: where to go when the written master is gone (a failover);
    /// the next write's MOVED then leads to the new one. Empty outside a cluster.
    pub cluster_nodes: Vec<ConnInfo>,
    /// The written master's replicas the run probes: after each write the writer waits (`WAIT`)
    /// until they have applied it ([`WriteRecord::replicated_us`]).
    pub replicas: usize,
}

/// The writer as a run's [`Actor`]: once the run has its key prefix (and before its clock
/// starts) it lays out its steps and generates its value, once; then it runs the steps on its
/// own thread.
pub struct WriterActor {
    plan: WriterPlan,
    seed: u64,
    force_memory: bool,
    /// Laid out by [`Actor::prepare`], under the run's key prefix.
    steps: Vec<WriteStep>,
    value: Arc<Vec<u8>>,
}

impl WriterActor {
    /// A writer for `plan`, its value bytes from `seed` (`--seed`).
    pub fn new(plan: WriterPlan, seed: u64, force_memory: bool) -> WriterActor {
        WriterActor {
            plan,
            seed,
            force_memory,
            steps: Vec::new(),
            value: Arc::new(Vec::new()),
        }
    }
}

impl Actor for WriterActor {
    fn steps_total(&self) -> usize {
        self.plan.step_count()
    }

    fn prepare(&mut self, key_prefix: &str) -> Result<Vec<String>> {
        self.steps = self.plan.steps(key_prefix);
        self.value = Arc::new(random_value(self.plan.max_size(), self.seed));
        Ok(self.steps.iter().map(|step| step.key.clone()).collect())
    }

    fn spawn(self: Box<Self>, ctx: ActorContext) -> Result<JoinHandle<()>> {
        let checks = WriterChecks {
            view: ctx.view,
            server_local: ctx.server_local,
            force_memory: self.force_memory,
            cluster_nodes: ctx.cluster_nodes,
            replicas: ctx.replicas,
        };
        spawn_writer(
            self.plan, self.steps, self.value, &ctx.conn, ctx.clock, ctx.events, ctx.stop,
            ctx.mark, checks,
        )
    }
}

/// Starts the writer thread. Its connection is opened (and authenticated) before it returns.
#[allow(clippy::too_many_arguments)] // each is a different piece of the run the writer joins
pub fn spawn_writer(
    plan: WriterPlan,
    steps: Vec<WriteStep>,
    value: Arc<Vec<u8>>,
    conn_info: &ConnInfo,
    clock: RunClock,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
    mark: Arc<WriteMark>,
    checks: WriterChecks,
) -> Result<JoinHandle<()>> {
    if plan.commands.iter().any(|c| c.args.is_empty()) {
        anyhow::bail!("a custom command needs at least its name (CustomCommand::args is empty)");
    }
    let mut conn = RawConn::connect(conn_info).context("opening the writer's connection")?;
    conn.set_limits(reply_limits(&plan));
    let worker = Writer {
        steps,
        plan,
        value,
        conn,
        conn_info: conn_info.clone(),
        home: conn_info.address(),
        clock,
        events,
        stop,
        mark,
        memory: HostMemorySampler::new(),
        view: ServerView::new(checks.view),
        checks,
    };
    std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || worker.run())
        .context("starting the writer thread")
}

/// What the writer's replies may hold: a SET, a DEL and INFO answer in a few KiB, but a custom
/// command may read the key just written back whole (`GET`, `DUMP`).
fn reply_limits(plan: &WriterPlan) -> ReplyLimits {
    if plan.commands.is_empty() {
        ReplyLimits::CONTROL
    } else {
        ReplyLimits::for_values_up_to(plan.max_size())
    }
}

struct Writer {
    plan: WriterPlan,
    steps: Vec<WriteStep>,
    value: Arc<Vec<u8>>,
    conn: RawConn,
    conn_info: ConnInfo,
    /// The server the run gave the writer (`host:port`); after a failover it writes elsewhere.
    home: String,
    clock: RunClock,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
    mark: Arc<WriteMark>,
    memory: HostMemorySampler,
    view: ServerView,
    checks: WriterChecks,
}

impl Writer {
    fn run(mut self) {
        if !self.quiet_gap() {
            let _ = self.events.send(Event::WriterDone);
            return;
        }
        for (index, step) in self.steps.clone().into_iter().enumerate() {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            crate::measure::test_panic_point("writer");
            self.mark.begin(&self.clock);
            let (record, io_error) = self.execute(index as u32 + 1, &step);
            let failure = record.error.clone();
            let _ = self.events.send(Event::Write(Box::new(record)));
            self.mark.end();
            match io_error {
                None => {}
                // No reply within --timeout: reconnecting would only wait again.
                Some(ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let _ = self.events.send(Event::WriterFailed(format!(
                        "the server did not answer the writer within --timeout {:?}",
                        self.conn_info.command_timeout
                    )));
                    return;
                }
                // The server sent what no Redis server sends (a reply past the bounds, not
                // RESP): the next write would get no better.
                Some(ErrorKind::InvalidData) => {
                    let _ = self
                        .events
                        .send(Event::WriterFailed(failure.unwrap_or_default()));
                    return;
                }
                Some(_) => match self.reconnect() {
                    Ok(mut conn) => {
                        conn.set_limits(reply_limits(&self.plan));
                        self.conn = conn;
                    }
                    Err(err) => {
                        let _ = self
                            .events
                            .send(Event::WriterFailed(crate::error::one_line(&err)));
                        return;
                    }
                },
            }
            if !self.quiet_gap() {
                break;
            }
        }
        let _ = self.events.send(Event::WriterDone);
    }

    /// Sleeps one gap, waking early when the run is stopped. False when stopped.
    fn quiet_gap(&self) -> bool {
        let deadline = Instant::now() + self.plan.gap;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
        }
    }

    /// One write; also returns the kind of I/O error when the connection failed.
    fn execute(&mut self, seq: u32, step: &WriteStep) -> (WriteRecord, Option<ErrorKind>) {
        let room = self.server_room();
        // Only a SET makes the server hold a new value: a DEL frees one, and a custom command
        // (GET, UNLINK) reads or frees the key the SET before it made room for.
        if matches!(step.op, WriteOp::Set | WriteOp::Overwrite)
            && !self.checks.force_memory
            && let Err(reason) = self.memory_check(step.size_bytes, &room)
        {
            let error = format!("not sent: {reason}; pass --force-memory to send it anyway");
            return (self.unsent(seq, step, error, room.rss_bytes), None);
        }
        let before = self.view.before(&mut self.conn);
        // Reading the server's memory or its counters failed on this connection (it timed
        // out, or was reset): nothing is sent on it; the caller reconnects or gives up, on
        // that error, not on a write that never went out.
        if let Some(err) = self.conn.broken() {
            let error = format!("not sent: {err}");
            return (
                self.unsent(seq, step, error, room.rss_bytes),
                Some(err.kind()),
            );
        }
        let start = Instant::now();
        let sent_result = send_step(&mut self.conn, step, &self.value);
        let mut sent = Instant::now();
        let mut outcome = sent_result.and_then(|()| self.conn.read_reply());
        let mut reply = Instant::now();
        // In a cluster whose slots moved (a failover, a resharding), the write is sent again
        // where the server says: MOVED for good (the writer's connection goes there), ASK for
        // this once (after ASKING). The write's window covers every attempt.
        let (mut moved, mut asked) = (0u32, 0u32);
        let mut went_to: Option<String> = None;
        for _ in 0..MAX_REDIRECTS {
            let Ok(Reply::Error(text)) = &outcome else {
                break;
            };
            let Some((kind, address)) = parse_redirect(text) else {
                break;
            };
            let target = match self.conn_info.for_node(&address) {
                Ok(target) => target,
                Err(_) => break,
            };
            went_to = Some(target.address());
            let attempt = RawConn::connect(&target).map_err(|err| {
                std::io::Error::new(ErrorKind::ConnectionRefused, crate::error::one_line(&err))
            });
            let limits = reply_limits(&self.plan);
            outcome = attempt.and_then(|mut conn| {
                conn.set_limits(limits);
                if kind == Redirect::Ask {
                    asked += 1;
                    conn.command(&[b"ASKING"])?;
                } else {
                    moved += 1;
                }
                send_step(&mut conn, step, &self.value)?;
                sent = Instant::now();
                let reply = conn.read_reply();
                if kind == Redirect::Moved {
                    self.conn = conn;
                    self.conn_info = target.clone();
                }
                reply
            });
            reply = Instant::now();
        }
        // The replicas apply the write once the master has executed it: wait until they have,
        // so that their figures of the write cover it (a WAIT blocks this client only).
        let written = matches!(&outcome, Ok(reply) if !matches!(reply, Reply::Error(_)));
        let replicated = (moved + asked == 0 && written && self.checks.replicas > 0)
            .then(|| self.wait_for_replicas())
            .flatten();
        let (ok, error) = match &outcome {
            Ok(Reply::Status(s)) if s == "OK" => (true, None),
            Ok(Reply::Integer(_)) if step.op == WriteOp::Delete => (true, None),
            Ok(Reply::Error(text)) => (false, Some(text.clone())),
            Ok(_) if step.op == WriteOp::Command => (true, None),
            Ok(other) => (false, Some(format!("unexpected reply {other:?}"))),
            Err(err) => (false, Some(err.to_string())),
        };
        let memory = self.memory.sample();
        // After an I/O error the connection is unusable: no INFO, and the caller reconnects.
        let io_error = outcome.as_ref().err().map(std::io::Error::kind);
        // After a redirect the counters read before the write were another server's.
        let (server_rss_bytes, figures) = if io_error.is_none() && moved + asked == 0 {
            // The server logs each command under its own name: a custom one is looked up as
            // itself, not as the SET before it (whose entry names the same key).
            let command = match step.op {
                WriteOp::Delete | WriteOp::Inject => "DEL",
                WriteOp::Set | WriteOp::Overwrite => "SET",
                WriteOp::Command => step
                    .command
                    .as_ref()
                    .and_then(|args| args.first())
                    .map_or("SET", String::as_str),
            };
            let figures = self
                .view
                .after(&mut self.conn, command, step.key.as_bytes(), &before);
            (self.server_room().rss_bytes, figures)
        } else {
            (None, ServerFigures::default())
        };
        let start_us = self.clock.us_at(start);
        let reply_us = self.clock.us_at(reply);
        let record = WriteRecord {
            seq,
            op: step.op,
            key: step.key.clone(),
            size_bytes: step.size_bytes,
            start_us,
            sent_us: self.clock.us_at(sent),
            reply_us,
            set_ms: reply_us.saturating_sub(start_us) as f64 / 1e3,
            ok,
            error,
            host_mem_pct: memory.mem_pct,
            host_swap_pct: memory.swap_pct,
            server_rss_bytes,
            server_exec_us: figures.exec_us,
            server_latency_event_ms: figures.latency_event_ms,
            server_latency_event: figures.latency_event,
            server_eventloop_max_us: figures.eventloop_max_us,
            server_request_bytes: figures.request_bytes,
            moved,
            asked,
            replicated_us: replicated.map(|at| self.clock.us_at(at)),
            // A redirected write, or any write after a failover moved the writer.
            sent_to: went_to.or_else(|| {
                let at = self.conn_info.address();
                (at != self.home).then_some(at)
            }),
        };
        (record, io_error)
    }

    /// `WAIT` for every probed replica: when they had all applied what the master executed,
    /// `None` when they had not within the wait (a replica gone or far behind) or the server
    /// refused it (an ACL). The wait stays well inside the connection's read timeout. Later
    /// writes wait only for the replicas that answered in time (none after a refusal, or once a
    /// failover left the writer on a master without replicas): a replica that is gone costs
    /// one wait, not one per write.
    fn wait_for_replicas(&mut self) -> Option<Instant> {
        let wait_ms = (self.conn_info.command_timeout.as_millis() / 2).clamp(1, 5_000);
        let replicas = self.checks.replicas.to_string();
        let wait_ms = wait_ms.to_string();
        match self
            .conn
            .command(&[b"WAIT", replicas.as_bytes(), wait_ms.as_bytes()])
        {
            Ok(Reply::Integer(acked)) if acked >= self.checks.replicas as i64 => {
                Some(Instant::now())
            }
            Ok(Reply::Integer(acked)) => {
                self.checks.replicas = usize::try_from(acked).unwrap_or(0);
                None
            }
            _ => {
                self.checks.replicas = 0;
                None
            }
        }
    }

    /// A new connection after the old one broke: to the same server, or in a cluster to any
    /// node that answers (the next write's MOVED leads to the slot's master).
    fn reconnect(&mut self) -> Result<RawConn> {
        let first = RawConn::connect(&self.conn_info);
        if first.is_ok() || self.checks.cluster_nodes.is_empty() {
            return first;
        }
        for node in &self.checks.cluster_nodes {
            if let Ok(mut conn) = RawConn::connect(node) {
                conn.set_limits(reply_limits(&self.plan));
                self.conn_info = node.clone();
                return Ok(conn);
            }
        }
        first
    }

    /// INFO memory: what the server holds, its limit and policy.
    fn server_room(&mut self) -> Room {
        let Ok(Reply::Bulk(Some(bytes))) = self.conn.command(&[b"INFO", b"memory"]) else {
            return Room::default();
        };
        let text = String::from_utf8_lossy(&bytes);
        let number = |name: &str| info_field(&text, name).and_then(|v| v.parse::<u64>().ok());
        Room {
            rss_bytes: number("used_memory_rss"),
            server: number("used_memory").map(|used_bytes| ServerRoom {
                used_bytes,
                maxmemory_bytes: number("maxmemory").unwrap_or(0),
                policy: info_field(&text, "maxmemory_policy").map(str::to_string),
            }),
        }
    }

    /// Refuses a value that would pass the server's maxmemory or, for a server on this host,
    /// push the host into swap.
    fn memory_check(&mut self, size_bytes: u64, room: &Room) -> Result<(), String> {
        let need = server_growth_bytes(size_bytes);
        let what = format!("writing a {} value", format_size(size_bytes));
        if let Some(server) = &room.server {
            check_maxmemory(need, server, &what)?;
        }
        if self.checks.server_local {
            let host = self.memory.sample();
            check_host(
                need,
                HostRoom {
                    total_bytes: host.total_bytes,
                    available_bytes: host.available_bytes,
                },
                &what,
            )?;
        }
        Ok(())
    }

    /// The record of a write that was not sent, and why.
    fn unsent(
        &mut self,
        seq: u32,
        step: &WriteStep,
        error: String,
        rss: Option<u64>,
    ) -> WriteRecord {
        let now = self.clock.now_us();
        let memory = self.memory.sample();
        WriteRecord {
            ok: false,
            error: Some(error),
            host_mem_pct: memory.mem_pct,
            host_swap_pct: memory.swap_pct,
            server_rss_bytes: rss,
            ..WriteRecord::timed(
                seq,
                step.op,
                step.key.clone(),
                step.size_bytes,
                (now, now, now),
            )
        }
    }
}

/// Most redirects one write follows.
const MAX_REDIRECTS: usize = 3;

/// A cluster's redirect of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redirect {
    /// `MOVED slot host:port`: the slot lives there now.
    Moved,
    /// `ASK slot host:port`: the slot is migrating; ask there this once.
    Ask,
}

/// `MOVED 3999 127.0.0.1:6381` or `ASK 3999 127.0.0.1:6381`: the kind and the address.
fn parse_redirect(error: &str) -> Option<(Redirect, String)> {
    let mut words = error.split_whitespace();
    let kind = match words.next()? {
        "MOVED" => Redirect::Moved,
        "ASK" => Redirect::Ask,
        _ => return None,
    };
    let _slot: u16 = words.next()?.parse().ok()?;
    let address = words.next()?;
    // `:6381` (an empty host) means the same host as the node that answered.
    Some((kind, address.to_string()))
}

/// Sends one step's command on `conn`.
fn send_step(conn: &mut RawConn, step: &WriteStep, value: &[u8]) -> std::io::Result<()> {
    match step.op {
        WriteOp::Set | WriteOp::Overwrite => {
            conn.send_set(step.key.as_bytes(), &value[..step.size_bytes as usize])
        }
        // The writer's plan holds no injections (those are `probe calibrate`'s).
        WriteOp::Delete | WriteOp::Inject => {
            conn.send_raw(&crate::measure::resp::encode_command(&[
                b"DEL",
                step.key.as_bytes(),
            ]))
        }
        WriteOp::Command => {
            let args: Vec<&[u8]> = step
                .command
                .iter()
                .flatten()
                .map(|arg| arg.as_bytes())
                .collect();
            conn.send_raw(&crate::measure::resp::encode_command(&args))
        }
    }
}

/// The server's memory as INFO memory reports it.
#[derive(Debug, Default)]
struct Room {
    rss_bytes: Option<u64>,
    server: Option<ServerRoom>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_seeded_and_incompressible_looking() {
        let a = random_value(4096, 7);
        assert_eq!(a, random_value(4096, 7));
        assert_ne!(a, random_value(4096, 8));
        let mut counts = [0u32; 256];
        for byte in &a {
            counts[*byte as usize] += 1;
        }
        // 4096 uniform bytes: every value appears, none more than a few dozen times.
        assert!(counts.iter().all(|&c| c < 50), "{counts:?}");
    }
}

#[cfg(test)]
mod redirect_tests {
    use super::*;

    #[test]
    fn moved_and_ask_name_the_new_place() {
        assert_eq!(
            parse_redirect("MOVED 3999 127.0.0.1:6381"),
            Some((Redirect::Moved, "127.0.0.1:6381".into()))
        );
        assert_eq!(
            parse_redirect("ASK 3999 10.0.0.5:7000"),
            Some((Redirect::Ask, "10.0.0.5:7000".into()))
        );
        assert_eq!(parse_redirect("ERR wrong number of arguments"), None);
        assert_eq!(parse_redirect("MOVED notaslot 1.2.3.4:5"), None);
        assert_eq!(parse_redirect("MOVED 12"), None);
    }
}
