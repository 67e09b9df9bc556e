//! What the gateway's APIs share, whatever their protocol (HTTP, gRPC): the state every
//! handler reads, who calls and their limits, the bounds of a request, the one chat flow,
//! readiness, and the listener that serves a router (plain or TLS); and the round of the
//! scheduler a streamed body waits to send what is ready at once in one write.

pub mod access;
pub mod bounds;
pub mod chat;
pub mod connections;
pub mod evaluation;
pub mod listener;
pub mod ready;
pub mod round;
mod state;
pub mod tls;

pub use state::AppState;
