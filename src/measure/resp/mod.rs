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
    encode_command_into(&mut out, args);
    out
}

/// Appends a command, as [`encode_command`] encodes it, to `out`: a pipeline of many small
/// commands (the key scan's) builds one buffer without an allocation per command.
pub fn encode_command_into(out: &mut Vec<u8>, args: &[&[u8]]) {
    push_header(out, b'*', args.len());
    for arg in args {
        push_header(out, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// `*3\r\n` or `$5\r\n`: a RESP header with its decimal length, written without formatting.
fn push_header(out: &mut Vec<u8>, marker: u8, len: usize) {
    out.push(marker);
    crate::units::push_decimal(len as u64, 0, out);
    out.extend_from_slice(b"\r\n");
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

/// What a reply may hold beyond its largest bulk string (lines, lengths, small elements).
const REPLY_MARGIN_BYTES: usize = 1024 * 1024;

/// Size of the slices a large value is written in (see [`RawConn::send_set`]).
pub const WRITE_SLICE_BYTES: usize = 256 * 1024;

/// One connection to the server, blocking, with its own small read buffer.
///
/// After any I/O or protocol error the connection refuses every further use with that error:
/// a reply that timed out may still arrive, and the next command would read it as its own.
///
/// Replies are read within [`ReplyLimits`] ([`ReplyLimits::CONTROL`] unless
/// [`RawConn::set_limits`] says otherwise): what a server announces is checked before anything
/// is allocated for it.
pub struct RawConn {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    broken: Option<(io::ErrorKind, String)>,
    limits: ReplyLimits,
    /// Bytes the reply being read may still take (see [`ReplyLimits::max_reply_bytes`]).
    reply_budget: usize,
    /// The most the reply being read may take in all, for the message when it takes more.
    reply_bound: usize,
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
                // The handshake is part of connecting: bounded by --connect-timeout (a plain
                // port, answering no TLS, kept the tool silent for --timeout).
                let limits = |limit| {
                    socket
                        .set_read_timeout(Some(limit))
                        .and_then(|()| socket.set_write_timeout(Some(limit)))
                        .context("setting the socket timeouts")
                };
                limits(info.connect_timeout)?;
                let mut stream = rustls::StreamOwned::new(session, socket.try_clone()?);
                while stream.conn.is_handshaking() {
                    stream
                        .conn
                        .complete_io(&mut stream.sock)
                        .map_err(|err| crate::measure::target::handshake_error(info, err))?;
                }
                limits(info.command_timeout)?;
                Stream::Tls(Box::new(stream))
            }
        };
        let mut conn = RawConn {
            stream,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            broken: None,
            limits: ReplyLimits::CONTROL,
            reply_budget: 0,
            reply_bound: 0,
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
                return Err(crate::measure::target::db_refused(info, err));
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

    /// [`RawConn::connect`], then names the connection `name` (`CLIENT SETNAME`) where the
    /// server lets it: a stall the server logged as one of its commands is then known as the
    /// tool's ([`crate::analyze::naming::TOOL_CLIENT_NAME_PREFIX`]). A server that refuses the
    /// name (CLIENT renamed away, denied by ACL) is fine.
    pub fn connect_named(info: &ConnInfo, name: &str) -> Result<RawConn> {
        let mut conn = RawConn::connect(info)?;
        let _ = conn.command(&[b"CLIENT", b"SETNAME", name.as_bytes()]);
        Ok(conn)
    }

    /// Sets the bounds every later reply is read within: larger than [`ReplyLimits::CONTROL`]
    /// for a connection that reads large values back (the writer's custom commands).
    pub fn set_limits(&mut self, limits: ReplyLimits) {
        self.limits = limits;
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
        // as long as the socket accepts data (figures in docs/results.md, "Speed and memory").
        for part in value.chunks(WRITE_SLICE_BYTES) {
            self.stream.write_all(part)?;
        }
        self.stream.write_all(b"\r\n")
    }

    /// Reads one complete reply, within the connection's [`ReplyLimits`]. A reply past them is
    /// a protocol error that names what the server sent, and breaks the connection.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        self.usable()?;
        self.reply_budget = self.limits.max_reply_bytes();
        self.reply_bound = self.reply_budget;
        let result = self.read_reply_at(0);
        self.note(result)
    }

    fn read_reply_at(&mut self, depth: usize) -> io::Result<Reply> {
        let line = self.read_line()?;
        match parse_header(&line)? {
            Header::Done(reply) => Ok(reply),
            Header::Bulk(len) => {
                check_bulk(len, &self.limits)?;
                self.spend(len.saturating_add(2))?;
                // The memory grows with the bytes that arrive, up to the limit checked above:
                // a bogus length costs nothing until the server really sends it.
                let mut data = Vec::new();
                self.read_bulk(len + 2, &mut data)?;
                if !data.ends_with(b"\r\n") {
                    return Err(protocol_error("a bulk string not ended by CRLF"));
                }
                data.truncate(len);
                Ok(Reply::Bulk(Some(data)))
            }
            Header::Array(len) => {
                check_array(len, depth, &self.limits)?;
                let mut items = Vec::with_capacity(len.min(1024));
                for _ in 0..len {
                    items.push(self.read_reply_at(depth + 1)?);
                }
                Ok(Reply::Array(Some(items)))
            }
        }
    }

    /// Reads one reply and throws it away as it arrives, so that reading a value whole (`GET`
    /// of 512 MiB, `HGETALL` of millions of fields) holds no more of it than the connection's
    /// read buffer: what a `read` op needs, since a client that keeps the reply measures its
    /// own allocations too. The connection's line and nesting limits hold; arrays may be of any
    /// length, and the whole reply may take at most `max_bytes`.
    pub fn discard_reply(&mut self, max_bytes: u64) -> io::Result<Discarded> {
        self.usable()?;
        self.reply_budget = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        self.reply_bound = self.reply_budget;
        let result = self.discard_reply_unchecked();
        self.note(result)
    }

    fn discard_reply_unchecked(&mut self) -> io::Result<Discarded> {
        let budget = self.reply_budget;
        let mut seen = Discarded::default();
        // Items still to come at each open array's depth.
        let mut open: Vec<usize> = Vec::new();
        loop {
            let line = self.read_line()?;
            match parse_header(&line)? {
                Header::Done(reply) => {
                    if let (Reply::Error(text), true) = (&reply, open.is_empty()) {
                        seen.error = Some(text.clone());
                    }
                    seen.elements += 1;
                }
                Header::Bulk(len) => {
                    self.spend(len.saturating_add(2))?;
                    self.skip(len)?;
                    if self.take_byte()? != b'\r' || self.take_byte()? != b'\n' {
                        return Err(protocol_error("a bulk string not ended by CRLF"));
                    }
                    seen.elements += 1;
                }
                Header::Array(len) => {
                    if open.len() + 1 > self.limits.max_depth {
                        return Err(protocol_error(&format!(
                            "a reply nested deeper than {} levels",
                            self.limits.max_depth
                        )));
                    }
                    if len > 0 {
                        open.push(len);
                        continue;
                    }
                }
            }
            // One item of the innermost open array is done; close every array that is full.
            loop {
                match open.last_mut() {
                    None => {
                        seen.bytes = (budget - self.reply_budget) as u64;
                        return Ok(seen);
                    }
                    Some(left) => {
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        open.pop();
                    }
                }
            }
        }
    }

    /// Passes over `len` bytes of the reply without keeping them.
    fn skip(&mut self, mut len: usize) -> io::Result<()> {
        while len > 0 {
            if self.start == self.end {
                self.fill()?;
            }
            let n = (self.end - self.start).min(len);
            self.start += n;
            len -= n;
        }
        Ok(())
    }

    fn take_byte(&mut self) -> io::Result<u8> {
        if self.start == self.end {
            self.fill()?;
        }
        let byte = self.buf[self.start];
        self.start += 1;
        Ok(byte)
    }

    /// Takes `bytes` from the budget of the reply being read.
    fn spend(&mut self, bytes: usize) -> io::Result<()> {
        match self.reply_budget.checked_sub(bytes) {
            Some(left) => {
                self.reply_budget = left;
                Ok(())
            }
            None => Err(protocol_error(&format!(
                "the server sent a reply larger than {} (more than this connection ever needs)",
                human_size(self.reply_bound)
            ))),
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
            // Only a line longer than the buffer grows it, and lines are bounded (read_line).
            if self.end == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let n = self.stream.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection in the middle of a reply",
            ));
        }
        self.end += n;
        Ok(())
    }

    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        // Where the search for CRLF goes on after more bytes came: the bytes already searched
        // are never searched again (`fill` may move them, but keeps them at `start`).
        let mut scanned = 0;
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some(pos) = find_crlf(&pending[scanned..]) {
                let end = scanned + pos;
                let line = pending[..end].to_vec();
                self.start += end + 2;
                self.spend(end + 2)?;
                return Ok(line);
            }
            if pending.len() > self.limits.max_line {
                return Err(line_too_long(pending, self.limits.max_line));
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

/// What a reply read and thrown away ([`RawConn::discard_reply`]) held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discarded {
    /// Bytes of the whole reply, its framing included.
    pub bytes: u64,
    /// Items that were not arrays (bulk strings, integers, statuses): a hash's HGETALL has two
    /// per field.
    pub elements: u64,
    /// The reply was an error: its text.
    pub error: Option<String>,
}

/// The tool's first exchange with a server it did not start, on this bounded reader: `INFO
/// server`, before any redis-rs connection. redis-rs (the control connection) bounds nesting
/// (100 levels) but neither a bulk's length nor a line's, and searches a line without its end
/// from its start at every read: a peer that is not a Redis server would hold it for as long
/// as it sends. Any reply passes, an error too (NOAUTH, a renamed INFO: the control
/// connection says what those mean), and so does a failure to connect or authenticate, which
/// the control connection reports in its usual words. What fails here is a reply no Redis
/// server sends, or none within `--timeout`.
pub fn first_contact(info: &ConnInfo) -> Result<()> {
    let mut conn = match RawConn::connect(info) {
        Ok(conn) => conn,
        // The control connection would wait as long again to say the same.
        Err(err) if err.is::<crate::measure::target::HandshakeTimedOut>() => return Err(err),
        Err(_) => return Ok(()),
    };
    conn.command(&[b"INFO", b"server"])
        .with_context(|| format!("INFO server on {info}"))?;
    Ok(())
}

/// Bounds on a reply, for both readers ([`RawConn::read_reply`], [`parse_reply`]): a server
/// that misbehaves (or is not a Redis server) cannot make the tool allocate what it announces,
/// recurse without end, or buffer a line that never ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// For the replies a control connection reads ([`RawConn`]'s default): INFO (tens of KiB),
    /// SLOWLOG / COMMANDLOG pages (the server cuts each argument to 128 bytes: a page of 1,024
    /// entries is a few MiB), LATENCY, CONFIG GET, +OK. The server's own replies nest three
    /// levels deep at most; status and error lines are a few hundred bytes.
    pub const CONTROL: ReplyLimits = ReplyLimits {
        max_line: 64 * 1024,
        max_bulk: 16 * 1024 * 1024,
        max_depth: 8,
        max_array: 1 << 20,
    };

    /// For the probes' replies: `+PONG`, the probe key's short value, an error line. Arrays are
    /// never a probe's reply.
    pub const PROBE: ReplyLimits = ReplyLimits {
        max_line: 16 * 1024,
        max_bulk: 64 * 1024,
        max_depth: 2,
        max_array: 16,
    };

    /// For a connection that reads values of up to `largest_value` bytes back (the writer's
    /// custom commands: a `GET` or `DUMP` of the key just written): [`ReplyLimits::CONTROL`]
    /// with room for that value and a margin (a DUMP adds a few bytes of framing).
    pub fn for_values_up_to(largest_value: u64) -> ReplyLimits {
        let value = usize::try_from(largest_value).unwrap_or(usize::MAX);
        ReplyLimits {
            max_bulk: value
                .saturating_add(REPLY_MARGIN_BYTES)
                .max(Self::CONTROL.max_bulk),
            ..Self::CONTROL
        }
    }

    /// The most bytes one whole reply may take: its largest bulk string and a margin, so that
    /// an array of many large strings, or a reply that never stops coming, is bounded too.
    pub fn max_reply_bytes(&self) -> usize {
        self.max_bulk.saturating_add(REPLY_MARGIN_BYTES)
    }
}

/// Where an unfinished reply's parse stopped ([`parse_reply_resuming`]), so that the next call,
/// with more bytes after the same start, neither searches the same bytes for CRLF again nor
/// parses anything before the bytes that can complete it have come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseResume {
    /// Start of the line whose CRLF was being searched for.
    line_at: usize,
    /// Where that search goes on (everything before it held no CRLF).
    searched_to: usize,
    /// The buffer must be at least this long for the parse to get further.
    need: usize,
}

/// Parses one complete reply at the start of `buf` without blocking: `Ok(None)` when `buf` holds
/// only part of it (read more and call again), `Ok(Some((reply, bytes used)))` otherwise.
pub fn parse_reply(buf: &[u8], limits: ReplyLimits) -> io::Result<Option<(Reply, usize)>> {
    parse_reply_resuming(buf, limits, &mut ParseResume::default())
}

/// [`parse_reply`] for a buffer that grows between calls (the pipelined probes feed it whatever
/// a read returned): `resume` remembers where the last call stopped, so a reply that arrives a
/// few bytes at a time costs a scan of each byte once, not of the whole buffer per read. Pass
/// the same `resume` while `buf` keeps its start; it is reset when a reply completes.
pub fn parse_reply_resuming(
    buf: &[u8],
    limits: ReplyLimits,
    resume: &mut ParseResume,
) -> io::Result<Option<(Reply, usize)>> {
    if buf.len() < resume.need {
        return Ok(None);
    }
    let parsed = parse_at(buf, 0, limits, 0, resume)?;
    if parsed.is_some() {
        *resume = ParseResume::default();
    }
    Ok(parsed)
}

fn parse_at(
    buf: &[u8],
    at: usize,
    limits: ReplyLimits,
    depth: usize,
    resume: &mut ParseResume,
) -> io::Result<Option<(Reply, usize)>> {
    let rest = &buf[at..];
    // Resume the search for this line's end where the last call left it.
    let from = if resume.line_at == at && resume.searched_to > at {
        resume.searched_to - at
    } else {
        0
    };
    let scan_end = rest.len().min(limits.max_line + 2);
    let Some(pos) = rest[from.min(scan_end)..scan_end]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|pos| from + pos)
    else {
        if rest.len() > limits.max_line + 2 {
            return Err(line_too_long(rest, limits.max_line));
        }
        // A CR at the very end may be the first half of the CRLF.
        *resume = ParseResume {
            line_at: at,
            searched_to: at + rest.len().saturating_sub(1),
            need: buf.len() + 1,
        };
        return Ok(None);
    };
    let after = at + pos + 2;
    match parse_header(&rest[..pos])? {
        Header::Done(reply) => Ok(Some((reply, after))),
        Header::Bulk(len) => {
            check_bulk(len, &limits)?;
            if buf.len() < after + len + 2 {
                resume.need = after + len + 2;
                return Ok(None);
            }
            if &buf[after + len..after + len + 2] != b"\r\n" {
                return Err(protocol_error("a bulk string not ended by CRLF"));
            }
            Ok(Some((
                Reply::Bulk(Some(buf[after..after + len].to_vec())),
                after + len + 2,
            )))
        }
        Header::Array(len) => {
            // A count past the limit is refused before anything is allocated for it.
            check_array(len, depth, &limits)?;
            let mut items = Vec::with_capacity(len.min(64));
            let mut next = after;
            for _ in 0..len {
                match parse_at(buf, next, limits, depth + 1, resume)? {
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

/// Where the first CRLF in `bytes` starts.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

fn check_bulk(len: usize, limits: &ReplyLimits) -> io::Result<()> {
    if len > limits.max_bulk {
        return Err(protocol_error(&format!(
            "the server announced a bulk string of {len} bytes, more than this connection ever needs ({})",
            human_size(limits.max_bulk)
        )));
    }
    Ok(())
}

fn check_array(len: usize, depth: usize, limits: &ReplyLimits) -> io::Result<()> {
    if depth >= limits.max_depth {
        return Err(protocol_error(&format!(
            "the server sent arrays nested more than {} deep",
            limits.max_depth
        )));
    }
    if len > limits.max_array {
        return Err(protocol_error(&format!(
            "the server announced an array of {len} elements, more than this connection ever needs ({})",
            limits.max_array
        )));
    }
    Ok(())
}

fn line_too_long(pending: &[u8], max_line: usize) -> io::Error {
    protocol_error(&format!(
        "the server sent more than {} without a line end (CRLF), starting '{}'",
        human_size(max_line),
        excerpt(pending)
    ))
}

/// The first bytes of what the server sent, printable, for a message.
fn excerpt(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(24)];
    let mut text = cut.escape_ascii().to_string();
    if bytes.len() > cut.len() {
        text.push('…');
    }
    text
}

/// `64 KiB`, `16 MiB`, `513 MiB`, or bytes.
fn human_size(bytes: usize) -> String {
    const KIB: usize = 1024;
    if bytes >= KIB * KIB && bytes.is_multiple_of(KIB * KIB) {
        format!("{} MiB", bytes / (KIB * KIB))
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
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
    let (&kind, body) = line.split_first().ok_or_else(|| {
        protocol_error("the server sent an empty line where a reply should start")
    })?;
    let text = || String::from_utf8_lossy(body).into_owned();
    let bad = |what: &str| protocol_error(&format!("the server sent {what} '{}'", excerpt(line)));
    let number = |what: &str| -> io::Result<i64> {
        std::str::from_utf8(body)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| bad(what))
    };
    // A negative length is nil; one that does not fit this machine is an error.
    let length = |what: &str| -> io::Result<Option<usize>> {
        let len = number(what)?;
        if len < 0 {
            return Ok(None);
        }
        usize::try_from(len).map(Some).map_err(|_| bad(what))
    };
    Ok(match kind {
        b'+' => Header::Done(Reply::Status(text())),
        b'-' => Header::Done(Reply::Error(text())),
        b':' => Header::Done(Reply::Integer(number("a bad integer")?)),
        b'$' => match length("a bad bulk length")? {
            None => Header::Done(Reply::Bulk(None)),
            Some(len) => Header::Bulk(len),
        },
        b'*' => match length("a bad array length")? {
            None => Header::Done(Reply::Array(None)),
            Some(len) => Header::Array(len),
        },
        _ => return Err(bad("bytes that are not a RESP reply:")),
    })
}

fn protocol_error(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("RESP protocol error: {what}"),
    )
}

#[cfg(test)]
mod tests;
