//! The server's own view of each write, next to what the probes saw: its SLOWLOG execution time,
//! the LATENCY monitor's events, the event loop's longest cycle (INFO DEBUG
//! `eventloop_duration_max`, Redis 7.2+ and Valkey) and Valkey's COMMANDLOG `large-request`
//! entry. A big SET executes in microseconds (the server adopts the received buffer), so SLOWLOG
//! misses what the probes saw: showing that side by side is the point.
//!
//! # Where it is gathered
//! In the writer's thread (and the calibration injector's), on its own connection, right before
//! and right after each write, inside the quiet gaps. The probe threads have their own
//! connections and never wait on this; the few small commands (a SLOWLOG page, INFO, LATENCY
//! LATEST) cost the server tens of µs outside every write window, where they belong to the
//! baseline like any other client's traffic; the SLOWLOG page after a long freeze at a high
//! probe rate holds thousands of probes' entries and costs more (ms), so it is as long as the
//! entries logged since the write and no longer. The collector thread stays a pure consumer of the
//! event channel, and the figures arrive inside the write's own record, so nothing has to be
//! matched up afterwards.
//!
//! # Settings
//! [`ServerTuning`] changes `slowlog-log-slower-than`, `slowlog-max-len` and
//! `latency-monitor-threshold` as a run needs them, and restores the old values when dropped, so
//! every exit path (an error, a lost connection, Ctrl-C, a panic) puts them back. On the
//! embedded server this always happens; on someone else's server only with `--tune-server`.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::measure::resp::{RawConn, Reply};
use crate::measure::target::{ConnInfo, info_field};

/// What a run wants of a numeric server setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// A "log when slower than" threshold (negative = off): at most this.
    LogAtMost(i64),
    /// A monitor threshold where 0 means off: on, and at most this.
    OnAndAtMost(i64),
    /// A capacity: at least this.
    AtLeast(i64),
    /// A flags setting (`notify-keyspace-events`): holding every one of these letters, the
    /// others it has kept.
    HasFlags(&'static str),
}

impl Want {
    /// The value to set when `current` does not satisfy the want, `None` when it does.
    pub fn change(self, current: i64) -> Option<i64> {
        match self {
            Want::LogAtMost(limit) => (current < 0 || current > limit).then_some(limit),
            Want::OnAndAtMost(limit) => (current <= 0 || current > limit).then_some(limit),
            Want::AtLeast(floor) => (current < floor).then_some(floor),
            Want::HasFlags(_) => None,
        }
    }

    /// The value to set when the setting's text `current` does not satisfy the want, `None`
    /// when it does or when a numeric setting does not read as a number.
    pub fn change_text(self, current: &str) -> Option<String> {
        match self {
            Want::HasFlags(flags) => {
                let missing = crate::measure::keyspace::missing_flags(current, flags);
                (!missing.is_empty()).then(|| format!("{current}{missing}"))
            }
            numeric => numeric
                .change(current.trim().parse::<i64>().ok()?)
                .map(|v| v.to_string()),
        }
    }
}

/// The settings that name what no client sent: keyspace notifications of expired and evicted
/// keys ([`crate::measure::keyspace`]).
pub fn settings_for_key_events() -> Vec<(&'static str, Want)> {
    vec![(
        "notify-keyspace-events",
        Want::HasFlags(crate::measure::keyspace::KEYEVENT_FLAGS),
    )]
}

/// Whether a run could have changed the setting `name` from `old` to `new`: `new` is what one
/// of the run's wants ([`settings_for_writes`], [`settings_for_calibration`],
/// [`settings_for_observing`], whose thresholds follow `--stall-threshold`) sets where it reads
/// `old`. A run's marker names such changes, and a dead run's are undone by setting `old` back,
/// so a marker someone planted must not pass with any other pair: `slowlog-max-len` put "back"
/// to a trillion with `slowlog-log-slower-than` at 0 would log every command without end.
pub fn could_have_changed(name: &str, old: &str, new: &str) -> bool {
    let mut wants: Vec<Want> = settings_for_writes()
        .into_iter()
        .chain(settings_for_calibration())
        .chain(settings_for_observing(1000))
        .filter(|&(n, _)| n == name)
        .map(|(_, want)| want)
        .collect();
    // A threshold's limit is the user's (--stall-threshold): any the run could set.
    if let Ok(limit) = new.parse::<i64>() {
        wants.push(Want::LogAtMost(limit));
        wants.push(Want::OnAndAtMost(limit));
        wants.retain(|want| match want {
            Want::LogAtMost(l) => name == "slowlog-log-slower-than" && *l >= 0,
            Want::OnAndAtMost(l) => name == "latency-monitor-threshold" && *l >= 1,
            _ => true,
        });
    }
    wants
        .iter()
        .any(|want| want.change_text(old).as_deref() == Some(new))
}

/// The most SLOWLOG entries read after one write ([`ServerView::after`]), and the log's length
/// the main job asks for: the probes queued behind a 4 s freeze at the default 2 × 1000/s are
/// 8,000 entries logged after the write's own (a 4M-field hash's DEL lost its entry from a log of
/// 1,024). About 3 MiB of the server's memory once full.
pub const MAX_SLOWLOG_PAGE: usize = 16_384;

/// The settings the main job needs: every command in SLOWLOG (a large SET executes in a few µs),
/// a log long enough to still hold the write's entry after the probes' own, the latency
/// monitor at its finest (1 ms), and keyspace notifications of expired and evicted keys.
pub fn settings_for_writes() -> Vec<(&'static str, Want)> {
    let mut wants = vec![
        ("slowlog-log-slower-than", Want::LogAtMost(0)),
        ("slowlog-max-len", Want::AtLeast(MAX_SLOWLOG_PAGE as i64)),
        ("latency-monitor-threshold", Want::OnAndAtMost(1)),
    ];
    wants.extend(settings_for_key_events());
    wants
}

/// The settings calibration needs: injected stalls (5 ms and up) in SLOWLOG, the probes not.
pub fn settings_for_calibration() -> Vec<(&'static str, Want)> {
    vec![
        ("slowlog-log-slower-than", Want::LogAtMost(1000)),
        ("slowlog-max-len", Want::AtLeast(128)),
        ("latency-monitor-threshold", Want::OnAndAtMost(1)),
    ]
}

/// The settings observe mode needs to name its stalls: SLOWLOG logging every command as slow
/// as a stall (never every command: the probes' own PINGs would crowd the log), a log long
/// enough for a burst, and the latency monitor at the same threshold.
pub fn settings_for_observing(stall_threshold_us: u64) -> Vec<(&'static str, Want)> {
    let threshold = i64::try_from(stall_threshold_us).unwrap_or(i64::MAX);
    let mut wants = vec![
        ("slowlog-log-slower-than", Want::LogAtMost(threshold)),
        ("slowlog-max-len", Want::AtLeast(128)),
        (
            "latency-monitor-threshold",
            Want::OnAndAtMost((threshold / 1000).max(1)),
        ),
    ];
    // A stall no client sent a command for (an expiry, an eviction) is named by its key.
    wants.extend(settings_for_key_events());
    wants
}

/// Server settings changed for a run; the old values are put back by [`ServerTuning::restore`]
/// or, failing that, when the guard is dropped. Restoring opens a fresh connection, so it works
/// even when the run's connections were killed.
pub struct ServerTuning {
    conn: ConnInfo,
    changed: Vec<Changed>,
    /// The effective values after tuning, by setting name (as read or as set).
    effective: Vec<(String, i64)>,
    /// Notes for the user (what was changed, what could not be).
    pub notes: Vec<String>,
    /// The run's cleanup tried to restore within its limit and gave up: what is still changed
    /// is the marker's to put back (or the user's, told so), and the drop does not try again.
    gave_up: bool,
    /// Settings the restore found changed since by someone else (a restarted server's own
    /// values among them), and so left as they were: not restored.
    left_as_found: Vec<String>,
}

/// One setting the guard changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// Setting name.
    pub name: String,
    /// The value before the run, as CONFIG GET returned it.
    pub old: String,
    /// The value the run set.
    pub new: String,
}

impl ServerTuning {
    /// Reads each setting and, when `allowed`, sets the ones that do not satisfy their want.
    /// Without `allowed` (someone else's server, no `--tune-server`) it only reads them, so the
    /// run knows what the server will log. A server without CONFIG (disabled or renamed) gives
    /// a note, never an error.
    pub fn apply(conn: &ConnInfo, wants: &[(&str, Want)], allowed: bool) -> ServerTuning {
        Self::apply_after(conn, wants, allowed, |_| {})
    }

    /// [`Self::apply`], every setting read first and `before` told what is about to change
    /// (old and new values) before the first CONFIG SET: the run's marker is written there, so
    /// that a kill at any moment after leaves a way back.
    pub fn apply_after(
        conn: &ConnInfo,
        wants: &[(&str, Want)],
        allowed: bool,
        before: impl FnOnce(&[Changed]),
    ) -> ServerTuning {
        let mut tuning = ServerTuning {
            conn: conn.clone(),
            changed: Vec::new(),
            effective: Vec::new(),
            notes: Vec::new(),
            gave_up: false,
            left_as_found: Vec::new(),
        };
        if wants.is_empty() {
            before(&[]);
            return tuning;
        }
        let mut control = match conn.redis_connection() {
            Ok(control) => control,
            Err(err) => {
                tuning
                    .notes
                    .push(format!("server view: cannot read the settings: {err:#}"));
                before(&[]);
                return tuning;
            }
        };
        // What to set, with each setting's value as read (numeric where it is a number).
        let mut to_set: Vec<(Changed, Option<i64>)> = Vec::new();
        for &(name, want) in wants {
            let current = match config_get(&mut control, name) {
                Ok(Some(value)) => value,
                Ok(None) => continue, // not a setting of this server
                Err(err) => {
                    tuning
                        .notes
                        .push(format!("server view: CONFIG GET {name} failed ({err})"));
                    continue;
                }
            };
            let numeric = current.trim().parse::<i64>().ok();
            if numeric.is_none() && !matches!(want, Want::HasFlags(_)) {
                continue;
            }
            let shown = if current.is_empty() {
                "\"\""
            } else {
                current.as_str()
            };
            let target = want.change_text(&current);
            match (target, allowed) {
                (Some(new), true) => to_set.push((
                    Changed {
                        name: name.to_string(),
                        old: current.clone(),
                        new,
                    },
                    numeric,
                )),
                (Some(new), false) => {
                    tuning.notes.push(format!(
                        "server view: {name} is {shown} on this server (the run would use {new}); pass --tune-server to change it for the run (it is restored afterwards)"
                    ));
                    if let Some(value) = numeric {
                        tuning.effective.push((name.to_string(), value));
                    }
                }
                (None, _) => {
                    if let Some(value) = numeric {
                        tuning.effective.push((name.to_string(), value));
                    }
                }
            }
        }
        let planned: Vec<Changed> = to_set.iter().map(|(c, _)| c.clone()).collect();
        before(&planned);
        for (change, numeric) in to_set {
            let result = redis::cmd("CONFIG")
                .arg("SET")
                .arg(&change.name)
                .arg(&change.new)
                .query::<()>(&mut control);
            match result {
                Ok(()) => {
                    if let Ok(value) = change.new.parse::<i64>() {
                        tuning.effective.push((change.name.clone(), value));
                    }
                    tuning.changed.push(change);
                }
                Err(err) => {
                    tuning.notes.push(format!(
                        "server view: CONFIG SET {} {} failed ({err})",
                        change.name, change.new
                    ));
                    if let Some(value) = numeric {
                        tuning.effective.push((change.name, value));
                    }
                }
            }
        }
        tuning
    }

    /// The settings changed, with their old values.
    pub fn changed(&self) -> &[Changed] {
        &self.changed
    }

    /// The settings the restore left as it found them, changed since by someone else.
    pub fn left_as_found(&self) -> &[String] {
        &self.left_as_found
    }

    /// The value a setting has for the run (after tuning), when it could be read.
    pub fn effective(&self, name: &str) -> Option<i64> {
        self.effective
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }

    /// Puts every changed setting back (in reverse order) on a fresh connection. Settings that
    /// were restored are forgotten, so a second call (or the drop) does nothing more.
    pub fn restore(&mut self) -> Result<Vec<String>> {
        self.restore_until(None)
    }

    /// [`Self::restore`] with every wait ending by `deadline` (the run's cleanup shares one
    /// reply limit): when none is left, an error that says so, and the settings stay listed.
    /// A setting someone else changed during the run (it no longer reads as the run set it) is
    /// left as they set it, and said in the lines returned: the restore put the run's "before"
    /// over an operator's change (the hostile trial); the marker's recovery did not.
    pub fn restore_until(&mut self, deadline: Option<std::time::Instant>) -> Result<Vec<String>> {
        let mut said = Vec::new();
        if self.changed.is_empty() {
            return Ok(said);
        }
        let conn = match deadline {
            None => self.conn.clone(),
            Some(deadline) => self.conn.until(deadline).with_context(|| {
                format!(
                    "no time left within the reply limit of {} after removing the run's keys",
                    crate::measure::target::format_limit(self.conn.command_timeout)
                )
            })?,
        };
        let mut control = conn
            .redis_connection()
            .context("reconnecting to restore the server's settings")?;
        while let Some(change) = self.changed.last() {
            // Each reply waits only for what is left of the deadline, not the whole of it again.
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left < crate::measure::target::LEAST_TRY.min(conn.command_timeout) {
                    anyhow::bail!(
                        "restoring {} to {}: no time left within the reply limit of {}",
                        change.name,
                        change.old,
                        crate::measure::target::format_limit(self.conn.command_timeout)
                    );
                }
                control
                    .set_read_timeout(Some(left))
                    .context("setting the read timeout")?;
            }
            // As it reads now; a server that refuses to say is restored as before. A timeout
            // ends the restore (the SET would wait as long again, past the deadline).
            let current: Option<String> = match redis::cmd("CONFIG")
                .arg("GET")
                .arg(&change.name)
                .query::<Vec<String>>(&mut control)
            {
                Ok(pair) => pair.into_iter().nth(1),
                Err(err) if err.is_timeout() => {
                    return Err(crate::measure::target::said_as_timeout(
                        err,
                        "CONFIG GET",
                        &self.conn,
                        conn.command_timeout,
                    ))
                    .with_context(|| {
                        format!(
                            "restoring {} to {}",
                            change.name,
                            crate::session::marker::shown(&change.old)
                        )
                    });
                }
                Err(_) => None,
            };
            if let Some(current) =
                current.filter(|c| !crate::session::marker::same_value(c, &change.new))
            {
                if !crate::session::marker::same_value(&current, &change.old) {
                    self.left_as_found.push(change.name.clone());
                    said.push(format!(
                        "left {} at {} (the run had set {}, changed since by someone else; it was {} before the run)",
                        change.name,
                        crate::session::marker::shown(&current),
                        crate::session::marker::shown(&change.new),
                        crate::session::marker::shown(&change.old)
                    ));
                }
                self.changed.pop();
                continue;
            }
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(&change.name)
                .arg(&change.old)
                .query::<()>(&mut control)
                .map_err(|err| {
                    crate::measure::target::said_as_timeout(
                        err,
                        "CONFIG SET",
                        &self.conn,
                        conn.command_timeout,
                    )
                })
                .with_context(|| {
                    format!(
                        "restoring {} to {}",
                        change.name,
                        crate::session::marker::shown(&change.old)
                    )
                })?;
            self.changed.pop();
        }
        Ok(said)
    }
}

impl ServerTuning {
    /// The cleanup's restore failed within its limit: the drop makes no more tries, each of
    /// which would wait out the reply limit again on a server that stopped answering. What is
    /// still changed is left to the run's marker (the next run against the server, or `probe
    /// clean`), or said to the user where there is none.
    pub fn give_up(&mut self) {
        self.gave_up = true;
    }
}

impl Drop for ServerTuning {
    fn drop(&mut self) {
        // The normal paths call restore() and report its error; this is the safety net for the
        // others (an early `?`, a panic).
        if !self.gave_up {
            let _ = self.restore();
        }
    }
}

fn config_get(control: &mut redis::Connection, name: &str) -> redis::RedisResult<Option<String>> {
    let pairs: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(control)?;
    Ok(pairs.get(1).cloned())
}

/// What the per-write collection may do on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ViewSetup {
    /// `CONFIG RESETSTAT` before each write, so `eventloop_duration_max` covers exactly the
    /// write (the embedded server only: it clears every INFO counter).
    pub reset_stats: bool,
    /// `LATENCY RESET` before each write: the embedded server only. Someone else's server keeps
    /// its history (the monitor switched off does not clear it: an operator's events of before
    /// the run survive), and a write's events are those new or changed since just before it.
    pub reset_latency: bool,
    /// The server's process when the tool started it, or a `--url` server's found on this host
    /// ([`crate::measure::target::ServerFacts::local_pid`]): the writer reads its main thread's
    /// CPU time and wait for a CPU around each write ([`crate::measure::schedstat`]).
    pub server_pid: Option<u32>,
}

/// Entries logged between a command and the page read: the probes' keep coming.
const SLOWLOG_MARGIN: usize = 64;

/// The SLOWLOG page that reaches back past the entry `since` (the newest before a write) when
/// `newest` is the newest now: the entries logged in between and [`SLOWLOG_MARGIN`], at most
/// [`MAX_SLOWLOG_PAGE`].
fn slowlog_page_since(since: i64, newest: i64) -> usize {
    usize::try_from(newest.saturating_sub(since))
        .unwrap_or(0)
        .saturating_add(SLOWLOG_MARGIN)
        .min(MAX_SLOWLOG_PAGE)
}

/// One SLOWLOG or COMMANDLOG entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Entry id (increasing).
    pub id: i64,
    /// Unix time of the entry, s.
    pub timestamp: i64,
    /// Execution time in µs (SLOWLOG, COMMANDLOG slow) or size in bytes (COMMANDLOG large-*).
    pub value: i64,
    /// The command and its arguments (each possibly truncated by the server).
    pub args: Vec<Vec<u8>>,
    /// The client's address, `ip:port` (the 5th field, Redis 4+ and Valkey; `None` before).
    pub client_addr: Option<String>,
    /// The client's name from `CLIENT SETNAME` (the 6th field; `None` when unset or absent).
    pub client_name: Option<String>,
}

/// Parses a `SLOWLOG GET` / `COMMANDLOG GET` reply. Malformed entries are skipped.
pub fn parse_log_entries(reply: &Reply) -> Vec<LogEntry> {
    let Reply::Array(Some(entries)) = reply else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Reply::Array(Some(fields)) = entry else {
                return None;
            };
            let int = |i: usize| match fields.get(i)? {
                Reply::Integer(n) => Some(*n),
                _ => None,
            };
            let args = match fields.get(3)? {
                Reply::Array(Some(args)) => args
                    .iter()
                    .filter_map(|a| match a {
                        Reply::Bulk(Some(bytes)) => Some(bytes.clone()),
                        Reply::Status(text) => Some(text.as_bytes().to_vec()),
                        _ => None,
                    })
                    .collect(),
                _ => return None,
            };
            // Fields 5 and 6 came with Redis 4.0: older servers send 4, which still parse.
            let text = |i: usize| match fields.get(i)? {
                Reply::Bulk(Some(bytes)) if !bytes.is_empty() => {
                    Some(String::from_utf8_lossy(bytes).into_owned())
                }
                Reply::Status(text) if !text.is_empty() => Some(text.clone()),
                _ => None,
            };
            Some(LogEntry {
                id: int(0)?,
                timestamp: int(1)?,
                value: int(2)?,
                args,
                client_addr: text(4),
                client_name: text(5),
            })
        })
        .collect()
}

/// The newest entry whose command is `command` (any case) and one of whose arguments is `arg`.
pub fn find_entry<'a>(entries: &'a [LogEntry], command: &str, arg: &[u8]) -> Option<&'a LogEntry> {
    find_entry_after(entries, command, arg, None)
}

/// [`find_entry`] among the entries newer than `after_id` (the newest id logged before the
/// command was sent; `None`: any). A command the server did not log (faster than
/// `slowlog-log-slower-than`) is then not matched to an earlier one of the same key: the run's
/// second DEL of a key, say, to its first.
pub fn find_entry_after<'a>(
    entries: &'a [LogEntry],
    command: &str,
    arg: &[u8],
    after_id: Option<i64>,
) -> Option<&'a LogEntry> {
    entries
        .iter()
        .filter(|e| {
            after_id.is_none_or(|after| e.id > after)
                && crate::analyze::naming::is_command(&e.args, command)
                && e.args.iter().skip(1).any(|a| a.as_slice() == arg)
        })
        .max_by_key(|e| e.id)
}

/// One row of `LATENCY LATEST` (defined with the pure stall naming that reads it).
pub use crate::analyze::naming::LatencyEvent;

/// Parses `LATENCY LATEST` (Redis: 4 fields per event; Valkey adds more, ignored).
pub fn parse_latency_latest(reply: &Reply) -> Vec<LatencyEvent> {
    let Reply::Array(Some(rows)) = reply else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|row| {
            let Reply::Array(Some(fields)) = row else {
                return None;
            };
            let name = match fields.first()? {
                Reply::Bulk(Some(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                Reply::Status(text) => text.clone(),
                _ => return None,
            };
            let int = |i: usize| match fields.get(i)? {
                Reply::Integer(n) => Some(*n),
                _ => None,
            };
            Some(LatencyEvent {
                name,
                at_unix_s: int(1)?,
                latest_ms: int(2)?,
                max_ms: int(3)?,
            })
        })
        .collect()
}

/// The largest latency event recorded between two `LATENCY LATEST` readings: an event counts
/// when it is new or its latest spike changed. The monitor keeps one figure per second (the
/// worst), so a spike in the same second as an earlier, larger one leaves no trace: then this
/// says nothing (reset the monitor before the write to avoid that).
pub fn latency_between(before: &[LatencyEvent], after: &[LatencyEvent]) -> Option<(String, i64)> {
    after
        .iter()
        .filter(|event| {
            !before.iter().any(|b| {
                b.name == event.name
                    && b.at_unix_s == event.at_unix_s
                    && b.latest_ms == event.latest_ms
            })
        })
        .max_by_key(|event| event.latest_ms)
        .map(|event| (event.name.clone(), event.latest_ms))
}

/// The longest event-loop cycle during a window, from `eventloop_duration_max` read before and
/// after it: exact when the counter was reset before the window; otherwise only a rise says
/// something (the maximum is since the last reset, so an unchanged value means the window's
/// longest cycle was no longer than an earlier one, length unknown).
pub fn eventloop_max_during(
    before: Option<u64>,
    after: Option<u64>,
    was_reset: bool,
) -> Option<u64> {
    let after = after?;
    if was_reset {
        return Some(after);
    }
    match before {
        Some(before) if after > before => Some(after),
        _ => None,
    }
}

/// INFO DEBUG `eventloop_duration_max`, µs, and whether the server reports it at all (false
/// for Redis before 7.2, or a refused INFO DEBUG: not worth asking again). A connection
/// error gives `(None, true)`: the next reading may work.
pub fn read_eventloop_max(conn: &mut RawConn) -> (Option<u64>, bool) {
    match conn.command(&[b"INFO", b"debug"]) {
        Ok(Reply::Bulk(Some(bytes))) => {
            let text = String::from_utf8_lossy(&bytes);
            let value = info_field(&text, "eventloop_duration_max").and_then(|v| v.parse().ok());
            (value, value.is_some())
        }
        Ok(_) => (None, false),
        Err(_) => (None, true),
    }
}

/// The server's figures for one write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerFigures {
    /// SLOWLOG execution time, µs.
    pub exec_us: Option<u64>,
    /// The largest LATENCY event, ms.
    pub latency_event_ms: Option<u64>,
    /// Its name.
    pub latency_event: Option<String>,
    /// The longest event-loop cycle, µs.
    pub eventloop_max_us: Option<u64>,
    /// COMMANDLOG large-request size, bytes.
    pub request_bytes: Option<u64>,
}

/// Readings taken right before a write.
#[derive(Debug, Clone, Default)]
pub struct Before {
    /// The newest SLOWLOG entry's id before the write (`None`: the log was empty or unread).
    slowlog_newest_id: Option<i64>,
    eventloop_max_us: Option<u64>,
    latency: Vec<LatencyEvent>,
    reset: bool,
    latency_reset: bool,
}

/// Which sources this server answers; a source that errs once (unknown command, no
/// permission) is not asked again.
#[derive(Debug, Clone)]
pub struct ServerView {
    setup: ViewSetup,
    slowlog: bool,
    latency: bool,
    eventloop: bool,
    commandlog: bool,
    /// SLOWLOG entries read after each write: enough to reach back past the probes' own (the
    /// writer reads more after an op whose reply takes long to arrive, a whole read's).
    pub(crate) slowlog_page: usize,
}

impl ServerView {
    /// A view for a server with `setup`; every source is tried until it fails.
    pub fn new(setup: ViewSetup) -> ServerView {
        ServerView {
            setup,
            slowlog: true,
            latency: true,
            eventloop: true,
            commandlog: true,
            slowlog_page: 256,
        }
    }

    /// Readings right before a write (resets where allowed).
    pub fn before(&mut self, conn: &mut RawConn) -> Before {
        let mut before = Before::default();
        if self.slowlog
            && let Ok(reply @ Reply::Array(_)) = conn.command(&[b"SLOWLOG", b"GET", b"1"])
        {
            before.slowlog_newest_id = parse_log_entries(&reply).first().map(|e| e.id);
        }
        if self.setup.reset_stats && self.eventloop {
            before.reset = matches!(
                conn.command(&[b"CONFIG", b"RESETSTAT"]),
                Ok(Reply::Status(_))
            );
        }
        if self.eventloop && !before.reset {
            before.eventloop_max_us = self.eventloop_max(conn);
        }
        if self.latency {
            if self.setup.reset_latency {
                before.latency_reset =
                    matches!(conn.command(&[b"LATENCY", b"RESET"]), Ok(Reply::Integer(_)));
            }
            if !before.latency_reset {
                before.latency = self.latency_latest(conn).unwrap_or_default();
            }
        }
        before
    }

    /// Readings right after a write whose command was `command` with argument `arg` (the key,
    /// or a nonce the command carried).
    pub fn after(
        &mut self,
        conn: &mut RawConn,
        command: &str,
        arg: &[u8],
        before: &Before,
    ) -> ServerFigures {
        let mut figures = ServerFigures::default();
        // SLOWLOG first: the probes keep adding entries.
        if self.slowlog {
            // Ask for the entries logged since the write began and a margin, where the newest
            // id says how many: a guessed page costs the server what it reads (SLOWLOG GET of
            // 16,384 probes' entries took Redis 7.0 5.4 ms, 4,096 1.6 ms, 256 0.1 ms: a stall
            // of the tool's own right after the write).
            let page_since = |conn: &mut RawConn| {
                let since = before.slowlog_newest_id?;
                let Ok(reply @ Reply::Array(_)) = conn.command(&[b"SLOWLOG", b"GET", b"1"]) else {
                    return None;
                };
                let newest = parse_log_entries(&reply).first()?.id;
                Some(slowlog_page_since(since, newest))
            };
            let mut page = page_since(conn).unwrap_or(self.slowlog_page);
            loop {
                let asked = page.to_string();
                match conn.command(&[b"SLOWLOG", b"GET", asked.as_bytes()]) {
                    Ok(reply @ Reply::Array(_)) => {
                        let entries = parse_log_entries(&reply);
                        let found =
                            find_entry_after(&entries, command, arg, before.slowlog_newest_id);
                        // A full page without the entry: the probes answered after a long
                        // freeze (thousands queued behind it) were logged after it. Once more,
                        // further back: as far as the newest id now says (more than the margin
                        // came between the two reads when the tool's thread waited for a CPU;
                        // 16 times the page read 1,120 entries where 70 had missed by a few),
                        // or 16 times as far where no id says.
                        // Not when the page already reaches back to the entries logged before
                        // the write: the write's own was not logged.
                        let reaches_back = before
                            .slowlog_newest_id
                            .is_some_and(|newest| entries.iter().any(|e| e.id <= newest));
                        if found.is_none()
                            && !reaches_back
                            && entries.len() >= page
                            && page < MAX_SLOWLOG_PAGE
                        {
                            page = match page_since(conn) {
                                Some(further) if further > page => further,
                                _ => (page * 16).min(MAX_SLOWLOG_PAGE),
                            };
                            continue;
                        }
                        figures.exec_us = found.and_then(|e| u64::try_from(e.value).ok());
                    }
                    Ok(_) => self.slowlog = false,
                    Err(_) => return figures,
                }
                break;
            }
        }
        if self.commandlog {
            match conn.command(&[b"COMMANDLOG", b"GET", b"16", b"large-request"]) {
                Ok(reply @ Reply::Array(_)) => {
                    let entries = parse_log_entries(&reply);
                    figures.request_bytes = find_entry(&entries, command, arg)
                        .and_then(|e| u64::try_from(e.value).ok());
                }
                Ok(_) => self.commandlog = false,
                Err(_) => return figures,
            }
        }
        if self.latency
            && let Some(after) = self.latency_latest(conn)
        {
            let found = if before.latency_reset {
                latency_between(&[], &after)
            } else {
                latency_between(&before.latency, &after)
            };
            if let Some((name, ms)) = found {
                figures.latency_event = Some(name);
                figures.latency_event_ms = u64::try_from(ms).ok();
            }
        }
        if self.eventloop {
            let after = self.eventloop_max(conn);
            figures.eventloop_max_us =
                eventloop_max_during(before.eventloop_max_us, after, before.reset);
        }
        figures
    }

    fn latency_latest(&mut self, conn: &mut RawConn) -> Option<Vec<LatencyEvent>> {
        match conn.command(&[b"LATENCY", b"LATEST"]) {
            Ok(reply @ Reply::Array(_)) => Some(parse_latency_latest(&reply)),
            Ok(_) => {
                self.latency = false;
                None
            }
            Err(_) => None,
        }
    }

    fn eventloop_max(&mut self, conn: &mut RawConn) -> Option<u64> {
        let (value, reported) = read_eventloop_max(conn);
        self.eventloop &= reported;
        value
    }
}

/// Unix time now, µs.
pub fn unix_now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Unix time now, s.
pub fn unix_now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowlog_page_reaches_back_past_the_write_and_no_further() {
        // 800 probes logged during a 400 ms freeze at 2 x 1000/s: 864, not the 1,024 or
        // 16,384 a guess would ask for.
        assert_eq!(slowlog_page_since(1_000, 1_800), 864);
        assert_eq!(slowlog_page_since(5, 5), SLOWLOG_MARGIN);
        assert_eq!(slowlog_page_since(0, 1_000_000), MAX_SLOWLOG_PAGE);
        // A log reset or a restarted server (the newest id behind): the margin alone, and the
        // page grows from there when the entry is not in it.
        assert_eq!(slowlog_page_since(9_000, 3), SLOWLOG_MARGIN);
    }

    fn bulk(text: &str) -> Reply {
        Reply::Bulk(Some(text.as_bytes().to_vec()))
    }

    fn entry(id: i64, value: i64, args: &[&str]) -> Reply {
        Reply::Array(Some(vec![
            Reply::Integer(id),
            Reply::Integer(1_700_000_000),
            Reply::Integer(value),
            Reply::Array(Some(args.iter().map(|a| bulk(a)).collect())),
            bulk("127.0.0.1:5000"),
            bulk(""),
        ]))
    }

    #[test]
    fn wants() {
        assert_eq!(Want::LogAtMost(0).change(10_000), Some(0));
        assert_eq!(Want::LogAtMost(0).change(-1), Some(0));
        assert_eq!(Want::LogAtMost(0).change(0), None);
        assert_eq!(Want::LogAtMost(1000).change(500), None);
        assert_eq!(Want::OnAndAtMost(1).change(0), Some(1));
        assert_eq!(Want::OnAndAtMost(1).change(100), Some(1));
        assert_eq!(Want::OnAndAtMost(1).change(1), None);
        assert_eq!(Want::AtLeast(1024).change(128), Some(1024));
        assert_eq!(Want::AtLeast(1024).change(4096), None);
        let flags = Want::HasFlags("Exe");
        assert_eq!(flags.change_text("").as_deref(), Some("Exe"));
        assert_eq!(flags.change_text("Kx").as_deref(), Some("KxEe"));
        assert_eq!(flags.change_text("xeE"), None);
        assert_eq!(flags.change_text("AE"), None);
        assert_eq!(
            Want::AtLeast(1024).change_text("128").as_deref(),
            Some("1024")
        );
        assert_eq!(Want::AtLeast(1024).change_text("lots"), None);
    }

    #[test]
    fn slowlog_entries_are_matched_by_command_and_argument() {
        let reply = Reply::Array(Some(vec![
            entry(12, 3, &["PING"]),
            entry(
                11,
                14,
                &[
                    "SET",
                    "holprobe:ab:w1:64M:1",
                    "xyz... (67108800 more bytes)",
                ],
            ),
            entry(9, 20, &["set", "holprobe:ab:w1:64M:1", "older"]),
            entry(8, 4_100, &["DEL", "holprobe:ab:w1:64M:1"]),
            Reply::Integer(5), // malformed: skipped
        ]));
        let entries = parse_log_entries(&reply);
        assert_eq!(entries.len(), 4);
        let set = find_entry(&entries, "SET", b"holprobe:ab:w1:64M:1").unwrap();
        assert_eq!((set.id, set.value), (11, 14));
        let del = find_entry(&entries, "del", b"holprobe:ab:w1:64M:1").unwrap();
        assert_eq!(del.value, 4_100);
        assert!(find_entry(&entries, "SET", b"other").is_none());
        // Entries logged before the write are not its own: the older SET (id 9) is not taken
        // for a write sent after id 10, nor anything for one sent after id 11.
        let set = find_entry_after(&entries, "SET", b"holprobe:ab:w1:64M:1", Some(10)).unwrap();
        assert_eq!(set.id, 11);
        assert!(find_entry_after(&entries, "DEL", b"holprobe:ab:w1:64M:1", Some(8)).is_none());
        assert!(find_entry_after(&entries, "SET", b"holprobe:ab:w1:64M:1", Some(11)).is_none());
        // The command name alone does not match: an argument must.
        assert!(find_entry(&entries, "PING", b"PING").is_none());
        assert!(parse_log_entries(&Reply::Error("ERR unknown".into())).is_empty());
    }

    #[test]
    fn slowlog_client_fields_are_read_when_the_server_sends_them() {
        let named = Reply::Array(Some(vec![
            Reply::Integer(3),
            Reply::Integer(1_700_000_000),
            Reply::Integer(51_000),
            Reply::Array(Some(vec![bulk("DEBUG"), bulk("SLEEP"), bulk("0.05")])),
            bulk("10.0.0.5:51234"),
            bulk("app-worker"),
        ]));
        // Redis before 4.0: four fields, no client.
        let old = Reply::Array(Some(vec![
            Reply::Integer(2),
            Reply::Integer(1_700_000_000),
            Reply::Integer(10),
            Reply::Array(Some(vec![bulk("PING")])),
        ]));
        let entries = parse_log_entries(&Reply::Array(Some(vec![
            named,
            entry(1, 5, &["GET", "k"]),
            old,
        ])));
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].client_addr.as_deref(), Some("10.0.0.5:51234"));
        assert_eq!(entries[0].client_name.as_deref(), Some("app-worker"));
        // An unnamed client sends an empty name: none.
        assert_eq!(entries[1].client_addr.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(entries[1].client_name, None);
        assert_eq!(
            (
                entries[2].client_addr.clone(),
                entries[2].client_name.clone()
            ),
            (None, None)
        );
    }

    #[test]
    fn latency_events_new_or_changed_count() {
        let row = |name: &str, at: i64, latest: i64, max: i64| {
            Reply::Array(Some(vec![
                bulk(name),
                Reply::Integer(at),
                Reply::Integer(latest),
                Reply::Integer(max),
                Reply::Integer(latest), // Valkey's extra fields
            ]))
        };
        let before = parse_latency_latest(&Reply::Array(Some(vec![row("command", 100, 7, 30)])));
        assert_eq!(before[0].latest_ms, 7);
        let after = parse_latency_latest(&Reply::Array(Some(vec![
            row("command", 100, 7, 30),
            row("fast-command", 105, 3, 3),
        ])));
        assert_eq!(
            latency_between(&before, &after),
            Some(("fast-command".to_string(), 3))
        );
        let after = parse_latency_latest(&Reply::Array(Some(vec![row("command", 106, 42, 42)])));
        assert_eq!(
            latency_between(&before, &after),
            Some(("command".into(), 42))
        );
        assert_eq!(latency_between(&before, &before), None);
    }

    #[test]
    fn eventloop_max_only_says_what_it_knows() {
        assert_eq!(eventloop_max_during(None, Some(900), true), Some(900));
        assert_eq!(eventloop_max_during(Some(500), Some(900), false), Some(900));
        assert_eq!(eventloop_max_during(Some(900), Some(900), false), None);
        assert_eq!(eventloop_max_during(Some(900), None, false), None);
        assert_eq!(eventloop_max_during(None, Some(900), false), None);
    }
}
