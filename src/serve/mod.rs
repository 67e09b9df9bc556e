//! What the gateway's APIs share, whatever their protocol (HTTP, gRPC): the state every
//! handler reads, who calls and their limits, the bounds of a request, the one chat flow,
//! readiness, and the listener that serves a router (plain or TLS).

pub mod access;
pub mod bounds;
pub mod chat;
pub mod connections;
pub mod evaluation;
pub mod listener;
pub mod ready;
mod state;
pub mod tls;

pub use state::AppState;
