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
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
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
