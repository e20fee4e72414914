//! Generates Rust from the `.proto` files under `proto/`: the gRPC messages and service of
//! `idmint.v1` (`proto/idmint/v1/idmint.proto`), and with the `etcd` feature the client of
//! etcd's v3 API as idmint uses it (`proto/etcd/`, packages `etcdserverpb` and `mvccpb`).
//!
//! protox compiles each `.proto` into a descriptor set in pure Rust and tonic-prost-build writes
//! the code from it, so building needs nothing but cargo: no `protoc`. The etcd API is generated
//! here rather than in idmint-store so that one crate owns every `.proto` and the one way they
//! are compiled; the store brings the channel.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    // The client is for tests and tiers over any channel (the upstream authority brings
    // tonic's channel); this crate depends on no transport.
    generate(&root, &["idmint/v1/idmint.proto"], true)?;
    if std::env::var_os("CARGO_FEATURE_ETCD").is_some() {
        // Client only: idmint never serves etcd's API.
        generate(
            &root,
            &["etcd/etcdserverpb/rpc.proto", "etcd/mvccpb/kv.proto"],
            false,
        )?;
    }
    Ok(())
}

/// Compiles `files` (relative to `root`, with their imports) and writes their code; a server
/// too when `server`.
fn generate(root: &Path, files: &[&str], server: bool) -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<_> = files.iter().map(|file| root.join(file)).collect();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [root])?;
    tonic_prost_build::configure()
        .build_server(server)
        .build_client(true)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
