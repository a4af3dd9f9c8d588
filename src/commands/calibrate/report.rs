//! `probe calibrate`'s text and Markdown reports.

use crate::calibrate::CalibrationRow;
use crate::output::format;
use crate::output::report;
use crate::run::RunOptions;

/// The text report: the claimed accuracy, a line per injection, per length, the footer.
pub(super) fn text_lines(
    report: &crate::run::RunReport,
    rows: &[CalibrationRow],
    lengths: &[crate::calibrate::LengthSummary],
    tolerance: f64,
    interval_us: f64,
    options: &RunOptions,
) -> Vec<String> {
    let mut lines = vec![
        format!(
            "claimed accuracy: +-{tolerance:.2} ms = one probe interval ({:.2} ms) + baseline p99 ({:.2} ms)",
            interval_us / 1e3,
            report.analysis.baseline.p99_us as f64 / 1e3
        ),
        format!(
            "{:>4}  {:>9}  {:>9} {:<9}  {:>9}  {:>8}  {:>11}  {:>8}  within",
            "seq", "requested", "injected", "(source)", "stall", "error", "worst delay", "error"
        ),
    ];
    lines.extend(rows.iter().map(row_line));
    lines.push("per length (median error over its injections):".to_string());
    for length in lengths {
        let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3}ms"));
        lines.push(format!(
            "  {:>7.1}ms  x{}  stall error {}  delay error {}  worst |error| {}  within {}/{}",
            length.requested_ms,
            length.injections,
            ms(length.stall_error_median_ms),
            ms(length.delay_error_median_ms),
            length
                .worst_abs_error_ms
                .map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}ms")),
            length.within,
            length.injections
        ));
    }
    let footer = report::FooterOptions {
        threshold_us: options.stall_threshold_us,
        show_stalls: 0,
        verbose: false,
    };
    lines.extend(report::closing_lines(
        &report.analysis,
        footer,
        report.stalls_found,
        report.stall_ms_total,
        report.hiccups_found,
    ));
    lines
}

/// The Markdown report: a row per injection, a row per length.
pub(super) fn markdown(
    rows: &[CalibrationRow],
    lengths: &[crate::calibrate::LengthSummary],
    tolerance: f64,
) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}"));
    let signed = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3}"));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.seq.to_string(),
                format!("{:.1}", row.requested_ms),
                format!("{:.3} ({})", row.injected_ms, row.injected_source),
                ms(row.stall_ms),
                signed(row.stall_error_ms),
                ms(row.worst_delay_ms),
                signed(row.delay_error_ms),
                if row.within { "yes" } else { "NO" }.to_string(),
            ]
        })
        .collect();
    let mut text = format!("**claimed accuracy**: +-{tolerance:.2} ms\n\n");
    text.push_str(&format::md_table(
        &[
            "seq",
            "requested (ms)",
            "injected (ms)",
            "stall (ms)",
            "error (ms)",
            "worst delay (ms)",
            "error (ms)",
            "within",
        ],
        &[true, true, true, true, true, true, true, false],
        &cells,
    ));
    text.push('\n');
    let cells: Vec<Vec<String>> = lengths
        .iter()
        .map(|l| {
            vec![
                format!("{:.1}", l.requested_ms),
                l.injections.to_string(),
                signed(l.stall_error_median_ms),
                signed(l.delay_error_median_ms),
                ms(l.worst_abs_error_ms),
                format!("{}/{}", l.within, l.injections),
            ]
        })
        .collect();
    text.push_str(&format::md_table(
        &[
            "length (ms)",
            "injections",
            "median stall error (ms)",
            "median delay error (ms)",
            "worst abs error (ms)",
            "within",
        ],
        &[true, true, true, true, true, true],
        &cells,
    ));
    text
}

fn row_line(row: &CalibrationRow) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}ms"));
    let err = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:+.3}ms"));
    let mut line = format!(
        "{:>4}  {:>7.1}ms  {:>9} {:<9}  {:>9}  {:>8}  {:>11}  {:>8}  {}",
        row.seq,
        row.requested_ms,
        format!("{:.3}ms", row.injected_ms),
        format!("({})", row.injected_source),
        ms(row.stall_ms),
        err(row.stall_error_ms),
        ms(row.worst_delay_ms),
        err(row.delay_error_ms),
        if row.within { "yes" } else { "NO" }
    );
    if let Some(error) = &row.error {
        line.push_str(&format!("  ({error})"));
    }
    line
}
