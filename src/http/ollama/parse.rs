//! Ollama request bodies (`/api/chat`, `/api/generate`) as the pipeline's input.
//! Anything not listed is accepted and ignored; errors name the field (or the option).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::render::{Kind, Ndjson};
use crate::error::GatewayError;
use crate::http::body::parse_json;
use crate::http::chat::{Context, Parsed, WireToolCall};
use crate::llm::ollama::response_format_of;
use crate::llm::{GenParams, Input, Message, Role, UpstreamRequest};

/// Both endpoints' fields (no `flatten`, so that errors keep the field's path).
/// Anything not listed is accepted and ignored.
#[derive(Deserialize)]
struct Request {
    model: String,
    /// Chat only.
    #[serde(default)]
    messages: Vec<InMessage>,
    tools: Option<Vec<Value>>,
    /// Generate only.
    prompt: Option<String>,
    suffix: Option<String>,
    system: Option<String>,
    #[serde(default)]
    raw: bool,
    #[serde(default)]
    images: Vec<String>,
    stream: Option<bool>,
    options: Option<Map<String, Value>>,
    format: Option<Value>,
    keep_alive: Option<Value>,
    think: Option<Value>,
    session_id: Option<String>,
    user: Option<Value>,
    additional_context: Option<Value>,
    /// GitLab's spelling of the same list.
    #[serde(rename = "additionalContext")]
    additional_context_gitlab: Option<Value>,
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    content: Option<String>,
    #[serde(default)]
    images: Option<Vec<String>>,
    tool_calls: Option<Vec<WireToolCall>>,
    tool_name: Option<String>,
    tool_call_id: Option<String>,
}

impl Request {
    /// Sampling parameters from `options` (type-checked, errors name the option).
    fn params(&mut self) -> Result<GenParams, GatewayError> {
        if self.model.trim().is_empty() {
            return Err(GatewayError::invalid("model", "model is required"));
        }
        let mut o = self.options.take().unwrap_or_default();
        let num_predict = take::<i64>(&mut o, "num_predict")?;
        let stop = match o.remove("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s],
            Some(v) => serde_json::from_value::<Vec<String>>(v).map_err(|_| {
                GatewayError::invalid(
                    "options.stop",
                    "options.stop must be a string or a list of strings",
                )
            })?,
        };
        Ok(GenParams {
            max_tokens: num_predict
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0),
            temperature: take(&mut o, "temperature")?,
            top_p: take(&mut o, "top_p")?,
            stop,
            seed: take(&mut o, "seed")?,
            presence_penalty: take(&mut o, "presence_penalty")?,
            frequency_penalty: take(&mut o, "frequency_penalty")?,
            response_format: self.format.as_ref().and_then(response_format_of),
            extra_options: o,
            keep_alive: self.keep_alive.take(),
            think: self.think.take(),
        })
    }
}

/// Removes one option, checking its type.
fn take<T: serde::de::DeserializeOwned>(
    o: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<T>, GatewayError> {
    match o.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v).map(Some).map_err(|e| {
            GatewayError::invalid(
                format!("options.{key}"),
                format!("invalid value for 'options.{key}': {e}"),
            )
        }),
    }
}

fn message(i: usize, m: InMessage) -> Result<Message, GatewayError> {
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(GatewayError::invalid(
                format!("messages[{i}].role"),
                format!(
                "unknown role '{other}' in messages[{i}].role: use system, user, assistant or tool"
            ),
            ))
        }
    };
    let mut out = Message::text(role, m.content.unwrap_or_default());
    out.images = m.images.unwrap_or_default();
    out.tool_calls = WireToolCall::calls(m.tool_calls);
    out.tool_name = m.tool_name;
    out.tool_call_id = m.tool_call_id;
    Ok(out)
}

/// An `/api/chat` body, once read, as the pipeline's input.
pub fn chat(body: &[u8]) -> Result<Parsed<Ndjson>, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let params = req.params()?;
    let messages = std::mem::take(&mut req.messages)
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    // Ollama answers a chat without messages by loading the model.
    let load = messages.is_empty();
    let tools = req.tools.take().unwrap_or_default();
    Ok(req.into_parsed(Input::Chat(messages), params, tools, load, Kind::Chat))
}

/// An `/api/generate` body, once read, as the pipeline's input.
pub fn generate(body: &[u8]) -> Result<Parsed<Ndjson>, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let params = req.params()?;
    let prompt = req.prompt.take().unwrap_or_default();
    let images = std::mem::take(&mut req.images);
    // An empty prompt is Ollama's "load the model" request.
    let load = prompt.is_empty() && images.is_empty();
    let input = Input::Prompt {
        prompt,
        suffix: req.suffix.take(),
        system: req.system.take(),
        raw: req.raw,
        images,
    };
    Ok(req.into_parsed(input, params, Vec::new(), load, Kind::Generate))
}

impl Request {
    /// The turn (the editor context read from the request) and its rendering; Ollama
    /// streams unless told not to.
    fn into_parsed(
        self,
        input: Input,
        params: GenParams,
        tools: Vec<Value>,
        load: bool,
        kind: Kind,
    ) -> Parsed<Ndjson> {
        let render = Ndjson::new(kind, &self.model);
        let request = UpstreamRequest {
            model: self.model,
            input,
            params,
            tools,
            tool_choice: None,
            whole: false,
            relay: None,
            template_peers: Vec::new(),
        };
        let context = Context {
            session_id: self.session_id,
            user: self.user,
            additional_context: self.additional_context.or(self.additional_context_gitlab),
        };
        Parsed::client(
            request,
            context,
            (self.stream.unwrap_or(true), load),
            render,
        )
    }
}
