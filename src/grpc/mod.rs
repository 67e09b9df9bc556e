//! The gRPC surface: the reference's own service, `brunix.AssistanceEngine`
//! (`proto/brunix.proto`), with server reflection and `grpc.health.v1.Health`, served on
//! its own address (`grpc.addr`) beside HTTP. It shares the app state: the same pipeline
//! and chat flow, sessions, knowledge, keys, rate limits and metrics. A request is a
//! dialect like any other: its parser makes a `ChatTurn`, its renderer makes messages.
//!
//! Only HTTP/2 is served here (plain or over TLS with the HTTP certificate), so a web
//! page in a browser cannot send requests to it.

mod engine;
mod health;

use std::future::Future;

use tokio::net::TcpListener;

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

/// Every gRPC service the gateway serves, as one router.
pub fn router(state: AppState) -> Result<axum::Router, tonic_reflection::server::Error> {
    let max_message = state.settings.server.max_body_bytes;
    let engine = pb::assistance_engine_server::AssistanceEngineServer::new(engine::Engine::new(
        state.clone(),
    ))
    // Twice the limit: a request over it gets INVALID_ARGUMENT naming the sizes.
    .max_decoding_message_size(max_message.saturating_mul(2));
    let health = tonic_health::pb::health_server::HealthServer::new(health::Health::new(state));
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
        .into_axum_router())
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
    let tls = tls::acceptor(server).map_err(|e| invalid(e.to_string()))?;
    let options = listener::Options {
        tls,
        http2_only: true,
        header_timeout: server.header_read_timeout,
        write_timeout: server.write_timeout,
        grace: server.shutdown_grace,
    };
    let router = router(state).map_err(|e| invalid(format!("gRPC reflection: {e}")))?;
    listener::run(listener, router, options, shutdown).await
}
