//! Other commands that may block on large values, measured with the same machinery as SET:
//! `GET` of a large value (the server must copy it into the client's output buffer and write it
//! out), `DEL` against `UNLINK` (the lazy variant, which Redis still runs on the main thread for
//! a plain string, since freeing one allocation counts as cheap).
//!
//! The library's hook is [`holprobe::measure::writer::CustomCommand`]: commands in
//! `WriterPlan::commands` run on each freshly written key after its SET, each after its own quiet
//! gap, and are recorded as write events with op `command`, so the correlator reports what the
//! probe clients saw during each one, as for a SET.
//!
//! Two runs on one server: (1) SET, `GET {key}`, then the plan's own `DEL`; (2) SET, then
//! `UNLINK {key}` in place of the DEL. Then one table: per size and command, the medians over
//! the repeats of the command's own time and of what the others saw.
//!
//! ```sh
//! cargo run --release --example custom_command                       # 16M,64M,128M x 3
//! cargo run --release --example custom_command -- --sizes 4M,64M --repeat 5
//! cargo run --release --example custom_command -- --command "STRLEN {key}"  # your own
//! cargo run --release --example custom_command -- --out runs/get   # exports, for analysis/
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use clap::Parser;
use holprobe::analyze::correlate::WriteSummary;
use holprobe::cli::TargetArgs;
use holprobe::error::{UsageError, exit_status};
use holprobe::measure::target::Target;
use holprobe::measure::writer::{CustomCommand, KEY_PLACEHOLDER, WriterPlan};
use holprobe::record::WriteOp;
use holprobe::run::{Notice, RunOptions, run};
use holprobe::units::{format_size, parse_size_list};

/// GET of large values and DEL vs UNLINK, measured like SET: what the other clients saw.
#[derive(Debug, Parser)]
#[command(name = "custom_command")]
struct Args {
    /// Value sizes, comma-separated, binary units (64M = 64 MiB).
    #[arg(long, default_value = "16M,64M,128M")]
    sizes: String,

    /// Writes per size.
    #[arg(long, default_value_t = 3)]
    repeat: u32,

    /// Measure this command instead (repeatable), e.g. "STRLEN {key}"; {key} is the key just
    /// written. Arguments are split on spaces.
    #[arg(long = "command", value_name = "CMD")]
    commands: Vec<String>,

    /// With --command: the command removes the key, so the plan does not delete it again.
    #[arg(long, requires = "commands")]
    removes_key: bool,

    /// Write each run's exports under this directory: get-del/ and unlink/ (or custom/).
    #[arg(long)]
    out: Option<std::path::PathBuf>,

    #[command(flatten)]
    target: TargetArgs,
}

fn main() -> ExitCode {
    match measure() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("custom_command: error: {err:#}");
            ExitCode::from(exit_status(&err) as u8)
        }
    }
}

/// One measured event: which command, what the others saw.
struct Row {
    name: String,
    summary: WriteSummary,
}

fn measure() -> Result<()> {
    let args = Args::parse();
    let sizes = parse_size_list("--sizes", &args.sizes)?;
    if args.repeat == 0 {
        return Err(UsageError::invalid("--repeat", 0, "expected at least 1").into());
    }
    let spec = args.target.to_spec(std::env::var("REDISCLI_AUTH").ok())?;

    // Each run: a name (its export directory) and the custom commands run after each SET.
    let runs: Vec<(&str, Vec<CustomCommand>)> = if args.commands.is_empty() {
        vec![
            (
                "get-del",
                vec![CustomCommand::new(["GET", KEY_PLACEHOLDER])],
            ),
            (
                "unlink",
                vec![CustomCommand::removing(["UNLINK", KEY_PLACEHOLDER])],
            ),
        ]
    } else {
        let mut commands = Vec::new();
        for text in &args.commands {
            let words: Vec<&str> = text.split_whitespace().collect();
            if words.is_empty() {
                return Err(UsageError::invalid("--command", text, "expected a command").into());
            }
            commands.push(CustomCommand {
                args: words.iter().map(|w| w.to_string()).collect(),
                removes_key: args.removes_key,
            });
        }
        vec![("custom", commands)]
    };
    let out_dirs: Vec<Option<std::path::PathBuf>> = runs
        .iter()
        .map(|(name, _)| args.out.as_ref().map(|dir| dir.join(name)))
        .collect();
    for dir in out_dirs.iter().flatten() {
        holprobe::output::export::prepare_out_dir(dir, false)?;
    }

    let mut target = Target::open(&spec)?;
    eprintln!(
        "custom_command: {} {} at {}",
        target.server.flavor, target.server.version, target.conn
    );
    let interrupt = AtomicBool::new(false);
    let mut rows: Vec<Row> = Vec::new();
    for ((_, commands), out) in runs.iter().zip(out_dirs) {
        let options = RunOptions {
            writer: Some(WriterPlan {
                sizes: sizes.clone(),
                repeat: args.repeat,
                commands: commands.clone(),
                ..WriterPlan::default()
            }),
            out,
            ..RunOptions::default()
        };
        // Custom commands run in plan order after each SET: the n-th command event of a key
        // is commands[n].
        let mut next_command = 0usize;
        let report = run(&options, &target, &interrupt, &mut |notice| {
            let Notice::Write { record, summary } = notice else {
                return;
            };
            let name = match record.op {
                WriteOp::Set => {
                    next_command = 0;
                    "SET".to_string()
                }
                WriteOp::Overwrite => "SET (overwrite)".to_string(),
                WriteOp::Delete => "DEL".to_string(),
                WriteOp::Inject => "injected stall".to_string(),
                // The value types' ops, which this example's plan (strings, custom commands)
                // never has.
                other @ (WriteOp::Build
                | WriteOp::Read
                | WriteOp::Unlink
                | WriteOp::Expire
                | WriteOp::Evict) => other.name().to_uppercase(),
                WriteOp::Command => {
                    let words = commands
                        .get(next_command)
                        .map(|c| c.args.join(" "))
                        .unwrap_or_else(|| "command".into());
                    next_command += 1;
                    words
                }
            };
            let blocked = summary
                .hol_delay_ms
                .map_or("n/a".to_string(), |ms| format!("{ms:.1}ms"));
            println!(
                "{name:<16} {:>5}  own {:7.3}ms  others blocked {blocked:>7}  stalled {:5.1}ms (send {:.1} + after {:.1}){}",
                format_size(record.size_bytes),
                record.set_ms,
                summary.stall_ms,
                summary.stall_during_send_ms,
                summary.stall_after_send_ms,
                if record.ok {
                    String::new()
                } else {
                    format!("  FAILED: {}", record.error.as_deref().unwrap_or("?"))
                }
            );
            rows.push(Row {
                name,
                summary: summary.clone(),
            });
        });
        let report = match report {
            Ok(report) => report,
            Err(err) => {
                target.shutdown();
                return Err(err);
            }
        };
        println!(
            "{}",
            holprobe::output::report::baseline_line(&report.analysis.baseline)
        );
        if let Some(reason) = report.status_reason {
            target.shutdown();
            anyhow::bail!("the run stopped early: {reason}");
        }
    }
    target.shutdown();

    // Medians over the repeats, per command and size.
    let mut groups: BTreeMap<(String, u64), Vec<&WriteSummary>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.summary.ok) {
        groups
            .entry((row.name.clone(), row.summary.size_bytes))
            .or_default()
            .push(&row.summary);
    }
    println!(
        "\nmedians over {} repeat(s)         own time   others blocked   stalled",
        args.repeat
    );
    for size in &sizes {
        for ((name, group_size), summaries) in &groups {
            if group_size != size {
                continue;
            }
            let own = median(summaries.iter().map(|s| s.set_ms));
            let blocked = median(summaries.iter().filter_map(|s| s.hol_delay_ms));
            let stalled = median(summaries.iter().map(|s| s.stall_ms));
            println!(
                "{name:<16} {:>5}  {:>12}  {:>15}  {:>8}",
                format_size(*size),
                show_ms(own),
                show_ms(blocked),
                show_ms(stalled)
            );
        }
    }
    Ok(())
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

fn show_ms(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |ms| format!("{ms:.1}ms"))
}
