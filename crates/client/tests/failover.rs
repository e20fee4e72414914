//! The client when nodes fail under it, against real nodes in process.
//!
//! What is checked: a `Block` whose answer is lost (the fault proxy drops the reply and closes
//! the connection) is not used and not sent again: its ids stay burned on the node (leased
//! there, never received here), and the ids handed out stay unique and increasing; two nodes on
//! one store, the first stopped: the client moves to the second, whose buffered block lies
//! below the ids it held, and cuts it away (burned) rather than hand out an id out of order.
//!
//! No test sleeps to order events, and none bounds how long something takes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_client::{Client, SystemClock};
use idmint_store::FileAuthority;
use idmint_testkit::proxy::{Fault, FaultProxy};
use std::collections::HashSet;
use std::sync::Arc;
use support::TestNode;

async fn take(client: &Client, ns: &str, n: usize, out: &mut Vec<u64>) {
    for _ in 0..n {
        // `next` waits at most refill_wait; a refill failing is retried by the caller here.
        loop {
            match client.next(ns).await {
                Ok(id) => {
                    out.push(id.as_u64().unwrap());
                    break;
                }
                Err(e) if e.is_retryable() => continue,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
}

fn check_increasing_and_unique(ids: &[u64]) {
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_whose_answer_is_lost_is_burned_not_resent() {
    let node = TestNode::start("").await;
    let proxy = FaultProxy::start(node.addr).await.unwrap();
    let config = support::config([format!("http://{}", proxy.addr())])
        .fixed_blocks(1000)
        .unwrap();
    let client = Client::connect_with(config, Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    take(&client, "photos", 10, &mut ids).await; // set up: one block, connection open
    proxy.set_fault(Fault::DropNextReply);
    // Below the low-water mark: the refill's Block goes out, its answer is dropped.
    take(&client, "photos", 4000, &mut ids).await;
    check_increasing_and_unique(&ids);
    let stats = client.stats("photos").unwrap();
    assert!(stats.refill_failures >= 1, "{stats:?}");
    // Every id the node leased is received here, except the lost block's: burned there.
    let state = node.sequence("photos").await;
    let received = stats.served + stats.buffered + stats.burned + stats.given_back;
    assert!(
        state.ids_served > received,
        "the lost block was not used: node leased {}, client received {received}",
        state.ids_served
    );
    assert!(ids.iter().all(|&id| id < state.watermark));
    client.close().await;
    drop(proxy);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_on_the_same_store_takes_over_without_going_back() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn idmint_store::Authority> =
        Arc::new(FileAuthority::open(dir.path()).unwrap());
    let cfg = "[defaults]\ncache = \"fixed\"\nblock_size = 1000\n";
    let a = TestNode::start_on(store.clone(), cfg, tempfile::tempdir().unwrap()).await;
    let b = TestNode::start_on(store, cfg, tempfile::tempdir().unwrap()).await;
    // Node b buffers the namespace's first block; then a client of a gets later blocks.
    let small = support::config([b.url()]).fixed_blocks(10).unwrap();
    let other = Client::connect_with(small, Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let first = other.next("photos").await.unwrap().as_u64().unwrap();
    let config = support::config([a.url(), b.url()])
        .fixed_blocks(1000)
        .unwrap();
    let client = Client::connect_with(config, Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    take(&client, "photos", 500, &mut ids).await;
    assert!(ids[0] >= first + 1000, "a's blocks lie above b's buffer");
    a.stop().await;
    take(&client, "photos", 5000, &mut ids).await;
    check_increasing_and_unique(&ids);
    let stats = client.stats("photos").unwrap();
    assert!(stats.burned > 0, "b's lower block was cut away: {stats:?}");
    other.close().await;
    client.close().await;
    b.stop().await;
}
