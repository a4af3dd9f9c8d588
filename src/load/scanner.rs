//! An incremental RESP2 reply scanner for the load clients and `populate`: bytes go in as they
//! arrive from a non-blocking socket, complete replies come out, and a bulk reply's payload is
//! counted and skipped, never copied. A reply may be split anywhere between two reads.
//!
//! Only the replies GET and SET can produce are understood (`+`, `-`, `:`, `$`); an array means
//! the stream is not what the tool sent, and is a protocol error.

use std::fmt;

/// The longest reply line (status, error, length) the scanner accepts before it calls the
/// stream broken.
const MAX_LINE: usize = 64 * 1024;

/// One complete reply, as far as the load needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scanned {
    /// `+OK` (`ok` true) or another status such as `+PONG`.
    Status {
        /// True for exactly `OK`.
        ok: bool,
    },
    /// `-ERR ...`: the text, cut to 200 bytes.
    Error(String),
    /// `:n`
    Integer,
    /// `$n`: a bulk string of `len_bytes` payload bytes (skipped).
    Bulk {
        /// Payload length, bytes.
        len_bytes: u64,
    },
    /// `$-1`: a nil bulk (GET of a missing key, SET NX of an existing one).
    Nil,
}

/// The stream did not parse as RESP replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RESP protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a reply's first line.
    Line,
    /// Skipping a bulk payload: bytes left including the trailing CRLF, and the payload length.
    Bulk { remaining: u64, len: u64 },
}

/// Scanner state of one connection.
#[derive(Debug)]
pub struct ReplyScanner {
    state: State,
    /// The start of a line split across reads.
    partial: Vec<u8>,
}

impl Default for ReplyScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Self {
        ReplyScanner {
            state: State::Line,
            partial: Vec::new(),
        }
    }

    /// Forgets any partial reply (after a reconnect).
    pub fn reset(&mut self) {
        self.state = State::Line;
        self.partial.clear();
    }

    /// True when no reply is partly read.
    pub fn is_idle(&self) -> bool {
        self.state == State::Line && self.partial.is_empty()
    }

    /// Feeds the bytes of one read; `on_reply` is called for each reply completed by them, in
    /// order.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        mut on_reply: impl FnMut(Scanned),
    ) -> Result<(), ProtocolError> {
        while !data.is_empty() {
            match self.state {
                State::Bulk { remaining, len } => {
                    let take = remaining.min(data.len() as u64);
                    data = &data[take as usize..];
                    if take == remaining {
                        self.state = State::Line;
                        on_reply(Scanned::Bulk { len_bytes: len });
                    } else {
                        self.state = State::Bulk {
                            remaining: remaining - take,
                            len,
                        };
                    }
                }
                State::Line => {
                    let Some(newline) = data.iter().position(|&b| b == b'\n') else {
                        if self.partial.len() + data.len() > MAX_LINE {
                            return Err(ProtocolError("reply line too long".into()));
                        }
                        self.partial.extend_from_slice(data);
                        return Ok(());
                    };
                    let (head, rest) = data.split_at(newline + 1);
                    data = rest;
                    let reply = if self.partial.is_empty() {
                        self.line(head)?
                    } else {
                        let mut line = std::mem::take(&mut self.partial);
                        line.extend_from_slice(head);
                        let reply = self.line(&line);
                        line.clear();
                        self.partial = line;
                        reply?
                    };
                    if let Some(reply) = reply {
                        on_reply(reply);
                    }
                }
            }
        }
        Ok(())
    }

    /// Handles one whole line, CRLF included. Returns the reply when the line completes it.
    fn line(&mut self, line: &[u8]) -> Result<Option<Scanned>, ProtocolError> {
        let body = line
            .strip_suffix(b"\r\n")
            .ok_or_else(|| ProtocolError("line not ended by CRLF".into()))?;
        let (&kind, rest) = body
            .split_first()
            .ok_or_else(|| ProtocolError("empty reply line".into()))?;
        match kind {
            b'+' => Ok(Some(Scanned::Status { ok: rest == b"OK" })),
            b'-' => {
                let cut = &rest[..rest.len().min(200)];
                Ok(Some(Scanned::Error(
                    String::from_utf8_lossy(cut).into_owned(),
                )))
            }
            b':' => Ok(Some(Scanned::Integer)),
            b'$' => {
                if rest == b"-1" {
                    return Ok(Some(Scanned::Nil));
                }
                let len = parse_len(rest)?;
                self.state = State::Bulk {
                    remaining: len + 2,
                    len,
                };
                Ok(None)
            }
            other => Err(ProtocolError(format!(
                "unexpected reply type '{}'",
                char::from(other).escape_default()
            ))),
        }
    }
}

fn parse_len(digits: &[u8]) -> Result<u64, ProtocolError> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ProtocolError("bad bulk length".into()));
    }
    Ok(digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(stream: &[u8], cut: usize) -> Vec<Scanned> {
        let mut scanner = ReplyScanner::new();
        let mut out = Vec::new();
        for piece in stream.chunks(cut) {
            scanner.feed(piece, |r| out.push(r)).unwrap();
        }
        assert!(scanner.is_idle());
        out
    }

    #[test]
    fn every_split_gives_the_same_replies() {
        let mut stream = Vec::new();
        stream.extend_from_slice(b"+OK\r\n$5\r\nhello\r\n$-1\r\n-ERR wrong type\r\n:42\r\n");
        stream.extend_from_slice(b"$0\r\n\r\n+PONG\r\n$3000\r\n");
        stream.extend(std::iter::repeat_n(b'\n', 3000));
        stream.extend_from_slice(b"\r\n");
        let expected = vec![
            Scanned::Status { ok: true },
            Scanned::Bulk { len_bytes: 5 },
            Scanned::Nil,
            Scanned::Error("ERR wrong type".into()),
            Scanned::Integer,
            Scanned::Bulk { len_bytes: 0 },
            Scanned::Status { ok: false },
            Scanned::Bulk { len_bytes: 3000 },
        ];
        for cut in [1, 2, 3, 5, 7, 64, 4096, stream.len()] {
            assert_eq!(scan_in_pieces(&stream, cut), expected, "cut {cut}");
        }
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        for bad in [&b"*2\r\n"[..], b"?x\r\n", b"$abc\r\n", b"+OK\n", b"\r\n"] {
            let mut scanner = ReplyScanner::new();
            assert!(scanner.feed(bad, |_| {}).is_err(), "{bad:?}");
        }
        let mut scanner = ReplyScanner::new();
        let long = vec![b'+'; MAX_LINE + 1];
        assert!(scanner.feed(&long, |_| {}).is_err());
    }
}
