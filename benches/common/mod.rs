//! Pieces the benchmarks share: child processes that never outlive the benchmark, the
//! release gateway started as its own process (optionally with `examples/knowledge`
//! ingested), resident memory of a process tree, free ports, percentiles, env knobs.
//!
//! The gateway serves gRPC on a port the system picks (`grpc.addr = "127.0.0.1:0"`, so
//! two benchmarks, or a benchmark and the tests, never fight over the default 50051); the
//! bound address is read from its "assist-gateway listening" log line.
//!
//! A benchmark that uses this module also declares `mod support;` (the scripted upstream).
#![allow(dead_code)]

use bytes::Bytes;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{ScriptedUpstream, UPSTREAM_MODEL};

/// Process groups of every child still running, killed on Ctrl-C / SIGTERM.
static GROUPS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A child process in its own process group (so a server that forks workers goes with
/// it); the whole group is killed and the child reaped when this is dropped.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    /// Starts `cmd` in a new process group and registers it for clean-up on signals.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let child = cmd
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        GROUPS.lock().unwrap().push(child.id());
        Proc {
            child,
            name: name.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks the process to stop (SIGTERM) and waits for it, at most `secs` seconds; false
    /// when it had not exited by then (it is killed when this is dropped).
    pub fn terminate(&mut self, secs: u64) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Fails with the process's name if it has already exited.
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited early: {status}", self.name);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pgid = self.child.id();
        kill_group(pgid);
        let _ = self.child.kill();
        let _ = self.child.wait();
        GROUPS.lock().unwrap().retain(|g| *g != pgid);
    }
}

/// On Ctrl-C or SIGTERM: kill every child process group, then exit (130).
pub fn kill_children_on_signal() {
    tokio::spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("interrupted: stopping the child processes");
        for pgid in GROUPS.lock().unwrap().drain(..) {
            kill_group(pgid);
        }
        std::process::exit(130);
    });
}

/// Resident memory of one process, KiB (0 if it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A process and all its descendants (server workers), the process first.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
                if let Some(ppid) = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
                {
                    parents.push((p, ppid));
                }
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// Resident memory of a process and all its descendants (server workers), KiB.
pub fn rss_tree_kib(pid: u32) -> u64 {
    process_tree(pid).into_iter().map(rss_kib).sum()
}

/// Samples a process tree's resident memory every 20 ms and keeps the peak.
pub struct RssSampler {
    peak: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_tree_kib(pid)));
        let running = Arc::new(AtomicBool::new(true));
        let task = {
            let (peak, running) = (peak.clone(), running.clone());
            tokio::spawn(async move {
                while running.load(Ordering::Relaxed) {
                    let rss = tokio::task::spawn_blocking(move || rss_tree_kib(pid))
                        .await
                        .unwrap_or(0);
                    peak.fetch_max(rss, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        Self {
            peak,
            running,
            task,
        }
    }

    /// Peak so far, KiB.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Stops sampling; returns the peak, KiB.
    pub async fn stop(self) -> u64 {
        self.running.store(false, Ordering::Relaxed);
        let peak = self.peak.clone();
        let _ = self.task.await;
        peak.load(Ordering::Relaxed)
    }
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The gateway binary cargo built next to this benchmark (target/<profile>/).
pub fn gateway_binary() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_assist-gateway") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    profile_dir.join("assist-gateway")
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An environment knob, or its default when unset (a value that does not parse fails).
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        _ => default,
    }
}

/// The `p` quantile (0..=1) of microsecond values, in milliseconds (NaN when empty).
pub fn percentile(values: &[u64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

/// A count with thousands separated by commas (16840.4 → "16,840"); "-" when not finite.
pub fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let digits = (v.round() as u64).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Waits until GET `url` answers 200, at most `secs` seconds.
pub async fn wait_ok(url: &str, secs: u64, proc_: &mut Proc) {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        proc_.check_alive();
        if let Ok(r) = client.get(url).timeout(Duration::from_secs(2)).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} did not answer {url} within {secs} s", proc_.name);
}

/// How to start the gateway.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// `assistant.passthrough`: the upstream's own models are served as they are.
    pub passthrough: bool,
    /// Ingest `examples/knowledge` into the data_dir first.
    pub knowledge: bool,
    /// `log.level` (the gateway's default is "info").
    pub log_level: String,
    /// Extra `ASSIST__…` settings.
    pub env: Vec<(String, String)>,
    /// A program and its arguments the gateway runs under (e.g. valgrind), or none.
    pub wrapper: Vec<String>,
    /// How long it may take to answer /health.
    pub ready_secs: u64,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            passthrough: true,
            knowledge: true,
            log_level: "info".into(),
            env: Vec::new(),
            wrapper: Vec::new(),
            ready_secs: 30,
        }
    }
}

/// The release gateway in its own process, on a free loopback port, in front of the
/// scripted upstream's OpenAI dialect.
pub struct GatewayProcess {
    pub proc_: Proc,
    pub url: String,
    /// The gateway's log (JSON lines).
    pub log: PathBuf,
    /// host:port of its gRPC service (`brunix.AssistanceEngine`), when it serves one.
    pub grpc_addr: Option<String>,
    _data: tempfile::TempDir,
}

impl GatewayProcess {
    pub fn pid(&self) -> u32 {
        self.proc_.pid()
    }
}

pub async fn start_gateway(upstream: &ScriptedUpstream, opts: &GatewayOptions) -> GatewayProcess {
    start_gateway_on(upstream, opts, None).await
}

/// `program` as a command, run under `taskset -c cpus` when `cpus` is given: the process,
/// and every thread and child it starts, stays on those CPUs (taskset execs the program,
/// so the child's pid is the program's).
pub fn command_on(cpus: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", cpus]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// `start_gateway`, the server pinned to `cpus` (see `command_on`); ingest is not pinned.
pub async fn start_gateway_on(
    upstream: &ScriptedUpstream,
    opts: &GatewayOptions,
    cpus: Option<&str>,
) -> GatewayProcess {
    let port = free_port();
    let data = tempfile::tempdir().unwrap();
    if opts.knowledge {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge");
        let ingested = Command::new(gateway_binary())
            .arg("ingest")
            .arg(&examples)
            .env("ASSIST__DATA_DIR", data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run assist-gateway ingest");
        assert!(ingested.success(), "ingest examples/knowledge");
    }
    let log = data.path().join("gateway.log");
    let mut cmd = match opts.wrapper.split_first() {
        Some((program, args)) => {
            let mut cmd = command_on(cpus, program);
            cmd.args(args).arg(gateway_binary());
            cmd
        }
        None => command_on(cpus, gateway_binary()),
    };
    cmd.arg("serve")
        .env("ASSIST__DATA_DIR", data.path())
        .env("ASSIST__LOG__FORMAT", "json")
        .env("ASSIST__LOG__LEVEL", &opts.log_level)
        .env("ASSIST__SERVER__ADDR", format!("127.0.0.1:{port}"))
        // A free port of the system's choosing (`opts.env` may set another, or "" = off).
        .env("ASSIST__GRPC__ADDR", "127.0.0.1:0")
        .env("ASSIST__LLM__PROVIDER", "openai")
        .env("ASSIST__LLM__BASE_URL", format!("{}/v1", upstream.root()))
        .env("ASSIST__LLM__MODEL", UPSTREAM_MODEL)
        .env(
            "ASSIST__ASSISTANT__PASSTHROUGH",
            opts.passthrough.to_string(),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    let mut proc_ = Proc::spawn("assist-gateway", &mut cmd);
    let url = format!("http://127.0.0.1:{port}");
    wait_ok(&format!("{url}/health"), opts.ready_secs, &mut proc_).await;
    let grpc_addr = listening_field(&log, "grpc_addr");
    GatewayProcess {
        proc_,
        url,
        log,
        grpc_addr,
        _data: data,
    }
}

/// A field of the gateway's "assist-gateway listening" JSON log line (written before it
/// answers /health), e.g. `grpc_addr`; None when the line or the field is missing (a
/// gateway logging below info, or one without gRPC).
pub fn listening_field(log: &Path, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|v| v["fields"]["message"] == "assist-gateway listening")
        .and_then(|v| v["fields"][field].as_str().map(str::to_string))
}

/// Microseconds from POSTing `body` to `url` to the first piece of its streamed answer
/// that holds `marker` (the answer's first token); the rest of the stream is read out.
pub async fn first_piece(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
    marker: &[u8],
) -> u64 {
    use futures::StreamExt;
    let started = std::time::Instant::now();
    let response = client.post(url).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let took = loop {
        match stream.next().await {
            Some(Ok(piece)) if piece.windows(marker.len()).any(|w| w == marker) => {
                break started.elapsed();
            }
            Some(Ok(_)) => continue,
            _ => panic!("the stream ended before a token"),
        }
    };
    while stream.next().await.is_some() {}
    took.as_micros() as u64
}

/// An OTLP/HTTP receiver in this process for the traced rows: takes each export (a
/// protobuf `ExportTraceServiceRequest`), counts it, and answers 200 with an empty
/// `ExportTraceServiceResponse`, as a collector does.
pub struct OtlpSink {
    pub url: String,
    exports: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl OtlpSink {
    pub async fn start() -> Self {
        let exports = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (e, b) = (exports.clone(), bytes.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let (e, b) = (e.clone(), b.clone());
                async move {
                    e.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(body.len() as u64, Ordering::Relaxed);
                    ([("content-type", "application/x-protobuf")], Bytes::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            exports,
            bytes,
        }
    }

    /// Exports and bytes received so far.
    pub fn received(&self) -> (u64, u64) {
        (
            self.exports.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}
