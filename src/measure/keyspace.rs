//! Keyspace notifications: the server's word that a key expired or was evicted, on the run's
//! clock. This is how the tool sees a removal no client asked for: an `expire` op's window ends
//! when the server says its key is gone (the tool must not touch the key to find out, or the
//! access would expire it on the tool's command instead of the server's active expiry), and a
//! stall during which a key expired is named by that key.
//!
//! The events come on a connection of their own, subscribed to `__keyevent@<db>__:expired` and
//! `__keyevent@<db>__:evicted`; they need `notify-keyspace-events` to hold `E`, `x` and `e`
//! ([`KEYEVENT_FLAGS`]), which [`crate::measure::serverview::ServerTuning`] sets where the run may
//! change settings (the embedded server; `--tune-server`) and restores afterwards. A server
//! publishes an event after the key is deleted, and delivers it when its event loop next writes
//! to clients: the stamp is at most one event-loop turn after the free ended.

use std::net::{Shutdown, TcpStream};
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail};
use crossbeam_channel::{Receiver, Sender};

use crate::measure::clock::RunClock;
use crate::measure::resp::{RawConn, Reply};
use crate::measure::target::ConnInfo;

/// The `notify-keyspace-events` flags the tool needs: keyevent channels (`E`) for expired (`x`)
/// and evicted (`e`) keys.
pub const KEYEVENT_FLAGS: &str = "Exe";

/// What the server said of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEvent {
    /// `expired` or `evicted`.
    pub event: String,
    /// The key, as the server sent it.
    pub key: Vec<u8>,
    /// When the notification arrived, µs on the run's clock.
    pub at_us: u64,
    /// The same moment, µs since the Unix epoch (this host's clock), to name stalls with.
    pub at_unix_us: i64,
}

impl From<KeyEvent> for crate::analyze::naming::RemovedKey {
    fn from(event: KeyEvent) -> Self {
        crate::analyze::naming::RemovedKey {
            event: event.event,
            key: event.key,
            at_unix_us: event.at_unix_us,
        }
    }
}

/// Whether `notify-keyspace-events` (as `CONFIG GET` gives it) sends what [`KeyEvents`] hears.
pub fn notifications_on(current: &str) -> bool {
    missing_flags(current, KEYEVENT_FLAGS).is_empty()
}

/// The flags `current` lacks of `wanted` (`notify-keyspace-events` letters; `A` stands for
/// every type letter, `x` and `e` among them).
pub fn missing_flags(current: &str, wanted: &str) -> String {
    wanted
        .chars()
        .filter(|&flag| {
            let by_all = current.contains('A') && flag != 'E' && flag != 'K';
            !(current.contains(flag) || by_all)
        })
        .collect()
}

/// A subscriber thread forwarding every expired or evicted key's event; stopped (its connection
/// shut) on drop.
pub struct KeyEvents {
    events: Receiver<KeyEvent>,
    socket: Option<TcpStream>,
    thread: Option<JoinHandle<()>>,
}

impl KeyEvents {
    /// Subscribes on a fresh connection to `info`'s database and starts the thread. Fails when
    /// the server refuses the subscription (an ACL without `&__keyevent@*`).
    pub fn start(info: &ConnInfo, clock: RunClock) -> Result<KeyEvents> {
        let mut conn = RawConn::connect(info).context("opening the keyspace-events connection")?;
        let channels = [
            format!("__keyevent@{}__:expired", info.db),
            format!("__keyevent@{}__:evicted", info.db),
        ];
        let mut args: Vec<&[u8]> = vec![b"SUBSCRIBE"];
        args.extend(channels.iter().map(|c| c.as_bytes()));
        conn.send_raw(&crate::measure::resp::encode_command(&args))
            .context("subscribing to keyspace events")?;
        for _ in &channels {
            match conn
                .read_reply()
                .context("subscribing to keyspace events")?
            {
                Reply::Error(text) => {
                    bail!("the server refused SUBSCRIBE to keyspace events: {text}")
                }
                Reply::Array(Some(_)) => {}
                other => bail!("unexpected reply to SUBSCRIBE: {other:?}"),
            }
        }
        // From here it waits as long as no key expires.
        conn.set_read_timeout(None)
            .context("keyspace-events connection")?;
        let socket = conn.try_clone_stream().ok();
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("keyspace-events".into())
            .spawn(move || forward(conn, clock, tx))
            .context("starting the keyspace-events thread")?;
        Ok(KeyEvents {
            events: rx,
            socket,
            thread: Some(thread),
        })
    }

    /// [`KeyEvents::start`] where the server sends the notifications (`notify-keyspace-events`
    /// as `conn` reads it holds [`KEYEVENT_FLAGS`]); `Ok(None)` where it does not, or refuses
    /// `CONFIG` (the settings guard has said so already, with how to turn them on).
    pub fn start_if_on(
        conn: &mut RawConn,
        info: &ConnInfo,
        clock: RunClock,
    ) -> Result<Option<KeyEvents>> {
        let flags = match conn.command(&[b"CONFIG", b"GET", b"notify-keyspace-events"]) {
            Ok(Reply::Array(Some(pair))) => match pair.get(1) {
                Some(Reply::Bulk(Some(value))) => String::from_utf8_lossy(value).into_owned(),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        if !notifications_on(&flags) {
            return Ok(None);
        }
        KeyEvents::start(info, clock).map(Some)
    }

    /// The events, in the order they arrived.
    pub fn events(&self) -> &Receiver<KeyEvent> {
        &self.events
    }
}

impl Drop for KeyEvents {
    fn drop(&mut self) {
        if let Some(socket) = &self.socket {
            let _ = socket.shutdown(Shutdown::Both);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn forward(mut conn: RawConn, clock: RunClock, events: Sender<KeyEvent>) {
    while let Ok(reply) = conn.read_reply() {
        let at_us = clock.now_us();
        let at_unix_us = crate::measure::serverview::unix_now_us();
        if let Some((event, key)) = parse_message(reply)
            && events
                .send(KeyEvent {
                    event,
                    key,
                    at_us,
                    at_unix_us,
                })
                .is_err()
        {
            return;
        }
    }
}

/// `message <channel> <key>` -> (event, key); the event is the channel's part after the last `:`.
fn parse_message(reply: Reply) -> Option<(String, Vec<u8>)> {
    let Reply::Array(Some(items)) = reply else {
        return None;
    };
    let mut items = items.into_iter();
    let kind = items.next()?;
    let (channel, key) = (items.next()?, items.next()?);
    match (kind, channel, key) {
        (Reply::Bulk(Some(kind)), Reply::Bulk(Some(channel)), Reply::Bulk(Some(key)))
            if kind == b"message" =>
        {
            let channel = String::from_utf8_lossy(&channel).into_owned();
            let event = channel.rsplit(':').next()?.to_string();
            Some((event, key))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_already_there_are_not_asked_for_again() {
        assert_eq!(missing_flags("", KEYEVENT_FLAGS), "Exe");
        assert_eq!(missing_flags("xE", KEYEVENT_FLAGS), "e");
        assert_eq!(missing_flags("AE", KEYEVENT_FLAGS), "");
        assert_eq!(missing_flags("AK", KEYEVENT_FLAGS), "E");
        assert_eq!(missing_flags("Kgx", KEYEVENT_FLAGS), "Ee");
    }

    #[test]
    fn a_message_names_its_event_and_key() {
        let bulk = |b: &[u8]| Reply::Bulk(Some(b.to_vec()));
        let message = Reply::Array(Some(vec![
            bulk(b"message"),
            bulk(b"__keyevent@0__:expired"),
            bulk(b"holprobe:1:h"),
        ]));
        assert_eq!(
            parse_message(message),
            Some(("expired".to_string(), b"holprobe:1:h".to_vec()))
        );
        let subscribed = Reply::Array(Some(vec![
            bulk(b"subscribe"),
            bulk(b"__keyevent@0__:expired"),
            Reply::Integer(1),
        ]));
        assert_eq!(parse_message(subscribed), None);
    }
}
