//! Traces over OTLP, read back from a real trace backend: Arize Phoenix (installed by
//! scripts/phoenix-env.sh, started here on free ports) receives the spans of the real
//! gateway binary, and the test reads them through Phoenix's REST API as a user of its UI
//! would see them: one trace per request continuing the client's `traceparent`, a span
//! per stage with its timing, the retrieved chunks' ids and scores, the GenAI
//! attributes, the upstream request carrying the gateway's span; no content unless
//! `telemetry.capture_content` asks for it, and then redacted.

use std::time::Duration;

use assist_gateway::config::{OtlpProtocol, Provider};
use assist_gateway::grpc::pb::assistance_engine_client::AssistanceEngineClient;
use assist_gateway::grpc::pb::AgentRequest;
use serde_json::{json, Value};

use crate::support::*;

const QUESTION: &str = "how does the engine handle ormDirect errors QUESTION_MARKER_71?";
const ANSWER: [&str; 3] = ["It retries ", "and reports ", "ANSWER_MARKER_72."];
/// How long the upstream takes to each piece of the first answer.
const FIRST_TOKEN: Duration = Duration::from_millis(150);

/// Arize Phoenix serving on free ports with its own working folder; stopped when dropped.
struct Phoenix {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Phoenix {
    async fn start() -> Option<Self> {
        let command = installed("ASSIST_PHOENIX", "the Phoenix trace tests")?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("phoenix.log")).unwrap();
        let child = std::process::Command::new(&command)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            // Its gRPC receiver binds every interface whatever PHOENIX_HOST says.
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            .env("PHOENIX_LOG_MIGRATIONS", "false")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("phoenix starts");
        let phoenix = Self {
            child,
            port,
            _dir: dir,
        };
        // 12-17 s on an idle two-core machine; more when it is busy.
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        while std::time::Instant::now() < deadline {
            if let Ok(r) = client().get(phoenix.url("/healthz")).send().await {
                if r.status().is_success() {
                    return Some(phoenix);
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("phoenix did not answer /healthz: {}", phoenix.log());
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("phoenix.log")).unwrap_or_default()
    }

    /// The spans of one trace in `project`, once `want` of them (by name) arrived and
    /// no more came for a moment.
    async fn trace(&self, project: &str, trace_id: &str, want: &[&str]) -> Vec<Value> {
        let url = self.url(&format!(
            "/v1/projects/{project}/spans?trace_id={trace_id}&limit=1000"
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut last: Vec<Value> = Vec::new();
        loop {
            let (status, body) = get_json(&url).await;
            let spans = if status == 200 {
                body["data"].as_array().cloned().unwrap_or_default()
            } else {
                Vec::new()
            };
            let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
            let complete = want.iter().all(|w| names.contains(w));
            if complete && spans.len() == last.len() {
                return spans;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "trace {trace_id} in {project}: wanted {want:?}, got {names:?} ({status})"
            );
            last = spans;
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
    }
}

impl Phoenix {
    /// A PNG of a span's trace in Phoenix's UI, the span selected (`chromium`, or
    /// `ASSIST_CHROMIUM`).
    async fn screenshot(&self, span_id: &str, out: &str) {
        let chromium = std::env::var("ASSIST_CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let url = self.url(&format!("/redirects/spans/{span_id}"));
        let status = tokio::process::Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1600,1000",
                "--virtual-time-budget=15000",
            ])
            .arg(format!("--screenshot={out}"))
            .arg(url)
            .status()
            .await
            .unwrap();
        assert!(status.success(), "chromium: {status}");
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh W3C trace context: (traceparent, trace id, the client's span id).
fn client_trace() -> (String, String, String) {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let span_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
    (format!("00-{trace_id}-{span_id}-01"), trace_id, span_id)
}

/// The one span named `name`.
fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<&Value> = spans.iter().filter(|s| s["name"] == name).collect();
    assert_eq!(found.len(), 1, "one span {name}: {spans:#?}");
    found[0]
}

fn id(span: &Value) -> &str {
    span["context"]["span_id"].as_str().unwrap()
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn time(span: &Value, key: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(span[key].as_str().unwrap()).unwrap()
}

/// Every span but the root is a child of its stage's parent, starts and ends within the
/// root, and the root continues the client's span.
fn assert_tree(spans: &[Value], root: &str, client_span: &str, parents: &[(&str, &str)]) {
    let root = named(spans, root);
    assert_eq!(root["parent_id"], client_span, "the client's trace goes on");
    let (start, end) = (time(root, "start_time"), time(root, "end_time"));
    for (child, parent) in parents {
        let c = named(spans, child);
        let p = named(spans, parent);
        assert_eq!(
            c["parent_id"].as_str(),
            Some(id(p)),
            "{child} under {parent}"
        );
        let (s, e) = (time(c, "start_time"), time(c, "end_time"));
        assert!(
            start <= s && s <= e && e <= end,
            "{child} within the request ({start} to {end}): {c:#}"
        );
    }
    assert_eq!(
        spans.len(),
        parents.len() + 1,
        "no other spans: {:?}",
        spans.iter().map(|s| &s["name"]).collect::<Vec<_>>()
    );
}

async fn ask(url: &str, traceparent: &str, body: Value) -> (u16, String) {
    let r = client()
        .post(url)
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The MCP `ask` tool called over Streamable HTTP as a client does it (initialize, then
/// the call), the call's request carrying `traceparent`; the answer's text.
async fn mcp_ask(url: &str, traceparent: &str, question: &str) -> String {
    let post = |body: Value, session: Option<String>| {
        let mut rb = client()
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(id) = session {
            rb = rb.header("mcp-session-id", id);
        }
        rb
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "traces-test", "version": "1"}}}),
        None,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    let session = init
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let _ = init.text().await.unwrap();
    let r = post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        session.clone(),
    )
    .send()
    .await
    .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "ask", "arguments": {"question": question}}}),
        session,
    )
    .header("traceparent", traceparent)
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

async fn gateway(
    up: &ScriptedUpstream,
    phoenix: &Phoenix,
    project: &str,
    capture: bool,
) -> Spawned {
    let endpoint = phoenix.url("/v1/traces");
    let project = project.to_string();
    Spawned::with_knowledge(up, Provider::Openai, move |s| {
        s.assistant.passthrough = true;
        s.telemetry.otlp_endpoint = Some(endpoint);
        s.telemetry.otlp_headers = [("x-project-name".to_string(), project)].into();
        s.telemetry.capture_content = capture;
        s.telemetry.export_delay = Duration::from_millis(200);
    })
    .await
}

const STAGES: &[(&str, &str)] = &[
    ("parse", "ROOT"),
    ("session", "ROOT"),
    ("classify", "ROOT"),
    ("reformulate", "ROOT"),
    ("retrieval knowledge", "ROOT"),
    ("retrieve lexical (bm25)", "retrieval knowledge"),
    ("retrieve dense (vectors)", "retrieval knowledge"),
    ("fuse (rrf)", "retrieval knowledge"),
    ("assemble", "ROOT"),
    ("chat up-model:latest", "ROOT"),
];

fn stages<'a>(root: &'a str, last: &'a str) -> Vec<(&'a str, &'a str)> {
    STAGES
        .iter()
        .map(|(c, p)| (*c, if *p == "ROOT" { root } else { *p }))
        .chain([(last, root)])
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn phoenix_shows_every_stage_of_an_answer_and_no_content_unless_asked() {
    let Some(phoenix) = Phoenix::start().await else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let project = format!("gw-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let gw = gateway(&up, &phoenix, &project, false).await;

    // A streamed brunix answer over OpenAI's API, in the client's trace; its first token
    // comes FIRST_TOKEN after the upstream was asked.
    up.set_default(Reply::Tokens {
        tokens: ANSWER.iter().map(|t| t.to_string()).collect(),
        delay: FIRST_TOKEN,
        finish: "stop",
    });
    let (traceparent, trace_id, client_span) = client_trace();
    let (status, body) = ask(
        &gw.url("/v1/chat/completions"),
        &traceparent,
        json!({"model": "brunix", "stream": true, "session_id": "traced",
            "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = sse_events(&body);
    assert!(sse_text(&events).contains("ANSWER_MARKER_72"));
    let sources: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find_map(|e| e["sources"].as_array().cloned())
        .expect("the answer cites its sources");
    assert!(!sources.is_empty(), "the knowledge answered: {body}");
    let upstream_parent = up.last_request().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();

    let root = "POST /v1/chat/completions";
    let tree = stages(root, "stream to client");
    let names: Vec<&str> = tree.iter().map(|(c, _)| *c).chain([root]).collect();
    let spans = phoenix.trace(&project, &trace_id, &names).await;
    assert_tree(&spans, root, &client_span, &tree);

    let r = named(&spans, root);
    assert_eq!(r["span_kind"], "CHAIN");
    assert_eq!(attr(r, "assist.dialect"), "openai");
    assert_eq!(attr(r, "gen_ai.request.model"), "brunix");
    assert_eq!(attr(r, "http.response.status_code"), 200);
    assert_eq!(attr(r, "assist.outcome"), "completed");
    assert!(attr(r, "assist.query_type").is_string(), "{r:#}");
    assert!(attr(r, "assist.editor").is_boolean(), "{r:#}");
    assert!(attr(r, "assist.ttft_ms").as_f64().unwrap() > 0.0);

    // The retrieved chunks: ids and scores, the ones the answer cites.
    let retrieval = named(&spans, "retrieval knowledge");
    assert_eq!(retrieval["span_kind"], "RETRIEVER");
    let hits: Vec<Value> =
        serde_json::from_str(attr(retrieval, "assist.retrieval.hits").as_str().unwrap()).unwrap();
    let hit_ids: Vec<&str> = hits.iter().map(|h| h["id"].as_str().unwrap()).collect();
    let cited: Vec<&str> = sources.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(hit_ids, cited, "the trace names the chunks the answer used");
    for (hit, source) in hits.iter().zip(&sources) {
        let score = hit["score"].as_f64().unwrap();
        assert!(
            (score - source["score"].as_f64().unwrap()).abs() < 1e-4,
            "{hit} {source}"
        );
    }
    assert_eq!(
        attr(retrieval, "retrieval.documents.0.document.id"),
        cited[0],
        "Phoenix lists the documents: {retrieval:#}"
    );
    assert!(
        attr(
            named(&spans, "retrieve lexical (bm25)"),
            "assist.candidates"
        )
        .as_i64()
        .unwrap()
            > 0
    );
    assert_eq!(attr(named(&spans, "fuse (rrf)"), "assist.hits"), hits.len());

    let assemble = named(&spans, "assemble");
    assert!(attr(assemble, "assist.window.tokens").as_i64().unwrap() > 0);
    assert!(attr(assemble, "assist.prompt.tokens").as_i64().unwrap() > 0);

    // The upstream's answer: GenAI attributes, usage, time to first token; the upstream
    // request carried this span as its parent.
    let chat = named(&spans, "chat up-model:latest");
    assert_eq!(chat["span_kind"], "LLM");
    assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
    assert_eq!(attr(chat, "gen_ai.request.model"), UPSTREAM_MODEL);
    assert_eq!(attr(chat, "gen_ai.response.model"), UPSTREAM_MODEL);
    assert_eq!(attr(chat, "gen_ai.request.stream"), true);
    assert_eq!(attr(chat, "server.address"), "127.0.0.1");
    assert!(attr(chat, "gen_ai.usage.input_tokens").as_i64().unwrap() > 0);
    assert!(attr(chat, "gen_ai.usage.output_tokens").as_i64().unwrap() > 0);
    assert!(attr(chat, "llm.token_count.total").as_i64().unwrap() > 0);
    assert_eq!(
        attr(chat, "gen_ai.response.finish_reasons"),
        &json!(["stop"])
    );
    // Counted from the request to the upstream, not from its answer's first token.
    let first_chunk = attr(chat, "gen_ai.response.time_to_first_chunk")
        .as_f64()
        .unwrap();
    assert!(
        first_chunk >= FIRST_TOKEN.as_secs_f64() * 0.9,
        "time to first chunk {first_chunk} s, the upstream took {FIRST_TOKEN:?}"
    );
    assert!(
        chat["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "first token"),
        "{chat:#}"
    );
    assert_eq!(
        upstream_parent,
        format!("00-{trace_id}-{}-01", id(chat)),
        "the upstream request's parent is the gateway's span"
    );

    // No content: not the question, the answer, the prompt or a chunk's text.
    let source_text = get_json(&gw.url(&format!("/v1/sources/{}", cited[0])))
        .await
        .1["text"]
        .as_str()
        .unwrap()
        .to_string();
    let all = serde_json::to_string(&spans).unwrap();
    for content in ["QUESTION_MARKER_71", "ANSWER_MARKER_72", "It retries"] {
        assert!(!all.contains(content), "{content} is in the trace: {all}");
    }
    let line = source_text
        .lines()
        .map(str::trim)
        .find(|l| l.len() > 24)
        .unwrap();
    assert!(
        !all.contains(line),
        "a chunk's text is in the trace: {line}"
    );
    for key in [
        "input.value",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "llm.input_messages",
        "llm.output_messages",
        "gen_ai.retrieval.query.text",
        "document.content",
    ] {
        assert!(
            !all.contains(&format!("{key}\"")),
            "{key} is in the trace: {all}"
        );
    }
    // Phoenix makes an output of the response's model when there is none.
    let output = attr(chat, "output.value");
    assert!(
        output.is_null() || output.as_str().unwrap().starts_with("{\"model\""),
        "{output}"
    );

    // The picture in docs/tracing.md: this trace in Phoenix's UI, by headless Chromium.
    if let Ok(out) = std::env::var("ASSIST_TRACE_SCREENSHOT") {
        phoenix.screenshot(id(retrieval), &out).await;
    }

    // A passthrough answer: no assistant stages.
    let (traceparent, trace_id, client_span) = client_trace();
    let (status, body) = ask(
        &gw.url("/v1/chat/completions"),
        &traceparent,
        json!({"model": UPSTREAM_MODEL, "stream": false,
            "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let tree = [
        ("parse", root),
        ("chat up-model:latest", root),
        ("answer to client (whole)", root),
    ];
    let names: Vec<&str> = tree.iter().map(|(c, _)| *c).chain([root]).collect();
    let spans = phoenix.trace(&project, &trace_id, &names).await;
    assert_tree(&spans, root, &client_span, &tree);
    assert_eq!(
        attr(named(&spans, root), "gen_ai.request.model"),
        UPSTREAM_MODEL
    );
    assert_eq!(attr(named(&spans, root), "gen_ai.request.stream"), false);
    // A whole answer is asked of the upstream whole.
    let chat = named(&spans, "chat up-model:latest");
    assert_eq!(attr(chat, "gen_ai.request.stream"), false);
    assert!(attr(chat, "assist.tools").is_null(), "no tools, no count");
    let all = serde_json::to_string(&spans).unwrap();
    assert!(!all.contains("QUESTION_MARKER_71") && !all.contains("ANSWER_MARKER_72"));

    // A gRPC call, its trace continued from the call's metadata.
    let (traceparent, trace_id, client_span) = client_trace();
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", gw.grpc_addr.unwrap()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut request = tonic::Request::new(AgentRequest {
        query: QUESTION.into(),
        session_id: "traced-grpc".into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let mut stream = AssistanceEngineClient::new(channel)
        .ask_agent_stream(request)
        .await
        .unwrap()
        .into_inner();
    let mut text = String::new();
    while let Some(m) = stream.message().await.unwrap() {
        text.push_str(&m.text);
    }
    assert!(text.contains("ANSWER_MARKER_72"), "{text}");
    let root = "/brunix.AssistanceEngine/AskAgentStream";
    let tree = stages(root, "stream to client");
    let names: Vec<&str> = tree.iter().map(|(c, _)| *c).chain([root]).collect();
    let spans = phoenix.trace(&project, &trace_id, &names).await;
    assert_tree(&spans, root, &client_span, &tree);
    assert_eq!(attr(named(&spans, root), "assist.dialect"), "grpc");
    let all = serde_json::to_string(&spans).unwrap();
    assert!(!all.contains("QUESTION_MARKER_71") && !all.contains("ANSWER_MARKER_72"));

    // An MCP `ask`, traced from the tool call's HTTP request.
    let (traceparent, trace_id, client_span) = client_trace();
    let answer = mcp_ask(&gw.url("/mcp"), &traceparent, QUESTION).await;
    assert!(answer.contains("ANSWER_MARKER_72"), "{answer}");
    let root = "/mcp ask";
    let tree: Vec<(&str, &str)> = STAGES
        .iter()
        .map(|(c, p)| (*c, if *p == "ROOT" { root } else { *p }))
        .collect();
    let names: Vec<&str> = tree.iter().map(|(c, _)| *c).chain([root]).collect();
    let spans = phoenix.trace(&project, &trace_id, &names).await;
    assert_tree(&spans, root, &client_span, &tree);
    assert_eq!(attr(named(&spans, root), "assist.dialect"), "mcp");

    // An error: the upstream fails; the trace says where and how, in error status.
    // (Each of the gateway's tries: it retries a 500 twice.)
    for _ in 0..3 {
        up.push(Reply::Status {
            status: 500,
            body: r#"{"error":{"message":"boom SECRET_UPSTREAM_TEXT"}}"#.into(),
        });
    }
    let (traceparent, trace_id, client_span) = client_trace();
    let (status, body) = ask(
        &gw.url("/v1/chat/completions"),
        &traceparent,
        json!({"model": "brunix", "stream": false,
            "messages": [{"role": "user", "content": QUESTION}]}),
    )
    .await;
    assert!(status >= 500, "{status} {body}");
    let root = "POST /v1/chat/completions";
    let tree: Vec<(&str, &str)> = STAGES
        .iter()
        .map(|(c, p)| (*c, if *p == "ROOT" { root } else { *p }))
        .collect();
    let names: Vec<&str> = tree.iter().map(|(c, _)| *c).chain([root]).collect();
    let spans = phoenix.trace(&project, &trace_id, &names).await;
    assert_tree(&spans, root, &client_span, &tree);
    let r = named(&spans, root);
    assert_eq!(r["status_code"], "ERROR", "{r:#}");
    assert_eq!(attr(r, "http.response.status_code"), status);
    let chat = named(&spans, "chat up-model:latest");
    assert_eq!(chat["status_code"], "ERROR", "{chat:#}");
    assert_eq!(attr(chat, "error.type"), "status_5xx");
    let all = serde_json::to_string(&spans).unwrap();
    assert!(
        !all.contains("SECRET_UPSTREAM_TEXT"),
        "the upstream's message is not recorded"
    );
    drop(gw);

    // With content capture: the question, the prompt, the chunks and the answer are on
    // the spans, redacted.
    let project = format!("gw-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let gw = gateway(&up, &phoenix, &project, true).await;
    let secret = format!("gh{}_Ta0nRUyw4sBypiCZrMnQShoeHG7FYZfZq7za", "p");
    up.set_default(Reply::tokens(&[
        "The token ",
        &secret,
        " ANSWER_MARKER_72.",
    ]));
    let (traceparent, trace_id, _) = client_trace();
    let question = format!("{QUESTION} my token is {secret}");
    let (status, body) = ask(
        &gw.url("/v1/chat/completions"),
        &traceparent,
        json!({"model": "brunix", "stream": true,
            "messages": [{"role": "user", "content": question}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let root = "POST /v1/chat/completions";
    let tree = stages(root, "stream to client");
    let names: Vec<&str> = tree.iter().map(|(c, _)| *c).chain([root]).collect();
    let spans = phoenix.trace(&project, &trace_id, &names).await;
    let all = serde_json::to_string(&spans).unwrap();
    assert!(!all.contains(&secret), "a secret reached the trace: {all}");
    let r = named(&spans, root);
    let input = attr(r, "input.value").as_str().unwrap();
    assert!(
        input.contains("QUESTION_MARKER_71") && input.contains("[REDACTED github_token]"),
        "{input}"
    );
    let chat = named(&spans, "chat up-model:latest");
    assert!(
        attr(chat, "llm.input_messages.0.message.content").is_string(),
        "{chat:#}"
    );
    let prompt = serde_json::to_string(&chat["attributes"]).unwrap();
    assert!(prompt.contains("QUESTION_MARKER_71"), "{prompt}");
    let output = attr(chat, "output.value").as_str().unwrap();
    assert!(
        output.contains("ANSWER_MARKER_72") && output.contains("[REDACTED github_token]"),
        "{output}"
    );
    let retrieval = named(&spans, "retrieval knowledge");
    assert!(
        attr(retrieval, "retrieval.documents.0.document.content").is_string(),
        "{retrieval:#}"
    );
}

/// Three streamed answers from a gateway whose collector is not there: each arrives whole.
/// Then its log, once it says (only once: at most once a minute) that an export failed,
/// and never `s3cret-TOKEN`, which the test put in what is sent to the collector.
async fn answers_past_a_missing_collector(
    telemetry: impl FnOnce(&mut assist_gateway::config::TelemetrySettings) + Send + 'static,
) -> String {
    let up = ScriptedUpstream::start().await;
    let gw = Spawned::with_knowledge(&up, Provider::Openai, move |s| {
        telemetry(&mut s.telemetry);
        s.telemetry.export_delay = Duration::from_millis(100);
    })
    .await;
    up.set_default(Reply::tokens(&ANSWER));
    for _ in 0..3 {
        let (status, body) = ask(
            &gw.url("/v1/chat/completions"),
            &client_trace().0,
            json!({"model": "brunix", "stream": true, "messages": [{"role": "user", "content": QUESTION}]}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(
            sse_text(&sse_events(&body)).contains("ANSWER_MARKER_72"),
            "{body}"
        );
    }
    let said = "the collector did not take an export";
    assert!(
        eventually(30, || gw.log().contains(said)).await,
        "no word of the failed export:\n{}",
        gw.log()
    );
    let log = gw.log();
    assert_eq!(
        log.matches(said).count(),
        1,
        "said more than once a minute:\n{log}"
    );
    assert!(
        !log.contains("s3cret-TOKEN"),
        "the collector's credentials were logged:\n{log}"
    );
    log
}

/// A collector that is not there: answers are not held up, and the log says (once, with
/// the failure's kind, never the endpoint, which may hold credentials) that spans are lost.
#[tokio::test]
async fn a_collector_that_is_down_is_said_in_the_log_and_holds_nothing_up() {
    let port = free_port(); // nobody listens on it
    let log = answers_past_a_missing_collector(move |t| {
        t.otlp_endpoint = Some(format!(
            "http://user:s3cret-TOKEN@127.0.0.1:{port}/v1/traces"
        ));
    })
    .await;
    assert!(log.contains("\"kind\":\"connect\""), "{log}");
}

/// The same over OTLP/gRPC, with credentials in the headers sent to the collector.
#[tokio::test]
async fn a_grpc_collector_that_is_down_is_said_in_the_log_too() {
    let port = free_port(); // nobody listens on it
    let log = answers_past_a_missing_collector(move |t| {
        t.otlp_endpoint = Some(format!("http://127.0.0.1:{port}"));
        t.otlp_protocol = OtlpProtocol::Grpc;
        t.otlp_headers
            .insert("authorization".into(), "Bearer s3cret-TOKEN".into());
    })
    .await;
    assert!(
        log.contains("\"kind\":\"rpc\"") || log.contains("\"kind\":\"timeout\""),
        "{log}"
    );
}
