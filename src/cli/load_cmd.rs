//! `probe load`: the seed's concurrent-clients benchmark, optionally with the prober's writer
//! storing large values while it runs.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use super::{Output, TargetArgs};
use crate::error::{EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, UsageError};
use crate::load::cluster::{ReadFrom, SlotMap, clients_per_node, load_nodes};
use crate::load::engine::OpMix;
use crate::load::keyspace::{
    KeyNaming, LOAD_PREFIX, META_KEY, MemoryRoom, PopulationMeta, ValueSize, check_fit,
    default_keys, read_meta,
};
use crate::load::populate::{PopulatePlan, estimated_bytes_per_key, populate};
use crate::load::report::{block_lines, generator_lines, write_line};
use crate::load::runner::{LoadNotice, LoadOptions, LoadServer, run_load};
use crate::measure::slots::{SLOT_COUNT, hash_tag_for};
use crate::measure::target::{ConnInfo, Target, TargetSpec, info_field};
use crate::measure::topology::{NodeAddressMap, Topology, TopologyKind, TopologyMode, discover};
use crate::measure::writer::WriterPlan;
use crate::output::export::prepare_out_dir;
use crate::units::{format_size, parse_duration, parse_size_list};

/// Most connections one run opens.
pub const MAX_CLIENTS: u64 = 5_000;
/// Keys the embedded server is populated with at most by default (a quick start).
pub const EMBEDDED_DEFAULT_KEYS_CAP: u64 = 100_000;

/// Concurrent clients GETting (and SETting) random populated keys, closed or open loop; prints
/// requests, requests per second, MiB/s and round-trip percentiles per server and in total. With --writer-sizes the prober's writer stores
/// large values meanwhile, and each write is reported with what the load clients saw.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// A server to load, populated by `probe populate` (repeatable: the clients are spread over
    /// the servers). Without --url the tool starts its own redis-server and populates it.
    #[arg(long, value_name = "URL")]
    url: Vec<String>,

    /// The server's host, as redis-cli's -h (instead of --url; one server) [default with
    /// --port: 127.0.0.1].
    #[arg(long, value_name = "HOST")]
    host: Option<String>,

    /// The server's port, as redis-cli's -p (instead of --url) [default with --host: 6379].
    #[arg(long, value_name = "PORT", allow_negative_numbers = true)]
    port: Option<String>,

    /// The password, as redis-cli's -a, with --host/--port (REDISCLI_AUTH keeps it out of the
    /// process list). Never printed or stored.
    #[arg(long, value_name = "PASSWORD")]
    password: Option<String>,

    /// The ACL user name, as redis-cli's --user, with --host/--port.
    #[arg(long, value_name = "USER")]
    user: Option<String>,

    /// The server binary to start when no --url is given [default: redis-server from PATH].
    #[arg(long, value_name = "PATH")]
    server_bin: Option<PathBuf>,

    /// An extra setting for the started server, "NAME VALUE" (repeatable).
    #[arg(long, value_name = "NAME VALUE")]
    server_arg: Vec<String>,

    /// Limit on establishing each connection.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "5s"
    )]
    connect_timeout: String,

    /// A request unanswered this long is a timeout (its connection is reopened).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "30s"
    )]
    timeout: String,

    /// Concurrent clients (connections) in total, spread evenly over the servers.
    #[arg(
        long,
        value_name = "C",
        default_value = "50",
        allow_negative_numbers = true
    )]
    clients: String,

    /// Generator threads, each driving many connections [default: one per core not used by a
    /// local server, at least one per server, 1 to 8].
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    threads: Option<String>,

    /// Length of the load [default: 30s; with --writer-sizes, until the writer is done].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    duration: Option<String>,

    /// Open loop: this many requests per second in total, on a fixed schedule; latency counts
    /// from each request's intended send time. Without it: closed loop.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    rate: Option<String>,

    /// Requests outstanding per connection at most (1: one request, one reply).
    #[arg(
        long,
        value_name = "P",
        default_value = "1",
        allow_negative_numbers = true
    )]
    pipeline: String,

    /// SET:GET weights, in memtier_benchmark's order: 1:10 is one SET per ten GETs (SETs
    /// overwrite random load keys with values of --value-size). Earlier builds read GET:SET;
    /// that order is no longer accepted.
    #[arg(long, value_name = "SET:GET", default_value = "0:1")]
    ratio: String,

    /// Keys to read: 0..N-1 of the population [default: all of it]. Without --url: the keys
    /// the started server is populated with [default: as populate's, at most 100000].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    keys: Option<String>,

    // --help: SET value sizes, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "SIZE|MIN..MAX",
        help = crate::size_help!(
            "Sizes of SET values, MIN..MAX or one size [default: the population's]. Without --url: the sizes the started server is populated with [default: 1024..4096]."
        )
    )]
    value_size: Option<String>,

    // --help: the writer's sizes, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "LIST",
        allow_hyphen_values = true,
        help = crate::size_help!(
            "Run the writer meanwhile: value sizes to write, comma-separated, e.g. 16M,64M."
        )
    )]
    writer_sizes: Option<String>,

    /// Writes per size.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    repeat: String,

    /// Quiet load before and after each write; at least 1s so that the seconds around a write
    /// hold none.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "2s"
    )]
    gap: String,

    /// Write each size twice to the same key (the second write also frees the first value).
    #[arg(long)]
    overwrite: bool,

    /// Keep every written value until the end instead of deleting each after its gap.
    #[arg(long)]
    keep: bool,

    /// A request slower than this counts as delayed.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "1ms"
    )]
    stall_threshold: String,

    /// Seed of key choice, SET bytes and the writer's value.
    #[arg(long, value_name = "N", default_value_t = 0x5eed)]
    seed: u64,

    /// Write load_timeline.csv, load_latency.hgrm, load_writes.csv and run.json here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Replace a run already in --out.
    #[arg(long)]
    force: bool,

    /// Print the plan (servers, clients, mix, the commands each server would get, the writer's
    /// steps); start, connect to and send nothing.
    #[arg(long)]
    dry_run: bool,

    /// What stdout gets: `text` (the report above), `json` (one document at the end with the
    /// findings load's run.json has; notes and progress stay on stderr) or `markdown` (the
    /// per-write table and a row per server).
    #[arg(long, value_enum, default_value_t = crate::output::format::Format::Text)]
    format: crate::output::format::Format,
    #[command(flatten)]
    topology: LoadTopologyArgs,

    /// On a cluster: where the GETs go, masters (each key's master) or replicas (the replicas
    /// of the key's shard, READONLY first; the SETs still go to the masters, and the clients
    /// are split between the two by --ratio).
    #[arg(long, value_name = "masters|replicas", default_value = "masters")]
    read_from: String,
}

/// The topology flags of populate, load and clean.
#[derive(Debug, Clone, Args)]
pub struct LoadTopologyArgs {
    /// auto: on a Redis Cluster node, work on the whole cluster (every master, each key on its
    /// slot's master; a block per node); single: only the --url server, refused on a cluster
    /// node (most keys would be answered MOVED).
    #[arg(long, value_name = "auto|single", default_value = "auto")]
    pub topology: String,

    /// Reach a cluster node that announces FROM (host:port) at TO (host:port) instead (NAT,
    /// containers). Repeatable.
    #[arg(long, value_name = "FROM=TO")]
    pub node_address: Vec<String>,
}

/// A cluster populate, load or clean works on: its topology and the master of the
/// population's description.
pub struct LoadCluster {
    /// Every reachable node, shard by shard.
    pub topology: Topology,
    /// Slot -> shard.
    pub slots: SlotMap,
    /// The master serving [`META_KEY`]'s slot.
    pub meta_conn: ConnInfo,
}

impl LoadTopologyArgs {
    /// The cluster behind `conn`: `None` for a server with cluster mode off (today's single
    /// server path, whatever its replicas). `--topology single` refuses a cluster node in one
    /// line rather than failing request by request.
    pub fn cluster_of(&self, conn: &ConnInfo, out: &Output) -> Result<Option<LoadCluster>> {
        let mode: TopologyMode = self.topology.parse()?;
        let map = NodeAddressMap::parse(&self.node_address)?;
        if !cluster_enabled(conn)? {
            return Ok(None);
        }
        if mode == TopologyMode::Single {
            return Err(UsageError::Conflict(format!(
                "{conn} is a Redis Cluster node: with --topology single the load keys of other nodes' slots would be answered MOVED; use --topology auto (the default) to work on every master"
            ))
            .into());
        }
        let (topology, notes) = discover(conn, &map)?;
        for note in &notes {
            out.warn(note);
        }
        anyhow::ensure!(
            topology.kind == TopologyKind::Cluster,
            "{conn} says cluster_enabled:1 but the topology found is not a cluster"
        );
        let covered = topology.slots_covered();
        if covered < u32::from(SLOT_COUNT) {
            return Err(UsageError::Conflict(format!(
                "the cluster of {conn} serves only {covered} of {SLOT_COUNT} slots from reachable masters: the load keys of the others have nowhere to go (see --node-address)"
            ))
            .into());
        }
        let slots = SlotMap::new(&topology);
        let meta_shard = slots
            .shard_of_key(META_KEY.as_bytes())
            .context("no master serves the slot of the population's description")?;
        let meta_conn = conn.for_node(&topology.shards[meta_shard].master.address)?;
        out.note(&format!(
            "cluster of {} masters and {} replicas (from {conn}); {META_KEY} on {}",
            topology.shards.len(),
            topology.nodes().len() - topology.shards.len(),
            meta_conn.address()
        ));
        Ok(Some(LoadCluster {
            topology,
            slots,
            meta_conn,
        }))
    }

    /// The connection of every master, with the indices of the load keys `0..keys` its slots
    /// hold, shard by shard.
    pub fn masters(
        cluster: &LoadCluster,
        conn: &ConnInfo,
        keys: u64,
    ) -> Result<Vec<(ConnInfo, std::sync::Arc<Vec<u32>>)>> {
        let (by_shard, _) = cluster.slots.partition(&KeyNaming::load(), keys);
        cluster
            .topology
            .shards
            .iter()
            .zip(by_shard)
            .map(|(shard, indices)| {
                Ok((
                    conn.for_node(&shard.master.address)?,
                    std::sync::Arc::new(indices),
                ))
            })
            .collect()
    }
}

/// `INFO cluster` says `cluster_enabled:1`.
pub fn cluster_enabled(conn: &ConnInfo) -> Result<bool> {
    let mut control = conn.redis_connection()?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query(&mut control)
        .with_context(|| format!("INFO cluster on {conn}"))?;
    Ok(info_field(&info, "cluster_enabled") == Some("1"))
}

/// Where the load goes: the servers to open, and for the embedded one what to populate it with.
#[derive(Debug, Clone)]
pub struct LoadTargets {
    /// One per `--url`, or the embedded server.
    pub specs: Vec<TargetSpec>,
    /// `--keys`.
    pub keys: Option<u64>,
    /// `--value-size`.
    pub value_size: Option<ValueSize>,
    /// `--read-from` (on a cluster).
    pub read_from: ReadFrom,
}

impl LoadArgs {
    /// Checks every value; nothing is sent anywhere before this succeeds.
    pub fn to_options(
        &self,
        env_password: Option<String>,
    ) -> Result<(LoadOptions, LoadTargets), UsageError> {
        let clients = parse_count("--clients", &self.clients, 1, MAX_CLIENTS)? as u32;
        let threads = self
            .threads
            .as_deref()
            .map(|t| parse_count("--threads", t, 1, 64).map(|t| t as u16))
            .transpose()?;
        let pipeline = parse_count("--pipeline", &self.pipeline, 1, 1000)? as u32;
        let (set_weight, get_weight) = parse_ratio(&self.ratio)?;
        let rate = self.rate.as_deref().map(parse_total_rate).transpose()?;
        let duration = match &self.duration {
            Some(text) => {
                let d = parse_duration("--duration", text)?;
                if d.is_zero() || d > Duration::from_secs(24 * 3600) {
                    return Err(UsageError::invalid(
                        "--duration",
                        text,
                        "expected more than 0 and at most 24h",
                    ));
                }
                Some(d)
            }
            None => None,
        };
        let stall_threshold = super::parse_stall_threshold(&self.stall_threshold)?;
        let keys = self
            .keys
            .as_deref()
            .map(|k| parse_count("--keys", k, 1, 1_000_000_000))
            .transpose()?;
        let value_size = self
            .value_size
            .as_deref()
            .map(|v| ValueSize::parse("--value-size", v))
            .transpose()?;
        let writer = match &self.writer_sizes {
            Some(list) => {
                let sizes = parse_size_list("--writer-sizes", list)?;
                let repeat = parse_count("--repeat", &self.repeat, 1, 10_000)? as u32;
                let gap = parse_duration("--gap", &self.gap)?;
                if gap < Duration::from_secs(1) {
                    return Err(UsageError::invalid(
                        "--gap",
                        &self.gap,
                        "must be at least 1s under load: the seconds around a write must hold none, to compare its throughput with",
                    ));
                }
                Some(WriterPlan {
                    sizes,
                    repeat,
                    gap,
                    overwrite: self.overwrite,
                    keep: self.keep,
                    seed: self.seed,
                    ..WriterPlan::default()
                })
            }
            None => {
                for (flag, set) in [
                    ("--overwrite", self.overwrite),
                    ("--keep", self.keep),
                    ("--repeat", self.repeat != "1"),
                    ("--gap", self.gap != "2s"),
                ] {
                    if set {
                        return Err(UsageError::Conflict(format!(
                            "{flag} applies to the writer: it needs --writer-sizes"
                        )));
                    }
                }
                None
            }
        };
        let duration = match (duration, &writer) {
            (None, None) => Some(Duration::from_secs(30)),
            (d, _) => d,
        };
        let mut specs = Vec::new();
        for (i, url) in self.url.iter().enumerate() {
            if self.url[..i].contains(url) {
                return Err(UsageError::invalid(
                    "--url",
                    crate::measure::target::redact_url(url),
                    "given twice: each server once",
                ));
            }
            let one = TargetArgs {
                url: Some(url.clone()),
                ..self.target_args()
            };
            let spec = one.to_spec(env_password.clone())?;
            refuse_tls(&spec, "--url", url)?;
            specs.push(spec);
        }
        if specs.is_empty() {
            // --host/--port, or else the server the tool starts.
            let spec = self.target_args().to_spec(env_password.clone())?;
            refuse_tls(&spec, "--host", self.host.as_deref().unwrap_or_default())?;
            specs.push(spec);
        }
        if clients < specs.len() as u32 {
            return Err(UsageError::invalid(
                "--clients",
                clients,
                format!("at least one per server ({} servers)", specs.len()),
            ));
        }
        let timeout = parse_duration("--timeout", &self.timeout)?;
        let read_from: ReadFrom = self.read_from.parse()?;
        self.topology.topology.parse::<TopologyMode>()?;
        NodeAddressMap::parse(&self.topology.node_address)?;
        Ok((
            LoadOptions {
                clients,
                threads,
                duration,
                rate,
                pipeline,
                get_weight,
                set_weight,
                writer,
                stall_threshold_us: stall_threshold.as_micros() as u64,
                timeout_us: timeout.as_micros().max(1) as u64,
                seed: self.seed,
                out: self.out.clone(),
                writer_hash_tag: None,
            },
            LoadTargets {
                specs,
                keys,
                value_size,
                read_from,
            },
        ))
    }
}

impl LoadArgs {
    /// The main job's target flags with this command's values, no URL and no TLS.
    fn target_args(&self) -> TargetArgs {
        TargetArgs {
            url: None,
            host: self.host.clone(),
            port: self.port.clone(),
            password: self.password.clone(),
            user: self.user.clone(),
            server_bin: self.server_bin.iter().cloned().collect(),
            server_arg: self.server_arg.clone(),
            connect_timeout: self.connect_timeout.clone(),
            timeout: self.timeout.clone(),
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            insecure: false,
        }
    }
}

/// The load clients and populate speak plain TCP from their own event loop or threads: a
/// `rediss://` server is refused before anything is sent.
pub fn refuse_tls(spec: &TargetSpec, flag: &'static str, url: &str) -> Result<(), UsageError> {
    if let TargetSpec::External(conn) = spec
        && conn.tls.is_some()
    {
        return Err(UsageError::invalid(
            flag,
            crate::measure::target::redact_url(url),
            "TLS (rediss://) is not supported by populate and load yet: their clients use plain sockets",
        ));
    }
    Ok(())
}

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

/// Parses `--ratio SET:GET` (memtier_benchmark's order) into `(set, get)` weights.
pub fn parse_ratio(text: &str) -> Result<(u32, u32), UsageError> {
    let bad = || {
        UsageError::invalid(
            "--ratio",
            text,
            "expected SET:GET weights as memtier_benchmark takes them, such as 0:1 (GETs only) or 1:10 (one SET per ten GETs): whole numbers up to 1000, not both 0",
        )
    };
    let (set, get) = text.split_once(':').ok_or_else(bad)?;
    let set: u32 = set.trim().parse().map_err(|_| bad())?;
    let get: u32 = get.trim().parse().map_err(|_| bad())?;
    if get > 1000 || set > 1000 || get + set == 0 {
        return Err(bad());
    }
    Ok((set, get))
}

fn parse_total_rate(text: &str) -> Result<f64, UsageError> {
    let rate: f64 = text.trim().parse().map_err(|_| {
        UsageError::invalid(
            "--rate",
            text,
            "expected requests per second in total, such as 50000",
        )
    })?;
    if !rate.is_finite() || rate <= 0.0 || rate > 10_000_000.0 {
        return Err(UsageError::invalid(
            "--rate",
            text,
            "expected more than 0 and at most 10000000 requests per second",
        ));
    }
    Ok(rate)
}

/// Opens the `--url` server of `populate` or `clean` (they need one: their keys outlive the
/// command). `clean` works over TLS (redis-rs); `populate` does not (plain sockets).
pub fn open_external(args: &TargetArgs, command: &str, allow_tls: bool) -> Result<Target> {
    let spec = args.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
    if !allow_tls {
        refuse_tls(&spec, "--url", &spec_url(args))?;
    }
    if let TargetSpec::Embedded { .. } = spec {
        return Err(UsageError::Conflict(format!(
            "probe {command} needs --url (or --host/--port): its keys are meant to outlive the command, and a server the tool starts is stopped when it ends (probe load without --url populates its own server)"
        ))
        .into());
    }
    super::target_args::open_target(&spec)
}

/// The URL a TLS refusal names: `--url`'s (redacted there), or the one --host/--port make.
fn spec_url(args: &TargetArgs) -> String {
    args.url
        .clone()
        .or_else(|| args.host_port_url().ok().flatten())
        .unwrap_or_default()
}

/// Runs `probe load`; returns the exit status.
pub fn run(args: &LoadArgs, interrupt: &AtomicBool, out: &mut Output) -> Result<i32> {
    let (options, targets) = args.to_options(std::env::var("REDISCLI_AUTH").ok())?;
    if args.dry_run {
        for line in dry_run_plan(&options, &targets)? {
            out.line(&line);
        }
        return Ok(EXIT_OK);
    }
    if let Some(dir) = &options.out {
        prepare_out_dir(dir, args.force)?;
    }
    let mut opened: Vec<Target> = Vec::new();
    for spec in &targets.specs {
        let target = super::target_args::open_target(spec)?;
        super::probe_cmd::describe_target(&target, "loading", out);
        opened.push(target);
    }
    let result = run_targets(args, &options, &targets, &opened, interrupt, out);
    for target in &mut opened {
        target.shutdown();
    }
    result
}

/// A cluster node (alone) runs the cluster load; other servers today's load.
fn run_targets(
    args: &LoadArgs,
    options: &LoadOptions,
    targets: &LoadTargets,
    opened: &[Target],
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<i32> {
    let mut cluster = None;
    for target in opened.iter().filter(|t| t.embedded.is_none()) {
        if let Some(found) = args.topology.cluster_of(&target.conn, out)? {
            if opened.len() > 1 {
                return Err(UsageError::invalid(
                    "--url",
                    target.conn.to_string(),
                    "is a cluster node: give one node of the cluster (the others are found) and no other server",
                )
                .into());
            }
            cluster = Some(found);
        }
    }
    match cluster {
        Some(cluster) => run_cluster(
            options,
            targets,
            &opened[0],
            &cluster,
            interrupt,
            out,
            args.format,
        ),
        None if targets.read_from == ReadFrom::Replicas => Err(UsageError::invalid(
            "--read-from",
            "replicas",
            "applies to a cluster: the --url server is not a cluster node",
        )
        .into()),
        None => run_opened(options, targets, opened, interrupt, out, args.format),
    }
}

/// The load on a cluster: every node a server of the report, each connection bound to one
/// node and sending only keys of its shard (see [`crate::load::cluster`]).
fn run_cluster(
    options: &LoadOptions,
    targets: &LoadTargets,
    url_target: &Target,
    cluster: &LoadCluster,
    interrupt: &AtomicBool,
    out: &mut Output,
    format: crate::output::format::Format,
) -> Result<i32> {
    let mut control = cluster.meta_conn.redis_connection()?;
    let Some(meta) = read_meta(&mut control)? else {
        return Err(UsageError::Conflict(format!(
            "the cluster of {} holds no load keys ({META_KEY} not found on {}): fill it first with `probe populate --url {}`",
            url_target.conn,
            cluster.meta_conn.address(),
            url_target.conn
        ))
        .into());
    };
    let keys = match targets.keys {
        Some(keys) if keys > meta.keys => {
            return Err(UsageError::invalid(
                "--keys",
                keys,
                format!(
                    "the cluster holds only {} load keys: lower --keys or run probe populate --keys {keys}",
                    meta.keys
                ),
            )
            .into());
        }
        Some(keys) => keys,
        None => meta.keys,
    };
    let (by_shard, _) = cluster.slots.partition(&KeyNaming::load(), keys);
    if let Some(empty) = by_shard.iter().position(Vec::is_empty) {
        return Err(UsageError::invalid(
            "--keys",
            keys,
            format!("too few: no load key falls in the slots of shard {empty}"),
        )
        .into());
    }
    let by_shard: Vec<std::sync::Arc<Vec<u32>>> =
        by_shard.into_iter().map(std::sync::Arc::new).collect();
    let nodes = load_nodes(
        &cluster.topology,
        targets.read_from,
        options.set_weight,
        options.get_weight,
    )?;
    let counts = clients_per_node(
        &nodes,
        options.clients,
        options.set_weight,
        options.get_weight,
    )?;
    let mut opened = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let mut conn = url_target.conn.for_node(&node.address)?;
        conn.readonly = node.role == crate::measure::topology::Role::Replica;
        opened.push(
            Target::open(&TargetSpec::External(conn))
                .with_context(|| format!("opening the cluster node {}", node.address))?,
        );
    }
    let options = LoadOptions {
        writer_hash_tag: hash_tag_for(&cluster.topology.shards[0].slots),
        ..options.clone()
    };
    preflight_writer(&options, &opened, out)?;
    let set_size = targets.value_size.unwrap_or(meta.value_size);
    let load_servers: Vec<LoadServer<'_>> = nodes
        .iter()
        .zip(&opened)
        .zip(&counts)
        .map(|((node, target), &clients)| LoadServer {
            target,
            keys,
            set_size,
            population: Some(meta.clone()),
            clients: Some(clients),
            key_indices: Some(std::sync::Arc::clone(&by_shard[node.shard])),
            ops: node.ops.unwrap_or(OpMix::Ratio),
            role: Some(node.describe()),
        })
        .collect();
    let spread: Vec<String> = nodes
        .iter()
        .zip(&counts)
        .filter(|(_, c)| **c > 0)
        .map(|(node, c)| format!("{c} on {} ({})", node.announced, node.describe()))
        .collect();
    out.note(&format!(
        "load: {} clients over the cluster ({}), SET:GET {}:{}, GETs from the {}, keys 0..{} each sent to its shard{}",
        options.clients,
        spread.join(", "),
        options.set_weight,
        options.get_weight,
        match targets.read_from {
            ReadFrom::Masters => "masters",
            ReadFrom::Replicas => "replicas",
        },
        keys - 1,
        if options.writer.is_some() {
            format!("; writer on shard 0's master {}", opened[0].conn)
        } else {
            String::new()
        }
    ));
    drive(&options, &load_servers, interrupt, out, format)
}

fn run_opened(
    options: &LoadOptions,
    targets: &LoadTargets,
    opened: &[Target],
    interrupt: &AtomicBool,
    out: &mut Output,
    format: crate::output::format::Format,
) -> Result<i32> {
    let mut servers = Vec::new();
    for target in opened {
        let mut control = target.conn.redis_connection()?;
        if target.embedded.is_some() {
            populate_embedded(target, targets, &mut control, interrupt, out)?;
        }
        let Some(meta) = read_meta(&mut control)? else {
            return Err(UsageError::Conflict(format!(
                "{} holds no load keys ({LOAD_PREFIX}*): fill it first with `probe populate --url {}`",
                target.conn, target.conn
            ))
            .into());
        };
        let keys = match targets.keys {
            Some(keys) if keys > meta.keys && target.embedded.is_none() => {
                return Err(UsageError::invalid(
                    "--keys",
                    keys,
                    format!(
                        "{} holds only {} load keys: lower --keys or run probe populate --keys {keys}",
                        target.conn, meta.keys
                    ),
                )
                .into());
            }
            Some(keys) => keys.min(meta.keys),
            None => meta.keys,
        };
        servers.push((
            target,
            keys,
            targets.value_size.unwrap_or(meta.value_size),
            meta,
        ));
    }
    preflight_writer(options, opened, out)?;
    describe_plan(options, &servers, out);
    let load_servers: Vec<LoadServer<'_>> = servers
        .iter()
        .map(|(target, keys, set_size, meta)| LoadServer {
            target,
            keys: *keys,
            set_size: *set_size,
            population: Some(meta.clone()),
            clients: None,
            key_indices: None,
            ops: OpMix::Ratio,
            role: None,
        })
        .collect();
    drive(options, &load_servers, interrupt, out, format)
}

/// Runs the load on `load_servers` with progress, the write lines, the blocks and the exit
/// status.
fn drive(
    options: &LoadOptions,
    load_servers: &[LoadServer<'_>],
    interrupt: &AtomicBool,
    out: &mut Output,
    format: crate::output::format::Format,
) -> Result<i32> {
    let steps = options
        .writer
        .as_ref()
        .map_or(0, |w| w.steps().len() as u64);
    let secs = options.duration.map_or(0, |d| d.as_secs());
    if steps > 0 && options.duration.is_none() {
        out.start_progress(steps, "writes");
    } else if secs >= 3 {
        out.start_progress(secs, "s");
    }
    let mut writes_seen = 0u64;
    let threshold_us = options.stall_threshold_us;
    let report = run_load(options, load_servers, interrupt, &mut |notice| {
        match notice {
        LoadNotice::Started { run_id, threads } => out.note(&format!(
            "run {run_id}: {threads} generator thread(s); the writer's keys (if any) under {}:{run_id}:",
            crate::run::KEY_NAMESPACE
        )),
        LoadNotice::Tick {
            elapsed,
            last_second_requests,
        } => {
            let position = if steps > 0 && options.duration.is_none() {
                writes_seen
            } else {
                elapsed.as_secs()
            };
            out.progress(position, format!("{last_second_requests} req/s"));
        }
        LoadNotice::Write { finding, .. } => {
            writes_seen += 1;
            if format.is_text() {
                out.line(&write_line(finding, threshold_us));
            }
        }
        LoadNotice::Problem(text) => out.warn(text),
    }
    });
    out.finish_progress();
    let report = report?;
    if out.stdout_closed() {
        return Ok(EXIT_INTERRUPTED);
    }
    if !super::load_format::print(format, &report, out)? {
        for line in block_lines(&report.blocks) {
            out.line(&line);
        }
        for line in generator_lines(&report) {
            out.line(&line);
        }
    }
    for warning in &report.warnings {
        out.warn(warning);
    }
    if let Some(dir) = &options.out {
        out.note(&format!("results in {}", dir.display()));
    }
    let code = super::output::run_exit_status(
        out,
        report.status,
        report.status_reason.as_deref(),
        &report.writes,
    );
    if code == EXIT_OK && report.generator.disconnected_at_end > 0 {
        out.error("connections to a server were lost and could not be reopened");
        return Ok(EXIT_FAILURE);
    }
    Ok(code)
}

/// Fills the started server: `--keys` (default as populate's, at most 100000) values of
/// `--value-size` (default 1024..4096), refusing a population that will not fit.
fn populate_embedded(
    target: &Target,
    targets: &LoadTargets,
    control: &mut redis::Connection,
    interrupt: &AtomicBool,
    out: &mut Output,
) -> Result<()> {
    let value_size = targets.value_size.unwrap_or(ValueSize::SEED);
    let naming = KeyNaming::load();
    let room = MemoryRoom::read(control, &target.server)?;
    let estimate = estimated_bytes_per_key(targets.keys.unwrap_or(100_000), &naming, value_size);
    let keys = match targets.keys {
        Some(keys) => keys,
        None => {
            let (keys, why) = default_keys(&room, estimate);
            let keys = keys.min(EMBEDDED_DEFAULT_KEYS_CAP);
            out.note(&format!(
                "populating the started server with {keys} keys (default: {why}, at most {EMBEDDED_DEFAULT_KEYS_CAP} for a server the tool starts; use --keys for more)"
            ));
            keys
        }
    };
    check_fit(keys, 0, estimate, value_size, &room)?;
    let plan = PopulatePlan {
        keys,
        value_size,
        overwrite: false,
        seed: 0x5eed,
        naming,
        write_meta: true,
        indices: None,
    };
    out.start_progress(keys, "keys populated");
    let outcome = populate(&target.conn, &plan, interrupt, &mut |done| {
        out.progress(done, String::new());
    });
    out.finish_progress();
    let outcome = outcome?;
    if outcome.interrupted {
        return Err(crate::error::Interrupted {
            signal: "signal".into(),
        }
        .into());
    }
    if outcome.errors > 0 {
        anyhow::bail!(
            "populating the started server failed: {}",
            outcome.first_error.as_deref().unwrap_or("unknown error")
        );
    }
    out.note(&format!(
        "populated {} keys of {value_size} bytes in {:.1} s",
        outcome.written, outcome.elapsed_s
    ));
    Ok(())
}

/// Refuses a write size the server would reject; warns before deleting on someone's server.
fn preflight_writer(options: &LoadOptions, opened: &[Target], out: &Output) -> Result<()> {
    let Some(writer) = &options.writer else {
        return Ok(());
    };
    let target = &opened[0];
    if let Some(limit) = target.server.proto_max_bulk_len_bytes
        && let Some(&too_big) = writer.sizes.iter().find(|&&s| s > limit)
    {
        return Err(UsageError::invalid(
            "--writer-sizes",
            format_size(too_big),
            format!(
                "larger than the server's proto-max-bulk-len ({})",
                format_size(limit)
            ),
        )
        .into());
    }
    if !target.server.embedded {
        out.warn(&format!(
            "deleting a large key stalls the server (~60-80 us per MiB on Redis 7.0): this run writes and deletes values up to {} on {}, a server others may be using",
            format_size(writer.max_size()),
            target.conn
        ));
    }
    Ok(())
}

/// The plan of a load run, as the main job's `--dry-run` gives its own: nothing is started,
/// connected to or sent.
fn dry_run_plan(options: &LoadOptions, targets: &LoadTargets) -> Result<Vec<String>> {
    let mut lines = vec!["dry run: nothing is started, connected to or sent".to_string()];
    for spec in &targets.specs {
        lines.push(super::probe_cmd::dry_run_target(spec)?);
    }
    let embedded = targets
        .specs
        .iter()
        .any(|s| matches!(s, TargetSpec::Embedded { .. }));
    lines.push(format!(
        "before the load, on each server: INFO server, INFO replication, CONFIG GET maxmemory / proto-max-bulk-len / save / appendonly, HGETALL {META_KEY}{}",
        if embedded {
            format!(
                "; the started server is first populated with {} keys {LOAD_PREFIX}0.. of {} bytes (INFO memory to check they fit, then SETs in pipelines)",
                targets.keys.map_or_else(
                    || format!("as populate's default (at most {EMBEDDED_DEFAULT_KEYS_CAP})"),
                    |k| k.to_string()
                ),
                targets.value_size.unwrap_or(ValueSize::SEED)
            )
        } else {
            String::new()
        }
    ));
    let mode = match options.rate {
        Some(rate) => format!("open loop at {rate} requests/s in total"),
        None => "closed loop".to_string(),
    };
    let threads = options.threads.map_or_else(
        || "generator threads by the cores".to_string(),
        |t| format!("{t} generator thread(s)"),
    );
    let length = match options.duration {
        Some(d) => format!("for {d:?}"),
        None => "until the writer is done".to_string(),
    };
    let keys = targets.keys.map_or_else(
        || "the whole population".to_string(),
        |k| format!("keys 0..{}", k - 1),
    );
    let set_size = targets.value_size.map_or_else(
        || "the population's sizes".to_string(),
        |v| format!("{v} bytes"),
    );
    lines.push(format!(
        "load: {} clients over {} server(s), {threads}, {mode}, pipeline {}, {length}; requests SET:GET {}:{}: GET {LOAD_PREFIX}<i>{} over {keys}, uniformly",
        options.clients,
        targets.specs.len(),
        options.pipeline,
        options.set_weight,
        options.get_weight,
        if options.set_weight > 0 {
            format!(", SET {LOAD_PREFIX}<i> <random value of {set_size}>")
        } else {
            String::new()
        }
    ));
    if let Some(plan) = &options.writer {
        let mut plan = plan.clone();
        plan.key_prefix = format!("{}:<run-id>:", crate::run::KEY_NAMESPACE);
        let steps = plan.steps();
        lines.push(format!(
            "writer on the first server: {} events, each with {:?} of load before and after:",
            steps.len(),
            plan.gap
        ));
        for (index, step) in steps.iter().enumerate() {
            let command = match step.op {
                crate::record::WriteOp::Delete => format!("DEL {}", step.key),
                _ => format!(
                    "SET {} <{} random bytes>",
                    step.key,
                    format_size(step.size_bytes)
                ),
            };
            lines.push(format!(
                "  {:>3}  {:<9}  {command}",
                index + 1,
                step.op.name()
            ));
        }
        lines.push(format!(
            "after the load: DEL of any key left under {}",
            plan.key_prefix
        ));
    }
    if let Some(dir) = &options.out {
        lines.push(format!(
            "exports: load_timeline.csv, load_latency.hgrm, load_writes.csv and run.json in {}",
            dir.display()
        ));
    }
    Ok(lines)
}

fn describe_plan(
    options: &LoadOptions,
    servers: &[(&Target, u64, ValueSize, PopulationMeta)],
    out: &Output,
) {
    let mode = match options.rate {
        Some(rate) => format!("open loop at {rate} req/s in total"),
        None => "closed loop".to_string(),
    };
    let length = match (options.duration, &options.writer) {
        (Some(d), _) => format!("{d:?}"),
        (None, _) => "until the writer is done".to_string(),
    };
    let keys: Vec<String> = servers
        .iter()
        .map(|(t, keys, _, _)| format!("{} keys on {}", keys, t.conn))
        .collect();
    out.note(&format!(
        "load: {} clients over {} server(s), {mode}, pipeline {}, SET:GET {}:{}, {length}; {}",
        options.clients,
        servers.len(),
        options.pipeline,
        options.set_weight,
        options.get_weight,
        keys.join(", ")
    ));
    if let Some(w) = &options.writer {
        let sizes: Vec<String> = w.sizes.iter().map(|&s| format_size(s)).collect();
        out.note(&format!(
            "writer on {}: {} x {}, gap {:?}{}{}",
            servers[0].0.conn,
            sizes.join(","),
            w.repeat,
            w.gap,
            if w.overwrite { ", overwrite" } else { "" },
            if w.keep { ", keep" } else { "" }
        ));
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: LoadArgs,
    }

    fn options(argv: &[&str]) -> Result<(LoadOptions, LoadTargets), UsageError> {
        let mut full = vec!["load"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full)
            .expect("clap parse")
            .args
            .to_options(None)
    }

    #[test]
    fn defaults_are_the_seeds() {
        let (o, t) = options(&["--url", "redis://127.0.0.1:6379"]).unwrap();
        assert_eq!(o.clients, 50);
        assert_eq!(o.duration, Some(Duration::from_secs(30)));
        assert_eq!((o.get_weight, o.set_weight), (1, 0));
        assert_eq!(o.pipeline, 1);
        assert!(o.rate.is_none() && o.writer.is_none());
        assert_eq!(t.specs.len(), 1);
        let (o, _) = options(&["--writer-sizes", "64M"]).unwrap();
        assert_eq!(
            o.duration, None,
            "with a writer the load lasts until it is done"
        );
        assert_eq!(o.writer.unwrap().gap, Duration::from_secs(2));
    }

    #[test]
    fn several_urls_and_their_mistakes() {
        let (_, t) = options(&[
            "--url",
            "redis://127.0.0.1:1",
            "--url",
            "redis://127.0.0.1:2",
        ])
        .unwrap();
        assert_eq!(t.specs.len(), 2);
        let err = options(&[
            "--url",
            "redis://:pw@127.0.0.1:1",
            "--url",
            "redis://:pw@127.0.0.1:1",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--url") && !err.contains("pw@"), "{err}");
        let err = options(&[
            "--url",
            "redis://127.0.0.1:1",
            "--url",
            "redis://127.0.0.1:2",
            "--clients",
            "1",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--clients"), "{err}");
        let err = options(&["--url", "rediss://127.0.0.1:1"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--url") && err.contains("TLS"), "{err}");
    }

    #[test]
    fn bad_values_name_their_flag() {
        for (argv, flag) in [
            (vec!["--clients", "0"], "--clients"),
            (vec!["--clients", "many"], "--clients"),
            (vec!["--clients", "100000"], "--clients"),
            (vec!["--threads", "0"], "--threads"),
            (vec!["--pipeline", "0"], "--pipeline"),
            (vec!["--ratio", "1"], "--ratio"),
            (vec!["--ratio", "0:0"], "--ratio"),
            (vec!["--ratio", "a:b"], "--ratio"),
            (vec!["--rate", "0"], "--rate"),
            (vec!["--rate", "fast"], "--rate"),
            (vec!["--duration", "0s"], "--duration"),
            (vec!["--duration", "30"], "--duration"),
            (vec!["--keys", "-5"], "--keys"),
            (vec!["--value-size", "4096..1024"], "--value-size"),
            (vec!["--writer-sizes", "64X"], "--writer-sizes"),
            (vec!["--writer-sizes", "1M", "--gap", "100ms"], "--gap"),
            (vec!["--stall-threshold", "1us"], "--stall-threshold"),
            (vec!["--timeout", "0s"], "--timeout"),
        ] {
            let err = options(&argv).unwrap_err().to_string();
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
        let err = options(&["--keep"]).unwrap_err().to_string();
        assert!(err.contains("--writer-sizes"), "{err}");
    }

    #[test]
    fn counts_and_ratios() {
        assert_eq!(
            parse_count("--keys", "10M", 1, u64::MAX).unwrap(),
            10_000_000
        );
        assert_eq!(parse_count("--keys", "250k", 1, u64::MAX).unwrap(), 250_000);
        assert_eq!(parse_count("--keys", "1_000", 1, u64::MAX).unwrap(), 1000);
        assert!(parse_count("--keys", "1.5M", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "99999999999999999999", 1, u64::MAX).is_err());
        // SET:GET, as memtier_benchmark: 1:10 is one SET per ten GETs.
        assert_eq!(parse_ratio("1:10").unwrap(), (1, 10));
        assert_eq!(parse_ratio("0:1").unwrap(), (0, 1));
        let (o, _) = options(&["--ratio", "1:4"]).unwrap();
        assert_eq!((o.set_weight, o.get_weight), (1, 4));
    }
}
