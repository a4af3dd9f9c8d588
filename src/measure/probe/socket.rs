//! A probe thread's connection: blocking writes of tiny commands, reads that never block (the
//! thread must be free to send its next probe on time), and, on Linux, the kernel's receive
//! timestamp of the bytes each read returns.
//!
//! # Why kernel receive stamps
//! A reply's time taken when the probe thread gets round to reading it includes however long the
//! thread waited for a core: on a busy 2-core host that is the writer's and the server's doing,
//! not the server's delay to the probe. With `SO_TIMESTAMPNS` the kernel stamps each segment as it
//! is received (on loopback: when the server's `write` hands it over), and `recvmsg` returns the
//! stamp of the last segment a read consumed. Two documented limits, both making a stamp late,
//! never early: one stamp covers every byte a read returns, and segments the kernel coalesced in
//! the receive queue while nobody read carry the latest one's stamp. The thread therefore reads as
//! soon as bytes arrive, and on a plain connection asks for one reply's length at a time, so a
//! read rarely spans two replies (a backlog, which the server answers in one write, is read in
//! one go) (over TLS, rustls reads whole records: the replies of one read
//! share its stamp). Each record keeps both times (`reply_us` from the stamp, `read_us` from the
//! read).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::measure::resp::RawConn;
use crate::measure::target::ConnInfo;

/// Most bytes one plain read asks for.
const READ_BYTES: usize = 16 * 1024;

/// One probe connection, authenticated and on the right database.
pub struct ProbeSocket {
    sock: TcpStream,
    tls: Option<rustls::ClientConnection>,
    /// What the last read brought (plaintext, over TLS).
    buf: Vec<u8>,
}

/// When the bytes of one read arrived.
#[derive(Debug, Clone, Copy)]
pub struct ReadTimes {
    /// When the kernel received them, if it said.
    pub kernel: Option<Instant>,
    /// When the read returned.
    pub read: Instant,
}

impl ProbeSocket {
    /// Connects (TLS, AUTH and SELECT as every connection of the tool) and asks the kernel for
    /// receive timestamps where it has them (where it refuses, reads carry no stamp and the
    /// replies are timed at the read).
    pub fn connect(info: &ConnInfo) -> Result<ProbeSocket> {
        let (sock, tls, unread) = RawConn::connect(info)?.into_parts();
        if !unread.is_empty() {
            bail!("{info} sent bytes nobody asked for after the handshake");
        }
        enable_receive_stamps(sock.as_raw_fd());
        Ok(ProbeSocket {
            sock,
            tls,
            buf: Vec::with_capacity(READ_BYTES),
        })
    }

    /// Writes a whole command. The socket stays blocking for writes, with the run's `--timeout`
    /// as its write timeout: a probe is a few dozen bytes, so a write blocks only when the server
    /// has stopped reading the connection altogether.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.tls.as_mut() {
            None => (&self.sock).write_all(bytes),
            Some(tls) => {
                tls.writer().write_all(bytes)?;
                while tls.wants_write() {
                    tls.write_tls(&mut &self.sock)?;
                }
                Ok(())
            }
        }
    }

    /// Over TLS (rustls reads whole records, so one read may take several replies and carry
    /// the stamp of the last segment only).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Waits until the socket has bytes to read or `timeout` passes (true: readable).
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        wait_readable(self.sock.as_raw_fd(), timeout)
    }

    /// Reads what has arrived, without blocking: at most about `want` bytes of plaintext, and
    /// when they came. `Ok(None)`: nothing there. A closed connection is an error.
    pub fn read(&mut self, want: usize) -> io::Result<Option<(ReadTimes, &[u8])>> {
        let fd = self.sock.as_raw_fd();
        match self.tls.as_mut() {
            None => {
                self.buf.resize(want.clamp(1, READ_BYTES), 0);
                let (len, times) = match recv_stamped(fd, &mut self.buf) {
                    Ok(got) => got,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                    Err(err) => return Err(err),
                };
                if len == 0 {
                    return Err(closed());
                }
                Ok(Some((times, &self.buf[..len])))
            }
            Some(tls) => {
                let mut reader = StampedReader { fd, last: None };
                match tls.read_tls(&mut reader) {
                    Ok(0) => return Err(closed()),
                    Ok(_) => {}
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                    Err(err) => return Err(err),
                }
                let Some(times) = reader.last else {
                    return Ok(None);
                };
                tls.process_new_packets()
                    .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
                self.buf.clear();
                match tls.reader().read_to_end(&mut self.buf) {
                    Ok(_) => {}
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                    Err(err) => return Err(err),
                }
                Ok(Some((times, &self.buf)))
            }
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the server closed the connection",
    )
}

/// A kernel receive stamp: CLOCK_REALTIME, as `SO_TIMESTAMPNS` gives it.
#[derive(Debug, Clone, Copy)]
struct WallStamp {
    sec: i64,
    nsec: i64,
}

impl WallStamp {
    /// The same moment on the monotonic clock (`Instant`), given the two clocks read back to
    /// back when the read returned: the stamp's age on the wall clock is taken off `read`. A
    /// stamp that is not in the last minute, or lies ahead of `wall`, is not trusted (a
    /// wall-clock step).
    fn to_instant(self, read: Instant, wall: WallStamp) -> Option<Instant> {
        let age_ns = (wall.sec - self.sec)
            .checked_mul(1_000_000_000)?
            .checked_add(wall.nsec - self.nsec)?;
        if !(0..=60_000_000_000).contains(&age_ns) {
            return None;
        }
        read.checked_sub(Duration::from_nanos(age_ns as u64))
    }
}

#[cfg(target_os = "linux")]
fn wall_now() -> Option<WallStamp> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (rc == 0).then_some(WallStamp {
        sec: ts.tv_sec,
        nsec: ts.tv_nsec,
    })
}

#[cfg(not(target_os = "linux"))]
fn wall_now() -> Option<WallStamp> {
    None
}

/// Asks for software receive timestamps (`SO_TIMESTAMPNS`) where the kernel has them. Where it
/// refuses (or off Linux) reads simply carry no stamp, and each is counted as timed at the read.
fn enable_receive_stamps(fd: RawFd) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with a valid fd and a c_int option value of the right size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// One non-blocking `recvmsg` (the socket itself stays blocking for writes): the bytes, when it
/// returned, and the kernel's receive stamp on the monotonic clock when one came along.
fn recv_stamped(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, ReadTimes)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for a few control messages; u64 for alignment.
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: fd is an open socket; msg points at live buffers of the sizes given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    // Both clocks at once, so the stamp's conversion does not depend on when this thread runs
    // next.
    let read = Instant::now();
    let wall = wall_now();
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let kernel = stamp_of(&msg)
        .zip(wall)
        .and_then(|(s, w)| s.to_instant(read, w));
    Ok((n as usize, ReadTimes { kernel, read }))
}

#[cfg(target_os = "linux")]
fn stamp_of(msg: &libc::msghdr) -> Option<WallStamp> {
    let mut stamp = None;
    // SAFETY: walking the control messages recvmsg just filled, with the libc macros, reading
    // a timespec (unaligned) from the one whose type says it holds one.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = Some(WallStamp {
                    sec: ts.tv_sec,
                    nsec: ts.tv_nsec,
                });
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    stamp
}

#[cfg(not(target_os = "linux"))]
fn stamp_of(_msg: &libc::msghdr) -> Option<WallStamp> {
    None
}

/// Feeds rustls from the socket without blocking, keeping the times of the last read.
struct StampedReader {
    fd: RawFd,
    last: Option<ReadTimes>,
}

impl Read for StampedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (len, times) = recv_stamped(self.fd, buf)?;
        self.last = Some(times);
        Ok(len)
    }
}

/// `poll` for readability with a sub-millisecond timeout (`ppoll` on Linux).
fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    #[cfg(target_os = "linux")]
    let rc = {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) }
    };
    #[cfg(not(target_os = "linux"))]
    let rc = {
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, ms) }
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(err);
    }
    Ok(rc > 0)
}

impl std::fmt::Debug for ProbeSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeSocket")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}
