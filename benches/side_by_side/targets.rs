//! The targets under test: the scripted upstream itself, nginx, LiteLLM and the gateway,
//! each started just before its turn and stopped after it.

use super::*;

/// What one target needs running while it is measured.
pub(crate) enum Server {
    /// The scripted upstream, in this process.
    InProcess,
    LiteLlm {
        proc_: Proc,
        /// Its working directory and logs, removed with it.
        _dir: tempfile::TempDir,
    },
    Nginx {
        proc_: Proc,
        /// Its config, pid file, error log and temp paths, removed with it.
        dir: tempfile::TempDir,
    },
    Gateway(GatewayProcess),
    /// A floor proxy of the bench's own (`floor`), in its own process.
    Floor(Proc),
}

impl Server {
    pub(crate) fn pid(&self) -> Option<u32> {
        match self {
            Server::InProcess => None,
            Server::LiteLlm { proc_, .. } | Server::Nginx { proc_, .. } | Server::Floor(proc_) => {
                Some(proc_.pid())
            }
            Server::Gateway(g) => Some(g.pid()),
        }
    }
}

pub(crate) struct Target {
    pub(crate) name: &'static str,
    /// POST here.
    pub(crate) url: String,
    /// The model the client asks for.
    pub(crate) model: String,
    pub(crate) server: Server,
}

pub(crate) async fn start_litellm(
    upstream: &ScriptedUpstream,
    knobs: &Knobs,
    cpus: Option<&str>,
) -> Target {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        knobs.litellm.exists(),
        "no LiteLLM at {}: run benches/side-by-side.sh (it installs benches/litellm/requirements.txt), or set BENCH_LITELLM",
        knobs.litellm.display()
    );
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("litellm.log");
    let mut cmd = command_on(cpus, &knobs.litellm);
    cmd.args(["--config"])
        .arg(here.join("benches/litellm/config.yaml"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--num_workers", &knobs.litellm_workers.to_string()])
        // uvicorn kills a worker that does not answer its health check within 5 s, and a
        // worker needs longer than that to import LiteLLM on a busy 2-core machine.
        .args(["--timeout_worker_healthcheck", "120"])
        .args(["--log_config"])
        .arg(here.join("benches/litellm/log.json"))
        .current_dir(dir.path())
        .env("BENCH_UPSTREAM_BASE", format!("{}/v1", upstream.root()))
        // Local model-cost map: nothing is fetched from the internet at start-up.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_MODE", "PRODUCTION")
        .env("TELEMETRY", "False")
        .env_remove("DATABASE_URL")
        .env_remove("LITELLM_MASTER_KEY")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("litellm.err")).unwrap());
    let mut proc_ = Proc::spawn("litellm", &mut cmd);
    let url = format!("http://127.0.0.1:{port}");
    wait_ok(&format!("{url}/health/liveliness"), 180, &mut proc_).await;
    Target {
        name: "litellm",
        url: format!("{url}/v1/chat/completions"),
        model: UPSTREAM_MODEL.to_string(),
        server: Server::LiteLlm { proc_, _dir: dir },
    }
}

/// nginx as a plain streaming reverse proxy in front of the upstream: one process
/// (`master_process off`: the worker's event loop without a master, no user switch),
/// generated config, pid file, error log (`warn`) and temp paths in a temp dir.
pub(crate) async fn start_nginx(
    upstream: &ScriptedUpstream,
    knobs: &Knobs,
    cpus: Option<&str>,
) -> Target {
    assert!(
        knobs.nginx.exists(),
        "no nginx at {}: run benches/side-by-side.sh (it installs Debian's nginx-light), or set BENCH_NGINX",
        knobs.nginx.display()
    );
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    // Temp paths of the modules this build has (nginx-light leaves some out); nginx
    // creates them at start, and the compiled-in ones are not writable without root.
    let built = nginx_version(&knobs.nginx);
    let temp_paths: String = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
        .iter()
        .filter(|m| !built.contains(&format!("--without-http_{m}_module")))
        .map(|m| format!("    {m}_temp_path {d}/{m};\n"))
        .collect();
    // Two connections per request in flight (client and upstream side), and some spare.
    let connections = 2 * knobs.streams.max(knobs.max_inflight) + 1024;
    let config = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections {connections};
}}
http {{
    access_log off;
{temp_paths}    keepalive_requests 1000000;
    upstream scripted {{
        server {upstream};
        keepalive 1024;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://scripted;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"#,
        upstream = upstream.addr,
    );
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, config).unwrap();
    let mut cmd = command_on(cpus, &knobs.nginx);
    // -e: the error log before the config is read (the compiled-in one is /var/log/nginx).
    cmd.arg("-p")
        .arg(format!("{d}/"))
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .arg("-c")
        .arg(&conf)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("nginx.out")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("nginx.err")).unwrap());
    let mut proc_ = Proc::spawn("nginx", &mut cmd);
    let url = format!("http://127.0.0.1:{port}");
    // Through nginx to the upstream: proxying works, not only the listener.
    wait_ok(&format!("{url}/v1/models"), 30, &mut proc_).await;
    Target {
        name: "nginx",
        url: format!("{url}/v1/chat/completions"),
        model: UPSTREAM_MODEL.to_string(),
        server: Server::Nginx { proc_, dir },
    }
}

/// `nginx -V`: version and configure arguments (printed on stderr).
pub(crate) fn nginx_version(nginx: &Path) -> String {
    let out = Command::new(nginx)
        .arg("-V")
        .output()
        .unwrap_or_else(|e| panic!("{} -V: {e}", nginx.display()));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) async fn start_target(
    name: &str,
    upstream: &ScriptedUpstream,
    knobs: &Knobs,
    cpus: Option<&str>,
    sink: Option<&OtlpSink>,
) -> Target {
    let traced = name.ends_with("-traced");
    let env = match (traced, sink) {
        (true, Some(sink)) => vec![(
            "ASSIST__TELEMETRY__OTLP_ENDPOINT".to_string(),
            sink.url.clone(),
        )],
        _ => Vec::new(),
    };
    let gateway = |passthrough: bool| GatewayOptions {
        passthrough,
        knowledge: !passthrough,
        log_level: knobs.gateway_log.clone(),
        env: env.clone(),
        ..GatewayOptions::default()
    };
    match name {
        "direct" => Target {
            name: "direct upstream",
            url: format!("{}/v1/chat/completions", upstream.root()),
            model: UPSTREAM_MODEL.to_string(),
            server: Server::InProcess,
        },
        "nginx" => start_nginx(upstream, knobs, cpus).await,
        "litellm" => start_litellm(upstream, knobs, cpus).await,
        "hyper" => start_floor("hyper", upstream, cpus).await,
        "axum" => start_floor("axum", upstream, cpus).await,
        "passthrough" | "passthrough-traced" => {
            let g = start_gateway_on(upstream, &gateway(true), cpus).await;
            Target {
                name: if traced {
                    "gateway passthrough, traced"
                } else {
                    "gateway passthrough"
                },
                url: format!("{}/v1/chat/completions", g.url),
                model: UPSTREAM_MODEL.to_string(),
                server: Server::Gateway(g),
            }
        }
        "anthropic" | "responses" => {
            let g = start_gateway_on(upstream, &gateway(true), cpus).await;
            let (name, path) = if name == "anthropic" {
                ("gateway passthrough, Anthropic", "/v1/messages")
            } else {
                ("gateway passthrough, Responses", "/v1/responses")
            };
            Target {
                name,
                url: format!("{}{path}", g.url),
                model: UPSTREAM_MODEL.to_string(),
                server: Server::Gateway(g),
            }
        }
        "brunix" | "brunix-traced" => {
            let g = start_gateway_on(upstream, &gateway(false), cpus).await;
            Target {
                name: if traced {
                    "gateway brunix, traced"
                } else {
                    "gateway brunix"
                },
                url: format!("{}/v1/chat/completions", g.url),
                model: "brunix".to_string(),
                server: Server::Gateway(g),
            }
        }
        other => {
            panic!("BENCH_TARGETS: unknown target {other:?} (direct, nginx, hyper, axum, litellm, passthrough, anthropic, responses, brunix, passthrough-traced, brunix-traced)")
        }
    }
}
