//! The embedded server: a `redis-server` (or `valkey-server`) the tool starts on a free loopback
//! port, in a temporary directory, with persistence off, and always stops.

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

use super::ConnInfo;
use crate::error::UsageError;

/// Redis or Valkey: they differ in a few settings the tool passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerFlavor {
    /// Redis (any version).
    Redis,
    /// Valkey (a fork of Redis 7.2).
    Valkey,
}

impl ServerFlavor {
    /// Every flavor the tool knows.
    pub const ALL: [ServerFlavor; 2] = [ServerFlavor::Redis, ServerFlavor::Valkey];

    /// `redis` or `valkey`.
    pub fn name(self) -> &'static str {
        match self {
            ServerFlavor::Redis => "redis",
            ServerFlavor::Valkey => "valkey",
        }
    }
}

/// A server binary and what `--version` says of it.
#[derive(Debug, Clone, Serialize)]
pub struct ServerBinary {
    /// Path as resolved (from PATH when the user gave a bare name).
    pub path: PathBuf,
    /// Redis or Valkey.
    pub flavor: ServerFlavor,
    /// `major.minor.patch` as printed by `--version`.
    pub version: String,
}

/// Longest wait for `--version`: a binary that answers later is not a server the tool can
/// drive (it once hung the tool for 250 s, deaf to Ctrl-C).
pub const VERSION_LIMIT: Duration = Duration::from_secs(5);

/// Longest wait for a started server to answer PING, each attempt.
pub const LISTEN_LIMIT: Duration = Duration::from_secs(10);

/// `binary` never answered PING: not worth another attempt on another port.
#[derive(Debug)]
struct NeverListened(String);

impl std::fmt::Display for NeverListened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NeverListened {}

/// The child is killed when the tool dies (kill -9, a second Ctrl-C): Linux's
/// `PR_SET_PDEATHSIG`, tied to the thread that spawns it.
fn die_with_the_tool(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
        let parent = unsafe { libc::getpid() };
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                // The tool may have died before the line above: then nobody will stop us.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

impl ServerBinary {
    /// Resolves `binary` (or `redis-server` from PATH) and asks it for its version, within
    /// [`VERSION_LIMIT`].
    pub fn resolve(binary: Option<&Path>) -> Result<ServerBinary> {
        let path = Self::locate(binary)?;
        let mut cmd = Command::new(&path);
        cmd.arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        die_with_the_tool(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run {} --version", path.display()))?;
        let deadline = Instant::now() + VERSION_LIMIT;
        loop {
            if child
                .try_wait()
                .with_context(|| format!("waiting for {} --version", path.display()))?
                .is_some()
            {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{} --version did not exit within {} s: not a server binary the tool can run",
                    path.display(),
                    VERSION_LIMIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut text = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut text);
        }
        let (flavor, version) = parse_version_line(&text).ok_or_else(|| {
            anyhow!(
                "{} --version printed no Redis or Valkey version: {}",
                path.display(),
                text.trim()
            )
        })?;
        Ok(ServerBinary {
            path,
            flavor,
            version,
        })
    }

    /// The path `binary` (or `redis-server`) names, from PATH for a bare name, without running
    /// it (a dry run runs nothing).
    pub fn locate(binary: Option<&Path>) -> Result<PathBuf> {
        Ok(match binary {
            Some(path) if path.components().count() > 1 => {
                if !path.is_file() {
                    return Err(UsageError::invalid(
                        "--server-bin",
                        path.display(),
                        if path.is_dir() {
                            "a directory, not a server binary"
                        } else {
                            "no such file"
                        },
                    )
                    .into());
                }
                path.to_path_buf()
            }
            Some(name) => find_in_path(name).ok_or_else(|| {
                UsageError::invalid("--server-bin", name.display(), "not found in PATH")
            })?,
            None => find_in_path(Path::new("redis-server")).ok_or_else(|| {
                anyhow!(
                    "redis-server is not installed (not found in PATH): install it (apt-get install redis-server), pass --server-bin PATH, or measure an existing server with --url"
                )
            })?,
        })
    }

    /// The major version number.
    pub fn major(&self) -> u32 {
        self.version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    }

    /// `enable-debug-command` exists from Redis 7.0 (and in every Valkey); before that DEBUG is
    /// always on and the setting is an error at startup.
    pub fn has_enable_debug_command(&self) -> bool {
        self.flavor == ServerFlavor::Valkey || self.major() >= 7
    }
}

/// Parses `Redis server v=7.0.15 sha=...` or `Valkey server v=9.1.2 ...`.
pub fn parse_version_line(text: &str) -> Option<(ServerFlavor, String)> {
    let flavor = if text.starts_with("Valkey") {
        ServerFlavor::Valkey
    } else if text.starts_with("Redis") {
        ServerFlavor::Redis
    } else {
        return None;
    };
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))?;
    Some((flavor, version.to_string()))
}

fn find_in_path(name: &Path) -> Option<PathBuf> {
    let path_var = std::env::var_os("PATH")?;
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Splits one `--server-arg` (`NAME VALUE...`) into the `--NAME VALUE...` arguments
/// redis-server takes; a `""` token stands for an empty value (`save ""`).
pub fn server_arg_tokens(setting: &str) -> Result<Vec<String>, UsageError> {
    let mut words = setting.split_whitespace();
    let name = words
        .next()
        .ok_or_else(|| UsageError::invalid("--server-arg", setting, "expected \"NAME VALUE\""))?;
    let name = name.trim_start_matches("--");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(UsageError::invalid(
            "--server-arg",
            setting,
            "expected \"NAME VALUE\" with a setting name such as maxmemory",
        ));
    }
    let lower = name.to_ascii_lowercase().replace('_', "-");
    if let Some(why) = refused_setting(&lower, setting) {
        return Err(UsageError::invalid("--server-arg", setting, why));
    }
    let mut tokens = vec![format!("--{name}")];
    for word in words {
        tokens.push(if word == "\"\"" || word == "''" {
            String::new()
        } else {
            word.to_string()
        });
    }
    Ok(tokens)
}

/// Why a `--server-arg` setting is refused, before anything starts: the tool runs the server it
/// starts in the foreground as its child (killed with it), in a temporary directory it removes,
/// on a port it chose, and reads its log there. A setting that detaches the server
/// (`daemonize`: it outlived the tool), moves or adds its files elsewhere (`dir`, `logfile`,
/// `pidfile`, `unixsocket`, a cluster config file with a path), moves its port, or loads a
/// file that could do any of these (`include`) would leave a server or files behind.
fn refused_setting(name: &str, setting: &str) -> Option<String> {
    const REFUSED: &[&str] = &[
        "daemonize",
        "dir",
        "logfile",
        "pidfile",
        "include",
        "port",
        "unixsocket",
    ];
    let with_path = matches!(
        name,
        "cluster-config-file" | "dbfilename" | "appendfilename" | "appenddirname"
    ) && setting.contains('/');
    (REFUSED.contains(&name) || with_path).then(|| {
        format!(
            "{name} is set by the tool for the server it starts (in the foreground, as its child, in a temporary directory it removes, on a port it chose); {} are refused, and file names without a path",
            REFUSED.join(", ")
        )
    })
}

/// The prefix of an embedded server's temporary directory.
pub const WORKDIR_PREFIX: &str = "holprobe-server-";
/// In that directory: `PID START` of the tool that made it (START: the process's start time in
/// clock ticks since boot, /proc/PID/stat field 22, so a reused pid is not taken for it).
pub const OWNER_FILE: &str = "holprobe-owner";

/// `PID START` for the process `pid`, or `PID` alone where /proc does not say.
fn owner_stamp(pid: u32) -> String {
    match process_start(pid) {
        Some(start) => format!("{pid} {start}"),
        None => pid.to_string(),
    }
}

/// Field 22 of /proc/PID/stat (after the command's parenthesis, which may hold spaces).
fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Removes the embedded-server directories under `tmp` whose tool is dead (killed with -9:
/// its server died with it, its directory stayed). A directory without an owner file, or
/// whose owner cannot be checked, is left alone.
pub fn remove_stale_workdirs(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_ours = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(WORKDIR_PREFIX));
        if !is_ours {
            continue;
        }
        let Ok(stamp) = fs::read_to_string(path.join(OWNER_FILE)) else {
            continue;
        };
        let mut words = stamp.split_whitespace();
        let Some(pid) = words.next().and_then(|w| w.parse::<u32>().ok()) else {
            continue;
        };
        let start = words.next().and_then(|w| w.parse::<u64>().ok());
        let alive = match (process_start(pid), start) {
            (Some(now), Some(then)) => now == then,
            (Some(_), None) => true,
            (None, _) => !Path::new("/proc/self/stat").exists(),
        };
        if !alive {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// A running server the tool started. Stopped by [`EmbeddedServer::stop`] or on drop.
pub struct EmbeddedServer {
    child: Option<Child>,
    binary: ServerBinary,
    port: u16,
    workdir: Option<tempfile::TempDir>,
    password: Option<String>,
}

impl EmbeddedServer {
    /// Starts `binary` (or `redis-server` from PATH) on a free loopback port, persistence off,
    /// DEBUG enabled for local connections, plus the `--server-arg` settings, and waits until it
    /// answers PING.
    ///
    /// On Linux the server is killed when the thread that called this ends (`PR_SET_PDEATHSIG`),
    /// so that it never outlives a tool that was killed: call it from a thread that lives as
    /// long as the server is wanted (the main thread, not a pool's worker). A `binary` that is a
    /// wrapper script must `exec` the server, or the server itself escapes that signal.
    pub fn start(binary: Option<&Path>, extra_args: &[String]) -> Result<EmbeddedServer> {
        let binary = ServerBinary::resolve(binary)?;
        let mut extra = Vec::new();
        for setting in extra_args {
            extra.extend(server_arg_tokens(setting)?);
        }
        // A port found free can be taken before the server binds it: try a few.
        let mut last_error = None;
        for _attempt in 0..3 {
            match Self::start_once(&binary, &extra) {
                Ok(server) => return Ok(server),
                // Silent for the whole limit: another port would not help, and three tries
                // made a 10 s limit 30 s.
                Err(err) if err.is::<NeverListened>() => return Err(err),
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("could not start the server")))
    }

    fn start_once(binary: &ServerBinary, extra: &[String]) -> Result<EmbeddedServer> {
        remove_stale_workdirs(&std::env::temp_dir());
        let port = free_port()?;
        let workdir = tempfile::Builder::new()
            .prefix(WORKDIR_PREFIX)
            .tempdir()
            .context("creating the server's temporary directory")?;
        // Whose it is, for the next start to tell a dead tool's directory from a live one's.
        let _ = fs::write(
            workdir.path().join(OWNER_FILE),
            owner_stamp(std::process::id()),
        );
        let log = workdir.path().join("server.log");
        let mut cmd = Command::new(&binary.path);
        cmd.arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(workdir.path())
            .arg("--logfile")
            .arg(&log);
        if binary.has_enable_debug_command() {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Its own process group: Ctrl-C in the terminal reaches the tool, which then stops the
        // server itself after saving what was measured.
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        // If the tool dies without stopping it (kill -9, a second Ctrl-C, a crash), the kernel
        // kills the server too: a throwaway server must never outlive its tool, holding its
        // memory and port. The signal comes when the thread that started the server ends, so
        // start it from a thread that lives as long as the server is wanted (the main thread,
        // or the test's own).
        die_with_the_tool(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", binary.path.display()))?;
        let password = extra
            .windows(2)
            .rev()
            .find(|pair| pair[0] == "--requirepass")
            .map(|pair| pair[1].clone());
        let mut server = EmbeddedServer {
            child: Some(child),
            binary: binary.clone(),
            port,
            workdir: Some(workdir),
            password,
        };
        server.wait_ready(&log)?;
        Ok(server)
    }

    fn wait_ready(&mut self, log: &Path) -> Result<()> {
        let deadline = Instant::now() + LISTEN_LIMIT;
        let mut foreign = None;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("waiting for the server")?
            {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                let log_text = fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = log_text.lines().chain(stderr.lines()).collect();
                let tail = tail[tail.len().saturating_sub(6)..].join("\n  ");
                self.child = None;
                bail!(
                    "{} exited at startup ({status}):\n  {tail}",
                    self.binary.path.display()
                );
            }
            // Any reply counts, NOAUTH included (a --server-arg may set requirepass), but only
            // from the server started: the port was free when chosen, and another process
            // (another tool's or test's server) can take it before this one listens.
            if answers_ping(self.port) {
                match self.answering_pid() {
                    Some(pid) if !self.started(pid) => foreign = Some(pid),
                    _ => return Ok(()),
                }
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(NeverListened(format!(
                    "{} did not answer PING on port {} within {} s{}",
                    self.binary.path.display(),
                    self.port,
                    LISTEN_LIMIT.as_secs(),
                    foreign.map_or(String::new(), |pid| format!(
                        " (another process, pid {pid}, took the port and answers there)"
                    ))
                ))
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The pid of the server answering on its port, as that server says (`INFO server`);
    /// `None` where it cannot be asked (a password it was not given, a server that does not
    /// say).
    fn answering_pid(&self) -> Option<u32> {
        let mut conn = self.conn_info().redis_connection().ok()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
        super::info_field(&info, "process_id")?.trim().parse().ok()
    }

    /// `pid` is the process started, or runs under it (a wrapper script that starts the
    /// server without `exec`). Where the process tree cannot be read, any pid is taken as ours.
    fn started(&self, pid: u32) -> bool {
        let Some(child) = self.child.as_ref().map(Child::id) else {
            return true;
        };
        let mut at = pid;
        for _ in 0..64 {
            if at == child {
                return true;
            }
            let Ok(stat) = fs::read_to_string(format!("/proc/{at}/stat")) else {
                return !Path::new("/proc/self/stat").exists();
            };
            // `pid (comm) state ppid ...`: comm may hold spaces, so read after its last ')'.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            match parent {
                Some(parent) if parent > 1 => at = parent,
                _ => return false,
            }
        }
        false
    }

    /// How to connect to it (with the password, when a `--server-arg` set `requirepass`).
    pub fn conn_info(&self) -> ConnInfo {
        let mut info = ConnInfo::loopback(self.port);
        info.password = self.password.clone();
        info
    }

    /// The binary it runs.
    pub fn binary(&self) -> &ServerBinary {
        &self.binary
    }

    /// Its TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its directory.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
        }
        if let Some(dir) = self.workdir.take() {
            let _ = dir.close();
        }
    }
}

impl Drop for EmbeddedServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn terminate(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // The server leads its own process group (see `start_once`): signal the whole group, so a
    // wrapper script given as --server-bin takes its server down with it.
    #[cfg(unix)]
    // SAFETY: kill(2) with a process group we created and a valid signal number.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    #[cfg(unix)]
    // SAFETY: as above.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether something on the loopback `port` answers a PING with any reply (an error too): the
/// server is up. A plain socket, so that starting a server needs nothing of the RESP layer.
fn answers_ping(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    ) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 1];
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && matches!(stream.read(&mut reply), Ok(1))
        && matches!(reply[0], b'+' | b'-')
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a dead tool's directory goes: one whose owner lives (this process), or that names
    /// no owner (a version before owner files), stays.
    #[test]
    fn stale_workdirs_are_those_of_dead_tools_only() {
        let tmp = tempfile::tempdir().unwrap();
        let make = |name: &str, owner: Option<String>| {
            let dir = tmp.path().join(format!("{WORKDIR_PREFIX}{name}"));
            fs::create_dir(&dir).unwrap();
            if let Some(owner) = owner {
                fs::write(dir.join(OWNER_FILE), owner).unwrap();
            }
            dir
        };
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = gone.id();
        gone.wait().unwrap();
        let dead = make("dead", Some(format!("{dead_pid} 1")));
        let reused = make("reused", Some(format!("{} 1", std::process::id())));
        let live = make("live", Some(owner_stamp(std::process::id())));
        let unknown = make("unknown", None);
        remove_stale_workdirs(tmp.path());
        assert!(!dead.exists() && !reused.exists());
        assert!(live.exists() && unknown.exists());
    }

    #[test]
    fn version_lines() {
        assert_eq!(
            parse_version_line("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0"),
            Some((ServerFlavor::Redis, "7.0.15".into()))
        );
        assert_eq!(
            parse_version_line("Valkey server v=9.1.2 sha=0 malloc=libc bits=64"),
            Some((ServerFlavor::Valkey, "9.1.2".into()))
        );
        assert_eq!(parse_version_line("hello"), None);
    }

    #[test]
    fn server_args_split() {
        assert_eq!(
            server_arg_tokens("maxmemory 1gb").unwrap(),
            vec!["--maxmemory", "1gb"]
        );
        assert_eq!(server_arg_tokens("save \"\"").unwrap(), vec!["--save", ""]);
        assert_eq!(
            server_arg_tokens("save 60 1").unwrap(),
            vec!["--save", "60", "1"]
        );
        assert!(server_arg_tokens("").is_err());
        assert!(server_arg_tokens("bad;name 1").is_err());
    }
}
