//! A server kept busy in short bursts (issue 10): a background thread runs a Lua busy loop of a
//! given length on the server, sleeps a given break, and repeats until stopped. While a script
//! runs the server answers nobody else, so every other client waits out the rest of the burst.
//!
//! Each burst's length is measured by the server itself: the script spins on `TIME` until the
//! asked number of microseconds has passed and returns how many did. That is the time the server
//! really spent busy, including any time its process was descheduled inside the loop on a loaded
//! host, so a test can compare probe latencies with the longest burst that actually happened
//! rather than with the length it asked for.
//!
//! `TIME` is allowed in this script on every server the tests use: the script writes nothing
//! (before Redis 5 only writes after a non-deterministic command were refused), and from Redis
//! 7.0 scripts are always effects-replicated. Checked against redis-server 7.0.15.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use holprobe::measure::target::ConnInfo;

/// Spins on `TIME` until `ARGV[1]` microseconds have passed; returns the microseconds that did.
pub const BURST_SCRIPT: &str = "\
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local start = now_us()
local want = tonumber(ARGV[1])
local elapsed = 0
repeat elapsed = now_us() - start until elapsed >= want
return elapsed
";

/// One burst as it happened.
#[derive(Debug, Clone, Copy)]
pub struct Burst {
    /// How long the script kept the server busy, measured by the server's own clock.
    pub server_us: u64,
    /// EVAL sent to reply read, on this side: the burst plus the round trip and any wait of this
    /// thread for a CPU.
    pub round_trip_us: u64,
}

/// A running burst load; stopped (and its thread joined) by [`BurstLoad::stop`] or on drop.
pub struct BurstLoad {
    stop: Arc<AtomicBool>,
    bursts: Arc<Mutex<Vec<Burst>>>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl BurstLoad {
    /// Starts bursts of `burst` separated by breaks of `pause` on the server `info` names.
    pub fn on(info: &ConnInfo, burst: Duration, pause: Duration) -> BurstLoad {
        let conn = info
            .redis_connection()
            .unwrap_or_else(|e| panic!("burst load: cannot connect to {info}: {e:#}"));
        Self::start(conn, burst, pause)
    }

    /// Starts bursts on the server at `url` (`redis://host:port`).
    pub fn on_url(url: &str, burst: Duration, pause: Duration) -> BurstLoad {
        let conn = redis::Client::open(url)
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("burst load: cannot connect to {url}: {e}"));
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("burst load: set the read timeout");
        Self::start(conn, burst, pause)
    }

    /// Starts bursts on an open connection. The first burst runs before this returns, so the
    /// server is busy from the start and a script the server refuses fails here, not later.
    pub fn start(mut conn: redis::Connection, burst: Duration, pause: Duration) -> BurstLoad {
        let burst_us = u64::try_from(burst.as_micros()).expect("a burst shorter than 584k years");
        let first = run_burst(&mut conn, burst_us).unwrap_or_else(|e| panic!("burst load: {e}"));
        let bursts = Arc::new(Mutex::new(vec![first]));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, bursts) = (Arc::clone(&stop), Arc::clone(&bursts));
            thread::Builder::new()
                .name("burst-load".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        thread::sleep(pause);
                        let burst = run_burst(&mut conn, burst_us)?;
                        lock(&bursts).push(burst);
                    }
                    Ok(())
                })
                .expect("start the burst-load thread")
        };
        BurstLoad {
            stop,
            bursts,
            thread: Some(thread),
        }
    }

    /// Every burst so far, in order.
    pub fn bursts(&self) -> Vec<Burst> {
        lock(&self.bursts).clone()
    }

    /// Number of bursts so far.
    pub fn count(&self) -> usize {
        lock(&self.bursts).len()
    }

    /// The longest burst so far, as the server measured it (µs).
    pub fn max_burst_us(&self) -> u64 {
        lock(&self.bursts)
            .iter()
            .map(|b| b.server_us)
            .max()
            .unwrap_or(0)
    }

    /// Stops after the burst in progress and joins the thread. Panics when the load failed on
    /// the way (a dead server, a refused script): a test must not pass on a load that stopped.
    pub fn stop(&mut self) {
        if let Err(err) = self.stop_and_join() {
            panic!("burst load failed after {} bursts: {err}", self.count());
        }
    }

    fn stop_and_join(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            None => Ok(()),
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err("the burst-load thread panicked".into())),
        }
    }
}

impl Drop for BurstLoad {
    fn drop(&mut self) {
        // No panic here: drop also runs while a failed assertion unwinds.
        if let Err(err) = self.stop_and_join() {
            eprintln!("burst load failed after {} bursts: {err}", self.count());
        }
    }
}

fn run_burst(conn: &mut redis::Connection, burst_us: u64) -> Result<Burst, String> {
    let sent = Instant::now();
    let server_us: u64 = redis::cmd("EVAL")
        .arg(BURST_SCRIPT)
        .arg(0)
        .arg(burst_us)
        .query(conn)
        .map_err(|e| format!("EVAL of the burst script: {e}"))?;
    let round_trip_us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok(Burst {
        server_us,
        round_trip_us,
    })
}

/// The bursts even if a panicking holder poisoned the lock: the data is a plain list.
fn lock(bursts: &Mutex<Vec<Burst>>) -> MutexGuard<'_, Vec<Burst>> {
    bursts
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
