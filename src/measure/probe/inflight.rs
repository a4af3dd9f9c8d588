//! The probes outstanding on one pipelined connection, and the in-order matching of replies to
//! them. Pure: bytes and timestamps in, probe records out, so every awkward case (replies in
//! bursts, an error reply among them, a reset with probes outstanding, a reply that never comes)
//! is tested without a server.
//!
//! RESP has no request ids: the server answers the commands of one connection in the order it
//! read them, so the n-th reply belongs to the n-th probe sent.

use std::collections::VecDeque;
use std::io;

use crate::measure::resp::{ParseResume, Reply, ReplyLimits, parse_reply_resuming};
use crate::record::{ProbeCmd, ProbeRecord};

/// The most bytes of unfinished replies a connection may hold: a probe's reply is a few dozen,
/// and one within [`ReplyLimits::PROBE`] far less than this.
const MAX_PENDING_BYTES: usize = 256 * 1024;

/// A probe written to the connection and not answered yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outstanding {
    /// Sequence number within the thread.
    pub seq: u64,
    /// When the schedule said it should go, µs on the run's clock.
    pub intended_us: u64,
    /// When it was handed to the kernel, µs.
    pub sent_us: u64,
}

/// One read's worth of bytes and when they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The best evidence of when the bytes reached the host, µs: the kernel's receive stamp
    /// where there is one, else the read itself.
    pub reply_us: u64,
    /// When the probe thread read them, µs.
    pub read_us: u64,
}

/// The outstanding probes of one connection, oldest first, and the bytes of a reply not yet
/// complete.
#[derive(Debug)]
pub struct InFlight {
    thread: u16,
    cmd: ProbeCmd,
    /// The reply every probe should get ([`expected_reply`]).
    expected: Vec<u8>,
    queue: VecDeque<Outstanding>,
    pending: Vec<u8>,
    /// Where parsing the unfinished reply at the start of `pending` stopped.
    resume: ParseResume,
}

impl InFlight {
    /// Nothing outstanding yet.
    pub fn new(thread: u16, cmd: ProbeCmd) -> Self {
        InFlight {
            thread,
            cmd,
            expected: expected_reply(cmd),
            queue: VecDeque::new(),
            pending: Vec::new(),
            resume: ParseResume::default(),
        }
    }

    /// A probe was written to the connection.
    pub fn sent(&mut self, probe: Outstanding) {
        self.queue.push_back(probe);
    }

    /// Probes waiting for their reply.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no probe waits for a reply.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// True when part of a reply has been read and the rest has not.
    pub fn has_partial_reply(&self) -> bool {
        !self.pending.is_empty()
    }

    /// When the oldest outstanding probe was sent (run clock, µs).
    pub fn oldest_sent_us(&self) -> Option<u64> {
        self.queue.front().map(|p| p.sent_us)
    }

    /// True when the oldest outstanding probe was sent more than `timeout_us` before `now_us`.
    pub fn overdue(&self, now_us: u64, timeout_us: u64) -> bool {
        self.queue
            .front()
            .is_some_and(|p| now_us.saturating_sub(p.sent_us) > timeout_us)
    }

    /// Takes the bytes of one read: every reply they complete is matched to the oldest
    /// outstanding probe and pushed to `done`, stamped with `arrival` (a reply's time is that of
    /// the read that delivered its last byte). A reply with no probe waiting for it, or bytes
    /// that are not RESP, are a protocol error: the connection cannot be trusted any more.
    pub fn received(
        &mut self,
        bytes: &[u8],
        arrival: Arrival,
        done: &mut Vec<ProbeRecord>,
    ) -> io::Result<()> {
        if self.pending.len() + bytes.len() > MAX_PENDING_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "RESP protocol error: the server sent a reply far longer than a probe's",
            ));
        }
        // The usual case, every reply the expected one and none cut by a read, needs no parser:
        // the record is the parser's for those bytes, without the allocations of its `Reply`.
        let mut bytes = bytes;
        while self.pending.is_empty() && bytes.starts_with(&self.expected) {
            bytes = &bytes[self.expected.len()..];
            let probe = self.queue.pop_front().ok_or_else(unasked)?;
            done.push(self.record(probe, arrival, true, None));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        self.pending.extend_from_slice(bytes);
        let mut used = 0;
        while let Some((reply, n)) =
            parse_reply_resuming(&self.pending[used..], ReplyLimits::PROBE, &mut self.resume)?
        {
            used += n;
            let probe = self.queue.pop_front().ok_or_else(unasked)?;
            done.push(self.answered(probe, &reply, arrival));
        }
        self.pending.drain(..used);
        Ok(())
    }

    /// The connection is gone: every outstanding probe is recorded as failed with `error`, and
    /// the half-read reply is dropped.
    pub fn fail_all(&mut self, error: &str, done: &mut Vec<ProbeRecord>) {
        self.pending.clear();
        self.resume = ParseResume::default();
        for probe in self.queue.drain(..) {
            done.push(ProbeRecord {
                thread: self.thread,
                seq: probe.seq,
                cmd: self.cmd,
                intended_us: probe.intended_us,
                sent_us: probe.sent_us,
                reply_us: None,
                read_us: None,
                latency_us: None,
                ok: false,
                error: Some(error.to_string()),
            });
        }
    }

    fn answered(&self, probe: Outstanding, reply: &Reply, arrival: Arrival) -> ProbeRecord {
        let (ok, error) = match (reply, self.cmd) {
            (Reply::Error(text), _) => (false, Some(text.clone())),
            (Reply::Status(s), ProbeCmd::Ping) if s == "PONG" => (true, None),
            (Reply::Bulk(Some(_)), ProbeCmd::Get) => (true, None),
            // Another client removed the probes' key (FLUSHALL, FLUSHDB, a DEL): said as such,
            // not as "unexpected reply Bulk(None)".
            (Reply::Bulk(None), ProbeCmd::Get) => (
                false,
                Some(
                    "the probe key is gone (GET answered nil: another client deleted it, or ran FLUSHALL or FLUSHDB)"
                        .to_string(),
                ),
            ),
            (other, _) => (false, Some(format!("unexpected reply {other:?}"))),
        };
        self.record(probe, arrival, ok, error)
    }

    fn record(
        &self,
        probe: Outstanding,
        arrival: Arrival,
        ok: bool,
        error: Option<String>,
    ) -> ProbeRecord {
        // A reply cannot arrive before its command left; a kernel stamp converted between
        // clocks could say so by a few µs.
        let reply_us = arrival
            .reply_us
            .clamp(probe.sent_us, arrival.read_us.max(probe.sent_us));
        ProbeRecord {
            thread: self.thread,
            seq: probe.seq,
            cmd: self.cmd,
            intended_us: probe.intended_us,
            sent_us: probe.sent_us,
            reply_us: Some(reply_us),
            read_us: Some(arrival.read_us),
            latency_us: Some(reply_us.saturating_sub(probe.intended_us)),
            ok,
            error,
        }
    }
}

/// The reply a probe gets from a server that is well: `+PONG` to PING, the probe value to GET
/// (the run stores [`super::PROBE_VALUE`] under the key GET probes read).
pub fn expected_reply(cmd: ProbeCmd) -> Vec<u8> {
    match cmd {
        ProbeCmd::Ping => b"+PONG\r\n".to_vec(),
        ProbeCmd::Get => format!(
            "${}\r\n{}\r\n",
            super::PROBE_VALUE.len(),
            super::PROBE_VALUE
        )
        .into_bytes(),
    }
}

fn unasked() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the server sent a reply no probe was waiting for",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(flight: &mut InFlight, seq: u64, intended_us: u64) {
        flight.sent(Outstanding {
            seq,
            intended_us,
            sent_us: intended_us + 2,
        });
    }

    fn at(us: u64) -> Arrival {
        Arrival {
            reply_us: us,
            read_us: us + 5,
        }
    }

    #[test]
    fn replies_in_a_burst_are_matched_in_order_with_their_reads_stamp() {
        let mut flight = InFlight::new(3, ProbeCmd::Ping);
        for seq in 0..4 {
            sent(&mut flight, seq, 1_000 + seq * 100);
        }
        let mut done = Vec::new();
        // The server was busy: three replies come in one read, the fourth split over two.
        flight
            .received(b"+PONG\r\n+PONG\r\n+PONG\r\n+PO", at(50_000), &mut done)
            .unwrap();
        assert_eq!(done.len(), 3);
        assert_eq!(flight.len(), 1);
        flight.received(b"NG\r\n", at(50_400), &mut done).unwrap();
        assert!(flight.is_empty());
        let seqs: Vec<u64> = done.iter().map(|p| p.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        assert!(done.iter().all(|p| p.ok && p.thread == 3));
        assert_eq!(done[0].latency_us, Some(49_000));
        assert_eq!(done[2].latency_us, Some(48_800));
        // The split reply takes the time of the read that completed it.
        assert_eq!(done[3].reply_us, Some(50_400));
        assert_eq!(done[3].read_us, Some(50_405));
        assert_eq!(done[3].latency_us, Some(50_400 - 1_300));
    }

    #[test]
    fn an_error_reply_in_the_middle_fails_only_its_own_probe() {
        let mut flight = InFlight::new(0, ProbeCmd::Get);
        for seq in 0..3 {
            sent(&mut flight, seq, seq * 1000);
        }
        let mut done = Vec::new();
        flight
            .received(
                b"$3\r\nabc\r\n-LOADING server is loading\r\n$3\r\nabc\r\n",
                at(3_000),
                &mut done,
            )
            .unwrap();
        assert_eq!(done.len(), 3);
        assert!(done[0].ok && done[2].ok);
        assert!(!done[1].ok);
        assert_eq!(done[1].error.as_deref(), Some("LOADING server is loading"));
        // An error reply is still a reply: it has a time.
        assert_eq!(done[1].reply_us, Some(3_000));
    }

    #[test]
    fn a_reset_connection_fails_every_outstanding_probe_and_nothing_else() {
        let mut flight = InFlight::new(1, ProbeCmd::Ping);
        for seq in 0..5 {
            sent(&mut flight, seq, seq * 1000);
        }
        let mut done = Vec::new();
        flight
            .received(b"+PONG\r\n+PONG\r\n+PO", at(4_500), &mut done)
            .unwrap();
        flight.fail_all("connection reset by peer", &mut done);
        assert_eq!(done.len(), 5);
        assert!(done[..2].iter().all(|p| p.ok));
        assert!(done[2..].iter().all(|p| !p.ok
            && p.reply_us.is_none()
            && p.latency_us.is_none()
            && p.error.as_deref() == Some("connection reset by peer")));
        assert!(flight.is_empty());
        // The half-read reply went with the connection: a new one starts clean.
        sent(&mut flight, 5, 6_000);
        flight.received(b"+PONG\r\n", at(6_100), &mut done).unwrap();
        assert_eq!(done.last().unwrap().seq, 5);
        assert!(done.last().unwrap().ok);
    }

    #[test]
    fn a_reply_that_never_comes_is_overdue_after_the_timeout() {
        let mut flight = InFlight::new(0, ProbeCmd::Ping);
        assert!(!flight.overdue(10_000_000, 1_000_000));
        sent(&mut flight, 0, 1_000);
        sent(&mut flight, 1, 2_000);
        // Sent at 1_002: overdue strictly after 1 s.
        assert!(!flight.overdue(1_001_002, 1_000_000));
        assert!(flight.overdue(1_001_003, 1_000_000));
        // Once the oldest is answered, the next one's age counts.
        let mut done = Vec::new();
        flight
            .received(b"+PONG\r\n", at(1_001_003), &mut done)
            .unwrap();
        assert!(!flight.overdue(1_001_003, 1_000_000));
        // ... which was sent at 2_002.
        assert!(flight.overdue(1_002_003, 1_000_000));
    }

    #[test]
    fn a_reply_nobody_asked_for_or_garbage_is_a_protocol_error() {
        let mut flight = InFlight::new(0, ProbeCmd::Ping);
        let mut done = Vec::new();
        assert!(flight.received(b"+PONG\r\n", at(10), &mut done).is_err());
        sent(&mut flight, 0, 0);
        assert!(
            flight
                .received(b"$99999999999\r\n", at(10), &mut done)
                .is_err()
        );
    }

    #[test]
    fn the_expected_reply_whole_gives_the_record_the_parser_gives_it_in_pieces() {
        for cmd in [ProbeCmd::Ping, ProbeCmd::Get] {
            let reply = expected_reply(cmd);
            let (mut whole, mut pieces) = (InFlight::new(1, cmd), InFlight::new(1, cmd));
            for seq in 0..3 {
                sent(&mut whole, seq, 1_000 + seq * 100);
                sent(&mut pieces, seq, 1_000 + seq * 100);
            }
            let (mut from_whole, mut from_pieces) = (Vec::new(), Vec::new());
            // Two whole replies and the start of a third in one read (no parser for the first
            // two); byte by byte (the parser for each).
            let mut bytes = [reply.clone(), reply.clone(), reply.clone()].concat();
            let cut = 2 * reply.len() + 1;
            whole
                .received(&bytes[..cut], at(9_000), &mut from_whole)
                .unwrap();
            assert_eq!((from_whole.len(), whole.has_partial_reply()), (2, true));
            whole
                .received(&bytes[cut..], at(9_000), &mut from_whole)
                .unwrap();
            for byte in bytes.chunks(1) {
                pieces.received(byte, at(9_000), &mut from_pieces).unwrap();
            }
            assert_eq!(from_whole, from_pieces);
            assert!(
                from_whole.iter().all(|p| p.ok && p.error.is_none()),
                "{cmd:?}"
            );
            // A whole reply no probe waits for is still refused.
            bytes.truncate(reply.len());
            assert!(whole.received(&bytes, at(9_100), &mut from_whole).is_err());
        }
        // Another value than the probe value is a good GET reply too (the parser says so).
        let mut flight = InFlight::new(0, ProbeCmd::Get);
        sent(&mut flight, 0, 0);
        let mut done = Vec::new();
        flight.received(b"$2\r\nab\r\n", at(10), &mut done).unwrap();
        assert!(done[0].ok);
    }

    #[test]
    fn a_kernel_stamp_never_precedes_the_send_nor_follows_the_read() {
        let mut flight = InFlight::new(0, ProbeCmd::Ping);
        sent(&mut flight, 0, 1_000); // sent at 1_002
        sent(&mut flight, 1, 2_000); // sent at 2_002
        let mut done = Vec::new();
        let early = Arrival {
            reply_us: 990,
            read_us: 1_050,
        };
        flight.received(b"+PONG\r\n", early, &mut done).unwrap();
        assert_eq!(done[0].reply_us, Some(1_002));
        let late = Arrival {
            reply_us: 9_000,
            read_us: 2_100,
        };
        flight.received(b"+PONG\r\n", late, &mut done).unwrap();
        assert_eq!(done[1].reply_us, Some(2_100));
    }
}
