//! Context from the client (what the user sees in the editor and what the IDE attached)
//! and fitting context into the model's window.

pub mod budget;
pub mod editor;
pub mod items;
pub mod policy;
pub mod protect;

pub use editor::EditorContext;
pub use items::{ContextItem, UsedItem};
pub use policy::Policy;
