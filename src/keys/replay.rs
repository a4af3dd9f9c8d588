//! `probe keys --replay`'s rows, the pure part: the shape a scanned key is rebuilt with (its
//! type, element count and element size, never its contents), its predicted and measured
//! freezes side by side (a row of replay.csv), and the screen's table. The replay itself (a
//! server started, one writer run per key) is in `commands/keys/replay.rs`.
//!
//! What a shape cannot carry: a collection's element size is read off `MEMORY USAGE` (sampled),
//! against two values of its type built at known sizes on the tool's server
//! ([`element_bytes_from_calibration`]), else estimated ([`replay_shape`]), so the rebuilt value
//! has about the same bytes, not the same spread of sizes; its members are the writer's (hex
//! strings: a set of integers comes back as a set of strings, which its `built_encoding` shows).

use serde::{Deserialize, Serialize};

use super::report::KeyRow;
use crate::measure::writer::DEFAULT_ELEMENT_BYTES;
use crate::workload::{ValueKind, distinct_elements, kind_named};

/// A compact encoding's bookkeeping per element (a listpack entry's header and back-length).
const COMPACT_OVERHEAD_BYTES: u64 = 2;

/// One key replayed: a row of replay.csv and of the screen's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayRow {
    /// The node the key lives on (`host:port`).
    pub node: String,
    /// The key, escaped as in keys.csv.
    pub key: String,
    /// `TYPE`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `OBJECT ENCODING` on the scanned server.
    pub encoding: String,
    /// Its elements as scanned (a string's bytes).
    pub elements: Option<u64>,
    /// `MEMORY USAGE ... SAMPLES 5` on the scanned server, bytes.
    pub memory_bytes: Option<u64>,
    /// Elements of the value built (1 for a string).
    pub built_elements: u64,
    /// Bytes of one element built (of a hash field and of its value, each; a string's whole
    /// size): estimated from `memory_bytes` for a collection.
    pub built_element_bytes: u64,
    /// `OBJECT ENCODING` of the value built.
    pub built_encoding: Option<String>,
    /// Predicted freeze of `DEL`, ms (keys.csv's `delete_ms`).
    pub delete_predicted_ms: Option<f64>,
    /// Measured: the probes' `hol_delay_ms` of the `DEL`, ms.
    pub delete_measured_ms: Option<f64>,
    /// Predicted freeze of `UNLINK`, ms.
    pub unlink_predicted_ms: Option<f64>,
    /// Measured freeze of `UNLINK`, ms.
    pub unlink_measured_ms: Option<f64>,
    /// Predicted freeze of its expiry, ms.
    pub expire_predicted_ms: Option<f64>,
    /// Measured freeze of its expiry, ms.
    pub expire_measured_ms: Option<f64>,
    /// The thread the expiry freed it on, as the replay server's counters told.
    pub expire_freed_by: Option<String>,
    /// Predicted freeze of its eviction under `maxmemory`, ms.
    pub evict_predicted_ms: Option<f64>,
    /// Measured freeze of its eviction, ms (the replay server's `maxmemory` lowered under
    /// what it held, `volatile-ttl`, the key the only one with a TTL).
    pub evict_measured_ms: Option<f64>,
    /// Predicted freeze of reading it whole, ms.
    pub read_predicted_ms: Option<f64>,
    /// Measured freeze of reading it whole, ms.
    pub read_measured_ms: Option<f64>,
    /// The ops no probe overlapped (`;`-separated): each took less than one probe interval,
    /// and its measured column is empty.
    pub under_one_interval: String,
    /// The probes' aggregate interval, ms (1 / (rate × threads)).
    pub probe_interval_ms: f64,
    /// The replay run's id (its `--out` subdirectory is `replay-<rank>`).
    pub run_id: Option<String>,
    /// Why a figure is missing: the shape could not be built, or an op failed.
    pub error: Option<String>,
}

/// The shape built for a scanned key: its kind, elements and bytes per element, or why none
/// can be built. A collection's bytes are the estimate without a calibration: its memory over
/// its count, less the bookkeeping per element the writer assumes for the type.
pub fn replay_shape(row: &KeyRow) -> Result<(&'static dyn ValueKind, u64, u64), String> {
    let kind = kind_named(&row.kind).ok_or_else(|| format!("type {} is not built", row.kind))?;
    if kind.name() == "string" {
        let bytes = row
            .elements
            .or(row.memory_bytes)
            .filter(|&b| b > 0)
            .ok_or("the scan has no STRLEN of it")?;
        return Ok((kind, 1, bytes));
    }
    let elements = row
        .elements
        .filter(|&n| n > 0)
        .ok_or("the scan has no element count of it")?;
    let compact = matches!(row.encoding.as_str(), "listpack" | "ziplist" | "intset");
    let overhead = if compact {
        COMPACT_OVERHEAD_BYTES
    } else {
        kind.server_overhead_per_element()
    };
    let estimated = match row.memory_bytes {
        Some(memory) => {
            (memory / elements).saturating_sub(overhead) / kind.bytes_per_element_factor()
        }
        None => DEFAULT_ELEMENT_BYTES,
    };
    // Members must be distinct, and the writer's take at least as many bytes as that needs.
    let mut bytes = estimated.max(1);
    if kind.check_elements(elements, bytes).is_err() {
        bytes = (1..=16)
            .find(|&b| distinct_elements(b) >= elements)
            .unwrap_or(16);
    }
    Ok((kind, elements, bytes))
}

/// The element size whose values hold `memory_per_element` bytes per element, from two values
/// of the same type and count built at 16 and 64 bytes per element (`calibration`: their
/// `MEMORY USAGE` per element, counted whole: what the scan's 5 samples estimate): the line
/// through them, solved. `None` where the line does not rise (a compact encoding rounded to one
/// allocation size) or gives less than a byte.
pub fn element_bytes_from_calibration(
    memory_per_element: f64,
    calibration: [(u64, f64); 2],
) -> Option<u64> {
    let [(s1, m1), (s2, m2)] = calibration;
    let slope = (m2 - m1) / (s2 as f64 - s1 as f64);
    if !(slope.is_finite() && slope > 0.0) {
        return None;
    }
    let bytes = s1 as f64 + (memory_per_element - m1) / slope;
    (bytes >= 1.0).then(|| bytes.round() as u64)
}

/// A key's row before (or without) its measurements.
pub fn unmeasured_row(
    key: &KeyRow,
    (built_elements, built_element_bytes): (u64, u64),
    probe_interval_ms: f64,
    error: Option<String>,
) -> ReplayRow {
    ReplayRow {
        node: key.node.clone(),
        key: key.key.clone(),
        kind: key.kind.clone(),
        encoding: key.encoding.clone(),
        elements: key.elements,
        memory_bytes: key.memory_bytes,
        built_elements,
        built_element_bytes,
        built_encoding: None,
        delete_predicted_ms: key.delete_ms,
        delete_measured_ms: None,
        unlink_predicted_ms: key.unlink_ms,
        unlink_measured_ms: None,
        expire_predicted_ms: key.expire_ms,
        expire_measured_ms: None,
        expire_freed_by: None,
        evict_predicted_ms: key.evict_ms,
        evict_measured_ms: None,
        read_predicted_ms: key.read_ms,
        read_measured_ms: None,
        under_one_interval: String::new(),
        probe_interval_ms,
        run_id: None,
        error,
    }
}

/// A figure for the screen: `-` when there is none, `<0.50` when no probe overlapped the op.
fn cell(ms: Option<f64>, under: bool, interval_ms: f64) -> String {
    match ms {
        Some(ms) => format!("{ms:.1}"),
        None if under => format!("<{interval_ms:.2}"),
        None => "-".into(),
    }
}

/// The replay's table: predicted against measured beside each key.
pub fn text_lines(rows: &[ReplayRow], server: &str) -> Vec<String> {
    let mut lines = vec![
        format!(
            "replay on {server}: each key's shape built (never its contents), predicted / measured freeze, ms"
        ),
        format!(
            "{:<24} {:<6} {:<10} {:>9} {:>7} {:<10} {:>17} {:>17} {:>17} {:>17} {:>17}",
            "key",
            "type",
            "encoding",
            "elements",
            "elem B",
            "built as",
            "DEL",
            "UNLINK",
            "expiry",
            "eviction",
            "read"
        ),
    ];
    let (mut off, mut pairs) = (0usize, 0usize);
    for r in rows {
        let under = |op: &str| r.under_one_interval.split(';').any(|o| o == op);
        let mut pair = |predicted: Option<f64>, measured: Option<f64>, op: &str| {
            let miss = match (predicted, measured) {
                (Some(p), Some(m)) => {
                    pairs += 1;
                    let far = far_off(p, m);
                    off += usize::from(far);
                    far
                }
                _ => false,
            };
            format!(
                "{} / {}{}",
                cell(predicted, false, r.probe_interval_ms),
                cell(measured, under(op), r.probe_interval_ms),
                if miss { "!" } else { "" }
            )
        };
        // Quoted, as the scan's table shows it: an empty key was a blank cell (the trial).
        let mut key = format!("\"{}\"", r.key);
        if key.chars().count() > 24 {
            key = key.chars().take(23).collect::<String>() + "…";
        }
        lines.push(format!(
            "{:<24} {:<6} {:<10} {:>9} {:>7} {:<10} {:>17} {:>17} {:>17} {:>17} {:>17}",
            key,
            r.kind,
            r.encoding,
            r.elements.map_or("-".into(), |n| n.to_string()),
            r.built_element_bytes,
            r.built_encoding.as_deref().unwrap_or("-"),
            pair(r.delete_predicted_ms, r.delete_measured_ms, "delete"),
            pair(r.unlink_predicted_ms, r.unlink_measured_ms, "unlink"),
            pair(r.expire_predicted_ms, r.expire_measured_ms, "expire"),
            pair(r.evict_predicted_ms, r.evict_measured_ms, "evict"),
            pair(r.read_predicted_ms, r.read_measured_ms, "read"),
        ));
        if let Some(error) = &r.error {
            lines.push(format!("  \"{}\": {error}", r.key));
        }
    }
    if off > 0 {
        lines.push(format!(
            "! {off} of {pairs} predictions missed the measured freeze by more than max({FAR_MS} ms, {:.0}%): the model's stated error does not cover them (a read's cost follows how fast its reader drains the reply, and this host's CPU shortage is in every measured figure)",
            FAR_SHARE * 100.0
        ));
    }
    if let Some((ratio, n)) = removals_measured_over_predicted(rows) {
        lines.push(format!(
            "on this host today the replayed DEL, UNLINK and expiry of 1 ms or more measured a median {ratio:.2}x the prediction ({n} of them): a server's frees run faster or slower from one sitting to the next (0.66x to 1.45x the shipped models' predictions on the VM they were recorded on, docs/keys.md), and the other keys' figures are the model's, not this day's"
        ));
    }
    lines
}

/// The median of measured over predicted over the replayed removals (DEL, UNLINK, expiry)
/// measured at 1 ms or more, and how many: what the day's host made of the model.
pub fn removals_measured_over_predicted(rows: &[ReplayRow]) -> Option<(f64, usize)> {
    let ratios: Vec<f64> = rows
        .iter()
        .flat_map(|r| {
            [
                (r.delete_predicted_ms, r.delete_measured_ms),
                (r.unlink_predicted_ms, r.unlink_measured_ms),
                (r.expire_predicted_ms, r.expire_measured_ms),
            ]
        })
        .filter_map(|pair| match pair {
            (Some(p), Some(m)) if m >= 1.0 && p > 0.0 => Some(m / p),
            _ => None,
        })
        .collect();
    crate::analyze::stats::spread(&ratios).map(|s| (s.median, s.n))
}

/// A prediction further than this from the measured freeze, ms or a share of the measured,
/// whichever is larger, is marked `!` in the replay's table: the goal the model is held to.
const FAR_MS: f64 = 3.0;
/// See [`FAR_MS`].
const FAR_SHARE: f64 = 0.4;

/// True when `predicted` misses `measured` past [`FAR_MS`] and [`FAR_SHARE`].
fn far_off(predicted: f64, measured: f64) -> bool {
    (predicted - measured).abs() > FAR_MS.max(FAR_SHARE * measured)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::keys::report::tests::sample_row;

    /// A replayed hash, as the columns test and the screen's test use it.
    pub(crate) fn sample_replay_row() -> ReplayRow {
        ReplayRow {
            built_encoding: Some("hashtable".into()),
            delete_measured_ms: Some(61.5),
            unlink_measured_ms: None,
            expire_measured_ms: Some(70.25),
            expire_freed_by: Some("main".into()),
            read_measured_ms: Some(30.0),
            under_one_interval: "unlink".into(),
            run_id: Some("abcd1234".into()),
            ..unmeasured_row(&sample_row(), (200_000, 16), 0.5, None)
        }
    }

    fn key(kind: &str, encoding: &str, elements: Option<u64>, memory: Option<u64>) -> KeyRow {
        KeyRow {
            kind: kind.into(),
            encoding: encoding.into(),
            elements,
            memory_bytes: memory,
            ..sample_row()
        }
    }

    #[test]
    fn a_shape_has_the_scanned_count_and_about_its_bytes() {
        // A string is its STRLEN.
        let (kind, n, b) = replay_shape(&key("string", "raw", Some(1 << 20), None)).unwrap();
        assert_eq!((kind.name(), n, b), ("string", 1, 1 << 20));
        // A hash of 200k fields at 80 bytes each in memory: 48 of bookkeeping, 16 + 16 bytes.
        let (kind, n, b) =
            replay_shape(&key("hash", "hashtable", Some(200_000), Some(200_000 * 80))).unwrap();
        assert_eq!((kind.name(), n, b), ("hash", 200_000, 16));
        // A listpack's bookkeeping is a few bytes per entry.
        let (_, n, b) = replay_shape(&key("list", "listpack", Some(100), Some(100 * 34))).unwrap();
        assert_eq!((n, b), (100, 32));
        // Without MEMORY, the writer's default element.
        let (_, _, b) = replay_shape(&key("set", "hashtable", Some(1000), None)).unwrap();
        assert_eq!(b, DEFAULT_ELEMENT_BYTES);
        // Members stay distinct: 1M of them need 5 hex digits at least.
        let (_, _, b) =
            replay_shape(&key("set", "hashtable", Some(1_000_000), Some(40_000_000))).unwrap();
        assert_eq!(b, 5);
        assert!(replay_shape(&key("hash", "hashtable", None, Some(1000))).is_err());
        assert!(replay_shape(&key("string", "raw", None, None)).is_err());
        assert!(replay_shape(&key("vectorset", "x", Some(5), None)).is_err());
    }

    #[test]
    fn the_element_size_is_read_off_the_calibration_line() {
        // 66 bytes of bookkeeping per element, 2 bytes per byte of element (a hash's field and
        // value): 98 bytes per element is 16-byte elements.
        let line = [(16, 66.0 + 32.0), (64, 66.0 + 128.0)];
        assert_eq!(element_bytes_from_calibration(98.0, line), Some(16));
        assert_eq!(element_bytes_from_calibration(266.0, line), Some(100));
        // Below the line's 1-byte point, or a line that does not rise: no answer.
        assert_eq!(element_bytes_from_calibration(10.0, line), None);
        assert_eq!(
            element_bytes_from_calibration(98.0, [(16, 80.0), (64, 80.0)]),
            None
        );
    }

    #[test]
    fn the_screen_shows_predicted_beside_measured() {
        let lines = text_lines(&[sample_replay_row()], "redis 7.0.15");
        // The sample's predictions (a 1M hash's) are far from its measures (200k): marked.
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(lines[3].starts_with("! 3 of 3 predictions"), "{lines:?}");
        // And the day's ratio over the removals measured (DEL and expiry; the UNLINK was under
        // one probe interval).
        let (ratio, n) = removals_measured_over_predicted(&[sample_replay_row()]).unwrap();
        assert_eq!(n, 2);
        assert!(lines[4].starts_with(&format!(
            "on this host today the replayed DEL, UNLINK and expiry of 1 ms or more measured a median {ratio:.2}x the prediction (2 of them)"
        )), "{lines:?}");
        let row = &lines[2];
        assert!(row.contains("61.5"), "{row}");
        // No probe overlapped the UNLINK: under one interval, not a 0.
        assert!(row.contains("/ <0.50"), "{row}");
        assert!(row.contains("70.2") || row.contains("70.3"), "{row}");

        // A read predicted at 45 ms and measured at 250.9 (the hostile trial's 64M GET) is
        // marked, and counted under the table; one within max(3 ms, 40%) is not.
        let mut far = sample_replay_row();
        far.read_predicted_ms = Some(45.0);
        far.read_measured_ms = Some(250.9);
        far.delete_predicted_ms = Some(50.0);
        far.delete_measured_ms = Some(61.5);
        let lines = text_lines(&[far.clone()], "redis 7.0.15");
        assert!(lines[2].contains("45.0 / 250.9!"), "{lines:?}");
        assert!(lines[2].contains("50.0 / 61.5 "), "{lines:?}");
        let marked = &lines[lines.len() - 2];
        assert!(
            marked.starts_with("! 2 of 3"),
            "the read and the expiry (400 / 70.2): {marked}"
        );
        // DEL 61.5 / 50 and expiry 70.25 / the sample's prediction: their median ratio.
        let (ratio, n) = removals_measured_over_predicted(&[far.clone()]).unwrap();
        let expire = 70.25 / far.expire_predicted_ms.unwrap();
        assert_eq!(n, 2);
        assert!((ratio - (1.23 + expire) / 2.0).abs() < 1e-9, "{ratio}");
        // Nothing of 1 ms or more measured: no line.
        let mut small = far;
        small.delete_measured_ms = Some(0.6);
        small.expire_measured_ms = None;
        assert_eq!(removals_measured_over_predicted(&[small]), None);
        assert!(far_off(45.0, 250.9) && !far_off(1.0, 3.5) && !far_off(100.0, 139.0));
    }
}
