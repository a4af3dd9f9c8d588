//! Measuring: the threads, connections and clocks that produce the run's one event stream
//! (probes, the writer and other actors, host memory, the server's own view), and the target
//! they measure (an external server, or one started for the run).

pub mod actor;
pub mod clock;
pub mod culprit;
pub mod event;
pub mod generator;
pub mod hostmem;
pub mod keyspace;
pub mod local_cluster;
pub mod probe;
pub mod resp;
pub mod schedstat;
pub mod serverview;
pub mod slots;
pub mod target;
pub mod topology;
pub mod topology_watch;
pub mod writer;

/// A switch for the tests of what a panicking thread does to a run: the thread named by
/// `HOLPROBE_TEST_PANIC` (`writer`, `probe`, `sampler`, `poller`) panics where this is called.
/// Read in debug builds only (the tests'): a release build has no such switch.
#[cfg(debug_assertions)]
pub(crate) fn test_panic_point(thread: &str) {
    if std::env::var("HOLPROBE_TEST_PANIC").is_ok_and(|v| v == thread) {
        panic!("HOLPROBE_TEST_PANIC={thread}: a panic a test asked for");
    }
}

/// Release builds: nothing (see the debug build's).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn test_panic_point(_thread: &str) {}

/// Sleeps until `wake` or until `stop` is set, whichever is first, waking only for those: the
/// thread that sets `stop` unparks this one ([`std::thread::Thread::unpark`]), so a thread that
/// waits a second between looks costs one wake-up a second, not one every few ms. Returns
/// whether `stop` is set.
pub(crate) fn park_until(wake: std::time::Instant, stop: &std::sync::atomic::AtomicBool) -> bool {
    use std::sync::atomic::Ordering;
    loop {
        if stop.load(Ordering::Acquire) {
            return true;
        }
        let now = std::time::Instant::now();
        if now >= wake {
            return false;
        }
        // May return early (spuriously, or unparked): the loop looks again.
        std::thread::park_timeout(wake - now);
    }
}
