//! Exports of a run to an `--out` directory, written as the run goes so that a crash, a dead
//! server or Ctrl-C keeps every result measured so far in valid files:
//!
//! - rows (`probes.csv`, `writes.csv`, and as each becomes final `stalls.csv` and
//!   `timeline.csv`) are appended in whole rows only ([`RowAppender`]): a file cut short still
//!   parses; `probes.hlog` likewise in whole lines;
//! - `summary.csv` and `run.json` are rewritten after each write, every few seconds and at the
//!   end, each to a temporary file renamed into place ([`write_atomic`]);
//! - `probe load`'s files (`load_timeline.csv`, `load_writes.csv`, `load_latency.hgrm`,
//!   `run.json`) are rewritten whole, about every second, in the same way; `probe calibrate`
//!   writes the main job's files and, at the end, `calibration.csv` and `calibration.json`.
//!
//! Each JSON file is one type, written and read back ([`RunJson`], [`LoadRunJson`],
//! [`CalibrationJson`]); each CSV's columns are one list ([`columns`]).

pub mod columns;
mod csv_rows;
pub(crate) mod run_json;
mod timeline;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use csv_rows::{RowAppender, csv_bytes};
#[cfg(test)]
pub(crate) use run_json::sample;
pub use run_json::{
    CalibrationJson, HostInfo, KeysModelUsed, KeysRunJson, KeysScanSettings, LoadRunJson, Mode,
    NodeEvent, NodeFindings, RunJson, RunStatus, ScanCost, ToolInfo,
};
pub use timeline::TimelineRow;

use crate::error::UsageError;
use crate::measure::target::ServerFlavor;

/// The files of a run directory (each CSV's columns: [`columns`]). One row per probe.
pub const PROBES_CSV: &str = "probes.csv";
/// Every write event.
pub const WRITES_CSV: &str = "writes.csv";
/// Every stall episode.
pub const STALLS_CSV: &str = "stalls.csv";
/// One row per write: what the others saw.
pub const SUMMARY_CSV: &str = "summary.csv";
/// Metadata, options, and the findings.
pub const RUN_JSON: &str = "run.json";
/// One row per interval: the probes' latency and the stalls over time.
pub const TIMELINE_CSV: &str = "timeline.csv";
/// The probes' latency per interval as an HdrHistogram interval log.
pub const PROBES_HLOG: &str = "probes.hlog";
/// `probe calibrate`: one row per injection.
pub const CALIBRATION_CSV: &str = "calibration.csv";
/// `probe calibrate`: the calibration's settings and verdict ([`CalibrationJson`]).
pub const CALIBRATION_JSON: &str = "calibration.json";
/// `probe load`: one row per second (and per server when there are several).
pub const LOAD_TIMELINE_CSV: &str = "load_timeline.csv";
/// `probe load`: the whole run's latency distribution in HdrHistogram's percentile text format.
pub const LOAD_LATENCY_HGRM: &str = "load_latency.hgrm";
/// `probe load`: one row per writer event, what the load clients saw.
pub const LOAD_WRITES_CSV: &str = "load_writes.csv";
/// `probe keys`: one row per key at or above the size floor.
pub const KEYS_CSV: &str = "keys.csv";
/// `probe keys --replay`: one row per key replayed, predicted against measured.
pub const REPLAY_CSV: &str = "replay.csv";
/// `probe keys --refit`: the fitted cost model.
pub const MODEL_JSON: &str = "model.json";

/// Every file a run of any command writes to its directory: one of them there means the
/// directory holds (part of) a run, whichever command made it and however far it got.
pub const EXPORT_FILES: &[&str] = &[
    RUN_JSON,
    PROBES_CSV,
    WRITES_CSV,
    STALLS_CSV,
    SUMMARY_CSV,
    TIMELINE_CSV,
    PROBES_HLOG,
    CALIBRATION_CSV,
    CALIBRATION_JSON,
    LOAD_TIMELINE_CSV,
    LOAD_LATENCY_HGRM,
    LOAD_WRITES_CSV,
    KEYS_CSV,
    REPLAY_CSV,
    MODEL_JSON,
];

/// The sub-runs a run keeps in directories of its `--out`, by the names the tool gives them
/// (`--refit`'s one per value type, `--replay`'s `replay-N`, one per `--server-bin`
/// `redis-7.0.15`/`valkey-9.1.2-2`), that hold a run's file. A directory of another name (a
/// user's own run kept there) is left alone.
fn sub_runs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_sub_run_name)
        })
        .filter(|p| p.is_dir() && !p.is_symlink())
        .filter(|p| EXPORT_FILES.iter().any(|name| p.join(name).is_file()))
        .collect()
}

/// Whether `name` is one the tool gives a sub-run's directory.
fn is_sub_run_name(name: &str) -> bool {
    const TYPES: [&str; 6] = ["string", "hash", "list", "set", "zset", "stream"];
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if TYPES.contains(&name) {
        return true;
    }
    if let Some(rank) = name.strip_prefix("replay-") {
        return digits(rank);
    }
    // <flavor>-<major>.<minor>.<patch>[-<n>], with a flavor the tool knows: a user's own
    // `backup-2024.01.15/` beside a run is not the tool's (the hostile trial's was moved to
    // replaced/ by one --force and deleted by the next).
    let Some((flavor, version)) = name.split_once('-') else {
        return false;
    };
    let (version, again) = match version.split_once('-') {
        Some((v, n)) => (v, Some(n)),
        None => (version, None),
    };
    ServerFlavor::ALL.iter().any(|f| f.name() == flavor)
        && version.split('.').count() == 3
        && version.split('.').all(digits)
        && again.is_none_or(digits)
}

/// An `--out` directory held by one run: an exclusive `flock` on the directory itself, so that
/// a second run into it is refused while this one lasts. Released when dropped, and by the
/// kernel when the process dies (kill -9 included); no lock file is left behind.
#[derive(Debug)]
pub struct OutDirLock {
    _dir: File,
    /// The space kept for the final run.json ([`RESERVE_FILE`]), removed with the lock.
    reserve: PathBuf,
}

impl Drop for OutDirLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.reserve);
    }
}

/// Where `--force` moves the run it replaces (the last one only).
pub const REPLACED_DIR: &str = "replaced";

/// A file of [`RESERVE_BYTES`] a run keeps in its `--out` while it goes: when the disk fills,
/// the first export write that fails removes it ([`release_reserve`]), so the run.json that
/// says the run failed, and why, still fits. Removed at the end of every run.
pub const RESERVE_FILE: &str = ".holprobe-reserve";
/// Room for a run.json with its kept stalls and hiccups (a few hundred KiB at most).
const RESERVE_BYTES: usize = 512 * 1024;

/// Frees the space kept in `dir` for the final run.json: called when an export write fails.
pub fn release_reserve(dir: &Path) {
    let _ = fs::remove_file(dir.join(RESERVE_FILE));
}

impl OutDirLock {
    /// Takes the lock, or says the directory is in use (a usage error: exit 2).
    fn take(dir: &Path, shown: &str) -> Result<OutDirLock> {
        let handle = File::open(dir).map_err(|err| {
            UsageError::invalid("--out", shown, format!("cannot open the directory ({err})"))
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            // SAFETY: flock(2) on a descriptor this function owns.
            let taken = unsafe { libc::flock(handle.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if taken != 0 {
                let err = std::io::Error::last_os_error();
                let reason = if err.kind() == std::io::ErrorKind::WouldBlock {
                    "is in use by another run of the tool right now: give each run its own directory".to_string()
                } else {
                    format!("cannot lock the directory ({err})")
                };
                return Err(UsageError::invalid("--out", shown, reason).into());
            }
        }
        Ok(OutDirLock {
            _dir: handle,
            reserve: dir.join(RESERVE_FILE),
        })
    }
}

/// Makes sure `dir` can take a new run, before anything is measured or sent: creates it if
/// needed, locks it for this run (refusing one another run holds), refuses one that holds any
/// run's file unless `force`, and checks it can be written. Keep the lock as long as the run.
pub fn prepare_out_dir(dir: &Path, force: bool) -> Result<OutDirLock> {
    let shown = dir.display().to_string();
    if dir.exists() && !dir.is_dir() {
        return Err(UsageError::invalid("--out", shown, "exists and is not a directory").into());
    }
    fs::create_dir_all(dir).map_err(|err| {
        UsageError::invalid(
            "--out",
            &shown,
            format!("cannot create the directory ({err})"),
        )
    })?;
    let lock = OutDirLock::take(dir, &shown)?;
    if !force
        && let Some(found) = EXPORT_FILES
            .iter()
            .find(|name| dir.join(name).exists() || dir.join(format!("{name}.tmp")).exists())
    {
        return Err(UsageError::invalid(
            "--out",
            shown,
            format!(
                "already holds a run ({found}): choose another directory or pass --force to replace it"
            ),
        )
        .into());
    }
    if force {
        // A replaced run's files leave the directory, so that none is read as the new run's (a
        // calibration.json left beside a new main run made compare refuse it), but into
        // `replaced/`, not away: a run that then fails before it starts (a mistyped --url, a
        // plan the server refuses) must not have cost the old one. Only the last replaced run
        // is kept there. Its sub-runs' directories go with it (a --refit's type runs left
        // beside a new main run were listed by compare as runs of it).
        let mut found: Vec<PathBuf> = EXPORT_FILES
            .iter()
            .flat_map(|name| [dir.join(name), dir.join(format!("{name}.tmp"))])
            .filter(|file| file.is_file())
            .collect();
        found.extend(sub_runs(dir));
        if !found.is_empty() {
            let kept = dir.join(REPLACED_DIR);
            let moved = (|| -> std::io::Result<()> {
                if kept.is_dir() {
                    fs::remove_dir_all(&kept)?;
                }
                fs::create_dir(&kept)?;
                for file in &found {
                    if let Some(name) = file.file_name() {
                        fs::rename(file, kept.join(name))?;
                    }
                }
                Ok(())
            })();
            if let Err(err) = moved {
                return Err(UsageError::invalid(
                    "--out",
                    &shown,
                    format!(
                        "--force cannot move the old run's files to {} ({err})",
                        kept.display()
                    ),
                )
                .into());
            }
        }
    }
    // Written, not only sized: a sparse file would keep no space on a full disk.
    File::create(&lock.reserve)
        .and_then(|mut f| f.write_all(&vec![0u8; RESERVE_BYTES]))
        .map_err(|err| {
            UsageError::invalid("--out", &shown, format!("cannot write there ({err})"))
        })?;
    Ok(lock)
}

/// Whether a write's error is what a failover does to the write under way, which the run rides
/// out (the writer reconnects and follows the cluster's MOVED): its connection lost under it
/// (reset, closed, refused, broken, a timeout) or the cluster's replies while it fails over
/// (`CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`, `LOADING`); unlike a server's refusal of the write
/// itself (`OOM ...`, `ERR ...`) or a write the tool would not send.
pub fn lost_connection(error: &str) -> bool {
    let error = error.to_ascii_lowercase();
    [
        "connection reset",
        "broken pipe",
        "closed the connection",
        "connection refused",
        "connection aborted",
        "timed out",
        "unexpected end of file",
    ]
    .iter()
    .any(|cause| error.contains(cause))
        || ["clusterdown", "tryagain", "masterdown", "loading"]
            .iter()
            .any(|code| error.starts_with(code))
}

/// The failed writes that fail the run: every one but those whose connection was lost under
/// them ([`lost_connection`]), as [`failed_writes`] words them; `None` when there are none.
pub fn failing_writes(writes: &[crate::record::WriteRecord]) -> Option<String> {
    let failing: Vec<crate::record::WriteRecord> = writes
        .iter()
        .filter(|w| !w.ok && !w.error.as_deref().is_some_and(lost_connection))
        .cloned()
        .collect();
    failed_writes(&failing)
}

/// "N write(s) failed (see above), the first with: ERROR", or `None` when none failed: the
/// words of the exit status and of run.json's `status_reason` alike, so the two agree.
pub fn failed_writes(writes: &[crate::record::WriteRecord]) -> Option<String> {
    let mut failed = writes.iter().filter(|w| !w.ok);
    let first = failed.next()?;
    Some(format!(
        "{} write(s) failed (see above), the first with: {}",
        1 + failed.count(),
        first.error.as_deref().unwrap_or("no reason given")
    ))
}

/// Writes `bytes` to `path` through a temporary file in the same directory, renamed into place:
/// readers see the old file or the new one, never half of one.
/// A write that fails (a full disk) frees the space kept for the final run.json and leaves no
/// temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let written = File::create(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))
        .and_then(|mut file| {
            file.write_all(bytes)
                .and_then(|()| file.sync_data())
                .with_context(|| format!("writing {}", tmp.display()))
        })
        .and_then(|()| {
            fs::rename(&tmp, path)
                .with_context(|| format!("renaming {} into place", path.display()))
        });
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
        if let Some(dir) = path.parent() {
            release_reserve(dir);
        }
    }
    written
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Opens `path` for appending rows, truncating what a previous run left.
pub(crate) fn open_fresh(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

#[cfg(test)]
mod failed_write_tests {
    use super::*;
    use crate::record::{WriteOp, WriteRecord};

    fn failed(error: &str) -> WriteRecord {
        WriteRecord {
            ok: false,
            error: Some(error.into()),
            ..WriteRecord::timed(1, WriteOp::Set, "k".into(), 1, (0, 0, 0))
        }
    }

    /// A server's refusal fails the run; a write whose connection a failover cut does not
    /// (the run rode it out), but is still said.
    #[test]
    fn only_writes_the_run_did_not_ride_out_fail_it() {
        let reset = failed("Connection reset by peer (os error 104)");
        let oom = failed("OOM command not allowed when used memory > 'maxmemory'.");
        assert!(lost_connection(reset.error.as_deref().unwrap()));
        assert!(!lost_connection(oom.error.as_deref().unwrap()));
        assert!(!lost_connection("not sent: the value would pass maxmemory"));
        assert!(lost_connection("CLUSTERDOWN The cluster is down"));
        assert!(!lost_connection("ERR loading is not a word here"));
        assert_eq!(failing_writes(std::slice::from_ref(&reset)), None);
        assert!(failed_writes(std::slice::from_ref(&reset)).is_some());
        let both = [reset, oom];
        let failing = failing_writes(&both).unwrap();
        assert!(
            failing.starts_with("1 write(s) failed") && failing.contains("OOM"),
            "{failing}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::is_sub_run_name;

    #[test]
    fn sub_run_directories_are_known_by_the_names_the_tool_gives_them() {
        for name in [
            "hash",
            "zset",
            "string",
            "replay-3",
            "redis-7.0.15",
            "valkey-9.1.2-2",
        ] {
            assert!(is_sub_run_name(name), "{name}");
        }
        for name in [
            "mine",
            "replay-",
            "replay-x",
            "redis-7.0",
            "redis-7.0.15-x",
            "Redis-7.0.15",
            "-7.0.15",
            "replaced",
            "backup-2024.01.15",
            "keydb-6.3.4",
        ] {
            assert!(!is_sub_run_name(name), "{name}");
        }
    }
}
