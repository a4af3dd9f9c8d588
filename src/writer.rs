//! The writer: one dedicated thread and connection that stores large values, each surrounded by
//! quiet probing, and records for every write when it started, when its last byte went to the
//! kernel, and when the reply came.
//!
//! The value bytes are generated once, at the largest size, and every write sends a prefix slice
//! of that one buffer straight to the socket ([`RawConn::send_set`]): the client holds about one
//! largest value, never the sum.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::Sender;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::clock::RunClock;
use crate::hostmem::HostMemorySampler;
use crate::record::{WriteOp, WriteRecord};
use crate::resp::{RawConn, Reply};
use crate::run::Event;
use crate::target::{ConnInfo, info_field};
use crate::units::format_size;

/// What the writer does, validated.
#[derive(Debug, Clone, Serialize)]
pub struct WriterPlan {
    /// Value sizes in bytes, in the order given.
    pub sizes: Vec<u64>,
    /// How many times each size is written.
    pub repeat: u32,
    /// Quiet probing before and after each write.
    #[serde(with = "crate::units::duration_ms")]
    pub gap: Duration,
    /// Write each size twice to the same key, so the second write frees the first value.
    pub overwrite: bool,
    /// Keep every key until the end of the run (as the seed did) instead of deleting each one
    /// after its quiet gap.
    pub keep: bool,
    /// The run's key prefix, `holprobe:<run-id>:`.
    pub key_prefix: String,
    /// Seed of the value bytes.
    pub seed: u64,
}

/// One step of the writer's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteStep {
    /// What to do.
    pub op: WriteOp,
    /// The key.
    pub key: String,
    /// The value's size (the deleted value's size for a delete).
    pub size_bytes: u64,
}

impl WriterPlan {
    /// The largest value: the size of the one buffer the writer holds.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// The ordered steps: every size to a fresh key; with `overwrite` a second SET to the same
    /// key; then, unless `keep`, the key's deletion. With `keep`, every key is deleted at the
    /// end, each deletion measured like any write.
    ///
    /// Repeats are interleaved: the plan goes through all the sizes once, then again, `repeat`
    /// times. A disturbance of the host that lasts a few seconds (another process's burst of
    /// work) then touches one repeat of several sizes rather than every repeat of one size, so
    /// it shows as an outlier among the repeats instead of shifting that size's median: what
    /// a comparison over the repeats (`probe compare`) needs.
    pub fn steps(&self) -> Vec<WriteStep> {
        let mut steps = Vec::new();
        let mut kept = Vec::new();
        for rep in 1..=self.repeat {
            for (index, &size) in self.sizes.iter().enumerate() {
                let key = format!(
                    "{}w{}:{}:{rep}",
                    self.key_prefix,
                    index + 1,
                    format_size(size)
                );
                steps.push(WriteStep {
                    op: WriteOp::Set,
                    key: key.clone(),
                    size_bytes: size,
                });
                if self.overwrite {
                    steps.push(WriteStep {
                        op: WriteOp::Overwrite,
                        key: key.clone(),
                        size_bytes: size,
                    });
                }
                let delete = WriteStep {
                    op: WriteOp::Delete,
                    key,
                    size_bytes: size,
                };
                if self.keep {
                    kept.push(delete);
                } else {
                    steps.push(delete);
                }
            }
        }
        steps.extend(kept);
        steps
    }

    /// How long the plan takes at least: its gaps (the writes themselves add to this).
    pub fn minimum_duration(&self) -> Duration {
        self.gap * (self.steps().len() as u32 + 1)
    }
}

/// Fills `len` bytes from a seeded PRNG: incompressible, and the same for the same seed.
pub fn random_value(len: u64, seed: u64) -> Vec<u8> {
    let mut value = vec![0u8; len as usize];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    rng.fill_bytes(&mut value);
    value
}

/// Starts the writer thread. Its connection is opened (and authenticated) before it returns.
pub fn spawn_writer(
    plan: WriterPlan,
    value: Arc<Vec<u8>>,
    conn_info: &ConnInfo,
    clock: RunClock,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    let conn = RawConn::connect(conn_info).context("opening the writer's connection")?;
    let worker = Writer {
        steps: plan.steps(),
        plan,
        value,
        conn,
        conn_info: conn_info.clone(),
        clock,
        events,
        stop,
        memory: HostMemorySampler::new(),
    };
    std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || worker.run())
        .context("starting the writer thread")
}

struct Writer {
    plan: WriterPlan,
    steps: Vec<WriteStep>,
    value: Arc<Vec<u8>>,
    conn: RawConn,
    conn_info: ConnInfo,
    clock: RunClock,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
    memory: HostMemorySampler,
}

impl Writer {
    fn run(mut self) {
        if !self.quiet_gap() {
            let _ = self.events.send(Event::WriterDone);
            return;
        }
        for (index, step) in self.steps.clone().into_iter().enumerate() {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let record = self.execute(index as u32 + 1, &step);
            let io_failure = !record.ok && record.server_rss_bytes.is_none();
            let _ = self.events.send(Event::Write(record));
            if io_failure {
                match RawConn::connect(&self.conn_info) {
                    Ok(conn) => self.conn = conn,
                    Err(err) => {
                        let _ = self.events.send(Event::WriterFailed(format!("{err:#}")));
                        return;
                    }
                }
            }
            if !self.quiet_gap() {
                break;
            }
        }
        let _ = self.events.send(Event::WriterDone);
    }

    /// Sleeps one gap, waking early when the run is stopped. False when stopped.
    fn quiet_gap(&self) -> bool {
        let deadline = Instant::now() + self.plan.gap;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
        }
    }

    fn execute(&mut self, seq: u32, step: &WriteStep) -> WriteRecord {
        let start = Instant::now();
        let value = &self.value[..step.size_bytes as usize];
        let sent_result = match step.op {
            WriteOp::Set | WriteOp::Overwrite => self.conn.send_set(step.key.as_bytes(), value),
            WriteOp::Delete => self
                .conn
                .send_raw(&crate::resp::encode_command(&[b"DEL", step.key.as_bytes()])),
        };
        let sent = Instant::now();
        let outcome = sent_result.and_then(|()| self.conn.read_reply());
        let reply = Instant::now();
        let (ok, error) = match &outcome {
            Ok(Reply::Status(s)) if s == "OK" => (true, None),
            Ok(Reply::Integer(_)) if step.op == WriteOp::Delete => (true, None),
            Ok(Reply::Error(text)) => (false, Some(text.clone())),
            Ok(other) => (false, Some(format!("unexpected reply {other:?}"))),
            Err(err) => (false, Some(err.to_string())),
        };
        let memory = self.memory.sample();
        // After an I/O error the connection is unusable: no INFO, and the caller reconnects.
        let server_rss_bytes = if outcome.is_ok() {
            self.server_rss()
        } else {
            None
        };
        let start_us = self.clock.us_at(start);
        let reply_us = self.clock.us_at(reply);
        WriteRecord {
            seq,
            op: step.op,
            key: step.key.clone(),
            size_bytes: step.size_bytes,
            start_us,
            sent_us: self.clock.us_at(sent),
            reply_us,
            set_ms: reply_us.saturating_sub(start_us) as f64 / 1e3,
            ok,
            error,
            host_mem_pct: memory.mem_pct,
            host_swap_pct: memory.swap_pct,
            server_rss_bytes,
        }
    }

    fn server_rss(&mut self) -> Option<u64> {
        match self.conn.command(&[b"INFO", b"memory"]).ok()? {
            Reply::Bulk(Some(bytes)) => {
                info_field(&String::from_utf8_lossy(&bytes), "used_memory_rss")?
                    .parse()
                    .ok()
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(overwrite: bool, keep: bool) -> WriterPlan {
        WriterPlan {
            sizes: vec![1 << 20, 4 << 20],
            repeat: 2,
            gap: Duration::from_millis(10),
            overwrite,
            keep,
            key_prefix: "holprobe:t:".into(),
            seed: 1,
        }
    }

    fn ops(plan: &WriterPlan) -> Vec<&'static str> {
        plan.steps().iter().map(|s| s.op.name()).collect()
    }

    #[test]
    fn default_plan_deletes_each_key_after_its_write() {
        let p = plan(false, false);
        assert_eq!(
            ops(&p),
            [
                "set", "delete", "set", "delete", "set", "delete", "set", "delete"
            ]
        );
        let steps = p.steps();
        assert_eq!(steps[0].key, steps[1].key);
        assert_ne!(steps[0].key, steps[2].key);
        assert!(steps.iter().all(|s| s.key.starts_with("holprobe:t:")));
        // Repeats interleave: 1M, 4M, then 1M, 4M again.
        let sizes: Vec<u64> = steps.iter().step_by(2).map(|s| s.size_bytes).collect();
        assert_eq!(sizes, [1 << 20, 4 << 20, 1 << 20, 4 << 20]);
        assert_ne!(steps[0].key, steps[4].key);
    }

    #[test]
    fn overwrite_and_keep() {
        assert_eq!(ops(&plan(true, false))[..3], ["set", "overwrite", "delete"]);
        let keep = plan(false, true);
        assert_eq!(
            ops(&keep),
            [
                "set", "set", "set", "set", "delete", "delete", "delete", "delete"
            ]
        );
        assert_eq!(keep.max_size(), 4 << 20);
    }

    #[test]
    fn values_are_seeded_and_incompressible_looking() {
        let a = random_value(4096, 7);
        assert_eq!(a, random_value(4096, 7));
        assert_ne!(a, random_value(4096, 8));
        let mut counts = [0u32; 256];
        for byte in &a {
            counts[*byte as usize] += 1;
        }
        // 4096 uniform bytes: every value appears, none more than a few dozen times.
        assert!(counts.iter().all(|&c| c < 50), "{counts:?}");
    }
}
