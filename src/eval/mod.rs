//! Evaluation: how well retrieval, answers and the understanding of IDE turns do on
//! labelled datasets.

pub mod answers;
pub mod retrieval;
pub mod turns;
