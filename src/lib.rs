//! assist-gateway: an OpenAI- and Ollama-compatible HTTP gateway in front of a coding
//! assistant pipeline.
//!
//! - [`http`]: the two API dialects, rendering one event stream.
//! - [`pipeline`]: what happens to a chat turn.
//! - [`llm`]: the upstream model port (`ChatModel`) and its adapters; [`embed`]: the
//!   sentence embedders (`Embedder`) beside it.
//! - [`context`]: editor context and the token budget; [`retrieval`]: the knowledge base.
//! - [`sessions`]: conversation memory.
//! - [`config`]: settings; [`app`]: wiring; [`telemetry`]: metrics.

pub mod app;
pub mod config;
pub mod context;
pub mod embed;
pub mod error;
pub mod eval;
pub mod grpc;
pub mod http;
pub mod ingest;
pub mod json;
pub mod llm;
pub mod pipeline;
pub mod privacy;
pub mod retrieval;
pub mod serve;
pub mod sessions;
pub mod telemetry;
pub mod trace;
