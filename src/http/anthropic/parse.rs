//! Anthropic Messages request bodies (`/v1/messages`, `/v1/messages/count_tokens`) as
//! the pipeline's input. Unknown fields, betas and server-side blocks are accepted and
//! ignored (Claude Code sends many). Images in a message go to the upstream as every
//! dialect's do (base64 as a `data:` URL, a `url` source as the URL); what cannot be
//! served (PDFs, images inside tool results or system text) is refused naming the block.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::render::Stream;
use crate::error::GatewayError;
use crate::http::body::parse_json;
use crate::http::chat::{Context, Dropped, Parsed};
use crate::llm::{GenParams, Input, Message, Role, ToolCall, UpstreamRequest};

/// The fields read (no `flatten`, so that errors keep the field's path).
#[derive(Deserialize)]
struct Request {
    model: String,
    /// Required by `/v1/messages`; `count_tokens` has none.
    max_tokens: Option<u32>,
    messages: Option<Vec<InMessage>>,
    system: Option<Content>,
    stream: Option<bool>,
    stop_sequences: Option<Vec<String>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u32>,
    metadata: Option<Metadata>,
    tools: Option<Vec<Tool>>,
    tool_choice: Option<ToolChoice>,
}

#[derive(Deserialize)]
struct Metadata {
    /// An opaque id of the end user (Claude Code: a JSON string); checked to be a
    /// string, never forwarded (it is no upstream's business).
    user_id: Option<String>,
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    content: Content,
}

/// A string, or content blocks.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

/// Any content block; `kind` says which fields it has.
#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    /// `tool_use`.
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
    /// `tool_result`.
    tool_use_id: Option<String>,
    is_error: Option<bool>,
    /// `tool_result`, `search_result`, `mid_conv_system`.
    content: Option<Content>,
    /// `document` (an object), `search_result` (a string).
    source: Option<Value>,
    title: Option<String>,
}

#[derive(Deserialize)]
struct Tool {
    /// Absent or `custom` for client tools; versioned names (`web_search_20250305`, …)
    /// for Anthropic's server tools.
    #[serde(rename = "type")]
    kind: Option<String>,
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
}

#[derive(Deserialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
}

/// The first text of Claude Code's system prompt: a per-request nonce that would make
/// every prompt differ from the last (and defeat the upstream's prefix cache).
const BILLING_HEADER: &str = "x-anthropic-billing-header:";

/// A `/v1/messages` body, once read, as the pipeline's input.
pub fn messages(body: &[u8]) -> Result<Parsed<Stream>, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let max_tokens = match req.max_tokens {
        None => {
            return Err(GatewayError::invalid(
                "max_tokens",
                "max_tokens: Field required",
            ))
        }
        Some(0) => {
            return Err(GatewayError::invalid(
                "max_tokens",
                "max_tokens must be at least 1",
            ))
        }
        Some(n) => n,
    };
    for (name, value) in [("temperature", req.temperature), ("top_p", req.top_p)] {
        if let Some(v) = value.filter(|v| !(0.0..=1.0).contains(v)) {
            return Err(GatewayError::invalid(
                name,
                format!("{name} must be between 0 and 1, got {v}"),
            ));
        }
    }
    if let Some(user) = req.metadata.take().and_then(|m| m.user_id) {
        tracing::debug!(bytes = user.len(), "metadata.user_id read");
    }
    let conversation = conversation(&mut req)?;
    let (tools, tool_choice) = tools(&mut req);
    let mut extra_options = Map::new();
    if let Some(k) = req.top_k {
        extra_options.insert("top_k".into(), json!(k));
    }
    let params = GenParams {
        max_tokens: Some(max_tokens),
        temperature: req.temperature,
        top_p: req.top_p,
        stop: req.stop_sequences.take().unwrap_or_default(),
        extra_options,
        ..GenParams::default()
    };
    let estimate = estimate(&conversation);
    let stream = req.stream.unwrap_or(false);
    let render = Stream::new(&req.model, estimate);
    let request = UpstreamRequest {
        model: req.model,
        input: Input::Chat(conversation),
        params,
        tools,
        tool_choice,
        whole: false,
        relay: None,
        template_peers: Vec::new(),
    };
    let context = Context {
        session_id: None,
        user: None,
        additional_context: None,
    };
    Ok(Parsed::client(request, context, (stream, false), render))
}

/// What `/v1/messages/count_tokens` counts: the model named, the conversation and the
/// tools in the upstream's shape.
pub struct Counted {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<Value>,
}

/// A `/v1/messages/count_tokens` body.
pub fn count(body: &[u8]) -> Result<Counted, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    let messages = conversation(&mut req)?;
    let (tools, _) = tools(&mut req);
    Ok(Counted {
        model: req.model,
        messages,
        tools,
    })
}

/// The gateway's estimate of a conversation's tokens (for `message_start`, before the
/// upstream counts).
fn estimate(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| crate::context::budget::estimate_tokens(&m.content) as u64)
        .sum()
}

fn conversation(req: &mut Request) -> Result<Vec<Message>, GatewayError> {
    if req.model.trim().is_empty() {
        return Err(GatewayError::invalid("model", "model must not be empty"));
    }
    let messages = match req.messages.take() {
        None => {
            return Err(GatewayError::invalid(
                "messages",
                "messages: Field required",
            ))
        }
        Some(m) if m.is_empty() => {
            return Err(GatewayError::invalid(
                "messages",
                "messages: at least one message is required",
            ))
        }
        Some(m) => m,
    };
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = req.system.take() {
        let text = text_of(system, "system", true)?;
        if !text.is_empty() {
            out.push(Message::text(Role::System, text).at("system"));
        }
    }
    // Tool names by call id: an Ollama upstream wants the name beside each result.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.into_iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            // Claude Code adds system messages mid-conversation.
            "system" => Role::System,
            other => {
                return Err(GatewayError::invalid(
                    format!("messages.{i}.role"),
                    format!("messages.{i}.role: unknown role '{other}': use user or assistant"),
                ))
            }
        };
        match m.content {
            Content::Text(t) => {
                out.push(Message::text(role, t).at(format!("messages.{i}.content")))
            }
            Content::Blocks(blocks) => blocks_into(&mut out, &mut names, role, i, blocks)?,
        }
    }
    Ok(out)
}

/// One message's blocks as neutral messages: the text (and an assistant's tool calls) as
/// one message; each tool result as a tool message, before the text that follows it.
fn blocks_into(
    out: &mut Vec<Message>,
    names: &mut HashMap<String, String>,
    role: Role,
    i: usize,
    blocks: Vec<Block>,
) -> Result<(), GatewayError> {
    let mut texts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut system = Vec::new();
    for (j, block) in blocks.into_iter().enumerate() {
        let field = format!("messages.{i}.content.{j}");
        match block.kind.as_str() {
            "image" => images.push(image(block.source, &field)?),
            "tool_use" => {
                let (Some(id), Some(name)) = (block.id, block.name) else {
                    return Err(GatewayError::invalid(
                        field.clone(),
                        format!("{field}: a tool_use block needs 'id' and 'name'"),
                    ));
                };
                names.insert(id.clone(), name.clone());
                calls.push(ToolCall {
                    id,
                    name,
                    arguments: block.input.unwrap_or_else(|| json!({})),
                });
            }
            "tool_result" => {
                let Some(id) = block.tool_use_id else {
                    return Err(GatewayError::invalid(
                        format!("{field}.tool_use_id"),
                        format!("{field}: a tool_result block needs 'tool_use_id'"),
                    ));
                };
                let mut text = match block.content {
                    None => String::new(),
                    Some(c) => text_of(c, &format!("{field}.content"), false)?,
                };
                if block.is_error == Some(true) {
                    text = format!("Error: {text}");
                }
                let mut result = Message::text(Role::Tool, text).at(format!("{field}.content"));
                result.tool_name = names.get(&id).cloned();
                result.tool_call_id = Some(id);
                results.push(result);
            }
            "mid_conv_system" => {
                if let Some(c) = block.content {
                    let at = format!("{field}.content");
                    system.push((text_of(c, &at, false)?, at));
                }
            }
            _ => {
                if let Some(text) = block_text(block, &field, false)? {
                    texts.push(text);
                }
            }
        }
    }
    // A message of tool results (or system text) only is not also an empty message.
    let only_others = !results.is_empty() || !system.is_empty();
    out.extend(results);
    for (text, at) in system {
        out.push(Message::text(Role::System, text).at(at));
    }
    if !texts.is_empty() || !calls.is_empty() || !images.is_empty() || !only_others {
        let mut message = Message::text(role, texts.join("\n")).at(format!("messages.{i}.content"));
        message.tool_calls = calls;
        message.images = images;
        out.push(message);
    }
    Ok(())
}

/// An image block's source as the URL the upstream is sent: `base64` as a `data:` URL,
/// `url` as it is.
fn image(source: Option<Value>, field: &str) -> Result<String, GatewayError> {
    let source = source.unwrap_or(Value::Null);
    let text = |key: &str| {
        source
            .get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
    };
    match (
        source.get("type").and_then(Value::as_str),
        text("media_type"),
        text("data"),
        text("url"),
    ) {
        (Some("base64"), Some(media), Some(data), _) if media.starts_with("image/") => {
            Ok(format!("data:{media};base64,{data}"))
        }
        (Some("url"), _, _, Some(url))
            if url.starts_with("https://") || url.starts_with("http://") =>
        {
            Ok(url.to_string())
        }
        _ => Err(GatewayError::invalid(
            format!("{field}.source"),
            format!(
                "{field}: an image block needs a source of type base64 (with an image/ \
                 media_type and data) or url (http or https)"
            ),
        )),
    }
}

/// The text of a string or of blocks (system prompts, tool results).
fn text_of(content: Content, field: &str, system: bool) -> Result<String, GatewayError> {
    match content {
        Content::Text(t) => Ok(t),
        Content::Blocks(blocks) => {
            let mut texts = Vec::new();
            for (j, block) in blocks.into_iter().enumerate() {
                if let Some(text) = block_text(block, &format!("{field}.{j}"), system)? {
                    texts.push(text);
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

/// The text a block contributes, `None` for blocks that carry none for this gateway
/// (thinking, server tool results); an error for content it cannot serve.
fn block_text(block: Block, field: &str, system: bool) -> Result<Option<String>, GatewayError> {
    match block.kind.as_str() {
        "text" => match block.text {
            Some(t) if system && t.starts_with(BILLING_HEADER) => Ok(None),
            Some(t) => Ok(Some(t)),
            None => Err(GatewayError::invalid(
                format!("{field}.text"),
                format!("{field}: a text block needs 'text'"),
            )),
        },
        "image" => Err(GatewayError::invalid(
            field.to_string(),
            format!("{field}: an image is read only in a message's own content, not here"),
        )),
        "document" => {
            let mut source = block.source.unwrap_or(Value::Null);
            match source.get("type").and_then(Value::as_str) {
                Some("text") => {
                    Ok(source
                        .get("data")
                        .and_then(Value::as_str)
                        .map(|data| match block.title {
                            Some(title) => format!("{title}\n{data}"),
                            None => data.to_string(),
                        }))
                }
                Some("content") => match source.get_mut("content").map(Value::take) {
                    Some(Value::String(s)) => Ok(Some(s)),
                    Some(blocks @ Value::Array(_)) => {
                        let field = format!("{field}.source.content");
                        let blocks: Vec<Block> = serde_json::from_value(blocks)
                            .map_err(|e| GatewayError::invalid(&field, format!("{field}: {e}")))?;
                        // A document holds text and images: a document inside one is not
                        // Anthropic's format, and each level of them had made the request's
                        // text live once more.
                        let kinds = |b: &Block| matches!(b.kind.as_str(), "text" | "image");
                        if let Some(j) = blocks.iter().position(|b| !kinds(b)) {
                            return Err(GatewayError::invalid(
                                format!("{field}.{j}"),
                                format!(
                                    "{field}.{j}: a document's content holds text blocks, not '{}'",
                                    blocks[j].kind
                                ),
                            ));
                        }
                        text_of(Content::Blocks(blocks), &field, false).map(Some)
                    }
                    _ => Ok(None),
                },
                _ => Err(GatewayError::invalid(
                    field.to_string(),
                    format!(
                        "{field}: only plain-text documents are supported by this gateway; \
                         send the text"
                    ),
                )),
            }
        }
        "search_result" => {
            let mut parts = Vec::new();
            parts.extend(block.title);
            parts.extend(
                block
                    .source
                    .as_ref()
                    .and_then(Value::as_str)
                    .map(String::from),
            );
            if let Some(c) = block.content {
                parts.push(text_of(c, &format!("{field}.content"), false)?);
            }
            Ok(Some(parts.join("\n")))
        }
        // Thinking is the model's own; replayed blocks are dropped, as are server tools'
        // results and anything unknown.
        other => {
            tracing::debug!(block = other, "content block ignored");
            Ok(None)
        }
    }
}

/// Client tools in the upstream's (OpenAI's) shape, and the choice among them. Server
/// tools (web search, code execution, …) are Anthropic's own: dropped.
fn tools(req: &mut Request) -> (Vec<Value>, Option<Value>) {
    let mut out = Vec::new();
    let mut dropped = Dropped::default();
    for tool in req.tools.take().unwrap_or_default() {
        match tool.kind.as_deref() {
            None | Some("custom") => {
                let mut function = json!({
                    "name": tool.name,
                    "parameters": tool.input_schema.unwrap_or_else(|| json!({"type": "object"})),
                });
                if let Some(d) = tool.description {
                    function["description"] = json!(d);
                }
                out.push(json!({"type": "function", "function": function}));
            }
            Some(kind) => dropped.add(kind),
        }
    }
    dropped.log("server tools dropped");
    let choice = match req.tool_choice.take() {
        _ if out.is_empty() => None,
        None => None,
        Some(c) => match (c.kind.as_str(), c.name) {
            ("auto", _) => Some(json!("auto")),
            ("any", _) => Some(json!("required")),
            ("none", _) => Some(json!("none")),
            ("tool", Some(name)) => Some(json!({"type": "function", "function": {"name": name}})),
            _ => None,
        },
    };
    (out, choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(body: Value) -> Parsed<Stream> {
        match messages(body.to_string().as_bytes()) {
            Ok(p) => p,
            Err(e) => panic!("{}", e.message),
        }
    }

    fn chat(p: &Parsed<Stream>) -> &[Message] {
        match &p.turn.request.input {
            Input::Chat(m) => m,
            Input::Prompt { .. } => panic!("a prompt"),
        }
    }

    #[test]
    fn a_tool_round_trip_becomes_calls_and_results() {
        let p = turn(json!({"model": "m", "max_tokens": 100,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cch=1;"},
                       {"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Read a.txt"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": ""},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.txt"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "hello"}]},
                    {"type": "text", "text": "What does it say?"}]}],
            "tools": [{"name": "Read", "description": "Reads", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any"}}));
        let m = chat(&p);
        assert_eq!(m.len(), 5);
        assert_eq!(
            (m[0].role, m[0].content.as_str()),
            (Role::System, "Be brief.")
        );
        assert_eq!(m[2].content, "Reading.");
        assert_eq!(m[2].tool_calls[0].arguments, json!({"path": "a.txt"}));
        assert_eq!(m[3].role, Role::Tool);
        assert_eq!(m[3].tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(m[3].tool_name.as_deref(), Some("Read"));
        assert_eq!(m[3].content, "hello");
        assert_eq!(
            (m[4].role, m[4].content.as_str()),
            (Role::User, "What does it say?")
        );
        let r = &p.turn.request;
        assert_eq!(r.tools.len(), 1);
        assert_eq!(r.tools[0]["function"]["name"], "Read");
        assert_eq!(r.tool_choice, Some(json!("required")));
        assert_eq!(r.params.max_tokens, Some(100));
    }

    #[test]
    fn images_are_read_and_a_missing_max_tokens_is_refused_naming_the_field() {
        let e = messages(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
            .err()
            .unwrap();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let p = turn(
            json!({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[
            {"type":"text","text":"what is this?"},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},
            {"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}),
        );
        let m = &chat(&p)[0];
        assert_eq!(m.content, "what is this?");
        assert_eq!(
            m.images,
            ["data:image/png;base64,AA==", "https://example.com/a.png"]
        );
        let e = messages(
            br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[
                {"type":"image","source":{"type":"file","file_id":"f1"}}]}]}"#,
        )
        .err()
        .unwrap();
        assert_eq!(e.param.as_deref(), Some("messages.0.content.0.source"));
    }

    /// A document's text is read, from its text blocks too; a document nested in one
    /// (not Anthropic's format: each level had made the text live once more) is refused.
    #[test]
    fn documents_are_read_and_documents_inside_them_refused() {
        let document = |content: Value| {
            json!({"type": "document", "title": "Notes",
                "source": {"type": "content", "content": content}})
        };
        let body = |block: Value| {
            json!({"model": "m", "max_tokens": 5,
                "messages": [{"role": "user", "content": [block,
                    {"type": "text", "text": "Summarise it."}]}]})
        };
        let p = turn(body(document(json!([{"type": "text", "text": "line one"},
            {"type": "text", "text": "line two"}]))));
        assert_eq!(chat(&p)[0].content, "line one\nline two\nSummarise it.");
        let p = turn(body(json!({"type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "plain"}})));
        assert_eq!(chat(&p)[0].content, "plain\nSummarise it.");
        let nested = document(json!([document(json!([{"type": "text", "text": "deep"}]))]));
        let e = messages(body(nested).to_string().as_bytes()).err().unwrap();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(
            e.param.as_deref(),
            Some("messages.0.content.0.source.content.0")
        );
        assert!(e.message.contains("'document'"), "{}", e.message);
    }
}
