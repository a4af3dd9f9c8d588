//! Nodes probed from the middle of a run: a node the topology watcher finds ready (new in the
//! topology, or a replica left out at the start that has come online) gets its probe threads
//! and its correlator as the nodes found at the start got theirs, its schedule starting a
//! moment after it was seen, so its rows in every export start there.
//!
//! The joiner holds a sender into the run's channel only while the topology watcher runs (it
//! holds one too, so the channel's end does not move), and lets it go when the instrument
//! stops: a join still in the channel then starts nothing.

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::measure::event::EventSender;
use anyhow::{Context, Result};

use super::nodes::{Probed, ProbedNode};
use crate::measure::clock::RunClock;
use crate::measure::probe::{ProbeConfig, ProbeShared, spawn_probes};
use crate::measure::topology_watch::JoinedNode;

/// How far ahead of now a joined node's first probe is due: its threads are running by then.
const SCHEDULE_LEAD_US: u64 = 20_000;

/// Starts the probes of nodes that join during the run.
pub(super) struct Joiner<'a> {
    pub(super) probed: &'a Probed,
    /// The run's probe settings (its GET key: the written shard's).
    pub(super) config: ProbeConfig,
    /// `holprobe:<run-id>:`, for another shard's GET key.
    pub(super) run_base: String,
    /// The other shards' GET keys set at the start.
    pub(super) homed_keys: Vec<String>,
    pub(super) clock: RunClock,
    pub(super) events: EventSender,
}

/// A joined node's probes, started.
pub(super) struct Started {
    pub(super) node: ProbedNode,
    pub(super) handles: Vec<JoinHandle<()>>,
    /// Its probes are due from here on (run clock, µs).
    pub(super) probed_from_us: u64,
}

impl Joiner<'_> {
    /// Opens the connections of `joined`'s probe threads (numbered from `first_thread`) and
    /// starts them.
    pub(super) fn start(
        &self,
        joined: &JoinedNode,
        first_thread: usize,
        shared: &Arc<ProbeShared>,
    ) -> Result<Started> {
        let node = self.probed.joined(joined, self.config.cmd)?;
        let first_thread = u16::try_from(first_thread)
            .ok()
            .filter(|first| first.checked_add(self.config.threads).is_some())
            .context("the run has as many probe threads as it can number")?;
        let get_key = match &node.probe_key_home {
            Some((tag, _)) => {
                let key = format!("{}{{{tag}}}:probe", self.run_base);
                anyhow::ensure!(
                    self.homed_keys.contains(&key),
                    "its shard's probe key was not set at the start"
                );
                key
            }
            None => self.config.get_key.clone(),
        };
        let config = ProbeConfig {
            first_thread,
            get_key,
            // A node that came during the run may go again: that must not end the run.
            keep_going: true,
            ..self.config.clone()
        };
        let probed_from_us = self.clock.now_us() + SCHEDULE_LEAD_US;
        let handles = spawn_probes(
            &config,
            &node.conn,
            self.clock,
            probed_from_us,
            self.events.clone(),
            Arc::clone(shared),
        )?;
        Ok(Started {
            node,
            handles,
            probed_from_us,
        })
    }
}
