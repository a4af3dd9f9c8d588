use super::*;
use crate::record::NodeRole;

fn summary(seq: u32, hol: f64) -> WriteSummary {
    WriteSummary::seen_once(seq, WriteOp::Set, 1 << 20, 1.0, Some(hol))
}

fn node(name: &str, role: NodeRole, shard: u16) -> NodeCols {
    NodeCols {
        node: name.into(),
        role,
        shard: Some(shard),
    }
}

/// Each write's lines come together and in write order, however the nodes' figures
/// arrive; the other shards fold into their worst.
#[test]
fn write_groups_wait_for_every_node_and_keep_write_order() {
    let replica = node("r:1", NodeRole::Replica, 0);
    let (other_a, other_b) = (
        node("m:2", NodeRole::Master, 1),
        node("m:3", NodeRole::Master, 2),
    );
    let mut groups = WriteGroups::new(3).verbose(true);
    groups.first(1, "write 1".into());
    groups.node(&replica, true, &summary(1, 2.0));
    groups.node(&other_a, false, &summary(2, 9.0));
    assert!(groups.ready().is_empty(), "write 1 still misses two nodes");
    groups.first(2, "write 2".into());
    groups.node(&other_a, false, &summary(1, 0.5));
    groups.node(&replica, true, &summary(2, 1.0));
    groups.node(&other_b, false, &summary(2, 3.0));
    assert!(
        groups.ready().is_empty(),
        "write 2 is complete, write 1 is not"
    );
    groups.node(&other_b, false, &summary(1, 0.7));
    let lines = groups.ready();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(lines[0], "write 1");
    assert!(
        lines[1].contains("r:1 replica shard 0 (same shard)"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("  other shards (2 nodes) ")
            && lines[2].ends_with("0.7ms  worst: m:3"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "write 2");
    assert!(lines[5].ends_with("9.0ms  worst: m:2"), "{}", lines[5]);
    assert!(groups.rest().is_empty());
}

#[test]
fn run_keys_are_the_session_s() {
    assert_eq!(RUN_KEYS, format!("{}:", crate::session::KEY_NAMESPACE));
}

/// With one server a write's line is given at once.
#[test]
fn write_groups_of_one_node_pass_straight_through() {
    let mut groups = WriteGroups::new(0);
    groups.first(1, "write 1".into());
    assert_eq!(groups.ready(), ["write 1"]);
    groups.first(2, "write 2".into());
    assert_eq!(groups.ready(), ["write 2"]);
}

/// The default write line: the columns of the header, under 100 columns for every op and
/// size; the figure to quote first.
#[test]
fn write_rows_line_up_with_their_header() {
    let header = write_header();
    let mut write = summary(3, 98.7);
    write.size_bytes = 512 << 20;
    write.set_ms = 1133.5;
    write.stall_ms = 1096.1;
    write.probes_delayed = 12345;
    let record = WriteRecord {
        set_ms: write.set_ms,
        ..WriteRecord::timed(
            3,
            WriteOp::Set,
            "k".into(),
            write.size_bytes,
            (1_500_000, 0, 0),
        )
    };
    // 2026-12-01T10:00:00Z + 1.5 s.
    let row = write_row(&record, &write, 1_796_119_200_000_000);
    assert_eq!(row.len(), header.len(), "\n{header}\n{row}");
    assert!(row.len() <= 100);
    assert!(row.starts_with("10:00:01.500  set        512M"), "{row}");
    let blocked = header.find("others blocked").unwrap() + "others blocked".len();
    assert_eq!(&row[blocked - 6..blocked], "98.7ms", "{row}");
    let node = node_write_row(&node("127.0.0.1:40002", NodeRole::Replica, 0), &write);
    assert_eq!(node.len(), header.len(), "\n{header}\n{node}");
    assert_eq!(&node[blocked - 6..blocked], "98.7ms", "{node}");
    // A failed write says why on a line of its own.
    let failed = WriteRecord {
        ok: false,
        error: Some("OOM command not allowed".into()),
        ..record
    };
    let text = write_row(&failed, &write, 0);
    assert!(text.lines().nth(1).unwrap().trim() == "FAILED: OOM command not allowed");
}

fn stall(ms: f64, write_seq: Option<u32>) -> Stall {
    Stall {
        start_us: 0,
        end_us: 0,
        duration_ms: ms,
        probes_delayed: 3,
        write_seq,
        wall_start: Some("2026-12-01T10:00:01.500000Z".into()),
        server_command: None,
        server_client: None,
        server_event: None,
        server_key: None,
    }
}

/// A stall is named by its write when the run's own command caused it, by the culprit
/// otherwise.
#[test]
fn short_stall_lines_name_the_write_or_the_culprit() {
    let writes = [summary(2, 1.0)];
    let own = Stall {
        server_command: Some("SET holprobe:feedf00d:2 ...".into()),
        server_client: Some("127.0.0.1:5000".into()),
        ..stall(96.1, Some(2))
    };
    assert_eq!(
        stall_line_short(&own, &writes),
        "10:00:01.500     96.1ms  write 2 (set 1M)"
    );
    let other = Stall {
        server_command: Some("DEBUG SLEEP 0.05".into()),
        server_client: Some("10.0.0.5:51234 app-worker".into()),
        ..stall(50.2, None)
    };
    assert_eq!(
        stall_line_short(&other, &writes),
        "10:00:01.500     50.2ms  DEBUG SLEEP 0.05 (10.0.0.5:51234 app-worker)"
    );
    let long = Stall {
        server_command: Some("EVAL ".to_string() + &"x".repeat(200)),
        ..stall(1.0, None)
    };
    assert!(stall_line_short(&long, &writes).chars().count() <= 100);
    // A collection's write is named by its elements and kind, as in the table, not by its
    // bytes (the hostile trial's "write 2 (delete 9375K)" for a 300k hash).
    let hash = [WriteSummary {
        op: WriteOp::Delete,
        size_bytes: 9_600_000,
        value_type: Some("hash".into()),
        elements: Some(300_000),
        ..summary(2, 88.0)
    }];
    assert_eq!(
        stall_line_short(&stall(88.3, Some(2)), &hash),
        "10:00:01.500     88.3ms  write 2 (delete 300k hash)"
    );
}

/// A stall no client sent a command for reads as what the server was doing, and the key.
#[test]
fn short_stall_lines_name_an_expiry_by_its_event_and_key() {
    let expiry = Stall {
        server_event: Some("latency expire-cycle 451ms, expire-del 451ms".into()),
        server_key: Some("expired big:hash".into()),
        probes_delayed: 950,
        ..stall(474.7, None)
    };
    assert_eq!(
        stall_line_short(&expiry, &[]),
        "10:00:01.500    474.7ms  active expiry 451ms (expire-cycle, expire-del), expired big:hash"
    );
    // The key alone, where the monitor was off.
    let key_only = Stall {
        server_key: Some("evicted k".into()),
        ..stall(12.0, None)
    };
    assert_eq!(
        stall_line_short(&key_only, &[]),
        "10:00:01.500     12.0ms  evicted k"
    );
    // A command the server logged is the cause; its LATENCY event says no more.
    let command = Stall {
        server_command: Some("DEBUG SLEEP 0.05".into()),
        server_event: Some("latency command 50ms".into()),
        ..stall(50.2, None)
    };
    assert_eq!(
        stall_line_short(&command, &[]),
        "10:00:01.500     50.2ms  DEBUG SLEEP 0.05"
    );
    // A command the LATENCY monitor timed at the stall's length that no slow-log entry named
    // (the log off, or the entry past the page read back): said as such.
    let timed_only = Stall {
        server_event: Some("latency command 200ms; event loop max 200.4ms".into()),
        ..stall(200.2, None)
    };
    assert_eq!(
        stall_line_short(&timed_only, &[]),
        "10:00:01.500    200.2ms  a command of 200ms the slow log read did not name (LATENCY command)"
    );
    // The run's own command, named by the slow log but tied to no write: not said to be
    // unnamed.
    let own = Stall {
        server_command: Some("DEL holprobe:abcd1234:w1".into()),
        server_event: Some("latency command 200ms".into()),
        ..stall(200.2, None)
    };
    assert!(
        !stall_line_short(&own, &[]).contains("did not name"),
        "{}",
        stall_line_short(&own, &[])
    );
    // Nothing said: the count, as before.
    let unnamed = Stall {
        server_event: Some("latency command 2ms".into()),
        ..stall(3.0, None)
    };
    assert_eq!(
        stall_line_short(&unnamed, &[]),
        "10:00:01.500      3.0ms  3 probes delayed"
    );
}

/// The footer: the longest `show_stalls`, the send lag and the hiccups only when they
/// matter.
#[test]
fn the_footer_keeps_to_what_matters() {
    let mut analysis = Analysis {
        stalls: (1..=20).map(|i| stall(f64::from(i), None)).collect(),
        client_hiccups: vec![stall(2.0, None)],
        ..Analysis::default()
    };
    let footer = FooterOptions {
        threshold_us: 1000,
        show_stalls: 5,
        verbose: false,
    };
    let lines = closing_lines(&analysis, footer, 20, 210.0, 1);
    assert!(lines[0].starts_with("baseline: p50 "), "{lines:?}");
    assert_eq!(
        lines[1],
        "stalls over 1ms: 20, 210.0ms in all, longest 20.0ms"
    );
    assert!(lines[2].contains("the 5 longest"), "{lines:?}");
    assert!(lines[3].contains("20.0ms"), "{lines:?}");
    assert_eq!(lines.len(), 8, "no send lag, no hiccups: {lines:?}");
    // A hiccup as long as half the longest stall matters; so does a high send lag.
    analysis.client_hiccups = vec![stall(10.0, None)];
    analysis.baseline.send_lag_p99_us = 1500;
    let lines = closing_lines(&analysis, footer, 20, 210.0, 1);
    assert!(lines[1].starts_with("probe send lag"), "{lines:?}");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("client hiccups: 1, longest 10.0ms")
    );
    // So does one inside a write.
    analysis.client_hiccups = vec![stall(1.5, Some(1))];
    assert!(hiccups_matter(&analysis, false));
    analysis.client_hiccups = vec![stall(1.5, None)];
    assert!(!hiccups_matter(&analysis, false));
    assert!(hiccups_matter(&analysis, true));
}

#[test]
fn a_collections_main_thread_free_is_said_avoidable_and_a_strings_is_not() {
    use crate::workload::lazyfree::FreedBy;
    let hash = |op: WriteOp, hol: f64, freed: FreedBy| WriteSummary {
        op,
        hol_delay_ms: Some(hol),
        value_type: Some("hash".into()),
        elements: Some(1_000_000),
        element_bytes: Some(16),
        encoding: Some("hashtable".into()),
        freed_by: Some(freed),
        ..summary(1, hol)
    };
    let writes = [
        hash(WriteOp::Delete, 410.0, FreedBy::Main),
        hash(WriteOp::Delete, 300.0, FreedBy::Main),
        hash(WriteOp::Unlink, 400.0, FreedBy::Background),
        hash(WriteOp::Expire, 5.0, FreedBy::Main),
    ];
    let lines = avoidable_lines(&writes, Some("jemalloc-5.3.0"), false);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("1M hash delete froze others 410.0ms"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("UNLINK (or lazyfree-lazy-user-del yes)"),
        "{lines:?}"
    );
    // A server with UNLINK renamed away is told its setting only.
    let no_unlink = avoidable_lines(&writes, Some("jemalloc-5.3.0"), true);
    assert!(
        no_unlink[1].contains("lazyfree-lazy-user-del yes") && !no_unlink[1].contains("UNLINK ("),
        "{no_unlink:?}"
    );
    assert!(
        no_unlink.iter().all(|l| l.chars().count() <= 100),
        "{no_unlink:?}"
    );
    // The same advice on a glibc build says what is left of the freeze after the op.
    let glibc = avoidable_lines(&writes, Some("libc"), false);
    assert_eq!(glibc.len(), 4, "{glibc:?}");
    assert_eq!(glibc[..2], lines[..]);
    assert!(glibc[2].contains("libc malloc"), "{glibc:?}");
    assert!(glibc.iter().all(|l| l.chars().count() <= 100), "{glibc:?}");
    // Background frees alone: said on a glibc build only.
    let background = [hash(WriteOp::Unlink, 4.0, FreedBy::Background)];
    assert!(avoidable_lines(&background, Some("jemalloc-5.3.0"), false).is_empty());
    let said = avoidable_lines(&background, Some("libc"), false);
    assert!(
        said[0].starts_with("1 collection(s) freed in the background"),
        "{said:?}"
    );
    assert!(said.iter().all(|l| l.chars().count() <= 100), "{said:?}");
    let expire = avoidable_lines(&[hash(WriteOp::Expire, 50.0, FreedBy::Main)], None, false);
    assert!(expire[1].contains("lazyfree-lazy-expire yes"), "{expire:?}");
    // A string's delete: never UNLINK as the way out.
    let string = WriteSummary {
        op: WriteOp::Delete,
        size_bytes: 512 << 20,
        ..summary(2, 40.0)
    };
    // Nothing takes a string off the main thread, so nothing is said of glibc either.
    let lines = avoidable_lines(&[string], Some("libc"), false);
    assert_eq!(lines.len(), 2);
    assert!(
        lines
            .join(" ")
            .contains("UNLINK or lazyfree would not help"),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l.chars().count() <= 100), "{lines:?}");
    assert_eq!(format_count(200_000), "200k");
    assert_eq!(format_count(1_500_000), "1.5M");
}

fn sized(op: WriteOp, size_bytes: u64, set_ms: f64, hol: f64) -> WriteSummary {
    WriteSummary {
        op,
        size_bytes,
        set_ms,
        ..summary(1, hol)
    }
}

/// Two sizes put a line through two points exactly (R² 1.000 whatever the data): no size
/// model is printed, and the report says why; three sizes give it.
#[test]
fn the_size_model_needs_three_sizes_and_says_so() {
    let mib = 1u64 << 20;
    let mut analysis = Analysis::default();
    for size in [16, 64] {
        for _ in 0..5 {
            analysis
                .writes
                .push(sized(WriteOp::Set, size * mib, size as f64, 8.0));
        }
    }
    analysis.summarize_writes();
    let options = crate::options::RunOptions::default();
    let lines = trust_lines(&analysis, &options).join("\n");
    assert!(!lines.contains("size model ("), "{lines}");
    assert!(!lines.contains("R²"), "{lines}");
    assert!(lines.contains("no size model"), "{lines}");
    assert!(lines.contains("three sizes"), "{lines}");
    analysis
        .writes
        .push(sized(WriteOp::Set, 128 * mib, 128.0, 9.0));
    analysis.summarize_writes();
    let lines = trust_lines(&analysis, &options).join("\n");
    assert!(lines.contains("size model ("), "{lines}");
    assert!(!lines.contains("no size model"), "{lines}");
}

/// With 5 repeats the interval for the median is the range itself: the table says so once,
/// not on every row; a wider run (n = 9) keeps its own interval in its cells.
#[test]
fn an_interval_that_is_the_range_is_said_once() {
    let mib = 1u64 << 20;
    let mut writes = Vec::new();
    for size in [1, 4, 16] {
        for i in 0..5 {
            writes.push(sized(
                WriteOp::Set,
                size * mib,
                10.0 + i as f64,
                2.0 + i as f64,
            ));
        }
    }
    let groups = crate::analyze::stats::by_size(&writes);
    let lines = by_size_lines(&groups);
    let text = lines.join("\n");
    assert_eq!(text.matches("93.8%").count(), 1, "{text}");
    assert_eq!(text.matches("CI ").count(), 1, "{text}");
    let rows: Vec<&String> = lines.iter().filter(|l| l.contains("set ")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        assert!(row.contains("12.0 [10.0..14.0]"), "{row}");
        assert!(!row.contains("CI"), "{row}");
    }
    // Nine repeats: the interval [x(2), x(8)] is narrower than the range and stays in its cell.
    let nine: Vec<WriteSummary> = (0..9)
        .map(|i| sized(WriteOp::Set, mib, i as f64, i as f64))
        .collect();
    let text = by_size_lines(&crate::analyze::stats::by_size(&nine)).join("\n");
    assert!(
        text.contains("4.0 [0.0..8.0] CI 1.0..7.0 (96.1%)"),
        "{text}"
    );
}

#[test]
fn a_write_whose_server_was_busy_far_longer_than_others_waited_is_said_once() {
    let write = |seq: u32, op: WriteOp, hol: f64, run_us: Option<u64>| WriteSummary {
        op,
        size_bytes: 128 << 20,
        server_cpu_run_us: run_us,
        ..summary(seq, hol)
    };
    // A fresh SET read between others' requests: busy 110 ms, others 5 ms at once; a DEL that
    // froze them all the time it worked; a write whose server's times are unknown (`--url`).
    let writes = [
        write(1, WriteOp::Set, 5.1, Some(110_100)),
        write(2, WriteOp::Delete, 12.2, Some(11_300)),
        write(3, WriteOp::Set, 4.0, None),
    ];
    let lines = pieces_lines(&writes);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "128M string set kept the server's main thread busy 110.1ms in its window, others 5.1ms"
        ),
        "{lines:?}"
    );
    assert!(lines[1].contains("(1 of 3 writes so)"), "{lines:?}");
    assert!(lines.iter().all(|l| l.chars().count() <= 100), "{lines:?}");
    // Busy about as long as others waited, or under the floor: nothing to say.
    assert!(pieces_lines(&writes[1..]).is_empty());
    assert!(pieces_lines(&[write(4, WriteOp::Set, 1.0, Some(9_000))]).is_empty());
    // A collection is named by its elements.
    let hash = WriteSummary {
        value_type: Some("hash".into()),
        elements: Some(1_000_000),
        ..write(5, WriteOp::Unlink, 30.0, Some(90_000))
    };
    assert!(
        pieces_lines(&[hash])[0].starts_with("1M hash unlink kept"),
        "the collection's line"
    );
    // The hostile trial's case: a 1M string's expiry at 4 x 5000 PINGs/s, its readings spanning
    // the TTL: 25.4 ms busy, nearly all of it the quiet pace (the probes' commands). Nothing to
    // say; with the pace unknown (the run's first op) the raw figure speaks.
    let expiry = WriteSummary {
        server_cpu_idle_us: Some(24_100),
        ..write(6, WriteOp::Expire, 0.3, Some(25_400))
    };
    assert!(pieces_lines(std::slice::from_ref(&expiry)).is_empty());
    let paced = WriteSummary {
        server_cpu_idle_us: Some(10_000),
        ..write(7, WriteOp::Set, 5.1, Some(110_100))
    };
    assert!(
        pieces_lines(&[paced, expiry])[0].contains("busy 100.1ms in its window"),
        "net of the pace"
    );
}
