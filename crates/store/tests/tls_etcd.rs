//! The etcd authority over TLS and with a login (`tls`, `ca_file`, `user`, `password`), against
//! a private etcd started by the test with `--cert-file`/`--key-file` from a certificate made at
//! test time, serving its clients over TLS only (`idmint_testkit::etcd_tls::PrivateEtcdTls`),
//! then with authentication enabled.
//!
//! What is checked: `verify-full` with the right CA connects and reserves (by address and by
//! name); another CA is refused; endpoints that contradict `tls` and `require` are refused
//! before connecting; with auth on, the right user reserves (also after its token expired),
//! while no user and a wrong password are refused.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_core::{NamespaceName, SequenceSpec};
use idmint_proto::etcd::etcdserverpb::auth_client::AuthClient;
use idmint_proto::etcd::etcdserverpb::{
    AuthEnableRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
};
use idmint_store::config::EtcdConfig;
use idmint_store::etcd::EtcdAuthority;
use idmint_store::tls::TlsMode;
use idmint_store::{Authority, StoreError};
use idmint_testkit::certs::TestCerts;
use idmint_testkit::etcd_tls::PrivateEtcdTls;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

fn config(endpoint: String, ca_file: Option<PathBuf>) -> EtcdConfig {
    EtcdConfig {
        op_timeout: Duration::from_secs(10),
        tls: if ca_file.is_some() {
            TlsMode::VerifyFull
        } else {
            TlsMode::Off
        },
        ca_file,
        ..EtcdConfig::new([endpoint])
    }
}

fn with_user(config: EtcdConfig, user: &str, password: &str) -> EtcdConfig {
    EtcdConfig {
        user: Some(user.to_owned()),
        password: Some(password.to_owned()),
        ..config
    }
}

async fn reserves(a: &EtcdAuthority, ns: &str) {
    let n = NamespaceName::new(ns).unwrap();
    a.ensure_namespace(&n, SequenceSpec::default_64())
        .await
        .unwrap();
    let r = a.reserve(&n, 10).await.unwrap();
    assert_eq!(r.block.len(), 10);
}

fn refused(result: Result<EtcdAuthority, StoreError>) -> String {
    match result {
        Ok(_) => panic!("connected, but should have been refused"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_over_tls_with_a_login() {
    let certs = TestCerts::new();
    let etcd = PrivateEtcdTls::start(&certs).await;
    let ca = Some(certs.ca_file());
    for host in ["127.0.0.1", "localhost"] {
        let a = EtcdAuthority::connect(config(etcd.client_url(host), ca.clone()))
            .await
            .unwrap();
        reserves(&a, "tls").await;
    }
    // Another CA: refused.
    let stranger = TestCerts::new();
    let e = refused(
        EtcdAuthority::connect(config(
            etcd.client_url("127.0.0.1"),
            Some(stranger.ca_file()),
        ))
        .await,
    );
    assert!(e.contains("certificate"), "{e}");
    // Settings that contradict each other.
    let plain = format!(
        "http://127.0.0.1:{}",
        etcd.client_url("x").rsplit(':').next().unwrap()
    );
    let e = refused(EtcdAuthority::connect(config(plain, ca.clone())).await);
    assert!(e.contains("is http:// but tls is on"), "{e}");
    let e = refused(EtcdAuthority::connect(config(etcd.client_url("127.0.0.1"), None)).await);
    assert!(e.contains("is https://"), "{e}");
    let require = EtcdConfig {
        tls: TlsMode::Require,
        ..config(etcd.client_url("127.0.0.1"), None)
    };
    let e = refused(EtcdAuthority::connect(require).await);
    assert!(e.contains("not supported"), "{e}");

    // Authentication on: a root user, then auth enable (etcd's own API on a channel of the
    // test's own, over TLS).
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&certs.ca_pem));
    let channel = Endpoint::from_shared(etcd.client_url("127.0.0.1"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut admin = AuthClient::new(channel);
    let user = AuthUserAddRequest {
        name: "root".into(),
        password: "s3cret".into(),
    };
    admin.user_add(user).await.unwrap();
    let grant = AuthUserGrantRoleRequest {
        user: "root".into(),
        role: "root".into(),
    };
    admin.user_grant_role(grant).await.unwrap();
    admin.auth_enable(AuthEnableRequest {}).await.unwrap();

    let good = with_user(
        config(etcd.client_url("127.0.0.1"), ca.clone()),
        "root",
        "s3cret",
    );
    let a = EtcdAuthority::connect(good).await.unwrap();
    reserves(&a, "auth").await;
    // The login token lives 2 s: the client logs in again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    reserves(&a, "auth").await;
    let e = refused(EtcdAuthority::connect(config(etcd.client_url("127.0.0.1"), ca.clone())).await);
    assert!(!e.is_empty());
    let wrong = with_user(
        config(etcd.client_url("127.0.0.1"), ca.clone()),
        "root",
        "wrong",
    );
    let e = refused(EtcdAuthority::connect(wrong).await);
    assert!(e.to_lowercase().contains("auth"), "{e}");
    let half = EtcdConfig {
        user: Some("root".into()),
        ..config(etcd.client_url("127.0.0.1"), ca)
    };
    let e = refused(EtcdAuthority::connect(half).await);
    assert!(e.contains("without password"), "{e}");
}
