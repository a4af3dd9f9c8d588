//! Benchmark for the load generator: `probe load` against `redis-benchmark -t get` on the same
//! server(s), in the same run, on keys populated alike. Prints, per configuration, the median
//! requests per second of each (and their ratio, goal >= 1.0) and the median p50 / p99 side by
//! side.
//!
//! ```sh
//! cargo run --release --example load_vs_redis_benchmark -- [--duration 5s] [--runs 3] [--keys 100000]
//! ```
//!
//! Keys populated alike: each server the example starts gets two populations of the same size,
//! `--keys` values of exactly 2048 random bytes each: `holprobe:load:<n>` (what `probe load`
//! reads) and `key:<n, 12 digits>` (what `redis-benchmark -r <keys>` reads: `key:__rand_int__`),
//! both written by the library's own populate. Each tool GETs uniformly random keys of its own
//! population, so both read the same number of same-sized values from the same server.
//!
//! Configurations: 50 clients on one server; 25 clients on one server; 50 clients over two
//! servers (holprobe: one run with two `--url`, 25 clients each; redis-benchmark: two processes
//! at once, `-c 25` each, their rates added). The order of the two tools alternates between
//! runs, so drift on a busy machine does not favour one of them.

use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use holprobe::load::keyspace::{KeyNaming, ValueSize};
use holprobe::load::populate::{PopulatePlan, populate};
use holprobe::load::runner::{LoadOptions, LoadServer, run_load};
use holprobe::measure::target::{EmbeddedServer, Target, TargetSpec};

const VALUE_BYTES: u64 = 2048;

struct Settings {
    duration: Duration,
    runs: usize,
    keys: u64,
}

fn settings() -> Result<Settings> {
    let mut s = Settings {
        duration: Duration::from_secs(5),
        runs: 3,
        keys: 100_000,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).context("a flag needs a value")?;
        match args[i].as_str() {
            "--duration" => s.duration = humantime::parse_duration(value)?,
            "--runs" => s.runs = value.parse()?,
            "--keys" => s.keys = value.parse()?,
            other => bail!("unknown flag {other}: expected --duration, --runs, --keys"),
        }
        i += 2;
    }
    Ok(s)
}

/// One measurement: requests per second (as the tool reports it, and as the servers counted
/// GETs over the tool's wall time), p50 and p99 in µs.
#[derive(Debug, Clone, Copy)]
struct Figures {
    rps: f64,
    server_rps: f64,
    p50_us: f64,
    p99_us: f64,
}

/// GETs the servers have executed so far (INFO commandstats), summed.
fn server_gets(targets: &[Target]) -> Result<u64> {
    let mut total = 0;
    for target in targets {
        let mut conn = target.conn.redis_connection()?;
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn)?;
        let calls = info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        total += calls;
    }
    Ok(total)
}

/// Runs `measure` and adds the servers' own count of GETs per second of its wall time.
fn counted(targets: &[Target], measure: impl FnOnce() -> Result<Figures>) -> Result<Figures> {
    let before = server_gets(targets)?;
    let started = Instant::now();
    let mut figures = measure()?;
    let wall = started.elapsed().as_secs_f64();
    figures.server_rps = (server_gets(targets)? - before) as f64 / wall;
    Ok(figures)
}

fn main() -> Result<()> {
    let settings = settings()?;
    let which = Command::new("redis-benchmark").arg("--version").output();
    if which.is_err() {
        bail!("redis-benchmark is not installed (apt-get install redis-tools)");
    }
    let interrupt = AtomicBool::new(false);
    let servers = [start_server()?, start_server()?];
    let targets: Vec<Target> = servers
        .iter()
        .map(|s| {
            Target::open(&TargetSpec::External(s.conn_info())).context("opening the started server")
        })
        .collect::<Result<_>>()?;
    for (n, target) in targets.iter().enumerate() {
        for naming in [KeyNaming::load(), KeyNaming::redis_benchmark()] {
            let started = Instant::now();
            let outcome = populate(
                &target.conn,
                &PopulatePlan {
                    keys: settings.keys,
                    value_size: ValueSize {
                        min_bytes: VALUE_BYTES,
                        max_bytes: VALUE_BYTES,
                    },
                    overwrite: true,
                    seed: 7 + n as u64,
                    write_meta: naming == KeyNaming::load(),
                    naming: naming.clone(),
                    indices: None,
                },
                &interrupt,
                &mut |_| {},
            )?;
            anyhow::ensure!(
                outcome.errors == 0,
                "populate failed: {:?}",
                outcome.first_error
            );
            eprintln!(
                "server {}: {} keys {}* of {VALUE_BYTES} bytes in {:.1} s",
                n + 1,
                outcome.written,
                naming.prefix,
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "{} run(s) of {:?} per tool and configuration; {} keys per population; order alternates",
        settings.runs, settings.duration, settings.keys
    );

    let configs: [(&str, u32, usize); 3] = [
        ("50 clients, 1 server", 50, 1),
        ("25 clients, 1 server", 25, 1),
        ("50 clients, 2 servers", 50, 2),
    ];
    let mut table = Vec::new();
    for (name, clients, server_count) in configs {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        let mut ratios = Vec::new();
        let mut cpu = Vec::new();
        for run in 0..settings.runs {
            let targets = &targets[..server_count];
            let mut busiest = 0.0;
            let ours_now = |busiest: &mut f64| {
                counted(targets, || {
                    let (f, cpu) = holprobe_load(targets, clients, &settings, &interrupt)?;
                    *busiest = cpu;
                    Ok(f)
                })
            };
            let (a, b) = if run % 2 == 0 {
                let a = ours_now(&mut busiest)?;
                let b = counted(targets, || {
                    redis_benchmark(targets, clients, &settings, a.rps)
                })?;
                (a, b)
            } else {
                let hint = ours.last().map_or(0.0, |f: &Figures| f.rps);
                let b = counted(targets, || {
                    redis_benchmark(targets, clients, &settings, hint)
                })?;
                let a = ours_now(&mut busiest)?;
                (a, b)
            };
            eprintln!(
                "{name} run {}: holprobe {:.0} rps (servers counted {:.0}/s) p50 {:.0}us p99 {:.0}us (generator busiest {:.0}% CPU) | redis-benchmark {:.0} rps (servers counted {:.0}/s) p50 {:.0}us p99 {:.0}us | ratio {:.3}",
                run + 1,
                a.rps,
                a.server_rps,
                a.p50_us,
                a.p99_us,
                busiest,
                b.rps,
                b.server_rps,
                b.p50_us,
                b.p99_us,
                a.rps / b.rps
            );
            ratios.push(a.rps / b.rps);
            ours.push(a);
            theirs.push(b);
            cpu.push(busiest);
        }
        table.push((name, ours, theirs, ratios, cpu));
    }

    println!();
    println!(
        "{:<24} {:>12} {:>12} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>14}",
        "configuration (medians)",
        "holprobe rps",
        "r-b rps",
        "ratio",
        "srv-counted",
        "ours p50",
        "r-b p50",
        "ours p99",
        "r-b p99",
        "gen CPU%",
        "ratio range"
    );
    for (name, ours, theirs, ratios, cpu) in &table {
        let pick = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
        let counted_ratios: Vec<f64> = ours
            .iter()
            .zip(theirs.iter())
            .map(|(a, b)| a.server_rps / b.server_rps)
            .collect();
        println!(
            "{:<24} {:>12.0} {:>12.0} {:>10.3} {:>12.3} {:>6.0}us {:>6.0}us {:>6.0}us {:>6.0}us {:>8.0} {:>6.3}-{:.3}",
            name,
            pick(ours, |f| f.rps),
            pick(theirs, |f| f.rps),
            median(ratios.clone()),
            median(counted_ratios),
            pick(ours, |f| f.p50_us),
            pick(theirs, |f| f.p50_us),
            pick(ours, |f| f.p99_us),
            pick(theirs, |f| f.p99_us),
            median(cpu.clone()),
            ratios.iter().cloned().fold(f64::INFINITY, f64::min),
            ratios.iter().cloned().fold(0.0, f64::max),
        );
    }
    println!(
        "ratio = holprobe rps / redis-benchmark rps, as each reports it (goal >= 1.0); srv-counted = the same ratio from the servers' own GET counts (INFO commandstats) per second of each tool's wall time, start-up included; p50/p99 are round trips; gen CPU% = busiest holprobe generator thread"
    );
    drop(targets);
    Ok(())
}

fn start_server() -> Result<EmbeddedServer> {
    let bin = std::env::var_os("HOLPROBE_SERVER_BIN").map(std::path::PathBuf::from);
    EmbeddedServer::start(bin.as_deref(), &[])
}

fn holprobe_load(
    targets: &[Target],
    clients: u32,
    settings: &Settings,
    interrupt: &AtomicBool,
) -> Result<(Figures, f64)> {
    let servers: Vec<LoadServer<'_>> = targets
        .iter()
        .map(|target| LoadServer {
            target,
            keys: settings.keys,
            set_size: ValueSize {
                min_bytes: VALUE_BYTES,
                max_bytes: VALUE_BYTES,
            },
            population: None,
            clients: None,
            key_indices: None,
            ops: holprobe::load::engine::OpMix::Ratio,
            role: None,
        })
        .collect();
    let options = LoadOptions {
        clients,
        threads: None,
        duration: Some(settings.duration),
        rate: None,
        pipeline: 1,
        get_weight: 1,
        set_weight: 0,
        writer: None,
        stall_threshold_us: 1000,
        timeout_us: 30_000_000,
        seed: 1,
        out: None,
    };
    let report = run_load(&options, &servers, None, interrupt, &mut |_| {})?;
    let all = report.blocks.last().context("the load reported no block")?;
    anyhow::ensure!(all.errors == 0 && all.misses == 0, "load errors: {all:?}");
    Ok((
        Figures {
            rps: all.avg_rps,
            server_rps: 0.0,
            p50_us: all.p50_us as f64,
            p99_us: all.p99_us as f64,
        },
        report.generator.busiest_thread_cpu_pct.unwrap_or(0.0),
    ))
}

/// Runs redis-benchmark on each server at once (clients split evenly), for about the
/// configured duration: `-n` from the rate `hint` (or a first guess of 60k/s per server).
fn redis_benchmark(
    targets: &[Target],
    clients: u32,
    settings: &Settings,
    hint_rps: f64,
) -> Result<Figures> {
    let per_server_clients = clients / targets.len() as u32;
    let rate = if hint_rps > 0.0 {
        hint_rps / targets.len() as f64
    } else {
        60_000.0
    };
    let requests = (rate * settings.duration.as_secs_f64()).max(10_000.0) as u64;
    // Started together, so two servers are loaded at the same time.
    let spawned: Vec<std::process::Child> = targets
        .iter()
        .map(|target| {
            Command::new("redis-benchmark")
                .args(["-h", &target.conn.host])
                .args(["-p", &target.conn.port.to_string()])
                .args(["-t", "get", "-c", &per_server_clients.to_string()])
                .args(["-d", &VALUE_BYTES.to_string()])
                .args(["-r", &settings.keys.to_string()])
                .args(["-n", &requests.to_string(), "--csv"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .context("starting redis-benchmark")
        })
        .collect::<Result<_>>()?;
    let cpu_before = children_cpu_s();
    let started = Instant::now();
    let processes = spawned.len() as f64;
    let mut rps = 0.0;
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for child in spawned {
        let output = child
            .wait_with_output()
            .context("waiting for redis-benchmark")?;
        let text = String::from_utf8_lossy(&output.stdout);
        let row = text
            .lines()
            .find(|l| l.starts_with("\"GET\""))
            .with_context(|| format!("no GET row in redis-benchmark's output: {text}"))?;
        let cols: Vec<f64> = row
            .split(',')
            .skip(1)
            .map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN))
            .collect();
        // "rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        rps += cols[0];
        p50.push(cols[3] * 1000.0);
        p99.push(cols[5] * 1000.0);
    }
    let cpu_pct =
        100.0 * (children_cpu_s() - cpu_before) / started.elapsed().as_secs_f64() / processes;
    eprintln!("  redis-benchmark: {cpu_pct:.0}% CPU per process over its run");
    Ok(Figures {
        rps,
        server_rps: 0.0,
        p50_us: p50.iter().sum::<f64>() / p50.len() as f64,
        p99_us: p99.iter().sum::<f64>() / p99.len() as f64,
    })
}

/// CPU seconds used by this process's finished children (user + system).
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return f64::NAN;
    }
    let s = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    s(usage.ru_utime) + s(usage.ru_stime)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
