//! The model catalogue: which models the gateway serves (the assistant, and with
//! passthrough the upstream's own), `name` and `name:latest` as one, what the upstream
//! listed and when it is asked again, and what `/api/show` tells.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::Pipeline;
use crate::error::GatewayError;
use crate::llm::{ModelCard, UpstreamModel, UpstreamProbe};

/// A model the gateway serves.
#[derive(Debug, Clone, PartialEq)]
pub enum ServedModel {
    /// The assistant pipeline.
    Assistant { name: String },
    /// An upstream model forwarded unchanged.
    Upstream(UpstreamModel),
}

impl ServedModel {
    pub fn id(&self) -> &str {
        match self {
            ServedModel::Assistant { name } => name,
            ServedModel::Upstream(m) => &m.id,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    Assistant,
    Passthrough,
}

/// Model names an upstream listed, and when.
#[derive(Default)]
pub(super) struct KnownModels {
    pub(super) names: HashSet<String>,
    pub(super) listed: Option<Instant>,
    /// Whether the last listing succeeded (a failed one leaves names as they were).
    pub(super) answered: bool,
}

/// How long a listing of the upstream's models is trusted before a name it lacks makes
/// the gateway ask again.
pub(super) const MODEL_LIST_TTL: Duration = Duration::from_secs(60);

/// How the upstream lists a model name asked of it.
#[derive(Debug, PartialEq)]
pub(super) enum Listed {
    /// As asked (or not known: the upstream could not list its models).
    AsAsked,
    /// By its other spelling (`name:latest` for `name`, or the reverse), which the
    /// upstream is asked by.
    As(String),
    NotServed,
}

/// How `known` lists `name`: one lookup and nothing allocated when as asked.
fn listing(known: &KnownModels, name: &str) -> Listed {
    if known.names.contains(name) {
        return Listed::AsAsked;
    }
    let other = match name.strip_suffix(":latest") {
        Some(bare) => bare.to_string(),
        None => format!("{name}:latest"),
    };
    if known.names.contains(&other) {
        Listed::As(other)
    } else {
        Listed::NotServed
    }
}

impl Pipeline {
    /// `brunix` and `brunix:latest` are the same model.
    pub fn is_assistant(&self, model: &str) -> bool {
        let name = self.config.assistant_model.as_str();
        model == name || model.strip_suffix(":latest") == Some(name)
    }

    pub(super) fn route(&self, model: &str) -> Result<Route, GatewayError> {
        if self.is_assistant(model) {
            Ok(Route::Assistant)
        } else if self.config.passthrough && !model.is_empty() {
            Ok(Route::Passthrough)
        } else {
            Err(GatewayError::model_not_found(model))
        }
    }

    /// The assistant, then (with passthrough) the upstream's models. An unreachable
    /// upstream leaves the assistant listed alone.
    pub async fn models(&self) -> Vec<ServedModel> {
        let mut out = vec![ServedModel::Assistant {
            name: self.config.assistant_model.clone(),
        }];
        if self.config.passthrough {
            match self.chat.models().await {
                Ok(models) => {
                    self.remember_models(&models);
                    out.extend(
                        models
                            .into_iter()
                            .filter(|m| !self.is_assistant(&m.id))
                            .map(ServedModel::Upstream),
                    )
                }
                Err(e) => tracing::warn!(error = %e, "could not list the upstream's models"),
            }
        }
        out
    }

    /// The metric label of a model a client named: the name itself when it is served
    /// (the assistant, or a model the upstream listed, with passthrough), else `other`,
    /// so that clients cannot make up label values.
    pub fn model_label(&self, asked: &str) -> String {
        if self.is_assistant(asked) || (self.config.passthrough && self.lists(asked)) {
            asked.to_string()
        } else {
            "other".to_string()
        }
    }

    /// Whether the upstream's last listing has this model (with or without `:latest`).
    pub(super) fn lists(&self, name: &str) -> bool {
        let known = self
            .upstream_models
            .read()
            .unwrap_or_else(|e| e.into_inner());
        self.lists_in(&known, name)
    }

    pub(super) fn lists_in(&self, known: &KnownModels, name: &str) -> bool {
        listing(known, name) != Listed::NotServed
    }

    pub(super) fn remember_models(&self, models: &[UpstreamModel]) {
        let mut known = self
            .upstream_models
            .write()
            .unwrap_or_else(|e| e.into_inner());
        known.names = models.iter().map(|m| m.id.clone()).collect();
        known.listed = Some(Instant::now());
        known.answered = true;
    }

    /// Whether and by which name the upstream serves `name`: listed (as asked or by its
    /// other spelling), or not known otherwise because the upstream could not list its
    /// models (then its own answer decides). Lists the upstream's models again when
    /// `name` is not among those it listed and the listing is older than a minute (at
    /// most once a minute).
    pub(super) async fn learn_models(&self, name: &str) -> Listed {
        {
            let known = self
                .upstream_models
                .read()
                .unwrap_or_else(|e| e.into_inner());
            match listing(&known, name) {
                Listed::NotServed => {}
                served => return served,
            }
        }
        // Requests that find the listing stale wait for one refresh, then look again.
        let _one_at_a_time = self.listing.lock().await;
        let stale = {
            let known = self
                .upstream_models
                .read()
                .unwrap_or_else(|e| e.into_inner());
            known.listed.is_none_or(|at| at.elapsed() > MODEL_LIST_TTL)
        };
        if stale && !self.lists(name) {
            // Requests wait on this listing: a slow upstream is taken as one that could
            // not list (its own answer then decides).
            let listed = tokio::time::timeout(Duration::from_secs(5), self.chat.models()).await;
            if let Ok(Ok(models)) = listed {
                self.remember_models(&models);
            } else {
                // Not again for a minute.
                let mut known = self
                    .upstream_models
                    .write()
                    .unwrap_or_else(|e| e.into_inner());
                known.listed = Some(Instant::now());
                known.answered = false;
            }
        }
        let known = self
            .upstream_models
            .read()
            .unwrap_or_else(|e| e.into_inner());
        match listing(&known, name) {
            Listed::NotServed if !known.answered => Listed::AsAsked,
            listed => listed,
        }
    }

    /// One served model by name, or 404.
    pub async fn model(&self, name: &str) -> Result<ServedModel, GatewayError> {
        if self.is_assistant(name) {
            return Ok(ServedModel::Assistant {
                name: self.config.assistant_model.clone(),
            });
        }
        self.route(name)?;
        let models = self.chat.models().await?;
        self.remember_models(&models);
        // The name as listed, else its other spelling (`name` and `name:latest` are one).
        let at = models.iter().position(|m| m.id == name).or_else(|| {
            models
                .iter()
                .position(|m| crate::llm::same_model(&m.id, name))
        });
        at.map(|i| ServedModel::Upstream(models[i].clone()))
            .ok_or_else(|| GatewayError::model_not_found(name))
    }

    /// What `/api/show` tells about a model.
    pub async fn show(&self, name: &str) -> Result<ModelCard, GatewayError> {
        match self.route(name)? {
            Route::Assistant => Ok(ModelCard {
                context_length: Some(u64::from(self.config.context_tokens)),
                details: None,
                parameters: Some(format!("num_ctx {}", self.config.context_tokens)),
                // A family the gateway does not know still fills in the middle: the
                // upstream gets the suffix; the template then only says so.
                template: Some(
                    self.fill_template()
                        .unwrap_or(super::fill::Template::Qwen)
                        .as_ollama(),
                ),
                capabilities: vec!["completion".into(), "insert".into(), "tools".into()],
                model_info: None,
            }),
            Route::Passthrough => {
                // Asked by the name the upstream lists (`name` and `name:latest` are one
                // here, and an OpenAI-compatible upstream knows only its own).
                let listed = self.learn_models(name).await;
                let asked = match &listed {
                    Listed::As(other) => other,
                    _ => name,
                };
                let mut card = self.chat.show(asked).await?;
                // The template the gateway fills the completion model's middles with (an
                // OpenAI-compatible upstream reports none).
                if let Some(template) = self.fills_for(name) {
                    card.template = Some(template.as_ollama());
                    if !card.capabilities.iter().any(|c| c == "insert") {
                        card.capabilities.push("insert".into());
                    }
                }
                Ok(card)
            }
        }
    }

    /// Whether the upstream answers at all (for `/ready`).
    /// Whether each upstream (primary, then fallbacks) answers, each within `wait`.
    pub async fn upstream_ready(&self, wait: Duration) -> Vec<UpstreamProbe> {
        self.chat.probe(wait).await
    }
}
