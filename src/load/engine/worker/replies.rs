//! What a generator thread does with what comes back: replies read and recorded, cluster
//! redirects followed, broken connections and timeouts counted and reopened.

use std::io::{self, Read};
use std::time::Duration;

use mio::{Interest, Token};

use super::{Worker, connect};
use crate::load::engine::EngineMsg;
use crate::load::engine::recorder::{NOTES_PER_THREAD, Pending};
use crate::load::scanner::Scanned;
use crate::measure::target::format_limit;

impl Worker {
    /// Reads every reply available (the loop is edge-triggered: read until WouldBlock).
    pub(super) fn on_readable(&mut self, i: usize) {
        let mut got_reply = false;
        loop {
            let Some(stream) = self.clients[i].stream.as_mut() else {
                return;
            };
            let n = match stream.read(&mut self.read_buf) {
                Ok(0) => {
                    self.fail(i, "the server closed the connection".into());
                    return;
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    self.fail(i, format!("read failed: {err}"));
                    return;
                }
            };
            let now = self.clock.now_us();
            if !self.draining {
                self.advance_seconds(now, self.stop_at());
            }
            let client = &mut self.clients[i];
            let server = client.server as usize;
            let inflight = &mut client.inflight;
            let rec = &mut self.rec;
            let mut orphan = false;
            let mut redirected: Vec<(Pending, String)> = Vec::new();
            let fed =
                client
                    .scanner
                    .feed(&self.read_buf[..n], |reply| match inflight.pop_front() {
                        // A cluster redirect: followed below, out of the scanner's way.
                        Some(pending) => match reply {
                            Scanned::Error(text)
                                if text.starts_with("MOVED ") || text.starts_with("ASK ") =>
                            {
                                redirected.push((pending, text))
                            }
                            reply => rec.reply(server, pending, reply, now),
                        },
                        None => orphan = true,
                    });
            for (pending, text) in redirected {
                let reply = self.follow(server, &pending, &text);
                let done_us = self.clock.now_us();
                self.rec.reply(server, pending, reply, done_us);
            }
            got_reply = true;
            self.heard_us[server] = now;
            if let Err(err) = fed {
                self.fail(i, err.to_string());
                return;
            }
            if orphan {
                self.fail(i, "a reply came for no request".into());
                return;
            }
            // A short read emptied the socket: the next bytes raise a new edge, so the
            // read that would only say WouldBlock (one syscall per reply) is skipped.
            if n < self.read_buf.len() {
                break;
            }
        }
        if got_reply {
            let now = self.clock.now_us();
            if self.config.rate.is_some() {
                self.unblock_open(i, now);
            } else {
                self.refill_closed(i, now);
            }
        }
    }

    /// Sends a request a cluster redirected (`MOVED slot host:port`, or `ASK` after `ASKING`)
    /// again where the reply says, on a blocking connection of this thread's to that node, and
    /// returns the reply there: the request's latency counts both trips. Redirects come only
    /// while a slot moves (a failover, a resharding), so the thread's short wait is rare; the
    /// next requests of the slot are redirected and followed the same way.
    pub(super) fn follow(&mut self, server: usize, pending: &Pending, text: &str) -> Scanned {
        let ask = text.starts_with("ASK ");
        self.rec.redirected(server, ask, text);
        let Some(address) = text.split_whitespace().nth(2) else {
            return Scanned::Error(text.to_string());
        };
        if !self.redirects.contains_key(address) {
            let Ok(mut info) = self.config.servers[server].conn.for_node(address) else {
                return Scanned::Error(text.to_string());
            };
            info.command_timeout = info.command_timeout.min(Duration::from_secs(2));
            match info.redis_connection() {
                Ok(conn) => {
                    self.redirects.insert(address.to_string(), conn);
                }
                Err(err) => {
                    return Scanned::Error(format!("{text}: {}", crate::error::one_line(&err)));
                }
            }
        }
        let conn = self.redirects.get_mut(address).expect("inserted above");
        let mut key = Vec::new();
        self.config.naming.push_key(pending.key_index, &mut key);
        let mut pipe = redis::pipe();
        if ask {
            pipe.cmd("ASKING").ignore();
        }
        if pending.set_bytes > 0 {
            let len = (pending.set_bytes as usize).min(self.pool.len());
            pipe.cmd("SET").arg(&key).arg(&self.pool[..len]);
        } else {
            pipe.cmd("GET").arg(&key);
        }
        match pipe.query::<Vec<redis::Value>>(conn) {
            Ok(mut values) => match values.pop() {
                Some(redis::Value::BulkString(bytes)) => Scanned::Bulk {
                    len_bytes: bytes.len() as u64,
                },
                Some(redis::Value::Nil) => Scanned::Nil,
                Some(redis::Value::Okay) => Scanned::Status { ok: true },
                Some(redis::Value::SimpleString(s)) => Scanned::Status { ok: s == "OK" },
                other => Scanned::Error(format!("unexpected reply {other:?} after {text}")),
            },
            Err(err) => {
                // A broken connection is opened again at the next redirect.
                self.redirects.remove(address);
                Scanned::Error(format!("{text}: {err}"))
            }
        }
    }

    /// A connection broke: its outstanding requests are errors; it is reopened at once or,
    /// failing that, retried shortly.
    pub(super) fn fail(&mut self, i: usize, reason: String) {
        let now = self.clock.now_us();
        let server = self.clients[i].server as usize;
        let mut lost = std::mem::take(&mut self.clients[i].inflight);
        self.rec.lost(server, &mut lost, now, false);
        self.clients[i].inflight = lost;
        self.note(format!(
            "connection to {} failed: {reason}",
            self.config.servers[server].conn
        ));
        self.reset(i, now);
    }

    pub(super) fn note(&mut self, text: String) {
        if self.rec.notes < NOTES_PER_THREAD {
            self.rec.notes += 1;
            self.rec.outbox.push_back(EngineMsg::Note(text));
        }
    }

    /// Drops the connection and tries to reopen it.
    pub(super) fn reset(&mut self, i: usize, now: u64) {
        let client = &mut self.clients[i];
        if let Some(mut stream) = client.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
        client.wbuf.clear();
        client.wpos = 0;
        client.scanner.reset();
        client.inflight.clear();
        client.blocked = true;
        client.retry_at_us = now;
        self.try_reconnect(i, now);
    }

    pub(super) fn try_reconnect(&mut self, i: usize, now: u64) {
        let server = self.clients[i].server as usize;
        // Reopening a connection to a server that answers nothing waits for each in turn.
        if self.draining || self.unanswered[server] {
            return;
        }
        match connect(&self.config.servers[server].conn) {
            Ok(mut stream) => {
                if self
                    .poll
                    .registry()
                    .register(
                        &mut stream,
                        Token(i),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_err()
                {
                    self.clients[i].retry_at_us = now + 200_000;
                    return;
                }
                self.reconnects += 1;
                self.refused_since[server] = None;
                self.clients[i].stream = Some(stream);
                if self.config.rate.is_some() {
                    self.unblock_open(i, now);
                } else {
                    self.clients[i].blocked = false;
                    self.refill_closed(i, now);
                }
            }
            Err(err) => {
                self.clients[i].retry_at_us = now + 200_000;
                let since = *self.refused_since[server].get_or_insert(now);
                if now.saturating_sub(since) >= super::GONE_AFTER_US {
                    // Gone (killed, or its port closed): the run ends with it.
                    self.control
                        .lost_at_us
                        .fetch_min(since, std::sync::atomic::Ordering::SeqCst);
                    self.give_up_on(server, |conn| {
                        format!(
                            "lost {conn}: its connections closed and reopening them failed for {} ({err:#})",
                            format_limit(Duration::from_micros(super::GONE_AFTER_US))
                        )
                    });
                }
                self.note(format!("reconnecting: {err:#}"));
            }
        }
    }

    /// `server` is no longer waited for nor reconnected to, and the run ends with the first
    /// such reason any thread gives ([`super::Control::unanswered`]).
    fn give_up_on(
        &mut self,
        server: usize,
        reason: impl FnOnce(&crate::measure::target::ConnInfo) -> String,
    ) {
        self.unanswered[server] = true;
        if let Ok(mut said) = self.control.unanswered.lock() {
            said.get_or_insert_with(|| reason(&self.config.servers[server].conn));
        }
    }

    /// Timeouts and reconnects.
    pub(super) fn housekeeping(&mut self, now: u64) {
        let timeout = self.config.timeout_us;
        for i in 0..self.clients.len() {
            let client = &self.clients[i];
            if client.stream.is_none() {
                if now >= client.retry_at_us {
                    self.try_reconnect(i, now);
                }
                continue;
            }
            let Some(front) = client.inflight.front() else {
                continue;
            };
            if now.saturating_sub(front.sent_us) > timeout {
                let server = client.server as usize;
                if self.heard_us[server] < front.sent_us && !self.unanswered[server] {
                    // Not one reply from the server since: it is frozen or gone.
                    self.give_up_on(server, |conn| {
                        format!(
                            "timed out after {} waiting for {conn} to answer: none of the load's requests were answered since (--timeout)",
                            format_limit(Duration::from_micros(timeout)),
                        )
                    });
                }
                let mut lost = std::mem::take(&mut self.clients[i].inflight);
                self.rec.lost(server, &mut lost, now, true);
                self.note(format!(
                    "a request to {} waited more than {} ms: its connection was reopened",
                    self.config.servers[server].conn,
                    timeout / 1000
                ));
                self.reset(i, now);
            }
        }
    }
}
