//! The gRPC service `brunix.AssistanceEngine` with a tonic client built from the shipped
//! proto, against the real gateway (HTTP and gRPC from one state) and the scripted
//! upstream: token order and the final message, `[ENG] Error:` answers, cancellation,
//! keys, rate limits, base64 edge cases, editor context, sessions shared with HTTP,
//! EvaluateRAG, health, reflection and TLS.

use std::time::Duration;

use assist_gateway::config::Provider;
use assist_gateway::grpc::pb::assistance_engine_client::AssistanceEngineClient;
use assist_gateway::grpc::pb::{AgentRequest, AgentResponse, EvalRequest};
use base64::Engine;
use serde_json::json;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::support::*;

pub(crate) const SELECTION: &str = "try()\n    ormDirect(\"UPDATE users SET active=1\", res)\nexception(e)\n    addVar(_status, 500)\n    addResult(\"Error\")\nend()";

pub(crate) fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

pub(crate) async fn engine(gw: &Gateway) -> AssistanceEngineClient<Channel> {
    AssistanceEngineClient::new(c_channel(gw).await)
}

pub(crate) async fn channel(
    addr: std::net::SocketAddr,
) -> Result<Channel, tonic::transport::Error> {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
}

pub(crate) fn question(query: &str, session: &str) -> AgentRequest {
    AgentRequest {
        query: query.into(),
        session_id: session.into(),
        ..Default::default()
    }
}

/// A request with `authorization: Bearer <key>` metadata when `key` is given.
pub(crate) fn keyed<T>(message: T, key: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(key) = key {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    request
}

/// Every message of a call, or the status that ended it.
pub(crate) async fn all(
    call: Result<tonic::Response<tonic::Streaming<AgentResponse>>, Status>,
) -> Result<Vec<AgentResponse>, Status> {
    let mut stream = call?.into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await? {
        messages.push(m);
    }
    Ok(messages)
}

pub(crate) async fn ask_stream(
    c: &mut AssistanceEngineClient<Channel>,
    req: AgentRequest,
) -> Result<Vec<AgentResponse>, Status> {
    all(c.ask_agent_stream(req).await).await
}

pub(crate) async fn ask_whole(
    c: &mut AssistanceEngineClient<Channel>,
    req: AgentRequest,
) -> Result<Vec<AgentResponse>, Status> {
    all(c.ask_agent(req).await).await
}

pub(crate) fn system_prompt(r: &Recorded) -> String {
    r.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

pub(crate) fn upstream_messages(r: &Recorded) -> Vec<(String, String)> {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn ask_agent_stream_sends_each_token_then_an_empty_final_message() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    up.push(Reply::Tokens {
        tokens: vec!["Here".into(), " is".into(), " a".into(), " route".into()],
        delay: Duration::from_millis(5),
        finish: "stop",
    });
    let mut c = engine(&gw).await;
    let messages = ask_stream(
        &mut c,
        question("Write an API that returns hello world", "dev-001"),
    )
    .await
    .unwrap();
    let texts: Vec<&str> = messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Here", " is", " a", " route", ""]);
    let (last, tokens) = messages.split_last().unwrap();
    assert!(tokens.iter().all(|m| !m.is_final && m.avap_code.is_empty()));
    assert!(last.is_final && last.text.is_empty() && last.avap_code.is_empty());
    // The question reached the assistant's pipeline: knowledge in the system prompt.
    assert!(system_prompt(&up.last_request()).contains("<knowledge>"));
}

#[tokio::test]
async fn ask_agent_sends_the_whole_answer_once_with_the_avap_code() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |_| {}).await;
    up.push(Reply::tokens(&["AVAP is ", "a DSL."]));
    let mut c = engine(&gw).await;
    let messages = ask_whole(&mut c, question("Que significa AVAP?", "dev-001"))
        .await
        .unwrap();
    assert_eq!(
        messages,
        [AgentResponse {
            text: "AVAP is a DSL.".into(),
            avap_code: "AVAP-2026".into(),
            is_final: true,
        }]
    );
    // The code is a setting.
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.grpc.avap_code = "AVAP-2027".into()
    })
    .await;
    let messages = ask_whole(&mut engine(&gw).await, question("hola", ""))
        .await
        .unwrap();
    assert_eq!(messages[0].avap_code, "AVAP-2027");
}

#[tokio::test]
async fn upstream_failures_end_the_stream_with_an_engine_error() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.llm.retries = 0;
    })
    .await;
    let mut c = engine(&gw).await;
    // Before the first token, on both methods.
    for whole in [false, true] {
        up.push(Reply::Status {
            status: 500,
            body: "model crashed".into(),
        });
        let req = question("How do I declare a route?", "s");
        let messages = if whole {
            ask_whole(&mut c, req).await
        } else {
            ask_stream(&mut c, req).await
        }
        .expect("application errors are messages, not statuses");
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].text.starts_with("[ENG] Error: "),
            "{messages:?}"
        );
        assert!(messages[0].is_final);
    }
    // After some tokens: they are kept, then the error ends the stream.
    up.push(Reply::DropAfter(vec!["Half".into(), " an".into()]));
    let messages = ask_stream(&mut c, question("How do I declare a route?", "s"))
        .await
        .unwrap();
    assert_eq!(messages[0].text, "Half");
    let last = messages.last().unwrap();
    assert!(
        last.is_final && last.text.starts_with("[ENG] Error: "),
        "{last:?}"
    );

    // An upstream that is down.
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.llm.base_url = "http://127.0.0.1:9".into();
        s.llm.retries = 0;
    })
    .await;
    let messages = ask_stream(&mut engine(&gw).await, question("hello?", ""))
        .await
        .unwrap();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].text.starts_with("[ENG] Error: ") && messages[0].is_final);
}

#[tokio::test]
async fn cancelling_the_call_cancels_the_upstream_and_keeps_the_partial_turn() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    up.push(Reply::Endless(Duration::from_millis(20)));
    let mut c = engine(&gw).await;
    let mut stream = c
        .ask_agent_stream(question("tell me everything", "cut"))
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        let m = stream.message().await.unwrap().unwrap();
        assert!(!m.is_final);
    }
    drop(stream);
    assert!(
        eventually(5, || up.cancelled() == 1).await,
        "the upstream request was cancelled"
    );
    // The turn was kept, with what was streamed: the next one (over HTTP, the same
    // session) carries it.
    let body = json!({"model": "brunix", "session_id": "cut",
        "messages": [{"role": "user", "content": "go on"}]});
    let (status, _, text) = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(status, 200, "{text}");
    let messages = upstream_messages(&up.last_request());
    assert_eq!(messages[1].1, "tell me everything");
    assert_eq!(messages[2].0, "assistant");
    assert!(
        messages[2].1.ends_with("[answer interrupted]") && messages[2].1.len() > 25,
        "{:?}",
        messages[2]
    );

    // AskAgent too: cancelled while the whole answer is being collected.
    up.push(Reply::Endless(Duration::from_millis(20)));
    let call = tokio::spawn({
        let mut c = c.clone();
        async move {
            let mut answer = c
                .ask_agent(question("and the rest", "cut2"))
                .await?
                .into_inner();
            answer.message().await
        }
    });
    assert!(
        eventually(5, || up.requests().len() >= 2).await,
        "the question reached the upstream"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    call.abort();
    assert!(
        eventually(5, || up.cancelled() == 2).await,
        "the upstream request was cancelled"
    );
}

#[tokio::test]
async fn a_turn_over_grpc_continues_over_http_and_back() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["k1".into(), "k2".into()];
    })
    .await;
    let mut c = engine(&gw).await;
    up.push(Reply::tokens(&["registerEndpoint declares a route."]));
    ask_stream_keyed(
        &mut c,
        question("What is registerEndpoint?", "user-abc"),
        "k1",
    )
    .await;
    // HTTP, same key and session: one conversation.
    let r = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("k1")
        .json(&json!({"model": "brunix", "session_id": "user-abc",
            "messages": [{"role": "user", "content": "Can you show me an example?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let messages = upstream_messages(&up.last_request());
    assert_eq!(
        messages[1..],
        [
            ("user".into(), "What is registerEndpoint?".into()),
            (
                "assistant".into(),
                "registerEndpoint declares a route.".into()
            ),
            ("user".into(), "Can you show me an example?".into()),
        ]
    );
    // And back over gRPC: three turns.
    ask_stream_keyed(
        &mut c,
        question("And with a path parameter?", "user-abc"),
        "k1",
    )
    .await;
    assert_eq!(upstream_messages(&up.last_request()).len(), 6);
    // The same session under another key is another conversation.
    ask_stream_keyed(&mut c, question("What did I ask?", "user-abc"), "k2").await;
    assert_eq!(upstream_messages(&up.last_request()).len(), 2);

    // An empty session_id is the caller's "default" session.
    ask_stream_keyed(&mut c, question("first", ""), "k2").await;
    ask_stream_keyed(&mut c, question("second", ""), "k2").await;
    let messages = upstream_messages(&up.last_request());
    assert_eq!(messages[1].1, "first");
    assert_eq!(messages.last().unwrap().1, "second");
}

pub(crate) async fn ask_stream_keyed(
    c: &mut AssistanceEngineClient<Channel>,
    req: AgentRequest,
    key: &str,
) {
    let messages = all(c.ask_agent_stream(keyed(req, Some(key))).await)
        .await
        .unwrap();
    assert!(messages.last().unwrap().is_final);
    assert!(
        !messages.iter().any(|m| m.text.starts_with("[ENG]")),
        "{messages:?}"
    );
}

#[tokio::test]
async fn editor_context_reaches_the_prompt_only_when_the_question_is_about_it() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let mut c = engine(&gw).await;
    // The reference's example: the same block open and selected.
    let req = AgentRequest {
        query: "why is this not catching the error?".into(),
        session_id: "dev-001".into(),
        editor_content: b64(SELECTION),
        selected_text: b64(SELECTION),
        extra_context: b64("file: handler.avap"),
        user_info: json!({"dev_id": 1, "project_id": 2, "org_id": 3}).to_string(),
    };
    let messages = ask_whole(&mut c, req.clone()).await.unwrap();
    assert!(messages[0].is_final);
    let system = prompt_text(&up.last_request());
    assert!(system.contains("<selected_code>") && system.contains("ormDirect("));
    assert!(system.contains("file: handler.avap"));

    // A question about something else leaves the editor out.
    let other = AgentRequest {
        query: "How do I declare a path parameter for an endpoint?".into(),
        session_id: "dev-002".into(),
        ..req.clone()
    };
    ask_whole(&mut c, other).await.unwrap();
    let system = prompt_text(&up.last_request());
    assert!(!system.contains("<selected_code>") && !system.contains("ormDirect("));

    // Malformed base64, text that is not base64 at all, base64 of bytes that are not
    // UTF-8 and a user_info that is not JSON: answered, without that context.
    for bad in ["%%%not base64%%%", "try() ... end()", "/w=="] {
        let req = AgentRequest {
            query: "why is this not catching the error?".into(),
            session_id: "dev-003".into(),
            editor_content: bad.into(),
            selected_text: bad.into(),
            extra_context: bad.into(),
            user_info: "{not json".into(),
        };
        let messages = ask_whole(&mut c, req).await.expect("never an error");
        assert!(messages[0].is_final && !messages[0].text.starts_with("[ENG]"));
        let system = prompt_text(&up.last_request());
        assert!(!system.contains("<selected_code>"), "{bad}: {system}");
    }
    // URL-safe and unpadded base64 are read too.
    let urlsafe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SELECTION);
    let req = AgentRequest {
        selected_text: urlsafe,
        session_id: "dev-004".into(),
        ..req
    };
    ask_whole(&mut c, req).await.unwrap();
    assert!(system_prompt(&up.last_request()).contains("ormDirect("));
}

#[tokio::test]
async fn invalid_requests_are_invalid_argument_and_nothing_is_asked() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.max_message_chars = 100;
        s.server.max_body_bytes = 4096;
    })
    .await;
    let mut c = engine(&gw).await;
    let huge = "x".repeat(5000);
    for (req, names) in [
        (question("", "s"), "query"),
        (question("   \n", "s"), "query"),
        (question(&"long ".repeat(30), "s"), "max_message_chars"),
        (question("hi", "bad session id!"), "session_id"),
        (question("hi", &"s".repeat(300)), "session_id"),
        (
            AgentRequest {
                editor_content: huge.clone(),
                ..question("hi", "s")
            },
            "max_body_bytes",
        ),
    ] {
        for whole in [false, true] {
            let got = if whole {
                ask_whole(&mut c, req.clone()).await
            } else {
                ask_stream(&mut c, req.clone()).await
            };
            let status = got.expect_err("refused");
            assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains(names), "{status:?}");
        }
    }
    assert!(up.requests().is_empty(), "the upstream was never asked");
    // Beyond twice the body limit the message is not even read: RESOURCE_EXHAUSTED, as
    // gRPC's own servers answer a message over their limit (tonic said OUT_OF_RANGE).
    for whole in [false, true] {
        let req = AgentRequest {
            editor_content: "x".repeat(9000),
            ..question("hi", "s")
        };
        let status = if whole {
            ask_whole(&mut c, req).await
        } else {
            ask_stream(&mut c, req).await
        }
        .unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("server.max_body_bytes"),
            "{status:?}"
        );
    }
    assert!(up.requests().is_empty(), "the upstream was never asked");
}

#[tokio::test]
async fn keys_guard_every_method_but_health() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (gw, _dataset) = crate::eval_answers::judged_gateway(&up, &judge, |s| {
        s.server.api_keys = vec!["k1".into()];
    })
    .await;
    let mut c = engine(&gw).await;
    for key in [None, Some("wrong"), Some("")] {
        for status in [
            all(c.ask_agent(keyed(question("hi", ""), key)).await)
                .await
                .unwrap_err(),
            all(c.ask_agent_stream(keyed(question("hi", ""), key)).await)
                .await
                .unwrap_err(),
            c.evaluate_rag(keyed(EvalRequest::default(), key))
                .await
                .unwrap_err(),
        ] {
            assert_eq!(status.code(), Code::Unauthenticated, "{key:?}: {status:?}");
            assert!(status.message().contains("API key"), "{status:?}");
        }
    }
    assert!(up.requests().is_empty() && judge.requests().is_empty());
    let messages = all(c.ask_agent(keyed(question("hi", ""), Some("k1"))).await)
        .await
        .unwrap();
    assert!(messages[0].is_final && !messages[0].text.starts_with("[ENG]"));

    // Health needs no key.
    let mut health = tonic_health::pb::health_client::HealthClient::new(c_channel(&gw).await);
    let r = health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
    assert_eq!(r.into_inner().status, 1, "SERVING");
}

pub(crate) async fn c_channel(gw: &Gateway) -> Channel {
    channel(gw.grpc_addr.expect("gRPC is served"))
        .await
        .unwrap()
}

#[tokio::test]
async fn rate_limits_count_across_grpc_and_http() {
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.api_keys = vec!["k1".into(), "k2".into()];
        s.server.rate_limit_per_minute = 2;
    })
    .await;
    let mut c = engine(&gw).await;
    all(c.ask_agent(keyed(question("one", ""), Some("k1"))).await)
        .await
        .unwrap();
    let r = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("k1")
        .json(&json!({"model": "brunix", "messages": [{"role": "user", "content": "two"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let status = all(c
        .ask_agent_stream(keyed(question("three", ""), Some("k1")))
        .await)
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("rate limit"), "{status:?}");
    let wait: u64 = status
        .metadata()
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait));
    // Another key is not affected.
    all(c.ask_agent(keyed(question("mine", ""), Some("k2"))).await)
        .await
        .unwrap();

    // Open streams per key, shared with HTTP too.
    let gw = Gateway::start(&up, Provider::Ollama, |s| {
        s.server.max_streams_per_key = 1;
    })
    .await;
    up.push(Reply::Endless(Duration::from_millis(20)));
    let mut c = engine(&gw).await;
    let mut open = c
        .ask_agent_stream(question("long", "a"))
        .await
        .unwrap()
        .into_inner();
    open.message().await.unwrap().unwrap();
    let status = ask_stream(&mut c, question("another", "b"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let r = client()
        .post(gw.url("/v1/chat/completions"))
        .json(&json!({"model": "brunix", "stream": true,
            "messages": [{"role": "user", "content": "over http"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "one slot, taken over gRPC");
    drop(open);
    assert!(
        eventually(5, || up.cancelled() == 1).await,
        "the slot's stream ended"
    );
    let messages = ask_stream(&mut c, question("now", "b")).await.unwrap();
    assert!(messages.last().unwrap().is_final);
}

#[tokio::test]
async fn evaluate_rag_reports_like_the_reference() {
    let up = ScriptedUpstream::start().await;
    let judge = ScriptedUpstream::start().await;
    let (gw, _dataset) = crate::eval_answers::judged_gateway(&up, &judge, |_| {}).await;
    let mut c = engine(&gw).await;
    let long = "año ".repeat(100);
    up.push(Reply::tokens(&[&long]));
    let r = c
        .evaluate_rag(EvalRequest {
            category: "deployment".into(),
            limit: 10,
            index: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, "ok");
    assert_eq!(r.questions_evaluated, 1);
    assert_eq!(r.judge_model, UPSTREAM_MODEL);
    assert!(r.index.ends_with("index"), "{}", r.index);
    for (name, score) in [
        ("faithfulness", r.faithfulness),
        ("answer_relevancy", r.answer_relevancy),
        ("context_recall", r.context_recall),
        ("context_precision", r.context_precision),
        ("global_score", r.global_score),
    ] {
        assert_eq!(score, 1.0, "{name}");
    }
    assert_eq!(r.verdict, "EXCELLENT");
    assert_eq!(r.details.len(), 1);
    let d = &r.details[0];
    assert_eq!((d.id.as_str(), d.category.as_str()), ("d1", "deployment"));
    assert_eq!(d.answer_preview.chars().count(), 300);
    assert!(long.starts_with(&d.answer_preview));
    assert_eq!(d.n_chunks, 1);

    // What the evaluation cannot do is said in `status`.
    for (req, says) in [
        (
            EvalRequest {
                index: "avap-knowledge-v1".into(),
                ..Default::default()
            },
            "only the configured index",
        ),
        (
            EvalRequest {
                category: "nope".into(),
                ..Default::default()
            },
            "no question of category 'nope'",
        ),
        (
            EvalRequest {
                limit: -1,
                ..Default::default()
            },
            "limit",
        ),
    ] {
        let r = c.evaluate_rag(req).await.unwrap().into_inner();
        assert!(r.status.contains(says), "{says}: {}", r.status);
        assert_eq!(r.questions_evaluated, 0);
    }
    // Without a dataset, too.
    let gw = Gateway::with_knowledge(&up, Provider::Ollama, |_| {}).await;
    let r = engine(&gw)
        .await
        .evaluate_rag(EvalRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(r.status.contains("eval.dataset"), "{}", r.status);
}
