//! What caused a stall, where the server can tell: the command in its SLOWLOG (Valkey 8.1+:
//! COMMANDLOG `slow`) whose run explains the silence, the client that sent it, and the LATENCY
//! monitor's events in the stall's seconds.
//!
//! Two halves, kept apart like the rest of the pipeline: the poller (`measure::culprit`) reads
//! the server's logs on a connection of its own (sockets, no judgement), and [`name_stall`] here
//! matches one stall against what was read (pure: no sockets, no clock, tested on synthetic
//! entries).
//!
//! # What the server's timestamps mean
//! Read in the Redis 7.0-era source (redis/redis `src/slowlog.c` at ea2b8ccc, `src/server.c`
//! at 00097bf4) and Valkey's (valkey-io/valkey `src/commandlog.c` at 0e62809f):
//! - `call()` times the command around `c->cmd->proc(c)` alone (a monotonic clock where cheap,
//!   else `ustime()`), then calls `slowlogPushCurrentCommand` with that duration, and
//!   `slowlogCreateEntry` stamps the entry with `time(NULL)`. So the entry's time is the unix
//!   second, truncated, in which the command *finished*, and its duration (µs) is the command's
//!   own work only: reading and parsing the request, waiting for its turn and writing the reply
//!   are not in it (a 64 MB SET's read costs the others more than its logged µs), nor is the
//!   time a blocking command spent blocked ("If the client is blocked we will handle slowlog
//!   when it is unblocked"). Valkey's `commandlogCreateEntry` is the same (`ce->time =
//!   time(NULL)`, value = the command's duration for the `slow` type, the same six fields); for
//!   a command run by a script it logs the script's caller as the client.
//! - The same `call()` feeds the LATENCY monitor (`command`, or `fast-command` for commands
//!   flagged fast) with `duration/1000`: whole ms, truncated. `latencyAddSample` stamps
//!   `time(NULL)` and keeps one figure per event per second, the worst; LATENCY LATEST shows
//!   the latest such second and its figure.
//! - Entry ids come from a counter that only grows (`server.slowlog_entry_id++`): SLOWLOG
//!   RESET empties the list but does not restart the count; a server restart does.
//!
//! # The matching rule ([`name_stall`])
//! An entry logged in second `T` with duration `D` ran over `[e - D, e]` for some end `e` in
//! `[T, T + 1 s)`: its possible span is `[T - D, T + 1 s)`. A stall `[S, E]` of length `L` is
//! named after an entry when
//! 1. the entry's possible span overlaps `[S, E]`, and
//! 2. `D` explains the stall: `L / 2 <= D <= 5/4 L + 2 ms`. A command keeps every probe sent
//!    after it started waiting until it ends, so the stall it causes is about `D` long: longer
//!    by a round trip and whatever else the server did, shorter by at most one probe interval.
//!    Less than half the silence is not "the" cause; a command longer than the silence by more
//!    than a quarter and 2 ms (the probe interval at slow rates, ms truncation) would have made
//!    a longer silence, so it was another stall in the same second.
//!
//! Among the entries that qualify, the one whose `D` is nearest `L` wins; then the longer,
//! then the earlier id. Events are named the same way (span `[T - latest, T + 1 s)` overlaps the
//! stall, and not longer than `5/4 L + 2 ms`) but with no lower bound: an `expire-cycle 12ms`
//! inside a 50 ms stall is part of the story. At most three, the largest first.
//!
//! # Limits
//! - Second resolution: a candidate's span is known only to within a second, so every slow
//!   command of that second is a candidate. Two of them with about the same duration (two
//!   clients' `DEBUG SLEEP 0.05` in one second) cannot be told apart: the rule picks one by the
//!   tie-breaks above, which may be the wrong client.
//! - One entry per stall: back-to-back commands that each took less than half the silence (a
//!   pipeline of several 20 ms commands behind one 60 ms stall) name nothing.
//! - Only what the server logs: below `slowlog-log-slower-than`, and work done outside a
//!   command (reading a large request, writing a large reply, a fork, eviction, expiry), no
//!   entry exists; the LATENCY events cover some of it when the monitor is on.
//! - The server's clock: on another host it may be off from this one's; shift the span by that
//!   offset before matching.
//! - The LATENCY monitor keeps the worst figure of each second: a spike in the same second as a
//!   larger one of the same event leaves no trace (a 30 ms script after a 50 ms sleep in one
//!   second gets no event of its own). LATENCY LATEST shows only each event's latest second, so
//!   a row replaced by a later second before a poll read it is lost.
//!
//! # Where things are, and where to add a source
//! Each source of evidence is a file: `command` (SLOWLOG / COMMANDLOG entries, the client),
//! `events` (LATENCY LATEST rows), `eventloop` (INFO's longest event-loop cycle), `keys` (keys
//! the server expired or evicted, from keyspace notifications, and the operator's words for a
//! LATENCY event); `span` holds
//! the timing rule they share (a span known to within the logged second, "explains", "too
//! long"), `label` the printable text of what the server logged. A new kind of evidence (more
//! LATENCY event kinds, keyspace notifications) is a file here with its type and its rule
//! (built on `span`), a field of [`Culprit`] if it names something new, and one line in
//! [`name_stall`].

mod command;
mod eventloop;
mod events;
mod keys;
mod label;
mod span;
#[cfg(test)]
mod tests;

use serde::Serialize;

pub use command::{
    ServerCommandEntry, TOOL_CLIENT_NAME_PREFIX, client_label, foreign_entry, is_command,
    is_the_runs, run_client_name,
};
pub use eventloop::{LoopWindow, eventloop_label};
pub use events::{LatencyEvent, latency_changes};
pub use keys::{
    KEY_SLACK_US, RemovedKey, cause_of, event_cause, key_label, label_of, latency_events,
    removed_during,
};
pub use label::{command_label, printable};
pub use span::WallSpan;

/// What the server says caused one stall. Every field is empty when the server cannot tell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Culprit {
    /// The command whose run explains the stall: its name upper-cased and its first arguments,
    /// shortened (`DEBUG SLEEP 0.05`, `EVAL "local t = redis.cal..." 0`).
    pub server_command: Option<String>,
    /// The client that sent it: `ip:port`, then its name when it set one (`10.0.0.5:51234
    /// app-worker`).
    pub server_client: Option<String>,
    /// The LATENCY monitor's events in the stall's seconds, largest first (`command 51ms,
    /// expire-cycle 12ms`).
    pub server_event: Option<String>,
}

/// Names what caused `stall`, from the entries and latency rows polled over the run (the rule
/// and its limits are in the module comment).
pub fn name_stall(
    stall: WallSpan,
    entries: &[ServerCommandEntry],
    events: &[LatencyEvent],
) -> Culprit {
    let mut culprit = Culprit::default();
    if let Some(entry) = command::best_entry(stall, entries) {
        culprit.server_command = Some(command_label(&entry.args));
        culprit.server_client = client_label(entry);
    }
    culprit.server_event = events::event_label(stall, events);
    culprit
}
