//! The `assist-gateway` command. The one place that prints to stdout: answers, tables and
//! summaries are this command's output.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::ExitCode;

use assist_gateway::config::{LogFormat, Settings};
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// mimalloc: the streaming path allocates per event, and glibc's malloc took about a
/// sixth of the gateway's core under load (see docs/benchmarks.md, "Against LiteLLM and nginx").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Index documents and code into the knowledge base under data_dir (incremental).
    Ingest {
        /// Files and folders to index (.gitignore is respected).
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Start from an empty index (built aside, swapped in when complete).
        #[arg(long)]
        rebuild: bool,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Ask the assistant from the terminal: the same pipeline as the API, the answer
    /// streamed to stdout, its sources listed after it.
    Ask {
        /// The question.
        #[arg(value_name = "QUESTION")]
        question: String,
        /// A file to treat as the one open in the editor.
        #[arg(long, value_name = "F")]
        file: Option<PathBuf>,
        /// Code to treat as selected in the editor.
        #[arg(long, value_name = "TEXT")]
        selection: Option<String>,
        /// Remember the conversation under this session id (needs the session store, so
        /// not while a gateway with the embedded store runs on the same data_dir).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Show each pipeline stage's log line on stderr.
        #[arg(long, short)]
        verbose: bool,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Measure retrieval or answers on a labelled dataset.
    Eval {
        #[command(subcommand)]
        what: EvalCommand,
    },
}

#[derive(Subcommand)]
enum EvalCommand {
    /// recall@k, MRR@10 and nDCG@10 for BM25, vectors and hybrid, side by side.
    Retrieval {
        /// JSON lines: {"query", "relevant": [chunk ids or source files], "lang"?}.
        #[arg(long, value_name = "FILE.jsonl")]
        dataset: PathBuf,
        /// The k of recall@k.
        #[arg(long, default_value_t = 8)]
        k: usize,
        /// Also write the table as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// How the assistant understands IDE turns (no answer generated): editor recall and
    /// precision, routing accuracy, follow-up recall@3; per language and per kind.
    Turns {
        /// JSON lines: {"id", "question", "selection"?, "open_file"?, "history"?,
        /// "editor", "retrieve", "relevant"?, "lang"?, "kind"?}.
        #[arg(long, value_name = "FILE.jsonl")]
        dataset: PathBuf,
        /// Also write the figures and every turn's decisions as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Code completion (fill-in-the-middle) on masked spans through the assistant's
    /// completion path: exact match and edit similarity with the prefix only, with the
    /// suffix, and with the repository's context (the knowledge index).
    Completions {
        /// JSON lines: {"id", "kind", "prefix", "suffix", "middle", "cross_file"?}
        /// (benches/completions/build.py).
        #[arg(long, value_name = "FILE.jsonl")]
        dataset: PathBuf,
        /// Only the first N spans; 0 = all.
        #[arg(long, value_name = "N", default_value_t = 0)]
        limit: usize,
        /// Which modes, comma-separated: prefix, suffix, repository.
        #[arg(long, value_name = "LIST", default_value = "prefix,suffix,repository")]
        modes: String,
        /// Most tokens of one middle.
        #[arg(long, value_name = "N", default_value_t = 64)]
        max_tokens: u32,
        /// Also write the figures and every span's outcome as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Answers to golden questions through the real pipeline, scored by a judge model
    /// (RAGAS faithfulness, answer relevancy, context recall, context precision).
    Answers {
        /// JSON lines: {"id", "category", "question", "ground_truth", "selected_text"?, …}.
        #[arg(long, value_name = "FILE.jsonl")]
        dataset: PathBuf,
        /// Only the questions of this category.
        #[arg(long, value_name = "C")]
        category: Option<String>,
        /// Only the first N questions (after --category); 0 = all.
        #[arg(long, value_name = "N", default_value_t = 0)]
        limit: usize,
        /// Judge model name (overrides judge.model).
        #[arg(long, value_name = "M")]
        judge_model: Option<String>,
        /// Folder for results.json and report.html (default data_dir/eval/<timestamp>).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

impl Command {
    fn config(&self) -> Option<&std::path::Path> {
        match self {
            Command::Serve { config }
            | Command::Ingest { config, .. }
            | Command::Ask { config, .. }
            | Command::Eval {
                what: EvalCommand::Retrieval { config, .. },
            }
            | Command::Eval {
                what: EvalCommand::Answers { config, .. },
            }
            | Command::Eval {
                what: EvalCommand::Turns { config, .. },
            }
            | Command::Eval {
                what: EvalCommand::Completions { config, .. },
            } => config.as_deref(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut settings = match Settings::load(cli.command.config()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("assist-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    if let Command::Ask { verbose: false, .. } = cli.command {
        // The answer is the output; stage logs only on request.
        settings.log.level = "warn".into();
    }
    if let Command::Eval {
        what:
            EvalCommand::Answers { .. } | EvalCommand::Turns { .. } | EvalCommand::Completions { .. },
    } = cli.command
    {
        // The progress bar and the table are the output; RUST_LOG brings the stage logs back.
        settings.log.level = "warn".into();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("assist-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Traces are the server's: built inside the runtime that carries their exports.
    let tracing = match &cli.command {
        Command::Serve { .. } => {
            let _inside = runtime.enter();
            match assist_gateway::trace::Tracing::start(&settings.telemetry) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("assist-gateway: telemetry.otlp_endpoint: {e:#}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => None,
    };
    init_logging(&settings);
    let result = runtime.block_on(async {
        let result = match cli.command {
            Command::Serve { .. } => serve(settings).await,
            Command::Ingest { paths, rebuild, .. } => ingest(settings, paths, rebuild).await,
            Command::Ask {
                question,
                file,
                selection,
                session,
                ..
            } => ask(settings, question, file, selection, session).await,
            Command::Eval {
                what:
                    EvalCommand::Retrieval {
                        dataset, k, json, ..
                    },
            } => eval_retrieval(settings, dataset, k, json).await,
            Command::Eval {
                what: EvalCommand::Turns { dataset, json, .. },
            } => eval_turns(settings, dataset, json).await,
            Command::Eval {
                what:
                    EvalCommand::Completions {
                        dataset,
                        limit,
                        modes,
                        max_tokens,
                        json,
                        ..
                    },
            } => eval_completions(settings, dataset, limit, &modes, max_tokens, json).await,
            Command::Eval {
                what:
                    EvalCommand::Answers {
                        dataset,
                        category,
                        limit,
                        judge_model,
                        out,
                        ..
                    },
            } => eval_answers(settings, dataset, category, limit, judge_model, out).await,
        };
        // The spans still queued leave before the process does.
        if let Some(tracing) = tracing {
            tracing.shutdown().await;
        }
        result
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("assist-gateway: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn ask(
    settings: Settings,
    question: String,
    file: Option<PathBuf>,
    selection: Option<String>,
    session: Option<String>,
) -> anyhow::Result<()> {
    use assist_gateway::context::EditorContext;
    use assist_gateway::llm::UpstreamRequest;
    use assist_gateway::pipeline::{ChatTurn, Event};
    use assist_gateway::sessions::Owner;
    use futures::StreamExt;
    use std::io::Write;

    if let Some(id) = &session {
        assist_gateway::sessions::check_id(id)
            .map_err(|why| anyhow::anyhow!("--session: {why}"))?;
    }
    let pipeline = assist_gateway::app::pipeline(&settings, session.is_some())?.pipeline;
    // Blocks in the question are read as an API request's would be.
    let mut editor = EditorContext::from_request(None, None, &question);
    if let Some(path) = &file {
        editor.editor_content = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--file {}: {e}", path.display()))?;
        editor.file_path = Some(path.display().to_string());
        editor.extra_context = format!("file: {}", path.display());
    }
    if let Some(sel) = selection {
        editor.selected_text = sel;
    }
    let turn = ChatTurn {
        request: UpstreamRequest::question(pipeline.assistant_model(), question),
        session_id: session,
        editor,
    };
    let mut events = pipeline.run(turn, &Owner::shared()).await?;
    let mut out = std::io::stdout().lock();
    let mut sources = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Event::Sources(s) => sources = s,
            Event::Items(_) => {}
            Event::Delta(text) => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Event::ToolCalls(_) | Event::Verbatim { .. } => {}
            Event::Done { .. } => break,
            Event::Error(e) => {
                writeln!(out)?;
                return Err(anyhow::anyhow!("{}", e.message));
            }
        }
    }
    writeln!(out)?;
    if !sources.is_empty() {
        writeln!(out, "\nSources:")?;
        for (i, s) in sources.iter().enumerate() {
            let section = if s.section.is_empty() {
                String::new()
            } else {
                format!(" § {}", s.section)
            };
            writeln!(
                out,
                "  [{}] {}{section} (lines {}-{}, score {:.4})",
                i + 1,
                s.file,
                s.lines[0],
                s.lines[1],
                s.score
            )?;
        }
    }
    Ok(())
}

async fn ingest(settings: Settings, paths: Vec<PathBuf>, rebuild: bool) -> anyhow::Result<()> {
    use assist_gateway::{app, ingest::Bar};
    let started = std::time::Instant::now();
    let live = settings.index_dir();
    let summary = app::ingest(&settings, &paths, rebuild, &Bar::new()).await?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "ingested {} files ({} unchanged, {} removed, {} skipped): {} chunks written, {} in the index, {:.1} s ({:.0} chunks/s)",
        summary.files_indexed,
        summary.files_unchanged,
        summary.files_removed,
        summary.skipped.len(),
        summary.chunks_written,
        summary.chunks_total,
        secs,
        summary.chunks_written as f64 / secs.max(1e-3)
    );
    if settings.embeddings.provider != assist_gateway::config::EmbeddingProvider::None
        && summary.chunks_written > 0
    {
        println!(
            "  embedded {} of the {} chunks written (the others kept the vector of the same text)",
            summary.chunks_embedded, summary.chunks_written
        );
    }
    let mut reasons: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, why) in &summary.skipped {
        *reasons.entry(why.as_str()).or_default() += 1;
    }
    for (why, n) in reasons {
        println!("  skipped {n}: {why}");
    }
    if summary.files_excluded > 0 {
        println!(
            "  excluded {} files: credentials by name or ingest.exclude",
            summary.files_excluded
        );
    }
    if summary.secrets_redacted > 0 || summary.invisible_removed > 0 {
        println!(
            "  redacted {} secrets and removed {} invisible characters in the stored chunks",
            summary.secrets_redacted, summary.invisible_removed
        );
    }
    for warning in &summary.warnings {
        println!("  warning: {warning}");
    }
    println!("index: {}", live.display());
    Ok(())
}

async fn eval_retrieval(
    settings: Settings,
    dataset: PathBuf,
    k: usize,
    json: Option<PathBuf>,
) -> anyhow::Result<()> {
    use assist_gateway::app;
    use assist_gateway::eval::retrieval::{evaluate, load_dataset, table};
    use assist_gateway::retrieval::hybrid::Mode;
    let cases = load_dataset(&dataset)?;
    let knowledge = app::open_knowledge(&settings)?;
    let has_vectors = knowledge.dense.is_some();
    let retriever = app::retriever(&settings, knowledge);
    let modes: &[Mode] = if has_vectors {
        &[Mode::Lexical, Mode::Dense, Mode::Hybrid]
    } else {
        &[Mode::Lexical]
    };
    let scores = evaluate(&retriever, &cases, k, modes).await?;
    print!("{}", table(&scores, k));
    if !has_vectors
        && settings.embeddings.provider == assist_gateway::config::EmbeddingProvider::None
    {
        println!("(embeddings.provider = \"none\": vectors and hybrid not evaluated)");
    } else if !has_vectors {
        println!("(the vectors are held by another process, a serving gateway or an ingest: vectors and hybrid not evaluated)");
    }
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_vec_pretty(&scores)?)?;
    }
    Ok(())
}

async fn eval_turns(
    settings: Settings,
    dataset: PathBuf,
    json: Option<PathBuf>,
) -> anyhow::Result<()> {
    use assist_gateway::eval::turns::{evaluate, load_dataset, summarize, table};
    let turns = load_dataset(&dataset)?;
    let parts = assist_gateway::app::pipeline(&settings, false)?;
    let outcomes = evaluate(&parts.pipeline, &parts.retriever, &turns).await?;
    let figures = summarize(&outcomes);
    print!("{}", table(&figures, &outcomes));
    if let Some(path) = json {
        let both = serde_json::json!({"figures": figures, "turns": outcomes});
        std::fs::write(&path, serde_json::to_vec_pretty(&both)?)?;
    }
    Ok(())
}

async fn eval_completions(
    settings: Settings,
    dataset: PathBuf,
    limit: usize,
    modes: &str,
    max_tokens: u32,
    json: Option<PathBuf>,
) -> anyhow::Result<()> {
    use assist_gateway::eval::completions::{evaluate, load_dataset, summarize, table, Mode};
    let modes = modes
        .split(',')
        .map(|m| {
            Mode::parse(m).ok_or_else(|| {
                anyhow::anyhow!("--modes: {m:?} is not prefix, suffix or repository")
            })
        })
        .collect::<anyhow::Result<Vec<Mode>>>()?;
    // Each mode once, in the order given.
    let modes: Vec<Mode> = modes
        .iter()
        .enumerate()
        .filter(|(i, m)| !modes[..*i].contains(m))
        .map(|(_, m)| *m)
        .collect();
    let mut spans = load_dataset(&dataset)?;
    if limit > 0 {
        spans.truncate(limit);
    }
    // The repository search gets a second rather than the served path's few milliseconds:
    // the evaluation measures what the context adds, not whether a loaded machine meets
    // the deadline.
    let mut with = settings.clone();
    with.completion.deadline_ms = with.completion.deadline_ms.max(1000);
    let mut plain = settings.clone();
    plain.completion.context_tokens = 0;
    let with = assist_gateway::app::pipeline(&with, false)?;
    let plain = assist_gateway::app::pipeline(&plain, false)?;
    let total = spans.len();
    let progress = |done: usize| eprint!("\r{done} / {total} spans");
    let outcomes = evaluate(
        &plain.pipeline,
        &with.pipeline,
        &settings.assistant.model,
        &spans,
        &modes,
        max_tokens,
        &progress,
    )
    .await?;
    eprintln!();
    let figures = summarize(&outcomes);
    print!("{}", table(&figures));
    if let Some(path) = json {
        let both = serde_json::json!({"figures": figures, "spans": outcomes});
        std::fs::write(&path, serde_json::to_vec_pretty(&both)?)?;
    }
    Ok(())
}

async fn eval_answers(
    settings: Settings,
    dataset: PathBuf,
    category: Option<String>,
    limit: usize,
    judge_model: Option<String>,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    use assist_gateway::eval::answers::{self, judge::Judge, Evaluator};
    let questions = answers::select(
        answers::load_dataset(&dataset)?,
        category.as_deref().unwrap_or(""),
        limit,
    );
    anyhow::ensure!(
        !questions.is_empty(),
        "no question of category {:?} in {}",
        category.unwrap_or_default(),
        dataset.display()
    );
    let parts = assist_gateway::app::pipeline(&settings, false)?;
    let judge = Judge::from_settings(
        &settings.judge,
        &settings.llm,
        &settings.assistant,
        judge_model.as_deref(),
    )?;
    let evaluator = Evaluator {
        pipeline: &parts.pipeline,
        judge: &judge,
        embedder: parts.embedder.clone(),
        answer_max_tokens: (settings.eval.answer_max_tokens > 0)
            .then_some(settings.eval.answer_max_tokens),
        answer_model: settings.llm.model.clone(),
        index: answers::index_name(&settings),
    };
    let bar = indicatif::ProgressBar::new(questions.len() as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} questions (eta {eta}) {msg}",
    ) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let response = evaluator.run(&questions, &bar).await?;
    print!("{}", answers::table(&response));
    let default = out.is_none();
    let dir = out.unwrap_or_else(|| answers::default_out_dir(&settings.data_dir));
    answers::write_reports(&dir, &response)?;
    if default {
        answers::prune_reports(&settings.data_dir, settings.eval.keep_reports)?;
    }
    println!(
        "\nwrote {} and {}",
        dir.join("results.json").display(),
        dir.join("report.html").display()
    );
    Ok(())
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    // A bad certificate or key stops the gateway here, before it listens.
    let tls = assist_gateway::http::tls_acceptor(&settings.server)?.is_some();
    let addr = settings.server.addr.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (server.addr): {e}"))?;
    let grpc = match settings.grpc.addr() {
        None => None,
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (grpc.addr): {e}"))?,
        ),
    };
    let state = assist_gateway::app::build(settings)?;
    tracing::info!(
        addr = %listener.local_addr()?,
        grpc_addr = grpc
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string()),
        model = state.pipeline.assistant_model(),
        upstream = state.pipeline.upstream_url(),
        provider = ?state.settings.llm.provider,
        upstream_model = state.settings.llm.model,
        passthrough = state.settings.assistant.passthrough,
        api_keys = state.settings.server.api_keys.len(),
        tls,
        rate_limit_per_minute = state.settings.server.rate_limit_per_minute,
        max_streams_per_key = state.settings.server.max_streams_per_key,
        "assist-gateway listening"
    );
    let server = &state.settings.server;
    let everywhere = listener.local_addr()?.ip().is_unspecified();
    let grpc_everywhere = grpc
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .is_some_and(|a| a.ip().is_unspecified());
    if (everywhere || grpc_everywhere) && server.api_keys.is_empty() {
        tracing::warn!(
            "listening on every interface without API keys: anyone who can reach this machine can use the gateway and continue any session; set server.api_keys"
        );
    }
    if everywhere && server.allowed_hosts.is_empty() {
        tracing::warn!(
            "listening on every interface with no server.allowed_hosts: requests naming any host are answered (web pages are still held off by the Origin check); list the names clients use in server.allowed_hosts"
        );
    }
    assist_gateway::app::serve_all(listener, grpc, state, shutdown_signal()).await?;
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
    use tracing_subscriber::prelude::*;
    // qdrant-edge warns about server-only feature flags on every open; keep its errors only.
    let level = if settings.log.level.contains("qdrant_edge") {
        settings.log.level.clone()
    } else {
        format!("{},qdrant_edge=error", settings.log.level)
    };
    let mut filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Whatever the filter asks for: dependencies that log what they carry at debug or
    // trace (rmcp a tool call's arguments, h2 and hyper headers, reqwest bodies) stop at
    // info, so no question, code or key reaches the log.
    for quiet in assist_gateway::telemetry::QUIET_DEPENDENCIES {
        if let Ok(directive) = quiet.parse() {
            filter = filter.add_directive(directive);
        }
    }
    let log = match settings.log.format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .init();
}
