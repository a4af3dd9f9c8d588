//! `probe keys`' text and Markdown: the report on one screen, from run.json's content.

use crate::output::export::KeysRunJson;

fn ms(x: Option<f64>) -> String {
    match x {
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 1.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
        None => "?".into(),
    }
}

fn bytes(x: Option<u64>) -> String {
    x.map_or("?".into(), crate::analyze::pressure::human_bytes)
}

fn ttl(x: Option<u64>) -> String {
    match x {
        None => "-".into(),
        Some(ms) if ms >= 86_400_000 => format!("{:.1}d", ms as f64 / 86_400_000.0),
        Some(ms) if ms >= 3_600_000 => format!("{:.1}h", ms as f64 / 3_600_000.0),
        Some(ms) if ms >= 60_000 => format!("{:.1}m", ms as f64 / 60_000.0),
        Some(ms) => format!("{:.1}s", ms as f64 / 1e3),
    }
}

/// The table rows of the worst keys: key, type, encoding, elements, bytes, TTL, DEL, UNLINK,
/// expiry, read.
/// The top table's header: a scan of several nodes (a cluster) adds the node holding each key.
fn top_header(doc: &KeysRunJson) -> Vec<String> {
    let mut header: Vec<String> = TOP_HEADER.iter().map(|s| s.to_string()).collect();
    if doc.nodes.len() > 1 {
        header.push("node".into());
    }
    header
}

fn top_cells(doc: &KeysRunJson) -> Vec<Vec<String>> {
    let several = doc.nodes.len() > 1;
    doc.top
        .iter()
        .map(|r| {
            let mut cells = vec![
                format!("\"{}\"", r.key),
                r.kind.clone(),
                r.encoding.clone(),
                r.elements.map_or("?".into(), |n| n.to_string()),
                bytes(r.memory_bytes),
                ttl(r.ttl_ms),
                ms(r.delete_ms),
                ms(r.unlink_ms),
                ms(r.expire_ms),
                ms(r.read_ms),
                worst_cell(r),
            ];
            if several {
                cells.push(r.node.clone());
            }
            cells
        })
        .collect()
}

/// The worst freeze the rows are ordered by, and the op that causes it (an eviction or a SET
/// over the key can be the worst, and have no column of their own): `37.0 evict`.
fn worst_cell(row: &crate::keys::report::KeyRow) -> String {
    let ops = [
        ("del", row.delete_ms),
        ("expire", row.expire_ms),
        ("evict", row.evict_ms),
        ("overwrite", row.overwrite_ms),
        ("read", row.read_ms),
    ];
    match ops
        .iter()
        .filter_map(|&(op, v)| Some((op, v?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        Some((op, _)) => format!("{} {op}", ms(row.worst_ms)),
        None => ms(None),
    }
}

/// The most of a key's (escaped, quoted) name the text table shows.
const TEXT_KEY_CHARS: usize = 60;

/// `text` cut to `max` characters, its end marked `...`. The cut falls between escapes
/// (`\xd0`, `\u{200b}`, `\"`), never inside one.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let room = max.saturating_sub(3);
    let mut head = String::new();
    let mut used = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let mut piece = c.to_string();
        if c == '\\' {
            match chars.next() {
                Some(x @ 'x') => {
                    piece.push(x);
                    piece.extend(chars.by_ref().take(2));
                }
                Some(u @ 'u') if chars.peek() == Some(&'{') => {
                    piece.push(u);
                    for c in chars.by_ref() {
                        piece.push(c);
                        if c == '}' {
                            break;
                        }
                    }
                }
                Some(other) => piece.push(other),
                None => {}
            }
        }
        let len = piece.chars().count();
        if used + len > room {
            break;
        }
        head.push_str(&piece);
        used += len;
    }
    format!("{head}...")
}

const TOP_HEADER: [&str; 11] = [
    "key",
    "type",
    "encoding",
    "elements",
    "bytes",
    "ttl",
    "del ms",
    "unlink ms",
    "expire ms",
    "read ms",
    "worst ms",
];

fn model_line(doc: &KeysRunJson) -> String {
    let m = &doc.model;
    format!(
        "model: {} ({}){}; fit error (leave-one-out): median {}% over its entries, the worst entry's median {}%{}{}{}",
        m.server,
        m.from,
        if m.nearest {
            ", the nearest shipped version"
        } else {
            ""
        },
        m.median_error_pct.map_or("?".into(), |x| format!("{x:.0}")),
        m.worst_median_error_pct
            .map_or("?".into(), |x| format!("{x:.0}")),
        match (&m.worst_entry, m.worst_entry_max_ms) {
            (Some(entry), Some(ms)) => format!(" ({entry}: misses of at most {ms:.1} ms)"),
            _ => String::new(),
        },
        crate::keys::model::LaterCheck::clauses(&m.later_checks)
            .map_or(String::new(), |c| format!("; {c}")),
        if m.provisional {
            "; some entries PROVISIONAL (fitted from the server's SLOWLOG/LATENCY figures, not the tool's probes: the model file's `source` says which)"
        } else {
            ""
        }
    )
}

fn cost_line(doc: &KeysRunJson) -> String {
    let c = &doc.scan_cost;
    format!(
        "the scan itself: {:.2} s, {} SCAN batches ({} slowdowns, COUNT down to {}); others' worst wait {} ms during it ({} ms before it), the worst quarter-second's p99 {} ms; {}{} stall(s) past the threshold{}",
        c.wall_s,
        c.batches,
        c.backoffs,
        c.smallest_count,
        ms(c.worst_probe_ms_during),
        ms(c.worst_probe_ms_before),
        ms(c.p99_probe_ms_during),
        if c.stalls_during_at_least {
            "at least "
        } else {
            ""
        },
        c.stalls_during,
        c.longest_stall_ms
            .map_or(String::new(), |l| format!(", the longest {l:.1} ms"))
    )
}

/// The text report.
pub fn text_lines(doc: &KeysRunJson) -> Vec<String> {
    let mut lines = Vec::new();
    // A scan cut short says so where its count is (stderr says why).
    let partial = match doc.status {
        crate::output::export::RunStatus::Complete | crate::output::export::RunStatus::Running => {
            ""
        }
        crate::output::export::RunStatus::Interrupted => " (interrupted: a part of the keyspace)",
        crate::output::export::RunStatus::Failed => " (failed: a part of the keyspace)",
    };
    lines.push(format!(
        "scanned {} key{}{partial} on {}: {} predicted to freeze the server past {} ms (together {} ms); {} with a TTL",
        doc.keys_scanned,
        if doc.keys_scanned == 1 { "" } else { "s" },
        doc.nodes.join(", "),
        doc.keys_over_threshold,
        doc.scan.threshold_ms,
        ms(Some(doc.sum_over_threshold_ms)),
        doc.keys_with_ttl
    ));
    if !doc.top.is_empty() {
        let header = top_header(doc);
        let columns = header.len();
        let mut rows = vec![header];
        // A key name can be any length (64 KiB and more): the table shows its start, the files
        // hold it whole.
        rows.extend(top_cells(doc).into_iter().map(|mut row| {
            row[0] = shortened(&row[0], TEXT_KEY_CHARS);
            row
        }));
        let widths: Vec<usize> = (0..columns)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        lines.push(format!(
            "the {} worst keys by predicted freeze:",
            doc.top.len()
        ));
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, &w))| {
                    let pad = " ".repeat(w.saturating_sub(cell.chars().count()));
                    // Names left, figures right; the node column (past the figures) left.
                    if i < 3 || i >= TOP_HEADER.len() {
                        format!("{cell}{pad}")
                    } else {
                        format!("{pad}{cell}")
                    }
                })
                .collect();
            lines.push(format!("  {}", cells.join("  ").trim_end()));
        }
    }
    if doc.expiring_count > 0 {
        lines.push(format!(
            "{} key(s) will freeze the server past the threshold when they expire:",
            doc.expiring_count
        ));
        for r in doc.expiring.iter().take(5) {
            lines.push(format!(
                "  {} at {} (in {}): {} ms on {}",
                shortened(&format!("\"{}\"", r.key), TEXT_KEY_CHARS),
                r.expires_at.as_deref().unwrap_or("a time past year 9999"),
                ttl(r.ttl_ms),
                ms(r.expire_ms),
                match r.expire_freed_by.as_deref() {
                    Some(thread) => format!("the {thread} thread"),
                    None =>
                        "an unknown thread (lazyfree settings unread: CONFIG GET refused)".into(),
                }
            ));
        }
        if doc.expiring_count > 5 {
            lines.push(format!(
                "  ... and {} more (run.json, keys.csv)",
                doc.expiring_count - 5
            ));
        }
    }
    for a in &doc.advice {
        lines.push(format!("{} {}", a.change, a.effect));
    }
    lines.push(model_line(doc));
    lines.push(cost_line(doc));
    lines
}

/// The most of a key's name a Markdown table shows.
const MARKDOWN_KEY_CHARS: usize = 200;

/// A cell's text with Markdown's marks escaped, so that a key named `**x**`, `<b>`, `&amp;` or
/// with a backtick reads as its name, not as formatting or an entity.
fn md_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '|' | '`' | '*' | '_' | '<' | '>' | '[' | ']' | '#' | '~' | '\\' | '&'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn md_row(cells: &[String]) -> String {
    format!("| {} |", cells.join(" | ").replace('\n', " "))
}

/// The Markdown report.
pub fn markdown(doc: &KeysRunJson) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "**{} key{} scanned** on {}: {} past {} ms (together {} ms), {} with a TTL.\n\n",
        doc.keys_scanned,
        if doc.keys_scanned == 1 { "" } else { "s" },
        doc.nodes.join(", "),
        doc.keys_over_threshold,
        doc.scan.threshold_ms,
        ms(Some(doc.sum_over_threshold_ms)),
        doc.keys_with_ttl
    ));
    let header = top_header(doc);
    out.push_str(&md_row(&header));
    out.push('\n');
    out.push_str(&md_row(&vec!["---".to_string(); header.len()]));
    out.push('\n');
    for row in top_cells(doc) {
        let mut cells: Vec<String> = row.iter().map(|c| md_escaped(c)).collect();
        cells[0] = shortened(&cells[0], MARKDOWN_KEY_CHARS);
        out.push_str(&md_row(&cells));
        out.push('\n');
    }
    if !doc.expiring.is_empty() {
        out.push_str("\n| expiring key | at | expire ms | thread |\n|---|---|---|---|\n");
        for r in &doc.expiring {
            out.push_str(&md_row(&[
                shortened(&md_escaped(&format!("\"{}\"", r.key)), MARKDOWN_KEY_CHARS),
                r.expires_at.clone().unwrap_or_default(),
                ms(r.expire_ms),
                r.expire_freed_by.clone().unwrap_or_default(),
            ]));
            out.push('\n');
        }
    }
    out.push('\n');
    for a in &doc.advice {
        out.push_str(&format!("- `{}` {}\n", a.change, a.effect));
    }
    out.push_str(&format!("\n{}\n\n{}\n", model_line(doc), cost_line(doc)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows are ordered by their worst freeze, which may be an op with no column of its own
    /// (an eviction): the worst column says which (the hostile trial read the order as wrong).
    #[test]
    fn the_worst_column_names_the_op_the_rows_are_ordered_by() {
        let mut row = crate::keys::report::tests::sample_row();
        row.delete_ms = Some(26.5);
        row.expire_ms = Some(26.0);
        row.evict_ms = Some(37.0);
        row.overwrite_ms = Some(20.0);
        row.read_ms = Some(10.0);
        row.worst_ms = Some(37.0);
        assert_eq!(worst_cell(&row), format!("{} evict", ms(Some(37.0))));
        row.evict_ms = None;
        row.worst_ms = Some(26.5);
        assert_eq!(worst_cell(&row), format!("{} del", ms(Some(26.5))));
        assert_eq!(TOP_HEADER.last(), Some(&"worst ms"));
    }

    /// A key of 64 KiB made the table's format width panic (the hostile trial): the table
    /// shows its start.
    #[test]
    fn a_very_long_key_is_shortened_in_the_table() {
        let long = "K".repeat(70_000);
        let short = shortened(&format!("\"{long}\""), TEXT_KEY_CHARS);
        assert_eq!(short.chars().count(), TEXT_KEY_CHARS);
        assert!(short.ends_with("..."), "{short}");
        assert_eq!(shortened("\"k\"", TEXT_KEY_CHARS), "\"k\"");
        assert_eq!(md_escaped("a|b`c*<d>"), "a\\|b\\`c\\*\\<d\\>");
        // An entity reads as its text: `&amp;` shown as `&` was another key's name.
        assert_eq!(md_escaped("&amp;"), "\\&amp;");
    }

    /// A scan of several nodes (a cluster) says which holds each key (the hostile trial: only
    /// keys.csv did); one node's table has no such column.
    #[test]
    fn a_cluster_scan_names_each_key_s_node() {
        let mut doc = crate::output::export::run_json::keys::tests::sample_doc();
        let mut row = crate::keys::report::tests::sample_row();
        row.node = "10.0.0.2:7001".into();
        doc.top = vec![row];
        let one = text_lines(&doc).join("\n");
        assert!(!one.contains("10.0.0.2:7001"), "{one}");
        doc.nodes = vec!["10.0.0.1:7000".into(), "10.0.0.2:7001".into()];
        let text = text_lines(&doc);
        let header = text
            .iter()
            .find(|l| l.trim_start().starts_with("key"))
            .unwrap();
        assert!(header.trim_end().ends_with("node"), "{header}");
        assert!(
            text.iter().any(|l| l.trim_end().ends_with("10.0.0.2:7001")),
            "{text:?}"
        );
        let md = markdown(&doc);
        assert!(
            md.contains("| node |") && md.contains("| 10.0.0.2:7001 |"),
            "{md}"
        );
    }

    /// The scan's cost line names its p99 for what it is, the worst interval's (the hostile
    /// trial read `p99 64.5 ms` as the scan's, whose p99 was about 2.75 ms).
    #[test]
    fn the_p99_is_said_to_be_the_worst_quarter_second_s() {
        let doc = crate::output::export::run_json::keys::tests::sample_doc();
        let line = cost_line(&doc);
        assert!(
            line.contains("the worst quarter-second's p99 0.200 ms"),
            "{line}"
        );
        assert!(!line.contains("), p99"), "{line}");
    }

    /// Where the run kept fewer stalls than it found, the scan's count is a lower bound, and
    /// says so.
    #[test]
    fn a_stall_count_from_a_cut_list_says_at_least() {
        let mut doc = crate::output::export::run_json::keys::tests::sample_doc();
        doc.scan_cost.stalls_during = 1000;
        assert!(
            cost_line(&doc).contains("; 1000 stall(s)"),
            "{}",
            cost_line(&doc)
        );
        doc.scan_cost.stalls_during_at_least = true;
        let line = cost_line(&doc);
        assert!(line.contains("; at least 1000 stall(s)"), "{line}");
        let json = serde_json::to_string(&doc).unwrap();
        assert!(json.contains("\"stalls_during_at_least\":true"), "{json}");
    }

    /// A key whose expiry thread is unknown (CONFIG GET refused) says so in words, not `?`;
    /// one key is a key.
    #[test]
    fn an_unknown_expiry_thread_is_said_in_words() {
        let mut doc = crate::output::export::run_json::keys::tests::sample_doc();
        let mut row = crate::keys::report::tests::sample_row();
        row.expire_freed_by = None;
        doc.expiring = vec![row];
        doc.expiring_count = 1;
        doc.keys_scanned = 1;
        let text = text_lines(&doc).join("\n");
        assert!(
            text.contains("on an unknown thread (lazyfree settings unread: CONFIG GET refused)"),
            "{text}"
        );
        assert!(!text.contains("? thread"), "{text}");
        assert!(text.starts_with("scanned 1 key ("), "{text}");
        assert!(
            markdown(&doc).starts_with("**1 key scanned**"),
            "{}",
            markdown(&doc)
        );
    }

    /// The cut falls between escapes: a key of invalid bytes does not end in half of one.
    #[test]
    fn a_cut_never_splits_an_escape() {
        for shift in 0..4 {
            let key = format!("\"{}{}\"", "a".repeat(shift), "\\xd0".repeat(30));
            let short = shortened(&key, TEXT_KEY_CHARS);
            let body = short.trim_end_matches("...");
            assert!(short.chars().count() <= TEXT_KEY_CHARS, "{short}");
            assert!(body.ends_with("\\xd0") || body.ends_with('a'), "{short}");
        }
        let short = shortened(&format!("\"{}\"", "\\u{200b}".repeat(20)), 20);
        assert_eq!(short, "\"\\u{200b}\\u{200b}...");
    }
}
