//! The chat routes' request parsing as plain calls, for the fuzz targets in `fuzz/` and
//! the tests that replay their corpus: body bytes → the pipeline's input, through the very
//! functions the handlers run once the body is read (nothing here re-implements them),
//! and an error rendered as the response a client would get. Not a stable API.

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::Value;

use super::chat::Parsed;
use super::dialect::{ApiError, Dialect};
use super::{anthropic, ollama, openai, responses};
use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::pipeline::ChatTurn;

/// The routes whose body becomes a `ChatTurn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRoute {
    /// `POST /v1/chat/completions`
    OpenAiChat,
    /// `POST /v1/completions`
    OpenAiCompletions,
    /// `POST /api/chat`
    OllamaChat,
    /// `POST /api/generate`
    OllamaGenerate,
    /// `POST /v1/messages` (Anthropic)
    AnthropicMessages,
    /// `POST /v1/responses`
    Responses,
}

impl ChatRoute {
    /// Whether errors take OpenAI's shape.
    pub fn is_openai(self) -> bool {
        matches!(
            self,
            ChatRoute::OpenAiChat | ChatRoute::OpenAiCompletions | ChatRoute::Responses
        )
    }

    /// Whether errors take Anthropic's shape.
    pub fn is_anthropic(self) -> bool {
        self == ChatRoute::AnthropicMessages
    }
}

/// What the handler hands on after parsing.
#[derive(Debug)]
pub struct ParsedRequest {
    pub turn: ChatTurn,
    pub stream: bool,
    /// An Ollama "load the model" request: answered without running the pipeline.
    pub load: bool,
}

fn parsed<R>(p: Parsed<R>) -> ParsedRequest {
    ParsedRequest {
        turn: p.turn,
        stream: p.stream,
        load: p.load,
    }
}

/// A read body as the route's handler parses it, then the request limits it checks before
/// the pipeline runs (Ollama's load requests skip them: nothing is generated).
pub fn parse_chat_request(
    route: ChatRoute,
    body: &[u8],
    server: &ServerSettings,
) -> Result<ParsedRequest, GatewayError> {
    let parsed = match route {
        ChatRoute::OpenAiChat => (openai::CHAT_COMPLETIONS.1)(body).map(parsed),
        ChatRoute::OpenAiCompletions => (openai::COMPLETIONS.1)(body).map(parsed),
        ChatRoute::OllamaChat => (ollama::CHAT.1)(body).map(parsed),
        ChatRoute::OllamaGenerate => (ollama::GENERATE.1)(body).map(parsed),
        ChatRoute::AnthropicMessages => (anthropic::MESSAGES.1)(body).map(parsed),
        ChatRoute::Responses => (responses::RESPONSES.1)(body).map(parsed),
    }?;
    if !parsed.load {
        crate::serve::bounds::check_limits(server, &parsed.turn)?;
    }
    Ok(parsed)
}

/// The status and JSON body of the response an error becomes on `route`.
pub fn render_error(route: ChatRoute, e: &GatewayError) -> (StatusCode, Value) {
    fn rendered<D: Dialect>(e: &GatewayError) -> (StatusCode, Value) {
        let response = ApiError::<D>::from(e.clone()).into_response();
        let status = response.status();
        // The body as a client reads it (`null` if it were not JSON).
        let body =
            futures::executor::block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or(Value::Null);
        (status, body)
    }
    if route.is_anthropic() {
        rendered::<super::Anthropic>(e)
    } else if route.is_openai() {
        rendered::<super::OpenAi>(e)
    } else {
        rendered::<super::Ollama>(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use serde_json::json;

    fn server() -> ServerSettings {
        Settings::load_without_env(None).unwrap().server
    }

    #[test]
    fn a_body_becomes_the_turn_or_the_dialects_error() {
        let body =
            br#"{"model":"brunix","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let p = parse_chat_request(ChatRoute::OpenAiChat, body, &server()).unwrap();
        assert!(p.stream && !p.load);
        assert_eq!(p.turn.request.model, "brunix");

        let p = parse_chat_request(ChatRoute::OllamaGenerate, br#"{"model":"m"}"#, &server());
        assert!(p.unwrap().load, "an empty prompt only loads the model");

        let e = parse_chat_request(ChatRoute::OpenAiChat, br#"{"model":"m","n":3}"#, &server())
            .unwrap_err();
        let (status, body) = render_error(ChatRoute::OpenAiChat, &e);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["param"], json!("n"));
        let (_, body) = render_error(ChatRoute::OllamaChat, &e);
        assert!(body["error"].as_str().unwrap().contains("n = 3"), "{body}");

        let mut small = server();
        small.max_messages = 1;
        let two = br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}"#;
        let e = parse_chat_request(ChatRoute::OllamaChat, two, &small).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
    }
}
