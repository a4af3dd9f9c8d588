//! One step on the wire: its command sent, its reply read (a whole read's thrown away as it
//! arrives), a cluster's redirects, and the timing and value columns of its record.

use std::time::Instant;

use super::{EXPIRE_TTL_MS, WriteStep};
use crate::measure::clock::RunClock;
use crate::measure::resp::{RawConn, Reply};
use crate::record::{WriteOp, WriteRecord};

/// Most redirects one write follows.
pub(super) const MAX_REDIRECTS: usize = 3;

/// A cluster's redirect of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirect {
    /// `MOVED slot host:port`: the slot lives there now.
    Moved,
    /// `ASK slot host:port`: the slot is migrating; ask there this once.
    Ask,
}

/// `MOVED 3999 127.0.0.1:6381` or `ASK 3999 127.0.0.1:6381`: the kind and the address.
pub(super) fn parse_redirect(error: &str) -> Option<(Redirect, String)> {
    let mut words = error.split_whitespace();
    let kind = match words.next()? {
        "MOVED" => Redirect::Moved,
        "ASK" => Redirect::Ask,
        _ => return None,
    };
    let _slot: u16 = words.next()?.parse().ok()?;
    let address = words.next()?;
    // `:6381` (an empty host) means the same host as the node that answered.
    Some((kind, address.to_string()))
}

/// Sends one step's command on `conn` (not a build's, nor an expiry's: those are exchanges of
/// their own).
pub(super) fn send_step(conn: &mut RawConn, step: &WriteStep, value: &[u8]) -> std::io::Result<()> {
    let key = step.key.as_bytes();
    let encode = crate::measure::resp::encode_command;
    match step.op {
        WriteOp::Overwrite if step.twin.is_some() => {
            let twin = step.twin.as_deref().unwrap_or_default();
            conn.send_raw(&encode(&[b"RENAME", twin.as_bytes(), key]))
        }
        WriteOp::Set | WriteOp::Overwrite | WriteOp::Build => {
            let len = usize::try_from(step.size_bytes)
                .unwrap_or(usize::MAX)
                .min(value.len());
            conn.send_set(key, &value[..len])
        }
        // The writer's plan holds no injections (those are `probe calibrate`'s).
        WriteOp::Delete | WriteOp::Inject => conn.send_raw(&encode(&[b"DEL", key])),
        WriteOp::Unlink => conn.send_raw(&encode(&[b"UNLINK", key])),
        WriteOp::Expire => conn.send_raw(&encode(&[
            b"PEXPIRE",
            key,
            EXPIRE_TTL_MS.to_string().as_bytes(),
        ])),
        // Its own exchange too ([`super::Writer::evict`]); sent alone, it only makes the key
        // one the server may evict.
        WriteOp::Evict => conn.send_raw(&encode(&[
            b"PEXPIRE",
            key,
            super::EVICT_TTL_MS.to_string().as_bytes(),
        ])),
        WriteOp::Read => {
            let (command, args) = step.shape.value_kind().read_command();
            let mut all: Vec<&[u8]> = vec![command.as_bytes(), key];
            all.extend(args.iter().map(|a| a.as_bytes()));
            conn.send_raw(&encode(&all))
        }
        WriteOp::Command => {
            let args: Vec<&[u8]> = step
                .command
                .iter()
                .flatten()
                .map(|arg| arg.as_bytes())
                .collect();
            conn.send_raw(&encode(&args))
        }
    }
}

/// Reads a step's reply: a read's is thrown away as it arrives (the client never holds the
/// value, so its own allocations stay out of the figures) and stands as the count of its
/// items; an error reply stays one.
pub(super) fn read_step_reply(conn: &mut RawConn, step: &WriteStep) -> std::io::Result<Reply> {
    if step.op != WriteOp::Read {
        return conn.read_reply();
    }
    // The reply's framing adds a few bytes per element (more for a stream's entries).
    let bound = step
        .size_bytes
        .saturating_mul(2)
        .saturating_add(step.shape.elements.saturating_mul(96))
        .saturating_add(1 << 20);
    let seen = conn.discard_reply(bound)?;
    Ok(match seen.error {
        Some(text) => Reply::Error(text),
        None => Reply::Integer(i64::try_from(seen.elements).unwrap_or(i64::MAX)),
    })
}

/// A step's window, and what it got.
pub(super) struct Timed {
    pub(super) start: Instant,
    pub(super) sent: Instant,
    pub(super) reply: Instant,
    pub(super) outcome: std::io::Result<Reply>,
}

impl Timed {
    /// An exchange that failed before its window opened: an empty window now.
    pub(super) fn failed(outcome: std::io::Result<Reply>) -> Timed {
        let now = Instant::now();
        Timed {
            start: now,
            sent: now,
            reply: now,
            outcome,
        }
    }
}

/// µs on the run's clock of a moment (0 before the clock's start).
pub(super) fn timed_us(clock: &RunClock, at: Instant) -> u64 {
    clock.us_at(at)
}

/// The value columns of a step's record: its kind, elements and element size.
pub(super) fn value_columns(step: &WriteStep) -> WriteRecord {
    WriteRecord::default().with_value_of(step)
}

/// The value columns of a record, from its step.
pub(super) trait WithValue {
    fn with_value_of(self, step: &WriteStep) -> Self;
}

impl WithValue for WriteRecord {
    fn with_value_of(mut self, step: &WriteStep) -> WriteRecord {
        self.value_type = Some(step.shape.kind.to_string());
        self.elements = Some(step.shape.elements);
        self.element_bytes = Some(step.shape.element_bytes);
        self
    }
}
