//! Probe threads: each a dedicated OS thread with its own connection, sending one small command
//! per tick of a fixed schedule. Open loop: the schedule never waits for the server, and every
//! probe records when it *should* have gone, so a probe held back by a stalled server is
//! measured from that moment (wrk2's correction for coordinated omission).

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::{Sender, TrySendError};

use crate::clock::{RunClock, sleep_until_precise, tighten_timer_slack};
use crate::record::{ProbeCmd, ProbeRecord};
use crate::resp::{RawConn, Reply, encode_command};
use crate::run::Event;
use crate::target::ConnInfo;

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
}

impl ProbeConfig {
    /// Time between two probes of one thread.
    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.rate_per_thread)
    }

    /// Time between two probes of all threads together: the resolution of every stall figure.
    pub fn aggregate_interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / (self.rate_per_thread * f64::from(self.threads)))
    }
}

/// Shared counters and switches of a running probe set.
#[derive(Debug, Default)]
pub struct ProbeShared {
    /// Set to stop every probe thread after its current probe.
    pub stop: AtomicBool,
    /// Probe records the collector could not take in time (channel full): counted, never waited on.
    pub dropped: AtomicU64,
    /// Probe threads that got real-time priority.
    pub realtime_threads: std::sync::atomic::AtomicU32,
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
    events: Sender<Event>,
    shared: Arc<ProbeShared>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut conns = Vec::with_capacity(config.threads as usize);
    for thread in 0..config.threads {
        let conn = RawConn::connect(conn_info)
            .with_context(|| format!("opening the connection of probe thread {thread}"))?;
        conns.push(conn);
    }
    let period_ns = 1e9 / config.rate_per_thread;
    let mut handles = Vec::with_capacity(conns.len());
    for (thread, conn) in conns.into_iter().enumerate() {
        let offset_ns = period_ns * thread as f64 / f64::from(config.threads);
        let worker = ProbeWorker {
            thread: thread as u16,
            cmd: config.cmd,
            encoded: match config.cmd {
                ProbeCmd::Ping => encode_command(&[b"PING"]),
                ProbeCmd::Get => encode_command(&[b"GET", config.get_key.as_bytes()]),
            },
            conn,
            conn_info: conn_info.clone(),
            clock,
            first_ns: schedule_start_us as f64 * 1e3 + offset_ns,
            period_ns,
            events: events.clone(),
            shared: Arc::clone(&shared),
            realtime: config.realtime,
        };
        let handle = std::thread::Builder::new()
            .name(format!("probe-{thread}"))
            .spawn(move || worker.run())
            .context("starting a probe thread")?;
        handles.push(handle);
    }
    Ok(handles)
}

struct ProbeWorker {
    thread: u16,
    cmd: ProbeCmd,
    encoded: Vec<u8>,
    conn: RawConn,
    conn_info: ConnInfo,
    clock: RunClock,
    first_ns: f64,
    period_ns: f64,
    events: Sender<Event>,
    shared: Arc<ProbeShared>,
    realtime: bool,
}

impl ProbeWorker {
    fn run(mut self) {
        tighten_timer_slack();
        if self.realtime && crate::clock::try_realtime_priority() {
            self.shared.realtime_threads.fetch_add(1, Ordering::Relaxed);
        }
        let mut seq: u64 = 0;
        while !self.shared.stop.load(Ordering::Relaxed) {
            let intended_us = ((self.first_ns + seq as f64 * self.period_ns) / 1e3) as u64;
            let intended = self.clock.instant_at(intended_us);
            sleep_until_precise(intended);
            if self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let (record, io_error) = self.probe_once(seq, intended_us);
            self.emit(Event::Probe(record));
            seq += 1;
            if let Some(kind) = io_error
                && !self.recover(kind)
            {
                return;
            }
        }
    }

    /// One probe; also returns the kind of I/O error when the connection failed.
    fn probe_once(&mut self, seq: u64, intended_us: u64) -> (ProbeRecord, Option<ErrorKind>) {
        let sent = Instant::now();
        let outcome = self
            .conn
            .send_raw(&self.encoded)
            .and_then(|()| self.conn.read_reply());
        let done = Instant::now();
        let sent_us = self.clock.us_at(sent);
        let mut record = ProbeRecord {
            thread: self.thread,
            seq,
            cmd: self.cmd,
            intended_us,
            sent_us,
            reply_us: None,
            latency_us: None,
            ok: false,
            error: None,
        };
        match outcome {
            Ok(reply) => {
                let reply_us = self.clock.us_at(done);
                record.reply_us = Some(reply_us);
                record.latency_us = Some(reply_us.saturating_sub(intended_us));
                match (&reply, self.cmd) {
                    (Reply::Error(text), _) => record.error = Some(text.clone()),
                    (Reply::Status(s), ProbeCmd::Ping) if s == "PONG" => record.ok = true,
                    (Reply::Bulk(Some(_)), ProbeCmd::Get) => record.ok = true,
                    (other, _) => record.error = Some(format!("unexpected reply {other:?}")),
                }
            }
            Err(err) => {
                record.error = Some(err.to_string());
                return (record, Some(err.kind()));
            }
        }
        (record, None)
    }

    fn emit(&self, event: Event) {
        match self.events.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => self.shared.stop.store(true, Ordering::Relaxed),
        }
    }

    /// After a connection error: a server that did not answer within `--timeout` ends the run
    /// (a reconnect would only wait again); a reset connection gets one new connection, or the
    /// thread reports and ends.
    fn recover(&mut self, kind: ErrorKind) -> bool {
        if matches!(kind, ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            let _ = self.events.send(Event::ProbeFailed {
                thread: self.thread,
                error: format!(
                    "the server did not answer a probe within --timeout {:?}",
                    self.conn_info.command_timeout
                ),
            });
            return false;
        }
        match RawConn::connect(&self.conn_info) {
            Ok(conn) => {
                self.conn = conn;
                true
            }
            Err(err) => {
                let _ = self.events.send(Event::ProbeFailed {
                    thread: self.thread,
                    error: crate::error::one_line(&err),
                });
                false
            }
        }
    }
}
