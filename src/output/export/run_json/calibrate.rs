//! `probe calibrate`'s calibration.json: how stalls were injected and why, the plan, the
//! probing, the tolerance, the per-length medians, every row of calibration.csv and the verdict
//! (`verdict`: the median error per length, single outliers named; `within` of `injections`). The run's own run.json beside it is the probe run's
//! ([`super::RunJson`]), whose writes are the injections.

use serde::{Deserialize, Serialize};

use crate::calibrate::{
    CalibrationRow, CalibrationVerdict, InjectionPlan, LengthSummary, MethodChoice,
};

use super::{Mode, ToolInfo};

/// The whole of calibration.json, written at the end of the calibration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CalibrationJson {
    /// Tool name and version.
    pub tool: ToolInfo,
    /// [`Mode::Calibrate`] (absent in files written before it was said).
    #[serde(default = "calibrate_mode")]
    pub mode: Mode,
    /// The run's id (as in its run.json).
    pub run_id: String,
    /// The injection method and why it was chosen.
    pub method: MethodChoice,
    /// What was injected.
    pub plan: InjectionPlan,
    /// Probe threads.
    pub probe_threads: u16,
    /// Probes per second per thread.
    pub probe_rate: f64,
    /// One aggregate probe interval (all threads together), µs.
    pub aggregate_interval_us: f64,
    /// The baseline's 99th percentile latency, µs.
    pub baseline_p99_us: u64,
    /// The claimed accuracy: one aggregate probe interval plus the baseline p99, ms.
    pub tolerance_ms: f64,
    /// Injections made.
    pub injections: usize,
    /// Of them, those within the tolerance.
    pub within: usize,
    /// Per requested length: the median errors.
    pub by_length: Vec<LengthSummary>,
    /// Every injection against what was measured (the rows of calibration.csv).
    pub rows: Vec<CalibrationRow>,
    /// The verdict the exit status follows: the median error per length, single outliers
    /// named (absent in files written before it was kept).
    #[serde(default)]
    pub verdict: Option<CalibrationVerdict>,
}

fn calibrate_mode() -> Mode {
    Mode::Calibrate
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::calibrate::StallMethod;

    fn sample_calibration() -> CalibrationJson {
        let row = CalibrationRow {
            seq: 2,
            requested_ms: 20.0,
            injected_ms: 20.125,
            injected_source: "slowlog".into(),
            stall_ms: Some(20.5),
            stall_error_ms: Some(0.375),
            worst_delay_ms: Some(20.25),
            delay_error_ms: Some(0.125),
            tolerance_ms: 1.5,
            within: true,
            error: Some("BUSY".into()),
        };
        CalibrationJson {
            tool: ToolInfo {
                name: "holprobe".into(),
                version: "0.0.0-test".into(),
            },
            mode: Mode::Calibrate,
            run_id: "feedf00d".into(),
            method: MethodChoice {
                method: StallMethod::LuaLoop,
                loop_iterations_per_us: Some(12.5),
                loop_rate_source: Some("slowlog".into()),
                reason: "DEBUG is disabled".into(),
            },
            plan: InjectionPlan {
                stalls_us: vec![5000, 20_000],
                times: 3,
                gap: Duration::from_millis(150),
            },
            probe_threads: 2,
            probe_rate: 1000.5,
            aggregate_interval_us: 499.75,
            baseline_p99_us: 250,
            tolerance_ms: 1.5,
            injections: 6,
            within: 5,
            by_length: vec![LengthSummary {
                requested_ms: 20.0,
                injections: 3,
                stall_error_median_ms: Some(0.375),
                delay_error_median_ms: Some(0.125),
                worst_abs_error_ms: Some(0.5),
                within: 2,
            }],
            rows: vec![row],
            verdict: Some(CalibrationVerdict {
                pass: false,
                lengths_off_ms: vec![5.0],
                outlier_seqs: vec![2],
                outliers_allowed: 0,
                unmeasured_seqs: vec![4],
            }),
        }
    }

    /// Every field written is read back: writing what was read gives the same bytes; a file
    /// written before `mode` was reads as calibrate's.
    #[test]
    fn calibration_json_reads_back_every_field() {
        let json = serde_json::to_vec_pretty(&sample_calibration()).unwrap();
        let read: CalibrationJson = serde_json::from_slice(&json).unwrap();
        assert_eq!(serde_json::to_vec_pretty(&read).unwrap(), json);
        let mut value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["mode"], "calibrate");
        assert_eq!(value["rows"][0]["injected_source"], "slowlog");
        value.as_object_mut().unwrap().remove("mode");
        let older: CalibrationJson = serde_json::from_value(value).unwrap();
        assert_eq!(older.mode, Mode::Calibrate);
        assert_eq!(older.rows, read.rows);
    }
}
