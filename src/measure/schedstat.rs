//! How long a process's main thread ran and waited for a CPU, from Linux's
//! `/proc/PID/task/PID/schedstat` (its fields: time on a CPU, time runnable but waiting for one,
//! and time slices, in ns).
//!
//! - The wait: on a host with fewer free CPUs than the server's busy threads and the tool's own,
//!   the server's main thread waits for a CPU during a write, and others wait on it: that part
//!   of a write's figure is the host's, not the server's (docs/methodology.md: a libc build's
//!   background free, whose main and background threads both want a CPU).
//! - The run time: what the server's single-threaded event loop spent on a write, whatever it
//!   was doing, in a command or not: the kernel's account, which sees the part of a free that
//!   SLOWLOG and LATENCY do not (a libc build's merge of the freed chunks, in later cycles).

use std::ops::Sub;

/// A thread's CPU time and run-queue wait, ns since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadTimes {
    /// On a CPU.
    pub run_ns: u64,
    /// Runnable, waiting for a CPU.
    pub wait_ns: u64,
}

impl Sub for ThreadTimes {
    type Output = ThreadTimes;

    /// What passed between two readings (`self` the later); 0 where a figure went back.
    fn sub(self, earlier: ThreadTimes) -> ThreadTimes {
        ThreadTimes {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
        }
    }
}

/// The main thread of `pid`'s times; `None` where the file is not there (not Linux, another
/// host's server, the process gone) or does not parse.
pub fn main_thread_times(pid: u32) -> Option<ThreadTimes> {
    times_at(&format!("/proc/{pid}/task/{pid}/schedstat"))
}

/// The times of the thread whose schedstat file is `path` (`/proc/thread-self/schedstat` for
/// the calling thread); `None` where it is not there or does not parse.
pub fn times_at(path: &str) -> Option<ThreadTimes> {
    parse_times(&std::fs::read_to_string(path).ok()?)
}

/// The first two fields of a schedstat line.
fn parse_times(text: &str) -> Option<ThreadTimes> {
    let mut fields = text.split_whitespace();
    Some(ThreadTimes {
        run_ns: fields.next()?.parse().ok()?,
        wait_ns: fields.next()?.parse().ok()?,
    })
}

/// True when process `pid` of this host holds a socket listening on TCP `port` (IPv4 or
/// IPv6): a `--url` server's `INFO` `process_id` is taken as its process only so (in another
/// container the number names some other process, or none). False where `/proc` cannot say
/// (not Linux, another network namespace, a process whose descriptors this user may not read).
pub fn pid_listens_on(pid: u32, port: u16) -> bool {
    // Its descriptors first: where this user may not read them, no table is worth reading.
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let inodes = match listeners::inodes(port) {
        Ok(inodes) => inodes,
        // No netlink here (a sandbox): the kernel's text tables say the same, slower.
        Err(_) => ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|table| std::fs::read_to_string(table).ok())
            .flat_map(|text| listening_inodes(&text, port))
            .collect(),
    };
    if inodes.is_empty() {
        return false;
    }
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            let target = target.to_string_lossy();
            inodes
                .iter()
                .any(|inode| target == format!("socket:[{inode}]"))
        })
    })
}

/// The inodes of the sockets a `/proc/net/tcp` (or `tcp6`) table lists as listening (state
/// `0A`) on `port`.
///
/// Those tables are the fallback: reading them walks every bucket of the kernel's table of
/// established connections (262,144 on a 24 GiB host: 4 ms a table, twice per run), where the
/// kernel's socket diagnostics ([`listeners`]) walk only the listening sockets.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit(':').next()?;
            (u16::from_str_radix(local_port, 16).ok()? == port && *fields.get(3)? == "0A")
                .then(|| fields.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// The listening TCP sockets of this network namespace, from the kernel's socket diagnostics
/// (`NETLINK_SOCK_DIAG`, what `ss -ltn` asks): a dump of the sockets in state LISTEN only,
/// which the kernel answers from its listening table without walking the established one.
mod listeners {
    use std::io;
    use std::mem::size_of;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    /// `TCP_LISTEN` (linux/tcp_states.h).
    const TCP_LISTEN: u32 = 10;

    /// `struct inet_diag_sockid` (linux/inet_diag.h).
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct SockId {
        sport: [u8; 2],
        dport: [u8; 2],
        src: [u32; 4],
        dst: [u32; 4],
        interface: u32,
        cookie: [u32; 2],
    }

    /// `struct nlmsghdr` followed by `struct inet_diag_req_v2`.
    #[repr(C)]
    struct Request {
        len: u32,
        kind: u16,
        flags: u16,
        seq: u32,
        pid: u32,
        family: u8,
        protocol: u8,
        ext: u8,
        pad: u8,
        states: u32,
        id: SockId,
    }

    /// `struct inet_diag_msg`, after its `nlmsghdr`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Msg {
        family: u8,
        state: u8,
        timer: u8,
        retrans: u8,
        id: SockId,
        expires: u32,
        rqueue: u32,
        wqueue: u32,
        uid: u32,
        inode: u32,
    }

    /// The inodes of the TCP sockets (IPv4 and IPv6) listening on `port`.
    pub(super) fn inodes(port: u16) -> io::Result<Vec<u64>> {
        // SAFETY: socket(2) with constant arguments; the descriptor is owned from here on.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // A kernel that never answers must not hold the run.
        let timeout = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: the option's value is a `timeval` of the size given.
        let set = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if set != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut found = Vec::new();
        for (seq, family) in [(1, libc::AF_INET), (2, libc::AF_INET6)] {
            let request = Request {
                len: size_of::<Request>() as u32,
                kind: SOCK_DIAG_BY_FAMILY,
                flags: (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
                seq,
                pid: 0,
                family: family as u8,
                protocol: libc::IPPROTO_TCP as u8,
                ext: 0,
                pad: 0,
                states: 1 << TCP_LISTEN,
                id: SockId::default(),
            };
            // SAFETY: the buffer is `request`, of the length given; netlink to the kernel
            // (the socket's default peer) needs no address.
            let sent = unsafe {
                libc::send(
                    sock.as_raw_fd(),
                    (&request as *const Request).cast(),
                    size_of::<Request>(),
                    0,
                )
            };
            if sent < 0 {
                return Err(io::Error::last_os_error());
            }
            read_dump(&sock, seq, port, &mut found)?;
        }
        Ok(found)
    }

    /// Reads one dump's messages to its end, keeping the inodes of those on `port`.
    fn read_dump(sock: &OwnedFd, seq: u32, port: u16, found: &mut Vec<u64>) -> io::Result<()> {
        const HEADER: usize = size_of::<libc::nlmsghdr>();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let got =
                unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if got < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut at = 0;
            let got = got as usize;
            while at + HEADER <= got {
                let field = |offset: usize, len: usize| &buf[at + offset..at + offset + len];
                let len = u32::from_ne_bytes(field(0, 4).try_into().unwrap_or_default()) as usize;
                let kind = u16::from_ne_bytes(field(4, 2).try_into().unwrap_or_default());
                let msg_seq = u32::from_ne_bytes(field(8, 4).try_into().unwrap_or_default());
                if len < HEADER || at + len > got {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a short netlink message",
                    ));
                }
                if msg_seq == seq {
                    match i32::from(kind) {
                        libc::NLMSG_DONE => return Ok(()),
                        libc::NLMSG_ERROR => {
                            return Err(io::Error::other("the kernel refused the socket dump"));
                        }
                        _ if kind == SOCK_DIAG_BY_FAMILY && len >= HEADER + size_of::<Msg>() => {
                            // SAFETY: the bytes are there (checked above) and every bit pattern
                            // is a valid `Msg` (integers only); read unaligned.
                            let msg: Msg = unsafe {
                                std::ptr::read_unaligned(buf[at + HEADER..].as_ptr().cast())
                            };
                            if u16::from_be_bytes(msg.id.sport) == port
                                && u32::from(msg.state) == TCP_LISTEN
                            {
                                found.push(u64::from(msg.inode));
                            }
                        }
                        _ => {}
                    }
                }
                // Messages are aligned to 4 bytes.
                at += (len + 3) & !3;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_field_is_the_run_time_and_the_second_the_wait() {
        assert_eq!(
            parse_times("1234 5678 9\n"),
            Some(ThreadTimes {
                run_ns: 1234,
                wait_ns: 5678
            })
        );
        assert_eq!(parse_times("1234"), None);
        assert_eq!(parse_times("x y z"), None);
    }

    #[test]
    fn a_difference_never_goes_below_zero() {
        let early = ThreadTimes {
            run_ns: 10,
            wait_ns: 7,
        };
        let late = ThreadTimes {
            run_ns: 25,
            wait_ns: 5,
        };
        assert_eq!(
            late - early,
            ThreadTimes {
                run_ns: 15,
                wait_ns: 0
            }
        );
    }

    #[test]
    fn a_listening_socket_is_found_by_its_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1E77 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 52 1 0000000009a65f65 100 0 0 10 0\n   1: 0100007F:1E77 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000009a65f65 100 0 0 10 0\n";
        // 0x1E77 is 7799; the second row is a connection to it, not the listener.
        assert_eq!(listening_inodes(table, 7799), vec![52]);
        assert!(listening_inodes(table, 7798).is_empty());
        assert!(listening_inodes("garbage\nmore garbage", 7799).is_empty());
    }

    /// The kernel's socket diagnostics and its text tables name the same listening sockets.
    #[test]
    fn the_kernels_two_accounts_of_a_listener_agree() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        // The same port on IPv6 too, where the host has it.
        let v6 = std::net::TcpListener::bind(("::1", port)).ok();
        let mut from_tables: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|table| std::fs::read_to_string(table).ok())
            .flat_map(|text| listening_inodes(&text, port))
            .collect();
        let mut from_netlink = listeners::inodes(port).expect("netlink socket diagnostics");
        from_tables.sort_unstable();
        from_netlink.sort_unstable();
        assert_eq!(from_netlink.len(), 1 + usize::from(v6.is_some()));
        assert_eq!(from_netlink, from_tables);
        drop((v4, v6));
        assert!(listeners::inodes(port).unwrap().is_empty());
    }

    #[test]
    fn this_process_listens_where_it_listens_and_nowhere_else() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(pid_listens_on(std::process::id(), port));
        drop(listener);
        assert!(!pid_listens_on(std::process::id(), port));
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // Another process (init) does not hold this process's socket.
        assert!(!pid_listens_on(1, other.local_addr().unwrap().port()));
    }

    #[test]
    fn this_process_has_one() {
        // Read on Linux, where every test here runs.
        let times = main_thread_times(std::process::id()).expect("this process's times");
        assert!(times.run_ns > 0, "{times:?}");
        assert_eq!(main_thread_times(u32::MAX), None);
    }
}
