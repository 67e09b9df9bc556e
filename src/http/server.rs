//! Serves the router on a TCP listener, as plain HTTP or over TLS, HTTP/1.1 and HTTP/2.
//! A connection must deliver each request's headers (and its TLS handshake) within a
//! deadline, so slow clients cannot hold connections open; on shutdown no new connection
//! is accepted and open streams may finish for a grace period.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// How the listener is served.
pub struct Options {
    /// `Some`: HTTPS only on this listener.
    pub tls: Option<TlsAcceptor>,
    /// Deadline for a request's headers, and for the TLS handshake.
    pub header_timeout: Duration,
    /// After the shutdown signal, how long open connections may go on.
    pub grace: Duration,
}

/// The connection builders: one that detects the protocol (plain HTTP), and one per
/// protocol that TLS's ALPN chose.
struct Builders {
    detect: Builder<TokioExecutor>,
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
}

/// Serves `router` until `shutdown` resolves, then for at most `options.grace` more.
pub async fn run(
    listener: TcpListener,
    router: Router,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut detect = Builder::new(TokioExecutor::new());
    detect
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout);
    detect.http2().timer(TokioTimer::new());
    let builders = Arc::new(Builders {
        http1: detect.clone().http1_only(),
        http2: detect.clone().http2_only(),
        detect,
    });
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm and the client's
        // delayed ACK hold each one back for up to 40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        connections.spawn(connection(
            tcp,
            remote,
            router.clone(),
            options.tls.clone(),
            builders.clone(),
            options.header_timeout,
            graceful.watcher(),
        ));
    }
    drop(listener);
    tracing::info!(
        grace_secs = options.grace.as_secs(),
        "shutting down: no new connections, open streams may finish"
    );
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(options.grace) => {
            tracing::warn!("grace period over: closing the streams still open");
        }
    }
    connections.shutdown().await;
    Ok(())
}

/// Per-connection accept errors are the client's; others (out of file descriptors) pass
/// with time, so wait a little before accepting again.
async fn accept_failed(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn connection(
    tcp: TcpStream,
    remote: SocketAddr,
    router: Router,
    tls: Option<TlsAcceptor>,
    builders: Arc<Builders>,
    deadline: Duration,
    watcher: Watcher,
) {
    let service = TowerToHyperService::new(router.map_request(
        move |mut req: axum::http::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(remote));
            req
        },
    ));
    let served = match tls {
        None => {
            // Until the first bytes tell HTTP/1 from HTTP/2, no header deadline runs.
            if !matches!(
                tokio::time::timeout(deadline, protocol_known(&tcp)).await,
                Ok(Ok(true))
            ) {
                tracing::debug!(%remote, "connection closed: no request in time");
                return;
            }
            let conn = builders
                .detect
                .serve_connection_with_upgrades(TokioIo::new(tcp), service);
            watcher.watch(conn).await
        }
        Some(acceptor) => {
            let stream = match tokio::time::timeout(deadline, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake not finished in time");
                    return;
                }
            };
            let builder = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                &builders.http2
            } else {
                &builders.http1
            };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            watcher.watch(conn).await
        }
    };
    if let Err(e) = served {
        tracing::debug!(%remote, error = %e, "connection ended with an error");
    }
}

/// Waits until the client sent enough to tell HTTP/1 from HTTP/2's preface; `false` if it
/// closed the connection first.
async fn protocol_known(tcp: &TcpStream) -> io::Result<bool> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let n = tcp.peek(&mut buf).await?;
        if n == 0 {
            return Ok(false);
        }
        if n == PREFACE.len() || !PREFACE.starts_with(&buf[..n]) {
            return Ok(true);
        }
        // A prefix of the preface: more is on its way (peek returns at once from now on).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
