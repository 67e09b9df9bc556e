//! Clients' side: HTTP requests, SSE and NDJSON read as clients read them, the
//! installed client programs and scripts.

use super::*;

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// SSE `data:` payloads of a body, checking every event ends with a blank line.
pub fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body does not end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            assert!(!e.contains('\n'), "one line per event expected, got {e:?}");
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event without 'data: ': {e:?}"))
                .to_string()
        })
        .collect()
}

/// The answer text carried by SSE chat events (`choices[0].delta.content`); `[DONE]`,
/// usage and error events carry none.
pub fn sse_text(events: &[String]) -> String {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

/// NDJSON lines of a body, checking there are no blank lines and no SSE prefix.
pub fn ndjson_lines(body: &str) -> Vec<Value> {
    assert!(
        body.ends_with('\n'),
        "NDJSON body does not end with a newline: {body:?}"
    );
    body.trim_end_matches('\n')
        .split('\n')
        .map(|l| {
            assert!(!l.is_empty(), "blank line in NDJSON: {body:?}");
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?} is not JSON: {e}"))
        })
        .collect()
}

/// Reads a streamed body chunk by chunk until `n` bytes of payload arrived.
pub async fn read_some(response: &mut reqwest::Response, at_least: usize) -> String {
    let mut out = Vec::new();
    while out.len() < at_least {
        match response.chunk().await.unwrap() {
            Some(c) => out.extend_from_slice(&c),
            None => break,
        }
    }
    String::from_utf8(out).unwrap()
}

/// Waits until `check` holds, at most `secs` seconds.
pub async fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// POSTs JSON (or raw text when `body` is a string) and returns status, headers and body text.
pub async fn post(
    url: &str,
    body: impl Into<Payload>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let rb = client().post(url);
    let rb = match body.into() {
        Payload::Json(v) => rb.json(&v),
        Payload::Raw(s) => rb.header("content-type", "application/json").body(s),
    };
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

/// Ingests one folder with `settings`, reporting nothing; its summary.
pub async fn ingest_quietly(
    settings: &Settings,
    folder: &std::path::Path,
) -> assist_gateway::ingest::Summary {
    assist_gateway::app::ingest(
        settings,
        &[folder.to_path_buf()],
        false,
        &assist_gateway::ingest::Quiet,
    )
    .await
    .unwrap()
}

pub async fn get_text(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let r = client().get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub enum Payload {
    Json(Value),
    Raw(String),
}

impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Payload::Json(v)
    }
}

impl From<&str> for Payload {
    fn from(s: &str) -> Self {
        Payload::Raw(s.to_string())
    }
}

/// The python of the pinned virtualenv (`ASSIST_PYTHON`, set by `scripts/test.sh`), or
/// `None` with a note that `what` was skipped; in CI its absence fails the test.
pub fn python_for(what: &str) -> Option<String> {
    installed("ASSIST_PYTHON", what)
}

/// The program `scripts/test.sh` installed and named in the environment variable `var`,
/// or `None` with a note that `what` was skipped; in CI its absence fails the test.
pub fn installed(var: &str, what: &str) -> Option<String> {
    if let Ok(program) = std::env::var(var) {
        return Some(program);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run {what}: use scripts/test.sh"
    );
    eprintln!("SKIPPED: {var} is not set; run scripts/test.sh to include {what}");
    None
}

/// Runs `tests/clients/<script>` with `python` and `args`; asserts it succeeded and printed
/// `passed` (its last line), and returns what it printed.
pub async fn run_client_script(python: &str, script: &str, args: &[&str], passed: &str) -> String {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(passed), "{script}:\n{stdout}\n{stderr}");
    stdout
}

/// The `assist-gateway` binary built with these tests.
pub fn gateway_binary() -> std::path::PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_assist-gateway") {
        return path.into();
    }
    // target/<profile>/deps/<test> → target/<profile>/assist-gateway
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("assist-gateway")
}

/// Every message text the upstream was given in one request, in order.
pub fn prompt_text(r: &Recorded) -> String {
    r.body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["content"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| r.body["prompt"].as_str().unwrap_or("").to_string())
}

/// Named SSE events of a body (Anthropic, Responses): each `event: <name>` then one
/// `data: <json>` line, a blank line after; checks the JSON's `type` is the name.
pub fn named_events(body: &str) -> Vec<(String, Value)> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body does not end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an 'event:' and a 'data:' line: {e:?}"));
            assert!(!data.contains('\n'), "one data line per event: {e:?}");
            let data: Value = serde_json::from_str(data)
                .unwrap_or_else(|err| panic!("data is not JSON ({err}): {e:?}"));
            assert_eq!(data["type"], name, "the event's type is its name: {e:?}");
            (name.to_string(), data)
        })
        .collect()
}
