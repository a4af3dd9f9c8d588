//! Memory pressure, pure: which writes ran while the host swapped or was nearly out of memory
//! (so nobody mistakes swap for Redis's own cost), and whether a write may be sent at all
//! without pushing the host into swap or the server past its `maxmemory`.
//!
//! The readings come from a sampler thread ([`crate::measure::hostmem::spawn_memory_sampler`]) on the
//! run's clock; everything here works on recorded numbers and is tested on synthetic samples.

use serde::Serialize;

use crate::units::format_size;

/// Host memory in use (percent) past which a write is flagged.
pub const HOST_MEMORY_PRESSURE_PCT: f64 = 90.0;

/// What a value of `size` bytes may cost the server in memory once stored: the allocator rounds
/// a large allocation up to its size class (jemalloc's classes are a quarter of a power of two
/// apart, so a 64 MiB value plus its header lands in the 80 MiB class). The checks assume the
/// worst case.
pub const SERVER_ALLOC_FACTOR: f64 = 1.25;

/// While a large SET executes the server holds the value twice: the argument it adopted from
/// the query buffer, and a fresh query buffer of the same size it allocates for the next
/// argument (measured: a 24 MiB SET peaks at 2 x 24 MiB on Redis 6.2 and Valkey 9.1 with libc
/// malloc, 2 x 28 MiB on Redis 7.0 with jemalloc; Redis 7.0 refuses a 30 MiB SET under
/// `maxmemory 64mb`). The second copy is freed afterwards.
pub const SERVER_TRANSIENT_COPIES: u64 = 2;

/// Share of the host's memory the checks keep free: near zero available memory the kernel
/// reclaims the page cache and then swaps (or, without swap, starts the OOM killer).
pub const HOST_RESERVE_FRACTION: f64 = 0.05;

/// One reading of host memory on the run's clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemorySample {
    /// When it was read, µs since the run's start.
    pub at_us: u64,
    /// Memory in use, percent (as psutil's `virtual_memory().percent`).
    pub mem_pct: f64,
    /// Swap in use, bytes.
    pub swap_used_bytes: u64,
}

/// What the samples say about one write's window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct PressureFinding {
    /// True when swap grew during the write or host memory passed 90%.
    pub memory_pressure: bool,
    /// The highest host memory use seen from the write's start to just after its reply, percent.
    pub host_mem_peak_pct: f64,
    /// How much swap use grew over the write, bytes (0 when it did not).
    pub host_swap_grew_bytes: u64,
}

/// Assesses the window `[start_us, end_us]` from `samples` (sorted by time): the last reading
/// at or before the start is the reference, the readings inside the window and the first one
/// after it are compared with it. `after_write_mem_pct` is the writer's own reading right after
/// the reply, used too (and alone when there are no samples).
pub fn assess(
    start_us: u64,
    end_us: u64,
    samples: &[MemorySample],
    after_write_mem_pct: f64,
) -> PressureFinding {
    let first_inside = samples.partition_point(|s| s.at_us < start_us);
    let after = samples.partition_point(|s| s.at_us <= end_us);
    let reference = first_inside
        .checked_sub(1)
        .and_then(|i| samples.get(i))
        .or_else(|| samples.get(first_inside));
    let during = &samples[first_inside..(after + 1).min(samples.len())];
    let host_mem_peak_pct = during
        .iter()
        .map(|s| s.mem_pct)
        .fold(after_write_mem_pct, f64::max);
    let host_swap_grew_bytes = match reference {
        Some(reference) => during
            .iter()
            .map(|s| s.swap_used_bytes.saturating_sub(reference.swap_used_bytes))
            .max()
            .unwrap_or(0),
        None => 0,
    };
    PressureFinding {
        memory_pressure: host_swap_grew_bytes > 0 || host_mem_peak_pct >= HOST_MEMORY_PRESSURE_PCT,
        host_mem_peak_pct,
        host_swap_grew_bytes,
    }
}

/// What a stored value of `size_bytes` may take on the server (see [`SERVER_ALLOC_FACTOR`]).
pub fn server_held_bytes(size_bytes: u64) -> u64 {
    (size_bytes as f64 * SERVER_ALLOC_FACTOR).ceil() as u64
}

/// What writing a value of `size_bytes` may add to the server's memory at its peak, while the
/// SET executes (see [`SERVER_TRANSIENT_COPIES`]).
pub fn server_growth_bytes(size_bytes: u64) -> u64 {
    server_held_bytes(size_bytes).saturating_mul(SERVER_TRANSIENT_COPIES)
}

/// The host's memory when a check is made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostRoom {
    /// Physical memory, bytes.
    pub total_bytes: u64,
    /// Memory available without swapping (MemAvailable), bytes.
    pub available_bytes: u64,
}

impl HostRoom {
    /// What the checks keep free, bytes.
    pub fn reserve_bytes(&self) -> u64 {
        (self.total_bytes as f64 * HOST_RESERVE_FRACTION) as u64
    }
}

/// The server's memory when a check is made (INFO memory).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerRoom {
    /// `used_memory`, bytes.
    pub used_bytes: u64,
    /// `maxmemory`, bytes (0 = no limit).
    pub maxmemory_bytes: u64,
    /// `maxmemory_policy`, e.g. `noeviction`.
    pub policy: Option<String>,
}

/// Checks that `need_bytes` more fit on the host without swapping. `what` says what needs them,
/// for the message.
pub fn check_host(need_bytes: u64, room: HostRoom, what: &str) -> Result<(), String> {
    if room.total_bytes == 0 {
        return Ok(()); // no reading on this platform
    }
    let usable = room.available_bytes.saturating_sub(room.reserve_bytes());
    if need_bytes <= usable {
        return Ok(());
    }
    Err(format!(
        "{what} needs about {} of host memory, but only {} is available ({} of {} total, keeping {} free); it would push the host into swap (or, without swap, the OOM killer)",
        human_bytes(need_bytes),
        human_bytes(usable),
        human_bytes(room.available_bytes),
        human_bytes(room.total_bytes),
        human_bytes(room.reserve_bytes()),
    ))
}

/// Checks that `need_bytes` more fit under the server's `maxmemory`.
pub fn check_maxmemory(need_bytes: u64, room: &ServerRoom, what: &str) -> Result<(), String> {
    if room.maxmemory_bytes == 0
        || room.used_bytes.saturating_add(need_bytes) <= room.maxmemory_bytes
    {
        return Ok(());
    }
    let consequence = match room.policy.as_deref() {
        Some("noeviction") | None => "the server would refuse it with an OOM error".to_string(),
        Some(policy) => {
            format!("with maxmemory-policy {policy} the server would evict other keys to make room")
        }
    };
    Err(format!(
        "{what} needs about {} of server memory, but the server's maxmemory is {} and it already uses {}: {consequence}",
        human_bytes(need_bytes),
        human_bytes(room.maxmemory_bytes),
        human_bytes(room.used_bytes),
    ))
}

/// Bytes for messages: `1.3 GiB`, `640.0 MiB`, `12 KiB`, `56 B` (under 1 KiB: a scanned key's
/// 56 bytes read "1 KiB").
pub fn human_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= 1024.0 * MIB {
        format!("{:.1} GiB", b / (1024.0 * MIB))
    } else if b >= MIB {
        format!("{:.1} MiB", b / MIB)
    } else if bytes >= 1024 {
        format!("{} KiB", bytes.div_ceil(1024))
    } else {
        format!("{bytes} B")
    }
}

/// The most memory a writer plan makes the server hold at once, beyond what it held before: the
/// peak of writing the largest value, plus what stays held meanwhile — with `overwrite` the old
/// value of the same size, with `keep` every other value written before it.
pub fn plan_server_peak_bytes(sizes: &[u64], repeat: u32, overwrite: bool, keep: bool) -> u64 {
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut peak = server_growth_bytes(largest);
    if overwrite {
        peak = peak.saturating_add(server_held_bytes(largest));
    }
    if keep {
        let all_held: u64 = sizes
            .iter()
            .map(|&s| server_held_bytes(s).saturating_mul(u64::from(repeat)))
            .sum();
        peak = peak.saturating_add(all_held.saturating_sub(server_held_bytes(largest)));
    }
    peak
}

/// A short description of a size for messages, e.g. `a 512M value`.
pub fn value_phrase(size_bytes: u64) -> String {
    format!("a {} value", format_size(size_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn bytes_read_as_their_size() {
        assert_eq!(human_bytes(56), "56 B");
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(1025), "2 KiB");
        assert_eq!(human_bytes(64 * MIB), "64.0 MiB");
        assert_eq!(human_bytes(3 * 1024 * MIB / 2), "1.5 GiB");
    }

    fn sample(at_us: u64, mem_pct: f64, swap_mib: u64) -> MemorySample {
        MemorySample {
            at_us,
            mem_pct,
            swap_used_bytes: swap_mib * MIB,
        }
    }

    #[test]
    fn a_calm_write_is_not_flagged() {
        let samples: Vec<_> = (0..10).map(|i| sample(i * 20_000, 40.0, 100)).collect();
        let f = assess(50_000, 120_000, &samples, 41.0);
        assert!(!f.memory_pressure);
        assert_eq!(f.host_swap_grew_bytes, 0);
        assert_eq!(f.host_mem_peak_pct, 41.0);
    }

    #[test]
    fn swap_growth_during_the_write_is_flagged() {
        // Swap steady at 100 MiB, grows to 350 MiB inside the write, shrinks after.
        let samples = vec![
            sample(0, 60.0, 100),
            sample(20_000, 60.0, 100),
            sample(40_000, 70.0, 250),
            sample(60_000, 72.0, 350),
            sample(80_000, 60.0, 120),
        ];
        let f = assess(30_000, 70_000, &samples, 65.0);
        assert!(f.memory_pressure);
        assert_eq!(f.host_swap_grew_bytes, 250 * MIB);
        assert_eq!(f.host_mem_peak_pct, 72.0);
    }

    #[test]
    fn swap_that_grew_before_the_write_does_not_count() {
        let samples = vec![
            sample(0, 60.0, 100),
            sample(20_000, 60.0, 300),
            sample(40_000, 60.0, 300),
            sample(60_000, 60.0, 290),
        ];
        let f = assess(30_000, 50_000, &samples, 60.0);
        assert!(!f.memory_pressure, "{f:?}");
    }

    #[test]
    fn a_peak_over_90_percent_inside_or_just_after_is_flagged() {
        let samples = vec![
            sample(0, 80.0, 0),
            sample(20_000, 91.5, 0),
            sample(40_000, 80.0, 0),
        ];
        assert!(assess(10_000, 30_000, &samples, 80.0).memory_pressure);
        // The first reading after the reply counts: the write's memory shows up there.
        assert!(assess(5_000, 15_000, &samples, 80.0).memory_pressure);
        // A later one does not.
        assert!(!assess(25_000, 35_000, &samples, 80.0).memory_pressure);
        // Without samples, the writer's own reading after the reply decides.
        assert!(assess(0, 10, &[], 93.0).memory_pressure);
        assert!(!assess(0, 10, &[], 50.0).memory_pressure);
    }

    #[test]
    fn host_check_names_what_is_needed() {
        let room = HostRoom {
            total_bytes: 2048 * MIB,
            available_bytes: 700 * MIB,
        };
        assert!(check_host(500 * MIB, room, "x").is_ok());
        let err = check_host(640 * MIB, room, "writing a 512M value").unwrap_err();
        assert!(err.contains("640.0 MiB"), "{err}");
        assert!(err.contains("swap"), "{err}");
        assert!(err.contains("writing a 512M value"), "{err}");
    }

    #[test]
    fn maxmemory_check_says_what_the_policy_would_do() {
        let mut room = ServerRoom {
            used_bytes: 10 * MIB,
            maxmemory_bytes: 100 * MIB,
            policy: Some("noeviction".into()),
        };
        assert!(check_maxmemory(80 * MIB, &room, "x").is_ok());
        let err = check_maxmemory(95 * MIB, &room, "x").unwrap_err();
        assert!(err.contains("OOM"), "{err}");
        room.policy = Some("allkeys-lru".into());
        let err = check_maxmemory(95 * MIB, &room, "x").unwrap_err();
        assert!(err.contains("evict"), "{err}");
        room.maxmemory_bytes = 0;
        assert!(check_maxmemory(u64::MAX / 2, &room, "x").is_ok());
    }

    #[test]
    fn plan_peaks() {
        let sizes = [64 * MIB, 128 * MIB];
        assert_eq!(server_held_bytes(64 * MIB), 80 * MIB);
        assert_eq!(server_growth_bytes(64 * MIB), 160 * MIB);
        // One value at a time: the peak of writing the largest (160 MiB held twice).
        assert_eq!(plan_server_peak_bytes(&sizes, 3, false, false), 320 * MIB);
        // Overwrite: the old value is still held meanwhile.
        assert_eq!(plan_server_peak_bytes(&sizes, 3, true, false), 480 * MIB);
        // Keep, 2 repeats: every value held (2 x 80 + 2 x 160) minus the one being written,
        // plus its peak.
        assert_eq!(
            plan_server_peak_bytes(&sizes, 2, false, true),
            320 * MIB + (2 * 80 + 160) * MIB
        );
    }
}
