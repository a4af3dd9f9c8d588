//! The compare's output: a plain-text table (default), a Markdown table (for CI comments) and
//! JSON (for bots), all from the same [`CompareReport`].

use std::fmt::Write as _;

use super::{CompareReport, Comparison, MetricComparison, SideBySide, Spread, Verdict};

/// Output formats of `probe compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned plain text (`text` also names it, as in the measuring commands' `--format`).
    #[value(alias = "text")]
    Table,
    /// GitHub-flavoured Markdown.
    Markdown,
    /// The report as JSON.
    Json,
}

/// The whole report in `format`.
pub fn render(report: &CompareReport, format: Format) -> String {
    match format {
        Format::Table => table(report),
        Format::Markdown => markdown(report),
        Format::Json => match serde_json::to_string_pretty(report) {
            Ok(text) => text + "\n",
            // Only non-finite floats could fail, and every value was checked finite on load.
            Err(err) => format!("{{\"error\": \"{err}\"}}\n"),
        },
    }
}

/// A value in ms with precision that fits its size.
pub fn fmt_ms(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude < 10.0 {
        format!("{value:.2}")
    } else if magnitude < 1000.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

/// `median [min–max]`, or `-` when there is no value; a figure of a censored spread at its
/// censoring point reads `<0.50` (under one probe interval).
pub fn fmt_spread(spread: Option<Spread>) -> String {
    let Some(s) = spread else {
        return "-".into();
    };
    let show = |v: f64| match s.censored_at_ms {
        Some(at) if v <= at => format!("<{}", fmt_ms(at)),
        _ => fmt_ms(v),
    };
    let all_under = s.censored_at_ms.is_some_and(|at| s.max <= at);
    if s.n == 1 || all_under {
        show(s.median)
    } else {
        format!("{} [{}-{}]", show(s.median), show(s.min), show(s.max))
    }
}

/// The ratio's estimate and its two one-sided bounds: `1.31x [1.05-1.62]`; the ratio of the
/// medians when there is no interval.
fn fmt_ratio(m: &MetricComparison) -> String {
    match m.ratio_ci {
        Some(ci) => match (ci.low, ci.high) {
            (Some(low), Some(high)) => format!("{:.2}x [{low:.2}-{high:.2}]", ci.estimate),
            _ => format!("{:.2}x", ci.estimate),
        },
        None => m.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}x")),
    }
}

fn fmt_p(m: &MetricComparison) -> String {
    m.p_in_direction()
        .map_or_else(|| "-".into(), |p| format!("{p:.3}"))
}

fn run_line(role: &str, meta: &super::RunMeta) -> String {
    // As the rows hold them, not as run.json planned them.
    let repeats = meta.repeats_read.describe().map_or(String::new(), |n| {
        let unit = if n == "1" { "repeat" } else { "repeats" };
        format!(", {n} {unit}")
    });
    format!(
        "{role}: {} ({}{repeats}, probe engine {}, run {})",
        meta.server_label(),
        meta.dir.display(),
        meta.probe_engine_version,
        meta.run_id
    )
}

fn rule_line(c: &Comparison) -> String {
    let r = &c.rules;
    format!(
        "rule: a regression needs the {} lower bounds of the slowdown past {}x and {} ms (hol_delay_ms: at least one probe interval; a write no probe overlapped counts as under one); inconclusive when only the {} ones are; ratio: Hodges-Lehmann estimate [{} bounds]",
        r.confidence_label(),
        r.threshold,
        r.min_diff_ms,
        r.possible_label(),
        r.confidence_label()
    )
}

pub(super) fn summary_line(c: &Comparison) -> String {
    let verdict = match c.verdict {
        Verdict::Regression => "REGRESSION",
        Verdict::Inconclusive => "INCONCLUSIVE",
        Verdict::Improvement => "improvement, no regression",
        Verdict::NoChange | Verdict::NotComparable => "no regression",
    };
    let not_judged = if c.not_comparable_metrics.is_empty() {
        String::new()
    } else {
        format!(
            "; {} not judged: different probe engines (record the baseline again)",
            c.not_comparable_metrics.join(", ")
        )
    };
    let inconclusive = if c.inconclusive > 0 {
        format!("{} inconclusive, ", c.inconclusive)
    } else {
        String::new()
    };
    let mut lost = String::new();
    if !c.candidate_failed.is_empty() {
        lost.push_str(&format!(
            "; every write failed in the candidate: {}",
            c.candidate_failed.join("; ")
        ));
    }
    if !c.candidate_unmeasured.is_empty() {
        lost.push_str(&format!(
            "; not reached by the candidate (its run is {}): {}",
            c.candidate.status,
            c.candidate_unmeasured.join("; ")
        ));
    }
    let advice = match (c.verdict, c.repeats_needed) {
        (Verdict::Inconclusive, _) if c.inconclusive == 0 => String::new(),
        (Verdict::Inconclusive, Some(n)) => format!(
            "; a possible regression the data cannot tell: record both runs with --repeat {n} (or more) to decide"
        ),
        (Verdict::Inconclusive, None) => {
            "; a possible regression the data cannot tell, and more repeats would hardly settle it"
                .to_string()
        }
        _ => String::new(),
    };
    format!(
        "verdict: {verdict} ({} regressed, {} improved, {inconclusive}{} no regression of {} size/op rows{not_judged}){lost}{advice}",
        c.regressions,
        c.improvements,
        c.rows.len() - c.regressions - c.improvements - c.inconclusive,
        c.rows.len()
    )
}

/// Rows of cells padded into aligned columns (right-aligned where `right[i]`).
fn align(rows: &[Vec<String>], right: &[bool]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    if right.get(i).copied().unwrap_or(false) {
                        format!("{}{cell}", " ".repeat(pad))
                    } else {
                        format!("{cell}{}", " ".repeat(pad))
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

fn comparison_cells(c: &Comparison) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "size".to_string(),
        "op".into(),
        "metric".into(),
        "baseline ms".into(),
        "candidate ms".into(),
        "ratio [CI]".into(),
        "p".into(),
        "verdict".into(),
    ]];
    for row in &c.rows {
        for (i, m) in [&row.hol_delay, &row.set].into_iter().enumerate() {
            rows.push(vec![
                if i == 0 {
                    super::size_label(row.size_bytes, &row.value)
                } else {
                    String::new()
                },
                if i == 0 {
                    row.op.clone()
                } else {
                    String::new()
                },
                m.metric.to_string(),
                fmt_spread(m.baseline_ms),
                fmt_spread(m.candidate_ms),
                fmt_ratio(m),
                fmt_p(m),
                match m.verdict {
                    Verdict::NoChange => format!("no regression ({})", m.reason),
                    Verdict::NotComparable => format!("not comparable ({})", m.reason),
                    other => format!("{} ({})", other.label().to_uppercase(), m.reason),
                },
            ]);
        }
    }
    rows
}

fn side_by_side_cells(s: &SideBySide, hol: bool) -> Vec<Vec<String>> {
    let mut header = vec!["size".to_string(), "op".into()];
    // Columns of different probe engines say so: their hol_delay_ms are not comparable.
    let engines_differ = s
        .runs
        .windows(2)
        .any(|w| w[0].probe_engine_version != w[1].probe_engine_version);
    // Runs of one server version are told apart by their directory's name.
    let labels: Vec<String> = s.runs.iter().map(|r| r.server_label()).collect();
    header.extend(s.runs.iter().zip(&labels).map(|(r, label)| {
        let mut label = label.clone();
        if labels.iter().filter(|l| **l == label).count() > 1 {
            let name = r.dir.file_name().unwrap_or(r.dir.as_os_str());
            label = format!("{label} ({})", name.to_string_lossy());
        }
        if engines_differ {
            label = format!("{label} (engine {})", r.probe_engine_version);
        }
        label
    }));
    let mut rows = vec![header];
    for row in &s.rows {
        let mut cells = vec![
            super::size_label(row.size_bytes, &row.value),
            row.op.clone(),
        ];
        let values = if hol { &row.hol_delay_ms } else { &row.set_ms };
        cells.extend(values.iter().map(|v| fmt_spread(*v)));
        rows.push(cells);
    }
    rows
}

fn table(report: &CompareReport) -> String {
    let mut out = String::new();
    if let Some(s) = &report.side_by_side {
        for (hol, title) in [
            (
                true,
                "hol_delay_ms (what other clients saw), median [min-max] over the repeats",
            ),
            (false, "set_ms (the writer's own time), median [min-max]"),
        ] {
            let _ = writeln!(out, "{title}");
            let cells = side_by_side_cells(s, hol);
            let right: Vec<bool> = (0..cells[0].len()).map(|i| i == 0 || i >= 2).collect();
            for line in align(&cells, &right) {
                let _ = writeln!(out, "  {line}");
            }
            out.push('\n');
        }
    }
    for (i, c) in report.comparisons.iter().enumerate() {
        if i > 0 || report.side_by_side.is_some() {
            let _ = writeln!(
                out,
                "== {} vs {}",
                c.candidate.server_label(),
                c.baseline.server_label()
            );
        }
        let _ = writeln!(out, "{}", run_line("baseline ", &c.baseline));
        let _ = writeln!(out, "{}", run_line("candidate", &c.candidate));
        let cells = comparison_cells(c);
        let right = [true, false, false, true, true, true, true, false];
        for line in align(&cells, &right) {
            let _ = writeln!(out, "  {line}");
        }
        for warning in &c.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        let _ = writeln!(out, "{}", rule_line(c));
        let _ = writeln!(out, "{}", summary_line(c));
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

fn md_row(cells: &[String]) -> String {
    let escaped: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
    format!("| {} |", escaped.join(" | "))
}

fn md_table(cells: &[Vec<String>], right: &[bool]) -> String {
    let mut out = String::new();
    let Some((header, body)) = cells.split_first() else {
        return out;
    };
    let _ = writeln!(out, "{}", md_row(header));
    let rule: Vec<String> = (0..header.len())
        .map(|i| {
            if right.get(i).copied().unwrap_or(false) {
                "---:".to_string()
            } else {
                "---".to_string()
            }
        })
        .collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for row in body {
        let _ = writeln!(out, "{}", md_row(row));
    }
    out
}

fn markdown(report: &CompareReport) -> String {
    let mut out = String::new();
    if let Some(s) = &report.side_by_side {
        for (hol, title) in [
            (
                true,
                "hol_delay_ms (what other clients saw), median [min-max]",
            ),
            (false, "set_ms (the writer's own time), median [min-max]"),
        ] {
            let _ = writeln!(out, "**{title}**\n");
            let cells = side_by_side_cells(s, hol);
            let right: Vec<bool> = (0..cells[0].len()).map(|i| i == 0 || i >= 2).collect();
            out.push_str(&md_table(&cells, &right));
            out.push('\n');
        }
    }
    for c in &report.comparisons {
        let _ = writeln!(
            out,
            "### {} vs {}: {}\n",
            c.candidate.server_label(),
            c.baseline.server_label(),
            summary_line(c).trim_start_matches("verdict: ")
        );
        let _ = writeln!(out, "- {}", run_line("baseline", &c.baseline));
        let _ = writeln!(out, "- {}", run_line("candidate", &c.candidate));
        let _ = writeln!(out, "- {}\n", rule_line(c));
        let mut cells = comparison_cells(c);
        for row in cells.iter_mut().skip(1) {
            if let Some(verdict) = row.last_mut()
                && verdict.starts_with("REGRESSION")
            {
                *verdict = format!("**{verdict}**");
            }
        }
        out.push_str(&md_table(
            &cells,
            &[true, false, false, true, true, true, true, false],
        ));
        if !c.warnings.is_empty() {
            out.push('\n');
            for warning in &c.warnings {
                let _ = writeln!(out, "> warning: {warning}");
            }
        }
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_precision_by_size() {
        assert_eq!(fmt_ms(0.4567), "0.46");
        assert_eq!(fmt_ms(45.67), "45.7");
        assert_eq!(fmt_ms(4567.8), "4568");
        assert_eq!(fmt_spread(None), "-");
        assert_eq!(
            fmt_spread(Spread::of(&[1.0, 2.0, 30.0])),
            "2.00 [1.00-30.0]"
        );
        // Under one probe interval.
        assert_eq!(
            fmt_spread(Spread::of_censored(&[0.5, 0.5, 2.0], 0.5)),
            "<0.50 [<0.50-2.00]"
        );
        assert_eq!(fmt_spread(Spread::of_censored(&[0.5], 0.5)), "<0.50");
        assert_eq!(fmt_spread(Spread::of_censored(&[0.5, 0.5], 0.5)), "<0.50");
    }

    #[test]
    fn columns_line_up() {
        let lines = align(
            &[
                vec!["a".into(), "long".into()],
                vec!["long".into(), "b".into()],
            ],
            &[true, false],
        );
        assert_eq!(lines, vec!["   a  long", "long  b"]);
    }
}
