//! `probe load`'s run.json: the load run's servers, populations, options, blocks, the
//! generator's verdict, every write and what the load saw during it. `probe load --format json`
//! prints the same value, so stdout and the file cannot part.

use serde::{Deserialize, Serialize};

use crate::load::analyze::WriteUnderLoad;
use crate::load::keyspace::PopulationMeta;
use crate::load::runner::{GeneratorReport, RecordedLoadOptions};
use crate::load::stats::LoadBlock;
use crate::measure::target::ServerFacts;
use crate::record::WriteRecord;

use super::{HostInfo, Mode, RunStatus, ToolInfo};

/// The whole of a load run's `run.json`, rewritten about every second and at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadRunJson {
    /// Tool name and version.
    pub tool: ToolInfo,
    /// [`Mode::Load`].
    pub mode: Mode,
    /// `running`, `complete`, `interrupted` or `failed`.
    pub status: RunStatus,
    /// Why the run stopped early, when it did.
    pub status_reason: Option<String>,
    /// Unique id of the run.
    pub run_id: String,
    /// The writer's keys (`holprobe:<run_id>:`, removed at the end).
    pub key_prefix: String,
    /// The load data's keys (kept: `probe clean` removes them).
    pub load_key_prefix: String,
    /// Wall-clock time of the run clock's zero, µs since the Unix epoch.
    pub started_unix_us: u64,
    /// Run clock of the load's second 0, µs.
    pub load_start_us: u64,
    /// Run clock when the file was written, µs.
    pub elapsed_us: u64,
    /// Length of the load, seconds.
    pub runtime_s: f64,
    /// The servers loaded, one per `--url` (never a password).
    pub servers: Vec<ServerFacts>,
    /// Each server's population, as it describes itself (`holprobe:load:meta`).
    pub populations: Vec<Option<PopulationMeta>>,
    /// Each server's keys the load picked from (`0..keys`).
    pub keys_used: Vec<u64>,
    /// The machine the tool ran on.
    pub host: HostInfo,
    /// Every option, as the run used them (the writer with its real key prefix).
    pub options: RecordedLoadOptions,
    /// Generator threads.
    pub threads: u16,
    /// One block per server when there are several, then the total (`server = all`).
    pub blocks: Vec<LoadBlock>,
    /// Whether the generator was the limit.
    pub generator: GeneratorReport,
    /// Every writer event.
    pub writes: Vec<WriteRecord>,
    /// What the load saw during each (the rows of load_writes.csv).
    pub writes_under_load: Vec<WriteUnderLoad>,
    /// Warnings.
    pub warnings: Vec<String>,
    /// Connection problems as the generator threads reported them.
    pub problems: Vec<String>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::load::keyspace::ValueSize;
    use crate::load::runner::LoadOptions;
    use crate::load::stats::SecondAgg;
    use crate::output::export::sample;
    use crate::record::WriteOp;

    /// A load run with every field set to something other than its default.
    fn sample_load_run() -> LoadRunJson {
        let probe = sample::run_json();
        let mut agg = SecondAgg::new();
        agg.record_ok(120, 2048, 1000);
        agg.record_ok(90_000, 4096, 1000);
        agg.errors = 2;
        let mut block = LoadBlock::from_agg("127.0.0.1:40001", 4, 12.5, &agg);
        block.role = Some("master, shard 0".into());
        LoadRunJson {
            tool: probe.tool.clone(),
            mode: Mode::Load,
            status: RunStatus::Complete,
            status_reason: Some("stopped".into()),
            run_id: "feedf00d".into(),
            key_prefix: "holprobe:feedf00d:{ab}:".into(),
            load_key_prefix: "holprobe:load:".into(),
            started_unix_us: 1_796_053_782_168_721,
            load_start_us: 250_000,
            elapsed_us: 13_000_000,
            runtime_s: 12.5,
            servers: vec![probe.server.clone()],
            populations: vec![
                Some(PopulationMeta {
                    keys: 5000,
                    value_size: ValueSize {
                        min_bytes: 1024,
                        max_bytes: 4096,
                    },
                    seed: 7,
                    measured_bytes_per_key: Some(2700),
                    updated_unix_s: 1_796_053_000,
                }),
                None,
            ],
            keys_used: vec![5000],
            host: probe.host.clone(),
            options: RecordedLoadOptions {
                plan: LoadOptions {
                    clients: 4,
                    threads: Some(2),
                    duration: Some(Duration::from_millis(12_500)),
                    rate: Some(20_000.5),
                    pipeline: 3,
                    get_weight: 9,
                    set_weight: 1,
                    writer: probe.options.writer.clone(),
                    stall_threshold_us: 2500,
                    timeout_us: 900_000,
                    seed: 99,
                    out: Some("/tmp/holprobe-load".into()),
                },
                writer_hash_tag: Some("ab".into()),
            },
            threads: 2,
            blocks: vec![block.clone(), block],
            generator: GeneratorReport {
                threads: 2,
                clients_per_thread: vec![2, 2],
                thread_cpu_pct: vec![Some(41.5), None],
                busiest_thread_cpu_pct: Some(41.5),
                busiest_second_cpu_pct: Some(60.25),
                thread_wait_pct: vec![Some(1.5), None],
                max_thread_wait_pct: Some(1.5),
                open_loop: true,
                schedule_lag_p50_us: Some(12),
                schedule_lag_p99_us: Some(900),
                late_sends: 3,
                late_sends_pct: Some(0.125),
                unsent: 1,
                reconnects: 2,
                disconnected_at_end: 1,
                samples_dropped: 4,
                saturated: true,
                verdict: "2 thread(s), busiest at 42% CPU".into(),
            },
            writes: sample::write_records(&probe),
            writes_under_load: vec![WriteUnderLoad {
                seq: 1,
                op: WriteOp::Overwrite,
                size_bytes: 1 << 20,
                set_ms: 2.5,
                start_us: 1_000_000,
                reply_us: 1_002_500,
                ok: true,
                requests_in_window: 40,
                worst_latency_us: Some(3100),
                delayed_requests: 2,
                second: 1,
                seconds: 1,
                rps_during: Some(990.5),
                rps_around: Some(1000.25),
                throughput_lost_pct: Some(0.975),
                requests_lost: Some(9.75),
                unanswered_requests: 1,
            }],
            warnings: vec!["a warning".into()],
            problems: vec!["a problem".into()],
        }
    }

    /// Every field written is read back: writing what was read gives the same bytes.
    #[test]
    fn a_load_run_json_reads_back_every_field() {
        let json = serde_json::to_vec_pretty(&sample_load_run()).unwrap();
        let read: LoadRunJson = serde_json::from_slice(&json).unwrap();
        assert_eq!(serde_json::to_vec_pretty(&read).unwrap(), json);
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["mode"], "load");
        assert_eq!(read.mode, Mode::Load);
        assert_eq!(
            read.options.plan.duration,
            Some(Duration::from_millis(12_500))
        );
        assert_eq!(read.blocks[0].role.as_deref(), Some("master, shard 0"));
    }

    /// The random state is written as `random_state` (the file says "seed" nowhere), and a run
    /// recorded before the rename, which says `seed`, still reads.
    #[test]
    fn the_random_state_is_written_by_its_name_and_read_by_either() {
        let text = serde_json::to_string(&sample_load_run()).unwrap();
        assert!(!text.to_lowercase().contains("seed"), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["options"]["random_state"], 99);
        assert_eq!(value["populations"][0]["random_state"], 7);
        assert!(value["options"]["writer"]["random_state"].is_u64());
        let old = text.replace("\"random_state\"", "\"seed\"");
        assert_ne!(old, text);
        let read: LoadRunJson = serde_json::from_str(&old).unwrap();
        assert_eq!(read.options.plan.seed, 99);
        assert_eq!(read.populations[0].as_ref().unwrap().seed, 7);
        assert_eq!(serde_json::to_string(&read).unwrap(), text);
    }

    /// The blocks' `role` is written only on a cluster, and reads back absent.
    #[test]
    fn a_block_without_a_role_reads() {
        let mut run = sample_load_run();
        run.blocks[1].role = None;
        let json = serde_json::to_value(&run).unwrap();
        assert!(json["blocks"][1].get("role").is_none(), "{json}");
        let read: LoadRunJson = serde_json::from_value(json).unwrap();
        assert_eq!(read.blocks[1].role, None);
    }
}
