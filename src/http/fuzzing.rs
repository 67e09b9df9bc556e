//! The chat routes' request parsing as plain calls, for the fuzz targets in `fuzz/`:
//! body bytes → the pipeline's input, through the very functions the handlers run once
//! the body is read (nothing here re-implements them), and an error rendered as the
//! response a client would get. Not a stable API.

use axum::http::StatusCode;
use serde_json::Value;

use super::{check_limits, error_response, ollama, openai, Dialect};
use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::pipeline::ChatTurn;

/// The four routes whose body becomes a `ChatTurn`.
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
}

impl ChatRoute {
    pub fn dialect(self) -> Dialect {
        match self {
            ChatRoute::OpenAiChat | ChatRoute::OpenAiCompletions => Dialect::OpenAi,
            ChatRoute::OllamaChat | ChatRoute::OllamaGenerate => Dialect::Ollama,
        }
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

/// A read body as the route's handler parses it, then the request limits it checks before
/// the pipeline runs (Ollama's load requests skip them: nothing is generated).
pub fn parse_chat_request(
    route: ChatRoute,
    body: &[u8],
    server: &ServerSettings,
) -> Result<ParsedRequest, GatewayError> {
    let parsed = match route {
        ChatRoute::OpenAiChat => {
            openai::parse_chat(body).map(|(turn, shape)| (turn, shape.stream, false))
        }
        ChatRoute::OpenAiCompletions => {
            openai::parse_completion(body).map(|(turn, shape)| (turn, shape.stream, false))
        }
        ChatRoute::OllamaChat => ollama::parse_chat(body).map(|p| (p.turn, p.stream, p.load)),
        ChatRoute::OllamaGenerate => {
            ollama::parse_generate(body).map(|p| (p.turn, p.stream, p.load))
        }
    };
    let (turn, stream, load) = parsed?;
    if !load {
        check_limits(server, &turn)?;
    }
    Ok(ParsedRequest { turn, stream, load })
}

/// The status and JSON body of the response an error becomes in a dialect.
pub fn render_error(dialect: Dialect, e: &GatewayError) -> (StatusCode, Value) {
    let response = error_response(dialect, e);
    let status = response.status();
    let bytes = futures::executor::block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .expect("an error body is in memory");
    let body = serde_json::from_slice(&bytes).expect("an error body is JSON");
    (status, body)
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
        let (status, body) = render_error(Dialect::OpenAi, &e);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["param"], json!("n"));
        let (_, body) = render_error(Dialect::Ollama, &e);
        assert!(body["error"].as_str().unwrap().contains("n = 3"), "{body}");

        let mut small = server();
        small.max_messages = 1;
        let two = br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}"#;
        let e = parse_chat_request(ChatRoute::OllamaChat, two, &small).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
    }
}
