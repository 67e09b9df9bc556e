//! Ollama's native API: `/api/chat` and `/api/generate` streamed as NDJSON.

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Map, Value};

use super::http::{error_in_json, Upstream, MAX_SMALL_REPLY};
use super::relay;
use super::{
    ChatModel, Chunk, ChunkStream, FinishReason, GenParams, Input, Message, ModelCard, Role,
    ToolCall, UpstreamError, UpstreamErrorKind, UpstreamModel, UpstreamRequest, Usage,
};

pub struct OllamaChat {
    up: Upstream,
}

impl OllamaChat {
    pub(crate) fn new(up: Upstream) -> Self {
        Self { up }
    }

    fn request_body(&self, req: &UpstreamRequest) -> Result<(&'static str, Value), UpstreamError> {
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert("stream".into(), json!(!req.whole));
        let path = match &req.input {
            Input::Chat(messages) => {
                let messages = messages
                    .iter()
                    .enumerate()
                    .map(|(i, m)| self.message(m, &messages[..i]))
                    .collect::<Result<Vec<_>, _>>()?;
                body.insert("messages".into(), Value::Array(messages));
                if !req.tools.is_empty() {
                    body.insert("tools".into(), Value::Array(req.tools.clone()));
                }
                "/api/chat"
            }
            Input::Prompt {
                prompt,
                suffix,
                system,
                raw,
                images,
            } => {
                body.insert("prompt".into(), json!(prompt));
                if let Some(s) = suffix {
                    body.insert("suffix".into(), json!(s));
                }
                if let Some(s) = system {
                    body.insert("system".into(), json!(s));
                }
                if *raw {
                    body.insert("raw".into(), json!(true));
                }
                if !images.is_empty() {
                    body.insert("images".into(), json!(self.images(images)?));
                }
                "/api/generate"
            }
        };
        let options = options(&req.params);
        if !options.is_empty() {
            body.insert("options".into(), Value::Object(options));
        }
        if let Some(format) = req.params.response_format.as_ref().and_then(format_of) {
            body.insert("format".into(), format);
        }
        if let Some(v) = &req.params.keep_alive {
            body.insert("keep_alive".into(), v.clone());
        }
        if let Some(v) = &req.params.think {
            body.insert("think".into(), v.clone());
        }
        Ok((path, Value::Object(body)))
    }

    fn message(&self, m: &Message, earlier: &[Message]) -> Result<Value, UpstreamError> {
        let mut out = Map::new();
        out.insert("role".into(), json!(m.role.as_str()));
        out.insert("content".into(), json!(m.content));
        if !m.images.is_empty() {
            out.insert("images".into(), json!(self.images(&m.images)?));
        }
        if !m.tool_calls.is_empty() {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| c.ollama_json(i))
                .collect();
            out.insert("tool_calls".into(), Value::Array(calls));
        }
        if m.role == Role::Tool {
            // Ollama names the function a result belongs to; OpenAI clients give the call id.
            let name = m.tool_name.clone().or_else(|| {
                let id = m.tool_call_id.as_deref()?;
                earlier
                    .iter()
                    .flat_map(|e| &e.tool_calls)
                    .find(|c| c.id == id)
                    .map(|c| c.name.clone())
            });
            if let Some(name) = name {
                out.insert("tool_name".into(), json!(name));
            }
        }
        Ok(Value::Object(out))
    }

    /// Ollama takes bare base64; `data:` URLs are unwrapped, links cannot be sent.
    fn images(&self, images: &[String]) -> Result<Vec<String>, UpstreamError> {
        images
            .iter()
            .map(|img| {
                if let Some(rest) = img.strip_prefix("data:") {
                    Ok(rest
                        .split_once(',')
                        .map(|(_, b64)| b64)
                        .unwrap_or(rest)
                        .to_string())
                } else if img.starts_with("http://") || img.starts_with("https://") {
                    Err(self.up.error(
                        UpstreamErrorKind::Unsupported,
                        "the Ollama upstream needs images inline (data: URLs), not links",
                    ))
                } else {
                    Ok(img.clone())
                }
            })
            .collect()
    }
}

/// Neutral parameters as Ollama `options`.
fn options(p: &GenParams) -> Map<String, Value> {
    let mut o = p.extra_options.clone();
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            o.insert(k.to_string(), v);
        }
    };
    set("num_predict", p.max_tokens.map(|v| json!(v)));
    set("temperature", p.temperature.map(|v| json!(v)));
    set("top_p", p.top_p.map(|v| json!(v)));
    set("seed", p.seed.map(|v| json!(v)));
    set("presence_penalty", p.presence_penalty.map(|v| json!(v)));
    set("frequency_penalty", p.frequency_penalty.map(|v| json!(v)));
    if !p.stop.is_empty() {
        o.insert("stop".into(), json!(p.stop));
    }
    o
}

/// OpenAI `response_format` as Ollama `format`.
fn format_of(rf: &Value) -> Option<Value> {
    match rf.get("type").and_then(Value::as_str)? {
        "json_object" => Some(json!("json")),
        "json_schema" => rf.pointer("/json_schema/schema").cloned(),
        _ => None,
    }
}

/// Ollama `format` as OpenAI `response_format`.
pub fn response_format_of(format: &Value) -> Option<Value> {
    match format {
        Value::String(s) if s == "json" => Some(json!({"type": "json_object"})),
        Value::Object(_) => Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": format}
        })),
        _ => None,
    }
}

#[async_trait]
impl ChatModel for OllamaChat {
    fn base_url(&self) -> &str {
        self.up.shown()
    }

    async fn stream(&self, request: &UpstreamRequest) -> Result<ChunkStream, UpstreamError> {
        let (path, body) = self.request_body(request)?;
        let post = self.up.post_json(path, &body);
        // A whole answer is one object: the stream's final line with all the text in it.
        let response = match request.whole {
            true => self.up.send_whole(post).await?,
            false => self.up.send(post).await?,
        };
        let relay = request.relay.is_some();
        Ok(ndjson_chunks(response, self.up.clone(), relay).boxed())
    }

    fn relays(&self) -> Option<super::Wire> {
        Some(super::Wire::Ollama)
    }

    async fn models(&self) -> Result<Vec<UpstreamModel>, UpstreamError> {
        let response = self.up.send(self.up.get("/api/tags")).await?;
        let v = self
            .up
            .json(response, MAX_SMALL_REPLY, self.up.small_reply_within())
            .await?;
        let models = v
            .get("models")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(models
            .iter()
            .filter_map(|m| {
                let id = m
                    .get("model")
                    .or_else(|| m.get("name"))?
                    .as_str()?
                    .to_string();
                let modified_at = m
                    .get("modified_at")
                    .and_then(Value::as_str)
                    .map(String::from);
                let created = modified_at
                    .as_deref()
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| t.timestamp())
                    .unwrap_or(0);
                Some(UpstreamModel {
                    id,
                    created,
                    owned_by: "ollama".into(),
                    modified_at,
                    size: m.get("size").and_then(Value::as_u64).unwrap_or(0),
                    digest: m.get("digest").and_then(Value::as_str).unwrap_or("").into(),
                    details: m.get("details").cloned(),
                })
            })
            .collect())
    }

    async fn show(&self, model: &str) -> Result<ModelCard, UpstreamError> {
        let response = self
            .up
            .send(self.up.post_json("/api/show", &json!({"model": model})))
            .await?;
        let v = self
            .up
            .json(response, MAX_SMALL_REPLY, self.up.small_reply_within())
            .await?;
        let model_info = v.get("model_info").filter(|m| !m.is_null()).cloned();
        let context_length = model_info.as_ref().and_then(|mi| {
            mi.as_object()?
                .iter()
                .find(|(k, _)| k.ends_with(".context_length"))
                .and_then(|(_, v)| v.as_u64())
        });
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        Ok(ModelCard {
            context_length,
            details: v.get("details").cloned(),
            parameters: text("parameters"),
            template: text("template"),
            capabilities: v
                .get("capabilities")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            model_info,
        })
    }
}

/// Reads Ollama's NDJSON body into chunks. Ends with `Done`, or with an error if the
/// upstream reported one, sent something unreadable, or stopped before `done: true`.
/// Relayed, the lines of each piece of the body go on as they came in one
/// [`Chunk::Verbatim`] (the last one before `Done`, as always).
fn ndjson_chunks(
    response: reqwest::Response,
    up: Upstream,
    relay: bool,
) -> impl futures::Stream<Item = Result<Chunk, UpstreamError>> {
    async_stream::stream! {
        let mut body = response.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut scanned = 0;
        let mut state = LineState::default();
        let mut ended = false;
        loop {
            match body.next().await {
                Some(Ok(bytes)) => buf.extend_from_slice(&bytes),
                Some(Err(e)) => {
                    yield Err(up.closed(&e));
                    return;
                }
                None => {
                    ended = true;
                }
            }
            // Relayed: the lines of this piece as they came, and how many had content.
            let mut framed = Vec::new();
            let mut deltas = 0u32;
            let mut items = Vec::new();
            // Where the next line starts: the lines read are dropped from `buf` at once,
            // after the piece (not each one, which moved the rest every time).
            let mut at = 0;
            loop {
                // Whole lines; at the body's end, what is left is the last one.
                let from = at.max(scanned);
                let end = match memchr::memchr(b'\n', &buf[from..]) {
                    Some(pos) if from + pos - at > up.max_line_bytes() => {
                        items.push(Err(up.too_long()));
                        break;
                    }
                    Some(pos) => from + pos + 1,
                    None if ended && at < buf.len() => buf.len(),
                    None => break,
                };
                let line = &buf[at..end];
                at = end;
                let read = if relay {
                    let found = relay::scan(&relay::OLLAMA, line);
                    // Its text and tool calls are the line itself, passed on as it came.
                    let read: Vec<_> = match found.read {
                        true => state
                            .read(line, &up)
                            .into_iter()
                            .filter(|i| !matches!(i, Ok(Chunk::Text(_) | Chunk::ToolCalls(_))))
                            .collect(),
                        false => Vec::new(),
                    };
                    if !read.iter().any(Result::is_err) && !line.trim_ascii().is_empty() {
                        // Text goes on as UTF-8, as when the gateway writes the lines.
                        framed.extend_from_slice(String::from_utf8_lossy(line).as_bytes());
                        deltas += u32::from(found.content);
                    }
                    read
                } else {
                    state.read(line, &up)
                };
                let stop = read
                    .iter()
                    .any(|i| i.is_err() || matches!(i, Ok(Chunk::Done { .. })));
                items.extend(read);
                if stop {
                    break;
                }
            }
            if !framed.is_empty() {
                yield Ok(Chunk::Verbatim { bytes: bytes::Bytes::from(framed), deltas });
            }
            for item in items {
                let stop = item.is_err() || matches!(item, Ok(Chunk::Done { .. }));
                yield item;
                if stop {
                    return;
                }
            }
            if ended {
                break;
            }
            buf.drain(..at);
            scanned = buf.len();
            if buf.len() > up.max_line_bytes() {
                yield Err(up.too_long());
                return;
            }
        }
        yield Err(up.error(UpstreamErrorKind::Closed, "no final line with done: true"));
    }
}

/// Most tool calls one answer may hold (as for OpenAI-compatible upstreams).
const MAX_TOOL_CALLS: usize = 128;

#[derive(Default)]
struct LineState {
    saw_tool_calls: bool,
    /// The ids of the calls passed on so far (the upstream's, or made up for it).
    call_ids: Vec<String>,
}

impl LineState {
    /// One NDJSON line → zero or more chunks (or one error).
    fn read(&mut self, line: &[u8], up: &Upstream) -> Vec<Result<Chunk, UpstreamError>> {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return Vec::new();
        }
        let v: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return vec![Err(up.error(
                    UpstreamErrorKind::Protocol,
                    format!("a line that is not JSON ({e})"),
                ))];
            }
        };
        if let Some(msg) = error_in_json(&v) {
            return vec![Err(up.error(UpstreamErrorKind::Stream, msg))];
        }
        let mut out = Vec::new();
        let text = v
            .pointer("/message/content")
            .or_else(|| v.get("response"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !text.is_empty() {
            out.push(Ok(Chunk::Text(text.to_string())));
        }
        if let Some(calls) = v.pointer("/message/tool_calls").and_then(Value::as_array) {
            // Ollama sends each call whole, once; a call without a name is nothing to run,
            // and one whose id was already passed on is a repeat.
            let mut fresh = Vec::new();
            for call in calls.iter().filter_map(tool_call) {
                if call.name.is_empty() || self.call_ids.contains(&call.id) {
                    continue;
                }
                if self.call_ids.len() >= MAX_TOOL_CALLS {
                    out.push(Err(up.error(
                        UpstreamErrorKind::Protocol,
                        format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
                    )));
                    return out;
                }
                self.call_ids.push(call.id.clone());
                fresh.push(call);
            }
            if !fresh.is_empty() {
                self.saw_tool_calls = true;
                out.push(Ok(Chunk::ToolCalls(fresh)));
            }
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            let mut finish = v
                .get("done_reason")
                .and_then(Value::as_str)
                .map(FinishReason::parse)
                .unwrap_or(FinishReason::Stop);
            if self.saw_tool_calls && finish == FinishReason::Stop {
                finish = FinishReason::ToolCalls;
            }
            let count = |k: &str| v.get(k).and_then(Value::as_u64);
            let usage = match (count("prompt_eval_count"), count("eval_count")) {
                (None, None) => None,
                (p, c) => Some(Usage {
                    prompt_tokens: p.unwrap_or(0),
                    completion_tokens: c.unwrap_or(0),
                }),
            };
            out.push(Ok(Chunk::Done { finish, usage }));
        }
        out
    }
}

fn tool_call(v: &Value) -> Option<ToolCall> {
    let f = v.get("function")?;
    let name = f.get("name")?.as_str()?.to_string();
    let arguments = match f.get("arguments") {
        Some(Value::String(s)) => ToolCall::parse_arguments(s),
        Some(other) => other.clone(),
        None => Value::Object(Map::new()),
    };
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(ToolCall::new_id);
    Some(ToolCall {
        id,
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn up() -> Upstream {
        Upstream::new(
            "http://u",
            None,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap()
    }

    #[test]
    fn lines_become_chunks() {
        let up = up();
        let mut st = LineState::default();
        assert_eq!(
            st.read(
                br#"{"message":{"role":"assistant","content":"Hi"},"done":false}"#,
                &up
            ),
            vec![Ok(Chunk::Text("Hi".into()))]
        );
        assert!(st.read(b"  \n", &up).is_empty());
        let done = st.read(
            br#"{"message":{"content":""},"done":true,"done_reason":"length","prompt_eval_count":7,"eval_count":3}"#,
            &up,
        );
        assert_eq!(
            done,
            vec![Ok(Chunk::Done {
                finish: FinishReason::Length,
                usage: Some(Usage {
                    prompt_tokens: 7,
                    completion_tokens: 3
                })
            })]
        );
    }

    #[test]
    fn tool_calls_turn_the_finish_into_tool_calls() {
        let up = up();
        let mut st = LineState::default();
        let out = st.read(
            br#"{"message":{"content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}"#,
            &up,
        );
        let Ok(Chunk::ToolCalls(calls)) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(calls[0].name, "f");
        assert_eq!(calls[0].arguments, json!({"a": 1}));
        assert!(calls[0].id.starts_with("call_"));
        let done = st.read(br#"{"done":true,"done_reason":"stop"}"#, &up);
        assert!(matches!(
            done[0],
            Ok(Chunk::Done {
                finish: FinishReason::ToolCalls,
                ..
            })
        ));
    }

    /// Each call once, with its id and name; nameless calls dropped; no more than 128.
    #[test]
    fn tool_calls_come_out_once_and_bounded() {
        let up = up();
        let mut st = LineState::default();
        let line = br#"{"message":{"content":"","tool_calls":[{"id":"call_a","function":{"index":0,"name":"get_weather","arguments":{"city":"Paris"}}},{"function":{"index":1,"name":"","arguments":{}}}]},"done":false}"#;
        let out = st.read(line, &up);
        let Ok(Chunk::ToolCalls(calls)) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("call_a", "get_weather")
        );
        assert!(
            st.read(line, &up).is_empty(),
            "a repeated call is not a new one"
        );

        let mut st = LineState::default();
        let many: Vec<Value> = (0..129)
            .map(|i| json!({"function": {"index": i, "name": "f", "arguments": {}}}))
            .collect();
        let line =
            json!({"message": {"content": "", "tool_calls": many}, "done": false}).to_string();
        let out = st.read(line.as_bytes(), &up);
        assert!(
            matches!(out.last(), Some(Err(e)) if e.kind == UpstreamErrorKind::Protocol && e.detail.contains("128")),
            "{out:?}"
        );
    }

    #[test]
    fn error_and_garbage_lines_are_errors() {
        let up = up();
        let mut st = LineState::default();
        let e = st.read(br#"{"error":"out of memory"}"#, &up);
        assert!(
            matches!(&e[0], Err(e) if e.kind == UpstreamErrorKind::Stream && e.detail == "out of memory")
        );
        let g = st.read(b"<html>", &up);
        assert!(matches!(&g[0], Err(e) if e.kind == UpstreamErrorKind::Protocol));
    }

    #[test]
    fn tool_results_get_the_function_name_and_images_are_unwrapped() {
        let chat = OllamaChat::new(up());
        let mut asst = Message::text(Role::Assistant, "");
        asst.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: json!({}),
        });
        let mut result = Message::text(Role::Tool, "sunny");
        result.tool_call_id = Some("c1".into());
        let mut user = Message::text(Role::User, "look");
        user.images.push("data:image/png;base64,AAAA".into());
        let req = UpstreamRequest {
            model: "m".into(),
            input: Input::Chat(vec![user, asst, result]),
            params: GenParams {
                max_tokens: Some(5),
                stop: vec!["x".into()],
                ..Default::default()
            },
            tools: vec![],
            tool_choice: None,
            whole: false,
            relay: None,
            template_peers: Vec::new(),
        };
        let (path, body) = chat.request_body(&req).unwrap();
        assert_eq!(path, "/api/chat");
        assert_eq!(body["messages"][0]["images"], json!(["AAAA"]));
        assert_eq!(body["messages"][2]["tool_name"], json!("weather"));
        assert_eq!(body["options"], json!({"num_predict": 5, "stop": ["x"]}));
    }
}
