//! The probe engine against a server kept busy in short bursts (issue 10).
//!
//! A probe that waits for the reply of the one before it measures its own backlog: under bursts
//! with short breaks a closed-loop thread falls behind, and the latency it reports grows to a
//! multiple of a burst, more so the higher the rate. Pipelined probes each go out at their
//! intended time, so none of them can wait longer than the burst it met (plus the noise of the
//! host), at any rate. These tests hold the engine to that.

mod common;

use std::path::Path;
use std::time::Duration;

use common::bursts::BurstLoad;
use common::{TestServer, probe_cmd, read_csv};

/// How long each burst keeps the server busy.
const BURST_US: u64 = 3_000;
/// The break between bursts: the server is busy 75% of the time, and a break is too short for a
/// closed-loop probe thread at 5000/s to work off what piled up during the burst.
const BREAK_US: u64 = 1_000;
const PROBE_THREADS: u64 = 2;
const RUN_SECS: u64 = 3;

/// What a probe may wait beyond the longest burst: the probe threads and the server's busy loop
/// share 2 CPUs on CI, so a probe's thread or the server can be kept off a CPU for a few ms.
/// Fixed on purpose (not scaled by the noise measured in the run): a bound that grows with the
/// noise would also grow with the backlog this test is there to catch.
const TOLERANCE_US: u64 = 10_000;
/// How far apart the two rates' excess (worst latency - longest hold of the same run, [`UnderBursts::longest_hold_us`]) may be. The
/// excess, not the raw worst latency, because a burst stretched by a descheduled server is the
/// host's noise, not the engine's: it lengthens that run's bursts and its worst probe alike.
/// A pipelined engine adds the same little at any rate; a closed-loop one adds its backlog, which
/// grows with the rate.
const RATES_AGREE_US: u64 = 5_000;
/// The longest burst (server-measured, or as the load's own client saw it) for which a run says
/// anything: a burst stretched past this by a descheduled server would raise the bound past the
/// failure below.
const MAX_BURST_US: u64 = 20_000;

// A wait of ten bursts must fail this test: a probe stuck behind ten bursts and their breaks
// (10 × 4 ms = 40 ms) is outside even the loosest bound a run may have (longest burst at most
// 20 ms, + 10 ms), and its excess (≥ 20 ms) is far outside the agreement of the two rates.
// Checked at compile time, so that the constants cannot be loosened until such a wait passes.
const _: () = assert!(10 * (BURST_US + BREAK_US) > MAX_BURST_US + TOLERANCE_US);
const _: () = assert!(10 * (BURST_US + BREAK_US) - MAX_BURST_US > RATES_AGREE_US);

/// What one observe run under bursts saw.
struct UnderBursts {
    rate: u64,
    probes: usize,
    failed: usize,
    worst_latency_us: u64,
    p99_latency_us: u64,
    longest_burst_us: u64,
    bursts: usize,
    longest_burst_round_trip_us: u64,
}

/// Runs `probe` in observe mode at `rate` per thread while a fresh burst load runs.
fn observe_under_bursts(server: &TestServer, rate: u64, out: &Path) -> UnderBursts {
    let mut load = BurstLoad::on(
        &server.server.conn_info(),
        Duration::from_micros(BURST_US),
        Duration::from_micros(BREAK_US),
    );
    probe_cmd()
        .args(["--url", &server.url()])
        .args(["--duration", &format!("{RUN_SECS}s")])
        .args(["--probe-rate", &rate.to_string()])
        .args(["--probe-threads", &PROBE_THREADS.to_string()])
        .arg("--out")
        .arg(out)
        .timeout(Duration::from_secs(30))
        .assert()
        .success();
    load.stop();

    // The engine under test: pipelined (several probes were outstanding at once on a
    // connection while a burst held the server) and, on Linux, timed by the kernel's stamps.
    let run = common::read_json(&out.join("run.json"));
    let engine = &run["probe_engine"];
    assert_eq!(engine["mode"], "pipelined", "{engine}");
    assert!(
        engine["max_outstanding"].as_u64().unwrap_or(0) > 1,
        "no connection ever had two probes outstanding: {engine}"
    );
    if cfg!(target_os = "linux") {
        assert_eq!(engine["reply_clock"], "kernel", "{engine}");
    }

    let rows = read_csv(&out.join("probes.csv"));
    let mut latencies: Vec<u64> = rows
        .iter()
        .filter(|p| p["ok"] == "true")
        .map(|p| {
            p["latency_us"]
                .parse()
                .unwrap_or_else(|e| panic!("latency_us of {p:?}: {e}"))
        })
        .collect();
    latencies.sort_unstable();
    let bursts = load.bursts();
    UnderBursts {
        rate,
        probes: rows.len(),
        failed: rows.len() - latencies.len(),
        worst_latency_us: latencies.last().copied().unwrap_or(0),
        p99_latency_us: latencies
            .get(latencies.len() * 99 / 100)
            .copied()
            .unwrap_or(0),
        longest_burst_us: load.max_burst_us(),
        bursts: bursts.len(),
        longest_burst_round_trip_us: bursts.iter().map(|b| b.round_trip_us).max().unwrap_or(0),
    }
}

impl UnderBursts {
    /// The longest a burst held a client: by the server's clock, or as the load's own client
    /// saw it (send to reply), whichever is longer. The server's clock leaves out what happens
    /// around the script (the server kept off a CPU by the host, its cron, the probes queued
    /// before it); the load's client, a closed-loop one with one command outstanding, has no
    /// backlog of its own to add.
    fn longest_hold_us(&self) -> u64 {
        self.longest_burst_us.max(self.longest_burst_round_trip_us)
    }

    /// What the engine added to the longest hold of its run (0 when it added nothing).
    fn excess_us(&self) -> u64 {
        self.worst_latency_us.saturating_sub(self.longest_hold_us())
    }
}

impl std::fmt::Display for UnderBursts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/s per thread: {} probes ({} failed), worst latency {} µs (p99 {} µs); {} bursts, \
             longest {} µs by the server's clock ({} µs round trip)",
            self.rate,
            self.probes,
            self.failed,
            self.worst_latency_us,
            self.p99_latency_us,
            self.bursts,
            self.longest_burst_us,
            self.longest_burst_round_trip_us
        )
    }
}

/// How many times the pair of runs may be tried. A host that keeps the server or a probe thread
/// off a CPU for longer than the tolerance (seen on a loaded CI machine: a p99 of 13 ms under
/// 3 ms bursts, at the slow rate where a backlog is smallest) fails one attempt by chance; a
/// closed-loop engine's backlog is systematic and fails every attempt. The bounds stay fixed.
/// Five, since a CI host (2 December) failed 3 attempts in a row in 4 of 6 tries, its own
/// load client held 12-30 ms by 3 ms bursts.
const ATTEMPTS: usize = 5;

/// What is wrong with one attempt's pair of runs (slow rate first), or `None` when it passes.
fn judge(runs: &[UnderBursts]) -> Option<String> {
    for run in runs {
        let expected = (PROBE_THREADS * run.rate * RUN_SECS) as usize;
        if run.probes < expected / 2 {
            return Some(format!("expected about {expected} probes: {run}"));
        }
        if run.failed != 0 {
            return Some(format!("failed probes hide latencies: {run}"));
        }
        if (run.bursts as u64) < RUN_SECS * 1_000_000 / (BURST_US + BREAK_US) / 4 {
            return Some(format!(
                "too few bursts for the load to mean anything: {run}"
            ));
        }
        if !(BURST_US..=MAX_BURST_US).contains(&run.longest_burst_us) {
            return Some(format!(
                "the longest burst should be about {BURST_US} µs: {run}"
            ));
        }
        if run.longest_hold_us() > MAX_BURST_US {
            return Some(format!(
                "a burst held the load's own client past {MAX_BURST_US} µs: the host is too \
                 noisy for this attempt to say anything. {run}"
            ));
        }
        // The load was felt: at 2000 probes/s or more, some probe met a burst in its first half.
        if run.worst_latency_us < BURST_US / 2 {
            return Some(format!(
                "no probe waited for a burst; is the load running? {run}"
            ));
        }
        if run.excess_us() > TOLERANCE_US {
            return Some(format!(
                "a probe waited {} µs beyond the longest burst as a client saw it (allowed: \
                 {TOLERANCE_US} µs): the probes measure their own backlog. {run}",
                run.excess_us()
            ));
        }
    }
    let (slow, fast) = (&runs[0], &runs[1]);
    if slow.excess_us().abs_diff(fast.excess_us()) > RATES_AGREE_US {
        return Some(format!(
            "beyond the longest hold, the worst probe waited {} µs at {}/s but {} µs at {}/s \
             (allowed apart: {RATES_AGREE_US} µs)",
            slow.excess_us(),
            slow.rate,
            fast.excess_us(),
            fast.rate
        ));
    }
    None
}

#[test]
fn worst_probe_latency_is_the_longest_burst_at_any_rate() {
    let server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for attempt in 1..=ATTEMPTS {
        // Both runs first, then the checks, so a failure shows the numbers of both.
        let runs: Vec<UnderBursts> = [1000, 5000]
            .into_iter()
            .map(|rate| {
                let out = dir.path().join(format!("a{attempt}-r{rate}"));
                observe_under_bursts(&server, rate, &out)
            })
            .collect();
        for run in &runs {
            eprintln!("attempt {attempt}: {run}");
        }
        match judge(&runs) {
            None => return,
            Some(why) => {
                eprintln!("attempt {attempt} failed: {why}");
                failures.push(format!("attempt {attempt}: {why}"));
            }
        }
    }
    panic!(
        "every one of {ATTEMPTS} attempts failed:\n{}",
        failures.join("\n")
    );
}

/// A probe thread's voluntary context switches over `secs`, by thread name (`probe-N`), read
/// from /proc while the run `pid` goes on.
fn probe_thread_wakeups(pid: u32, secs: u64) -> std::collections::BTreeMap<String, u64> {
    let read = || {
        let mut counts = std::collections::BTreeMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the run's threads") {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if !name.starts_with("probe-") {
                continue;
            }
            let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
            let switches = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .expect("voluntary_ctxt_switches");
            counts.insert(name.trim().to_string(), switches);
        }
        counts
    };
    let before = read();
    std::thread::sleep(Duration::from_secs(secs));
    read()
        .into_iter()
        .map(|(name, after)| {
            let start = before.get(&name).copied().unwrap_or(0);
            (name, after - start)
        })
        .collect()
}

/// At 1000 probes a second a thread wakes once per probe, to send it, and reads the replies
/// that came since then (their kernel stamps keep their times): not once more per reply, as it
/// did (3761 switches in 2 s, 1.9 a probe), each wake-up CPU taken from the server on a small
/// host. A wake-up is a voluntary context switch (the thread blocks in a sleep or a poll).
#[cfg(target_os = "linux")]
#[test]
fn a_probe_thread_wakes_once_per_probe_at_high_rates() {
    let server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = server.url();
    let mut child = common::spawn_run(
        &[
            "--url",
            &url,
            "--duration",
            "6s",
            "--probe-rate",
            "1000",
            "--probe-threads",
            "2",
        ],
        &out,
    );
    // Past the start (connections, the first replies that turn the stamps on).
    std::thread::sleep(Duration::from_secs(1));
    let wakeups = probe_thread_wakeups(child.id(), 2);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(wakeups.len(), 2, "{wakeups:?}");
    let run = common::read_json(&out.join("run.json"));
    assert_eq!(run["probe_engine"]["reply_clock"], "kernel", "{run}");
    // 2000 probes a thread in the 2 s: one wake-up each, and some spare (a flush, a late
    // timer); two per probe is the old way.
    for (thread, count) in &wakeups {
        assert!(
            *count < 3000,
            "{thread} woke {count} times for 2000 probes: {wakeups:?}"
        );
        assert!(
            *count > 1000,
            "{thread} woke only {count} times for 2000 probes: {wakeups:?}"
        );
    }
}
