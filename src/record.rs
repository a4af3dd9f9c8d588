//! What the measurement threads record: one row per probe and per write, all times in
//! microseconds since the run's start ([`crate::measure::clock::RunClock`]). These structs are also the
//! rows of `probes.csv` and `writes.csv`, so the files cannot drift from what was measured.

use serde::{Deserialize, Serialize};

/// The command a probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProbeCmd {
    /// `PING`: touches no data.
    Ping,
    /// `GET` of a small key the tool prepares: goes through the keyspace.
    Get,
}

impl ProbeCmd {
    /// Lower-case name as in the exports.
    pub fn name(self) -> &'static str {
        match self {
            ProbeCmd::Ping => "ping",
            ProbeCmd::Get => "get",
        }
    }
}

/// A server's role in the topology the run probes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    /// Takes the writes of its shard's slots (a standalone server is one).
    #[default]
    Master,
    /// Copies a master (the server's `slave` role).
    Replica,
}

impl NodeRole {
    /// `master` or `replica`, as in the exports.
    pub fn name(self) -> &'static str {
        match self {
            NodeRole::Master => "master",
            NodeRole::Replica => "replica",
        }
    }

    /// The same as [`NodeRole::name`].
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

impl std::fmt::Display for NodeRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The columns every per-node row of the exports ends with (probes.csv, writes.csv,
/// stalls.csv, summary.csv): which server the row was measured on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCols {
    /// `host:port` as the topology reports it (the URL's, for a single server).
    pub node: String,
    /// `master` or `replica`.
    pub role: NodeRole,
    /// The node's shard, from 0 in slot order; empty outside a cluster.
    pub shard: Option<u16>,
}

/// summary.csv's last column: whether the node holds the written key's slot (the written
/// server itself, and its replicas).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SameShard {
    /// True on the written shard's nodes.
    pub same_shard: bool,
}

/// One probe: a small command sent on a fixed schedule by a dedicated thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Probe thread index, from 0.
    pub thread: u16,
    /// Sequence number within the thread, from 0.
    pub seq: u64,
    /// `ping` or `get`.
    pub cmd: ProbeCmd,
    /// When the schedule said the probe should go.
    pub intended_us: u64,
    /// When it was handed to the kernel. Probes are pipelined: a probe goes out at its intended
    /// time whether or not earlier ones were answered, so this is late only when the probe
    /// thread itself was (the tool's own jitter).
    pub sent_us: u64,
    /// When its reply arrived: the kernel's receive stamp where the socket has them (run.json
    /// `probe_engine.reply_clock`), else when the thread read it. Empty when no reply came
    /// (connection error or timeout).
    pub reply_us: Option<u64>,
    /// `reply_us - intended_us`: open-loop latency, counted from the intended send time: how
    /// long a client arriving at that moment waited for the server.
    pub latency_us: Option<u64>,
    /// True when the expected reply came back.
    pub ok: bool,
    /// What went wrong, when `ok` is false: the server's error reply or the I/O error.
    pub error: Option<String>,
    /// When the probe thread read the reply (≥ `reply_us`; the gap is the thread's own wait for
    /// a core).
    pub read_us: Option<u64>,
}

impl ProbeRecord {
    /// How late the probe left compared with its schedule (the tool's own jitter).
    pub fn send_lag_us(&self) -> u64 {
        self.sent_us.saturating_sub(self.intended_us)
    }
}

/// What a write event did to the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteOp {
    /// `SET` of a fresh key.
    #[default]
    Set,
    /// `SET` over an existing large value: the old value is freed on the server's main thread.
    Overwrite,
    /// `DEL` of a large value: freed on the main thread too.
    Delete,
    /// A command of the library user's own ([`crate::measure::writer::CustomCommand`]), run by the writer
    /// on a key it just wrote and timed like every write.
    Command,
    /// A stall of known length injected by `probe calibrate` (`DEBUG SLEEP` or a Lua busy loop):
    /// no value is written; `size_bytes` is 0.
    Inject,
    /// A collection built in pipelined batches (`HSET`, `RPUSH`, `SADD`, `ZADD`, `XADD`): many
    /// small commands back to back, which keep other clients waiting too.
    Build,
    /// The whole value read in one command (`GET`, `HGETALL`, `LRANGE 0 -1`, ...), its reply
    /// thrown away as it arrives: the server must write all of it out.
    Read,
    /// `UNLINK`: frees a collection in the background, a string on the main thread. (On a
    /// server built with libc malloc, any removal whose value the background thread took keeps
    /// its window open until that thread is done: the main thread merges the freed chunks then.)
    Unlink,
    /// The key given a short TTL (`PEXPIRE`) and removed by the server's active expiry: no
    /// client's command frees it, so SLOWLOG has nothing; the window runs from the TTL's end
    /// until the server says the key is gone.
    Expire,
    /// The key evicted by the server under `maxmemory` (`volatile-ttl`, the key the only one
    /// with a TTL): `maxmemory` is lowered below what the server holds, so that its eviction
    /// removes the key (no client's command names it); the window runs from that `CONFIG SET`
    /// until the server has said the key was evicted and holds no more than `maxmemory` again
    /// (a background free leaves it over the limit, and the server waits for it at every
    /// command), and the settings are put back after it. Only
    /// on a server the tool started: anywhere else it could evict another key.
    Evict,
}

impl WriteOp {
    /// Lower-case name as in the exports.
    pub fn name(self) -> &'static str {
        match self {
            WriteOp::Set => "set",
            WriteOp::Overwrite => "overwrite",
            WriteOp::Delete => "delete",
            WriteOp::Command => "command",
            WriteOp::Inject => "inject",
            WriteOp::Build => "build",
            WriteOp::Read => "read",
            WriteOp::Unlink => "unlink",
            WriteOp::Expire => "expire",
            WriteOp::Evict => "evict",
        }
    }

    /// The label of the op's own time in a report's line (`set: 68.5ms`, `del: 2.1ms`): an
    /// overwrite is a set, the long names shortened.
    pub fn time_label(self) -> &'static str {
        match self {
            WriteOp::Delete => "del",
            WriteOp::Set | WriteOp::Overwrite => "set",
            WriteOp::Command => "cmd",
            WriteOp::Inject => "inj",
            WriteOp::Build => "build",
            WriteOp::Read => "read",
            WriteOp::Unlink => "unlink",
            WriteOp::Expire => "expire",
            WriteOp::Evict => "evict",
        }
    }

    /// The op called `name` (as [`WriteOp::name`] gives it).
    pub fn named(name: &str) -> Option<WriteOp> {
        [
            WriteOp::Set,
            WriteOp::Overwrite,
            WriteOp::Delete,
            WriteOp::Command,
            WriteOp::Inject,
            WriteOp::Build,
            WriteOp::Read,
            WriteOp::Unlink,
            WriteOp::Expire,
            WriteOp::Evict,
        ]
        .into_iter()
        .find(|op| op.name() == name)
    }

    /// The op takes the key away (`delete`, `unlink`, `expire`, `evict`).
    pub fn removes_key(self) -> bool {
        matches!(
            self,
            WriteOp::Delete | WriteOp::Unlink | WriteOp::Expire | WriteOp::Evict
        )
    }

    /// The server removes the key by itself (an active expiry, an eviction): no command of the
    /// writer names it, so SLOWLOG has nothing and the LATENCY monitor's event is the server's
    /// figure.
    pub fn server_removes(self) -> bool {
        matches!(self, WriteOp::Expire | WriteOp::Evict)
    }
}

/// One write event by the writer thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteRecord {
    /// Write number in the run, from 1.
    pub seq: u32,
    /// `set`, `build`, `overwrite`, `read`, `delete`, `unlink`, `expire`, `evict` or `command`.
    pub op: WriteOp,
    /// Size of the value written (or deleted, or the key's value for a custom command), in bytes.
    pub size_bytes: u64,
    /// When the writer began sending the command.
    pub start_us: u64,
    /// When the last byte of the command went to the kernel.
    pub sent_us: u64,
    /// When the reply was read (or the write failed).
    pub reply_us: u64,
    /// `reply_us - start_us` in milliseconds: what the seed called "spend".
    pub set_ms: f64,
    /// True when the server answered OK (or the delete's integer; for a custom command, any
    /// reply but an error).
    pub ok: bool,
    /// The server's error reply or the I/O error, when `ok` is false.
    pub error: Option<String>,
    /// Host memory in use right after the write, percent (as psutil's virtual_memory().percent).
    pub host_mem_pct: f64,
    /// Host swap in use right after the write, percent.
    pub host_swap_pct: f64,
    /// The server's `used_memory_rss` right after the write (INFO memory), when it answered.
    pub server_rss_bytes: Option<u64>,
    /// The key written (under the run's prefix).
    pub key: String,
    /// The server's own execution time of the command, µs: its SLOWLOG entry. Empty when the
    /// server logged none (the command ran faster than `slowlog-log-slower-than`, or SLOWLOG is
    /// unavailable). SLOWLOG times execution only, not reading the request.
    pub server_exec_us: Option<u64>,
    /// The largest LATENCY monitor event the server recorded during the write, ms (empty: none
    /// recorded, or the monitor is off).
    pub server_latency_event_ms: Option<u64>,
    /// Name of that event (`command`, `fast-command`, ...).
    pub server_latency_event: Option<String>,
    /// The server's longest event-loop cycle during the write, µs (`eventloop_duration_max` of
    /// INFO DEBUG, Redis 7.2+ and Valkey). Empty where the server does not report it, or (on a
    /// server the tool may not reset) when the longest cycle during the write was no longer
    /// than an earlier one.
    pub server_eventloop_max_us: Option<u64>,
    /// The request size the server logged for the command in Valkey's COMMANDLOG
    /// `large-request`, bytes (empty: no entry, or no COMMANDLOG).
    pub server_request_bytes: Option<u64>,
    /// MOVED replies the write followed (a cluster's slot moved: a failover, a resharding).
    #[serde(default)]
    pub moved: u32,
    /// ASK replies the write followed (a slot being migrated).
    #[serde(default)]
    pub asked: u32,
    /// When the written master's replicas had applied the write, µs: the reply to the `WAIT`
    /// the writer sends after each write when the run probes the master's replicas. A replica
    /// applies a write only once its master has executed it, so each replica's figures of the
    /// write cover its window up to here (empty: no replica probed, the WAIT timed out or was
    /// refused, or the write was redirected).
    #[serde(default)]
    pub replicated_us: Option<u64>,
    /// The kind of value the op worked on: `string`, `hash`, `list`, `set`, `zset` or `stream`
    /// (empty in runs recorded before value types, which wrote strings only, and for
    /// `probe calibrate`'s injections).
    #[serde(default)]
    pub value_type: Option<String>,
    /// Elements of the value: 1 for a string; fields, members or entries of a collection.
    #[serde(default)]
    pub elements: Option<u64>,
    /// Bytes of one element (of a hash field and of its value, each); a string's whole size.
    #[serde(default)]
    pub element_bytes: Option<u64>,
    /// The server's encoding of the value (`OBJECT ENCODING`, read after it was written, outside
    /// every window): `hashtable`, `listpack`, `quicklist`, `skiplist`, `stream`, `raw`, ...
    /// The thread that frees it follows from it ([`crate::workload::lazyfree`]).
    #[serde(default)]
    pub encoding: Option<String>,
    /// Which thread freed the value, as the server's counters tell (`lazyfreed_objects` and
    /// `lazyfree_pending_objects` of INFO memory, before and after the op): `background` when
    /// the op handed an object to the lazyfree thread, `main` when it did not. Only for the ops
    /// that free a value (`delete`, `unlink`, `expire`, `overwrite`); empty where the server
    /// does not report the counters.
    #[serde(default)]
    pub freed_by: Option<crate::workload::lazyfree::FreedBy>,
    /// How long the server's main thread ran on a CPU during the write, µs (the same reading as
    /// `server_cpu_wait_us`, its first field): everything its event loop did in the window,
    /// in a command or not, so it sees what SLOWLOG does not (a libc build's merge of freed
    /// chunks, in later cycles). It holds the probes' own commands too (a few µs each). Where it
    /// is well above `hol_delay_ms`, the op's work came in pieces with others served between
    /// them. Only for a server the tool started or a `--url` server found on this host
    /// ([`crate::measure::target::ServerFacts::local_pid`]); empty otherwise, and in runs
    /// recorded before it was read.
    #[serde(default)]
    pub server_cpu_run_us: Option<u64>,
    /// How long the server's main thread was runnable but waiting for a CPU during the write,
    /// µs (`/proc/PID/task/PID/schedstat`, read right before the op's first command and right
    /// after its window; an expiry's also spans its TTL): this host's CPU shortage, not the
    /// server's work. Where others were held about as long, that part of their wait is the
    /// host's (the probes' own threads count). Only where `server_cpu_run_us` is read.
    #[serde(default)]
    pub server_cpu_wait_us: Option<u64>,
    /// What the server's main thread ran, µs, over a stretch as long as this write's readings
    /// at the pace of the quiet gap just before it (the probes' commands, the server's own
    /// cron): the part of `server_cpu_run_us` that is not the op's. At 2 × 1000 PINGs/s an idle
    /// server's main thread ran about 3 ms a 50 ms window here, 20 × that at 4 × 5000/s. Empty
    /// before a run's first op (no gap read yet) and where `server_cpu_run_us` is.
    #[serde(default)]
    pub server_cpu_idle_us: Option<u64>,
    /// The free room of the query buffer the server kept for the writer's connection, bytes,
    /// read right before a SET or a string's overwrite (`qbuf-free` of `CLIENT INFO`, Redis
    /// 6.2+ and Valkey). After a large value the server keeps a buffer as large on the
    /// connection (it expects another) until its cron trims it, 1-2 s later on an idle server,
    /// longer with many clients; a larger value sent before then makes it grow that buffer, and
    /// where its allocator copies on growing (jemalloc: Redis 7.0 and 8.2) others wait for the
    /// copy in one block (a 64M SET 50 ms after a 32M one on the same connection held others
    /// 44-60 ms, 2-5 ms a second later). Empty for other ops, and where the server refuses
    /// CLIENT INFO.
    #[serde(default)]
    pub writer_qbuf_free_bytes: Option<u64>,
    /// Where a redirected write went in the end (`host:port`), when not to the run's written
    /// server; writes.csv's `node` column says it.
    #[serde(skip)]
    pub sent_to: Option<String>,
}

impl WriteRecord {
    /// Drops what the written server said of the write (its SLOWLOG, LATENCY, event-loop and
    /// COMMANDLOG figures, its memory and lazyfree counters, its main thread's CPU times): for
    /// the rows of another node probed (a replica, another shard), whose own server said none
    /// of it.
    pub fn forget_server_view(&mut self) {
        self.server_rss_bytes = None;
        self.server_exec_us = None;
        self.server_latency_event_ms = None;
        self.server_latency_event = None;
        self.server_eventloop_max_us = None;
        self.server_request_bytes = None;
        self.freed_by = None;
        self.server_cpu_run_us = None;
        self.server_cpu_wait_us = None;
        self.server_cpu_idle_us = None;
        self.writer_qbuf_free_bytes = None;
    }

    /// A write known only by its timing: `ok`, `set_ms` from `start_us` to `reply_us`, no
    /// error, redirect, replication, memory or server reading. The writer's records fill in
    /// the rest (`WriteRecord { ok: false, ..WriteRecord::timed(..) }`).
    pub fn timed(
        seq: u32,
        op: WriteOp,
        key: String,
        size_bytes: u64,
        (start_us, sent_us, reply_us): (u64, u64, u64),
    ) -> WriteRecord {
        WriteRecord {
            seq,
            op,
            size_bytes,
            start_us,
            sent_us,
            reply_us,
            set_ms: reply_us.saturating_sub(start_us) as f64 / 1e3,
            ok: true,
            error: None,
            host_mem_pct: 0.0,
            host_swap_pct: 0.0,
            server_rss_bytes: None,
            key,
            server_exec_us: None,
            server_latency_event_ms: None,
            server_latency_event: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
            moved: 0,
            asked: 0,
            replicated_us: None,
            value_type: None,
            elements: None,
            element_bytes: None,
            encoding: None,
            freed_by: None,
            server_cpu_run_us: None,
            server_cpu_wait_us: None,
            server_cpu_idle_us: None,
            writer_qbuf_free_bytes: None,
            sent_to: None,
        }
    }
}
