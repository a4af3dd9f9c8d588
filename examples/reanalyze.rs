//! Analyses a recorded run again from its raw timelines, through holprobe's library: reads an
//! `--out` directory's probes.csv and writes.csv, feeds them to the correlator, and rewrites
//! what derives from them: stalls.csv, summary.csv, timeline.csv, probes.hlog and the findings
//! in run.json (with `options.stall_threshold_us` when `--stall-threshold` is given, so every
//! reader sees the threshold the files are at). The raw files are not touched.
//!
//! Use it after a change to the correlator (the shipped runs in data/ were brought up to date
//! with it), or to look at a run with another `--stall-threshold`.
//!
//! ```sh
//! cargo run --release --example reanalyze -- data/redis-7.0
//! cargo run --release --example reanalyze -- /tmp/run --stall-threshold 2ms
//! ```
//!
//! Limits: host memory samples are not exported, so the memory-pressure columns of summary.csv
//! (`memory_pressure`, `host_mem_peak_pct`, `host_swap_grew_bytes`) are kept as recorded; the
//! stalls' `server_*` columns are kept where a recorded stall has the same start and end, empty
//! otherwise (the server's logs cannot be read again); a run whose probes.csv holds only the
//! delayed probes (`--probes delayed`) cannot be reanalysed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Parser;
use holprobe::analyze::correlate::{
    Analysis, CorrelateConfig, Correlator, Finding, Stall, WriteSummary,
};
use holprobe::measure::clock::wall_time;
use holprobe::output::export::{
    PROBES_HLOG, RUN_JSON, STALLS_CSV, SUMMARY_CSV, TIMELINE_CSV, TimelineRow, columns, csv_bytes,
    write_atomic,
};
use holprobe::output::hlog::HlogWriter;
use holprobe::record::{NodeCols, ProbeRecord, SameShard, WriteRecord};
use holprobe::units::parse_duration;

/// Analyse a recorded run again from its probes.csv and writes.csv.
#[derive(Parser)]
struct Args {
    /// The run's --out directory.
    dir: PathBuf,
    /// Stall threshold [default: the run's own].
    #[arg(long, value_name = "DURATION")]
    stall_threshold: Option<String>,
    /// Length of one timeline.csv row.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    interval: String,
}

fn main() {
    if let Err(err) = run(&Args::parse()) {
        eprintln!("reanalyze: {err:#}");
        std::process::exit(1);
    }
}

fn rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    csv::Reader::from_path(path)
        .with_context(|| format!("reading {}", path.display()))?
        .deserialize()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", path.display()))
}

fn run(args: &Args) -> Result<()> {
    let dir = &args.dir;
    let mut run_json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join(RUN_JSON)).with_context(|| format!("reading {RUN_JSON}"))?,
    )
    .with_context(|| format!("parsing {RUN_JSON}"))?;
    if run_json["options"]["probes"]
        .as_str()
        .is_some_and(|mode| mode != "all")
    {
        bail!(
            "probes.csv of this run does not hold every probe (--probes all): it cannot be reanalysed"
        );
    }
    let threshold_us = match &args.stall_threshold {
        Some(text) => parse_duration("--stall-threshold", text)?.as_micros() as u64,
        None => run_json["options"]["stall_threshold_us"]
            .as_u64()
            .context("run.json has no options.stall_threshold_us")?,
    };
    let interval_us = parse_duration("--interval", &args.interval)?.as_micros() as u64;
    let started_unix_us = run_json["started_unix_us"]
        .as_u64()
        .context("run.json has no started_unix_us")?;
    let target = run_json["server"]["address"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let probes: Vec<ProbeRecord> = rows(&dir.join("probes.csv"))?;
    let writes: Vec<WriteRecord> = rows(&dir.join("writes.csv"))?;
    let recorded_summary: Vec<HashMap<String, String>> = rows(&dir.join(SUMMARY_CSV))?;
    let recorded_stalls: Vec<HashMap<String, String>> = rows(&dir.join(STALLS_CSV))?;

    let node = NodeCols {
        node: target.clone(),
        ..NodeCols::default()
    };
    let mut correlator =
        Correlator::new(CorrelateConfig::with_threshold(threshold_us)).with_intervals(interval_us);
    correlator.memory_ended();
    for write in &writes {
        correlator.write(write.clone());
    }
    correlator.feed_recorded(&probes);
    correlator.finish();

    let mut analysis = Analysis {
        baseline: correlator.baseline(),
        ..Analysis::default()
    };
    let mut hlog = HlogWriter::create(&dir.join(PROBES_HLOG), started_unix_us)?;
    let mut intervals = Vec::new();
    for finding in correlator.drain() {
        match finding {
            Finding::Interval(interval) => {
                hlog.append(
                    interval.start_us,
                    interval.length_us,
                    &interval.latency,
                    None,
                )?;
                intervals.push(interval);
            }
            other => analysis.push(other),
        }
    }
    for stall in analysis
        .stalls
        .iter_mut()
        .chain(analysis.client_hiccups.iter_mut())
    {
        stall.wall_start = Some(wall_time(started_unix_us + stall.start_us));
        keep_culprit(stall, &recorded_stalls);
    }
    for summary in &mut analysis.writes {
        keep_memory_columns(summary, &recorded_summary);
    }
    analysis.summarize_writes();

    write_atomic(
        &dir.join(STALLS_CSV),
        &csv_bytes(
            &analysis
                .stalls
                .iter()
                .map(|s| (s, &node))
                .collect::<Vec<_>>(),
            columns::STALLS,
        )?,
    )?;
    write_atomic(
        &dir.join(SUMMARY_CSV),
        &csv_bytes(
            &analysis
                .writes
                .iter()
                .map(|w| (w, &node, &SameShard { same_shard: true }))
                .collect::<Vec<_>>(),
            columns::SUMMARY,
        )?,
    )?;
    write_atomic(
        &dir.join(TIMELINE_CSV),
        &csv_bytes(
            &intervals
                .iter()
                .map(|interval| TimelineRow::new(interval, &node, started_unix_us))
                .collect::<Vec<_>>(),
            columns::TIMELINE,
        )?,
    )?;
    let findings = serde_json::to_value(&analysis)?;
    let object = run_json
        .as_object_mut()
        .context("run.json is not an object")?;
    for (key, value) in findings.as_object().context("findings")? {
        object.insert(key.clone(), value.clone());
    }
    // The threshold the files are now at: timeline.py, nodes.py and probe compare read it here
    // (they said 1 ms of a run reanalysed at 2).
    if let Some(options) = object.get_mut("options").and_then(|o| o.as_object_mut()) {
        options.insert("stall_threshold_us".into(), threshold_us.into());
    }
    object.insert(
        "analysis_version".into(),
        holprobe::analyze::correlate::ANALYSIS_VERSION.into(),
    );
    object.insert("stalls_found".into(), analysis.stalls.len().into());
    let total: f64 = analysis.stalls.iter().map(|s| s.duration_ms).sum();
    object.insert("stall_ms_total".into(), total.into());
    object.insert(
        "client_hiccups_found".into(),
        analysis.client_hiccups.len().into(),
    );
    write_atomic(
        &dir.join(RUN_JSON),
        &serde_json::to_vec_pretty(&run_json).context("encoding run.json")?,
    )?;
    println!(
        "{}: {} probes, {} writes: {} stalls, {} client hiccups, baseline p50 {} us; rewrote {STALLS_CSV}, {SUMMARY_CSV}, {TIMELINE_CSV} ({} rows), {PROBES_HLOG} and the findings in {RUN_JSON}",
        dir.display(),
        probes.len(),
        writes.len(),
        analysis.stalls.len(),
        analysis.client_hiccups.len(),
        analysis.baseline.p50_us,
        intervals.len()
    );
    Ok(())
}

/// The recorded culprit of a stall with the same start and end, if there was one.
fn keep_culprit(stall: &mut Stall, recorded: &[HashMap<String, String>]) {
    let same = recorded.iter().find(|r| {
        r.get("start_us") == Some(&stall.start_us.to_string())
            && r.get("end_us") == Some(&stall.end_us.to_string())
    });
    let field = |row: &HashMap<String, String>, name: &str| {
        row.get(name).filter(|v| !v.is_empty()).cloned()
    };
    if let Some(row) = same {
        stall.server_command = field(row, "server_command");
        stall.server_client = field(row, "server_client");
        stall.server_event = field(row, "server_event");
    }
}

/// The memory-pressure columns as recorded (the samples behind them are not exported).
fn keep_memory_columns(summary: &mut WriteSummary, recorded: &[HashMap<String, String>]) {
    let Some(row) = recorded
        .iter()
        .find(|r| r.get("seq") == Some(&summary.seq.to_string()))
    else {
        return;
    };
    if let Some(flag) = row.get("memory_pressure").and_then(|v| v.parse().ok()) {
        summary.memory_pressure = flag;
    }
    if let Some(peak) = row.get("host_mem_peak_pct").and_then(|v| v.parse().ok()) {
        summary.host_mem_peak_pct = peak;
    }
    if let Some(grew) = row.get("host_swap_grew_bytes").and_then(|v| v.parse().ok()) {
        summary.host_swap_grew_bytes = grew;
    }
}
