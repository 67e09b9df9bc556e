//! `brunix.AssistanceEngine` on the shared chat flow, with the reference's semantics:
//!
//! - `AskAgent`: one message with the whole answer, `avap_code` (`grpc.avap_code`) and
//!   `is_final = true`; `AskAgentStream`: one message per token as it arrives, then a
//!   final message with empty `text` and `is_final = true`.
//! - `editor_content`, `selected_text`, `extra_context` are base64 and `user_info` a JSON
//!   string, read as the `user` field is over HTTP (unreadable → empty, a warning naming
//!   the field); an empty `session_id` is `"default"`, inside the caller's own space.
//! - Application errors (upstream down, timeouts) end the stream with a final message
//!   whose text starts `[ENG] Error:`, as the reference's clients expect; what the client
//!   must change is a status: `INVALID_ARGUMENT` (empty query, oversize fields),
//!   `UNAUTHENTICATED` (key missing or wrong in `authorization: Bearer` metadata),
//!   `RESOURCE_EXHAUSTED` (rate limits, with `retry-after` metadata; a request over twice
//!   the body limit, see `over_twice_the_limit`), `ABORTED` (the
//!   session is busy with another turn).
//! - A client that cancels the call cancels the upstream request; the partial turn is
//!   kept in the session.
//! - `EvaluateRAG`: the answer evaluation; every failure of the evaluation itself is in
//!   `status`, as the reference reports it.
//!
//! Keys and the per-minute limit are checked by [`Admission`], on the call's metadata
//! before its message is read.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::ConnectInfo;
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

use super::pb::{self, AgentRequest, AgentResponse};
use crate::error::GatewayError;
use crate::llm::{ToolCall, UpstreamRequest};
use crate::pipeline::ChatTurn;
use crate::serve::access::{Caller, Keys, Limits, StreamGate};
use crate::serve::chat::{self, ChatLog, End, Piece, Render};
use crate::serve::{bounds, evaluation, AppState};
use crate::sessions::Owner;
use crate::telemetry;

/// What an empty `session_id` means (as in the reference).
const DEFAULT_SESSION: &str = "default";
/// What an application error's text starts with.
const ERROR_PREFIX: &str = "[ENG] Error: ";

type Answers = Pin<Box<dyn Stream<Item = Result<AgentResponse, Status>> + Send>>;

pub struct Engine {
    state: AppState,
}

impl Engine {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    /// Both ask methods: read the request of a caller [`Admission`] let through, then
    /// answer as a stream of messages (token by token, or the whole answer as one).
    fn ask(
        &self,
        request: Request<AgentRequest>,
        route: &'static str,
        streamed: bool,
    ) -> Result<Answers, Status> {
        let mut log = ChatLog::new(
            request_id(request.metadata()),
            "grpc",
            route,
            self.state.pipeline.clone(),
            Some(request.metadata().as_ref()),
        );
        log.request(self.state.pipeline.assistant_model(), streamed);
        let Some(admitted) = request.extensions().get::<Admitted>().cloned() else {
            return Err(Status::internal("the call was not admitted"));
        };
        log.caller(&self.state, admitted.caller.as_ref());
        let parse = log.span().child("parse", Vec::new);
        let turn = match self.turn(request.into_inner()) {
            Ok(turn) => turn,
            Err(e) => {
                parse.fail(e.code.unwrap_or(e.kind));
                log.failed(&e, false);
                return Err(status(&e));
            }
        };
        drop(parse);
        let state = self.state.clone();
        let avap_code = state.settings.grpc.avap_code.clone();
        let answers = async_stream::stream! {
            let Admitted { owner, gate, .. } = admitted;
            let events =
                chat::start(&state, gate.as_ref(), &owner, &mut log, turn, streamed).await;
            let events = match events {
                Ok(events) => events,
                Err(e) => {
                    log.failed(&e, false);
                    yield failure(&e);
                    return;
                }
            };
            if streamed {
                let write_timeout = state.settings.server.write_timeout;
                let mut tokens = chat::stream(events, Tokens, log, write_timeout);
                while let Some(answer) = tokens.next().await {
                    yield Ok(answer);
                }
                return;
            }
            match chat::collect(events, &mut log).await {
                Ok(answer) => yield Ok(AgentResponse {
                    text: answer.text,
                    avap_code,
                    is_final: true,
                }),
                Err(e) => yield failure(&e),
            }
        };
        if !streamed {
            return Ok(Box::pin(answers));
        }
        let open = telemetry::ActiveStream::open();
        Ok(Box::pin(answers.map(move |answer| {
            let _open = &open;
            answer
        })))
    }

    /// The turn an `AgentRequest` asks for, with the editor context read like the `user`
    /// field over HTTP.
    fn turn(&self, req: AgentRequest) -> Result<ChatTurn, GatewayError> {
        let server = &self.state.settings.server;
        let size = prost::Message::encoded_len(&req);
        if size > server.max_body_bytes {
            return Err(GatewayError::invalid(
                "request",
                format!(
                    "the request is {size} bytes, more than the {} accepted (server.max_body_bytes)",
                    server.max_body_bytes
                ),
            ));
        }
        if req.query.trim().is_empty() {
            return Err(GatewayError::invalid(
                "query",
                "query is empty: send the question in `query`",
            ));
        }
        bounds::check_length(server, "query", req.query.chars().count())?;
        let mut user = json!({
            "editor_content": req.editor_content,
            "selected_text": req.selected_text,
            "extra_context": req.extra_context,
        });
        if !req.user_info.trim().is_empty() {
            user["user_info"] = Value::String(req.user_info);
        }
        let session_id = if req.session_id.is_empty() {
            DEFAULT_SESSION.to_string()
        } else {
            req.session_id
        };
        let request = UpstreamRequest::question(self.state.pipeline.assistant_model(), req.query);
        Ok(ChatTurn::from_client(
            request,
            Some(session_id),
            Some(&user),
            None,
        ))
    }
}

/// A call past the key check and the per-minute limit: whose sessions it reaches and
/// its caller's stream slots.
#[derive(Clone)]
struct Admitted {
    owner: Owner,
    gate: Option<StreamGate>,
    /// The caller, when it presented a key.
    caller: Option<Caller>,
    /// Who the limits count: the key, else the address.
    counted: Caller,
}

/// The key check and the per-minute limit, on a call's metadata before its message is
/// read: who calls (the key in `authorization` metadata when keys are set, else the
/// peer's address). A refused call is logged and counted, never read.
#[derive(Clone)]
pub struct Admission {
    keys: Arc<Keys>,
    limits: Option<Arc<Limits>>,
}

impl Admission {
    pub fn new(state: &AppState) -> Self {
        Self {
            keys: state.keys.clone(),
            limits: state.limits.clone(),
        }
    }

    fn admit(&self, request: &Request<()>) -> Result<Admitted, GatewayError> {
        let caller = if self.keys.required() {
            let header = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            Caller::Key(self.keys.check(header)?)
        } else {
            Caller::at(
                request
                    .extensions()
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|ConnectInfo(addr)| *addr),
            )
        };
        // Counted here, before the message is read, when the limits are this process's;
        // counted in Redis, they are awaited in the handler (`within_limits`).
        let gate = match self.limits.as_ref().and_then(|l| l.admit_here(&caller)) {
            Some(admitted) => admitted?.gate,
            None => None,
        };
        Ok(Admitted {
            owner: caller.owner(),
            gate,
            caller: matches!(caller, Caller::Key(_)).then_some(caller.clone()),
            counted: caller,
        })
    }
}

impl Engine {
    /// Counts a call the interceptor let through against its caller's limits (async:
    /// they may be counted in Redis); a refused call is logged and counted, its message
    /// never used.
    async fn within_limits<T>(&self, request: &mut Request<T>) -> Result<(), Status> {
        let Some(limits) = self.state.limits.as_ref().filter(|l| l.shared()) else {
            return Ok(()); // counted by the interceptor
        };
        let started = Instant::now();
        let Some(admitted) = request.extensions_mut().get_mut::<Admitted>() else {
            return Err(Status::internal("the call was not admitted"));
        };
        match limits.admit(&admitted.counted).await {
            Ok(counted) => {
                admitted.gate = counted.gate;
                Ok(())
            }
            Err(e) => Err(refused(request.metadata(), &e, started)),
        }
    }
}

/// A call refused before it is read (its key, its limits): logged, counted, its status.
fn refused(metadata: &MetadataMap, e: &GatewayError, started: Instant) -> Status {
    let code = e.status.as_u16();
    telemetry::request("grpc".into(), code, started.elapsed());
    tracing::info!(
        request_id = request_id(metadata),
        dialect = "grpc",
        status = code,
        error = e.code.unwrap_or(e.kind),
        "call refused"
    );
    status(e)
}

impl tonic::service::Interceptor for Admission {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let started = Instant::now();
        match self.admit(&request) {
            Ok(admitted) => {
                request.extensions_mut().insert(admitted);
                Ok(request)
            }
            Err(e) => Err(refused(request.metadata(), &e, started)),
        }
    }
}

#[tonic::async_trait]
impl pb::assistance_engine_server::AssistanceEngine for Engine {
    type AskAgentStream = Answers;
    type AskAgentStreamStream = Answers;

    async fn ask_agent(
        &self,
        mut request: Request<AgentRequest>,
    ) -> Result<Response<Answers>, Status> {
        self.within_limits(&mut request).await?;
        self.ask(request, "/brunix.AssistanceEngine/AskAgent", false)
            .map(Response::new)
    }

    async fn ask_agent_stream(
        &self,
        mut request: Request<AgentRequest>,
    ) -> Result<Response<Answers>, Status> {
        self.within_limits(&mut request).await?;
        self.ask(request, "/brunix.AssistanceEngine/AskAgentStream", true)
            .map(Response::new)
    }

    async fn evaluate_rag(
        &self,
        mut request: Request<pb::EvalRequest>,
    ) -> Result<Response<pb::EvalResponse>, Status> {
        self.within_limits(&mut request).await?;
        const ROUTE: &str = "/brunix.AssistanceEngine/EvaluateRAG";
        let started = Instant::now();
        let req = request.into_inner();
        let asked = evaluation::Asked {
            category: req.category,
            limit: i64::from(req.limit),
            index: req.index,
        };
        let response = match evaluation::run(self.state.clone(), asked).await {
            Ok(r) => evaluated(r),
            Err(e) => pb::EvalResponse {
                status: e.message,
                ..Default::default()
            },
        };
        telemetry::request(ROUTE.into(), 200, started.elapsed());
        tracing::info!(
            route = ROUTE,
            status = if response.status == "ok" {
                "ok"
            } else {
                "error"
            },
            questions = response.questions_evaluated,
            latency_ms = started.elapsed().as_secs_f64() * 1e3,
            "request"
        );
        Ok(Response::new(response))
    }
}

/// An evaluation in the proto's shape (a metric no question had is 0).
fn evaluated(r: crate::eval::answers::EvalResponse) -> pb::EvalResponse {
    let score = |m: Option<f64>| m.unwrap_or(0.0) as f32;
    pb::EvalResponse {
        status: r.status,
        questions_evaluated: i32::try_from(r.questions_evaluated).unwrap_or(i32::MAX),
        elapsed_seconds: r.elapsed_seconds as f32,
        judge_model: r.judge_model,
        index: r.index,
        faithfulness: score(r.faithfulness),
        answer_relevancy: score(r.answer_relevancy),
        context_recall: score(r.context_recall),
        context_precision: score(r.context_precision),
        global_score: r.global_score as f32,
        verdict: r.verdict,
        details: r
            .details
            .into_iter()
            .map(|d| pb::QuestionDetail {
                id: d.id,
                category: d.category,
                question: d.question,
                answer_preview: d.answer_preview,
                n_chunks: i32::try_from(d.n_chunks).unwrap_or(i32::MAX),
            })
            .collect(),
    }
}

/// `AskAgentStream`'s messages: a token each, then the final one.
struct Tokens;

/// Each message goes as its own (tonic frames and writes them).
impl Piece for AgentResponse {}

impl Render for Tokens {
    type Piece = AgentResponse;

    fn delta(&mut self, text: &str) -> AgentResponse {
        AgentResponse {
            text: text.to_string(),
            avap_code: String::new(),
            is_final: false,
        }
    }

    /// No tools are offered over gRPC: nothing to show.
    fn tool_calls(&mut self, _calls: &[ToolCall]) -> AgentResponse {
        self.delta("")
    }

    fn end(&mut self, _end: End<'_>) -> AgentResponse {
        AgentResponse {
            text: String::new(),
            avap_code: String::new(),
            is_final: true,
        }
    }

    fn error(&mut self, e: &GatewayError) -> AgentResponse {
        engine_error(e)
    }
}

/// The reference's application error: a final message whose text says what went wrong.
fn engine_error(e: &GatewayError) -> AgentResponse {
    AgentResponse {
        text: format!("{ERROR_PREFIX}{}", e.message),
        avap_code: String::new(),
        is_final: true,
    }
}

/// How a failure before the answer reaches the client: a status when the request is at
/// fault (the client must change it), else the application error message.
fn failure(e: &GatewayError) -> Result<AgentResponse, Status> {
    if e.status.is_client_error() {
        Err(status(e))
    } else {
        Ok(engine_error(e))
    }
}

/// The gRPC status of an error.
fn status(e: &GatewayError) -> Status {
    use axum::http::StatusCode;
    let code = match e.status {
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        StatusCode::CONFLICT => Code::Aborted,
        StatusCode::REQUEST_TIMEOUT => Code::DeadlineExceeded,
        s if s.is_client_error() => Code::InvalidArgument,
        StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
        _ => Code::Internal,
    };
    let mut status = Status::new(code, e.message.clone());
    if let Some(secs) = e.retry_after {
        if let Ok(v) = secs.to_string().parse() {
            status.metadata_mut().insert("retry-after", v);
        }
    }
    status
}

/// The request id a client sent (`x-request-id` metadata), else a new one.
fn request_id(metadata: &MetadataMap) -> String {
    metadata
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|id| crate::serve::bounds::plain_request_id(id))
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_faults_are_statuses_and_the_rest_engine_errors() {
        let bad = GatewayError::invalid("query", "query is empty");
        assert_eq!(failure(&bad).unwrap_err().code(), Code::InvalidArgument);
        let busy = GatewayError::session_busy("busy");
        let s = failure(&busy).unwrap_err();
        assert_eq!(s.code(), Code::Aborted);
        assert_eq!(s.metadata().get("retry-after").unwrap(), "5");
        let down = GatewayError::unavailable("upstream_unavailable", "connection refused");
        let answer = failure(&down).unwrap();
        assert_eq!(answer.text, "[ENG] Error: connection refused");
        assert!(answer.is_final);
    }
}
