//! idmint-proto: the gRPC API `idmint.v1` (`proto/idmint/v1/idmint.proto`, docs/grpc.md) as
//! Rust: the messages, the service trait and server (`v1::idmint_server`, served by
//! `idmint-node`) and the client (`v1::idmint_client`, used by `idmint-store`'s upstream
//! authority and by tests), generated once, at build time, by `build.rs`.
//!
//! Invariants: the code is generated from the one `.proto` file, so server and client cannot
//! drift; no transport is generated or depended on (the node brings tonic's server, a client
//! its own channel), so depending on this crate opens no socket.
//!
//! With the `nodes` feature, [`nodes`]: several nodes behind one caller and the one fallback
//! policy across them, shared by the upstream authority and the client library (lazy channels:
//! still no socket until a call).
//!
//! With the `tls` feature, [`tls`]: how every client (the CLI, the upstream authority, the
//! client library) trusts a node and presents a client certificate; `nodes` uses it for
//! `https://` urls.
//!
//! With the `etcd` feature, [`etcd`]: the messages and clients of etcd's v3 API as idmint uses
//! it (`proto/etcd/`, trimmed from etcd's own, wire-compatible), for `idmint-store`'s etcd
//! authority; no server.
//!
//! What it does not do: map errors or convert domain types (each side's own edge does that).

#[cfg(feature = "nodes")]
pub mod nodes;
#[cfg(feature = "tls")]
pub mod tls;

/// etcd's v3 API as idmint uses it: the KV, Lease and Auth clients (`etcdserverpb`) and the
/// stored key-value pair (`mvccpb`), with etcd's package, service and field names and numbers.
#[cfg(feature = "etcd")]
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod etcd {
    /// etcd's `etcdserverpb` package: requests, answers and the service clients.
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
    /// etcd's `mvccpb` package: the key-value pair as stored.
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
}

/// The generated messages, service and client of `idmint.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod v1 {
    tonic::include_proto!("idmint.v1");
}
