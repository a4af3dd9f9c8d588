//! `probe keys`' run.json (mode `keys`): the server, the scan's settings, the cost model used and
//! its error, the totals and tables of the report, the settings that would change the picture,
//! and what the scan itself cost other clients. keys.csv beside it has every key above the size
//! floor, one row each.

use serde::{Deserialize, Serialize};

use crate::keys::replay::ReplayRow;
use crate::keys::report::{Advice, KeyRow};
use crate::measure::target::ServerFacts;
use crate::workload::lazyfree::LazyfreeSettings;

use super::{HostInfo, Mode, RunStatus, ToolInfo};

/// The whole of `probe keys`' run.json; also what `--format json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeysRunJson {
    /// Tool name and version.
    pub tool: ToolInfo,
    /// [`Mode::Keys`].
    pub mode: Mode,
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// Why it stopped early.
    pub status_reason: Option<String>,
    /// Wall-clock start (RFC 3339).
    pub started: String,
    /// The machine the scan ran on.
    pub host: HostInfo,
    /// The `--url` server.
    pub server: ServerFacts,
    /// The nodes scanned (`host:port`), and those scanned to the end.
    pub nodes: Vec<String>,
    /// Of them, scanned to the end.
    pub nodes_done: Vec<String>,
    /// The scan's settings.
    pub scan: KeysScanSettings,
    /// The `--url` server's `lazyfree-lazy-*` settings, which the predictions apply.
    pub lazyfree: LazyfreeSettings,
    /// Each scanned node's, where the nodes' differ (a cluster): each key is priced with its
    /// node's. Empty (and absent) when they are alike.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub nodes_lazyfree: std::collections::BTreeMap<String, LazyfreeSettings>,
    /// The cost model.
    pub model: KeysModelUsed,
    /// Keys scanned.
    pub keys_scanned: u64,
    /// Keys whose worst predicted freeze passes the threshold.
    pub keys_over_threshold: u64,
    /// Their predicted freezes together, ms.
    pub sum_over_threshold_ms: f64,
    /// Keys with a TTL.
    pub keys_with_ttl: u64,
    /// The worst keys, worst first.
    pub top: Vec<KeyRow>,
    /// Keys whose expiry will freeze the server past the threshold, soonest first.
    pub expiring: Vec<KeyRow>,
    /// How many there are (`expiring` keeps the first 1000).
    pub expiring_count: u64,
    /// What would change the picture.
    pub advice: Vec<Advice>,
    /// What the scan itself cost other clients.
    pub scan_cost: ScanCost,
    /// Warnings (refused commands, a model of another version).
    pub warnings: Vec<String>,
    /// `--replay`: the worst keys' shapes rebuilt on a server of the tool's own, predicted
    /// against measured (replay.csv's rows; absent without `--replay`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay: Vec<ReplayRow>,
}

/// The scan's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeysScanSettings {
    /// `--match`.
    pub pattern: Option<String>,
    /// `--type`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// `--count`: the most keys per SCAN.
    pub count: u64,
    /// `--stall-threshold`, ms.
    pub threshold_ms: f64,
    /// `--top`.
    pub top: usize,
    /// `--size-floor`, bytes.
    pub size_floor_bytes: u64,
    /// keys.csv rows written.
    pub rows_written: u64,
}

/// The model a scan used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeysModelUsed {
    /// The server it was fitted on.
    pub server: String,
    /// `shipped` (data/models/, built in) or the `--model` file's path.
    pub from: String,
    /// It is not of the scanned server's version (the nearest shipped).
    pub nearest: bool,
    /// Some of its entries are provisional (the server's own figures, not the tool's probes).
    pub provisional: bool,
    /// The worst median leave-one-out error over its entries, %.
    pub worst_median_error_pct: Option<f64>,
    /// The worst single leave-one-out error over its entries, %.
    pub worst_error_pct: Option<f64>,
    /// The median over its entries of their median leave-one-out errors, %.
    #[serde(default)]
    pub median_error_pct: Option<f64>,
    /// The entry with the worst median error (`set hashtable unlink (background)`).
    #[serde(default)]
    pub worst_entry: Option<String>,
    /// That entry's worst miss, ms.
    #[serde(default)]
    pub worst_entry_max_ms: Option<f64>,
    /// Its removals' predictions against sizes recorded in later sittings, one check each
    /// (shipped models).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub later_checks: Vec<crate::keys::model::LaterCheck>,
    /// How its figures were obtained.
    pub measured_how: Vec<String>,
}

/// What the scan cost other clients, from the probes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanCost {
    /// The scan's wall time, s.
    pub wall_s: f64,
    /// SCAN batches.
    pub batches: u64,
    /// Times the pacing slowed down.
    pub backoffs: u64,
    /// The smallest COUNT it went down to.
    pub smallest_count: u64,
    /// Probes answered during the scan.
    pub probes_during: u64,
    /// The worst probe latency during the scan, ms.
    pub worst_probe_ms_during: Option<f64>,
    /// The p99 of the worst quarter-second during the scan (the highest of its 250-ms
    /// intervals' p99s), ms: not the scan's p99, which a busy moment can put far below it.
    pub p99_probe_ms_during: Option<f64>,
    /// The worst probe latency of the quiet lead-in before the scan, ms.
    pub worst_probe_ms_before: Option<f64>,
    /// Stall episodes (past the threshold) during the scan, of those the run kept (at most
    /// [`crate::session::KEEP_STALLS`], the longest kept): a lower bound where
    /// `stalls_during_at_least` says so.
    pub stalls_during: u64,
    /// The run found more stalls than it kept, so `stalls_during` may count fewer than there were.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stalls_during_at_least: bool,
    /// The longest of them, ms.
    pub longest_stall_ms: Option<f64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A keys document of one node, as the tests of its renderings use it.
    pub(crate) fn sample_doc() -> KeysRunJson {
        KeysRunJson {
            tool: ToolInfo::default(),
            mode: Mode::Keys,
            run_id: "abcd".into(),
            status: RunStatus::Interrupted,
            status_reason: Some("interrupted".into()),
            started: "2026-12-01T00:00:00Z".into(),
            host: HostInfo {
                hostname: None,
                cpus: 2,
                memory_total_bytes: 1,
                swap_total_bytes: 0,
                os: None,
                cpu_model: None,
            },
            server: ServerFacts::default(),
            nodes: vec!["127.0.0.1:6379".into()],
            nodes_done: vec![],
            scan: KeysScanSettings {
                pattern: Some("a*".into()),
                kind: None,
                count: 100,
                threshold_ms: 1.0,
                top: 10,
                size_floor_bytes: 0,
                rows_written: 3,
            },
            lazyfree: LazyfreeSettings::default(),
            nodes_lazyfree: Default::default(),
            model: KeysModelUsed {
                server: "redis 7.0.15".into(),
                from: "shipped".into(),
                nearest: false,
                provisional: true,
                worst_median_error_pct: Some(3.0),
                worst_error_pct: Some(9.0),
                median_error_pct: Some(2.0),
                worst_entry: Some("hash hashtable delete (main)".into()),
                worst_entry_max_ms: Some(1.5),
                later_checks: vec![crate::keys::model::LaterCheck {
                    how: "data/unseen".into(),
                    entries: 45,
                    relative: 20,
                    median_abs_pct: Some(32.0),
                    median_measured_over_predicted: Some(1.4),
                    past_floor: 2,
                }],
                measured_how: vec![],
            },
            keys_scanned: 3,
            keys_over_threshold: 1,
            sum_over_threshold_ms: 4.5,
            keys_with_ttl: 0,
            top: vec![],
            expiring: vec![],
            expiring_count: 0,
            advice: vec![],
            scan_cost: ScanCost {
                wall_s: 1.0,
                batches: 1,
                backoffs: 0,
                smallest_count: 100,
                probes_during: 10,
                worst_probe_ms_during: Some(0.3),
                p99_probe_ms_during: Some(0.2),
                worst_probe_ms_before: Some(0.2),
                stalls_during: 0,
                stalls_during_at_least: false,
                longest_stall_ms: None,
            },
            warnings: vec![],
            replay: vec![crate::keys::replay::tests::sample_replay_row()],
        }
    }

    #[test]
    fn keys_run_json_round_trips_and_says_its_mode() {
        let doc = sample_doc();
        let text = serde_json::to_string(&doc).unwrap();
        assert!(text.contains("\"mode\":\"keys\""));
        let back: KeysRunJson = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }
}
