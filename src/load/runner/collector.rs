//! The load instrument's collector: folds the generator threads' per-second reports into the
//! timeline and the blocks, feeds the written server's requests to the correlator, and builds
//! the report as it stands; what it finds goes to the run's sinks ([`super::sinks`]), it knows no
//! file format.

use std::collections::BTreeMap;

use anyhow::Result;

use super::LoadServer;
use super::plan::RecordedLoadOptions;
use super::report::{GeneratorReport, LoadNotice, LoadReport, SATURATED_CPU_PCT, STARVED_WAIT_PCT};
use super::sinks::{LoadFinding, LoadSinks};
use crate::analyze::correlate::Horizon;
use crate::load::analyze::{
    LoadCorrelator, LoadTimeline, RequestFigures, WriteUnderLoad, writes_under_load,
};
use crate::load::engine::{EngineMsg, ThreadSummary};
use crate::load::keyspace::LOAD_PREFIX;
use crate::load::stats::{LoadBlock, LoadSecondRow, SecondAgg, new_histogram};
use crate::output::export::{LoadRunJson, RunStatus, ToolInfo};
use crate::record::WriteRecord;
use crate::session::{KeyLedger, RunContext};

/// What run.json says of the load besides its findings.
pub(super) struct LoadMeta<'a> {
    pub run: &'a RunContext,
    pub servers: &'a [LoadServer<'a>],
    pub options: &'a RecordedLoadOptions,
    pub threads: u16,
    pub load_start_us: u64,
}

struct SecondSlot {
    reported: u16,
    aggs: Vec<SecondAgg>,
    cpu_max: Option<f64>,
    wait_max: Option<f64>,
}

struct FinalSecond {
    per_server: Vec<LoadSecondRow>,
    all: LoadSecondRow,
}

pub(super) struct LoadCollector {
    threads: u16,
    labels: Vec<String>,
    load_start_us: u64,
    slots: Vec<SecondSlot>,
    finals: Vec<FinalSecond>,
    /// The last final second's figures, per server and for all: replies drained after the
    /// load's end join them, and its row's latencies are read again from them.
    last_aggs: Option<(Vec<SecondAgg>, SecondAgg)>,
    run_aggs: Vec<SecondAgg>,
    summaries: Vec<ThreadSummary>,
    pub(super) done_threads: u16,
    /// The correlator of the written server's requests (with a writer).
    requests: Option<LoadCorrelator>,
    /// Per generator thread: every request of the written server it started before this has
    /// been taken (`u64::MAX` once it is done).
    unsampled_from_us: Vec<u64>,
    writes: Vec<WriteRecord>,
    /// Each write's request figures, once final.
    figures: BTreeMap<u32, RequestFigures>,
    writes_notified: usize,
    problems: Vec<String>,
    /// Whole seconds of load, once the run has stopped: a last, partial second is no fair
    /// neighbour for a write's throughput.
    pub(super) full_seconds: Option<usize>,
    /// Connections per server (the blocks' client counts).
    pub(super) clients_per_server: Vec<u32>,
    /// Each server's part on a cluster (the blocks' headings).
    pub(super) roles: Vec<Option<String>>,
}

impl LoadCollector {
    /// The writer's writes so far.
    pub(super) fn writes(&self) -> &[WriteRecord] {
        &self.writes
    }

    pub(super) fn new(
        threads: u16,
        labels: Vec<String>,
        load_start_us: u64,
        requests: Option<LoadCorrelator>,
    ) -> LoadCollector {
        let servers = labels.len();
        LoadCollector {
            clients_per_server: vec![0; servers],
            roles: vec![None; servers],
            threads,
            labels,
            load_start_us,
            slots: Vec::new(),
            finals: Vec::new(),
            last_aggs: None,
            run_aggs: (0..servers).map(|_| SecondAgg::new()).collect(),
            summaries: Vec::new(),
            done_threads: 0,
            requests,
            unsampled_from_us: vec![0; usize::from(threads)],
            writes: Vec::new(),
            figures: BTreeMap::new(),
            writes_notified: 0,
            problems: Vec::new(),
            full_seconds: None,
        }
    }

    pub(super) fn take(&mut self, msg: EngineMsg, sinks: &mut LoadSinks<'_>) -> Result<()> {
        match msg {
            EngineMsg::Second(second) => {
                if let Some(from) = self.unsampled_from_us.get_mut(usize::from(second.thread)) {
                    *from = (*from).max(second.unsampled_from_us);
                }
                let index = second.second as usize;
                while self.slots.len() <= index {
                    self.slots.push(SecondSlot {
                        reported: 0,
                        aggs: (0..self.labels.len()).map(|_| SecondAgg::new()).collect(),
                        cpu_max: None,
                        wait_max: None,
                    });
                }
                if index < self.finals.len() {
                    // A straggler for a second already closed (a thread ran past the stop by a
                    // hair): fold it into the last final row so no request is lost.
                    self.fold_late(second.servers);
                } else {
                    let slot = &mut self.slots[index];
                    slot.reported += 1;
                    for (agg, add) in slot.aggs.iter_mut().zip(&second.servers) {
                        agg.merge(add);
                    }
                    slot.cpu_max = max_opt(slot.cpu_max, second.cpu_pct);
                    slot.wait_max = max_opt(slot.wait_max, second.wait_pct);
                    self.finalize(false);
                }
            }
            EngineMsg::Samples(samples) => {
                if let Some(requests) = self.requests.as_mut() {
                    for sample in &samples {
                        requests.sample(sample);
                    }
                }
            }
            EngineMsg::Note(text) => {
                sinks.emit(&LoadFinding::Notice(LoadNotice::Problem(&text)))?;
                if self.problems.len() < 20 {
                    self.problems.push(text);
                }
            }
            EngineMsg::Done(summary) => {
                if let Some(from) = self.unsampled_from_us.get_mut(usize::from(summary.thread)) {
                    *from = u64::MAX;
                }
                self.done_threads += 1;
                self.summaries.push(summary);
            }
        }
        Ok(())
    }

    pub(super) fn take_writer(&mut self, write: WriteRecord, keys: &mut KeyLedger) {
        keys.track(&write);
        if let Some(requests) = self.requests.as_mut() {
            requests.write(write.clone());
        }
        self.writes.push(write);
    }

    /// Moves the correlator's horizon on (`writes_from_us`: the writer's mark, read before its
    /// channel was drained) and keeps the figures that became final.
    pub(super) fn settle(&mut self, writes_from_us: u64) {
        let Some(requests) = self.requests.as_mut() else {
            return;
        };
        let through = self.unsampled_from_us.iter().copied().min().unwrap_or(0);
        requests.advance(Horizon {
            probes_through_us: through.saturating_sub(1),
            writes_from_us,
        });
        self.figures.extend(requests.drain());
    }

    /// Every request and write is in: every figure becomes final.
    pub(super) fn finish_requests(&mut self) {
        if let Some(requests) = self.requests.as_mut() {
            requests.finish();
            self.figures.extend(requests.drain());
        }
    }

    /// Closes every second all threads have reported (every second, with `force`).
    pub(super) fn finalize(&mut self, force: bool) {
        while self.finals.len() < self.slots.len() {
            let index = self.finals.len();
            if !force && self.slots[index].reported < self.threads {
                break;
            }
            let slot = &mut self.slots[index];
            let aggs = std::mem::take(&mut slot.aggs);
            let second = index as u64;
            let start_us = self.load_start_us + second * 1_000_000;
            let mut all = SecondAgg::new();
            let mut per_server = Vec::with_capacity(aggs.len());
            for ((agg, label), run) in aggs.iter().zip(&self.labels).zip(&mut self.run_aggs) {
                all.merge(agg);
                run.merge(agg);
                per_server.push(LoadSecondRow::from_agg(
                    second,
                    label,
                    agg,
                    start_us,
                    slot.cpu_max,
                    slot.wait_max,
                ));
            }
            self.finals.push(FinalSecond {
                per_server,
                all: LoadSecondRow::from_agg(
                    second,
                    "all",
                    &all,
                    start_us,
                    slot.cpu_max,
                    slot.wait_max,
                ),
            });
            self.last_aggs = Some((aggs, all));
        }
    }

    fn fold_late(&mut self, aggs: Vec<SecondAgg>) {
        let Some(last) = self.finals.len().checked_sub(1) else {
            return;
        };
        for (run, agg) in self.run_aggs.iter_mut().zip(&aggs) {
            run.merge(agg);
        }
        // Set with the last final row, so always there when one is.
        let Some((kept, kept_all)) = self.last_aggs.as_mut() else {
            return;
        };
        for (k, agg) in aggs.iter().enumerate() {
            kept_all.merge(agg);
            kept[k].merge(agg);
            recount(&mut self.finals[last].per_server[k], &kept[k]);
        }
        recount(&mut self.finals[last].all, kept_all);
    }

    /// Run clock past the load's start up to which every second is complete, µs.
    pub(super) fn complete_us(&self) -> u64 {
        self.finals.len() as u64 * 1_000_000
    }

    pub(super) fn last_second_requests(&self) -> u64 {
        self.finals.last().map_or(0, |f| f.all.requests)
    }

    /// Requests per whole second of the written server (server 0).
    fn written_server_rps(&self) -> Vec<u64> {
        self.finals
            .iter()
            .take(self.full_seconds.unwrap_or(usize::MAX))
            .map(|f| f.per_server.first().map_or(0, |r| r.requests))
            .collect()
    }

    /// One finding per write whose request figures are final.
    fn findings(&self) -> Vec<WriteUnderLoad> {
        let rps = self.written_server_rps();
        writes_under_load(
            &self.writes,
            &self.figures,
            LoadTimeline {
                load_start_us: self.load_start_us,
                requests_per_second: &rps,
            },
        )
    }

    /// Tells the caller about writes whose figures can no longer change: the correlator's are
    /// final and the second after the write is complete (or the run is over).
    pub(super) fn notify_final_writes(
        &mut self,
        sinks: &mut LoadSinks<'_>,
        all: bool,
    ) -> Result<()> {
        let complete = self.finals.len() as u64;
        let ready = self.writes[self.writes_notified..]
            .iter()
            .take_while(|w| {
                self.figures.contains_key(&w.seq)
                    && (all
                        || w.reply_us.saturating_sub(self.load_start_us) / 1_000_000 + 2
                            <= complete)
            })
            .count();
        if ready == 0 {
            return Ok(());
        }
        let findings = self.findings();
        for record in &self.writes[self.writes_notified..self.writes_notified + ready] {
            if let Some(finding) = findings.iter().find(|f| f.seq == record.seq) {
                sinks.emit(&LoadFinding::Notice(LoadNotice::Write { record, finding }))?;
            }
        }
        self.writes_notified += ready;
        Ok(())
    }

    fn timeline(&self) -> Vec<LoadSecondRow> {
        let several = self.labels.len() > 1;
        let mut rows = Vec::with_capacity(self.finals.len() * (1 + self.labels.len()));
        for second in &self.finals {
            let tags = self.write_tags(second.all.start_us);
            if several {
                for row in &second.per_server {
                    let mut row = row.clone();
                    if row.server == self.labels[0] {
                        row.writes = tags.clone();
                    }
                    rows.push(row);
                }
            }
            let mut all = second.all.clone();
            all.writes = tags;
            rows.push(all);
        }
        rows
    }

    fn write_tags(&self, second_start_us: u64) -> String {
        let second_end_us = second_start_us + 1_000_000;
        self.writes
            .iter()
            .filter(|w| w.start_us < second_end_us && w.reply_us >= second_start_us)
            .map(WriteUnderLoad::tag)
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub(super) fn report(
        &self,
        meta: &LoadMeta<'_>,
        status: RunStatus,
        status_reason: Option<String>,
        mut warnings: Vec<String>,
        runtime_us: u64,
    ) -> LoadReport {
        let runtime_s = runtime_us as f64 / 1e6;
        let mut blocks = Vec::new();
        let clients_on = |server: usize| self.clients_per_server[server];
        let mut total = SecondAgg::new();
        for (k, agg) in self.run_aggs.iter().enumerate() {
            total.merge(agg);
            if self.labels.len() > 1 {
                let mut block = LoadBlock::from_agg(&self.labels[k], clients_on(k), runtime_s, agg);
                block.role = self.roles[k].clone();
                blocks.push(block);
            }
        }
        blocks.push(LoadBlock::from_agg(
            "all",
            meta.options.plan.clients,
            runtime_s,
            &total,
        ));
        let generator = self.generator(meta);
        if generator.saturated {
            warnings.push(
                "the load generator was the limit or fell behind: see the generator line".into(),
            );
        }
        if generator.samples_dropped > 0 {
            warnings.push(format!(
                "{} per-request samples were dropped (the collector fell behind): the per-write figures miss them",
                generator.samples_dropped
            ));
        }
        if generator.disconnected_at_end > 0 {
            warnings.push(format!(
                "{} connection(s) were down at the end and could not be reopened",
                generator.disconnected_at_end
            ));
        }
        let writes_under_load = self.findings();
        let run_json = LoadRunJson {
            tool: ToolInfo::default(),
            mode: meta.run.mode,
            status,
            status_reason: status_reason.clone(),
            run_id: meta.run.name.run_id.clone(),
            key_prefix: meta.run.name.key_prefix.clone(),
            load_key_prefix: LOAD_PREFIX.to_string(),
            started_unix_us: meta.run.clock.unix_start_us(),
            load_start_us: meta.load_start_us,
            elapsed_us: meta.run.clock.now_us(),
            runtime_s,
            servers: meta
                .servers
                .iter()
                .map(|s| s.target.server.clone())
                .collect(),
            populations: meta.servers.iter().map(|s| s.population.clone()).collect(),
            keys_used: meta.servers.iter().map(|s| s.keys).collect(),
            host: meta.run.host.clone(),
            options: meta.options.clone(),
            threads: meta.threads,
            blocks: blocks.clone(),
            generator: generator.clone(),
            writes: self.writes.clone(),
            writes_under_load: writes_under_load.clone(),
            warnings: warnings.clone(),
            problems: self.problems.clone(),
        };
        LoadReport {
            run_id: meta.run.name.run_id.clone(),
            status,
            status_reason,
            runtime_s,
            blocks,
            timeline: self.timeline(),
            writes: self.writes.clone(),
            writes_under_load,
            generator,
            warnings,
            problems: self.problems.clone(),
            latency: total.hist,
            load_start_us: self.load_start_us,
            started_unix_us: meta.run.clock.unix_start_us(),
            run_json,
        }
    }

    fn generator(&self, meta: &LoadMeta<'_>) -> GeneratorReport {
        let mut summaries: Vec<&ThreadSummary> = self.summaries.iter().collect();
        summaries.sort_by_key(|s| s.thread);
        let share = |part: Option<u64>, wall: u64| {
            part.filter(|_| wall > 0)
                .map(|p| (1000.0 * p as f64 / wall as f64).round() / 10.0)
        };
        let thread_cpu_pct: Vec<Option<f64>> = summaries
            .iter()
            .map(|s| share(s.cpu_us, s.wall_us))
            .collect();
        let thread_wait_pct: Vec<Option<f64>> = summaries
            .iter()
            .map(|s| share(s.run_delay_us, s.wall_us))
            .collect();
        let max_wait = thread_wait_pct.iter().copied().fold(None, max_opt);
        let busiest = thread_cpu_pct
            .iter()
            .flatten()
            .copied()
            .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))));
        let busiest_second = self
            .finals
            .iter()
            .filter_map(|f| f.all.client_cpu_pct)
            .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))));
        let open_loop = meta.options.plan.rate.is_some();
        let mut lag = new_histogram();
        for s in &summaries {
            let _ = lag.add(&s.schedule_lag);
        }
        let late_sends: u64 = summaries.iter().map(|s| s.late_sends).sum();
        let late_sends_pct =
            (open_loop && !lag.is_empty()).then(|| 100.0 * late_sends as f64 / lag.len() as f64);
        let cpu_saturated = busiest.is_some_and(|c| c >= SATURATED_CPU_PCT);
        let starved = max_wait.is_some_and(|w| w >= STARVED_WAIT_PCT);
        let schedule_behind = late_sends_pct.is_some_and(|p| p > 1.0);
        let mut verdict = match busiest {
            Some(cpu) => format!(
                "{} thread(s), busiest at {cpu:.0}% CPU over the run{}",
                meta.threads,
                busiest_second.map_or(String::new(), |s| format!(
                    " ({s:.0}% in its busiest second)"
                ))
            ),
            None => format!("{} thread(s), CPU use unknown on this OS", meta.threads),
        };
        if let Some(wait) = max_wait {
            verdict.push_str(&format!(", waiting for a CPU {wait:.1}% of the time"));
        }
        if open_loop {
            verdict.push_str(&format!(
                "; open-loop schedule: {late_sends} of {} sends over 1 ms late because of the generator",
                lag.len()
            ));
        }
        verdict.push_str(if cpu_saturated {
            ": SATURATED, a thread was busy nearly all the time: the figures may show the client's limit rather than the server's (add --threads, or run the client elsewhere)"
        } else if starved {
            ": CPU-STARVED, the host is oversubscribed and the generator often waited for a core: latencies include that wait and throughput is the host's limit (fewer processes on the host, or the client elsewhere)"
        } else if schedule_behind {
            ": SCHEDULE BEHIND, more than 1% of sends left over 1 ms late with the threads mostly idle: the host did not wake the generator on time, so latencies include that lateness"
        } else {
            ": not saturated"
        });
        GeneratorReport {
            threads: meta.threads,
            clients_per_thread: summaries.iter().map(|s| s.clients).collect(),
            thread_cpu_pct,
            busiest_thread_cpu_pct: busiest,
            busiest_second_cpu_pct: busiest_second,
            thread_wait_pct,
            max_thread_wait_pct: max_wait,
            open_loop,
            schedule_lag_p50_us: (open_loop && !lag.is_empty()).then(|| lag.value_at_quantile(0.5)),
            schedule_lag_p99_us: (open_loop && !lag.is_empty())
                .then(|| lag.value_at_quantile(0.99)),
            late_sends,
            late_sends_pct,
            unsent: summaries.iter().map(|s| s.unsent).sum(),
            reconnects: summaries.iter().map(|s| s.reconnects).sum(),
            disconnected_at_end: summaries.iter().map(|s| s.disconnected_at_end).sum(),
            samples_dropped: summaries.iter().map(|s| s.samples_dropped).sum(),
            saturated: cpu_saturated || starved || schedule_behind,
            verdict,
        }
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Reads a second's counts and latencies again from its figures, late replies included (a last
/// second that had none before gets its p50 and p99 too, not only a max).
fn recount(row: &mut LoadSecondRow, agg: &SecondAgg) {
    let fresh = LoadSecondRow::from_agg(row.second, &row.server, agg, row.start_us, None, None);
    row.requests = fresh.requests;
    row.bytes = fresh.bytes;
    row.errors = fresh.errors;
    row.timeouts = fresh.timeouts;
    row.misses = fresh.misses;
    row.delayed = fresh.delayed;
    row.p50_us = fresh.p50_us;
    row.p99_us = fresh.p99_us;
    row.max_us = fresh.max_us;
}
