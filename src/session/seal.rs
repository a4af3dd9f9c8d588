//! A run's marker is sealed with a key that never leaves the machine the tool runs on (HMAC-SHA256
//! of the marker's JSON), so that a later run undoes a dead run's settings only where this
//! machine's tool wrote the marker. Anyone who may write a key under the tool's namespace can
//! plant a marker that names a plausible change (`notify-keyspace-events` from `AK` to `AKE`,
//! which reads back as the owner's `KEA`): without the seal the next run "restored" the
//! owner's setting to what the planted marker said (hostile review of stops 36-38, F1).
//!
//! The key is 32 random bytes in `$XDG_STATE_HOME/holprobe/marker.key` (else
//! `~/.local/state/holprobe/marker.key`), made on first use, readable by its owner only. A marker
//! this machine did not seal (another machine's run, a tool from before the seal, a planted one)
//! is still read and its keys under its own prefix removed, but its settings are only said, with
//! the command that would put each back.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

const KEY_BYTES: usize = 32;

/// Where this machine's key lives.
pub fn key_path() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|dir| !dir.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(state.join("holprobe").join("marker.key"))
}

/// This machine's key, made on first use (once per process).
fn key() -> Result<&'static hmac::Key, String> {
    static KEY: OnceLock<Result<hmac::Key, String>> = OnceLock::new();
    KEY.get_or_init(|| load_or_make().map_err(|err| format!("{err:#}")))
        .as_ref()
        .map_err(Clone::clone)
}

fn load_or_make() -> Result<hmac::Key> {
    let path = key_path().ok_or_else(|| anyhow!("neither XDG_STATE_HOME nor HOME is set"))?;
    let read = |path: &PathBuf| -> Result<Option<hmac::Key>> {
        match fs::read(path) {
            Ok(bytes) if bytes.len() == KEY_BYTES => {
                Ok(Some(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
            }
            Ok(bytes) => Err(anyhow!(
                "{} holds {} bytes, not a key of {KEY_BYTES}",
                path.display(),
                bytes.len()
            )),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
        }
    };
    if let Some(key) = read(&path)? {
        return Ok(key);
    }
    let dir = path.parent().expect("the key's path has a directory");
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut bytes = [0u8; KEY_BYTES];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow!("the system gave no random bytes"))?;
    // Written whole under another name, then linked into place: a link fails where the key
    // exists, so two runs making it at once agree on the one that landed first.
    let tmp = dir.join(format!("marker.key.{}", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
            file.write_all(&bytes)?;
            file.sync_all()
        })
        .with_context(|| format!("writing {}", tmp.display()));
    let linked = written.and_then(|()| match fs::hard_link(&tmp, &path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err).with_context(|| format!("making {}", path.display())),
    });
    let _ = fs::remove_file(&tmp);
    linked?;
    read(&path)?.ok_or_else(|| anyhow!("{} vanished as it was made", path.display()))
}

/// The record of a run sealed here and not yet ended: `runs/<run id>` beside the key. A seal
/// alone said only that this machine wrote the marker, not that its run is still to be undone: a
/// copy of a sealed marker, taken while its run went and planted again after the run had
/// cleaned up, had the owner's later settings "restored" (hostile review of stop 40, F1). So a
/// marker's settings are restored only while its run's record is here; the run removes it when
/// it has undone everything itself, and a reclaim when it has undone the run's settings (a seal
/// is good once).
fn run_record(run_id: &str) -> Option<PathBuf> {
    let valid = run_id.len() == 8 && run_id.bytes().all(|b| b.is_ascii_hexdigit());
    let dir = key_path()?.parent()?.join("runs");
    valid.then(|| dir.join(run_id))
}

/// How long the record of a run that never ended is kept: a run killed and never reclaimed
/// (its server flushed, or never run against again) left one for good. Past this its marker, if
/// it is still on a server, is taken for a copy: its settings are said, not put back (a server
/// that ran that long since the run has likely had them changed, or restarted, since).
pub const RECORD_KEPT: std::time::Duration = std::time::Duration::from_secs(90 * 24 * 3600);

/// Records that run `run_id` was sealed here and has not ended; why not where it cannot be.
/// Records older than [`RECORD_KEPT`] are removed meanwhile.
pub fn record_run(run_id: &str) -> Result<(), String> {
    let path = run_record(run_id).ok_or("no place for the record of the run")?;
    let dir = path.parent().expect("a record has a directory");
    fs::create_dir_all(dir)
        .and_then(|()| fs::write(&path, b""))
        .map_err(|err| format!("writing {} ({err})", path.display()))?;
    forget_old_runs(dir, RECORD_KEPT);
    Ok(())
}

/// Removes the records in `dir` last written more than `kept` ago (best effort).
fn forget_old_runs(dir: &Path, kept: std::time::Duration) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age > kept);
        if old && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether run `run_id` was sealed here and has not ended.
pub fn run_recorded(run_id: &str) -> bool {
    run_record(run_id).is_some_and(|path| path.is_file())
}

/// Forgets run `run_id`: it ended, or a reclaim undid it.
pub fn forget_run(run_id: &str) {
    if let Some(path) = run_record(run_id) {
        let _ = fs::remove_file(path);
    }
}

/// The seal of `text` with this machine's key, as hex; why none where the key cannot be had.
pub fn seal(text: &str) -> Result<String, String> {
    let tag = hmac::sign(key()?, text.as_bytes());
    Ok(tag.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `seal` is this machine's seal of `text`.
pub fn verify(text: &str, seal: &str) -> bool {
    let Ok(key) = key() else {
        return false;
    };
    if !seal.len().is_multiple_of(2) || !seal.is_ascii() {
        return false;
    }
    let bytes: Option<Vec<u8>> = (0..seal.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&seal[i..i + 2], 16).ok())
        .collect();
    bytes.is_some_and(|bytes| hmac::verify(key, text.as_bytes(), &bytes).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_verifies_its_own_text_only() {
        if key_path().is_none() {
            // No HOME: nothing is sealed, and nothing verifies.
            assert!(seal("a marker").is_err());
            assert!(!verify("a marker", "00"));
            return;
        }
        let sealed = seal("a marker").expect("a seal where there is a HOME");
        assert_eq!(sealed.len(), 64);
        assert!(verify("a marker", &sealed));
        assert!(!verify("a marker!", &sealed));
        assert!(!verify("a marker", &sealed[..62]));
        assert!(!verify("a marker", "zz"));
        assert!(!verify("a marker", "é"));
    }

    #[test]
    fn records_older_than_kept_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("0000aaaa"), dir.path().join("0000bbbb"));
        fs::write(&old, b"").unwrap();
        fs::write(&new, b"").unwrap();
        let long_ago =
            std::time::SystemTime::now() - RECORD_KEPT - std::time::Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        forget_old_runs(dir.path(), RECORD_KEPT);
        assert!(!old.exists());
        assert!(new.exists());
    }

    #[test]
    fn a_run_is_recorded_until_forgotten() {
        if key_path().is_none() {
            return;
        }
        let id = format!("{:08x}", rand::random::<u32>());
        assert!(!run_recorded(&id));
        record_run(&id).unwrap();
        assert!(run_recorded(&id));
        forget_run(&id);
        assert!(!run_recorded(&id));
        // Only a run id names a record: nothing outside the directory.
        assert!(record_run("../../x").is_err());
        assert!(!run_recorded("../../x"));
    }
}
