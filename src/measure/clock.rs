//! One clock for a whole run: every thread stamps events with microseconds since the same
//! monotonic anchor, and the run keeps one wall-clock reading taken at that anchor so exports can
//! be lined up with server logs.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The run's shared clock. Cheap to copy into every measurement thread.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    anchor: Instant,
    unix_start_us: u64,
}

impl RunClock {
    /// Starts the clock now.
    pub fn start() -> Self {
        let anchor = Instant::now();
        let unix_start_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        RunClock {
            anchor,
            unix_start_us,
        }
    }

    /// Microseconds since the anchor, now.
    #[inline]
    pub fn now_us(&self) -> u64 {
        self.us_at(Instant::now())
    }

    /// Microseconds since the anchor at `instant` (0 for instants before the anchor).
    #[inline]
    pub fn us_at(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.anchor).as_micros() as u64
    }

    /// The instant `us` microseconds after the anchor.
    #[inline]
    pub fn instant_at(&self, us: u64) -> Instant {
        self.anchor + Duration::from_micros(us)
    }

    /// The anchor itself.
    pub fn anchor(&self) -> Instant {
        self.anchor
    }

    /// Wall-clock time of the anchor, in microseconds since the Unix epoch.
    pub fn unix_start_us(&self) -> u64 {
        self.unix_start_us
    }
}

/// Sleeps until `deadline` with microsecond precision: the thread sleeps until shortly before the
/// deadline, then spins the rest, so wake-up jitter stays in microseconds without burning a core
/// between probes. Call [`tighten_timer_slack`] once per thread first.
pub fn sleep_until_precise(deadline: Instant) {
    const SPIN: Duration = Duration::from_micros(60);
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    let remaining = deadline - now;
    if remaining > SPIN {
        std::thread::sleep(remaining - SPIN);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// Lowers this thread's timer slack to 1 ns (Linux), so `sleep` wakes when asked rather than up to
/// 50 µs later. A no-op elsewhere.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and only affects the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Asks for real-time (SCHED_FIFO) priority for this thread, so a busy host cannot delay the
/// probe's wake-up. Needs root or CAP_SYS_NICE; returns false (and changes nothing) otherwise.
pub fn try_realtime_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid param struct.
        unsafe {
            let param = libc::sched_param { sched_priority: 10 };
            libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// RFC 3339 UTC time with µs (`2026-11-30T12:03:04.123456Z`) of a Unix time in µs: how the
/// exports and the terminal give wall-clock times, to line them up with other logs.
pub fn wall_time(unix_us: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(unix_us);
    humantime::format_rfc3339_micros(at).to_string()
}
