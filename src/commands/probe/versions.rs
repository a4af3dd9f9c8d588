//! The main job run more than once, then compared: `probe --baseline DIR ...` (run, then judge
//! against a stored run) and `probe --server-bin A --server-bin B ...` (the same plan against
//! each binary in turn, on a fresh embedded server each, one at a time; then the runs side by
//! side and each against the first). Exit status as `probe compare` when every run completed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use clap::Args;

use super::ProbeArgs;
use crate::cli::sections::target::TargetArgs;
use crate::commands::Output;
use crate::commands::compare::RulesArgs;
use crate::compare::render::{Format, render};
use crate::compare::{GroupKey, compare_all, describe_made, load_run, value_label};
use crate::error::{EXIT_OK, UsageError};
use crate::measure::target::{ServerBinary, ServerFlavor};
use crate::output::export::prepare_out_dir;

/// `--baseline` and the rules of its compare.
#[derive(Debug, Clone, Args)]
pub struct BaselineArgs {
    /// After the run, compare it with the run stored in DIR (a `probe --out` directory) and
    /// exit as `probe compare` does: 1 on a regression, 3 when inconclusive. The new run goes to --out (or a
    /// temporary directory).
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,

    #[command(flatten)]
    pub rules: RulesArgs,
}

/// Runs the main job, once or per `--server-bin`, and compares when asked; returns the exit
/// status.
pub fn run(
    target: &TargetArgs,
    probe: &ProbeArgs,
    baseline_args: &BaselineArgs,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<i32> {
    let several = target.server.server_bin.len() > 1;
    if !several && baseline_args.baseline.is_none() {
        // A gate's rule with nothing to compare would pass silently (a CI script that lost its
        // --baseline argument: the hostile trial).
        if let Some(flag) = baseline_args.rules.first_given() {
            return Err(UsageError::Conflict(format!(
                "{flag} is a rule of the compare after the run: it needs --baseline DIR (or several --server-bin)"
            ))
            .into());
        }
        return super::run(&probe.to_plan(target)?, interrupt, out);
    }
    // Check everything before anything runs.
    if !probe.output.format.is_text() {
        return Err(UsageError::Conflict(
            "--format json|markdown prints one run: with --baseline or several --server-bin, read each run's run.json in --out, or run `probe compare --format json|markdown` on them".into(),
        )
        .into());
    }
    let rules = baseline_args.rules.to_rules()?;
    let options = probe.to_options()?;
    let Some(writer) = &options.writer else {
        return Err(UsageError::Conflict(
            "--baseline and several --server-bin compare writes: they need --writer-sizes".into(),
        )
        .into());
    };
    let first = single(
        target,
        target.server.server_bin.first().map(PathBuf::as_path),
    );
    first.to_spec(None)?;
    let baseline = match &baseline_args.baseline {
        Some(dir) => {
            let run = load_run("--baseline", dir)?;
            // The (size, value, op)s planned here against the baseline's, before anything runs:
            // a type or ops of another run was found only after the whole run (the hostile trial).
            let planned: BTreeSet<GroupKey> = writer
                .steps("")
                .iter()
                .map(|step| {
                    (
                        step.size_bytes,
                        value_label(Some(step.shape.kind), Some(step.shape.elements)),
                        step.op.name().to_string(),
                    )
                })
                .collect();
            let stored: BTreeSet<GroupKey> = run.groups().into_keys().collect();
            if planned.is_disjoint(&stored) {
                return Err(UsageError::invalid(
                    "--baseline",
                    dir.display(),
                    format!(
                        "its run made {}, none of what is planned here ({}): nothing to compare",
                        describe_made(&stored),
                        describe_made(&planned)
                    ),
                )
                .into());
            }
            Some(run)
        }
        None => None,
    };
    let binaries = if several {
        target
            .server
            .server_bin
            .iter()
            .map(|bin| ServerBinary::resolve(Some(bin)))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };

    if probe.dry_run {
        // Each run's plan, then what would be compared: nothing is started or written.
        if several {
            for (i, bin) in target.server.server_bin.iter().enumerate() {
                out.line(&format!(
                    "run {} of {}: {}",
                    i + 1,
                    binaries.len(),
                    bin.display()
                ));
                super::run(&probe.to_plan(&single(target, Some(bin)))?, interrupt, out)?;
            }
        } else {
            super::run(&probe.to_plan(&first)?, interrupt, out)?;
        }
        out.line(&match &baseline_args.baseline {
            Some(dir) => format!("then: compare with the run in {}", dir.display()),
            None => "then: compare each run with the first".to_string(),
        });
        return Ok(EXIT_OK);
    }

    let mut temp_dir: Option<tempfile::TempDir> = None;
    let root = match &probe.output.out {
        Some(dir) => dir.clone(),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("holprobe-")
                .tempdir()
                .context("creating a temporary directory for the run's exports")?;
            out.note(&format!(
                "no --out given: the run's exports go to {} (removed at the end; pass --out DIR to keep them)",
                temp.path().display()
            ));
            let path = temp.path().to_path_buf();
            temp_dir = Some(temp);
            path
        }
    };
    let dirs: Vec<PathBuf> = if several {
        run_dir_names(&binaries)
            .into_iter()
            .map(|name| root.join(name))
            .collect()
    } else {
        vec![root.clone()]
    };
    // With --force, --out into the baseline's own directory replaced the run it was then
    // compared with (the hostile trial); with several --server-bin, each run's directory under
    // --out is checked.
    if let Some(baseline_dir) = &baseline_args.baseline {
        let same =
            |a: &std::path::Path, b: &std::path::Path| match (a.canonicalize(), b.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => a == b,
            };
        if let Some(dir) = dirs.iter().find(|dir| same(dir, baseline_dir)) {
            return Err(UsageError::invalid(
                "--out",
                probe.output.out.as_deref().unwrap_or(dir).display(),
                format!(
                    "{} is the --baseline directory: the new run would replace the run it is compared with; give another --out",
                    dir.display()
                ),
            )
            .into());
        }
    }
    for dir in &dirs {
        // Checked for every directory first; each run below locks its own as it goes.
        drop(prepare_out_dir(dir, probe.output.force)?);
    }

    for (i, dir) in dirs.iter().enumerate() {
        let bin = target.server.server_bin.get(i).map(PathBuf::as_path);
        let this_target = single(target, bin);
        let mut this_probe = probe.clone();
        this_probe.output.out = Some(dir.clone());
        this_probe.output.force = true; // checked above for every directory
        if several {
            let which = format!(
                "run {} of {}: {} {} ({})",
                i + 1,
                dirs.len(),
                flavor_name(binaries[i].flavor),
                binaries[i].version,
                binaries[i].path.display()
            );
            // The tables on stdout say whose they are (they read alike: the hostile trial).
            out.line(&which);
            out.note(&format!("== {which} -> {}", dir.display()));
        }
        let code = super::run(&this_probe.to_plan(&this_target)?, interrupt, out)?;
        if code != EXIT_OK {
            if several && i + 1 < dirs.len() {
                out.note(&format!(
                    "stopped after run {} of {}: no compare",
                    i + 1,
                    dirs.len()
                ));
            }
            keep_temp(temp_dir.take(), "the run did not complete", out);
            return Ok(code);
        }
    }

    let mut runs = Vec::new();
    runs.extend(baseline);
    let compared = dirs
        .iter()
        .map(|dir| load_run("--out", dir))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|made| {
            runs.extend(made);
            compare_all(&runs, rules)
        });
    let report = match compared {
        Ok(report) => report,
        Err(err) => {
            keep_temp(temp_dir.take(), "the compare failed", out);
            return Err(err.into());
        }
    };
    out.line("");
    for line in render(&report, Format::Table).lines() {
        out.line(line);
    }
    Ok(crate::commands::compare::exit_status(&report))
}

/// What was measured is not lost with a run or compare that did not end well: a temporary
/// --out is kept, and said where.
fn keep_temp(temp: Option<tempfile::TempDir>, why: &str, out: &mut Output) {
    if let Some(temp) = temp {
        out.note(&format!(
            "the exports are kept in {} ({why})",
            temp.keep().display()
        ));
    }
}

/// The target flags with one server binary (or the default).
fn single(target: &TargetArgs, bin: Option<&Path>) -> TargetArgs {
    let mut one = target.clone();
    one.server.server_bin = bin.map(Path::to_path_buf).into_iter().collect();
    one
}

fn flavor_name(flavor: ServerFlavor) -> &'static str {
    flavor.name()
}

/// `redis-7.0.15`, `valkey-9.1.2`, ...; a second binary of the same version gets `-2`.
pub fn run_dir_names(binaries: &[ServerBinary]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for binary in binaries {
        let base = format!("{}-{}", flavor_name(binary.flavor), binary.version);
        let mut name = base.clone();
        let mut n = 1;
        while names.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        names.push(name);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_directories_are_named_by_flavor_and_version() {
        let bin = |flavor, version: &str| ServerBinary {
            path: PathBuf::from("/x"),
            flavor,
            version: version.into(),
        };
        let names = run_dir_names(&[
            bin(ServerFlavor::Redis, "7.0.15"),
            bin(ServerFlavor::Valkey, "9.1.2"),
            bin(ServerFlavor::Redis, "7.0.15"),
        ]);
        assert_eq!(names, ["redis-7.0.15", "valkey-9.1.2", "redis-7.0.15-2"]);
    }
}
