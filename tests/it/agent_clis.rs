//! The coding agents themselves against the gateway, headless and offline: Claude Code
//! (`claude -p`, npm `@anthropic-ai/claude-code`) on `/v1/messages`, reading a file
//! through its Read tool when the model asks for it, and Codex CLI (`codex exec`, npm
//! `@openai/codex`) on `/v1/responses`, answering and running one function call.
//! `scripts/test.sh` installs both (scripts/node-env.sh) and sets ASSIST_CLAUDE and
//! ASSIST_CODEX; without them these tests say they were skipped, and in CI they must run.

use std::path::Path;
use std::time::Duration;

use crate::support::*;
use assist_gateway::config::Provider;
use serde_json::{json, Value};

const KEY: &str = "sk-agent";

async fn run(command: tokio::process::Command, what: &str) -> (bool, String, String) {
    run_within(command, what, 120).await
}

async fn run_within(
    mut command: tokio::process::Command,
    what: &str,
    secs: u64,
) -> (bool, String, String) {
    let child = command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(secs), child)
        .await
        .unwrap_or_else(|_| panic!("{what} finished within {secs} s"))
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The README's fenced block that starts with `start`, as written.
fn readme_block(fence: &str, start: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let rest = readme
        .split(&format!("```{fence}\n{start}"))
        .nth(1)
        .unwrap_or_else(|| panic!("README.md has a {fence} block starting {start:?}"));
    format!("{start}{}", rest.split("```").next().unwrap_or_default())
}

/// The variables the README's Claude Code section exports, as written.
fn readme_claude_env() -> Vec<(String, String)> {
    let block = readme_block("sh", "export ANTHROPIC_BASE_URL=");
    let joined = block.replace("\\\n", " ");
    let mut vars = vec![];
    for line in joined.lines() {
        let line = line.split(" #").next().unwrap_or_default();
        let Some(exports) = line.trim().strip_prefix("export ") else {
            continue;
        };
        for pair in exports.split_whitespace() {
            let (name, value) = pair.split_once('=').expect("NAME=value");
            vars.push((name.to_string(), value.to_string()));
        }
    }
    assert!(
        vars.len() >= 9,
        "the README's Claude Code variables: {vars:?}"
    );
    vars
}

/// `claude -p PROMPT` in `dir` with a fresh home, configured as the README says, pointed
/// at `base`, every model role named `model`.
fn claude(
    program: &str,
    home: &Path,
    dir: &Path,
    base: &str,
    model: &str,
    prompt: &str,
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(program);
    c.arg("-p")
        .arg(prompt)
        .args(["--output-format", "json", "--max-turns", "4"])
        .args(["--allowedTools", "Read"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("NO_COLOR", "1")
        .current_dir(dir);
    for (name, value) in readme_claude_env() {
        let value = match name.as_str() {
            "ANTHROPIC_BASE_URL" => base.to_string(),
            "ANTHROPIC_AUTH_TOKEN" => KEY.to_string(),
            _ if value == "brunix" => model.to_string(),
            _ => value,
        };
        c.env(name, value);
    }
    c
}

/// The tool results the upstream was given, in any request.
fn tool_results(up: &ScriptedUpstream) -> Vec<String> {
    up.requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn claude_code_reads_a_file_through_its_tool_and_answers() {
    let Some(program) = installed("ASSIST_CLAUDE", "the Claude Code test") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    up.script_for_tools_only();
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        s.server.api_keys = vec![KEY.into()];
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("notes.txt");
    std::fs::write(&file, "The launch code is 7-alpha-tango.\n").unwrap();
    // The model asks for the file, then answers from what the tool returned.
    up.push(Reply::ToolCall {
        name: "Read".into(),
        arguments: json!({"file_path": file.display().to_string()}),
    });
    up.push(Reply::tokens(&["The launch code ", "is 7-alpha-tango."]));
    let (ok, stdout, stderr) = run(
        claude(
            &program,
            home.path(),
            work.path(),
            &gw.url(""),
            UPSTREAM_MODEL,
            "What is the launch code in notes.txt?",
        ),
        "claude",
    )
    .await;
    assert!(ok, "claude failed\nstdout: {stdout}\nstderr: {stderr}");
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("claude's JSON result: {stdout}\n{stderr}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        result["result"], "The launch code is 7-alpha-tango.",
        "{result}"
    );
    assert!(
        tool_results(&up)
            .iter()
            .any(|t| t.contains("7-alpha-tango")),
        "the file's text went back to the model through the Read tool: {:?}",
        tool_results(&up)
    );
    let main: Vec<_> = up
        .requests()
        .into_iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    assert!(main.len() >= 2, "two model turns with tools");
    assert!(
        main[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "Read"),
        "Claude Code's Read tool reached the upstream"
    );
}

/// `codex exec PROMPT` with a fresh `CODEX_HOME` configured as the README says, pointed
/// at `base`, for `model`.
fn codex(
    program: &str,
    home: &Path,
    dir: &Path,
    base: &str,
    model: &str,
    prompt: &str,
) -> tokio::process::Command {
    // The README's configuration, pointed at this gateway.
    let config = readme_block("toml", "model = \"brunix\"\n")
        .replace("http://127.0.0.1:8080", base)
        .replace("model = \"brunix\"", &format!("model = \"{model}\""));
    assert!(config.contains("model_catalog_url"), "{config}");
    std::fs::write(home.join("config.toml"), config).unwrap();
    let mut c = tokio::process::Command::new(program);
    c.arg("exec")
        .args([
            "--skip-git-repo-check",
            "--sandbox",
            "read-only",
            "--color",
            "never",
        ])
        .arg(prompt)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CODEX_HOME", home)
        .env("ASSIST_KEY", KEY)
        .env("NO_COLOR", "1")
        .current_dir(dir);
    c
}

#[tokio::test]
async fn codex_exec_answers_and_runs_a_function_call() {
    let Some(program) = installed("ASSIST_CODEX", "the Codex CLI test") else {
        return;
    };
    let up = ScriptedUpstream::start().await;
    let gw = Gateway::start(&up, Provider::Openai, |s| {
        s.assistant.passthrough = true;
        s.server.api_keys = vec![KEY.into()];
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();

    // A plain question.
    up.set_default(Reply::tokens(&["Forty", "-two."]));
    let (ok, stdout, stderr) = run(
        codex(
            &program,
            home.path(),
            work.path(),
            &gw.url(""),
            UPSTREAM_MODEL,
            "What is six times seven?",
        ),
        "codex",
    )
    .await;
    assert!(ok, "codex failed\nstdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("Forty-two."),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    // The catalog told Codex about the model: no fallback metadata, no window warning.
    assert!(
        !stderr.contains("Model metadata") && !stderr.contains("context window"),
        "{stderr}"
    );

    // A function call: Codex runs its shell tool and sends the output back.
    let before = up.requests().len();
    let tool = up
        .requests()
        .last()
        .and_then(|r| r.body["tools"].as_array().cloned())
        .unwrap_or_default();
    let (name, arguments) = shell_call(&tool);
    up.push(Reply::ToolCall {
        name: name.clone(),
        arguments,
    });
    up.set_default(Reply::tokens(&["The file ", "says hello."]));
    std::fs::write(work.path().join("greeting.txt"), "hello from the file\n").unwrap();
    let (ok, stdout, stderr) = run(
        codex(
            &program,
            home.path(),
            work.path(),
            &gw.url(""),
            UPSTREAM_MODEL,
            "What does greeting.txt say?",
        ),
        "codex",
    )
    .await;
    assert!(ok, "codex failed\nstdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("The file says hello."),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let results = tool_results(&up);
    assert!(
        up.requests()[before..]
            .iter()
            .any(|r| r.body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"
                    && m["content"]
                        .as_str()
                        .unwrap_or("")
                        .contains("hello from the file")))),
        "{name}'s output went back to the model: {results:?}"
    );
}

/// Codex's shell tool as the upstream saw it, and a call of it that prints greeting.txt.
fn shell_call(tools: &[Value]) -> (String, Value) {
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    for name in ["exec_command", "shell_command", "shell"] {
        if names.contains(&name) {
            let arguments = match name {
                "exec_command" => json!({"cmd": "cat greeting.txt"}),
                "shell_command" => json!({"command": "cat greeting.txt"}),
                _ => json!({"command": ["cat", "greeting.txt"]}),
            };
            return (name.to_string(), arguments);
        }
    }
    panic!("Codex offered no shell tool: {names:?}");
}

/// The model server and the gateway as quickstart.sh starts them (the settings it writes,
/// checked against the script below), the knowledge base ingested; `None` (after saying
/// so) where the model is not installed.
async fn the_quick_start(what: &str) -> Option<(crate::real_model::ModelServer, Gateway)> {
    let (Ok(python), Ok(gguf)) = (
        std::env::var("ASSIST_MODEL_PYTHON"),
        std::env::var("ASSIST_MODEL_GGUF"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the real-model tests: use scripts/test.sh"
        );
        eprintln!("SKIPPED: {what}: the model server is not installed; run scripts/test.sh");
        return None;
    };
    let model = crate::real_model::start_model_server_as_the_quick_start(&python, &gguf).await;
    let up = ScriptedUpstream::start().await; // unused: the gateway talks to the model server
    let gw = Gateway::with_knowledge(&up, Provider::Openai, |s| {
        s.llm.base_url = format!("http://127.0.0.1:{}/v1", model.port);
        s.llm.model = crate::real_model::MODEL.into();
        for (setting, value) in QUICK_START {
            match setting {
                "first_byte_timeout_secs" => s.llm.first_byte_timeout = Duration::from_secs(value),
                "context_tokens" => s.assistant.context_tokens = value as u32,
                "answer_reserve_tokens" => s.assistant.answer_reserve_tokens = value as u32,
                "top_k" => s.retrieval.top_k = value as usize,
                _ => unreachable!("{setting}"),
            }
        }
        s.assistant.passthrough = true;
        s.server.api_keys = vec![KEY.into()];
    })
    .await;
    Some((model, gw))
}

/// The settings quickstart.sh writes that shape an agent's turn.
const QUICK_START: [(&str, u64); 4] = [
    ("first_byte_timeout_secs", 300),
    ("context_tokens", 16384),
    ("answer_reserve_tokens", 512),
    ("top_k", 3),
];

#[test]
fn the_agent_tests_start_what_the_quick_start_starts() {
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/quickstart.sh"))
        .expect("quickstart.sh");
    for (setting, value) in QUICK_START {
        let line = format!("\n{setting} = {value}\n");
        assert!(script.contains(&line), "quickstart.sh writes {line:?}");
    }
    assert!(
        script.contains("--n_ctx 16384 --cache true"),
        "the model server's flags"
    );
    // The window the README tells Claude Code is the quick start's.
    let told = readme_claude_env()
        .into_iter()
        .find(|(name, _)| name == "CLAUDE_CODE_MAX_CONTEXT_TOKENS")
        .map(|(_, value)| value);
    assert_eq!(told.as_deref(), Some("16384"));
}

/// A working folder with a small program in it, as a user's.
fn project() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("src")).unwrap();
    std::fs::write(
        work.path().join("src/main.py"),
        "def mean(values):\n    \"\"\"Average of a list of numbers.\"\"\"\n    if not values:\n        return 0.0\n    return sum(values) / len(values)\n",
    )
    .unwrap();
    work
}

/// An agent (the program named by `var`) on the quick start, with a fresh home and a
/// working folder holding a small program; `None` where either is not installed.
struct Agent {
    program: String,
    _model: crate::real_model::ModelServer,
    gw: Gateway,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Agent {
    /// The agent's command (`claude` or `codex`) asking `prompt` of `brunix` in its folder.
    fn asks(&self, cli: Cli, prompt: &str) -> tokio::process::Command {
        let (home, work) = (self.home.path(), self.work.path());
        cli(
            &self.program,
            home,
            work,
            &self.gw.url(""),
            "brunix",
            prompt,
        )
    }
}

/// `claude` or `codex`, configured as the README says.
type Cli = fn(&str, &Path, &Path, &str, &str, &str) -> tokio::process::Command;

async fn agent_on_the_quick_start(var: &str, what: &str) -> Option<Agent> {
    let program = installed(var, what)?;
    let (model, gw) = the_quick_start(what).await?;
    Some(Agent {
        program,
        _model: model,
        gw,
        home: tempfile::tempdir().unwrap(),
        work: project(),
    })
}

/// Claude Code, configured as the README says, asked about a file of its working folder on
/// the quick start (its window, its model, its settings), then asked again in the same
/// session: both exit 0 with an answer. The 0.5B model seldom calls Read; the test is that
/// the agent's turn gets through the window whole (its instructions, its tools made brief)
/// and back. Claude Code samples at temperature 1, and now and then the model runs on to
/// CLAUDE_CODE_MAX_OUTPUT_TOKENS: Claude Code then reports the `max_tokens` stop as its
/// own error, which is the answer reaching it whole, token by token, to its limit.
#[tokio::test]
async fn claude_code_answers_about_a_file_on_the_quick_start() {
    let Some(agent) =
        agent_on_the_quick_start("ASSIST_CLAUDE", "the Claude Code real-model test").await
    else {
        return;
    };
    for (turn, prompt) in [
        "What does mean() in src/main.py return for an empty list?",
        "And for [2, 4]?",
    ]
    .into_iter()
    .enumerate()
    {
        let mut command = agent.asks(claude, prompt);
        if turn > 0 {
            command.arg("--continue");
        }
        let started = std::time::Instant::now();
        let (ok, stdout, stderr) = run_within(command, "claude", 900).await;
        let secs = started.elapsed().as_secs();
        assert!(
            !stderr.contains("assumes a context window"),
            "Claude Code was told the window: {stderr}"
        );
        let result: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|_| panic!("claude's JSON result: {stdout}\n{stderr}"));
        if result["api_error"] == "max_output_tokens" {
            println!(
                "turn {}: the model ran on to Claude Code's output limit ({secs} s)",
                turn + 1
            );
            continue;
        }
        assert!(ok, "claude failed\nstdout: {stdout}\nstderr: {stderr}");
        assert_eq!(result["is_error"], false, "{result}");
        let answer = result["result"].as_str().unwrap_or_default();
        assert!(!answer.trim().is_empty(), "{result}");
        println!("turn {} ({secs} s): {answer}", turn + 1);
    }
}

/// Codex CLI, configured as the README says (its catalog from the gateway), asked about a
/// file of its working folder on the quick start: it exits 0 with an answer and no
/// warning about the model's metadata or window.
#[tokio::test]
async fn codex_answers_about_a_file_on_the_quick_start() {
    let Some(agent) = agent_on_the_quick_start("ASSIST_CODEX", "the Codex real-model test").await
    else {
        return;
    };
    let prompt = "What does mean() in src/main.py return for an empty list?";
    let command = agent.asks(codex, prompt);
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = run_within(command, "codex", 900).await;
    let secs = started.elapsed().as_secs();
    assert!(ok, "codex failed\nstdout: {stdout}\nstderr: {stderr}");
    assert!(
        !stderr.contains("Model metadata") && !stderr.contains("ran out of room"),
        "{stderr}"
    );
    assert!(!stdout.trim().is_empty(), "an answer: {stderr}");
    println!("codex ({secs} s): {}", stdout.trim());
}
