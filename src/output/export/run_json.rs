//! `run.json`: everything needed to read a run later — tool and server versions, host, every
//! option, the start time as Unix µs, the status, and the findings.

use serde::{Deserialize, Serialize};

use crate::analyze::correlate::Analysis;
use crate::measure::target::ServerFacts;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Still measuring (the file is a checkpoint).
    Running,
    /// Ran its whole plan.
    Complete,
    /// Stopped by Ctrl-C or SIGTERM.
    Interrupted,
    /// Stopped by an error (server gone, connection lost).
    Failed,
}

/// The tool that made the run.
#[derive(Debug, Clone, Serialize)]
pub struct ToolInfo {
    /// `holprobe`.
    pub name: &'static str,
    /// Crate version.
    pub version: &'static str,
}

impl Default for ToolInfo {
    fn default() -> Self {
        ToolInfo {
            name: env!("CARGO_PKG_NAME"),
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The machine the tool ran on.
#[derive(Debug, Clone, Serialize)]
pub struct HostInfo {
    /// Host name.
    pub hostname: Option<String>,
    /// Logical CPUs.
    pub cpus: usize,
    /// Physical memory, bytes.
    pub memory_total_bytes: u64,
    /// Swap, bytes.
    pub swap_total_bytes: u64,
    /// Operating system and kernel, as sysinfo reports them.
    pub os: Option<String>,
}

impl HostInfo {
    /// Reads the host now.
    pub fn read() -> HostInfo {
        let memory = crate::measure::hostmem::HostMemorySampler::new().sample();
        HostInfo {
            hostname: sysinfo::System::host_name().ok(),
            cpus: crate::measure::hostmem::logical_cpus(),
            memory_total_bytes: memory.total_bytes,
            swap_total_bytes: memory.swap_total_bytes,
            os: sysinfo::System::long_os_version().ok().map(|os| {
                match sysinfo::System::kernel_version() {
                    Ok(kernel) => format!("{os} (kernel {kernel})"),
                    Err(_) => os,
                }
            }),
        }
    }
}

/// The whole of `run.json`. `options` is the run's validated plan, serialized as the CLI gave it.
#[derive(Debug, Clone, Serialize)]
pub struct RunJson<'a, O: Serialize> {
    /// Tool name and version.
    pub tool: ToolInfo,
    /// `running`, `complete`, `interrupted` or `failed`.
    pub status: RunStatus,
    /// Why the run stopped early, when it did.
    pub status_reason: Option<String>,
    /// Unique id of the run; its keys live under `holprobe:<run_id>:`.
    pub run_id: &'a str,
    /// The run's key prefix.
    pub key_prefix: &'a str,
    /// Wall-clock time of the run's clock zero, µs since the Unix epoch: add it to any `*_us`
    /// column to line the exports up with other logs.
    pub started_unix_us: u64,
    /// Length of the run, µs.
    pub elapsed_us: u64,
    /// The server measured (never a password).
    pub server: &'a ServerFacts,
    /// The machine the tool ran on.
    pub host: &'a HostInfo,
    /// Every option of the run.
    pub options: &'a O,
    /// How the probes were taken: the engine's version (runs of different engines have
    /// `hol_delay_ms` that are not comparable) and the clock of `reply_us`.
    pub probe_engine: crate::measure::probe::ProbeEngineInfo,
    /// Probe records the collector could not keep up with (expected 0).
    pub probes_dropped: u64,
    /// Probe records kept.
    pub probes_recorded: u64,
    /// Stall episodes found (all of them are in stalls.csv; `stalls` below keeps at most
    /// 1,000: the longest, and every one tied to a write).
    pub stalls_found: u64,
    /// Their total length, ms.
    pub stall_ms_total: f64,
    /// Client hiccups found (`client_hiccups` keeps at most 1,000, the longest).
    pub client_hiccups_found: u64,
    /// Baseline, stall episodes, client hiccups and per-write summary.
    #[serde(flatten)]
    pub analysis: &'a Analysis,
    /// Warnings printed during the run.
    pub warnings: &'a [String],
}
