//! Calibration: inject stalls of known length into the server while the ordinary probe threads
//! run, and compare what the correlator measured with what was injected.
//!
//! The stalls come from the first method the server allows:
//! - `DEBUG SLEEP <s>`: exact, where the debug command is enabled (the embedded server enables
//!   it for local connections);
//! - a Lua script (EVAL) that busy-waits on `TIME` until the length has passed;
//! - a Lua loop of a fixed number of iterations, calibrated against SLOWLOG. Valkey 8+ freezes
//!   `TIME` inside a script (it returns the script's start time), so a TIME loop never ends
//!   there and runs into the busy-script limit: [`choose_method`] detects the frozen clock with
//!   a short bounded script first.
//!
//! Whatever the method, the injected length the measurement is compared with is the server's
//! own SLOWLOG duration of the injecting command where the server logged it (the real freeze,
//! scheduler noise included), else the requested length.
//!
//! The injector is an ordinary [`Actor`] of a run, so calibration exercises exactly the probe
//! threads, clock, collector and correlator of the main job. [`evaluate`] is pure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::analyze::correlate::Analysis;
use crate::measure::actor::{Actor, ActorContext};
use crate::measure::clock::RunClock;
use crate::measure::culprit::{CALIBRATE_CLIENT_NAME, run_client_name};
use crate::measure::event::Event;
use crate::measure::hostmem::HostMemorySampler;
use crate::measure::resp::{RawConn, Reply};
use crate::measure::serverview::{ServerView, Want, settings_for_calibration};
use crate::measure::target::{ConnInfo, Target};
use crate::options::RunOptions;
use crate::output::export::Mode;
use crate::record::{WriteOp, WriteRecord};
use crate::session::{Notice, Probed, RunReport, RunSpec};

/// How stalls are injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StallMethod {
    /// `DEBUG SLEEP`.
    DebugSleep,
    /// EVAL busy-waiting on `TIME`.
    LuaTime,
    /// EVAL of a loop of iterations calibrated against SLOWLOG.
    LuaLoop,
}

impl StallMethod {
    /// Name as printed and exported.
    pub fn name(self) -> &'static str {
        match self {
            StallMethod::DebugSleep => "debug-sleep",
            StallMethod::LuaTime => "lua-time",
            StallMethod::LuaLoop => "lua-loop",
        }
    }
}

/// Busy-waits on TIME for ARGV[1] µs, at most ARGV[2] iterations; ARGV[3] is a nonce that
/// identifies the call in SLOWLOG. Returns the iterations.
const LUA_TIME_LOOP: &str = "local t = redis.call('TIME') \
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1]) \
local cap = tonumber(ARGV[2]) local n = 0 \
repeat t = redis.call('TIME') n = n + 1 \
until tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop or n >= cap \
return n";

/// Calls TIME until it changes, at most ARGV[1] times; returns {calls, µs advanced}.
const LUA_TIME_PROBE: &str = "local t0 = redis.call('TIME') local t = t0 local n = 0 \
repeat t = redis.call('TIME') n = n + 1 \
until t[1] ~= t0[1] or t[2] ~= t0[2] or n >= tonumber(ARGV[1]) \
return {n, (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])}";

/// ARGV[1] iterations of arithmetic; ARGV[2] is a nonce for SLOWLOG.
const LUA_ITERATION_LOOP: &str =
    "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i % 7 end return x";

/// TIME calls the freeze check makes at most (a few ms of script on any server).
const TIME_PROBE_CALLS: u32 = 20_000;

/// The method chosen for a server, with what it needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MethodChoice {
    /// The method.
    pub method: StallMethod,
    /// For `lua-loop`: loop iterations per µs of server time, as calibrated.
    pub loop_iterations_per_us: Option<f64>,
    /// Where that rate came from: `slowlog` or `client` (round trip, when SLOWLOG logged
    /// nothing).
    pub loop_rate_source: Option<String>,
    /// Why this method (for the user).
    pub reason: String,
}

/// Picks the injection method: `forced` if given (checked to work), else DEBUG SLEEP, else a
/// TIME loop, else (TIME frozen inside scripts) an iteration loop calibrated against SLOWLOG.
pub fn choose_method(conn: &ConnInfo, forced: Option<StallMethod>) -> Result<MethodChoice> {
    // Before the run has an id: named with one of its own, so that another run on the same
    // server takes its DEBUG SLEEP 0 and loop calibration for another client's (a name without
    // an id is taken for any run's own: the hostile trial of stop 39).
    let name = format!("{CALIBRATE_CLIENT_NAME}-{:08x}", rand::random::<u32>());
    let mut raw =
        RawConn::connect_named(conn, &name).context("opening the calibration connection")?;
    let debug = match raw.command(&[b"DEBUG", b"SLEEP", b"0"])? {
        Reply::Status(_) => Ok(()),
        Reply::Error(text) => Err(text),
        other => Err(format!("unexpected reply {other:?}")),
    };
    if forced.is_none() || forced == Some(StallMethod::DebugSleep) {
        match (&debug, forced) {
            (Ok(()), _) => {
                return Ok(MethodChoice {
                    method: StallMethod::DebugSleep,
                    loop_iterations_per_us: None,
                    loop_rate_source: None,
                    reason: "DEBUG is enabled".into(),
                });
            }
            (Err(text), Some(_)) => {
                bail!("--method debug-sleep: the server refuses DEBUG ({text})")
            }
            (Err(_), None) => {}
        }
    }
    let frozen = time_is_frozen(&mut raw).with_context(|| {
        format!(
            "cannot inject stalls: DEBUG is refused ({}) and EVAL failed",
            debug.as_ref().err().map_or("not tried", String::as_str)
        )
    })?;
    let debug_note = match &debug {
        Ok(()) => "forced".to_string(),
        Err(text) => format!("DEBUG is refused ({})", first_line(text)),
    };
    match (forced, frozen) {
        (Some(StallMethod::LuaTime), true) => bail!(
            "--method lua-time: this server freezes TIME inside scripts (Valkey 8+ does), so a TIME loop would never end; use --method lua-loop"
        ),
        (None | Some(StallMethod::LuaTime), false) => Ok(MethodChoice {
            method: StallMethod::LuaTime,
            loop_iterations_per_us: None,
            loop_rate_source: None,
            reason: format!("{debug_note}; TIME advances inside scripts"),
        }),
        _ => {
            let (rate, source) = calibrate_loop(&mut raw)?;
            Ok(MethodChoice {
                method: StallMethod::LuaLoop,
                loop_iterations_per_us: Some(rate),
                loop_rate_source: Some(source.into()),
                reason: if frozen {
                    format!(
                        "{debug_note}; TIME is frozen inside scripts (a TIME loop would never end), so an iteration loop calibrated against {source}"
                    )
                } else {
                    format!("{debug_note}; an iteration loop calibrated against {source}")
                },
            })
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// Runs the bounded TIME check: true when TIME did not advance over its calls.
fn time_is_frozen(raw: &mut RawConn) -> Result<bool> {
    let calls = TIME_PROBE_CALLS.to_string();
    match raw.command(&[b"EVAL", LUA_TIME_PROBE.as_bytes(), b"0", calls.as_bytes()])? {
        Reply::Array(Some(items)) => match items.as_slice() {
            [Reply::Integer(_), Reply::Integer(advanced_us)] => Ok(*advanced_us == 0),
            _ => bail!("unexpected reply to the TIME check: {items:?}"),
        },
        Reply::Error(text) => Err(anyhow!("{text}")),
        other => bail!("unexpected reply to the TIME check: {other:?}"),
    }
}

/// Calibrates the iteration loop: grows it to about 50 ms of server time, then takes the
/// median rate of three runs, from their SLOWLOG durations (or their round trips when the
/// server logged nothing). Returns iterations per µs and the source.
fn calibrate_loop(raw: &mut RawConn) -> Result<(f64, &'static str)> {
    let mut iterations: u64 = 100_000;
    let mut rates = Vec::new();
    let mut sources = Vec::new();
    for attempt in 0..8 {
        let nonce = format!(
            "holprobe:calibrate-loop:{attempt}:{}",
            rand::random::<u32>()
        );
        let (elapsed_us, server_us) = run_loop(raw, iterations, &nonce)?;
        let (us, source) = match server_us {
            Some(us) if us > 0 => (us, "slowlog"),
            _ => (elapsed_us.max(1), "client"),
        };
        let rate = iterations as f64 / us as f64;
        if us >= 20_000 {
            rates.push(rate);
            sources.push(source);
            if rates.len() == 3 {
                break;
            }
        }
        // Aim at 50 ms, without jumping more than 50x at once.
        iterations = ((rate * 50_000.0) as u64).clamp(iterations, iterations * 50);
    }
    if rates.is_empty() {
        bail!("could not calibrate the Lua iteration loop: no run reached 20 ms");
    }
    rates.sort_by(f64::total_cmp);
    let source = if sources.iter().all(|&s| s == "slowlog") {
        "slowlog"
    } else {
        "client"
    };
    Ok((rates[rates.len() / 2], source))
}

/// One iteration loop: (client round trip µs, SLOWLOG µs).
fn run_loop(raw: &mut RawConn, iterations: u64, nonce: &str) -> Result<(u64, Option<u64>)> {
    let n = iterations.to_string();
    let start = Instant::now();
    let reply = raw.command(&[
        b"EVAL",
        LUA_ITERATION_LOOP.as_bytes(),
        b"0",
        n.as_bytes(),
        nonce.as_bytes(),
    ])?;
    let elapsed_us = start.elapsed().as_micros() as u64;
    if let Reply::Error(text) = reply {
        bail!("the Lua iteration loop failed: {text}");
    }
    let server_us = match raw.command(&[b"SLOWLOG", b"GET", b"32"])? {
        reply @ Reply::Array(_) => {
            let entries = crate::measure::serverview::parse_log_entries(&reply);
            crate::measure::serverview::find_entry(&entries, "EVAL", nonce.as_bytes())
                .and_then(|e| u64::try_from(e.value).ok())
        }
        _ => None,
    };
    Ok((elapsed_us, server_us))
}

/// The busy-script limit of the server (ms): `busy-reply-threshold` (Redis 7+, Valkey) or
/// `lua-time-limit`; 5000 (the default) when CONFIG does not say.
pub fn busy_script_limit_ms(conn: &ConnInfo) -> u64 {
    let Ok(mut control) = conn.redis_connection() else {
        return 5000;
    };
    for name in ["busy-reply-threshold", "lua-time-limit"] {
        let pairs: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(&mut control);
        if let Ok(pairs) = pairs
            && let Some(value) = pairs.get(1).and_then(|v| v.parse::<u64>().ok())
        {
            return value;
        }
    }
    5000
}

/// What to inject: each length `times` times, interleaved (5, 20, 50, 5, 20, 50, ...) so that a
/// drift in the machine's load touches every length alike.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InjectionPlan {
    /// Stall lengths, µs.
    pub stalls_us: Vec<u64>,
    /// Injections per length.
    pub times: u32,
    /// Quiet probing before and after each injection.
    #[serde(with = "crate::units::duration_ms")]
    pub gap: Duration,
}

impl InjectionPlan {
    /// The lengths in injection order.
    pub fn order(&self) -> Vec<u64> {
        (0..self.times)
            .flat_map(|_| self.stalls_us.iter().copied())
            .collect()
    }
}

/// One injected stall, as the injector saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Injection {
    /// The write-event number it was recorded under.
    pub seq: u32,
    /// Requested length, µs.
    pub requested_us: u64,
    /// The server's SLOWLOG duration of the injecting command, µs.
    pub server_us: Option<u64>,
    /// For the loop methods: iterations run.
    pub iterations: Option<u64>,
    /// The method.
    pub method: StallMethod,
    /// The injecting command's round trip on the client (last byte sent to reply), µs.
    pub round_trip_us: u64,
    /// The command answered as expected.
    pub ok: bool,
    /// What went wrong, if not ok.
    pub error: Option<String>,
}

/// Injects stalls as a run's [`Actor`]. Its records reach the correlator as write events of op
/// `inject`; the details (requested length, SLOWLOG duration) go to `injections`.
pub struct Injector {
    plan: InjectionPlan,
    choice: MethodChoice,
    injections: Arc<Mutex<Vec<Injection>>>,
}

impl Injector {
    /// An injector; read `injections` after the run.
    pub fn new(
        plan: InjectionPlan,
        choice: MethodChoice,
        injections: Arc<Mutex<Vec<Injection>>>,
    ) -> Injector {
        Injector {
            plan,
            choice,
            injections,
        }
    }
}

/// Runs `injector` beside the probes: the main job's measuring session, correlator and exports
/// (`options`' writer, if any, does not run), its run.json saying `mode: calibrate`.
pub fn run_injector(
    options: &RunOptions,
    target: &Target,
    injector: Injector,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    crate::session::measure_nodes(
        options,
        target,
        &Probed::single(target),
        Some(Box::new(injector)),
        RunSpec::new(Mode::Calibrate),
        interrupt,
        notify,
    )
}

impl Actor for Injector {
    fn steps_total(&self) -> usize {
        self.plan.order().len()
    }

    fn server_settings(&self) -> Vec<(&'static str, Want)> {
        settings_for_calibration()
    }

    fn spawn(self: Box<Self>, ctx: ActorContext) -> Result<JoinHandle<()>> {
        let name = run_client_name(CALIBRATE_CLIENT_NAME, &ctx.key_prefix);
        let conn = RawConn::connect_named(&ctx.conn, &name)
            .context("opening the injector's connection")?;
        // A 250 ms stall must not trip the reply limit.
        conn.set_read_timeout(Some(ctx.conn.command_timeout + Duration::from_secs(10)))
            .context("setting the injector's read timeout")?;
        let worker = InjectorThread {
            order: self.plan.order(),
            gap: self.plan.gap,
            method: self.choice.method,
            rates: self.choice.loop_iterations_per_us.into_iter().collect(),
            injections: self.injections,
            key_prefix: ctx.key_prefix,
            conn,
            clock: ctx.clock,
            events: ctx.events,
            stop: ctx.stop,
            mark: ctx.mark,
            view: ServerView::new(ctx.view),
            memory: HostMemorySampler::new(),
        };
        std::thread::Builder::new()
            .name("injector".into())
            .spawn(move || worker.run())
            .context("starting the injector thread")
    }
}

struct InjectorThread {
    order: Vec<u64>,
    gap: Duration,
    method: StallMethod,
    /// Iterations per µs measured so far (lua-loop), newest last.
    rates: Vec<f64>,
    injections: Arc<Mutex<Vec<Injection>>>,
    key_prefix: String,
    conn: RawConn,
    clock: RunClock,
    events: crate::measure::event::EventSender,
    stop: Arc<AtomicBool>,
    mark: Arc<crate::measure::actor::WriteMark>,
    view: ServerView,
    memory: HostMemorySampler,
}

impl InjectorThread {
    fn run(mut self) {
        if !self.quiet_gap() {
            let _ = self.events.send(Event::WriterDone);
            return;
        }
        for (index, &requested_us) in self.order.clone().iter().enumerate() {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let seq = index as u32 + 1;
            self.mark.begin(&self.clock);
            let (record, injection, io_failed) = self.inject(seq, requested_us);
            if let Ok(mut list) = self.injections.lock() {
                list.push(injection);
            }
            let _ = self.events.send(Event::Write(Box::new(record)));
            self.mark.end();
            if io_failed {
                let _ = self.events.send(Event::WriterFailed(
                    "the injector lost its connection".into(),
                ));
                return;
            }
            if !self.quiet_gap() {
                break;
            }
        }
        let _ = self.events.send(Event::WriterDone);
    }

    fn quiet_gap(&self) -> bool {
        crate::measure::actor::sleep_unless_stopped(self.gap, &self.stop)
    }

    fn loop_iterations(&self, requested_us: u64) -> u64 {
        let mut recent: Vec<f64> = self.rates.iter().rev().take(5).copied().collect();
        recent.sort_by(f64::total_cmp);
        let rate = recent.get(recent.len() / 2).copied().unwrap_or(10.0);
        ((rate * requested_us as f64).round() as u64).max(1)
    }

    fn inject(&mut self, seq: u32, requested_us: u64) -> (WriteRecord, Injection, bool) {
        let nonce = format!("{}inject:{seq}", self.key_prefix);
        let seconds = format!("{:.6}", requested_us as f64 / 1e6);
        let requested = requested_us.to_string();
        let iterations = match self.method {
            StallMethod::LuaLoop => Some(self.loop_iterations(requested_us)),
            // The cap only matters if TIME froze after all: about 20 calls per µs asked.
            StallMethod::LuaTime => Some(requested_us.saturating_mul(20).max(1000)),
            StallMethod::DebugSleep => None,
        };
        let count = iterations.unwrap_or(0).to_string();
        let (command, match_arg, args): (&str, &[u8], Vec<&[u8]>) = match self.method {
            StallMethod::DebugSleep => (
                "DEBUG",
                seconds.as_bytes(),
                vec![b"DEBUG", b"SLEEP", seconds.as_bytes()],
            ),
            StallMethod::LuaTime => (
                "EVAL",
                nonce.as_bytes(),
                vec![
                    b"EVAL",
                    LUA_TIME_LOOP.as_bytes(),
                    b"0",
                    requested.as_bytes(),
                    count.as_bytes(),
                    nonce.as_bytes(),
                ],
            ),
            StallMethod::LuaLoop => (
                "EVAL",
                nonce.as_bytes(),
                vec![
                    b"EVAL",
                    LUA_ITERATION_LOOP.as_bytes(),
                    b"0",
                    count.as_bytes(),
                    nonce.as_bytes(),
                ],
            ),
        };
        let encoded = crate::measure::resp::encode_command(&args);
        let before = self.view.before(&mut self.conn);
        let start = Instant::now();
        let sent_result = self.conn.send_raw(&encoded);
        let sent = Instant::now();
        let outcome = sent_result.and_then(|()| self.conn.read_reply());
        let reply = Instant::now();
        let (ok, error) = match (&outcome, self.method) {
            (Ok(Reply::Status(_)), StallMethod::DebugSleep) => (true, None),
            (Ok(Reply::Integer(n)), StallMethod::LuaTime)
                if iterations.is_some_and(|cap| *n as u64 >= cap) =>
            {
                (
                    false,
                    Some("the TIME loop hit its iteration cap: TIME stood still".to_string()),
                )
            }
            (Ok(Reply::Integer(_)), StallMethod::LuaTime | StallMethod::LuaLoop) => (true, None),
            (Ok(Reply::Error(text)), _) => (false, Some(text.clone())),
            (Ok(other), _) => (false, Some(format!("unexpected reply {other:?}"))),
            (Err(err), _) => (false, Some(err.to_string())),
        };
        let memory = self.memory.sample();
        let figures = if outcome.is_ok() {
            self.view.after(&mut self.conn, command, match_arg, &before)
        } else {
            Default::default()
        };
        if self.method == StallMethod::LuaLoop
            && let (Some(n), Some(us)) = (iterations, figures.exec_us)
            && us > 0
        {
            self.rates.push(n as f64 / us as f64);
        }
        let start_us = self.clock.us_at(start);
        let reply_us = self.clock.us_at(reply);
        let record = WriteRecord {
            seq,
            op: WriteOp::Inject,
            size_bytes: 0,
            start_us,
            sent_us: self.clock.us_at(sent),
            reply_us,
            set_ms: reply_us.saturating_sub(start_us) as f64 / 1e3,
            ok,
            error: error.clone(),
            host_mem_pct: memory.mem_pct,
            host_swap_pct: memory.swap_pct,
            server_rss_bytes: None,
            key: format!("{}:{}us", self.method.name(), requested_us),
            server_exec_us: figures.exec_us,
            server_latency_event_ms: figures.latency_event_ms,
            server_latency_event: figures.latency_event.clone(),
            server_eventloop_max_us: figures.eventloop_max_us,
            server_request_bytes: None,
            moved: 0,
            asked: 0,
            replicated_us: None,
            sent_to: None,
            ..Default::default()
        };
        let injection = Injection {
            seq,
            requested_us,
            server_us: figures.exec_us,
            iterations,
            method: self.method,
            round_trip_us: reply_us.saturating_sub(record.sent_us),
            ok,
            error,
        };
        (record, injection, outcome.is_err())
    }
}

/// The accuracy the tool claims for a stall figure: one aggregate probe interval plus the
/// baseline p99 latency, ms.
pub fn tolerance_ms(aggregate_interval_us: f64, baseline_p99_us: u64) -> f64 {
    (aggregate_interval_us + baseline_p99_us as f64) / 1e3
}

/// One injection against what was measured (a row of calibration.csv).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRow {
    /// Injection number (the write event's `seq`).
    pub seq: u32,
    /// Requested stall length, ms.
    pub requested_ms: f64,
    /// The length compared against, ms: the server's SLOWLOG duration of the injecting
    /// command where logged; else, for the iteration loop (whose length is only approximately
    /// what was asked), its client round trip minus the baseline median; else the requested
    /// length (exact for DEBUG SLEEP and the TIME loop).
    pub injected_ms: f64,
    /// `slowlog`, `round-trip` or `requested`: where `injected_ms` came from.
    pub injected_source: String,
    /// The longest stall episode overlapping the injection, ms (empty: none found).
    pub stall_ms: Option<f64>,
    /// `stall_ms - injected_ms`.
    pub stall_error_ms: Option<f64>,
    /// The worst probe delay during the injection (head-of-line delay: worst latency minus
    /// the baseline median), ms.
    pub worst_delay_ms: Option<f64>,
    /// `worst_delay_ms - injected_ms`.
    pub delay_error_ms: Option<f64>,
    /// The claimed accuracy: one aggregate probe interval plus the baseline p99, ms.
    pub tolerance_ms: f64,
    /// Both errors within the tolerance.
    pub within: bool,
    /// The injecting command's failure, if it failed.
    pub error: Option<String>,
}

/// Compares each injection with the analysis of the run that probed it.
pub fn evaluate(
    injections: &[Injection],
    analysis: &Analysis,
    tolerance_ms: f64,
) -> Vec<CalibrationRow> {
    injections
        .iter()
        .map(|inj| {
            let summary = analysis.writes.iter().find(|w| w.seq == inj.seq);
            let (injected_ms, injected_source) = match (inj.server_us, inj.method) {
                (Some(us), _) => (us as f64 / 1e3, "slowlog"),
                (None, StallMethod::LuaLoop) => (
                    inj.round_trip_us.saturating_sub(analysis.baseline.p50_us) as f64 / 1e3,
                    "round-trip",
                ),
                (None, _) => (inj.requested_us as f64 / 1e3, "requested"),
            };
            let stall_ms = analysis
                .stalls
                .iter()
                .filter(|s| s.write_seq == Some(inj.seq))
                .map(|s| s.duration_ms)
                .fold(None, |best: Option<f64>, d| {
                    Some(best.map_or(d, |b| b.max(d)))
                });
            let worst_delay_ms = summary.and_then(|s| s.hol_delay_ms);
            let stall_error_ms = stall_ms.map(|m| m - injected_ms);
            let delay_error_ms = worst_delay_ms.map(|m| m - injected_ms);
            let within = inj.ok
                && stall_error_ms.is_some_and(|e| e.abs() <= tolerance_ms)
                && delay_error_ms.is_some_and(|e| e.abs() <= tolerance_ms);
            CalibrationRow {
                seq: inj.seq,
                requested_ms: inj.requested_us as f64 / 1e3,
                injected_ms,
                injected_source: injected_source.into(),
                stall_ms,
                stall_error_ms,
                worst_delay_ms,
                delay_error_ms,
                tolerance_ms,
                within,
                error: inj.error.clone(),
            }
        })
        .collect()
}

/// Per requested length: the median errors over its injections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthSummary {
    /// Requested length, ms.
    pub requested_ms: f64,
    /// Injections of this length.
    pub injections: usize,
    /// Median of `stall_error_ms`.
    pub stall_error_median_ms: Option<f64>,
    /// Median of `delay_error_ms`.
    pub delay_error_median_ms: Option<f64>,
    /// Largest |error| of either kind.
    pub worst_abs_error_ms: Option<f64>,
    /// Injections within the tolerance.
    pub within: usize,
}

/// Groups rows by requested length, in the order of first appearance.
pub fn by_length(rows: &[CalibrationRow]) -> Vec<LengthSummary> {
    let mut lengths: Vec<f64> = Vec::new();
    for row in rows {
        if !lengths.contains(&row.requested_ms) {
            lengths.push(row.requested_ms);
        }
    }
    lengths
        .into_iter()
        .map(|length| {
            let group: Vec<&CalibrationRow> =
                rows.iter().filter(|r| r.requested_ms == length).collect();
            let median =
                |values: Vec<f64>| crate::analyze::stats::spread(&values).map(|s| s.median);
            let worst = group
                .iter()
                .flat_map(|r| [r.stall_error_ms, r.delay_error_ms])
                .flatten()
                .map(f64::abs)
                .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
            LengthSummary {
                requested_ms: length,
                injections: group.len(),
                stall_error_median_ms: median(
                    group.iter().filter_map(|r| r.stall_error_ms).collect(),
                ),
                delay_error_median_ms: median(
                    group.iter().filter_map(|r| r.delay_error_ms).collect(),
                ),
                worst_abs_error_ms: worst,
                within: group.iter().filter(|r| r.within).count(),
            }
        })
        .collect()
}

/// Share of the injections that may be single outliers (outside the tolerance in a length
/// whose median is within it), rounded down: 1 of the default 15. A busy moment of the host
/// (a timer tick, another process) can put one injection just past the tolerance on an idle
/// host; the medians per length still show whether the figures are right.
pub const OUTLIER_SHARE: f64 = 0.10;

/// The calibration's verdict: the host is judged by the median error of each length, with a
/// stated share of single outliers allowed and named (calibration.json `verdict`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationVerdict {
    /// Every length's median errors within the tolerance, no injection failed or unmeasured,
    /// and no more single outliers than allowed.
    pub pass: bool,
    /// Requested lengths whose median stall or delay error is beyond the tolerance (or was not
    /// measured), ms.
    pub lengths_off_ms: Vec<f64>,
    /// Injections outside the tolerance in a length whose median is within it (`seq`).
    pub outlier_seqs: Vec<u32>,
    /// Single outliers allowed: [`OUTLIER_SHARE`] of the injections, rounded down.
    pub outliers_allowed: usize,
    /// Injections that failed or where no stall or delay was measured (`seq`): never noise.
    pub unmeasured_seqs: Vec<u32>,
}

/// Judges the rows by the median error per length, allowing [`OUTLIER_SHARE`] of single
/// outliers.
pub fn judge(
    rows: &[CalibrationRow],
    lengths: &[LengthSummary],
    tolerance_ms: f64,
) -> CalibrationVerdict {
    let off = |median: Option<f64>| median.is_none_or(|m| m.abs() > tolerance_ms);
    let lengths_off_ms: Vec<f64> = lengths
        .iter()
        .filter(|l| off(l.stall_error_median_ms) || off(l.delay_error_median_ms))
        .map(|l| l.requested_ms)
        .collect();
    let unmeasured_seqs: Vec<u32> = rows
        .iter()
        .filter(|r| r.error.is_some() || r.stall_error_ms.is_none() || r.delay_error_ms.is_none())
        .map(|r| r.seq)
        .collect();
    let outlier_seqs: Vec<u32> = rows
        .iter()
        .filter(|r| {
            !r.within
                && !unmeasured_seqs.contains(&r.seq)
                && !lengths_off_ms.contains(&r.requested_ms)
        })
        .map(|r| r.seq)
        .collect();
    let outliers_allowed = (rows.len() as f64 * OUTLIER_SHARE).floor() as usize;
    CalibrationVerdict {
        pass: !rows.is_empty()
            && lengths_off_ms.is_empty()
            && unmeasured_seqs.is_empty()
            && outlier_seqs.len() <= outliers_allowed,
        lengths_off_ms,
        outlier_seqs,
        outliers_allowed,
        unmeasured_seqs,
    }
}

/// The verdict in a few lines: passed or FAILED, and why, each injection named by its `#seq`.
pub fn verdict_lines(
    verdict: &CalibrationVerdict,
    rows: &[CalibrationRow],
    tolerance_ms: f64,
) -> Vec<String> {
    let name = |seq: &u32| {
        rows.iter().find(|r| r.seq == *seq).map_or_else(
            || format!("#{seq}"),
            |r| {
                let err =
                    |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3} ms"));
                format!(
                    "#{seq} ({:.1} ms: stall error {}, delay error {}{})",
                    r.requested_ms,
                    err(r.stall_error_ms),
                    err(r.delay_error_ms),
                    r.error
                        .as_ref()
                        .map_or_else(String::new, |e| format!(", {e}"))
                )
            },
        )
    };
    let names = |seqs: &[u32]| seqs.iter().map(name).collect::<Vec<_>>().join(", ");
    let share = format!(
        "{} allowed: {:.0}% of the injections, rounded down",
        verdict.outliers_allowed,
        OUTLIER_SHARE * 100.0
    );
    let mut lines = vec![if verdict.pass {
        format!("calibration passed: every length's median error within +-{tolerance_ms:.2} ms")
    } else {
        format!(
            "calibration FAILED (judged by the median error per length within +-{tolerance_ms:.2} ms, single outliers {share})"
        )
    }];
    if !verdict.lengths_off_ms.is_empty() {
        let said: Vec<String> = verdict
            .lengths_off_ms
            .iter()
            .map(|ms| format!("{ms:.1} ms"))
            .collect();
        lines.push(format!(
            "  median error beyond +-{tolerance_ms:.2} ms at {}",
            said.join(", ")
        ));
    }
    if !verdict.unmeasured_seqs.is_empty() {
        lines.push(format!(
            "  failed or not measured: {}",
            names(&verdict.unmeasured_seqs)
        ));
    }
    if !verdict.outlier_seqs.is_empty() {
        let count = verdict.outlier_seqs.len();
        lines.push(format!(
            "  {count} single outlier{} ({share}): {}",
            if count == 1 { "" } else { "s" },
            names(&verdict.outlier_seqs)
        ));
    }
    lines
}

#[cfg(test)]
mod tests;
