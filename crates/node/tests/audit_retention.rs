//! `server.audit_retention_days` on a shared store, measured by the store's clock: a second node
//! on the same PostgreSQL whose clock runs 400 days ahead, with a retention of 30 days, prunes
//! nothing written just now, and the ledger still verifies.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust); the test has its own database.
//! The node's clock is a [`ManualClock`]: no test sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_core::{ManualClock, NamespaceName, SequenceSpec};
use idmint_node::{Authority, Node, NodeConfig};
use idmint_store::audit::{self, AuditLog};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_testkit::postgres as pg;
use std::sync::Arc;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(86_400);

async fn connect(db: &pg::TempDatabase) -> Arc<dyn Authority> {
    Arc::new(
        PostgresAuthority::connect(PostgresConfig::new(db.url()))
            .await
            .unwrap(),
    )
}

fn log(a: &Arc<dyn Authority>) -> &dyn AuditLog {
    a.audit_log().unwrap()
}

#[tokio::test]
async fn a_fast_node_clock_does_not_empty_a_shared_ledger() {
    let db = pg::TempDatabase::create().await;
    let first = connect(&db).await;
    let name = NamespaceName::new("photos").unwrap();
    first
        .ensure_namespace(&name, SequenceSpec::default_64())
        .await
        .unwrap();
    for _ in 0..3 {
        first.reserve(&name, 1000).await.unwrap();
    }
    let before = log(&first).entries(&name, None, 100).await.unwrap();
    assert_eq!(before.len(), 3);

    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let ahead = ManualClock::at_unix_millis(now_ms + 400 * 86_400_000);
    let config = NodeConfig {
        audit_retention: Some(30 * DAY),
        ..NodeConfig::default()
    };
    let second = Node::start_with_clock(config, connect(&db).await, Arc::new(ahead))
        .await
        .unwrap();
    second.prune_audit(30 * DAY).await;

    assert_eq!(
        log(&first).entries(&name, None, 100).await.unwrap(),
        before,
        "entries written just now, by the store's clock, are kept"
    );
    let states = first.list().await.unwrap();
    let report = audit::verify(log(&first), &states).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!(report.grants, 3);
    second.shutdown().await;
}
