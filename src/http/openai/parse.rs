//! OpenAI request bodies (`/v1/chat/completions`, `/v1/completions`) as the pipeline's
//! input. Anything not listed is accepted and ignored; errors name the field.

use serde::Deserialize;
use serde_json::Value;

use super::render::{Kind, Sse};
use crate::error::GatewayError;
use crate::http::body::{parse_json, OneOrMany};
use crate::http::chat::{Context, Parsed, WireToolCall};
use crate::llm::{GenParams, Input, Message, Role, UpstreamRequest};

/// Both endpoints' fields (no `flatten`, so that errors keep the field's path).
/// Anything not listed is accepted and ignored.
#[derive(Deserialize)]
struct Request {
    model: String,
    /// Chat only.
    messages: Option<Vec<InMessage>>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    /// Completions only.
    prompt: Option<Prompt>,
    suffix: Option<String>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<i64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    stop: Option<OneOrMany>,
    n: Option<u32>,
    response_format: Option<Value>,
    user: Option<Value>,
    session_id: Option<String>,
    additional_context: Option<Value>,
    /// GitLab's spelling of the same list.
    #[serde(rename = "additionalContext")]
    additional_context_gitlab: Option<Value>,
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    content: Option<Content>,
    tool_calls: Option<Vec<WireToolCall>>,
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    image_url: Option<ImageUrl>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ImageUrl {
    Object { url: String },
    Url(String),
}

/// Options that shape the rendering, not the request.
struct Shape {
    stream: bool,
    include_usage: bool,
}

impl Request {
    /// Sampling parameters and rendering options, validated.
    fn params(&mut self) -> Result<(GenParams, Shape), GatewayError> {
        if let Some(n) = self.n.filter(|&n| n != 1) {
            return Err(GatewayError::invalid(
                "n",
                format!("n = {n} is not supported: this gateway returns one choice"),
            ));
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(GatewayError::invalid(
                "temperature",
                format!("temperature must be between 0 and 2, got {t}"),
            ));
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(GatewayError::invalid(
                "top_p",
                format!("top_p must be between 0 and 1, got {p}"),
            ));
        }
        let (param, max_tokens) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        if max_tokens == Some(0) {
            return Err(GatewayError::invalid(
                param,
                format!("{param} must be at least 1"),
            ));
        }
        let stream = self.stream.unwrap_or(false);
        let shape = Shape {
            stream,
            include_usage: stream
                && self
                    .stream_options
                    .as_ref()
                    .and_then(|o| o.include_usage)
                    .unwrap_or(false),
        };
        let params = GenParams {
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stop: self
                .stop
                .take()
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            response_format: self
                .response_format
                .take()
                .filter(|rf| rf.get("type").and_then(Value::as_str) != Some("text")),
            ..GenParams::default()
        };
        if self.model.trim().is_empty() {
            return Err(GatewayError::invalid("model", "model must not be empty"));
        }
        Ok((params, shape))
    }
}

fn message(i: usize, m: InMessage) -> Result<Message, GatewayError> {
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        other => {
            return Err(GatewayError::invalid(
                format!("messages[{i}].role"),
                format!("unknown role '{other}' in messages[{i}].role: use system, developer, user, assistant or tool"),
            ))
        }
    };
    let mut out = Message::text(role, "");
    match m.content {
        None => {}
        Some(Content::Text(t)) => out.content = t,
        Some(Content::Parts(parts)) => {
            let mut texts = Vec::new();
            for (j, part) in parts.into_iter().enumerate() {
                let field = format!("messages[{i}].content[{j}]");
                match (part.kind.as_str(), part.text, part.image_url) {
                    ("text" | "input_text", Some(t), _) => texts.push(t),
                    ("image_url", _, Some(ImageUrl::Object { url } | ImageUrl::Url(url))) => {
                        out.images.push(url)
                    }
                    ("text" | "input_text", None, _) => {
                        return Err(GatewayError::invalid(
                            format!("{field}.text"),
                            format!("{field} is a text part without 'text'"),
                        ))
                    }
                    ("image_url", _, None) => {
                        return Err(GatewayError::invalid(
                            format!("{field}.image_url"),
                            format!("{field} is an image part without 'image_url.url'"),
                        ))
                    }
                    (other, _, _) => {
                        return Err(GatewayError::invalid(
                            format!("{field}.type"),
                            format!("content part type '{other}' in {field} is not supported (use text or image_url)"),
                        ))
                    }
                }
            }
            out.content = texts.join("\n");
        }
    }
    out.tool_calls = WireToolCall::calls(m.tool_calls);
    out.tool_call_id = m.tool_call_id;
    Ok(out)
}

/// A `/v1/chat/completions` body, once read, as the pipeline's input.
pub fn chat(body: &[u8]) -> Result<Parsed<Sse>, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let (params, shape) = req.params()?;
    let messages = match req.messages.take() {
        None => return Err(GatewayError::invalid("messages", "messages is required")),
        Some(m) if m.is_empty() => {
            return Err(GatewayError::invalid(
                "messages",
                "messages must contain at least one message",
            ))
        }
        Some(m) => m
            .into_iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let tools = req.tools.take().unwrap_or_default();
    // A tool is an object (`{"type": "function", "function": {…}}`): anything else is
    // the client's mistake, said here rather than forwarded for the upstream to refuse.
    if let Some(i) = tools.iter().position(|t| !t.is_object()) {
        return Err(GatewayError::invalid(
            format!("tools[{i}]"),
            format!(
                "tools[{i}] must be an object ({{\"type\": \"function\", \"function\": {{…}}}})"
            ),
        ));
    }
    let tool_choice = req.tool_choice.take();
    Ok(req.into_parsed(
        Input::Chat(messages),
        params,
        (tools, tool_choice),
        shape,
        Kind::Chat,
    ))
}

/// A `/v1/completions` body, once read, as the pipeline's input.
pub fn completion(body: &[u8]) -> Result<Parsed<Sse>, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let (params, shape) = req.params()?;
    let prompt = match req.prompt.take() {
        None => String::new(),
        Some(Prompt::One(p)) => p,
        Some(Prompt::Many(mut v)) if v.len() <= 1 => v.pop().unwrap_or_default(),
        Some(Prompt::Many(_)) => {
            return Err(GatewayError::invalid(
                "prompt",
                "only one prompt per request is supported",
            ))
        }
    };
    let input = Input::Prompt {
        prompt,
        suffix: req.suffix.take(),
        system: None,
        raw: false,
        images: Vec::new(),
    };
    Ok(req.into_parsed(input, params, (Vec::new(), None), shape, Kind::Text))
}

impl Request {
    /// The turn (the editor context read from the request) and its rendering.
    fn into_parsed(
        self,
        input: Input,
        params: GenParams,
        (tools, tool_choice): (Vec<Value>, Option<Value>),
        shape: Shape,
        kind: Kind,
    ) -> Parsed<Sse> {
        let render = Sse::new(kind, &self.model, shape.include_usage);
        let request = UpstreamRequest {
            model: self.model,
            input,
            params,
            tools,
            tool_choice,
            whole: false,
            relay: None,
            template_peers: Vec::new(),
        };
        let context = Context {
            session_id: self.session_id,
            user: self.user,
            additional_context: self.additional_context.or(self.additional_context_gitlab),
        };
        Parsed::client(request, context, (shape.stream, false), render)
    }
}
