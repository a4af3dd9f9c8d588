//! `probe load`'s flags: the target, workload, output and topology sections and its own (the
//! clients, their rate and mix, the keys), checked into its plan ([`LoadPlan`]).

use std::time::Duration;

use clap::Args;

use crate::cli::sections::output::{LoadOutputArgs, OutputPlan};
use crate::cli::sections::parse_count;
use crate::cli::sections::probing::RequestStallArgs;
use crate::cli::sections::target::ServerArgs;
use crate::cli::sections::topology::{DiscoveryPlan, LoadTopologyArgs};
use crate::cli::sections::workload::{LOAD_GAP, LoadWorkloadArgs};
use crate::commands::deployment::refuse_tls;
use crate::error::UsageError;
use crate::load::cluster::ReadFrom;
use crate::load::keyspace::ValueSize;
use crate::load::runner::LoadOptions;
use crate::measure::target::TargetSpec;
use crate::units::parse_duration;

/// Most connections one run opens.
pub const MAX_CLIENTS: u64 = 5_000;

/// Concurrent clients GETting (and SETting) random populated keys, closed or open loop; prints
/// requests, requests per second, MiB/s and round-trip percentiles per server and in total. With --writer-sizes the prober's writer stores
/// large values meanwhile, and each write is reported with what the load clients saw.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("host", |a| a.help("The server's host, as redis-cli's -h (instead of --url; one server) [default with --port: 127.0.0.1]")),
    mut_arg("server_bin", |a| a.help("The server binary to start when no --url is given [default: redis-server from PATH]")),
    mut_arg("server_arg", |a| a.help("An extra setting for the started server, \"NAME VALUE\" (repeatable)")),
    mut_arg("timeout", |a| a.help("A request unanswered this long is a timeout (its connection is reopened)")),
    // The load clients speak plain TCP.
    mut_arg("tls_ca", |a| a.hide(true)),
    mut_arg("tls_cert", |a| a.hide(true)),
    mut_arg("tls_key", |a| a.hide(true)),
    mut_arg("insecure", |a| a.hide(true))
)]
pub struct LoadArgs {
    /// A server to load, populated by `probe populate` (repeatable: the clients are spread over
    /// the servers). Without --url the tool starts its own redis-server and populates it.
    #[arg(long, value_name = "URL")]
    pub url: Vec<String>,

    #[command(flatten)]
    pub server: ServerArgs,

    /// Concurrent clients (connections) in total, spread evenly over the servers.
    #[arg(
        long,
        value_name = "C",
        default_value = "50",
        allow_negative_numbers = true
    )]
    pub clients: String,

    /// Generator threads, each driving many connections [default: one per core not used by a
    /// local server, at least one per server, 1 to 8].
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    pub threads: Option<String>,

    /// Length of the load, 1s to 24h [default: 30s; with --writer-sizes, until the writer is
    /// done].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    pub duration: Option<String>,

    /// Open loop: this many requests per second in total, on a fixed schedule; latency counts
    /// from each request's intended send time. Without it: closed loop.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    pub rate: Option<String>,

    /// Requests outstanding per connection at most (1: one request, one reply).
    #[arg(
        long,
        value_name = "P",
        default_value = "1",
        allow_negative_numbers = true
    )]
    pub pipeline: String,

    /// SET:GET weights, in memtier_benchmark's order: 1:10 is one SET per ten GETs (SETs
    /// overwrite random load keys with values of --value-size). Earlier builds read GET:SET;
    /// that order is no longer accepted.
    #[arg(long, value_name = "SET:GET", default_value = "0:1")]
    pub ratio: String,

    /// Keys to read: 0..N-1 of the population [default: all of it]. Without --url: the keys
    /// the started server is populated with [default: as populate's, at most 100000].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub keys: Option<String>,

    // --help: SET value sizes, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "SIZE|MIN..MAX",
        help = crate::size_help!(
            "Sizes of SET values, MIN..MAX or one size [default: the population's]. Without --url: the sizes the started server is populated with [default: 1024..4096]."
        )
    )]
    pub value_size: Option<String>,

    #[command(flatten)]
    pub workload: LoadWorkloadArgs,

    #[command(flatten)]
    pub stall: RequestStallArgs,

    #[command(flatten)]
    pub output: LoadOutputArgs,

    /// Print the plan (servers, clients, mix, the commands each server would get, the writer's
    /// steps); start, connect to and send nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub topology: LoadTopologyArgs,

    /// On a cluster: where the GETs go, masters (each key's master) or replicas (the replicas
    /// of the key's shard, READONLY first; the SETs still go to the masters, and the clients
    /// are split between the two by --ratio).
    #[arg(long, value_name = "masters|replicas", default_value = "masters")]
    pub read_from: String,
}

/// `probe load`'s plan: everything its flags say, checked, before anything connects; it does
/// not change afterwards. The run's options, and where the load goes: the servers to open, and
/// for the embedded one what to populate it with.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// The run's options (what the library's [`crate::load::runner::run_load`] takes).
    pub run: LoadOptions,
    /// One per `--url`, or the embedded server.
    pub specs: Vec<TargetSpec>,
    /// `--keys`.
    pub keys: Option<u64>,
    /// `--value-size`.
    pub value_size: Option<ValueSize>,
    /// `--read-from` (on a cluster).
    pub read_from: ReadFrom,
    /// `--topology` and `--node-address`.
    pub discovery: DiscoveryPlan,
    /// `--out`, `--force`, `--format`.
    pub output: OutputPlan,
}

impl LoadArgs {
    /// Checks every value; nothing is sent anywhere before this succeeds.
    pub fn to_plan(&self, env_password: Option<String>) -> Result<LoadPlan, UsageError> {
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
                // The report is per second: `1ns` ran, and said "Runtime: 0 s" and "Requests per
                // second: 0.00" (the hostile trial).
                if d < Duration::from_secs(1) || d > Duration::from_secs(24 * 3600) {
                    return Err(UsageError::invalid(
                        "--duration",
                        text,
                        "expected at least 1s (the load is reported per second) and at most 24h",
                    ));
                }
                Some(d)
            }
            None => None,
        };
        let stall_threshold = self.stall.stall.threshold()?;
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
        let workload = &self.workload.workload;
        let writer = workload.to_plan()?;
        match &writer {
            Some(_) => {
                if workload.gap()? < Duration::from_secs(1) {
                    return Err(UsageError::invalid(
                        "--gap",
                        &workload.gap,
                        "must be at least 1s under load (2s, the default, leaves a write-free second beside each write to compare its throughput with)",
                    ));
                }
            }
            None => {
                let [overwrite, keep] = workload.writer_only_flags();
                for (flag, set) in [
                    overwrite,
                    keep,
                    ("--repeat", workload.repeat != "1"),
                    ("--gap", workload.gap != LOAD_GAP),
                ] {
                    if set {
                        return Err(UsageError::Conflict(format!(
                            "{flag} applies to the writer: it needs --writer-sizes"
                        )));
                    }
                }
            }
        }
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
            let spec = self.server.to_spec(Some(url), env_password.clone())?;
            refuse_tls(&spec, "--url", url)?;
            specs.push(spec);
        }
        if specs.is_empty() {
            // --host/--port, or else the server the tool starts.
            let spec = self.server.to_spec(None, env_password.clone())?;
            refuse_tls(
                &spec,
                "--host",
                self.server.host.as_deref().unwrap_or_default(),
            )?;
            specs.push(spec);
        }
        if clients < specs.len() as u32 {
            return Err(UsageError::invalid(
                "--clients",
                clients,
                format!("at least one per server ({} servers)", specs.len()),
            ));
        }
        let timeout = parse_duration("--timeout", &self.server.timeout)?;
        let read_from: ReadFrom = self.read_from.parse()?;
        let discovery = self.topology.discovery.to_plan()?;
        Ok(LoadPlan {
            run: LoadOptions {
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
                seed: workload.seed,
                out: self.output.output.out.clone(),
            },
            specs,
            keys,
            value_size,
            read_from,
            discovery,
            output: self.output.output.to_plan(),
        })
    }
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
    crate::units::RateFlag {
        flag: "--rate",
        what: "requests",
        example: "50000",
        max_per_s: 10_000_000.0,
        above_max: "expected at most 10000000 requests per second",
    }
    .parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run's options and the whole plan.
    fn options(argv: &[&str]) -> Result<(LoadOptions, LoadPlan), UsageError> {
        let plan = crate::cli::parse_flags::<LoadArgs>(argv).to_plan(None)?;
        Ok((plan.run.clone(), plan))
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
            (vec!["--duration", "1ns"], "--duration"),
            (vec!["--duration", "999ms"], "--duration"),
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
        assert_eq!(
            parse_count("--keys", "1.5M", 1, u64::MAX).unwrap(),
            1_500_000
        );
        assert_eq!(parse_count("--keys", "2.25k", 1, u64::MAX).unwrap(), 2250);
        assert_eq!(parse_count("--keys", "1.50K", 1, u64::MAX).unwrap(), 1500);
        assert!(parse_count("--keys", "1.5", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "1.0005K", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "1.K", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", ".5K", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "1.2.3K", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "", 1, u64::MAX).is_err());
        assert!(parse_count("--keys", "99999999999999999999", 1, u64::MAX).is_err());
        // SET:GET, as memtier_benchmark: 1:10 is one SET per ten GETs.
        assert_eq!(parse_ratio("1:10").unwrap(), (1, 10));
        assert_eq!(parse_ratio("0:1").unwrap(), (0, 1));
        let (o, _) = options(&["--ratio", "1:4"]).unwrap();
        assert_eq!((o.set_weight, o.get_weight), (1, 4));
    }
}
