//! Context from the client (what the user sees in the editor) and fitting context into
//! the model's window.

pub mod budget;
pub mod editor;

pub use editor::{ContextItem, EditorContext};
