//! Generates the gRPC messages and service (`idmint.v1`) from `proto/idmint/v1/idmint.proto`.
//!
//! protox compiles the `.proto` into a descriptor set in pure Rust and tonic-prost-build writes
//! the code from it, so building needs nothing but cargo: no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("idmint/v1/idmint.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&root])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The client is for tests and tiers over any channel (the upstream authority brings
        // tonic's channel); this crate depends on no transport.
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
