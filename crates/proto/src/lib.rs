//! idmint-proto: the gRPC API `idmint.v1` (`proto/idmint/v1/idmint.proto`, docs/grpc.md) as
//! Rust: the messages, the service trait and server (`v1::idmint_server`, served by
//! `idmint-node`) and the client (`v1::idmint_client`, used by `idmint-store`'s upstream
//! authority and by tests), generated once, at build time, by `build.rs`.
//!
//! Invariants: the code is generated from the one `.proto` file, so server and client cannot
//! drift; no transport is generated or depended on (the node brings tonic's server, a client
//! its own channel), so depending on this crate opens no socket.
//!
//! What it does not do: map errors or convert domain types (each side's own edge does that).

/// The generated messages, service and client of `idmint.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod v1 {
    tonic::include_proto!("idmint.v1");
}
