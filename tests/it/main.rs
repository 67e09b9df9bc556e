//! The integration tests, in one binary (one link of the gateway, not one per area): the
//! real router on 127.0.0.1 against a scripted upstream that speaks the real wire formats
//! (`support`), real tantivy, the real embedding model, real clients and a real model.
//! Tests that need a process of their own (the metrics recorder, the log) run the real
//! binary as a child process (`support::Spawned`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod support;

mod access;
mod agent_clients;
mod agent_clis;
mod anthropic_api;
mod any_body;
mod assistant;
mod citations;
mod classifier;
mod completion;
mod context_items;
mod continue_cli;
mod definitions;
mod docs;
mod embedder_name;
mod embedding_endpoints;
mod embeddings;
mod errors;
mod eval_answers;
mod eval_runs;
mod faults;
mod fuzz_corpus;
mod grpc;
mod grpc_python;
mod grpc_transport;
mod hostile;
mod ingest_roots;
mod ingest_scale;
mod key_usage;
mod knowledge;
mod layers;
mod live_knowledge;
mod logs;
mod mcp;
mod metrics;
mod ollama_api;
mod openai_api;
mod operations;
mod python_clients;
mod real_clients;
mod real_model;
mod real_window;
mod relay;
mod responses_api;
mod secrets;
mod security;
mod shared_knowledge;
mod stored_responses;
mod tool_call_streams;
mod traces;
mod understanding;
mod whole_answers;
mod window;
