//! `grpc.health.v1.Health`, from the same checks as `/ready`: SERVING while an upstream
//! answers, NOT_SERVING otherwise. The server as a whole (`""`) and
//! `brunix.AssistanceEngine` are known; any other name is NOT_FOUND (`Check`) or
//! SERVICE_UNKNOWN (`Watch`). `Watch` sends each change. No key is needed, as for HTTP's
//! liveness: orchestrators probe without one.
//!
//! The checks ask the upstreams, so their result is shared: however many calls and
//! watches there are, the checks run at most once every few seconds. On shutdown every
//! watch gets NOT_SERVING and ends, so none holds the server open.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, Stream};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::serve::{ready, AppState};

/// How long a check's result is used before the next call checks again; also how often
/// a watch looks.
const FRESH_FOR: Duration = Duration::from_secs(5);

pub struct Health {
    serving: Arc<Serving>,
    /// Resolves when the server shuts down.
    stopping: Shared<BoxFuture<'static, ()>>,
}

impl Health {
    pub fn new(
        state: AppState,
        stopping: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        Self {
            serving: Arc::new(Serving {
                state,
                last: tokio::sync::Mutex::new(None),
            }),
            stopping: stopping.boxed().shared(),
        }
    }
}

/// The serving status, checked at most once per `FRESH_FOR` (one check at a time).
struct Serving {
    state: AppState,
    last: tokio::sync::Mutex<Option<(Instant, ServingStatus)>>,
}

impl Serving {
    async fn now(&self) -> ServingStatus {
        let mut last = self.last.lock().await;
        if let Some((at, status)) = *last {
            if at.elapsed() < FRESH_FOR {
                return status;
            }
        }
        let status = if ready::check(&self.state).await.up {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        *last = Some((Instant::now(), status));
        status
    }
}

/// Whether the health service knows `service`.
fn known(service: &str) -> bool {
    service.is_empty() || service == super::SERVICE
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status.into(),
    }
}

type Watch = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl tonic_health::pb::health_server::Health for Health {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        if !known(&service) {
            return Err(Status::not_found(format!("unknown service '{service}'")));
        }
        Ok(Response::new(response(self.serving.now().await)))
    }

    type WatchStream = Watch;

    async fn watch(&self, request: Request<HealthCheckRequest>) -> Result<Response<Watch>, Status> {
        let service = request.into_inner().service;
        let serving = self.serving.clone();
        let mut stopping = self.stopping.clone();
        let updates = async_stream::stream! {
            let mut last = None;
            loop {
                let now = if known(&service) {
                    serving.now().await
                } else {
                    // Never becomes known: the set of services is fixed.
                    ServingStatus::ServiceUnknown
                };
                if last != Some(now) {
                    last = Some(now);
                    yield Ok(response(now));
                }
                tokio::select! {
                    () = tokio::time::sleep(FRESH_FOR) => {}
                    () = &mut stopping => {
                        yield Ok(response(ServingStatus::NotServing));
                        return;
                    }
                }
            }
        };
        Ok(Response::new(Box::pin(updates)))
    }
}
