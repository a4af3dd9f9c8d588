//! A hostile peer, not a Redis: a TCP listener in the test that answers the tool's first
//! commands well enough to reach one stage of a run (the control connection's first contact,
//! the probes, the writer), then sends that stage something no Redis server sends: a bulk length
//! of 2^63-1, arrays nested 100,000 deep, 64 MiB without a line end, bytes that are not RESP, a
//! reply cut off by a closed socket, a reply that never ends.
//!
//! For each, `probe` must exit 1 with one `error:` line on stderr that says what went wrong (no
//! panic, no backtrace), within a bounded time (killed and failed after [`RUN_LIMIT`]), and with
//! bounded memory (its peak RSS, from `wait4`'s rusage, stays under the stage's bound).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A run that takes longer than this hung.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The connection that gets the hostile reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The tool's first contact with a server it did not start: its first `INFO server`.
    Control,
    /// Every `PING` of the probe threads.
    Probe,
    /// The writer's `SET` of a large value.
    Writer,
}

/// What the hostile peer sends in place of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostile {
    /// `$9223372036854775807\r\n`, then 64 MiB of its "value".
    HugeBulk,
    /// `*1\r\n` 100,000 times.
    DeepNesting,
    /// `+` and 64 MiB of `a` without CRLF, then silence.
    EndlessLine,
    /// Bytes that are not RESP.
    Garbage,
    /// Half a reply, then the socket closed.
    ClosedMidReply,
    /// Half a reply, then silence with the socket open.
    NeverEnds,
}

const ALL: [Hostile; 6] = [
    Hostile::HugeBulk,
    Hostile::DeepNesting,
    Hostile::EndlessLine,
    Hostile::Garbage,
    Hostile::ClosedMidReply,
    Hostile::NeverEnds,
];

const MIB: usize = 1024 * 1024;

/// Starts the fake on a free loopback port; it serves until the test process ends.
fn start_fake(stage: Stage, hostile: Hostile) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("its address").port();
    thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { return };
            thread::spawn(move || serve(sock, stage, hostile));
        }
    });
    port
}

/// One connection: commands in, scripted replies out, until the hostile one.
fn serve(sock: TcpStream, stage: Stage, hostile: Hostile) {
    let mut reader = BufReader::new(sock.try_clone().expect("clone the socket"));
    let mut out = sock;
    while let Some(args) = read_command(&mut reader) {
        let name = args
            .first()
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
            .unwrap_or_default();
        let sub = args
            .get(1)
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .unwrap_or_default();
        let is_stage = match stage {
            Stage::Control => name == "INFO" && sub == "server",
            Stage::Probe => name == "PING",
            Stage::Writer => name == "SET" && sub.contains(":w"),
        };
        if is_stage {
            send_hostile(&mut out, &mut reader, hostile);
            return;
        }
        if out.write_all(&normal_reply(&name, &sub, &args)).is_err() {
            return;
        }
    }
}

/// What a Redis 7.0 with no data and default settings would answer, as far as the tool asks.
fn normal_reply(name: &str, sub: &str, args: &[Vec<u8>]) -> Vec<u8> {
    match name {
        "CLIENT" | "SET" => b"+OK\r\n".to_vec(),
        "PING" => b"+PONG\r\n".to_vec(),
        "EXISTS" => b":0\r\n".to_vec(),
        "DEL" | "UNLINK" => b":1\r\n".to_vec(),
        "GET" => b"$-1\r\n".to_vec(),
        "INFO" => bulk(match sub {
            "server" => "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n",
            "replication" => "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n",
            "memory" => {
                "# Memory\r\nused_memory:1000000\r\nused_memory_rss:8000000\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n"
            }
            _ => "",
        }),
        "CONFIG" if sub == "get" => {
            let setting = args
                .get(2)
                .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                .unwrap_or_default();
            let value = match setting.as_str() {
                "maxmemory" => "0",
                "proto-max-bulk-len" => "536870912",
                "save" => "",
                "appendonly" => "no",
                "slowlog-log-slower-than" => "10000",
                "slowlog-max-len" => "128",
                "latency-monitor-threshold" => "0",
                _ => return b"*0\r\n".to_vec(),
            };
            let mut reply = b"*2\r\n".to_vec();
            reply.extend(bulk(&setting));
            reply.extend(bulk(value));
            reply
        }
        "CONFIG" => b"+OK\r\n".to_vec(),
        "SLOWLOG" | "LATENCY" if sub == "reset" => b":0\r\n".to_vec(),
        "SLOWLOG" | "LATENCY" => b"*0\r\n".to_vec(),
        _ => format!("-ERR unknown command '{name}'\r\n").into_bytes(),
    }
}

fn bulk(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

/// Reads one command (an array of bulk strings); `None` when the client hung up.
fn read_command(reader: &mut BufReader<TcpStream>) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        reader.read_exact(&mut arg).ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

fn send_hostile(out: &mut TcpStream, reader: &mut BufReader<TcpStream>, hostile: Hostile) {
    let _ = out.set_write_timeout(Some(RUN_LIMIT));
    let sent = match hostile {
        Hostile::HugeBulk => out
            .write_all(b"$9223372036854775807\r\n")
            .and_then(|()| stream(out, b'x', 64 * MIB)),
        Hostile::DeepNesting => out.write_all(&b"*1\r\n".repeat(100_000)),
        Hostile::EndlessLine => out
            .write_all(b"+")
            .and_then(|()| stream(out, b'a', 64 * MIB)),
        Hostile::Garbage => {
            out.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n")
        }
        Hostile::ClosedMidReply | Hostile::NeverEnds => out.write_all(b"$100\r\nhalf of it"),
    };
    if hostile == Hostile::ClosedMidReply || sent.is_err() {
        let _ = out.shutdown(std::net::Shutdown::Both);
        return;
    }
    // Silence, with the socket open, until the tool hangs up.
    let mut sink = [0u8; 64 * 1024];
    while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
}

/// Writes `len` bytes of `byte`, a MiB at a time (until the tool stops reading and hangs up).
fn stream(out: &mut TcpStream, byte: u8, len: usize) -> std::io::Result<()> {
    let chunk = vec![byte; MIB];
    for _ in 0..len / MIB {
        out.write_all(&chunk)?;
    }
    Ok(())
}

/// How a run of the tool ended.
#[derive(Debug)]
struct Outcome {
    /// The exit status, if it exited (not killed by a signal).
    code: Option<i32>,
    /// The signal that ended it, if one did.
    signal: Option<i32>,
    stderr: String,
    elapsed: Duration,
    /// Peak resident memory, bytes (`ru_maxrss`).
    max_rss_bytes: u64,
}

/// Runs `probe` with `args`, killing it after [`RUN_LIMIT`]; its own rusage from `wait4`.
// The child is reaped by wait4 (for its rusage), not by Child::wait.
#[allow(clippy::zombie_processes)]
fn run_probe(args: &[String]) -> Outcome {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_probe"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start probe");
    let mut pipe = child.stderr.take().expect("stderr");
    let reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child, with valid pointers.
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4 failed");
        if got == pid {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            // SAFETY: as above; kill(2) on our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut usage);
            }
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    Outcome {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        stderr: reader.join().unwrap_or_default(),
        elapsed,
        max_rss_bytes: usage.ru_maxrss as u64 * 1024,
    }
}

/// The command line that reaches `stage`.
fn args_for(stage: Stage, port: u16) -> Vec<String> {
    let mut args: Vec<String> = [
        "--url",
        &format!("redis://127.0.0.1:{port}"),
        "--timeout",
        "2s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rest: &[&str] = match stage {
        Stage::Control | Stage::Probe => &["--duration", "10s"],
        Stage::Writer => &["--writer-sizes", "1K", "--gap", "100ms"],
    };
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

/// What the error line must say for each case (any one of the fragments, in any case).
fn expected(hostile: Hostile) -> &'static [&'static str] {
    match hostile {
        Hostile::HugeBulk => &["bulk string of 9223372036854775807 bytes"],
        Hostile::DeepNesting => &["arrays nested more than"],
        Hostile::EndlessLine => &["without a line end (CRLF), starting '+aaaa"],
        Hostile::Garbage => &["not a RESP reply: '\\x16\\x03\\x01"],
        Hostile::ClosedMidReply => &["closed the connection", "connection reset", "broken pipe"],
        Hostile::NeverEnds => &["did not answer", "within --timeout"],
    }
}

/// What the error line says of the step that failed, besides.
fn expected_step(stage: Stage) -> &'static str {
    match stage {
        Stage::Control => "INFO server on redis://127.0.0.1:",
        Stage::Probe => "probe thread",
        Stage::Writer => "write",
    }
}

/// Peak memory a run may reach: the tool itself stays near 22 MiB here, and its readers are
/// bounded far below the 64 MiB the fake sends.
const MEMORY_BOUND: u64 = 48 * MIB as u64;

fn check_stage(stage: Stage) {
    let mut failures = Vec::new();
    for hostile in ALL {
        let port = start_fake(stage, hostile);
        let outcome = run_probe(&args_for(stage, port));
        let case = format!("{stage:?} / {hostile:?}");
        eprintln!(
            "{case}: exit {:?} in {:.1?}, peak RSS {:.1} MiB, stderr: {}",
            outcome.code,
            outcome.elapsed,
            outcome.max_rss_bytes as f64 / MIB as f64,
            outcome.stderr.trim()
        );
        let errors: Vec<&str> = outcome
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        let mut wrong = Vec::new();
        if outcome.code != Some(1) {
            wrong.push(format!(
                "exit {:?} (signal {:?}), not 1",
                outcome.code, outcome.signal
            ));
        }
        if outcome.elapsed >= RUN_LIMIT {
            wrong.push(format!("still running after {RUN_LIMIT:?}: killed"));
        }
        for bad in [
            "panicked",
            "RUST_BACKTRACE",
            "stack backtrace",
            "overflowed its stack",
        ] {
            if outcome.stderr.contains(bad) {
                wrong.push(format!("stderr mentions '{bad}'"));
            }
        }
        match errors.as_slice() {
            [line] => {
                let lower = line.to_lowercase();
                if !expected(hostile)
                    .iter()
                    .any(|f| lower.contains(&f.to_lowercase()))
                {
                    wrong.push(format!(
                        "the error line says none of {:?}",
                        expected(hostile)
                    ));
                }
                if !line.contains(expected_step(stage)) {
                    wrong.push(format!(
                        "the error line does not say '{}'",
                        expected_step(stage)
                    ));
                }
            }
            _ => wrong.push(format!("{} error lines, not one", errors.len())),
        }
        if outcome.max_rss_bytes > MEMORY_BOUND {
            wrong.push(format!(
                "peak RSS {} MiB, over {} MiB",
                outcome.max_rss_bytes / MIB as u64,
                MEMORY_BOUND / MIB as u64
            ));
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{case}: {}\n  stderr: {}",
                wrong.join("; "),
                outcome.stderr.trim()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn hostile_replies_on_the_control_connection() {
    check_stage(Stage::Control);
}

#[test]
fn hostile_replies_on_the_probe_connections() {
    check_stage(Stage::Probe);
}

#[test]
fn hostile_replies_on_the_writer_connection() {
    check_stage(Stage::Writer);
}

/// The fake itself answers like a server: the same command line against it with no hostile
/// stage runs to its end (so the failures above come from the hostile replies, not from a fake
/// that cannot reach the stage).
#[test]
fn the_fake_is_good_enough_to_reach_every_stage() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { return };
            thread::spawn(move || {
                let mut reader = BufReader::new(sock.try_clone().expect("clone"));
                let mut out = sock;
                while let Some(args) = read_command(&mut reader) {
                    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
                    let sub = args
                        .get(1)
                        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                        .unwrap_or_default();
                    if out.write_all(&normal_reply(&name, &sub, &args)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let outcome = run_probe(&args_for(Stage::Writer, port));
    assert_eq!(outcome.code, Some(0), "{}", outcome.stderr);
    assert!(!outcome.stderr.contains("error:"), "{}", outcome.stderr);
}
