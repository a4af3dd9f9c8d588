//! The JSON files of a run, one type per mode, each written by the command and read back
//! through the same type, so the two cannot part: [`RunJson`] (`probe` and observe mode's
//! run.json, which `probe compare` reads), [`LoadRunJson`] (`probe load`'s run.json, and what
//! `probe load --format json` prints) and [`CalibrationJson`] (`probe calibrate`'s
//! calibration.json). Each says its [`Mode`], so a reader tells one from another by it before
//! reading the rest.

mod calibrate;
pub(crate) mod keys;
mod load;
mod probe;

use serde::{Deserialize, Serialize};

pub use calibrate::CalibrationJson;
pub use keys::{KeysModelUsed, KeysRunJson, KeysScanSettings, ScanCost};
pub use load::LoadRunJson;
#[cfg(test)]
pub(crate) use probe::sample;
pub use probe::{NodeEvent, NodeFindings, RunJson};

/// The command that wrote a run's JSON file: its `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The main job or observe mode ([`RunJson`]).
    Probe,
    /// `probe load` ([`LoadRunJson`]).
    Load,
    /// `probe calibrate` ([`CalibrationJson`]).
    Calibrate,
    /// `probe keys` ([`KeysRunJson`]).
    Keys,
}

impl Mode {
    /// The mode of a run.json that does not say (every one recorded before `mode` was written
    /// by the main job, observe mode and calibrate: `probe load` has always written it).
    pub fn probe() -> Mode {
        Mode::Probe
    }

    /// The mode named `name` in a file, if this version knows it.
    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::Probe, Mode::Load, Mode::Calibrate, Mode::Keys]
            .into_iter()
            .find(|mode| mode.name() == name)
    }

    /// Lower-case name as in the files: the subcommand (`probe load`), `probe` for the main job.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Probe => "probe",
            Mode::Load => "load",
            Mode::Calibrate => "calibrate",
            Mode::Keys => "keys",
        }
    }
}

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

impl RunStatus {
    /// Lower-case name as in run.json.
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

/// The tool that made the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// `holprobe`.
    pub name: String,
    /// Crate version.
    pub version: String,
}

impl Default for ToolInfo {
    fn default() -> Self {
        ToolInfo {
            name: env!("CARGO_PKG_NAME").into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// The machine the tool ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The CPU's model, as sysinfo reports the first CPU's brand: cloud machines of one name
    /// can differ in it (absent in runs recorded before it was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
}

/// The first CPU's brand, where sysinfo reads one.
fn cpu_model() -> Option<String> {
    use sysinfo::{CpuRefreshKind, RefreshKind, System};
    let system =
        System::new_with_specifics(RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing()))
            .ok()?;
    let brand = system.cpus().first()?.brand().trim();
    (!brand.is_empty()).then(|| brand.to_string())
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
            cpu_model: cpu_model(),
        }
    }
}
