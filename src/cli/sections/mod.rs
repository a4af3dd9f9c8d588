//! The flag sections, each declared once and flattened into every subcommand that takes it:
//! which server ([`target`]), which of its nodes ([`topology`]), the probes ([`probing`]), what
//! the writer stores ([`workload`]), where the results go ([`output`]). Each checks its flags
//! into its typed part of a command's plan. Where a subcommand words a flag its own way, the
//! section has a variant beside it that says so (`mut_arg`), so every wording is in one file.

pub mod output;
pub mod probing;
pub mod target;
pub mod topology;
pub mod workload;

use crate::error::UsageError;

/// Parses a count: digits (underscores allowed), optionally with a decimal `K` (×1000) or `M`
/// (×1,000,000) suffix, within `min..=max`. A fraction is taken where the suffix makes it a whole
/// number (`1.5M`, `2.25K`), as `--writer-sizes` takes `1.5M`; `1.5` or `1.0005K` are refused.
pub fn parse_count(flag: &'static str, text: &str, min: u64, max: u64) -> Result<u64, UsageError> {
    let bad = |reason: String| UsageError::invalid(flag, text, reason);
    let range = || format!("expected a whole number from {min} to {max}");
    let cleaned: String = text.trim().chars().filter(|&c| c != '_').collect();
    let (number, multiplier, zeros) = match cleaned.chars().last() {
        Some('k' | 'K') => (&cleaned[..cleaned.len() - 1], 1_000u64, 3usize),
        Some('m' | 'M') => (&cleaned[..cleaned.len() - 1], 1_000_000, 6),
        _ => (cleaned.as_str(), 1, 0),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |part: &str| part.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || number.ends_with('.') {
        return Err(bad(range()));
    }
    // The fraction's digits past the suffix's zeros must be zeros: 1.5M is whole, 1.5 is not.
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > zeros {
        return Err(bad(format!("{}: {text} is not a whole number", range())));
    }
    let fraction_value = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u64>().map_err(|_| bad(range()))?
            * 10u64.pow((zeros - fraction.len()) as u32)
    };
    let value = whole
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .and_then(|n| n.checked_add(fraction_value))
        .ok_or_else(|| bad(range()))?;
    if !(min..=max).contains(&value) {
        return Err(bad(range()));
    }
    Ok(value)
}
