//! The runs shipped in data/ agree with the correlator as it is now: fed their own probes.csv
//! and writes.csv, it finds the same stalls and the same per-write figures as their
//! stalls.csv and summary.csv. A change to the correlator that moves a shipped figure fails
//! here, and says the shipped runs (and the figures docs/ and analysis/README.md quote from them) need redoing.

mod common;

use std::path::Path;

use common::read_csv;

use holprobe::analyze::correlate::{CorrelateConfig, correlate};
use holprobe::record::{ProbeRecord, WriteRecord};

fn rows<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    csv::Reader::from_path(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .deserialize()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn check(run: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data").join(run);
    let probes: Vec<ProbeRecord> = rows(&dir.join("probes.csv"));
    let writes: Vec<WriteRecord> = rows(&dir.join("writes.csv"));
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let config = CorrelateConfig::with_threshold(
        run_json["options"]["stall_threshold_us"].as_u64().unwrap(),
    );
    let analysis = correlate(&probes, &writes, config);

    let stalls = read_csv(&dir.join("stalls.csv"));
    assert_eq!(analysis.stalls.len(), stalls.len(), "{run}: stall count");
    for (found, shipped) in analysis.stalls.iter().zip(&stalls) {
        assert_eq!(found.start_us.to_string(), shipped["start_us"], "{run}");
        assert_eq!(found.end_us.to_string(), shipped["end_us"], "{run}");
        assert_eq!(
            found.probes_delayed.to_string(),
            shipped["probes_delayed"],
            "{run}"
        );
    }
    let summary = read_csv(&dir.join("summary.csv"));
    assert_eq!(analysis.writes.len(), summary.len(), "{run}: write count");
    let ms = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_default();
    let shipped_ms = |s: &str| {
        s.parse::<f64>()
            .map(|x| format!("{x:.3}"))
            .unwrap_or_default()
    };
    for (found, shipped) in analysis.writes.iter().zip(&summary) {
        let seq = found.seq;
        assert_eq!(
            ms(found.hol_delay_ms),
            shipped_ms(&shipped["hol_delay_ms"]),
            "{run} write {seq}: hol_delay_ms"
        );
        assert_eq!(
            ms(Some(found.stall_ms)),
            shipped_ms(&shipped["stall_ms"]),
            "{run} write {seq}: stall_ms"
        );
        assert_eq!(
            found.probes_in_window.to_string(),
            shipped["probes_in_window"],
            "{run} write {seq}"
        );
        assert_eq!(
            ms(found.hol_probe_send_lag_ms),
            shipped_ms(&shipped["hol_probe_send_lag_ms"]),
            "{run} write {seq}: hol_probe_send_lag_ms"
        );
    }
    assert_eq!(
        analysis.baseline.p50_us,
        run_json["baseline"]["p50_us"].as_u64().unwrap(),
        "{run}: baseline p50"
    );
    assert_eq!(
        analysis.client_hiccups.len() as u64,
        run_json["client_hiccups"].as_array().unwrap().len() as u64,
        "{run}: client hiccups"
    );
}

#[test]
fn redis_7_0_reanalyzes_to_its_own_findings() {
    check("redis-7.0");
}

#[test]
fn redis_6_2_reanalyzes_to_its_own_findings() {
    check("redis-6.2");
}

#[test]
fn valkey_9_1_reanalyzes_to_its_own_findings() {
    check("valkey-9.1");
}

#[test]
fn redis_8_2_reanalyzes_to_its_own_findings() {
    check("redis-8.2");
}
