use std::path::PathBuf;

use super::*;

fn meta(run_id: &str) -> RunMeta {
    RunMeta {
        dir: PathBuf::from(run_id),
        run_id: run_id.into(),
        status: "complete".into(),
        tool_version: "0.1.0".into(),
        server_flavor: "redis".into(),
        server_version: "7.0.15".into(),
        server_binary: None,
        server_appendonly: Some("no".into()),
        hostname: Some("vm".into()),
        cpus: Some(2),
        cpu_model: Some("AMD EPYC".into()),
        os: Some("Linux (Debian GNU/Linux 12) (kernel 6.18.44)".into()),
        probe_threads: Some(2),
        probe_rate: Some(1000.0),
        probe_cmd: Some("ping".into()),
        stall_threshold_us: Some(1000),
        repeat: Some(5),
        gap_ms: Some(500.0),
        overwrite: Some(false),
        keep: Some(false),
        same_connection: Some(false),
        planned_sizes_bytes: vec![64 << 20],
        planned_values: vec![],
        started_unix_us: Some(0),
        baseline_p50_us: None,
        probe_engine_version: 2,
        analysis_version: 2,
        written_node: None,
        repeats_read: RepeatsRead::default(),
    }
}

/// A run with `hol` and `set` values per (size, op).
fn run(run_id: &str, rows: &[(u64, &str, &[f64], &[f64])]) -> RunData {
    let mut writes = Vec::new();
    let mut seq = 0;
    for (size, op, hol, set) in rows {
        for (h, s) in hol.iter().zip(set.iter()) {
            seq += 1;
            writes.push(WriteSample {
                seq,
                op: op.to_string(),
                size_bytes: *size,
                value: String::new(),
                set_ms: *s,
                hol_delay_ms: Some(*h),
            });
        }
    }
    RunData {
        meta: meta(run_id),
        writes,
        failed_writes: vec![],
        failed_groups: Default::default(),
        warnings: vec![],
    }
}

const M64: u64 = 64 << 20;

#[test]
fn a_clear_slowdown_is_a_regression() {
    let base = run(
        "a",
        &[(
            M64,
            "delete",
            &[40.0, 42.0, 41.0, 43.0, 39.0],
            &[40.0, 42.0, 41.0, 43.0, 39.0],
        )],
    );
    let cand = run(
        "b",
        &[(
            M64,
            "delete",
            &[55.0, 52.0, 58.0, 51.0, 60.0],
            &[40.5, 42.0, 41.0, 43.0, 39.5],
        )],
    );
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.verdict, Verdict::Regression);
    let row = &c.rows[0];
    assert_eq!(row.hol_delay.verdict, Verdict::Regression);
    assert_eq!(row.set.verdict, Verdict::NoChange);
    assert!((row.hol_delay.p_slower.unwrap() - 1.0 / 252.0).abs() < 1e-12);
    assert!((row.hol_delay.ratio.unwrap() - 55.0 / 41.0).abs() < 1e-12);
    // The same runs swapped: an improvement, not a regression.
    let back = compare(&cand, &base, Rules::default()).unwrap();
    assert_eq!(back.verdict, Verdict::Improvement);
    assert_eq!(back.regressions, 0);
}

#[test]
fn across_probe_engines_hol_delay_is_not_judged_but_set_ms_is() {
    let quick: &[f64] = &[40.0, 42.0, 41.0, 43.0, 39.0];
    let slow: &[f64] = &[80.0, 82.0, 81.0, 83.0, 79.0];
    // The candidate's hol_delay_ms is twice the baseline's, separated: a regression within
    // one engine.
    let mut old = run(
        "a",
        &[(M64, "set", quick, quick), (M64, "delete", quick, quick)],
    );
    old.meta.probe_engine_version = PROBE_ENGINE_BEFORE_KEY;
    let new = run(
        "b",
        &[(M64, "set", slow, quick), (M64, "delete", slow, slow)],
    );
    let c = compare(&old, &new, Rules::default()).unwrap();
    let text = c.warnings.join("\n");
    assert!(
        text.contains("differ in probe engine (baseline version 1, candidate version 2)"),
        "{text}"
    );
    assert!(
        text.contains("hol_delay_ms") && text.contains("not comparable"),
        "{text}"
    );
    assert_eq!(c.not_comparable_metrics, vec!["hol_delay_ms"]);
    for row in &c.rows {
        let hol = &row.hol_delay;
        assert_eq!(hol.verdict, Verdict::NotComparable, "{hol:?}");
        assert_eq!((hol.ratio, hol.diff_ms, hol.p_slower), (None, None, None));
        assert_eq!(hol.reason, "probe engines 1 and 2");
        // What each run measured is still shown.
        assert_eq!(hol.baseline_ms.unwrap().median, 41.0);
        assert_eq!(hol.candidate_ms.unwrap().median, 81.0);
    }
    // set_ms is judged as before: unchanged for set, a regression for delete.
    assert_eq!(c.rows[0].set.verdict, Verdict::NoChange);
    assert_eq!(c.rows[0].verdict, Verdict::NoChange);
    assert_eq!(c.rows[1].set.verdict, Verdict::Regression);
    assert_eq!(c.rows[1].verdict, Verdict::Regression);
    assert_eq!((c.regressions, c.verdict), (1, Verdict::Regression));

    // The same figures within one engine: hol_delay_ms regresses, and no engine warning.
    let mut same = old.clone();
    same.meta.probe_engine_version = 2;
    let c = compare(&same, &new, Rules::default()).unwrap();
    assert!(
        !c.warnings.iter().any(|w| w.contains("probe engine")),
        "{:?}",
        c.warnings
    );
    assert!(c.not_comparable_metrics.is_empty());
    assert_eq!(c.rows[0].hol_delay.verdict, Verdict::Regression);
    assert_eq!(c.regressions, 2);
    // A row with nothing comparable is not "no change".
    assert_eq!(
        combine(&[Verdict::NotComparable, Verdict::NotComparable]),
        Verdict::NotComparable
    );

    // Without a set_ms regression the verdict is inconclusive, not a pass: what other clients
    // saw was not judged (the hostile trial's doubled delays passed a gate with exit 0).
    let doubled = run(
        "c",
        &[(M64, "set", slow, quick), (M64, "delete", slow, quick)],
    );
    let c = compare(&old, &doubled, Rules::default()).unwrap();
    assert_eq!(c.regressions, 0);
    assert_eq!(c.inconclusive, 0);
    assert_eq!(c.verdict, Verdict::Inconclusive);
    let text = render::summary_line(&c);
    assert!(
        text.contains(
            "hol_delay_ms not judged: different probe engines (record the baseline again)"
        ),
        "{text}"
    );
}

/// At a probe interval coarser than `--min-diff-ms`, a row whose every delay is under one
/// interval in both runs is inconclusive: the ties say nothing of a difference that counts
/// (the hostile trial: at 1 probe a second, doubled delays read "<500 ms" twice and passed).
#[test]
fn delays_all_under_a_coarse_probe_interval_are_inconclusive() {
    let quick: &[f64] = &[10.0, 11.0, 12.0, 10.5, 11.5];
    let doubled: &[f64] = &[20.0, 22.0, 24.0, 21.0, 23.0];
    let mut base = run("a", &[(M64, "set", quick, quick)]);
    let mut cand = run("b", &[(M64, "set", doubled, quick)]);
    for r in [&mut base, &mut cand] {
        r.meta.probe_rate = Some(1.0); // 2 threads: one probe every 500 ms
    }
    let c = compare(&base, &cand, Rules::default()).unwrap();
    let hol = &c.rows[0].hol_delay;
    assert_eq!(hol.verdict, Verdict::Inconclusive, "{hol:?}");
    assert!(
        hol.reason
            .contains("every value under one probe interval (500.00 ms)"),
        "{}",
        hol.reason
    );
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert!(
        c.warnings.iter().any(|w| w
            .contains("1 row(s) have every hol_delay_ms under one probe interval (500.00 ms)")
            && w.contains("record with 1000 probes a second or more")),
        "{:?}",
        c.warnings
    );
    // At the default rate the same figures are a regression, and ties under a fine interval
    // (0.5 ms, finer than --min-diff-ms 1) are still no regression.
    for r in [&mut base, &mut cand] {
        r.meta.probe_rate = Some(1000.0);
    }
    assert_eq!(
        compare(&base, &cand, Rules::default()).unwrap().verdict,
        Verdict::Regression
    );
    let tiny: &[f64] = &[0.1, 0.2, 0.3, 0.2, 0.1];
    let a = run("a", &[(M64, "set", tiny, quick)]);
    let b = run("b", &[(M64, "set", tiny, quick)]);
    assert_eq!(
        compare(&a, &b, Rules::default()).unwrap().verdict,
        Verdict::NoChange
    );
}

/// A write no probe overlapped counts as "under one probe interval" (0.5 ms at 2 x
/// 1000/s): short deletes on both sides are the same figure, and a delete that became long
/// enough for the probes to see is judged against them, not "not comparable".
#[test]
fn a_write_no_probe_overlapped_counts_as_under_one_probe_interval() {
    let set: &[f64] = &[0.1, 0.12, 0.11, 0.1, 0.09];
    let mut base = run("a", &[(1 << 20, "delete", &[0.1; 5], set)]);
    let mut cand = run("b", &[(1 << 20, "delete", &[0.3; 5], set)]);
    for w in base.writes.iter_mut().chain(cand.writes.iter_mut()) {
        if w.seq > 2 {
            w.hol_delay_ms = None;
        }
    }
    let c = compare(&base, &cand, Rules::default()).unwrap();
    let hol = &c.rows[0].hol_delay;
    assert_eq!(hol.verdict, Verdict::NoChange, "{hol:?}");
    let (b, k) = (hol.baseline_ms.unwrap(), hol.candidate_ms.unwrap());
    assert_eq!((b.n, k.n), (5, 5));
    assert_eq!((b.median, b.censored_at_ms), (0.5, Some(0.5)));
    assert_eq!(hol.ratio_ci.unwrap().estimate, 1.0);
    assert_eq!(
        (c.rows[0].verdict, c.verdict),
        (Verdict::NoChange, Verdict::NoChange)
    );

    // None of the baseline's deletes had a probe inside; the candidate's take 3 ms.
    for w in base.writes.iter_mut() {
        w.hol_delay_ms = None;
    }
    for (w, v) in cand.writes.iter_mut().zip([3.0, 3.2, 2.9, 3.1, 3.3]) {
        w.hol_delay_ms = Some(v);
    }
    let c = compare(&base, &cand, Rules::default()).unwrap();
    let hol = &c.rows[0].hol_delay;
    assert_eq!(hol.verdict, Verdict::Regression, "{hol:?}");
    assert_eq!(c.verdict, Verdict::Regression);
    // And the other way round, an improvement.
    let back = compare(&cand, &base, Rules::default()).unwrap();
    assert_eq!(back.rows[0].hol_delay.verdict, Verdict::Improvement);
}

/// A size and op the baseline made and the candidate only failed (OOM under a smaller
/// maxmemory) is a regression: the gate passed it as "no regression" (the hostile trial). One
/// a candidate that stopped early never reached is not known: inconclusive.
#[test]
fn what_the_candidate_failed_or_never_reached_is_not_a_pass() {
    let v: &[f64] = &[1.0, 1.1, 1.2, 1.0, 1.1];
    let base = run("a", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
    let mut cand = run("b", &[(1 << 20, "set", v, v)]);
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.verdict, Verdict::NoChange, "a plan of other sizes: {c:?}");

    cand.failed_groups.insert(
        (M64, String::new(), "set".into()),
        "OOM command not allowed\nsecond line".into(),
    );
    cand.meta.status = "failed".into();
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.verdict, Verdict::Regression, "{c:?}");
    assert_eq!(c.regressions, 0, "no row regressed: {c:?}");
    assert!(
        compare_all(&[base.clone(), cand.clone()], Rules::default())
            .unwrap()
            .regression
    );
    assert_eq!(c.candidate_failed, ["set 64M: OOM command not allowed"]);
    assert!(c.candidate_unmeasured.is_empty());
    let text = render::render(
        &compare_all(&[base.clone(), cand.clone()], Rules::default()).unwrap(),
        render::Format::Table,
    );
    assert!(
        text.contains("verdict: REGRESSION")
            && text.contains("every write failed in the candidate: set 64M"),
        "{text}"
    );

    cand.failed_groups.clear();
    cand.meta.status = "interrupted".into();
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.verdict, Verdict::Inconclusive, "{c:?}");
    assert_eq!(c.candidate_unmeasured, ["set 64M"]);
    let text = render::render(
        &compare_all(&[base.clone(), cand.clone()], Rules::default()).unwrap(),
        render::Format::Table,
    );
    assert!(
        text.contains("not reached by the candidate (its run is interrupted): set 64M"),
        "{text}"
    );
    // A size the interrupted candidate never planned is only a plan of other sizes.
    cand.meta.planned_sizes_bytes = vec![1 << 20];
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.verdict, Verdict::NoChange, "{c:?}");

    // Every write of the candidate failed: nothing shared, and still a verdict, not bad input.
    let failed_all = RunData {
        writes: vec![],
        ..cand.clone()
    };
    let mut failed_all = failed_all;
    failed_all.meta.status = "failed".into();
    for size in [1u64 << 20, M64] {
        failed_all
            .failed_groups
            .insert((size, String::new(), "set".into()), "OOM".into());
    }
    let c = compare(&base, &failed_all, Rules::default()).unwrap();
    assert_eq!(c.verdict, Verdict::Regression, "{c:?}");
    assert!(c.rows.is_empty());
}

#[test]
fn only_shared_sizes_are_compared_with_a_warning() {
    let v: &[f64] = &[1.0, 1.1, 1.2, 1.0, 1.1];
    let base = run("a", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
    let mut cand = run("b", &[(M64, "set", v, v), (128 << 20, "set", v, v)]);
    cand.meta.probe_rate = Some(500.0);
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.rows[0].size_bytes, M64);
    let text = c.warnings.join("\n");
    assert!(
        text.contains("only in the baseline (not compared): set 1M"),
        "{text}"
    );
    assert!(
        text.contains("only in the candidate (not compared): set 128M"),
        "{text}"
    );
    assert!(text.contains("differ in probe rate"), "{text}");
    // The coarser probe interval (1 ms at 2 x 500/s) sets the hol resolution.
    assert_eq!(c.rows[0].hol_delay.min_diff_ms, 1.0);
}

/// A baseline analysed before waits were counted from a write's start (no `analysis_version`
/// in its run.json) against a run after: said, with what to do (the review of 2026-12-05: a
/// baseline could hide a regression the old rule inflated). Same versions: nothing said.
#[test]
fn runs_analysed_by_different_rules_are_said() {
    let v: &[f64] = &[1.0, 1.1, 1.2, 1.0, 1.1];
    let mut base = run("a", &[(M64, "set", v, v)]);
    let cand = run("b", &[(M64, "set", v, v)]);
    let said = "differ in analysis (baseline version 1, candidate version 2)";
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert!(!c.warnings.join("\n").contains("differ in analysis"));
    base.meta.analysis_version = 1;
    let c = compare(&base, &cand, Rules::default()).unwrap();
    let text = c.warnings.join("\n");
    assert!(
        text.contains(said) && text.contains("examples/reanalyze.rs"),
        "{text}"
    );
}

#[test]
fn runs_that_share_nothing_are_an_error() {
    let v: &[f64] = &[1.0; 5];
    let base = run("a", &[(1 << 20, "set", v, v)]);
    let cand = run("b", &[(M64, "set", v, v)]);
    let err = compare(&base, &cand, Rules::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("share no size"), "{err}");
    assert!(err.contains("set 1M") && err.contains("set 64M"), "{err}");
}

/// A candidate that stopped early with a plan of another value type (a hash's build against
/// a string run) never meant to make the baseline's rows: bad input, not "not reached".
#[test]
fn an_interrupted_run_of_another_value_type_shares_nothing() {
    let v: &[f64] = &[1.0; 5];
    let base = run("a", &[(M64, "set", v, v)]);
    let mut cand = run("b", &[]);
    cand.meta.status = "interrupted".into();
    cand.meta.planned_sizes_bytes = vec![];
    cand.meta.planned_values = vec!["hash 2M".into()];
    let err = compare(&base, &cand, Rules::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("share no size"), "{err}");
    // The same plan as the baseline's, cut short: not reached, a verdict.
    cand.meta.planned_values = vec![];
    cand.meta.planned_sizes_bytes = vec![M64];
    let c = compare(&base, &cand, Rules::default()).unwrap();
    assert_eq!(c.candidate_unmeasured, ["set 64M"]);
}

/// A string and a 300k-field hash of the same bytes are different values: their delete is not
/// one row (the hostile trial's "61x REGRESSION" of a string against a hash), and runs that
/// share no value are an error, naming each run's values.
#[test]
fn a_string_and_a_hash_of_the_same_bytes_are_not_compared() {
    let fast: &[f64] = &[1.5; 5];
    let slow: &[f64] = &[92.7; 5];
    let base = run("a", &[(9_600_000, "delete", fast, fast)]);
    let mut cand = run("b", &[(9_600_000, "delete", slow, slow)]);
    for write in &mut cand.writes {
        write.value = value_label(Some("hash"), Some(300_000));
    }
    let err = compare(&base, &cand, Rules::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("share no size"), "{err}");
    assert!(
        err.contains("delete 9375K") && err.contains("delete hash 300k"),
        "{err}"
    );
    // The same hash on both sides is compared, and named by its elements.
    let mut same = run("c", &[(9_600_000, "delete", slow, slow)]);
    for write in &mut same.writes {
        write.value = value_label(Some("hash"), Some(300_000));
    }
    let c = compare(&cand, &same, Rules::default()).unwrap();
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.rows[0].value, "hash 300k");
    assert_eq!(value_label(Some("string"), Some(1)), "");
    assert_eq!(value_label(None, None), "");
}

#[test]
fn the_same_run_twice_is_refused_and_an_edited_copy_warned_of() {
    let base = run(
        "a",
        &[(
            M64,
            "set",
            &[1.0, 9.0, 3.0, 4.0, 20.0],
            &[5.0, 6.0, 7.0, 8.0, 9.0],
        )],
    );
    // Refused: a gate that compared a run with itself passed (the hostile trial).
    let err = compare(&base, &base, Rules::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("same run (a) with the same figures")
            && err.contains("can only say no change"),
        "{err}"
    );
    // A copy of it with other figures (edited, or reanalysed) is not said to be no change.
    let mut copy = base.clone();
    copy.writes[0].hol_delay_ms = Some(2.0);
    let c = compare(&base, &copy, Rules::default()).unwrap();
    assert!(
        c.warnings.iter().any(|w| w
            .contains("same run (a), with different figures: one copy was edited or reanalysed")),
        "{:?}",
        c.warnings
    );
    assert!(
        !c.warnings
            .iter()
            .any(|w| w.contains("can only say no change"))
    );
}

#[test]
fn side_by_side_has_a_column_per_run_and_every_row() {
    let v: &[f64] = &[1.0, 2.0, 3.0];
    let a = run("a", &[(1 << 20, "set", v, v)]);
    let b = run("b", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
    let c = run("c", &[(M64, "set", v, v)]);
    let report = compare_all(&[a, b, c], Rules::default());
    // a and c share nothing: an error, even though b is fine.
    assert!(report.is_err());
    let v: &[f64] = &[1.0, 2.0, 3.0];
    let a = run("a", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
    let b = run("b", &[(1 << 20, "set", v, v)]);
    let c = run("c", &[(M64, "set", v, v)]);
    let report = compare_all(&[a, b, c], Rules::default()).unwrap();
    let sbs = report.side_by_side.unwrap();
    assert_eq!(sbs.runs.len(), 3);
    assert_eq!(sbs.rows.len(), 2);
    assert!(sbs.rows[0].hol_delay_ms[2].is_none());
    assert_eq!(sbs.rows[1].set_ms[2].unwrap().median, 2.0);
    assert!(!report.regression);
}

/// Cloud machines share one name: a baseline from another of them (another CPU model or kernel)
/// is said to be from another host; a run that does not record the CPU says nothing of it.
#[test]
fn hosts_of_one_name_are_told_apart_by_cpu_and_kernel() {
    let v: &[f64] = &[1.0, 1.1, 1.2, 1.0, 1.1];
    let warned = |cand: &RunData| {
        let base = run("a", &[(M64, "set", v, v)]);
        compare(&base, cand, Rules::default())
            .unwrap()
            .warnings
            .join("\n")
    };
    let same = run("b", &[(M64, "set", v, v)]);
    assert!(
        !warned(&same).contains("different hosts"),
        "{}",
        warned(&same)
    );

    let mut other_cpu = run("b", &[(M64, "set", v, v)]);
    other_cpu.meta.cpu_model = Some("Intel Xeon".into());
    let text = warned(&other_cpu);
    assert!(
        text.contains("different hosts of one name (CPU AMD EPYC against CPU Intel Xeon)"),
        "{text}"
    );

    let mut other_kernel = run("b", &[(M64, "set", v, v)]);
    other_kernel.meta.os = Some("Linux (Debian GNU/Linux 12) (kernel 6.18.45)".into());
    assert!(
        warned(&other_kernel).contains("kernel"),
        "{}",
        warned(&other_kernel)
    );

    let mut unrecorded = run("b", &[(M64, "set", v, v)]);
    unrecorded.meta.cpu_model = None;
    assert!(!warned(&unrecorded).contains("different hosts"));
}

/// A run recorded before run.json said `same_connection` sent every SET on one connection:
/// against a later run the compare says so, rather than read it as `false` (the hostile
/// review's old baseline showed a large "improvement" with no warning).
#[test]
fn a_run_from_before_same_connection_is_said_to_have_reused_its_connection() {
    let mut old = meta("old");
    old.same_connection = None;
    let new = meta("new");
    let warnings = option_warnings(&old, &new);
    assert!(
        warnings.iter().any(|w| w.contains(
            "the runs differ in --same-connection (baseline unknown, candidate false): a run recorded before 2026-12-05"
        )),
        "{warnings:?}"
    );
    assert!(option_warnings(&new, &meta("other")).is_empty());
}
