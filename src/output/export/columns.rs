//! The columns of every CSV file the tool writes, in order: the one list of each file, used to
//! write its header (also when it has no rows) and by the readers that check a file's columns.
//! The rows come from `Serialize` structs; a unit test below checks each list against the header
//! its struct gives, and `tests/docs.rs` checks docs/exports.md's tables against [`BY_FILE`].

use super::{
    CALIBRATION_CSV, KEYS_CSV, LOAD_TIMELINE_CSV, LOAD_WRITES_CSV, PROBES_CSV, REPLAY_CSV,
    STALLS_CSV, SUMMARY_CSV, TIMELINE_CSV, WRITES_CSV,
};

/// probes.csv (rows: [`crate::record::ProbeRecord`], then the node's columns)
pub const PROBES: &[&str] = &[
    "thread",
    "seq",
    "cmd",
    "intended_us",
    "sent_us",
    "reply_us",
    "latency_us",
    "ok",
    "error",
    "read_us",
    "node",
    "role",
    "shard",
];
/// writes.csv (rows: [`crate::record::WriteRecord`], then the node's columns)
pub const WRITES: &[&str] = &[
    "seq",
    "op",
    "size_bytes",
    "start_us",
    "sent_us",
    "reply_us",
    "set_ms",
    "ok",
    "error",
    "host_mem_pct",
    "host_swap_pct",
    "server_rss_bytes",
    "key",
    "server_exec_us",
    "server_latency_event_ms",
    "server_latency_event",
    "server_eventloop_max_us",
    "server_request_bytes",
    "moved",
    "asked",
    "replicated_us",
    "value_type",
    "elements",
    "element_bytes",
    "encoding",
    "freed_by",
    "server_cpu_run_us",
    "server_cpu_wait_us",
    "server_cpu_idle_us",
    "writer_qbuf_free_bytes",
    "node",
    "role",
    "shard",
];
/// stalls.csv (rows: [`crate::analyze::findings::Stall`], then the node's columns)
pub const STALLS: &[&str] = &[
    "start_us",
    "end_us",
    "duration_ms",
    "probes_delayed",
    "write_seq",
    "wall_start",
    "server_command",
    "server_client",
    "server_event",
    "server_key",
    "node",
    "role",
    "shard",
];
/// timeline.csv (rows: [`super::TimelineRow`])
pub const TIMELINE: &[&str] = &[
    "time",
    "unix_us",
    "target",
    "start_us",
    "length_us",
    "probes",
    "errors",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
    "stalls",
    "stall_ms",
    "longest_stall_ms",
    "role",
    "shard",
];
/// summary.csv (rows: [`crate::analyze::findings::WriteSummary`], then the node's columns and
/// [`crate::record::SameShard`])
pub const SUMMARY: &[&str] = &[
    "seq",
    "op",
    "size_bytes",
    "set_ms",
    "hol_delay_ms",
    "stall_ms",
    "probes_delayed",
    "stall_during_send_ms",
    "stall_after_send_ms",
    "host_mem_pct",
    "host_swap_pct",
    "probes_in_window",
    "worst_latency_ms",
    "ok",
    "server_exec_us",
    "server_latency_event_ms",
    "server_eventloop_max_us",
    "server_request_bytes",
    "memory_pressure",
    "host_mem_peak_pct",
    "host_swap_grew_bytes",
    "hol_probe_send_lag_ms",
    "value_type",
    "elements",
    "element_bytes",
    "encoding",
    "freed_by",
    "server_cpu_run_us",
    "server_cpu_wait_us",
    "server_cpu_idle_us",
    "writer_qbuf_free_bytes",
    "node",
    "role",
    "shard",
    "same_shard",
];
/// load_timeline.csv (rows: [`crate::load::stats::LoadSecondRow`])
pub const LOAD_TIMELINE: &[&str] = &[
    "second",
    "requests",
    "bytes",
    "p50_us",
    "p99_us",
    "max_us",
    "errors",
    "server",
    "timeouts",
    "misses",
    "delayed",
    "start_us",
    "writes",
    "client_cpu_pct",
    "client_wait_pct",
];
/// load_writes.csv (rows: [`crate::load::analyze::WriteUnderLoad`])
pub const LOAD_WRITES: &[&str] = &[
    "seq",
    "op",
    "size_bytes",
    "set_ms",
    "start_us",
    "reply_us",
    "ok",
    "requests_in_window",
    "worst_latency_us",
    "delayed_requests",
    "second",
    "seconds",
    "rps_during",
    "rps_around",
    "throughput_lost_pct",
    "requests_lost",
    "unanswered_requests",
];
/// calibration.csv (rows: [`crate::calibrate::CalibrationRow`])
pub const CALIBRATION: &[&str] = &[
    "seq",
    "requested_ms",
    "injected_ms",
    "injected_source",
    "stall_ms",
    "stall_error_ms",
    "worst_delay_ms",
    "delay_error_ms",
    "tolerance_ms",
    "within",
    "error",
];
/// keys.csv (rows: [`crate::keys::report::KeyRow`])
pub const KEYS: &[&str] = &[
    "node",
    "key",
    "type",
    "encoding",
    "elements",
    "memory_bytes",
    "ttl_ms",
    "expires_at",
    "free_effort",
    "delete_ms",
    "unlink_ms",
    "expire_ms",
    "evict_ms",
    "overwrite_ms",
    "read_ms",
    "worst_ms",
    "expire_freed_by",
    "evict_freed_by",
    "basis",
    "provisional",
];
/// replay.csv (rows: [`crate::keys::replay::ReplayRow`])
pub const REPLAY: &[&str] = &[
    "node",
    "key",
    "type",
    "encoding",
    "elements",
    "memory_bytes",
    "built_elements",
    "built_element_bytes",
    "built_encoding",
    "delete_predicted_ms",
    "delete_measured_ms",
    "unlink_predicted_ms",
    "unlink_measured_ms",
    "expire_predicted_ms",
    "expire_measured_ms",
    "expire_freed_by",
    "evict_predicted_ms",
    "evict_measured_ms",
    "read_predicted_ms",
    "read_measured_ms",
    "under_one_interval",
    "probe_interval_ms",
    "run_id",
    "error",
];

/// Every CSV file the tool writes, by file name.
pub const BY_FILE: &[(&str, &[&str])] = &[
    (PROBES_CSV, PROBES),
    (WRITES_CSV, WRITES),
    (STALLS_CSV, STALLS),
    (TIMELINE_CSV, TIMELINE),
    (SUMMARY_CSV, SUMMARY),
    (CALIBRATION_CSV, CALIBRATION),
    (LOAD_TIMELINE_CSV, LOAD_TIMELINE),
    (LOAD_WRITES_CSV, LOAD_WRITES),
    (KEYS_CSV, KEYS),
    (REPLAY_CSV, REPLAY),
];

#[cfg(test)]
pub(crate) mod tests {
    use serde::Serialize;

    use super::*;
    use crate::analyze::findings::{Interval, Stall};
    use crate::calibrate::CalibrationRow;
    use crate::load::analyze::WriteUnderLoad;
    use crate::load::stats::{LoadSecondRow, SecondAgg};
    use crate::output::export::{TimelineRow, csv_bytes, sample};
    use crate::record::{NodeCols, ProbeCmd, ProbeRecord, SameShard, WriteOp, WriteRecord};

    /// The header csv derives from the row's fields.
    pub(crate) fn derived_header<T: Serialize>(row: &T) -> Vec<String> {
        let bytes = csv_bytes(std::slice::from_ref(row), &[]).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        text.lines()
            .next()
            .unwrap()
            .split(',')
            .map(String::from)
            .collect()
    }

    /// A probe's row with every figure zero or empty.
    pub(crate) fn probe_row() -> ProbeRecord {
        ProbeRecord {
            thread: 0,
            seq: 0,
            cmd: ProbeCmd::Ping,
            intended_us: 0,
            sent_us: 0,
            reply_us: None,
            read_us: None,
            latency_us: None,
            ok: true,
            error: None,
        }
    }

    /// Every file's list is the header its rows give, as the run writes them.
    #[test]
    fn every_files_columns_are_its_rows_fields() {
        let node = NodeCols::default();
        let probe = probe_row();
        let write = WriteRecord::timed(1, WriteOp::Set, String::new(), 1, (0, 0, 0));
        let interval = Interval::empty(0, 1, hdrhistogram::Histogram::new(3).unwrap());
        let summary = sample::run_json().analysis.writes[0].clone();
        let calibration = CalibrationRow {
            seq: 1,
            requested_ms: 5.0,
            injected_ms: 5.0,
            injected_source: "requested".into(),
            stall_ms: None,
            stall_error_ms: None,
            worst_delay_ms: None,
            delay_error_ms: None,
            tolerance_ms: 1.0,
            within: false,
            error: None,
        };
        let second = LoadSecondRow::from_agg(0, "all", &SecondAgg::new(), 0, None, None);
        let under_load = WriteUnderLoad {
            seq: 1,
            op: WriteOp::Set,
            size_bytes: 1,
            set_ms: 0.0,
            start_us: 0,
            reply_us: 0,
            ok: true,
            requests_in_window: 0,
            worst_latency_us: None,
            delayed_requests: 0,
            second: 0,
            seconds: 1,
            rps_during: Some(0.0),
            rps_around: None,
            throughput_lost_pct: None,
            requests_lost: None,
            unanswered_requests: 0,
        };
        let derived = [
            (PROBES_CSV, derived_header(&(&probe, &node))),
            (WRITES_CSV, derived_header(&(&write, &node))),
            (STALLS_CSV, derived_header(&(&Stall::default(), &node))),
            (
                TIMELINE_CSV,
                derived_header(&TimelineRow::new(&interval, &node, 0)),
            ),
            (
                SUMMARY_CSV,
                derived_header(&(&summary, &node, &SameShard::default())),
            ),
            (CALIBRATION_CSV, derived_header(&calibration)),
            (LOAD_TIMELINE_CSV, derived_header(&second)),
            (LOAD_WRITES_CSV, derived_header(&under_load)),
            (
                KEYS_CSV,
                derived_header(&crate::keys::report::tests::sample_row()),
            ),
            (
                REPLAY_CSV,
                derived_header(&crate::keys::replay::tests::sample_replay_row()),
            ),
        ];
        assert_eq!(
            derived.iter().map(|(file, _)| *file).collect::<Vec<_>>(),
            BY_FILE.iter().map(|(file, _)| *file).collect::<Vec<_>>()
        );
        for ((file, header), (_, columns)) in derived.iter().zip(BY_FILE) {
            assert_eq!(header, columns, "{file}");
        }
    }
}
