//! The cargo examples, run as a user would, against real embedded redis-servers: the 2017
//! benchmark on small sizes, a custom command (GET, UNLINK), and observe mode catching an
//! injected DEBUG SLEEP. `cargo test` builds the examples before it runs the tests.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The example binaries, built once per test run. `cargo test --all-targets` builds examples
/// only as test harnesses, so the tests build the real binaries themselves, with the cargo
/// that runs them, into the same target directory and profile as the `probe` binary (a no-op
/// when they are up to date, and never a stale binary).
fn examples_dir() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let probe = PathBuf::from(env!("CARGO_BIN_EXE_probe"));
        let profile_dir = probe.parent().expect("the probe binary's directory");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--examples", "--locked", "--quiet"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        if let Some(target_dir) = profile_dir.parent() {
            build.env("CARGO_TARGET_DIR", target_dir);
        }
        let status = build.status().expect("run cargo build --examples");
        assert!(status.success(), "cargo build --examples failed");
        profile_dir.join("examples")
    })
}

/// The built example `name`.
fn example(name: &str) -> Command {
    let path = examples_dir().join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    Command::new(path)
}

fn run_ok(cmd: &mut Command) -> (String, String) {
    let output = cmd.output().expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    (stdout, stderr)
}

/// The number after `label` in `line`, up to the first character that is not part of it.
fn number_after(line: &str, label: &str) -> f64 {
    let rest = line
        .split_once(label)
        .unwrap_or_else(|| panic!("no '{label}' in {line}"))
        .1
        .trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("no number after '{label}' in {line}"))
}

#[test]
fn benchmark_2017_example_prints_its_line_and_the_blocking_per_size() {
    let (stdout, stderr) =
        run_ok(example("benchmark_2017").args(["--sizes", "1,4", "--gap", "200ms"]));
    assert!(stderr.contains("redis"), "{stderr}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("length:"))
        .collect();
    assert_eq!(lines.len(), 2, "one line per size:\n{stdout}");
    for (line, size) in lines.iter().zip(["1M", "4M"]) {
        // The 2017 benchmark's own format first: `length:   1M, spend: 0.0012s, memory 3.4%, swap 0.0%`.
        assert!(
            line.starts_with(&format!("length: {size:>4}, spend: ")),
            "{line}"
        );
        let spend_s = number_after(line, "spend:");
        assert!(spend_s > 0.0 && spend_s < 5.0, "{line}");
        let memory = number_after(line, "memory");
        assert!(memory > 0.0 && memory <= 100.0, "{line}");
        let swap = number_after(line, "swap");
        assert!((0.0..=100.0).contains(&swap), "{line}");
        // Then what it could not see.
        assert!(line.contains("others blocked: "), "{line}");
        let stalled = number_after(line, "stalled:");
        assert!((0.0..5000.0).contains(&stalled), "{line}");
    }
    // Every key kept (as in 2017), then each deletion measured.
    let deletes = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("del "))
        .count();
    assert_eq!(deletes, 2, "{stdout}");
    assert!(stdout.contains("baseline:"), "{stdout}");
    assert!(!(stdout + &stderr).to_lowercase().contains("seed"));
}

#[test]
fn benchmark_2017_example_rejects_a_bad_size_with_exit_2() {
    let output = example("benchmark_2017")
        .args(["--sizes", "1,4X"])
        .output()
        .expect("run the example");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--sizes") && stderr.contains("4X"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn custom_command_example_measures_get_del_and_unlink() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, _) = run_ok(
        example("custom_command")
            .args(["--sizes", "2M", "--repeat", "1"])
            .arg("--out")
            .arg(dir.path()),
    );
    for name in ["SET", "GET {key}", "DEL", "UNLINK {key}"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name) && l.contains("own"))
            .unwrap_or_else(|| panic!("no '{name}' event line:\n{stdout}"));
        assert!(!line.contains("FAILED"), "{line}");
        assert!(number_after(line, "own") > 0.0, "{line}");
    }
    // The exports record the custom commands as op `command`, the plain DEL as `delete`.
    let summary = std::fs::read_to_string(dir.path().join("get-del/summary.csv")).unwrap();
    let ops: Vec<&str> = summary
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap())
        .collect();
    assert_eq!(ops, ["set", "command", "delete"], "{summary}");
    let unlink = std::fs::read_to_string(dir.path().join("unlink/writes.csv")).unwrap();
    let ops: Vec<&str> = unlink
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap())
        .collect();
    assert_eq!(
        ops,
        ["set", "command"],
        "UNLINK replaces the DEL:\n{unlink}"
    );
    assert!(stdout.contains("medians over 1 repeat"), "{stdout}");
}

#[test]
fn observe_example_catches_an_injected_debug_sleep() {
    let (stdout, _) = run_ok(example("observe").args([
        "--duration",
        "3s",
        "--inject-sleep",
        "100ms",
        "--inject-every",
        "1500ms",
    ]));
    let matched: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("injected DEBUG SLEEP"))
        .collect();
    assert!(!matched.is_empty(), "nothing injected:\n{stdout}");
    for line in matched {
        // At least the 100 ms slept, less one probe interval. The upper bound is loose on
        // purpose: on a loaded 2-core machine the server (or the whole host) can freeze on its
        // own next to the sleep, and the two then measure as one; the core's own tests check
        // the accuracy of a stall's length.
        let measured = number_after(line, "measured stall");
        assert!((99.0..=600.0).contains(&measured), "{line}\n{stdout}");
    }
    // The stall lines name the injected command, from the server's slow log.
    assert!(
        stdout.contains("ms  DEBUG SLEEP 0.100 (127.0.0.1:"),
        "{stdout}"
    );
}

/// `reanalyze --stall-threshold` writes the threshold it used into run.json, beside the findings
/// it rewrote (timeline.py and probe compare read it there: they said 1 ms of a run reanalysed
/// at 2).
#[test]
fn reanalyze_records_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let shipped =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/redis-7.0-get-sample/get-del");
    for file in std::fs::read_dir(&shipped).unwrap() {
        let path = file.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, run.join(path.file_name().unwrap())).unwrap();
        }
    }
    run_ok(
        example("reanalyze")
            .arg(&run)
            .args(["--stall-threshold", "2ms"]),
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        meta["options"]["stall_threshold_us"], 2000,
        "{}",
        meta["options"]
    );
    // Every stall it kept is at least that long.
    for stall in meta["stalls"].as_array().unwrap() {
        assert!(stall["duration_ms"].as_f64().unwrap() >= 2.0, "{stall}");
    }
}
