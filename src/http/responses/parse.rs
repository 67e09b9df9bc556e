//! OpenAI Responses request bodies (`/v1/responses`) as the pipeline's input: `input` as
//! a string or items (`message`, `function_call`, `function_call_output`; reasoning and
//! hosted tools' items are dropped), `instructions`, function tools. Unknown fields are
//! accepted and ignored (Codex sends several of its own).

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Value};

use super::render::Stream;
use crate::error::GatewayError;
use crate::http::body::parse_json;
use crate::http::chat::{Context, Dropped, Parsed};
use crate::http::stored::Thread;
use crate::llm::{GenParams, Input, Message, Role, ToolCall, UpstreamRequest};

/// The fields read (no `flatten`, so that errors keep the field's path).
#[derive(Deserialize)]
struct Request {
    model: String,
    input: Option<InputField>,
    instructions: Option<String>,
    tools: Option<Vec<Tool>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    max_output_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stream: Option<bool>,
    store: Option<bool>,
    previous_response_id: Option<String>,
    text: Option<TextOptions>,
    metadata: Option<Value>,
    user: Option<Value>,
    session_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum InputField {
    Text(String),
    Items(Vec<Item>),
}

/// Any input item; `kind` (absent on a plain message) says which fields it has.
#[derive(Deserialize)]
struct Item {
    #[serde(rename = "type")]
    kind: Option<String>,
    role: Option<String>,
    content: Option<Content>,
    /// `function_call`.
    call_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    /// `function_call_output`.
    output: Option<Content>,
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
    refusal: Option<String>,
    image_url: Option<String>,
}

#[derive(Deserialize)]
struct Tool {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    strict: Option<bool>,
}

#[derive(Deserialize)]
struct TextOptions {
    format: Option<Value>,
}

/// A `/v1/responses` body, once read, as the pipeline's input.
pub fn responses(body: &[u8]) -> Result<Parsed<Stream>, GatewayError> {
    let mut req = parse_json::<Request>(body)?;
    if req.model.trim().is_empty() {
        return Err(GatewayError::invalid("model", "model must not be empty"));
    }
    for (name, value, max) in [
        ("temperature", req.temperature, 2.0),
        ("top_p", req.top_p, 1.0),
    ] {
        if let Some(v) = value.filter(|v| !(0.0..=max).contains(v)) {
            return Err(GatewayError::invalid(
                name,
                format!("{name} must be between 0 and {max}, got {v}"),
            ));
        }
    }
    if req.max_output_tokens == Some(0) {
        return Err(GatewayError::invalid(
            "max_output_tokens",
            "max_output_tokens must be at least 1",
        ));
    }
    let mut messages = Vec::new();
    if let Some(instructions) = req.instructions.clone().filter(|i| !i.is_empty()) {
        messages.push(Message::text(Role::System, instructions).at("instructions"));
    }
    match req.input.take() {
        None => return Err(GatewayError::invalid("input", "input is required")),
        Some(InputField::Text(t)) => messages.push(Message::text(Role::User, t).at("input")),
        Some(InputField::Items(items)) => items_into(&mut messages, items)?,
    }
    if !messages.iter().any(|m| m.role != Role::System) {
        return Err(GatewayError::invalid(
            "input",
            "input must contain at least one message",
        ));
    }
    let (tools, echoed_tools) = tools(req.tools.take().unwrap_or_default());
    let tool_choice = req.tool_choice.take();
    let upstream_choice = match &tool_choice {
        _ if tools.is_empty() => None,
        Some(Value::String(s)) if ["auto", "none", "required"].contains(&s.as_str()) => {
            Some(json!(s))
        }
        Some(c) if c["type"] == "function" => c["name"]
            .as_str()
            .map(|name| json!({"type": "function", "function": {"name": name}})),
        _ => None,
    };
    let format = req.text.as_ref().and_then(|t| t.format.clone());
    let response_format = format.as_ref().and_then(|f| match f["type"].as_str() {
        Some("json_schema") => Some(json!({"type": "json_schema", "json_schema": {
            "name": f["name"], "schema": f["schema"], "strict": f["strict"]}})),
        Some("json_object") => Some(json!({"type": "json_object"})),
        _ => None,
    });
    let params = GenParams {
        max_tokens: req.max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        response_format,
        ..GenParams::default()
    };
    // Stateless unless asked: `store: true` keeps the response for a later
    // `previous_response_id`.
    let store = req.store.unwrap_or(false);
    let echo = json!({
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata.take().unwrap_or_else(|| json!({})),
        "parallel_tool_calls": req.parallel_tool_calls.unwrap_or(true),
        "previous_response_id": req.previous_response_id.clone(),
        "store": store,
        "temperature": req.temperature,
        "text": {"format": format.unwrap_or_else(|| json!({"type": "text"}))},
        "tool_choice": tool_choice.unwrap_or_else(|| json!("auto")),
        "tools": echoed_tools,
        "top_p": req.top_p,
        "truncation": "disabled",
        "user": null,
    });
    let stream = req.stream.unwrap_or(false);
    let render = Stream::new(&req.model, echo);
    let thread = Thread {
        continues: req.previous_response_id.take(),
        keep_as: store.then(|| render.id().to_string()),
    };
    let request = UpstreamRequest {
        model: req.model,
        input: Input::Chat(messages),
        params,
        tools,
        tool_choice: upstream_choice,
        whole: false,
        relay: None,
        template_peers: Vec::new(),
    };
    let context = Context {
        session_id: req.session_id,
        user: req.user,
        additional_context: None,
    };
    let mut parsed = Parsed::client(request, context, (stream, false), render);
    parsed.thread = thread;
    Ok(parsed)
}

/// Input items as neutral messages: consecutive function calls join the assistant
/// message before them; each output is a tool message.
fn items_into(out: &mut Vec<Message>, items: Vec<Item>) -> Result<(), GatewayError> {
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, item) in items.into_iter().enumerate() {
        let field = format!("input[{i}]");
        match item.kind.as_deref() {
            None | Some("message") => {
                let role = match item.role.as_deref() {
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    Some("system" | "developer") => Role::System,
                    other => {
                        return Err(GatewayError::invalid(
                            format!("{field}.role"),
                            format!(
                                "unknown role {other:?} in {field}.role: use user, assistant, \
                                 system or developer"
                            ),
                        ))
                    }
                };
                let mut message = Message::text(role, "").at(format!("{field}.content"));
                match item.content {
                    None => {}
                    Some(c) => {
                        let (text, images) = content(c, &format!("{field}.content"))?;
                        message.content = text;
                        message.images = images;
                    }
                }
                out.push(message);
            }
            Some("function_call") => {
                let (Some(call_id), Some(name)) = (item.call_id, item.name) else {
                    return Err(GatewayError::invalid(
                        field.clone(),
                        format!("{field}: a function_call needs 'call_id' and 'name'"),
                    ));
                };
                names.insert(call_id.clone(), name.clone());
                let call = ToolCall {
                    id: call_id,
                    name,
                    arguments: ToolCall::parse_arguments(item.arguments.as_deref().unwrap_or("")),
                };
                match out.last_mut() {
                    Some(last) if last.role == Role::Assistant => last.tool_calls.push(call),
                    _ => {
                        let mut message = Message::text(Role::Assistant, "");
                        message.tool_calls.push(call);
                        out.push(message);
                    }
                }
            }
            Some("function_call_output") => {
                let Some(call_id) = item.call_id else {
                    return Err(GatewayError::invalid(
                        format!("{field}.call_id"),
                        format!("{field}: a function_call_output needs 'call_id'"),
                    ));
                };
                let text = match item.output {
                    None => String::new(),
                    Some(c) => content(c, &format!("{field}.output"))?.0,
                };
                let mut message = Message::text(Role::Tool, text).at(format!("{field}.output"));
                message.tool_name = names.get(&call_id).cloned();
                message.tool_call_id = Some(call_id);
                out.push(message);
            }
            Some(other) => tracing::debug!(item = other, "input item ignored"),
        }
    }
    Ok(())
}

/// The text (parts joined by new lines) and images of a message's content.
fn content(c: Content, field: &str) -> Result<(String, Vec<String>), GatewayError> {
    match c {
        Content::Text(t) => Ok((t, Vec::new())),
        Content::Parts(parts) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for (j, part) in parts.into_iter().enumerate() {
                match (part.kind.as_str(), part.text, part.refusal) {
                    ("input_text" | "output_text" | "text", Some(t), _) => texts.push(t),
                    ("refusal", _, Some(r)) => texts.push(r),
                    ("input_image", _, _) => match part.image_url {
                        Some(url) => images.push(url),
                        None => {
                            return Err(GatewayError::invalid(
                                format!("{field}[{j}].image_url"),
                                format!(
                                    "{field}[{j}]: only images given by 'image_url' are supported"
                                ),
                            ))
                        }
                    },
                    (kind, _, _) => {
                        return Err(GatewayError::invalid(
                            format!("{field}[{j}]"),
                            format!(
                            "{field}[{j}]: a '{kind}' part is not supported here (use input_text)"
                        ),
                        ))
                    }
                }
            }
            Ok((texts.join("\n"), images))
        }
    }
}

/// Function tools in the upstream's (Chat Completions') shape, and the tools as the
/// response echoes them. Hosted tools (web search, file search, …) are dropped.
fn tools(tools: Vec<Tool>) -> (Vec<Value>, Vec<Value>) {
    let mut upstream = Vec::new();
    let mut echoed = Vec::new();
    let mut dropped = Dropped::default();
    for tool in tools {
        match (tool.kind.as_str(), tool.name) {
            ("function", Some(name)) => {
                let parameters = tool
                    .parameters
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                let mut function = json!({"name": name, "parameters": parameters});
                if let Some(d) = &tool.description {
                    function["description"] = json!(d);
                }
                if let Some(s) = tool.strict {
                    function["strict"] = json!(s);
                }
                echoed.push(json!({"type": "function", "name": name,
                    "description": tool.description, "parameters": parameters,
                    "strict": tool.strict.unwrap_or(false)}));
                upstream.push(json!({"type": "function", "function": function}));
            }
            (kind, _) => dropped.add(kind),
        }
    }
    dropped.log("hosted tools dropped");
    (upstream, echoed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_call_round_trip_becomes_calls_and_results() {
        let body = json!({"model": "m", "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "18C"}],
            "tools": [{"type": "function", "name": "get_weather",
                       "parameters": {"type": "object"}},
                      {"type": "web_search"}],
            "tool_choice": "auto", "reasoning": null, "include": [], "store": false});
        let p = match responses(body.to_string().as_bytes()) {
            Ok(p) => p,
            Err(e) => panic!("{}", e.message),
        };
        let Input::Chat(m) = &p.turn.request.input else {
            panic!("a prompt")
        };
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].role, Role::System);
        assert_eq!(m[2].tool_calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(m[3].tool_name.as_deref(), Some("get_weather"));
        assert_eq!(p.turn.request.tools.len(), 1);
        assert_eq!(p.turn.request.tool_choice, Some(json!("auto")));
    }
}
