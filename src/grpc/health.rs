//! `grpc.health.v1.Health`, from the same checks as `/ready`: SERVING while an upstream
//! answers, NOT_SERVING otherwise. The server as a whole (`""`) and
//! `brunix.AssistanceEngine` are known; any other name is NOT_FOUND (`Check`) or
//! SERVICE_UNKNOWN (`Watch`). `Watch` checks again every few seconds and sends each
//! change. No key is needed, as for HTTP's liveness: orchestrators probe without one.

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::serve::{ready, AppState};

/// How often `Watch` checks again.
const WATCH_EVERY: Duration = Duration::from_secs(5);

pub struct Health {
    state: AppState,
}

impl Health {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

/// Whether the health service knows `service`.
fn known(service: &str) -> bool {
    service.is_empty() || service == super::SERVICE
}

async fn serving(state: &AppState) -> ServingStatus {
    if ready::check(state).await.up {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
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
        Ok(Response::new(response(serving(&self.state).await)))
    }

    type WatchStream = Watch;

    async fn watch(&self, request: Request<HealthCheckRequest>) -> Result<Response<Watch>, Status> {
        let service = request.into_inner().service;
        let state = self.state.clone();
        let updates = async_stream::stream! {
            if !known(&service) {
                yield Ok(response(ServingStatus::ServiceUnknown));
                // Never becomes known: the set of services is fixed.
                std::future::pending::<()>().await;
                return;
            }
            let mut last = None;
            loop {
                let now = serving(&state).await;
                if last != Some(now) {
                    last = Some(now);
                    yield Ok(response(now));
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
        };
        Ok(Response::new(Box::pin(updates)))
    }
}
