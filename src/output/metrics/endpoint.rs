//! `--metrics-addr` and the `/metrics` HTTP server on a thread of its own, its every cost
//! bounded (see the module comment of `metrics`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONNECTION, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::figures::ProbeMetrics;
use crate::error::UsageError;

/// The flag whose value [`MetricsEndpoint::bind`] parses, named in its errors.
pub const FLAG: &str = "--metrics-addr";

/// The path the metrics are served at; every other path is a 404.
pub const METRICS_PATH: &str = "/metrics";

/// The OpenMetrics 1.0 text format's content type, the format Prometheus asks for first and the
/// one prometheus-client's text encoder writes.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once. A scraper needs one; the cap bounds the memory and sockets that
/// a flood of clients can hold. At the cap the oldest connection is closed for the new one:
/// a held-open connection is worth less than a fresh one, which may be the real scraper.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send its request line and headers. A scraper sends them at
/// once; this frees the slot of a client that sends half a request and waits.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a connection may live, reading, answering and writing included. This is the write
/// timeout too: a client that never reads its response is cut off here.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);

/// The most a request line and headers may take (hyper's smallest allowed buffer is 8 KiB); a
/// longer head is refused without being read further.
pub const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;

/// How long [`MetricsEndpoint::shutdown`] waits for the serving thread. It stops within
/// milliseconds (dropping its runtime drops every connection); past this the thread is left to
/// end by itself rather than delay the end of a run.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// The kernel send buffer of each connection (the kernel doubles it for bookkeeping): what a
/// client that never reads can pin in kernel memory, instead of the MBs autotuning grows to. A
/// scrape of a few KB still fits at once; a larger one is written as the scraper reads.
pub const SEND_BUFFER_BYTES: u32 = 128 * 1024;

/// Connections the kernel queues before they are accepted (it caps this at `somaxconn`).
const LISTEN_BACKLOG: u32 = 1024;

/// A pause after a failed accept (out of file descriptors), so the thread does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// Parses a `--metrics-addr` value: `HOST:PORT`, `[IPV6]:PORT`, or `:PORT` / `PORT` alone for
/// `127.0.0.1:PORT` (loopback unless told otherwise: the endpoint has no authentication). A host
/// name is resolved once, here.
pub fn parse_metrics_addr(value: &str) -> Result<SocketAddr, UsageError> {
    const EXPECTED: &str = "expected HOST:PORT, [IPV6]:PORT, :PORT or PORT";
    let invalid = |reason: String| UsageError::invalid(FLAG, value, reason);
    let text = value.trim();
    let bare_port = text.strip_prefix(':').unwrap_or(text);
    if !bare_port.is_empty() && bare_port.bytes().all(|b| b.is_ascii_digit()) {
        let port = parse_port(bare_port).map_err(invalid)?;
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if text.matches(':').count() > 1 && !text.starts_with('[') {
        return Err(invalid(
            "write an IPv6 address in brackets, e.g. [::1]:9090".into(),
        ));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(invalid(EXPECTED.into()));
    };
    if host.is_empty() || host.starts_with('[') {
        return Err(invalid(EXPECTED.into()));
    }
    let port = parse_port(port).map_err(invalid)?;
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|err| invalid(format!("cannot resolve '{host}' ({err})")))?;
    addrs
        .next()
        .ok_or_else(|| invalid(format!("'{host}' resolves to no address")))
}

fn parse_port(text: &str) -> Result<u16, String> {
    text.parse()
        .map_err(|_| format!("the port must be a number from 0 to 65535, not '{text}'"))
}

/// The `/metrics` endpoint: bound, serving on its own thread until shut down or dropped.
#[derive(Debug)]
pub struct MetricsEndpoint {
    local_addr: SocketAddr,
    metrics: Arc<ProbeMetrics>,
    /// Tells the serving thread to stop (dropping it does too).
    stop: Option<oneshot::Sender<()>>,
    /// Disconnected when the serving thread has ended: lets shutdown wait with a time limit,
    /// which `JoinHandle::join` cannot.
    ended: crossbeam_channel::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsEndpoint {
    /// Parses `addr` (see [`parse_metrics_addr`]), listens there and starts serving. Everything
    /// that can fail does so here, before a run starts: a bad value, an address in use or not
    /// this host's, a port below 1024 without the right. Port 0 takes a free port
    /// ([`MetricsEndpoint::local_addr`] tells which).
    pub fn bind(addr: &str) -> Result<MetricsEndpoint, UsageError> {
        let wanted = parse_metrics_addr(addr)?;
        let cannot = |what: &str, err: std::io::Error| {
            UsageError::invalid(FLAG, addr, format!("cannot {what} ({err})"))
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|err| cannot("start the metrics server", err))?;
        let listener = {
            // The listener registers with the runtime that will serve it.
            let _context = runtime.enter();
            listen(wanted).map_err(|err| cannot("listen there", err))?
        };
        let local_addr = listener
            .local_addr()
            .map_err(|err| cannot("listen there", err))?;
        let metrics = Arc::new(ProbeMetrics::new());
        let (stop, stop_rx) = oneshot::channel();
        let (ended_tx, ended) = crossbeam_channel::bounded::<()>(0);
        let serving = Arc::clone(&metrics);
        let thread = std::thread::Builder::new()
            .name("holprobe-metrics".into())
            .spawn(move || {
                runtime.block_on(serve(listener, serving, stop_rx));
                // Dropping the runtime drops every connection's task, closing its socket.
                drop(runtime);
                drop(ended_tx);
            })
            .map_err(|err| cannot("start the metrics thread", err))?;
        Ok(MetricsEndpoint {
            local_addr,
            metrics,
            stop: Some(stop),
            ended,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://ADDR/metrics`, to print for the user.
    pub fn url(&self) -> String {
        format!("http://{}{METRICS_PATH}", self.local_addr)
    }

    /// The metrics it serves; clone the `Arc` to update them from the collector thread.
    pub fn metrics(&self) -> &Arc<ProbeMetrics> {
        &self.metrics
    }

    /// Stops serving and closes the port and every connection. Returns within about
    /// [`SHUTDOWN_WAIT`] whatever the clients do (dropping the endpoint does the same).
    pub fn shutdown(mut self) {
        self.stop_serving();
    }

    fn stop_serving(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            match self.ended.recv_timeout(SHUTDOWN_WAIT) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    // Still busy (it should never be): leave it rather than hold up the run's
                    // end; it cannot keep the process from exiting.
                    drop(thread);
                }
                _ => {
                    let _ = thread.join();
                }
            }
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.stop_serving();
    }
}

/// A listening socket whose accepted connections get a small send buffer (Linux copies it from
/// the listener), so a client that never reads pins at most that much kernel memory, not the
/// several MB autotuning would grow to.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std and tokio do for listeners: a restarted run can take its port back at once.
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(SEND_BUFFER_BYTES)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Accepts connections until told to stop, each served by a task of its own, at most
/// [`MAX_CONNECTIONS`] at once.
async fn serve(listener: TcpListener, metrics: Arc<ProbeMetrics>, mut stop: oneshot::Receiver<()>) {
    let mut open: VecDeque<AbortHandle> = VecDeque::new();
    loop {
        // The stop signal (sent, or its sender dropped) wins over a waiting connection.
        let accepted = poll_fn(|cx| {
            if Pin::new(&mut stop).poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            listener.poll_accept(cx).map(Some)
        })
        .await;
        match accepted {
            None => return,
            Some(Ok((stream, _peer))) => {
                open.retain(|task| !task.is_finished());
                while open.len() >= MAX_CONNECTIONS {
                    if let Some(oldest) = open.pop_front() {
                        oldest.abort();
                    }
                }
                let task = tokio::spawn(serve_connection(stream, Arc::clone(&metrics)));
                open.push_back(task.abort_handle());
            }
            Some(Err(_)) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

/// One connection: one request, answered, then closed; never longer than
/// [`CONNECTION_DEADLINE`].
async fn serve_connection(stream: TcpStream, metrics: Arc<ProbeMetrics>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request: Request<Incoming>| {
        let response = respond(&request, &metrics);
        // The request body is dropped unread: hyper then closes the connection instead of
        // draining it.
        drop(request);
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    // Whatever stops it (deadline, client gone, bad request), the socket closes on return.
    let _ = tokio::time::timeout(CONNECTION_DEADLINE, connection).await;
}

/// The answer to one request: the metrics for `GET`/`HEAD /metrics`, 404 for another path, 405
/// for another method.
fn respond(request: &Request<Incoming>, metrics: &ProbeMetrics) -> Response<Full<Bytes>> {
    let (status, content_type, body) = if request.uri().path() != METRICS_PATH {
        (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n".to_string(),
        )
    } else if !matches!(*request.method(), Method::GET | Method::HEAD) {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET or HEAD /metrics\n".to_string(),
        )
    } else {
        match metrics.encode() {
            Ok(text) => (StatusCode::OK, CONTENT_TYPE_OPENMETRICS, text),
            Err(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                "could not encode the metrics\n".to_string(),
            ),
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    response
}
