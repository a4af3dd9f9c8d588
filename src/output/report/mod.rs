//! Text for the terminal: a header and one line per write in aligned columns (at most ~100
//! wide, led by the figure to quote: how long other clients waited at worst), then a short
//! footer: the baseline, the stall count and the longest stalls. `--verbose` gives the long
//! per-write line with every figure and the server's own view. Pure formatting: the caller
//! decides where it goes.

use crate::analyze::correlate::{Analysis, Baseline, Stall, WriteSummary};
use crate::analyze::naming::cause_of;
use crate::analyze::pressure::human_bytes;
use crate::analyze::stats::{SIZE_MODEL_MIN_SIZES, SizeModel, SizeSpread, Spread, set_sizes};
use crate::record::{NodeCols, WriteOp, WriteRecord};
use crate::units::format_size;

/// The header of the per-write columns ([`write_row`]).
pub fn write_header() -> String {
    format!(
        "{:<12}  {:<9} {:>5}  {:>14}  {:>8}  {:>8}  {:>14}",
        "time (UTC)", "op", "size", "others blocked", "own time", "stalled", "delayed probes"
    )
}

/// `HH:MM:SS.mmm` (UTC) of a moment `at_us` after the run's clock zero.
pub fn wall_ms(started_unix_us: u64, at_us: u64) -> String {
    let wall = crate::measure::clock::wall_time(started_unix_us + at_us);
    wall.get(11..23).unwrap_or(&wall).to_string()
}

/// A time in ms with one decimal, or `n/a`.
fn ms_cell(ms: Option<f64>) -> String {
    ms.map_or_else(|| "n/a".to_string(), |ms| format!("{ms:.1}ms"))
}

/// `1 probe delayed`, `3 probes delayed`.
fn probes_delayed_text(n: u64) -> String {
    if n == 1 {
        "1 probe delayed".to_string()
    } else {
        format!("{n} probes delayed")
    }
}

/// A latency for people: `850us`, `12.3ms`.
pub fn fmt_us(us: u64) -> String {
    if us >= 1000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

/// One write in the columns of [`write_header`], e.g.
/// `12:03:04.123  set         64M          98.7ms   133.5ms    96.1ms             194`:
/// when it started, how long the other clients waited at worst (`hol_delay_ms`; `n/a` when no
/// probe overlapped it), the writer's own time, the probes' stalled time and how many were
/// delayed. A second line when memory pressure was flagged (`!! memory pressure: ...`) and
/// when the write failed (`FAILED: <error>`).
pub fn write_row(record: &WriteRecord, summary: &WriteSummary, started_unix_us: u64) -> String {
    let mut line = format!(
        "{:<12}  {:<9} {:>5}  {:>14}  {:>8}  {:>8}  {:>14}",
        wall_ms(started_unix_us, record.start_us),
        summary.op.name(),
        size_cell(summary),
        ms_cell(summary.hol_delay_ms),
        format!("{:.1}ms", summary.set_ms),
        format!("{:.1}ms", summary.stall_ms),
        summary.probes_delayed,
    );
    if let Some(what) = collection_note(summary) {
        line.push_str(&format!("  {what}"));
    }
    if summary.memory_pressure {
        line.push_str(&format!(
            "\n{:<12}  !! memory pressure: host memory {:.1}% (peak {:.1}%), swap {:.1}%{}",
            "",
            summary.host_mem_pct,
            summary.host_mem_peak_pct,
            summary.host_swap_pct,
            if summary.host_swap_grew_bytes > 0 {
                format!(" (+{})", human_bytes(summary.host_swap_grew_bytes))
            } else {
                String::new()
            }
        ));
    }
    if !record.ok {
        line.push_str(&format!(
            "\n{:<12}  FAILED: {}",
            "",
            record.error.as_deref().unwrap_or("unknown error")
        ));
    }
    line
}

/// The kind of a collection's write (`hash`, ...); `None` for a string or a run recorded before
/// value types.
fn collection_kind(summary: &WriteSummary) -> Option<&str> {
    summary
        .value_type
        .as_deref()
        .filter(|kind| *kind != "string")
}

/// What a collection's row says it was and, for a removal, which thread freed it:
/// `hash hashtable, freed: main`; `None` for a string.
pub(crate) fn collection_note(summary: &WriteSummary) -> Option<String> {
    let kind = collection_kind(summary)?;
    let mut note = format!("{kind} {}", summary.encoding.as_deref().unwrap_or("?"));
    if let Some(freed) = summary.freed_by {
        note.push_str(&format!(", freed: {}", freed.name()));
    }
    Some(note)
}

/// The size column: a string's bytes (`64M`), a collection's elements (`200k`, `1M`).
pub(crate) fn size_cell(summary: &WriteSummary) -> String {
    match (collection_kind(summary), summary.elements) {
        (Some(_), Some(elements)) => format_count(elements),
        _ => format_size(summary.size_bytes),
    }
}

/// The value a write worked on, as a stall's line names it: a string's bytes (`64M`), a
/// collection's elements and kind (`300k hash`).
fn value_cell(summary: &WriteSummary) -> String {
    match collection_kind(summary) {
        Some(kind) => format!("{} {kind}", size_cell(summary)),
        None => size_cell(summary),
    }
}

/// A count for people: `950`, `200k`, `1M`, `1.5M`.
pub fn format_count(n: u64) -> String {
    for (unit, suffix) in [(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")] {
        if n >= unit {
            return if n.is_multiple_of(unit) {
                format!("{}{suffix}", n / unit)
            } else {
                format!("{:.1}{suffix}", n as f64 / unit as f64)
            };
        }
    }
    n.to_string()
}

/// The freezes worth at least [`AVOIDABLE_FROM_MS`] that a removal caused on the main thread,
/// each with what would have avoided it, backed by what was measured (the server's lazyfree
/// counters said `main`) and the servers' rule ([`crate::workload::lazyfree`]): a collection
/// past the threshold would go to the background thread with UNLINK or the removal's
/// `lazyfree-lazy-*` setting; a string never does, so the line says that instead of
/// suggesting UNLINK. One line per op and kind, its worst freeze. On a server built with glibc's
/// malloc (`allocator` `libc`) a last line says that the background thread moves the free, not
/// the whole freeze (docs/methodology.md: the main thread merges the freed chunks afterwards).
pub fn avoidable_lines(
    writes: &[WriteSummary],
    allocator: Option<&str>,
    no_unlink: bool,
) -> Vec<String> {
    use crate::workload::lazyfree::{FreedBy, LAZYFREE_THRESHOLD, Removal, avoidable_by};
    let mut worst: Vec<(WriteOp, String, &WriteSummary)> = Vec::new();
    // Collections the server freed in the background: on a glibc build, not the end of it.
    let background_frees = writes
        .iter()
        .filter(|w| w.freed_by == Some(FreedBy::Background) && w.value_type.is_some())
        .count();
    for write in writes {
        let Some(hol) = write.hol_delay_ms.filter(|&ms| ms >= AVOIDABLE_FROM_MS) else {
            continue;
        };
        if !(write.op.removes_key() || write.op == WriteOp::Overwrite)
            || write.freed_by == Some(FreedBy::Background)
        {
            continue;
        }
        let kind = write.value_type.clone().unwrap_or_else(|| "string".into());
        match worst
            .iter_mut()
            .find(|(op, k, _)| *op == write.op && *k == kind)
        {
            Some(entry) if entry.2.hol_delay_ms.unwrap_or(0.0) < hol => entry.2 = write,
            Some(_) => {}
            None => worst.push((write.op, kind, write)),
        }
    }
    let mut lines = Vec::new();
    let mut advised_background = false;
    for (op, kind, write) in worst {
        let removal = match op {
            WriteOp::Delete => Removal::Delete,
            WriteOp::Unlink => Removal::Unlink,
            WriteOp::Expire => Removal::Expire,
            WriteOp::Evict => Removal::Evict,
            _ => Removal::Overwrite,
        };
        let hol = write.hol_delay_ms.unwrap_or(0.0);
        if kind == "string" {
            lines.push(format!(
                "{} string {} froze others {hol:.1}ms: UNLINK or lazyfree would not help (a string",
                format_size(write.size_bytes),
                op.name()
            ));
            lines.push(
                "  is freed on the main thread however it is removed: its free effort is 1)".into(),
            );
            continue;
        }
        let Some(kind_of) = crate::workload::kind_named(&kind) else {
            continue;
        };
        let (Some(encoding), Some(elements), Some(element_bytes)) =
            (&write.encoding, write.elements, write.element_bytes)
        else {
            continue;
        };
        // Only a free the server said it made on the main thread.
        if write.freed_by != Some(FreedBy::Main) {
            continue;
        }
        let effort = kind_of.free_effort(encoding, elements, element_bytes);
        lines.push(format!(
            "{} {kind} {} froze others {hol:.1}ms, freed on the main thread (free effort {effort})",
            format_count(elements),
            op.name()
        ));
        lines.push(match avoidable_by(removal, effort) {
            // A server with UNLINK renamed away: its setting is all that is left.
            Some(_) if no_unlink && removal == Removal::Delete => {
                advised_background = true;
                "  -> lazyfree-lazy-user-del yes would free it in the background (the server has no UNLINK)"
                    .to_string()
            }
            Some(advice) => {
                advised_background = true;
                format!("  -> {advice}")
            }
            None => format!(
                "  -> as {encoding} (effort at most {LAZYFREE_THRESHOLD}) it is freed there however it is removed"
            ),
        });
    }
    if background_frees > 0 && allocator == Some("libc") && !advised_background {
        lines.push(format!(
            "{background_frees} collection(s) freed in the background, but this server uses libc malloc: its"
        ));
        lines.push(
            "  main thread merges the freed chunks once the background thread is done (Valkey 9.1,"
                .into(),
        );
        lines.push(
            "  a 1M-member set: ~200 ms): each such op's window runs until then, its figure includes it"
                .into(),
        );
    }
    if advised_background && allocator == Some("libc") {
        lines.push(
            "  but this server uses libc malloc: its main thread still merges what the background"
                .into(),
        );
        lines.push(
            "  thread freed, once it is done (Valkey 9.1, a 1M-member set: ~200 ms, in the op's window)"
                .into(),
        );
    }
    lines
}

/// The run's closing notes: [`avoidable_lines`], then [`pieces_lines`] (kept in run.json's
/// `notes`, printed after the table in every format).
pub fn closing_notes(
    writes: &[WriteSummary],
    allocator: Option<&str>,
    no_unlink: bool,
) -> Vec<String> {
    let mut notes = avoidable_lines(writes, allocator, no_unlink);
    notes.extend(pieces_lines(writes));
    notes
}

/// Two lines on the write whose server's main thread was busy longest beyond what others
/// waited at once (`server_cpu_run_us` against `hol_delay_ms`), when one was busy
/// [`PIECES_FROM_MS`] or more and [`PIECES_RATIO`] times that or more, e.g. `128M string set kept
/// the server's main thread busy 110.1ms in its window, others 5.1ms at most at once`: its work
/// came in pieces with others served between them (a fresh SET read between other clients'
/// requests; a libc build's merge of a background free, spread over its next cycles), so the
/// server's cost is more than the headline says. The busy time counted is net of the main
/// thread's quiet pace over the same stretch (`server_cpu_idle_us`: the probes' own commands,
/// the server's cron), which at high probe rates or over an expiry's TTL is most of the raw
/// figure. Empty when the run has no such write, or does not know the server's times (a server
/// not on this host).
pub fn pieces_lines(writes: &[WriteSummary]) -> Vec<String> {
    let pieces: Vec<(&WriteSummary, f64, f64)> = writes
        .iter()
        .filter(|w| w.ok)
        .filter_map(|w| {
            let busy_us = w
                .server_cpu_run_us?
                .saturating_sub(w.server_cpu_idle_us.unwrap_or(0));
            Some((w, busy_us as f64 / 1e3, w.hol_delay_ms?))
        })
        .filter(|&(_, run, hol)| run >= PIECES_FROM_MS && run >= PIECES_RATIO * hol)
        .collect();
    let Some(&(write, run, hol)) = pieces
        .iter()
        .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)))
    else {
        return Vec::new();
    };
    let what = format!(
        "{} {}",
        size_cell(write),
        collection_kind(write).unwrap_or("string")
    );
    vec![
        format!(
            "{what} {} kept the server's main thread busy {run:.1}ms in its window, others {hol:.1}ms",
            write.op.name()
        ),
        format!(
            "  at most at once (net of its quiet pace): its work came in pieces ({} of {} writes so)",
            pieces.len(),
            writes.len()
        ),
    ]
}

/// The least busy time beyond the quiet pace, ms, and how many times the wait of others it
/// must be, before [`pieces_lines`] speaks.
pub const PIECES_FROM_MS: f64 = 10.0;
pub const PIECES_RATIO: f64 = 1.5;

/// The shortest freeze [`avoidable_lines`] speaks of, ms.
pub const AVOIDABLE_FROM_MS: f64 = 10.0;

/// How a write's line begins, in the main job's report and under load: its op, its length and
/// its own time (`set        length:  64M  set: 133.5ms`).
pub fn write_line_start(op: WriteOp, size_bytes: u64, set_ms: f64) -> String {
    format!(
        "{:<9}  length: {:>4}  {}: {set_ms:.1}ms",
        op.name(),
        format_size(size_bytes),
        op.time_label()
    )
}

/// One line per write (`--verbose`), e.g.
/// `set        length:  64M  set: 133.5ms  others blocked: 98.7ms  stalled: 96.1ms (send 90.0 + after 6.1)  delayed probes: 194  memory 67.6%  swap 0.0%`.
pub fn write_line(record: &WriteRecord, summary: &WriteSummary) -> String {
    let blocked = match summary.hol_delay_ms {
        Some(ms) => format!("{ms:.1}ms"),
        None => "n/a (no probe overlapped)".to_string(),
    };
    let mut line = format!(
        "{}  others blocked: {blocked}  stalled: {:.1}ms (send {:.1} + after {:.1})  delayed probes: {}  memory {:.1}%  swap {:.1}%",
        write_line_start(summary.op, summary.size_bytes, summary.set_ms),
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

/// A node going away, coming back, or changing role: `12:03:04.123 127.0.0.1:7001 down:
/// connection refused`, `12:03:06.001 127.0.0.1:7004 topology: replica -> master`.
pub fn node_event_line(event: &crate::output::export::NodeEvent) -> String {
    let when = event.wall.get(11..23).unwrap_or(&event.wall);
    match &event.detail {
        Some(detail) => format!("{when} {} {}: {detail}", event.node, event.event),
        None => format!("{when} {} {}", event.node, event.event),
    }
}

/// A node's run in one line: `  127.0.0.1:7002 replica shard 0 (same shard)  baseline p50 52us
/// p99 1.3ms  stalls: 12 (80.1ms in all, longest 20.3ms)`.
pub fn node_summary_line(node: &crate::output::export::NodeFindings) -> String {
    let shard = match node.node.shard {
        Some(shard) => format!(" shard {shard}"),
        None => String::new(),
    };
    let same = if node.same_shard { " (same shard)" } else { "" };
    let longest = node
        .longest_stalls
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0, f64::max);
    format!(
        "  {} {}{shard}{same}  baseline p50 {} p99 {}  stalls: {} ({:.1}ms in all, longest {:.1}ms)",
        node.node.node,
        node.node.role.name(),
        fmt_us(node.baseline.p50_us),
        fmt_us(node.baseline.p99_us),
        node.stalls_found,
        node.stall_ms_total,
        longest
    )
}

/// The lines of each write over several nodes, held until every node's figures are in, then
/// given in write order: the write's line (the written master), one line per node of the
/// written shard (its replicas), and one line for the worst of the other shards (every node's
/// figures are in summary.csv).
#[derive(Debug, Default)]
pub struct WriteGroups {
    others: usize,
    /// The long lines of `--verbose`, not the columns.
    verbose: bool,
    next: Option<u32>,
    pending: std::collections::BTreeMap<u32, WriteGroup>,
}

#[derive(Debug, Default)]
struct WriteGroup {
    first: Option<String>,
    same_shard: Vec<String>,
    other_nodes: usize,
    /// The other shards' worst `hol_delay_ms`, and where.
    other_worst: Option<(f64, String)>,
}

impl WriteGroup {
    fn complete(&self, others: usize) -> bool {
        self.first.is_some() && self.same_shard.len() + self.other_nodes == others
    }

    fn lines(self) -> Vec<String> {
        let mut lines: Vec<String> = self.first.into_iter().collect();
        lines.extend(self.same_shard);
        if self.other_nodes > 0 {
            let label = format!("  other shards ({} nodes)", self.other_nodes);
            lines.push(match self.other_worst {
                Some((ms, node)) => {
                    format!("{label:<29}  {:>14}  worst: {node}", format!("{ms:.1}ms"))
                }
                None => format!("{label:<29}  {:>14}  (no probe overlapped)", "n/a"),
            });
        }
        lines
    }
}

impl WriteGroups {
    /// For a run over `others` nodes besides the written one.
    pub fn new(others: usize) -> WriteGroups {
        WriteGroups {
            others,
            ..WriteGroups::default()
        }
    }

    /// The other nodes' lines as `--verbose` has them (labelled figures, not columns).
    pub fn verbose(mut self, verbose: bool) -> WriteGroups {
        self.verbose = verbose;
        self
    }

    /// The written master's line of write `seq`.
    pub fn first(&mut self, seq: u32, line: String) {
        self.next.get_or_insert(seq);
        self.pending.entry(seq).or_default().first = Some(line);
    }

    /// Another node's figures of a write.
    pub fn node(&mut self, node: &NodeCols, same_shard: bool, summary: &WriteSummary) {
        let group = self.pending.entry(summary.seq).or_default();
        if same_shard {
            let verbose = self.verbose;
            group.same_shard.push(if verbose {
                node_write_line(node, same_shard, summary)
            } else {
                node_write_row(node, summary)
            });
        } else {
            group.other_nodes += 1;
            if let Some(ms) = summary.hol_delay_ms
                && group
                    .other_worst
                    .as_ref()
                    .is_none_or(|(worst, _)| ms > *worst)
            {
                group.other_worst = Some((ms, node.node.clone()));
            }
        }
    }

    /// The lines of the writes complete so far, in write order.
    pub fn ready(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some((&seq, group)) = self.pending.first_key_value() {
            if !group.complete(self.others) || self.next.is_some_and(|next| seq > next) {
                break;
            }
            let group = self.pending.remove(&seq).expect("present");
            self.next = Some(seq + 1);
            lines.extend(group.lines());
        }
        lines
    }

    /// Every write's lines still held (the run ended before some node's figures came).
    pub fn rest(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
            .into_values()
            .flat_map(WriteGroup::lines)
            .collect()
    }
}

/// A node of the written shard (a replica) under the write's row, in the same columns: its
/// address and role where the write's time, op and size are, no own time (it did not write).
pub fn node_write_row(node: &NodeCols, summary: &WriteSummary) -> String {
    format!(
        "{:<29}  {:>14}  {:>8}  {:>8}  {:>14}",
        format!("  {} {}", node.node, node.role.name()),
        ms_cell(summary.hol_delay_ms),
        "-",
        format!("{:.1}ms", summary.stall_ms),
        summary.probes_delayed
    )
}

/// One more node's view of a write, under the write's line (`--verbose`): `  127.0.0.1:7004 replica shard 0
/// (same shard)  others blocked: 3.1ms  stalled: 4.0ms  delayed probes: 7`.
pub fn node_write_line(node: &NodeCols, same_shard: bool, summary: &WriteSummary) -> String {
    let blocked = match summary.hol_delay_ms {
        Some(ms) => format!("{ms:.1}ms"),
        None => "n/a".to_string(),
    };
    let shard = match node.shard {
        Some(shard) => format!(" shard {shard}"),
        None => String::new(),
    };
    let same = if same_shard { " (same shard)" } else { "" };
    format!(
        "    {} {}{shard}{same}  others blocked: {blocked}  stalled: {:.1}ms  delayed probes: {}",
        node.node,
        node.role.name(),
        summary.stall_ms,
        summary.probes_delayed
    )
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
    if let Some(us) = summary.server_cpu_run_us {
        parts.push(format!("main thread busy {}", fmt_us(us)));
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

/// True when the interval for the median is the range itself (5 to 8 repeats): the cell's
/// `[min..max]` already is the interval, and its coverage is said once under the table.
fn ci_is_range(spread: &Spread) -> bool {
    spread.ci95_low == Some(spread.min) && spread.ci95_high == Some(spread.max)
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
        && !ci_is_range(spread)
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
/// order-statistic interval for the median with its exact coverage — in the cell when it is
/// narrower than the range, once under the table when it is the range (so that the same
/// "CI" is not repeated on every row).
pub fn by_size_lines(groups: &[SizeSpread]) -> Vec<String> {
    let mut lines = vec![
        "per size: median [min..max], and with 5 repeats or more the 95% interval for the median (order statistics, exact coverage)".to_string(),
        format!(
            "  {:<9} {:>5} {:>3}  {:<44}  {}",
            "op", "size", "n", "set_ms", "hol_delay_ms (others blocked)"
        ),
    ];
    // (n, coverage) of every interval that is the range, each said once.
    let mut range_cis: Vec<(usize, f64)> = Vec::new();
    for group in groups {
        for spread in std::iter::once(&group.set_ms).chain(group.hol_delay_ms.as_ref()) {
            if let Some(coverage) = spread.ci_coverage
                && ci_is_range(spread)
                && !range_cis.iter().any(|&(n, _)| n == spread.n)
            {
                range_cis.push((spread.n, coverage));
            }
        }
        // A figure from fewer writes than the row's says so (an UNLINK that no probe
        // overlapped twice in three: `n 3` beside a median of one; the hostile trial).
        let hol = group.hol_delay_ms.as_ref().map_or_else(
            || "n/a".to_string(),
            |s| {
                if s.n < group.writes {
                    format!(
                        "{} (n {}: no probe overlapped the others)",
                        spread_cell(s, 2),
                        s.n
                    )
                } else {
                    spread_cell(s, 2)
                }
            },
        );
        lines.push(format!(
            "  {:<9} {:>5} {:>3}  {:<44}  {}",
            group.op.name(),
            group
                .elements
                .map_or_else(|| format_size(group.size_bytes), format_count),
            group.writes,
            spread_cell(&group.set_ms, 1),
            hol
        ));
    }
    if !range_cis.is_empty() {
        range_cis.sort_by_key(|&(n, _)| n);
        let said: Vec<String> = range_cis
            .iter()
            .map(|&(n, coverage)| format!("{:.1}% at n = {n}", coverage * 100.0))
            .collect();
        lines.push(format!(
            "  a cell without CI: its [min..max] is the interval for the median (CI coverage {})",
            said.join(", ")
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

/// One stall, e.g. `12:03:04.123     38.2ms  DEBUG SLEEP 0.05 (10.0.0.5:51234 app-worker)` or
/// `12:03:04.123     96.1ms  during write 2 (set 64M)`: its wall-clock start (UTC), its length,
/// and what caused it as far as the server's logs or the run can tell.
pub fn stall_line(stall: &Stall, writes: &[WriteSummary]) -> String {
    let mut cause = Vec::new();
    if let Some(command) = &stall.server_command {
        cause.push(match &stall.server_client {
            Some(client) => format!("{command} ({client})"),
            None => command.clone(),
        });
    }
    if let Some(w) = stall
        .write_seq
        .and_then(|seq| writes.iter().find(|w| w.seq == seq))
    {
        cause.push(format!(
            "during write {} ({} {})",
            w.seq,
            w.op.name(),
            value_cell(w)
        ));
    }
    if let Some(event) = &stall.server_event {
        cause.push(event.clone());
    }
    if let Some(key) = &stall.server_key {
        cause.push(key.clone());
    }
    let when = match &stall.wall_start {
        // RFC 3339 `2026-11-30T12:03:04.123456Z`: the time of day to the millisecond.
        Some(wall) if wall.len() >= 23 => wall[11..23].to_string(),
        _ => format!("{:.3}s", stall.start_us as f64 / 1e6),
    };
    let cause = if cause.is_empty() {
        probes_delayed_text(stall.probes_delayed)
    } else {
        cause.join(", ")
    };
    format!("{when}  {:>7.1}ms  {cause}", stall.duration_ms)
}

fn number_word(n: usize) -> String {
    match n {
        2 => "two".to_string(),
        3 => "three".to_string(),
        n => n.to_string(),
    }
}

/// After the per-write lines: the per-size table (with `--repeat` 2 or more), the size model
/// (a sweep of three sizes or more, or why there is none) and the `--predict` lines.
pub fn trust_lines(analysis: &Analysis, options: &crate::options::RunOptions) -> Vec<String> {
    let mut lines = Vec::new();
    if options.writer.as_ref().is_some_and(|w| w.repeat > 1) && !analysis.by_size.is_empty() {
        lines.extend(by_size_lines(&analysis.by_size));
    }
    match &analysis.size_model {
        Some(model) => {
            lines.extend(size_model_lines(model));
            lines.extend(prediction_lines(model, &options.predict_bytes));
        }
        None => {
            let sizes = set_sizes(&analysis.writes);
            let with_delay: Vec<WriteSummary> = analysis
                .writes
                .iter()
                .filter(|w| w.hol_delay_ms.is_some())
                .cloned()
                .collect();
            if sizes > 1 {
                lines.push(format!(
                    "no size model: set writes of {sizes} sizes ({} with a delay measured), and it is fitted from {} sizes or more: a line through two sizes passes through both exactly, whatever the data, so its fit would say nothing",
                    set_sizes(&with_delay),
                    number_word(SIZE_MODEL_MIN_SIZES),
                ));
            }
            if !options.predict_bytes.is_empty() {
                lines.push(format!(
                    "no prediction: the size model needs successful set writes of at least {} sizes",
                    number_word(SIZE_MODEL_MIN_SIZES)
                ));
            }
        }
    }
    lines
}

/// The baseline in one short line: `baseline: p50 45us  p99 310us  max 1.2ms  (2913 probes
/// outside writes, 0 errors)`.
pub fn baseline_short(baseline: &Baseline) -> String {
    format!(
        "baseline: p50 {}  p99 {}  max {}  ({} probes outside writes, {} errors)",
        fmt_us(baseline.p50_us),
        fmt_us(baseline.p99_us),
        fmt_us(baseline.max_us),
        baseline.probes,
        baseline.probe_errors
    )
}

/// The probes' own send lag counts once its p99 reaches this (or with `--verbose`): below it
/// the tool's lateness is within a probe interval and changes no figure.
pub const SEND_LAG_SHOWN_FROM_US: u64 = 1000;

/// The LATENCY `command` event's figure in a stall's `server_event` text (`latency command
/// 200ms, expire-cycle 3ms; event loop max 200.4ms`), ms.
fn command_event_ms(server_event: &str) -> Option<f64> {
    crate::analyze::naming::latency_events(server_event)
        .into_iter()
        .find(|&(name, _)| name == "command")?
        .1
        .strip_suffix("ms")?
        .parse()
        .ok()
}

/// A stall in one short line: its wall-clock start, its length, and its write or its culprit:
/// `12:03:04.123     96.1ms  write 2 (set 64M)`, `12:03:04.123     38.2ms  DEBUG SLEEP 0.05
/// (10.0.0.5:51234 app-worker)`. The run's own command is named by its write; another
/// client's command by itself (and the write it fell in, if any). At most 100 columns.
pub fn stall_line_short(stall: &Stall, writes: &[WriteSummary]) -> String {
    let mut cause = Vec::new();
    let own_command = stall
        .server_command
        .as_deref()
        .is_some_and(|c| c.contains(RUN_KEYS));
    if let Some(command) = stall.server_command.as_deref().filter(|_| !own_command) {
        cause.push(match &stall.server_client {
            Some(client) => format!("{command} ({client})"),
            None => command.to_string(),
        });
    }
    if let Some(w) = stall
        .write_seq
        .and_then(|seq| writes.iter().find(|w| w.seq == seq))
    {
        cause.push(format!(
            "write {} ({} {})",
            w.seq,
            w.op.name(),
            value_cell(w)
        ));
    }
    // What no client sent a command for: the server's own work (an active expiry, an eviction,
    // a fork), in an operator's words, and the key it removed.
    if cause.is_empty()
        && let Some(event) = stall.server_event.as_deref().and_then(cause_of)
    {
        cause.push(event);
    }
    if stall.server_command.is_none()
        && let Some(key) = &stall.server_key
    {
        cause.push(key.clone());
    }
    // A command of 10 ms or more that the LATENCY monitor timed at about the stall's length
    // (its figures are whole ms, its times whole seconds), which no slow-log entry named (the
    // log was off or refused, or its entry was past the page read back): said as such, rather
    // than as a count of probes (the hostile trial: a foreign `DEBUG SLEEP 0.2` read "399
    // probes delayed" with --tune-server, before such runs read their log back).
    if cause.is_empty()
        && stall.server_command.is_none()
        && let Some(ms) = stall.server_event.as_deref().and_then(command_event_ms)
        && ms >= 10.0
        && (0.5..=1.5).contains(&(ms / stall.duration_ms))
    {
        cause.push(format!(
            "a command of {ms:.0}ms the slow log read did not name (LATENCY command)"
        ));
    }
    let cause = if cause.is_empty() {
        probes_delayed_text(stall.probes_delayed)
    } else {
        cause.join(", ")
    };
    let when = match &stall.wall_start {
        Some(wall) if wall.len() >= 23 => wall[11..23].to_string(),
        _ => format!("{:.3}s", stall.start_us as f64 / 1e6),
    };
    let line = format!(
        "{when}  {:>9}  {cause}",
        format!("{:.1}ms", stall.duration_ms)
    );
    clip(line, 98)
}

/// `text` cut to `width` characters, the cut marked with `...`.
fn clip(text: String, width: usize) -> String {
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(3)).collect();
    cut.push_str("...");
    cut
}

/// The start of every key a run writes (the session's `KEY_NAMESPACE` and its `:`; not
/// imported, so that output does not depend on the session; a test checks they agree): a
/// logged command on such a key is the run's own write.
const RUN_KEYS: &str = "holprobe:";

/// What the footer shows.
#[derive(Debug, Clone, Copy)]
pub struct FooterOptions {
    /// `--stall-threshold`, µs.
    pub threshold_us: u64,
    /// How many of the longest stalls to list (`--show-stalls`).
    pub show_stalls: usize,
    /// `--verbose`: every line, each in full.
    pub verbose: bool,
}

/// Client hiccups are listed when they matter: their longest is at least half the longest
/// stall (so they may hide or stretch stalls of that size), or one fell inside a write's window
/// (so that write's figures may hold the client's lateness); always with `--verbose`.
pub fn hiccups_matter(analysis: &Analysis, verbose: bool) -> bool {
    let hiccups = &analysis.client_hiccups;
    if hiccups.is_empty() {
        return false;
    }
    let longest_hiccup = hiccups
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0_f64, f64::max);
    let longest_stall = analysis
        .stalls
        .iter()
        .map(|s| s.duration_ms)
        .fold(0.0_f64, f64::max);
    verbose
        || longest_hiccup >= longest_stall / 2.0
        || hiccups.iter().any(|h| h.write_seq.is_some())
}

/// The closing block: the baseline, the probes' own send lag when it matters (p99 of 1 ms or
/// more, or `--verbose`), the stall count and total, the `show_stalls` longest stalls (each
/// with its wall-clock start and its write or culprit), and client hiccups when they matter
/// ([`hiccups_matter`]). `stalls_found`, `stall_ms_total` and `hiccups_found` count every one
/// of the run (the analysis may keep only the longest of a long run).
pub fn closing_lines(
    analysis: &Analysis,
    footer: FooterOptions,
    stalls_found: u64,
    stall_ms_total: f64,
    hiccups_found: u64,
) -> Vec<String> {
    let baseline = &analysis.baseline;
    let mut lines = vec![baseline_short(baseline)];
    if footer.verbose || baseline.send_lag_p99_us >= SEND_LAG_SHOWN_FROM_US {
        lines.push(format!(
            "probe send lag (the tool's own lateness, not the server's): p50 {}  p99 {}  max {}",
            fmt_us(baseline.send_lag_p50_us),
            fmt_us(baseline.send_lag_p99_us),
            fmt_us(baseline.send_lag_max_us)
        ));
    }
    let mut longest: Vec<&Stall> = analysis.stalls.iter().collect();
    longest.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    let worst = longest.first().map_or(0.0, |s| s.duration_ms);
    // Folded from +0.0: an empty f64 sum is -0.0, which prints as "-0.0ms".
    lines.push(format!(
        "stalls over {}: {stalls_found}, {:.1}ms in all, longest {worst:.1}ms",
        format_threshold(footer.threshold_us),
        stall_ms_total + 0.0
    ));
    if footer.show_stalls > 0 && !longest.is_empty() {
        let shown = longest.len().min(footer.show_stalls);
        lines.push(if shown < stalls_found as usize {
            format!("  the {shown} longest (UTC; --show-stalls N|all, every one in stalls.csv):")
        } else {
            format!("  all {shown} (UTC):")
        });
        for stall in longest.iter().take(footer.show_stalls) {
            lines.push(format!(
                "  {}",
                if footer.verbose {
                    stall_line(stall, &analysis.writes)
                } else {
                    stall_line_short(stall, &analysis.writes)
                }
            ));
        }
    }
    if hiccups_matter(analysis, footer.verbose) {
        let worst = analysis
            .client_hiccups
            .iter()
            .map(|s| s.duration_ms)
            .fold(0.0_f64, f64::max);
        lines.push(format!(
            "client hiccups: {hiccups_found}, longest {worst:.1}ms: the probes themselves were late (a busy client host)"
        ));
    }
    lines
}

/// One line per `--report-every` of a long run, in the manner of `redis-cli --latency-history`:
/// wall-clock time, probes, latency percentiles in µs, stalls.
pub fn report_every_line(
    wall_start: &str,
    seconds: f64,
    latency: &hdrhistogram::Histogram<u64>,
    errors: u64,
    stalls: u64,
    stall_ms: f64,
    longest_stall_ms: f64,
) -> String {
    let when = if wall_start.len() >= 19 {
        &wall_start[11..19]
    } else {
        wall_start
    };
    let mut line = format!(
        "{when}  {:.0}s  probes {}  p50 {}  p99 {}  p99.9 {}  max {}",
        seconds,
        latency.len(),
        fmt_us(latency.value_at_quantile(0.5)),
        fmt_us(latency.value_at_quantile(0.99)),
        fmt_us(latency.value_at_quantile(0.999)),
        fmt_us(latency.max())
    );
    if errors > 0 {
        line.push_str(&format!("  errors {errors}"));
    }
    line.push_str(&format!("  stalls {stalls}"));
    if stalls > 0 {
        line.push_str(&format!(
            " ({stall_ms:.1}ms, longest {longest_stall_ms:.1}ms)"
        ));
    }
    line
}

fn format_threshold(us: u64) -> String {
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

#[cfg(test)]
mod tests;
