//! Naming by the server's slow-command log (SLOWLOG, or COMMANDLOG `slow`): the entry whose run
//! explains the stall, and the client that sent it.

use super::label::printable;
use super::span::{WallSpan, explains, overlaps};

/// One SLOWLOG (or COMMANDLOG `slow`) entry, as the poller hands it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCommandEntry {
    /// Entry id: grows by one per entry for as long as the server runs (SLOWLOG RESET does not
    /// restart it).
    pub id: i64,
    /// Unix time, whole seconds (truncated), at which the server logged the entry: right after
    /// the command finished.
    pub logged_unix_s: i64,
    /// The command's execution time, µs (its own work only: see the module comment of `naming`).
    pub duration_us: i64,
    /// The command and its arguments as logged (the server keeps at most 32 arguments and 128
    /// bytes of each, marking what it cut).
    pub args: Vec<Vec<u8>>,
    /// The client's address, `ip:port` (Redis 4+ and Valkey).
    pub client_addr: Option<String>,
    /// The client's name (`CLIENT SETNAME`), when it set one.
    pub client_name: Option<String>,
}

/// Whether a logged command's `args` are of `command` (any case): its first argument.
pub fn is_command(args: &[Vec<u8>], command: &str) -> bool {
    args.first()
        .is_some_and(|name| name.eq_ignore_ascii_case(command.as_bytes()))
}

/// The entry whose run explains `stall` (see the module comment of `naming`): of those that
/// qualify, the one whose duration is nearest the stall's length, then the longer, then the
/// earlier id.
pub(super) fn best_entry(
    stall: WallSpan,
    entries: &[ServerCommandEntry],
) -> Option<&ServerCommandEntry> {
    let length_us = stall.duration_us();
    entries
        .iter()
        .filter(|entry| {
            overlaps(entry.logged_unix_s, entry.duration_us, stall)
                && explains(entry.duration_us, length_us)
        })
        .min_by_key(|entry| {
            (
                entry.duration_us.abs_diff(length_us),
                std::cmp::Reverse(entry.duration_us),
                entry.id,
            )
        })
}

/// What the tool's own connections call themselves (`CLIENT SETNAME`): the writer's
/// `holprobe-writer`, the server-log poller's `holprobe-culprit`.
pub const TOOL_CLIENT_NAME_PREFIX: &str = "holprobe-";

/// Whether `entry` is a command of the run's own: one of its arguments after the command's name
/// is a key under `own_prefix` (every data command of the writer names its key), or the client
/// that sent it is one the tool named (its CONFIG SET of an eviction, its INFO) and neither its
/// name nor its arguments belong to another run: a second run on the same server names its
/// connections with its own id ([`run_client_name`]) and its keys `holprobe:<8 hex>:`.
pub fn is_the_runs(entry: &ServerCommandEntry, own_prefix: &[u8]) -> bool {
    let args = || entry.args.iter().skip(1);
    if args().any(|arg| arg.starts_with(own_prefix)) {
        return true;
    }
    let own_id = run_id_of(own_prefix);
    !args().any(|arg| is_a_runs_key(arg))
        && entry.client_name.as_deref().is_some_and(|name| {
            name.starts_with(TOOL_CLIENT_NAME_PREFIX)
                && match (client_run_id(name), own_id) {
                    (Some(theirs), Some(ours)) => theirs == ours,
                    // Another run's connection, where this run's prefix has no id to compare.
                    (Some(_), None) => false,
                    // A connection named without a run id (a server-log poller, an older
                    // version of the tool): the run's, as before.
                    (None, _) => true,
                }
        })
}

/// The name a run's connection gives itself: `base` (`holprobe-writer`) and the run's id from
/// its key prefix (`holprobe:<8 hex>:`), `holprobe-writer-1a2b3c4d`; `base` alone for a
/// prefix without one.
pub fn run_client_name(base: &str, key_prefix: &str) -> String {
    match run_id_of(key_prefix.as_bytes()) {
        Some(id) => format!("{base}-{}", String::from_utf8_lossy(id)),
        None => base.to_string(),
    }
}

/// The run id of a key prefix `holprobe:<8 hex>:...`.
fn run_id_of(prefix: &[u8]) -> Option<&[u8]> {
    let rest = prefix.strip_prefix(b"holprobe:")?;
    (rest.len() > 8 && rest[..8].iter().all(u8::is_ascii_hexdigit) && rest[8] == b':')
        .then(|| &rest[..8])
}

/// The run id a connection's name ends with (`holprobe-writer-1a2b3c4d`), if any.
fn client_run_id(name: &str) -> Option<&[u8]> {
    let (_, id) = name.rsplit_once('-')?;
    (id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id.as_bytes())
}

/// Whether `arg` is a key under some run's prefix, `holprobe:<8 hex digits>:`.
fn is_a_runs_key(arg: &[u8]) -> bool {
    run_id_of(arg).is_some()
}

/// The entry that names `stall` (as [`best_entry`] picks it) when it is another client's
/// command, not the run's ([`is_the_runs`]).
pub fn foreign_entry<'a>(
    stall: WallSpan,
    entries: &'a [ServerCommandEntry],
    own_prefix: &[u8],
) -> Option<&'a ServerCommandEntry> {
    best_entry(stall, entries).filter(|entry| !is_the_runs(entry, own_prefix))
}

/// `ip:port name`, `ip:port`, or the name alone; `None` when the server said neither.
pub fn client_label(entry: &ServerCommandEntry) -> Option<String> {
    let parts: Vec<String> = [&entry.client_addr, &entry.client_name]
        .into_iter()
        .flatten()
        .filter(|text| !text.is_empty())
        .map(|text| printable(text.as_bytes()))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}
