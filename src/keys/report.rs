//! The report over every key scanned, built as the scan goes and bounded whatever the
//! keyspace's size: the worst keys by predicted freeze, the keys whose expiry will freeze the
//! server past the threshold (with when), the totals, and the settings that would change the
//! picture, from the servers' rule ([`crate::workload::lazyfree`]). Pure.

use serde::{Deserialize, Serialize};

use super::model::{KeyShape, PAST_FITTED_FACTOR, Prediction};
use crate::workload::lazyfree::{FreedBy, LAZYFREE_THRESHOLD};

/// Keys whose expiry is past the threshold kept for the report (all are counted).
pub const KEEP_EXPIRING: usize = 1_000;

/// One key: a row of keys.csv, and of the report's tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRow {
    /// The node the key lives on (`host:port`).
    pub node: String,
    /// The key, escaped ([`super::escape_key`]).
    pub key: String,
    /// `TYPE`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `OBJECT ENCODING` (empty: refused).
    pub encoding: String,
    /// Elements (STRLEN, HLEN, LLEN, SCARD, ZCARD, XLEN); a string's bytes.
    pub elements: Option<u64>,
    /// `MEMORY USAGE ... SAMPLES 5`, bytes (empty: refused).
    pub memory_bytes: Option<u64>,
    /// `PTTL`, ms (empty: no TTL).
    pub ttl_ms: Option<u64>,
    /// When it expires (RFC 3339, from the scan's clock and its TTL).
    pub expires_at: Option<String>,
    /// The server's free effort (`lazyfree.c`): past 64 it may be freed in the background.
    pub free_effort: u64,
    /// Predicted freeze of `DEL`, ms.
    pub delete_ms: Option<f64>,
    /// Predicted freeze of `UNLINK`, ms.
    pub unlink_ms: Option<f64>,
    /// Predicted freeze of its expiry, ms.
    pub expire_ms: Option<f64>,
    /// Predicted freeze of an eviction, ms.
    pub evict_ms: Option<f64>,
    /// Predicted freeze of a `SET` over it, ms.
    pub overwrite_ms: Option<f64>,
    /// Predicted freeze of reading it whole, ms.
    pub read_ms: Option<f64>,
    /// The worst of them, ms (empty: the model has no entry for the key's type and encoding,
    /// and prices none of them).
    pub worst_ms: Option<f64>,
    /// The thread its expiry frees it on (`main`, `background`; empty: unknown).
    pub expire_freed_by: Option<String>,
    /// The thread its eviction frees it on (`main`, `background`; empty: unknown).
    #[serde(default)]
    pub evict_freed_by: Option<String>,
    /// What `DEL`'s figure rests on (the model entry).
    pub basis: String,
    /// True when a figure rests on a provisional model entry.
    pub provisional: bool,
    /// The thread its `DEL` frees it on (not in the files: the UNLINK advice's check).
    #[serde(skip)]
    pub delete_freed_by: Option<FreedBy>,
    /// The model entries that priced it though it is more than [`PAST_FITTED_FACTOR`] times
    /// the largest size they were fitted on, with how many times (not in the files: the
    /// warning's count; `basis` says it of `DEL`'s).
    #[serde(skip)]
    pub past_fitted: Vec<(String, f64)>,
}

/// Rounds a figure to µs for the files.
fn ms3(x: Option<f64>) -> Option<f64> {
    x.map(|v| (v * 1e3).round() / 1e3)
}

impl KeyRow {
    /// The row of a key scanned at `now_unix_ms`.
    pub fn new(
        node: &str,
        key: &[u8],
        shape: &KeyShape,
        ttl_ms: Option<u64>,
        now_unix_ms: u64,
        prediction: &Prediction,
    ) -> KeyRow {
        let p = prediction;
        let ops = p.all();
        let mut past_fitted: Vec<(String, f64)> = Vec::new();
        for (label, times) in ops.iter().filter_map(|x| x.past_fitted.as_ref()) {
            match past_fitted.iter_mut().find(|(l, _)| **l == **label) {
                Some(seen) => seen.1 = seen.1.max(*times),
                None => past_fitted.push((label.to_string(), *times)),
            }
        }
        let basis = match &p.delete.past_fitted {
            Some((_, times)) => format!(
                "{}, {times:.1}x past the largest size it was fitted on",
                p.delete.basis
            ),
            None => p.delete.basis.to_string(),
        };
        KeyRow {
            node: node.to_string(),
            key: super::escape_key(key),
            kind: shape.kind.name().to_string(),
            encoding: shape.encoding.clone().unwrap_or_default(),
            elements: shape.elements,
            memory_bytes: shape.memory_bytes,
            ttl_ms,
            // Past year 9999 RFC 3339 has no form for it ("292278994-08-17..."; the trial).
            expires_at: ttl_ms
                .map(|ttl| now_unix_ms.saturating_add(ttl))
                .filter(|&at| at < LAST_RFC3339_MS)
                .map(rfc3339_ms),
            free_effort: shape.free_effort(),
            delete_ms: ms3(p.delete.freeze_ms),
            unlink_ms: ms3(p.unlink.freeze_ms),
            expire_ms: ms3(p.expire.freeze_ms),
            evict_ms: ms3(p.evict.freeze_ms),
            overwrite_ms: ms3(p.overwrite.freeze_ms),
            read_ms: ms3(p.read.freeze_ms),
            worst_ms: ms3(p.priced().then(|| p.worst_ms())),
            expire_freed_by: p.expire.freed_by.map(|t| t.name().to_string()),
            evict_freed_by: p.evict.freed_by.map(|t| t.name().to_string()),
            basis,
            provisional: ops.iter().any(|x| x.provisional && x.freeze_ms.is_some()),
            delete_freed_by: p.delete.freed_by,
            past_fitted,
        }
    }

    /// Its expiry is predicted to freeze the server past `threshold_ms`.
    pub fn expiry_past(&self, threshold_ms: f64) -> bool {
        self.ttl_ms.is_some() && self.expire_ms.is_some_and(|ms| ms > threshold_ms)
    }
}

/// 10000-01-01T00:00:00Z in Unix ms: the first instant RFC 3339's four-digit year cannot write.
const LAST_RFC3339_MS: u64 = 253_402_300_800_000;

/// `2026-12-01T21:37:47.123Z`.
fn rfc3339_ms(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// A setting (or command) that would change the picture, and for how many keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// What to change.
    pub change: String,
    /// Keys past the threshold it would help.
    pub keys: u64,
    /// What it would do.
    pub effect: String,
}

/// The totals and tables of a scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Rows in the worst-keys table.
    pub top_n: usize,
    /// The freeze past which a key counts, ms (`--stall-threshold`).
    pub threshold_ms: f64,
    /// Keys scanned (those gone before they could be looked at are not counted).
    pub keys_scanned: u64,
    /// Keys whose worst predicted freeze is past the threshold.
    pub keys_over_threshold: u64,
    /// The sum of those keys' worst predicted freezes, ms.
    pub sum_over_threshold_ms: f64,
    /// Keys with a TTL.
    pub keys_with_ttl: u64,
    /// The worst keys, worst first.
    pub top: Vec<KeyRow>,
    /// Keys whose expiry is past the threshold, soonest first (at most [`KEEP_EXPIRING`]).
    pub expiring: Vec<KeyRow>,
    /// All of those.
    pub expiring_count: u64,
    /// Main-thread expiries past the threshold that the background could take (effort > 64).
    pub expiries_lazy_would_help: u64,
    /// Main-thread DELs past the threshold that UNLINK would take off the main thread.
    pub deletes_unlink_would_help: u64,
    /// Main-thread evictions past the threshold that lazy eviction would take.
    pub evictions_lazy_would_help: u64,
    /// Strings past the threshold: nothing takes their free off the main thread.
    pub strings_over_threshold: u64,
    /// Keys the model prices no op of, by `type encoding`: their freezes are unknown, not 0.
    pub unpriced: std::collections::BTreeMap<String, u64>,
    /// Keys priced by an entry more than [`PAST_FITTED_FACTOR`] times past the largest size it
    /// was fitted on: extrapolations.
    #[serde(default)]
    pub keys_past_fitted: u64,
    /// Those keys by entry (`type encoding op`): how many, and the most times past.
    #[serde(default)]
    pub past_fitted: std::collections::BTreeMap<String, (u64, f64)>,
}

impl Tally {
    /// An empty tally.
    pub fn new(top_n: usize, threshold_ms: f64) -> Tally {
        Tally {
            top_n,
            threshold_ms,
            keys_scanned: 0,
            keys_over_threshold: 0,
            sum_over_threshold_ms: 0.0,
            keys_with_ttl: 0,
            top: Vec::new(),
            expiring: Vec::new(),
            expiring_count: 0,
            expiries_lazy_would_help: 0,
            deletes_unlink_would_help: 0,
            evictions_lazy_would_help: 0,
            strings_over_threshold: 0,
            unpriced: Default::default(),
            keys_past_fitted: 0,
            past_fitted: Default::default(),
        }
    }

    /// Counts one key.
    pub fn add(&mut self, row: &KeyRow) {
        self.keys_scanned += 1;
        if row.ttl_ms.is_some() {
            self.keys_with_ttl += 1;
        }
        let Some(worst_ms) = row.worst_ms else {
            *self
                .unpriced
                .entry(format!("{} {}", row.kind, row.encoding).trim().to_string())
                .or_default() += 1;
            return;
        };
        if !row.past_fitted.is_empty() {
            self.keys_past_fitted += 1;
            for (label, times) in &row.past_fitted {
                let seen = self.past_fitted.entry(label.clone()).or_insert((0, 0.0));
                seen.0 += 1;
                seen.1 = seen.1.max(*times);
            }
        }
        let past = |x: Option<f64>| x.is_some_and(|ms| ms > self.threshold_ms);
        let main = row.expire_freed_by.as_deref() == Some(FreedBy::Main.name());
        let collection_past = row.free_effort > LAZYFREE_THRESHOLD;
        if worst_ms > self.threshold_ms {
            self.keys_over_threshold += 1;
            self.sum_over_threshold_ms += worst_ms;
            if row.kind == "string" {
                self.strings_over_threshold += 1;
            }
            // Where the server's DEL already frees in the background (lazyfree-lazy-user-del
            // yes, Valkey 8+'s default) UNLINK changes nothing: its figure is that free's.
            let delete_background = row.delete_freed_by == Some(FreedBy::Background);
            if collection_past && !delete_background && past(row.delete_ms) {
                self.deletes_unlink_would_help += 1;
            }
            // Where the server already evicts in the background there is nothing to advise.
            let evict_main = row.evict_freed_by.as_deref() == Some(FreedBy::Main.name());
            if collection_past && evict_main && past(row.evict_ms) {
                self.evictions_lazy_would_help += 1;
            }
        }
        if row.expiry_past(self.threshold_ms) {
            self.expiring_count += 1;
            if main && collection_past {
                self.expiries_lazy_would_help += 1;
            }
            let at = self
                .expiring
                .partition_point(|r| r.ttl_ms.unwrap_or(0) <= row.ttl_ms.unwrap_or(0));
            if at < KEEP_EXPIRING {
                self.expiring.insert(at, row.clone());
                self.expiring.truncate(KEEP_EXPIRING);
            }
        }
        if self.top_n > 0 {
            let at = self.top.partition_point(|r| r.worst_ms >= row.worst_ms);
            if at < self.top_n {
                self.top.insert(at, row.clone());
                self.top.truncate(self.top_n);
            }
        }
    }

    /// The warning that some keys were priced far past the sizes their entries were fitted
    /// on, with how many by entry (`None`: no key was).
    pub fn past_fitted_warning(&self) -> Option<String> {
        if self.keys_past_fitted == 0 {
            return None;
        }
        let entries: Vec<String> = self
            .past_fitted
            .iter()
            .map(|(label, (n, times))| format!("{label}: {n}, up to {times:.1}x"))
            .collect();
        Some(format!(
            "{} key(s) were priced past {PAST_FITTED_FACTOR}x the largest size their model entry was fitted on (elements; a string's bytes) ({}): those figures are extrapolations (keys.csv's basis says so of delete_ms); a model refitted up to their size (--refit --refit-elements) measures them",
            self.keys_past_fitted,
            entries.join("; ")
        ))
    }

    /// The settings that would change the picture.
    pub fn advice(&self) -> Vec<Advice> {
        let mut advice = Vec::new();
        if self.expiries_lazy_would_help > 0 {
            advice.push(Advice {
                change: "lazyfree-lazy-expire yes".into(),
                keys: self.expiries_lazy_would_help,
                effect: format!(
                    "would take {} of those expiries off the main thread",
                    self.expiries_lazy_would_help
                ),
            });
        }
        if self.deletes_unlink_would_help > 0 {
            advice.push(Advice {
                change: "UNLINK instead of DEL (or lazyfree-lazy-user-del yes)".into(),
                keys: self.deletes_unlink_would_help,
                effect: format!(
                    "would free {} of those keys in the background when they are removed",
                    self.deletes_unlink_would_help
                ),
            });
        }
        if self.evictions_lazy_would_help > 0 {
            advice.push(Advice {
                change: "lazyfree-lazy-eviction yes".into(),
                keys: self.evictions_lazy_would_help,
                effect: format!(
                    "would evict {} of those keys in the background; but while the server is still over maxmemory with nothing else to evict, each command waits up to the eviction time limit (0.5 ms at maxmemory-eviction-tenacity 10), so a busy server falls behind until the free ends (a 1M hash: others held 58-139 ms at 2,000 probes/s and 1 ms at 100/s on Redis 7.0, 245-316 and 108-142 ms on Valkey 9.1)",
                    self.evictions_lazy_would_help
                ),
            });
        }
        if self.strings_over_threshold > 0 {
            advice.push(Advice {
                change: "nothing".into(),
                keys: self.strings_over_threshold,
                effect: format!(
                    "would for the {} string(s): a string is always freed on the main thread, even by UNLINK or with every lazyfree-lazy-* yes; only a smaller value would",
                    self.strings_over_threshold
                ),
            });
        }
        advice
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::keys::model::{predict, tests::sample_model};
    use crate::workload::kind_named;
    use crate::workload::lazyfree::LazyfreeSettings;

    fn row(kind: &str, encoding: &str, elements: u64, memory: u64, ttl: Option<u64>) -> KeyRow {
        let shape = KeyShape {
            kind: kind_named(kind).unwrap(),
            encoding: Some(encoding.into()),
            elements: Some(elements),
            memory_bytes: Some(memory),
        };
        let settings = LazyfreeSettings {
            lazy_user_del: Some(false),
            lazy_server_del: Some(false),
            lazy_expire: Some(false),
            lazy_eviction: Some(false),
            lazy_user_flush: Some(false),
        };
        let p = predict(&sample_model(), &shape, &settings);
        KeyRow::new(
            "127.0.0.1:6379",
            kind.as_bytes(),
            &shape,
            ttl,
            1_764_625_067_123,
            &p,
        )
    }

    /// A row with every field filled, for the column check.
    pub(crate) fn sample_row() -> KeyRow {
        row("hash", "hashtable", 1_000_000, 80 << 20, Some(60_000))
    }

    #[test]
    fn lazy_eviction_is_advised_only_where_the_server_evicts_on_its_main_thread() {
        let shape = KeyShape {
            kind: kind_named("hash").unwrap(),
            encoding: Some("hashtable".into()),
            elements: Some(1_000_000),
            memory_bytes: Some(80 << 20),
        };
        let tally_of = |lazy_eviction: bool| {
            let settings = LazyfreeSettings {
                lazy_user_del: Some(false),
                lazy_server_del: Some(false),
                lazy_expire: Some(false),
                lazy_eviction: Some(lazy_eviction),
                lazy_user_flush: Some(false),
            };
            let p = predict(&sample_model(), &shape, &settings);
            let row = KeyRow::new("127.0.0.1:6379", b"h", &shape, None, 0, &p);
            let mut tally = Tally::new(5, 1.0);
            tally.add(&row);
            (row, tally)
        };
        let (row, tally) = tally_of(false);
        assert_eq!(row.evict_freed_by.as_deref(), Some("main"));
        assert_eq!(tally.evictions_lazy_would_help, 1);
        assert!(
            tally
                .advice()
                .iter()
                .any(|a| a.change == "lazyfree-lazy-eviction yes")
        );
        // Already on: its eviction is priced (here as the main thread's, an upper bound) but
        // the setting is not advised again.
        let (row, tally) = tally_of(true);
        assert_eq!(row.evict_freed_by.as_deref(), Some("background"));
        assert!(row.evict_ms.unwrap() > 1.0, "{row:?}");
        assert_eq!(tally.evictions_lazy_would_help, 0);
        assert!(
            tally
                .advice()
                .iter()
                .all(|a| a.change != "lazyfree-lazy-eviction yes")
        );
    }

    /// Where the server's DEL already frees in the background (lazyfree-lazy-user-del yes,
    /// Valkey 8+'s default), UNLINK is not advised, even where that background free still
    /// costs the main thread past the threshold (a libc build's: Valkey 9.1's 1M hash, DEL 193
    /// ms and UNLINK 197 in the hostile trial, was counted).
    #[test]
    fn unlink_is_advised_only_where_del_frees_on_the_main_thread() {
        let mut model = sample_model();
        for entry in &mut model.entries {
            if entry.op == crate::keys::model::ModelOp::Unlink {
                entry.per_element_us = 0.2;
            }
        }
        let shape = KeyShape {
            kind: kind_named("hash").unwrap(),
            encoding: Some("hashtable".into()),
            elements: Some(1_000_000),
            memory_bytes: Some(80 << 20),
        };
        let tally_of = |lazy_user_del: bool| {
            let settings = LazyfreeSettings {
                lazy_user_del: Some(lazy_user_del),
                lazy_server_del: Some(false),
                lazy_expire: Some(false),
                lazy_eviction: Some(false),
                lazy_user_flush: Some(false),
            };
            let p = predict(&model, &shape, &settings);
            let row = KeyRow::new("127.0.0.1:6379", b"h", &shape, None, 0, &p);
            let mut tally = Tally::new(5, 1.0);
            tally.add(&row);
            (row, tally)
        };
        let unlink = |t: &Tally| t.advice().iter().any(|a| a.change.starts_with("UNLINK"));
        let (_, tally) = tally_of(false);
        assert_eq!(tally.deletes_unlink_would_help, 1);
        assert!(unlink(&tally));
        let (row, tally) = tally_of(true);
        assert_eq!(row.delete_freed_by, Some(FreedBy::Background));
        assert!(row.delete_ms.unwrap() > 1.0, "{row:?}");
        assert_eq!(tally.deletes_unlink_would_help, 0);
        assert!(!unlink(&tally), "{:?}", tally.advice());
    }

    #[test]
    fn the_worst_keys_come_first_and_the_table_stays_bounded() {
        let mut tally = Tally::new(2, 1.0);
        tally.add(&row("hash", "hashtable", 100_000, 8 << 20, None));
        tally.add(&row("hash", "hashtable", 1_000_000, 80 << 20, Some(60_000)));
        tally.add(&row("hash", "listpack", 10, 200, None));
        tally.add(&row("string", "raw", 256 << 20, 256 << 20, Some(5_000)));
        assert_eq!(tally.keys_scanned, 4);
        assert_eq!(tally.top.len(), 2);
        assert_eq!(tally.top[0].elements, Some(1_000_000));
        assert_eq!(tally.top[1].elements, Some(100_000));
        assert_eq!(tally.keys_over_threshold, 3);
        assert_eq!(tally.strings_over_threshold, 1);
        // Both TTL'd keys expire past 1 ms; the string first (sooner).
        assert_eq!(tally.expiring_count, 2);
        assert_eq!(tally.expiring[0].kind, "string");
        assert_eq!(tally.expiries_lazy_would_help, 1);
        let advice = tally.advice();
        assert!(advice[0].change.contains("lazyfree-lazy-expire"));
        assert!(advice[0].effect.contains("1 of those expiries"));
        assert!(
            advice
                .iter()
                .any(|a| a.change == "nothing" && a.effect.contains("1 string"))
        );
        let sum = tally.top[0].worst_ms.unwrap() + tally.top[1].worst_ms.unwrap();
        assert!(tally.sum_over_threshold_ms > sum);
    }

    #[test]
    fn expiry_times_come_from_the_ttl() {
        let r = row("hash", "hashtable", 1_000_000, 80 << 20, Some(60_000));
        assert_eq!(r.expires_at.as_deref(), Some("2025-12-01T21:38:47.123Z"));
        assert_eq!(rfc3339_ms(LAST_RFC3339_MS - 1), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    /// Keys priced far past their entries' fitted sizes are counted by entry, once per key,
    /// and the warning says so; keys within say nothing.
    #[test]
    fn keys_past_the_fitted_sizes_are_counted_by_entry() {
        let mut tally = Tally::new(5, 1.0);
        tally.add(&row("hash", "hashtable", 1_000_000, 80 << 20, None));
        assert_eq!(tally.past_fitted_warning(), None);
        tally.add(&row("hash", "hashtable", 3_000_000, 240 << 20, None));
        let far = row("hash", "hashtable", 5_000_000, 400 << 20, None);
        assert!(
            far.basis.contains("5.0x past the largest size"),
            "{}",
            far.basis
        );
        tally.add(&far);
        assert_eq!(tally.keys_past_fitted, 2);
        let (n, times) = tally.past_fitted["hash hashtable delete"];
        assert_eq!(n, 2);
        assert!((times - 5.0).abs() < 1e-9);
        let warning = tally.past_fitted_warning().unwrap();
        assert!(
            warning.starts_with("2 key(s) were priced past 2x"),
            "{warning}"
        );
        assert!(
            warning.contains("hash hashtable delete: 2, up to 5.0x"),
            "{warning}"
        );
    }
}
