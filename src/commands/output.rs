//! Where the command line's text goes: results to stdout, notes and errors to stderr, a progress
//! bar on a terminal's stderr. A closed stdout (`probe ... | head`) stops the run quietly instead
//! of panicking.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Terminal output of one command.
pub struct Output {
    interrupt: Arc<AtomicBool>,
    stdout_closed: bool,
    progress: Option<ProgressBar>,
}

impl Output {
    /// Output that sets `interrupt` when stdout is closed by its reader.
    pub fn new(interrupt: Arc<AtomicBool>) -> Output {
        Output {
            interrupt,
            stdout_closed: false,
            progress: None,
        }
    }

    /// True once a write to stdout failed because its reader went away.
    pub fn stdout_closed(&self) -> bool {
        self.stdout_closed
    }

    /// A result line on stdout.
    pub fn line(&mut self, text: &str) {
        if self.stdout_closed {
            return;
        }
        let result = match &self.progress {
            Some(bar) => bar.suspend(|| writeln!(io::stdout(), "{text}")),
            None => writeln!(io::stdout(), "{text}"),
        };
        if let Err(err) = result
            && err.kind() == io::ErrorKind::BrokenPipe
        {
            self.stdout_closed = true;
            self.interrupt.store(true, Ordering::SeqCst);
        }
    }

    /// A note on stderr (what was started, warnings).
    pub fn note(&self, text: &str) {
        match &self.progress {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    /// A warning on stderr.
    pub fn warn(&self, text: &str) {
        self.note(&format!("warning: {text}"));
    }

    /// The final error line on stderr.
    pub fn error(&mut self, text: &str) {
        self.finish_progress();
        if !self.stdout_closed {
            eprintln!("error: {text}");
        }
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
