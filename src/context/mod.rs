//! Context from the client: what the user sees in the editor. The token budget and
//! truncation for prompt assembly join here (issue 4).

pub mod editor;

pub use editor::{ContextItem, EditorContext};
