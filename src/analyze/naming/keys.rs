//! Naming by the keys the server removed on its own: keyspace notifications of expired and
//! evicted keys (`__keyevent@<db>__:expired`, `:evicted`), as
//! [`crate::measure::keyspace`] hears them.
//!
//! # The rule
//! The server publishes the notification right after it deleted the key (and freed its value,
//! unless lazyfree sent that to the background), and writes it to the subscriber in the same
//! event-loop turn as the replies the stall held back. So a removal that caused a stall `[S, E]`
//! is heard after `S` and at most a scheduling delay after `E`: every key heard in
//! `[S, E + KEY_SLACK_US]` is named, the last heard first (the one whose free ended the
//! silence). Keys heard inside a stall they did not cause (a small key expiring in the same
//! active-expiry cycle as a big one) are named too: the cycle is the cause, its keys the story.
//!
//! # Limits
//! Only where `notify-keyspace-events` has `E` and `x`/`e` (the tool sets them on its own
//! server, and with `--tune-server` on another, restoring them afterwards); only the run's
//! database; a key removed by another client's command (DEL, UNLINK) is not here: SLOWLOG names
//! that.

use super::label::printable;
use super::span::WallSpan;

/// How long after a stall's end the notification of the removal that ended it may be heard, µs:
/// the subscriber thread's wake-up on a busy 2-core host.
pub const KEY_SLACK_US: i64 = 5_000;

/// Most keys listed by name for one stall.
const MAX_KEYS: usize = 2;

/// One key the server said it removed on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedKey {
    /// `expired` or `evicted`.
    pub event: String,
    /// The key as the server sent it.
    pub key: Vec<u8>,
    /// When the notification was heard, µs since the Unix epoch (this host's clock).
    pub at_unix_us: i64,
}

/// The keys removed during `stall`, as `expired holprobe:ab12:w1:hash` or `expired k1, k2 (+3
/// more)`; `None` when none was heard in it.
pub fn key_label(stall: WallSpan, removed: &[RemovedKey]) -> Option<String> {
    let heard: Vec<&RemovedKey> = removed_during(stall, removed).collect();
    label_of(heard)
}

/// The keys heard removed during `stall` (see the rule above).
pub fn removed_during(
    stall: WallSpan,
    removed: &[RemovedKey],
) -> impl Iterator<Item = &RemovedKey> {
    removed.iter().filter(move |r| {
        r.at_unix_us >= stall.start_unix_us
            && r.at_unix_us <= stall.end_unix_us.saturating_add(KEY_SLACK_US)
    })
}

/// As [`key_label`], of keys already picked (none: `None`).
pub fn label_of(mut heard: Vec<&RemovedKey>) -> Option<String> {
    if heard.is_empty() {
        return None;
    }
    heard.sort_by_key(|r| std::cmp::Reverse(r.at_unix_us));
    let event = &heard[0].event;
    let names: Vec<String> = heard
        .iter()
        .take(MAX_KEYS)
        .map(|r| {
            if r.event == *event {
                printable(&r.key)
            } else {
                format!("{} {}", r.event, printable(&r.key))
            }
        })
        .collect();
    let more = heard.len().saturating_sub(MAX_KEYS);
    let tail = if more > 0 {
        format!(" (+{more} more)")
    } else {
        String::new()
    };
    Some(format!("{event} {}{tail}", names.join(", ")))
}

/// What a LATENCY monitor event says the server was doing, in an operator's words: the cause a
/// stall line shows when no client's command explains it.
pub fn event_cause(event: &str) -> &str {
    match event {
        "expire-cycle" | "expire-del" | "expire-fast-cycle" => "active expiry",
        "eviction-cycle" | "eviction-del" | "evict-del" | "eviction-lazyfree" => "eviction",
        "fork" => "fork (a snapshot or AOF rewrite)",
        "command" | "fast-command" => "a slow command",
        "active-defrag-cycle" => "active defragmentation",
        "while-blocked-cron" => "server cron while blocked",
        name if name.starts_with("aof-") => "AOF write or fsync",
        name if name.starts_with("rdb-") => "RDB file work",
        other => other,
    }
}

/// The LATENCY events in a stall's `server_event` text (`latency expire-cycle 314ms, command
/// 2ms; event loop max 314.2ms`), as (name, figure) in its order, largest first: `[("expire-cycle",
/// "314ms"), ("command", "2ms")]`; empty when it names none.
pub fn latency_events(server_event: &str) -> Vec<(&str, &str)> {
    let Some(events) = server_event.strip_prefix("latency ") else {
        return Vec::new();
    };
    let events = events.split(';').next().unwrap_or(events);
    events
        .split(", ")
        .filter_map(|part| part.trim().rsplit_once(' '))
        .collect()
}

/// The cause in a stall's `server_event` text (`latency expire-cycle 314ms, expire-del 314ms;
/// event loop max 314.2ms`): its largest LATENCY event in an operator's words with the events'
/// names, `active expiry 314ms (expire-cycle, expire-del)`. `None` when it names no LATENCY
/// event, or only commands (a command is named by SLOWLOG, or not at all).
pub fn cause_of(server_event: &str) -> Option<String> {
    let parsed = latency_events(server_event);
    let &(first, figure) = parsed.first()?;
    let cause = event_cause(first);
    if cause == "a slow command" {
        return None;
    }
    let same: Vec<&str> = parsed
        .iter()
        .filter(|(name, _)| event_cause(name) == cause)
        .map(|(name, _)| *name)
        .collect();
    Some(format!("{cause} {figure} ({})", same.join(", ")))
}
