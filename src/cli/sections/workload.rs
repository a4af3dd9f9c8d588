//! The writer's flags (`--writer-sizes`, `--repeat`, `--gap`, `--overwrite`, `--keep`, `--random-state`,
//! and what is written: `--type`, `--elements`, `--element-size`, `--batch`, `--ops`), declared
//! once for the main job and load mode, and checked into a [`WriterPlan`].
//!
//! This is where a workload grows: a new flag of what is written (a value type, its elements,
//! the operations on each key) goes in [`WorkloadArgs`], and its checked value in the plan
//! [`WorkloadArgs::to_plan`] builds.

use std::time::Duration;

use clap::Args;

use super::parse_count;
use crate::error::UsageError;
use crate::measure::writer::{DEFAULT_ELEMENT_BYTES, WriterPlan};
use crate::record::WriteOp;
use crate::units::{parse_duration, parse_size, parse_size_list};
use crate::workload::kinds::kind_names;
use crate::workload::{DEFAULT_BATCH_ELEMENTS, Shape, SizeBy, kind_named};

/// The most elements one value may have (`--elements`): far past what a test host holds, short
/// of what would overflow the batches' arithmetic.
const MAX_ELEMENTS: u64 = 4_000_000_000;

/// What the writer stores, worded for the main job.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    // --help: value sizes to write, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "LIST",
        allow_hyphen_values = true,
        help = crate::size_help!(
            "Value sizes to write, comma-separated, e.g. 1M,64M,512M. Without it the tool observes: for --duration, or until Ctrl-C."
        )
    )]
    pub writer_sizes: Option<String>,

    /// Writes per size.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    pub repeat: String,

    /// Quiet probing before and after each write, so the baseline shows.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "500ms"
    )]
    pub gap: String,

    /// Write each size twice to the same key: the second SET also frees the first value on the
    /// server's main thread.
    #[arg(long)]
    pub overwrite: bool,

    /// Keep every written key until the end (server memory grows with the sum of the sizes)
    /// instead of deleting each after its gap. Deletions are measured either way.
    #[arg(long)]
    pub keep: bool,

    /// Send every write on one connection, as a pooled client does: a SET larger than the last
    /// large value, within the server's 1-2 s before it trims the buffer it kept for that one,
    /// makes it grow the buffer (a copy in one block on jemalloc builds). By default the writer
    /// opens a new connection before such a SET, so each is measured as a fresh one
    #[arg(long)]
    pub same_connection: bool,

    /// Start of the random numbers (the value bytes), so runs repeat.
    #[arg(
        long = "random-state",
        alias = "seed",
        value_name = "N",
        default_value_t = crate::options::DEFAULT_SEED,
        allow_negative_numbers = true
    )]
    pub seed: u64,

    /// The kind of value: string (SET, the default), hash, list, set, zset or stream (built in
    /// pipelined batches).
    #[arg(long = "type", value_name = "TYPE")]
    pub value_type: Option<String>,

    /// A collection's sizes as element counts, comma-separated, e.g. 100k,1M (instead of
    /// --writer-sizes, whose sizes are then the members' and values' total bytes).
    #[arg(long, value_name = "LIST", allow_negative_numbers = true)]
    pub elements: Option<String>,

    /// Bytes of one element of a collection (of a hash field and of its value, each) [default:
    /// 16].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub element_size: Option<String>,

    /// Elements a collection's build adds per command [default: 1000].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub batch: Option<String>,

    /// The ops on each key, in order, each measured on its own: set (a string) or build (a
    /// collection), overwrite, read, delete, unlink, expire, evict (only on a server the tool
    /// starts), e.g. build,read,unlink [default: set,delete; build,delete].
    #[arg(long, value_name = "LIST")]
    pub ops: Option<String>,
}

/// Default of load mode's `--gap`.
pub const LOAD_GAP: &str = "2s";

/// The writer's flags worded for load mode, where the writer runs beside the load clients.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("writer_sizes", |a| a.help(crate::size_help!(
        "Run the writer meanwhile: value sizes to write, comma-separated, e.g. 16M,64M."
    ))),
    mut_arg("gap", |a| a.default_value(LOAD_GAP).help("Quiet load before and after each write, at least 1s; from 2s (the default) the seconds beside a write hold no other, so its throughput is compared with theirs (under 2s that comparison may be missing)")),
    mut_arg("overwrite", |a| a.help("Write each size twice to the same key (the second write also frees the first value)")),
    mut_arg("keep", |a| a.help("Keep every written value until the end instead of deleting each after its gap")),
    mut_arg("seed", |a| a.help("Start of the random numbers (key choice, SET bytes, the writer's value), so runs repeat"))
)]
pub struct LoadWorkloadArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

impl WorkloadArgs {
    /// The writer's plan; `None` without `--writer-sizes` or `--elements` (then the flags only a
    /// writer uses are the command's to refuse, see [`WorkloadArgs::writer_only_flags`]; those
    /// of what is written are refused here).
    pub fn to_plan(&self) -> Result<Option<WriterPlan>, UsageError> {
        let kind = match &self.value_type {
            None => &crate::workload::kinds::string::STRING,
            Some(name) => kind_named(&name.trim().to_ascii_lowercase()).ok_or_else(|| {
                UsageError::invalid("--type", name, format!("expected one of {}", kind_names()))
            })?,
        };
        let is_string = kind.name() == "string";
        let sizes = match (&self.writer_sizes, &self.elements) {
            (Some(_), Some(_)) => {
                return Err(UsageError::Conflict(
                    "--writer-sizes and --elements both size the values: give one".into(),
                ));
            }
            (Some(list), None) => parse_size_list("--writer-sizes", list)?
                .into_iter()
                .map(SizeBy::Bytes)
                .collect::<Vec<_>>(),
            (None, Some(list)) => parse_elements(list)?
                .into_iter()
                .map(SizeBy::Elements)
                .collect(),
            (None, None) => {
                for (flag, given) in [
                    ("--type", self.value_type.is_some()),
                    ("--element-size", self.element_size.is_some()),
                    ("--batch", self.batch.is_some()),
                    ("--ops", self.ops.is_some()),
                    ("--same-connection", self.same_connection),
                ] {
                    if given {
                        return Err(UsageError::Conflict(format!(
                            "{flag} applies to writes: it needs --writer-sizes (or --elements for a collection)"
                        )));
                    }
                }
                return Ok(None);
            }
        };
        if is_string {
            for (flag, given) in [
                ("--element-size", self.element_size.is_some()),
                ("--batch", self.batch.is_some()),
            ] {
                if given {
                    return Err(UsageError::Conflict(format!(
                        "{flag} applies to a collection (--type hash, list, set, zset or stream); a string is one SET of its --writer-sizes"
                    )));
                }
            }
        }
        let element_bytes = match &self.element_size {
            Some(text) => parse_size("--element-size", text)?,
            None => DEFAULT_ELEMENT_BYTES,
        };
        let batch_elements = match &self.batch {
            Some(text) => parse_count("--batch", text, 1, 1_000_000)?,
            None => DEFAULT_BATCH_ELEMENTS,
        };
        let shapes = sizes
            .iter()
            .map(|&size| Shape::sized(kind, size, element_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        let ops = match &self.ops {
            Some(list) => {
                if self.overwrite {
                    return Err(UsageError::Conflict(
                        "--overwrite and --ops: put overwrite in the --ops list instead".into(),
                    ));
                }
                parse_ops(list, is_string, kind.name(), self.keep)?
            }
            None => Vec::new(),
        };
        let (sizes, elements) = if is_string {
            (shapes.iter().map(Shape::size_bytes).collect(), Vec::new())
        } else if self.elements.is_some() {
            (Vec::new(), shapes.iter().map(|s| s.elements).collect())
        } else {
            (
                sizes
                    .iter()
                    .map(|s| match s {
                        SizeBy::Bytes(b) => *b,
                        SizeBy::Elements(_) => 0,
                    })
                    .collect(),
                Vec::new(),
            )
        };
        Ok(Some(WriterPlan {
            sizes,
            repeat: parse_count("--repeat", &self.repeat, 1, 10_000)? as u32,
            gap: self.gap()?,
            overwrite: self.overwrite,
            keep: self.keep,
            commands: Vec::new(),
            value_type: kind.name().to_string(),
            elements,
            element_bytes: if is_string {
                DEFAULT_ELEMENT_BYTES
            } else {
                element_bytes
            },
            batch_elements,
            ops,
            same_connection: self.same_connection,
        }))
    }

    /// `--gap`, checked.
    pub fn gap(&self) -> Result<Duration, UsageError> {
        parse_duration("--gap", &self.gap)
    }

    /// The switches that mean nothing without a writer, each with whether it was given.
    pub fn writer_only_flags(&self) -> [(&'static str, bool); 2] {
        [("--overwrite", self.overwrite), ("--keep", self.keep)]
    }
}

/// `--elements`: counts such as `100k,1M` (decimal).
fn parse_elements(list: &str) -> Result<Vec<u64>, UsageError> {
    if list.trim().is_empty() {
        return Err(UsageError::invalid(
            "--elements",
            list,
            "expected a comma-separated list of counts such as 100k,1M",
        ));
    }
    list.split(',')
        .map(|part| parse_count("--elements", part, 1, MAX_ELEMENTS))
        .collect()
}

/// The ops of `--ops`, checked: the value is made before anything else is done to it (`set`
/// for a string, `build` for a collection), made again only after it was removed, and, unless
/// `--keep`, removed at the end (or it would wait for the run's end, piling up).
fn parse_ops(
    list: &str,
    is_string: bool,
    kind: &str,
    keep: bool,
) -> Result<Vec<WriteOp>, UsageError> {
    const CHOICES: &str =
        "set (a string) or build (a collection), overwrite, read, delete, unlink, expire, evict";
    let make = if is_string {
        WriteOp::Set
    } else {
        WriteOp::Build
    };
    let mut ops = Vec::new();
    let mut exists = false;
    let mut removed_by: Option<WriteOp> = None;
    for part in list.split(',') {
        let name = part.trim();
        let op = WriteOp::named(&name.to_ascii_lowercase())
            .filter(|op| !matches!(op, WriteOp::Command | WriteOp::Inject))
            .ok_or_else(|| UsageError::invalid("--ops", name, format!("expected {CHOICES}")))?;
        if matches!(op, WriteOp::Set | WriteOp::Build) && op != make {
            return Err(UsageError::invalid(
                "--ops",
                list,
                if is_string {
                    "a string is written with set (build makes a collection: --type hash, ...)"
                        .to_string()
                } else {
                    format!("a {kind} is made with build (set writes a string)")
                },
            ));
        }
        if op == make {
            if exists {
                return Err(UsageError::invalid(
                    "--ops",
                    list,
                    format!(
                        "{} again while the key still holds its value: remove it first (delete, unlink, expire or evict), or use overwrite",
                        make.name()
                    ),
                ));
            }
            exists = true;
        } else if !exists {
            // After a removal, the value is gone: the list did start with its make
            // (`build,delete,unlink` was told "start with build").
            let why = match removed_by {
                Some(gone) => format!(
                    "{} after {} removed the value: {} it again before it",
                    op.name(),
                    gone.name(),
                    make.name()
                ),
                None => format!(
                    "{} before the value is made: start with {}",
                    op.name(),
                    make.name()
                ),
            };
            return Err(UsageError::invalid("--ops", list, why));
        } else if op.removes_key() {
            exists = false;
            removed_by = Some(op);
        }
        ops.push(op);
    }
    if exists && !keep {
        return Err(UsageError::invalid(
            "--ops",
            list,
            "the last op leaves the key in place until the run's end: end with delete, unlink, expire or evict, or pass --keep",
        ));
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        workload: WorkloadArgs,
    }

    fn plan(args: &[&str]) -> Result<Option<WriterPlan>, UsageError> {
        let mut all = vec!["probe"];
        all.extend_from_slice(args);
        Cli::parse_from(all).workload.to_plan()
    }

    fn refused(args: &[&str]) -> String {
        plan(args).unwrap_err().to_string()
    }

    #[test]
    fn random_state_is_also_read_as_the_old_hidden_seed() {
        let state = |args: &[&str]| {
            let mut all = vec!["probe"];
            all.extend_from_slice(args);
            Cli::parse_from(all).workload.seed
        };
        assert_eq!(state(&[]), 0x5eed);
        assert_eq!(state(&["--random-state", "7"]), 7);
        assert_eq!(state(&["--seed", "8"]), 8);
        let Err(err) = Cli::try_parse_from(["probe", "--seed", "x"]) else {
            panic!("--seed x was taken");
        };
        let err = err.to_string();
        assert!(err.contains("--random-state <N>"), "{err}");
        assert!(!err.to_lowercase().contains("seed"), "{err}");
    }

    #[test]
    fn value_flags_make_the_plan() {
        let p = plan(&["--type", "hash", "--elements", "1k,2M", "--batch", "500"])
            .unwrap()
            .unwrap();
        assert_eq!(p.value_type, "hash");
        assert_eq!(p.elements, [1000, 2_000_000]);
        // A type in any case.
        let upper = plan(&["--type", "ZSet", "--elements", "1k"])
            .unwrap()
            .unwrap();
        assert_eq!(upper.value_type, "zset");
        assert_eq!((p.element_bytes, p.batch_elements), (16, 500));
        assert_eq!(p.chosen_ops().unwrap(), [WriteOp::Build, WriteOp::Delete]);
        let p = plan(&[
            "--writer-sizes",
            "1M",
            "--type",
            "set",
            "--element-size",
            "64",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(p.shapes()[0].elements, (1 << 20) / 64);
        let p = plan(&["--writer-sizes", "1M", "--ops", "set,read,overwrite,unlink"])
            .unwrap()
            .unwrap();
        assert_eq!(p.ops.len(), 4);
        // An eviction removes the key: the value may be made again after it.
        let p = plan(&[
            "--elements",
            "10",
            "--type",
            "hash",
            "--ops",
            "build,evict,build,evict",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            p.chosen_ops().unwrap(),
            [
                WriteOp::Build,
                WriteOp::Evict,
                WriteOp::Build,
                WriteOp::Evict
            ]
        );
        assert!(
            plan(&["--writer-sizes", "1M", "--ops", "set,evict,read"])
                .unwrap_err()
                .to_string()
                .contains("read after evict removed the value: set it again before it")
        );
        let hash_ops_refused = |ops: &str| {
            plan(&["--type", "hash", "--elements", "10", "--ops", ops])
                .unwrap_err()
                .to_string()
        };
        assert!(
            hash_ops_refused("build,delete,unlink")
                .contains("unlink after delete removed the value: build it again before it")
        );
        assert!(
            hash_ops_refused("read,build,delete")
                .contains("read before the value is made: start with build")
        );
        // Today's flags, today's plan.
        let p = plan(&["--writer-sizes", "1M", "--overwrite"])
            .unwrap()
            .unwrap();
        assert!(p.ops.is_empty() && p.is_string() && p.chosen_ops().is_none());
        assert!(plan(&[]).unwrap().is_none());
    }

    #[test]
    fn bad_value_flags_name_the_flag() {
        for (args, needle) in [
            (&["--writer-sizes", "1M", "--type", "tree"][..], "--type"),
            (
                &["--elements", "10", "--element-size", "0", "--type", "set"],
                "--element-size",
            ),
            (&["--elements", "10"], "--elements"),
            (&["--elements", "0", "--type", "list"], "--elements"),
            (
                &["--writer-sizes", "1M", "--elements", "5", "--type", "set"],
                "--elements",
            ),
            (&["--writer-sizes", "1M", "--batch", "10"], "--batch"),
            (
                &["--elements", "10", "--type", "set", "--batch", "0"],
                "--batch",
            ),
            (
                &["--elements", "300", "--type", "set", "--element-size", "2"],
                "--element-size",
            ),
            (
                &["--writer-sizes", "1M", "--ops", "set,frobnicate,delete"],
                "--ops",
            ),
            (&["--writer-sizes", "1M", "--ops", "build,delete"], "--ops"),
            (
                &["--elements", "9", "--type", "hash", "--ops", "set,delete"],
                "--ops",
            ),
            (
                &["--elements", "9", "--type", "hash", "--ops", "build,read"],
                "--ops",
            ),
            (
                &["--elements", "9", "--type", "hash", "--ops", "read,delete"],
                "--ops",
            ),
            (
                &["--elements", "9", "--type", "hash", "--ops", "build,build"],
                "--ops",
            ),
            (
                &["--writer-sizes", "1M", "--ops", "set,delete", "--overwrite"],
                "--overwrite",
            ),
            (&["--type", "hash"], "--type"),
        ] {
            let error = refused(args);
            assert!(error.contains(needle), "{args:?}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        // With --keep a list may leave the key to the end.
        assert!(
            plan(&[
                "--elements",
                "9",
                "--type",
                "hash",
                "--ops",
                "build,read",
                "--keep"
            ])
            .is_ok()
        );
    }
}
