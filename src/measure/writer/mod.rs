//! The writer: one dedicated thread and connection that stores large values, each surrounded by
//! quiet probing, and records for every write when it started, when its last byte went to the
//! kernel, and when the reply came.
//!
//! The value bytes are generated once, at the largest size, and every write sends a prefix slice
//! of that one buffer straight to the socket ([`RawConn::send_set`]): the client holds about one
//! largest value, never the sum.
//!
//! A collection is built in pipelined batches cut from a small random fill ([`Writer::build`]),
//! read whole with its reply thrown away as it arrives, and removed by DEL, UNLINK, a RENAME of
//! a freshly built twin onto it (`overwrite`), or by the server itself (`server_removes.rs`: its
//! active expiry, `expire`, whose window runs from the TTL's end until the server says the key
//! is gone; its eviction, `evict`, from a lowered `maxmemory` until then). Each op is a step
//! of its own, a row of the exports; around it the writer reads the server's lazyfree counters
//! (which thread freed the value) and, after a value is made, its encoding, outside the window.
//!
//! What the writer does is its plan (`plan.rs`: the steps, the custom commands, how run.json
//! records it); the thread that carries it out is here.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::measure::event::EventSender;
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};

use crate::analyze::pressure::{ServerRoom, check_host, check_maxmemory, server_growth_bytes};
use crate::measure::actor::{Actor, ActorContext, WriteMark};
use crate::measure::clock::RunClock;
use crate::measure::culprit::{WRITER_CLIENT_NAME, run_client_name};
use crate::measure::event::Event;
use crate::measure::hostmem::HostMemorySampler;
use crate::measure::keyspace::KeyEvents;
use crate::measure::resp::{RawConn, Reply, ReplyLimits};
use crate::measure::schedstat::main_thread_times;
use crate::measure::serverview::{Before, ServerFigures, ServerView, ViewSetup};
use crate::measure::serverview::{Want, settings_for_writes};
use crate::measure::target::{ConnInfo, info_field};
use crate::record::{WriteOp, WriteRecord};
use crate::units::format_size;
use crate::workload::BUILD_PIPELINE_DEPTH;
use crate::workload::lazyfree::FreedBy;

mod checks;
mod plan;
mod server_removes;
mod wire;

pub use checks::{
    check_bulk_len, check_commands, check_evict, check_expire_watch, check_plan_memory,
    plan_server_peak,
};
use wire::{
    MAX_REDIRECTS, Redirect, Timed, WithValue, parse_redirect, read_step_reply, send_step,
    timed_us, value_columns,
};

pub use server_removes::EVICT_TTL_MS;

pub use plan::{
    COLLECTION_FILL_BYTES, CustomCommand, DEFAULT_ELEMENT_BYTES, DEFAULT_GAP, EXPIRE_TTL_MS,
    KEY_PLACEHOLDER, RecordedWriter, WriteStep, WriterPlan,
};

/// Fills `len` bytes from a seeded PRNG: incompressible, and the same for the same seed.
pub fn random_value(len: u64, seed: u64) -> Vec<u8> {
    try_random_value(len, seed).unwrap_or_else(|err| panic!("{err}"))
}

/// [`random_value`], or an error where the memory cannot be had: a 40G value past the memory
/// check (`--force-memory`) aborted the tool with a backtrace, its server and temporary
/// directory left behind (the hostile trial).
pub fn try_random_value(len: u64, seed: u64) -> Result<Vec<u8>> {
    let len_usize = usize::try_from(len)
        .map_err(|_| anyhow::anyhow!("a value of {len} bytes cannot be held on this machine"))?;
    let mut value = Vec::new();
    value.try_reserve_exact(len_usize).map_err(|_| {
        anyhow::anyhow!(
            "could not allocate the {} value buffer: this host has no memory for it",
            crate::units::format_size(len)
        )
    })?;
    // One pass over the value: a chunk is filled in the cache and appended, where zeroing the
    // whole buffer first and filling it after wrote each of up to 512 MiB twice. The chunk is a
    // whole number of the generator's words, so the bytes are those of one `fill_bytes` call.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut chunk = [0u8; FILL_CHUNK];
    while value.len() < len_usize {
        let n = (len_usize - value.len()).min(FILL_CHUNK);
        rng.fill_bytes(&mut chunk[..n]);
        value.extend_from_slice(&chunk[..n]);
    }
    Ok(value)
}

/// The piece of a random value generated at a time (a multiple of 8 bytes: see
/// [`try_random_value`]).
const FILL_CHUNK: usize = 64 * 1024;

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
    /// The run's probe threads: the first op waits until all of them have begun.
    pub probes_started: crate::measure::actor::ProbesStarted,
    /// What the writer's connections call themselves: [`WRITER_CLIENT_NAME`] and the run's id
    /// ([`run_client_name`]), so that its commands are known as this run's and not another's.
    pub client_name: String,
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
        self.value = Arc::new(try_random_value(self.plan.value_buffer_bytes(), self.seed)?);
        let mut keys: Vec<String> = Vec::new();
        for step in &self.steps {
            if !keys.contains(&step.key) {
                keys.push(step.key.clone());
            }
        }
        Ok(keys)
    }

    /// Keyspace notifications among them: an `expire` or `evict` op's window ends when the
    /// server says the key expired or was evicted.
    fn server_settings(&self) -> Vec<(&'static str, Want)> {
        settings_for_writes()
    }

    fn spawn(self: Box<Self>, ctx: ActorContext) -> Result<JoinHandle<()>> {
        // A library caller is refused here, before the writer's first command.
        check_evict(&self.plan, ctx.server_embedded, &ctx.conn.address())?;
        let checks = WriterChecks {
            view: ctx.view,
            server_local: ctx.server_local,
            force_memory: self.force_memory,
            cluster_nodes: ctx.cluster_nodes,
            replicas: ctx.replicas,
            probes_started: ctx.probes_started,
            client_name: run_client_name(WRITER_CLIENT_NAME, &ctx.key_prefix),
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
    events: EventSender,
    stop: Arc<AtomicBool>,
    mark: Arc<WriteMark>,
    checks: WriterChecks,
) -> Result<JoinHandle<()>> {
    if plan.commands.iter().any(|c| c.args.is_empty()) {
        anyhow::bail!("a custom command needs at least its name (CustomCommand::args is empty)");
    }
    let mut conn =
        writer_conn(conn_info, &checks.client_name).context("opening the writer's connection")?;
    conn.set_limits(reply_limits(&plan));
    // An expiry is seen by the server's notification where it sends them (the run turned them
    // on, or they were on already), else by polling INFO stats' count of expired (evicted)
    // keys: either way without touching the key.
    let key_events = if plan.has_op(WriteOp::Expire) || plan.has_op(WriteOp::Evict) {
        KeyEvents::start_if_on(&mut conn, conn_info, clock)
            .ok()
            .flatten()
    } else {
        None
    };
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
        key_events,
        encodings: HashMap::new(),
        last_cpu: None,
        unmade: std::collections::HashSet::new(),
        client_info: true,
        largest_sent: 0,
    };
    std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || worker.run())
        .context("starting the writer thread")
}

/// A connection of the writer's, named `name` ([`WriterChecks::client_name`]; the bare
/// [`WRITER_CLIENT_NAME`] when a library caller left it empty) where the server lets it (a
/// server without CLIENT SETNAME is fine: its stalls are then told apart by key alone).
fn writer_conn(info: &ConnInfo, name: &str) -> Result<RawConn> {
    let name = if name.is_empty() {
        WRITER_CLIENT_NAME
    } else {
        name
    };
    RawConn::connect_named(info, name)
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
    events: EventSender,
    stop: Arc<AtomicBool>,
    mark: Arc<WriteMark>,
    memory: HostMemorySampler,
    view: ServerView,
    checks: WriterChecks,
    /// The server's notifications of expired keys, where it sends them.
    key_events: Option<KeyEvents>,
    /// Each live key's encoding (`OBJECT ENCODING`, read after it was made).
    encodings: HashMap<String, String>,
    /// The server's main thread's times at the end of the last op's readings, and when: the
    /// start of the quiet gap whose pace `server_cpu_idle_us` is.
    last_cpu: Option<(Instant, crate::measure::schedstat::ThreadTimes)>,
    /// Keys whose last making (SET, build) failed: the ops on them wait for the next one.
    unmade: std::collections::HashSet<String>,
    /// The server answers `CLIENT INFO` on the writer's connection (false once it refused it:
    /// not asked again, so that a user denied CLIENT gets one ACL LOG entry, not one a write).
    client_info: bool,
    /// The largest value the writer sent whole on its current connection, bytes: what the
    /// server may keep a query buffer of, where `CLIENT INFO` does not say (refused to the
    /// user, or Redis before 6.2; the hostile review found such runs reusing the connection
    /// for every SET, unsaid).
    largest_sent: u64,
}

/// The free room of a connection's query buffer, bytes, from which it is one the server kept
/// from an earlier large value (a fresh connection's is 16-32 KiB).
pub const KEPT_QUERY_BUFFER_BYTES: u64 = 1 << 20;

/// Whether a value of `size` bytes makes the server grow a query buffer kept from an earlier
/// large value with `free` bytes of room (one it would not grow is used as it is).
pub fn grows_kept_buffer(free: u64, size: u64) -> bool {
    free >= KEPT_QUERY_BUFFER_BYTES && size > free
}

/// `qbuf-free` of a `CLIENT INFO` (or `CLIENT LIST`) line.
fn qbuf_free_of(info: &str) -> Option<u64> {
    info.split_whitespace()
        .find_map(|field| field.strip_prefix("qbuf-free="))
        .and_then(|n| n.parse().ok())
}

/// How the error of a value the server does not hold whole begins.
const HELD_PART: &str = "the server holds ";

/// How long the first op waits for every probe thread to begin.
const PROBES_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The shortest quiet gap whose pace is taken (a shorter one says little of the probes' load).
const MIN_IDLE_SPAN: std::time::Duration = std::time::Duration::from_millis(20);

impl Writer {
    fn run(mut self) {
        // The quiet gap before the first op counts from when every probe thread is sending, so
        // that the baseline and the first op are measured by all of them, on time. (A thread
        // not begun within the limit: the run goes on, and its lateness shows as send lag.)
        self.checks
            .probes_started
            .wait(&self.stop, PROBES_START_LIMIT);
        if !self.quiet_gap() {
            let _ = self.events.send(Event::WriterDone);
            return;
        }
        for (index, step) in self.steps.clone().into_iter().enumerate() {
            if self.stopped() {
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
                    self.fail(format!(
                        "the server did not answer the writer within --timeout {:?}",
                        self.conn_info.command_timeout
                    ));
                    return;
                }
                // The server sent what no Redis server sends (a reply past the bounds, not
                // RESP): the next write would get no better.
                Some(ErrorKind::InvalidData) => {
                    self.fail(failure.unwrap_or_default());
                    return;
                }
                Some(_) => match self.reconnect() {
                    Ok(mut conn) => {
                        conn.set_limits(reply_limits(&self.plan));
                        self.conn = conn;
                        self.largest_sent = 0;
                    }
                    Err(err) => {
                        self.fail(crate::error::one_line(&err));
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

    /// Ends the run: the writer lost the server (each actor words its own failure).
    fn fail(&self, why: String) {
        let _ = self.events.send(Event::WriterFailed(format!(
            "the writer lost the server: {why}"
        )));
    }

    /// The run was stopped (Ctrl-C, `--duration`, a failed thread): no more waiting.
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps one gap, waking early when the run is stopped. False when stopped.
    fn quiet_gap(&self) -> bool {
        crate::measure::actor::sleep_unless_stopped(self.plan.gap, &self.stop)
    }

    /// One write; also returns the kind of I/O error when the connection failed.
    fn execute(&mut self, seq: u32, step: &WriteStep) -> (WriteRecord, Option<ErrorKind>) {
        let makes = matches!(step.op, WriteOp::Build | WriteOp::Set)
            || (step.op == WriteOp::Overwrite && step.twin.is_none());
        // An op on a value that was not made whole would be labelled with a size the server
        // never held: not sent (the hostile trial's DEL of a partly built hash, labelled 500k).
        if !makes
            && (self.unmade.contains(&step.key)
                || step.twin.as_ref().is_some_and(|t| self.unmade.contains(t)))
        {
            let room = self.server_room();
            let error = "not sent: its value was not made whole (a write of it before failed)";
            return (self.unsent(seq, step, error.into(), room.rss_bytes), None);
        }
        let (record, io_error) = self.execute_sent(seq, step);
        // Only a value the server refused or lost (OOM, evicted): a write lost to a failover
        // or a dropped connection is retried by the plan's next making, and the ops between
        // find no key (a cluster run that rides out a failover stays complete).
        if makes {
            let lost = record
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with(HELD_PART) || e.starts_with("OOM"));
            if record.ok {
                self.unmade.remove(&step.key);
            } else if lost && io_error.is_none() {
                self.unmade.insert(step.key.clone());
            }
        }
        (record, io_error)
    }

    /// [`Self::execute`] of a step that is sent.
    fn execute_sent(&mut self, seq: u32, step: &WriteStep) -> (WriteRecord, Option<ErrorKind>) {
        let room = self.server_room();
        // Only a SET or a build makes the server hold a new value: a DEL frees one, a RENAME
        // moves the twin built before it, and a custom command (GET, UNLINK) reads or frees the
        // key the SET before it made room for.
        let grows = match step.op {
            WriteOp::Set => true,
            WriteOp::Overwrite => step.twin.is_none(),
            WriteOp::Build => true,
            _ => false,
        };
        if grows
            && !self.checks.force_memory
            && let Err(reason) = self.memory_check(step.shape.server_bytes_estimate(), &room)
        {
            let error = format!("not sent: {reason}; pass --force-memory to send it anyway");
            return (self.unsent(seq, step, error, room.rss_bytes), None);
        }
        // A string sent whole as one argument: the query buffer the server kept on this
        // connection from an earlier large value, which it grows for a larger one.
        let sent_whole = grows && step.op != WriteOp::Build;
        let mut qbuf_free = if sent_whole {
            self.query_buffer_free()
        } else {
            None
        };
        // Unless the run keeps one connection: a new one, whose buffer is a fresh client's, so
        // that the SET is measured as a fresh one (the old buffer goes with the old connection,
        // freed by the server here, before the window). Where the server does not say what it
        // keeps, the largest value sent on the connection stands for it (it may have been
        // trimmed since: a new connection then costs nothing but itself).
        let kept = qbuf_free.or(sent_whole.then_some(self.largest_sent));
        if !self.plan.same_connection
            && kept.is_some_and(|free| grows_kept_buffer(free, step.size_bytes))
            && let Ok(mut fresh) = writer_conn(&self.conn_info, &self.checks.client_name)
        {
            fresh.set_limits(reply_limits(&self.plan));
            self.conn = fresh;
            self.largest_sent = 0;
            qbuf_free = self.query_buffer_free();
        }
        if sent_whole {
            self.largest_sent = self.largest_sent.max(step.size_bytes);
        }
        let before = self.view.before(&mut self.conn);
        // Which thread frees the value: the server's lazyfree counters around the op, read
        // after the view's reset (CONFIG RESETSTAT clears them).
        let frees = step.op.removes_key() || step.op == WriteOp::Overwrite;
        let lazyfree_before = if frees {
            self.server_room().lazyfree_handed_over
        } else {
            None
        };
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
        let mut moved_asked = (0u32, 0u32);
        let mut went_to: Option<String> = None;
        // The server's main thread's CPU time and wait for a CPU, read right around the window
        // (a file of this host, no command).
        let before_at = Instant::now();
        let cpu_before = self.checks.view.server_pid.and_then(main_thread_times);
        let timed = match step.op {
            WriteOp::Build => self.build(step),
            WriteOp::Expire => self.expire(step),
            WriteOp::Evict => self.evict(step),
            _ => self.exchange_following_redirects(step, &mut moved_asked, &mut went_to),
        };
        let Timed {
            start,
            sent,
            mut reply,
            outcome,
        } = timed;
        let (moved, asked) = moved_asked;
        let written = matches!(&outcome, Ok(reply) if !matches!(reply, Reply::Error(_)));
        // A value handed to the background thread of a libc-malloc server: the window runs
        // until that thread has freed it (its main thread pays then: `wait_background_free`).
        if frees
            && written
            && room.libc_malloc
            && moved + asked == 0
            && let Some(end) =
                self.wait_background_free(lazyfree_before, reply + self.conn_info.command_timeout)
        {
            reply = end;
        }
        let after_at = Instant::now();
        let cpu_after = self.checks.view.server_pid.and_then(main_thread_times);
        let server_cpu = match (cpu_before, cpu_after) {
            (Some(before), Some(after)) => Some(after - before),
            _ => None,
        };
        // The main thread's pace in the quiet gap since the previous op's readings (the probes'
        // commands, its cron, the writer's reads after that op), over this op's readings.
        let server_cpu_idle = match (self.last_cpu.take(), cpu_before) {
            (Some((since, earlier)), Some(before)) if before_at > since + MIN_IDLE_SPAN => {
                let pace = (before - earlier).run_ns as f64 / (before_at - since).as_nanos() as f64;
                Some((pace * (after_at - before_at).as_nanos() as f64 / 1e3) as u64)
            }
            _ => None,
        };
        self.last_cpu = cpu_after.map(|after| (after_at, after));
        // The replicas apply the write once the master has executed it: wait until they have,
        // so that their figures of the write cover it (a WAIT blocks this client only).
        let replicated = (moved + asked == 0 && written && self.checks.replicas > 0)
            .then(|| self.wait_for_replicas())
            .flatten();
        let (ok, error) = match &outcome {
            Ok(Reply::Error(text)) => (false, Some(text.clone())),
            Ok(Reply::Status(s)) if s == "OK" => (true, None),
            Ok(Reply::Integer(_))
                if matches!(
                    step.op,
                    WriteOp::Delete
                        | WriteOp::Unlink
                        | WriteOp::Build
                        | WriteOp::Read
                        | WriteOp::Expire
                        | WriteOp::Evict
                ) =>
            {
                (true, None)
            }
            Ok(_) if matches!(step.op, WriteOp::Command | WriteOp::Read) => (true, None),
            Ok(other) => (false, Some(format!("unexpected reply {other:?}"))),
            Err(err) => (false, Some(err.to_string())),
        };
        let memory = self.memory.sample();
        // After an I/O error the connection is unusable: no INFO, and the caller reconnects.
        let io_error = outcome.as_ref().err().map(std::io::Error::kind);
        // After a redirect the counters read before the write were another server's.
        let same_server = io_error.is_none() && moved + asked == 0;
        // A value the server took but does not hold whole (evicted under an allkeys-* policy
        // while it was built, or right after its SET): the ops after it would be labelled with
        // a size the server never had (the hostile trial: a 500k-field hash under maxmemory
        // 20mb, its read 2.3 ms and its DEL 1.9 ms, labelled 500k, status complete).
        let (ok, error) = match (ok, error) {
            (true, None) if same_server && matches!(step.op, WriteOp::Build | WriteOp::Set) => {
                match self.held_count(step) {
                    Some((held, expected)) if held != expected => (
                        false,
                        Some(format!(
                            "{HELD_PART}{held} of the value's {expected} {} after it was written: evicted or trimmed (maxmemory-policy?), so the ops after it would not be of its size",
                            if step.shape.kind == "string" {
                                "bytes"
                            } else {
                                "elements"
                            }
                        )),
                    ),
                    _ => (true, None),
                }
            }
            other => other,
        };
        // The readings are of the run's server: a redirected write's work was another's.
        let server_cpu = server_cpu.filter(|_| same_server);
        let server_cpu_idle = server_cpu_idle.filter(|_| server_cpu.is_some());
        let (server_rss_bytes, figures, freed_by) = if same_server {
            // The second the window opened (LATENCY stamps whole seconds).
            let start_unix_s =
                ((self.clock.unix_start_us() + self.clock.us_at(start)) / 1_000_000) as i64;
            let window_us = reply.saturating_duration_since(start).as_micros() as u64;
            let figures = self.server_figures(step, &before, start_unix_s, window_us);
            // One INFO memory after the op: the server's memory and its lazyfree counters.
            let after = self.server_room();
            let freed_by = match (lazyfree_before, after.lazyfree_handed_over, frees && ok) {
                (Some(before), Some(after), true) => Some(if after > before {
                    FreedBy::Background
                } else {
                    FreedBy::Main
                }),
                _ => None,
            };
            (after.rss_bytes, figures, freed_by)
        } else {
            (None, ServerFigures::default(), None)
        };
        // The encoding, outside every window: after the value is made (a collection's overwrite
        // puts the twin's in place), kept for the ops that follow on the key.
        if same_server && ok {
            match (step.op, &step.twin) {
                (WriteOp::Overwrite, Some(twin)) => {
                    if let Some(encoding) = self.encodings.remove(twin) {
                        self.encodings.insert(step.key.clone(), encoding);
                    }
                }
                (WriteOp::Set | WriteOp::Overwrite | WriteOp::Build, _) => {
                    if let Some(encoding) = self.object_encoding(&step.key) {
                        self.encodings.insert(step.key.clone(), encoding);
                    }
                }
                _ => {}
            }
        }
        let encoding = self.encodings.get(&step.key).cloned();
        if ok && step.op.removes_key() {
            self.encodings.remove(&step.key);
        }
        let start_us = timed_us(&self.clock, start);
        let reply_us = timed_us(&self.clock, reply).max(start_us);
        let record = WriteRecord {
            seq,
            op: step.op,
            key: step.key.clone(),
            size_bytes: step.size_bytes,
            start_us,
            sent_us: timed_us(&self.clock, sent).clamp(start_us, reply_us),
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
            encoding,
            freed_by,
            server_cpu_run_us: server_cpu.map(|t| t.run_ns / 1_000),
            server_cpu_wait_us: server_cpu.map(|t| t.wait_ns / 1_000),
            server_cpu_idle_us: server_cpu_idle,
            writer_qbuf_free_bytes: qbuf_free,
            ..value_columns(step)
        };
        (record, io_error)
    }

    /// The server's own figures of a step: SLOWLOG's entry of the step's own command (a build's
    /// last command; none for an expiry or an eviction, which no command did: its figure is the
    /// LATENCY monitor's `expire-del`, or `eviction-del` (`evict-del` on Redis 8.2)), and the
    /// rest of [`ServerView::after`].
    fn server_figures(
        &mut self,
        step: &WriteStep,
        before: &Before,
        start_unix_s: i64,
        window_us: u64,
    ) -> ServerFigures {
        let kind = step.shape.value_kind();
        // The server logs each command under its own name: a custom one is looked up as
        // itself, not as the SET before it (whose entry names the same key).
        let command = match step.op {
            WriteOp::Delete | WriteOp::Inject => "DEL",
            WriteOp::Set => "SET",
            WriteOp::Overwrite if step.twin.is_some() => "RENAME",
            WriteOp::Overwrite => "SET",
            WriteOp::Build => kind.build_command(),
            WriteOp::Read => kind.read_command().0,
            WriteOp::Unlink => "UNLINK",
            WriteOp::Expire => "PEXPIRE",
            WriteOp::Evict => "CONFIG",
            WriteOp::Command => step
                .command
                .as_ref()
                .and_then(|args| args.first())
                .map_or("SET", String::as_str),
        };
        // A read's entry is logged when it executed, before its reply went out: every probe
        // answered while the reply streamed was logged after it.
        let page = self.view.slowlog_page;
        if step.op == WriteOp::Read || (!self.plan.is_string() && window_us >= LONG_WINDOW_US) {
            self.view.slowlog_page = LONG_SLOWLOG_PAGE;
        }
        let mut figures = self
            .view
            .after(&mut self.conn, command, step.key.as_bytes(), before);
        self.view.slowlog_page = page;
        // The expiry's or eviction's own event, not the cycle around it (which the
        // largest-event rule would pick, being at least as long).
        // Redis 8.2 logs an eviction's free as `evict-del` (seen on 8.2.3: LATENCY LATEST
        // `evict-del` and `eviction-cycle`), earlier servers and Valkey as `eviction-del`.
        let own_events: &[&str] = match step.op {
            WriteOp::Expire => &["expire-del"],
            WriteOp::Evict => &["eviction-del", "evict-del"],
            _ => &[],
        };
        if !own_events.is_empty() {
            figures.exec_us = None;
            // An expiry's or eviction's figure is its own event or none: the largest other
            // event of LATENCY LATEST was an earlier build's `command` (21-27 ms beside a 0.3 ms
            // list eviction), or on a libc Valkey the `command` of an INFO that set off the merge
            // of a background free (38 ms beside an expiry whose `expire-del` was not logged).
            figures.latency_event = None;
            figures.latency_event_ms = None;
            for event in own_events {
                if let Some(ms) = self.latest_latency_ms(event, start_unix_s) {
                    figures.latency_event = Some(event.to_string());
                    figures.latency_event_ms = Some(ms);
                    break;
                }
            }
        }
        figures
    }

    /// One command and its reply, sent again where a cluster's redirect says (`MOVED` for
    /// good: the writer's connection goes there; `ASK` for this once, after `ASKING`). The
    /// window covers every attempt.
    fn exchange_following_redirects(
        &mut self,
        step: &WriteStep,
        (moved, asked): &mut (u32, u32),
        went_to: &mut Option<String>,
    ) -> Timed {
        let start = Instant::now();
        let sent_result = send_step(&mut self.conn, step, &self.value);
        let mut sent = Instant::now();
        let mut outcome = sent_result.and_then(|()| read_step_reply(&mut self.conn, step));
        let mut reply = Instant::now();
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
            *went_to = Some(target.address());
            let attempt = writer_conn(&target, &self.checks.client_name).map_err(|err| {
                std::io::Error::new(ErrorKind::ConnectionRefused, crate::error::one_line(&err))
            });
            let limits = reply_limits(&self.plan);
            outcome = attempt.and_then(|mut conn| {
                conn.set_limits(limits);
                if kind == Redirect::Ask {
                    *asked += 1;
                    conn.command(&[b"ASKING"])?;
                } else {
                    *moved += 1;
                }
                send_step(&mut conn, step, &self.value)?;
                sent = Instant::now();
                let reply = read_step_reply(&mut conn, step);
                if kind == Redirect::Moved {
                    self.conn = conn;
                    self.conn_info = target.clone();
                }
                reply
            });
            reply = Instant::now();
        }
        Timed {
            start,
            sent,
            reply,
            outcome,
        }
    }

    /// A collection's build: batches of [`crate::workload::ValueKind::build_batch`], up to
    /// [`BUILD_PIPELINE_DEPTH`] on the wire at once, each reply read as it comes. The window
    /// runs from the first byte sent to the last reply; a server's error reply (the first) fails
    /// the build, which still reads every reply so the connection stays in step.
    fn build(&mut self, step: &WriteStep) -> Timed {
        let kind = step.shape.value_kind();
        let elements = step.shape.elements;
        let element_bytes = usize::try_from(step.shape.element_bytes).unwrap_or(usize::MAX);
        let batch = self.plan.batch_elements.max(1);
        let key = step.key.as_bytes();
        let mut request = Vec::new();
        // Replies still to come, per batch on the wire, oldest first.
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let mut next = 0u64;
        let mut first_error: Option<String> = None;
        let start = Instant::now();
        let mut sent = start;
        let stop = Arc::clone(&self.stop);
        let result: std::io::Result<()> = (|| {
            loop {
                // Ctrl-C or SIGTERM: no more batches go out (a 2M-field build went on for 4 s
                // after it); those on the wire are read, and the build fails as cut short.
                if next < elements && stop.load(Ordering::Relaxed) && first_error.is_none() {
                    first_error = Some(format!(
                        "the run was stopped during the build, after {next} of {elements} elements were sent"
                    ));
                }
                while in_flight.len() < BUILD_PIPELINE_DEPTH
                    && next < elements
                    && !stop.load(Ordering::Relaxed)
                {
                    let count = batch.min(elements - next);
                    request.clear();
                    let commands = kind.build_batch(
                        key,
                        next,
                        count,
                        element_bytes,
                        &self.value,
                        &mut request,
                    );
                    self.conn.send_raw(&request)?;
                    sent = Instant::now();
                    in_flight.push_back(commands);
                    next += count;
                }
                let Some(front) = in_flight.front_mut() else {
                    return Ok(());
                };
                if let Reply::Error(text) = self.conn.read_reply()? {
                    first_error.get_or_insert(text);
                }
                *front -= 1;
                if *front == 0 {
                    in_flight.pop_front();
                }
            }
        })();
        let reply = Instant::now();
        let outcome = result.map(|()| match first_error {
            Some(text) => Reply::Error(text),
            None => Reply::Integer(i64::try_from(elements).unwrap_or(i64::MAX)),
        });
        Timed {
            start,
            sent,
            reply,
            outcome,
        }
    }

    /// What the server holds of the step's value, against what was written: (`STRLEN`, bytes)
    /// for a string, (the kind's count command, elements) for a collection; `None` where it
    /// does not answer a number.
    fn held_count(&mut self, step: &WriteStep) -> Option<(u64, u64)> {
        let kind = step.shape.value_kind();
        let expected = if step.shape.kind == "string" {
            step.shape.element_bytes
        } else {
            step.shape.elements
        };
        match self
            .conn
            .command(&[kind.count_command().as_bytes(), step.key.as_bytes()])
        {
            Ok(Reply::Integer(n)) if n >= 0 => Some((n as u64, expected)),
            _ => None,
        }
    }

    /// The free room of the query buffer the server keeps for this connection (`qbuf-free` of
    /// `CLIENT INFO`), outside every window; `None` where the server refuses the command (not
    /// asked again) or does not say.
    fn query_buffer_free(&mut self) -> Option<u64> {
        if !self.client_info {
            return None;
        }
        match self.conn.command(&[b"CLIENT", b"INFO"]) {
            Ok(Reply::Bulk(Some(bytes))) => qbuf_free_of(&String::from_utf8_lossy(&bytes)),
            Ok(Reply::Error(_)) => {
                self.client_info = false;
                None
            }
            _ => None,
        }
    }

    /// `OBJECT ENCODING key`, where the server answers it.
    fn object_encoding(&mut self, key: &str) -> Option<String> {
        match self.conn.command(&[b"OBJECT", b"ENCODING", key.as_bytes()]) {
            Ok(Reply::Bulk(Some(bytes))) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Ok(Reply::Status(text)) => Some(text),
            _ => None,
        }
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
        let first = writer_conn(&self.conn_info, &self.checks.client_name);
        if first.is_ok() || self.checks.cluster_nodes.is_empty() {
            return first;
        }
        for node in &self.checks.cluster_nodes {
            if let Ok(mut conn) = writer_conn(node, &self.checks.client_name) {
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
            lazyfree_handed_over: number("lazyfreed_objects")
                .zip(number("lazyfree_pending_objects"))
                .map(|(freed, pending)| freed + pending),
            lazyfree_pending: number("lazyfree_pending_objects"),
            libc_malloc: info_field(&text, "mem_allocator") == Some("libc"),
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
            check_host(need, host.room(), &what)?;
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
            encoding: self.encodings.get(&step.key).cloned(),
            ..WriteRecord::timed(
                seq,
                step.op,
                step.key.clone(),
                step.size_bytes,
                (now, now, now),
            )
        }
        .with_value_of(step)
    }
}

/// SLOWLOG entries read after a whole read, and after a collection's op whose window lasted
/// [`LONG_WINDOW_US`] or more (every probe answered after the command was logged after it): the
/// run sets `slowlog-max-len` to at least this.
const LONG_SLOWLOG_PAGE: usize = 1024;

/// A window this long (µs) holds more probes' entries than the usual SLOWLOG page.
const LONG_WINDOW_US: u64 = 50_000;

/// The server's memory as INFO memory reports it.
#[derive(Debug, Default)]
struct Room {
    rss_bytes: Option<u64>,
    server: Option<ServerRoom>,
    /// `lazyfreed_objects + lazyfree_pending_objects`: the objects this server has handed to
    /// its lazyfree thread so far (a hand-over raises the pending count, a finished free moves
    /// it to the freed count), `None` where it reports neither.
    lazyfree_handed_over: Option<u64>,
    /// `lazyfree_pending_objects`: what the lazyfree thread has still to free.
    lazyfree_pending: Option<u64>,
    /// `mem_allocator:libc`: the main thread merges what a background free freed
    /// ([`Writer::wait_background_free`]).
    libc_malloc: bool,
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

    #[test]
    fn a_value_filled_in_chunks_is_the_one_fill_of_the_whole() {
        // Values recorded before the chunked fill (and `same_value`'s checks) must not change.
        for len in [
            0,
            1,
            7,
            8,
            13,
            FILL_CHUNK - 1,
            FILL_CHUNK,
            FILL_CHUNK + 5,
            3 * FILL_CHUNK + 3,
        ] {
            let mut whole = vec![0u8; len];
            rand::rngs::SmallRng::seed_from_u64(42).fill_bytes(&mut whole);
            assert_eq!(random_value(len as u64, 42), whole, "{len} bytes");
        }
    }
}

#[cfg(test)]
mod redirect_tests {
    use super::*;

    #[test]
    fn the_query_buffer_s_room_is_read_from_client_info() {
        let info = "id=5 addr=127.0.0.1:50000 laddr=127.0.0.1:6379 fd=8 name=holprobe-writer-1a2b3c4d age=0 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=26 qbuf-free=41943004 argv-mem=10 multi-mem=0 rbs=1024 rbp=0 obl=0 oll=0 omem=0 tot-mem=41964544 events=r cmd=client|info user=default redir=-1 resp=2\n";
        assert_eq!(qbuf_free_of(info), Some(41_943_004));
        assert_eq!(qbuf_free_of("id=5 qbuf=0"), None);
        assert_eq!(qbuf_free_of("qbuf-free=x"), None);
    }

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
