//! The knowledge base's status and control, for operators: `GET /v1/knowledge` (sources,
//! files, chunks, the last refresh, what is queued, a running refresh's progress) and
//! `POST /v1/knowledge/refresh` (queue one; `GET /v1/knowledge/refresh/{id}` follows it).
//! Behind an operator key (`server.admin_keys`) like `/metrics`; the same routes answer on
//! the control socket `data_dir/index/control/gateway.sock`, which only the gateway's own user
//! reaches, for `assist-gateway ingest` on the same machine.

use std::future::Future;
use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::dialect::{ApiError, OpenAi};
use super::AppState;
use crate::error::GatewayError;
use crate::ingest::git::GitSource;
use crate::ingest::live::{Keeper, Refused, Request as Refresh, Trigger};
use crate::serve::access::Operator;

/// Most paths one refresh may name.
const MAX_PATHS: usize = 256;

/// Who is asking: over the network (after the operator check), or on the control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Network(Operator),
    Socket,
}

/// The routes over the network, each behind the operator check.
pub fn router(state: &AppState) -> Router<AppState> {
    routes().layer(middleware::from_fn_with_state(
        state.clone(),
        require_operator,
    ))
}

/// `/metrics` and the knowledge routes need an operator (see `Keys::operator`).
pub async fn require_operator(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("Bearer \u{fffd}"));
    match state.keys.operator(header) {
        Ok(operator) => {
            req.extensions_mut().insert(Via::Network(operator));
            next.run(req).await
        }
        Err(e) => ApiError::<OpenAi>::from(e).into_response(),
    }
}

fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/knowledge", get(status))
        .route("/v1/knowledge/refresh", post(refresh))
        .route("/v1/knowledge/refresh/{id}", get(job))
}

fn keeper(state: &AppState) -> Result<&Keeper, ApiError<OpenAi>> {
    state.knowledge.as_ref().ok_or_else(|| {
        GatewayError::unavailable("no_knowledge", "this gateway keeps no knowledge index").into()
    })
}

async fn status(State(state): State<AppState>) -> Result<Response, ApiError<OpenAi>> {
    Ok(Json(keeper(&state)?.status()).into_response())
}

async fn job(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError<OpenAi>> {
    let job = id
        .parse::<u64>()
        .ok()
        .and_then(|id| keeper(&state).ok()?.job(id));
    match job {
        Some(job) => Ok(Json(job).into_response()),
        None => Err(
            GatewayError::route_not_found(&format!("/v1/knowledge/refresh/{id}"))
                .with_message(format!("no refresh {id} is known (the last 32 are kept)"))
                .into(),
        ),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefreshBody {
    /// Folders and files to index, as `ingest` takes them; absent: `knowledge.sources`.
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    rebuild: bool,
}

async fn refresh(
    State(state): State<AppState>,
    via: Option<axum::Extension<Via>>,
    body: Body,
) -> Result<Response, ApiError<OpenAi>> {
    let via = via.map_or(Via::Socket, |axum::Extension(v)| v);
    let bytes = super::body::read(&state.settings.server, body).await?;
    let body: RefreshBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        RefreshBody::default()
    } else {
        super::body::parse_json(&bytes)?
    };
    if body.paths.len() > MAX_PATHS {
        return Err(GatewayError::invalid("paths", format!("at most {MAX_PATHS} paths")).into());
    }
    // Naming what to read off the gateway's disk, or rebuilding (embedding everything
    // again), takes an operator key or the socket: an open gateway's callers may refresh
    // its sources, which reads only what changed.
    if (!body.paths.is_empty() || body.rebuild) && via == Via::Network(Operator::Open) {
        return Err(GatewayError::forbidden(
            "operator_only",
            "naming paths or rebuilding needs an operator key (server.admin_keys), or `assist-gateway ingest` on the gateway's machine",
        )
        .into());
    }
    let paths: Vec<PathBuf> = body.paths.iter().map(PathBuf::from).collect();
    let missing = |p: &&PathBuf| !p.exists() && GitSource::parse(p).is_none();
    if let Some(p) = paths.iter().find(missing) {
        return Err(GatewayError::invalid(
            "paths",
            format!("{} does not exist on the gateway's machine", p.display()),
        )
        .into());
    }
    let keeper = keeper(&state)?;
    let request = Refresh {
        paths,
        rebuild: body.rebuild,
    };
    let id = keeper
        .request(request, Trigger::Api)
        .map_err(|refused| match refused {
            Refused::NoSources => GatewayError::invalid("paths", refused.to_string()),
            Refused::Full => GatewayError::rate_limited(refused.to_string()),
        })?;
    tracing::info!(id, paths = body.paths.len(), rebuild = body.rebuild, via = ?via, "knowledge refresh queued");
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "id": id,
            "state": "queued",
            "url": format!("/v1/knowledge/refresh/{id}"),
        })),
    )
        .into_response())
}

/// Serves the knowledge routes on the control socket while this gateway owns its index,
/// until `shutdown` resolves. The socket is only ever bound by the index's owner (the
/// holder of `ingest.lock`), so a socket file found there is a stopped owner's and is
/// replaced; it sits in a folder only the gateway's user may enter (mode 0700), and a
/// connection from another user is closed unread.
pub async fn serve_control(
    path: PathBuf,
    state: AppState,
    shutdown: impl Future<Output = ()> + Clone + Send + 'static,
) {
    let Some(keeper) = state.knowledge.clone() else {
        return;
    };
    let mut owner = keeper.ownership();
    loop {
        tokio::select! {
            owned = owner.wait_for(|owned| *owned) => if owned.is_err() { return },
            () = shutdown.clone() => return,
        }
        let listener = match bind(&path) {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(socket = %path.display(), error = %format!("{e:#}"), "cannot open the control socket: `ingest` beside the gateway cannot hand its work over");
                return;
            }
        };
        let mut lost = keeper.ownership();
        let stop = {
            let shutdown = shutdown.clone();
            async move {
                tokio::select! {
                    _ = lost.wait_for(|owned| !*owned) => {},
                    () = shutdown => {},
                }
            }
        };
        let router = routes().with_state(state.clone());
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::warn!(error = %e, "the control socket stopped");
        }
    }
}

/// The control socket, bound in its own folder (made or kept at mode 0700).
fn bind(path: &Path) -> anyhow::Result<OwnUser> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folder)?;
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))?;
    let uid = std::fs::metadata(folder)?.uid();
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)?;
    Ok(OwnUser {
        listener,
        path: path.to_path_buf(),
        uid,
        inode: std::fs::metadata(path)?.ino(),
    })
}

/// The control socket's listener: accepts connections of the gateway's own user (and
/// root) only, and removes its socket file when dropped, if it is still its own.
struct OwnUser {
    listener: tokio::net::UnixListener,
    path: PathBuf,
    uid: u32,
    /// The socket file's inode, to tell it from one a newer owner bound at the same path.
    inode: u64,
}

impl axum::serve::Listener for OwnUser {
    type Io = tokio::net::UnixStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    let peer = stream.peer_cred().map(|c| c.uid());
                    if matches!(peer, Ok(uid) if uid == self.uid || uid == 0) {
                        return (stream, addr);
                    }
                    tracing::warn!(peer_uid = ?peer.ok(), "control socket: a connection of another user was closed");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "control socket: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

impl Drop for OwnUser {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // Only our own socket file: a newer owner may have bound its own at this path.
        if std::fs::metadata(&self.path).is_ok_and(|m| m.ino() == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
