//! What every request handler shares, over HTTP and gRPC alike.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::config::Settings;
use crate::embed::Embedder;
use crate::pipeline::Pipeline;
use crate::retrieval::hybrid::Retriever;
use crate::serve::access::{Keys, Limits};

#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub pipeline: Arc<Pipeline>,
    pub retriever: Arc<Retriever>,
    /// The knowledge base's embedder, also served by the embedding endpoints.
    pub embedder: Option<Arc<dyn Embedder>>,
    pub started: chrono::DateTime<chrono::Utc>,
    /// Set while `POST /v1/eval` runs an evaluation (one at a time).
    pub eval_running: Arc<AtomicBool>,
    /// Embedding requests served at once (`server.max_concurrent_embeddings`).
    pub embedding_slots: Arc<tokio::sync::Semaphore>,
    /// The accepted API keys.
    pub keys: Arc<Keys>,
    /// Per-caller limits, counted across every API (`None`: none configured).
    pub limits: Option<Arc<Limits>>,
    /// Usage per API key and the keys' own limits (`None`: no keys, or not counted).
    pub usage: Option<Arc<crate::sessions::usage::Usage>>,
    /// The knowledge index this gateway keeps current (`None`: a state built without one).
    pub knowledge: Option<crate::ingest::live::Keeper>,
}

impl AppState {
    pub fn new(
        settings: Settings,
        pipeline: Pipeline,
        retriever: Arc<Retriever>,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> anyhow::Result<Self> {
        let embedding_slots = Arc::new(tokio::sync::Semaphore::new(
            settings.server.max_concurrent_embeddings,
        ));
        Ok(Self {
            embedding_slots,
            keys: Keys::from_settings(&settings.server),
            limits: Limits::from_settings(&settings.server, &settings.sessions)?,
            usage: None,
            knowledge: None,
            settings: Arc::new(settings),
            pipeline: Arc::new(pipeline),
            retriever,
            embedder,
            started: chrono::Utc::now(),
            eval_running: Arc::default(),
        })
    }

    pub fn started_rfc3339(&self) -> String {
        self.started
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }
}
