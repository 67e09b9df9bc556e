//! The answer evaluation as a service (the reference's `EvaluateRAG`, over HTTP and
//! gRPC): the golden dataset in `eval.dataset`, one evaluation at a time (another
//! request meanwhile is a conflict). An evaluation stops when its client goes away
//! (nothing is written then); a finished one's reports are written under
//! `data_dir/eval/<timestamp>`, the newest `eval.keep_reports` kept.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::AppState;
use crate::error::GatewayError;
use crate::eval::answers::{self, judge::Judge, EvalError, EvalResponse, Evaluator};

/// What an evaluation request asks for.
pub struct Asked {
    /// Only this category; empty = all.
    pub category: String,
    /// Only the first N questions; 0 = all.
    pub limit: i64,
    /// The index to evaluate; empty = the configured one (the only one served).
    pub index: String,
}

/// Clears the running flag when the evaluation ends, however it ends.
struct Running(Arc<AtomicBool>);

impl Running {
    fn acquire(flag: &Arc<AtomicBool>) -> Option<Self> {
        flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| Self(flag.clone()))
    }
}

/// A task that is aborted when this is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Runs the answer evaluation that `req` asks for, on the configured golden dataset.
pub async fn run(state: AppState, req: Asked) -> Result<EvalResponse, GatewayError> {
    let result = evaluate(state, req).await;
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("assist_eval_runs_total", "outcome" => outcome).increment(1);
    result
}

async fn evaluate(state: AppState, req: Asked) -> Result<EvalResponse, GatewayError> {
    let limit = usize::try_from(req.limit)
        .map_err(|_| GatewayError::invalid("limit", "limit must be 0 (all) or more"))?;
    let settings = state.settings.clone();
    let index = answers::index_name(&settings);
    let asked = req.index.trim();
    if !asked.is_empty() && asked != index {
        return Err(GatewayError::invalid(
            "index",
            format!("only the configured index '{index}' can be evaluated"),
        ));
    }
    let Some(path) = &settings.eval.dataset else {
        return Err(GatewayError::unavailable(
            "eval_not_configured",
            "answer evaluation is off: set eval.dataset to a golden dataset file",
        ));
    };
    let dataset = answers::load_dataset(path)
        .map_err(|e| GatewayError::internal(format!("eval.dataset: {e:#}")))?;
    let questions = answers::select(dataset, &req.category, limit);
    if questions.is_empty() {
        return Err(GatewayError::invalid(
            "category",
            format!(
                "the golden dataset has no question of category '{}'",
                req.category
            ),
        ));
    }
    let guard = Running::acquire(&state.eval_running).ok_or_else(|| {
        GatewayError::conflict(
            "eval_in_progress",
            "an evaluation is already running; try again when it has finished",
        )
    })?;
    let judge = Judge::from_settings(&settings.judge, &settings.llm, &settings.assistant, None)
        .map_err(|e| GatewayError::internal(format!("judge settings: {e:#}")))?;
    // The evaluation runs in its own task, stopped when the request is dropped (its client
    // went away).
    let mut task = AbortOnDrop(tokio::spawn(async move {
        let _guard = guard;
        let evaluator = Evaluator {
            pipeline: &state.pipeline,
            judge: &judge,
            embedder: state.embedder.clone(),
            answer_max_tokens: (settings.eval.answer_max_tokens > 0)
                .then_some(settings.eval.answer_max_tokens),
            answer_model: settings.llm.model.clone(),
            index,
        };
        tracing::info!(questions = questions.len(), "evaluation started");
        let result = evaluator
            .run(&questions, &indicatif::ProgressBar::hidden())
            .await;
        if let Ok(r) = &result {
            let dir = answers::default_out_dir(&settings.data_dir);
            let written = answers::write_reports(&dir, r).and_then(|()| {
                answers::prune_reports(&settings.data_dir, settings.eval.keep_reports)
            });
            match written {
                Ok(()) => tracing::info!(
                    questions = r.questions_evaluated,
                    seconds = r.elapsed_seconds,
                    global_score = r.global_score,
                    verdict = r.verdict,
                    missing_judgements = r.judge.missing,
                    reports = %dir.display(),
                    "evaluation finished"
                ),
                Err(e) => tracing::warn!(error = %e, "evaluation finished; reports not written"),
            }
        }
        result
    }));
    let result = (&mut task.0)
        .await
        .map_err(|e| GatewayError::internal(format!("the evaluation stopped: {e}")))?;
    let response = result.map_err(|e| {
        let message = e.to_string();
        match e {
            EvalError::Answer { error, .. } => error.with_message(message),
            EvalError::Judge(u) | EvalError::Embed(u) => {
                GatewayError::from(u).with_message(message)
            }
        }
    })?;
    Ok(response)
}
