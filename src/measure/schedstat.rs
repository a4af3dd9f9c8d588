//! How long a process's main thread waited for a CPU, from Linux's
//! `/proc/PID/task/PID/schedstat` (its fields: time on a CPU, time runnable but waiting for one,
//! and time slices, in ns). On a host with fewer free CPUs than the server's busy threads and
//! the tool's own, the server's main thread waits for a CPU during a write, and others wait on
//! it: that part of a write's figure is the host's, not the server's (docs/methodology.md: a
//! libc build's background free, whose main and background threads both want a CPU).

/// The main thread of `pid`'s time runnable but not running, ns since it started; `None`
/// where the file is not there (not Linux, another host's server, the process gone) or does
/// not parse.
pub fn main_thread_wait_ns(pid: u32) -> Option<u64> {
    wait_ns_at(&format!("/proc/{pid}/task/{pid}/schedstat"))
}

/// The run-queue wait of the thread whose schedstat file is `path` (`/proc/thread-self/schedstat`
/// for the calling thread), ns; `None` where it is not there or does not parse.
pub fn wait_ns_at(path: &str) -> Option<u64> {
    parse_wait_ns(&std::fs::read_to_string(path).ok()?)
}

/// The second field of a schedstat line.
fn parse_wait_ns(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_field_is_the_wait() {
        assert_eq!(parse_wait_ns("1234 5678 9\n"), Some(5678));
        assert_eq!(parse_wait_ns("1234"), None);
        assert_eq!(parse_wait_ns("x y z"), None);
    }

    #[test]
    fn this_process_has_one() {
        // Read on Linux, where every test here runs.
        assert!(main_thread_wait_ns(std::process::id()).is_some());
        assert_eq!(main_thread_wait_ns(u32::MAX), None);
    }
}
