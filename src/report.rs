//! Text for the terminal: one line per write in the spirit of the seed benchmark, then the
//! baseline and the stall list. Pure formatting: the caller decides where it goes.

use crate::correlate::{Analysis, Baseline, Stall, WriteSummary};
use crate::record::{WriteOp, WriteRecord};
use crate::units::format_size;

/// One line per write, e.g.
/// `set        length:  64M  set: 133.5ms  others blocked: 98.7ms  stalled: 96.1ms (send 90.0 + after 6.1)  delayed probes: 194  memory 67.6%  swap 0.0%`.
pub fn write_line(record: &WriteRecord, summary: &WriteSummary) -> String {
    let label = match summary.op {
        WriteOp::Delete => "del",
        WriteOp::Set | WriteOp::Overwrite => "set",
        WriteOp::Command => "cmd",
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
    if !record.ok {
        line.push_str(&format!(
            "  FAILED: {}",
            record.error.as_deref().unwrap_or("unknown error")
        ));
    }
    line
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

/// The closing block: baseline, stall count and list, client hiccups.
pub fn closing_lines(analysis: &Analysis, threshold_us: u64, list_stalls: bool) -> Vec<String> {
    let mut lines = vec![baseline_line(&analysis.baseline)];
    let total: f64 = analysis.stalls.iter().map(|s| s.duration_ms).sum();
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
