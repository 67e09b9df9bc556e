//! The `assist-gateway` command.

use std::path::PathBuf;
use std::process::ExitCode;

use assist_gateway::config::{LogFormat, Settings};
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "assist-gateway",
    version,
    about = "OpenAI- and Ollama-compatible gateway for a coding assistant"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI (/v1/...) and Ollama (/api/...) APIs.
    Serve {
        /// Settings file; overrides the built-in defaults (config/default.toml).
        /// Environment variables ASSIST__SECTION__KEY override both.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => {
            let settings = match Settings::load(config.as_deref()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("assist-gateway: {e}");
                    return ExitCode::from(2);
                }
            };
            init_logging(&settings);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("assist-gateway: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(settings)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("assist-gateway: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let addr = settings.server.addr.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (server.addr): {e}"))?;
    let state = assist_gateway::app::build(settings)?;
    tracing::info!(
        addr = %listener.local_addr()?,
        model = state.pipeline.assistant_model(),
        upstream = state.pipeline.upstream_url(),
        provider = ?state.settings.llm.provider,
        upstream_model = state.settings.llm.model,
        passthrough = state.settings.assistant.passthrough,
        api_keys = state.settings.server.api_keys.len(),
        "assist-gateway listening"
    );
    assist_gateway::app::serve(listener, state, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

fn init_logging(settings: &Settings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match settings.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
