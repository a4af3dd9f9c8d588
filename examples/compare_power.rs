//! How often the compare cries wolf, and the smallest slowdown it catches, on real runs.
//!
//! Give it several runs of the *same* server and plan (A/A runs, e.g. recorded by
//! `scripts/false_alarms.sh`). It compares each run with the next, at the compare's default
//! rules, and prints:
//!
//! 1. **false alarms:** per A/A pair, the rows flagged as regressions (goal: none);
//! 2. **power:** the same pairs again with the candidate's `hol_delay_ms` and `set_ms`
//!    multiplied by a factor (a synthetic, proportional slowdown of real runs, noise included),
//!    and per (size, op, metric) the share of pairs in which the slowdown was flagged.
//!
//! ```sh
//! cargo run --release --example compare_power -- /tmp/aa/run-*/
//! cargo run --release --example compare_power -- --alpha 0.05 /tmp/aa/run-*/   # other rules
//! ```

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use holprobe::compare::{Rules, Verdict, compare, load_run};
use holprobe::units::format_size;

const FACTORS: &[f64] = &[1.1, 1.2, 1.3, 1.5, 2.0, 3.0];

fn main() -> Result<()> {
    let mut rules = Rules::default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<f64> {
            let text = args
                .next()
                .with_context(|| format!("{name} needs a value"))?;
            text.parse()
                .with_context(|| format!("invalid value '{text}' for {name}"))
        };
        match arg.as_str() {
            "--alpha" => rules.alpha = value("--alpha")?,
            "--threshold" => rules.threshold = value("--threshold")?,
            "--min-diff-ms" => rules.min_diff_ms = value("--min-diff-ms")?,
            _ => dirs.push(PathBuf::from(arg)),
        }
    }
    if dirs.len() < 2 {
        bail!(
            "usage: compare_power [--alpha P] [--threshold R] [--min-diff-ms MS] RUN_DIR RUN_DIR... (two or more A/A runs)"
        );
    }
    let runs = dirs
        .iter()
        .map(|d| load_run("RUN_DIR", d).with_context(|| d.display().to_string()))
        .collect::<Result<Vec<_>>>()?;
    println!(
        "rules: threshold {}x, alpha {} (one-sided exact Mann-Whitney), min difference {} ms",
        rules.threshold, rules.alpha, rules.min_diff_ms
    );

    // 1. False alarms over consecutive A/A pairs.
    println!("\nA/A compares (run i vs run i+1): rows flagged");
    let mut pairs_with_alarm = 0;
    let mut cells = 0;
    let mut cell_alarms = 0;
    for pair in runs.windows(2) {
        let c = compare(&pair[0], &pair[1], rules)?;
        let flagged: Vec<String> = c
            .rows
            .iter()
            .filter(|r| r.verdict != Verdict::NoChange)
            .map(|r| {
                let which: Vec<&str> = [&r.hol_delay, &r.set]
                    .into_iter()
                    .filter(|m| m.verdict != Verdict::NoChange)
                    .map(|m| m.metric)
                    .collect();
                format!(
                    "{} {} {} ({})",
                    r.verdict.label(),
                    r.op,
                    format_size(r.size_bytes),
                    which.join("+")
                )
            })
            .collect();
        cells += c.rows.len() * 2;
        cell_alarms += c
            .rows
            .iter()
            .flat_map(|r| [&r.hol_delay, &r.set])
            .filter(|m| m.verdict == Verdict::Regression)
            .count();
        if c.regressions > 0 {
            pairs_with_alarm += 1;
        }
        println!(
            "  {} vs {}: {} regression(s), {} improvement(s){}",
            pair[0].meta.run_id,
            pair[1].meta.run_id,
            c.regressions,
            c.improvements,
            if flagged.is_empty() {
                String::new()
            } else {
                format!(": {}", flagged.join("; "))
            }
        );
    }
    println!(
        "false alarms: {pairs_with_alarm} of {} A/A compares flagged a regression ({cell_alarms} of {cells} metric cells)",
        runs.len() - 1
    );

    // 2. Power against synthetic proportional slowdowns.
    println!("\nshare of A/A pairs in which a slowdown by the factor was flagged (regression)");
    let mut header = format!("  {:>5}  {:<7} {:<13}", "size", "op", "metric");
    for f in FACTORS {
        header.push_str(&format!("  {:>5}", format!("x{f}")));
    }
    println!("{header}");
    let first = compare(&runs[0], &runs[1], rules)?;
    let pairs = runs.len() - 1;
    for row in &first.rows {
        for metric in ["hol_delay_ms", "set_ms"] {
            let mut line = format!(
                "  {:>5}  {:<7} {:<13}",
                format_size(row.size_bytes),
                row.op,
                metric
            );
            for &f in FACTORS {
                let mut caught = 0;
                for pair in runs.windows(2) {
                    let mut slower = pair[1].clone();
                    for w in &mut slower.writes {
                        w.hol_delay_ms = w.hol_delay_ms.map(|v| v * f);
                        w.set_ms *= f;
                    }
                    let c = compare(&pair[0], &slower, rules)?;
                    let hit = c.rows.iter().any(|r| {
                        r.size_bytes == row.size_bytes
                            && r.op == row.op
                            && [&r.hol_delay, &r.set]
                                .into_iter()
                                .any(|m| m.metric == metric && m.verdict == Verdict::Regression)
                    });
                    caught += usize::from(hit);
                }
                line.push_str(&format!(
                    "  {:>5}",
                    format!("{:.0}%", 100.0 * caught as f64 / pairs as f64)
                ));
            }
            println!("{line}");
        }
    }
    Ok(())
}
