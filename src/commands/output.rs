//! Where the command line's text goes: results to stdout, notes and errors to stderr, a progress
//! bar on a terminal's stderr. A closed stdout or stderr (`probe ... | head`, `probe ... 2>&1 |
//! head`) stops the run quietly instead of panicking.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Terminal output of one command.
pub struct Output {
    interrupt: Arc<AtomicBool>,
    /// Set once stdout or stderr is found closed by its reader.
    closed: AtomicBool,
    /// Set once anything was written to stdout.
    wrote_stdout: AtomicBool,
    progress: Option<ProgressBar>,
}

impl Output {
    /// Output that sets `interrupt` when stdout is closed by its reader.
    pub fn new(interrupt: Arc<AtomicBool>) -> Output {
        Output {
            interrupt,
            closed: AtomicBool::new(false),
            wrote_stdout: AtomicBool::new(false),
            progress: None,
        }
    }

    /// True once a write to stdout or stderr failed because its reader went away.
    pub fn stdout_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// True once anything was written to stdout.
    pub fn wrote_stdout(&self) -> bool {
        self.wrote_stdout.load(Ordering::SeqCst)
    }

    /// Writes a line to stdout or stderr; a reader gone (a broken pipe) stops the run, as
    /// Ctrl-C does, and nothing more is written. Any other error of a terminal is let be.
    fn write_line(&self, to_stderr: bool, text: &str) {
        if self.stdout_closed() {
            return;
        }
        let write = || {
            if to_stderr {
                writeln!(io::stderr(), "{text}")
            } else {
                writeln!(io::stdout(), "{text}")
            }
        };
        let result = match &self.progress {
            Some(bar) => bar.suspend(write),
            None => write(),
        };
        if let Err(err) = result
            && err.kind() == io::ErrorKind::BrokenPipe
        {
            self.closed.store(true, Ordering::SeqCst);
            self.interrupt.store(true, Ordering::SeqCst);
        }
    }

    /// A result line on stdout.
    pub fn line(&mut self, text: &str) {
        self.wrote_stdout.store(true, Ordering::SeqCst);
        self.write_line(false, text);
    }

    /// A note on stderr (what was started, warnings).
    pub fn note(&self, text: &str) {
        self.write_line(true, text);
    }

    /// A warning on stderr.
    pub fn warn(&self, text: &str) {
        self.note(&format!("warning: {text}"));
    }

    /// The final error line on stderr.
    pub fn error(&mut self, text: &str) {
        self.finish_progress();
        self.write_line(true, &format!("error: {text}"));
    }

    /// Starts a progress bar on stderr (drawn only when stderr is a terminal).
    pub fn start_progress(&mut self, total: u64, unit: &str) {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let template =
            format!("{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {unit}  {{msg}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        self.progress = Some(bar);
    }

    /// Updates the progress bar.
    pub fn progress(&self, position: u64, message: String) {
        if let Some(bar) = &self.progress {
            bar.set_position(position);
            bar.set_message(message);
        }
    }

    /// Removes the progress bar.
    pub fn finish_progress(&mut self) {
        if let Some(bar) = self.progress.take() {
            bar.finish_and_clear();
        }
    }
}

/// The exit status of a run that produced a report, saying on stderr why it is not 0 (for
/// failed writes: how many, and the first one's error).
pub fn run_exit_status(
    out: &mut Output,
    status: crate::output::export::RunStatus,
    reason: Option<&str>,
    writes: &[crate::record::WriteRecord],
) -> i32 {
    use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK};
    use crate::output::export::RunStatus;
    // `--duration` ending the writer's plan is the limit the user set, not a Ctrl-C: the run
    // exits as its writes say (run.json keeps `interrupted` with that reason).
    let cut_by_duration = status == RunStatus::Interrupted
        && reason == crate::session::duration_before_plan().1.as_deref();
    match status {
        RunStatus::Interrupted if out.stdout_closed() => EXIT_INTERRUPTED,
        RunStatus::Interrupted if !cut_by_duration => {
            out.error(&format!(
                "{}; results measured so far were kept",
                reason.unwrap_or("interrupted")
            ));
            EXIT_INTERRUPTED
        }
        RunStatus::Failed => {
            out.error(&format!(
                "{}; results measured so far were kept",
                reason.unwrap_or("the run failed")
            ));
            EXIT_FAILURE
        }
        _ => {
            if cut_by_duration {
                out.warn(&format!(
                    "{}: {} write(s) made, their results kept",
                    reason.unwrap_or_default(),
                    writes.len()
                ));
            }
            match crate::output::export::failed_writes(writes) {
                Some(failed) => {
                    out.error(&failed);
                    EXIT_FAILURE
                }
                None => EXIT_OK,
            }
        }
    }
}

/// Says on stderr, once per silence, that no probe has answered for a while: a frozen server
/// (`kill -STOP`) kept the tool silent until `--timeout` had passed, and longer.
#[derive(Debug, Clone)]
pub struct SilenceWatch {
    limit: std::time::Duration,
    last_probes: usize,
    since: std::time::Duration,
    said: bool,
}

impl SilenceWatch {
    /// A watch for probes bounded by `limit` (`--timeout`).
    pub fn new(limit: std::time::Duration) -> Self {
        SilenceWatch {
            limit,
            last_probes: 0,
            since: std::time::Duration::ZERO,
            said: false,
        }
    }

    /// The line to print at this tick of the run's clock (`elapsed`), with `probes` answered so
    /// far: after half the limit (1 s to 5 s) without one, once, naming what it waits for.
    pub fn tick(
        &mut self,
        elapsed: std::time::Duration,
        probes: usize,
        server: &dyn std::fmt::Display,
    ) -> Option<String> {
        if probes != self.last_probes {
            (self.last_probes, self.since, self.said) = (probes, elapsed, false);
            return None;
        }
        let quiet = elapsed.saturating_sub(self.since);
        let after = (self.limit / 2).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(5),
        );
        if self.said || quiet < after {
            return None;
        }
        self.said = true;
        Some(format!(
            "no probe answered for {:.1} s: waiting for {server} (the run gives up after --timeout {})",
            quiet.as_secs_f64(),
            crate::measure::target::format_limit(self.limit)
        ))
    }
}

/// A dry run's plan on stdout: its lines, or with `--format json` one JSON document
/// (`{"dry_run": true, "command": ..., "plan": [lines]}`), since stdout of `--format json` is
/// one document a CI reads (it printed the text plan).
pub fn print_dry_run(
    out: &mut Output,
    command: &str,
    lines: &[String],
    format: crate::output::format::Format,
) -> anyhow::Result<()> {
    match format {
        crate::output::format::Format::Json => {
            let doc = serde_json::json!({"dry_run": true, "command": command, "plan": lines});
            out.line(&serde_json::to_string_pretty(&doc)?);
        }
        _ => {
            for line in lines {
                out.line(line);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::SilenceWatch;

    #[test]
    fn a_silence_is_said_once_after_half_the_limit() {
        let mut watch = SilenceWatch::new(Duration::from_secs(2));
        let at = Duration::from_millis;
        assert_eq!(watch.tick(at(100), 10, &"s"), None);
        assert_eq!(watch.tick(at(1000), 10, &"s"), None);
        let line = watch.tick(at(1100), 10, &"redis://h:1").unwrap();
        assert!(
            line.starts_with("no probe answered for 1.0 s: waiting for redis://h:1")
                && line.ends_with("(the run gives up after --timeout 2 s)"),
            "{line}"
        );
        assert_eq!(watch.tick(at(1500), 10, &"s"), None);
        // Answers again, then silent again: said again.
        assert_eq!(watch.tick(at(1600), 11, &"s"), None);
        assert!(watch.tick(at(2700), 11, &"s").is_some());
        // A long limit waits 5 s at most.
        let mut watch = SilenceWatch::new(Duration::from_secs(30));
        assert_eq!(watch.tick(at(4900), 0, &"s"), None);
        assert!(watch.tick(at(5000), 0, &"s").is_some());
    }
}
