//! What the generator asks of the OS: the open-files limit, each thread's CPU and run-queue
//! time (so the report can say when the generator, not the server, was the limit), and a timerfd
//! for sub-millisecond wake-ups.

/// Raises this process's soft limit on open files towards `wanted` (within the hard limit), so
/// thousands of clients do not fail on the common default of 1024. Best effort; returns the
/// soft limit it leaves (`None` where the OS does not say).
pub(super) fn raise_open_files_limit(wanted: u64) -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: getrlimit/setrlimit read and write a struct we own.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return None;
        }
        let wanted = wanted as libc::rlim_t;
        if limit.rlim_cur < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted.min(limit.rlim_max),
                ..limit
            };
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit = raised;
            }
        }
        Some(limit.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = wanted;
        None
    }
}

/// What the OS says of the calling thread's time.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadTimes {
    /// CPU time (user + system), µs (`getrusage(RUSAGE_THREAD)`).
    pub cpu_us: Option<u64>,
    /// Time runnable but waiting on a run queue, µs (`/proc/thread-self/schedstat`).
    pub run_delay_us: Option<u64>,
}

impl ThreadTimes {
    /// The calling thread's times now; `None` fields where the OS does not say.
    pub fn now() -> ThreadTimes {
        ThreadTimes {
            cpu_us: thread_cpu_us(),
            run_delay_us: thread_run_delay_us(),
        }
    }
}

/// This thread's CPU time (user + system), µs; `None` where the OS does not say.
pub fn thread_cpu_us() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes into the struct we own; RUSAGE_THREAD is valid on Linux.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        if rc != 0 {
            return None;
        }
        let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
        Some(us(usage.ru_utime) + us(usage.ru_stime))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// This thread's time spent runnable but not running (waiting for a CPU), µs: the second field
/// of `/proc/thread-self/schedstat` (ns). `None` where the kernel does not provide it.
pub fn thread_run_delay_us() -> Option<u64> {
    crate::measure::schedstat::times_at("/proc/thread-self/schedstat").map(|t| t.wait_ns / 1000)
}

pub(super) mod timer {
    //! A timerfd in the event loop's epoll set, for microsecond wake-ups (Linux only).

    use std::time::Duration;

    use anyhow::Result;
    use mio::{Interest, Registry, Token};

    /// A one-shot monotonic timer whose expiry makes the event loop's poll return.
    pub struct TimerFd {
        #[cfg(target_os = "linux")]
        fd: std::os::fd::OwnedFd,
    }

    impl TimerFd {
        /// A new timer; `None` where timerfd is not available (the loop then sleeps in whole
        /// milliseconds).
        pub fn new() -> Option<TimerFd> {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::FromRawFd;
                // SAFETY: timerfd_create returns a new descriptor we take ownership of.
                let fd = unsafe {
                    libc::timerfd_create(
                        libc::CLOCK_MONOTONIC,
                        libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return None;
                }
                Some(TimerFd {
                    fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
                })
            }
            #[cfg(not(target_os = "linux"))]
            {
                None
            }
        }

        /// Adds the timer to the event loop.
        pub fn register(&self, registry: &Registry, token: Token) -> Result<()> {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                registry.register(
                    &mut mio::unix::SourceFd(&self.fd.as_raw_fd()),
                    token,
                    Interest::READABLE,
                )?;
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = (registry, token);
            }
            Ok(())
        }

        /// Fires once, `after` from now.
        pub fn arm(&self, after: Duration) {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                let after = after.max(Duration::from_nanos(1));
                let spec = libc::itimerspec {
                    it_interval: libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    },
                    it_value: libc::timespec {
                        tv_sec: after.as_secs() as libc::time_t,
                        tv_nsec: after.subsec_nanos() as libc::c_long,
                    },
                };
                // SAFETY: a valid timerfd and a fully initialised itimerspec.
                unsafe {
                    libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut());
                }
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = after;
            }
        }
    }
}
