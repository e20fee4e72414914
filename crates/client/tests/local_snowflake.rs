//! Local snowflake generators (`Client::local_snowflake`) against real nodes in process: the
//! worker pool shared with the nodes, the layout lock, the scope, release with a floor, and an
//! outage of the nodes shorter and longer than the lease (the handle's clock injected).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_client::{Client, ClientError, Id, Layout, LocalSnowflakeConfig, ManualClock};
use idmint_node::grpc::proto::{self, idmint_client::IdmintClient};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::TestNode;

const EVENTS: &str = "[namespaces.events]\nkind = \"snowflake\"\n";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .try_into()
        .unwrap()
}

async fn group(node: &TestNode, group: &str) -> proto::WorkerGroupAnswer {
    let channel = tonic::transport::Endpoint::from_shared(node.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = IdmintClient::new(channel);
    c.worker_group(proto::WorkerGroupRequest {
        group: group.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_ids_share_the_pool_with_the_node_and_never_collide() {
    let node = TestNode::start(EVENTS).await;
    let client = support::client([node.url()]).await;
    let a = client.local_snowflake("events").await.unwrap();
    let b = client.local_snowflake("events").await.unwrap();
    let node_ids = client.next_batch("events", 1000).await.unwrap();
    let node_worker = match node_ids[0] {
        Id::Snowflake(id) => Layout::twitter().decode(id).unwrap().parts.node,
        other => panic!("{other:?}"),
    };
    let workers: HashSet<u64> = [a.worker(), b.worker(), node_worker].into();
    assert_eq!(workers.len(), 3, "two holders of one worker id");
    let mut seen: HashSet<u64> = node_ids.iter().filter_map(|id| id.as_u64()).collect();
    let threads: Vec<_> = [Arc::new(a), Arc::new(b)]
        .into_iter()
        .map(|handle| {
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(200_000);
                for _ in 0..200_000 {
                    ids.push(handle.next().unwrap());
                }
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids went back");
                let decoded = Layout::twitter().decode(ids[0]).unwrap();
                assert_eq!(decoded.parts.node, handle.worker());
                (handle, ids)
            })
        })
        .collect();
    for t in threads {
        let (handle, ids) = t.join().unwrap();
        for id in ids {
            assert!(seen.insert(id), "duplicate id {id}");
        }
        handle.close().await;
    }
    client.close().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_with_a_floor_above_the_last_id() {
    let node = TestNode::start(EVENTS).await;
    let client = support::client([node.url()]).await;
    let handle = client.local_snowflake("events").await.unwrap();
    let worker = handle.worker();
    let mut last = 0;
    for _ in 0..10_000 {
        last = handle.next().unwrap();
    }
    handle.close().await;
    assert!(matches!(handle.next(), Err(ClientError::Closed)));
    let answer = group(&node, "events").await;
    let slot = answer.slots.iter().find(|s| s.worker == worker).unwrap();
    assert_eq!(slot.expires_in_ms, None, "the lease was not released");
    let last_ms = Layout::twitter().decode(last).unwrap().unix_millis();
    assert!(
        slot.floor_unix_ms > last_ms,
        "{} <= {last_ms}",
        slot.floor_unix_ms
    );
    assert!(
        !slot.holder.contains(" lease "),
        "a holder's secret was answered"
    );
    // The next handle starts above it, on whichever worker id.
    let next = client.local_snowflake("events").await.unwrap();
    if next.worker() == worker {
        assert!(next.next().unwrap() > last);
    }
    next.close().await;
    client.close().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_other_than_the_namespaces_is_refused_at_lease_time() {
    let node = TestNode::start(EVENTS).await;
    let client = support::client([node.url()]).await;
    let mut config = LocalSnowflakeConfig::default();
    config.layout = Some(Layout::sonyflake());
    match client.local_snowflake_with("events", config).await {
        Err(ClientError::Rejected { code, .. }) => {
            assert_eq!(code.as_deref(), Some("layout_conflict"))
        }
        other => panic!("{other:?}"),
    }
    // Not a snowflake namespace: refused before any lease.
    client.next("orders").await.unwrap();
    match client.local_snowflake("orders").await {
        Err(ClientError::Rejected { code, .. }) => assert_eq!(code.as_deref(), Some("wrong_kind")),
        other => panic!("{other:?}"),
    }
    client.close().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasing_needs_the_workers_scope() {
    let app = idmint_node::auth::TokenHash::of(b"idmint_app").to_string();
    let plain = idmint_node::auth::TokenHash::of(b"idmint_plain").to_string();
    let node = TestNode::start(&format!(
        "{EVENTS}\n[[auth.tokens]]\nhash = \"{app}\"\n\
         scopes = {{ \"*\" = [\"ids\", \"blocks\", \"workers\", \"read\"] }}\n\n\
         [[auth.tokens]]\nhash = \"{plain}\"\nscopes = {{ \"*\" = [\"ids\", \"blocks\", \"read\"] }}\n"
    ))
    .await;
    let connect = |token: &str| {
        Client::connect_with(
            support::config([node.url()]).with_token(token),
            Arc::new(idmint_client::SystemClock::new()),
        )
    };
    let client = connect("idmint_app").await.unwrap();
    let handle = client.local_snowflake("events").await.unwrap();
    handle.next().unwrap();
    handle.close().await;
    client.close().await;
    let client = connect("idmint_plain").await.unwrap();
    match client.local_snowflake("events").await {
        Err(ClientError::Rejected { code, .. }) => assert_eq!(code.as_deref(), Some("forbidden")),
        other => panic!("{other:?}"),
    }
    client.close().await;
    node.stop().await;
}

/// Waits (polling, bounded) until `handle` issues again.
async fn issues_again(handle: &idmint_client::LocalSnowflake) -> u64 {
    let deadline = tokio::time::Instant::now() + support::DEADLINE;
    loop {
        match handle.next() {
            Ok(id) => return id,
            Err(e) if tokio::time::Instant::now() < deadline && e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("not issuing again: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shorter_than_the_lease_is_bridged_a_longer_one_stops_issuing() {
    let store = tempfile::tempdir().unwrap();
    let authority: Arc<dyn idmint_store::Authority> =
        Arc::new(idmint_store::FileAuthority::open(store.path()).unwrap());
    let node = TestNode::start_on(authority.clone(), EVENTS, tempfile::tempdir().unwrap()).await;
    let addr = node.addr;
    let client = support::client([node.url()]).await;
    // The handle's time is the manual clock: the outage's length as the handle sees it.
    let clock = Arc::new(ManualClock::at_unix_millis(now_ms()));
    let mut config = LocalSnowflakeConfig::default();
    config.clock = Some(clock.clone() as Arc<dyn idmint_client::Clock>);
    let handle = client.local_snowflake_with("events", config).await.unwrap();
    let before = handle.next().unwrap();
    node.stop().await;
    // 7 s of a 10 s lease with a 2 s margin, the floor recorded 5 s ahead: the renewal sent
    // at the start covered up to 5 s; more would need a renewal the nodes cannot answer.
    clock.advance_millis(4_900);
    let during = handle.next().unwrap();
    assert!(during > before);
    clock.advance_millis(200);
    match handle.next() {
        Err(ClientError::Unavailable { code, message }) => {
            assert_eq!(code.as_deref(), Some("lease_expired"));
            assert!(message.contains("not renewed"), "{message}");
        }
        other => panic!("issued past what the lease covers: {other:?}"),
    }
    // The nodes back: the renewal goes through and issuing resumes above the earlier ids.
    let node = TestNode::restart_at(authority, EVENTS, tempfile::tempdir().unwrap(), addr).await;
    let after = issues_again(&handle).await;
    assert!(after > during);
    handle.close().await;
    client.close().await;
    node.stop().await;
}
