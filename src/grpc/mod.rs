//! The gRPC surface: the reference's own service, `brunix.AssistanceEngine`
//! (`proto/brunix.proto`), with server reflection and `grpc.health.v1.Health`, served on
//! its own address (`grpc.addr`) beside HTTP. It shares the app state: the same pipeline
//! and chat flow, sessions, knowledge, keys, rate limits and metrics. A request is a
//! dialect like any other: its parser makes a `ChatTurn`, its renderer makes messages.
//!
//! Only HTTP/2 is served here (plain, or over TLS with the HTTP certificate and `h2` alone
//! offered), and only gRPC requests without an `Origin` header are taken, so a web page
//! in a browser cannot send requests to it. Keys and rate limits are checked on the
//! request's headers, before its body is read; a body must keep arriving
//! (`server.body_read_timeout_secs` between pieces).

pub mod codec;
mod engine;
mod health;

use std::future::Future;

use axum::extract::Request;
use axum::http::header::{CONTENT_TYPE, ORIGIN};
use axum::middleware::Next;
use axum::response::Response;
use futures::FutureExt;
use tokio::net::TcpListener;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::serve::{listener, tls, AppState};

/// The types and service code generated from `proto/brunix.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("brunix");

    /// The proto's descriptors, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/brunix_descriptor.bin"));
}

/// The service name, as clients and health checks name it.
pub const SERVICE: &str = "brunix.AssistanceEngine";

/// Every gRPC service the gateway serves, as one router; `stopping` resolves when the
/// server shuts down (health watches end then).
pub fn router(
    state: AppState,
    stopping: impl Future<Output = ()> + Send + 'static,
) -> Result<axum::Router, tonic_reflection::server::Error> {
    let server = &state.settings.server;
    let body_timeout = server.body_read_timeout;
    let max_body = server.max_body_bytes;
    let engine = pb::assistance_engine_server::AssistanceEngineServer::new(engine::Engine::new(
        state.clone(),
    ))
    // Twice the limit: a request over it gets INVALID_ARGUMENT naming the sizes; beyond
    // that it is not read at all.
    .max_decoding_message_size(server.max_body_bytes.saturating_mul(2));
    let engine = tonic::service::interceptor::InterceptedService::new(
        engine,
        engine::Admission::new(&state),
    );
    let health =
        tonic_health::pb::health_server::HealthServer::new(health::Health::new(state, stopping));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    Ok(tonic::service::Routes::new(engine)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .prepare()
        .into_axum_router()
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(axum::middleware::from_fn(move |req, next| {
            over_twice_the_limit(max_body, req, next)
        }))
        .layer(axum::middleware::from_fn(grpc_only)))
}

/// A message over twice `server.max_body_bytes` is not read: tonic answers that
/// `OUT_OF_RANGE`, which the gateway never uses otherwise; it is `RESOURCE_EXHAUSTED`, as
/// gRPC's own servers answer a message over their limit, naming the setting.
async fn over_twice_the_limit(max_body: usize, req: Request, next: Next) -> Response {
    // Health and reflection keep tonic's own limit and words.
    let engine = req.uri().path().starts_with(&format!("/{SERVICE}/"));
    let response = next.run(req).await;
    let out_of_range = engine
        && response
            .headers()
            .get("grpc-status")
            .is_some_and(|v| v.as_bytes() == b"11");
    if !out_of_range {
        return response;
    }
    tonic::Status::resource_exhausted(format!(
        "the request is over twice server.max_body_bytes ({} bytes) and was not read",
        max_body.saturating_mul(2)
    ))
    .into_http()
}

/// Only gRPC requests, and none from a web page (browsers send `Origin` with every
/// cross-site request; gRPC clients never do).
async fn grpc_only(req: Request, next: Next) -> Response {
    if req.headers().contains_key(ORIGIN) {
        return tonic::Status::permission_denied(
            "requests from web pages are not served on the gRPC address",
        )
        .into_http();
    }
    let grpc = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    if !grpc {
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return response;
    }
    next.run(req).await
}

/// Serves gRPC on `listener` until `shutdown` resolves, then lets open calls finish for
/// at most `server.shutdown_grace_secs`; TLS when the HTTP server has it.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = &state.settings.server;
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let tls = tls::http2_acceptor(server).map_err(|e| invalid(e.to_string()))?;
    let options = listener::Options::new(server, tls, true);
    let shutdown = shutdown.shared();
    let router =
        router(state, shutdown.clone()).map_err(|e| invalid(format!("gRPC reflection: {e}")))?;
    listener::run(listener, router, options, shutdown).await
}
