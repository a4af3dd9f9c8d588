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
/// (×1,000,000) suffix, within `min..=max`.
pub fn parse_count(flag: &'static str, text: &str, min: u64, max: u64) -> Result<u64, UsageError> {
    let bad = || {
        UsageError::invalid(
            flag,
            text,
            format!("expected a whole number from {min} to {max}"),
        )
    };
    let cleaned: String = text.trim().chars().filter(|&c| c != '_').collect();
    let (digits, multiplier) = match cleaned.chars().last() {
        Some('k' | 'K') => (&cleaned[..cleaned.len() - 1], 1_000),
        Some('m' | 'M') => (&cleaned[..cleaned.len() - 1], 1_000_000),
        _ => (cleaned.as_str(), 1),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let value = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(bad)?;
    if !(min..=max).contains(&value) {
        return Err(bad());
    }
    Ok(value)
}
