//! Two proxies with no gateway in them, built from the crates the gateway is built on: the
//! floor of the Rust HTTP stack, measured beside nginx's in the same run.
//!
//! * `hyper`: hyper's HTTP/1 server, one task per connection, each request sent on through
//!   hyper-util's pooled client with its body as it came, the upstream's response body
//!   passed back (a stream's in batches, below). Nothing is parsed but the HTTP itself.
//! * `axum`: axum's router in front of reqwest, the two the gateway uses (served by
//!   `axum::serve`; the gateway serves its router through hyper-util's connection builder
//!   instead): the request's body read whole (as the gateway reads it), posted to the
//!   upstream, the answer streamed back with its status and content type.
//!
//! A streamed answer's events ready at once are written as one, in both ([`batched`]).
//! The upstream's connection hands its body over one chunk (one event) at a time, a round
//! of the scheduler apart; passed on as they come, each event was a write of its own (26
//! `writev` calls for a 20-token stream, the upstream request among them, counted with
//! strace; the gateway made 5), where nginx writes what its buffer holds and the gateway
//! joins what is ready within a round.
//!
//! Each runs in its own process, the bench's executable started again with
//! `SIDE_BY_SIDE_FLOOR_ROLE=hyper|axum` (see `main`), on the target's CPU, with the same runtime as the
//! gateway's (`Runtime::new`: one worker thread on one CPU) and the same allocator
//! (mimalloc, this binary's global allocator). No timeouts, no limits, no logs: a floor,
//! not a server to deploy.

use std::net::SocketAddr;

use assist_gateway::serve::round::HoldBack;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use bytes::BytesMut;
use futures::{StreamExt, TryStreamExt};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::uri::{Authority, Scheme};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyDataStream, Either, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::*;

/// The environment variable that makes the bench's executable a floor proxy.
/// (Not a `BENCH_*` name: those are the bench's settings, and this one is set by the bench
/// itself, on the floor's own command only.)
pub(crate) const ROLE: &str = "SIDE_BY_SIDE_FLOOR_ROLE";
const UPSTREAM: &str = "SIDE_BY_SIDE_FLOOR_UPSTREAM";
const PORT: &str = "SIDE_BY_SIDE_FLOOR_PORT";

/// When this process was started as a floor proxy: serves until killed, and never returns.
pub(crate) fn serve_if_asked() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let upstream: SocketAddr = std::env::var(UPSTREAM).unwrap().parse().unwrap();
    let port: u16 = std::env::var(PORT).unwrap().parse().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        match role.as_str() {
            "hyper" => hyper_proxy(listener, upstream).await,
            "axum" => axum_proxy(listener, upstream).await,
            other => panic!("{ROLE}={other:?}: hyper or axum"),
        }
    });
    std::process::exit(0);
}

/// Starts the floor proxy `role` in front of `upstream`, on `cpus`.
pub(crate) async fn start_floor(
    role: &'static str,
    upstream: &ScriptedUpstream,
    cpus: Option<&str>,
) -> Target {
    let port = free_port();
    let mut cmd = command_on(cpus, std::env::current_exe().unwrap());
    cmd.env(ROLE, role)
        .env(UPSTREAM, upstream.addr.to_string())
        .env(PORT, port.to_string())
        .stdin(Stdio::null());
    let mut proc_ = Proc::spawn(role, &mut cmd);
    let url = format!("http://127.0.0.1:{port}");
    // Through the proxy to the upstream: proxying works, not only the listener.
    wait_ok(&format!("{url}/v1/models"), 30, &mut proc_).await;
    Target {
        name: match role {
            "hyper" => "hyper floor",
            _ => "axum + reqwest floor",
        },
        url: format!("{url}/v1/chat/completions"),
        model: UPSTREAM_MODEL.to_string(),
        server: Server::Floor(proc_),
    }
}

async fn hyper_proxy(listener: TcpListener, upstream: SocketAddr) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector);
    let authority: Authority = upstream.to_string().parse().unwrap();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (client, authority) = (client.clone(), authority.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                let mut uri = std::mem::take(req.uri_mut()).into_parts();
                uri.scheme = Some(Scheme::HTTP);
                uri.authority = Some(authority.clone());
                *req.uri_mut() = Uri::from_parts(uri).unwrap();
                // The upstream's own Host, as the gateway and nginx send (hyper-util's
                // client adds it from the URI when there is none).
                req.headers_mut().remove(HOST);
                let answer = client.request(req);
                async move {
                    let answer = answer.await?;
                    // A whole answer (its length known) goes on as it came.
                    if answer.headers().contains_key(CONTENT_LENGTH) {
                        return Ok(answer.map(Either::Left));
                    }
                    Ok::<_, hyper_util::client::legacy::Error>(answer.map(|body| {
                        let frames = batched(BodyDataStream::new(body)).map_ok(Frame::data);
                        Either::Right(StreamBody::new(frames))
                    }))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

struct Forward {
    client: reqwest::Client,
    /// `http://upstream`, the request's path appended.
    base: String,
    /// The chat path's URL, parsed once (as the gateway keeps its upstream's URLs).
    chat: reqwest::Url,
}

async fn axum_proxy(listener: TcpListener, upstream: SocketAddr) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let base = format!("http://{upstream}");
    let chat = format!("{base}/v1/chat/completions").parse().unwrap();
    let state = Arc::new(Forward { client, base, chat });
    let app = axum::Router::new().fallback(forward).with_state(state);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await.unwrap();
}

async fn forward(State(f): State<Arc<Forward>>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let url = match parts.uri.path() {
        "/v1/chat/completions" => f.chat.clone(),
        path => match format!("{}{path}", f.base).parse() {
            Ok(url) => url,
            Err(_) => return StatusCode::BAD_REQUEST.into_response(),
        },
    };
    let mut up = f.client.request(parts.method, url).body(body);
    if let Some(kind) = parts.headers.get(CONTENT_TYPE) {
        up = up.header(CONTENT_TYPE, kind);
    }
    let Ok(answer) = up.send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::builder().status(answer.status());
    if let Some(kind) = answer.headers().get(CONTENT_TYPE) {
        response = response.header(CONTENT_TYPE, kind);
    }
    let body = if answer.headers().contains_key(CONTENT_LENGTH) {
        Body::from_stream(answer.bytes_stream())
    } else {
        Body::from_stream(batched(answer.bytes_stream()))
    };
    response
        .body(body)
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// A streamed body's pieces, those ready at once joined into one: after a piece, a round
/// of the scheduler (the tasks already woken run first, the upstream's connection among
/// them) and what came in it joins the batch, again while rounds bring more; a round that
/// brings nothing sends it, and so does one that grew past [`MAX_BATCH_BYTES`]. The least
/// that writes a burst of events in one write, as the gateway does (`serve::chat::Watched`,
/// with the same [`HoldBack`] and bound); a piece's error ends the body after the batch
/// before it.
/// Most bytes a batch may grow to before it is sent (the gateway's bound).
const MAX_BATCH_BYTES: usize = 64 * 1024;

struct Batched<S, E> {
    pieces: S,
    batch: Option<BytesMut>,
    failed: Option<E>,
    ended: bool,
    hold: HoldBack,
}

fn batched<S, E>(pieces: S) -> Batched<S, E> {
    Batched {
        pieces,
        batch: None,
        failed: None,
        ended: false,
        hold: HoldBack::default(),
    }
}

impl<S, E> futures::Stream for Batched<S, E>
where
    S: futures::Stream<Item = Result<Bytes, E>> + Unpin,
    E: Unpin,
{
    type Item = Result<Bytes, E>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = &mut *self;
        let mut grew = false;
        let full =
            |batch: &Option<BytesMut>| batch.as_ref().is_some_and(|b| b.len() >= MAX_BATCH_BYTES);
        while !this.ended && !full(&this.batch) {
            match this.pieces.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(piece))) => {
                    grew = true;
                    this.batch.get_or_insert_default().extend_from_slice(&piece);
                }
                Poll::Ready(Some(Err(e))) => {
                    this.failed = Some(e);
                    this.ended = true;
                }
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => break,
            }
        }
        if !this.ended && this.batch.is_some() && !full(&this.batch) && this.hold.hold(grew, cx) {
            return Poll::Pending;
        }
        this.hold.release();
        if let Some(batch) = this.batch.take() {
            return Poll::Ready(Some(Ok(batch.freeze())));
        }
        match this.failed.take() {
            Some(e) => Poll::Ready(Some(Err(e))),
            None if this.ended => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}
