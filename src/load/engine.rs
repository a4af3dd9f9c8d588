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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use crossbeam_channel::{Sender, TrySendError};

use crate::measure::event::Event;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::{Rng, RngExt, SeedableRng};

use super::keyspace::{KeyNaming, ValueSize, push_decimal};
use super::scanner::{ReplyScanner, Scanned};
use crate::measure::clock::{RunClock, sleep_until_precise, tighten_timer_slack};
pub use crate::measure::generator::{EngineMsg, Sample, SecondAgg, ThreadSecond, ThreadSummary};
use crate::measure::resp::RawConn;
use crate::measure::target::ConnInfo;

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
    tx: Sender<Event>,
) -> Result<(u64, Vec<JoinHandle<()>>)> {
    raise_open_files_limit(u64::from(config.clients) + 256);
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
        let stream = connect(info)
            .with_context(|| format!("opening load connection {} to {info}", c + 1))?;
        per_thread[(c as usize) % threads].push(Client {
            server: server as u16,
            stream: Some(stream),
            wbuf: Vec::with_capacity(4096),
            wpos: 0,
            inflight: VecDeque::with_capacity(config.pipeline as usize),
            scanner: ReplyScanner::new(),
            offset_us: period_us.map_or(0.0, |p| p * f64::from(c) / f64::from(config.clients)),
            period_us: period_us.unwrap_or(0.0),
            next_k: 0,
            blocked: false,
            in_heap: false,
            retry_at_us: 0,
        });
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

/// The earliest start (run clock µs) a request of the sampled server not yet recorded can have:
/// its oldest outstanding request's on each connection (requests are queued in start order),
/// and in open loop each connection's next scheduled send (a send held back keeps its intended
/// time); `now_us` when nothing is pending (a closed-loop request starts when it is written).
fn unsampled_from(clients: &[Client], config: &EngineConfig, start_us: u64, now_us: u64) -> u64 {
    let Some(sampled) = config.sample_server else {
        return now_us;
    };
    let open_loop = config.rate.is_some();
    clients
        .iter()
        .filter(|c| usize::from(c.server) == sampled)
        .flat_map(|c| {
            let outstanding = c.inflight.front().map(|p| p.start_us);
            let scheduled = open_loop.then(|| c.intended_us(start_us, c.next_k));
            outstanding.into_iter().chain(scheduled)
        })
        .fold(now_us, u64::min)
}

/// Raises this process's soft limit on open files towards `wanted` (within the hard limit), so
/// thousands of clients do not fail on the common default of 1024. Best effort.
fn raise_open_files_limit(wanted: u64) {
    #[cfg(unix)]
    {
        // SAFETY: getrlimit/setrlimit read and write a struct we own.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        let wanted = wanted as libc::rlim_t;
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            unsafe {
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = wanted;
}

fn connect(info: &ConnInfo) -> Result<TcpStream> {
    let std_stream = RawConn::connect(info)?
        .into_stream()
        .context("after the handshake")?;
    std_stream
        .set_nonblocking(true)
        .context("making the socket non-blocking")?;
    Ok(TcpStream::from_std(std_stream))
}

struct Pending {
    /// Latency counts from here: the write (closed loop) or the intended send (open loop).
    start_us: u64,
    /// When it was actually written (timeouts count from here).
    sent_us: u64,
    /// SET value bytes (0 for a GET).
    set_bytes: u32,
    /// The key's index (to send it again where a cluster redirects it).
    key_index: u64,
}

struct Client {
    server: u16,
    stream: Option<TcpStream>,
    wbuf: Vec<u8>,
    wpos: usize,
    inflight: VecDeque<Pending>,
    scanner: ReplyScanner,
    /// Open loop: this client's first intended send, µs after the load start.
    offset_us: f64,
    /// Open loop: time between two of its sends, µs.
    period_us: f64,
    /// Open loop: index of its next scheduled send.
    next_k: u64,
    /// Open loop: a due send is waiting for a free pipeline slot (or a connection).
    blocked: bool,
    /// Open loop: the client has an entry in the schedule heap (at most one).
    in_heap: bool,
    /// When to try reconnecting, while the connection is down.
    retry_at_us: u64,
}

impl Client {
    fn intended_us(&self, start_us: u64, k: u64) -> u64 {
        start_us + (self.offset_us + k as f64 * self.period_us) as u64
    }
}

const TIMER: Token = Token(usize::MAX);
/// Longest sleep in the loop: the stop switch, timeouts and reconnects are checked this often.
const HOUSEKEEPING_US: u64 = 20_000;
/// Most per-thread messages held back while the collector is busy before samples are dropped.
const OUTBOX_LIMIT: usize = 512;
/// Samples per message: 64 KiB, under the mmap threshold `main` sets, so a batch's buffer comes
/// from the heap and goes back to it (not a mapping of its own per batch).
const SAMPLE_BATCH: usize = 4096;
/// How many connection problems one thread reports in full.
const NOTES_PER_THREAD: u32 = 3;

/// Per-thread recording state: the current second's aggregates, the samples, the outbox.
struct Recorder {
    thread: u16,
    start_us: u64,
    threshold_us: u64,
    sample_server: Option<usize>,
    cur_second: u64,
    cur: Vec<SecondAgg>,
    samples: Vec<Sample>,
    samples_dropped: u64,
    outbox: VecDeque<EngineMsg>,
    cpu_mark: (ThreadTimes, u64),
    notes: u32,
}

impl Recorder {
    /// A request the cluster redirected (followed by the worker): counted, and said once.
    fn redirected(&mut self, server: usize, ask: bool, text: &str) {
        let agg = &mut self.cur[server];
        if ask {
            agg.asked += 1;
        } else {
            agg.moved += 1;
        }
        if self.notes < NOTES_PER_THREAD {
            self.notes += 1;
            self.outbox.push_back(EngineMsg::Note(format!(
                "the cluster redirected a request ({text}): its slot map changed since the load started; redirected requests are sent again where it says"
            )));
        }
    }

    fn reply(&mut self, server: usize, pending: Pending, reply: Scanned, done_us: u64) {
        let latency = done_us.saturating_sub(pending.start_us);
        let agg = &mut self.cur[server];
        let ok = match reply {
            Scanned::Bulk { len_bytes } if pending.set_bytes == 0 => {
                agg.record_ok(latency, len_bytes, self.threshold_us);
                true
            }
            Scanned::Nil if pending.set_bytes == 0 => {
                agg.record_ok(latency, 0, self.threshold_us);
                agg.misses += 1;
                true
            }
            Scanned::Status { ok: true } if pending.set_bytes > 0 => {
                agg.record_ok(latency, u64::from(pending.set_bytes), self.threshold_us);
                true
            }
            // A redirect that could not be followed (a second one, or its node unreachable).
            Scanned::Error(text) if text.starts_with("MOVED ") || text.starts_with("ASK ") => {
                agg.errors += 1;
                if self.notes < NOTES_PER_THREAD {
                    self.notes += 1;
                    self.outbox.push_back(EngineMsg::Note(format!(
                        "a redirected request could not be followed: {text}"
                    )));
                }
                false
            }
            Scanned::Error(text) => {
                agg.errors += 1;
                if self.notes < NOTES_PER_THREAD {
                    self.notes += 1;
                    self.outbox
                        .push_back(EngineMsg::Note(format!("the server answered: {text}")));
                }
                false
            }
            other => {
                agg.errors += 1;
                if self.notes < NOTES_PER_THREAD {
                    self.notes += 1;
                    self.outbox
                        .push_back(EngineMsg::Note(format!("unexpected reply {other:?}")));
                }
                false
            }
        };
        self.sample(server, pending.start_us, latency, ok, true);
    }

    /// Requests that got no reply: counted as errors or timeouts, and as failed samples.
    fn lost(&mut self, server: usize, lost: &mut VecDeque<Pending>, now_us: u64, timeout: bool) {
        for pending in lost.drain(..) {
            if timeout {
                self.cur[server].timeouts += 1;
            } else {
                self.cur[server].errors += 1;
            }
            let waited = now_us.saturating_sub(pending.start_us);
            self.sample(server, pending.start_us, waited, false, false);
        }
    }

    #[inline]
    fn sample(&mut self, server: usize, start_us: u64, latency_us: u64, ok: bool, replied: bool) {
        if self.sample_server == Some(server) {
            self.samples.push(Sample {
                start_us,
                latency_us: latency_us.min(u64::from(u32::MAX)) as u32,
                ok,
                replied,
            });
            if self.samples.len() >= SAMPLE_BATCH {
                self.ship_samples();
            }
        }
    }

    fn ship_samples(&mut self) {
        if self.samples.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.samples, Vec::with_capacity(SAMPLE_BATCH));
        if self.outbox.len() >= OUTBOX_LIMIT {
            self.samples_dropped += batch.len() as u64;
        } else {
            self.outbox.push_back(EngineMsg::Samples(batch));
        }
    }

    fn second_of(&self, us: u64) -> u64 {
        us.saturating_sub(self.start_us) / 1_000_000
    }

    /// The second `now_us` falls in, but never past the run's last second once the stop time
    /// is known (replies after the stop are counted in the last second).
    fn clamped_second(&self, now_us: u64, stop_at: u64) -> u64 {
        let second = self.second_of(now_us);
        if stop_at == u64::MAX {
            second
        } else {
            second.min(self.second_of(stop_at.saturating_sub(1)))
        }
    }

    /// Closes every second before `second`; `unsampled_from` (asked only when a second closes)
    /// is what [`ThreadSecond::unsampled_from_us`] says.
    fn advance_to(&mut self, second: u64, now_us: u64, unsampled_from: impl FnOnce() -> u64) {
        if self.cur_second >= second {
            return;
        }
        let unsampled_from_us = unsampled_from();
        while self.cur_second < second {
            self.close_second(now_us, unsampled_from_us);
            self.cur_second += 1;
        }
    }

    /// Ships the current second (samples first, so the collector has them when the second is
    /// final) and starts a fresh one with the same number.
    fn close_second(&mut self, now_us: u64, unsampled_from_us: u64) {
        self.ship_samples();
        let servers = self.cur.len();
        let aggs = std::mem::replace(
            &mut self.cur,
            (0..servers).map(|_| SecondAgg::new()).collect(),
        );
        let times = ThreadTimes::now();
        let wall = now_us.saturating_sub(self.cpu_mark.1);
        let share = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(now), Some(then)) if wall > 0 => {
                Some(100.0 * now.saturating_sub(then) as f64 / wall as f64)
            }
            _ => None,
        };
        let cpu_pct = share(times.cpu_us, self.cpu_mark.0.cpu_us);
        let wait_pct = share(times.run_delay_us, self.cpu_mark.0.run_delay_us);
        self.cpu_mark = (times, now_us);
        self.outbox.push_back(EngineMsg::Second(ThreadSecond {
            thread: self.thread,
            second: self.cur_second,
            servers: aggs,
            cpu_pct,
            wait_pct,
            unsampled_from_us,
        }));
    }

    /// Hands queued messages to the collector without ever blocking.
    fn deliver(&mut self, tx: &Sender<Event>) {
        while let Some(msg) = self.outbox.pop_front() {
            match tx.try_send(Event::Load(Box::new(msg))) {
                Ok(()) => {}
                Err(TrySendError::Full(event)) => {
                    if let Event::Load(msg) = event {
                        self.outbox.push_front(*msg);
                    }
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.outbox.clear();
                    return;
                }
            }
        }
    }
}

struct Worker {
    config: Arc<EngineConfig>,
    clock: RunClock,
    control: Arc<Control>,
    tx: Sender<Event>,
    poll: Poll,
    clients: Vec<Client>,
    rng: rand::rngs::SmallRng,
    pool: Arc<Vec<u8>>,
    read_buf: Vec<u8>,
    rec: Recorder,
    /// Connections to the nodes a cluster redirected requests to, by address.
    redirects: std::collections::HashMap<String, redis::Connection>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    timer: Option<timer::TimerFd>,
    armed_for: u64,
    schedule_lag: Histogram<u64>,
    late_sends: u64,
    reconnects: u64,
    draining: bool,
    touched: Vec<usize>,
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: u16,
        config: Arc<EngineConfig>,
        clock: RunClock,
        start_us: u64,
        control: Arc<Control>,
        tx: Sender<Event>,
        clients: Vec<Client>,
        pool: Arc<Vec<u8>>,
    ) -> Result<Worker> {
        let poll = Poll::new().context("creating a load thread's event loop")?;
        let servers = config.servers.len();
        let timer = if config.rate.is_some() {
            timer::TimerFd::new()
        } else {
            None
        };
        if let Some(timer) = &timer {
            timer.register(poll.registry(), TIMER)?;
        }
        let mut worker = Worker {
            rng: rand::rngs::SmallRng::seed_from_u64(
                config.seed.wrapping_add(u64::from(id) * 0x9e37_79b9),
            ),
            rec: Recorder {
                thread: id,
                start_us,
                threshold_us: config.delayed_threshold_us,
                sample_server: config.sample_server,
                cur_second: 0,
                cur: (0..servers).map(|_| SecondAgg::new()).collect(),
                samples: Vec::with_capacity(if config.sample_server.is_some() {
                    SAMPLE_BATCH
                } else {
                    0
                }),
                samples_dropped: 0,
                outbox: VecDeque::new(),
                cpu_mark: (ThreadTimes::default(), 0),
                notes: 0,
            },
            config,
            clock,
            control,
            tx,
            poll,
            clients,
            pool,
            read_buf: vec![0u8; 256 * 1024],
            redirects: std::collections::HashMap::new(),
            heap: BinaryHeap::new(),
            timer,
            armed_for: 0,
            schedule_lag: Histogram::new(3).context("creating a histogram")?,
            late_sends: 0,
            reconnects: 0,
            draining: false,
            touched: Vec::new(),
        };
        for i in 0..worker.clients.len() {
            if let Some(stream) = worker.clients[i].stream.as_mut() {
                worker
                    .poll
                    .registry()
                    .register(stream, Token(i), Interest::READABLE | Interest::WRITABLE)
                    .context("registering a load connection")?;
            }
        }
        Ok(worker)
    }

    fn stop_at(&self) -> u64 {
        self.control.stop_at_us.load(Ordering::Relaxed)
    }

    fn run(mut self) {
        tighten_timer_slack();
        let start_us = self.rec.start_us;
        sleep_until_precise(self.clock.instant_at(start_us));
        self.rec.cpu_mark = (ThreadTimes::now(), self.clock.now_us());
        let times_start = self.rec.cpu_mark.0;
        let wall_start = self.rec.cpu_mark.1;
        if self.config.rate.is_some() {
            for i in 0..self.clients.len() {
                let due = self.clients[i].intended_us(start_us, 0);
                self.clients[i].in_heap = true;
                self.heap.push(Reverse((due, i)));
            }
        } else {
            let now = self.clock.now_us();
            for i in 0..self.clients.len() {
                self.refill_closed(i, now);
            }
        }
        let mut events = Events::with_capacity(1024);
        let mut last_housekeeping = 0u64;
        let mut drain_until = u64::MAX;
        // Half a second in, the tests may ask for a panic (debug builds only).
        let mut panic_point_us = Some(start_us + 500_000);
        loop {
            let now = self.clock.now_us();
            if panic_point_us.is_some_and(|at| now >= at) {
                panic_point_us = None;
                crate::measure::test_panic_point("load");
            }
            let stop_at = self.stop_at();
            if !self.draining && now >= stop_at {
                self.enter_drain(now, stop_at);
                drain_until = now + self.config.timeout_us.min(2_000_000);
            }
            if !self.draining {
                self.advance_seconds(now, stop_at);
                if self.config.rate.is_some() {
                    self.send_due(now, stop_at);
                }
            }
            if now >= last_housekeeping + HOUSEKEEPING_US {
                last_housekeeping = now;
                self.housekeeping(now);
            }
            if self.draining
                && (now >= drain_until || self.clients.iter().all(|c| c.inflight.is_empty()))
            {
                break;
            }
            let timeout = self.next_wait(now, stop_at, last_housekeeping);
            if let Err(err) = self.poll.poll(&mut events, Some(timeout))
                && err.kind() != io::ErrorKind::Interrupted
            {
                self.rec
                    .outbox
                    .push_back(EngineMsg::Note(format!("event loop failed: {err}")));
                break;
            }
            for event in events.iter() {
                let token = event.token();
                if token == TIMER {
                    // No read of the expiry count: the next `arm` (timerfd_settime) resets it,
                    // and every expiry wakes the edge-triggered registration anew. One
                    // syscall less per open-loop wake-up.
                    self.armed_for = 0;
                    continue;
                }
                let i = token.0;
                if i >= self.clients.len() {
                    continue;
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(i);
                }
                if event.is_writable() {
                    self.flush(i);
                }
            }
            self.rec.deliver(&self.tx);
        }
        // Whatever is still unanswered after the grace period timed out.
        let now = self.clock.now_us();
        for i in 0..self.clients.len() {
            let server = self.clients[i].server as usize;
            let mut lost = std::mem::take(&mut self.clients[i].inflight);
            self.rec.lost(server, &mut lost, now, true);
        }
        let stop_at = self.stop_at();
        let unsent = self.unsent(stop_at);
        // Nothing is outstanding any more, and nothing more will be sent.
        self.rec.close_second(now, now);
        let disconnected = self.clients.iter().filter(|c| c.stream.is_none()).count() as u32;
        let summary = ThreadSummary {
            thread: self.rec.thread,
            clients: self.clients.len() as u32,
            cpu_us: ThreadTimes::now()
                .cpu_us
                .zip(times_start.cpu_us)
                .map(|(end, start)| end.saturating_sub(start)),
            run_delay_us: ThreadTimes::now()
                .run_delay_us
                .zip(times_start.run_delay_us)
                .map(|(end, start)| end.saturating_sub(start)),
            wall_us: now.saturating_sub(wall_start),
            schedule_lag: self.schedule_lag,
            late_sends: self.late_sends,
            unsent,
            reconnects: self.reconnects,
            disconnected_at_end: disconnected,
            samples_dropped: self.rec.samples_dropped,
        };
        self.rec.outbox.push_back(EngineMsg::Done(summary));
        // The collector is waiting for exactly these: block until they are in.
        for msg in self.rec.outbox.drain(..) {
            if self.tx.send(Event::Load(Box::new(msg))).is_err() {
                break;
            }
        }
    }

    /// Stops sending: closes every second before the last one of the run; replies still to
    /// come are counted in the last second.
    fn enter_drain(&mut self, now: u64, stop_at: u64) {
        self.draining = true;
        let last_second = self.rec.clamped_second(stop_at, stop_at);
        let start_us = self.rec.start_us;
        let (clients, config) = (&self.clients, &self.config);
        self.rec.advance_to(last_second, now, || {
            unsampled_from(clients, config, start_us, now)
        });
    }

    /// Closes the seconds before `now`'s (never past the run's last one).
    fn advance_seconds(&mut self, now: u64, stop_at: u64) {
        let second = self.rec.clamped_second(now, stop_at);
        let start_us = self.rec.start_us;
        let (clients, config) = (&self.clients, &self.config);
        self.rec.advance_to(second, now, || {
            unsampled_from(clients, config, start_us, now)
        });
    }

    fn next_wait(&mut self, now: u64, stop_at: u64, last_housekeeping: u64) -> Duration {
        let mut wait_us = (last_housekeeping + HOUSEKEEPING_US).saturating_sub(now);
        if !self.draining {
            wait_us = wait_us.min(stop_at.saturating_sub(now));
            let next_second = self.rec.start_us + (self.rec.cur_second + 1) * 1_000_000;
            wait_us = wait_us.min(next_second.saturating_sub(now));
            if let Some(&Reverse((due, _))) = self.heap.peek() {
                if due <= now {
                    return Duration::ZERO;
                }
                match &self.timer {
                    Some(timer) => {
                        if self.armed_for != due {
                            timer.arm(Duration::from_micros(due - now));
                            self.armed_for = due;
                        }
                    }
                    None => wait_us = wait_us.min(due - now),
                }
            }
        }
        Duration::from_micros(wait_us)
    }

    /// Open loop: sends every request whose time has come on a connection with room.
    fn send_due(&mut self, now: u64, stop_at: u64) {
        let start_us = self.rec.start_us;
        let pipeline = self.config.pipeline as usize;
        self.touched.clear();
        while let Some(&Reverse((due, i))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            let client = &mut self.clients[i];
            client.in_heap = false;
            // The entry may be stale (the client sent its backlog since): go by its schedule.
            let due = client.intended_us(start_us, client.next_k);
            if due >= stop_at {
                continue;
            }
            if due > now {
                client.in_heap = true;
                self.heap.push(Reverse((due, i)));
                continue;
            }
            if client.stream.is_none() || client.inflight.len() >= pipeline {
                client.blocked = true;
                continue;
            }
            let lag = now - due;
            super::stats::record(&mut self.schedule_lag, lag);
            if lag > LATE_SEND_US {
                self.late_sends += 1;
            }
            self.enqueue(i, due, now);
            let client = &mut self.clients[i];
            client.next_k += 1;
            let next = client.intended_us(start_us, client.next_k);
            if next < stop_at {
                client.in_heap = true;
                self.heap.push(Reverse((next, i)));
            }
            self.touched.push(i);
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.dedup();
        for &i in &touched {
            self.flush(i);
        }
        self.touched = touched;
    }

    /// Open loop: after a reply or a reconnect frees room, sends what was held back (late
    /// because of the server, so not counted as the generator's lag) and puts the connection
    /// back on the schedule.
    fn unblock_open(&mut self, i: usize, now: u64) {
        let start_us = self.rec.start_us;
        let stop_at = self.stop_at();
        let pipeline = self.config.pipeline as usize;
        if !self.clients[i].blocked || self.draining || self.clients[i].stream.is_none() {
            return;
        }
        loop {
            let client = &self.clients[i];
            let due = client.intended_us(start_us, client.next_k);
            if due > now || due >= stop_at || client.inflight.len() >= pipeline {
                break;
            }
            self.enqueue(i, due, now);
            self.clients[i].next_k += 1;
        }
        let client = &mut self.clients[i];
        if client.inflight.len() < pipeline {
            client.blocked = false;
            let next = client.intended_us(start_us, client.next_k);
            if next < stop_at && !client.in_heap {
                client.in_heap = true;
                self.heap.push(Reverse((next, i)));
            }
        }
        self.flush(i);
    }

    /// Closed loop: tops the connection up to `pipeline` outstanding requests and writes them.
    fn refill_closed(&mut self, i: usize, now: u64) {
        if self.draining || self.clients[i].stream.is_none() {
            return;
        }
        let pipeline = self.config.pipeline as usize;
        if self.clients[i].inflight.len() >= pipeline {
            return;
        }
        let stamp = self.clock.now_us().max(now);
        while self.clients[i].inflight.len() < pipeline {
            self.enqueue(i, stamp, stamp);
        }
        self.flush(i);
    }

    /// Encodes one request (GET, or SET by the ratio) into the connection's write buffer.
    fn enqueue(&mut self, i: usize, start_us: u64, sent_us: u64) {
        let config = &self.config;
        let client = &mut self.clients[i];
        let server = &config.servers[client.server as usize];
        let index = match &server.key_indices {
            Some(indices) => {
                let pick =
                    ((u128::from(self.rng.next_u64()) * indices.len() as u128) >> 64) as usize;
                u64::from(indices[pick])
            }
            None => ((u128::from(self.rng.next_u64()) * u128::from(server.keys)) >> 64) as u64,
        };
        let is_set = match server.ops {
            OpMix::GetsOnly => false,
            OpMix::SetsOnly => true,
            OpMix::Ratio => {
                config.set_weight > 0
                    && self
                        .rng
                        .random_range(0..config.get_weight + config.set_weight)
                        >= config.get_weight
            }
        };
        let key_len = config.naming.key_len(index);
        let buf = &mut client.wbuf;
        let set_bytes = if is_set {
            let size = server.set_size;
            let len = if size.min_bytes >= size.max_bytes {
                size.min_bytes
            } else {
                self.rng.random_range(size.min_bytes..=size.max_bytes)
            }
            .min(super::keyspace::MAX_LOAD_VALUE) as usize;
            let offset = self.rng.random_range(0..SET_POOL);
            buf.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$");
            push_decimal(key_len as u64, 0, buf);
            buf.extend_from_slice(b"\r\n");
            config.naming.push_key(index, buf);
            buf.extend_from_slice(b"\r\n$");
            push_decimal(len as u64, 0, buf);
            buf.extend_from_slice(b"\r\n");
            buf.extend_from_slice(&self.pool[offset..offset + len]);
            buf.extend_from_slice(b"\r\n");
            len as u32
        } else {
            buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$");
            push_decimal(key_len as u64, 0, buf);
            buf.extend_from_slice(b"\r\n");
            config.naming.push_key(index, buf);
            buf.extend_from_slice(b"\r\n");
            0
        };
        client.inflight.push_back(Pending {
            start_us,
            sent_us,
            set_bytes,
            key_index: index,
        });
    }

    /// Writes what the connection has buffered, as far as the socket takes it.
    fn flush(&mut self, i: usize) {
        let client = &mut self.clients[i];
        let Some(stream) = client.stream.as_mut() else {
            return;
        };
        while client.wpos < client.wbuf.len() {
            match stream.write(&client.wbuf[client.wpos..]) {
                Ok(0) => {
                    self.fail(i, "the server closed the connection".into());
                    return;
                }
                Ok(n) => client.wpos += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    self.fail(i, format!("write failed: {err}"));
                    return;
                }
            }
        }
        client.wbuf.clear();
        client.wpos = 0;
    }

    /// Reads every reply available (the loop is edge-triggered: read until WouldBlock).
    fn on_readable(&mut self, i: usize) {
        let mut got_reply = false;
        loop {
            let Some(stream) = self.clients[i].stream.as_mut() else {
                return;
            };
            let n = match stream.read(&mut self.read_buf) {
                Ok(0) => {
                    self.fail(i, "the server closed the connection".into());
                    return;
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    self.fail(i, format!("read failed: {err}"));
                    return;
                }
            };
            let now = self.clock.now_us();
            if !self.draining {
                self.advance_seconds(now, self.stop_at());
            }
            let client = &mut self.clients[i];
            let server = client.server as usize;
            let inflight = &mut client.inflight;
            let rec = &mut self.rec;
            let mut orphan = false;
            let mut redirected: Vec<(Pending, String)> = Vec::new();
            let fed =
                client
                    .scanner
                    .feed(&self.read_buf[..n], |reply| match inflight.pop_front() {
                        // A cluster redirect: followed below, out of the scanner's way.
                        Some(pending) => match reply {
                            Scanned::Error(text)
                                if text.starts_with("MOVED ") || text.starts_with("ASK ") =>
                            {
                                redirected.push((pending, text))
                            }
                            reply => rec.reply(server, pending, reply, now),
                        },
                        None => orphan = true,
                    });
            for (pending, text) in redirected {
                let reply = self.follow(server, &pending, &text);
                let done_us = self.clock.now_us();
                self.rec.reply(server, pending, reply, done_us);
            }
            got_reply = true;
            if let Err(err) = fed {
                self.fail(i, err.to_string());
                return;
            }
            if orphan {
                self.fail(i, "a reply came for no request".into());
                return;
            }
            // A short read emptied the socket: the next bytes raise a new edge, so the
            // read that would only say WouldBlock (one syscall per reply) is skipped.
            if n < self.read_buf.len() {
                break;
            }
        }
        if got_reply {
            let now = self.clock.now_us();
            if self.config.rate.is_some() {
                self.unblock_open(i, now);
            } else {
                self.refill_closed(i, now);
            }
        }
    }

    /// Sends a request a cluster redirected (`MOVED slot host:port`, or `ASK` after `ASKING`)
    /// again where the reply says, on a blocking connection of this thread's to that node, and
    /// returns the reply there: the request's latency counts both trips. Redirects come only
    /// while a slot moves (a failover, a resharding), so the thread's short wait is rare; the
    /// next requests of the slot are redirected and followed the same way.
    fn follow(&mut self, server: usize, pending: &Pending, text: &str) -> Scanned {
        let ask = text.starts_with("ASK ");
        self.rec.redirected(server, ask, text);
        let Some(address) = text.split_whitespace().nth(2) else {
            return Scanned::Error(text.to_string());
        };
        if !self.redirects.contains_key(address) {
            let Ok(mut info) = self.config.servers[server].conn.for_node(address) else {
                return Scanned::Error(text.to_string());
            };
            info.command_timeout = info.command_timeout.min(Duration::from_secs(2));
            match info.redis_connection() {
                Ok(conn) => {
                    self.redirects.insert(address.to_string(), conn);
                }
                Err(err) => {
                    return Scanned::Error(format!("{text}: {}", crate::error::one_line(&err)));
                }
            }
        }
        let conn = self.redirects.get_mut(address).expect("inserted above");
        let mut key = Vec::new();
        self.config.naming.push_key(pending.key_index, &mut key);
        let mut pipe = redis::pipe();
        if ask {
            pipe.cmd("ASKING").ignore();
        }
        if pending.set_bytes > 0 {
            let len = (pending.set_bytes as usize).min(self.pool.len());
            pipe.cmd("SET").arg(&key).arg(&self.pool[..len]);
        } else {
            pipe.cmd("GET").arg(&key);
        }
        match pipe.query::<Vec<redis::Value>>(conn) {
            Ok(mut values) => match values.pop() {
                Some(redis::Value::BulkString(bytes)) => Scanned::Bulk {
                    len_bytes: bytes.len() as u64,
                },
                Some(redis::Value::Nil) => Scanned::Nil,
                Some(redis::Value::Okay) => Scanned::Status { ok: true },
                Some(redis::Value::SimpleString(s)) => Scanned::Status { ok: s == "OK" },
                other => Scanned::Error(format!("unexpected reply {other:?} after {text}")),
            },
            Err(err) => {
                // A broken connection is opened again at the next redirect.
                self.redirects.remove(address);
                Scanned::Error(format!("{text}: {err}"))
            }
        }
    }

    /// A connection broke: its outstanding requests are errors; it is reopened at once or,
    /// failing that, retried shortly.
    fn fail(&mut self, i: usize, reason: String) {
        let now = self.clock.now_us();
        let server = self.clients[i].server as usize;
        let mut lost = std::mem::take(&mut self.clients[i].inflight);
        self.rec.lost(server, &mut lost, now, false);
        self.clients[i].inflight = lost;
        self.note(format!(
            "connection to {} failed: {reason}",
            self.config.servers[server].conn
        ));
        self.reset(i, now);
    }

    fn note(&mut self, text: String) {
        if self.rec.notes < NOTES_PER_THREAD {
            self.rec.notes += 1;
            self.rec.outbox.push_back(EngineMsg::Note(text));
        }
    }

    /// Drops the connection and tries to reopen it.
    fn reset(&mut self, i: usize, now: u64) {
        let client = &mut self.clients[i];
        if let Some(mut stream) = client.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
        client.wbuf.clear();
        client.wpos = 0;
        client.scanner.reset();
        client.inflight.clear();
        client.blocked = true;
        client.retry_at_us = now;
        self.try_reconnect(i, now);
    }

    fn try_reconnect(&mut self, i: usize, now: u64) {
        if self.draining {
            return;
        }
        let server = self.clients[i].server as usize;
        match connect(&self.config.servers[server].conn) {
            Ok(mut stream) => {
                if self
                    .poll
                    .registry()
                    .register(
                        &mut stream,
                        Token(i),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_err()
                {
                    self.clients[i].retry_at_us = now + 200_000;
                    return;
                }
                self.reconnects += 1;
                self.clients[i].stream = Some(stream);
                if self.config.rate.is_some() {
                    self.unblock_open(i, now);
                } else {
                    self.clients[i].blocked = false;
                    self.refill_closed(i, now);
                }
            }
            Err(err) => {
                self.clients[i].retry_at_us = now + 200_000;
                self.note(format!("reconnecting: {err:#}"));
            }
        }
    }

    /// Timeouts and reconnects.
    fn housekeeping(&mut self, now: u64) {
        let timeout = self.config.timeout_us;
        for i in 0..self.clients.len() {
            let client = &self.clients[i];
            if client.stream.is_none() {
                if now >= client.retry_at_us {
                    self.try_reconnect(i, now);
                }
                continue;
            }
            let Some(front) = client.inflight.front() else {
                continue;
            };
            if now.saturating_sub(front.sent_us) > timeout {
                let server = client.server as usize;
                let mut lost = std::mem::take(&mut self.clients[i].inflight);
                self.rec.lost(server, &mut lost, now, true);
                self.note(format!(
                    "a request to {} waited more than {} ms: its connection was reopened",
                    self.config.servers[server].conn,
                    timeout / 1000
                ));
                self.reset(i, now);
            }
        }
    }

    /// Open loop: scheduled sends before the stop that never went out.
    fn unsent(&self, stop_at: u64) -> u64 {
        if self.config.rate.is_none() || stop_at == u64::MAX {
            return 0;
        }
        let start_us = self.rec.start_us;
        self.clients
            .iter()
            .map(|c| {
                let span = stop_at.saturating_sub(start_us) as f64 - c.offset_us;
                let scheduled = if span <= 0.0 {
                    0
                } else {
                    (span / c.period_us).ceil() as u64
                };
                scheduled.saturating_sub(c.next_k)
            })
            .sum()
    }
}

/// What the OS says of the calling thread's time.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadTimes {
    /// CPU time (user + system), µs (`getrusage(RUSAGE_THREAD)`).
    pub cpu_us: Option<u64>,
    /// Time runnable but waiting on a run queue, µs (`/proc/thread-self/schedstat`).
    pub run_delay_us: Option<u64>,
}

impl ThreadTimes {
    /// The calling thread's times now; `None` fields where the OS does not say.
    pub fn now() -> ThreadTimes {
        ThreadTimes {
            cpu_us: thread_cpu_us(),
            run_delay_us: thread_run_delay_us(),
        }
    }
}

/// This thread's CPU time (user + system), µs; `None` where the OS does not say.
pub fn thread_cpu_us() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes into the struct we own; RUSAGE_THREAD is valid on Linux.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        if rc != 0 {
            return None;
        }
        let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
        Some(us(usage.ru_utime) + us(usage.ru_stime))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// This thread's time spent runnable but not running (waiting for a CPU), µs: the second field
/// of `/proc/thread-self/schedstat` (ns). `None` where the kernel does not provide it.
pub fn thread_run_delay_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(ns / 1000)
}

mod timer {
    //! A timerfd in the event loop's epoll set, for microsecond wake-ups (Linux only).

    use std::time::Duration;

    use anyhow::Result;
    use mio::{Interest, Registry, Token};

    /// A one-shot monotonic timer whose expiry makes the event loop's poll return.
    pub struct TimerFd {
        #[cfg(target_os = "linux")]
        fd: std::os::fd::OwnedFd,
    }

    impl TimerFd {
        /// A new timer; `None` where timerfd is not available (the loop then sleeps in whole
        /// milliseconds).
        pub fn new() -> Option<TimerFd> {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::FromRawFd;
                // SAFETY: timerfd_create returns a new descriptor we take ownership of.
                let fd = unsafe {
                    libc::timerfd_create(
                        libc::CLOCK_MONOTONIC,
                        libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return None;
                }
                Some(TimerFd {
                    fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
                })
            }
            #[cfg(not(target_os = "linux"))]
            {
                None
            }
        }

        /// Adds the timer to the event loop.
        pub fn register(&self, registry: &Registry, token: Token) -> Result<()> {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                registry.register(
                    &mut mio::unix::SourceFd(&self.fd.as_raw_fd()),
                    token,
                    Interest::READABLE,
                )?;
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = (registry, token);
            }
            Ok(())
        }

        /// Fires once, `after` from now.
        pub fn arm(&self, after: Duration) {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                let after = after.max(Duration::from_nanos(1));
                let spec = libc::itimerspec {
                    it_interval: libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    },
                    it_value: libc::timespec {
                        tv_sec: after.as_secs() as libc::time_t,
                        tv_nsec: after.subsec_nanos() as libc::c_long,
                    },
                };
                // SAFETY: a valid timerfd and a fully initialised itimerspec.
                unsafe {
                    libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut());
                }
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = after;
            }
        }
    }
}
