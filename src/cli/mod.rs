//! The `probe` command line: the clap wiring (the `Cli`, its subcommands, the usage error in
//! one line, the signal handler) and the flag sections every subcommand is built from
//! ([`sections`]). Each subcommand checks its flags into its plan and runs in
//! [`crate::commands`].

pub mod sections;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;

pub use crate::commands::{
    CleanArgs, CompareArgs, LoadArgs, LoadPlan, Output, PopulateArgs, ProbeArgs, RulesArgs,
};
use crate::commands::{calibrate, clean, compare, keys, load, populate, probe};
pub use sections::probing::{
    MAX_PROBE_RATE, MAX_PROBE_THREADS, parse_probe_threads, parse_rate, parse_stall_threshold,
};
pub use sections::target::TargetArgs;
pub use sections::topology::TopologyArgs;

use crate::error::{EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, exit_status};

/// Measures how long a Redis or Valkey server keeps its other clients waiting while it handles
/// very large values.
///
/// Probe threads send PING (or GET) at a fixed rate on their own connections while a writer
/// stores large values; every write is reported with how long the others were held up.
/// Without --url the tool starts its own redis-server on a free loopback port (persistence off)
/// and stops it afterwards.
#[derive(Debug, Parser)]
#[command(
    name = "probe",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    /// Other jobs; without one, `probe` runs the main job (probes and large writes).
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    target: TargetArgs,

    #[command(flatten)]
    probe: ProbeArgs,

    #[command(flatten)]
    baseline: probe::versions::BaselineArgs,
}

/// The subcommands. Each lives in its own `commands/<name>` with its own `Args` struct and a
/// `run(args, interrupt, output) -> anyhow::Result<i32>` returning the exit status.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Inject stalls of known length while probing, and check the measured stalls against the
    /// accuracy the tool claims (exit 0 when all are within it, 1 otherwise).
    Calibrate(calibrate::CalibrateArgs),
    /// Fill holprobe:load:0..N-1 with random values for `probe load`.
    Populate(PopulateArgs),
    /// Concurrent clients against populated servers (requests, requests per second, MiB/s and round-trip
    /// percentiles per server), optionally with large writes under load.
    Load(Box<LoadArgs>),
    /// Remove every key under holprobe:load: (SCAN + UNLINK in batches).
    Clean(CleanArgs),
    /// Which keys of a live server would freeze it, for how long, and when: a SCAN paced by
    /// probes, each key's predicted DEL, UNLINK, expiry and read freeze.
    Keys(Box<keys::KeysArgs>),
    /// Compare runs (probe --out directories): per size, baseline vs candidate head-of-line
    /// delay and SET time over the repeats, with a verdict. Exit 1 on a regression, 3 when
    /// inconclusive (too few repeats, or a difference hidden in their spread).
    Compare(CompareArgs),
}

/// Runs the command line and returns the process exit status. Errors are printed here, as one
/// line each, never as a panic.
pub fn main_entry() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            };
            if code == EXIT_USAGE {
                let argv: Vec<String> = std::env::args().skip(1).collect();
                let rendered = name_flags_before_subcommand(&err.render().to_string(), &argv);
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stderr(),
                    format_args!("{}\n", one_line_usage_error_of(&rendered, &argv)),
                );
            } else {
                let _ = err.print();
            }
            return code;
        }
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    install_signal_handler(Arc::clone(&interrupt));
    let mut output = Output::new(Arc::clone(&interrupt));
    let result = match &cli.command {
        Some(Command::Calibrate(args)) => calibrate::run(args, &interrupt, &mut output),
        Some(Command::Populate(args)) => populate::run(args, &interrupt, &mut output),
        Some(Command::Load(args)) => load::run(args, &interrupt, &mut output),
        Some(Command::Clean(args)) => clean::run(args, &interrupt, &mut output),
        Some(Command::Keys(args)) => keys::run(args, &interrupt, &mut output),
        None => probe::versions::run(
            &cli.target,
            &cli.probe,
            &cli.baseline,
            &interrupt,
            &mut output,
        ),
        Some(Command::Compare(args)) => compare::run(args, &mut output),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            let line = crate::error::one_line(&err);
            output.error(&line);
            let code = exit_status(&err);
            // A measuring command asked for JSON that failed before its report (no server, a
            // refused password) printed nothing on stdout: a script piping it to jq gets the
            // failed run's shape instead (both hostile trials). Bad input (exit 2) prints none.
            if code == crate::error::EXIT_FAILURE && json_requested(&cli) && !output.wrote_stdout()
            {
                let doc = serde_json::json!({"status": "failed", "status_reason": line});
                output.line(&doc.to_string());
            }
            code
        }
    }
}

/// Whether the command asked for `--format json` (the measuring commands; compare's failures
/// are bad input).
fn json_requested(cli: &Cli) -> bool {
    use crate::output::format::Format;
    let format = match &cli.command {
        None => cli.probe.output.format,
        Some(Command::Load(args)) => args.output.output.format,
        Some(Command::Keys(args)) => args.output.format,
        Some(Command::Calibrate(args)) => args.output.output.format,
        _ => return false,
    };
    format == Format::Json
}

/// [`one_line_usage_error_of`] without the command line.
#[cfg(test)]
fn one_line_usage_error(rendered: &str) -> String {
    one_line_usage_error_of(rendered, &[])
}

/// clap's error as one line, like every other usage error: its first line, its tip when it has
/// one (`a similar argument exists: '--writer-sizes'`), and where the help of that (sub)command
/// is, without the usage block. Where clap shows no usage (an invalid value), the subcommand is
/// the one the command line `argv` (without the program) names.
fn one_line_usage_error_of(rendered: &str, argv: &[String]) -> String {
    let first = rendered
        .lines()
        .next()
        .unwrap_or("error: invalid arguments");
    // `the following required arguments were not provided:` lists them on the lines below.
    let listed: Vec<&str> = if first.trim_end().ends_with(':') {
        rendered
            .lines()
            .skip(1)
            .take_while(|line| line.starts_with(' ') && !line.trim().is_empty())
            .map(str::trim)
            .collect()
    } else {
        Vec::new()
    };
    let first = if listed.is_empty() {
        first.to_string()
    } else {
        format!("{} {}", first.trim_end(), listed.join(", "))
    };
    let tip = rendered
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("tip: "));
    // `Usage: probe load [OPTIONS]` -> `probe load`.
    let command = rendered
        .lines()
        .find_map(|line| line.strip_prefix("Usage: "))
        .map(|usage| {
            usage
                .split_whitespace()
                .take_while(|word| !word.starts_with(['[', '<', '-']))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|command| !command.is_empty())
        .or_else(|| {
            let names: Vec<String> = <Cli as clap::CommandFactory>::command()
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
            argv.iter()
                .find(|arg| names.contains(arg))
                .map(|name| format!("probe {name}"))
        })
        .unwrap_or_else(|| "probe".to_string());
    match tip {
        Some(tip) => format!("{first}; {tip} (see {command} --help)"),
        None => format!("{first} (see {command} --help)"),
    }
}

/// clap's "the subcommand 'X' cannot be used with:" names no flag when the flags given before
/// the subcommand are the target's (`--port 7732 --user u calibrate`): the flags are named
/// from the command line then, with where they belong. Any other message is left as it is.
fn name_flags_before_subcommand(rendered: &str, argv: &[String]) -> String {
    let (first, rest) = rendered.split_once('\n').unwrap_or((rendered, ""));
    let Some(subcommand) = first
        .trim_end()
        .strip_suffix("cannot be used with:")
        .and_then(|head| head.strip_prefix("error: the subcommand '"))
        .and_then(|head| head.strip_suffix("' "))
    else {
        return rendered.to_string();
    };
    let flags: Vec<&str> = argv
        .iter()
        .take_while(|arg| arg.as_str() != subcommand)
        .filter(|arg| arg.starts_with('-'))
        .map(|arg| arg.split_once('=').map_or(arg.as_str(), |(flag, _)| flag))
        .collect();
    if flags.is_empty() {
        return rendered.to_string();
    }
    format!(
        "error: {} given before the subcommand '{subcommand}': give them after it, as in probe {subcommand} {} ...\n{rest}",
        flags.join(", "),
        flags[0],
    )
}

/// Ctrl-C and SIGTERM ask the run to stop and keep what it measured. Signals within
/// [`SAME_SIGNAL`] of the first are the same request: `timeout -s INT` signals the tool and its
/// process group, and a terminal's Ctrl-C can come twice, and exiting on the second lost the
/// run's files and left a `--url` server's settings changed (the hostile trials: 1 run in 10-15).
/// A later one exits at once, saying what may be left behind and how to undo it.
fn install_signal_handler(interrupt: Arc<AtomicBool>) {
    let first = std::sync::OnceLock::<std::time::Instant>::new();
    let _ = ctrlc::set_handler(move || {
        if !interrupt.swap(true, Ordering::SeqCst) {
            let _ = first.set(std::time::Instant::now());
            return;
        }
        if first.get().is_some_and(|at| at.elapsed() < SAME_SIGNAL) {
            return;
        }
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!(
                "interrupted again: exiting without finishing; the run's files may be incomplete, and on a --url server the tool's keys and any setting it changed may be left: `probe clean` with the same --url (or the next run there) undoes them\n"
            ),
        );
        std::process::exit(EXIT_INTERRUPTED);
    });
}

/// See [`install_signal_handler`].
const SAME_SIGNAL: std::time::Duration = std::time::Duration::from_secs(1);

/// For the tests of a command's flags: `argv` (without the program's name) parsed as the flags
/// `A` of one command.
#[cfg(test)]
pub(crate) fn parse_flags<A: clap::Args>(argv: &[&str]) -> A {
    #[derive(Parser)]
    struct Flags<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    Flags::<A>::try_parse_from(std::iter::once("probe").chain(argv.iter().copied()))
        .expect("clap parse")
        .args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's clap command, the main job's first.
    fn every_command() -> Vec<clap::Command> {
        let root = <Cli as clap::CommandFactory>::command();
        let mut all = vec![root.clone()];
        all.extend(root.get_subcommands().cloned());
        all
    }

    /// Each subcommand's help says what that subcommand does with a shared flag: populate and
    /// clean only ever use a server given to them, calibrate starts one server at most.
    #[test]
    fn shared_flags_are_worded_for_their_subcommand() {
        for command in every_command() {
            let name = command.get_name().to_string();
            for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                let id = arg.get_id().as_str();
                if name != "probe" {
                    assert!(
                        !help.contains("the main job then runs"),
                        "{name} --{id}: {help}"
                    );
                    assert!(
                        !help.contains("every --server-bin"),
                        "{name} --{id}: {help}"
                    );
                }
                if ["populate", "clean"].contains(&name.as_str()) {
                    assert!(!help.contains("Measure"), "{name} --{id}: {help}");
                    assert!(
                        !["server_bin", "server_arg"].contains(&id),
                        "{name} shows --{id}, which it never uses"
                    );
                }
                // No "seed" in anything a user reads: not in a help, not in a shown flag's
                // name or value name (the hidden alias --seed is only accepted, never shown).
                let long = arg
                    .get_long_help()
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                let names = format!(
                    "{:?} {:?} {:?}",
                    arg.get_long(),
                    arg.get_visible_aliases(),
                    arg.get_value_names()
                );
                assert!(
                    !(help + &long + &names).to_lowercase().contains("seed"),
                    "{name} --{id}"
                );
            }
        }
    }

    #[test]
    fn every_size_flag_states_the_one_rule() {
        let mut seen = 0;
        for command in every_command() {
            for arg in command.get_arguments() {
                let name = arg.get_id().as_str();
                if ["writer_sizes", "predict", "value_size"].contains(&name) {
                    seen += 1;
                    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                    assert!(
                        help.ends_with(crate::units::SIZE_RULE),
                        "{} --{name}: {help}",
                        command.get_name()
                    );
                }
            }
        }
        // probe: --writer-sizes, --predict; populate: --value-size; load: both.
        assert_eq!(seen, 5);
    }

    #[test]
    fn usage_errors_keep_clap_s_tip_in_one_line() {
        let err = Cli::try_parse_from(["probe", "--writer-size", "1M"]).unwrap_err();
        let line = one_line_usage_error(&err.render().to_string());
        assert_eq!(
            line,
            "error: unexpected argument '--writer-size' found; a similar argument exists: '--writer-sizes' (see probe --help)"
        );
        let err = Cli::try_parse_from(["probe", "load", "--clientz", "4"]).unwrap_err();
        let line = one_line_usage_error(&err.render().to_string());
        assert!(line.contains("'--clients'"), "{line}");
        assert!(line.ends_with("(see probe load --help)"), "{line}");
        let rendered = "error: the following required arguments were not provided:\n  --tls-key <FILE>\n\nUsage: probe --tls-cert <FILE> --tls-key <FILE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_usage_error(rendered),
            "error: the following required arguments were not provided: --tls-key <FILE> (see probe --help)"
        );
        assert!(!line.contains('\n'));
        // An invalid value: clap shows no usage, the subcommand is read from the command line.
        let argv = ["probe", "keys", "--format", "yaml"];
        let err = Cli::try_parse_from(argv).unwrap_err();
        let argv: Vec<String> = argv[1..].iter().map(|a| a.to_string()).collect();
        let line = one_line_usage_error_of(&err.render().to_string(), &argv);
        assert!(line.ends_with("(see probe keys --help)"), "{line}");
    }
}
