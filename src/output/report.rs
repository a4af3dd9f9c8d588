//! Text for the terminal: one line per write in the spirit of the seed benchmark, then the
//! baseline and the stall list. Pure formatting: the caller decides where it goes.

use crate::analyze::correlate::{Analysis, Baseline, Stall, WriteSummary};
use crate::analyze::pressure::human_bytes;
use crate::analyze::stats::{SizeModel, SizeSpread, Spread};
use crate::record::{WriteOp, WriteRecord};
use crate::units::format_size;

/// One line per write, e.g.
/// `set        length:  64M  set: 133.5ms  others blocked: 98.7ms  stalled: 96.1ms (send 90.0 + after 6.1)  delayed probes: 194  memory 67.6%  swap 0.0%`.
pub fn write_line(record: &WriteRecord, summary: &WriteSummary) -> String {
    let label = match summary.op {
        WriteOp::Delete => "del",
        WriteOp::Set | WriteOp::Overwrite => "set",
        WriteOp::Command => "cmd",
        WriteOp::Inject => "inj",
    };
    let blocked = match summary.hol_delay_ms {
        Some(ms) => format!("{ms:.1}ms"),
        None => "n/a (no probe overlapped)".to_string(),
    };
    let mut line = format!(
        "{:<9}  length: {:>4}  {label}: {:.1}ms  others blocked: {blocked}  stalled: {:.1}ms (send {:.1} + after {:.1})  delayed probes: {}  memory {:.1}%  swap {:.1}%",
        summary.op.name(),
        format_size(summary.size_bytes),
        summary.set_ms,
        summary.stall_ms,
        summary.stall_during_send_ms,
        summary.stall_after_send_ms,
        summary.probes_delayed,
        summary.host_mem_pct,
        summary.host_swap_pct,
    );
    line.push_str(&server_view_part(summary));
    if summary.memory_pressure {
        line.push_str(&pressure_mark(summary));
    }
    if !record.ok {
        line.push_str(&format!(
            "  FAILED: {}",
            record.error.as_deref().unwrap_or("unknown error")
        ));
    }
    line
}

/// The server's own figures for a write, e.g. `  server: exec 14us, latency event 21ms, loop
/// max 1009us`; `server: -` when it said nothing.
pub fn server_view_part(summary: &WriteSummary) -> String {
    let mut parts = Vec::new();
    if let Some(us) = summary.server_exec_us {
        parts.push(format!("exec {us}us"));
    }
    if let Some(ms) = summary.server_latency_event_ms {
        parts.push(format!("latency event {ms}ms"));
    }
    if let Some(us) = summary.server_eventloop_max_us {
        parts.push(format!("loop max {us}us"));
    }
    if parts.is_empty() {
        "  server: -".to_string()
    } else {
        format!("  server: {}", parts.join(", "))
    }
}

/// The memory-pressure mark, e.g. `  !! MEMORY PRESSURE (swap +120.0 MiB, host memory peak
/// 93.1%)`.
pub fn pressure_mark(summary: &WriteSummary) -> String {
    let mut why = Vec::new();
    if summary.host_swap_grew_bytes > 0 {
        why.push(format!(
            "swap +{}",
            human_bytes(summary.host_swap_grew_bytes)
        ));
    }
    why.push(format!(
        "host memory peak {:.1}%",
        summary.host_mem_peak_pct
    ));
    format!("  !! MEMORY PRESSURE ({})", why.join(", "))
}

fn spread_cell(spread: &Spread, decimals: usize) -> String {
    let mut cell = format!(
        "{:.d$} [{:.d$}..{:.d$}]",
        spread.median,
        spread.min,
        spread.max,
        d = decimals
    );
    if let (Some(lo), Some(hi), Some(coverage)) =
        (spread.ci95_low, spread.ci95_high, spread.ci_coverage)
    {
        cell.push_str(&format!(
            " CI {lo:.d$}..{hi:.d$} ({:.1}%)",
            coverage * 100.0,
            d = decimals
        ));
    }
    cell
}

/// The per-size table of repeated writes: median [min..max] and, from 5 repeats, the
/// order-statistic interval for the median with its exact coverage.
pub fn by_size_lines(groups: &[SizeSpread]) -> Vec<String> {
    let mut lines = vec![
        "per size: median [min..max], from 5 repeats the 95% interval for the median (order statistics, exact coverage)".to_string(),
        format!(
            "  {:<9} {:>5} {:>3}  {:<44}  {}",
            "op", "size", "n", "set_ms", "hol_delay_ms (others blocked)"
        ),
    ];
    for group in groups {
        let hol = group
            .hol_delay_ms
            .as_ref()
            .map_or_else(|| "n/a".to_string(), |s| spread_cell(s, 2));
        lines.push(format!(
            "  {:<9} {:>5} {:>3}  {:<44}  {}",
            group.op.name(),
            format_size(group.size_bytes),
            group.writes,
            spread_cell(&group.set_ms, 1),
            hol
        ));
    }
    lines
}

fn r2_text(r2: Option<f64>) -> String {
    r2.map_or_else(|| "n/a".to_string(), |r| format!("{r:.3}"))
}

/// The size model in two lines.
pub fn size_model_lines(model: &SizeModel) -> Vec<String> {
    vec![
        format!(
            "size model (least squares over {} set writes, {}..{}):",
            model.writes,
            format_size(model.min_size_bytes),
            format_size(model.max_size_bytes)
        ),
        format!(
            "  others blocked = {:.4} ms/MiB x size {} {:.2} ms  (R² {})",
            model.hol_ms_per_mib,
            if model.hol_intercept_ms < 0.0 {
                "-"
            } else {
                "+"
            },
            model.hol_intercept_ms.abs(),
            r2_text(model.hol_r2)
        ),
        format!(
            "  set           = {:.4} ms/MiB x size {} {:.2} ms  (R² {})",
            model.set_ms_per_mib,
            if model.set_intercept_ms < 0.0 {
                "-"
            } else {
                "+"
            },
            model.set_intercept_ms.abs(),
            r2_text(model.set_r2)
        ),
    ]
}

/// Predictions for `sizes`, each with its caveat.
pub fn prediction_lines(model: &SizeModel, sizes: &[u64]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut extrapolated = false;
    for &size in sizes {
        let p = model.predict(size);
        extrapolated |= p.extrapolated;
        lines.push(format!(
            "predicted {:>5}: others blocked ~{:.1}ms  set ~{:.1}ms  ({})",
            format_size(size),
            p.hol_delay_ms,
            p.set_ms,
            if p.extrapolated {
                "EXTRAPOLATED beyond the measured sizes"
            } else {
                "interpolated within the measured sizes"
            }
        ));
    }
    if extrapolated {
        lines.push(format!(
            "  caveat: an extrapolation extends a straight line fitted to {}..{} past its data; a larger value may cross a limit the sweep never met (host memory and swap, proto-max-bulk-len, allocator behaviour), so measure it before relying on it",
            format_size(model.min_size_bytes),
            format_size(model.max_size_bytes)
        ));
    }
    lines
}

/// The baseline in one line.
pub fn baseline_line(baseline: &Baseline) -> String {
    format!(
        "baseline: {} probes outside writes: p50 {}us  p99 {}us  max {}us;  probe send lag p50 {}us  p99 {}us  max {}us;  probe errors {}",
        baseline.probes,
        baseline.p50_us,
        baseline.p99_us,
        baseline.max_us,
        baseline.send_lag_p50_us,
        baseline.send_lag_p99_us,
        baseline.send_lag_max_us,
        baseline.probe_errors,
    )
}

/// One stall, e.g. `stall at 1.234s: 96.1ms, 194 probes delayed, during write 2 (set 64M)`.
pub fn stall_line(stall: &Stall, writes: &[WriteSummary]) -> String {
    let during = match stall
        .write_seq
        .and_then(|seq| writes.iter().find(|w| w.seq == seq))
    {
        Some(w) => format!(
            ", during write {} ({} {})",
            w.seq,
            w.op.name(),
            format_size(w.size_bytes)
        ),
        None => String::new(),
    };
    format!(
        "stall at {:.3}s: {:.1}ms, {} probes delayed{during}",
        stall.start_us as f64 / 1e6,
        stall.duration_ms,
        stall.probes_delayed
    )
}

/// After the per-write lines: the per-size table (with `--repeat` 2 or more), the size model
/// (a sweep of two sizes or more) and the `--predict` lines.
pub fn trust_lines(analysis: &Analysis, options: &crate::run::RunOptions) -> Vec<String> {
    let mut lines = Vec::new();
    if options.writer.as_ref().is_some_and(|w| w.repeat > 1) && !analysis.by_size.is_empty() {
        lines.extend(by_size_lines(&analysis.by_size));
    }
    match &analysis.size_model {
        Some(model) => {
            lines.extend(size_model_lines(model));
            lines.extend(prediction_lines(model, &options.predict_bytes));
        }
        None if !options.predict_bytes.is_empty() => lines.push(
            "no prediction: the size model needs successful set writes of at least two sizes"
                .to_string(),
        ),
        None => {}
    }
    lines
}

/// The closing block: baseline, stall count and list, client hiccups.
pub fn closing_lines(analysis: &Analysis, threshold_us: u64, list_stalls: bool) -> Vec<String> {
    let mut lines = vec![baseline_line(&analysis.baseline)];
    // Folded from +0.0: an empty f64 sum is -0.0, which prints as "-0.0ms".
    let total = analysis
        .stalls
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0_f64, |sum, d| sum + d);
    let worst = analysis
        .stalls
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0_f64, f64::max);
    lines.push(format!(
        "stalls over {}: {} (total {total:.1}ms, longest {worst:.1}ms)",
        format_threshold(threshold_us),
        analysis.stalls.len()
    ));
    if list_stalls {
        for stall in &analysis.stalls {
            lines.push(format!("  {}", stall_line(stall, &analysis.writes)));
        }
    }
    if !analysis.client_hiccups.is_empty() {
        let worst = analysis
            .client_hiccups
            .iter()
            .map(|s| s.duration_ms)
            .fold(0.0_f64, f64::max);
        lines.push(format!(
            "client hiccups: {} (longest {worst:.1}ms): the probe threads themselves were late, not the server; a busy client host makes every figure less certain",
            analysis.client_hiccups.len()
        ));
    }
    lines
}

fn format_threshold(us: u64) -> String {
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}
