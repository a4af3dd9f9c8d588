//! The writer's plan: what the user asked it to write, laid out as steps under a run's key
//! prefix, and how run.json records it. Pure: no connection, no thread.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::WriteOp;
use crate::units::format_size;

/// What the writer does, validated: what the user asked for, nothing of the run (its key
/// prefix and the value bytes come with the run, see [`super::WriterActor`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriterPlan {
    /// Value sizes in bytes, in the order given.
    pub sizes: Vec<u64>,
    /// How many times each size is written.
    pub repeat: u32,
    /// Quiet probing before and after each write.
    #[serde(with = "crate::units::duration_ms")]
    pub gap: Duration,
    /// Write each size twice to the same key, so the second write frees the first value.
    pub overwrite: bool,
    /// Keep every key until the end of the run (as the seed did) instead of deleting each one
    /// after its quiet gap.
    pub keep: bool,
    /// Commands of the caller's own, run on each freshly written key after its SET (library
    /// use; the `probe` command line has none). Empty: the plan is SET and DEL only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<CustomCommand>,
}

/// The writer's plan as run.json records it: with the run's key prefix and the seed of its
/// value bytes (both also at run.json's top level; kept here, where every run has had them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "RecordedWriterFields")]
pub struct RecordedWriter {
    /// What was planned.
    #[serde(flatten)]
    pub plan: WriterPlan,
    /// The run's key prefix, `holprobe:<run-id>:`.
    pub key_prefix: String,
    /// Seed of the value bytes.
    pub seed: u64,
}

/// How a [`RecordedWriter`] is read back: field by field, so that an error names the field
/// (`options.writer.gap`), which reading through the flattened plan would not. Every field of
/// [`WriterPlan`] is here (a test writes and reads back one of each).
#[derive(Deserialize)]
struct RecordedWriterFields {
    sizes: Vec<u64>,
    repeat: u32,
    #[serde(with = "crate::units::duration_ms")]
    gap: Duration,
    overwrite: bool,
    keep: bool,
    #[serde(default)]
    commands: Vec<CustomCommand>,
    #[serde(default)]
    key_prefix: String,
    #[serde(default)]
    seed: u64,
}

impl From<RecordedWriterFields> for RecordedWriter {
    fn from(fields: RecordedWriterFields) -> RecordedWriter {
        RecordedWriter {
            plan: WriterPlan {
                sizes: fields.sizes,
                repeat: fields.repeat,
                gap: fields.gap,
                overwrite: fields.overwrite,
                keep: fields.keep,
                commands: fields.commands,
            },
            key_prefix: fields.key_prefix,
            seed: fields.seed,
        }
    }
}

impl std::ops::Deref for RecordedWriter {
    type Target = WriterPlan;

    fn deref(&self) -> &WriterPlan {
        &self.plan
    }
}

/// The argument of a [`CustomCommand`] that stands for the key just written.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// A command of the caller's own, measured with the writer's machinery: the writer sends it on
/// its connection right after a size's SET (each after its own quiet gap) and records it as a
/// write event with op `command` — start, last byte sent, reply — so the correlator reports
/// what the other clients saw during it, exactly as for a SET.
///
/// This is how to measure other commands that may block on large values: `GET {key}` (the
/// server must write the whole value out), `UNLINK {key}` against the plan's own `DEL`,
/// `STRLEN {key}` as a control. Use only [`KEY_PLACEHOLDER`] to name keys, so the command
/// touches nothing outside the run's prefix. Any reply but an error counts as success; a
/// reply is read whole into memory (a `GET` of a 512 MiB value holds 512 MiB in the client).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomCommand {
    /// The command and its arguments, e.g. `["UNLINK", "{key}"]`; every argument equal to
    /// [`KEY_PLACEHOLDER`] is replaced by the key just written.
    pub args: Vec<String>,
    /// The command removes the key (`DEL`, `UNLINK`, `GETDEL`): the plan then skips its own
    /// deletion of that key.
    pub removes_key: bool,
}

impl CustomCommand {
    /// A command that leaves the key in place, e.g. `CustomCommand::new(["GET", "{key}"])`.
    pub fn new<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        CustomCommand {
            args: args.into_iter().map(Into::into).collect(),
            removes_key: false,
        }
    }

    /// A command that removes the key, e.g. `CustomCommand::removing(["UNLINK", "{key}"])`.
    pub fn removing<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        CustomCommand {
            removes_key: true,
            ..CustomCommand::new(args)
        }
    }

    /// The arguments with the placeholder replaced by `key`.
    pub fn resolve(&self, key: &str) -> Vec<String> {
        self.args
            .iter()
            .map(|arg| {
                if arg == KEY_PLACEHOLDER {
                    key.to_string()
                } else {
                    arg.clone()
                }
            })
            .collect()
    }
}

/// Default of [`WriterPlan::gap`] (and of `--gap`).
pub const DEFAULT_GAP: Duration = Duration::from_millis(500);

impl Default for WriterPlan {
    /// The command line's defaults: no sizes yet, each written once, a 500 ms gap, fresh keys
    /// deleted after their gap, no custom commands.
    fn default() -> Self {
        WriterPlan {
            sizes: Vec::new(),
            repeat: 1,
            gap: DEFAULT_GAP,
            overwrite: false,
            keep: false,
            commands: Vec::new(),
        }
    }
}

/// One step of the writer's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteStep {
    /// What to do.
    pub op: WriteOp,
    /// The key.
    pub key: String,
    /// The value's size (the deleted value's size for a delete, the key's value size for a
    /// custom command).
    pub size_bytes: u64,
    /// For op `command`: the command to send, the key already in place of the placeholder.
    pub command: Option<Vec<String>>,
}

impl WriterPlan {
    /// The largest value: the size of the one buffer the writer holds.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// The ordered steps: every size to a fresh key; with `overwrite` a second SET to the same
    /// key; then each custom command; then, unless `keep`, the key's deletion. With `keep`,
    /// every key is deleted at the end, each deletion measured like any write. A key that a
    /// custom command removes is not deleted again.
    ///
    /// Repeats are interleaved: the plan goes through all the sizes once, then again, `repeat`
    /// times. A disturbance of the host that lasts a few seconds (another process's burst of
    /// work) then touches one repeat of several sizes rather than every repeat of one size, so
    /// it shows as an outlier among the repeats instead of shifting that size's median: what
    /// a comparison over the repeats (`probe compare`) needs.
    ///
    /// Every key is under `key_prefix` (the run's, `holprobe:<run-id>:`).
    pub fn steps(&self, key_prefix: &str) -> Vec<WriteStep> {
        let mut steps = Vec::new();
        let mut kept = Vec::new();
        for rep in 1..=self.repeat {
            for (index, &size) in self.sizes.iter().enumerate() {
                let key = format!("{key_prefix}w{}:{}:{rep}", index + 1, format_size(size));
                steps.push(WriteStep {
                    op: WriteOp::Set,
                    key: key.clone(),
                    size_bytes: size,
                    command: None,
                });
                if self.overwrite {
                    steps.push(WriteStep {
                        op: WriteOp::Overwrite,
                        key: key.clone(),
                        size_bytes: size,
                        command: None,
                    });
                }
                for custom in &self.commands {
                    steps.push(WriteStep {
                        op: WriteOp::Command,
                        key: key.clone(),
                        size_bytes: size,
                        command: Some(custom.resolve(&key)),
                    });
                }
                if self.commands.iter().any(|c| c.removes_key) {
                    continue;
                }
                let delete = WriteStep {
                    op: WriteOp::Delete,
                    key,
                    size_bytes: size,
                    command: None,
                };
                if self.keep {
                    kept.push(delete);
                } else {
                    steps.push(delete);
                }
            }
        }
        steps.extend(kept);
        steps
    }

    /// How many steps [`WriterPlan::steps`] lays out, without laying them out: per size and
    /// repeat its SET, the overwrite, each custom command and the deletion (unless a custom
    /// command removes the key).
    pub fn step_count(&self) -> usize {
        let delete = usize::from(!self.commands.iter().any(|c| c.removes_key));
        let per_key = 1 + usize::from(self.overwrite) + self.commands.len() + delete;
        self.sizes.len() * self.repeat as usize * per_key
    }

    /// How long the plan takes at least: its gaps (the writes themselves add to this).
    pub fn minimum_duration(&self) -> Duration {
        let steps = u32::try_from(self.step_count()).unwrap_or(u32::MAX);
        self.gap.saturating_mul(steps.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(overwrite: bool, keep: bool) -> WriterPlan {
        WriterPlan {
            sizes: vec![1 << 20, 4 << 20],
            repeat: 2,
            gap: Duration::from_millis(10),
            overwrite,
            keep,
            commands: Vec::new(),
        }
    }

    fn ops(plan: &WriterPlan) -> Vec<&'static str> {
        let steps = plan.steps("holprobe:t:");
        assert_eq!(steps.len(), plan.step_count(), "{plan:?}");
        steps.iter().map(|s| s.op.name()).collect()
    }

    #[test]
    fn default_plan_deletes_each_key_after_its_write() {
        let p = plan(false, false);
        assert_eq!(
            ops(&p),
            [
                "set", "delete", "set", "delete", "set", "delete", "set", "delete"
            ]
        );
        let steps = p.steps("holprobe:t:");
        assert_eq!(steps[0].key, steps[1].key);
        assert_ne!(steps[0].key, steps[2].key);
        assert!(steps.iter().all(|s| s.key.starts_with("holprobe:t:")));
        // Repeats interleave: 1M, 4M, then 1M, 4M again.
        let sizes: Vec<u64> = steps.iter().step_by(2).map(|s| s.size_bytes).collect();
        assert_eq!(sizes, [1 << 20, 4 << 20, 1 << 20, 4 << 20]);
        assert_ne!(steps[0].key, steps[4].key);
    }

    #[test]
    fn overwrite_and_keep() {
        assert_eq!(ops(&plan(true, false))[..3], ["set", "overwrite", "delete"]);
        let keep = plan(false, true);
        assert_eq!(
            ops(&keep),
            [
                "set", "set", "set", "set", "delete", "delete", "delete", "delete"
            ]
        );
        assert_eq!(keep.max_size(), 4 << 20);
    }

    #[test]
    fn custom_commands_follow_each_set_and_may_replace_the_delete() {
        let mut p = plan(false, false);
        p.commands = vec![CustomCommand::new(["GET", KEY_PLACEHOLDER])];
        assert_eq!(ops(&p)[..3], ["set", "command", "delete"]);
        let steps = p.steps("holprobe:t:");
        assert_eq!(
            steps[1].command.as_deref(),
            Some(&["GET".to_string(), steps[0].key.clone()][..])
        );
        assert_eq!(steps[1].size_bytes, steps[0].size_bytes);
        assert!(steps[0].command.is_none() && steps[2].command.is_none());

        p.commands = vec![CustomCommand::removing(["UNLINK", "{key}"])];
        assert_eq!(
            ops(&p),
            [
                "set", "command", "set", "command", "set", "command", "set", "command"
            ]
        );
        p.keep = true;
        assert!(!ops(&p).contains(&"delete"));
        // Arguments other than the placeholder are sent as given.
        let c = CustomCommand::new(["OBJECT", "ENCODING", "{key}", "{key}x"]);
        assert_eq!(c.resolve("k"), ["OBJECT", "ENCODING", "k", "{key}x"]);
    }

    /// run.json's writer reads back whole: writing what was read gives the same bytes, so no
    /// field of the plan is forgotten on the way back.
    #[test]
    fn a_recorded_writer_reads_back_every_field() {
        let mut plan = plan(true, true);
        plan.commands = vec![CustomCommand::removing(["UNLINK", KEY_PLACEHOLDER])];
        let recorded = RecordedWriter {
            plan,
            key_prefix: "holprobe:feedf00d:".into(),
            seed: 99,
        };
        let json = serde_json::to_string(&recorded).unwrap();
        let read: RecordedWriter = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), json);
        assert!(
            json.ends_with(r#""key_prefix":"holprobe:feedf00d:","seed":99}"#),
            "{json}"
        );
    }
}
