//! Typed errors for what a user can get wrong, and the exit statuses the binary documents.

use thiserror::Error;

/// A mistake in the command line or its values. Always reported before anything is sent to a
/// server, as one line, with exit status [`EXIT_USAGE`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UsageError {
    /// A flag's value does not parse or is out of range.
    #[error("invalid value '{value}' for {flag}: {reason}")]
    InvalidValue {
        /// The flag as the user typed it, e.g. `--writer-sizes`.
        flag: &'static str,
        /// The offending value, verbatim.
        value: String,
        /// What was expected instead.
        reason: String,
    },
    /// Two flags that cannot be used together, or a flag missing what it needs.
    #[error("{0}")]
    Conflict(String),
}

impl UsageError {
    /// Shorthand for [`UsageError::InvalidValue`].
    pub fn invalid(flag: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        UsageError::InvalidValue {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// The run was stopped by Ctrl-C or SIGTERM; what was measured so far has been written.
#[derive(Debug, Error)]
#[error("interrupted by {signal}; results measured so far were kept")]
pub struct Interrupted {
    /// `SIGINT` or `SIGTERM` (the handler cannot tell which, so it says "signal").
    pub signal: String,
}

/// Exit status of a successful run.
pub const EXIT_OK: i32 = 0;
/// Exit status for a failed run: the server refused, vanished or erred; or (for `compare` and
/// `calibrate`) a negative verdict.
pub const EXIT_FAILURE: i32 = 1;
/// Exit status for bad input: a flag, a value, a file or directory the tool was given.
pub const EXIT_USAGE: i32 = 2;
/// Exit status of `probe compare` (and `probe --baseline`) when no row regressed but the data
/// cannot decide some: too few repeats, or a difference hidden in their spread.
pub const EXIT_INCONCLUSIVE: i32 = 3;
/// Exit status after Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: i32 = 130;

/// The error and its causes on one line, `outer: cause: root`, leaving out a cause whose text
/// the previous message already carries (redis-rs and io errors repeat their source).
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = chain_line(err);
    if let Some(hint) = hint_for(&line) {
        line.push_str(" (");
        line.push_str(hint);
        line.push(')');
    }
    line
}

/// The error and its causes on one line, each said once, without [`hint_for`]'s hint (for a
/// caller that words its own).
pub fn chain_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// What to do about the server errors a user meets most, matched on the server's own codes.
pub fn hint_for(message: &str) -> Option<&'static str> {
    const HINTS: &[(&str, &str)] = &[
        (
            "NOAUTH",
            "the server requires a password: give it in REDISCLI_AUTH, --password, or the URL, redis://:PASSWORD@host:port",
        ),
        (
            "WRONGPASS",
            "the user name or password was refused: check --user/--password, the URL or REDISCLI_AUTH",
        ),
        (
            "AuthenticationFailed",
            "the user name or password was refused: check --user/--password, the URL or REDISCLI_AUTH",
        ),
        (
            "NOPERM",
            "the ACL user may not run this command: the tool needs INFO, PING, GET, SET, DEL (and CONFIG GET, optional) on keys matching holprobe:*",
        ),
        (
            "READONLY",
            "this is a read-only replica: point --url at the primary to measure writes, or observe the replica with --duration",
        ),
        (
            "OOM command not allowed",
            "the server hit maxmemory: raise maxmemory or write smaller values",
        ),
        (
            "No space left on device",
            "the disk of --out is full: free space or choose another --out; run.json says how far the run got, as far as the disk took it",
        ),
        (
            "Connection refused",
            "nothing listens there: check the host and port (or, for a server the tool started, whether it exited)",
        ),
    ];
    HINTS
        .iter()
        .find(|(code, _)| message.contains(code))
        .map(|&(_, hint)| hint)
}

/// Maps an error chain to the documented exit status.
pub fn exit_status(err: &anyhow::Error) -> i32 {
    if err.chain().any(|cause| cause.is::<UsageError>()) {
        EXIT_USAGE
    } else if err.chain().any(|cause| cause.is::<Interrupted>()) {
        EXIT_INTERRUPTED
    } else {
        EXIT_FAILURE
    }
}
