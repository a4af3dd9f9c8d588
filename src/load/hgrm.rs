//! `load_latency.hgrm`: a histogram's percentile distribution in HdrHistogram's classic text
//! format (Java `outputPercentileDistribution`, wrk2's `--latency` table), which HdrHistogram's
//! plotter (`plotFiles.html`) and the `hdrh` tools read. The Rust crate has no writer for it, so
//! it is written here, field for field.
//!
//! Values are recorded in µs and written in milliseconds (scaling ratio 1000), as wrk2 does and
//! as the plotter's axis assumes.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// Percentile steps per half distance to 100%, HdrHistogram's default.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// The percentile distribution of `hist` (values in µs), in milliseconds.
pub fn percentile_distribution(hist: &Histogram<u64>) -> String {
    percentile_distribution_scaled(hist, TICKS_PER_HALF_DISTANCE, 1000.0)
}

/// The percentile distribution with explicit ticks and value scaling (values are divided by
/// `scale` for output).
pub fn percentile_distribution_scaled(hist: &Histogram<u64>, ticks: u32, scale: f64) -> String {
    let sig = usize::from(hist.sigfig());
    let mut out = String::new();
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    if !hist.is_empty() {
        let mut total: u64 = 0;
        for step in hist.iter_quantiles(ticks.max(1)) {
            total += step.count_since_last_iteration();
            let value = step.value_iterated_to() as f64 / scale;
            let q = step.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:>12.sig$} {q:>2.12} {total:>10} {:>14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:>12.sig$} {q:>2.12} {total:>10}");
            }
        }
    }
    let (mean, stdev, max) = if hist.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (
            hist.mean() / scale,
            hist.stdev() / scale,
            hist.max() as f64 / scale,
        )
    };
    let _ = writeln!(
        out,
        "#[Mean    = {mean:>12.sig$}, StdDeviation   = {stdev:>12.sig$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:>12.sig$}, Total count    = {:>12}]",
        hist.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        hist.buckets(),
        sub_bucket_count(hist.sigfig())
    );
    out
}

/// Sub-buckets per bucket for a precision: the power of two above 2 × 10^sigfig.
fn sub_bucket_count(sigfig: u8) -> u64 {
    let largest_single_unit = 2 * 10u64.pow(u32::from(sigfig));
    largest_single_unit.next_power_of_two()
}

/// The data rows of a distribution, read back the way HdrHistogram's plotter does (the header
/// and the `#` lines skipped): value, percentile and total count of each; `None` if a row is
/// not three numbers.
pub fn data_rows(text: &str) -> Option<Vec<(f64, f64, u64)>> {
    text.lines()
        .skip(2)
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut cols = line.split_whitespace();
            Some((
                cols.next()?.parse().ok()?,
                cols.next()?.parse().ok()?,
                cols.next()?.parse().ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::stats::new_histogram;

    fn parse(text: &str) -> Vec<(f64, f64, u64)> {
        data_rows(text).expect("every row of three numbers")
    }

    #[test]
    fn format_matches_hdrhistogram() {
        let mut hist = new_histogram();
        for us in 1..=10_000u64 {
            hist.record(us).unwrap();
        }
        let text = percentile_distribution(&hist);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        // First row: the smallest value at percentile 0.
        assert_eq!(
            lines[2],
            "       0.001 0.000000000000          1           1.00"
        );
        let rows = parse(&text);
        // Percentiles rise to exactly 1, counts to the total; values never fall.
        assert!(
            rows.windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
        );
        let last = rows.last().unwrap();
        assert_eq!(last.1, 1.0);
        assert_eq!(last.2, 10_000);
        // The median row (0.5) sits at about 5 ms.
        let median = rows.iter().find(|r| r.1 == 0.5).unwrap();
        assert!((median.0 - 5.0).abs() < 0.01, "{median:?}");
        // The last data row has no 1/(1-p) column; the footer follows.
        let last_row = lines.iter().rev().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(last_row.split_whitespace().count(), 3);
        assert!(text.contains("#[Mean    =        5.001, StdDeviation   =        2.887]"));
        assert!(text.contains("#[Max     =       10.007, Total count    =        10000]"));
        assert!(text.contains("SubBuckets     =         2048]"));
    }

    #[test]
    fn empty_histogram_still_has_header_and_footer() {
        let text = percentile_distribution(&new_histogram());
        assert!(text.starts_with("       Value"));
        assert!(text.contains("Total count    =            0]"));
        assert!(parse(&text).is_empty());
    }
}
