//! The gateway under test: its settings, in process (`Gateway`) or as its own binary
//! (`Spawned`).

use super::*;

/// Settings for a gateway in front of `upstream` with its own data_dir (removed with the
/// returned folder), adjusted by `tweak`; with `knowledge`, `examples/knowledge` ingested
/// (BM25) into it first.
pub async fn test_settings(
    upstream: &ScriptedUpstream,
    provider: Provider,
    knowledge: bool,
    tweak: impl FnOnce(&mut Settings),
) -> (Settings, tempfile::TempDir) {
    let mut settings = Settings::load_without_env(None).unwrap();
    settings.llm.provider = provider;
    settings.llm.base_url = match provider {
        Provider::Ollama => upstream.root(),
        Provider::Openai => format!("{}/v1", upstream.root()),
    };
    settings.llm.model = UPSTREAM_MODEL.to_string();
    settings.llm.connect_timeout = Duration::from_secs(2);
    settings.llm.first_byte_timeout = Duration::from_secs(5);
    settings.server.shutdown_grace = Duration::from_secs(5);
    // gRPC on a free port: tests run side by side.
    settings.grpc.addr = "127.0.0.1:0".into();
    let data = tempfile::tempdir().unwrap();
    settings.data_dir = data.path().to_path_buf();
    tweak(&mut settings);
    settings.validate().expect("test settings are valid");
    if knowledge {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/knowledge");
        assist_gateway::app::ingest(
            &settings,
            &[examples],
            false,
            &assist_gateway::ingest::Quiet,
        )
        .await
        .expect("examples/knowledge ingests");
    }
    (settings, data)
}

/// A gateway on 127.0.0.1:0 in front of `upstream`, with settings adjusted by `tweak`.
pub struct Gateway {
    pub addr: SocketAddr,
    /// Where gRPC is served (`None` when `grpc.addr` is empty).
    pub grpc_addr: Option<SocketAddr>,
    pub settings: Settings,
    /// The gateway's data_dir, removed with it.
    _data: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Gateway {
    pub async fn start(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_inner(upstream, provider, false, tweak).await
    }

    /// Like `start`, with `examples/knowledge` ingested (BM25) into its data_dir first.
    pub async fn with_knowledge(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_inner(upstream, provider, true, tweak).await
    }

    async fn start_inner(
        upstream: &ScriptedUpstream,
        provider: Provider,
        knowledge: bool,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        let (settings, data) = test_settings(upstream, provider, knowledge, tweak).await;
        let mut gateway = Self::with_settings(settings).await;
        gateway._data = Some(data);
        gateway
    }

    /// Keeps `data` (the settings' data_dir) alive as long as the gateway.
    pub fn holding(mut self, data: tempfile::TempDir) -> Self {
        self._data = Some(data);
        self
    }

    pub async fn with_settings(settings: Settings) -> Self {
        let state = assist_gateway::app::build(settings.clone()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let grpc = match settings.grpc.addr() {
            Some(_) => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let grpc_addr = grpc.as_ref().map(|l| l.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(assist_gateway::app::serve_all(
            listener,
            grpc,
            state,
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            grpc_addr,
            settings,
            _data: None,
            stop: Some(stop),
            task,
        }
    }

    /// Stops the gateway (letting open streams finish) and starts a new one on the same
    /// settings and data_dir, as a process restart would.
    pub async fn restart(mut self) -> Self {
        let data = self._data.take();
        let settings = self.settings.clone();
        self.shutdown().await.unwrap().unwrap();
        let mut gateway = Self::with_settings(settings).await;
        gateway._data = data;
        gateway
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Starts a graceful shutdown and returns the server task to await.
    pub fn shutdown(mut self) -> tokio::task::JoinHandle<std::io::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Gateway { task, .. } = self;
        task
    }
}

/// The real `assist-gateway serve` binary as a child process, for tests that need a
/// process of their own (the metrics recorder, the log subscriber). Its settings go to
/// it as a `--config` file; it logs JSON to stderr, which is kept line by line. Killed
/// when dropped.
pub struct Spawned {
    pub addr: SocketAddr,
    /// Where gRPC is served (`None` when `grpc.addr` is empty).
    pub grpc_addr: Option<SocketAddr>,
    pub settings: Settings,
    child: std::process::Child,
    log: Arc<Mutex<Vec<String>>>,
    _data: tempfile::TempDir,
}

impl Spawned {
    pub async fn start(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_with_env(upstream, provider, false, tweak, &[]).await
    }

    /// Like `start`, with `examples/knowledge` ingested (BM25) into its data_dir first.
    pub async fn with_knowledge(
        upstream: &ScriptedUpstream,
        provider: Provider,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_with_env(upstream, provider, true, tweak, &[]).await
    }

    /// The general form: `env` is added to the child's environment (e.g. `RUST_LOG`).
    pub async fn start_with_env(
        upstream: &ScriptedUpstream,
        provider: Provider,
        knowledge: bool,
        tweak: impl FnOnce(&mut Settings),
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_limited(upstream, provider, knowledge, tweak, env, None).await
    }

    /// Like `start_with_env`, the process limited to `open_files` open files (soft and
    /// hard, as `ulimit -n` sets them) when given.
    pub async fn start_limited(
        upstream: &ScriptedUpstream,
        provider: Provider,
        knowledge: bool,
        tweak: impl FnOnce(&mut Settings),
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> Self {
        use std::io::BufRead;
        let (mut settings, data) = test_settings(upstream, provider, knowledge, tweak).await;
        settings.server.addr = "127.0.0.1:0".into();
        settings.log.format = assist_gateway::config::LogFormat::Json;
        let config = data.path().join("gateway.toml");
        std::fs::write(&config, toml::to_string(&settings).unwrap()).unwrap();
        let mut command = match open_files {
            None => std::process::Command::new(gateway_binary()),
            Some(n) => {
                let mut sh = std::process::Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(gateway_binary());
                sh
            }
        };
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the gateway binary starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("assist-gateway listening") {
                    let v: Value = serde_json::from_str(&line).unwrap_or_default();
                    if let Some(addr) = v["fields"]["addr"].as_str() {
                        let grpc = v["fields"]["grpc_addr"]
                            .as_str()
                            .map(|a| a.parse::<SocketAddr>().unwrap());
                        let _ = addr_tx.send((addr.parse::<SocketAddr>().unwrap(), grpc));
                    }
                }
                lines.lock().unwrap().push(line);
            }
        });
        let (addr, grpc_addr) =
            tokio::task::spawn_blocking(move || addr_rx.recv_timeout(Duration::from_secs(30)))
                .await
                .unwrap()
                .unwrap_or_else(|_| {
                    panic!(
                        "the gateway did not say where it listens: {:?}",
                        log_text(&log)
                    )
                });
        Self {
            addr,
            grpc_addr,
            settings,
            child,
            log,
            _data: data,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's resident memory now and at its peak (`VmRSS`, `VmHWM`), in MiB.
    pub fn memory_mib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap()
                / 1024.0
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Every line the gateway logged so far.
    pub fn log(&self) -> String {
        log_text(&self.log)
    }

    /// Stops the gateway (SIGTERM: open streams may finish) and waits for it to exit.
    pub fn stop(mut self) -> String {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Let the reader thread take the last lines.
        std::thread::sleep(Duration::from_millis(100));
        self.log()
    }
}

fn log_text(log: &Mutex<Vec<String>>) -> String {
    log.lock().unwrap().join("\n")
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
