//! The conformance suite's local snowflake process cases (clients/conformance/README.md,
//! "Local snowflake workers") with this client's worker program
//! (`examples/local_snowflake_worker.rs`): kill -9, SIGSTOP past the TTL, a clock 30 s behind
//! (libfaketime), the nodes stopped for less and for more than the TTL, and three processes at
//! once, against a real `idmint serve` (`$IDMINT_BIN`, else the one cargo built). The harness
//! is the suite's own (`clients/conformance/local_snowflake.py`, run with python3); build the
//! binary and the example first (`cargo build --bin idmint --example local_snowflake_worker
//! -p idmint-cli -p idmint-client`; `cargo test --workspace` builds both).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

/// The cargo output directory of this test (target/debug, from target/debug/deps/<test>).
fn debug_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

#[test]
fn local_snowflake_process_cases_pass() {
    let idmint = std::env::var_os("IDMINT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| debug_dir().join("idmint"));
    assert!(
        idmint.exists(),
        "{} is missing: cargo build --bin idmint",
        idmint.display()
    );
    let worker = debug_dir().join("examples").join("local_snowflake_worker");
    assert!(
        worker.exists(),
        "{} is missing: cargo build -p idmint-client --example local_snowflake_worker",
        worker.display()
    );
    let harness = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients/conformance/local_snowflake.py");
    let out = Command::new("python3")
        .arg(&harness)
        .arg("--idmint")
        .arg(&idmint)
        .arg("--worker")
        .arg(format!("rust={}", worker.display()))
        .output()
        .expect("python3 runs the harness");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "local snowflake cases failed:\n{text}"
    );
    assert!(!text.contains("FAIL"), "{text}");
}
