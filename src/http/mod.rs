//! The HTTP surface. Each dialect is a router nested under its prefix (`openai` and
//! `responses` under `/v1`, `anthropic` at `/v1/messages`, `ollama` under `/api`, the MCP
//! server at `/mcp`) with its own error shape; every chat dialect runs the one chat flow
//! in `chat`. Around every router: request ids, the access log, CORS, keys and
//! rate limits; and the server that serves it all (plain or TLS).

mod anthropic;
mod auth;
mod body;
mod chat;
mod dialect;
mod embeddings;
mod eval;
#[doc(hidden)]
pub mod fuzzing;
mod health;
pub mod knowledge;
mod limits;
mod mcp;
mod ollama;
mod openai;
mod responses;
mod scrape;
mod sites;
pub(crate) mod sources;
mod stored;
mod usage;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, OriginalUri, Request};
use axum::http::{HeaderMap, HeaderName};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{any, get};
use axum::Router;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

pub use crate::serve::tls::acceptor as tls_acceptor;
pub use crate::serve::AppState;
use crate::serve::{access, listener, tls};
use crate::telemetry;
pub use dialect::{Anthropic, Dialect, Ollama, OpenAi, Responses};

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The whole API: `/v1` (OpenAI), `/api` (Ollama), and the operational routes.
pub fn router(state: AppState) -> Router {
    telemetry::install();
    let guard = Guard {
        sites: sites::Sites::from_settings(&state.settings.server),
        keys: state.keys.clone(),
        limits: state.limits.clone(),
        cors_origins: state.settings.server.cors_origins.clone(),
    };
    // Every key's usage and the knowledge base's control: operators only.
    let operator = Router::new()
        .route("/metrics", get(scrape::metrics))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            knowledge::require_operator,
        ))
        .merge(knowledge::router(&state));
    let operations = Router::new()
        .route("/ready", get(health::ready))
        .route("/", get(health::root))
        .merge(operator)
        .fallback(dialect::not_found::<OpenAi>)
        .method_not_allowed_fallback(dialect::method_not_allowed::<OpenAi>);
    // Liveness: never checked for hosts, keys or limits.
    let liveness = Router::new()
        .route("/health", get(health::health))
        .method_not_allowed_fallback(dialect::method_not_allowed::<OpenAi>)
        .layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn(access_log))
                .layer(cors(&guard.cors_origins)),
        );
    // A nested router answers `/v1` but not `/v1/`: that one in its dialect too.
    guard
        .around::<OpenAi>(operations)
        .nest(
            "/v1",
            guard.around::<OpenAi>(openai::router().merge(responses::router())),
        )
        // Anthropic's routes under `/v1`: its errors, also of the guards, in its shape.
        .merge(guard.around::<Anthropic>(anthropic::router()))
        .nest("/api", guard.around::<Ollama>(ollama::router()))
        .merge(
            guard.around::<OpenAi>(
                Router::new()
                    .nest_service("/mcp", mcp::service(state.clone()))
                    .layer(middleware::from_fn_with_state(
                        (
                            state.settings.server.max_body_bytes,
                            state.settings.server.body_read_timeout,
                        ),
                        mcp::json_rpc_errors,
                    )),
            ),
        )
        .merge(
            guard.around::<OpenAi>(Router::new().route("/v1/", any(dialect::not_found::<OpenAi>))),
        )
        .merge(
            guard.around::<Ollama>(Router::new().route("/api/", any(dialect::not_found::<Ollama>))),
        )
        .merge(liveness)
        .layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn(plain_request_id))
                .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
                .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone())),
        )
        .with_state(state)
}

/// Serves until `shutdown` resolves, then lets open streams finish for at most
/// `server.shutdown_grace_secs`.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = &state.settings.server;
    let tls = tls::acceptor(server)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let options = listener::Options::new(server, tls, false);
    let router = router(state);
    listener::run(listener, router, options, shutdown).await
}

/// What stands around each dialect's routes, outermost first: the access log, the host
/// and origin check, CORS, the key check, the rate limits. Errors come in the dialect's
/// shape.
struct Guard {
    sites: Arc<sites::Sites>,
    keys: Arc<access::Keys>,
    limits: Option<Arc<access::Limits>>,
    cors_origins: Vec<String>,
}

impl Guard {
    fn around<D: Dialect>(&self, routes: Router<AppState>) -> Router<AppState> {
        // One layer of concrete services, not five: each `Router::layer` boxes every
        // route once more, and every request clones each box (an allocation apiece).
        routes.layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn(access_log))
                .layer(middleware::from_fn_with_state(
                    self.sites.clone(),
                    sites::guard::<D>,
                ))
                // Outside the key check: browsers send preflights without credentials.
                .layer(cors(&self.cors_origins))
                .layer(middleware::from_fn_with_state(
                    self.keys.clone(),
                    auth::require_key::<D>,
                ))
                // Inside the key check: only accepted keys are counted.
                .layer(middleware::from_fn_with_state(
                    self.limits.clone(),
                    limits::enforce::<D>,
                )),
        )
    }
}

/// CORS for browser UIs, from `server.cors_origins` (validated at start-up).
fn cors(origins: &[String]) -> tower::util::Either<CorsLayer, tower::layer::util::Identity> {
    use axum::http::{header, Method};
    if origins.is_empty() {
        return tower::util::Either::Right(tower::layer::util::Identity::new());
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    tower::util::Either::Left(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                REQUEST_ID.clone(),
                auth::X_API_KEY.clone(),
                HeaderName::from_static("anthropic-version"),
                HeaderName::from_static("anthropic-beta"),
            ])
            // What a browser UI needs to read back off a 429 to wait before retrying.
            .expose_headers([
                REQUEST_ID.clone(),
                header::RETRY_AFTER,
                limits::LIMIT_REQUESTS.clone(),
                limits::REMAINING_REQUESTS.clone(),
                limits::RESET_REQUESTS.clone(),
            ])
            .max_age(std::time::Duration::from_secs(3600)),
    )
}

/// One log line and the request metrics for every request but a chat request (the chat
/// flow logs those when their answer ends, with TTFT and token counts).
async fn access_log(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    // The whole path, also under a nested router (which sees it without its prefix).
    let path = req
        .extensions()
        .get::<OriginalUri>()
        .map_or(req.uri(), |OriginalUri(uri)| uri)
        .path()
        .to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let request_id = request_id(req.headers());
    let response = next.run(req).await;
    if response.extensions().get::<chat::LoggedAsChat>().is_none() {
        let status = response.status().as_u16();
        telemetry::request(route.into(), status, started.elapsed());
        tracing::info!(
            request_id,
            %method,
            path,
            status,
            latency_ms = started.elapsed().as_secs_f64() * 1e3,
            "request"
        );
    }
    response
}

/// A client's `x-request-id` that is not plain (see `bounds::plain_request_id`) is
/// dropped, so that the gateway makes one of its own.
async fn plain_request_id(mut req: Request, next: Next) -> Response {
    let plain = req
        .headers()
        .get(&REQUEST_ID)
        .map(|v| v.to_str().is_ok_and(crate::serve::bounds::plain_request_id));
    if plain == Some(false) {
        req.headers_mut().remove(&REQUEST_ID);
    }
    next.run(req).await
}

fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string()
}
