//! One generator thread: a `mio` event loop over its connections (see the module comment of
//! `engine`), what it sends (`send`) and what it does with replies, redirects and broken
//! connections (`replies`).

mod replies;
mod send;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::measure::event::EventSender;
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::SeedableRng;

use super::os::{ThreadTimes, timer};
use super::recorder::{Pending, Recorder};
use super::{Control, EngineConfig, EngineMsg, ThreadSummary};
use crate::load::scanner::ReplyScanner;
use crate::measure::clock::{RunClock, sleep_until_precise, tighten_timer_slack};
use crate::measure::event::Event;
use crate::measure::resp::RawConn;
use crate::measure::target::ConnInfo;

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

pub(super) fn connect(info: &ConnInfo) -> Result<TcpStream> {
    let std_stream = RawConn::connect(info)?
        .into_stream()
        .context("after the handshake")?;
    std_stream
        .set_nonblocking(true)
        .context("making the socket non-blocking")?;
    Ok(TcpStream::from_std(std_stream))
}

pub(super) struct Client {
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
    /// A client of `servers[server]` on its open connection; in open loop its sends start
    /// `offset_us` after the load start, `period_us` apart.
    pub(super) fn new(
        server: u16,
        stream: TcpStream,
        pipeline: usize,
        offset_us: f64,
        period_us: f64,
    ) -> Client {
        Client {
            server,
            stream: Some(stream),
            wbuf: Vec::with_capacity(4096),
            wpos: 0,
            inflight: VecDeque::with_capacity(pipeline),
            scanner: ReplyScanner::new(),
            offset_us,
            period_us,
            next_k: 0,
            blocked: false,
            in_heap: false,
            retry_at_us: 0,
        }
    }

    fn intended_us(&self, start_us: u64, k: u64) -> u64 {
        start_us + (self.offset_us + k as f64 * self.period_us) as u64
    }
}

const TIMER: Token = Token(usize::MAX);
/// Longest sleep in the loop: the stop switch, timeouts and reconnects are checked this often.
const HOUSEKEEPING_US: u64 = 20_000;

pub(super) struct Worker {
    config: Arc<EngineConfig>,
    clock: RunClock,
    control: Arc<Control>,
    tx: EventSender,
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
    /// When a reply last came from each server (run clock, µs).
    heard_us: Vec<u64>,
    /// Each server that answered none of this thread's requests for `--timeout`: no longer
    /// waited for (nor reconnected to).
    unanswered: Vec<bool>,
    /// Since when reopening a connection to each server has failed without one success in
    /// between (run clock, µs): past [`GONE_AFTER_US`] the server is taken for gone.
    refused_since: Vec<Option<u64>>,
}

/// How long connections to a server may fail to reopen before the run ends with it: a server
/// killed mid-run refuses every connect, and the load ran out its --duration with no request
/// answered (the hostile trial); the main job stops within about a second too.
pub(super) const GONE_AFTER_US: u64 = 1_000_000;

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        id: u16,
        config: Arc<EngineConfig>,
        clock: RunClock,
        start_us: u64,
        control: Arc<Control>,
        tx: EventSender,
        clients: Vec<Client>,
        pool: Arc<Vec<u8>>,
    ) -> Result<Worker> {
        let poll = Poll::new().context("creating a load thread's event loop")?;
        let config_servers = config.servers.len();
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
            rec: Recorder::new(id, start_us, &config),
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
            heard_us: vec![0; config_servers],
            unanswered: vec![false; config_servers],
            refused_since: vec![None; config_servers],
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

    pub(super) fn run(mut self) {
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
            // A server that answers nothing is not waited for again.
            if self.draining
                && (now >= drain_until
                    || self
                        .clients
                        .iter()
                        .all(|c| c.inflight.is_empty() || self.unanswered[c.server as usize]))
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
        // The collector is waiting for exactly these: sent whatever the channel holds.
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
