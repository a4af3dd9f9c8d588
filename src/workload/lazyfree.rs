//! Which thread frees a value, by the servers' own rule (`lazyfree.c`, `db.c`, `expire.c`,
//! `evict.c`; the same in Redis 6.2, 7.0, 8.2 and Valkey 9.1):
//!
//! - a value whose free effort ([`crate::workload::ValueKind::free_effort`]) is at most
//!   [`LAZYFREE_THRESHOLD`] (64) is freed on the main thread, however it is removed: a string's
//!   effort is 1, so a 512 MiB string's DEL, UNLINK, expiry or overwrite always costs the main
//!   thread its `free()`;
//! - a larger one goes to the background thread on `UNLINK` always, and on `DEL`
//!   (`lazyfree-lazy-user-del`), an active or lazy expiry (`lazyfree-lazy-expire`), an eviction
//!   (`lazyfree-lazy-eviction`) or an overwrite by `SET`/`RENAME` (`lazyfree-lazy-server-del`)
//!   where that setting is `yes`.
//!
//! Redis 7.0 and 8.2 default every `lazyfree-lazy-*` to `no`; Valkey 8.0 and later to `yes`.
//! The tool reads the settings from the server (`CONFIG GET lazyfree-lazy-*`) rather than
//! assume them, and checks the prediction against the server's `lazyfreed_objects` counter.

use serde::{Deserialize, Serialize};

/// The free effort past which the servers free a value in the background (`LAZYFREE_THRESHOLD`).
pub const LAZYFREE_THRESHOLD: u64 = 64;

/// The `lazyfree-lazy-*` settings of a server (`None`: the server did not say, e.g. `CONFIG`
/// renamed away).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LazyfreeSettings {
    /// `lazyfree-lazy-user-del`: DEL frees like UNLINK.
    pub lazy_user_del: Option<bool>,
    /// `lazyfree-lazy-server-del`: an overwrite (`SET`, `RENAME` onto a key) frees the old value
    /// in the background.
    pub lazy_server_del: Option<bool>,
    /// `lazyfree-lazy-expire`: an expiry frees in the background.
    pub lazy_expire: Option<bool>,
    /// `lazyfree-lazy-eviction`: an eviction frees in the background.
    pub lazy_eviction: Option<bool>,
    /// `lazyfree-lazy-user-flush`: FLUSHALL/FLUSHDB without ASYNC/SYNC free in the background.
    pub lazy_user_flush: Option<bool>,
}

impl LazyfreeSettings {
    /// The settings from a `CONFIG GET lazyfree-lazy-*` reply, as name/value pairs.
    pub fn from_config<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut settings = LazyfreeSettings::default();
        for (name, value) in pairs {
            let on = match value {
                "yes" => Some(true),
                "no" => Some(false),
                _ => None,
            };
            match name {
                "lazyfree-lazy-user-del" => settings.lazy_user_del = on,
                "lazyfree-lazy-server-del" => settings.lazy_server_del = on,
                "lazyfree-lazy-expire" => settings.lazy_expire = on,
                "lazyfree-lazy-eviction" => settings.lazy_eviction = on,
                "lazyfree-lazy-user-flush" => settings.lazy_user_flush = on,
                _ => {}
            }
        }
        settings
    }

    /// The settings the server told, as `CONFIG SET` name/value pairs (`yes`/`no`).
    pub fn to_config(&self) -> Vec<(&'static str, &'static str)> {
        [
            ("lazyfree-lazy-user-del", self.lazy_user_del),
            ("lazyfree-lazy-server-del", self.lazy_server_del),
            ("lazyfree-lazy-expire", self.lazy_expire),
            ("lazyfree-lazy-eviction", self.lazy_eviction),
            ("lazyfree-lazy-user-flush", self.lazy_user_flush),
        ]
        .into_iter()
        .filter_map(|(name, on)| Some((name, if on? { "yes" } else { "no" })))
        .collect()
    }
}

/// How a value leaves the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Removal {
    /// `DEL`.
    Delete,
    /// `UNLINK`.
    Unlink,
    /// The server's expiry (active or on access).
    Expire,
    /// The server's eviction under `maxmemory`.
    Evict,
    /// Replaced by another value (`SET` over it, `RENAME` onto its key).
    Overwrite,
}

impl Removal {
    /// The setting that decides this removal for a value past the threshold, or `None` for
    /// UNLINK, which always frees such a value in the background.
    pub fn setting(self) -> Option<&'static str> {
        match self {
            Removal::Delete => Some("lazyfree-lazy-user-del"),
            Removal::Unlink => None,
            Removal::Expire => Some("lazyfree-lazy-expire"),
            Removal::Evict => Some("lazyfree-lazy-eviction"),
            Removal::Overwrite => Some("lazyfree-lazy-server-del"),
        }
    }
}

/// The thread that frees a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FreedBy {
    /// The main thread, inside the command (or the expiry or eviction): other clients wait.
    Main,
    /// The lazyfree background thread: the main thread only unlinks the key.
    Background,
}

impl FreedBy {
    /// `main` or `background`, as in the exports.
    pub fn name(self) -> &'static str {
        match self {
            FreedBy::Main => "main",
            FreedBy::Background => "background",
        }
    }
}

/// Which thread frees a value of `effort` removed by `removal` under `settings`; `None` when it
/// hangs on a setting the server did not tell.
pub fn freed_by(removal: Removal, effort: u64, settings: &LazyfreeSettings) -> Option<FreedBy> {
    if effort <= LAZYFREE_THRESHOLD {
        return Some(FreedBy::Main);
    }
    let lazy = match removal {
        Removal::Unlink => Some(true),
        Removal::Delete => settings.lazy_user_del,
        Removal::Expire => settings.lazy_expire,
        Removal::Evict => settings.lazy_eviction,
        Removal::Overwrite => settings.lazy_server_del,
    }?;
    Some(if lazy {
        FreedBy::Background
    } else {
        FreedBy::Main
    })
}

/// What would take a main-thread free of `effort` by `removal` off the main thread: the advice
/// the report gives after a freeze, backed by the rule above. `None` when nothing would (a value
/// at or under the threshold, a string above all).
pub fn avoidable_by(removal: Removal, effort: u64) -> Option<String> {
    if effort <= LAZYFREE_THRESHOLD {
        return None;
    }
    Some(match removal {
        Removal::Delete => {
            "UNLINK (or lazyfree-lazy-user-del yes) would free it in the background".to_string()
        }
        Removal::Unlink => return None,
        // Measured with `--ops evict`: the server stays over its maxmemory until the background
        // thread has freed the value, and where nothing else can be evicted each command
        // meanwhile waits up to the eviction time limit (evict.c's `cant_free`): a 1M-field
        // hash, others held 58-139 ms at 2 x 1000 probes/s and 1 ms at 2 x 50/s on Redis 7.0,
        // 245-316 and 108-142 ms on Valkey 9.1 (glibc), its DEL 0.
        Removal::Evict => "lazyfree-lazy-eviction yes frees it in the background, but while the \
             server stays over maxmemory with nothing else to evict, each command waits up to \
             the eviction time limit for that free (a busy server falls behind until it ends)"
            .to_string(),
        other => format!(
            "{} yes would free it in the background",
            other.setting().unwrap_or("lazyfree")
        ),
    })
}
