//! Evaluation: how well retrieval, answers, the understanding of IDE turns and code
//! completion do on labelled datasets.

pub mod answers;
pub mod completions;
pub mod retrieval;
pub mod turns;
