//! Speed and memory of the core prober, against the tools a user would otherwise reach for,
//! measured in the same run on the same server:
//!
//! - the `probe` process's peak RSS divided by the largest value (goal <= 1.1);
//! - probe send jitter p99 (actual - intended send) over probes due while a write ran
//!   (goal <= 100 us);
//! - the tool's SET elapsed vs `redis-cli -x SET` of the same bytes (goal: ratio <= 1.05).
//!
//! Run: `cargo bench --bench core` (sizes up to 512M; `HOLPROBE_BENCH_SIZES=1M,64M` to choose,
//! `HOLPROBE_BENCH_REPEAT=3` for repeats). Needs redis-server and redis-cli on PATH. Under
//! `cargo test` it only prints how to run it.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use holprobe::analyze::correlate::{percentile, send_lags};
use holprobe::measure::target::{ConnInfo, EmbeddedServer};
use holprobe::measure::writer::random_value;
use holprobe::record::{ProbeRecord, WriteOp, WriteRecord};
use holprobe::units::{format_size, parse_size_list};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("core benchmark: run it with `cargo bench --bench core`");
        return;
    }
    if let Err(err) = bench() {
        eprintln!("benchmark failed: {err:#}");
        std::process::exit(1);
    }
}

fn bench() -> anyhow::Result<()> {
    let sizes_text =
        std::env::var("HOLPROBE_BENCH_SIZES").unwrap_or_else(|_| "1M,4M,16M,64M,256M,512M".into());
    let sizes = parse_size_list("HOLPROBE_BENCH_SIZES", &sizes_text)?;
    let repeat: u32 = std::env::var("HOLPROBE_BENCH_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let largest = *sizes.iter().max().unwrap_or(&0);
    let server = EmbeddedServer::start(None, &[])?;
    let url = format!("redis://127.0.0.1:{}", server.port());
    let probe = env!("CARGO_BIN_EXE_probe");
    let out = tempfile::tempdir()?;
    println!(
        "holprobe core benchmark: sizes {sizes_text}, {repeat} repeats, server {} {}",
        server.binary().path.display(),
        server.binary().version
    );

    // 1. The tool's own run: peak RSS from wait4, exports for jitter and SET times; then the
    //    same plan with --realtime for the jitter it buys.
    let mut writes = Vec::new();
    for (label, extra) in [("default", None), ("--realtime", Some("--realtime"))] {
        let dir = out
            .path()
            .join(format!("run-{}", label.trim_start_matches('-')));
        let started = Instant::now();
        let mut cmd = Command::new(probe);
        cmd.args([
            "--url",
            &url,
            "--writer-sizes",
            &sizes_text,
            "--gap",
            "300ms",
        ])
        .args(["--repeat", &repeat.to_string(), "--out"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(flag) = extra {
            cmd.arg(flag);
        }
        let (status, maxrss_kib) = wait_with_rusage(cmd.spawn()?.id())?;
        anyhow::ensure!(status == 0, "probe exited with status {status}");
        let peak_rss = maxrss_kib * 1024;
        println!(
            "[{label}] probe run took {:.1}s; peak RSS {:.1} MiB, largest value {} -> ratio {:.3} (goal <= 1.1)",
            started.elapsed().as_secs_f64(),
            peak_rss as f64 / (1 << 20) as f64,
            format_size(largest),
            peak_rss as f64 / largest as f64
        );
        let probes: Vec<ProbeRecord> = read_rows(&dir.join("probes.csv"))?;
        let run_writes: Vec<WriteRecord> = read_rows(&dir.join("writes.csv"))?;
        let in_writes: Vec<ProbeRecord> = probes
            .iter()
            .filter(|p| {
                run_writes
                    .iter()
                    .any(|w| p.intended_us >= w.start_us && p.intended_us <= w.reply_us)
            })
            .cloned()
            .collect();
        let mut all_lags = send_lags(&probes);
        let mut write_lags = send_lags(&in_writes);
        all_lags.sort_unstable();
        write_lags.sort_unstable();
        println!(
            "[{label}] probe send jitter (every probe): whole run p50 {}us p99 {}us max {}us; while writes ran ({} probes) p50 {}us p99 {}us max {}us (goal p99 <= 100us)",
            percentile(&all_lags, 50.0),
            percentile(&all_lags, 99.0),
            all_lags.last().copied().unwrap_or(0),
            write_lags.len(),
            percentile(&write_lags, 50.0),
            percentile(&write_lags, 99.0),
            write_lags.last().copied().unwrap_or(0),
        );
        if writes.is_empty() {
            writes = run_writes;
        }
    }

    // 2. redis-cli -x SET of the same bytes, same server, same sizes.
    let value_file = out.path().join("value.bin");
    fs::write(&value_file, random_value(largest, 0x5eed))?;
    let mut control = ConnInfo::loopback(server.port()).redis_connection()?;
    println!(
        "\n{:>6}  {:>12}  {:>14}  {:>7}",
        "size", "probe set_ms", "redis-cli ms", "ratio"
    );
    let mut ratios = Vec::new();
    for &size in &sizes {
        let sized = out.path().join("sized.bin");
        {
            let bytes = fs::read(&value_file)?;
            fs::write(&sized, &bytes[..size as usize])?;
        }
        let mut cli_ms = Vec::new();
        for rep in 0..repeat {
            let key = format!("holprobe:bench:cli:{rep}");
            let input = fs::File::open(&sized)?;
            let t = Instant::now();
            let status = Command::new("redis-cli")
                .args(["-p", &server.port().to_string(), "-x", "SET", &key])
                .stdin(input)
                .stdout(Stdio::null())
                .status()?;
            cli_ms.push(t.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(status.success(), "redis-cli failed");
            redis::cmd("DEL").arg(&key).query::<i64>(&mut control)?;
        }
        let mut tool_ms: Vec<f64> = writes
            .iter()
            .filter(|w| w.op == WriteOp::Set && w.size_bytes == size)
            .map(|w| w.set_ms)
            .collect();
        let tool = median(&mut tool_ms);
        let cli = median(&mut cli_ms);
        ratios.push(tool / cli);
        println!(
            "{:>6}  {tool:>12.2}  {cli:>14.2}  {:>7.3}",
            format_size(size),
            tool / cli
        );
    }
    println!(
        "median ratio probe/redis-cli: {:.3} (goal <= 1.05); redis-cli's time includes its process start and reading the value from stdin",
        median(&mut ratios)
    );
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn read_rows<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let mut reader = csv::Reader::from_path(path)?;
    Ok(reader.deserialize().collect::<Result<_, _>>()?)
}

/// Waits for `pid` and returns (exit status, peak RSS in KiB) from wait4(2).
fn wait_with_rusage(pid: u32) -> anyhow::Result<(i32, u64)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    anyhow::ensure!(rc == pid as libc::pid_t, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok((code, usage.ru_maxrss as u64))
}
