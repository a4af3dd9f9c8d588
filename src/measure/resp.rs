//! A minimal RESP2 connection, written by hand for the two places where a general client costs
//! what the tool measures: the writer sends a value straight from the shared buffer (no copy into
//! a command buffer, so client memory stays near the largest value) and stamps the moment its last
//! byte went to the kernel; the probes send a pre-encoded command and stamp send and reply times
//! right at the syscalls.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::measure::target::ConnInfo;

/// A reply from the server, as far as the tool needs to understand it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`: the server's error text.
    Error(String),
    /// `:n`
    Integer(i64),
    /// `$n` bulk string (`None` for a nil bulk).
    Bulk(Option<Vec<u8>>),
    /// `*n` array (`None` for a nil array).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The server's error text, if this is an error reply.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reply::Error(text) => Some(text),
            _ => None,
        }
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A plain or TLS byte stream to the server.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(sock) => sock,
            Stream::Tls(tls) => &tls.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(sock) => sock.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(sock) => sock.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(sock) => sock.write_all(buf),
            // rustls buffers what it encrypts: flush so the bytes reach the kernel now.
            Stream::Tls(tls) => tls.write_all(buf).and_then(|()| tls.flush()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(sock) => sock.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

/// Memory set aside up front for a bulk reply; the rest grows as its bytes arrive.
const BULK_PREALLOC: usize = 64 * 1024 * 1024;

/// Size of the slices a large value is written in (see [`RawConn::send_set`]).
pub const WRITE_SLICE_BYTES: usize = 256 * 1024;

/// One connection to the server, blocking, with its own small read buffer.
///
/// After any I/O or protocol error the connection refuses every further use with that error:
/// a reply that timed out may still arrive, and the next command would read it as its own.
pub struct RawConn {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    broken: Option<(io::ErrorKind, String)>,
}

impl RawConn {
    /// Connects, authenticates and selects the database, so nothing large is ever sent by an
    /// unauthenticated client.
    pub fn connect(info: &ConnInfo) -> Result<RawConn> {
        let socket = info.tcp_connect()?;
        let stream = match &info.tls {
            None => Stream::Plain(socket),
            Some(tls) => {
                let config = tls.client_config()?;
                let name = crate::measure::target::TlsSettings::server_name(&info.host)?;
                let session = rustls::ClientConnection::new(config, name)
                    .with_context(|| format!("starting TLS with {info}"))?;
                let mut stream = rustls::StreamOwned::new(session, socket);
                while stream.conn.is_handshaking() {
                    stream
                        .conn
                        .complete_io(&mut stream.sock)
                        .with_context(|| format!("TLS handshake with {info}"))?;
                }
                Stream::Tls(Box::new(stream))
            }
        };
        let mut conn = RawConn {
            stream,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            broken: None,
        };
        if let Some(password) = &info.password {
            let reply = match &info.username {
                Some(user) => conn.command(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => conn.command(&[b"AUTH", password.as_bytes()]),
            }
            .with_context(|| format!("authenticating to {info}"))?;
            if let Some(err) = reply.error() {
                bail!("authentication to {info} failed: {err}");
            }
        }
        if info.db != 0 {
            let reply = conn
                .command(&[b"SELECT", info.db.to_string().as_bytes()])
                .with_context(|| format!("selecting db {} on {info}", info.db))?;
            if let Some(err) = reply.error() {
                bail!("SELECT {} on {info} failed: {err}", info.db);
            }
        }
        if info.readonly {
            let reply = conn
                .command(&[b"READONLY"])
                .with_context(|| format!("READONLY on {info}"))?;
            if let Some(err) = reply.error() {
                bail!("READONLY on {info} failed: {err}");
            }
        }
        Ok(conn)
    }

    /// Sets the limit on waiting for a reply (`None`: wait forever).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.socket().set_read_timeout(timeout)
    }

    /// Sets the limit on one blocked write (`None`: wait forever).
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.socket().set_write_timeout(timeout)
    }

    /// The underlying socket, e.g. to shut it down from another thread.
    pub fn try_clone_stream(&self) -> io::Result<TcpStream> {
        self.stream.socket().try_clone()
    }

    /// Gives up the connection's read buffer and returns its socket, authenticated and on the
    /// right database, e.g. for a non-blocking event loop (the load clients). Fails if the
    /// server sent bytes that were not read.
    pub fn into_stream(self) -> io::Result<TcpStream> {
        if self.start != self.end {
            return Err(protocol_error("unread bytes after the handshake"));
        }
        match self.stream {
            Stream::Plain(socket) => Ok(socket),
            Stream::Tls(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a TLS connection cannot be handed to a plain-socket event loop",
            )),
        }
    }

    /// Gives up the connection for the pipelined probes: its socket, its TLS session (if any),
    /// and any bytes the server sent that were not read yet.
    pub fn into_parts(self) -> (TcpStream, Option<rustls::ClientConnection>, Vec<u8>) {
        let unread = self.buf[self.start..self.end].to_vec();
        match self.stream {
            Stream::Plain(socket) => (socket, None, unread),
            Stream::Tls(tls) => {
                let tls = *tls;
                (tls.sock, Some(tls.conn), unread)
            }
        }
    }

    /// Sends pre-encoded bytes.
    #[inline]
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.usable()?;
        let result = self.stream.write_all(bytes);
        self.note(result)
    }

    /// The error that broke this connection, if one did: it cannot be used any more.
    pub fn broken(&self) -> Option<io::Error> {
        self.usable().err()
    }

    /// The error that broke this connection earlier, if one did.
    fn usable(&self) -> io::Result<()> {
        match &self.broken {
            None => Ok(()),
            Some((kind, text)) => Err(io::Error::new(
                *kind,
                format!("{text} (earlier on this connection, which cannot be used since)"),
            )),
        }
    }

    /// Remembers an error: the connection is out of step with the server from now on.
    fn note<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        match result {
            Ok(value) => Ok(value),
            Err(err) => {
                // A socket timeout reads "Resource temporarily unavailable": say what it means.
                let err = match err.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                        io::Error::new(err.kind(), "the server did not answer within --timeout")
                    }
                    _ => err,
                };
                if self.broken.is_none() {
                    self.broken = Some((err.kind(), err.to_string()));
                }
                Err(err)
            }
        }
    }

    /// Sends a command and reads its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.send_raw(&encode_command(args))?;
        self.read_reply()
    }

    /// Sends `SET key value` with the value written straight from the caller's buffer.
    /// Returns when the last byte has been handed to the kernel.
    pub fn send_set(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.usable()?;
        let result = self.send_set_unchecked(key, value);
        self.note(result)
    }

    fn send_set_unchecked(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let mut header = Vec::with_capacity(64 + key.len());
        header.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
        header.extend_from_slice(format!("${}\r\n", key.len()).as_bytes());
        header.extend_from_slice(key);
        header.extend_from_slice(format!("\r\n${}\r\n", value.len()).as_bytes());
        self.stream.write_all(&header)?;
        // In slices: every write(2) that returns is a point where the kernel can switch to a
        // probe thread that is due; one call for the whole value keeps a core in the kernel for
        // as long as the socket accepts data (figures in the README, "Speed and memory").
        for part in value.chunks(WRITE_SLICE_BYTES) {
            self.stream.write_all(part)?;
        }
        self.stream.write_all(b"\r\n")
    }

    /// Reads one complete reply.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        self.usable()?;
        let result = self.read_reply_at(0);
        self.note(result)
    }

    fn read_reply_at(&mut self, depth: usize) -> io::Result<Reply> {
        let line = self.read_line()?;
        match parse_header(&line)? {
            Header::Done(reply) => Ok(reply),
            Header::Bulk(len) => {
                // The memory grows with the bytes that arrive, not with what the header
                // claims: a bogus length costs nothing until the server really sends it.
                let mut data = Vec::new();
                self.read_bulk(len + 2, &mut data)?;
                if !data.ends_with(b"\r\n") {
                    return Err(protocol_error("bulk reply without CRLF"));
                }
                data.truncate(len);
                Ok(Reply::Bulk(Some(data)))
            }
            Header::Array(len) => {
                if depth >= ReplyLimits::CONTROL.max_depth {
                    return Err(protocol_error("arrays nested too deep"));
                }
                let mut items = Vec::with_capacity(len.min(1024));
                for _ in 0..len {
                    items.push(self.read_reply_at(depth + 1)?);
                }
                Ok(Reply::Array(Some(items)))
            }
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let n = self.stream.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        self.end += n;
        Ok(())
    }

    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        // Where the search for CRLF goes on after more bytes came (never rescans).
        let mut scanned = 0;
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some(pos) = pending[scanned..].windows(2).position(|w| w == b"\r\n") {
                let end = scanned + pos;
                let line = pending[..end].to_vec();
                self.start += end + 2;
                return Ok(line);
            }
            if pending.len() > ReplyLimits::CONTROL.max_line {
                return Err(protocol_error("reply line too long"));
            }
            scanned = pending.len().saturating_sub(1);
            self.fill()?;
        }
    }

    /// Appends exactly `len` bytes of the reply to `out`, growing it as they arrive.
    fn read_bulk(&mut self, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        out.reserve(len.min(BULK_PREALLOC));
        while out.len() < len {
            if self.start == self.end {
                self.fill()?;
            }
            let n = (self.end - self.start).min(len - out.len());
            out.extend_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
        }
        Ok(())
    }
}

/// Bounds on a reply parsed by [`parse_reply`]: a misbehaving server cannot make the reader
/// allocate or recurse without limit.
#[derive(Debug, Clone, Copy)]
pub struct ReplyLimits {
    /// Longest status, error or length line, bytes.
    pub max_line: usize,
    /// Longest bulk string, bytes.
    pub max_bulk: usize,
    /// Deepest nesting of arrays.
    pub max_depth: usize,
    /// Most elements of one array.
    pub max_array: usize,
}

impl ReplyLimits {
    /// For [`RawConn::read_reply`]: the writer's and control commands (INFO, SLOWLOG, a GET of a
    /// large value). A bulk may be as long as the server sends (its memory grows as the bytes
    /// arrive); the server's own replies nest three or four deep at most.
    pub const CONTROL: ReplyLimits = ReplyLimits {
        max_line: 1024 * 1024,
        max_bulk: usize::MAX,
        max_depth: 32,
        max_array: usize::MAX,
    };

    /// For the probes' replies (`+PONG`, a short GET value, an error line).
    pub const PROBE: ReplyLimits = ReplyLimits {
        max_line: 64 * 1024,
        max_bulk: 1024 * 1024,
        max_depth: 4,
        max_array: 16,
    };
}

/// Parses one complete reply at the start of `buf` without blocking: `Ok(None)` when `buf` holds
/// only part of it (read more and call again), `Ok(Some((reply, bytes used)))` otherwise. The
/// pipelined probes feed it whatever a read returned.
pub fn parse_reply(buf: &[u8], limits: ReplyLimits) -> io::Result<Option<(Reply, usize)>> {
    parse_at(buf, 0, limits, 0)
}

fn parse_at(
    buf: &[u8],
    at: usize,
    limits: ReplyLimits,
    depth: usize,
) -> io::Result<Option<(Reply, usize)>> {
    let rest = &buf[at..];
    let scan = &rest[..rest.len().min(limits.max_line + 2)];
    let Some(pos) = scan.windows(2).position(|w| w == b"\r\n") else {
        if rest.len() > limits.max_line + 2 {
            return Err(protocol_error("reply line too long"));
        }
        return Ok(None);
    };
    let after = at + pos + 2;
    match parse_header(&rest[..pos])? {
        Header::Done(reply) => Ok(Some((reply, after))),
        Header::Bulk(len) => {
            if len > limits.max_bulk {
                return Err(protocol_error("bulk reply larger than expected"));
            }
            if buf.len() < after + len + 2 {
                return Ok(None);
            }
            if &buf[after + len..after + len + 2] != b"\r\n" {
                return Err(protocol_error("bulk reply without CRLF"));
            }
            Ok(Some((
                Reply::Bulk(Some(buf[after..after + len].to_vec())),
                after + len + 2,
            )))
        }
        Header::Array(len) => {
            if depth >= limits.max_depth {
                return Err(protocol_error("arrays nested too deep"));
            }
            // A count past the limit is rejected before anything is allocated for it.
            if len > limits.max_array {
                return Err(protocol_error("array reply larger than expected"));
            }
            let mut items = Vec::with_capacity(len.min(64));
            let mut next = after;
            for _ in 0..len {
                match parse_at(buf, next, limits, depth + 1)? {
                    Some((item, end)) => {
                        items.push(item);
                        next = end;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), next)))
        }
    }
}

/// The first line of a reply, decoded: a whole reply, or the length of the bulk string or
/// array that follows. Shared by the blocking reader ([`RawConn::read_reply`]) and the
/// incremental one ([`parse_reply`]).
enum Header {
    /// A status, error, integer, or nil bulk or array: nothing follows.
    Done(Reply),
    /// A bulk string of this many bytes (then CRLF) follows.
    Bulk(usize),
    /// An array of this many replies follows.
    Array(usize),
}

fn parse_header(line: &[u8]) -> io::Result<Header> {
    let (&kind, body) = line
        .split_first()
        .ok_or_else(|| protocol_error("empty reply line"))?;
    let text = || String::from_utf8_lossy(body).into_owned();
    let number = |what: &str| -> io::Result<i64> {
        std::str::from_utf8(body)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| protocol_error(what))
    };
    // A negative length is nil; one that does not fit this machine is an error.
    let length = |what: &str| -> io::Result<Option<usize>> {
        let len = number(what)?;
        if len < 0 {
            return Ok(None);
        }
        usize::try_from(len)
            .map(Some)
            .map_err(|_| protocol_error(what))
    };
    Ok(match kind {
        b'+' => Header::Done(Reply::Status(text())),
        b'-' => Header::Done(Reply::Error(text())),
        b':' => Header::Done(Reply::Integer(number("bad integer reply")?)),
        b'$' => match length("bad bulk length")? {
            None => Header::Done(Reply::Bulk(None)),
            Some(len) => Header::Bulk(len),
        },
        b'*' => match length("bad array length")? {
            None => Header::Done(Reply::Array(None)),
            Some(len) => Header::Array(len),
        },
        _ => return Err(protocol_error("unknown reply type")),
    })
}

fn protocol_error(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("RESP protocol error: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Option<(Reply, usize)>> {
        parse_reply(bytes, ReplyLimits::PROBE)
    }

    #[test]
    fn parses_whole_replies_and_waits_for_partial_ones() {
        assert_eq!(
            parse(b"+PONG\r\n+PO").unwrap(),
            Some((Reply::Status("PONG".into()), 7))
        );
        assert_eq!(parse(b"+PO").unwrap(), None);
        assert_eq!(parse(b"$5\r\nhel").unwrap(), None);
        assert_eq!(
            parse(b"$5\r\nhello\r\n").unwrap(),
            Some((Reply::Bulk(Some(b"hello".to_vec())), 11))
        );
        assert_eq!(parse(b"$-1\r\n").unwrap(), Some((Reply::Bulk(None), 5)));
        assert_eq!(
            parse(b"-ERR x\r\n").unwrap(),
            Some((Reply::Error("ERR x".into()), 8))
        );
        assert_eq!(
            parse(b"*2\r\n:1\r\n$1\r\na\r\n").unwrap(),
            Some((
                Reply::Array(Some(vec![
                    Reply::Integer(1),
                    Reply::Bulk(Some(b"a".to_vec()))
                ])),
                15
            ))
        );
        assert_eq!(parse(b"*2\r\n:1\r\n").unwrap(), None);
    }

    #[test]
    fn hostile_replies_are_errors_not_allocations() {
        assert!(parse(b"$9223372036854775807\r\n").is_err());
        assert!(parse(b"*9223372036854775807\r\n").is_err());
        assert!(parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").is_err());
        assert!(parse(&vec![b'+'; 70 * 1024]).is_err());
        assert!(parse(b"$2\r\nabcd").is_err());
        assert!(parse(b"?\r\n").is_err());
    }

    /// A peer that sends `bytes` to whoever connects, then hangs up: the hostile server a real
    /// one never is, for the reader's bounds.
    fn hostile_peer(bytes: Vec<u8>) -> RawConn {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.write_all(&bytes);
        });
        RawConn::connect(&ConnInfo::loopback(port)).unwrap()
    }

    #[test]
    fn a_bogus_bulk_length_is_an_error_not_an_allocation() {
        let mut conn = hostile_peer(b"$8000000000\r\nabc".to_vec());
        let err = conn.read_reply().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        let mut conn = hostile_peer(b"$9223372036854775807\r\n".to_vec());
        assert!(conn.read_reply().is_err());
    }

    #[test]
    fn deep_nesting_and_endless_lines_are_refused() {
        let mut nested = b"*1\r\n".repeat(40);
        nested.extend_from_slice(b":1\r\n");
        let err = hostile_peer(nested).read_reply().unwrap_err();
        assert!(err.to_string().contains("nested too deep"), "{err}");
        let err = hostile_peer(vec![b'+'; 2 * ReplyLimits::CONTROL.max_line])
            .read_reply()
            .unwrap_err();
        assert!(err.to_string().contains("line too long"), "{err}");
        // Within the bounds, a reply split anywhere still reads whole.
        let mut conn = hostile_peer(b"*2\r\n$3\r\nabc\r\n+OK\r\n".to_vec());
        assert_eq!(
            conn.read_reply().unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"abc".to_vec())),
                Reply::Status("OK".into())
            ]))
        );
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(encode_command(&[b"PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(
            encode_command(&[b"GET", b"k"]),
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        );
    }
}
