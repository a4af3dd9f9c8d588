//! What caused a stall, where the server can tell: the command in its SLOWLOG (Valkey 8.1+:
//! COMMANDLOG `slow`) whose run explains the silence, the client that sent it, and the LATENCY
//! monitor's events in the stall's seconds.
//!
//! Two halves, kept apart like the rest of the pipeline: [`ServerLogPoller`] reads the server's
//! logs on a connection of its own (sockets, no judgement), and [`name_stall`] matches one stall
//! against what was read (pure: no sockets, no clock, tested on synthetic entries).
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

use std::fmt::Write as _;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::measure::resp::{RawConn, Reply};
use crate::measure::serverview::{
    LatencyEvent, LogEntry, eventloop_max_during, parse_latency_latest, parse_log_entries,
    read_eventloop_max,
};
use crate::measure::target::ConnInfo;
use crate::units::format_size;

/// A stall's interval on the wall clock (unix time), to match against the server's own stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallSpan {
    /// Start, unix µs.
    pub start_unix_us: i64,
    /// End, unix µs.
    pub end_unix_us: i64,
}

impl WallSpan {
    /// Length, µs (0 when the end is before the start).
    pub fn duration_us(&self) -> i64 {
        self.end_unix_us.saturating_sub(self.start_unix_us).max(0)
    }
}

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

/// One SLOWLOG (or COMMANDLOG `slow`) entry, as the poller hands it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCommandEntry {
    /// Entry id: grows by one per entry for as long as the server runs (SLOWLOG RESET does not
    /// restart it).
    pub id: i64,
    /// Unix time, whole seconds (truncated), at which the server logged the entry: right after
    /// the command finished.
    pub logged_unix_s: i64,
    /// The command's execution time, µs (its own work only: see the module comment).
    pub duration_us: i64,
    /// The command and its arguments as logged (the server keeps at most 32 arguments and 128
    /// bytes of each, marking what it cut).
    pub args: Vec<Vec<u8>>,
    /// The client's address, `ip:port` (Redis 4+ and Valkey).
    pub client_addr: Option<String>,
    /// The client's name (`CLIENT SETNAME`), when it set one.
    pub client_name: Option<String>,
}

impl From<LogEntry> for ServerCommandEntry {
    fn from(entry: LogEntry) -> ServerCommandEntry {
        ServerCommandEntry {
            id: entry.id,
            logged_unix_s: entry.timestamp,
            duration_us: entry.value,
            args: entry.args,
            client_addr: entry.client_addr,
            client_name: entry.client_name,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Matching (pure)

/// Slack on the upper bound of a match, µs: the probes' interval at slow rates, ms-truncated
/// latency figures.
const MATCH_SLACK_US: i64 = 2_000;

/// Most events named for one stall.
const MAX_EVENTS: usize = 3;

/// Names what caused `stall`, from the entries and latency rows polled over the run (the rule
/// and its limits are in the module comment).
pub fn name_stall(
    stall: WallSpan,
    entries: &[ServerCommandEntry],
    events: &[LatencyEvent],
) -> Culprit {
    let length_us = stall.duration_us();
    let best = entries
        .iter()
        .filter(|entry| {
            overlaps(entry.logged_unix_s, entry.duration_us, stall)
                && explains(entry.duration_us, length_us)
        })
        .min_by_key(|entry| {
            (
                entry.duration_us.abs_diff(length_us),
                std::cmp::Reverse(entry.duration_us),
                entry.id,
            )
        });
    let mut culprit = Culprit::default();
    if let Some(entry) = best {
        culprit.server_command = Some(command_label(&entry.args));
        culprit.server_client = client_label(entry);
    }
    culprit.server_event = event_label(stall, events);
    culprit
}

/// Whether a run of `duration_us` that ended within the second `logged_unix_s` can overlap the
/// stall.
fn overlaps(logged_unix_s: i64, duration_us: i64, stall: WallSpan) -> bool {
    let second_start = logged_unix_s.saturating_mul(1_000_000);
    let earliest_start = second_start.saturating_sub(duration_us.max(0));
    let latest_end = second_start.saturating_add(1_000_000);
    earliest_start <= stall.end_unix_us && latest_end > stall.start_unix_us
}

/// Whether a command of `duration_us` accounts for a silence of `length_us`.
fn explains(duration_us: i64, length_us: i64) -> bool {
    duration_us.saturating_mul(2) >= length_us && !too_long(duration_us, length_us)
}

/// A run longer than the silence by more than a quarter and the slack would have made a longer
/// silence.
fn too_long(duration_us: i64, length_us: i64) -> bool {
    duration_us
        > length_us
            .saturating_add(length_us / 4)
            .saturating_add(MATCH_SLACK_US)
}

fn event_label(stall: WallSpan, events: &[LatencyEvent]) -> Option<String> {
    let length_us = stall.duration_us();
    let mut found: Vec<&LatencyEvent> = events
        .iter()
        .filter(|event| {
            let latest_us = event.latest_ms.saturating_mul(1_000);
            overlaps(event.at_unix_s, latest_us, stall) && !too_long(latest_us, length_us)
        })
        .collect();
    found.sort_by(|a, b| {
        b.latest_ms
            .cmp(&a.latest_ms)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.at_unix_s.cmp(&b.at_unix_s))
    });
    found.dedup_by(|a, b| a.name == b.name && a.at_unix_s == b.at_unix_s);
    if found.is_empty() {
        return None;
    }
    let parts: Vec<String> = found
        .iter()
        .take(MAX_EVENTS)
        .map(|event| format!("{} {}ms", printable(event.name.as_bytes()), event.latest_ms))
        .collect();
    Some(parts.join(", "))
}

/// One poll window's longest event-loop cycle: every cycle that ended between two polls
/// (`start_unix_us`, `end_unix_us`] of the server's wall clock, as this host reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopWindow {
    /// The previous poll's start, µs since the Unix epoch.
    pub start_unix_us: i64,
    /// This poll's start, µs since the Unix epoch (its INFO reading came a little later).
    pub end_unix_us: i64,
    /// The longest cycle, µs.
    pub max_us: u64,
}

/// The event loop's longest cycle in the poll windows a stall falls in, as `event loop max
/// 50.1ms`: a cycle as long as the stall says the server was busy in one go; a much shorter one
/// says the server was not what held the others (the host, the network). `None` when no window
/// covers the stall, or its longest cycle is too long to be this stall's (it made a longer
/// silence of its own in the same window).
pub fn eventloop_label(stall: WallSpan, windows: &[LoopWindow]) -> Option<String> {
    let length_us = stall.duration_us();
    let max_us = windows
        .iter()
        .filter(|w| {
            w.start_unix_us < stall.end_unix_us
                && w.end_unix_us.saturating_add(MATCH_SLACK_US) > stall.start_unix_us
        })
        .map(|w| w.max_us)
        .max()?;
    (!too_long(i64::try_from(max_us).unwrap_or(i64::MAX), length_us))
        .then(|| format!("event loop max {:.1}ms", max_us as f64 / 1e3))
}

/// `ip:port name`, `ip:port`, or the name alone; `None` when the server said neither.
pub fn client_label(entry: &ServerCommandEntry) -> Option<String> {
    let parts: Vec<String> = [&entry.client_addr, &entry.client_name]
        .into_iter()
        .flatten()
        .filter(|text| !text.is_empty())
        .map(|text| printable(text.as_bytes()))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// Aimed-for length of a command label, characters; the last argument may pass it by its size
/// mark (`(64M)`).
const LABEL_CHARS: usize = 40;
/// Most characters of any one argument (quotes and `...` included).
const ARG_CHARS: usize = 24;
/// An argument gets at least this much room, or the label ends with ` ...` instead.
const MIN_ARG_CHARS: usize = 6;
/// What the server keeps of a long argument before its `... (N more bytes)` mark
/// (`SLOWLOG_ENTRY_MAX_STRING`, `COMMANDLOG_ENTRY_MAX_STRING`).
const SERVER_KEPT_BYTES: usize = 128;

/// A short, printable label for a logged command: the name upper-cased, then as many of the
/// first arguments as fit in about 40 characters, each cut to 24. Bytes that are not printable
/// UTF-8 are escaped (`\xff`, `\n`); an argument with a space or a quote is quoted; one the
/// server shortened keeps its full size (`xyz...(64M)`).
pub fn command_label(args: &[Vec<u8>]) -> String {
    let Some((name, rest)) = args.split_first() else {
        return String::new();
    };
    let mut label = render_arg(&name.to_ascii_uppercase(), ARG_CHARS);
    let shown = shown_args(name, rest);
    if shown < rest.len() {
        // A password may be among the rest: never repeat it (older servers log it as sent).
        for arg in &rest[..shown] {
            label.push(' ');
            label.push_str(&render_arg(arg, ARG_CHARS));
        }
        label.push_str(" (arguments hidden)");
        return label;
    }
    for arg in rest {
        let room = LABEL_CHARS.saturating_sub(label.chars().count() + 1);
        if room < MIN_ARG_CHARS {
            label.push_str(" ...");
            break;
        }
        label.push(' ');
        label.push_str(&render_arg(arg, room.min(ARG_CHARS)));
    }
    label
}

/// How many of a command's arguments may be shown: all of them, except for the commands that
/// can carry a password (AUTH, HELLO, MIGRATE, ACL, and CONFIG SET of an `*auth*`/`*pass*`
/// setting), of which only the subcommand or setting name is.
fn shown_args(name: &[u8], rest: &[Vec<u8>]) -> usize {
    let is = |word: &[u8]| name.eq_ignore_ascii_case(word);
    if is(b"AUTH") || is(b"HELLO") || is(b"MIGRATE") {
        return 0;
    }
    if is(b"ACL") {
        return rest.len().min(1);
    }
    if is(b"CONFIG")
        && rest
            .first()
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"SET"))
        && rest.iter().skip(1).any(|arg| {
            let lower = arg.to_ascii_lowercase();
            lower.windows(4).any(|w| w == b"auth" || w == b"pass")
        })
    {
        return 1;
    }
    rest.len()
}

/// Splits off the server's `... (N more bytes)` mark: the kept bytes and the argument's full
/// size. Only a mark after exactly the 128 kept bytes counts, so an argument that merely ends
/// in those words stays as it is.
fn split_server_cut(arg: &[u8]) -> (&[u8], Option<u64>) {
    const OPEN: &[u8] = b"... (";
    const CLOSE: &[u8] = b" more bytes)";
    if arg.len() > SERVER_KEPT_BYTES + OPEN.len() + CLOSE.len() && arg.ends_with(CLOSE) {
        let (kept, mark) = arg.split_at(SERVER_KEPT_BYTES);
        if let Some(digits) = mark
            .strip_prefix(OPEN)
            .and_then(|m| m.strip_suffix(CLOSE))
            .and_then(|d| std::str::from_utf8(d).ok())
            && let Ok(more) = digits.parse::<u64>()
        {
            return (kept, Some(SERVER_KEPT_BYTES as u64 + more));
        }
    }
    (arg, None)
}

/// One argument in at most `budget` characters (plus a size mark when the server cut it).
fn render_arg(arg: &[u8], budget: usize) -> String {
    let (kept, full_size) = split_server_cut(arg);
    let quoted = kept.is_empty() || kept.iter().any(|&b| b == b' ' || b == b'"');
    let pieces = escaped_pieces(kept);
    let room = budget.saturating_sub(if quoted { 2 } else { 0 });
    let total: usize = pieces.iter().map(|p| p.chars().count()).sum();
    let cut = full_size.is_some() || total > room;
    let mut text = String::new();
    if cut {
        let room = room.saturating_sub(3);
        let mut used = 0;
        for piece in &pieces {
            let len = piece.chars().count();
            if used + len > room {
                break;
            }
            text.push_str(piece);
            used += len;
        }
        text.push_str("...");
    } else {
        pieces.iter().for_each(|p| text.push_str(p));
    }
    if quoted {
        text = format!("\"{text}\"");
    }
    if let Some(size) = full_size {
        let _ = write!(text, "({})", format_size(size));
    }
    text
}

/// Printable text for bytes from the server (escaped as in [`command_label`], never quoted).
pub fn printable(bytes: &[u8]) -> String {
    escaped_pieces(bytes).concat()
}

/// The bytes as printable pieces, one per character (so a cut never splits an escape):
/// printable UTF-8 as it is, `"` and `\` escaped, control characters and invalid bytes as
/// escapes.
fn escaped_pieces(bytes: &[u8]) -> Vec<String> {
    let mut pieces = Vec::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            pieces.push(match c {
                '"' => "\\\"".to_string(),
                '\\' => "\\\\".to_string(),
                '\n' => "\\n".to_string(),
                '\r' => "\\r".to_string(),
                '\t' => "\\t".to_string(),
                c if (c as u32) < 0x80 && c.is_control() => format!("\\x{:02x}", c as u32),
                // Controls, and the invisible marks that reorder or hide text in a terminal.
                c if c.is_control() || invisible(c) => format!("\\u{{{:x}}}", c as u32),
                c => c.to_string(),
            });
        }
        for byte in chunk.invalid() {
            pieces.push(format!("\\x{byte:02x}"));
        }
    }
    pieces
}

/// Zero-width and bidirectional formatting characters.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

// ---------------------------------------------------------------------------------------------
// Polling (I/O)

/// Most entries read in one poll. At a poll every 250 ms that is 512 slow commands a second;
/// more are counted as missed, never read in a second page.
pub const POLL_PAGE: usize = 128;

/// The name the poller's connection gives itself (`CLIENT LIST`, and its own entries when the
/// server logs every command).
pub const POLLER_CLIENT_NAME: &str = "holprobe-culprit";

/// Which command the poller reads the slow commands with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandLogSource {
    /// `COMMANDLOG GET n slow` (Valkey 8.1+).
    Commandlog,
    /// `SLOWLOG GET n` (Redis, older Valkey).
    Slowlog,
}

/// What one poll found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerLogPoll {
    /// Entries logged since the last poll, oldest first.
    pub entries: Vec<ServerCommandEntry>,
    /// LATENCY LATEST rows that are new or changed since the last poll.
    pub latency: Vec<LatencyEvent>,
    /// Entries logged since the last poll that were not read: more than [`POLL_PAGE`] at once,
    /// or already dropped from a log shorter than that (`slowlog-max-len`), or reset away by
    /// another client before this poll. Known from the gap in the ids, so not counted before
    /// the first entry the poller ever saw (when the log was empty as it started).
    pub missed_entries: u64,
    /// The server's longest event-loop cycle since the last poll, µs (INFO DEBUG
    /// `eventloop_duration_max`, Redis 7.2+ and Valkey): exact when the poller may reset the
    /// server's statistics after each reading; otherwise known only when it rose above every
    /// earlier cycle. `None`: not known.
    pub eventloop_max_us: Option<u64>,
}

/// Reads, every ~250 ms, the slow commands and latency events the server logged since the last
/// poll, on a connection of its own.
///
/// A poll costs the server little: one `SLOWLOG GET 1` (or `COMMANDLOG GET 1 slow`) to see the
/// newest id, then, only when something is new, one page of exactly the new entries (at most
/// [`POLL_PAGE`]), and one `LATENCY LATEST` (a row per event kind). A source the server refuses
/// (renamed away, denied by ACL, unknown) is dropped with one note and never asked again; the
/// poller then stays quiet instead of failing the run.
pub struct ServerLogPoller {
    conn_info: ConnInfo,
    conn: Option<RawConn>,
    source: Option<CommandLogSource>,
    latency: bool,
    /// The newest entry id seen (`None` until the log held one).
    last_id: Option<i64>,
    /// LATENCY LATEST as of the last poll.
    last_latency: Vec<LatencyEvent>,
    missed_total: u64,
    notes: Vec<String>,
    /// INFO DEBUG has `eventloop_duration_max` (until it is seen not to).
    eventloop: bool,
    /// The poller may reset the server's statistics (CONFIG RESETSTAT) after each reading.
    reset_stats: bool,
    /// `eventloop_duration_max` as last read.
    last_eventloop_max: Option<u64>,
    /// The statistics were reset right after that reading.
    last_reset: bool,
}

impl ServerLogPoller {
    /// Connects, picks the source (COMMANDLOG where the server has it, else SLOWLOG) and reads
    /// where each log stands, so the first [`poll`](Self::poll) returns only what is logged
    /// from now on. Fails only on connection trouble (no connection, authentication refused,
    /// the server hung up or did not answer); error replies give notes instead.
    pub fn connect(conn_info: &ConnInfo) -> Result<ServerLogPoller> {
        let mut conn = open_conn(conn_info)?;
        let mut poller = ServerLogPoller {
            conn_info: conn_info.clone(),
            conn: None,
            source: None,
            latency: true,
            last_id: None,
            last_latency: Vec::new(),
            missed_total: 0,
            notes: Vec::new(),
            eventloop: true,
            reset_stats: false,
            last_eventloop_max: None,
            last_reset: false,
        };
        poller
            .pick_source(&mut conn)
            .context("reading the command log")?;
        if let Some(rows) = poller
            .read_latency(&mut conn)
            .context("reading LATENCY LATEST")?
        {
            poller.last_latency = rows;
        }
        poller.note_settings(&mut conn);
        poller.last_eventloop_max = poller.read_eventloop_max(&mut conn);
        poller.conn = Some(conn);
        Ok(poller)
    }

    /// Lets the poller reset the server's statistics (CONFIG RESETSTAT, which clears every INFO
    /// counter) right after each reading of the event loop's longest cycle, so that each poll
    /// gives the longest cycle since the previous one. Only for a server that is the run's own
    /// (the embedded one), and only when nothing else reads those counters meanwhile.
    pub fn resetting_stats(mut self) -> ServerLogPoller {
        self.reset_stats = true;
        if self.eventloop
            && let Some(conn) = self.conn.as_mut()
            && matches!(
                conn.command(&[b"CONFIG", b"RESETSTAT"]),
                Ok(Reply::Status(_))
            )
        {
            self.last_reset = true;
        }
        self
    }

    /// The entries and latency rows logged since the last poll. An `Err` is a connection
    /// failure (the server went away, a timeout): the connection is dropped and the next poll
    /// connects again, carrying on from the last id seen. Error replies never fail a poll.
    pub fn poll(&mut self) -> Result<ServerLogPoll> {
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => open_conn(&self.conn_info)?,
        };
        let mut poll = ServerLogPoll::default();
        if let Some(source) = self.source {
            let (entries, missed) = self
                .read_new_entries(&mut conn, source)
                .with_context(|| format!("reading the command log of {}", self.conn_info))?;
            poll.entries = entries;
            poll.missed_entries = missed;
            self.missed_total += missed;
        }
        if let Some(rows) = self
            .read_latency(&mut conn)
            .with_context(|| format!("reading LATENCY LATEST of {}", self.conn_info))?
        {
            poll.latency = latency_changes(&self.last_latency, &rows);
            self.last_latency = rows;
        }
        if self.eventloop {
            let now = self.read_eventloop_max(&mut conn);
            let reset = self.reset_stats
                && now.is_some()
                && matches!(
                    conn.command(&[b"CONFIG", b"RESETSTAT"]),
                    Ok(Reply::Status(_))
                );
            // After a reset the reading covers exactly the time since the last one.
            poll.eventloop_max_us =
                eventloop_max_during(self.last_eventloop_max, now, self.last_reset);
            self.last_eventloop_max = now;
            self.last_reset = reset;
        }
        self.conn = Some(conn);
        Ok(poll)
    }

    /// INFO DEBUG `eventloop_duration_max`, µs ([`read_eventloop_max`]); a server that does
    /// not report it is not asked again.
    fn read_eventloop_max(&mut self, conn: &mut RawConn) -> Option<u64> {
        let (value, reported) = read_eventloop_max(conn);
        self.eventloop &= reported;
        value
    }

    /// The source in use, `None` when the server refused both.
    pub fn source(&self) -> Option<CommandLogSource> {
        self.source
    }

    /// Whether LATENCY LATEST is still read.
    pub fn reads_latency(&self) -> bool {
        self.latency
    }

    /// Entries missed over all polls (see [`ServerLogPoll::missed_entries`]).
    pub fn missed_entries(&self) -> u64 {
        self.missed_total
    }

    /// Notes for the user gathered since the last call: a source dropped, a log switched off, a
    /// server that restarted. Each is said once.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// `COMMANDLOG GET 1 slow`, else `SLOWLOG GET 1`; the first that answers with a list is the
    /// source, and its newest entry is where polling starts.
    fn pick_source(&mut self, conn: &mut RawConn) -> std::io::Result<()> {
        let mut refusals = Vec::new();
        for source in [CommandLogSource::Commandlog, CommandLogSource::Slowlog] {
            match send(conn, &page_command(source, 1))? {
                reply @ Reply::Array(Some(_)) => {
                    self.source = Some(source);
                    self.last_id = parse_log_entries(&reply).iter().map(|e| e.id).max();
                    return Ok(());
                }
                // A Redis has no COMMANDLOG: that needs no mention.
                other => {
                    let text = reply_text(&other);
                    if !(source == CommandLogSource::Commandlog && text.contains("unknown command"))
                    {
                        refusals.push(format!("{}: {text}", source_name(source)));
                    }
                }
            }
        }
        self.notes.push(format!(
            "server log: the server refuses SLOWLOG and COMMANDLOG ({}): stalls cannot be named by command",
            refusals.join("; ")
        ));
        Ok(())
    }

    /// Notes for logs switched off by their settings (read where CONFIG answers; silent where
    /// it does not).
    fn note_settings(&mut self, conn: &mut RawConn) {
        if self.source.is_some()
            && let Some(value) = config_int(conn, "slowlog-log-slower-than")
            && value < 0
        {
            self.notes.push(format!(
                "server log: slowlog-log-slower-than is {value} on this server (the log is off): stalls cannot be named by command"
            ));
        }
        if self.latency
            && let Some(0) = config_int(conn, "latency-monitor-threshold")
        {
            self.notes.push(
                "server log: latency-monitor-threshold is 0 on this server (the monitor is off): no LATENCY events to name stalls with".into(),
            );
        }
    }

    fn read_new_entries(
        &mut self,
        conn: &mut RawConn,
        source: CommandLogSource,
    ) -> std::io::Result<(Vec<ServerCommandEntry>, u64)> {
        let Some(newest) = self.read_page(conn, source, 1)? else {
            return Ok((Vec::new(), 0));
        };
        let Some(newest_id) = newest.iter().map(|e| e.id).max() else {
            return Ok((Vec::new(), 0)); // empty log (never written, or reset)
        };
        let wanted = match self.last_id {
            Some(last) if newest_id == last => return Ok((Vec::new(), 0)),
            Some(last) if newest_id > last => {
                usize::try_from(newest_id - last).unwrap_or(POLL_PAGE)
            }
            _ => POLL_PAGE, // first entries ever seen, or ids went back (restart)
        }
        .min(POLL_PAGE);
        let mut page = if wanted > 1 {
            self.read_page(conn, source, wanted)?.unwrap_or_default()
        } else {
            Vec::new()
        };
        // The newest entry was read already; a RESET between the two reads must not lose it.
        page.extend(newest);
        let selected = select_new(self.last_id, page);
        if selected.restarted {
            self.notes.push(format!(
                "server log: entry ids went back from {} to {newest_id}: the server restarted; reading its log from the start",
                self.last_id.unwrap_or_default()
            ));
        }
        if let Some(id) = selected.newest_id {
            self.last_id = Some(id);
        }
        Ok((selected.entries, selected.missed))
    }

    /// One page of the log, newest first; `None` (after a note) when the server refused it.
    fn read_page(
        &mut self,
        conn: &mut RawConn,
        source: CommandLogSource,
        count: usize,
    ) -> std::io::Result<Option<Vec<LogEntry>>> {
        match send(conn, &page_command(source, count))? {
            reply @ Reply::Array(_) => Ok(Some(parse_log_entries(&reply))),
            other => {
                self.notes.push(format!(
                    "server log: {} stopped answering ({}): not asked again, stalls are no longer named by command",
                    source_name(source),
                    reply_text(&other)
                ));
                self.source = None;
                Ok(None)
            }
        }
    }

    /// LATENCY LATEST; `None` (after one note) when the server refuses it.
    fn read_latency(&mut self, conn: &mut RawConn) -> std::io::Result<Option<Vec<LatencyEvent>>> {
        if !self.latency {
            return Ok(None);
        }
        match conn.command(&[b"LATENCY", b"LATEST"])? {
            reply @ Reply::Array(_) => Ok(Some(parse_latency_latest(&reply))),
            other => {
                self.notes.push(format!(
                    "server log: the server refuses LATENCY LATEST ({}): stalls are not named by latency event",
                    reply_text(&other)
                ));
                self.latency = false;
                Ok(None)
            }
        }
    }
}

/// The poller's own connection, named for `CLIENT LIST` (a server without CLIENT is fine).
fn open_conn(conn_info: &ConnInfo) -> Result<RawConn> {
    let mut conn = RawConn::connect(conn_info)
        .with_context(|| format!("connecting the server-log poller to {conn_info}"))?;
    let _ = conn.command(&[b"CLIENT", b"SETNAME", POLLER_CLIENT_NAME.as_bytes()]);
    Ok(conn)
}

fn source_name(source: CommandLogSource) -> &'static str {
    match source {
        CommandLogSource::Commandlog => "COMMANDLOG",
        CommandLogSource::Slowlog => "SLOWLOG",
    }
}

fn page_command(source: CommandLogSource, count: usize) -> Vec<Vec<u8>> {
    let count = count.to_string().into_bytes();
    match source {
        CommandLogSource::Commandlog => {
            vec![
                b"COMMANDLOG".to_vec(),
                b"GET".to_vec(),
                count,
                b"slow".to_vec(),
            ]
        }
        CommandLogSource::Slowlog => vec![b"SLOWLOG".to_vec(), b"GET".to_vec(), count],
    }
}

fn send(conn: &mut RawConn, args: &[Vec<u8>]) -> std::io::Result<Reply> {
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    conn.command(&args)
}

/// What a reply that is not the expected list says, for a note.
fn reply_text(reply: &Reply) -> String {
    match reply {
        Reply::Error(text) => text.clone(),
        other => format!("unexpected reply {other:?}"),
    }
}

fn config_int(conn: &mut RawConn, name: &str) -> Option<i64> {
    match conn.command(&[b"CONFIG", b"GET", name.as_bytes()]).ok()? {
        Reply::Array(Some(pairs)) => match pairs.get(1)? {
            Reply::Bulk(Some(value)) => std::str::from_utf8(value).ok()?.trim().parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// The entries of a page that are new after `last_id`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Selected {
    /// New entries, oldest first.
    entries: Vec<ServerCommandEntry>,
    /// Ids between `last_id` and the oldest new entry that were not in the page.
    missed: u64,
    /// The page's newest id (where the next poll starts).
    newest_id: Option<i64>,
    /// The ids went back: the server restarted, every entry of the page is new.
    restarted: bool,
}

/// Picks the new entries of a page (any order, duplicates allowed). Ids grow by one per entry,
/// so a gap between the last id seen and the oldest new one is the count of entries missed.
/// With no id seen yet everything is new and nothing is known to be missed; a page whose newest
/// id is below the last one seen comes from a restarted server and is new as a whole.
fn select_new(last_id: Option<i64>, page: Vec<LogEntry>) -> Selected {
    let newest_id = page.iter().map(|e| e.id).max();
    let restarted = matches!((last_id, newest_id), (Some(last), Some(newest)) if newest < last);
    let floor = if restarted { None } else { last_id };
    let mut entries: Vec<ServerCommandEntry> = page
        .into_iter()
        .filter(|e| floor.is_none_or(|last| e.id > last))
        .map(ServerCommandEntry::from)
        .collect();
    entries.sort_by_key(|e| e.id);
    entries.dedup_by_key(|e| e.id);
    let missed = match (floor, entries.first()) {
        (Some(last), Some(oldest)) => u64::try_from(oldest.id - last - 1).unwrap_or(0),
        _ => 0,
    };
    Selected {
        entries,
        missed,
        newest_id,
        restarted,
    }
}

/// Rows of `after` that are new or changed since `before` (a row changes when its latest
/// second or figure does).
pub fn latency_changes(before: &[LatencyEvent], after: &[LatencyEvent]) -> Vec<LatencyEvent> {
    after
        .iter()
        .filter(|row| {
            !before.iter().any(|b| {
                b.name == row.name && b.at_unix_s == row.at_unix_s && b.latest_ms == row.latest_ms
            })
        })
        .cloned()
        .collect()
}

/// How often the poller thread reads the server's logs.
pub const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// One poll as the poller thread sends it to the collector.
#[derive(Debug, Clone)]
pub struct ServerLogBatch {
    /// Wall-clock time the poll began, µs since the Unix epoch: every command that finished
    /// before it (so every stall that ended before it) is in this poll or an earlier one.
    pub polled_unix_us: i64,
    /// What it found.
    pub poll: ServerLogPoll,
    /// Notes the poller raised (a source refused, entries missed, a reconnect).
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Second 1_700_000_000 on the wall clock, µs.
    const T0_US: i64 = 1_700_000_000_000_000;

    fn span(start_ms: i64, end_ms: i64) -> WallSpan {
        WallSpan {
            start_unix_us: T0_US + start_ms * 1_000,
            end_unix_us: T0_US + end_ms * 1_000,
        }
    }

    fn entry(id: i64, logged_s: i64, duration_us: i64, args: &[&str]) -> ServerCommandEntry {
        ServerCommandEntry {
            id,
            logged_unix_s: 1_700_000_000 + logged_s,
            duration_us,
            args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            client_addr: Some(format!("10.0.0.5:{}", 51_000 + id)),
            client_name: None,
        }
    }

    fn event(name: &str, at_s: i64, latest_ms: i64) -> LatencyEvent {
        LatencyEvent {
            name: name.into(),
            at_unix_s: 1_700_000_000 + at_s,
            latest_ms,
            max_ms: latest_ms,
        }
    }

    #[test]
    fn the_command_that_ran_during_the_stall_is_named_with_its_client() {
        let mut sleep = entry(7, 0, 50_400, &["debug", "SLEEP", "0.05"]);
        sleep.client_name = Some("app-worker".into());
        let entries = [entry(6, 0, 1_200, &["GET", "a"]), sleep];
        // The stall: 300..352 ms into the second in which the DEBUG SLEEP was logged.
        let culprit = name_stall(span(300, 352), &entries, &[event("command", 0, 50)]);
        assert_eq!(
            culprit,
            Culprit {
                server_command: Some("DEBUG SLEEP 0.05".into()),
                server_client: Some("10.0.0.5:51007 app-worker".into()),
                server_event: Some("command 50ms".into()),
            }
        );
    }

    #[test]
    fn a_command_logged_just_after_a_second_boundary_still_matches() {
        // Ran 980..1030 ms: logged in second 1, the stall starts in second 0.
        let entries = [entry(1, 1, 50_000, &["DEL", "big:key"])];
        let culprit = name_stall(span(980, 1_031), &entries, &[]);
        assert_eq!(culprit.server_command.as_deref(), Some("DEL big:key"));
        assert_eq!(culprit.server_event, None);
    }

    #[test]
    fn no_candidate_names_nothing() {
        let culprit = name_stall(span(100, 150), &[], &[]);
        assert_eq!(culprit, Culprit::default());
        // Overlapping, but far too short to explain 50 ms of silence (a big SET's logged µs).
        let entries = [entry(1, 0, 14, &["SET", "holprobe:k", "v"])];
        assert_eq!(
            name_stall(span(100, 150), &entries, &[]),
            Culprit::default()
        );
        // Overlapping, but a 400 ms command would have made a 400 ms stall, not 50 ms.
        let entries = [entry(1, 0, 400_000, &["KEYS", "*"])];
        let culprit = name_stall(span(100, 150), &entries, &[event("command", 0, 400)]);
        assert_eq!(culprit, Culprit::default());
    }

    #[test]
    fn of_two_candidates_in_one_second_the_duration_nearest_the_stall_wins() {
        let entries = [
            entry(1, 0, 30_000, &["HGETALL", "h"]),
            entry(2, 0, 51_000, &["DEBUG", "SLEEP", "0.05"]),
            entry(3, 0, 62_000, &["SMEMBERS", "s"]),
        ];
        let culprit = name_stall(span(500, 553), &entries, &[]);
        assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.05"));
        assert_eq!(culprit.server_client.as_deref(), Some("10.0.0.5:51002"));
        // Two with the same duration cannot be told apart: the tie goes to the earlier id.
        let entries = [
            entry(9, 0, 50_000, &["DEBUG", "SLEEP", "0.05"]),
            entry(8, 0, 50_000, &["DEBUG", "SLEEP", "0.050"]),
        ];
        let culprit = name_stall(span(500, 551), &entries, &[]);
        assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.050"));
    }

    #[test]
    fn a_longer_neighbour_in_the_same_second_is_not_named() {
        // A 50 ms sleep and, in the same second, a 29 ms stall the log has no entry for (the
        // monitor kept only the second's worst figure): neither the sleep nor its event.
        let entries = [entry(1, 0, 50_100, &["DEBUG", "SLEEP", "0.05"])];
        let events = [event("command", 0, 50)];
        assert_eq!(
            name_stall(span(600, 629), &entries, &events),
            Culprit::default()
        );
        // Within a quarter and 2 ms of the stall it is still the cause.
        let culprit = name_stall(span(600, 641), &entries, &events);
        assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.05"));
        assert_eq!(culprit.server_event.as_deref(), Some("command 50ms"));
    }

    #[test]
    fn an_entry_far_outside_the_stall_is_not_a_candidate() {
        let entries = [
            entry(1, -5, 50_000, &["DEBUG", "SLEEP", "0.05"]),
            entry(2, 3, 50_000, &["DEBUG", "SLEEP", "0.05"]),
        ];
        let events = [event("command", -5, 50), event("command", 3, 50)];
        assert_eq!(
            name_stall(span(400, 451), &entries, &events),
            Culprit::default()
        );
        // A second before the stall: over before it began (it ended within second -1).
        let entries = [entry(1, -1, 50_000, &["DEBUG", "SLEEP", "0.05"])];
        assert_eq!(name_stall(span(10, 61), &entries, &[]), Culprit::default());
        // A long command logged in the next second may have begun inside this one.
        let entries = [entry(1, 1, 900_000, &["DEBUG", "SLEEP", "0.9"])];
        let culprit = name_stall(span(200, 1_101), &entries, &[]);
        assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.9"));
    }

    #[test]
    fn events_in_the_stall_seconds_are_listed_largest_first() {
        let events = [
            event("expire-cycle", 0, 12),
            event("command", 0, 51),
            event("fork", 2, 30),          // another second
            event("fast-command", 0, 900), // longer than the stall could hide
        ];
        let culprit = name_stall(span(100, 160), &[], &events);
        assert_eq!(
            culprit.server_event.as_deref(),
            Some("command 51ms, expire-cycle 12ms")
        );
        assert_eq!(culprit.server_command, None);
    }

    #[test]
    fn long_and_binary_arguments_are_cut_and_escaped() {
        // What SLOWLOG logs for a 64 MiB SET: 128 bytes of the value and the rest counted.
        let mut value = vec![0u8, 0xff, b'\n'];
        value.extend_from_slice(&[b'x'; 125]);
        value.extend_from_slice(b"... (67108736 more bytes)");
        let args = vec![b"set".to_vec(), b"holprobe:ab:w1:64M:1".to_vec(), value];
        let label = command_label(&args);
        assert_eq!(label, "SET holprobe:ab:w1:64M:1 \\x00\\xff\\nxx...(64M)");
        // A long script: quoted, cut, and the label stays short.
        let script = format!("local t = redis.call('TIME') {}", "x".repeat(5_000));
        let label = command_label(&[b"EVAL".to_vec(), script.into_bytes(), b"0".to_vec()]);
        assert_eq!(label, "EVAL \"local t = redis.cal...\" 0");
        // Many arguments: the first few, then a mark.
        let args: Vec<Vec<u8>> = std::iter::once(b"mset".to_vec())
            .chain((0..40).map(|i| format!("key:{i}").into_bytes()))
            .collect();
        let label = command_label(&args);
        assert!(label.starts_with("MSET key:0 key:1 "), "{label}");
        assert!(label.ends_with(" ..."), "{label}");
        assert!(label.chars().count() <= LABEL_CHARS + 4, "{label}");
        // A huge argument never gets through whole, and nothing unprintable does.
        let mut junk = vec![0x80u8; 10_000];
        junk.extend_from_slice("ключ \u{7}".as_bytes());
        for label in [
            command_label(&[b"GET".to_vec(), junk.clone()]),
            command_label(&[junk.clone()]),
        ] {
            assert!(label.chars().count() <= LABEL_CHARS + 8, "{label}");
            assert!(!label.chars().any(char::is_control), "{label:?}");
        }
        assert_eq!(printable("ключ \u{7}\"".as_bytes()), "ключ \\x07\\\"");
        assert_eq!(command_label(&[b"SET".to_vec(), Vec::new()]), "SET \"\"");
        // Words that only look like the server's mark (not after 128 bytes) stay as they are.
        let arg = b"x... (5 more bytes)".to_vec();
        assert_eq!(
            command_label(&[b"ECHO".to_vec(), arg]),
            "ECHO \"x... (5 more bytes)\""
        );
        assert_eq!(command_label(&[]), "");
    }

    #[test]
    fn clients_are_labelled_by_what_the_server_said() {
        let mut e = entry(1, 0, 1, &["PING"]);
        assert_eq!(client_label(&e).as_deref(), Some("10.0.0.5:51001"));
        e.client_name = Some("app-worker".into());
        assert_eq!(
            client_label(&e).as_deref(),
            Some("10.0.0.5:51001 app-worker")
        );
        e.client_addr = None;
        assert_eq!(client_label(&e).as_deref(), Some("app-worker"));
        e.client_name = None;
        assert_eq!(client_label(&e), None);
    }

    fn log_entry(id: i64) -> LogEntry {
        LogEntry {
            id,
            timestamp: 1_700_000_000,
            value: 10,
            args: vec![b"PING".to_vec()],
            client_addr: None,
            client_name: None,
        }
    }

    fn ids(selected: &Selected) -> Vec<i64> {
        selected.entries.iter().map(|e| e.id).collect()
    }

    #[test]
    fn new_entries_are_those_after_the_last_id_and_gaps_are_missed() {
        // Newest first, as the server sends them, with the newest read twice.
        let page = vec![log_entry(12), log_entry(11), log_entry(10), log_entry(12)];
        let selected = select_new(Some(10), page);
        assert_eq!(ids(&selected), vec![11, 12]);
        assert_eq!((selected.missed, selected.newest_id), (0, Some(12)));
        // Entries 11..=14 were trimmed by a short slowlog-max-len (or a page cap) before the poll.
        let selected = select_new(Some(10), vec![log_entry(16), log_entry(15)]);
        assert_eq!((ids(&selected), selected.missed), (vec![15, 16], 4));
        // Someone ran SLOWLOG RESET: the old entries are gone, the ids go on.
        let selected = select_new(Some(10), vec![log_entry(11)]);
        assert_eq!((ids(&selected), selected.missed), (vec![11], 0));
        // First entries ever seen: all new, nothing known to be missed.
        let selected = select_new(None, vec![log_entry(3), log_entry(2)]);
        assert_eq!(
            (ids(&selected), selected.missed, selected.restarted),
            (vec![2, 3], 0, false)
        );
        // The ids went back: a restarted server, its whole page is new.
        let selected = select_new(Some(500), vec![log_entry(1), log_entry(0)]);
        assert_eq!((ids(&selected), selected.restarted), (vec![0, 1], true));
        assert_eq!(selected.newest_id, Some(1));
    }

    #[test]
    fn latency_rows_count_when_new_or_changed() {
        let before = [event("command", 0, 51)];
        let after = [
            event("command", 0, 51),
            event("expire-cycle", 1, 12),
            event("fork", 0, 3),
        ];
        assert_eq!(latency_changes(&before, &after).len(), 2);
        let after = [event("command", 2, 51)];
        assert_eq!(
            latency_changes(&before, &after),
            vec![event("command", 2, 51)]
        );
        assert!(latency_changes(&before, &before).is_empty());
    }

    #[test]
    fn passwords_in_logged_commands_are_never_shown() {
        let args = |words: &[&str]| -> Vec<Vec<u8>> {
            words.iter().map(|w| w.as_bytes().to_vec()).collect()
        };
        for (words, label) in [
            (&["auth", "s3cret"][..], "AUTH (arguments hidden)"),
            (
                &["HELLO", "3", "AUTH", "u", "s3cret"],
                "HELLO (arguments hidden)",
            ),
            (
                &["MIGRATE", "h", "1", "k", "0", "9", "AUTH", "s3cret"],
                "MIGRATE (arguments hidden)",
            ),
            (
                &["ACL", "SETUSER", "u", ">s3cret"],
                "ACL SETUSER (arguments hidden)",
            ),
            (
                &["CONFIG", "SET", "requirepass", "s3cret"],
                "CONFIG SET (arguments hidden)",
            ),
            (
                &["CONFIG", "SET", "masterauth", "s3cret"],
                "CONFIG SET (arguments hidden)",
            ),
        ] {
            let shown = command_label(&args(words));
            assert_eq!(shown, label);
            assert!(!shown.contains("s3cret"));
        }
        assert_eq!(
            command_label(&args(&["CONFIG", "SET", "maxmemory", "1gb"])),
            "CONFIG SET maxmemory 1gb"
        );
    }
}
