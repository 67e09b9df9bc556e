//! Evaluation: how well retrieval and answers do on labelled datasets.

pub mod answers;
pub mod retrieval;
