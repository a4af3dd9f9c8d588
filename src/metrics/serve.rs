//! `GET /metrics` over HTTP (tiny_http), on a thread of its own. The address is bound before the
//! run starts, so a busy or bad one is refused before anything is started or sent; requests that
//! come before the run serves wait in tiny_http's queue. The thread is stopped and joined when
//! the run ends, also on an error (the guard stops it as it drops).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tiny_http::{Header, Method, Request, Response, Server};

use super::{Format, encode};

/// The path the metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// A bound metrics endpoint, not serving yet.
pub struct MetricsServer {
    server: Server,
    addr: SocketAddr,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MetricsServer {
    /// Listens on `addr` (port 0: a free one).
    pub fn bind(addr: SocketAddr) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let server = Server::from_listener(listener, None).map_err(io::Error::other)?;
        Ok(MetricsServer { server, addr })
    }

    /// The address it listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}{METRICS_PATH}", self.addr)
    }

    /// Serves `registry` until the returned guard is stopped or dropped.
    pub fn serve(self, registry: Registry) -> io::Result<MetricsServing> {
        let server = Arc::new(self.server);
        let stopping = Arc::new(AtomicBool::new(false));
        let handle = {
            let server = Arc::clone(&server);
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("holprobe-metrics".into())
                .spawn(move || serve_loop(&server, &registry, &stopping))?
        };
        Ok(MetricsServing {
            server,
            stopping,
            handle: Some(handle),
            addr: self.addr,
        })
    }
}

/// The serving thread; stops it and closes the port when stopped or dropped.
pub struct MetricsServing {
    server: Arc<Server>,
    stopping: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for MetricsServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServing")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MetricsServing {
    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and joins the thread; the listening socket closes as the server drops.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.stopping.store(true, Ordering::Release);
            self.server.unblock();
            let _ = handle.join();
        }
    }
}

impl Drop for MetricsServing {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn serve_loop(server: &Server, registry: &Registry, stopping: &AtomicBool) {
    loop {
        match server.recv() {
            Ok(request) => respond(request, registry),
            Err(_) if stopping.load(Ordering::Acquire) => return,
            // A failed accept (out of file descriptors): tiny_http goes on accepting; do not
            // spin on a run of them.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn respond(request: Request, registry: &Registry) {
    let path = request.url().split('?').next().unwrap_or_default();
    let readable = matches!(request.method(), Method::Get | Method::Head);
    let response = if path != METRICS_PATH {
        text_response(404, "not found: the metrics are at /metrics\n")
    } else if !readable {
        text_response(405, "only GET (or HEAD) /metrics\n")
    } else {
        let accept = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Accept"))
            .map(|h| h.value.as_str());
        let format = Format::for_accept(accept);
        match encode(registry, format) {
            Ok(body) => with_content_type(Response::from_string(body), format.content_type()),
            Err(_) => text_response(500, "could not encode the metrics\n"),
        }
    };
    // The scraper may have gone: nothing to do about it.
    let _ = request.respond(response);
}

fn text_response(status: u16, text: &str) -> Response<io::Cursor<Vec<u8>>> {
    Response::from_string(text).with_status_code(status)
}

fn with_content_type(
    response: Response<io::Cursor<Vec<u8>>>,
    content_type: &str,
) -> Response<io::Cursor<Vec<u8>>> {
    match Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()) {
        Ok(header) => response.with_header(header),
        Err(()) => response,
    }
}

/// True when only this host can reach `addr`.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    use super::super::RunMetrics;
    use super::*;

    fn get(addr: SocketAddr, path: &str) -> io::Result<String> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(stream, "GET {path} HTTP/1.0\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    }

    #[test]
    fn serves_metrics_then_closes_the_port_when_stopped() {
        let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        assert_eq!(server.url(), format!("http://{addr}/metrics"));
        let (registry, metrics) = RunMetrics::register("127.0.0.1:6379");
        let serving = server.serve(registry).unwrap();
        metrics.observe_probe(&crate::record::ProbeRecord {
            thread: 0,
            seq: 0,
            cmd: crate::record::ProbeCmd::Ping,
            intended_us: 0,
            sent_us: 0,
            reply_us: Some(50),
            latency_us: Some(50),
            ok: true,
            error: None,
            read_us: Some(50),
        });
        let reply = get(addr, "/metrics").unwrap();
        assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
        assert!(reply.contains("text/plain; version=0.0.4"), "{reply}");
        assert!(
            reply.contains("holprobe_probes_total{target=\"127.0.0.1:6379\"} 1"),
            "{reply}"
        );
        let missing = get(addr, "/").unwrap();
        assert!(missing.starts_with("HTTP/1.0 404"), "{missing}");

        let started = Instant::now();
        serving.stop();
        assert!(started.elapsed() < Duration::from_secs(2));
        // tiny_http's accept thread lets go of the socket just after: allow it a moment.
        let deadline = Instant::now() + Duration::from_secs(2);
        while TcpStream::connect(addr).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{addr} still accepts connections"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_busy_address_is_refused() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = MetricsServer::bind(taken.local_addr().unwrap()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn loopback_is_told_apart() {
        assert!(is_loopback(&"127.0.0.1:9464".parse().unwrap()));
        assert!(is_loopback(&"[::1]:9464".parse().unwrap()));
        assert!(!is_loopback(&"0.0.0.0:9464".parse().unwrap()));
        assert!(!is_loopback(&"192.0.2.7:9464".parse().unwrap()));
    }
}
