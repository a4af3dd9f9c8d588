use super::*;
use crate::analyze::correlate::{Stall, WriteSummary};

fn summary(seq: u32, hol: Option<f64>) -> WriteSummary {
    WriteSummary::seen_once(seq, WriteOp::Inject, 0, 0.0, hol)
}

fn stall(seq: u32, ms: f64) -> Stall {
    Stall {
        start_us: 0,
        end_us: (ms * 1e3) as u64,
        duration_ms: ms,
        probes_delayed: 1,
        write_seq: Some(seq),
        ..Stall::default()
    }
}

fn injection(seq: u32, requested_us: u64, server_us: Option<u64>) -> Injection {
    Injection {
        seq,
        requested_us,
        server_us,
        iterations: None,
        method: StallMethod::DebugSleep,
        round_trip_us: requested_us + 40,
        ok: true,
        error: None,
    }
}

#[test]
fn rows_compare_with_slowlog_when_logged_and_take_the_longest_stall() {
    let analysis = Analysis {
        writes: vec![
            summary(1, Some(19.8)),
            summary(2, Some(48.0)),
            summary(3, None),
        ],
        stalls: vec![stall(1, 2.0), stall(1, 19.7), stall(2, 50.9)],
        ..Analysis::default()
    };
    let injections = [
        injection(1, 20_000, Some(20_060)),
        injection(2, 50_000, None),
        injection(3, 5_000, Some(5_050)),
    ];
    let rows = evaluate(&injections, &analysis, 0.6);
    assert_eq!(rows[0].injected_source, "slowlog");
    assert!((rows[0].injected_ms - 20.06).abs() < 1e-9);
    assert!((rows[0].stall_error_ms.unwrap() - (19.7 - 20.06)).abs() < 1e-9);
    assert!(rows[0].within);
    // 50.9 vs 50.0 requested: 0.9 ms off, outside 0.6.
    assert_eq!(rows[1].injected_source, "requested");
    assert!(!rows[1].within);
    // Nothing measured: never within.
    assert_eq!(rows[2].stall_ms, None);
    assert!(!rows[2].within);
    // Without SLOWLOG, an iteration loop is compared with its round trip less the
    // baseline median; DEBUG SLEEP with what was asked.
    let mut looped = injection(1, 20_000, None);
    looped.method = StallMethod::LuaLoop;
    looped.round_trip_us = 23_030;
    let mut with_baseline = analysis.clone();
    with_baseline.baseline.p50_us = 30;
    let row = &evaluate(&[looped], &with_baseline, 0.6)[0];
    assert_eq!(row.injected_source, "round-trip");
    assert!((row.injected_ms - 23.0).abs() < 1e-9);
    let lengths = by_length(&rows);
    assert_eq!(lengths.len(), 3);
    assert_eq!(lengths[0].within, 1);
    assert!((lengths[1].worst_abs_error_ms.unwrap() - 2.0).abs() < 1e-9);
}

#[test]
fn plan_interleaves_lengths() {
    let plan = InjectionPlan {
        stalls_us: vec![5_000, 20_000],
        times: 3,
        gap: Duration::from_millis(10),
    };
    assert_eq!(plan.order(), [5_000, 20_000, 5_000, 20_000, 5_000, 20_000]);
}

#[test]
fn tolerance_is_interval_plus_p99() {
    assert!((tolerance_ms(500.0, 110) - 0.61).abs() < 1e-12);
}

/// A row of `requested_ms` whose stall and delay are both off by `error_ms`.
fn row(seq: u32, requested_ms: f64, error_ms: f64, tolerance_ms: f64) -> CalibrationRow {
    CalibrationRow {
        seq,
        requested_ms,
        injected_ms: requested_ms,
        injected_source: "requested".into(),
        stall_ms: Some(requested_ms + error_ms),
        stall_error_ms: Some(error_ms),
        worst_delay_ms: Some(requested_ms + error_ms),
        delay_error_ms: Some(error_ms),
        tolerance_ms,
        within: error_ms.abs() <= tolerance_ms,
        error: None,
    }
}

/// The default plan, 5 lengths x 3 interleaved, every error `error(length, round)`.
fn default_plan(error: impl Fn(f64, u32) -> f64) -> Vec<CalibrationRow> {
    let mut rows = Vec::new();
    for round in 0..3 {
        for length in [5.0, 20.0, 50.0, 100.0, 250.0] {
            let seq = rows.len() as u32 + 1;
            rows.push(row(seq, length, error(length, round), 0.74));
        }
    }
    rows
}

/// The run seen on an idle host: 14/15 within +-0.74 ms, one 250 ms injection at +0.80.
/// The host is judged by the median per length: it passes, the outlier named.
#[test]
fn a_single_outlier_passes_and_is_named() {
    let rows = default_plan(|length, round| {
        if length == 250.0 && round == 1 {
            0.80
        } else {
            0.1 * f64::from(round) - 0.1
        }
    });
    let verdict = judge(&rows, &by_length(&rows), 0.74);
    assert!(verdict.pass, "{verdict:?}");
    assert_eq!(verdict.outlier_seqs, [10]);
    assert_eq!(verdict.outliers_allowed, 1);
    assert!(verdict.lengths_off_ms.is_empty());
    let text = verdict_lines(&verdict, &rows, 0.74).join("\n");
    assert!(text.contains("#10"), "{text}");
    assert!(text.contains("250.0 ms"), "{text}");
    assert!(text.contains("10%"), "{text}");
}

/// A length whose median is off fails however few injections it has, and is named.
#[test]
fn a_length_whose_median_is_off_fails() {
    let rows = default_plan(|length, round| {
        if length == 100.0 && round > 0 {
            0.9
        } else {
            0.05
        }
    });
    let verdict = judge(&rows, &by_length(&rows), 0.74);
    assert!(!verdict.pass, "{verdict:?}");
    assert_eq!(verdict.lengths_off_ms, [100.0]);
    let text = verdict_lines(&verdict, &rows, 0.74).join("\n");
    assert!(text.contains("100.0 ms"), "{text}");
    // Every injection of a length systematically off, on the low side too.
    let rows = default_plan(|length, _| if length == 5.0 { -1.5 } else { 0.0 });
    assert!(!judge(&rows, &by_length(&rows), 0.74).pass);
}

/// More single outliers than the stated share fail, and so does an injection with nothing
/// measured or an error: those are not noise.
#[test]
fn outliers_past_the_share_and_unmeasured_injections_fail() {
    let rows = default_plan(|length, round| {
        if (length == 250.0 && round == 1) || (length == 5.0 && round == 2) {
            0.9
        } else {
            0.0
        }
    });
    let verdict = judge(&rows, &by_length(&rows), 0.74);
    assert!(!verdict.pass, "{verdict:?}");
    assert_eq!(verdict.outlier_seqs, [10, 11]);
    let mut rows = default_plan(|_, _| 0.0);
    rows[3].stall_ms = None;
    rows[3].stall_error_ms = None;
    rows[3].within = false;
    let verdict = judge(&rows, &by_length(&rows), 0.74);
    assert!(!verdict.pass, "{verdict:?}");
    assert_eq!(verdict.unmeasured_seqs, [4]);
    let mut rows = default_plan(|_, _| 0.0);
    rows[0].error = Some("ERR".into());
    rows[0].within = false;
    assert!(!judge(&rows, &by_length(&rows), 0.74).pass);
    // All within: passes with no outlier.
    let rows = default_plan(|_, _| 0.2);
    let verdict = judge(&rows, &by_length(&rows), 0.74);
    assert!(
        verdict.pass && verdict.outlier_seqs.is_empty(),
        "{verdict:?}"
    );
}
