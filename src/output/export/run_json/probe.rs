//! The main job's and observe mode's `run.json` (also the run.json of `probe calibrate`, whose
//! own findings are in calibration.json): everything needed to read a run later — tool and
//! server versions, host, every option, the start time as Unix µs, the status, and the findings.
//!
//! [`RunJson`] is the one type of the file: the run writes it and `probe compare` reads it back,
//! so the two cannot part. Fields added after the first release carry `#[serde(default)]` (here
//! and in the types inside), so runs recorded by older builds still read; a golden-file test
//! pins the bytes written.

use serde::{Deserialize, Serialize};

use crate::analyze::correlate::Analysis;
use crate::analyze::findings::{Baseline, Stall, WriteSummary};
use crate::measure::probe::ProbeEngineInfo;
use crate::measure::target::ServerFacts;
use crate::measure::topology::Topology;
use crate::options::RunOptions;
use crate::record::NodeCols;

use super::{HostInfo, Mode, RunStatus, ToolInfo};

/// The whole of `run.json`: written as the run goes ([`crate::session`]) and read back by
/// `probe compare` ([`crate::compare::runs`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunJson {
    /// Tool name and version.
    pub tool: ToolInfo,
    /// [`Mode::Probe`]: what wrote the file (absent in runs recorded before it was said, all of
    /// them probe runs: `probe load`'s run.json has always said `load`).
    #[serde(default = "Mode::probe")]
    pub mode: Mode,
    /// `running`, `complete`, `interrupted` or `failed`.
    pub status: RunStatus,
    /// Why the run stopped early, when it did.
    pub status_reason: Option<String>,
    /// Unique id of the run; its keys live under `holprobe:<run_id>:`.
    pub run_id: String,
    /// The run's key prefix.
    pub key_prefix: String,
    /// Wall-clock time of the run's clock zero, µs since the Unix epoch: add it to any `*_us`
    /// column to line the exports up with other logs.
    pub started_unix_us: u64,
    /// Length of the run, µs.
    pub elapsed_us: u64,
    /// The server measured (never a password).
    pub server: ServerFacts,
    /// The machine the tool ran on.
    pub host: HostInfo,
    /// Every option of the run, as the command line gave it.
    pub options: RunOptions<crate::measure::writer::RecordedWriter>,
    /// How the probes were taken: the engine's version (runs of different engines have
    /// `hol_delay_ms` that are not comparable) and the clock of `reply_us`. Always written;
    /// empty only in runs recorded by engine 1, before it was.
    #[serde(default)]
    pub probe_engine: Option<ProbeEngineInfo>,
    /// The rule the per-write figures were analysed by
    /// ([`crate::analyze::correlate::ANALYSIS_VERSION`]): 2 counts a probe meant to go out
    /// before a write's start from that start; empty in runs analysed before it was written
    /// (rule 1: from its intended send).
    #[serde(default)]
    pub analysis_version: Option<u32>,
    /// Probe records the collector could not keep up with (expected 0).
    pub probes_dropped: u64,
    /// Probe records kept.
    pub probes_recorded: u64,
    /// Stall episodes found (all of them are in stalls.csv; `stalls` below keeps at most
    /// 1,000: the longest, and every one tied to a write). Always written; empty in runs recorded before it was, which kept
    /// every stall in `stalls`.
    #[serde(default)]
    pub stalls_found: Option<u64>,
    /// Their total length, ms (always written; empty in runs recorded before it was).
    #[serde(default)]
    pub stall_ms_total: Option<f64>,
    /// Client hiccups found (`client_hiccups` keeps at most 1,000, the longest; always written, empty in
    /// runs recorded before it was).
    #[serde(default)]
    pub client_hiccups_found: Option<u64>,
    /// Baseline, stall episodes, client hiccups and per-write summary, of the server the
    /// writes went to (the URL's).
    #[serde(flatten)]
    pub analysis: Analysis,
    /// Which node `analysis` is of (empty in runs recorded before it was said).
    #[serde(default)]
    pub node: Option<NodeCols>,
    /// What every other node probed saw (replicas, the other shards of a cluster); absent with
    /// one server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeFindings>,
    /// The deployment at the start, when more than one server was probed: every shard, its
    /// slots, master and replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// Nodes that went down or came back during the run (a failover, a restart), in time order;
    /// absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_events: Vec<NodeEvent>,
    /// Warnings printed during the run.
    pub warnings: Vec<String>,
    /// The run's closing notes, as the terminal prints them after the table: the freezes that
    /// UNLINK or a `lazyfree-lazy-*` setting would have moved off the main thread (or, for a
    /// string, would not), the write whose server was busy far longer than others waited at
    /// once. Absent when there are none, and in runs recorded before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Something that happened to a node of a run over several, in run.json's `node_events`: its
/// probes lost it or have it back, or the cluster's topology changed (a failover).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeEvent {
    /// The node (`host:port` as the topology reports it).
    pub node: String,
    /// When, µs since the run's start.
    pub at_us: u64,
    /// The same, RFC 3339 UTC with µs.
    pub wall: String,
    /// `down`, `back`, `topology`, or `joined` (probed from `at_us` on).
    pub event: String,
    /// Why it is down, or what changed (`replica -> master`).
    pub detail: Option<String>,
}

/// One more node's findings, in run.json's `nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeFindings {
    /// Its address, role and shard.
    #[serde(flatten)]
    pub node: NodeCols,
    /// It holds the written key's slot.
    pub same_shard: bool,
    /// Latency of its probes outside writes.
    pub baseline: Baseline,
    /// One row per write: what this node's other clients saw.
    pub summary: Vec<WriteSummary>,
    /// Its stall episodes (every one in stalls.csv).
    pub stalls_found: u64,
    /// Their total length, ms.
    pub stall_ms_total: f64,
    /// Its client hiccups.
    pub client_hiccups_found: u64,
    /// Its longest stalls (at most 20), in time order.
    pub longest_stalls: Vec<Stall>,
    /// When it joined the run, µs since the run's start (its probes were due from then on):
    /// a node that came online or into the topology during the run; absent for a node probed
    /// from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined_us: Option<u64>,
}

/// A run with every field set to something other than its default, for the tests of the
/// writer and of the readers.
#[cfg(test)]
pub(crate) mod sample {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::analyze::findings::{Baseline, Stall, WriteSummary};
    use crate::analyze::stats::{SizeModel, SizeSpread, Spread};
    use crate::measure::probe::ProbeEngineInfo;
    use crate::measure::writer::{CustomCommand, WriterPlan};
    use crate::options::ProbesExport;
    use crate::record::{ProbeCmd, WriteOp};

    /// The run.
    pub(crate) fn run_json() -> RunJson {
        let server = ServerFacts {
            flavor: "valkey".into(),
            version: "9.1.0".into(),
            address: "127.0.0.1:40001".into(),
            embedded: true,
            binary: Some("/usr/bin/valkey-server".into()),
            server_args: vec!["io-threads 2".into()],
            maxmemory_bytes: Some(1 << 30),
            proto_max_bulk_len_bytes: Some(512 << 20),
            save: Some("3600 1".into()),
            appendonly: Some("yes".into()),
            local: true,
            role: Some("master".into()),
            client_query_buffer_limit_bytes: Some(1 << 30),
            lazyfree: [
                ("lazyfree-lazy-eviction", "yes"),
                ("lazyfree-lazy-expire", "yes"),
                ("lazyfree-lazy-server-del", "yes"),
                ("lazyfree-lazy-user-del", "yes"),
                ("lazyfree-lazy-user-flush", "yes"),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
            io_threads: Some(1),
            mem_allocator: Some("jemalloc-5.3.0".into()),
            local_pid: None,
            run_id: None,
            no_unlink: false,
        };
        let host = HostInfo {
            hostname: Some("bench-host".into()),
            cpus: 8,
            memory_total_bytes: 16 << 30,
            swap_total_bytes: 2 << 30,
            os: Some("Linux (Debian GNU/Linux 12) (kernel 6.1.0)".into()),
            cpu_model: Some("AMD EPYC".into()),
        };
        let options = RunOptions {
            probe_threads: 3,
            probe_rate: 750.5,
            probe_cmd: ProbeCmd::Get,
            writer: Some(WriterPlan {
                sizes: vec![1 << 20, 3 << 20],
                repeat: 4,
                gap: Duration::from_millis(250),
                overwrite: true,
                keep: true,
                commands: vec![CustomCommand::removing(["UNLINK", "{key}"])],
                ..WriterPlan::default()
            }),
            duration: Some(Duration::from_millis(90_500)),
            stall_threshold_us: 2500,
            seed: 99,
            realtime: true,
            out: Some("/tmp/holprobe-golden".into()),
            tune_server: true,
            force_memory: true,
            predict_bytes: vec![1 << 30],
            probes_export: ProbesExport::Delayed,
            metrics_addr: Some("127.0.0.1:9100".into()),
            interval: Duration::from_millis(1500),
        };
        let stall = Stall {
            start_us: 1_500_000,
            end_us: 1_512_345,
            duration_ms: 12.345,
            probes_delayed: 7,
            write_seq: Some(2),
            wall_start: Some("2026-12-01T10:00:01.500000Z".into()),
            server_command: Some("SET holprobe:feedf00d:1 ...".into()),
            server_client: Some("127.0.0.1:50000 holprobe-writer".into()),
            server_event: Some("command 12ms".into()),
            server_key: Some("expired holprobe:feedf00d:h".into()),
        };
        let write = |seq: u32, op: WriteOp, size_bytes: u64, set_ms: f64| WriteSummary {
            seq,
            op,
            size_bytes,
            set_ms,
            hol_delay_ms: Some(set_ms * 0.75),
            stall_ms: 4.25,
            probes_delayed: 3,
            stall_during_send_ms: 1.5,
            stall_after_send_ms: 2.75,
            host_mem_pct: 41.5,
            host_swap_pct: 0.5,
            probes_in_window: 12,
            worst_latency_ms: Some(set_ms),
            ok: seq != 3,
            server_exec_us: Some(900),
            server_latency_event_ms: Some(11),
            server_eventloop_max_us: Some(12_000),
            server_request_bytes: Some(size_bytes + 40),
            memory_pressure: seq == 2,
            host_mem_peak_pct: 43.25,
            host_swap_grew_bytes: 4096,
            hol_probe_send_lag_ms: Some(0.125),
            server_cpu_run_us: Some(9_000),
            server_cpu_wait_us: Some(2_500),
            server_cpu_idle_us: Some(1_200),
            writer_qbuf_free_bytes: Some(20_448),
            ..Default::default()
        };
        let spread = |median: f64| Spread {
            n: 5,
            median,
            min: median - 1.0,
            max: median + 1.0,
            ci95_low: Some(median - 0.5),
            ci95_high: Some(median + 0.5),
            ci_coverage: Some(0.9375),
        };
        let analysis = Analysis {
            baseline: Baseline {
                probes: 1000,
                p50_us: 31,
                p99_us: 250,
                max_us: 9000,
                probe_errors: 2,
                send_lag_p50_us: 14,
                send_lag_p99_us: 900,
                send_lag_max_us: 8000,
            },
            stalls: vec![stall.clone()],
            client_hiccups: vec![Stall {
                write_seq: None,
                wall_start: None,
                server_command: None,
                server_client: None,
                server_event: None,
                ..stall.clone()
            }],
            writes: vec![
                write(1, WriteOp::Set, 1 << 20, 2.5),
                write(2, WriteOp::Overwrite, 3 << 20, 7.25),
                write(3, WriteOp::Delete, 3 << 20, 0.5),
            ],
            by_size: vec![SizeSpread {
                op: WriteOp::Set,
                size_bytes: 1 << 20,
                writes: 5,
                set_ms: spread(2.5),
                hol_delay_ms: Some(spread(1.875)),
                elements: None,
            }],
            size_model: Some(SizeModel {
                hol_ms_per_mib: 0.625,
                hol_intercept_ms: 0.25,
                hol_r2: Some(0.98),
                set_ms_per_mib: 2.375,
                set_intercept_ms: 0.125,
                set_r2: None,
                writes: 10,
                min_size_bytes: 1 << 20,
                max_size_bytes: 3 << 20,
            }),
        };
        RunJson {
            // Not the crate's version: the golden files must not change with a release.
            tool: ToolInfo {
                name: "holprobe".into(),
                version: "0.0.0-golden".into(),
            },
            mode: Mode::Probe,
            status: RunStatus::Interrupted,
            status_reason: Some("interrupted by SIGTERM".into()),
            run_id: "feedf00d".into(),
            key_prefix: "holprobe:feedf00d:".into(),
            started_unix_us: 1_796_053_782_168_721,
            elapsed_us: 54_356_608,
            server,
            host,
            options: options.recorded("holprobe:feedf00d:"),
            analysis_version: Some(crate::analyze::correlate::ANALYSIS_VERSION),
            probe_engine: Some(ProbeEngineInfo {
                version: 2,
                mode: "pipelined".into(),
                reply_clock: "mixed".into(),
                replies_kernel_stamped: 900,
                replies_read_stamped: 98,
                max_outstanding: 26,
                unanswered_at_stop: 2,
                reconnects: 1,
            }),
            probes_dropped: 3,
            probes_recorded: 1001,
            stalls_found: Some(11),
            stall_ms_total: Some(123.5),
            client_hiccups_found: Some(1),
            analysis,
            node: Some(NodeCols {
                node: "127.0.0.1:6379".into(),
                role: crate::record::NodeRole::Master,
                shard: None,
            }),
            nodes: Vec::new(),
            topology: None,
            node_events: Vec::new(),
            warnings: vec!["a warning".into()],
            notes: vec![
                "128M string set kept the server's main thread busy 110.1ms in its window, others 5.1ms".into(),
                "  at most at once (net of its quiet pace): its work came in pieces (1 of 3 writes so)".into(),
            ],
        }
    }

    /// The writes.csv rows of the run's writes (the third failed, with an error).
    pub(crate) fn write_records(run: &RunJson) -> Vec<crate::record::WriteRecord> {
        run.analysis
            .writes
            .iter()
            .map(|write| crate::record::WriteRecord {
                seq: write.seq,
                op: write.op,
                size_bytes: write.size_bytes,
                start_us: u64::from(write.seq) * 1_000_000,
                sent_us: u64::from(write.seq) * 1_000_000 + 500,
                reply_us: u64::from(write.seq) * 1_000_000 + 900,
                set_ms: write.set_ms,
                ok: write.ok,
                error: (!write.ok).then(|| "OOM command not allowed".into()),
                host_mem_pct: write.host_mem_pct,
                host_swap_pct: write.host_swap_pct,
                server_rss_bytes: Some(write.size_bytes * 2),
                key: format!("{}{}", run.key_prefix, write.seq),
                server_exec_us: write.server_exec_us,
                server_latency_event_ms: write.server_latency_event_ms,
                server_latency_event: Some("command".into()),
                server_eventloop_max_us: write.server_eventloop_max_us,
                server_request_bytes: write.server_request_bytes,
                moved: 0,
                asked: 0,
                replicated_us: None,
                sent_to: None,
                ..Default::default()
            })
            .collect()
    }

    /// Removes `key` from the object at `pointer` (and from every element, for an array).
    pub(crate) fn remove(json: &mut Value, pointer: &str, key: &str) {
        match json.pointer_mut(pointer) {
            Some(Value::Object(map)) => {
                map.remove(key).unwrap_or_else(|| panic!("{pointer}/{key}"));
            }
            Some(Value::Array(items)) => {
                for item in items {
                    item.as_object_mut().unwrap().remove(key).unwrap();
                }
            }
            _ => panic!("{pointer}"),
        }
    }

    /// The fields run.json gained after the first release, as (object, key); stalls and
    /// hiccups gained the same four columns.
    pub(crate) const ADDED_LATER: &[(&str, &str)] = &[
        ("", "mode"),
        ("", "probe_engine"),
        ("", "stalls_found"),
        ("", "stall_ms_total"),
        ("", "client_hiccups_found"),
        ("", "by_size"),
        ("", "size_model"),
        ("", "notes"),
        ("/server", "role"),
        ("/options", "realtime"),
        ("/options", "tune_server"),
        ("/options", "force_memory"),
        ("/options", "predict_bytes"),
        ("/options", "probes"),
        ("/options", "metrics_addr"),
        ("/options", "interval_ms"),
        ("/options/writer", "commands"),
        ("/stalls", "wall_start"),
        ("/stalls", "server_command"),
        ("/stalls", "server_client"),
        ("/stalls", "server_event"),
        ("/client_hiccups", "wall_start"),
        ("/client_hiccups", "server_command"),
        ("/client_hiccups", "server_client"),
        ("/client_hiccups", "server_event"),
        ("/summary", "server_exec_us"),
        ("/summary", "server_latency_event_ms"),
        ("/summary", "server_eventloop_max_us"),
        ("/summary", "server_request_bytes"),
        ("/summary", "memory_pressure"),
        ("/summary", "host_mem_peak_pct"),
        ("/summary", "host_swap_grew_bytes"),
        ("/summary", "hol_probe_send_lag_ms"),
        ("/server", "client_query_buffer_limit_bytes"),
        ("/server", "lazyfree"),
        ("/server", "io_threads"),
        ("/server", "mem_allocator"),
        ("/summary", "value_type"),
        ("/summary", "elements"),
        ("/summary", "element_bytes"),
        ("/summary", "encoding"),
        ("/summary", "freed_by"),
        ("/summary", "server_cpu_run_us"),
        ("/summary", "server_cpu_wait_us"),
        ("/summary", "server_cpu_idle_us"),
        ("/summary", "writer_qbuf_free_bytes"),
    ];
}

#[cfg(test)]
mod tests {
    use super::sample::{ADDED_LATER, remove};
    use super::*;
    use crate::output::export::{columns, csv_bytes};

    /// The bytes the writer gives for the sample run. The golden files were written by the
    /// borrowed, Serialize-only `RunJson` this type replaced: reading must not change writing.
    /// When a change of the files is meant, `HOLPROBE_WRITE_GOLDEN=1` rewrites them.
    #[test]
    fn exports_keep_their_bytes() {
        let run_json = sample::run_json();
        let analysis = &run_json.analysis;
        let json = serde_json::to_vec_pretty(&run_json).unwrap();
        // Rows as the session writes them: each ends with its node's columns.
        let node = run_json.node.clone().unwrap();
        let same = crate::record::SameShard { same_shard: true };
        let summary_rows: Vec<_> = analysis.writes.iter().map(|w| (w, &node, &same)).collect();
        let summary = csv_bytes(&summary_rows, columns::SUMMARY).unwrap();
        let stall_rows: Vec<_> = analysis.stalls.iter().map(|s| (s, &node)).collect();
        let stalls = csv_bytes(&stall_rows, columns::STALLS).unwrap();
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        if std::env::var_os("HOLPROBE_WRITE_GOLDEN").is_some() {
            std::fs::create_dir_all(&golden).unwrap();
            std::fs::write(golden.join("run.json"), &json).unwrap();
            std::fs::write(golden.join("summary.csv"), &summary).unwrap();
            std::fs::write(golden.join("stalls.csv"), &stalls).unwrap();
        }
        let read = |name: &str| std::fs::read(golden.join(name)).unwrap();
        assert!(json == read("run.json"), "run.json bytes changed");
        assert!(summary == read("summary.csv"), "summary.csv bytes changed");
        assert!(stalls == read("stalls.csv"), "stalls.csv bytes changed");
    }

    /// The random state is written as `random_state` (run.json says "seed" nowhere), and a run
    /// recorded before the rename, which says `seed` (as those in data/ do), still reads.
    #[test]
    fn the_random_state_is_written_by_its_name_and_read_by_either() {
        let text = serde_json::to_string(&sample::run_json()).unwrap();
        assert!(!text.to_lowercase().contains("seed"), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["options"]["random_state"], 99);
        assert_eq!(value["options"]["writer"]["random_state"], 99);
        let old = text.replace("\"random_state\"", "\"seed\"");
        assert_ne!(old, text);
        let read: RunJson = serde_json::from_str(&old).unwrap();
        assert_eq!(read.options.seed, 99);
        assert_eq!(read.options.writer.as_ref().unwrap().seed, 99);
        assert_eq!(serde_json::to_string(&read).unwrap(), text);
    }

    /// Every field written is read back: writing what was read gives the same bytes.
    #[test]
    fn run_json_reads_back_every_field() {
        let written = sample::run_json();
        let json = serde_json::to_vec_pretty(&written).unwrap();
        let read: RunJson = serde_json::from_slice(&json).unwrap();
        assert_eq!(serde_json::to_vec_pretty(&read).unwrap(), json);
        assert_eq!(read.server, written.server);
        assert_eq!(read.host, written.host);
        assert_eq!(read.analysis, written.analysis);
        assert_eq!(read.probe_engine, written.probe_engine);
        assert_eq!(read.options.interval, written.options.interval);
        assert_eq!(read.options.duration, written.options.duration);
        let (plan, written_plan) = (
            read.options.writer.unwrap(),
            written.options.writer.unwrap(),
        );
        assert_eq!(plan.gap, written_plan.gap);
        assert_eq!(plan.commands, written_plan.commands);
    }

    /// A run.json of the first release's shape (none of the fields added since) still reads,
    /// each later field at the value a run of that time had.
    #[test]
    fn the_first_releases_run_json_reads() {
        let mut json = serde_json::to_value(sample::run_json()).unwrap();
        for (pointer, key) in ADDED_LATER {
            remove(&mut json, pointer, key);
        }
        let read: RunJson = serde_json::from_value(json).unwrap();
        assert_eq!(read.mode, Mode::Probe);
        assert_eq!(read.probe_engine, None);
        assert_eq!(read.stalls_found, None);
        assert_eq!(read.stall_ms_total, None);
        assert_eq!(read.client_hiccups_found, None);
        assert!(read.analysis.by_size.is_empty() && read.analysis.size_model.is_none());
        assert_eq!(read.server.role, None);
        let options = &read.options;
        assert!(!options.realtime && !options.tune_server && !options.force_memory);
        assert!(options.predict_bytes.is_empty() && options.metrics_addr.is_none());
        assert_eq!(options.probes_export, crate::options::ProbesExport::All);
        assert_eq!(options.interval, crate::options::DEFAULT_INTERVAL);
        assert!(options.writer.as_ref().unwrap().commands.is_empty());
        let stall = &read.analysis.stalls[0];
        assert_eq!(stall.wall_start, None);
        assert_eq!(stall.server_command, None);
        let write = &read.analysis.writes[1];
        assert!(!write.memory_pressure && write.host_mem_peak_pct == 0.0);
        assert_eq!(write.hol_probe_send_lag_ms, None);
        assert!(read.server.lazyfree.is_empty() && read.server.io_threads.is_none());
        assert!(read.server.mem_allocator.is_none());
        assert!(write.value_type.is_none() && write.freed_by.is_none());
        assert_eq!(write.server_cpu_wait_us, None);
        assert_eq!(write.server_cpu_run_us, None);
        // What the first release had is still read.
        assert_eq!(write.set_ms, 7.25);
        assert_eq!(read.options.probe_threads, 3);
    }

    /// The first engine-2 runs have no `probe_engine.reconnects`.
    #[test]
    fn the_first_engine_2_runs_read() {
        let mut json = serde_json::to_value(sample::run_json()).unwrap();
        remove(&mut json, "/probe_engine", "reconnects");
        let read: RunJson = serde_json::from_value(json).unwrap();
        assert_eq!(
            read.probe_engine.map(|e| (e.version, e.reconnects)),
            Some((2, 0))
        );
    }
}
