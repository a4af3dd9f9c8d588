//! The writer's plan: what the user asked it to write, laid out as steps under a run's key
//! prefix, and how run.json records it. Pure: no connection, no thread.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::WriteOp;
use crate::units::format_size;
use crate::workload::{DEFAULT_BATCH_ELEMENTS, Shape, kind_named};

/// Bytes of one element of a collection unless told (`--element-size`): the 16-byte members the
/// issue's figures were measured with.
pub const DEFAULT_ELEMENT_BYTES: u64 = 16;

/// The TTL an `expire` op gives its key (`PEXPIRE`), ms: long enough that the reply is back
/// well before it ends (the op's window starts at its end), short enough to keep runs short.
pub const EXPIRE_TTL_MS: u64 = 50;

fn string_type() -> String {
    "string".to_string()
}

fn is_string(value_type: &str) -> bool {
    value_type == "string"
}

fn default_element_bytes() -> u64 {
    DEFAULT_ELEMENT_BYTES
}

fn is_default_element_bytes(bytes: &u64) -> bool {
    *bytes == DEFAULT_ELEMENT_BYTES
}

fn default_batch() -> u64 {
    DEFAULT_BATCH_ELEMENTS
}

fn is_default_batch(batch: &u64) -> bool {
    *batch == DEFAULT_BATCH_ELEMENTS
}

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
    /// The kind of value (`--type`): `string`, `hash`, `list`, `set`, `zset` or `stream`. Not
    /// recorded for a string, so a string run's run.json is what it always was.
    #[serde(default = "string_type", skip_serializing_if = "is_string")]
    pub value_type: String,
    /// A collection's sizes as element counts (`--elements`), one value per count; empty: the
    /// values are sized by `sizes` (total payload bytes) and hold what fits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elements: Vec<u64>,
    /// Bytes of one element of a collection (`--element-size`; of a hash field and of its
    /// value, each).
    #[serde(
        default = "default_element_bytes",
        skip_serializing_if = "is_default_element_bytes"
    )]
    pub element_bytes: u64,
    /// Elements a build command adds (`--batch`).
    #[serde(default = "default_batch", skip_serializing_if = "is_default_batch")]
    pub batch_elements: u64,
    /// The ops on each key, in order (`--ops`). Empty: a string's SET, `overwrite`'s second SET
    /// and the DEL, as before ops could be chosen (a collection's build, overwrite, delete).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<WriteOp>,
    /// Send every write on one connection (`--same-connection`), as a pooled client does. By
    /// default the writer opens a new one, outside every window, before a SET larger than the
    /// query buffer the server kept on its connection from an earlier large value: the server
    /// would grow that buffer for it, a copy in one block on a jemalloc build (a 64M SET after
    /// a 32M one, on a server with 2,000 idle clients whose cron had not trimmed the buffer:
    /// 57-61 ms against 5 ms), so that each SET is measured as a fresh one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub same_connection: bool,
}

/// The writer's plan as run.json records it: with the run's key prefix and the seed of its
/// value bytes (both also at run.json's top level; kept here, where every run has had them).
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RecordedWriterFields")]
pub struct RecordedWriter {
    /// What was planned.
    #[serde(flatten)]
    pub plan: WriterPlan,
    /// The run's key prefix, `holprobe:<run-id>:`.
    pub key_prefix: String,
    /// Seed of the value bytes (recorded as `random_state`).
    pub seed: u64,
    /// Whether run.json says `same_connection` (every run since 2026-12-05 does). A run from
    /// before does not, and its writer sent every SET on one connection whatever it was told,
    /// so a SET after a smaller one may have met the query buffer the server kept.
    pub connection_recorded: bool,
}

/// A collection run records its element size and batch even at their defaults (they decide
/// every build's figures; a string run's run.json stays as it always was, without them).
impl Serialize for RecordedWriter {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Recorded<'a> {
            #[serde(flatten)]
            plan: &'a WriterPlan,
            #[serde(skip_serializing_if = "Option::is_none")]
            element_bytes: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            batch_elements: Option<u64>,
            key_prefix: &'a str,
            random_state: u64,
            /// Written by the plan where true; here where false: always once.
            #[serde(skip_serializing_if = "Option::is_none")]
            same_connection: Option<bool>,
        }
        let collection = !self.plan.is_string();
        // Only where the plan's own field is left out (at its default): never twice.
        Recorded {
            plan: &self.plan,
            element_bytes: (collection && is_default_element_bytes(&self.plan.element_bytes))
                .then_some(self.plan.element_bytes),
            batch_elements: (collection && is_default_batch(&self.plan.batch_elements))
                .then_some(self.plan.batch_elements),
            key_prefix: &self.key_prefix,
            random_state: self.seed,
            same_connection: (!self.plan.same_connection).then_some(false),
        }
        .serialize(serializer)
    }
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
    #[serde(default = "string_type")]
    value_type: String,
    #[serde(default)]
    elements: Vec<u64>,
    #[serde(default = "default_element_bytes")]
    element_bytes: u64,
    #[serde(default = "default_batch")]
    batch_elements: u64,
    #[serde(default)]
    ops: Vec<WriteOp>,
    #[serde(default)]
    same_connection: Option<bool>,
    #[serde(default)]
    key_prefix: String,
    /// `random_state`; runs recorded before the rename say `seed`.
    #[serde(default, alias = "seed")]
    random_state: u64,
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
                value_type: fields.value_type,
                elements: fields.elements,
                element_bytes: fields.element_bytes,
                batch_elements: fields.batch_elements,
                ops: fields.ops,
                same_connection: fields.same_connection.unwrap_or(false),
            },
            key_prefix: fields.key_prefix,
            seed: fields.random_state,
            connection_recorded: fields.same_connection.is_some(),
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
            value_type: string_type(),
            elements: Vec::new(),
            element_bytes: DEFAULT_ELEMENT_BYTES,
            batch_elements: DEFAULT_BATCH_ELEMENTS,
            ops: Vec::new(),
            same_connection: false,
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
    /// The value the op works on (its kind, elements and element size).
    pub shape: Shape,
    /// For a collection's `overwrite`: the freshly built twin renamed onto `key` (`RENAME twin
    /// key`), under the same prefix and so, in a cluster, the same hash tag.
    pub twin: Option<String>,
}

impl WriterPlan {
    /// The largest value's payload, bytes (a string's size; a collection's members and values).
    pub fn max_size(&self) -> u64 {
        self.shapes()
            .iter()
            .map(Shape::size_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The writer's one value buffer: the largest string, sliced for every SET; for a
    /// collection only the random bytes its elements are cut from ([`COLLECTION_FILL_BYTES`]).
    pub fn value_buffer_bytes(&self) -> u64 {
        if self.is_string() {
            self.max_size()
        } else {
            COLLECTION_FILL_BYTES
        }
    }

    /// The value is a string (the default).
    pub fn is_string(&self) -> bool {
        is_string(&self.value_type)
    }

    /// The values, in the order given: one per size (or per element count).
    pub fn shapes(&self) -> Vec<Shape> {
        let Some(kind) = kind_named(&self.value_type).filter(|_| !self.is_string()) else {
            return self.sizes.iter().map(|&size| Shape::string(size)).collect();
        };
        let per_element = self
            .element_bytes
            .saturating_mul(kind.bytes_per_element_factor())
            .max(1);
        let counts: Vec<u64> = if self.elements.is_empty() {
            self.sizes.iter().map(|&size| size / per_element).collect()
        } else {
            self.elements.clone()
        };
        counts
            .into_iter()
            .map(|elements| Shape {
                kind: kind.name(),
                elements,
                element_bytes: self.element_bytes,
            })
            .collect()
    }

    /// [`Self::chosen_ops`] as `--ops` writes them (`build,expire`).
    pub fn chosen_ops_text(&self) -> Option<String> {
        self.chosen_ops()
            .map(|ops| ops.iter().map(|op| op.name()).collect::<Vec<_>>().join(","))
    }

    /// The ops on each key, as the writer carries them out; `None` for a string without
    /// `--ops`, whose steps are laid out as they always were (with the custom commands).
    pub fn chosen_ops(&self) -> Option<Vec<WriteOp>> {
        if !self.ops.is_empty() {
            return Some(self.ops.clone());
        }
        if self.is_string() {
            return None;
        }
        let mut ops = vec![WriteOp::Build];
        if self.overwrite {
            ops.push(WriteOp::Overwrite);
        }
        ops.push(WriteOp::Delete);
        Some(ops)
    }

    /// Whether any key gets op `op`.
    pub fn has_op(&self, op: WriteOp) -> bool {
        match self.chosen_ops() {
            Some(ops) => ops.contains(&op),
            None => match op {
                WriteOp::Set | WriteOp::Delete => true,
                WriteOp::Overwrite => self.overwrite,
                WriteOp::Command => !self.commands.is_empty(),
                _ => false,
            },
        }
    }

    /// The ordered steps: every size to a fresh key; with `overwrite` a second SET to the same
    /// key; then each custom command; then, unless `keep`, the key's deletion. With `keep`,
    /// every key is deleted at the end, each deletion measured like any write. A key that a
    /// custom command removes is not deleted again.
    ///
    /// With ops chosen (`--ops`, or any collection) each key gets them in their order, each a
    /// step of its own: a collection's `overwrite` is two, the twin's `build` and the `RENAME`
    /// onto the key. With `keep` the key's last removal (a DEL where the ops end without one)
    /// moves to the end of the run.
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
        let ops = self.chosen_ops();
        let shapes = self.shapes();
        for rep in 1..=self.repeat {
            for (index, shape) in shapes.iter().enumerate() {
                let label = if shape.kind == "string" {
                    format_size(shape.element_bytes)
                } else {
                    format!("{}{}", shape.kind, shape.elements)
                };
                let key = format!("{key_prefix}w{}:{label}:{rep}", index + 1);
                let step = |op: WriteOp, key: &str| WriteStep {
                    op,
                    key: key.to_string(),
                    size_bytes: shape.size_bytes(),
                    command: None,
                    shape: *shape,
                    twin: None,
                };
                let Some(ops) = &ops else {
                    self.string_steps(&key, step, &mut steps, &mut kept);
                    continue;
                };
                let last = ops.len().saturating_sub(1);
                for (at, &op) in ops.iter().enumerate() {
                    match op {
                        WriteOp::Overwrite if shape.kind != "string" => {
                            let twin = format!("{key}:twin");
                            steps.push(step(WriteOp::Build, &twin));
                            steps.push(WriteStep {
                                twin: Some(twin),
                                ..step(WriteOp::Overwrite, &key)
                            });
                        }
                        op if op.removes_key() && self.keep && at == last => {
                            kept.push(step(op, &key));
                        }
                        op => steps.push(step(op, &key)),
                    }
                }
                if self.keep && !ops.last().is_some_and(|op| op.removes_key()) {
                    kept.push(step(WriteOp::Delete, &key));
                }
            }
        }
        steps.extend(kept);
        steps
    }

    /// A string's steps without `--ops`: SET, the overwrite, the custom commands, the DEL.
    fn string_steps(
        &self,
        key: &str,
        step: impl Fn(WriteOp, &str) -> WriteStep,
        steps: &mut Vec<WriteStep>,
        kept: &mut Vec<WriteStep>,
    ) {
        steps.push(step(WriteOp::Set, key));
        if self.overwrite {
            steps.push(step(WriteOp::Overwrite, key));
        }
        for custom in &self.commands {
            steps.push(WriteStep {
                command: Some(custom.resolve(key)),
                ..step(WriteOp::Command, key)
            });
        }
        if self.commands.iter().any(|c| c.removes_key) {
            return;
        }
        if self.keep {
            kept.push(step(WriteOp::Delete, key));
        } else {
            steps.push(step(WriteOp::Delete, key));
        }
    }

    /// How many steps [`WriterPlan::steps`] lays out, without laying them out: per size and
    /// repeat its SET, the overwrite, each custom command and the deletion (unless a custom
    /// command removes the key); with ops chosen, one per op (two for a collection's
    /// overwrite) and the deletion `keep` adds.
    pub fn step_count(&self) -> usize {
        let per_key = match self.chosen_ops() {
            None => {
                let delete = usize::from(!self.commands.iter().any(|c| c.removes_key));
                1 + usize::from(self.overwrite) + self.commands.len() + delete
            }
            Some(ops) => {
                let twins = if self.is_string() {
                    0
                } else {
                    ops.iter().filter(|&&op| op == WriteOp::Overwrite).count()
                };
                let kept_delete =
                    usize::from(self.keep && !ops.last().is_some_and(|op| op.removes_key()));
                ops.len() + twins + kept_delete
            }
        };
        self.shapes().len() * self.repeat as usize * per_key
    }

    /// How long the plan takes at least: its gaps (the writes themselves add to this), and an
    /// expiry's TTL.
    pub fn minimum_duration(&self) -> Duration {
        let steps = u32::try_from(self.step_count()).unwrap_or(u32::MAX);
        let gaps = self.gap.saturating_mul(steps.saturating_add(1));
        let expiries = match self.chosen_ops() {
            Some(ops) => ops.iter().filter(|&&op| op == WriteOp::Expire).count() as u32,
            None => 0,
        };
        let per_key = Duration::from_millis(EXPIRE_TTL_MS).saturating_mul(expiries);
        let keys = u32::try_from(self.shapes().len()).unwrap_or(u32::MAX);
        gaps.saturating_add(per_key.saturating_mul(keys.saturating_mul(self.repeat)))
    }

    /// A dry run's list of `steps` (of this plan), one line each: number, op, command.
    pub fn step_lines(&self, steps: &[WriteStep]) -> Vec<String> {
        steps
            .iter()
            .enumerate()
            .map(|(index, step)| {
                let command = step.command_text(self.batch_elements);
                format!("  {:>3}  {:<9}  {command}", index + 1, step.op.name())
            })
            .collect()
    }
}

impl WriteStep {
    /// The command the step sends, for a dry run: `SET key <64M random bytes>`, `HSET key
    /// <1000 fields ...> x 1000 commands, 16 in flight`, `RENAME twin key`, ...
    pub fn command_text(&self, batch_elements: u64) -> String {
        let key = &self.key;
        let kind = self.shape.value_kind();
        match (self.op, &self.command) {
            (_, Some(args)) => args.join(" "),
            (WriteOp::Delete, None) => format!("DEL {key}"),
            (WriteOp::Unlink, None) => format!("UNLINK {key}"),
            (WriteOp::Expire, None) => format!(
                "PEXPIRE {key} {EXPIRE_TTL_MS}, then no command to the key: its window runs from the TTL's end until the server's notification (or INFO stats' expired_keys) says it expired"
            ),
            (WriteOp::Evict, None) => format!(
                "PEXPIRE {key} {}, CONFIG SET maxmemory-policy volatile-ttl, then CONFIG SET maxmemory <half the key's MEMORY USAGE under used_memory>: its window runs from there until the server's notification (or INFO stats' evicted_keys) says it evicted the key and INFO memory says used_memory is under maxmemory again; both settings put back after it",
                super::EVICT_TTL_MS
            ),
            (WriteOp::Read, None) => {
                let (command, args) = kind.read_command();
                let mut text = format!("{command} {key}");
                for arg in args {
                    text.push(' ');
                    text.push_str(arg);
                }
                text.push_str(" (the reply thrown away as it arrives)");
                text
            }
            (WriteOp::Overwrite, None) if self.twin.is_some() => {
                format!("RENAME {} {key}", self.twin.as_deref().unwrap_or_default())
            }
            (WriteOp::Build, None) => {
                let batch = batch_elements.max(1).min(self.shape.elements.max(1));
                format!(
                    "{} {key} <{} elements of {} bytes per command> x {} commands, {} in flight",
                    kind.build_command(),
                    batch,
                    self.shape.element_bytes,
                    self.shape.elements.div_ceil(batch),
                    crate::workload::BUILD_PIPELINE_DEPTH
                )
            }
            _ => format!("SET {key} <{} random bytes>", format_size(self.size_bytes)),
        }
    }
}

/// The random bytes a collection's elements are cut from: far more than one element, so the
/// members differ beyond their index, and nothing like the value's size.
pub const COLLECTION_FILL_BYTES: u64 = 64 * 1024;

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
            ..WriterPlan::default()
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

    #[test]
    fn a_collections_ops_are_steps_of_their_own_and_an_overwrite_builds_a_twin() {
        let p = WriterPlan {
            value_type: "hash".into(),
            elements: vec![1000],
            ops: vec![
                WriteOp::Build,
                WriteOp::Read,
                WriteOp::Overwrite,
                WriteOp::Unlink,
            ],
            ..plan(false, false)
        };
        assert_eq!(
            ops(&p)[..5],
            ["build", "read", "build", "overwrite", "unlink"]
        );
        let steps = p.steps("holprobe:t:{ab}:");
        assert_eq!(steps[2].key, format!("{}:twin", steps[0].key));
        assert_eq!(steps[3].twin.as_deref(), Some(steps[2].key.as_str()));
        assert_eq!(steps[3].key, steps[0].key);
        // The twin shares the key's hash tag (the prefix's), so RENAME stays on one slot.
        assert!(steps[2].key.starts_with("holprobe:t:{ab}:"));
        assert_eq!(steps[0].shape.elements, 1000);
        assert_eq!(steps[0].size_bytes, 1000 * 16 * 2);
        assert!(steps[3].command_text(1000).starts_with("RENAME "));
        assert!(steps[0].command_text(300).contains("x 4 commands"));
        // Without --ops a collection is built and deleted (an overwrite between with it).
        let default = WriterPlan {
            ops: Vec::new(),
            ..p.clone()
        };
        assert_eq!(ops(&default)[..2], ["build", "delete"]);
        // --keep moves the last removal to the end; a list without one gets a DEL there.
        let kept = WriterPlan {
            keep: true,
            ops: vec![WriteOp::Build, WriteOp::Read],
            ..p.clone()
        };
        assert_eq!(ops(&kept)[..2], ["build", "read"]);
        assert_eq!(ops(&kept).last(), Some(&"delete"));
        assert_eq!(p.value_buffer_bytes(), COLLECTION_FILL_BYTES);
        assert!(p.minimum_duration() >= p.gap * 5);
    }

    /// A string with --ops set,delete takes the steps a string always had.
    #[test]
    fn a_strings_chosen_ops_are_the_default_steps() {
        let chosen = WriterPlan {
            ops: vec![WriteOp::Set, WriteOp::Delete],
            ..plan(false, false)
        };
        assert_eq!(
            chosen.steps("holprobe:t:"),
            plan(false, false).steps("holprobe:t:")
        );
        assert!(chosen.steps("p:").iter().all(|s| s.shape.kind == "string"));
    }

    /// run.json's writer reads back whole: writing what was read gives the same bytes, so no
    /// field of the plan is forgotten on the way back.
    #[test]
    fn a_recorded_writer_reads_back_every_field() {
        let mut plan = plan(true, true);
        plan.commands = vec![CustomCommand::removing(["UNLINK", KEY_PLACEHOLDER])];
        let collection = WriterPlan {
            value_type: "zset".into(),
            elements: vec![5, 7],
            element_bytes: 8,
            batch_elements: 3,
            ops: vec![WriteOp::Build, WriteOp::Expire],
            ..plan.clone()
        };
        let json = serde_json::to_string(&RecordedWriter {
            plan: collection,
            key_prefix: "p:".into(),
            seed: 1,
            connection_recorded: true,
        })
        .unwrap();
        let read: RecordedWriter = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), json);
        assert_eq!(read.ops, [WriteOp::Build, WriteOp::Expire]);
        let recorded = RecordedWriter {
            plan,
            key_prefix: "holprobe:feedf00d:".into(),
            seed: 99,
            connection_recorded: true,
        };
        let json = serde_json::to_string(&recorded).unwrap();
        let read: RecordedWriter = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), json);
        assert!(
            json.ends_with(
                r#""key_prefix":"holprobe:feedf00d:","random_state":99,"same_connection":false}"#
            ),
            "{json}"
        );
        assert!(read.connection_recorded);
        // A run from before the field: its writer kept one connection, whatever it said.
        let older = json.replace(r#","same_connection":false"#, "");
        let read: RecordedWriter = serde_json::from_str(&older).unwrap();
        assert!(!read.connection_recorded && !read.same_connection);
    }
}
