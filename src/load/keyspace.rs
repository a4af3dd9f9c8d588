//! The load data's key space: the tool's fixed prefix (`holprobe:load:`), key names, value sizes,
//! the metadata key that lets later runs find a population, and the memory arithmetic that picks
//! a default key count and refuses a population that will not fit.
//!
//! Everything here except [`read_meta`], [`write_meta`] and [`MemoryRoom::read`] is pure.

use std::collections::HashMap;
use std::fmt;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::UsageError;
use crate::measure::target::{ServerFacts, info_field};
pub use crate::units::push_decimal;
use crate::units::{format_size, parse_size};

/// Prefix of every load key. Unlike a probe run's `holprobe:<run-id>:` it is fixed, so a
/// population outlives the run that made it and later `probe load` runs find it; `load` is not
/// hexadecimal, so it never collides with a run id.
pub const LOAD_PREFIX: &str = "holprobe:load:";

/// The hash describing the population (`keys`, value sizes, random state, ...).
pub const META_KEY: &str = "holprobe:load:meta";

/// The field of [`META_KEY`] holding the random state of the last populate (`--random-state`).
const META_RANDOM_STATE: &str = "random_state";

/// The same field under its earlier name, as older versions wrote it: still read, and removed
/// when the hash is rewritten.
const META_OLD_RANDOM_STATE: &str = "seed";

/// The seed benchmark's population: 10M keys (27 GB of Redis memory there).
pub const SEED_KEYS: u64 = 10_000_000;

/// Largest value `--value-size` accepts: load values are small; large ones are the writer's job.
pub const MAX_LOAD_VALUE: u64 = 1 << 20;

/// How load keys are named: `<prefix><index>`, the index zero-padded to `pad` digits (0: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyNaming {
    /// Text before the index.
    pub prefix: String,
    /// Zero-padding width of the index.
    pub pad: usize,
}

impl KeyNaming {
    /// The tool's own load keys: `holprobe:load:<n>`.
    pub fn load() -> KeyNaming {
        KeyNaming {
            prefix: LOAD_PREFIX.to_string(),
            pad: 0,
        }
    }

    /// The keys `redis-benchmark -r N` reads: `key:000000012345` (for the comparison benchmark).
    pub fn redis_benchmark() -> KeyNaming {
        KeyNaming {
            prefix: "key:".to_string(),
            pad: 12,
        }
    }

    /// Appends key `index` to `out`.
    #[inline]
    pub fn push_key(&self, index: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(self.prefix.as_bytes());
        push_decimal(index, self.pad, out);
    }

    /// Key `index` as a string.
    pub fn key(&self, index: u64) -> String {
        let mut out = Vec::new();
        self.push_key(index, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Length in bytes of key `index`.
    pub fn key_len(&self, index: u64) -> usize {
        self.prefix.len() + decimal_len(index).max(self.pad)
    }
}

/// Number of decimal digits of `n`.
pub fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// Value sizes of a population: uniform in `min_bytes..=max_bytes` (one size when equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueSize {
    /// Smallest value, bytes.
    pub min_bytes: u64,
    /// Largest value, bytes.
    pub max_bytes: u64,
}

impl ValueSize {
    /// The seed's sizes: 1024..4096.
    pub const SEED: ValueSize = ValueSize {
        min_bytes: 1024,
        max_bytes: 4096,
    };

    /// Parses `1024..4096`, `1K..4K` or one size such as `2048`.
    pub fn parse(flag: &'static str, text: &str) -> Result<ValueSize, UsageError> {
        let (min_bytes, max_bytes) = match text.split_once("..") {
            Some((low, high)) => (parse_size(flag, low)?, parse_size(flag, high)?),
            None => {
                let size = parse_size(flag, text)?;
                (size, size)
            }
        };
        if min_bytes > max_bytes {
            return Err(UsageError::invalid(
                flag,
                text,
                "the smaller size comes first, as in 1024..4096",
            ));
        }
        if max_bytes > MAX_LOAD_VALUE {
            return Err(UsageError::invalid(
                flag,
                text,
                format!(
                    "load values are at most {}: large values are the writer's job (--writer-sizes)",
                    format_size(MAX_LOAD_VALUE)
                ),
            ));
        }
        Ok(ValueSize {
            min_bytes,
            max_bytes,
        })
    }

    /// Mean value size, bytes.
    pub fn mean(&self) -> f64 {
        (self.min_bytes as f64 + self.max_bytes as f64) / 2.0
    }

    /// The union of two ranges (a population topped up with other sizes).
    pub fn union(&self, other: &ValueSize) -> ValueSize {
        ValueSize {
            min_bytes: self.min_bytes.min(other.min_bytes),
            max_bytes: self.max_bytes.max(other.max_bytes),
        }
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min_bytes == self.max_bytes {
            write!(f, "{}", self.min_bytes)
        } else {
            write!(f, "{}..{}", self.min_bytes, self.max_bytes)
        }
    }
}

/// jemalloc's size class for an allocation of `size` bytes (Redis's default allocator on
/// Linux): 8, multiples of 16 up to 128, then four classes per doubling.
pub fn jemalloc_class(size: u64) -> u64 {
    if size <= 8 {
        return 8;
    }
    if size <= 128 {
        return size.div_ceil(16) * 16;
    }
    let k = 63 - (size - 1).leading_zeros();
    let spacing = 1u64 << (k - 2);
    size.div_ceil(spacing) * spacing
}

/// Bytes an sds string of `len` bytes allocates (header, bytes, terminating NUL).
fn sds_alloc(len: u64) -> u64 {
    let header = match len {
        0..256 => 3,
        256..65_536 => 5,
        65_536..4_294_967_296 => 9,
        _ => 17,
    };
    jemalloc_class(len + header + 1)
}

/// Estimated server memory of one string key holding a `value_len`-byte value, on Redis 6/7
/// with jemalloc: the value's object and sds (embedded up to 44 bytes), the key's sds, the dict
/// entry (32) and its share of the hash table (16, allowing for a rehash).
pub fn bytes_per_key(key_len: u64, value_len: u64) -> u64 {
    let value = if value_len <= 44 {
        jemalloc_class(16 + 3 + value_len + 1)
    } else {
        16 + sds_alloc(value_len)
    };
    value + sds_alloc(key_len) + 32 + 16
}

/// Mean of [`bytes_per_key`] over a population's sizes (exact for ranges up to 64K wide,
/// sampled beyond).
pub fn mean_bytes_per_key(key_len: u64, size: ValueSize) -> u64 {
    let span = size.max_bytes - size.min_bytes + 1;
    let step = span.div_ceil(65_536).max(1);
    let mut total: u128 = 0;
    let mut count: u128 = 0;
    let mut len = size.min_bytes;
    while len <= size.max_bytes {
        total += u128::from(bytes_per_key(key_len, len));
        count += 1;
        len += step;
    }
    (total / count.max(1)) as u64
}

/// What the population says of itself, in the hash [`META_KEY`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PopulationMeta {
    /// Keys `0..keys` were written (some may have been evicted or removed since).
    pub keys: u64,
    /// The sizes written (the union, when several populates topped each other up).
    pub value_size: ValueSize,
    /// Seed of the last populate (`--random-state`; recorded as `random_state`, read under its
    /// old name `seed` too).
    #[serde(rename = "random_state", alias = "seed")]
    pub seed: u64,
    /// Server memory per key measured by the populate that created most of them, when known.
    pub measured_bytes_per_key: Option<u64>,
    /// Unix time of the last populate, seconds.
    pub updated_unix_s: u64,
}

/// Reads the population's metadata; `None` when the server holds no population (a
/// description of 0 keys, left by an earlier version's populate whose every SET failed, is
/// none: a load on it was all misses).
pub fn read_meta(control: &mut redis::Connection) -> Result<Option<PopulationMeta>> {
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(META_KEY)
        .query(control)
        .with_context(|| format!("reading {META_KEY}"))?;
    if fields.is_empty() {
        return Ok(None);
    }
    let number = |name: &str| fields.get(name).and_then(|v| v.parse::<u64>().ok());
    let (Some(keys), Some(min_bytes), Some(max_bytes)) = (
        number("keys"),
        number("value_min_bytes"),
        number("value_max_bytes"),
    ) else {
        anyhow::bail!("{META_KEY} exists but is not a holprobe population description");
    };
    // Anyone who may write under the namespace may have written it: sizes no load makes would
    // overflow the tool's memory arithmetic (hostile review, F4).
    if min_bytes > max_bytes || max_bytes > MAX_LOAD_VALUE {
        anyhow::bail!(
            "{META_KEY} exists but is not a holprobe population description (value sizes {min_bytes}..{max_bytes} bytes: a load's are at most {})",
            format_size(MAX_LOAD_VALUE)
        );
    }
    if keys == 0 {
        return Ok(None);
    }
    Ok(Some(PopulationMeta {
        keys,
        value_size: ValueSize {
            min_bytes,
            max_bytes,
        },
        // `random_state`; a population written before the rename says `seed`.
        seed: number(META_RANDOM_STATE)
            .or_else(|| number(META_OLD_RANDOM_STATE))
            .unwrap_or(0),
        measured_bytes_per_key: number("measured_bytes_per_key"),
        updated_unix_s: number("updated_unix_s").unwrap_or(0),
    }))
}

/// Stores the population's metadata.
pub fn write_meta(control: &mut redis::Connection, meta: &PopulationMeta) -> Result<()> {
    let mut cmd = redis::cmd("HSET");
    cmd.arg(META_KEY)
        .arg("keys")
        .arg(meta.keys)
        .arg("value_min_bytes")
        .arg(meta.value_size.min_bytes)
        .arg("value_max_bytes")
        .arg(meta.value_size.max_bytes)
        .arg(META_RANDOM_STATE)
        .arg(meta.seed)
        .arg("updated_unix_s")
        .arg(meta.updated_unix_s)
        .arg("tool")
        .arg(concat!("holprobe ", env!("CARGO_PKG_VERSION")));
    if let Some(bytes) = meta.measured_bytes_per_key {
        cmd.arg("measured_bytes_per_key").arg(bytes);
    }
    // One transaction: the old name of the random state goes (a population written before the
    // rename, topped up now, would otherwise describe itself under both names).
    redis::pipe()
        .atomic()
        .add_command(cmd)
        .ignore()
        .hdel(META_KEY, META_OLD_RANDOM_STATE)
        .ignore()
        .query::<()>(control)
        .with_context(|| format!("writing {META_KEY}"))
}

/// The memory a population can use: the server's limit and use, and the host's free memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MemoryRoom {
    /// `used_memory` (INFO memory), bytes.
    pub used_memory_bytes: u64,
    /// `maxmemory` (0: no limit).
    pub maxmemory_bytes: u64,
    /// `total_system_memory` of the server's host (INFO memory), 0 when not reported.
    pub total_system_memory_bytes: u64,
    /// Memory available on the server's host: known when the server runs on this host.
    pub host_available_bytes: Option<u64>,
}

impl MemoryRoom {
    /// Reads INFO memory, and this host's available memory when the server is local.
    pub fn read(control: &mut redis::Connection, server: &ServerFacts) -> Result<MemoryRoom> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query(control)
            .context("INFO memory")?;
        let field = |name: &str| {
            info_field(&info, name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let maxmemory = match field("maxmemory") {
            0 => server.maxmemory_bytes.unwrap_or(0),
            n => n,
        };
        let host_available_bytes = server.local.then(|| {
            crate::measure::hostmem::HostMemorySampler::new()
                .sample()
                .available_bytes
        });
        Ok(MemoryRoom {
            used_memory_bytes: field("used_memory"),
            maxmemory_bytes: maxmemory,
            total_system_memory_bytes: field("total_system_memory"),
            host_available_bytes: host_available_bytes.filter(|&b| b > 0),
        })
    }

    /// Room left under maxmemory, when there is a limit.
    pub fn maxmemory_room(&self) -> Option<u64> {
        (self.maxmemory_bytes > 0)
            .then(|| self.maxmemory_bytes.saturating_sub(self.used_memory_bytes))
    }

    /// Room left on the server's host: this host's available memory when local, else its total
    /// memory less what the server uses (an upper bound: other processes are unknown).
    pub fn host_room(&self) -> Option<u64> {
        self.host_available_bytes.or_else(|| {
            (self.total_system_memory_bytes > 0).then(|| {
                self.total_system_memory_bytes
                    .saturating_sub(self.used_memory_bytes)
            })
        })
    }
}

/// Share of the free memory a default population takes.
const DEFAULT_SHARE: f64 = 0.25;
/// Share of the host's free memory a population may take at most (the rest is for the OS, the
/// tool and copy-on-write).
const HOST_LIMIT_SHARE: f64 = 0.9;

/// The default `--keys`: the number filling a quarter of the smaller of the room under
/// maxmemory and the host's free memory, at most the seed's 10M and at least 1000, rounded down
/// to two significant digits. Returns the count and why.
pub fn default_keys(room: &MemoryRoom, per_key: u64) -> (u64, String) {
    let mut budget = f64::INFINITY;
    let mut why = String::from("no memory figure available");
    if let Some(host) = room.host_room() {
        budget = host as f64 * DEFAULT_SHARE;
        why = format!("a quarter of the host's {} free", gib(host));
    }
    if let Some(max_room) = room.maxmemory_room()
        && (max_room as f64 * DEFAULT_SHARE) < budget
    {
        budget = max_room as f64 * DEFAULT_SHARE;
        why = format!("a quarter of the {} left under maxmemory", gib(max_room));
    }
    let raw = if budget.is_finite() {
        (budget / per_key.max(1) as f64) as u64
    } else {
        SEED_KEYS
    };
    let keys = round_down_2sig(raw.clamp(1_000, SEED_KEYS));
    if raw >= SEED_KEYS {
        why = format!("at most 10M keys ({why} would hold more)");
    } else if raw < 1_000 {
        why = format!("at least 1000 keys ({why} would hold {raw})");
    }
    (keys, format!("{why}, at about {per_key} bytes per key"))
}

fn round_down_2sig(n: u64) -> u64 {
    let digits = decimal_len(n) as u32;
    if digits <= 2 {
        return n;
    }
    let unit = 10u64.pow(digits - 2);
    n / unit * unit
}

/// Refuses SETs that would grow the population past the server's `maxmemory` (where the server
/// would evict, most likely its owner's keys, or refuse writes): `keys` keys of `population`
/// sizes, each rewritten by the load at `set_size`, grow by about `keys` × the difference of the
/// two ranges' means (a value's size is drawn evenly from its range, so over many keys the sum
/// comes close to that; the largest draws could grow them more). The hostile trial's
/// `--ratio 1:1 --value-size 64K` over a population of 500-byte values evicted all 20,000 of
/// the owner's keys on a server of `maxmemory 100mb`. `server` (its address) is named: on a
/// cluster each master is checked with its own keys and its own room.
pub fn check_set_growth(
    keys: u64,
    population: ValueSize,
    set_size: ValueSize,
    room: &MemoryRoom,
    server: &str,
) -> Result<(), UsageError> {
    // Sizes read back from a population's record on the server may be anything (a planted
    // one's overflowed the sum).
    let mean = |v: ValueSize| v.min_bytes.midpoint(v.max_bytes);
    let growth = keys.saturating_mul(mean(set_size).saturating_sub(mean(population)));
    let Some(max_room) = room.maxmemory_room() else {
        return Ok(());
    };
    if growth <= max_room {
        return Ok(());
    }
    Err(UsageError::invalid(
        "--value-size",
        set_size,
        format!(
            "SETs of that size over the {keys} load keys of {population} bytes would grow them by about {}, more than the {} left under maxmemory {} on {server} ({} used): the server would evict keys or refuse writes; use a --value-size near the population's, fewer --keys, or no SETs (--ratio 0:1)",
            gib(growth),
            gib(max_room),
            gib(room.maxmemory_bytes),
            gib(room.used_memory_bytes)
        ),
    ))
}

/// Refuses a population that will not fit: `new_keys` more keys at `per_key` bytes must fit
/// under maxmemory and in the host's free memory. The error gives the numbers and the largest
/// `--keys` that would fit.
pub fn check_fit(
    new_keys: u64,
    existing_keys: u64,
    per_key: u64,
    size: ValueSize,
    room: &MemoryRoom,
) -> Result<(), UsageError> {
    let need = new_keys.saturating_mul(per_key);
    let mut limits = Vec::new();
    if let Some(max_room) = room.maxmemory_room() {
        limits.push((
            max_room,
            format!(
                "the server's maxmemory {} with {} used leaves {}",
                gib(room.maxmemory_bytes),
                gib(room.used_memory_bytes),
                gib(max_room)
            ),
        ));
    }
    if let Some(available) = room.host_available_bytes {
        let usable = (available as f64 * HOST_LIMIT_SHARE) as u64;
        limits.push((
            usable,
            format!(
                "the host has {} available (the tool uses at most 90%: {})",
                gib(available),
                gib(usable)
            ),
        ));
    } else if let Some(host) = room.host_room() {
        limits.push((
            host,
            format!(
                "the server's host has {} of memory with {} used by the server",
                gib(room.total_system_memory_bytes),
                gib(room.used_memory_bytes)
            ),
        ));
    }
    for (room_bytes, why) in limits {
        if need > room_bytes {
            let fits = existing_keys + room_bytes / per_key.max(1);
            return Err(UsageError::invalid(
                "--keys",
                existing_keys + new_keys,
                format!(
                    "{new_keys} new keys with --value-size {size} need about {} of server memory ({per_key} bytes per key, estimated), but {why}: use --keys {} or fewer",
                    gib(need),
                    round_down_2sig(fits)
                ),
            ));
        }
    }
    Ok(())
}

/// Bytes for messages in the unit that fits, as every other memory figure the tool prints
/// (`8.0 MiB`, `1.5 GiB`; `0.01 GiB` said nothing about 12 MiB).
pub fn gib(bytes: u64) -> String {
    crate::analyze::pressure::human_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names() {
        let load = KeyNaming::load();
        assert_eq!(load.key(0), "holprobe:load:0");
        assert_eq!(load.key(1234567), "holprobe:load:1234567");
        assert_eq!(load.key_len(1234567), "holprobe:load:1234567".len());
        let rb = KeyNaming::redis_benchmark();
        assert_eq!(rb.key(12345), "key:000000012345");
        assert_eq!(rb.key_len(7), 16);
        assert_eq!(decimal_len(0), 1);
        assert_eq!(decimal_len(9), 1);
        assert_eq!(decimal_len(10), 2);
        assert_eq!(decimal_len(u64::MAX), 20);
        // Run ids are 8 hex digits: the load segment can never be one.
        let segment = LOAD_PREFIX.split(':').nth(1).unwrap();
        assert!(!segment.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn value_sizes() {
        assert_eq!(
            ValueSize::parse("--value-size", "1024..4096").unwrap(),
            ValueSize::SEED
        );
        assert_eq!(
            ValueSize::parse("--value-size", "1K..4K").unwrap(),
            ValueSize::SEED
        );
        let fixed = ValueSize::parse("--value-size", "2048").unwrap();
        assert_eq!((fixed.min_bytes, fixed.max_bytes), (2048, 2048));
        assert_eq!(fixed.to_string(), "2048");
        assert_eq!(ValueSize::SEED.to_string(), "1024..4096");
        for bad in ["4096..1024", "0..10", "abc", "1..", "2M", ""] {
            let err = ValueSize::parse("--value-size", bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("--value-size"), "{bad}: {err}");
        }
    }

    #[test]
    fn jemalloc_classes() {
        for (size, class) in [
            (1, 8),
            (9, 16),
            (24, 32),
            (129, 160),
            (256, 256),
            (2054, 2560),
            (4102, 5120),
        ] {
            assert_eq!(jemalloc_class(size), class, "{size}");
        }
    }

    #[test]
    fn estimate_matches_the_seeds_memory() {
        // The seed: 10M keys of 1024..4096 bytes took "27G" of Redis memory, 2.7-2.9 KB per key
        // depending on whether G meant 10^9 or 2^30. The estimate must land in that range or a
        // little above (refusing a little early is the safe side).
        let per_key = mean_bytes_per_key("holprobe:load:1234567".len() as u64, ValueSize::SEED);
        assert!((2_700..=3_100).contains(&per_key), "{per_key}");
        // A fixed 2048-byte value lands in jemalloc's 2560 class.
        assert_eq!(bytes_per_key(21, 2048), 16 + 2560 + 32 + 32 + 16);
    }

    #[test]
    fn sets_past_maxmemory_are_refused_by_their_mean_growth() {
        let size = |min_bytes, max_bytes| ValueSize {
            min_bytes,
            max_bytes,
        };
        let room = MemoryRoom {
            used_memory_bytes: 10 << 20,
            maxmemory_bytes: 100 << 20,
            total_system_memory_bytes: 32 << 30,
            host_available_bytes: None,
        };
        // 20,000 keys of 500 bytes rewritten at 64 KiB: 1.2 GiB more, 90 MiB left.
        let err = check_set_growth(
            20_000,
            size(500, 500),
            size(65536, 65536),
            &room,
            "127.0.0.1:6379",
        )
        .unwrap_err();
        assert!(format!("{err}").contains("--value-size"), "{err}");
        assert!(
            format!("{err}").contains("maxmemory 100.0 MiB on 127.0.0.1:6379"),
            "{err}"
        );
        // The population's own sizes, or smaller, grow nothing; 4,500 bytes more a key fit.
        assert!(
            check_set_growth(
                20_000,
                size(1024, 4096),
                size(1024, 4096),
                &room,
                "127.0.0.1:6379"
            )
            .is_ok()
        );
        assert!(
            check_set_growth(
                20_000,
                size(4096, 4096),
                size(100, 100),
                &room,
                "127.0.0.1:6379"
            )
            .is_ok()
        );
        assert!(
            check_set_growth(
                20_000,
                size(500, 500),
                size(5000, 5000),
                &room,
                "127.0.0.1:6379"
            )
            .is_ok()
        );
        // No maxmemory: nothing to evict under (the host's memory is the population's check).
        let unlimited = MemoryRoom {
            maxmemory_bytes: 0,
            ..room
        };
        assert!(
            check_set_growth(
                20_000,
                size(500, 500),
                size(65536, 65536),
                &unlimited,
                "127.0.0.1:6379"
            )
            .is_ok()
        );
    }

    #[test]
    fn default_key_count_follows_the_memory() {
        let room = MemoryRoom {
            used_memory_bytes: 1 << 20,
            maxmemory_bytes: 0,
            total_system_memory_bytes: 32 << 30,
            host_available_bytes: Some(8 << 30),
        };
        let (keys, why) = default_keys(&room, 2900);
        // A quarter of 8 GiB at 2900 bytes: 740,000 after rounding.
        assert_eq!(keys, 740_000, "{why}");
        assert!(why.contains("quarter"), "{why}");
        let limited = MemoryRoom {
            maxmemory_bytes: 101 << 20,
            ..room
        };
        let (keys, why) = default_keys(&limited, 2900);
        assert_eq!(keys, 9_000, "{why}");
        assert!(why.contains("maxmemory"), "{why}");
        let huge = MemoryRoom {
            host_available_bytes: Some(1 << 40),
            ..room
        };
        assert_eq!(default_keys(&huge, 2900).0, SEED_KEYS);
        let tiny = MemoryRoom {
            host_available_bytes: Some(1 << 20),
            ..room
        };
        assert_eq!(default_keys(&tiny, 2900).0, 1_000);
    }

    #[test]
    fn a_population_that_does_not_fit_is_refused_with_numbers() {
        let room = MemoryRoom {
            used_memory_bytes: 1 << 20,
            maxmemory_bytes: 10 << 20,
            total_system_memory_bytes: 32 << 30,
            host_available_bytes: Some(8 << 30),
        };
        assert!(check_fit(1_000, 0, 2900, ValueSize::SEED, &room).is_ok());
        let err = check_fit(100_000, 0, 2900, ValueSize::SEED, &room)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--keys"), "{err}");
        assert!(err.contains("maxmemory"), "{err}");
        assert!(err.contains("use --keys 3200 or fewer"), "{err}");
        let unlimited = MemoryRoom {
            maxmemory_bytes: 0,
            ..room
        };
        let err = check_fit(10_000_000, 0, 2900, ValueSize::SEED, &unlimited)
            .unwrap_err()
            .to_string();
        assert!(err.contains("host has 8.0 GiB available"), "{err}");
        assert!(check_fit(0, 5, 2900, ValueSize::SEED, &room).is_ok());
    }
}
