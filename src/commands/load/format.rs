//! `probe load --format json|markdown`: the load run's findings as one JSON document (load's
//! run.json, the same value: [`crate::output::export::LoadRunJson`]) or as Markdown tables.
//! Apart from the run so that load's own report stays as it is.

use crate::load::runner::LoadReport;
use crate::output::format::{self, Format};
use crate::output::report::{fmt_us, wall_ms};
use crate::units::format_size;

/// Prints the report in `format` when it is not text (text is load's own report); returns
/// whether it did.
pub fn print(
    format: Format,
    report: &LoadReport,
    out: &mut crate::commands::Output,
) -> anyhow::Result<bool> {
    let text = match format {
        Format::Text => return Ok(false),
        Format::Json => format::json(&report.run_json)?,
        Format::Markdown => markdown(report),
    };
    for line in text.trim_end().lines() {
        out.line(line);
    }
    Ok(true)
}

fn markdown(report: &LoadReport) -> String {
    let mut text = String::new();
    if !report.writes_under_load.is_empty() {
        let rows: Vec<Vec<String>> = report
            .writes_under_load
            .iter()
            .map(|w| {
                vec![
                    wall_ms(report.started_unix_us, w.start_us),
                    w.op.name().to_string(),
                    format_size(w.size_bytes),
                    w.worst_latency_us.map_or_else(|| "n/a".into(), fmt_us),
                    format!("{:.1}", w.set_ms),
                    format!("{} of {}", w.delayed_requests, w.requests_in_window),
                    w.throughput_lost_pct
                        .map_or_else(|| "n/a".into(), |p| format!("{p:.1}")),
                    if w.ok { "" } else { "FAILED" }.to_string(),
                ]
            })
            .collect();
        text.push_str(&format::md_table(
            &[
                "time (UTC)",
                "op",
                "size",
                "load worst",
                "own time (ms)",
                "delayed requests",
                "throughput lost (%)",
                "note",
            ],
            &[false, false, true, true, true, true, true, false],
            &rows,
        ));
        text.push('\n');
    }
    let rows: Vec<Vec<String>> = report
        .blocks
        .iter()
        .map(|b| {
            vec![
                b.server.clone(),
                b.clients.to_string(),
                b.total_requests.to_string(),
                format!("{:.0}", b.avg_rps),
                format!("{:.2}", b.mb_per_s),
                fmt_us(b.p50_us),
                fmt_us(b.p99_us),
                fmt_us(b.p999_us),
                fmt_us(b.max_us),
                b.errors.to_string(),
            ]
        })
        .collect();
    text.push_str(&format::md_table(
        &[
            "server", "clients", "requests", "req/s", "MiB/s", "p50", "p99", "p99.9", "max",
            "errors",
        ],
        &[false, true, true, true, true, true, true, true, true, true],
        &rows,
    ));
    text.push_str(&format!("\n**generator**: {}\n", report.generator.verdict));
    text
}
