//! Terminal text of a load run: the seed's block per server and in total, one line per write
//! under load, and the generator's verdict. Pure formatting.

use super::analyze::WriteUnderLoad;
use super::runner::LoadReport;
use super::stats::LoadBlock;

/// The seed's separator line.
pub const SEPARATOR: &str = "============================";

/// The blocks: with one server the seed's block alone; with several, one block per server
/// (headed by its address) and then the total.
pub fn block_lines(blocks: &[LoadBlock]) -> Vec<String> {
    let several = blocks.len() > 1;
    let mut lines = Vec::new();
    for block in blocks {
        lines.push(SEPARATOR.to_string());
        if several {
            lines.push(if block.server == "all" {
                format!("All {} servers", blocks.len() - 1)
            } else {
                match &block.role {
                    Some(role) => format!("Server: {} ({role})", block.server),
                    None => format!("Server: {}", block.server),
                }
            });
        }
        lines.extend(block.lines());
    }
    lines.push(SEPARATOR.to_string());
    lines
}

/// A latency for people: `850us`, `12.3ms`.
pub fn format_us(us: u64) -> String {
    if us >= 1000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

/// One line per write under load, e.g.
/// `set        length:  64M  set: 68.5ms  load worst: 12.3ms  delayed: 431 of 5120 requests over 1ms  throughput: 95123 req/s vs 98000 around: 2.9% lost (second 5)`;
/// requests given up without a reply during the write (in none of those figures) are added
/// after the delayed count when there are any: `..., 3 more without a reply`.
pub fn write_line(finding: &WriteUnderLoad, threshold_us: u64) -> String {
    let worst = finding.worst_latency_us.map_or_else(
        || "n/a (no answered request overlapped)".to_string(),
        format_us,
    );
    let unanswered = match finding.unanswered_requests {
        0 => String::new(),
        n => format!(", {n} more without a reply"),
    };
    let throughput = match (
        finding.rps_during,
        finding.rps_around,
        finding.throughput_lost_pct,
    ) {
        (None, _, _) => "not known (the run ended during the write's seconds)".to_string(),
        (Some(during), Some(around), Some(lost)) => {
            format!("{during:.0} req/s vs {around:.0} around: {lost:.1}% lost")
        }
        (Some(during), _, _) => {
            format!("{during:.0} req/s (no write-free second around to compare)")
        }
    };
    let seconds = if finding.seconds > 1 {
        format!(
            "seconds {}-{}",
            finding.second,
            finding.second + finding.seconds - 1
        )
    } else {
        format!("second {}", finding.second)
    };
    let mut line = format!(
        "{}  load worst: {worst}  delayed: {} of {} requests over {}{unanswered}  throughput: {throughput} ({seconds})",
        crate::output::report::write_line_start(finding.op, finding.size_bytes, finding.set_ms),
        finding.delayed_requests,
        finding.requests_in_window,
        format_us(threshold_us),
    );
    if !finding.ok {
        line.push_str("  FAILED");
    }
    line
}

/// The closing lines after the blocks: the generator's verdict, and for open loop what the
/// schedule did.
pub fn generator_lines(report: &LoadReport) -> Vec<String> {
    let g = &report.generator;
    let mut lines = vec![format!("generator: {}", g.verdict)];
    if g.open_loop {
        lines.push(format!(
            "open loop: schedule lag p50 {} p99 {}; {} scheduled requests never sent (their connection was full or down at the end)",
            g.schedule_lag_p50_us.map_or("n/a".into(), format_us),
            g.schedule_lag_p99_us.map_or("n/a".into(), format_us),
            g.unsent
        ));
    }
    if g.reconnects > 0 {
        lines.push(format!("connections reopened: {}", g.reconnects));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::stats::SecondAgg;
    use crate::record::WriteOp;

    #[test]
    fn one_server_prints_the_seed_block_between_separators() {
        let block = LoadBlock::from_agg("all", 50, 30.0, &SecondAgg::new());
        let lines = block_lines(&[block]);
        assert_eq!(lines[0], SEPARATOR);
        assert_eq!(lines[1], "Concurrent clients: 50");
        assert_eq!(lines.last().unwrap(), SEPARATOR);
    }

    #[test]
    fn several_servers_get_a_block_each_and_a_total() {
        let a = LoadBlock::from_agg("127.0.0.1:1", 25, 30.0, &SecondAgg::new());
        let b = LoadBlock::from_agg("127.0.0.1:2", 25, 30.0, &SecondAgg::new());
        let all = LoadBlock::from_agg("all", 50, 30.0, &SecondAgg::new());
        let text = block_lines(&[a, b, all]).join("\n");
        assert!(text.contains("Server: 127.0.0.1:1\nConcurrent clients: 25"));
        assert!(text.contains("All 2 servers\nConcurrent clients: 50"));
        assert_eq!(text.matches("Total requests:").count(), 3);
    }

    #[test]
    fn write_line_reads_well() {
        let finding = WriteUnderLoad {
            seq: 1,
            op: WriteOp::Delete,
            size_bytes: 64 << 20,
            set_ms: 4.1,
            start_us: 0,
            reply_us: 4100,
            ok: true,
            requests_in_window: 120,
            worst_latency_us: Some(4_600),
            delayed_requests: 50,
            second: 3,
            seconds: 1,
            rps_during: Some(95_000.0),
            rps_around: Some(98_000.0),
            throughput_lost_pct: Some(3.06),
            requests_lost: Some(3000.0),
            unanswered_requests: 0,
        };
        assert_eq!(
            write_line(&finding, 1000),
            "delete     length:  64M  del: 4.1ms  load worst: 4.6ms  delayed: 50 of 120 requests over 1.0ms  throughput: 95000 req/s vs 98000 around: 3.1% lost (second 3)"
        );
        let unanswered = WriteUnderLoad {
            unanswered_requests: 3,
            ..finding
        };
        assert!(
            write_line(&unanswered, 1000)
                .contains("delayed: 50 of 120 requests over 1.0ms, 3 more without a reply  "),
            "{}",
            write_line(&unanswered, 1000)
        );
        assert_eq!(format_us(850), "850us");
    }
}
