//! The server-log poller: reads, on a connection of its own, what the server logged that can
//! name a stall (SLOWLOG or Valkey 8.1+'s COMMANDLOG `slow`, LATENCY LATEST, INFO DEBUG's
//! longest event-loop cycle), and hands it on. Sockets, no judgement: matching a stall against
//! what was read is pure and lives in [`crate::analyze::naming`] (the rule, its limits and what
//! the server's timestamps mean are in its module comment), re-exported here for the code that
//! names stalls by these paths.

use anyhow::{Context, Result};
use serde::Serialize;

pub use crate::analyze::naming::{
    Culprit, LoopWindow, RemovedKey, ServerCommandEntry, TOOL_CLIENT_NAME_PREFIX, WallSpan,
    client_label, command_label, eventloop_label, foreign_entry, key_label, label_of,
    latency_changes, name_stall, printable, removed_during, run_client_name,
};
use crate::measure::clock::RunClock;
use crate::measure::keyspace::KeyEvents;
use crate::measure::resp::{RawConn, Reply};
use crate::measure::serverview::{
    LatencyEvent, LogEntry, eventloop_max_during, parse_latency_latest, parse_log_entries,
    read_eventloop_max,
};
use crate::measure::target::ConnInfo;

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

/// Most entries read in one poll. At a poll every 250 ms that is 512 slow commands a second;
/// more are counted as missed, never read in a second page.
pub const POLL_PAGE: usize = 128;

/// A server that logs every command has its log read back only after a command the LATENCY
/// monitor timed at this many ms or more (a stall worth naming; the probes' own entries fill
/// the log between).
pub const TARGETED_FROM_MS: i64 = 10;

/// Most entries read back after such a command: the entries of one poll's interval at up to
/// 16,000 commands a second. `SLOWLOG GET 4096` of PING entries took the server 1.4 ms here
/// (2,000: 0.7 ms; 500, a poll at the default probe rate: 0.2 ms), once per slow command.
pub const TARGETED_PAGE: usize = 4096;

/// Entries logged between reading the newest id and reading the page.
const TARGETED_MARGIN: usize = 64;

/// The name the poller's connection gives itself (`CLIENT LIST`, and its own entries when the
/// server logs every command).
pub const POLLER_CLIENT_NAME: &str = "holprobe-culprit";

/// The name the writer's connections give themselves, so that a stall named by one of its
/// commands that names no key of the run (the CONFIG SET of an eviction) is known as the run's.
pub const WRITER_CLIENT_NAME: &str = "holprobe-writer";

/// The name of `probe calibrate`'s connections (its injections are its "writes").
pub const CALIBRATE_CLIENT_NAME: &str = "holprobe-calibrate";

/// The name of `probe keys`' scanning connections (its SCAN batches are its "writes").
pub const KEYS_CLIENT_NAME: &str = "holprobe-keys";

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
    /// Keys the server expired or evicted since the last poll (keyspace notifications), in the
    /// order heard.
    pub removed_keys: Vec<RemovedKey>,
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
    /// The name its connections give themselves ([`POLLER_CLIENT_NAME`], or a run's
    /// [`Self::named`]).
    name: String,
    conn: Option<RawConn>,
    /// When the last poll failed: no new connection before `--timeout` has passed since (a
    /// frozen server accepts the connection and answers nothing: each attempt waited the
    /// whole limit again, the last one after the run had ended).
    failed_at: Option<std::time::Instant>,
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
    /// Keyspace notifications of expired and evicted keys, where the server sends them.
    key_events: Option<KeyEvents>,
    /// The server logs every command: the log is read back only after a slow command
    /// ([`Self::connect_to_a_log_of_every_command`]).
    only_after_slow_commands: bool,
}

impl ServerLogPoller {
    /// Connects, picks the source (COMMANDLOG where the server has it, else SLOWLOG) and reads
    /// where each log stands, so the first [`poll`](Self::poll) returns only what is logged
    /// from now on. Fails only on connection trouble (no connection, authentication refused,
    /// the server hung up or did not answer); error replies give notes instead.
    pub fn connect(conn_info: &ConnInfo) -> Result<ServerLogPoller> {
        Self::connect_reading(conn_info)
    }

    /// As [`connect`](Self::connect), for a run whose server logs every command
    /// (`slowlog-log-slower-than 0`, which the writer's view of each write needs), where the
    /// probes alone would fill every page: each poll reads only the newest entry's id, and reads
    /// the entries back to the last poll (at most [`TARGETED_PAGE`]) only when the LATENCY
    /// monitor timed a command of [`TARGETED_FROM_MS`] or more since; of those it keeps the
    /// entries of a millisecond or more. LATENCY events, the event loop's longest cycles and
    /// removed keys name the rest (another key's expiry).
    pub fn connect_to_a_log_of_every_command(conn_info: &ConnInfo) -> Result<ServerLogPoller> {
        let mut poller = Self::connect_reading(conn_info)?;
        poller.only_after_slow_commands = true;
        Ok(poller)
    }

    /// Names its connection `name` (a run's: [`run_client_name`]), now and after a reconnect,
    /// so that another run on the same server takes its SLOWLOG pages and CONFIG RESETSTAT for
    /// another client's (the bare name is taken for any run's own).
    pub fn named(mut self, name: &str) -> ServerLogPoller {
        if let Some(conn) = self.conn.as_mut() {
            let _ = conn.command(&[b"CLIENT", b"SETNAME", name.as_bytes()]);
        }
        self.name = name.to_string();
        self
    }

    fn connect_reading(conn_info: &ConnInfo) -> Result<ServerLogPoller> {
        let mut conn = open_conn(conn_info, POLLER_CLIENT_NAME)?;
        let mut poller = ServerLogPoller {
            conn_info: conn_info.clone(),
            name: POLLER_CLIENT_NAME.to_string(),
            conn: None,
            failed_at: None,
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
            key_events: None,
            only_after_slow_commands: false,
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

    /// Also listens for the keys the server expires or evicts on its own (keyspace
    /// notifications, [`crate::measure::keyspace`]), so that a stall no client caused is named
    /// by its key. Only where `notify-keyspace-events` already sends them (the run turns them
    /// on where it may tune the server, and says so where it may not).
    pub fn hearing_removed_keys(mut self, clock: RunClock) -> ServerLogPoller {
        let Some(conn) = self.conn.as_mut() else {
            return self;
        };
        match KeyEvents::start_if_on(conn, &self.conn_info, clock) {
            Ok(events) => self.key_events = events,
            Err(err) => self.notes.push(format!(
                "server log: cannot hear expired or evicted keys ({}): stalls are not named by key",
                crate::error::one_line(&err)
            )),
        }
        self
    }

    /// The entries and latency rows logged since the last poll. An `Err` is a connection
    /// failure (the server went away, a timeout): the connection is dropped and the next poll
    /// connects again, carrying on from the last id seen. Error replies never fail a poll.
    pub fn poll(&mut self) -> Result<ServerLogPoll> {
        let result = self.poll_once();
        match &result {
            Ok(_) => self.failed_at = None,
            Err(_) => {
                self.failed_at.get_or_insert_with(std::time::Instant::now);
            }
        }
        result
    }

    fn poll_once(&mut self) -> Result<ServerLogPoll> {
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let limit = self.conn_info.command_timeout;
                if let Some(failed) = self.failed_at
                    && failed.elapsed() < limit
                {
                    anyhow::bail!(
                        "not reconnected to {}: it failed {:.1} s ago (again after --timeout {})",
                        self.conn_info,
                        failed.elapsed().as_secs_f64(),
                        crate::measure::target::format_limit(limit)
                    );
                }
                let opened = open_conn(&self.conn_info, &self.name);
                self.failed_at = None;
                opened?
            }
        };
        let mut poll = ServerLogPoll::default();
        // A log of every command: where it stands now, read before LATENCY LATEST so that a
        // slow command the latency read shows is at or before this id.
        let targeted = match self.source {
            Some(source) if self.only_after_slow_commands => {
                let newest = self
                    .read_page(&mut conn, source, 1)
                    .with_context(|| format!("reading the command log of {}", self.conn_info))?;
                Some((source, newest))
            }
            _ => None,
        };
        if targeted.is_none()
            && let Some(source) = self.source
        {
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
        if let Some((source, newest)) = targeted {
            let slow = poll
                .latency
                .iter()
                .any(|e| e.name == "command" && e.latest_ms >= TARGETED_FROM_MS);
            match newest {
                Some(newest) if slow => {
                    let (entries, missed) = self
                        .entries_after_last(
                            &mut conn,
                            source,
                            newest,
                            TARGETED_PAGE,
                            TARGETED_MARGIN,
                        )
                        .with_context(|| {
                            format!("reading the command log of {}", self.conn_info)
                        })?;
                    // Of a log of every command, the slow ones only.
                    poll.entries = entries
                        .into_iter()
                        .filter(|e| e.duration_us >= 1000)
                        .collect();
                    poll.missed_entries = missed;
                    self.missed_total += missed;
                }
                // Nothing slow since the last poll: its entries (the probes') are passed over,
                // not missed.
                Some(newest) => {
                    if let Some(id) = newest.iter().map(|e| e.id).max() {
                        self.last_id = Some(id);
                    }
                }
                None => {}
            }
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
        // Last, so that every key heard up to this poll's readings is in it (and a failed
        // poll leaves them for the next one).
        if let Some(events) = &self.key_events {
            poll.removed_keys = events.events().try_iter().map(RemovedKey::from).collect();
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
        self.entries_after_last(conn, source, newest, POLL_PAGE, 0)
    }

    /// The entries after the last id seen up to `newest` (the page of one just read), read in
    /// one page of at most `most` (with `margin` more for the entries logged since `newest`
    /// was read); the ids past the page's reach are missed.
    fn entries_after_last(
        &mut self,
        conn: &mut RawConn,
        source: CommandLogSource,
        newest: Vec<LogEntry>,
        most: usize,
        margin: usize,
    ) -> std::io::Result<(Vec<ServerCommandEntry>, u64)> {
        let Some(newest_id) = newest.iter().map(|e| e.id).max() else {
            return Ok((Vec::new(), 0)); // empty log (never written, or reset)
        };
        let wanted = match self.last_id {
            Some(last) if newest_id == last => return Ok((Vec::new(), 0)),
            Some(last) if newest_id > last => usize::try_from(newest_id - last)
                .unwrap_or(most)
                .saturating_add(margin),
            _ => most, // first entries ever seen, or ids went back (restart)
        }
        .min(most);
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
fn open_conn(conn_info: &ConnInfo, name: &str) -> Result<RawConn> {
    RawConn::connect_named(conn_info, name)
        .with_context(|| format!("connecting the server-log poller to {conn_info}"))
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
}
