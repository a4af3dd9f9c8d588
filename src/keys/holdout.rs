//! The cost model's error on a size it was not fitted on: for each group of a server's fit rows
//! (type × encoding × op × freeing thread), each size measured (element count × element bytes)
//! is left out in turn, the group fitted on the other sizes' rows ([`super::fit::fit`]), and the
//! prediction for the left-out size set against what was measured there. Pure.
//!
//! Why not the fit's own leave-one-out error: it leaves out one row, and the other repeats of
//! the same size stay in the fit, so it says how well a size already measured is predicted. A
//! scanned key is almost never of a measured size; leaving out every repeat of a size is the
//! error such a key sees. With two sizes measured, each held-out fit rests on one size alone
//! (a line through zero and that size), and the result says so ([`HeldOut::sizes_fitted`]).

use serde::Serialize;

use super::fit::{FitRow, GroupKey, RELATIVE_FROM_MS, fit, group_name, groups};
use super::model::{LaterCheck, ModelOp};
use crate::workload::lazyfree::FreedBy;

/// The floor: median |error| at most this, %.
pub const FLOOR_MEDIAN_PCT: f64 = 20.0;
/// The floor: no entry worse than this many ms and this % at once.
pub const FLOOR_WORST_MS: f64 = 3.0;
/// See [`FLOOR_WORST_MS`].
pub const FLOOR_WORST_PCT: f64 = 40.0;

/// One size left out of one group's fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOut {
    /// The value's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its encoding.
    pub encoding: String,
    /// The op.
    pub op: ModelOp,
    /// The thread that freed the value (`None` for a read).
    pub freed_by: Option<FreedBy>,
    /// The left-out size's element count.
    pub elements: u64,
    /// The left-out size's element bytes.
    pub element_bytes: u64,
    /// Distinct sizes the fit rested on.
    pub sizes_fitted: usize,
    /// Rows the fit rested on.
    pub rows_fitted: usize,
    /// Rows (repeats) measured at the left-out size.
    pub repeats: usize,
    /// Their median, ms.
    pub measured_ms: f64,
    /// Their smallest, ms.
    pub measured_min_ms: f64,
    /// Their largest, ms.
    pub measured_max_ms: f64,
    /// The fit's prediction for the size, ms.
    pub predicted_ms: f64,
    /// |predicted − measured median|, ms.
    pub error_ms: f64,
    /// The same over the measured median, % (`None` under [`RELATIVE_FROM_MS`], where a
    /// relative error is the timer's noise).
    pub error_pct: Option<f64>,
    /// Every measured row at the size was under one probe interval (an upper bound).
    pub under_one_interval: bool,
}

impl HeldOut {
    /// Past the floor for a single entry: worse than 3 ms and 40% at once.
    pub fn past_floor(&self) -> bool {
        self.error_ms > FLOOR_WORST_MS && self.error_pct.is_some_and(|p| p > FLOOR_WORST_PCT)
    }

    /// The same entry with its prediction multiplied by `factor`.
    pub fn repriced(mut self, factor: f64) -> HeldOut {
        self.predicted_ms *= factor;
        self.error_ms = (self.predicted_ms - self.measured_ms).abs();
        if self.error_pct.is_some() {
            self.error_pct = Some(100.0 * self.error_ms / self.measured_ms);
        }
        self
    }
}

/// The host's pace over `rows` of type `kind`: the median of their runs' baseline PING round
/// trips ([`FitRow::pace_us`]), µs; `None` where no row says.
pub fn pace_of<'a>(rows: impl IntoIterator<Item = &'a FitRow>, kind: &str) -> Option<f64> {
    let mut paces: Vec<f64> = rows
        .into_iter()
        .filter(|r| r.kind == kind)
        .filter_map(|r| r.pace_us)
        .filter(|&us| us > 0)
        .map(|us| us as f64)
        .collect();
    paces.sort_by(f64::total_cmp);
    (!paces.is_empty()).then(|| median(&paces))
}

/// [`tested_on`], each prediction multiplied by the test rows' pace over the train rows' (of the
/// entry's type, [`pace_of`]): the fit priced at the pace of the sitting it predicts. Entries
/// of a type whose rows on either side carry no pace keep their prediction.
pub fn tested_on_paced(train: &[FitRow], test: &[FitRow]) -> Vec<HeldOut> {
    tested_on(train, test)
        .into_iter()
        .map(
            |entry| match (pace_of(test, &entry.kind), pace_of(train, &entry.kind)) {
                (Some(now), Some(then)) => entry.repriced(now / then),
                _ => entry,
            },
        )
        .collect()
}

/// A group with a single size: nothing to hold out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OneSize {
    /// `hash hashtable delete (main)`.
    pub group: String,
    /// Its one size's element count.
    pub elements: u64,
    /// Rows at it.
    pub rows: usize,
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The distinct sizes (element count × element bytes) of a group's rows, in order.
fn sizes_of(rows: &[&FitRow]) -> Vec<(u64, u64)> {
    let mut sizes: Vec<(u64, u64)> = rows.iter().map(|r| (r.elements, r.element_bytes)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Every size of every group of `rows` (one server's) left out in turn, and the groups of one
/// size, which cannot be.
pub fn held_out(rows: &[FitRow]) -> (Vec<HeldOut>, Vec<OneSize>) {
    let groups = groups(rows);
    let mut out = Vec::new();
    let mut single = Vec::new();
    for (key, group) in &groups {
        let sizes = sizes_of(group);
        if sizes.len() < 2 {
            single.push(OneSize {
                group: group_name(key),
                elements: sizes.first().map_or(0, |s| s.0),
                rows: group.len(),
            });
            continue;
        }
        for &size in &sizes {
            let (left, kept): (Vec<&FitRow>, Vec<&FitRow>) = group
                .iter()
                .partition(|r| (r.elements, r.element_bytes) == size);
            out.extend(predicted_against_measured(
                key,
                &kept,
                &left,
                sizes.len() - 1,
            ));
        }
    }
    (out, single)
}

/// Every size of `test` (another set of one server's rows: sizes measured for the purpose)
/// predicted by the fit of all of `train` in its group. Test groups with no train group are left
/// out (nothing predicts them), and so are sizes the group's fit has rows of (not held out).
pub fn tested_on(train: &[FitRow], test: &[FitRow]) -> Vec<HeldOut> {
    let train_groups = groups(train);
    let mut out = Vec::new();
    for (key, group) in &groups(test) {
        let Some(kept) = train_groups.get(key) else {
            continue;
        };
        let fitted_sizes = sizes_of(kept);
        let fitted = fitted_sizes.len();
        for size in sizes_of(group) {
            if fitted_sizes.contains(&size) {
                continue;
            }
            let left: Vec<&FitRow> = group
                .iter()
                .copied()
                .filter(|r| (r.elements, r.element_bytes) == size)
                .collect();
            out.extend(predicted_against_measured(key, kept, &left, fitted));
        }
    }
    out
}

/// The fit of `kept` (one group's rows) against the median of `left` (one size's rows of the
/// same group).
fn predicted_against_measured(
    key: &GroupKey,
    kept: &[&FitRow],
    left: &[&FitRow],
    sizes_fitted: usize,
) -> Option<HeldOut> {
    let train: Vec<FitRow> = kept.iter().map(|r| (*r).clone()).collect();
    // One group in, one entry out.
    let entry = fit(&train).into_iter().next()?;
    let sample = left.first()?;
    let predicted_ms = entry.freeze_ms(sample.elements as f64, sample.payload_mib());
    let mut measured: Vec<f64> = left.iter().map(|r| r.hol_delay_ms).collect();
    measured.sort_by(f64::total_cmp);
    let measured_ms = median(&measured);
    let error_ms = (predicted_ms - measured_ms).abs();
    Some(HeldOut {
        kind: key.0.clone(),
        encoding: key.1.clone(),
        op: key.2,
        freed_by: sample.freed_by,
        elements: sample.elements,
        element_bytes: sample.element_bytes,
        sizes_fitted,
        rows_fitted: train.len(),
        repeats: left.len(),
        measured_ms,
        measured_min_ms: measured[0],
        measured_max_ms: measured[measured.len() - 1],
        predicted_ms,
        error_ms,
        error_pct: (measured_ms >= RELATIVE_FROM_MS).then(|| 100.0 * error_ms / measured_ms),
        under_one_interval: left.iter().all(|r| r.under_one_interval),
    })
}

/// `, measured 1.40x the prediction`, or nothing without a ratio: the clause the report's model
/// line and the held-out summaries share.
pub fn measured_over_predicted_clause(ratio: Option<f64>) -> String {
    ratio.map_or(String::new(), |r| {
        format!(", measured {r:.2}x the prediction")
    })
}

/// The ops the floor judges: the removals (DEL, UNLINK, the server's expiry).
pub fn is_removal(op: ModelOp) -> bool {
    matches!(op, ModelOp::Delete | ModelOp::Unlink | ModelOp::Expire)
}

/// A model's removals, fitted on `train` (its own rows), predicted for every size of `later`
/// (rows measured after the fit, in another sitting) that `train` has no row of in the same
/// group ([`tested_on`]): [`LaterCheck`], described by `how`.
pub fn later_check(train: &[FitRow], later: &[FitRow], how: String) -> LaterCheck {
    let entries: Vec<HeldOut> = tested_on(train, later)
        .into_iter()
        .filter(|e| is_removal(e.op))
        .collect();
    let summary = summarize(&entries);
    let round = |x: f64| (x * 1e3).round() / 1e3;
    LaterCheck {
        how,
        entries: summary.entries,
        relative: summary.relative,
        median_abs_pct: summary.median_pct.map(round),
        median_measured_over_predicted: summary.median_measured_over_predicted.map(round),
        past_floor: summary.past_floor,
    }
}

/// The figures of a set of held-out entries against the floor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOutSummary {
    /// Entries.
    pub entries: usize,
    /// Of them, with a relative error (measured at least 1 ms).
    pub relative: usize,
    /// The median relative |error|, %.
    pub median_pct: Option<f64>,
    /// The worst relative |error|, %.
    pub worst_pct: Option<f64>,
    /// The median of measured / predicted over the entries with a relative error: above 1,
    /// the fit priced them too low (a sitting slower than the fit's, or a shape it misses).
    pub median_measured_over_predicted: Option<f64>,
    /// The worst absolute |error|, ms.
    pub worst_ms: f64,
    /// Entries past the floor for one entry ([`HeldOut::past_floor`]).
    pub past_floor: usize,
    /// Entries whose fit rested on one size only.
    pub from_one_size: usize,
}

/// Sums up `entries`.
pub fn summarize<'a>(entries: impl IntoIterator<Item = &'a HeldOut>) -> HeldOutSummary {
    let entries: Vec<&HeldOut> = entries.into_iter().collect();
    let mut pct: Vec<f64> = entries.iter().filter_map(|e| e.error_pct).collect();
    pct.sort_by(f64::total_cmp);
    let mut ratios: Vec<f64> = entries
        .iter()
        .filter(|e| e.error_pct.is_some() && e.predicted_ms > 0.0)
        .map(|e| e.measured_ms / e.predicted_ms)
        .collect();
    ratios.sort_by(f64::total_cmp);
    HeldOutSummary {
        entries: entries.len(),
        relative: pct.len(),
        median_pct: (!pct.is_empty()).then(|| median(&pct)),
        median_measured_over_predicted: (!ratios.is_empty()).then(|| median(&ratios)),
        worst_pct: pct.last().copied(),
        worst_ms: entries.iter().map(|e| e.error_ms).fold(0.0, f64::max),
        past_floor: entries.iter().filter(|e| e.past_floor()).count(),
        from_one_size: entries.iter().filter(|e| e.sizes_fitted == 1).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::model::Source;

    fn row(op: ModelOp, elements: u64, ms: f64) -> FitRow {
        // A read frees nothing.
        let freed_by = (op != ModelOp::Read).then_some(FreedBy::Main);
        FitRow {
            kind: "set".into(),
            encoding: "hashtable".into(),
            elements,
            element_bytes: 16,
            op,
            freed_by,
            hol_delay_ms: ms,
            source: Source::Tool,
            under_one_interval: false,
            pace_us: None,
        }
    }

    #[test]
    fn a_size_is_predicted_from_the_others_only() {
        // 0.1 µs per element at 100k and 1M, but 0.3 µs at 4M: leaving out 4M, the fit of the
        // other two predicts 400 ms where 1200 were measured.
        let mut rows = Vec::new();
        for (n, per_us) in [(100_000u64, 0.1), (1_000_000, 0.1), (4_000_000, 0.3)] {
            for jitter in [0.9, 1.0, 1.1] {
                rows.push(row(ModelOp::Delete, n, n as f64 * per_us / 1e3 * jitter));
            }
        }
        let (entries, single) = held_out(&rows);
        assert!(single.is_empty());
        assert_eq!(entries.len(), 3);
        let four = entries.iter().find(|e| e.elements == 4_000_000).unwrap();
        assert_eq!(
            (four.sizes_fitted, four.rows_fitted, four.repeats),
            (2, 6, 3)
        );
        assert!((four.measured_ms - 1200.0).abs() < 1e-6, "{four:?}");
        assert!((four.measured_min_ms - 1080.0).abs() < 1e-6, "{four:?}");
        // The fit of the two smaller sizes: 0.1 µs per element, a little less as the relative
        // errors of the repeats weigh (a repeat 10% low counts more than one 10% high).
        assert!((four.predicted_ms - 400.0).abs() < 10.0, "{four:?}");
        assert!((four.error_pct.unwrap() - 66.7).abs() < 1.0, "{four:?}");
        assert!(four.past_floor());
        let small = entries.iter().find(|e| e.elements == 100_000).unwrap();
        // From 1M and 4M alone: a power law of exponent ln 12 / ln 4 = 1.79 (within the range a
        // fit may take), extrapolated a decade down: 100 ms × 0.1^1.79 = 1.6 ms, 84% under.
        let off = small.error_pct.unwrap();
        assert!((80.0..88.0).contains(&off), "{small:?}");
        let s = summarize(&entries);
        assert_eq!((s.entries, s.relative, s.from_one_size), (3, 3, 0));
        let mut pcts: Vec<f64> = entries.iter().filter_map(|e| e.error_pct).collect();
        pcts.sort_by(f64::total_cmp);
        assert_eq!(s.median_pct, Some(pcts[1]));
        assert_eq!(s.worst_pct, Some(pcts[2]));
    }

    #[test]
    fn sizes_measured_apart_are_predicted_by_the_whole_fit() {
        // Fitted on 100k, 1M and 4M at 0.1 µs per element; 300k measured at 0.2 µs (twice what
        // the fit says) and 2M at 0.1 µs; a group the fit lacks is left out.
        let mut train = Vec::new();
        for n in [100_000u64, 1_000_000, 4_000_000] {
            train.push(row(ModelOp::Delete, n, n as f64 * 0.1 / 1e3));
        }
        let test = vec![
            row(ModelOp::Delete, 300_000, 60.0),
            row(ModelOp::Delete, 300_000, 50.0),
            row(ModelOp::Delete, 300_000, 70.0),
            row(ModelOp::Delete, 2_000_000, 200.0),
            row(ModelOp::Read, 2_000_000, 20.0),
        ];
        let entries = tested_on(&train, &test);
        assert_eq!(entries.len(), 2, "{entries:?}");
        let small = entries.iter().find(|e| e.elements == 300_000).unwrap();
        assert_eq!(
            (small.sizes_fitted, small.rows_fitted, small.repeats),
            (3, 3, 3)
        );
        assert!((small.measured_ms - 60.0).abs() < 1e-9, "{small:?}");
        assert!((small.predicted_ms - 30.0).abs() < 0.5, "{small:?}");
        assert!((small.error_pct.unwrap() - 50.0).abs() < 1.0, "{small:?}");
        let large = entries.iter().find(|e| e.elements == 2_000_000).unwrap();
        assert!(large.error_pct.unwrap() < 1.0, "{large:?}");
    }

    #[test]
    fn a_later_check_judges_removals_of_sizes_not_fitted() {
        // Fitted at 0.1 µs per element; the later sitting measured 300k at twice that (60 ms
        // against 30) and 2M at 1.5 times (300 ms against 200). A read, and a size the fit has
        // (1M), are not judged.
        let mut train = Vec::new();
        for n in [100_000u64, 1_000_000, 4_000_000] {
            train.push(row(ModelOp::Delete, n, n as f64 * 0.1 / 1e3));
        }
        let later = vec![
            row(ModelOp::Delete, 300_000, 60.0),
            row(ModelOp::Delete, 2_000_000, 300.0),
            row(ModelOp::Delete, 1_000_000, 500.0),
            row(ModelOp::Read, 2_000_000, 20.0),
        ];
        let check = later_check(&train, &later, "test".into());
        assert_eq!((check.entries, check.relative), (2, 2), "{check:?}");
        // |error| 50% and 33%: median 41.7%; measured over predicted 2 and 1.5: 1.75.
        assert!(
            (check.median_abs_pct.unwrap() - 41.7).abs() < 0.5,
            "{check:?}"
        );
        let ratio = check.median_measured_over_predicted.unwrap();
        assert!((ratio - 1.75).abs() < 0.02, "{check:?}");
        // 300k: 30 ms and 50% off; 2M: 100 ms and 33% (under 40%).
        assert_eq!(check.past_floor, 1, "{check:?}");
        let clause = check.clause().unwrap();
        assert!(clause.contains("median 42% (2 entries"), "{clause}");
        assert!(clause.contains("measured 1.75x the prediction"), "{clause}");
    }

    #[test]
    fn a_later_sitting_is_priced_at_its_own_pace() {
        // Fitted at 0.1 µs per element on a host whose PING took 20 µs; the later sitting's
        // took 30 µs (1.5x) and its DELs 1.5x the fit's: priced at its pace, they are met.
        let paced = |mut r: FitRow, us: u64| {
            r.pace_us = Some(us);
            r
        };
        let train: Vec<FitRow> = [100_000u64, 1_000_000, 4_000_000]
            .into_iter()
            .map(|n| paced(row(ModelOp::Delete, n, n as f64 * 0.1 / 1e3), 20))
            .collect();
        let later: Vec<FitRow> = [(300_000u64, 45.0), (2_000_000, 300.0)]
            .into_iter()
            .map(|(n, ms)| paced(row(ModelOp::Delete, n, ms), 30))
            .collect();
        assert_eq!(pace_of(&train, "set"), Some(20.0));
        assert_eq!(pace_of(&train, "hash"), None);
        let plain = tested_on(&train, &later);
        let at_pace = tested_on_paced(&train, &later);
        for (p, q) in plain.iter().zip(&at_pace) {
            assert!(
                (q.predicted_ms / p.predicted_ms - 1.5).abs() < 1e-9,
                "{q:?}"
            );
            assert!(q.error_pct.unwrap() < 1.0, "{q:?}");
        }
    }

    #[test]
    fn one_size_cannot_be_held_out_and_two_sizes_rest_on_one() {
        let rows = vec![
            row(ModelOp::Delete, 100_000, 10.0),
            row(ModelOp::Delete, 1_000_000, 100.0),
            row(ModelOp::Read, 100_000, 5.0),
            row(ModelOp::Read, 100_000, 6.0),
        ];
        let (entries, single) = held_out(&rows);
        assert_eq!(entries.len(), 2);
        assert!(entries.iter().all(|e| e.sizes_fitted == 1));
        assert!(entries.iter().all(|e| e.error_ms < 1e-9), "{entries:?}");
        assert_eq!(single.len(), 1);
        assert_eq!(single[0].group, "set hashtable read");
        assert_eq!((single[0].elements, single[0].rows), (100_000, 2));
        assert_eq!(summarize(&entries).from_one_size, 2);
    }

    #[test]
    fn a_sub_millisecond_figure_has_no_relative_error() {
        let unlink = |n: u64, ms: f64| {
            let mut r = row(ModelOp::Unlink, n, ms);
            r.freed_by = Some(FreedBy::Background);
            r.under_one_interval = true;
            r
        };
        let rows = vec![unlink(100_000, 0.5), unlink(1_000_000, 0.5)];
        let (entries, _) = held_out(&rows);
        assert_eq!(entries.len(), 2);
        assert!(entries.iter().all(|e| e.error_pct.is_none()));
        assert!(
            entries
                .iter()
                .all(|e| e.under_one_interval && !e.past_floor())
        );
        let s = summarize(&entries);
        assert_eq!((s.relative, s.median_pct), (0, None));
        assert_eq!(s.median_measured_over_predicted, None);
        // 1M predicted from 100k's 0.5 ms: 5 ms, 4.5 off (100k from 1M's: 0.45 off).
        assert!((s.worst_ms - 4.5).abs() < 1e-9, "{s:?}");
    }
}
