//! Throughput of the streaming correlator: probe rows per second through
//! [`Correlator`](holprobe::analyze::correlate::Correlator) as the measuring session feeds it
//! (the horizon moved every 20 ms of the timeline, intervals of 1 s), on a synthetic timeline of
//! two probe threads with a server freeze every second and a write every ten. Goal: at least 5
//! million rows a second, so that a probe run's collector never falls behind (20,000 probes a
//! second at the highest rates), and reanalysing a day's run takes seconds.
//!
//! Run: `cargo bench --bench correlator` (`HOLPROBE_BENCH_ROWS=20000000` for more rows). Under
//! `cargo test` it only prints how to run it.

use std::time::Instant;

use holprobe::analyze::correlate::{CorrelateConfig, Correlator, Finding, Horizon, correlate};
use holprobe::record::{ProbeCmd, ProbeRecord, WriteOp, WriteRecord};

const CONFIG: CorrelateConfig = CorrelateConfig::with_threshold(1000);

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("correlator benchmark: run it with `cargo bench --bench correlator`");
        return;
    }
    let rows: u64 = std::env::var("HOLPROBE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let (probes, writes) = timeline(rows);
    println!(
        "timeline: {} probe rows, {} writes, {:.0} s at 2 x 1000/s",
        probes.len(),
        writes.len(),
        probes.last().map_or(0, |p| p.intended_us) as f64 / 1e6
    );
    let mut streamed = Vec::new();
    for _ in 0..3 {
        streamed.push(stream(&probes, &writes));
    }
    streamed.sort_by(f64::total_cmp);
    let median = streamed[1];
    println!(
        "streaming: {:.2} M rows/s (median of 3: {:.2} / {:.2} / {:.2}); goal >= 5 M rows/s: {}",
        median / 1e6,
        streamed[0] / 1e6,
        streamed[1] / 1e6,
        streamed[2] / 1e6,
        if median >= 5e6 { "met" } else { "NOT met" }
    );
    let start = Instant::now();
    let analysis = correlate(&probes, &writes, CONFIG);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "at once (correlate()): {:.2} M rows/s; {} stalls, {} writes",
        probes.len() as f64 / secs / 1e6,
        analysis.stalls.len(),
        analysis.writes.len()
    );
}

/// Feeds the timeline in 20 ms steps, as the session does; returns rows per second.
fn stream(probes: &[ProbeRecord], writes: &[WriteRecord]) -> f64 {
    let mut correlator = Correlator::new(CONFIG).with_intervals(1_000_000);
    correlator.memory_ended();
    let mut next_write = 0;
    let mut findings = 0usize;
    let start = Instant::now();
    let mut step_end = 20_000;
    for probe in probes {
        if probe.intended_us >= step_end {
            while next_write < writes.len() && writes[next_write].reply_us < step_end {
                correlator.write(writes[next_write].clone());
                next_write += 1;
            }
            let writes_from = writes
                .get(next_write)
                .map_or(step_end, |w| w.start_us.min(step_end));
            correlator.advance(Horizon {
                probes_through_us: step_end - 1,
                writes_from_us: writes_from,
            });
            findings += correlator
                .drain()
                .iter()
                .filter(|f| matches!(f, Finding::Stall(_) | Finding::Write(_)))
                .count();
            step_end += 20_000;
        }
        correlator.probe(probe);
    }
    for write in &writes[next_write..] {
        correlator.write(write.clone());
    }
    correlator.finish();
    findings += correlator.drain().len();
    let rows_per_s = probes.len() as f64 / start.elapsed().as_secs_f64();
    std::hint::black_box(findings);
    rows_per_s
}

/// Two threads at 1000/s each; the server freezes for 3 ms every second and a 40 ms write
/// (with a 20 ms freeze) runs every ten seconds.
fn timeline(rows: u64) -> (Vec<ProbeRecord>, Vec<WriteRecord>) {
    let mut probes = Vec::with_capacity(rows as usize);
    let mut t = 0u64;
    let mut seq = 0u64;
    while (probes.len() as u64) < rows {
        for thread in 0..2u16 {
            let intended = t + u64::from(thread) * 500;
            let second = intended % 1_000_000;
            let ten = intended % 10_000_000;
            let mut reply = intended + 25 + (intended * 7919 % 30);
            if (500_000..503_000).contains(&second) {
                reply = intended - second + 503_000 + 20;
            }
            if (5_010_000..5_030_000).contains(&ten) {
                reply = intended - ten + 5_030_000 + 20;
            }
            probes.push(ProbeRecord {
                thread,
                seq,
                cmd: ProbeCmd::Ping,
                intended_us: intended,
                sent_us: intended + 3,
                reply_us: Some(reply),
                read_us: Some(reply + 5),
                latency_us: Some(reply - intended),
                ok: true,
                error: None,
            });
        }
        seq += 1;
        t += 1000;
    }
    let end = t;
    let writes = (0..end / 10_000_000)
        .map(|i| {
            let start = i * 10_000_000 + 5_000_000;
            WriteRecord {
                host_mem_pct: 10.0,
                ..WriteRecord::timed(
                    i as u32 + 1,
                    WriteOp::Set,
                    format!("k{i}"),
                    64 << 20,
                    (start, start + 20_000, start + 40_000),
                )
            }
        })
        .collect();
    (probes, writes)
}
