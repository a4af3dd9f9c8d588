//! Parsers and formatters for the units a user types: sizes (`64M`), durations (`500ms`), rates.
//!
//! Every parser returns a [`UsageError`] that names the flag and the value, so the CLI can print
//! one line and exit 2 without ever touching the server.

use std::time::Duration;

use crate::error::UsageError;

const KIB: u64 = 1024;

/// The one rule every size flag follows, stated in each one's `--help` (see `size_help!`).
///
/// Why uppercase `M` stays binary although redis.conf reads `64M` as 64,000,000 (its `memtoll`
/// ignores case): every size this tool has printed and every run in `data/` says `64M` for
/// 64 MiB, and the Redis documentation's own examples write units in lowercase (`maxmemory
/// 2gb`, `64mb`). So the spellings that mean the same in both places (`kb`/`mb`/`gb` in any
/// case, binary) are accepted as Redis reads them, `KiB`/`MiB`/`GiB` and `K`/`M`/`G` are binary,
/// and the one spelling a redis.conf user types for a decimal size, a bare lowercase `k`, `m` or
/// `g`, is refused with both meanings rather than silently read as the other one.
pub const SIZE_RULE: &str = crate::size_rule!();

/// The text of [`SIZE_RULE`], as a macro so that `concat!` can put it into clap's `help =`.
#[macro_export]
macro_rules! size_rule {
    () => {
        "Units: K, M, G, KiB, MiB, GiB and KB, MB, GB (any case) are binary, as redis.conf reads kb, mb, gb: 64M = 64MB = 64MiB = 67108864 bytes; a plain number is bytes. A lowercase k, m or g alone is refused: redis.conf reads 64m as 64000000 bytes."
    };
}

/// A size flag's `--help`: its own text, then [`SIZE_RULE`].
#[macro_export]
macro_rules! size_help {
    ($text:literal) => {
        concat!($text, " ", $crate::size_rule!())
    };
}

/// Parses one size by [`SIZE_RULE`]: a plain number (or `B`) is bytes; `K`, `M`, `G`, `Ki`,
/// `Mi`, `Gi`, `KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB` (the two- and three-letter forms in any
/// case) are binary. A bare lowercase `k`, `m` or `g` is refused with both of its meanings.
/// Fractions such as `1.5M` are accepted and rounded down to whole bytes. Zero is refused: a
/// zero-byte write measures nothing.
pub fn parse_size(flag: &'static str, text: &str) -> Result<u64, UsageError> {
    let bytes = parse_bytes(flag, text)?;
    if bytes == 0 {
        return Err(UsageError::InvalidValue {
            flag,
            value: text.to_string(),
            reason: "a size must be at least 1 byte".to_string(),
        });
    }
    Ok(bytes)
}

/// [`parse_size`] for a threshold where 0 means "every one" (`--size-floor 0`, `0K`).
pub fn parse_size_or_zero(flag: &'static str, text: &str) -> Result<u64, UsageError> {
    parse_bytes(flag, text)
}

fn parse_bytes(flag: &'static str, text: &str) -> Result<u64, UsageError> {
    let bad = |reason: &str| UsageError::InvalidValue {
        flag,
        value: text.to_string(),
        reason: reason.to_string(),
    };
    const EXPECTED: &str = "expected a number with an optional unit K, M, G, KiB, MiB, GiB or KB, MB, GB (binary), such as 64M";
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(bad("expected a size such as 64M"));
    }
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(bad(EXPECTED));
    }
    if number.matches('.').count() > 1 || number.starts_with('.') || number.ends_with('.') {
        return Err(bad(EXPECTED));
    }
    if let Some(power) = ["k", "m", "g"].iter().position(|u| *u == unit) {
        return Err(bad(&lowercase_unit_reason(number, unit, power as u32 + 1)));
    }
    let multiplier = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KI" | "KIB" => KIB,
        "M" | "MB" | "MI" | "MIB" => KIB * KIB,
        "G" | "GB" | "GI" | "GIB" => KIB * KIB * KIB,
        _ => return Err(bad(EXPECTED)),
    };
    let bytes = if number.contains('.') {
        let value: f64 = number.parse().map_err(|_| bad(EXPECTED))?;
        let bytes = value * multiplier as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(bad("too large"));
        }
        bytes as u64
    } else {
        let value: u64 = number.parse().map_err(|_| bad("too large"))?;
        value
            .checked_mul(multiplier)
            .ok_or_else(|| bad("too large"))?
    };
    Ok(bytes)
}

/// `in redis.conf 64m means 64,000,000 bytes; write 64M or 64MiB for 64 MiB, or 64000000`.
fn lowercase_unit_reason(number: &str, unit: &str, power: u32) -> String {
    let upper = unit.to_ascii_uppercase();
    let binary_name = format!("{upper}iB");
    // The decimal reading, exactly where the number is whole (fractions: to the byte, down).
    let decimal: Option<u64> = if number.contains('.') {
        number
            .parse::<f64>()
            .ok()
            .map(|v| v * 1000f64.powi(power as i32))
            .filter(|b| b.is_finite() && *b < u64::MAX as f64)
            .map(|b| b as u64)
    } else {
        number
            .parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(1000u64.pow(power)))
    };
    match decimal {
        Some(bytes) => format!(
            "in redis.conf {number}{unit} means {} bytes; write {number}{upper} or {number}{binary_name} for {number} {binary_name}, or {bytes}",
            group_thousands(bytes)
        ),
        None => format!(
            "in redis.conf a lowercase {unit} is decimal (x{}); write {upper} or {binary_name} for binary units",
            group_thousands(1000u64.pow(power))
        ),
    }
}

/// `64000000` -> `64,000,000`.
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parses a comma-separated list of sizes (`1M,64M,512M`), refusing an empty list.
pub fn parse_size_list(flag: &'static str, text: &str) -> Result<Vec<u64>, UsageError> {
    if text.trim().is_empty() {
        return Err(UsageError::InvalidValue {
            flag,
            value: text.to_string(),
            reason: "expected a comma-separated list of sizes such as 1M,64M".into(),
        });
    }
    text.split(',').map(|part| parse_size(flag, part)).collect()
}

/// The longest duration any flag takes: a year. Longer is no run's, and a duration of
/// centuries added to the clock's present overflows it (`--timeout 300000000000y` once panicked
/// in the cleanup, leaving run.json `running`; `--gap` of 2^64 s in the writer).
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Parses a duration such as `500ms`, `2s`, `1m30s`, `250us`, up to [`MAX_DURATION`]. A bare
/// number is refused because its unit would be a guess.
pub fn parse_duration(flag: &'static str, text: &str) -> Result<Duration, UsageError> {
    let trimmed = text.trim();
    // humantime reads `M` as a month and `m` as a minute, while every size flag reads `M` as
    // MiB: `--duration 1M` probed for 30 days. Refused, as `64m` is for a size.
    let months = trimmed
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|unit| unit == "M");
    if months {
        return Err(UsageError::invalid(
            flag,
            text,
            "M is a month in a duration: write 1m for a minute, or days (30d) for a month",
        ));
    }
    // humantime adds up repeated units: `1h1h` probed for two hours. A unit said twice is a slip.
    let mut units: Vec<&str> = trimmed
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|unit| !unit.is_empty())
        .collect();
    units.sort_unstable();
    if let Some(twice) = units.windows(2).find(|w| w[0] == w[1]) {
        return Err(UsageError::invalid(
            flag,
            text,
            format!(
                "the unit {} comes twice: give each unit once (1h30m)",
                twice[0]
            ),
        ));
    }
    let duration = humantime::parse_duration(trimmed).map_err(|err| UsageError::InvalidValue {
        flag,
        value: text.to_string(),
        reason: format!("expected a duration such as 500ms, 2s or 1m ({err})"),
    })?;
    if duration > MAX_DURATION {
        return Err(UsageError::invalid(
            flag,
            text,
            "must be at most a year (366d)",
        ));
    }
    Ok(duration)
}

/// Fewest events per second any rate flag takes (`--probe-rate`, `load --rate`). Below one a
/// second a run of a few seconds sends nothing it can measure, and near zero the interval
/// between two sends (1/rate) overflows every clock: `1e-300` once panicked, or wrapped into a
/// schedule that sent as fast as it could.
pub const MIN_RATE_PER_S: f64 = 1.0;

/// A rate flag: its name, what it counts, and its ceiling with the reason for it.
#[derive(Debug, Clone, Copy)]
pub struct RateFlag {
    /// `--probe-rate`.
    pub flag: &'static str,
    /// What is sent so many times a second: `probes`, `requests`.
    pub what: &'static str,
    /// A typical value, for the message.
    pub example: &'static str,
    /// The most it takes.
    pub max_per_s: f64,
    /// Why not more, said when a value is above it.
    pub above_max: &'static str,
}

impl RateFlag {
    /// Parses a rate: a finite number from [`MIN_RATE_PER_S`] to the flag's ceiling. The one
    /// parser every rate flag goes through, so no rate reaches a schedule unchecked.
    pub fn parse(&self, text: &str) -> Result<f64, UsageError> {
        let bad = |reason: String| UsageError::invalid(self.flag, text, reason);
        let rate: f64 = text.trim().parse().map_err(|_| {
            bad(format!(
                "expected a number of {} per second, such as {}",
                self.what, self.example
            ))
        })?;
        if !rate.is_finite() || rate <= 0.0 {
            return Err(bad("must be more than 0".into()));
        }
        if rate < MIN_RATE_PER_S {
            return Err(bad(format!(
                "must be at least {MIN_RATE_PER_S} {} per second: fewer leaves a run with nothing to measure",
                self.what
            )));
        }
        if rate > self.max_per_s {
            return Err(bad(self.above_max.to_string()));
        }
        Ok(rate)
    }
}

/// Formats a byte count the way the tool has always printed sizes: `64M`, `1G`, `512K`, or bytes when the count
/// is not a whole number of the unit.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(KIB * KIB * KIB, "G"), (KIB * KIB, "M"), (KIB, "K")];
    for (unit, suffix) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    for (unit, suffix) in UNITS {
        if bytes >= unit {
            return format!("{:.1}{suffix}", bytes as f64 / unit as f64);
        }
    }
    format!("{bytes}B")
}

/// Bytes as mebibytes, for memory figures in messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (KIB * KIB) as f64
}

/// Serializes a `Duration` as fractional milliseconds (run.json options), and reads it back.
pub mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializer for `#[serde(with = "crate::units::duration_ms")]`.
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(duration.as_secs_f64() * 1e3)
    }

    /// Deserializer for the same: the duration [`serialize`] wrote, to the nanosecond.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        super::duration_of_ms(f64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// Serializes an `Option<Duration>` as fractional milliseconds or null, and reads it back.
pub mod option_duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializer for `#[serde(with = "crate::units::option_duration_ms")]`.
    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(d) => serializer.serialize_some(&(d.as_secs_f64() * 1e3)),
            None => serializer.serialize_none(),
        }
    }

    /// Deserializer for the same.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(deserializer)?
            .map(super::duration_of_ms)
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

/// The duration of `ms` milliseconds, rounded to the nanosecond: the written figure came from a
/// whole number of nanoseconds, so rounding gives that number back (below about a day exactly,
/// and so the same bytes when written again).
fn duration_of_ms(ms: f64) -> Result<Duration, String> {
    let nanos = (ms * 1e6).round();
    if !nanos.is_finite() || nanos < 0.0 || nanos >= u64::MAX as f64 {
        return Err(format!("expected a duration in milliseconds, not {ms}"));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Appends the decimal digits of `n`, zero-padded to `pad`.
#[inline]
pub fn push_decimal(mut n: u64, pad: usize, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for _ in (digits.len() - at)..pad {
        out.push(b'0');
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table of [`SIZE_RULE`]: every spelling and what it means.
    #[test]
    fn size_units_table() {
        const K: u64 = 1 << 10;
        const M: u64 = 1 << 20;
        const G: u64 = 1 << 30;
        for (text, bytes) in [
            ("100", 100),
            ("100B", 100),
            ("100b", 100),
            ("4K", 4 * K),
            ("4KB", 4 * K),
            ("4kb", 4 * K),
            ("4Kb", 4 * K),
            ("4kB", 4 * K),
            ("4KiB", 4 * K),
            ("4kib", 4 * K),
            ("4Ki", 4 * K),
            ("64M", 64 * M),
            ("64MB", 64 * M),
            ("64mb", 64 * M),
            ("64Mb", 64 * M),
            ("64MiB", 64 * M),
            ("64mib", 64 * M),
            ("64Mi", 64 * M),
            ("2G", 2 * G),
            ("2GB", 2 * G),
            ("2gb", 2 * G),
            ("2GiB", 2 * G),
            ("2Gi", 2 * G),
            ("1.5M", 3 << 19),
            (" 2M ", 2 * M),
        ] {
            assert_eq!(parse_size("--s", text), Ok(bytes), "{text}");
        }
        // A bare lowercase k, m, g: decimal in redis.conf, so refused with both meanings.
        for (text, decimal, binary) in [
            (
                "64m",
                "64,000,000 bytes",
                "write 64M or 64MiB for 64 MiB, or 64000000",
            ),
            ("4k", "4,000 bytes", "write 4K or 4KiB for 4 KiB, or 4000"),
            (
                "1g",
                "1,000,000,000 bytes",
                "write 1G or 1GiB for 1 GiB, or 1000000000",
            ),
            (
                "1.5m",
                "1,500,000 bytes",
                "write 1.5M or 1.5MiB for 1.5 MiB, or 1500000",
            ),
        ] {
            let err = parse_size("--writer-sizes", text).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "invalid value '{text}' for --writer-sizes: in redis.conf {text} means {decimal}; {binary}"
                )
            );
        }
        let err = parse_size("--s", "99999999999999999999m")
            .unwrap_err()
            .to_string();
        assert!(err.contains("decimal"), "{err}");
        for bad in ["64X", "64MM", "64iB", "64 M", "64Kbit", "64T"] {
            assert!(parse_size("--s", bad).is_err(), "{bad}");
        }
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1000), "1,000");
        assert_eq!(group_thousands(67_108_864), "67,108,864");
    }

    #[test]
    fn bad_sizes_name_flag_and_value() {
        for bad in [
            "64X",
            "-1M",
            "0",
            "1.5.2M",
            "",
            "M",
            ".5M",
            "99999999999999999999G",
        ] {
            let err = parse_size("--writer-sizes", bad).unwrap_err().to_string();
            assert!(err.contains("--writer-sizes"), "{err}");
            assert!(err.contains(&format!("'{bad}'")), "{err}");
        }
        assert!(parse_size_list("--writer-sizes", "").is_err());
        assert!(parse_size_list("--writer-sizes", "1M,,2M").is_err());
        assert_eq!(
            parse_size_list("--writer-sizes", "1M,64M").unwrap(),
            vec![1 << 20, 64 << 20]
        );
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("--gap", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            parse_duration("--gap", "2s").unwrap(),
            Duration::from_secs(2)
        );
        assert!(parse_duration("--gap", "5").is_err());
        assert!(parse_duration("--gap", "-1s").is_err());
        assert_eq!(parse_duration("--timeout", "366d").unwrap(), MAX_DURATION);
        let err = parse_duration("--duration", "1M").unwrap_err().to_string();
        assert!(
            err.contains("'1M' for --duration") && err.contains("M is a month"),
            "{err}"
        );
        assert!(parse_duration("--duration", "1m 2M").is_err());
        assert_eq!(
            parse_duration("--duration", "1m").unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            parse_duration("--duration", "2min").unwrap(),
            Duration::from_secs(120)
        );
        // Units add up once each; a unit said twice was `1h1h` probing for two hours.
        assert_eq!(
            parse_duration("--duration", "1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        let err = parse_duration("--duration", "1h1h")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'1h1h' for --duration") && err.contains("the unit h comes twice"),
            "{err}"
        );
        for huge in ["367d", "300000000000y", "18446744073709551615s"] {
            let err = parse_duration("--timeout", huge).unwrap_err().to_string();
            assert!(
                err.contains("--timeout") && err.contains(huge) && err.contains("at most a year"),
                "{err}"
            );
        }
    }

    #[test]
    fn milliseconds_read_back_to_the_nanosecond() {
        for duration in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(333_333),
            Duration::from_millis(500),
            Duration::from_nanos(86_399_999_999_999),
        ] {
            let ms = duration.as_secs_f64() * 1e3;
            assert_eq!(duration_of_ms(ms), Ok(duration), "{ms}");
        }
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e300] {
            assert!(duration_of_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_format_round_trip() {
        for text in ["1M", "64M", "512M", "1G", "4K"] {
            assert_eq!(format_size(parse_size("--s", text).unwrap()), text);
        }
        assert_eq!(format_size(1500), "1.5K");
        assert_eq!(format_size(7), "7B");
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any text: a size or a one-line error naming the flag, never a panic.
        #[test]
        fn size_parser_never_panics(text in "\\PC{0,24}") {
            match parse_size("--writer-sizes", &text) {
                Ok(bytes) => prop_assert!(bytes > 0),
                Err(err) => {
                    let message = err.to_string();
                    prop_assert!(message.contains("--writer-sizes"));
                    prop_assert!(!message.contains('\n'));
                }
            }
        }

        /// Every whole size formats and parses back to itself.
        #[test]
        fn sizes_round_trip(bytes in 1u64..(1u64 << 50)) {
            let text = format_size(bytes);
            if !text.contains('.') {
                prop_assert_eq!(parse_size("--s", &text).unwrap(), bytes);
            }
        }

        /// Number-and-unit sizes mean what they say.
        #[test]
        fn units_multiply(n in 1u64..100_000, unit in prop::sample::select(vec!["", "K", "M", "G", "kb", "MiB", "GB"])) {
            let factor = match unit.chars().next() {
                Some('K' | 'k') => 1u64 << 10,
                Some('M' | 'm') => 1 << 20,
                Some('G' | 'g') => 1 << 30,
                _ => 1,
            };
            prop_assert_eq!(parse_size("--s", &format!("{n}{unit}")).unwrap(), n * factor);
        }

        /// Lists: any text is either all sizes or an error naming the flag.
        #[test]
        fn size_list_never_panics(text in "[0-9KMG,.\\- ]{0,30}") {
            if let Err(err) = parse_size_list("--writer-sizes", &text) {
                prop_assert!(err.to_string().contains("--writer-sizes"));
            }
        }

        /// Durations: any text parses or names the flag, never a panic.
        #[test]
        fn duration_parser_never_panics(text in "\\PC{0,24}") {
            if let Err(err) = parse_duration("--gap", &text) {
                prop_assert!(err.to_string().contains("--gap"));
            }
        }
    }
}
