//! What exists only once a run has begun, made once by the session and handed to the actor and
//! the instrument: the plan (what the user asked for) never holds any of it.

use std::sync::Arc;

use crate::measure::clock::RunClock;
use crate::output::export::{HostInfo, Mode};
use crate::output::metrics::ProbeMetrics;

/// The run's name on the server: its id and the prefix of every key it creates. Made once,
/// before the run's scope opens (the actor names its keys under the prefix, and they are
/// checked free), then moved into the [`RunContext`] as the session starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunName {
    /// The run's id.
    pub run_id: String,
    /// `holprobe:<run_id>:` (with a cluster's hash tag), the prefix of every key the run creates.
    pub key_prefix: String,
    /// The cluster's hash tag in it (`None` elsewhere): the run's marker registry carries it too.
    pub hash_tag: Option<String>,
}

impl RunName {
    /// A new run id. With a `tag`, every key of the run carries the hash tag `{tag}`
    /// (`holprobe:<run-id>:{tag}:`), so that a cluster routes them to one shard.
    pub fn new(tag: Option<&str>) -> RunName {
        let run_id = super::new_run_id();
        let key_prefix = match tag {
            Some(tag) => format!("{}{{{tag}}}:", super::run_key_prefix(&run_id)),
            None => super::run_key_prefix(&run_id),
        };
        RunName {
            run_id,
            key_prefix,
            hash_tag: tag.map(str::to_string),
        }
    }
}

/// The run as it goes: its name (made before the scope the session opened), its clock, the
/// command it is (run.json's `mode`), the host it runs on and the metrics endpoint's figures.
/// Cheap to clone: an instrument keeps its own copy while the session runs.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The command that runs: what its run.json says it is.
    pub mode: Mode,
    /// The run's id and key prefix.
    pub name: RunName,
    /// The run's one clock, started with the session.
    pub clock: RunClock,
    /// The machine the run measures from (read once, as the clock starts).
    pub host: HostInfo,
    /// The `--metrics-addr` endpoint's figures, updated as the run goes; `None` without one.
    pub metrics: Option<Arc<ProbeMetrics>>,
}

/// What a command says of its run beyond its plan, for the session's [`RunContext`]: which
/// command it is, and the figures of the metrics endpoint it serves (started before the run, so
/// a bad `--metrics-addr` fails before anything is measured).
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// run.json's `mode`.
    pub mode: Mode,
    /// The metrics endpoint's figures, if the command serves them.
    pub metrics: Option<Arc<ProbeMetrics>>,
}

impl RunSpec {
    /// A run of `mode` without a metrics endpoint.
    pub fn new(mode: Mode) -> RunSpec {
        RunSpec {
            mode,
            metrics: None,
        }
    }
}

impl Default for RunSpec {
    /// The main job's (and observe mode's).
    fn default() -> RunSpec {
        RunSpec::new(Mode::Probe)
    }
}
