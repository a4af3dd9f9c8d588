//! `probe keys`' flags: the target, probing, output and topology sections and its own (what to
//! scan, how fast, what to keep), checked into its one [`KeysPlan`] before anything connects.

use std::path::PathBuf;

use clap::Args;

use crate::cli::sections::output::OutputArgs;
use crate::cli::sections::parse_count;
use crate::cli::sections::probing::CalibrateProbingArgs;
use crate::cli::sections::target::{ServerArgs, TargetArgs};
use crate::cli::sections::topology::{DiscoveryArgs, DiscoveryPlan};
use crate::error::UsageError;
use crate::keys::model::CostModel;
use crate::load::cluster::ReadFrom;
use crate::measure::target::TargetSpec;
use crate::output::format::Format;
use crate::run::RunOptions;
use crate::units::parse_size_or_zero;
use crate::workload::kinds::kind_names;
use crate::workload::{ValueKind, kind_named};

/// Which keys of a live server would freeze it, for how long, and when: SCAN (never KEYS) with
/// a few cheap commands per key, paced by probes watching the server, then each key's predicted
/// DEL, UNLINK, expiry, eviction, overwrite and whole-read freeze from the server version's cost
/// model.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("url", |a| a.help("The server to scan: redis://[user:password@]host:port[/db] or rediss:// (or --host/--port); a replica works, and on a cluster node every master is scanned. The password may instead come from REDISCLI_AUTH or --password. Required")),
    // A scan never starts a server; --refit and --replay measure one they start.
    mut_arg("server_bin", |a| a.help("With --refit or --replay: the server binary to start and measure (--refit's default: redis-server on PATH; --replay needs it)")),
    mut_arg("server_arg", |a| a.help("With --refit or --replay: an extra argument for the started server (as probe --server-arg)")),
    mut_arg("out", |a| a.help("Write keys.csv (every key at or above --size-floor, as scanned) and run.json here")),
    mut_arg("format", |a| a.help("What stdout gets: `text` (the report on one screen), `json` (run.json's content; notes and progress stay on stderr) or `markdown` (the report's tables)")),
    mut_arg("topology", |a| a.help("auto: on a Redis Cluster node, scan every master (or every replica with --read-from replicas), each probed; single: only the --url server")),
    mut_arg("node_address", |a| a.help("Reach a cluster node that announces FROM (host:port) at TO (host:port) instead (NAT, containers). Repeatable")),
    // A scan changes no setting (refused if given).
    mut_arg("tune_server", |a| a.hide(true))
)]
pub struct KeysArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Only keys matching this glob (SCAN MATCH).
    #[arg(long = "match", value_name = "PATTERN")]
    pub pattern: Option<String>,

    /// Only keys of this type (SCAN TYPE): string, hash, list, set, zset or stream.
    #[arg(long = "type", value_name = "TYPE")]
    pub kind: Option<String>,

    /// Keys asked for per SCAN (COUNT), at most: the scan asks for fewer when its batches
    /// delay the probes past --stall-threshold.
    #[arg(
        long,
        value_name = "N",
        default_value = "100",
        allow_negative_numbers = true
    )]
    pub count: String,

    /// Rows of the worst-keys table.
    #[arg(
        long,
        value_name = "N",
        default_value = "10",
        allow_negative_numbers = true
    )]
    pub top: String,

    /// keys.csv gets every key of at least this many bytes (MEMORY USAGE, or STRLEN where
    /// MEMORY is refused); 0 for every key.
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "64K",
        allow_negative_numbers = true
    )]
    pub size_floor: String,

    /// A cost model file (as in data/models/) instead of the one shipped for the server's
    /// version; one fitted on another version is used with a warning.
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,

    /// On a cluster: scan the masters, or every shard's replicas.
    #[arg(long, value_name = "masters|replicas", default_value = "masters")]
    pub read_from: String,

    /// Instead of scanning: refit the cost model on a server started from --server-bin, from
    /// the tool's own measured ops (each type built, read, deleted, unlinked, expired,
    /// overwritten and evicted under the probes), and write it to --out as model.json
    /// (--format json prints it). About two minutes with the defaults.
    #[arg(long)]
    pub refit: bool,

    /// With --refit: the types measured (default string,hash,set,zset,list,stream).
    #[arg(long, value_name = "LIST")]
    pub refit_types: Option<String>,

    /// With --refit: a collection's sizes, in elements of 16 bytes (a string is 16M and 64M).
    #[arg(long, value_name = "LIST", allow_negative_numbers = true)]
    pub refit_elements: Option<String>,

    /// With --refit: how many times each op is measured per size.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub refit_repeat: Option<String>,

    /// After the scan: build the N worst keys' shapes (type, element count and element size,
    /// never their contents) on a server the tool starts from --server-bin, measure their DEL,
    /// UNLINK, expiry, eviction and whole read under the probes, and print predicted against
    /// measured beside each key (replay.csv in --out). The server scanned is only read.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub replay: Option<String>,

    #[command(flatten)]
    pub probing: CalibrateProbingArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub topology: DiscoveryArgs,
}

/// `probe keys`' plan.
pub struct KeysPlan {
    /// The server to scan.
    pub target: TargetSpec,
    /// The probe run's options.
    pub options: RunOptions,
    /// `--match`.
    pub pattern: Option<String>,
    /// `--type`.
    pub kind: Option<&'static dyn ValueKind>,
    /// `--count`.
    pub count: u64,
    /// `--top`.
    pub top: usize,
    /// `--size-floor`, bytes.
    pub size_floor_bytes: u64,
    /// `--model`, read and checked (its server is set against the scanned one once that is
    /// known: another version's is used with a warning).
    pub model: Option<(PathBuf, CostModel)>,
    /// `--read-from`.
    pub read_from: ReadFrom,
    /// `--topology`, `--node-address`.
    pub discovery: DiscoveryPlan,
    /// `--out`, `--force`, `--format`.
    pub out: Option<PathBuf>,
    /// `--force`.
    pub force: bool,
    /// `--format`.
    pub format: Format,
    /// `--refit`: what to measure (the target is then a server the tool starts).
    pub refit: Option<super::refit::RefitPlan>,
    /// `--replay`: how many keys, and the server they are rebuilt on.
    pub replay: Option<super::replay::ReplayPlan>,
}

/// `--refit`'s default types.
pub const REFIT_TYPES: &str = "string,hash,set,zset,list,stream";
/// `--refit`'s default sizes, elements.
pub const REFIT_ELEMENTS: &str = "50k,200k";
/// `--refit`'s default repeats.
pub const REFIT_REPEAT: &str = "2";

/// Refuses a glob the server would read otherwise than its writer meant: empty, or with a `[`
/// never closed (SCAN then matches it literally up to the end, which is never what was meant).
fn check_pattern(pattern: &str) -> Result<(), UsageError> {
    if pattern.is_empty() {
        return Err(UsageError::invalid(
            "--match",
            "",
            "an empty pattern matches no key (use * for every key)",
        ));
    }
    let bytes = pattern.as_bytes();
    let mut i = 0;
    let mut open = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'[' if !open => open = true,
            b']' if open => open = false,
            _ => {}
        }
        i += 1;
    }
    if open {
        return Err(UsageError::invalid(
            "--match",
            pattern,
            "a [ is never closed by ] (write \\[ for a literal bracket)",
        ));
    }
    Ok(())
}

/// The largest model file read (the shipped ones are about 200 KB): a device or a huge file
/// given by mistake is refused, not read into memory (`--model /dev/zero`; the hostile trial).
const MODEL_FILE_MOST_BYTES: u64 = 16 << 20;

/// `--model`'s file, at most [`MODEL_FILE_MOST_BYTES`].
fn read_model_file(path: &std::path::Path) -> Result<String, UsageError> {
    use std::io::Read as _;
    let bad = |reason: String| UsageError::invalid("--model", path.display(), reason);
    let file = std::fs::File::open(path).map_err(|err| bad(format!("cannot read it ({err})")))?;
    let mut bytes = Vec::new();
    file.take(MODEL_FILE_MOST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| bad(format!("cannot read it ({err})")))?;
    if bytes.len() as u64 > MODEL_FILE_MOST_BYTES {
        return Err(bad(format!(
            "larger than {} MiB: not a model file (those of data/models are about 200 KB)",
            MODEL_FILE_MOST_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text: not a model file".into()))
}

impl KeysArgs {
    /// Checks every flag into the plan.
    pub fn validate(&self) -> Result<KeysPlan, UsageError> {
        if let Some(pattern) = &self.pattern {
            check_pattern(pattern)?;
        }
        let kind = match &self.kind {
            Some(name) => Some(
                kind_named(&name.trim().to_ascii_lowercase()).ok_or_else(|| {
                    UsageError::invalid("--type", name, format!("expected one of {}", kind_names()))
                })?,
            ),
            None => None,
        };
        let count = parse_count("--count", &self.count, 1, 100_000)?;
        let top = parse_count("--top", &self.top, 0, 1_000)? as usize;
        // 0 (or 0K) keeps every key.
        let size_floor_bytes = parse_size_or_zero("--size-floor", &self.size_floor)?;
        let model = match &self.model {
            Some(path) => {
                let text = read_model_file(path)?;
                let model = CostModel::parse(&text)
                    .map_err(|err| UsageError::invalid("--model", path.display(), err.0))?;
                Some((path.clone(), model))
            }
            None => None,
        };
        let read_from: ReadFrom = self.read_from.trim().parse()?;
        let probing = self.probing.probing.to_plan()?;
        // A scan of someone's server changes none of its settings: the flag did nothing, unsaid
        // (the hostile trial).
        if probing.tune_server {
            return Err(UsageError::Conflict(
                "--tune-server does not apply to probe keys: a scan changes none of the server's settings".into(),
            ));
        }
        // GET probes read a key the run writes (with its markers): a scan writes nothing to the
        // server it scans (they went to a replica's master; the hostile trial). A refit's own
        // server may take them.
        if probing.cmd == crate::record::ProbeCmd::Get && !self.refit {
            return Err(UsageError::Conflict(
                "--probe-cmd get writes the key its probes read (and the run's markers) to the server: a scan writes nothing there; probe keys probes with ping".into(),
            ));
        }
        // The scan's own flags do nothing to a refit: said, not ignored (--type hash read as
        // refitting hashes only; the hostile trial).
        if self.refit {
            let defaults = [
                ("--match", self.pattern.is_some()),
                ("--type", self.kind.is_some()),
                ("--model", self.model.is_some()),
                ("--count", self.count.trim() != "100"),
                ("--top", self.top.trim() != "10"),
                ("--size-floor", self.size_floor.trim() != "64K"),
                ("--read-from", self.read_from.trim() != "masters"),
            ];
            if let Some((flag, _)) = defaults.iter().find(|(_, given)| *given) {
                let instead = if *flag == "--type" {
                    " (--refit-types chooses what it measures)"
                } else {
                    ""
                };
                return Err(UsageError::Conflict(format!(
                    "{flag} applies to a scan, not to --refit{instead}"
                )));
            }
        }
        let output = self.output.to_plan();
        // --replay: the target flags name both servers, the scanned (--url) and the one the
        // tool starts (--server-bin), each checked on its own.
        let (target, replay) = match &self.replay {
            Some(text) => {
                if self.refit {
                    return Err(UsageError::Conflict(
                        "--replay checks a scan's predictions; --refit makes a model: give one"
                            .into(),
                    ));
                }
                let server = &self.target.server;
                let scanned = TargetArgs {
                    url: self.target.url.clone(),
                    server: ServerArgs {
                        server_bin: Vec::new(),
                        server_arg: Vec::new(),
                        ..server.clone()
                    },
                };
                let started = if server.server_bin.is_empty() {
                    None
                } else {
                    let only = TargetArgs {
                        url: None,
                        server: ServerArgs {
                            host: None,
                            port: None,
                            user: None,
                            password: None,
                            tls_ca: None,
                            tls_cert: None,
                            tls_key: None,
                            insecure: false,
                            ..server.clone()
                        },
                    };
                    Some(only.to_spec(None)?)
                };
                (
                    scanned.to_spec(std::env::var("REDISCLI_AUTH").ok())?,
                    Some(super::replay::replay_plan(text, started)?),
                )
            }
            None => {
                // The shared check said "cannot be used with --url" (the hostile trial): here
                // the flags are --refit's and --replay's.
                if !self.refit
                    && self.target.url.is_some()
                    && (!self.target.server.server_bin.is_empty()
                        || !self.target.server.server_arg.is_empty())
                {
                    return Err(UsageError::Conflict(
                        "--server-bin and --server-arg apply to --refit and --replay: the scan itself runs against --url".into(),
                    ));
                }
                (
                    self.target.to_spec(std::env::var("REDISCLI_AUTH").ok())?,
                    None,
                )
            }
        };
        let refit = if self.refit {
            if !matches!(target, TargetSpec::Embedded { .. }) {
                return Err(UsageError::Conflict(
                    "--refit measures a server it starts from --server-bin: it takes no --url (or --host/--port), never writing to a server of yours".into(),
                ));
            }
            Some(super::refit::refit_plan(
                self.refit_types.as_deref().unwrap_or(REFIT_TYPES),
                self.refit_elements.as_deref().unwrap_or(REFIT_ELEMENTS),
                self.refit_repeat.as_deref().unwrap_or(REFIT_REPEAT),
            )?)
        } else {
            for (flag, given) in [
                ("--refit-types", self.refit_types.is_some()),
                ("--refit-elements", self.refit_elements.is_some()),
                ("--refit-repeat", self.refit_repeat.is_some()),
            ] {
                if given {
                    return Err(UsageError::Conflict(format!("{flag} needs --refit")));
                }
            }
            if let TargetSpec::Embedded { .. } = target {
                return Err(UsageError::Conflict(
                    "probe keys needs --url (or --host/--port): it scans a server's own keys, and a server the tool starts has none (--refit measures one it starts)".into(),
                ));
            }
            None
        };
        Ok(KeysPlan {
            target,
            options: RunOptions {
                seed: 0,
                out: None,
                // Short intervals: the pacing hears from the probes within a quarter second.
                interval: std::time::Duration::from_millis(250),
                ..probing.run_options()
            },
            pattern: self.pattern.clone(),
            kind,
            count,
            top,
            size_floor_bytes,
            model,
            read_from,
            discovery: self.topology.to_plan()?,
            out: output.out,
            force: output.force,
            format: output.format,
            refit,
            replay,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: KeysArgs,
    }

    fn validate(argv: &[&str]) -> Result<KeysPlan, UsageError> {
        let mut full = vec!["keys", "--url", "redis://127.0.0.1:6379"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full)
            .expect("clap parse")
            .args
            .validate()
    }

    #[test]
    fn defaults() {
        let plan = validate(&[]).unwrap();
        assert_eq!(plan.count, 100);
        assert_eq!(plan.top, 10);
        assert_eq!(plan.size_floor_bytes, 64 * 1024);
        assert!(plan.kind.is_none() && plan.pattern.is_none() && plan.model.is_none());
        let plan =
            validate(&["--type", "zset", "--match", "user:[ab]*", "--count", "5000"]).unwrap();
        assert_eq!(plan.kind.map(|k| k.name()), Some("zset"));
        assert_eq!(plan.count, 5000);
        // A type in any case, as SCAN TYPE and TYPE take it.
        let plan = validate(&["--type", "HASH"]).unwrap();
        assert_eq!(plan.kind.map(|k| k.name()), Some("hash"));
        // A floor of nothing keeps every key, however it is written.
        for zero in ["0", "0K", "0MiB", " 0 "] {
            assert_eq!(
                validate(&["--size-floor", zero]).unwrap().size_floor_bytes,
                0
            );
        }
        assert_eq!(
            validate(&["--size-floor", "1.5K"])
                .unwrap()
                .size_floor_bytes,
            1536
        );
    }

    #[test]
    fn bad_values_name_their_flag() {
        let garbage =
            std::env::temp_dir().join(format!("holprobe-model-garbage-{}", std::process::id()));
        std::fs::write(&garbage, "not json").unwrap();
        let other = std::env::temp_dir().join(format!("holprobe-model-v9-{}", std::process::id()));
        std::fs::write(&other, "{\"format\": 9}").unwrap();
        for (argv, flag) in [
            (vec!["--match", ""], "--match"),
            (vec!["--match", "user:[ab"], "--match"),
            (vec!["--type", "hashmap"], "--type"),
            (vec!["--count", "0"], "--count"),
            (vec!["--count", "-5"], "--count"),
            (vec!["--count", "lots"], "--count"),
            (vec!["--top", "1001"], "--top"),
            (vec!["--size-floor", "12X"], "--size-floor"),
            (vec!["--read-from", "everyone"], "--read-from"),
            (vec!["--model", "/nonexistent/model.json"], "--model"),
            (vec!["--model", garbage.to_str().unwrap()], "--model"),
            (vec!["--model", other.to_str().unwrap()], "--model"),
        ] {
            let err = match validate(&argv) {
                Ok(_) => panic!("{argv:?} accepted"),
                Err(err) => err.to_string(),
            };
            assert!(err.contains(flag), "{argv:?}: {err}");
            assert!(!err.contains('\n'), "{argv:?}: {err}");
        }
        let _ = std::fs::remove_file(garbage);
        let _ = std::fs::remove_file(other);
        assert!(validate(&["--match", "a\\[b"]).is_ok());
    }
}
