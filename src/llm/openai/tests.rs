use super::*;
use crate::llm::{GenParams, Role};
use std::time::Duration;

fn up() -> Upstream {
    Upstream::new(
        "http://u/v1",
        None,
        Duration::from_secs(1),
        Duration::from_secs(1),
    )
    .unwrap()
}

/// An index of 2^40 asked for terabytes and aborted the process; u64::MAX wrapped and
/// panicked. Now the upstream's stream is invalid, and nothing is allocated for it.
#[test]
fn a_tool_call_index_from_the_upstream_is_bounded() {
    let up = up();
    for index in [
        "128".to_string(),
        (1u64 << 40).to_string(),
        u64::MAX.to_string(),
    ] {
        let mut st = SseState::default();
        let event = format!(
            r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{index},"id":"c","function":{{"name":"f","arguments":""}}}}]}},"finish_reason":null}}]}}"#
        );
        let e = st.read(&event, &up).unwrap_err();
        assert_eq!(e.kind, UpstreamErrorKind::Protocol, "{index}");
        assert!(e.detail.contains("at most 128"), "{}", e.detail);
        assert!(st.calls.is_empty());
    }
    let mut st = SseState::default();
    st.read(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":127,"id":"c","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}"#, &up).unwrap();
    assert_eq!(st.calls.len(), 128);
}

/// Arguments that never end are cut off at `llm.max_chunk_bytes`, whatever the form
/// of their deltas.
#[test]
fn tool_calls_that_never_end_are_bounded() {
    let up = up().with_max_line_bytes(1000);
    let mut st = SseState::default();
    let mut failed = None;
    for i in 0..20 {
        // Each piece different: one that repeats what came before replaces it.
        let piece = format!("{i:03}{}", "x".repeat(97));
        let delta = json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "c", "function": {"name": "f", "arguments": piece}}]},
            "finish_reason": null}]});
        if let Err(e) = st.read(&delta.to_string(), &up) {
            failed = Some((i, e));
            break;
        }
    }
    let (i, e) = failed.expect("the calls are bounded");
    assert_eq!(i, 9, "cut past 1000 bytes");
    assert_eq!(e.kind, UpstreamErrorKind::Protocol);
    assert!(e.detail.contains("llm.max_chunk_bytes"), "{e}");
}

#[test]
fn tool_call_fragments_are_assembled() {
    let up = up();
    let mut st = SseState::default();
    st.read(r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":""}}]},"finish_reason":null}]}"#, &up).unwrap();
    st.read(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]},"finish_reason":null}]}"#, &up).unwrap();
    st.read(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null}]}"#, &up).unwrap();
    let out = st
        .read(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            &up,
        )
        .unwrap();
    assert_eq!(
        out,
        vec![Chunk::ToolCalls(vec![ToolCall {
            id: "call_1".into(),
            name: "get".into(),
            arguments: json!({"q": 1})
        }])]
    );
    st.read(
        r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}"#,
        &up,
    )
    .unwrap();
    assert_eq!(
        st.finish(&up).unwrap(),
        Chunk::Done {
            finish: FinishReason::ToolCalls,
            usage: Some(Usage {
                prompt_tokens: 4,
                completion_tokens: 2
            })
        }
    );
}

/// One delta as llama.cpp's server (llama-cpp-python 0.3) streams a tool call: the id
/// and the whole name again in every delta (and in the legacy `function_call` too),
/// the arguments in pieces.
fn llama_cpp_delta(arguments: &str) -> String {
    json!({"id": "chatcmpl-1fc5", "object": "chat.completion.chunk", "created": 1795498450,
        "model": "smollm2", "choices": [{"index": 0, "finish_reason": null, "logprobs": null,
        "delta": {"role": null, "content": null,
            "function_call": {"name": "get_weather", "arguments": arguments},
            "tool_calls": [{"index": 0, "id": "call__0_get_weather_cmpl-1fc5", "type": "function",
                "function": {"name": "get_weather", "arguments": arguments}}]}}]})
    .to_string()
}

fn read_all(events: &[String]) -> Vec<Chunk> {
    let up = up();
    let mut st = SseState::default();
    let mut out = Vec::new();
    for e in events {
        out.extend(st.read(e, &up).unwrap());
    }
    out.push(st.finish(&up).unwrap());
    out
}

/// llama.cpp's server repeats the function's name in every delta; gathered naively a
/// client got `get_weatherget_weatherget_weather…`.
#[test]
fn a_name_repeated_in_every_delta_comes_out_once() {
    let mut events = vec![r#"{"id":"chatcmpl-1fc5","object":"chat.completion.chunk","created":1795498450,"model":"smollm2","choices":[{"index":0,"finish_reason":null,"logprobs":null,"delta":{"role":"assistant","content":null,"function_call":null,"tool_calls":null}}]}"#.to_string()];
    for piece in ["{", " \"", "city", "\":", " \"", "Paris", "\"", " }", ""] {
        events.push(llama_cpp_delta(piece));
    }
    events.push(r#"{"id":"chatcmpl-1fc5","object":"chat.completion.chunk","created":1795498450,"model":"smollm2","choices":[{"index":0,"finish_reason":"tool_calls","logprobs":null,"delta":{"role":null,"content":null,"function_call":null,"tool_calls":null}}]}"#.to_string());
    assert_eq!(
        read_all(&events),
        vec![
            Chunk::ToolCalls(vec![ToolCall {
                id: "call__0_get_weather_cmpl-1fc5".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"})
            }]),
            Chunk::Done {
                finish: FinishReason::ToolCalls,
                usage: None
            }
        ]
    );
}

/// Other upstream forms: the whole argument text so far in every delta, a whole call
/// in one delta, calls without an index told apart by their ids, the legacy
/// `function_call` alone.
#[test]
fn tool_call_streams_are_normalised_whatever_their_form() {
    let delta = |calls: Value| {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null}]})
            .to_string()
    };
    let end = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_string();
    let calls = |out: Vec<Chunk>| match &out[0] {
        Chunk::ToolCalls(c) => c.clone(),
        other => panic!("{other:?}"),
    };

    // Cumulative: each delta repeats the text so far.
    let mut events: Vec<String> = ["{\"q\"", "{\"q\": 1", "{\"q\": 1}"]
        .iter()
        .map(|a| {
            delta(json!([{"index": 0, "id": "c1", "function": {"name": "find", "arguments": a}}]))
        })
        .collect();
    events.push(end.clone());
    let got = calls(read_all(&events));
    assert_eq!((got.len(), got[0].name.as_str()), (1, "find"));
    assert_eq!(got[0].arguments, json!({"q": 1}));

    // Two whole calls, no index, one delta each; then one more piece of the second.
    let events = vec![
        delta(json!([{"id": "a", "function": {"name": "one", "arguments": "{}"}}])),
        delta(json!([{"id": "b", "function": {"name": "two", "arguments": "{\"x\":"}}])),
        delta(json!([{"function": {"arguments": "2}"}}])),
        end.clone(),
    ];
    let got = calls(read_all(&events));
    let names: Vec<(&str, &str)> = got
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(names, [("a", "one"), ("b", "two")]);
    assert_eq!(got[1].arguments, json!({"x": 2}));

    // The deprecated `function_call`, with no `tool_calls` beside it.
    let events = vec![
        json!({"choices": [{"index": 0, "delta": {"function_call": {"name": "f", "arguments": "{\"a\""}}, "finish_reason": null}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {"function_call": {"arguments": ":true}"}}, "finish_reason": null}]}).to_string(),
        end,
    ];
    let got = calls(read_all(&events));
    assert_eq!(
        (got[0].name.as_str(), &got[0].arguments),
        ("f", &json!({"a": true}))
    );
    assert!(got[0].id.starts_with("call_"));
}

/// Non-streamed answers become the chunks their stream would have given.
#[test]
fn whole_answers_become_chunks() {
    let up = up();
    let chunks = |body: Value| -> Vec<Result<Chunk, UpstreamError>> {
        whole_chunks(body.to_string().as_bytes(), &up)
    };
    let got = chunks(
        json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "Hi there"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
    );
    assert_eq!(
        got.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        vec![
            Chunk::Text("Hi there".into()),
            Chunk::Done {
                finish: FinishReason::Length,
                usage: Some(Usage {
                    prompt_tokens: 5,
                    completion_tokens: 2
                })
            }
        ]
    );
    // Text completions, and no usage.
    let got = chunks(json!({"object": "text_completion",
        "choices": [{"index": 0, "text": "def f", "finish_reason": "stop"}]}));
    assert_eq!(got[0].as_ref().unwrap(), &Chunk::Text("def f".into()));
    assert_eq!(
        got[1].as_ref().unwrap(),
        &Chunk::Done {
            finish: FinishReason::Stop,
            usage: None
        }
    );
    // Tool calls (arguments as the JSON string OpenAI sends, or an object).
    let got = chunks(
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\":1}"}},
            {"type": "function", "function": {"name": "put", "arguments": {"k": "v"}}},
            {"type": "function", "function": {"name": "", "arguments": "{}"}}]}}]}),
    );
    let Ok(Chunk::ToolCalls(calls)) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(calls.len(), 2, "a call without a name is nothing to run");
    assert_eq!(
        (
            calls[0].id.as_str(),
            calls[0].name.as_str(),
            &calls[0].arguments
        ),
        ("call_1", "get", &json!({"q": 1}))
    );
    assert!(calls[1].id.starts_with("call_"));
    assert_eq!(calls[1].arguments, json!({"k": "v"}));
    assert!(matches!(
        got[1],
        Ok(Chunk::Done {
            finish: FinishReason::ToolCalls,
            ..
        })
    ));
    // Errors, garbage, no choices, too many calls.
    let error = |got: Vec<Result<Chunk, UpstreamError>>| got[0].clone().unwrap_err();
    let e = error(chunks(
        json!({"error": {"message": "boom", "type": "server_error"}}),
    ));
    assert_eq!(
        (e.kind, e.detail.as_str()),
        (UpstreamErrorKind::Stream, "boom")
    );
    let e = error(whole_chunks(b"not json", &up));
    assert_eq!(e.kind, UpstreamErrorKind::Protocol);
    assert_eq!(
        error(chunks(json!({"choices": []}))).kind,
        UpstreamErrorKind::Protocol
    );
    let many: Vec<Value> = (0..129)
        .map(|i| json!({"id": format!("c{i}"), "function": {"name": "f", "arguments": "{}"}}))
        .collect();
    let e = error(chunks(
        json!({"choices": [{"message": {"tool_calls": many}}]}),
    ));
    assert!(e.detail.contains("more than 128"), "{e}");
}

#[test]
fn stream_without_finish_is_closed_early() {
    let up = up();
    let mut st = SseState::default();
    assert_eq!(
        st.read(
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            &up
        )
        .unwrap(),
        vec![Chunk::Text("Hel".into())]
    );
    assert_eq!(st.finish(&up).unwrap_err().kind, UpstreamErrorKind::Closed);
}

#[test]
fn error_events_and_garbage() {
    let up = up();
    let mut st = SseState::default();
    let e = st
        .read(r#"{"error":{"message":"boom","type":"server_error"}}"#, &up)
        .unwrap_err();
    assert_eq!(
        (e.kind, e.detail.as_str()),
        (UpstreamErrorKind::Stream, "boom")
    );
    assert_eq!(
        st.read("{nope", &up).unwrap_err().kind,
        UpstreamErrorKind::Protocol
    );
}

#[test]
fn request_body_follows_the_openai_shape() {
    let mut asst = Message::text(Role::Assistant, "");
    asst.tool_calls.push(ToolCall {
        id: "c".into(),
        name: "f".into(),
        arguments: json!({"a": 1}),
    });
    let mut user = Message::text(Role::User, "see");
    user.images.push("/9j/AAAA".into());
    let req = UpstreamRequest {
        model: "m".into(),
        input: Input::Chat(vec![user, asst]),
        params: GenParams {
            max_tokens: Some(3),
            stop: vec!["a".into(), "b".into()],
            ..Default::default()
        },
        tools: vec![json!({"type": "function", "function": {"name": "f"}})],
        tool_choice: Some(json!("auto")),
        whole: false,
        relay: None,
        template_peers: Vec::new(),
    };
    let (path, body) = request_body(&req);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(path, "/chat/completions");
    assert_eq!(
        body["messages"][0]["content"][1]["image_url"]["url"],
        json!("data:image/jpeg;base64,/9j/AAAA")
    );
    // Beside tool calls: an empty string (llama-cpp-python refuses `null`).
    assert_eq!(body["messages"][1]["content"], json!(""));
    assert_eq!(
        body["messages"][1]["tool_calls"][0]["function"]["arguments"],
        json!("{\"a\":1}")
    );
    assert_eq!(body["max_tokens"], json!(3));
    assert_eq!(body["stop"], json!(["a", "b"]));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["tool_choice"], json!("auto"));
}

/// The request body as a JSON tree, as the gateway built it before writing its bytes
/// directly (the removed code, kept here on purpose): the reference the written bytes
/// must parse to.
fn reference_body(req: &UpstreamRequest) -> Value {
    fn message(m: &Message) -> Value {
        let mut out = serde_json::Map::new();
        out.insert("role".into(), json!(m.role.as_str()));
        let content = if m.images.is_empty() {
            json!(m.content)
        } else {
            let mut parts = vec![json!({"type": "text", "text": m.content})];
            parts.extend(
                m.images
                    .iter()
                    .map(|img| json!({"type": "image_url", "image_url": {"url": image_url(img)}})),
            );
            Value::Array(parts)
        };
        out.insert("content".into(), content);
        if !m.tool_calls.is_empty() {
            let calls: Vec<Value> = m.tool_calls.iter().map(ToolCall::openai_json).collect();
            out.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(id) = &m.tool_call_id {
            out.insert("tool_call_id".into(), json!(id));
        }
        Value::Object(out)
    }
    let mut body = serde_json::Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("stream".into(), json!(!req.whole));
    if !req.whole {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    match &req.input {
        Input::Chat(messages) => {
            body.insert(
                "messages".into(),
                Value::Array(messages.iter().map(message).collect()),
            );
            if !req.tools.is_empty() {
                body.insert("tools".into(), Value::Array(req.tools.clone()));
                if let Some(choice) = &req.tool_choice {
                    body.insert("tool_choice".into(), choice.clone());
                }
            }
        }
        Input::Prompt {
            prompt,
            suffix,
            system,
            ..
        } => {
            let prompt = match system {
                Some(s) if !s.is_empty() => format!("{s}\n\n{prompt}"),
                _ => prompt.clone(),
            };
            body.insert("prompt".into(), json!(prompt));
            if let Some(s) = suffix {
                body.insert("suffix".into(), json!(s));
            }
        }
    }
    let p = &req.params;
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.to_string(), v);
        }
    };
    set("max_tokens", p.max_tokens.map(|v| json!(v)));
    set("temperature", p.temperature.map(|v| json!(v)));
    set("top_p", p.top_p.map(|v| json!(v)));
    set("seed", p.seed.map(|v| json!(v)));
    set("presence_penalty", p.presence_penalty.map(|v| json!(v)));
    set("frequency_penalty", p.frequency_penalty.map(|v| json!(v)));
    set("response_format", p.response_format.clone());
    set("stop", (!p.stop.is_empty()).then(|| json!(p.stop)));
    Value::Object(body)
}

#[test]
fn the_written_body_is_the_json_tree_of_every_kind_of_request() {
    let mut tool = Message::text(Role::Tool, "{\"temp\": 21}\n\u{1}");
    tool.tool_call_id = Some("call_\"1".into());
    let mut asst = Message::text(Role::Assistant, "");
    asst.tool_calls.push(ToolCall {
        id: "c".into(),
        name: "f".into(),
        arguments: json!({"a": [1, "x\ty"]}),
    });
    let mut user = Message::text(Role::User, "ver \"esto\" \\ ñandú 𝄞\r\n");
    user.images.push("R0lGODAAA".into());
    let system = Message::text(Role::System, "Contexto:\n\"doc\"\t\u{7}".repeat(40));
    let chat = UpstreamRequest {
        model: "qwen\"2.5".into(),
        input: Input::Chat(vec![system, user, asst, tool]),
        params: GenParams {
            max_tokens: Some(300),
            temperature: Some(0.1),
            top_p: Some(0.95),
            seed: Some(-7),
            presence_penalty: Some(0.5),
            frequency_penalty: Some(-0.25),
            response_format: Some(json!({"type": "json_object"})),
            stop: vec!["\n\n".into(), "```".into()],
            ..Default::default()
        },
        tools: vec![json!({"type": "function", "function": {"name": "f", "parameters": {}}})],
        tool_choice: Some(json!({"type": "function", "function": {"name": "f"}})),
        whole: false,
        relay: None,
        template_peers: Vec::new(),
    };
    let mut whole = chat.clone();
    whole.whole = true;
    whole.tools.clear();
    whole.params = GenParams::default();
    let prompt = |system: Option<&str>, suffix: Option<&str>| UpstreamRequest {
        model: "m".into(),
        input: Input::Prompt {
            prompt: "def f(x):\n    \"\"\"doc\"\"\"\n".into(),
            suffix: suffix.map(String::from),
            system: system.map(String::from),
            raw: false,
            images: Vec::new(),
        },
        params: GenParams::default(),
        tools: Vec::new(),
        tool_choice: None,
        whole: true,
        relay: None,
        template_peers: Vec::new(),
    };
    for req in [
        chat,
        whole,
        prompt(None, None),
        prompt(Some("sys"), Some("\n    return x\n")),
        prompt(Some(""), None),
    ] {
        let (_, written) = request_body(&req);
        let parsed: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(parsed, reference_body(&req), "{req:?}");
    }
}
