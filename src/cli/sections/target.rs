//! Flags that say which server to measure, shared by every subcommand.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::error::UsageError;
use crate::measure::target::{ConnInfo, TargetSpec};
use crate::units::parse_duration;

/// `--url`, or the embedded server's `--server-bin` / `--server-arg`; timeouts.
// The field docs are also the --help text, where `[user:password@]` must read as written.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Measure an existing server: redis://[user:password@]host:port[/db] (redis://password@...
    /// is a password, as redis-cli reads it). The password may instead come from REDISCLI_AUTH,
    /// as with redis-cli. Without --url the tool starts its
    /// own redis-server on a free loopback port and stops it afterwards.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// How to reach the server or start one, beside the URL: `--host`/`--port` (redis-cli's way),
/// the embedded server's `--server-bin`/`--server-arg`, timeouts and TLS. `probe load` takes
/// these with its own (repeatable) `--url`.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The server's host, as redis-cli's -h (instead of --url) [default with --port:
    /// 127.0.0.1].
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,

    /// The server's port, as redis-cli's -p (instead of --url) [default with --host: 6379].
    #[arg(long, value_name = "PORT", allow_negative_numbers = true)]
    pub port: Option<String>,

    /// The password, as redis-cli's -a, with --host/--port (REDISCLI_AUTH keeps it out of the
    /// process list). Never printed or stored.
    #[arg(long, value_name = "PASSWORD")]
    pub password: Option<String>,

    /// The ACL user name, as redis-cli's --user, with --host/--port.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,

    /// The server binary to start when no --url is given [default: redis-server from PATH].
    /// Repeatable: the main job then runs the same plan against each binary in turn (a fresh
    /// server each, one at a time) and compares each with the first.
    #[arg(long, value_name = "PATH")]
    pub server_bin: Vec<PathBuf>,

    /// An extra setting for the started server, "NAME VALUE" (repeatable), e.g.
    /// --server-arg "maxmemory 2gb". Applies to every --server-bin.
    #[arg(long, value_name = "NAME VALUE")]
    pub server_arg: Vec<String>,

    /// Limit on establishing each connection.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "5s"
    )]
    pub connect_timeout: String,

    /// Limit on waiting for any one reply before the server is declared unresponsive.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "30s"
    )]
    pub timeout: String,

    /// With a rediss:// URL: PEM file of the CA that signed the server's certificate
    /// [default: the system's roots].
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,

    /// With a rediss:// URL: PEM client certificate, for servers that require one.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// With a rediss:// URL: PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// With a rediss:// URL: accept any server certificate (encrypted, not authenticated).
    #[arg(long)]
    pub insecure: bool,
}

impl TargetArgs {
    /// The server named by `--host` / `--port`, as [`ServerArgs::host_port_url`] with this
    /// `--url`.
    pub fn host_port_url(&self) -> Result<Option<String>, UsageError> {
        self.server.host_port_url(self.url.is_some())
    }

    /// Validates the flags into a [`TargetSpec`]. `env_password` is `REDISCLI_AUTH`.
    pub fn to_spec(&self, env_password: Option<String>) -> Result<TargetSpec, UsageError> {
        self.server.to_spec(self.url.as_deref(), env_password)
    }
}

impl ServerArgs {
    fn tls_flag_given(&self) -> Option<&'static str> {
        [
            ("--tls-ca", self.tls_ca.is_some()),
            ("--tls-cert", self.tls_cert.is_some()),
            ("--tls-key", self.tls_key.is_some()),
            ("--insecure", self.insecure),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// The server named by `--host` / `--port` (redis-cli's way), as a URL with no password
    /// (`--password` is passed beside it, so it never enters a string that might be printed);
    /// `None` when neither is given. `--url` with any of them is an error: one server, named
    /// one way.
    pub fn host_port_url(&self, url_given: bool) -> Result<Option<String>, UsageError> {
        let named: Vec<&str> = [
            ("--host", self.host.is_some()),
            ("--port", self.port.is_some()),
            ("--user", self.user.is_some()),
            ("--password", self.password.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if named.is_empty() {
            return Ok(None);
        }
        if url_given {
            return Err(UsageError::Conflict(format!(
                "--url and {} both name the server: give either --url redis://[user:password@]host:port or --host/--port (with --user/--password)",
                named.join("/")
            )));
        }
        if self.host.is_none() && self.port.is_none() {
            return Err(UsageError::Conflict(format!(
                "{} needs --host or --port: a server the tool starts has no password",
                named.join(" and ")
            )));
        }
        let host = self.host.as_deref().unwrap_or("127.0.0.1").trim();
        if host.is_empty() || host.contains(['/', '@', '?', '#', ' ']) {
            return Err(UsageError::invalid(
                "--host",
                host,
                "expected a host name or an IP address",
            ));
        }
        let port = match &self.port {
            Some(text) => text
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| {
                    UsageError::invalid("--port", text, "expected a port from 1 to 65535")
                })?,
            None => 6379,
        };
        // An IPv6 address goes in brackets in a URL.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Ok(Some(format!("redis://{host}:{port}")))
    }

    /// Validates the flags, with `url` (`--url`, when given), into a [`TargetSpec`].
    /// `env_password` is `REDISCLI_AUTH`.
    pub fn to_spec(
        &self,
        url: Option<&str>,
        env_password: Option<String>,
    ) -> Result<TargetSpec, UsageError> {
        if let Some(url) = self.host_port_url(url.is_some())? {
            let password = self.password.clone().or(env_password);
            // Without a password no AUTH is sent, and the server takes the connection as its
            // default user while the report named --user (the hostile trial).
            if let (Some(user), None) = (&self.user, &password) {
                return Err(UsageError::invalid(
                    "--user",
                    user,
                    "needs a password (--password or REDISCLI_AUTH): without one the connection would be the server's default user; a nopass user takes any",
                ));
            }
            let one = ServerArgs {
                host: None,
                port: None,
                password: None,
                user: None,
                ..self.clone()
            };
            let mut spec = one.to_spec(Some(&url), password).map_err(|err| match err {
                // The URL was made from --host: name the flag the user typed.
                UsageError::InvalidValue {
                    flag: "--url",
                    reason,
                    ..
                } => UsageError::invalid(
                    "--host",
                    self.host.as_deref().unwrap_or("127.0.0.1"),
                    reason,
                ),
                other => other,
            })?;
            if let TargetSpec::External(conn) = &mut spec {
                conn.username = self.user.clone();
            }
            return Ok(spec);
        }
        let connect_timeout = parse_duration("--connect-timeout", &self.connect_timeout)?;
        let command_timeout = parse_duration("--timeout", &self.timeout)?;
        for (flag, value, duration) in [
            ("--connect-timeout", &self.connect_timeout, connect_timeout),
            ("--timeout", &self.timeout, command_timeout),
        ] {
            // 1us was taken, and every connection then failed (exit 1) as if the server were
            // down: no reply comes that fast.
            if duration < Duration::from_millis(1) {
                return Err(UsageError::invalid(flag, value, "must be at least 1ms"));
            }
        }
        match url {
            Some(url) => {
                if !self.server_bin.is_empty() || !self.server_arg.is_empty() {
                    return Err(UsageError::Conflict(
                        "--server-bin and --server-arg apply to a server the tool starts: they cannot be used with --url (or --host/--port)".into(),
                    ));
                }
                let mut conn = ConnInfo::from_url(url, env_password)?;
                // An unknown host is a mistake in the flag, found before anything is sent.
                if conn.socket_addr().is_err() {
                    return Err(UsageError::invalid(
                        "--url",
                        crate::measure::target::redact_url(url),
                        format!("unknown host '{}'", conn.host),
                    ));
                }
                conn.connect_timeout = connect_timeout;
                conn.command_timeout = command_timeout;
                match conn.tls.as_mut() {
                    Some(tls) => {
                        for (flag, path) in [
                            ("--tls-ca", &self.tls_ca),
                            ("--tls-cert", &self.tls_cert),
                            ("--tls-key", &self.tls_key),
                        ] {
                            if let Some(path) = path
                                && !path.is_file()
                            {
                                return Err(UsageError::invalid(
                                    flag,
                                    path.display(),
                                    "no such file",
                                ));
                            }
                        }
                        tls.ca = self.tls_ca.clone();
                        tls.cert = self.tls_cert.clone();
                        tls.key = self.tls_key.clone();
                        tls.insecure = self.insecure;
                    }
                    None => {
                        if let Some(flag) = self.tls_flag_given() {
                            return Err(UsageError::Conflict(format!(
                                "{flag} needs a TLS server: use a rediss:// URL"
                            )));
                        }
                    }
                }
                Ok(TargetSpec::External(conn))
            }
            None => {
                if let Some(flag) = self.tls_flag_given() {
                    return Err(UsageError::Conflict(format!(
                        "{flag} needs a TLS server: use --url rediss://host:port"
                    )));
                }
                if self.server_bin.len() > 1 {
                    return Err(UsageError::Conflict(
                        "several --server-bin: only the main job (probe --writer-sizes ...) runs them, one after another".into(),
                    ));
                }
                for setting in &self.server_arg {
                    crate::measure::target::server_arg_tokens(setting)?;
                }
                Ok(TargetSpec::Embedded {
                    binary: self.server_bin.first().cloned(),
                    extra_args: self.server_arg.clone(),
                    connect_timeout,
                    command_timeout,
                })
            }
        }
    }
}
