//! The cost model's prediction error on sizes it was not fitted on, from recorded collection
//! runs (data/collections): for each server × type × encoding × op × freeing thread, each size
//! measured is left out in turn, the rest fitted as `probe keys` fits its models, and the
//! left-out size predicted (`src/keys/holdout.rs`). Prints one line per entry (|error| in ms and
//! %) and the median per server, against the floor of issue 21 (median ≤ 20%, none worse than
//! max(3 ms, 40%)).
//!
//! ```sh
//! cargo run --release --example holdout -- data/collections
//! cargo run --release --example holdout -- data/collections/redis-7.0 /tmp/set-4M
//! cargo run --release --example holdout -- data/collections --test data/heldout
//! cargo run --release --example holdout -- data/collections data/heldout   # the shipped models' six sizes
//! ```
//!
//! With `--test DIR...`, the runs under the directories before it are fitted whole, and the
//! sizes of the runs under the ones after it (measured for the purpose, none in the fit) are
//! predicted: the error a scanned key of a size between (or beside) the fitted ones sees. Each
//! server then gets the host's pace per type (the runs' `baseline.p50_us`, the tested over the
//! fitted) and its removals priced at that pace: a correction tried on 2026-12-06 and not
//! confirmed on a sitting recorded after it was chosen (data/README.md, data/unseen-2), so
//! `probe keys` does not use it.
//!
//! Every directory under the ones given that holds a run.json and a summary.csv is a run; runs of
//! the same server (flavor and version) are fitted together, whatever directory they are in, so
//! a run of a new size can be put anywhere. With two sizes measured, each prediction rests on the
//! other size alone, and the output says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use holprobe::commands::keys::refit::tool_rows_of_run;
use holprobe::keys::fit::FitRow;
use holprobe::keys::holdout::{
    FLOOR_MEDIAN_PCT, FLOOR_WORST_MS, FLOOR_WORST_PCT, HeldOut, HeldOutSummary, held_out,
    is_removal, measured_over_predicted_clause, pace_of, summarize, tested_on, tested_on_paced,
};
use holprobe::keys::model::ModelOp;
use holprobe::output::export::REPLACED_DIR;

/// Every run directory under `dir` (itself included), sorted.
fn runs_under(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    // A run's directory can hold more runs (data/collections/<server>/<type>/4M/).
    if dir.join("run.json").is_file() && dir.join("summary.csv").is_file() {
        found.push(dir.to_path_buf());
    }
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        // The run a --force moved aside is not one of the recording's.
        .filter(|p| p.is_dir() && !p.ends_with(REPLACED_DIR))
        .collect();
    children.sort();
    for child in children {
        runs_under(&child, found)?;
    }
    Ok(())
}

fn pct(p: Option<f64>) -> String {
    p.map_or("-".into(), |p| format!("{p:.0}%"))
}

fn summary_line(label: &str, s: &HeldOutSummary) -> String {
    let median_ok = s.median_pct.map(|m| m <= FLOOR_MEDIAN_PCT);
    format!(
        "{label}: {} entries ({} of at least 1 ms), median |error| {} (floor {FLOOR_MEDIAN_PCT:.0}%: {}){}, worst {} / {:.1} ms, {} worse than max({FLOOR_WORST_MS:.0} ms, {FLOOR_WORST_PCT:.0}%){}",
        s.entries,
        s.relative,
        pct(s.median_pct),
        match median_ok {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "-",
        },
        measured_over_predicted_clause(s.median_measured_over_predicted),
        pct(s.worst_pct),
        s.worst_ms,
        s.past_floor,
        if s.from_one_size > 0 {
            format!(
                "; {} of the {} fits rest on ONE size only",
                s.from_one_size, s.entries
            )
        } else {
            String::new()
        }
    )
}

/// One server's fit rows and the runs they came from, by server (flavor and version).
type ByServer = BTreeMap<String, (Vec<FitRow>, Vec<String>)>;

/// The fit rows of every run under `dirs`, by server, with the runs read.
fn rows_by_server(dirs: &[PathBuf]) -> Result<ByServer> {
    let mut runs = Vec::new();
    for dir in dirs {
        runs_under(dir, &mut runs)?;
    }
    if runs.is_empty() {
        bail!("no run (a directory with run.json and summary.csv) under the directories given");
    }
    let mut by_server: ByServer = BTreeMap::new();
    for dir in &runs {
        let (meta, rows) =
            tool_rows_of_run(dir).with_context(|| format!("reading {}", dir.display()))?;
        let entry = by_server
            .entry(format!("{} {}", meta.server_flavor, meta.server_version))
            .or_default();
        entry.0.extend(rows);
        entry.1.push(dir.display().to_string());
    }
    Ok(by_server)
}

/// `pace (PING p50 of the tested runs / the fit's, µs): hash 35/23 (1.52x), ...`: the host's pace
/// in each type's runs, by which the paced summary multiplies the fit's predictions.
fn pace_line(train: &[FitRow], test: &[FitRow]) -> String {
    let mut kinds: Vec<&str> = test.iter().map(|r| r.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let parts: Vec<String> = kinds
        .iter()
        .map(|kind| match (pace_of(test, kind), pace_of(train, kind)) {
            (Some(now), Some(then)) => {
                format!("{kind} {now:.0}/{then:.0} ({:.2}x)", now / then)
            }
            _ => format!("{kind} ?"),
        })
        .collect();
    format!(
        "pace (PING p50 outside the writes, the tested runs' / the fit's, µs): {}",
        parts.join(", ")
    )
}

fn main() -> Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let (dirs, test_dirs) = match args.iter().position(|a| a.as_os_str() == "--test") {
        Some(at) => (args[..at].to_vec(), Some(args[at + 1..].to_vec())),
        None => (args, None),
    };
    if dirs.is_empty() || test_dirs.as_ref().is_some_and(Vec::is_empty) {
        bail!("usage: holdout DIR... [--test DIR...] (e.g. data/collections --test data/heldout)");
    }
    let by_server = rows_by_server(&dirs)?;
    let tests = test_dirs.as_deref().map(rows_by_server).transpose()?;
    let mut all: Vec<HeldOut> = Vec::new();
    let mut all_paced: Vec<HeldOut> = Vec::new();
    for (server, (rows, dirs)) in &by_server {
        println!("== {server}: {} rows from {}", rows.len(), dirs.join(", "));
        let (entries, single) = match &tests {
            None => held_out(rows),
            Some(tests) => match tests.get(server) {
                Some((test_rows, test_dirs)) => {
                    println!("   predicting the sizes of {}", test_dirs.join(", "));
                    (tested_on(rows, test_rows), Vec::new())
                }
                None => {
                    println!("   no test run of this server");
                    continue;
                }
            },
        };
        println!(
            "{:<6} {:<10} {:<9} {:<10} {:>9} {:>6} {:>7} {:>10} {:>19} {:>10} {:>9} {:>6}",
            "type",
            "encoding",
            "op",
            "freed by",
            "size",
            "sizes",
            "repeats",
            "measured",
            "(min..max)",
            "predicted",
            "|err| ms",
            "|err|"
        );
        for e in &entries {
            println!(
                "{:<6} {:<10} {:<9} {:<10} {:>9} {:>6} {:>7} {:>10.2} {:>19} {:>10.2} {:>9.2} {:>6}{}",
                e.kind,
                e.encoding,
                e.op.name(),
                e.freed_by.map_or("-", |t| t.name()),
                e.elements,
                e.sizes_fitted,
                e.repeats,
                e.measured_ms,
                format!("({:.1}..{:.1})", e.measured_min_ms, e.measured_max_ms),
                e.predicted_ms,
                e.error_ms,
                pct(e.error_pct),
                if e.under_one_interval {
                    "  (under one probe interval)"
                } else if e.past_floor() {
                    "  PAST FLOOR"
                } else {
                    ""
                }
            );
        }
        for s in &single {
            println!(
                "{}: one size only ({} elements, {} rows): nothing to hold out",
                s.group, s.elements, s.rows
            );
        }
        println!("{}", summary_line(server, &summarize(&entries)));
        let removals = entries.iter().filter(|e| is_removal(e.op));
        println!(
            "{}",
            summary_line(&format!("{server} DEL/UNLINK/expiry"), &summarize(removals))
        );
        let evictions = entries.iter().filter(|e| e.op == ModelOp::Evict);
        if entries.iter().any(|e| e.op == ModelOp::Evict) {
            println!(
                "{}",
                summary_line(&format!("{server} eviction"), &summarize(evictions))
            );
        }
        if let Some((test_rows, _)) = tests.as_ref().and_then(|t| t.get(server)) {
            let paced: Vec<HeldOut> = tested_on_paced(rows, test_rows)
                .into_iter()
                .filter(|e| is_removal(e.op))
                .collect();
            println!("{}", pace_line(rows, test_rows));
            println!(
                "{}",
                summary_line(
                    &format!("{server} DEL/UNLINK/expiry, priced at the tested runs' pace"),
                    &summarize(&paced)
                )
            );
            all_paced.extend(paced);
        }
        println!();
        all.extend(entries);
    }
    println!("{}", summary_line("all servers", &summarize(&all)));
    let removals = all.iter().filter(|e| is_removal(e.op));
    println!(
        "{}",
        summary_line("all servers DEL/UNLINK/expiry", &summarize(removals))
    );
    if !all_paced.is_empty() {
        println!(
            "{}",
            summary_line(
                "all servers DEL/UNLINK/expiry, priced at the tested runs' pace",
                &summarize(&all_paced)
            )
        );
    }
    if all.iter().any(|e| e.op == ModelOp::Evict) {
        let evictions = all.iter().filter(|e| e.op == ModelOp::Evict);
        println!(
            "{}",
            summary_line("all servers eviction", &summarize(evictions))
        );
    }
    Ok(())
}
