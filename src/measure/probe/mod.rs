//! Probe threads: each a dedicated OS thread with its own connection, sending one small command
//! per tick of a fixed schedule.
//!
//! # Open loop, pipelined
//! Every probe is written to its connection at its intended time, whether or not earlier probes
//! have been answered, and replies are matched to probes in order ([`inflight`]). No probe is
//! ever held back by another, so a probe's latency (reply − intended send) is exactly how long a
//! client arriving at that moment waited for the server: the longest of them over a write is the
//! head-of-line delay the write caused. (The engine before this one sent a probe only after the
//! previous reply; while the server served each connection once per pass of its event loop,
//! a thread due more often than that fell behind, and every later probe counted the thread's own
//! backlog as the server's delay, by up to 10x at high rates.)
//!
//! The kernel stamps each reply as it arrives ([`socket`]). At 200 probes a second per thread
//! or more, while the server keeps up, the thread sleeps until shortly before the next intended
//! time, reads every reply that came meanwhile, spins the rest and sends: one wake-up per
//! probe. During a stall it wakes for the first reply, as at lower rates. At lower rates it
//! sleeps in `poll` on its socket and reads replies as they arrive, so records reach the
//! session without waiting a whole period (`DEFER_READS_UP_TO`); so does a thread whose
//! replies come without kernel stamps, whose reply times are its reads. Its records go to the
//! session in batches (`FLUSH_EVERY`): the CPU a probe costs is then little more than its syscalls
//! (`benchmarks/probe_cpu.sh` holds it against a minimal prober in C).

pub mod inflight;
pub mod socket;

use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::measure::event::EventSender;
use anyhow::{Context, Result};
use crossbeam_channel::TrySendError;
use serde::{Deserialize, Serialize};

use crate::measure::clock::{RunClock, tighten_timer_slack};
use crate::measure::event::Event;
use crate::measure::resp::encode_command;
use crate::measure::target::ConnInfo;
use crate::record::{ProbeCmd, ProbeRecord};

use inflight::{Arrival, InFlight, Outstanding};
use socket::ProbeSocket;

/// Version of the probe engine, stored in run.json: runs recorded by different engines do not
/// have comparable `hol_delay_ms` (`probe compare` warns). 1: one probe at a time per
/// connection (holprobe 0.1 before issue 10). 2: pipelined, open loop for real, kernel receive
/// stamps.
pub const PROBE_ENGINE_VERSION: u32 = 2;

/// The value GET probes read: its reply has a known length, so the thread reads one reply at a
/// time.
pub const PROBE_VALUE: &str = "holprobe probe value";

/// How the probe threads sample the server.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// Number of probe threads, each with its own connection.
    pub threads: u16,
    /// Probes per second per thread.
    pub rate_per_thread: f64,
    /// PING, or GET of `get_key`.
    pub cmd: ProbeCmd,
    /// The small key GET probes read (prepared by the run).
    pub get_key: String,
    /// Ask for SCHED_FIFO priority for the probe threads (`--realtime`).
    pub realtime: bool,
    /// Number of the first thread: with several nodes each gets its own threads, numbered on
    /// from the previous node's.
    pub first_thread: u16,
    /// A server that goes away (or does not answer within `--timeout`) does not end the
    /// thread: it says so once ([`Event::NodeState`]), skips its probes while it tries to
    /// connect again every [`RETRY_EVERY`], and says when the server is back. For runs over
    /// several nodes, where one node down (a failover) must not end the run.
    pub keep_going: bool,
}

/// How often a thread whose server is down tries to connect again.
pub const RETRY_EVERY: Duration = Duration::from_millis(500);

/// Time between two probes of all `threads` together, each sending `rate_per_thread` probes a
/// second (staggered), µs: the resolution of every stall figure. The one place it is worked
/// out: the plan's description, calibrate's tolerance and `probe compare` all use it.
pub fn aggregate_interval_us(threads: u16, rate_per_thread: f64) -> f64 {
    1e6 / (rate_per_thread * f64::from(threads))
}

/// The error of a probe still unanswered when its thread stopped.
pub const NO_REPLY_AT_STOP: &str = "no reply before the run stopped";

/// Shared counters and switches of a running probe set.
#[derive(Debug, Default)]
pub struct ProbeShared {
    /// Set to stop every probe thread: it sends no more, and waits briefly for the replies
    /// still due.
    pub stop: AtomicBool,
    /// Probe records the collector could not take in time (channel full): counted, never waited on.
    pub dropped: AtomicU64,
    /// Probe threads that got real-time priority.
    pub realtime_threads: AtomicU32,
    /// Replies timed by the kernel's receive stamp.
    pub replies_kernel_stamped: AtomicU64,
    /// Replies timed when the thread read them (no kernel stamp on that read).
    pub replies_read_stamped: AtomicU64,
    /// Probes still unanswered when their thread stopped (recorded as failed).
    pub unanswered_at_stop: AtomicU64,
    /// How long before its thread stopped the oldest of those was sent, µs (the longest over
    /// the threads): a stall still under way at the end, at least that long, which no answered
    /// probe measured.
    pub longest_unanswered_at_stop_us: AtomicU64,
    /// How long the oldest probe had waited when its thread gave the server up (`--timeout`),
    /// µs (the longest over the threads): the stall that ended the run, which no answered probe
    /// measured.
    pub longest_timed_out_us: AtomicU64,
    /// The most probes one connection had outstanding at once.
    pub max_outstanding: AtomicU64,
    /// Connections lost (reset, closed, garbled) and opened again.
    pub reconnects: AtomicU64,
    /// Probe threads that have sent their first probe (an actor waits for all of them before
    /// its first op: [`crate::measure::actor::ProbesStarted`]).
    pub threads_sending: AtomicU32,
    /// The first probe thread that could go on no more, and why: the collector checks it, so
    /// the failure reaches it even when the event channel is full.
    failure: Mutex<Option<(u16, String)>>,
}

/// How the probes of a run were taken, for run.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeEngineInfo {
    /// [`PROBE_ENGINE_VERSION`].
    pub version: u32,
    /// `pipelined`: every probe goes out at its intended time.
    pub mode: String,
    /// Where `reply_us` came from: `kernel` (receive timestamps), `read` (when the thread read
    /// the reply), `mixed`, or `none` (no reply came).
    pub reply_clock: String,
    /// Replies timed by the kernel's stamp.
    pub replies_kernel_stamped: u64,
    /// Replies timed at the read.
    pub replies_read_stamped: u64,
    /// The most probes one connection had outstanding at once.
    pub max_outstanding: u64,
    /// Probes unanswered when the run stopped (failed rows of probes.csv).
    pub unanswered_at_stop: u64,
    /// Connections lost and opened again (their outstanding probes are errors in probes.csv;
    /// 0 in the first engine-2 runs, recorded before they were counted).
    #[serde(default)]
    pub reconnects: u64,
}

impl ProbeShared {
    /// The engine's description for run.json.
    pub fn engine_info(&self) -> ProbeEngineInfo {
        let kernel = self.replies_kernel_stamped.load(Ordering::Relaxed);
        let read = self.replies_read_stamped.load(Ordering::Relaxed);
        ProbeEngineInfo {
            version: PROBE_ENGINE_VERSION,
            mode: "pipelined".into(),
            reply_clock: match (kernel, read) {
                (0, 0) => "none",
                (_, 0) => "kernel",
                (0, _) => "read",
                _ => "mixed",
            }
            .into(),
            replies_kernel_stamped: kernel,
            replies_read_stamped: read,
            max_outstanding: self.max_outstanding.load(Ordering::Relaxed),
            unanswered_at_stop: self.unanswered_at_stop.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
        }
    }

    /// Records that probe thread `thread` could go on no more (the first such report wins).
    pub fn fail(&self, thread: u16, error: String) {
        if let Ok(mut slot) = self.failure.lock() {
            slot.get_or_insert((thread, error));
        }
    }

    /// The first probe thread's failure, if one failed.
    pub fn failure(&self) -> Option<(u16, String)> {
        self.failure.lock().ok().and_then(|slot| slot.clone())
    }
}

/// The probe's command: `PING`, or `GET` of the run's probe key.
fn probe_args(cmd: ProbeCmd, get_key: &str) -> Vec<&[u8]> {
    match cmd {
        ProbeCmd::Ping => vec![b"PING"],
        ProbeCmd::Get => vec![b"GET", get_key.as_bytes()],
    }
}

/// Sends the probe once on a connection of the probes' user: an ACL's refusal (a `NOPERM` reply)
/// is one line naming `--probe-cmd`. Anything else, a reply malformed or missing included, is
/// left to the probes, which say it as they always have (through the tool's bounded reader, not
/// redis-rs's, so a hostile reply is not buffered whole here).
pub fn probe_allowed(conn: &ConnInfo, cmd: ProbeCmd, get_key: &str) -> Result<()> {
    let Ok(mut raw) = crate::measure::resp::RawConn::connect(conn) else {
        return Ok(());
    };
    match raw.command(&probe_args(cmd, get_key)) {
        Ok(crate::measure::resp::Reply::Error(text)) if text.starts_with("NOPERM") => {
            Err(anyhow::anyhow!(
                "--probe-cmd {}: the server refuses it to the connection's user ({}): the probes need it on every server they probe (ACL SETUSER <user> +{}{})",
                cmd.name(),
                text.trim(),
                cmd.name(),
                if cmd == ProbeCmd::Get {
                    " and the keys ~holprobe:*"
                } else {
                    ""
                }
            ))
        }
        _ => Ok(()),
    }
}

/// Starts the probe threads on a schedule beginning at `schedule_start_us` (run clock). Thread
/// `i` is offset by `i / threads` of a period, so together they sample every
/// 1 / (threads × rate) seconds. Connections are opened before this returns, so a bad password
/// or a dead server fails the run before any measurement.
pub fn spawn_probes(
    config: &ProbeConfig,
    conn_info: &ConnInfo,
    clock: RunClock,
    schedule_start_us: u64,
    events: EventSender,
    shared: Arc<ProbeShared>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut socks = Vec::with_capacity(config.threads as usize);
    for thread in 0..config.threads {
        let thread = config.first_thread + thread;
        let sock = ProbeSocket::connect(conn_info)
            .with_context(|| format!("opening the connection of probe thread {thread}"))?;
        socks.push(sock);
    }
    let period_ns = 1e9 / config.rate_per_thread;
    let encoded = encode_command(&probe_args(config.cmd, &config.get_key));
    let reply_len = inflight::expected_reply(config.cmd).len();
    let mut handles = Vec::with_capacity(socks.len());
    for (index, sock) in socks.into_iter().enumerate() {
        let thread = usize::from(config.first_thread) + index;
        let offset_ns = period_ns * index as f64 / f64::from(config.threads);
        let worker = ProbeWorker {
            thread: thread as u16,
            encoded: encoded.clone(),
            reply_len,
            sock,
            flight: InFlight::new(thread as u16, config.cmd),
            conn_info: conn_info.clone(),
            clock,
            first_ns: schedule_start_us as f64 * 1e3 + offset_ns,
            period_ns,
            timeout_us: conn_info.command_timeout.as_micros() as u64,
            events: events.clone(),
            shared: Arc::clone(&shared),
            realtime: config.realtime,
            keep_going: config.keep_going,
            began: false,
            done: Vec::new(),
            flushed_at: Instant::now(),
            unpublished: Counts::default(),
            reconnected_unanswered: false,
            stamped: false,
            reads_after_send: false,
        };
        let handle = std::thread::Builder::new()
            .name(format!("probe-{thread}"))
            .spawn(move || worker.run())
            .context("starting a probe thread")?;
        handles.push(handle);
    }
    Ok(handles)
}

/// The thread wakes this long before a probe is due and spins the rest.
const SPIN: Duration = Duration::from_micros(20);
/// Longest sleep in `poll`, so a stop is noticed soon at low rates (each wake-up costs CPU:
/// at 10 probes/s a thread woke 50 times a second at 20 ms).
const MAX_WAIT: Duration = Duration::from_millis(50);
/// Finished records wait in their thread at most this long before they go to the collector
/// together. One channel send per record woke the collector once per probe (10 000 times a second
/// at 2 × 5000/s, each wake-up a futex call and the channel's yields: more CPU than the probes
/// themselves); in batches it wakes a few hundred times a second. Half the session's settle
/// ([`crate::session`], every 50 ms), so the correlator's horizon moves on as before.
const FLUSH_EVERY: Duration = Duration::from_millis(25);
/// Records that go to the collector at once whatever [`FLUSH_EVERY`] says, so that a burst of
/// replies does not fill the channel in one go.
const FLUSH_BATCH: usize = 256;
/// A batch goes while the thread waits only when the next probe is at least this far off (a
/// batch takes a few µs: it must never make a probe late); else right after that probe's send.
const FLUSH_ROOM: Duration = Duration::from_micros(100);
/// A thread whose probes are at most this far apart reads its replies when it wakes to send
/// the next probe, rather than waking for each reply as well: half the wake-ups, and a wake-up
/// is most of a probe's CPU (about 50 µs of a core each on a small VM, 20 of them per ms at
/// 2 × 5000/s). Only while the kernel stamps the replies (a reply's time is its arrival,
/// however late it is read) and on plain TCP (over TLS one read may take several replies and
/// the last one's stamp); read before the next probe leaves, so no reply waits in the socket
/// for a later one (the kernel merges queued segments under the later segment's stamp). At
/// lower rates the records would reach the collector a period late, so the thread wakes for
/// the replies as well.
const DEFER_READS_UP_TO: Duration = Duration::from_millis(5);
/// How long a stopping thread waits for the replies still due.
const DRAIN_AT_STOP: Duration = Duration::from_secs(1);
/// Longest server error text kept in a probe record.
const MAX_ERROR_CHARS: usize = 200;

struct ProbeWorker {
    thread: u16,
    encoded: Vec<u8>,
    reply_len: usize,
    sock: ProbeSocket,
    flight: InFlight,
    conn_info: ConnInfo,
    clock: RunClock,
    first_ns: f64,
    period_ns: f64,
    timeout_us: u64,
    events: EventSender,
    shared: Arc<ProbeShared>,
    realtime: bool,
    keep_going: bool,
    /// It has sent its first probe (counted once in [`ProbeShared::threads_sending`]).
    began: bool,
    /// Records ready to go to the collector (in batches, see [`FLUSH_EVERY`]).
    done: Vec<ProbeRecord>,
    /// When `done` last went to the collector.
    flushed_at: Instant,
    /// This thread's share of the shared counters not added to them yet: added with each
    /// flush, so the threads do not write one shared cache line per probe.
    unpublished: Counts,
    /// The connection was opened again after a loss and has brought no reply since: losing it
    /// again ends the thread (a server that drops every connection is not reconnected forever).
    reconnected_unanswered: bool,
    /// The last reply read carried the kernel's receive stamp ([`DEFER_READS_UP_TO`]).
    stamped: bool,
    /// The read before the send ran out of time with replies maybe left (a burst, a thread
    /// that woke late): it goes on right after the send.
    reads_after_send: bool,
}

/// A thread's counts since its last flush.
#[derive(Debug, Default)]
struct Counts {
    kernel_stamped: u64,
    read_stamped: u64,
    /// The most probes outstanding at once since the last flush.
    max_outstanding: u64,
}

/// Why a thread's connection can go on no more.
enum Broken {
    /// The server took longer than `--timeout` to answer (or to accept a probe): the run ends.
    Timeout,
    /// Reset, closed, or garbled: reconnect.
    Lost(io::Error),
}

impl ProbeWorker {
    fn run(mut self) {
        tighten_timer_slack();
        if self.realtime && crate::measure::clock::try_realtime_priority() {
            self.shared.realtime_threads.fetch_add(1, Ordering::Relaxed);
        }
        let mut seq: u64 = 0;
        while !self.stopping() {
            if seq == 100 {
                crate::measure::test_panic_point("probe");
            }
            let intended_us = ((self.first_ns + seq as f64 * self.period_ns) / 1e3) as u64;
            let due = self.clock.instant_at(intended_us);
            // A probe slot is used up only once its probe went out: after a reconnect the same
            // probe leaves late, counted from its intended time, so no slot goes unrecorded.
            let outcome = match self.wait_until(due) {
                Ok(true) => {
                    // What the read before the send left (a burst of replies) is read right
                    // after it.
                    let late_reads = std::mem::take(&mut self.reads_after_send);
                    let mut sent = self.send_probe(seq, intended_us);
                    if late_reads && sent.is_ok() {
                        // Never past the next probe's wake-up: what is left then is read as it
                        // comes (more than the last probe is outstanding).
                        let next_due = self.clock.instant_at(self.intended_us(seq + 1));
                        let until = next_due.checked_sub(SPIN).unwrap_or(next_due);
                        sent = self.take_replies(Some(until)).map(|_| ());
                    }
                    seq += 1;
                    // Now the next probe is furthest off.
                    if self.flush_due(Instant::now()) {
                        self.flush();
                    }
                    sent
                }
                Ok(false) => Ok(()),
                Err(broken) => Err(broken),
            };
            if let Err(broken) = outcome
                && !self.recover(broken, &mut seq)
            {
                return;
            }
        }
        self.drain_at_stop();
    }

    /// The probe slot at or after `now_us`.
    fn seq_at(&self, now_us: u64) -> u64 {
        ((now_us as f64 * 1e3 - self.first_ns) / self.period_ns)
            .ceil()
            .max(0.0) as u64
    }

    fn intended_us(&self, seq: u64) -> u64 {
        ((self.first_ns + seq as f64 * self.period_ns) / 1e3) as u64
    }

    /// The server is gone (`--keep-going` runs): says so once, skips the probes due while it
    /// tries to connect again, says when it is back. False when the run stopped meanwhile.
    fn ride_out(&mut self, error: String, seq: &mut u64) -> bool {
        let send = |worker: &Self, event: Event| {
            // Never refused: rare, and the collector must not miss the state of a node.
            let _ = worker.events.send(event);
        };
        send(
            self,
            Event::NodeState {
                thread: self.thread,
                at_us: self.clock.now_us(),
                error: Some(error),
            },
        );
        loop {
            let next = self.seq_at(self.clock.now_us());
            if next > *seq {
                *seq = next;
                send(
                    self,
                    Event::Skipped {
                        thread: self.thread,
                        through_us: self.intended_us(next - 1),
                    },
                );
            }
            if self.stopping() {
                return false;
            }
            if let Ok(sock) = ProbeSocket::connect(&self.conn_info) {
                self.sock = sock;
                self.stamped = false;
                self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                // Probes resume at the next slot, counted from their intended times.
                *seq = self.seq_at(self.clock.now_us());
                if *seq > 0 {
                    send(
                        self,
                        Event::Skipped {
                            thread: self.thread,
                            through_us: self.intended_us(*seq - 1),
                        },
                    );
                }
                send(
                    self,
                    Event::NodeState {
                        thread: self.thread,
                        at_us: self.clock.now_us(),
                        error: None,
                    },
                );
                return true;
            }
            let until = Instant::now() + RETRY_EVERY;
            while Instant::now() < until {
                if self.stopping() {
                    return false;
                }
                std::thread::sleep(MAX_WAIT);
            }
        }
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    /// Whether this thread reads its replies when it wakes for a send rather than as they
    /// arrive ([`DEFER_READS_UP_TO`]): only while the server keeps up, with no probe
    /// outstanding but the last one sent. Once an earlier one waits (the server is stalled),
    /// the thread wakes for the first reply again: the replies queued behind the stall come
    /// back in a burst, which the kernel merges under its later segments' stamps if nobody
    /// reads, and the first of them ends the stall.
    fn defers_reads(&self) -> bool {
        self.stamped
            && !self.sock.is_tls()
            && self.period_ns <= DEFER_READS_UP_TO.as_nanos() as f64
            && self.flight.len() <= 1
    }

    /// Sleeps in `poll` until just before `due`, taking replies as they arrive and handing
    /// them on when a batch is due, then spins. Ok(false) when the run is stopping (nothing
    /// more to send).
    fn wait_until(&mut self, due: Instant) -> Result<bool, Broken> {
        let spin_from = due.checked_sub(SPIN).unwrap_or(due);
        loop {
            if self.stopping() {
                return Ok(false);
            }
            self.check_overdue()?;
            let mut now = Instant::now();
            let mut left = spin_from.saturating_duration_since(now);
            if left >= FLUSH_ROOM && self.flush_due(now) {
                self.flush();
                now = Instant::now();
                left = spin_from.saturating_duration_since(now);
            }
            if left.is_zero() {
                break;
            }
            // Records waiting for their batch go on time however long the next probe is off (a
            // batch due with less room than that goes after the send).
            let flush_at = self.flushed_at + FLUSH_EVERY;
            let longest = if self.done.is_empty() || flush_at <= now {
                MAX_WAIT
            } else {
                (flush_at - now).min(MAX_WAIT)
            };
            if self.defers_reads() {
                std::thread::sleep(left.min(longest));
                continue;
            }
            let readable = self
                .sock
                .wait_readable(left.min(longest))
                .map_err(Broken::Lost)?;
            if readable {
                self.take_replies(Some(spin_from))?;
            }
        }
        if self.defers_reads() {
            // The replies that came since the last send, read before the next probe leaves,
            // even by a thread that woke late (a few µs more lag): one left unread would take
            // the stamp of the next reply, which the kernel merges into it, and a reply can
            // come back before the send returns (loopback). A burst too long for [`SPIN`] is
            // read on after the send.
            let until = due.max(Instant::now()) + SPIN;
            self.reads_after_send = !self.take_replies(Some(until))?;
        }
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        Ok(true)
    }

    fn send_probe(&mut self, seq: u64, intended_us: u64) -> Result<(), Broken> {
        let sent = Instant::now();
        let result = self.sock.send(&self.encoded);
        if !self.began {
            self.began = true;
            self.shared.threads_sending.fetch_add(1, Ordering::Release);
        }
        self.flight.sent(Outstanding {
            seq,
            intended_us,
            sent_us: self.clock.us_at(sent),
        });
        let outstanding = &mut self.unpublished.max_outstanding;
        *outstanding = (*outstanding).max(self.flight.len() as u64);
        match result {
            Ok(()) => Ok(()),
            // The server stopped reading this connection for all of --timeout.
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(Broken::Timeout)
            }
            Err(err) => Err(Broken::Lost(err)),
        }
    }

    /// Reads the replies that have arrived, one reply's length at a time (see [`socket`]; a
    /// backlog in one go),
    /// until none is left or `until` has passed (the next probe is due: reading never holds a
    /// probe back). A read that leaves every probe answered is the last: one more `recvmsg` per
    /// reply would only say "nothing" (bytes nobody asked for, or the server's close, make the
    /// socket readable again and are read at the next wake-up). False when `until` cut it
    /// short (replies may be left).
    fn take_replies(&mut self, until: Option<Instant>) -> Result<bool, Broken> {
        loop {
            if until.is_some_and(|t| Instant::now() >= t) {
                return Ok(false);
            }
            // A reply longer than expected (an error text) is read in one go, not 7 bytes at
            // a time; so are the replies of a backlog (more than one probe outstanding: the
            // server was stalled, and answers them together when it resumes). Read one at a
            // time, a backlog took 1250 `recvmsg` calls after a 250 ms stall at 5000/s, about
            // 4 ms, and every reply to a later probe that came meanwhile was merged by the
            // kernel into the unread rest, which then carried its stamp: the backlog's replies
            // read up to 4.3 ms late (strace showed the server's one `writev` of them; the
            // hostile trial). In one read they carry the stamp of the write they came in.
            let want = if self.flight.has_partial_reply() {
                usize::MAX
            } else {
                self.reply_len * self.flight.len().max(1)
            };
            let Some((times, bytes)) = self.sock.read(want).map_err(Broken::Lost)? else {
                return Ok(true);
            };
            let read_us = self.clock.us_at(times.read);
            let reply_us = times.kernel.map(|at| self.clock.us_at(at));
            let before = self.done.len();
            self.flight
                .received(
                    bytes,
                    Arrival {
                        reply_us: reply_us.unwrap_or(read_us),
                        read_us,
                    },
                    &mut self.done,
                )
                .map_err(Broken::Lost)?;
            let replies = (self.done.len() - before) as u64;
            if replies > 0 {
                self.reconnected_unanswered = false;
            }
            if reply_us.is_some() {
                self.unpublished.kernel_stamped += replies;
            } else {
                self.unpublished.read_stamped += replies;
            }
            self.stamped = reply_us.is_some();
            if self.flight.is_empty() && !self.flight.has_partial_reply() {
                return Ok(true);
            }
        }
    }

    /// The oldest outstanding probe has waited longer than `--timeout`. Its reply may be in
    /// the socket already (this thread was off its core): read first, then judge.
    fn check_overdue(&mut self) -> Result<(), Broken> {
        if self.flight.overdue(self.clock.now_us(), self.timeout_us) {
            self.take_replies(None)?;
            self.flush();
            if self.flight.overdue(self.clock.now_us(), self.timeout_us) {
                return Err(Broken::Timeout);
            }
        }
        Ok(())
    }

    /// True when the waiting records should go ([`FLUSH_EVERY`], [`FLUSH_BATCH`]).
    fn flush_due(&self, now: Instant) -> bool {
        !self.done.is_empty()
            && (now >= self.flushed_at + FLUSH_EVERY || self.done.len() >= FLUSH_BATCH)
    }

    /// Hands the finished records to the collector, and adds this thread's counts to the shared
    /// ones.
    fn flush(&mut self) {
        self.flushed_at = Instant::now();
        let counts = std::mem::take(&mut self.unpublished);
        let shared = &self.shared;
        if counts.kernel_stamped > 0 {
            shared
                .replies_kernel_stamped
                .fetch_add(counts.kernel_stamped, Ordering::Relaxed);
        }
        if counts.read_stamped > 0 {
            shared
                .replies_read_stamped
                .fetch_add(counts.read_stamped, Ordering::Relaxed);
        }
        if counts.max_outstanding > 0 {
            shared
                .max_outstanding
                .fetch_max(counts.max_outstanding, Ordering::Relaxed);
        }
        for mut record in self.done.drain(..) {
            if let Some(error) = record.error.as_mut()
                && error.len() > MAX_ERROR_CHARS
            {
                let cut = error
                    .char_indices()
                    .nth(MAX_ERROR_CHARS)
                    .map_or(error.len(), |(i, _)| i);
                error.truncate(cut);
                error.push('…');
            }
            match self.events.try_send(Event::Probe(record)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.shared.stop.store(true, Ordering::Relaxed)
                }
            }
        }
    }

    /// This thread can go on no more: the collector sees it in the shared slot, which it checks
    /// whatever the channel holds.
    fn report_failure(&self, error: String) {
        self.shared.fail(self.thread, error);
    }

    /// After a broken connection. A server that did not answer within `--timeout` ends the run
    /// (a reconnect would only wait again), as does one that sent what is not RESP or is past
    /// the bounds of a probe's reply (it would again). A reset or closed connection loses only
    /// its outstanding probes, recorded as errors, and gets one new connection; the schedule goes
    /// on (probes due meanwhile leave late and count from their intended time), or the thread
    /// reports and ends. A new connection lost before it brought a reply is not replaced.
    fn recover(&mut self, broken: Broken, seq: &mut u64) -> bool {
        match broken {
            Broken::Timeout => {
                let error = format!(
                    "the server did not answer a probe within --timeout {:?}",
                    self.conn_info.command_timeout
                );
                let waited_us = self
                    .flight
                    .oldest_sent_us()
                    .map(|sent| self.clock.now_us().saturating_sub(sent));
                self.flight.fail_all(&error, &mut self.done);
                self.flush();
                if self.keep_going && !self.stopping() {
                    return self.ride_out(error, seq);
                }
                // The run ends on it: the stall that did it is said with its length.
                if let Some(waited_us) = waited_us {
                    self.shared
                        .longest_timed_out_us
                        .fetch_max(waited_us, Ordering::Relaxed);
                }
                self.report_failure(error);
                false
            }
            Broken::Lost(err) => {
                self.flight.fail_all(&err.to_string(), &mut self.done);
                self.flush();
                if self.stopping() {
                    return false;
                }
                if err.kind() == ErrorKind::InvalidData {
                    self.report_failure(err.to_string());
                    return false;
                }
                if self.reconnected_unanswered {
                    let error =
                        format!("{err} (again, before the new connection brought any reply)");
                    if self.keep_going {
                        return self.ride_out(error, seq);
                    }
                    self.report_failure(error);
                    return false;
                }
                match ProbeSocket::connect(&self.conn_info) {
                    Ok(sock) => {
                        self.sock = sock;
                        self.stamped = false;
                        self.reconnected_unanswered = true;
                        self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    Err(err) if self.keep_going => self.ride_out(crate::error::one_line(&err), seq),
                    Err(err) => {
                        self.report_failure(crate::error::one_line(&err));
                        false
                    }
                }
            }
        }
    }

    /// Stopping: no more probes; the replies still due are taken for a short while, the rest
    /// recorded as failed. Never past the oldest outstanding probe's `--timeout`: the replies
    /// come in order, so once it is overdue none can come in time (a frozen server held the
    /// stop a whole [`DRAIN_AT_STOP`] when this thread had not yet seen the timeout another
    /// thread ended the run with).
    fn drain_at_stop(&mut self) {
        let until = Instant::now() + DRAIN_AT_STOP;
        while let Some(oldest_sent_us) = self.flight.oldest_sent_us() {
            let due_us = (oldest_sent_us + self.timeout_us).saturating_sub(self.clock.now_us());
            let left = until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_micros(due_us));
            if left.is_zero() {
                // Replies already in the socket still count (this thread may have been off its
                // core), as `check_overdue` reads before it judges; none can come after.
                let before = self.flight.len();
                if matches!(self.sock.wait_readable(Duration::ZERO), Ok(true))
                    && self.take_replies(None).is_ok()
                    && self.flight.len() < before
                {
                    continue;
                }
                break;
            }
            match self.sock.wait_readable(left.min(MAX_WAIT)) {
                Ok(true) => {
                    if self.take_replies(Some(until)).is_err() {
                        break;
                    }
                }
                Ok(false) => {}
                Err(_) => break,
            }
        }
        // What is still outstanding waited at least until now: recorded as failed, not lost.
        self.shared
            .unanswered_at_stop
            .fetch_add(self.flight.len() as u64, Ordering::Relaxed);
        if let Some(oldest_sent_us) = self.flight.oldest_sent_us() {
            self.shared.longest_unanswered_at_stop_us.fetch_max(
                self.clock.now_us().saturating_sub(oldest_sent_us),
                Ordering::Relaxed,
            );
        }
        self.flight.fail_all(NO_REPLY_AT_STOP, &mut self.done);
        self.flush();
    }
}
