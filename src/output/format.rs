//! `--format text|json|markdown` of the measuring commands (the main job, observe mode,
//! calibrate, load), in the manner of `probe compare --format`: text is the terminal report
//! ([`crate::output::report`]), JSON one document on stdout with run.json's findings (the very
//! [`RunJson`] the run writes there), Markdown the per-write table and the footer for a CI
//! comment or an issue. Pure formatting: the caller prints.

use std::fmt::Write as _;

use serde::Serialize;

use crate::output::export::RunJson;
use crate::output::report::{fmt_us, stall_line_short, wall_ms};
use crate::record::WriteRecord;

/// What a measuring command prints on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text for the terminal: a line per write, then a short footer.
    #[default]
    #[value(alias = "table")]
    Text,
    /// One JSON document at the end: run.json's findings (notes and progress go to stderr).
    Json,
    /// GitHub-flavoured Markdown: the per-write table and the footer.
    Markdown,
}

impl Format {
    /// True for text: lines are printed as the run goes. JSON and Markdown print one block
    /// at the end.
    pub fn is_text(self) -> bool {
        self == Format::Text
    }
}

/// `value` as one pretty-printed JSON document, ending with a newline.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

fn md_row(cells: &[String]) -> String {
    format!("| {} |", cells.join(" | "))
}

/// A Markdown table: a header row, its alignment row (`right` per column), the rows.
pub fn md_table(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let mut text = md_row(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    text.push('\n');
    let align: Vec<String> = right
        .iter()
        .map(|&r| if r { "---:".into() } else { "---".into() })
        .collect();
    text.push_str(&md_row(&align));
    text.push('\n');
    for row in rows {
        // A `|` inside a cell (an error message) would split it.
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        text.push_str(&md_row(&cells));
        text.push('\n');
    }
    text
}

/// The header of the per-write Markdown table.
pub const WRITES_HEADER: [&str; 9] = [
    "time (UTC)",
    "write",
    "op",
    "size",
    "others blocked (ms)",
    "own time (ms)",
    "stalled (ms)",
    "delayed probes",
    "note",
];

/// The main job's (or observe mode's) findings as Markdown: the server and status, a row per
/// write, the other nodes, then the footer (baseline, stalls and the `show_stalls` longest).
/// `records` give each write's start and error (run.json's summary has neither).
pub fn run_markdown(run: &RunJson, records: &[WriteRecord], show_stalls: usize) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "**holprobe {}**: {} {} ({}), run `{}`, {}\n",
        run.tool.version,
        run.server.flavor,
        run.server.version,
        run.server.address,
        run.run_id,
        run.status.name()
    );
    let analysis = &run.analysis;
    if !analysis.writes.is_empty() {
        let rows: Vec<Vec<String>> = analysis
            .writes
            .iter()
            .map(|w| {
                let record = records.iter().find(|r| r.seq == w.seq);
                // A collection's size is its elements, and its note what it was (the
                // hostile trial's Markdown read `625K` for 20k fields, with no type).
                let mut note: Vec<String> = crate::output::report::collection_note(w)
                    .into_iter()
                    .collect();
                if w.memory_pressure {
                    note.push(format!(
                        "memory pressure (host peak {:.1}%, swap {:.1}%)",
                        w.host_mem_peak_pct, w.host_swap_pct
                    ));
                }
                if !w.ok {
                    note.push(format!(
                        "FAILED: {}",
                        record
                            .and_then(|r| r.error.as_deref())
                            .unwrap_or("unknown error")
                    ));
                }
                vec![
                    record.map_or_else(String::new, |r| wall_ms(run.started_unix_us, r.start_us)),
                    w.seq.to_string(),
                    w.op.name().to_string(),
                    crate::output::report::size_cell(w),
                    w.hol_delay_ms
                        .map_or_else(|| "n/a".into(), |ms| format!("{ms:.1}")),
                    format!("{:.1}", w.set_ms),
                    format!("{:.1}", w.stall_ms),
                    w.probes_delayed.to_string(),
                    note.join("; "),
                ]
            })
            .collect();
        text.push_str(&md_table(
            &WRITES_HEADER,
            &[false, true, false, true, true, true, true, true, false],
            &rows,
        ));
        text.push('\n');
    }
    if !run.nodes.is_empty() {
        let rows: Vec<Vec<String>> = run
            .nodes
            .iter()
            .map(|n| {
                let worst = n
                    .summary
                    .iter()
                    .filter_map(|w| w.hol_delay_ms)
                    .fold(None, |acc: Option<f64>, ms| {
                        Some(acc.map_or(ms, |a| a.max(ms)))
                    });
                vec![
                    n.node.node.clone(),
                    n.node.role.name().to_string(),
                    n.node.shard.map_or_else(String::new, |s| s.to_string()),
                    if n.same_shard { "yes" } else { "no" }.to_string(),
                    worst.map_or_else(|| "n/a".into(), |ms| format!("{ms:.1}")),
                    fmt_us(n.baseline.p50_us),
                    fmt_us(n.baseline.p99_us),
                    n.stalls_found.to_string(),
                    format!("{:.1}", n.stall_ms_total),
                ]
            })
            .collect();
        text.push_str(&md_table(
            &[
                "other node",
                "role",
                "shard",
                "same shard",
                "worst others blocked (ms)",
                "baseline p50",
                "baseline p99",
                "stalls",
                "stalled (ms)",
            ],
            &[false, false, true, false, true, true, true, true, true],
            &rows,
        ));
        text.push('\n');
    }
    let b = &analysis.baseline;
    let stalls_found = run.stalls_found.unwrap_or(analysis.stalls.len() as u64);
    let stall_ms_total = run
        .stall_ms_total
        .unwrap_or_else(|| analysis.stalls.iter().map(|s| s.duration_ms).sum());
    let longest = analysis
        .stalls
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0_f64, f64::max);
    let mut footer = vec![
        vec![
            "baseline".to_string(),
            format!(
                "p50 {}, p99 {}, max {} ({} probes outside writes, {} errors)",
                fmt_us(b.p50_us),
                fmt_us(b.p99_us),
                fmt_us(b.max_us),
                b.probes,
                b.probe_errors
            ),
        ],
        vec![
            "probe send lag".to_string(),
            format!(
                "p50 {}, p99 {}, max {}",
                fmt_us(b.send_lag_p50_us),
                fmt_us(b.send_lag_p99_us),
                fmt_us(b.send_lag_max_us)
            ),
        ],
        vec![
            format!("stalls over {}", fmt_us(run.options.stall_threshold_us)),
            format!("{stalls_found}, {stall_ms_total:.1} ms in all, longest {longest:.1} ms"),
        ],
    ];
    let mut stalls: Vec<_> = analysis.stalls.iter().collect();
    stalls.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    for stall in stalls.iter().take(show_stalls) {
        footer.push(vec![
            "stall".to_string(),
            format!("`{}`", stall_line_short(stall, &analysis.writes)),
        ]);
    }
    if let Some(found) = run.client_hiccups_found.filter(|&n| n > 0) {
        let worst = analysis
            .client_hiccups
            .iter()
            .map(|s| s.duration_ms)
            .fold(0.0_f64, f64::max);
        footer.push(vec![
            "client hiccups".to_string(),
            format!("{found}, longest {worst:.1} ms (the probes themselves were late)"),
        ]);
    }
    text.push_str(&md_table(&["", "value"], &[false, false], &footer));
    // The closing notes, one item each (a line indented by two spaces goes on the one before).
    let mut notes: Vec<String> = Vec::new();
    for line in &run.notes {
        match (line.strip_prefix("  "), notes.last_mut()) {
            (Some(rest), Some(last)) => {
                last.push(' ');
                last.push_str(rest.trim_start());
            }
            _ => notes.push(line.clone()),
        }
    }
    if !notes.is_empty() {
        text.push('\n');
        for note in notes {
            let _ = writeln!(text, "- {note}");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::export::sample;

    #[test]
    fn markdown_has_a_row_per_write_and_the_footer() {
        let run = sample::run_json();
        let records = sample::write_records(&run);
        let text = run_markdown(&run, &records, 5);
        assert!(
            text.contains("| time (UTC) | write | op | size | others blocked (ms) |"),
            "{text}"
        );
        let rows = text
            .lines()
            .filter(|l| l.starts_with("| ") && l.as_bytes()[2].is_ascii_digit())
            .count();
        assert_eq!(rows, run.analysis.writes.len(), "{text}");
        assert!(text.contains("FAILED: OOM command not allowed"), "{text}");
        assert!(text.contains("| baseline | p50 31us, p99 250us"), "{text}");
        assert!(text.contains("| stall | `10:00:01.500"), "{text}");
        // The closing notes, as the terminal prints them, one item each (the hostile trial
        // found them in the text output only).
        assert!(
            text.contains("\n- 128M string set kept the server's main thread busy 110.1ms in its window, others 5.1ms at most at once (net of its quiet pace): its work came in pieces (1 of 3 writes so)\n"),
            "{text}"
        );
    }

    #[test]
    fn json_is_run_json() {
        let run = sample::run_json();
        let text = json(&run).unwrap();
        let back: RunJson = serde_json::from_str(&text).unwrap();
        assert_eq!(back.analysis, run.analysis);
        assert_eq!(back.notes, run.notes);
        assert!(!back.notes.is_empty());
    }
}
