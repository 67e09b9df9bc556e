//! Serves a router on a TCP listener, as plain HTTP or over TLS, HTTP/1.1 and HTTP/2 (or
//! HTTP/2 alone, for gRPC).
//! A connection must deliver each request's headers (and its TLS handshake) within a
//! deadline, and take what is written to it (a write that makes no progress for the write
//! timeout closes it), so slow clients cannot hold connections open. Whatever the protocol,
//! a connection with no request in flight for the idle timeout is closed, one whose client
//! stops taking a response (HTTP/2 flow control) is closed after the write timeout, and at
//! most `max_connections` are open (see `connections`). On shutdown no new connection is
//! accepted and open streams may finish for a grace period.

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
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::connections::{self, Admitted, Closed, Refused, Registry};

/// How the listener is served.
pub struct Options {
    /// `Some`: HTTPS only on this listener.
    pub tls: Option<TlsAcceptor>,
    /// HTTP/2 only (gRPC): browsers never speak it in the clear, so no web page can send
    /// requests here.
    pub http2_only: bool,
    /// Deadline for a request's headers, and for the TLS handshake.
    pub header_timeout: Duration,
    /// Longest a write to the client may make no progress before the connection closes.
    pub write_timeout: Duration,
    /// A connection with no request in flight this long is closed.
    pub idle_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one client address (0: no cap of its own).
    pub max_connections_per_address: usize,
    /// After the shutdown signal, how long open connections may go on.
    pub grace: Duration,
}

impl Options {
    /// The options `server`'s settings give a listener (deadlines, grace), with `tls`.
    pub fn new(
        server: &crate::config::ServerSettings,
        tls: Option<TlsAcceptor>,
        http2_only: bool,
    ) -> Self {
        Self {
            tls,
            http2_only,
            header_timeout: server.header_read_timeout,
            write_timeout: server.write_timeout,
            idle_timeout: server.idle_timeout,
            max_connections: server.max_connections,
            max_connections_per_address: server.connections_per_address(),
            grace: server.shutdown_grace,
        }
    }
}

/// The connection builders: one that tells HTTP/1 from HTTP/2 by what the client sends
/// (over TLS too, whatever ALPN chose), and one for HTTP/2 alone.
struct Builders {
    detect: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
    /// Serve with `http2` alone.
    http2_only: bool,
}

/// What every connection of a listener shares.
struct Shared {
    router: Router,
    tls: Option<TlsAcceptor>,
    builders: Builders,
    header_timeout: Duration,
    write_timeout: Duration,
    /// Becomes `true` when the listener shuts down.
    shutdown: watch::Receiver<bool>,
}

/// How long a connection the gateway closes may take to say goodbye (HTTP/2 GOAWAY,
/// the end of the response being written) before it is dropped.
const GOODBYE: Duration = Duration::from_secs(1);

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
    // Pings find peers that vanished in the middle of a long answer.
    detect
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(options.idle_timeout))
        .keep_alive_timeout(options.write_timeout);
    let (stop, stopped) = watch::channel(false);
    let shared = Arc::new(Shared {
        router,
        tls: options.tls.clone(),
        builders: Builders {
            http2: detect.clone().http2_only(),
            detect,
            http2_only: options.http2_only,
        },
        header_timeout: options.header_timeout,
        write_timeout: options.write_timeout,
        shutdown: stopped,
    });
    let registry = Registry::new(connections::Limits {
        max: options.max_connections,
        per_address: options.max_connections_per_address,
        idle_timeout: options.idle_timeout,
        write_timeout: options.write_timeout,
    });
    let sweeper = tokio::spawn(registry.clone().sweep());
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = async {
                registry.room().await;
                listener.accept().await
            } => match accepted {
                Ok(c) => c,
                Err(e) => {
                    accept_failed(e, &registry).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let admitted = match registry.admit(Some(remote.ip())) {
            Ok(admitted) => admitted,
            Err(Refused::Full) => {
                tracing::warn!(%remote, open = registry.len(), "connection refused: every open connection is busy (server.max_connections)");
                continue;
            }
            Err(Refused::Address) => {
                tracing::warn!(%remote, open = registry.len(), "connection refused: every connection this address holds is busy (server.max_connections_per_address)");
                continue;
            }
        };
        // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm and the client's
        // delayed ACK hold each one back for up to 40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        connections.spawn(connection(tcp, remote, shared.clone(), admitted));
    }
    drop(listener);
    tracing::info!(
        grace_secs = options.grace.as_secs(),
        "shutting down: no new connections, open streams may finish"
    );
    let _ = stop.send(true);
    let drained = tokio::time::timeout(options.grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("grace period over: closing the streams still open");
    }
    connections.shutdown().await;
    sweeper.abort();
    Ok(())
}

/// Per-connection accept errors are the client's. Out of file descriptors, the
/// connection idle longest is closed to make room; other errors pass with time, so wait a
/// little before accepting again.
async fn accept_failed(e: io::Error, registry: &Registry) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, open = registry.len(), "accepting a connection failed");
    let out_of_files = matches!(e.raw_os_error(), Some(23 | 24));
    if out_of_files && registry.evict_idlest() {
        registry.room().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        return;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn connection(tcp: TcpStream, remote: SocketAddr, shared: Arc<Shared>, admitted: Admitted) {
    let conn = admitted.connection.clone();
    let router = shared.router.clone();
    let service = hyper::service::service_fn(move |mut req: axum::http::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(remote));
        let flight = conn.start();
        let call = router.clone().oneshot(req);
        async move {
            let response = call.await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| connections::track(body, flight)))
        }
    });
    let mut shutdown = shared.shutdown.clone();
    let builders = &shared.builders;
    // The connection, as HTTP/2 alone or as whatever the client speaks, until it ends, the
    // gateway closes it (idle, stalled, evicted) or the listener shuts down.
    // (`serve_connection_with_upgrades` would ignore the builder's version.)
    macro_rules! serve_on {
        ($io:expr) => {{
            let io = TokioIo::new($io);
            if builders.http2_only {
                let conn = builders.http2.serve_connection(io, service);
                drive!(conn)
            } else {
                let conn = builders.detect.serve_connection_with_upgrades(io, service);
                drive!(conn)
            }
        }};
    }
    macro_rules! drive {
        ($conn:expr) => {{
            let conn = $conn;
            tokio::pin!(conn);
            tokio::select! {
                served = conn.as_mut() => served,
                why = admitted.connection.closed() => {
                    tracing::debug!(%remote, reason = ?why, "closing the connection");
                    conn.as_mut().graceful_shutdown();
                    let wait = if why == Closed::Idle { GOODBYE } else { Duration::ZERO };
                    tokio::time::timeout(wait, conn.as_mut()).await.unwrap_or(Ok(()))
                }
                () = stopping(&mut shutdown) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            }
        }};
    }
    let deadline = shared.header_timeout;
    let served = match &shared.tls {
        None => {
            // Until the first bytes tell HTTP/1 from HTTP/2, no header deadline runs.
            let known = tokio::select! {
                known = tokio::time::timeout(deadline, protocol_known(&tcp)) => known,
                _ = admitted.connection.closed() => return,
            };
            if !matches!(known, Ok(Ok(true))) {
                tracing::debug!(%remote, "connection closed: no request in time");
                return;
            }
            serve_on!(WriteDeadline::new(tcp, shared.write_timeout))
        }
        Some(acceptor) => {
            let io = WriteDeadline::new(tcp, shared.write_timeout);
            let stream = match tokio::time::timeout(deadline, acceptor.accept(io)).await {
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
            serve_on!(stream)
        }
    };
    if let Err(e) = served {
        tracing::debug!(%remote, error = %e, "connection ended with an error");
    }
}

/// Resolves when the listener shuts down.
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
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

/// A connection whose writes must make progress: one that can make none for `limit` (the
/// client takes nothing: its buffers are full) fails, and the server closes the
/// connection, dropping whatever it was sending.
struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed when a write could not go through; cleared when one does.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// What a pending write becomes: still pending, or, past the deadline, an error.
    fn pending<T>(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<T>> {
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing for the write timeout",
            ))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        done: std::task::Poll<io::Result<T>>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<T>> {
        match done {
            std::task::Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let this = self.get_mut();
        let done = std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(done, cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        let this = self.get_mut();
        let done = std::pin::Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(done, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = self.get_mut();
        let done = std::pin::Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(done, cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that reads nothing makes writes fail after the limit; one that reads keeps
    /// them going however long it all takes.
    #[tokio::test]
    async fn writes_must_make_progress() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut conn = WriteDeadline::new(ours, Duration::from_millis(200));
        let started = std::time::Instant::now();
        let e = conn.write_all(&[7u8; 64 * 1024]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));

        let (ours, mut slow) = tokio::io::duplex(1024);
        let mut conn = WriteDeadline::new(ours, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 512];
            while got < 16 * 1024 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                got += slow.read(&mut buf).await.unwrap();
            }
            got
        });
        conn.write_all(&[7u8; 16 * 1024]).await.unwrap();
        assert!(reader.await.unwrap() >= 16 * 1024);
        drop(theirs.read(&mut [0u8; 1]).await);
    }
}
