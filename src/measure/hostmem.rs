//! Host memory and swap, sampled the way the seed benchmark printed them (psutil's
//! `virtual_memory().percent` and `swap_memory().percent`), so a write that pushed the host into
//! swap is never mistaken for Redis's own cost.

use serde::Serialize;

/// One reading of the host's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostMemory {
    /// Total physical memory, bytes.
    pub total_bytes: u64,
    /// Memory available to new allocations without swapping, bytes.
    pub available_bytes: u64,
    /// `(total - available) / total`, percent.
    pub mem_pct: f64,
    /// Total swap, bytes.
    pub swap_total_bytes: u64,
    /// Swap in use, bytes.
    pub swap_used_bytes: u64,
    /// `swap used / swap total`, percent (0 without swap).
    pub swap_pct: f64,
}

impl HostMemory {
    /// The figures the memory checks before a write judge.
    pub fn room(&self) -> crate::analyze::pressure::HostRoom {
        crate::analyze::pressure::HostRoom {
            total_bytes: self.total_bytes,
            available_bytes: self.available_bytes,
        }
    }
}

/// Reads host memory; keeps its sysinfo handle between readings.
pub struct HostMemorySampler {
    system: Option<sysinfo::System>,
}

impl Default for HostMemorySampler {
    fn default() -> Self {
        Self::new()
    }
}

impl HostMemorySampler {
    /// A sampler; readings are zero on platforms sysinfo does not support.
    pub fn new() -> Self {
        HostMemorySampler {
            system: sysinfo::System::new().ok(),
        }
    }

    /// Reads memory and swap now.
    pub fn sample(&mut self) -> HostMemory {
        let Some(system) = self.system.as_mut() else {
            return HostMemory::default();
        };
        system.refresh_memory();
        let total = system.total_memory();
        let available = system.available_memory();
        let swap_total = system.total_swap();
        let swap_used = system.used_swap();
        HostMemory {
            total_bytes: total,
            available_bytes: available,
            mem_pct: percent(total.saturating_sub(available), total),
            swap_total_bytes: swap_total,
            swap_used_bytes: swap_used,
            swap_pct: percent(swap_used, swap_total),
        }
    }
}

/// Percent with two decimals (the seed printed one).
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (10_000.0 * part as f64 / whole as f64).round() / 100.0
    }
}

/// Number of logical CPUs, for run.json.
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How often the sampler thread reads host memory during a run.
pub const MEMORY_SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);

/// Starts a thread that reads host memory every `period` and sends each reading as
/// [`crate::measure::event::Event::Memory`] on the run's clock, until `stop` is set. Reading
/// `/proc/meminfo` costs tens of µs, so at 50 Hz it takes well under 1% of a core; it runs on
/// its own thread, so a slow read never delays a probe.
pub fn spawn_memory_sampler(
    clock: crate::measure::clock::RunClock,
    events: crate::measure::event::EventSender,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    period: std::time::Duration,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    use anyhow::Context;
    use std::sync::atomic::Ordering;
    std::thread::Builder::new()
        .name("memory-sampler".into())
        .spawn(move || {
            let mut sampler = HostMemorySampler::new();
            while !stop.load(Ordering::Relaxed) {
                crate::measure::test_panic_point("sampler");
                let reading = sampler.sample();
                let sample = crate::analyze::pressure::MemorySample {
                    at_us: clock.now_us(),
                    mem_pct: reading.mem_pct,
                    swap_used_bytes: reading.swap_used_bytes,
                };
                if events
                    .try_send(crate::measure::event::Event::Memory(sample))
                    .is_err_and(|e| e.is_disconnected())
                {
                    return;
                }
                // Sleep in short steps so a stopped run is not held up.
                let wake = std::time::Instant::now() + period;
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < wake {
                    std::thread::sleep(period.min(std::time::Duration::from_millis(10)));
                }
            }
        })
        .context("starting the memory sampler thread")
}
