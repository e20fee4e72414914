//! The MySQL authority over TLS (`tls`, `ca_file`; src/tls.rs), against a private MariaDB
//! started by the test with `--ssl-cert`/`--ssl-key` from a certificate made at test time and a
//! user created with `REQUIRE SSL`, so a connection that gets in used TLS
//! (`idmint_testkit::mysql::PrivateMariadb`).
//!
//! What is checked: `verify-full` with the right CA connects and reserves (by address and by
//! name); `require` connects without a CA; `off` is refused by the server; `verify-full` with
//! another CA is refused; impossible settings are refused before any connection.

#![cfg(feature = "mysql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_core::{NamespaceName, SequenceSpec};
use idmint_store::config::MysqlConfig;
use idmint_store::mysql::MysqlAuthority;
use idmint_store::tls::TlsMode;
use idmint_store::{Authority, StoreError};
use idmint_testkit::certs::TestCerts;
use idmint_testkit::mysql::PrivateMariadb;
use std::path::PathBuf;
use std::time::Duration;

fn config(host: &str, port: u16, tls: TlsMode, ca_file: Option<PathBuf>) -> MysqlConfig {
    MysqlConfig {
        op_timeout: Duration::from_secs(20),
        tls,
        ca_file,
        ..MysqlConfig::new(format!("mysql://tls@{host}:{port}/idmint_tls"))
    }
}

async fn connect(config: MysqlConfig) -> Result<MysqlAuthority, StoreError> {
    MysqlAuthority::connect(config).await
}

async fn reserves(config: MysqlConfig) {
    let a = connect(config).await.unwrap();
    let n = NamespaceName::new("tls").unwrap();
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    let r = a.reserve(&n, 10).await.unwrap();
    assert_eq!(r.block.len(), 10);
}

fn refused(result: Result<MysqlAuthority, StoreError>) -> String {
    match result {
        Ok(_) => panic!("connected, but should have been refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_over_tls_verifies_the_server() {
    let certs = TestCerts::new();
    let options = [
        format!("--ssl-cert={}", certs.cert_file().display()),
        format!("--ssl-key={}", certs.key_file().display()),
        format!("--ssl-ca={}", certs.ca_file().display()),
    ];
    let server = tokio::task::spawn_blocking(move || {
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let server = PrivateMariadb::start_with(1, 1, &options);
        server
            .sql(
                "CREATE USER 'tls'@'%' REQUIRE SSL; GRANT ALL ON *.* TO 'tls'@'%'; \
                 CREATE DATABASE idmint_tls",
            )
            .unwrap();
        server
    })
    .await
    .unwrap();
    let port = server.port();
    for host in ["127.0.0.1", "localhost"] {
        reserves(config(
            host,
            port,
            TlsMode::VerifyFull,
            Some(certs.ca_file()),
        ))
        .await;
    }
    reserves(config("127.0.0.1", port, TlsMode::Require, None)).await;
    let e = refused(connect(config("127.0.0.1", port, TlsMode::Off, None)).await);
    assert!(e.contains("ccess denied"), "{e}");
    let stranger = TestCerts::new();
    let e = refused(
        connect(config(
            "127.0.0.1",
            port,
            TlsMode::VerifyFull,
            Some(stranger.ca_file()),
        ))
        .await,
    );
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    drop(server);
}

#[tokio::test]
async fn impossible_tls_settings_are_refused_before_connecting() {
    let ca = PathBuf::from("/nonexistent/ca.pem");
    let cases = [
        (TlsMode::VerifyFull, None, "needs ca_file"),
        (TlsMode::Require, Some(ca.clone()), "ca_file is set"),
        (TlsMode::VerifyFull, Some(ca), "/nonexistent/ca.pem"),
    ];
    for (tls, ca_file, expected) in cases {
        let e = refused(connect(config("127.0.0.1", 1, tls, ca_file)).await);
        assert!(e.contains(expected), "{tls}: {e}");
    }
}
