//! The knowledge base as an MCP server at `/mcp` (Streamable HTTP, with `rmcp`), behind
//! the same host check, keys and limits as every route. Three tools:
//! `search_knowledge` (the fused hits), `get_source` (one chunk) and `ask` (the
//! assistant's answer with its sources, its tokens sent as progress notifications when
//! the client asks for progress). Stateless: every request stands alone, so nothing of
//! one caller is kept for another.

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{request_id, sources, AppState};
use crate::context::EditorContext;
use crate::error::GatewayError;
use crate::llm::UpstreamRequest;
use crate::pipeline::{ChatTurn, Event};
use crate::privacy::Privacy;
use crate::retrieval::hybrid::Mode;
use crate::retrieval::{DocType, KnowledgeChunk};
use crate::serve::access::{Caller, StreamGate};
use crate::serve::bounds;
use crate::serve::chat::{self, ChatLog};
use crate::sessions::Owner;

/// Most hits one search may ask for.
const MAX_TOP_K: usize = 20;

/// The `/mcp` service: a fresh handler per request over the shared state.
pub fn service(state: AppState) -> StreamableHttpService<Knowledge, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        // The gateway's own host check and CORS run before this service.
        .disable_allowed_hosts()
        .with_legacy_session_mode(false)
        .with_max_request_body_bytes(state.settings.server.max_body_bytes);
    StreamableHttpService::new(
        move || {
            Ok(Knowledge {
                state: state.clone(),
            })
        },
        Arc::default(),
        config,
    )
}

/// JSON-RPC's own error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error response with this HTTP status.
fn json_rpc_error(
    status: axum::http::StatusCode,
    id: Value,
    code: i64,
    message: &str,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// What is wrong with a `tools/call`'s `params`, naming the field (rmcp took each of
/// these for an unknown method, -32601).
fn call_params_error(params: Option<&Value>) -> Option<&'static str> {
    match params {
        None | Some(Value::Null) => {
            Some("`params` is missing: tools/call takes {\"name\": …, \"arguments\": {…}}")
        }
        Some(p) if !p.is_object() => Some("`params` is an object"),
        Some(p) if !p["name"].is_string() => Some("`params.name`, the tool's name, is missing"),
        Some(p)
            if p.get("arguments")
                .is_some_and(|a| !a.is_object() && !a.is_null()) =>
        {
            Some("`params.arguments`, a tool's arguments, are an object")
        }
        _ => None,
    }
}

/// Errors on `/mcp` in JSON-RPC's shape, whoever finds them. A body that is not JSON is
/// a parse error (400, -32700), and a `tools/call` without `params`, a name, or with
/// arguments that are not an object is invalid params (-32602): rmcp answered the first
/// 415 in plain text and took the others for an unknown method (-32601). Any other plain-text refusal of rmcp's (406,
/// 413, …) keeps its status with a JSON-RPC body.
pub async fn json_rpc_errors(
    axum::extract::State((max_body, read_within)): axum::extract::State<(usize, Duration)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header::CONTENT_TYPE, Method, StatusCode};
    // A JSON body sent as JSON: rmcp's 415 for it means it is not a JSON-RPC message.
    let sent_as_json = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    let req = if req.method() == Method::POST {
        let (parts, body) = req.into_parts();
        // Within the body's size and time bounds, as every route's body (a client sending
        // a few bytes of a large body had held its connection without end).
        let bytes = match super::body::read_within(max_body, read_within, body)
            .await
            .and_then(|b| super::body::check_values(&b).map(|()| b))
        {
            Ok(b) => b,
            Err(e) => return json_rpc_error(e.status, Value::Null, INVALID_REQUEST, &e.message),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Err(e) => {
                return json_rpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    PARSE_ERROR,
                    &format!("Parse error: the body is not JSON ({e})"),
                )
            }
            Ok(message) => {
                if let Some(wrong) = (message["method"] == "tools/call")
                    .then(|| call_params_error(message.get("params")))
                    .flatten()
                {
                    return json_rpc_error(
                        StatusCode::OK,
                        message.get("id").cloned().unwrap_or(Value::Null),
                        INVALID_PARAMS,
                        &format!("Invalid params: {wrong}"),
                    );
                }
            }
        }
        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))
    } else {
        req
    };
    let response = next.run(req).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| {
            !ct.starts_with("application/json") && !ct.starts_with("text/event-stream")
        });
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let code = if status.is_server_error() {
        INTERNAL_ERROR
    } else {
        INVALID_REQUEST
    };
    let message = if text.trim().is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    // The body was JSON (it was read above), sent as JSON: not a media type rmcp cannot
    // take but a message that is not JSON-RPC (a batch, no method, an object for an id).
    if status == StatusCode::UNSUPPORTED_MEDIA_TYPE && sent_as_json {
        return json_rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            INVALID_REQUEST,
            &format!("Invalid Request: not a JSON-RPC 2.0 request or notification ({message})"),
        );
    }
    json_rpc_error(status, Value::Null, code, &message)
}

#[derive(Clone)]
pub struct Knowledge {
    state: AppState,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    top_k: Option<usize>,
    language: Option<String>,
    doc_type: Option<DocType>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceArgs {
    id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AskArgs {
    question: String,
    selected_code: Option<String>,
    open_file: Option<String>,
}

fn tools() -> Vec<Tool> {
    let schema = |v: Value| match v {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(Map::new()),
    };
    vec![
        Tool::new(
            "search_knowledge",
            "Search the project's knowledge base (documentation and source code, English and \
             Spanish) with BM25 and dense vectors fused by rank. Returns the best passages, each \
             with its id, file, section, line range, document type, language, score, text and a \
             link. Use it to find what the docs or the code say about a topic before answering; \
             pass a passage's id to get_source to read it again.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for, in the user's words (English or Spanish); identifiers such as getUserName are matched by their parts too."},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "How many passages to return (default 8)."},
                    "language": {"type": "string", "description": "Only passages in this language: a natural language code (en, es) for prose, a programming language name (rust, python, …) for code."},
                    "doc_type": {"type": "string", "enum": ["spec", "narrative", "code", "code_example"], "description": "Only passages of this kind: spec (reference), narrative (guides, READMEs), code (source files), code_example (code inside documentation)."}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "get_source",
            "Read one passage of the knowledge base by the id that search_knowledge or an \
             answer's sources gave: its file, section, line range and full text.",
            schema(json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The passage id, e.g. 3f2a9c0d1e4b5a6f."}
                },
                "required": ["id"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "ask",
            "Ask the project's coding assistant a question. It searches the knowledge base, \
             reads the selected code and open file when given and the question is about them, \
             and answers with the sources it used. Slower than search_knowledge (a language \
             model writes the answer); with a progress token the answer streams as progress \
             notifications.",
            schema(json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, as the user asked it."},
                    "selected_code": {"type": "string", "description": "Code the user selected, when the question is about it."},
                    "open_file": {"type": "string", "description": "The whole file open in the editor, for context."}
                },
                "required": ["question"],
                "additionalProperties": false
            })),
        ),
    ]
}

impl ServerHandler for Knowledge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "The project's knowledge base: search it (search_knowledge), read a passage \
             (get_source), or ask the assistant (ask).",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "search_knowledge" => self.search(parse(args)?, &context).await?,
            "get_source" => self.source(parse(args)?, &context).await?,
            "ask" => self.ask(parse(args)?, &context).await?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool '{other}': search_knowledge, get_source, ask"),
                    None,
                ))
            }
        };
        Ok(result.into())
    }
}

/// A tool's arguments, or `invalid_params` naming what is wrong.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, ErrorData> {
    serde_json::from_value(args)
        .map_err(|e| ErrorData::invalid_params(format!("bad arguments: {e}"), None))
}

/// The HTTP request a tool call came in (rmcp hands its parts to the handler).
fn parts(context: &RequestContext<RoleServer>) -> Option<&Parts> {
    context.extensions.get::<Parts>()
}

fn base(state: &AppState, context: &RequestContext<RoleServer>) -> String {
    match parts(context) {
        Some(p) => sources::base(&state.settings.server, &p.uri, &p.headers),
        None => sources::base(
            &state.settings.server,
            &axum::http::Uri::default(),
            &axum::http::HeaderMap::new(),
        ),
    }
}

/// A chunk as a tool returns it, its text cleaned by `privacy` (indexes written before
/// redaction hold what they held).
fn chunk_json(c: &KnowledgeChunk, base: &str, privacy: &Privacy) -> Value {
    let (text, mut cleaned) = privacy.cleaned(&c.text);
    let (section, more) = privacy.cleaned(&c.section);
    cleaned.add(more);
    let (file, more) = privacy.cleaned(&c.source_file);
    cleaned.add(more);
    if !cleaned.is_empty() {
        cleaned.count("source");
    }
    json!({
        "id": c.chunk_id,
        "file": file,
        "section": section,
        "lines": [c.start_line, c.end_line],
        "doc_type": c.doc_type.as_str(),
        "language": c.language,
        "url": sources::link(base, &c.chunk_id),
        "text": text,
    })
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

impl Knowledge {
    async fn search(
        &self,
        args: SearchArgs,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let settings = &self.state.settings;
        if args.query.trim().is_empty() {
            return Err(ErrorData::invalid_params("query is empty", None));
        }
        bounds::check_length(&settings.server, "query", args.query.chars().count())
            .map_err(|e| ErrorData::invalid_params(e.message, None))?;
        let top_k = args.top_k.unwrap_or(settings.retrieval.top_k);
        if !(1..=MAX_TOP_K).contains(&top_k) {
            return Err(ErrorData::invalid_params(
                format!("top_k must be 1 to {MAX_TOP_K}"),
                None,
            ));
        }
        let filtered = args.language.is_some() || args.doc_type.is_some();
        // A filter picks from every candidate, not only from the first top_k.
        let wanted = if filtered {
            settings.retrieval.candidates.max(top_k)
        } else {
            top_k
        };
        let hits = self
            .state
            .retriever
            .search_top(&args.query, Mode::Hybrid, wanted)
            .await
            .map_err(internal)?;
        let base = base(&self.state, context);
        let hits: Vec<Value> = hits
            .iter()
            .filter(|h| !self.state.pipeline.privacy().excluded(&h.chunk.source_file))
            .filter(|h| {
                args.language
                    .as_deref()
                    .is_none_or(|l| h.chunk.language.eq_ignore_ascii_case(l))
                    && args.doc_type.is_none_or(|d| h.chunk.doc_type == d)
            })
            .take(top_k)
            .map(|h| {
                let mut v = chunk_json(&h.chunk, &base, self.state.pipeline.privacy());
                v["score"] = json!(h.score);
                v
            })
            .collect();
        tracing::info!(
            tool = "search_knowledge",
            query_chars = args.query.chars().count(),
            hits = hits.len(),
            "mcp"
        );
        Ok(CallToolResult::structured(json!({ "hits": hits })))
    }

    async fn source(
        &self,
        args: SourceArgs,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let found = if sources::is_plain_id(&args.id) {
            self.state
                .retriever
                .source(&args.id)
                .await
                .map_err(internal)?
        } else {
            None
        };
        let found = found.filter(|c| !self.state.pipeline.privacy().excluded(&c.source_file));
        let Some(chunk) = found else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "no source '{}' in the knowledge base (it may have been re-ingested): search again with search_knowledge",
                args.id
            ))]));
        };
        Ok(CallToolResult::structured(chunk_json(
            &chunk,
            &base(&self.state, context),
            self.state.pipeline.privacy(),
        )))
    }

    async fn ask(
        &self,
        args: AskArgs,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let state = &self.state;
        let parts = parts(context);
        let id = parts.map(|p| request_id(&p.headers)).unwrap_or_default();
        let mut log = ChatLog::new(
            id,
            "mcp",
            "/mcp ask",
            state.pipeline.clone(),
            parts.map(|p| &p.headers),
        );
        log.caller(state, parts.and_then(|p| p.extensions.get::<Caller>()));
        log.request(state.pipeline.assistant_model(), true);
        let parse = log.span().child("parse", Vec::new);
        let turn = ask_turn(state, args);
        let turn = match turn {
            Ok(turn) => turn,
            Err(e) => {
                parse.fail(e.code.unwrap_or(e.kind));
                log.failed(&e, false);
                return Err(ErrorData::invalid_params(e.message, None));
            }
        };
        drop(parse);
        let owner = parts
            .and_then(|p| p.extensions.get::<Caller>())
            .map_or_else(Owner::shared, Caller::owner);
        let gate = parts
            .and_then(|p| p.extensions.get::<StreamGate>())
            .cloned();
        let progress = context.meta.get_progress_token();
        let events = chat::start(state, gate.as_ref(), &owner, &mut log, turn, true)
            .await
            .map_err(|e| {
                log.failed(&e, false);
                // A spent limit says when to come back, as HTTP's retry-after does.
                let data = e
                    .retry_after
                    .map(|secs| json!({"status": e.status.as_u16(), "retry_after": secs}));
                ErrorData::internal_error(e.message.clone(), data)
            });
        let mut events = events?;
        let mut text = String::new();
        let mut chars = 0usize;
        let mut cited = Vec::new();
        loop {
            // A client that cancels the call or goes away stops the answer (and with it
            // the upstream request) at once.
            let event = tokio::select! {
                () = context.ct.cancelled() => {
                    tracing::info!(tool = "ask", chars, "mcp call cancelled by its client");
                    return Ok(CallToolResult::error(vec![ContentBlock::text("cancelled")]));
                }
                event = events.next() => event,
            };
            let Some(event) = event else { break };
            match event {
                Event::Sources(s) => cited = s,
                Event::Items(_) => {}
                Event::Delta(piece) => {
                    log.deltas(1);
                    if text.len() + piece.len() > crate::pipeline::MAX_WHOLE_ANSWER_BYTES {
                        let e = crate::pipeline::answer_too_long();
                        log.failed(&e, true);
                        return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                            "the assistant failed: {}",
                            e.message
                        ))]));
                    }
                    text.push_str(&piece);
                    chars += piece.chars().count();
                    if let Some(token) = &progress {
                        let note = ProgressNotificationParam::new(token.clone(), chars as f64)
                            .with_message(piece);
                        // A client gone away ends the call at its next step anyway.
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
                Event::ToolCalls(_) | Event::Verbatim { .. } => {}
                Event::Done { usage, .. } => log.done(usage),
                Event::Error(e) => {
                    log.failed(&e, true);
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "the assistant failed: {}",
                        e.message
                    ))]));
                }
            }
        }
        let base = base(state, context);
        let cited: Vec<Value> = cited
            .iter()
            .map(|s| {
                json!({"id": s.id, "file": s.file, "section": s.section, "lines": s.lines,
                    "score": s.score, "url": sources::link(&base, &s.id)})
            })
            .collect();
        Ok(CallToolResult::structured(
            json!({ "answer": text, "sources": cited }),
        ))
    }
}

/// The turn an `ask` call asks: its question and code, each within the server's bounds.
fn ask_turn(state: &AppState, args: AskArgs) -> Result<ChatTurn, GatewayError> {
    if args.question.trim().is_empty() {
        return Err(GatewayError::invalid("question", "question is empty"));
    }
    let server = &state.settings.server;
    for (name, text) in [
        ("question", Some(&args.question)),
        ("selected_code", args.selected_code.as_ref()),
        ("open_file", args.open_file.as_ref()),
    ] {
        if let Some(text) = text {
            bounds::check_length(server, name, text.chars().count())?;
        }
    }
    // Blocks in the question are read as an API request's would be; the code
    // comes as plain text.
    let mut editor = EditorContext::from_request(None, None, &args.question);
    editor.selected_text = args.selected_code.unwrap_or_default();
    editor.editor_content = args.open_file.unwrap_or_default();
    Ok(ChatTurn {
        request: UpstreamRequest::question(state.pipeline.assistant_model(), args.question),
        session_id: None,
        editor,
    })
}
