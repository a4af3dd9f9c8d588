//! The main job and observe mode: the measuring session ([`crate::session`]) with the writer as
//! its actor, or none. The binary and the examples both drive runs through [`run`]; the options
//! and the report are re-exported here, where a user of the library looks for them.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Result;

pub use crate::measure::actor::{Actor, ActorContext};
pub use crate::measure::event::Event;
use crate::measure::target::Target;
use crate::measure::writer::WriterActor;
pub use crate::options::{
    DEFAULT_INTERVAL, DEFAULT_PROBE_RATE, DEFAULT_PROBE_THREADS, DEFAULT_SEED,
    DEFAULT_STALL_THRESHOLD_US, PROBES_ALL_UP_TO, ProbesExport, RunOptions,
};
use crate::output::metrics::ProbeMetrics;
pub use crate::session::{KEY_NAMESPACE, Notice, RunReport, new_run_id};
use crate::session::{Probed, RunSpec};

/// Runs probes (and the writer, when planned) against `target` until the plan is done, the
/// duration is over, `interrupt` is set, or the server goes away. Every exit path stops the
/// threads, removes the run's keys while the server is reachable and writes the final exports.
pub fn run(
    options: &RunOptions,
    target: &Target,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    run_with_actor(options, target, writer_actor(options), interrupt, notify)
}

/// [`run`] with probes on every node of `probed`; the writes go to `target` (its first node).
/// `metrics`: the `--metrics-addr` endpoint's figures, which the run updates as it goes.
pub fn run_nodes(
    options: &RunOptions,
    target: &Target,
    probed: &Probed,
    metrics: Option<Arc<ProbeMetrics>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    let spec = RunSpec {
        metrics,
        ..RunSpec::default()
    };
    crate::session::measure_nodes(
        options,
        target,
        probed,
        writer_actor(options),
        spec,
        interrupt,
        notify,
    )
}

/// The writer of `options`' plan, its values from `options.seed`; none in observe mode.
fn writer_actor(options: &RunOptions) -> Option<Box<dyn Actor>> {
    options.writer.clone().map(|plan| {
        Box::new(WriterActor::new(plan, options.seed, options.force_memory)) as Box<dyn Actor>
    })
}

/// Runs probes with `actor` (in place of the writer `options` may plan) beside them: the same
/// measuring session, correlator and exports as the main job ([`crate::session::measure_nodes`]).
/// Without an actor it observes (for `options.duration`, or until `interrupt`).
pub fn run_with_actor(
    options: &RunOptions,
    target: &Target,
    actor: Option<Box<dyn Actor>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    crate::session::measure_nodes(
        options,
        target,
        &Probed::single(target),
        actor,
        RunSpec::default(),
        interrupt,
        notify,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::correlate::{Stall, WriteSummary};
    use crate::cli::ProbeArgs;
    use crate::measure::writer::WriterPlan;
    use crate::output::export::columns;
    use crate::output::export::columns::tests::{derived_header, probe_row};
    use crate::record::{WriteOp, WriteRecord};
    use crate::session::{cpu_wait_note, late_probe_note, query_buffer_note};

    #[test]
    fn column_constants_match_the_structs() {
        let node = crate::record::NodeCols::default();
        let probe = probe_row();
        assert_eq!(derived_header(&(&probe, &node)), columns::PROBES);
        let write = WriteRecord::timed(1, WriteOp::Set, String::new(), 1, (0, 0, 0));
        assert_eq!(derived_header(&(&write, &node)), columns::WRITES);
        let stall = Stall {
            start_us: 0,
            end_us: 0,
            duration_ms: 0.0,
            probes_delayed: 0,
            write_seq: None,
            ..Stall::default()
        };
        assert_eq!(derived_header(&(&stall, &node)), columns::STALLS);
        let interval = crate::analyze::findings::Interval::empty(
            0,
            1,
            hdrhistogram::Histogram::new(3).unwrap(),
        );
        assert_eq!(
            derived_header(&crate::output::export::TimelineRow::new(
                &interval, &node, 0
            )),
            columns::TIMELINE
        );
        assert_eq!(
            derived_header(&(
                &blank_summary(),
                &node,
                &crate::record::SameShard::default()
            )),
            columns::SUMMARY
        );
    }

    /// A write summary with every field at zero or empty.
    fn blank_summary() -> WriteSummary {
        WriteSummary {
            seq: 1,
            op: WriteOp::Set,
            size_bytes: 1,
            ok: true,
            ..Default::default()
        }
    }

    #[test]
    fn a_run_says_when_its_worst_probes_left_late() {
        let summary = |lag: Option<f64>| WriteSummary {
            hol_delay_ms: lag.map(|l| l + 1.0),
            hol_probe_send_lag_ms: lag,
            ..blank_summary()
        };
        let on_time = [summary(Some(0.02)), summary(None), summary(Some(0.99))];
        assert_eq!(late_probe_note(&on_time, false), None);
        let late = [summary(Some(0.02)), summary(Some(3.46)), summary(Some(1.0))];
        let note = late_probe_note(&late, false).expect("a note");
        assert!(note.starts_with("in 2 of 3 writes"), "{note}");
        assert!(
            note.contains("(up to 3.5 ms): up to that much of those figures"),
            "{note}"
        );
        assert!(note.contains("--realtime"), "{note}");
        let note = late_probe_note(&late, true).expect("a note");
        assert!(!note.contains("--realtime"), "{note}");
    }

    #[test]
    fn an_observe_run_says_when_the_server_waited_for_a_cpu() {
        use crate::session::observe_cpu_wait_note;
        assert_eq!(observe_cpu_wait_note(1200.0, 900.0, 0.0, 2, 5000.0), None);
        assert_eq!(observe_cpu_wait_note(4.0, 4.0, 49.0, 2, 500.0), None);
        assert_eq!(observe_cpu_wait_note(0.5, 0.5, 2.0, 2, 500.0), None);
        // A lot of waiting over the run, little of it inside the stalls: no note.
        assert_eq!(observe_cpu_wait_note(179.9, 3.0, 558.4, 2, 5000.0), None);
        let note = observe_cpu_wait_note(1143.0, 900.0, 791.1, 2, 5000.0).expect("a note");
        assert!(
            note.contains("waited up to 791.1 ms for a CPU during the 791.1 ms of stalls"),
            "{note}"
        );
        assert!(note.contains("(1143.0 ms over the run)"), "{note}");
        assert!(note.contains("2 x 5000/s"), "{note}");
    }

    #[test]
    fn the_cpu_wait_inside_stalls_is_bounded_by_both() {
        use crate::session::cpu_wait_in_stalls_ms;
        // Readings every 50 ms, 4 ms of waiting in each interval (ns).
        let samples: Vec<(u64, u64)> = (0..=4).map(|i| (i * 50_000, i * 4_000_000)).collect();
        // No stall: none of the wait.
        assert_eq!(cpu_wait_in_stalls_ms(&samples, &[]), 0.0);
        // A 20 ms stall inside the second interval: its interval's 4 ms.
        assert_eq!(cpu_wait_in_stalls_ms(&samples, &[(60_000, 80_000)]), 4.0);
        // A 2 ms stall: at most its own 2 ms.
        assert_eq!(cpu_wait_in_stalls_ms(&samples, &[(60_000, 62_000)]), 2.0);
        // A stall across two intervals, and one inside it counted once: 4 + 4.
        assert_eq!(
            cpu_wait_in_stalls_ms(&samples, &[(90_000, 120_000), (95_000, 99_000)]),
            8.0
        );
        // Stalls given in any order: 4 + 4.
        assert_eq!(
            cpu_wait_in_stalls_ms(&samples, &[(160_000, 170_000), (60_000, 80_000)]),
            8.0
        );
    }

    #[test]
    fn a_run_says_when_the_server_waited_for_a_cpu() {
        let summary = |held_ms: Option<f64>, wait_us: Option<u64>| WriteSummary {
            hol_delay_ms: held_ms,
            server_cpu_wait_us: wait_us,
            ..blank_summary()
        };
        // Under 1 ms, under a tenth of the figure, or unknown: nothing to say.
        let fine = [
            summary(Some(5.0), Some(900)),
            summary(Some(150.0), Some(14_000)),
            summary(None, Some(30_000)),
            summary(Some(80.0), None),
        ];
        assert_eq!(cpu_wait_note(&fine), None);
        let short = [
            summary(Some(150.0), Some(57_000)),
            summary(Some(8.0), Some(1_000)),
            summary(Some(150.0), Some(14_000)),
            // A long window's wait counts up to the figure at most.
            summary(Some(20.0), Some(140_000)),
        ];
        let note = cpu_wait_note(&short).expect("a note");
        assert!(note.starts_with("in 3 of 4 writes"), "{note}");
        assert!(note.contains("up to 57.0 ms of a figure"), "{note}");
        let long = [summary(Some(20.0), Some(140_000))];
        let note = cpu_wait_note(&long).expect("a note");
        assert!(note.contains("up to 20.0 ms of a figure"), "{note}");
        assert!(note.contains("server_cpu_wait_us"), "{note}");
    }

    #[test]
    fn a_run_says_when_sets_grew_the_query_buffer_kept_on_the_writer_s_connection() {
        const MIB: u64 = 1 << 20;
        let set = |size: u64, held_ms: f64, free: Option<u64>| WriteSummary {
            size_bytes: size,
            hol_delay_ms: Some(held_ms),
            writer_qbuf_free_bytes: free,
            ..blank_summary()
        };
        // A fresh buffer (20 KiB), a kept one larger than the value (used as it is), or none
        // read: nothing grew.
        let fresh = [
            set(64 * MIB, 50.0, Some(20_448)),
            set(32 * MIB, 40.0, Some(80 * MIB)),
            set(64 * MIB, 60.0, None),
        ];
        assert_eq!(query_buffer_note(&fresh), None);
        // Grown, but held others no longer than the SETs that grew nothing (a libc build's
        // realloc moves the pages), or under 10 ms: nothing to say.
        let alike = [
            set(64 * MIB, 6.0, Some(40 * MIB)),
            set(32 * MIB, 5.0, Some(20_448)),
            set(64 * MIB, 30.0, Some(40 * MIB)),
            set(64 * MIB, 25.0, Some(20_448)),
        ];
        assert_eq!(query_buffer_note(&alike), None);
        let small = [
            set(64 * MIB, 8.0, Some(40 * MIB)),
            set(32 * MIB, 2.0, Some(20_448)),
        ];
        assert_eq!(query_buffer_note(&small), None);
        let grown = [
            set(32 * MIB, 4.6, Some(20_448)),
            set(64 * MIB, 56.1, Some(40 * MIB)),
            set(32 * MIB, 5.7, Some(80 * MIB)),
            set(64 * MIB, 45.4, Some(40 * MIB)),
            set(32 * MIB, 2.9, Some(80 * MIB)),
            set(64 * MIB, 44.8, Some(40 * MIB)),
        ];
        let note = query_buffer_note(&grown).expect("a note");
        assert!(note.starts_with("3 of 6 SETs came while"), "{note}");
        assert!(note.contains("up to 40.0 MiB"), "{note}");
        assert!(
            note.contains("held others 44.8-56.1 ms, the other 3 2.9-5.7 ms"),
            "{note}"
        );
        assert!(note.contains("--same-connection"), "{note}");
        // Every SET grew one: no others to compare with, the figure alone.
        let all = [set(64 * MIB, 50.0, Some(40 * MIB))];
        assert!(query_buffer_note(&all).is_some());
        // The boundaries: a buffer of 1 MiB is a kept one, a value as large as the room fits.
        assert!(crate::measure::writer::grows_kept_buffer(MIB, MIB + 1));
        assert!(!crate::measure::writer::grows_kept_buffer(MIB, MIB));
        assert!(!crate::measure::writer::grows_kept_buffer(
            MIB - 1,
            64 * MIB
        ));
    }

    /// The library's defaults (what examples and other programs start from) are the CLI's.
    #[test]
    fn library_defaults_are_the_command_lines() {
        let cli = crate::cli::parse_flags::<ProbeArgs>(&["--writer-sizes", "1M"])
            .to_options()
            .expect("valid options");
        let lib = RunOptions::default();
        assert_eq!(cli.probe_threads, lib.probe_threads);
        assert_eq!(cli.probe_rate, lib.probe_rate);
        assert_eq!(cli.probe_cmd, lib.probe_cmd);
        assert_eq!(cli.stall_threshold_us, lib.stall_threshold_us);
        assert_eq!(cli.seed, lib.seed);
        assert_eq!(cli.duration, lib.duration);
        assert_eq!(cli.probes_export, lib.probes_export);
        let cli_plan = cli.writer.expect("a writer plan");
        let lib_plan = WriterPlan::default();
        assert_eq!(cli_plan.repeat, lib_plan.repeat);
        assert_eq!(cli_plan.gap, lib_plan.gap);
        assert_eq!(cli_plan.overwrite, lib_plan.overwrite);
        assert_eq!(cli_plan.keep, lib_plan.keep);
        assert_eq!(cli_plan.commands, lib_plan.commands);
        assert_eq!(cli.realtime, lib.realtime);
        assert_eq!(cli.tune_server, lib.tune_server);
        assert_eq!(cli.interval, lib.interval);
    }
}
