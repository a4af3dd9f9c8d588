//! The 2017 benchmark, reproduced with holprobe's library.
//!
//! In 2017 a script stored one value each of 1, 4, 32, 64, 128, 256 and 512 MiB in Redis,
//! keeping every key, and printed per size the SET time and the host's memory and swap:
//!
//! ```text
//! length:  64M, spend: 0.1335s, memory 67.6%, swap 0.0%
//! ```
//!
//! That is the writer's own time: nobody measured what the *other* clients saw. This example runs
//! the same procedure (each size once, in order, on one connection, every key kept until the
//! end) while holprobe's probe threads sample the server, and prints the 2017 benchmark's line
//! followed by the blocking it could not see. The keys are then deleted, each deletion measured
//! too. The 2017 script sent its SETs back to back; the default gap, 50 ms, is as close as keeps
//! each write's window apart. So each SET comes while the server still keeps the query buffer
//! of the one before, and grows it: on Redis 7.0 (jemalloc) others were held 39 ms at 64M, 78 ms
//! at 128M and 159 ms at 256M, against 4-6 ms with `--gap 3s`, by when the server has trimmed it
//! (docs/methodology.md, *The query buffer a connection keeps*).
//!
//! ```sh
//! cargo run --release --example benchmark_2017                  # 1M..512M, embedded redis-server
//! cargo run --release --example benchmark_2017 -- --sizes 1,4   # sizes in MiB (or 512K)
//! cargo run --release --example benchmark_2017 -- --url redis://127.0.0.1:6379 --sizes 64
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use clap::Parser;
use holprobe::cli::TargetArgs;
use holprobe::error::{UsageError, exit_status};
use holprobe::measure::target::Target;
use holprobe::measure::writer::WriterPlan;
use holprobe::record::WriteOp;
use holprobe::run::{Notice, RunOptions, run};
use holprobe::units::{format_size, parse_duration, parse_size};

/// The 2017 benchmark (one SET per size, keys kept, SET time and memory printed), plus what the
/// other clients saw during each SET.
#[derive(Debug, Parser)]
#[command(name = "benchmark_2017")]
struct Args {
    /// Value sizes, comma-separated: a plain number is MiB, as in 2017; or with a unit (512K).
    #[arg(long, default_value = "1,4,32,64,128,256,512")]
    sizes: String,

    /// Quiet probing before and after each write, so each write's effect stands apart (the 2017
    /// script had none; from 2-3 s the server has trimmed the last SET's query buffer).
    #[arg(long, default_value = "50ms")]
    gap: String,

    /// Also write holprobe's exports (probes.csv, summary.csv, ...) to this directory.
    #[arg(long)]
    out: Option<std::path::PathBuf>,

    #[command(flatten)]
    target: TargetArgs,
}

/// `64` is 64 MiB (the 2017 benchmark's unit); `512K`, `1G` carry their own.
fn parse_sizes(text: &str) -> Result<Vec<u64>, UsageError> {
    text.split(',')
        .map(|part| {
            let part = part.trim();
            if !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) {
                parse_size("--sizes", &format!("{part}M"))
            } else {
                parse_size("--sizes", part)
            }
        })
        .collect()
}

fn main() -> ExitCode {
    match benchmark() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("benchmark_2017: error: {err:#}");
            ExitCode::from(exit_status(&err) as u8)
        }
    }
}

fn benchmark() -> Result<()> {
    let args = Args::parse();
    let sizes = parse_sizes(&args.sizes)?;
    let gap = parse_duration("--gap", &args.gap)?;
    let spec = args.target.to_spec(std::env::var("REDISCLI_AUTH").ok())?;

    // The 2017 procedure: each size once, in order, every key kept until the end.
    let options = RunOptions {
        writer: Some(WriterPlan {
            sizes,
            gap,
            keep: true,
            // One connection, as the 2017 script's client had: each SET after a smaller one
            // makes the server grow the query buffer it kept from that one.
            same_connection: true,
            ..WriterPlan::default()
        }),
        out: args.out.clone(),
        ..RunOptions::default()
    };
    if let Some(dir) = &options.out {
        holprobe::output::export::prepare_out_dir(dir, false)?;
    }
    let mut target = Target::open(&spec)?;
    eprintln!(
        "benchmark_2017: {} {} at {}; probing with {} threads x {}/s PING",
        target.server.flavor,
        target.server.version,
        target.conn,
        options.probe_threads,
        options.probe_rate
    );

    let interrupt = Arc::new(AtomicBool::new(false));
    {
        let interrupt = Arc::clone(&interrupt);
        let _ = ctrlc::set_handler(move || interrupt.store(true, Ordering::SeqCst));
    }
    let mut deletes = Vec::new();
    let report = run(&options, &target, &interrupt, &mut |notice| {
        if let Notice::Write { record, summary } = notice {
            let blocked = summary
                .hol_delay_ms
                .map_or("n/a".to_string(), |ms| format!("{ms:.1}ms"));
            match record.op {
                WriteOp::Set => println!(
                    "length: {:>4}, spend: {:.4}s, memory {:.1}%, swap {:.1}%  |  others blocked: {blocked}, stalled: {:.1}ms, delayed probes: {}",
                    format_size(record.size_bytes),
                    record.set_ms / 1e3,
                    record.host_mem_pct,
                    record.host_swap_pct,
                    summary.stall_ms,
                    summary.probes_delayed,
                ),
                // The 2017 benchmark never deleted its keys; the deletions are printed after the table.
                _ => deletes.push(format!(
                    "  del {:>4}: {:.1}ms, others blocked: {blocked}, stalled: {:.1}ms",
                    format_size(record.size_bytes),
                    record.set_ms,
                    summary.stall_ms,
                )),
            }
        }
    });
    target.shutdown();
    let report = report?;
    if !deletes.is_empty() {
        println!("cleanup, which the 2017 benchmark never measured (each key deleted):");
        for line in &deletes {
            println!("{line}");
        }
    }
    println!(
        "{}",
        holprobe::output::report::baseline_line(&report.analysis.baseline)
    );
    for warning in &report.warnings {
        eprintln!("benchmark_2017: warning: {warning}");
    }
    if report.writes.iter().any(|w| !w.ok) {
        anyhow::bail!("a write failed (see the lines above)");
    }
    if let Some(reason) = report.status_reason {
        anyhow::bail!("the run stopped early: {reason}");
    }
    Ok(())
}
