//! The scripted upstream's bytes: replies framed exactly as Ollama and OpenAI-compatible
//! servers frame them.

use super::*;

/// Frames replies exactly as Ollama and OpenAI-compatible servers do.
pub(super) struct Writer {
    pub(super) wire: Wire,
    pub(super) model: String,
    pub(super) include_usage: bool,
}

const CREATED_AT: &str = "2026-11-22T10:00:00.123456789Z";

impl Writer {
    pub(super) fn sse(v: Value) -> Bytes {
        Bytes::from(format!("data: {v}\n\n"))
    }

    pub(super) fn ndjson(v: Value) -> Bytes {
        Bytes::from(format!("{v}\n"))
    }

    pub(super) fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        let mut v = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000,
               "model": self.model, "system_fingerprint": "fp_scripted",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        if self.wire == Wire::OpenAiText {
            v["object"] = json!("text_completion");
            v["choices"][0] = json!({"index": 0, "text": delta.get("content").cloned().unwrap_or(json!("")),
                                      "logprobs": null, "finish_reason": finish});
        }
        v
    }

    pub(super) fn opening(&self) -> Option<Bytes> {
        (self.wire == Wire::OpenAiChat)
            .then(|| Self::sse(self.chunk(json!({"role": "assistant", "content": ""}), None)))
    }

    pub(super) fn text(&self, t: &str) -> Bytes {
        match self.wire {
            Wire::OllamaChat => Self::ndjson(json!({"model": self.model, "created_at": CREATED_AT,
                "message": {"role": "assistant", "content": t}, "done": false})),
            Wire::OllamaGenerate => {
                Self::ndjson(json!({"model": self.model, "created_at": CREATED_AT,
                "response": t, "done": false}))
            }
            Wire::OpenAiChat | Wire::OpenAiText => {
                Self::sse(self.chunk(json!({"content": t}), None))
            }
        }
    }

    pub(super) fn tool_call(&self, name: &str, arguments: &Value) -> Vec<Bytes> {
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => vec![Self::ndjson(
                json!({"model": self.model, "created_at": CREATED_AT,
                "message": {"role": "assistant", "content": "",
                            "tool_calls": [{"function": {"name": name, "arguments": arguments}}]},
                "done": false}),
            )],
            Wire::OpenAiChat | Wire::OpenAiText => {
                let args = arguments.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                vec![
                    Self::sse(self.chunk(json!({"tool_calls": [{"index": 0, "id": "call_scripted", "type": "function",
                        "function": {"name": name, "arguments": ""}}]}), None)),
                    Self::sse(self.chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}), None)),
                    Self::sse(self.chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}), None)),
                ]
            }
        }
    }

    pub(super) fn stats(prompt: u64, completion: u64) -> Value {
        json!({"total_duration": 5_000_000u64, "load_duration": 1_000_000u64, "prompt_eval_count": prompt,
               "prompt_eval_duration": 1_000_000u64, "eval_count": completion, "eval_duration": 3_000_000u64})
    }

    pub(super) fn closing(&self, finish: &str, completion: u64) -> Vec<Bytes> {
        let prompt = 11;
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => {
                let mut v = if self.wire == Wire::OllamaChat {
                    json!({"model": self.model, "created_at": CREATED_AT,
                           "message": {"role": "assistant", "content": ""}, "done": true})
                } else {
                    json!({"model": self.model, "created_at": CREATED_AT, "response": "", "done": true, "context": [1, 2, 3]})
                };
                v["done_reason"] = json!(if finish == "tool_calls" {
                    "stop"
                } else {
                    finish
                });
                for (k, s) in Self::stats(prompt, completion).as_object().unwrap() {
                    v[k] = s.clone();
                }
                vec![Self::ndjson(v)]
            }
            Wire::OpenAiChat | Wire::OpenAiText => {
                let mut out = vec![Self::sse(self.chunk(
                    if self.wire == Wire::OpenAiChat {
                        json!({})
                    } else {
                        json!({"content": ""})
                    },
                    Some(finish),
                ))];
                if self.include_usage {
                    // OpenAI's usage event has its stream's object.
                    let object = if self.wire == Wire::OpenAiText {
                        "text_completion"
                    } else {
                        "chat.completion.chunk"
                    };
                    out.push(Self::sse(
                        json!({"id": "chatcmpl-scripted", "object": object,
                        "created": 1700000000, "model": self.model, "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                  "total_tokens": prompt + completion}}),
                    ));
                }
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
                out
            }
        }
    }

    /// A frame with the right framing and a payload that is not JSON.
    pub(super) fn garbage(&self) -> Bytes {
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => Bytes::from_static(b"this is not json\n"),
            _ => Bytes::from_static(b"data: this is not json\n\n"),
        }
    }

    pub(super) fn error(&self, message: &str) -> Bytes {
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => Self::ndjson(json!({"error": message})),
            _ => Self::sse(
                json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
            ),
        }
    }

    /// A non-streamed answer (`"stream": false`) as real servers give one: headers only
    /// when the whole answer is ready; a failure mid-answer as an error status (or the
    /// connection closing); the request counted as cancelled when dropped before then.
    pub(super) async fn whole_reply(&self, reply: Reply, shared: Arc<Shared>) -> Response {
        let mut guard = StreamGuard {
            shared,
            finished: false,
        };
        let (tokens, finish, tool) = match reply {
            Reply::Tokens {
                tokens,
                delay,
                finish,
            } => {
                tokio::time::sleep(delay * tokens.len() as u32).await;
                (tokens, finish, None)
            }
            Reply::ToolCall { name, arguments } => (vec![], "tool_calls", Some((name, arguments))),
            Reply::DropAfter(_) => {
                // The connection closes in the middle of the answer.
                guard.finished = true;
                let body = futures::stream::once(async {
                    Err::<Bytes, _>(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "scripted drop",
                    ))
                });
                return Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from_stream(body))
                    .unwrap();
            }
            Reply::GarbageAfter(_) => {
                guard.finished = true;
                return Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from("this is not json"))
                    .unwrap();
            }
            Reply::ErrorAfter(_, message) => {
                guard.finished = true;
                let body = match self.wire {
                    Wire::OllamaChat | Wire::OllamaGenerate => json!({"error": message}),
                    _ => json!({"error": {"message": message, "type": "server_error",
                        "param": null, "code": null}}),
                };
                return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
            }
            Reply::Endless(_) => std::future::pending().await,
            Reply::StallAfter(mut tokens, silence) => {
                tokio::time::sleep(silence).await;
                tokens.push("late".into());
                (tokens, "stop", None)
            }
            _ => (vec!["late".to_string()], "stop", None),
        };
        guard.finished = true;
        let completion = tokens.len().max(usize::from(tool.is_some())) as u64;
        let mut v = self.whole(&tokens.concat(), finish, completion);
        if let Some((name, arguments)) = tool {
            match self.wire {
                Wire::OllamaChat | Wire::OllamaGenerate => {
                    v["message"]["tool_calls"] =
                        json!([{"function": {"name": name, "arguments": arguments}}]);
                }
                _ => {
                    v["choices"][0]["message"]["content"] = Value::Null;
                    v["choices"][0]["message"]["tool_calls"] = json!([{"id": "call_scripted",
                        "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]);
                }
            }
        }
        axum::Json(v).into_response()
    }

    /// A whole answer's body: `completion` tokens of `text`, finished with `finish`.
    pub(super) fn whole(&self, text: &str, finish: &str, completion: u64) -> Value {
        let prompt = 11;
        let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion});
        let ollama_finish = if finish == "tool_calls" {
            "stop"
        } else {
            finish
        };
        match self.wire {
            Wire::OllamaChat | Wire::OllamaGenerate => {
                let mut v = json!({"model": self.model, "created_at": CREATED_AT, "done": true,
                    "done_reason": ollama_finish});
                if self.wire == Wire::OllamaChat {
                    v["message"] = json!({"role": "assistant", "content": text});
                } else {
                    v["response"] = json!(text);
                    v["context"] = json!([1, 2, 3]);
                }
                for (k, s) in Self::stats(prompt, completion).as_object().unwrap() {
                    v[k] = s.clone();
                }
                v
            }
            Wire::OpenAiChat => {
                json!({"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1700000000,
                "model": self.model, "system_fingerprint": "fp_scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": null, "finish_reason": finish}], "usage": usage})
            }
            Wire::OpenAiText => {
                json!({"id": "cmpl-scripted", "object": "text_completion", "created": 1700000000,
                "model": self.model, "choices": [{"index": 0, "text": text, "logprobs": null,
                "finish_reason": finish}], "usage": usage})
            }
        }
    }
}
