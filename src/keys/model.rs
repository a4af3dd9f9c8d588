//! The cost model of one server version: for each type × encoding × op, the freeze per element
//! and per MiB, fitted from measured ops ([`super::fit`]), with the fit's error and where each
//! figure came from. Stored as a small JSON file ([`CostModel`], format [`MODEL_FORMAT`]); those
//! in `data/models/` are built into the binary ([`shipped`]).
//!
//! A model holds what the main thread pays to free (or read) a value. Which thread frees it is
//! not in the model but in the server's rule and settings ([`crate::workload::lazyfree`]), read
//! from the scanned server: a prediction applies the rule, so a hash past the effort threshold
//! on a server with `lazyfree-lazy-expire yes` is predicted to expire with a freeze of about 0.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use super::fit::{EXPONENT_RANGE, element_term_ms};
use crate::workload::lazyfree::{FreedBy, LazyfreeSettings, Removal, freed_by};
use crate::workload::{ValueKind, kind_named};

/// The model file format this build writes (2: an entry's `elements_exponent`).
pub const MODEL_FORMAT: u32 = 2;

/// How many times the largest size an entry was fitted on a key may be before its figure is
/// called an extrapolation: a refit's power law from 50k and 200k elements priced a 500k
/// sorted set's read at 3.3 times its measured freeze (the hostile trial), and twice the
/// largest size fitted is as far as a curve through two or three sizes is worth trusting.
pub const PAST_FITTED_FACTOR: f64 = 2.0;

/// The most an entry's per-element cost may be, µs, and its per-MiB cost, ms: a million times
/// the largest any shipped model has (about 1 µs per element, 1 ms per MiB), a second per
/// element or over 16 minutes per MiB. No server frees or reads that slowly; a file past it is
/// broken (the hostile trial's `1e300` printed a 301-digit DEL).
const ABSURD_PER_ELEMENT_US: f64 = 1e6;
const ABSURD_PER_MIB_MS: f64 = 1e6;

/// The oldest format this build reads: format 1's entries are lines (an exponent of 1).
pub const MODEL_FORMAT_OLDEST: u32 = 1;

/// One server's cost model (a file of `data/models/`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// [`MODEL_FORMAT`].
    pub format: u32,
    /// The server the ops were measured on.
    pub server: ModelServer,
    /// The `lazyfree-lazy-*` settings while measuring (the measurements set them all to `no`,
    /// so that every removal was a main-thread free, except UNLINK).
    pub lazyfree_measured: LazyfreeSettings,
    /// How the figures were obtained: commands, host, date.
    pub measured_how: Vec<String>,
    /// One entry per type × encoding × op × thread.
    pub entries: Vec<CostEntry>,
    /// The measured rows the entries were fitted from: a refit starts from them, and a reader
    /// can check any entry against its evidence.
    #[serde(default)]
    pub rows: Vec<super::fit::FitRow>,
    /// The model's predictions against sizes recorded after the fit, each in a sitting of its
    /// own on the same kind of host: the error a user's key sees, the host's drift between
    /// sittings included, which the fit's own leave-one-out error leaves out. Read from a lone
    /// `later_check` object too (files of before the second sitting).
    #[serde(
        default,
        alias = "later_check",
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub later_checks: Vec<LaterCheck>,
}

/// `later_checks` as an array, or as the one object files held before it was one.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<LaterCheck>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(LaterCheck),
        Many(Vec<LaterCheck>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(check) => vec![check],
        OneOrMany::Many(checks) => checks,
    })
}

/// A model's DEL, UNLINK and expiry predictions set against sizes none of its rows has,
/// measured in a later sitting (data/unseen for the shipped models: `examples/holdout.rs
/// data/collections data/heldout --test data/unseen`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaterCheck {
    /// What was measured, when, where.
    pub how: String,
    /// Entries judged (type × op × size).
    pub entries: usize,
    /// Of them, measured at 1 ms or more (the others' relative error is the timer's noise).
    pub relative: usize,
    /// The median |predicted − measured| / measured over those, %.
    pub median_abs_pct: Option<f64>,
    /// The median of measured / predicted over those: above 1, the model priced the later
    /// sitting's freezes too low.
    pub median_measured_over_predicted: Option<f64>,
    /// Entries worse than max(3 ms, 40%).
    pub past_floor: usize,
}

impl LaterCheck {
    /// One clause of the report's model line: `on sizes recorded in a later sitting, median 32%
    /// (20 entries of 1 ms or more), measured 1.40x the prediction`.
    pub fn clause(&self) -> Option<String> {
        let median = self.median_abs_pct?;
        Some(format!(
            "on sizes recorded in a later sitting, median {median:.0}% ({} entries of 1 ms or more){}",
            self.relative,
            super::holdout::measured_over_predicted_clause(self.median_measured_over_predicted)
        ))
    }

    /// The clauses of every later sitting, the second on as `in another, median 16% (...)`.
    pub fn clauses(checks: &[LaterCheck]) -> Option<String> {
        let mut parts = checks.iter().filter_map(LaterCheck::clause);
        let first = parts.next()?;
        Some(parts.fold(first, |all, next| {
            format!(
                "{all}; in another, {}",
                next.trim_start_matches("on sizes recorded in a later sitting, ")
            )
        }))
    }
}

/// The server of a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelServer {
    /// `redis` or `valkey`.
    pub flavor: String,
    /// Its version (`7.0.15`).
    pub version: String,
}

/// An op a model prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelOp {
    /// `DEL`.
    Delete,
    /// `UNLINK`.
    Unlink,
    /// The server's active expiry.
    Expire,
    /// An eviction under `maxmemory`.
    Evict,
    /// A `SET` over the value.
    Overwrite,
    /// The whole value read in one command (`GET`, `HGETALL`, ...).
    Read,
}

impl ModelOp {
    /// Every op, in the files' order.
    pub const ALL: [ModelOp; 6] = [
        ModelOp::Delete,
        ModelOp::Unlink,
        ModelOp::Expire,
        ModelOp::Evict,
        ModelOp::Overwrite,
        ModelOp::Read,
    ];

    /// How the value leaves the server, for a removal.
    pub fn removal(self) -> Option<Removal> {
        Some(match self {
            ModelOp::Delete => Removal::Delete,
            ModelOp::Unlink => Removal::Unlink,
            ModelOp::Expire => Removal::Expire,
            ModelOp::Evict => Removal::Evict,
            ModelOp::Overwrite => Removal::Overwrite,
            ModelOp::Read => return None,
        })
    }

    /// Lower-case name, as in the files.
    pub fn name(self) -> &'static str {
        match self {
            ModelOp::Delete => "delete",
            ModelOp::Unlink => "unlink",
            ModelOp::Expire => "expire",
            ModelOp::Evict => "evict",
            ModelOp::Overwrite => "overwrite",
            ModelOp::Read => "read",
        }
    }
}

/// Where an entry's figures came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The tool's own measured ops: `hol_delay_ms`, what its probes saw.
    Tool,
    /// Provisional: the server's own figure (SLOWLOG execution time, LATENCY event) of ops on
    /// values built by test code, not yet the tool's probes (see `measured_how`).
    Provisional,
}

/// One fitted group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostEntry {
    /// The value's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its encoding.
    pub encoding: String,
    /// The op.
    pub op: ModelOp,
    /// The thread that freed the value in the rows (`None` for a read).
    pub freed_by: Option<FreedBy>,
    /// Freeze per element, µs (at [`ELEMENTS_REF`] elements where `elements_exponent` is not 1).
    pub per_element_us: f64,
    /// How the element term grows with the element count: `elements ^ elements_exponent`
    /// (1: linear; a fitted power law otherwise, see [`crate::keys::fit`]).
    #[serde(default = "linear")]
    pub elements_exponent: f64,
    /// Freeze per MiB of payload, ms.
    pub per_mib_ms: f64,
    /// Rows fitted.
    pub rows: usize,
    /// Fewest elements among them.
    pub elements_min: u64,
    /// Most elements among them.
    pub elements_max: u64,
    /// Smallest element among them, bytes.
    pub element_bytes_min: u64,
    /// Largest element among them, bytes.
    pub element_bytes_max: u64,
    /// The fit's error.
    pub error: FitError,
    /// Where the rows came from.
    pub source: Source,
    /// What a prediction's basis calls this entry, made once: a scan predicts every key.
    #[serde(skip)]
    pub labels: EntryLabels,
}

/// How a prediction resting on an entry names it: plain, or with the way it stood in for the
/// op asked ([`HOW`]).
#[derive(Debug, Clone, Default)]
pub struct EntryLabels(OnceLock<[Arc<str>; 1 + HOW.len()]>);

/// The ways an entry stands in for another op, as a basis says them.
const HOW: [&str; 4] = [
    "as delete",
    "one allocation, as a string's delete",
    "another encoding",
    BYTES_AS_A_STRING,
];

/// A collection's elements are large, and its bytes priced as a string's are a floor of its
/// figure, past this many times the element size its entry was fitted on (and past
/// [`LARGE_ELEMENT_BYTES`]): `MEMORY USAGE` over the count includes each element's overhead (a
/// 16-byte hash field and value read as about 80 bytes).
const LARGE_ELEMENT_FACTOR: u64 = 64;
/// See [`LARGE_ELEMENT_FACTOR`].
const LARGE_ELEMENT_BYTES: u64 = 1024;

/// How a collection's figure reads where its bytes, priced as a string's, cost more than its
/// elements: a collection of large elements (the entries are fitted on 16-byte ones).
const BYTES_AS_A_STRING: &str = "a collection's bytes, as a string's";

/// Labels are derived from the entry: two entries are equal whatever was cached.
impl PartialEq for EntryLabels {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

fn linear() -> f64 {
    1.0
}

impl CostEntry {
    /// The predicted freeze of a value of `elements` elements and `mib` MiB of payload, ms.
    pub fn freeze_ms(&self, elements: f64, mib: f64) -> f64 {
        element_term_ms(self.per_element_us, self.elements_exponent, elements)
            + self.per_mib_ms * mib
    }

    /// `hash hashtable delete`, or with `how` (one of [`HOW`]) `... (as delete)`.
    fn label(&self, how: Option<&str>) -> Arc<str> {
        let labels = self.labels.0.get_or_init(|| {
            let plain = format!("{} {} {}", self.kind, self.encoding, self.op.name());
            std::array::from_fn(|i| match i {
                0 => Arc::from(plain.as_str()),
                _ => Arc::from(format!("{plain} ({})", HOW[i - 1]).as_str()),
            })
        });
        let at = how.and_then(|how| HOW.iter().position(|h| *h == how));
        labels[at.map_or(0, |i| i + 1)].clone()
    }
}

/// How far a fit's predictions were from the rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitError {
    /// `leave-one-out`, or `in-sample (fewer than 3 rows)`.
    pub method: String,
    /// Median |predicted − measured| / measured, %.
    pub median_abs_pct: Option<f64>,
    /// Worst of the same, %.
    pub max_abs_pct: Option<f64>,
    /// Worst |predicted − measured|, ms.
    pub max_abs_ms: f64,
}

/// A model file that cannot be used, with why (the caller names the flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ModelError(pub String);

impl CostModel {
    /// Reads a model file's text, refusing garbage and other formats.
    pub fn parse(text: &str) -> Result<CostModel, ModelError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|err| ModelError(format!("not JSON ({err})")))?;
        let format = value.get("format").and_then(serde_json::Value::as_u64);
        match format {
            Some(f) if (u64::from(MODEL_FORMAT_OLDEST)..=u64::from(MODEL_FORMAT)).contains(&f) => {}
            Some(f) => {
                return Err(ModelError(format!(
                    "a cost model of format {f}; this probe reads formats {MODEL_FORMAT_OLDEST} to {MODEL_FORMAT}"
                )));
            }
            None => match value.get("format") {
                Some(other) if !other.is_null() => {
                    return Err(ModelError(format!(
                        "its \"format\" is {other}, of the wrong type: a whole number is expected (this probe reads formats {MODEL_FORMAT_OLDEST} to {MODEL_FORMAT})"
                    )));
                }
                _ => return Err(ModelError("not a cost model (no \"format\")".into())),
            },
        }
        let model: CostModel = serde_json::from_value(value)
            .map_err(|err| ModelError(format!("not a cost model ({err})")))?;
        // An empty model priced every key `?`, silently (the hostile trial).
        if model.entries.is_empty() {
            return Err(ModelError("a cost model with no entries".into()));
        }
        // The server it was fitted on is printed in warnings: a name and a version, no control
        // character (an escape sequence in the file reached the terminal; the hostile trial).
        // Likewise each entry's type and encoding, in every message about it (its label).
        let entry_names = model.entries.iter().flat_map(|e| {
            [
                ("an entry's type", &e.kind, "a type"),
                ("an entry's encoding", &e.encoding, "an encoding"),
            ]
        });
        for (field, text, what) in [
            (
                "server.flavor",
                &model.server.flavor,
                "a server's name or version",
            ),
            (
                "server.version",
                &model.server.version,
                "a server's name or version",
            ),
        ]
        .into_iter()
        .chain(entry_names)
        {
            if text.chars().any(char::is_control) {
                return Err(ModelError(format!(
                    "{field} \"{}\" is not {what}",
                    crate::analyze::naming::printable(text.as_bytes())
                )));
            }
        }
        for (i, entry) in model.entries.iter().enumerate() {
            if model.entries[..i].iter().any(|e| {
                e.kind == entry.kind
                    && e.encoding == entry.encoding
                    && e.op == entry.op
                    && e.freed_by == entry.freed_by
            }) {
                return Err(ModelError(format!(
                    "entry {} is there twice",
                    entry.label(None)
                )));
            }
        }
        for entry in &model.entries {
            let usable = |x: f64| x.is_finite() && x >= 0.0;
            // What it was fitted on, and how well: sizes of at least one, errors not below 0
            // (elements_max 0 read "up to 1000000.0x past the fitted sizes"; the trial).
            let error = &entry.error;
            if entry.elements_max == 0
                || entry.elements_min > entry.elements_max
                || entry.element_bytes_max == 0
                || entry.element_bytes_min > entry.element_bytes_max
                || !usable(error.max_abs_ms)
                || error.median_abs_pct.is_some_and(|p| !usable(p))
                || error.max_abs_pct.is_some_and(|p| !usable(p))
            {
                return Err(ModelError(format!(
                    "entry {} has fitted sizes or errors no fit makes (elements {}-{}, element bytes {}-{}, errors below 0?)",
                    entry.label(None),
                    entry.elements_min,
                    entry.elements_max,
                    entry.element_bytes_min,
                    entry.element_bytes_max
                )));
            }
            if kind_named(&entry.kind).is_none()
                || !usable(entry.per_element_us)
                || !usable(entry.per_mib_ms)
                || !(EXPONENT_RANGE.0..=EXPONENT_RANGE.1).contains(&entry.elements_exponent)
            {
                return Err(ModelError(format!(
                    "entry {} is not a usable fit",
                    entry.label(None)
                )));
            }
            if entry.per_element_us > ABSURD_PER_ELEMENT_US || entry.per_mib_ms > ABSURD_PER_MIB_MS
            {
                return Err(ModelError(format!(
                    "entry {} costs {} µs per element and {} ms per MiB: past any server's (at most {ABSURD_PER_ELEMENT_US:e} µs per element and {ABSURD_PER_MIB_MS:e} ms per MiB are read)",
                    entry.label(None),
                    entry.per_element_us,
                    entry.per_mib_ms
                )));
            }
        }
        for check in &model.later_checks {
            // Printed with every report: figures a check makes, and one line of text.
            if check.relative > check.entries
                || check.past_floor > check.entries
                || check
                    .median_abs_pct
                    .is_some_and(|p| !(p.is_finite() && p >= 0.0))
                || check
                    .median_measured_over_predicted
                    .is_some_and(|r| !(r.is_finite() && r > 0.0))
                || check.how.chars().any(char::is_control)
            {
                return Err(ModelError(
                    "one of its later_checks has figures or text no check makes".into(),
                ));
            }
        }
        Ok(model)
    }

    /// The ops a type × encoding of the model has entries for some of but not all (`hash
    /// hashtable delete`): a key of it gets those figures from a stand-in entry or none (`?`).
    pub fn missing_entries(&self) -> Vec<String> {
        let mut groups: Vec<(&str, &str)> = self
            .entries
            .iter()
            .map(|e| (e.kind.as_str(), e.encoding.as_str()))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let mut missing = Vec::new();
        for (kind, encoding) in groups {
            for op in ModelOp::ALL {
                if !self
                    .entries
                    .iter()
                    .any(|e| e.kind == kind && e.encoding == encoding && e.op == op)
                {
                    missing.push(format!("{kind} {encoding} {}", op.name()));
                }
            }
        }
        missing
    }

    /// `redis 7.0.15`.
    pub fn server_name(&self) -> String {
        format!("{} {}", self.server.flavor, self.server.version)
    }

    /// The entry of `kind` × `encoding` × `op` freed on `thread`.
    fn entry(
        &self,
        kind: &str,
        encoding: &str,
        op: ModelOp,
        thread: Option<FreedBy>,
    ) -> Option<&CostEntry> {
        self.entries.iter().find(|e| {
            e.kind == kind && e.encoding == encoding && e.op == op && e.freed_by == thread
        })
    }

    /// Any entry of `kind` × `op` freed on `thread` whatever the encoding, the one fitted on the
    /// most rows.
    fn entry_of_kind(
        &self,
        kind: &str,
        op: ModelOp,
        thread: Option<FreedBy>,
    ) -> Option<&CostEntry> {
        self.entries
            .iter()
            .filter(|e| e.kind == kind && e.op == op && e.freed_by == thread)
            .max_by_key(|e| e.rows)
    }

    /// True when any entry is provisional.
    pub fn has_provisional(&self) -> bool {
        self.entries.iter().any(|e| e.source == Source::Provisional)
    }

    /// The median over the entries of their median errors, %, and the entry whose median error
    /// is the worst: its label and its worst miss in ms. The worst entry alone read as the
    /// model's error (the hostile trial: "median up to 100%" on every Redis 7.0 scan, from a
    /// background UNLINK whose misses are at most 5 ms); with its miss in ms, a reader can tell.
    pub fn error_overview(&self) -> (Option<f64>, Option<(Arc<str>, f64)>) {
        let mut medians: Vec<f64> = self
            .entries
            .iter()
            .filter_map(|e| e.error.median_abs_pct)
            .collect();
        medians.sort_by(f64::total_cmp);
        let median = match medians.len() {
            0 => None,
            n if n % 2 == 1 => Some(medians[n / 2]),
            n => Some((medians[n / 2 - 1] + medians[n / 2]) / 2.0),
        };
        let worst = self
            .entries
            .iter()
            .filter(|e| e.error.median_abs_pct.is_some())
            .max_by(|a, b| {
                a.error
                    .median_abs_pct
                    .unwrap_or(0.0)
                    .total_cmp(&b.error.median_abs_pct.unwrap_or(0.0))
            })
            .map(|e| {
                let label = match e.freed_by {
                    Some(thread) => Arc::from(format!("{} ({})", e.label(None), thread.name())),
                    None => e.label(None),
                };
                (label, e.error.max_abs_ms)
            });
        (median, worst)
    }

    /// The worst median and worst single error over every entry, %.
    pub fn worst_errors_pct(&self) -> (Option<f64>, Option<f64>) {
        let worst = |pick: fn(&FitError) -> Option<f64>| {
            self.entries
                .iter()
                .filter_map(|e| pick(&e.error))
                .fold(None, |acc: Option<f64>, x| {
                    Some(acc.map_or(x, |a| a.max(x)))
                })
        };
        (worst(|e| e.median_abs_pct), worst(|e| e.max_abs_pct))
    }
}

/// The models in `data/models/`, built into the binary.
pub fn shipped() -> Vec<CostModel> {
    [
        include_str!("../../data/models/redis-6.2.json"),
        include_str!("../../data/models/redis-7.0.json"),
        include_str!("../../data/models/redis-8.2.json"),
        include_str!("../../data/models/valkey-9.1.json"),
    ]
    .iter()
    .filter_map(|text| CostModel::parse(text).ok())
    .collect()
}

/// `major.minor` of a version string, as numbers.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next().unwrap_or("0").trim().parse().ok()?;
    Some((major, minor))
}

/// Where a version sits on one line of descent: Valkey forked Redis 7.2, so Valkey 8.0 comes
/// after Redis 7.2 and beside Redis 7.4.
fn lineage(flavor: &str, version: &str) -> Option<f64> {
    let (major, minor) = major_minor(version)?;
    let own = major as f64 + minor as f64 / 100.0;
    Some(if flavor == "valkey" && major >= 8 {
        7.2 + (own - 7.2) / 4.0
    } else {
        own
    })
}

/// True when `model` was fitted on the same flavor and `major.minor` as the server.
pub fn fits_server(model: &CostModel, flavor: &str, version: &str) -> bool {
    model.server.flavor == flavor
        && major_minor(&model.server.version).is_some()
        && major_minor(&model.server.version) == major_minor(version)
}

/// The model for a server: its own version's (same flavor and `major.minor`), else the
/// nearest, with a warning that says so. `None` without any model.
pub fn choose<'m>(
    models: &'m [CostModel],
    flavor: &str,
    version: &str,
) -> Option<(&'m CostModel, Option<String>)> {
    if let Some(own) = models.iter().find(|m| fits_server(m, flavor, version)) {
        return Some((own, None));
    }
    let here = lineage(flavor, version).unwrap_or(0.0);
    let distance = |m: &CostModel| {
        let there = lineage(&m.server.flavor, &m.server.version).unwrap_or(0.0);
        // The same flavor first, then the nearest version.
        (
            m.server.flavor != flavor,
            ((there - here).abs() * 1e4) as u64,
        )
    };
    let nearest = models.iter().min_by_key(|m| distance(m))?;
    Some((
        nearest,
        Some(format!(
            "no cost model was fitted on {flavor} {version}: using the nearest shipped one, {}; its predictions may be off for this server",
            nearest.server_name()
        )),
    ))
}

/// What the scan knows of one key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyShape {
    /// `TYPE`.
    pub kind: &'static dyn ValueKind,
    /// `OBJECT ENCODING` (`None`: refused or failed).
    pub encoding: Option<String>,
    /// The count command's reply (a string's STRLEN).
    pub elements: Option<u64>,
    /// `MEMORY USAGE ... SAMPLES 5` (`None`: refused or failed).
    pub memory_bytes: Option<u64>,
}

impl PartialEq for &'static dyn ValueKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl KeyShape {
    /// Elements as the model counts them: 1 for a string.
    fn model_elements(&self) -> u64 {
        if self.kind.name() == "string" {
            1
        } else {
            self.elements.unwrap_or(0)
        }
    }

    /// Bytes of one element, estimated: a string's length; a collection's memory over its
    /// elements (an over-estimate: it counts the overhead per element too).
    fn element_bytes(&self) -> u64 {
        match (self.kind.name(), self.elements, self.memory_bytes) {
            ("string", Some(len), _) => len,
            ("string", None, Some(memory)) => memory,
            (_, Some(n), Some(memory)) if n > 0 => memory / n,
            _ => 16,
        }
    }

    /// The server's free effort of the value (`lazyfree.c`), from what was scanned.
    pub fn free_effort(&self) -> u64 {
        let encoding = self.encoding.as_deref().unwrap_or("");
        self.kind
            .free_effort(encoding, self.model_elements(), self.element_bytes())
    }

    /// Payload MiB as a fit row counts it.
    fn payload_mib(&self) -> f64 {
        let factor = self.kind.bytes_per_element_factor();
        (self.model_elements() as f64) * (self.element_bytes() as f64) * factor as f64
            / (1u64 << 20) as f64
    }
}

/// One predicted op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Predicted {
    /// The freeze, ms (`None`: nothing in the model to predict it from).
    pub freeze_ms: Option<f64>,
    /// The thread that frees the value (`None` for a read, or where the server did not say).
    pub freed_by: Option<FreedBy>,
    /// What the figure rests on: `hash hashtable delete`, `... (as delete)`, `background`.
    pub basis: Arc<str>,
    /// True when it rests on a provisional entry.
    pub provisional: bool,
    /// True when a model entry gave the figure; false where nothing did (no entry) or where
    /// only the server's rule did (a background free of a type the model has no entry for,
    /// put at 0), so such a key still counts as one the model could not price.
    #[serde(skip)]
    pub modelled: bool,
    /// The entry that priced it (`type encoding op`) and how many times the key's size is the
    /// largest it was fitted on, where that is past [`PAST_FITTED_FACTOR`]: an extrapolation.
    #[serde(skip)]
    pub past_fitted: Option<(Arc<str>, f64)>,
}

/// Every op predicted for one key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// `DEL`.
    pub delete: Predicted,
    /// `UNLINK`.
    pub unlink: Predicted,
    /// Its expiry.
    pub expire: Predicted,
    /// An eviction.
    pub evict: Predicted,
    /// A `SET` over it.
    pub overwrite: Predicted,
    /// A whole read.
    pub read: Predicted,
}

impl Prediction {
    /// Every op's prediction, in [`ModelOp::ALL`]'s order.
    pub fn all(&self) -> [&Predicted; 6] {
        [
            &self.delete,
            &self.unlink,
            &self.expire,
            &self.evict,
            &self.overwrite,
            &self.read,
        ]
    }

    /// Whether a model entry priced any op [`Self::worst_ms`] takes (a type or encoding with
    /// no entry in it: none, even where the server's lazyfree settings send its removals to
    /// the background, which are then put at 0 by rule).
    pub fn priced(&self) -> bool {
        [
            &self.delete,
            &self.expire,
            &self.evict,
            &self.overwrite,
            &self.read,
        ]
        .iter()
        .any(|p| p.modelled)
    }

    /// The worst freeze any op would cause, ms.
    pub fn worst_ms(&self) -> f64 {
        [
            &self.delete,
            &self.expire,
            &self.evict,
            &self.overwrite,
            &self.read,
        ]
        .iter()
        .filter_map(|p| p.freeze_ms)
        .fold(0.0, f64::max)
    }
}

/// Predicts every op of a key of `shape` on a server with `settings`, from `model`.
pub fn predict(model: &CostModel, shape: &KeyShape, settings: &LazyfreeSettings) -> Prediction {
    let effort = shape.free_effort();
    let one = |op: ModelOp| -> Predicted {
        let thread = op.removal().and_then(|r| freed_by(r, effort, settings));
        let encoding = shape.encoding.as_deref().unwrap_or("");
        let kind = shape.kind.name();
        // The op's own background rows, where the tool measured them: a background eviction is
        // not cheap. While the server is over `maxmemory` with the free still queued and nothing
        // else to evict, each command waits up to the eviction time limit for the background
        // thread (evict.c's `cant_free`): on Valkey 9.1 a 4M-field hash's eviction held others
        // 0.9 s at 2 x 1000 probes/s, its DEL (also in the background) 0.
        let measured_background = (thread == Some(FreedBy::Background) && op != ModelOp::Unlink)
            .then(|| model.entry(kind, encoding, op, thread))
            .flatten()
            .filter(|e| e.source == Source::Tool);
        if let Some(entry) = measured_background {
            let mut p = priced(entry, shape, "");
            p.basis = entry.label(None);
            return p;
        }
        // Without such rows, a background eviction is priced as the main thread's: an upper
        // bound (Redis 7.0, a 1M-field hash with `lazyfree-lazy-eviction yes`: others held
        // 58-139 ms at 2 x 1000 probes/s, 1 ms at 2 x 50/s, its DEL 285-396 ms), said as such.
        let waited_eviction = thread == Some(FreedBy::Background) && op == ModelOp::Evict;
        if thread == Some(FreedBy::Background) && !waited_eviction {
            // The main thread only unlinks the key: the model's background figure where it has
            // one (UNLINK's), else about nothing.
            let entry = model
                .entry(
                    shape.kind.name(),
                    shape.encoding.as_deref().unwrap_or(""),
                    ModelOp::Unlink,
                    thread,
                )
                .or_else(|| model.entry_of_kind(shape.kind.name(), ModelOp::Unlink, thread));
            return match entry {
                Some(entry) => priced(entry, shape, "background"),
                None => Predicted {
                    freeze_ms: Some(0.0),
                    freed_by: thread,
                    basis: Arc::from("background"),
                    provisional: false,
                    modelled: false,
                    past_fitted: None,
                },
            };
        }
        let main = op.removal().map(|_| FreedBy::Main);
        // Every main-thread free of the same value does the same work: a removal the model has
        // no rows of is priced as its DEL.
        let found = model
            .entry(kind, encoding, op, main)
            .map(|e| (e, None))
            .or_else(|| {
                (op.removal().is_some() && op != ModelOp::Delete)
                    .then(|| model.entry(kind, encoding, ModelOp::Delete, main))
                    .flatten()
                    .map(|e| (e, Some("as delete")))
            })
            .or_else(|| {
                // A compact encoding (listpack, intset, embstr) is one allocation: priced as a
                // string of its bytes.
                (effort <= 1 && op.removal().is_some())
                    .then(|| model.entry_of_kind("string", ModelOp::Delete, main))
                    .flatten()
                    .map(|e| (e, Some("one allocation, as a string's delete")))
            })
            .or_else(|| {
                model
                    .entry_of_kind(kind, op, main)
                    .map(|e| (e, Some("another encoding")))
            });
        match found {
            Some((entry, how)) => {
                let mut p = if how == Some("one allocation, as a string's delete") {
                    let bytes = shape.memory_bytes.unwrap_or_else(|| shape.element_bytes());
                    Predicted {
                        freeze_ms: Some(entry.per_mib_ms * bytes as f64 / (1u64 << 20) as f64),
                        freed_by: thread,
                        basis: Arc::from(""),
                        provisional: entry.source == Source::Provisional,
                        modelled: true,
                        past_fitted: None,
                    }
                } else {
                    priced(entry, shape, "")
                };
                p.freed_by = thread;
                p.basis = entry.label(how);
                // A collection's entries are fitted on element counts of 16-byte elements: one
                // of large elements holds bytes they never saw. Its op does at least what the
                // same op does to a string of as many bytes (copies them for a read, frees
                // them for a removal): a 78 MiB hash of 1,000 64 KiB values read as 0.2 ms by
                // its count, measured 61 ms (the hostile trial; a string of 80 MiB: 45 ms).
                // Only where its elements are well past those it was fitted on: a list of
                // 16-byte elements inside the fitted counts keeps its own figure (its DEL frees
                // a few hundred listpack nodes, cheaper than a string of its bytes; the
                // review). An overwrite of a collection (a RENAME) only frees: a string's DEL
                // is its floor, not a SET that also receives a value.
                let string_op = match op {
                    ModelOp::Overwrite => ModelOp::Delete,
                    op => op,
                };
                let large_elements = shape.element_bytes()
                    > (entry.element_bytes_max.saturating_mul(LARGE_ELEMENT_FACTOR))
                        .max(LARGE_ELEMENT_BYTES);
                if kind != "string"
                    && large_elements
                    && let Some(string) =
                        model.entry_of_kind("string", string_op, main).or_else(|| {
                            op.removal()
                                .and_then(|_| model.entry_of_kind("string", ModelOp::Delete, main))
                        })
                {
                    let bytes = shape
                        .memory_bytes
                        .unwrap_or_else(|| (shape.payload_mib() * (1u64 << 20) as f64) as u64);
                    let floor = string.freeze_ms(1.0, bytes as f64 / (1u64 << 20) as f64);
                    if p.freeze_ms.is_some_and(|ms| floor > ms) {
                        let times = bytes as f64 / string.element_bytes_max.max(1) as f64;
                        p.freeze_ms = Some(floor);
                        p.basis = string.label(Some(BYTES_AS_A_STRING));
                        p.provisional |= string.source == Source::Provisional;
                        // A count past the collection's fitted ones stays said.
                        p.past_fitted = p.past_fitted.take().or_else(|| {
                            (times > PAST_FITTED_FACTOR).then(|| (string.label(None), times))
                        });
                    }
                }
                if waited_eviction {
                    p.basis = Arc::from(format!(
                        "{}, as on the main thread: commands wait for the background free (an upper bound)",
                        p.basis
                    ));
                    p.provisional = true;
                }
                p
            }
            None => Predicted {
                freeze_ms: None,
                freed_by: thread,
                basis: Arc::from("no model entry"),
                provisional: false,
                modelled: false,
                past_fitted: None,
            },
        }
    };
    Prediction {
        delete: one(ModelOp::Delete),
        unlink: one(ModelOp::Unlink),
        expire: one(ModelOp::Expire),
        evict: one(ModelOp::Evict),
        overwrite: one(ModelOp::Overwrite),
        read: one(ModelOp::Read),
    }
}

fn priced(entry: &CostEntry, shape: &KeyShape, basis: &str) -> Predicted {
    let ms = entry.freeze_ms(shape.model_elements() as f64, shape.payload_mib());
    // A string's entry is fitted on sizes in bytes, a collection's on element counts.
    let (size, fitted) = if entry.kind == "string" {
        (shape.element_bytes(), entry.element_bytes_max)
    } else {
        (shape.model_elements(), entry.elements_max)
    };
    let times = size as f64 / fitted.max(1) as f64;
    Predicted {
        freeze_ms: Some(ms),
        freed_by: entry.freed_by,
        basis: Arc::from(basis),
        provisional: entry.source == Source::Provisional,
        modelled: true,
        past_fitted: (times > PAST_FITTED_FACTOR).then(|| (entry.label(None), times)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::keys::fit::{FitRow, fit};

    /// A model of 0.4 µs per hash field (main thread), 0.03 ms per MiB of string, and an
    /// UNLINK in the background at 0.
    pub(crate) fn sample_model() -> CostModel {
        let row = |kind: &str, encoding: &str, n: u64, b: u64, op, thread, ms| FitRow {
            kind: kind.into(),
            encoding: encoding.into(),
            elements: n,
            element_bytes: b,
            op,
            freed_by: thread,
            hol_delay_ms: ms,
            source: Source::Provisional,
            under_one_interval: false,
            pace_us: None,
        };
        let mut rows = Vec::new();
        for n in [100_000u64, 300_000, 1_000_000] {
            let ms = n as f64 * 0.4e-3;
            rows.push(row(
                "hash",
                "hashtable",
                n,
                16,
                ModelOp::Delete,
                Some(FreedBy::Main),
                ms,
            ));
            rows.push(row(
                "hash",
                "hashtable",
                n,
                16,
                ModelOp::Read,
                None,
                ms / 2.0,
            ));
            rows.push(row(
                "hash",
                "hashtable",
                n,
                16,
                ModelOp::Unlink,
                Some(FreedBy::Background),
                0.0,
            ));
        }
        for mib in [64u64, 256] {
            let mut r = row(
                "string",
                "raw",
                1,
                mib << 20,
                ModelOp::Delete,
                Some(FreedBy::Main),
                mib as f64 * 0.03,
            );
            r.source = Source::Tool;
            rows.push(r);
        }
        CostModel {
            format: MODEL_FORMAT,
            server: ModelServer {
                flavor: "redis".into(),
                version: "7.0.15".into(),
            },
            lazyfree_measured: LazyfreeSettings::default(),
            measured_how: vec!["synthetic".into()],
            entries: fit(&rows),
            rows,
            later_checks: Vec::new(),
        }
    }

    fn shape(kind: &str, encoding: &str, elements: u64, memory: u64) -> KeyShape {
        KeyShape {
            kind: kind_named(kind).unwrap(),
            encoding: Some(encoding.into()),
            elements: Some(elements),
            memory_bytes: Some(memory),
        }
    }

    fn settings(lazy: bool) -> LazyfreeSettings {
        LazyfreeSettings {
            lazy_user_del: Some(lazy),
            lazy_server_del: Some(lazy),
            lazy_expire: Some(lazy),
            lazy_eviction: Some(lazy),
            lazy_user_flush: Some(lazy),
        }
    }

    #[test]
    fn a_background_eviction_is_priced_from_its_own_rows_else_as_the_main_threads() {
        let mut model = sample_model();
        let big = shape("hash", "hashtable", 1_000_000, 80 << 20);
        // No rows of a background eviction: the main thread's figure (here the DEL's, 400
        // ms), an upper bound said as such, not UNLINK's nothing.
        let p = predict(&model, &big, &settings(true));
        assert_eq!(p.evict.freed_by, Some(FreedBy::Background));
        assert!((p.evict.freeze_ms.unwrap() - 400.0).abs() < 1e-6, "{p:?}");
        assert!(p.evict.provisional);
        assert!(p.evict.basis.contains("upper bound"), "{}", p.evict.basis);
        // The other background frees stay at UNLINK's figure.
        assert!(p.delete.freeze_ms.unwrap() < 1.0, "{p:?}");
        // With the tool's own rows of it (Valkey 9.1's lazy evictions), those rows.
        let mut evict = model
            .entries
            .iter()
            .find(|e| e.kind == "hash" && e.op == ModelOp::Delete)
            .unwrap()
            .clone();
        evict.op = ModelOp::Evict;
        evict.freed_by = Some(FreedBy::Background);
        evict.source = Source::Tool;
        evict.per_element_us /= 2.0;
        evict.labels = EntryLabels::default();
        model.entries.push(evict);
        let p = predict(&model, &big, &settings(true));
        assert!((p.evict.freeze_ms.unwrap() - 200.0).abs() < 1e-6, "{p:?}");
        assert!(!p.evict.provisional);
        assert_eq!(&*p.evict.basis, "hash hashtable evict");
        // A main-thread eviction is untouched by them.
        let p = predict(&model, &big, &settings(false));
        assert_eq!(p.evict.freed_by, Some(FreedBy::Main));
        assert!((p.evict.freeze_ms.unwrap() - 400.0).abs() < 1e-6, "{p:?}");
    }

    /// A collection of few large elements is priced at least as a string of its bytes: its
    /// entries, fitted on counts of 16-byte elements, read a 78 MiB hash of 1,000 64 KiB values
    /// as 0.1 ms (the hostile trial; measured 5-9 ms for its DEL).
    #[test]
    fn a_collection_of_large_elements_costs_at_least_its_bytes() {
        let model = sample_model();
        let fat = shape("hash", "hashtable", 1_000, 78 << 20);
        let p = predict(&model, &fat, &settings(false));
        // The string's 0.03 ms per MiB: 2.34 ms, against 0.4 ms for 1,000 fields.
        assert!(
            (p.delete.freeze_ms.unwrap() - 78.0 * 0.03).abs() < 1e-6,
            "{p:?}"
        );
        assert_eq!(
            &*p.delete.basis,
            "string raw delete (a collection's bytes, as a string's)"
        );
        // Its UNLINK is still the background's; a big hash of small fields keeps its own
        // entry (its count costs more than its bytes as a string).
        assert!(p.unlink.freeze_ms.unwrap() < 1.0, "{p:?}");
        let many = shape("hash", "hashtable", 1_000_000, 80 << 20);
        let p = predict(&model, &many, &settings(false));
        assert!((p.delete.freeze_ms.unwrap() - 400.0).abs() < 1e-6, "{p:?}");
        assert_eq!(&*p.delete.basis, "hash hashtable delete");
        // Elements near the fitted size whose own figure is under their bytes as a string's
        // (a quicklist's DEL frees listpack nodes): the entry's figure stands (the review).
        let mut cheap = model.clone();
        for e in cheap.entries.iter_mut().filter(|e| e.kind == "hash") {
            e.per_element_us = 0.0006; // a quicklist's DEL: 0.6 ms for 1M elements
            e.elements_exponent = 1.0;
            e.labels = EntryLabels::default();
        }
        let p = predict(&cheap, &many, &settings(false));
        assert!((p.delete.freeze_ms.unwrap() - 0.6).abs() < 1e-6, "{p:?}");
        assert_eq!(&*p.delete.basis, "hash hashtable delete");
        // ... while 64 KiB elements still get their bytes' figure.
        let p = predict(&cheap, &fat, &settings(false));
        assert!(
            (p.delete.freeze_ms.unwrap() - 78.0 * 0.03).abs() < 1e-6,
            "{p:?}"
        );
    }

    #[test]
    fn a_big_hash_freezes_on_del_not_on_unlink() {
        let model = sample_model();
        let p = predict(
            &model,
            &shape("hash", "hashtable", 1_000_000, 80 << 20),
            &settings(false),
        );
        let del = p.delete.freeze_ms.unwrap();
        assert!((del - 400.0).abs() < 1e-6, "{p:?}");
        assert_eq!(p.delete.freed_by, Some(FreedBy::Main));
        assert_eq!(p.unlink.freed_by, Some(FreedBy::Background));
        assert!(p.unlink.freeze_ms.unwrap() < 1.0);
        // Expiry and overwrite have no rows: priced as the DEL they equal.
        assert_eq!(p.expire.freeze_ms, Some(del));
        assert!(p.expire.basis.contains("as delete"), "{}", p.expire.basis);
        assert!((p.read.freeze_ms.unwrap() - 200.0).abs() < 1e-6);
        assert!(p.delete.provisional);
        assert_eq!(p.worst_ms(), del);
    }

    #[test]
    fn lazyfree_takes_a_collection_off_the_main_thread_but_never_a_string() {
        let model = sample_model();
        let lazy = settings(true);
        let hash = predict(
            &model,
            &shape("hash", "hashtable", 1_000_000, 80 << 20),
            &lazy,
        );
        assert_eq!(hash.expire.freed_by, Some(FreedBy::Background));
        assert!(hash.expire.freeze_ms.unwrap() < 1.0);
        assert_eq!(hash.delete.freed_by, Some(FreedBy::Background));
        let string = KeyShape {
            kind: kind_named("string").unwrap(),
            encoding: Some("raw".into()),
            elements: Some(256 << 20),
            memory_bytes: Some((256 << 20) + 64),
        };
        let p = predict(&model, &string, &lazy);
        assert_eq!(p.unlink.freed_by, Some(FreedBy::Main));
        assert!(
            (p.unlink.freeze_ms.unwrap() - 256.0 * 0.03).abs() < 1e-6,
            "{p:?}"
        );
        assert!(!p.delete.provisional);
    }

    #[test]
    fn a_small_hash_is_one_allocation() {
        let model = sample_model();
        let p = predict(
            &model,
            &shape("hash", "listpack", 100, 4096),
            &settings(true),
        );
        // Effort 1: the main thread, whatever the settings, and tiny.
        assert_eq!(p.expire.freed_by, Some(FreedBy::Main));
        assert!(p.delete.freeze_ms.unwrap() < 0.01, "{p:?}");
        assert!(
            p.delete.basis.contains("one allocation"),
            "{}",
            p.delete.basis
        );
    }

    /// A key far past the largest size its entry was fitted on is marked, by the entry that
    /// priced it; one within is not.
    #[test]
    fn a_key_far_past_the_fitted_sizes_is_marked() {
        let model = sample_model();
        // Fitted up to 1M fields and 256 MiB strings.
        let within = predict(
            &model,
            &shape("hash", "hashtable", 2_000_000, 160 << 20),
            &settings(false),
        );
        assert_eq!(within.delete.past_fitted, None);
        let past = predict(
            &model,
            &shape("hash", "hashtable", 5_000_000, 400 << 20),
            &settings(false),
        );
        let (label, times) = past.delete.past_fitted.clone().unwrap();
        assert_eq!(&*label, "hash hashtable delete");
        assert!((times - 5.0).abs() < 1e-9, "{times}");
        // Expiry priced as DEL: the DEL's entry is the one stretched.
        assert_eq!(
            past.expire.past_fitted.as_ref().map(|p| &*p.0),
            Some("hash hashtable delete")
        );
        let string = KeyShape {
            kind: kind_named("string").unwrap(),
            encoding: Some("raw".into()),
            elements: Some(1 << 30),
            memory_bytes: Some((1 << 30) + 64),
        };
        let p = predict(&model, &string, &settings(false));
        let (label, times) = p.delete.past_fitted.unwrap();
        assert_eq!(&*label, "string raw delete");
        assert!((times - 4.0).abs() < 1e-9, "{times}");
    }

    #[test]
    fn a_type_the_model_lacks_is_not_invented() {
        let model = sample_model();
        let p = predict(
            &model,
            &shape("zset", "skiplist", 1_000_000, 90 << 20),
            &settings(false),
        );
        assert_eq!(p.delete.freeze_ms, None);
        assert_eq!(&*p.delete.basis, "no model entry");
        assert_eq!(p.worst_ms(), 0.0);
    }

    #[test]
    fn files_round_trip_and_garbage_is_refused() {
        let model = sample_model();
        let text = serde_json::to_string_pretty(&model).unwrap();
        assert_eq!(CostModel::parse(&text).unwrap(), model);
        for (bad, says) in [
            ("garbage", "not JSON"),
            ("{}", "no \"format\""),
            ("{\"format\": 3}", "format 3"),
            ("{\"format\": 0}", "format 0"),
            ("{\"format\": 1, \"server\": 3}", "not a cost model"),
        ] {
            let err = CostModel::parse(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        // A format of the wrong JSON type is said to be that, not missing.
        let err = CostModel::parse("{\"format\": \"2\"}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("wrong type"), "{err}");
        assert!(!err.contains("no \"format\""), "{err}");
        // A later check is kept, and one with figures no check makes is refused.
        let mut checked = model.clone();
        checked.later_checks = vec![LaterCheck {
            how: "data/unseen".into(),
            entries: 4,
            relative: 3,
            median_abs_pct: Some(12.5),
            median_measured_over_predicted: Some(1.1),
            past_floor: 0,
        }];
        let checked_text = serde_json::to_string(&checked).unwrap();
        assert!(
            checked_text.contains("\"later_checks\":[{"),
            "{checked_text}"
        );
        assert_eq!(CostModel::parse(&checked_text).unwrap(), checked);
        // A file of before the second sitting held one `later_check` object: a list of one.
        let mut old: serde_json::Value = serde_json::from_str(&checked_text).unwrap();
        let one = old["later_checks"][0].clone();
        let object = old.as_object_mut().unwrap();
        object.remove("later_checks");
        object.insert("later_check".into(), one);
        assert_eq!(CostModel::parse(&old.to_string()).unwrap(), checked);
        // Two sittings print as one clause each.
        let mut two = checked.later_checks.clone();
        two.push(LaterCheck {
            median_abs_pct: Some(16.4),
            median_measured_over_predicted: Some(0.94),
            ..two[0].clone()
        });
        let clauses = LaterCheck::clauses(&two).unwrap();
        assert!(
            clauses.ends_with("; in another, median 16% (3 entries of 1 ms or more), measured 0.94x the prediction"),
            "{clauses}"
        );
        for edit in [
            |c: &mut LaterCheck| c.relative = 5,
            |c: &mut LaterCheck| c.past_floor = 9,
            |c: &mut LaterCheck| c.median_abs_pct = Some(-1.0),
            |c: &mut LaterCheck| c.median_measured_over_predicted = Some(0.0),
            |c: &mut LaterCheck| c.how = "\u{1b}[2J".into(),
        ] {
            let mut bad = checked.clone();
            edit(&mut bad.later_checks[0]);
            let err = CostModel::parse(&serde_json::to_string(&bad).unwrap())
                .unwrap_err()
                .to_string();
            assert!(err.contains("later_check"), "{err}");
        }
        // An absurd cost (the hostile trial's 1e300 printed a 301-digit DEL) is refused, per
        // element and per MiB; the largest shipped costs are far under the bound.
        for field in ["per_element_us", "per_mib_ms"] {
            let mut absurd = model.clone();
            match field {
                "per_element_us" => absurd.entries[0].per_element_us = 1e300,
                _ => absurd.entries[0].per_mib_ms = 2e6,
            }
            let err = CostModel::parse(&serde_json::to_string(&absurd).unwrap())
                .unwrap_err()
                .to_string();
            assert!(err.contains("past any server's"), "{field}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        for shipped in shipped() {
            assert!(
                shipped
                    .entries
                    .iter()
                    .all(|e| e.per_element_us < 10.0 && e.per_mib_ms < 10.0)
            );
        }
        let negative = text.replacen("\"per_element_us\": 0.", "\"per_element_us\": -0.", 1);
        assert_ne!(negative, text);
        assert!(CostModel::parse(&negative).is_err());
        let steep = text.replacen(
            "\"elements_exponent\": 1.0",
            "\"elements_exponent\": 7.0",
            1,
        );
        assert_ne!(steep, text);
        assert!(CostModel::parse(&steep).is_err());
        // No entries, or one twice (the hostile trial: both accepted, every key priced `?`).
        let mut empty = model.clone();
        empty.entries.clear();
        let err = CostModel::parse(&serde_json::to_string(&empty).unwrap()).unwrap_err();
        assert!(err.to_string().contains("no entries"), "{err}");
        let mut twice = model.clone();
        twice.entries.push(twice.entries[0].clone());
        let err = CostModel::parse(&serde_json::to_string(&twice).unwrap()).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        // Fitted sizes of 0 and errors below 0 no fit makes; a server name with an escape
        // sequence that would reach the terminal (the hostile trial).
        type Edit = fn(&mut CostModel);
        let edits: [(&str, Edit); 5] = [
            ("elements_max 0", |m| m.entries[0].elements_max = 0),
            ("error below 0", |m| {
                m.entries[0].error.median_abs_pct = Some(-5.0)
            }),
            ("worst ms below 0", |m| m.entries[0].error.max_abs_ms = -1.0),
            ("an escape", |m| {
                m.server.version = "x\n\u{1b}[31mRED".into()
            }),
            ("an escape in an encoding", |m| {
                m.entries[0].encoding = "\u{1b}[31m".into()
            }),
        ];
        for (what, edit) in edits {
            let mut bad = model.clone();
            edit(&mut bad);
            let err = CostModel::parse(&serde_json::to_string(&bad).unwrap())
                .unwrap_err()
                .to_string();
            assert!(
                !err.contains('\n') && !err.contains('\u{1b}'),
                "{what}: {err}"
            );
            assert!(
                err.contains("no fit makes")
                    || err.contains("is not a server's name")
                    || err.contains("is not an encoding"),
                "{what}: {err}"
            );
        }
        // Format 1 had no exponent: its entries are lines.
        let old: String = text
            .replacen("\"format\": 2", "\"format\": 1", 1)
            .lines()
            .filter(|l| !l.contains("elements_exponent"))
            .collect::<Vec<_>>()
            .join("\n");
        let old = CostModel::parse(&old).unwrap();
        assert!(old.entries.iter().all(|e| e.elements_exponent == 1.0));
    }

    /// An op missing from a type × encoding that has others is named (the hostile trial's
    /// model without `hash hashtable delete` priced the hash's DEL `?`, unsaid).
    #[test]
    fn a_missing_op_of_a_known_type_is_named() {
        assert_eq!(shipped().len(), 4);
        for model in shipped() {
            assert_eq!(
                model.missing_entries(),
                Vec::<String>::new(),
                "{}",
                model.server_name()
            );
        }
        let mut model = shipped().remove(1);
        model.entries.retain(|e| {
            !(e.kind == "hash" && e.encoding == "hashtable" && e.op == ModelOp::Delete)
        });
        assert_eq!(
            model.missing_entries(),
            vec!["hash hashtable delete".to_string()]
        );
    }

    #[test]
    fn the_nearest_model_is_chosen_with_a_warning() {
        let mut models = Vec::new();
        for (flavor, version) in [
            ("redis", "6.2.14"),
            ("redis", "7.0.15"),
            ("redis", "8.2.3"),
            ("valkey", "9.1.2"),
        ] {
            let mut m = sample_model();
            m.server = ModelServer {
                flavor: flavor.into(),
                version: version.into(),
            };
            models.push(m);
        }
        let (m, warning) = choose(&models, "redis", "7.0.11").unwrap();
        assert_eq!(m.server.version, "7.0.15");
        assert_eq!(warning, None);
        let (m, warning) = choose(&models, "redis", "7.2.4").unwrap();
        assert_eq!(m.server.version, "7.0.15");
        assert!(
            warning
                .unwrap()
                .contains("nearest shipped one, redis 7.0.15")
        );
        let (m, _) = choose(&models, "valkey", "8.0.1").unwrap();
        assert_eq!(m.server.flavor, "valkey");
        let (m, _) = choose(&models, "redis", "8.4.0").unwrap();
        assert_eq!(m.server.version, "8.2.3");
        assert!(choose(&[], "redis", "7.0.0").is_none());
    }
}
