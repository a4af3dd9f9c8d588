//! Where a probe run's findings go: the `--out` files (probes.csv, writes.csv, stalls.csv,
//! timeline.csv and probes.hlog appended as they come, summary.csv and run.json rewritten
//! atomically), the metrics endpoint, the caller's notices (the terminal).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::report::Notice;
use crate::analyze::correlate::Stall;
use crate::analyze::correlate::{Interval, WriteSummary};
use crate::options::{ProbesExport, RunOptions};
use crate::output::export::NodeEvent;
use crate::output::export::{
    PROBES_CSV, PROBES_HLOG, RUN_JSON, RowAppender, RunJson, STALLS_CSV, SUMMARY_CSV, TIMELINE_CSV,
    TimelineRow, WRITES_CSV, columns, csv_bytes, write_atomic,
};
use crate::output::hlog::HlogWriter;
use crate::output::metrics::ProbeMetrics;
use crate::record::{NodeCols, ProbeRecord, SameShard, WriteRecord};
use crate::session::sink::{Sink, Sinks};

/// The files of an `--out` directory while the run goes.
/// What the probe instrument's collector finds, for its sinks.
pub(super) enum ProbeFinding<'a> {
    /// A probe's record, as it came.
    Probe {
        /// The node probed.
        node: &'a NodeCols,
        /// The record.
        probe: &'a ProbeRecord,
    },
    /// A write's record, as it came.
    Write {
        /// The write.
        write: &'a WriteRecord,
        /// The node it went to (a write a failover redirected says where).
        sent_to: &'a NodeCols,
    },
    /// A stall episode is final (named, when naming is on).
    Stall {
        /// The node whose probes saw it.
        node: NodeRef<'a>,
        /// The stall.
        stall: &'a Stall,
    },
    /// A write's figures on one node are final.
    Summary {
        /// The node whose probes saw it.
        node: NodeRef<'a>,
        /// The write as recorded.
        record: &'a WriteRecord,
        /// Its figures.
        summary: &'a WriteSummary,
    },
    /// An interval of one node's timeline is final.
    Interval {
        /// The node.
        node: NodeRef<'a>,
        /// The interval.
        interval: &'a Interval,
        /// Wall-clock time of the run's clock zero, µs since the Unix epoch.
        started_unix_us: u64,
    },
    /// A node went down or came back, or the topology changed.
    NodeEvent(&'a NodeEvent),
    /// About every 100 ms, the run's progress.
    Tick {
        /// Since the run's start.
        elapsed: Duration,
        /// Probes recorded so far.
        probes: usize,
        /// Writes done so far.
        writes: usize,
    },
    /// run.json as it stands (every few seconds and after each write), or at the end.
    Checkpoint(&'a RunJson),
}

/// A node as a finding names it.
#[derive(Clone, Copy)]
pub(super) struct NodeRef<'a> {
    /// Its place among the nodes probed: 0 is the written one, whose stalls the server's logs
    /// name and the terminal shows.
    pub index: usize,
    /// Its address, role and shard.
    pub cols: &'a NodeCols,
    /// It holds the written key's slot.
    pub same_shard: &'a SameShard,
}

/// A probe run's sinks.
pub(super) type ProbeSinks<'n> = Sinks<dyn for<'f> Sink<ProbeFinding<'f>> + 'n>;

/// The files of an `--out` directory while the run goes.
pub(super) struct ProbeFiles {
    dir: PathBuf,
    probes: RowAppender,
    writes: RowAppender,
    stalls: RowAppender,
    timeline: RowAppender,
    /// Opened once the run's clock has started (its header holds the start time).
    hlog: Option<HlogWriter>,
    probes_export: ProbesExport,
    stall_threshold_us: u64,
    /// Every node's figures of each write so far, as they came, with the node's place:
    /// summary.csv is rewritten from them.
    summaries: Vec<(usize, WriteSummary, NodeCols, SameShard)>,
}

impl ProbeFiles {
    /// Creates every file (summary.csv with its header alone) before anything is measured.
    pub fn create(dir: &std::path::Path, options: &RunOptions) -> Result<ProbeFiles> {
        let files = ProbeFiles {
            dir: dir.to_path_buf(),
            probes_export: options.probes_export,
            stall_threshold_us: options.stall_threshold_us,
            probes: RowAppender::create(&dir.join(PROBES_CSV), columns::PROBES)?,
            writes: RowAppender::create(&dir.join(WRITES_CSV), columns::WRITES)?,
            stalls: RowAppender::create(&dir.join(STALLS_CSV), columns::STALLS)?,
            timeline: RowAppender::create(&dir.join(TIMELINE_CSV), columns::TIMELINE)?,
            hlog: None,
            summaries: Vec::new(),
        };
        write_atomic(
            &dir.join(SUMMARY_CSV),
            &csv_bytes::<crate::analyze::findings::WriteSummary>(&[], columns::SUMMARY)?,
        )?;
        Ok(files)
    }

    /// Opens probes.hlog once the run's clock has started (its header holds the start time).
    pub fn start_hlog(&mut self, unix_start_us: u64) -> Result<()> {
        self.hlog = Some(HlogWriter::create(
            &self.dir.join(PROBES_HLOG),
            unix_start_us,
        )?);
        Ok(())
    }

    /// summary.csv: every node's row of each write, in write order, the first node's first.
    fn summary_csv(&self) -> Result<Vec<u8>> {
        let mut rows: Vec<(usize, &WriteSummary, &NodeCols, &SameShard)> = self
            .summaries
            .iter()
            .map(|(index, w, cols, same)| (*index, w, cols, same))
            .collect();
        rows.sort_by_key(|(index, w, _, _)| (w.seq, *index));
        let rows: Vec<(&WriteSummary, &NodeCols, &SameShard)> =
            rows.into_iter().map(|(_, w, c, s)| (w, c, s)).collect();
        csv_bytes(&rows, columns::SUMMARY)
    }

    /// Every appended row on disk, summary.csv rewritten, then run.json.
    fn checkpoint(&mut self, run_json: &RunJson) -> Result<()> {
        // run.json also when the rows could not go (a full disk): it says how the run ended.
        let flushed = self.flush_rows();
        let json = serde_json::to_vec_pretty(run_json).context("encoding run.json")?;
        write_atomic(&self.dir.join(RUN_JSON), &json)?;
        flushed
    }

    /// Every appended row on disk, and summary.csv rewritten.
    fn flush_rows(&mut self) -> Result<()> {
        self.probes.flush()?;
        self.writes.flush()?;
        self.stalls.flush()?;
        self.timeline.flush()?;
        write_atomic(&self.dir.join(SUMMARY_CSV), &self.summary_csv()?)
    }
}

impl Sink<ProbeFinding<'_>> for ProbeFiles {
    fn emit(&mut self, finding: &ProbeFinding<'_>) -> Result<()> {
        match *finding {
            ProbeFinding::Probe { node, probe } => {
                if self.probes_export.keeps(probe, self.stall_threshold_us) {
                    self.probes.push(&(probe, node))?;
                }
            }
            ProbeFinding::Write { write, sent_to } => {
                self.writes.push(&(write, sent_to))?;
                self.writes.flush()?;
            }
            ProbeFinding::Stall { node, stall } => self.stalls.push(&(stall, node.cols))?,
            ProbeFinding::Summary { node, summary, .. } => {
                self.summaries.push((
                    node.index,
                    summary.clone(),
                    node.cols.clone(),
                    *node.same_shard,
                ));
                self.stalls.flush()?;
                write_atomic(&self.dir.join(SUMMARY_CSV), &self.summary_csv()?)?;
            }
            ProbeFinding::Interval {
                node,
                interval,
                started_unix_us,
            } => {
                if let Some(hlog) = self.hlog.as_mut() {
                    // The first node's histograms untagged, the others tagged with their
                    // address (the interval-log format's `Tag=`).
                    let tag = (node.index > 0).then_some(node.cols.node.as_str());
                    hlog.append(
                        interval.start_us,
                        interval.length_us,
                        &interval.latency,
                        tag,
                    )?;
                }
                self.timeline
                    .push(&TimelineRow::new(interval, node.cols, started_unix_us))?;
                self.timeline.flush()?;
                self.stalls.flush()?;
                self.probes.flush()?;
            }
            ProbeFinding::Checkpoint(run_json) => self.checkpoint(run_json)?,
            ProbeFinding::NodeEvent(_) | ProbeFinding::Tick { .. } => {}
        }
        Ok(())
    }

    fn takes_checkpoints(&self) -> bool {
        true
    }
}

/// The `--metrics-addr` endpoint's figures (the run context's handle).
pub(super) struct MetricsSink(pub Arc<ProbeMetrics>);

impl Sink<ProbeFinding<'_>> for MetricsSink {
    fn emit(&mut self, finding: &ProbeFinding<'_>) -> Result<()> {
        match *finding {
            ProbeFinding::Probe { node, probe } => {
                self.0.probe(&node.node, probe.latency_us, probe.ok);
            }
            ProbeFinding::Stall { node, stall } => {
                self.0.stall(&node.cols.node, stall.end_us - stall.start_us);
            }
            ProbeFinding::Interval { node, interval, .. } => {
                self.0
                    .set_longest_stall(&node.cols.node, (interval.longest_stall_ms * 1e3) as u64);
            }
            ProbeFinding::Write { .. }
            | ProbeFinding::Summary { .. }
            | ProbeFinding::NodeEvent(_)
            | ProbeFinding::Tick { .. }
            | ProbeFinding::Checkpoint(_) => {}
        }
        Ok(())
    }
}

/// The caller's notices (the `probe` binary's lines and progress): the first node's stalls
/// and intervals, every node's writes, the node events, the progress.
pub(super) struct ProbeTerminal<'n>(pub &'n mut dyn FnMut(Notice<'_>));

impl Sink<ProbeFinding<'_>> for ProbeTerminal<'_> {
    fn emit(&mut self, finding: &ProbeFinding<'_>) -> Result<()> {
        let notify = &mut self.0;
        match *finding {
            ProbeFinding::Stall { node, stall } if node.index == 0 => notify(Notice::Stall(stall)),
            ProbeFinding::Summary {
                node,
                record,
                summary,
            } => {
                if node.index == 0 {
                    notify(Notice::Write { record, summary });
                } else {
                    notify(Notice::NodeWrite {
                        node: node.cols,
                        same_shard: node.same_shard.same_shard,
                        summary,
                    });
                }
            }
            ProbeFinding::Interval {
                node,
                interval,
                started_unix_us,
            } if node.index == 0 => notify(Notice::Interval {
                interval,
                started_unix_us,
            }),
            ProbeFinding::NodeEvent(event) => notify(Notice::Node(event)),
            ProbeFinding::Tick {
                elapsed,
                probes,
                writes,
            } => notify(Notice::Tick {
                elapsed,
                probes,
                writes,
            }),
            ProbeFinding::Probe { .. }
            | ProbeFinding::Write { .. }
            | ProbeFinding::Stall { .. }
            | ProbeFinding::Interval { .. }
            | ProbeFinding::Checkpoint(_) => {}
        }
        Ok(())
    }

    fn is_terminal(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::findings::WriteSummary;
    use crate::record::{NodeRole, WriteOp};

    /// The figures of writes 1 and 2, as the correlator gives them.
    fn summaries() -> Vec<WriteSummary> {
        let writes: Vec<WriteRecord> = [1, 2]
            .map(|seq| {
                let at = u64::from(seq) * 10_000;
                WriteRecord::timed(seq, WriteOp::Set, String::new(), 1, (at, at + 10, at + 20))
            })
            .into();
        let analysis = crate::analyze::correlate::correlate(
            &[],
            &writes,
            crate::analyze::correlate::CorrelateConfig::with_threshold(1000),
        );
        assert_eq!(analysis.writes.len(), 2);
        analysis.writes
    }

    fn node(name: &str) -> NodeCols {
        NodeCols {
            node: name.into(),
            role: NodeRole::Master,
            shard: None,
        }
    }

    /// Findings come node by node as each correlator settles, so a later node's figures of
    /// write 1 may come after the first node's of write 2: summary.csv is still in write order,
    /// the first node's row of each write first.
    #[test]
    fn summary_csv_is_in_write_order_first_node_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ProbeFiles::create(dir.path(), &RunOptions::default()).unwrap();
        let (first, second) = (node("a:1"), node("b:2"));
        let same = SameShard { same_shard: true };
        let record = WriteRecord::timed(1, WriteOp::Set, String::new(), 1, (0, 0, 0));
        let summaries = summaries();
        for (index, cols, seq) in [
            (0, &first, 1),
            (0, &first, 2),
            (1, &second, 1),
            (1, &second, 2),
        ] {
            let found = ProbeFinding::Summary {
                node: NodeRef {
                    index,
                    cols,
                    same_shard: &same,
                },
                record: &record,
                summary: &summaries[seq - 1],
            };
            files.emit(&found).unwrap();
        }
        let text = std::fs::read_to_string(dir.path().join(SUMMARY_CSV)).unwrap();
        let rows: Vec<(String, String)> = text
            .lines()
            .skip(1)
            .map(|line| {
                let cells: Vec<&str> = line.split(',').collect();
                let node_at = columns::SUMMARY.iter().position(|c| *c == "node").unwrap();
                (cells[0].to_string(), cells[node_at].to_string())
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("1".to_string(), "a:1".to_string()),
                ("1".into(), "b:2".into()),
                ("2".into(), "a:1".into()),
                ("2".into(), "b:2".into()),
            ]
        );
    }
}
