//! The PostgreSQL authority over TLS (`tls`, `ca_file`; src/tls.rs), against a private
//! PostgreSQL started by the test with `ssl = on`, a certificate made at test time and a
//! `pg_hba.conf` that rejects every connection not over TLS
//! (`idmint_testkit::postgres_tls::PrivatePostgres`).
//!
//! What is checked: `verify-full` with the right CA connects and reserves (by address and by
//! name: both are in the certificate); `require` connects without a CA; `off` is refused by the
//! server; `verify-full` with another CA is refused, saying why; the settings that cannot be
//! right (`verify-full` without `ca_file`, `ca_file` with `require` or `off`, a missing CA
//! file) are refused before any connection, naming the key or the file.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_core::{NamespaceName, SequenceSpec};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_store::tls::TlsMode;
use idmint_store::{Authority, StoreError};
use idmint_testkit::certs::TestCerts;
use idmint_testkit::postgres_tls::PrivatePostgres;
use std::path::PathBuf;
use std::time::Duration;

fn config(url: String, tls: TlsMode, ca_file: Option<PathBuf>) -> PostgresConfig {
    PostgresConfig {
        op_timeout: Duration::from_secs(20),
        pool_size: 2,
        tls,
        ca_file,
        // The private server runs with `fsync = off`: these tests check the channel.
        accept_unsafe_durability: true,
        ..PostgresConfig::new(url)
    }
}

async fn reserves(config: PostgresConfig) {
    let a = PostgresAuthority::connect(config).await.unwrap();
    let n = NamespaceName::new("tls").unwrap();
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    let r = a.reserve(&n, 10).await.unwrap();
    assert_eq!(r.block.len(), 10);
}

fn refused(result: Result<PostgresAuthority, StoreError>) -> String {
    match result {
        Ok(_) => panic!("connected, but should have been refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_verifies_the_server() {
    let certs = TestCerts::new();
    let pg = PrivatePostgres::start(&certs).await;
    // verify-full, by address and by name.
    for host in ["127.0.0.1", "localhost"] {
        reserves(config(
            pg.url(host),
            TlsMode::VerifyFull,
            Some(certs.ca_file()),
        ))
        .await;
    }
    // require: encrypted, not verified.
    reserves(config(pg.url("127.0.0.1"), TlsMode::Require, None)).await;
    // off: the server admits TLS only.
    let e =
        refused(PostgresAuthority::connect(config(pg.url("127.0.0.1"), TlsMode::Off, None)).await);
    assert!(
        e.contains("pg_hba.conf") || e.contains("no encryption"),
        "{e}"
    );
    // verify-full with a CA that did not sign the server's certificate.
    let stranger = TestCerts::new();
    let e = refused(
        PostgresAuthority::connect(config(
            pg.url("127.0.0.1"),
            TlsMode::VerifyFull,
            Some(stranger.ca_file()),
        ))
        .await,
    );
    assert!(e.to_lowercase().contains("certificate"), "{e}");
}

#[tokio::test]
async fn impossible_tls_settings_are_refused_before_connecting() {
    // Nothing listens here: each error must come from the settings, not the network.
    let url = "host=127.0.0.1 port=1 user=postgres dbname=postgres".to_owned();
    let ca = PathBuf::from("/nonexistent/ca.pem");
    let cases = [
        (TlsMode::VerifyFull, None, "needs ca_file"),
        (TlsMode::Require, Some(ca.clone()), "ca_file is set"),
        (TlsMode::Off, Some(ca.clone()), "ca_file is set"),
        (TlsMode::VerifyFull, Some(ca), "/nonexistent/ca.pem"),
    ];
    for (tls, ca_file, expected) in cases {
        let e = refused(PostgresAuthority::connect(config(url.clone(), tls, ca_file)).await);
        assert!(e.contains(expected), "{tls}: {e}");
    }
}
