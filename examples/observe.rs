//! Watching a server for head-of-line stalls from another program, through holprobe's library:
//! a run with no writer and a duration is observe mode. The probe threads sample the server on
//! a fixed schedule; each stall episode is handed to the callback as soon as it is final
//! ([`holprobe::run::Notice::Stall`]), with its wall-clock start and, where the server's slow
//! log tells, the command and client that caused it; the run's report keeps them (the 1,000
//! longest of a very long run).
//!
//! Against the embedded server (no `--url`) the example gives itself something to find: a
//! helper thread sends `DEBUG SLEEP` every `--inject-every`, and each injected sleep is matched
//! with the stall that measured it. Nothing is injected into a server named by `--url`.
//!
//! ```sh
//! cargo run --release --example observe                           # embedded, 100 ms sleeps
//! cargo run --release --example observe -- --duration 30s --url redis://127.0.0.1:6379
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Parser;
use holprobe::cli::TargetArgs;
use holprobe::error::{UsageError, exit_status};
use holprobe::measure::target::Target;
use holprobe::output::report::stall_line;
use holprobe::run::{Notice, RunOptions, run};
use holprobe::units::parse_duration;

/// Observe a server for a while and print every stall as it comes, with its cause.
#[derive(Debug, Parser)]
#[command(name = "observe")]
struct Args {
    /// How long to watch.
    #[arg(long, default_value = "6s")]
    duration: String,

    /// Embedded server only: how long each injected DEBUG SLEEP lasts (0 = inject nothing).
    #[arg(long, default_value = "100ms")]
    inject_sleep: String,

    /// Embedded server only: time between injected sleeps (the first comes after 1 s).
    #[arg(long, default_value = "2s")]
    inject_every: String,

    #[command(flatten)]
    target: TargetArgs,
}

fn main() -> ExitCode {
    match observe() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("observe: error: {err:#}");
            ExitCode::from(exit_status(&err) as u8)
        }
    }
}

fn unix_us_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn observe() -> Result<()> {
    let args = Args::parse();
    let duration = parse_duration("--duration", &args.duration)?;
    if duration.is_zero() {
        return Err(
            UsageError::invalid("--duration", &args.duration, "must be longer than 0").into(),
        );
    }
    let sleep = parse_duration("--inject-sleep", &args.inject_sleep)?;
    let every = parse_duration("--inject-every", &args.inject_every)?;
    if !sleep.is_zero() && every <= sleep {
        return Err(UsageError::invalid(
            "--inject-every",
            &args.inject_every,
            "must be longer than --inject-sleep",
        )
        .into());
    }
    let spec = args.target.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
    let mut target = Target::open(&spec)?;
    let inject = target.embedded.is_some() && !sleep.is_zero();
    eprintln!(
        "observe: watching {} {} at {} for {duration:?}{}",
        target.server.flavor,
        target.server.version,
        target.conn,
        if inject {
            format!(", injecting DEBUG SLEEP {sleep:?} every {every:?}")
        } else {
            String::new()
        }
    );

    // Observe mode: no writer, a duration; everything else at the command line's defaults.
    let options = RunOptions {
        duration: Some(duration),
        ..RunOptions::default()
    };

    let stop = Arc::new(AtomicBool::new(false));
    let injector = if inject {
        let mut conn = target.conn.redis_connection()?;
        let stop = Arc::clone(&stop);
        let deadline = Instant::now() + duration;
        Some(
            std::thread::Builder::new()
                .name("injector".into())
                .spawn(move || -> Vec<(u64, u64)> {
                    // (sent, replied) of each DEBUG SLEEP, Unix µs: the server slept inside.
                    let mut injected_unix_us = Vec::new();
                    let mut next = Instant::now() + Duration::from_secs(1);
                    while next + sleep + Duration::from_millis(300) < deadline {
                        while Instant::now() < next {
                            if stop.load(Ordering::Relaxed) {
                                return injected_unix_us;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        let sent = unix_us_now();
                        let reply: redis::RedisResult<()> = redis::cmd("DEBUG")
                            .arg("SLEEP")
                            .arg(format!("{:.3}", sleep.as_secs_f64()))
                            .query(&mut conn);
                        if reply.is_ok() {
                            injected_unix_us.push((sent, unix_us_now()));
                        }
                        next += every;
                    }
                    injected_unix_us
                })
                .context("starting the injector thread")?,
        )
    } else {
        None
    };

    let interrupt = Arc::new(AtomicBool::new(false));
    {
        let interrupt = Arc::clone(&interrupt);
        let _ = ctrlc::set_handler(move || interrupt.store(true, Ordering::SeqCst));
    }
    let report = run(&options, &target, &interrupt, &mut |notice| {
        if let Notice::Stall(stall) = notice {
            println!("{}", stall_line(stall, &[]));
        }
    });
    stop.store(true, Ordering::Relaxed);
    let injected = injector.map(|h| h.join().unwrap_or_default());
    target.shutdown();
    let report = report?;

    let stalls = &report.analysis.stalls;
    println!(
        "{}",
        holprobe::output::report::baseline_line(&report.analysis.baseline)
    );
    println!(
        "stalls over {}ms: {} (longest {:.1}ms)",
        options.stall_threshold_us as f64 / 1e3,
        stalls.len(),
        stalls.iter().map(|s| s.duration_ms).fold(0.0, f64::max)
    );
    // Each injected sleep against the longest stall overlapping the span from its send to its
    // reply (the server slept somewhere inside it, however late the injector thread ran).
    for (sent_unix_us, replied_unix_us) in injected.unwrap_or_default() {
        let at_us = sent_unix_us.saturating_sub(report.started_unix_us);
        let replied_us = replied_unix_us.saturating_sub(report.started_unix_us);
        let found = stalls
            .iter()
            .filter(|s| s.start_us <= replied_us && s.end_us >= at_us)
            .max_by(|a, b| a.duration_ms.total_cmp(&b.duration_ms));
        match found {
            Some(stall) => println!(
                "injected DEBUG SLEEP {:.0}ms at {:.3}s: measured stall {:.1}ms from {:.3}s",
                sleep.as_secs_f64() * 1e3,
                at_us as f64 / 1e6,
                stall.duration_ms,
                stall.start_us as f64 / 1e6
            ),
            None => println!(
                "injected DEBUG SLEEP {:.0}ms at {:.3}s: no stall measured",
                sleep.as_secs_f64() * 1e3,
                at_us as f64 / 1e6
            ),
        }
    }
    if let Some(reason) = report.status_reason {
        anyhow::bail!("the run stopped early: {reason}");
    }
    Ok(())
}
