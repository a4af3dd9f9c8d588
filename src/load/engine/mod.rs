//! The load generator: a few OS threads, each driving many non-blocking connections from a small
//! `mio` event loop, speaking hand-written pipelined RESP (GET, SET) and recording every reply
//! into per-second HdrHistograms.
//!
//! Why an event loop and not a thread per client: on a 2-core machine that also runs the server,
//! 50 blocking client threads would spend the CPU the server needs on context switches, and the
//! client, not the server, would set the pace. One thread with epoll does what redis-benchmark
//! does (one reply read, one request written, per wake-up), and a second thread only when cores
//! are free. The threads measure their own CPU time (`RUSAGE_THREAD`) every second so the report
//! can say when the generator, not the server, was the limit.
//!
//! Closed loop (default): each connection keeps `pipeline` requests outstanding and sends the
//! next as soon as a reply comes; latency counts from the moment the request was written.
//! Open loop (`rate`): each connection follows a fixed schedule (the connections staggered so
//! the total is evenly spaced); a request that cannot go because its connection already has
//! `pipeline` outstanding waits, and its latency still counts from the schedule's intended time,
//! so a stalled server shows in full (no coordinated omission). Sub-millisecond timing on Linux
//! comes from a timerfd in the same epoll set, since epoll's own timeout has millisecond grain.
//!
//! On a cluster each connection is bound to one node and sends only keys of that node's shard
//! ([`EngineServer::key_indices`]), as `redis-benchmark --cluster` binds each client to a node:
//! no request is sent to a node that does not serve it while the slot map holds. A `MOVED` or
//! `ASK` reply (the map changed under the run) is counted apart from errors and followed: the
//! request is sent again where the reply says (after `ASKING` for an ASK), on a blocking
//! connection of the worker's to that node, and its latency counts both trips.
//!
//! Here: what the generator is told and `start`. `worker`: one thread's event loop (`send`: the
//! schedule and the requests; `replies`: replies, redirects, broken connections). `recorder`:
//! one thread's per-second aggregates, samples and outbox. `os`: the open-files limit, each
//! thread's CPU and run-queue time, the timerfd.

mod os;
mod recorder;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crate::measure::event::EventSender;
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};

use super::keyspace::{KeyNaming, ValueSize};
use crate::measure::clock::RunClock;
pub use crate::measure::generator::{EngineMsg, Sample, SecondAgg, ThreadSecond, ThreadSummary};
use crate::measure::target::ConnInfo;
pub use os::{ThreadTimes, thread_cpu_us, thread_run_delay_us};
use worker::{Client, Worker};

/// One server the clients load.
#[derive(Debug, Clone)]
pub struct EngineServer {
    /// How to connect.
    pub conn: ConnInfo,
    /// GETs and SETs pick keys `0..keys` uniformly.
    pub keys: u64,
    /// Sizes of SET values.
    pub set_size: ValueSize,
    /// On a cluster: the only key indices (below `keys`) this server is sent, those whose
    /// slot its shard serves; `None`: every index `0..keys`.
    pub key_indices: Option<Arc<Vec<u32>>>,
    /// Which requests its clients send.
    pub ops: OpMix,
}

/// Which requests the clients of one server send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpMix {
    /// GETs and SETs by the `--ratio` weights.
    Ratio,
    /// GETs only (a replica read from with `--read-from replicas`).
    GetsOnly,
    /// SETs only (a master written to while its replicas take the GETs).
    SetsOnly,
}

/// What the generator does, validated.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The servers (see `client_servers` for which client talks to which).
    pub servers: Vec<EngineServer>,
    /// Connections in total.
    pub clients: u32,
    /// The server of each connection (`client_servers[c]`); empty: client `c` talks to server
    /// `c % servers.len()`.
    pub client_servers: Vec<u16>,
    /// OS threads; client `c` lives on thread `c % threads`.
    pub threads: u16,
    /// Requests outstanding per connection at most.
    pub pipeline: u32,
    /// Open loop: requests per second in total. `None`: closed loop.
    pub rate: Option<f64>,
    /// Relative weight of GETs.
    pub get_weight: u32,
    /// Relative weight of SETs.
    pub set_weight: u32,
    /// A reply later than this counts as delayed, µs.
    pub delayed_threshold_us: u64,
    /// A request unanswered this long is a timeout (its connection is reopened), µs.
    pub timeout_us: u64,
    /// Record one [`Sample`] per request of this server (for the writes-under-load analysis).
    pub sample_server: Option<usize>,
    /// Seed of key choice and SET bytes.
    pub seed: u64,
    /// Key names.
    pub naming: KeyNaming,
}

/// Shared switch of a running generator.
#[derive(Debug)]
pub struct Control {
    /// Run-clock time at which the clients stop sending; `u64::MAX` until decided.
    pub stop_at_us: AtomicU64,
    /// A server that answered none of a thread's requests for `--timeout` (frozen, or gone
    /// without closing the connections), said in words: the run ends with it, within the
    /// user's limit (reopening connections to it would wait past it, a connect at a time).
    pub unanswered: std::sync::Mutex<Option<String>>,
    /// Run-clock time from which a server refused every reconnect (it is gone): the load's
    /// length ends there, so its rate is of the time the server served it. `u64::MAX`: none.
    pub lost_at_us: AtomicU64,
}

impl Control {
    /// Nothing decided yet.
    pub fn new() -> Control {
        Control {
            stop_at_us: AtomicU64::new(u64::MAX),
            unanswered: std::sync::Mutex::new(None),
            lost_at_us: AtomicU64::new(u64::MAX),
        }
    }

    /// The first server said to answer nothing, if one was.
    pub fn unanswered(&self) -> Option<String> {
        self.unanswered.lock().ok().and_then(|said| said.clone())
    }
}

impl Default for Control {
    fn default() -> Self {
        Control::new()
    }
}

/// Lateness past which an open-loop send counts as late, µs.
pub const LATE_SEND_US: u64 = 1_000;
/// Bytes of random data SET values are cut from.
const SET_POOL: usize = 1 << 20;

/// Opens every connection (authenticated), then starts the threads; they begin sending at
/// `start_us` on `clock` and stop at `control.stop_at_us`.
pub fn start(
    config: Arc<EngineConfig>,
    clock: RunClock,
    start_us: impl FnOnce(&RunClock) -> u64,
    control: Arc<Control>,
    tx: EventSender,
) -> Result<(u64, Vec<JoinHandle<()>>)> {
    // Each client is a connection: past the open-files limit they failed one by one after
    // the first few hundred connected (exit 1; the hostile trial under `ulimit -n 256`).
    const SPARE_FILES: u64 = 64;
    if let Some(limit) = os::raise_open_files_limit(u64::from(config.clients) + 256)
        && u64::from(config.clients) + SPARE_FILES > limit
    {
        return Err(crate::error::UsageError::invalid(
            "--clients",
            config.clients,
            format!(
                "each client is a connection, and this process may open {limit} files (ulimit -n): at most {} clients",
                limit.saturating_sub(SPARE_FILES)
            ),
        )
        .into());
    }
    let threads = config.threads.max(1) as usize;
    let mut per_thread: Vec<Vec<Client>> = (0..threads).map(|_| Vec::new()).collect();
    let period_us = config
        .rate
        .map(|rate| f64::from(config.clients) * 1e6 / rate);
    for c in 0..config.clients {
        let server = config
            .client_servers
            .get(c as usize)
            .map_or((c as usize) % config.servers.len(), |&s| usize::from(s));
        let info = &config.servers[server].conn;
        let stream = worker::connect(info)
            .with_context(|| format!("opening load connection {} to {info}", c + 1))?;
        per_thread[(c as usize) % threads].push(Client::new(
            server as u16,
            stream,
            config.pipeline as usize,
            period_us.map_or(0.0, |p| p * f64::from(c) / f64::from(config.clients)),
            period_us.unwrap_or(0.0),
        ));
    }
    let start_us = start_us(&clock);
    let mut pool = vec![0u8; SET_POOL + super::keyspace::MAX_LOAD_VALUE as usize];
    rand::rngs::SmallRng::seed_from_u64(config.seed ^ 0x5e7).fill_bytes(&mut pool);
    let pool = Arc::new(pool);
    // Every worker is built (event loop, registrations) before any thread starts, so a failure
    // leaves no thread behind.
    let mut workers = Vec::with_capacity(threads);
    for (id, clients) in per_thread.into_iter().enumerate() {
        workers.push(Worker::new(
            id as u16,
            Arc::clone(&config),
            clock,
            start_us,
            Arc::clone(&control),
            tx.clone(),
            clients,
            Arc::clone(&pool),
        )?);
    }
    let mut handles = Vec::with_capacity(threads);
    for (id, worker) in workers.into_iter().enumerate() {
        match std::thread::Builder::new()
            .name(format!("load-{id}"))
            .spawn(move || worker.run())
        {
            Ok(handle) => handles.push(handle),
            Err(err) => {
                // The threads already started see the stop and end.
                control.stop_at_us.store(0, Ordering::SeqCst);
                for handle in handles {
                    let _ = handle.join();
                }
                return Err(err).context("starting a load thread");
            }
        }
    }
    Ok((start_us, handles))
}
