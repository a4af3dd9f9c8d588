//! A cost model refitted from the tool's own measured ops: the rows of a run's summary
//! (`summary.csv`, or a finished run's [`WriteSummary`]s) turned into the fit's rows, and a
//! model made of them beside what an older model had that they do not cover. Pure: the runs are
//! made or read by `commands/keys`.

use std::collections::BTreeSet;

use super::fit::{FitRow, fit};
use super::model::{CostModel, MODEL_FORMAT, ModelOp, ModelServer, Source};
use crate::analyze::findings::WriteSummary;
use crate::record::WriteOp;
use crate::workload::lazyfree::{FreedBy, LazyfreeSettings};

/// The op of the model a write op measures; `None` for what the model does not price (a build,
/// a fresh SET, a caller's command, an injected stall).
fn model_op(op: WriteOp) -> Option<ModelOp> {
    Some(match op {
        WriteOp::Delete => ModelOp::Delete,
        WriteOp::Unlink => ModelOp::Unlink,
        WriteOp::Expire => ModelOp::Expire,
        WriteOp::Evict => ModelOp::Evict,
        WriteOp::Overwrite => ModelOp::Overwrite,
        WriteOp::Read => ModelOp::Read,
        WriteOp::Set | WriteOp::Build | WriteOp::Command | WriteOp::Inject => return None,
    })
}

/// The fit's rows of a run's summary rows. `probe_interval_ms` is the run's aggregate probe
/// interval (1 / (rate × threads)): a row no probe overlapped took less than that, and counts as
/// that bound ([`FitRow::under_one_interval`]). Failed writes, ops the model does not price and
/// collection rows that do not say their encoding or freeing thread are left out; a string is
/// one element of its whole size, `raw`, and always freed on the main thread.
pub fn fit_rows(summary: &[WriteSummary], probe_interval_ms: f64) -> Vec<FitRow> {
    summary
        .iter()
        .filter(|row| row.ok)
        .filter_map(|row| {
            let op = model_op(row.op)?;
            let kind = row.value_type.clone().unwrap_or_else(|| "string".into());
            let string = kind == "string";
            let (elements, element_bytes, encoding) = if string {
                let encoding = row.encoding.clone().unwrap_or_else(|| "raw".into());
                (1, row.size_bytes, encoding)
            } else {
                (row.elements?, row.element_bytes?, row.encoding.clone()?)
            };
            let freed_by = match (op.removal(), row.freed_by) {
                (None, _) => None,
                (Some(_), Some(thread)) => Some(thread),
                (Some(_), None) if string => Some(FreedBy::Main),
                (Some(_), None) => return None,
            };
            let (hol_delay_ms, under_one_interval) = match row.hol_delay_ms {
                Some(ms) => (ms, false),
                None => (probe_interval_ms, true),
            };
            Some(FitRow {
                kind,
                encoding,
                elements,
                element_bytes,
                op,
                freed_by,
                hol_delay_ms,
                source: Source::Tool,
                under_one_interval,
                pace_us: None,
            })
        })
        .collect()
}

/// The group a row is fitted in (as [`fit`] groups them).
fn group_of(row: &FitRow) -> (String, String, ModelOp, Option<&'static str>) {
    (
        row.kind.clone(),
        row.encoding.clone(),
        row.op,
        row.freed_by.map(FreedBy::name),
    )
}

/// A model of `server` fitted from `tool_rows`, plus the rows of `previous` (its string DELs,
/// its provisional entries) in the groups the tool rows do not cover, so that a refit of the
/// collections keeps what it did not measure. The groups kept from `previous` are returned too,
/// for `measured_how`.
pub fn refit_model(
    server: ModelServer,
    lazyfree_measured: LazyfreeSettings,
    measured_how: Vec<String>,
    tool_rows: Vec<FitRow>,
    previous: Option<&CostModel>,
) -> (CostModel, Vec<String>) {
    let measured: BTreeSet<_> = tool_rows.iter().map(group_of).collect();
    let mut rows = tool_rows;
    let mut kept = BTreeSet::new();
    for row in previous.map_or(&[][..], |m| &m.rows[..]) {
        let group = group_of(row);
        if !measured.contains(&group) {
            kept.insert(format!(
                "{} {} {}{}",
                group.0,
                group.1,
                group.2.name(),
                group.3.map(|t| format!(" ({t})")).unwrap_or_default()
            ));
            rows.push(row.clone());
        }
    }
    let model = CostModel {
        format: MODEL_FORMAT,
        server,
        lazyfree_measured,
        measured_how,
        entries: fit(&rows),
        rows,
        // A check of its own needs sizes measured later: none yet.
        later_checks: Vec::new(),
    };
    (model, kept.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::model::tests::sample_model;

    fn summary(
        op: WriteOp,
        elements: u64,
        thread: Option<FreedBy>,
        ms: Option<f64>,
    ) -> WriteSummary {
        WriteSummary {
            op,
            size_bytes: elements * 32,
            hol_delay_ms: ms,
            ok: true,
            value_type: Some("hash".into()),
            elements: Some(elements),
            element_bytes: Some(16),
            encoding: Some("hashtable".into()),
            freed_by: thread,
            ..WriteSummary::default()
        }
    }

    #[test]
    fn the_tool_s_rows_become_fit_rows() {
        let rows = vec![
            summary(WriteOp::Build, 100_000, None, Some(9.0)),
            summary(WriteOp::Read, 100_000, None, Some(31.0)),
            summary(WriteOp::Delete, 100_000, Some(FreedBy::Main), Some(41.0)),
            summary(WriteOp::Unlink, 100_000, Some(FreedBy::Background), None),
            WriteSummary {
                ok: false,
                ..summary(WriteOp::Expire, 100_000, Some(FreedBy::Main), Some(50.0))
            },
            // A collection row that does not say its thread is not guessed.
            summary(WriteOp::Expire, 100_000, None, Some(50.0)),
        ];
        let fitted = fit_rows(&rows, 0.5);
        let ops: Vec<ModelOp> = fitted.iter().map(|r| r.op).collect();
        assert_eq!(ops, [ModelOp::Read, ModelOp::Delete, ModelOp::Unlink]);
        assert!(fitted.iter().all(|r| r.source == Source::Tool));
        assert_eq!(fitted[0].freed_by, None);
        assert_eq!(fitted[1].freed_by, Some(FreedBy::Main));
        assert_eq!(
            (fitted[1].hol_delay_ms, fitted[1].under_one_interval),
            (41.0, false)
        );
        // No probe in the UNLINK's window: counted as one probe interval, and marked.
        assert_eq!(
            (fitted[2].hol_delay_ms, fitted[2].under_one_interval),
            (0.5, true)
        );
        assert_eq!(
            (
                fitted[1].elements,
                fitted[1].element_bytes,
                fitted[1].encoding.as_str()
            ),
            (100_000, 16, "hashtable")
        );
    }

    #[test]
    fn a_string_is_one_raw_element_freed_on_the_main_thread() {
        let row = WriteSummary {
            op: WriteOp::Delete,
            size_bytes: 64 << 20,
            hol_delay_ms: Some(3.0),
            ok: true,
            ..WriteSummary::default()
        };
        let set = WriteSummary {
            op: WriteOp::Set,
            ..row.clone()
        };
        let fitted = fit_rows(&[set, row], 0.5);
        assert_eq!(fitted.len(), 1);
        let r = &fitted[0];
        assert_eq!((r.kind.as_str(), r.encoding.as_str()), ("string", "raw"));
        assert_eq!((r.elements, r.element_bytes), (1, 64 << 20));
        assert_eq!(r.freed_by, Some(FreedBy::Main));
    }

    #[test]
    fn a_refit_replaces_what_it_measured_and_keeps_the_rest() {
        let previous = sample_model();
        // The tool measured the hash's DEL at 0.2 µs per field: its rows replace the
        // provisional ones; the hash's read and UNLINK and the string's DEL stay as they were.
        let tool: Vec<WriteSummary> = [100_000u64, 400_000]
            .iter()
            .map(|&n| {
                summary(
                    WriteOp::Delete,
                    n,
                    Some(FreedBy::Main),
                    Some(n as f64 * 0.2e-3),
                )
            })
            .collect();
        let (model, kept) = refit_model(
            previous.server.clone(),
            LazyfreeSettings::default(),
            vec!["test".into()],
            fit_rows(&tool, 0.5),
            Some(&previous),
        );
        let entry = |op: ModelOp, kind: &str| {
            model
                .entries
                .iter()
                .find(|e| e.op == op && e.kind == kind)
                .unwrap()
                .clone()
        };
        let del = entry(ModelOp::Delete, "hash");
        assert!((del.per_element_us - 0.2).abs() < 1e-9, "{del:?}");
        assert_eq!((del.source, del.rows), (Source::Tool, 2));
        let read = entry(ModelOp::Read, "hash");
        assert_eq!(read.source, Source::Provisional);
        assert!((read.per_element_us - 0.2).abs() < 1e-9, "{read:?}");
        assert_eq!(entry(ModelOp::Delete, "string").source, Source::Tool);
        assert_eq!(model.entries.len(), previous.entries.len());
        assert!(
            kept.contains(&"hash hashtable read".to_string()),
            "{kept:?}"
        );
        assert!(
            !kept.iter().any(|k| k.starts_with("hash hashtable delete")),
            "{kept:?}"
        );
        // Without an older model, only what was measured.
        let (alone, kept) = refit_model(
            previous.server.clone(),
            LazyfreeSettings::default(),
            Vec::new(),
            fit_rows(&tool, 0.5),
            None,
        );
        assert_eq!(alone.entries.len(), 1);
        assert!(kept.is_empty());
    }
}
