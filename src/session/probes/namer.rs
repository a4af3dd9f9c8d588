//! The stall namer: what the server's logs said lately (slow log, LATENCY events, removed keys,
//! the event loop's longest cycles), and the first node's stalls waiting for them.

use crate::analyze::correlate::Stall;
use crate::measure::culprit::{
    Culprit, LoopWindow, RemovedKey, ServerCommandEntry, ServerLogBatch, WallSpan, client_label,
    command_label, eventloop_label, foreign_entry, key_label, label_of, name_stall, removed_during,
};
use crate::measure::serverview::LatencyEvent;

/// What the server's logs said lately, and the stalls waiting for them.
#[derive(Debug, Default)]
pub(super) struct Namer {
    pub(super) entries: std::collections::VecDeque<ServerCommandEntry>,
    pub(super) events: Vec<LatencyEvent>,
    /// Keys the server expired or evicted (keyspace notifications), oldest first.
    pub(super) removed_keys: std::collections::VecDeque<RemovedKey>,
    /// The event loop's longest cycle, poll window by poll window.
    pub(super) loop_windows: std::collections::VecDeque<LoopWindow>,
    /// Every command that ended before this (Unix µs) has been read.
    pub(super) read_through_unix_us: i64,
    pub(super) waiting: std::collections::VecDeque<Stall>,
    /// The run's key prefix: a key outside it that the server removed during a write's stall
    /// is not the write's doing.
    pub(super) own_prefix: Vec<u8>,
    /// One line per write whose window held such a removal, or a stall named by another
    /// client's command (its first such stall), for the run's warnings.
    pub(super) foreign: Vec<String>,
    /// The writes flagged so far (the lines leave `foreign` as they are filed).
    pub(super) flagged: std::collections::BTreeSet<u32>,
}

/// How long a stall waits for the slow-log poll after its end, µs (a poll comes every 250 ms).
pub(super) const NAMER_WAITS_AT_MOST_US: i64 = 5_000_000;

/// How long the namer keeps what the server logged, s: a stall is named within a poll or two
/// of its end, so a minute is plenty, and memory stays flat.
pub(super) const NAMER_KEEPS_S: i64 = 60;

impl Namer {
    pub(super) fn take(&mut self, batch: ServerLogBatch) {
        self.entries.extend(batch.poll.entries);
        self.removed_keys.extend(batch.poll.removed_keys);
        for event in batch.poll.latency {
            self.events
                .retain(|e| e.name != event.name || e.at_unix_s != event.at_unix_s);
            self.events.push(event);
        }
        if batch.polled_unix_us > 0 {
            if let Some(max_us) = batch.poll.eventloop_max_us
                && self.read_through_unix_us > 0
            {
                self.loop_windows.push_back(LoopWindow {
                    start_unix_us: self.read_through_unix_us,
                    end_unix_us: batch.polled_unix_us,
                    max_us,
                });
            }
            self.read_through_unix_us = batch.polled_unix_us;
        }
        let horizon_s = self.read_through_unix_us / 1_000_000 - NAMER_KEEPS_S;
        while self
            .entries
            .front()
            .is_some_and(|e| e.logged_unix_s < horizon_s)
        {
            self.entries.pop_front();
        }
        self.events.retain(|e| e.at_unix_s >= horizon_s);
        while self
            .removed_keys
            .front()
            .is_some_and(|k| k.at_unix_us < horizon_s.saturating_mul(1_000_000))
        {
            self.removed_keys.pop_front();
        }
        while self
            .loop_windows
            .front()
            .is_some_and(|w| w.end_unix_us < horizon_s.saturating_mul(1_000_000))
        {
            self.loop_windows.pop_front();
        }
    }

    /// The stalls whose end the logs have covered (all of them when `all`), named.
    pub(super) fn named(&mut self, unix_start_us: u64, all: bool) -> Vec<Stall> {
        let mut out = Vec::new();
        // Should the poller stop sending (its thread gone), a stall waits no longer than this
        // after its end, and goes unnamed.
        let given_up_before = crate::measure::serverview::unix_now_us() - NAMER_WAITS_AT_MOST_US;
        while let Some(stall) = self.waiting.front() {
            let end_unix_us = (unix_start_us + stall.end_us) as i64;
            if !all && end_unix_us >= self.read_through_unix_us && end_unix_us >= given_up_before {
                break;
            }
            let mut stall = self.waiting.pop_front().expect("peeked");
            let span = WallSpan {
                start_unix_us: (unix_start_us + stall.start_us) as i64,
                end_unix_us,
            };
            let Culprit {
                server_command,
                server_client,
                server_event,
            } = name_stall(span, self.entries.make_contiguous(), &self.events);
            stall.server_command = server_command;
            stall.server_client = server_client;
            let removed = self.removed_keys.make_contiguous();
            stall.server_key = key_label(span, removed);
            if let Some(seq) = stall.write_seq
                && !self.flagged.contains(&seq)
            {
                let foreign: Vec<&RemovedKey> = removed_during(span, removed)
                    .filter(|r| !r.key.starts_with(&self.own_prefix))
                    .collect();
                let line = if let Some(label) = label_of(foreign) {
                    Some(format!(
                        "write {seq}: a stall of {:.1} ms in its window came with the server's removal of a key not the run's ({label}): its figures (hol_delay_ms, stall_ms) include that freeze (stalls.csv server_key)",
                        stall.duration_ms
                    ))
                } else {
                    foreign_entry(span, self.entries.make_contiguous(), &self.own_prefix).map(
                        |entry| {
                            let from = client_label(entry)
                                .map(|client| format!(" from {client}"))
                                .unwrap_or_default();
                            format!(
                                "write {seq}: a stall of {:.1} ms in its window was another client's command, not the run's ({}{from}): its figures (hol_delay_ms, stall_ms) include that command (stalls.csv server_command)",
                                stall.duration_ms,
                                command_label(&entry.args)
                            )
                        },
                    )
                };
                if let Some(line) = line {
                    self.flagged.insert(seq);
                    self.foreign.push(line);
                }
            }
            let event_loop = eventloop_label(span, self.loop_windows.make_contiguous());
            // `latency command 80ms, expire-cycle 12ms; event loop max 80.2ms`
            let events = server_event.map(|events| format!("latency {events}"));
            stall.server_event = match (events, event_loop) {
                (Some(events), Some(event_loop)) => Some(format!("{events}; {event_loop}")),
                (events, event_loop) => events.or(event_loop),
            };
            out.push(stall);
        }
        out
    }
}
