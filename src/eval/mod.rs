//! Evaluation: how well retrieval (and later, answers) do on labelled datasets.

pub mod retrieval;
