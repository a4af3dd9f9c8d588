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

use std::net::SocketAddr;
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

/// True when process `pid` of this host holds the server's end of the TCP connection whose
/// ends are `local` (this process's) and `peer` (the server's): a `--url` server's `INFO`
/// `process_id` is taken as its process only so. A port alone would not do: a server in a
/// container with its own pid namespace but the host's network reports its own pid, which on
/// the host may be another server's, listening on the same port at another address. False where
/// `/proc` cannot say (not Linux, another network namespace, a process whose descriptors this
/// user may not read).
pub fn pid_holds_peer_of(pid: u32, local: SocketAddr, peer: SocketAddr) -> bool {
    // Its descriptors first: where this user may not read them, no table is worth reading.
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let inode = match sockets::inode_of(peer, local) {
        Ok(inode) => inode,
        // No netlink here (a sandbox): the kernel's text tables say the same, slower.
        Err(_) => ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|table| std::fs::read_to_string(table).ok())
            .find_map(|text| table_inode(&text, peer, local)),
    };
    let Some(inode) = inode.filter(|&inode| inode != 0) else {
        return false;
    };
    let wanted = format!("socket:[{inode}]");
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.to_string_lossy() == wanted)
    })
}

/// An address as a `/proc/net/tcp` (or `tcp6`) table writes it: the address's 32-bit words as
/// the kernel holds them, each printed as a native integer in hex, then the port.
fn table_address(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr.ip() {
        std::net::IpAddr::V4(ip) => vec![ip.octets()],
        std::net::IpAddr::V6(ip) => ip
            .octets()
            .chunks_exact(4)
            .map(|w| [w[0], w[1], w[2], w[3]])
            .collect(),
    };
    let mut text: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    text.push_str(&format!(":{:04X}", addr.port()));
    text
}

/// The inode of the socket a `/proc/net/tcp` (or `tcp6`) table lists with local address `src`
/// and remote address `dst`.
///
/// The tables are the fallback: reading one walks every bucket of the kernel's table of
/// connections (262,144 on a 24 GiB host: about 4 ms), where the kernel's socket diagnostics
/// ([`sockets`]) look the one socket up.
fn table_inode(table: &str, src: SocketAddr, dst: SocketAddr) -> Option<u64> {
    let (src, dst) = (table_address(src), table_address(dst));
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1)?.eq_ignore_ascii_case(&src) && fields.get(2)?.eq_ignore_ascii_case(&dst))
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

/// One TCP socket of this network namespace looked up by its two ends, with the kernel's socket
/// diagnostics (`NETLINK_SOCK_DIAG`, what `ss` asks): the kernel finds it in its hash table,
/// without walking the table as `/proc/net/tcp` does.
mod sockets {
    use std::io;
    use std::mem::size_of;
    use std::net::{IpAddr, SocketAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
    const SOCK_DIAG_BY_FAMILY: u16 = 20;

    /// `struct inet_diag_sockid` (linux/inet_diag.h): ports and addresses in network order.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct SockId {
        sport: [u8; 2],
        dport: [u8; 2],
        src: [u8; 16],
        dst: [u8; 16],
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

    /// The address bytes of `ip` as the kernel's socket id holds them.
    fn id_bytes(ip: IpAddr) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        match ip {
            IpAddr::V4(ip) => bytes[..4].copy_from_slice(&ip.octets()),
            IpAddr::V6(ip) => bytes = ip.octets(),
        }
        bytes
    }

    /// The inode of the TCP socket whose local end is `src` and remote end `dst`; `None` when
    /// there is none (or it is not in a process's hands yet). An error where netlink is not
    /// there.
    pub(super) fn inode_of(src: SocketAddr, dst: SocketAddr) -> io::Result<Option<u64>> {
        let family = match (src.ip(), dst.ip()) {
            (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET,
            (IpAddr::V6(_), IpAddr::V6(_)) => libc::AF_INET6,
            _ => return Ok(None),
        };
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
        let request = Request {
            len: size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: libc::NLM_F_REQUEST as u16,
            seq: 1,
            pid: 0,
            family: family as u8,
            protocol: libc::IPPROTO_TCP as u8,
            ext: 0,
            pad: 0,
            states: u32::MAX,
            id: SockId {
                sport: src.port().to_be_bytes(),
                dport: dst.port().to_be_bytes(),
                src: id_bytes(src.ip()),
                dst: id_bytes(dst.ip()),
                interface: 0,
                // INET_DIAG_NOCOOKIE: any socket with these ends.
                cookie: [u32::MAX; 2],
            },
        };
        // SAFETY: the buffer is `request`, of the length given; netlink to the kernel (the
        // socket's default peer) needs no address.
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
        const HEADER: usize = size_of::<libc::nlmsghdr>();
        let mut buf = vec![0u8; 8 * 1024];
        // SAFETY: `buf` is writable for its whole length.
        let got = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = got as usize;
        if got < HEADER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a short netlink message",
            ));
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if i32::from(kind) == libc::NLMSG_ERROR {
            // The error code follows the header: ENOENT is "no such socket".
            let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            return match -code {
                libc::ENOENT => Ok(None),
                errno => Err(io::Error::from_raw_os_error(errno)),
            };
        }
        if kind != SOCK_DIAG_BY_FAMILY || got < HEADER + size_of::<Msg>() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an unexpected netlink reply",
            ));
        }
        // SAFETY: the bytes are there (checked above) and every bit pattern is a valid `Msg`
        // (integers only); read unaligned.
        let msg: Msg = unsafe { std::ptr::read_unaligned(buf[HEADER..].as_ptr().cast()) };
        Ok(Some(u64::from(msg.inode)))
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
    fn a_connection_is_found_in_a_table_by_its_two_ends() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1E77 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 52 1 0000000009a65f65 100 0 0 10 0\n   1: 0100007F:1E77 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000009a65f65 100 0 0 10 0\n";
        // 0x1E77 is 7799, 0xD2F0 54000; the first row is the listener, not the connection.
        let server: SocketAddr = "127.0.0.1:7799".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:54000".parse().unwrap();
        assert_eq!(table_inode(table, server, client), Some(77));
        assert_eq!(table_inode(table, client, server), None);
        let elsewhere: SocketAddr = "127.0.0.2:7799".parse().unwrap();
        assert_eq!(table_inode(table, elsewhere, client), None);
        assert_eq!(table_inode("garbage\nmore garbage", server, client), None);
    }

    /// The server's end of a connection of this process, in this process: found by netlink and
    /// by the text tables alike, for IPv4 and IPv6 (where the host has it).
    #[test]
    fn this_process_holds_the_server_end_of_its_own_connection() {
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(host) else {
                continue;
            };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (served, _) = listener.accept().unwrap();
            let (local, peer) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
            let by_netlink = sockets::inode_of(peer, local).expect("netlink socket diagnostics");
            let by_table = ["/proc/net/tcp", "/proc/net/tcp6"]
                .iter()
                .filter_map(|t| std::fs::read_to_string(t).ok())
                .find_map(|text| table_inode(&text, peer, local));
            assert!(by_netlink.is_some(), "{host}");
            assert_eq!(by_netlink, by_table, "{host}");
            assert!(pid_holds_peer_of(std::process::id(), local, peer), "{host}");
            // Another process (init) does not hold it; the client's own end is not the server's.
            assert!(!pid_holds_peer_of(1, local, peer), "{host}");
            assert_ne!(sockets::inode_of(local, peer).unwrap(), by_netlink);
            drop((served, client));
        }
        // No such connection.
        let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let nobody: SocketAddr = "127.0.0.1:10".parse().unwrap();
        assert_eq!(sockets::inode_of(nowhere, nobody).unwrap(), None);
        assert!(!pid_holds_peer_of(std::process::id(), nobody, nowhere));
    }

    /// The case a port alone got wrong: this process listens on 127.0.0.1:P, while the server it
    /// is connected to, another process, listens on 127.0.0.2:P. This process does not serve
    /// that connection.
    #[test]
    fn a_listener_on_the_same_port_elsewhere_is_not_the_server() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        // The other process: binds 127.0.0.2 on a free port, says which, accepts one connection
        // and holds it until its stdin closes.
        let mut server = Command::new("python3")
            .args(["-c", "import socket,sys\ns=socket.socket()\ns.bind(('127.0.0.2',0))\ns.listen()\nprint(s.getsockname()[1],flush=True)\nc,_=s.accept()\nsys.stdin.read()"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the port");
        let own = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the same port here");
        let client = std::net::TcpStream::connect(("127.0.0.2", port)).unwrap();
        let (local, peer) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
        // The child has accepted once it holds the socket: wait for it to be in its hands.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !pid_holds_peer_of(server.id(), local, peer) {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never accepted"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!pid_holds_peer_of(std::process::id(), local, peer));
        drop((client, own, server.stdin.take()));
        server.wait().unwrap();
    }

    #[test]
    fn this_process_has_one() {
        // Read on Linux, where every test here runs.
        let times = main_thread_times(std::process::id()).expect("this process's times");
        assert!(times.run_ns > 0, "{times:?}");
        assert_eq!(main_thread_times(u32::MAX), None);
    }
}
