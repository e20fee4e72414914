//! The client against real nodes in process (`support`: idmint_node over the file store in a
//! temporary directory, gRPC on 127.0.0.1:0).
//!
//! What is checked: over a million sequence ids from several tasks are unique, increase per
//! task, and lie below the node's watermark (only ids of blocks it granted); ids taken one
//! after another through handles, calls by name and batches increase across all of them; the
//! first url dead, the client falls back to the next; a clean close hands the unused tail back
//! (the node's `ids_served` drops back to what the client served) and the next client
//! continues right after the last id served; snowflake, ULID and UUIDv7 ids older than the
//! validity limit (an injected clock moved by hand) are never handed out; the blocking wrapper
//! works from plain threads; errors map to their variants; one owner's `LocalIds` on several
//! threads beside the shared path hands out each id once, increasing per handle, with exact
//! counts once the handles drop, and a dropped handle's chunk tail goes back (nothing taken
//! since) or is counted burned (something taken since, or after the close).
//!
//! No test sleeps to order events, and none bounds how long something takes: nodes and
//! clients wait a minute for a refill (`support::config`), never what a test runs into.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_client::{
    BlockingClient, Client, ClientError, Id, Kind, ManualClock, ShardRoute, SystemClock,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use support::{dead_url, TestNode};

fn u64s(ids: &[Id]) -> Vec<u64> {
    ids.iter().map(|id| id.as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_million_ids_from_several_tasks_are_unique_and_increase_per_task() {
    let node = TestNode::start("").await;
    let client = support::client([node.url()]).await;
    let photos = client.namespace("photos").await.unwrap();
    assert_eq!(photos.kind(), Kind::Sequence);
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let photos = photos.clone();
            let client = client.clone();
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(300_000);
                while ids.len() < 300_000 {
                    match ids.len() % 3 {
                        // The three ways in: the sync hot path, the async one, batches.
                        0 if t % 2 == 0 => match photos.try_next() {
                            Some(id) => ids.push(id.as_u64().unwrap()),
                            None => ids.push(photos.next().await.unwrap().as_u64().unwrap()),
                        },
                        1 => ids.push(client.next("photos").await.unwrap().as_u64().unwrap()),
                        _ => ids.extend(u64s(&photos.next_batch(97).await.unwrap())),
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut highest = 0;
    for task in tasks {
        let ids = task.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase per task");
        highest = highest.max(*ids.last().unwrap());
        for id in ids {
            assert!(all.insert(id), "{id} handed out twice");
        }
    }
    assert!(all.len() >= 1_200_000);
    let state = node.sequence("photos").await;
    assert!(highest < state.watermark, "only ids of granted blocks");
    let stats = photos.stats();
    // Exact: a claim racing a window change is counted burned, not served (window.rs).
    assert_eq!(stats.served, all.len() as u64, "{stats:?}");
    assert!(stats.refills > 1, "{stats:?}");
    assert!(stats.demand_per_sec > 0.0, "{stats:?}");
    client.close().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_url_dead_the_client_falls_back_to_the_next() {
    let node = TestNode::start("").await;
    let client = support::client([dead_url().await, node.url()]).await;
    let a = client.next("photos").await.unwrap();
    let b = client.next_batch("photos", 5000).await.unwrap();
    assert!(b[0] > a);
    assert_eq!(client.stats("photos").unwrap().last_error, None);
    // Every url dead: a clear, retryable error.
    let e = Client::connect([dead_url().await, dead_url().await])
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    client.close().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_close_hands_the_tail_back_and_the_next_client_continues() {
    // Fixed blocks of 1,000 and 100 ids taken: one block held, no refill (900 > half a block).
    let node = TestNode::start("").await;
    let config = support::config([node.url()]).fixed_blocks(1000).unwrap();
    let client = Client::connect_with(config.clone(), Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let photos = client.namespace("photos").await.unwrap();
    let mut last = 0;
    for _ in 0..100 {
        last = photos.next().await.unwrap().as_u64().unwrap();
    }
    let report = client.close().await;
    assert_eq!((report.given_back, report.burned), (900, 0));
    let stats = photos.stats();
    assert_eq!(
        (stats.buffered, stats.served, stats.given_back),
        (0, 100, 900)
    );
    // On the node, a tail taken back moves from served to buffered (docs/grpc.md, GiveBack):
    // of the 1,000 ids leased, 100 stay served.
    let state = node.sequence("photos").await;
    assert_eq!((state.ids_served, state.ids_burned), (100, 0));
    // Closed: nothing more from this client.
    assert_eq!(photos.try_next(), None);
    assert_eq!(photos.next().await, Err(ClientError::Closed));
    assert_eq!(client.next("photos").await, Err(ClientError::Closed));
    // The next client gets the tail first: nothing was burned.
    let again = Client::connect_with(config, Arc::new(SystemClock::new()))
        .await
        .unwrap();
    assert_eq!(again.next("photos").await.unwrap(), Id::Sequence(last + 1));
    again.close().await;
    node.stop().await;
}

const TIMED: &str = r#"
    [namespaces.tweets]
    kind = "snowflake"
    layout = "twitter"
    worker = 7

    [namespaces.events]
    kind = "ulid"

    [namespaces.sessions]
    kind = "uuid7"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_ordered_ids_older_than_the_validity_limit_are_never_handed_out() {
    let node = TestNode::start(TIMED).await;
    let clock = ManualClock::at_unix_millis(1_700_000_000_000);
    let mut config = support::config([node.url()]);
    config.validity = Duration::from_millis(500);
    let client = Client::connect_with(config, Arc::new(clock.clone()))
        .await
        .unwrap();
    for (ns, kind) in [
        ("tweets", Kind::Snowflake),
        ("events", Kind::Ulid),
        ("sessions", Kind::Uuid7),
    ] {
        let handle = client.namespace(ns).await.unwrap();
        assert_eq!(handle.kind(), kind);
        let first = handle.next().await.unwrap();
        assert_eq!(first.kind(), kind);
        let before = handle.stats();
        assert!(before.buffered > 0, "fetched in a batch: {before:?}");
        // Within the limit: from the cache, no fetch.
        clock.advance_millis(500);
        let second = handle.next().await.unwrap();
        assert!(second > first);
        // Past it: the cached ids are dropped, the next id comes from a new fetch.
        clock.advance_millis(1);
        let held = handle.stats().buffered;
        let refills = handle.stats().refills;
        let third = handle.next().await.unwrap();
        assert!(third > second);
        let after = handle.stats();
        assert_eq!(after.expired, held, "{ns}: {after:?}");
        assert!(after.refills > refills, "{ns}: {after:?}");
        // One owner's handle on a time-ordered namespace takes through the same freshness
        // check: past the limit, the held ids expire and it gets a fresh one.
        clock.advance_millis(501);
        let held = handle.stats().buffered;
        let mut local = handle.local();
        let fourth = local.next().await.unwrap();
        assert!(fourth > third);
        assert_eq!(handle.stats().expired, after.expired + held, "{ns}");
        drop(local);
        let after = handle.stats();
        // A batch: fresh ids only, increasing.
        clock.advance_millis(10_000);
        let batch = handle.next_batch(50).await.unwrap();
        assert!(batch[0] > fourth && batch.windows(2).all(|w| w[0] < w[1]));
        assert!(handle.stats().expired > after.expired);
    }
    client.close().await;
    node.stop().await;
}

#[test]
fn the_blocking_client_works_from_plain_threads() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let node = rt.block_on(TestNode::start(TIMED));
    let client =
        BlockingClient::connect_with(support::config([node.url()]), Arc::new(SystemClock::new()))
            .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            std::thread::spawn(move || {
                let orders = client.namespace("orders").unwrap();
                let mut ids = Vec::new();
                for i in 0..20_000 {
                    let id = if i % 2 == 0 {
                        orders.next().unwrap()
                    } else {
                        client.next("orders").unwrap()
                    };
                    ids.push(id.as_u64().unwrap());
                }
                ids.extend(u64s(&client.next_batch("orders", 1000).unwrap()));
                let event = client.next("events").unwrap();
                assert_eq!(event.kind(), Kind::Ulid);
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for t in threads {
        let ids = t.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        for id in ids {
            assert!(all.insert(id));
        }
    }
    assert_eq!(all.len(), 4 * 21_000);
    let report = client.close().unwrap();
    let stats = client.stats("orders").unwrap();
    assert_eq!(stats.buffered, 0);
    assert_eq!(stats.given_back, report.given_back);
    drop(client);
    rt.block_on(node.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_map_to_their_variants() {
    let node = TestNode::start(
        "[server]\nauto_create = false\n\n[namespaces.photos]\nkind = \"sequence\"\n",
    )
    .await;
    let client = support::client([node.url()]).await;
    assert_eq!(
        client.next("nothing").await,
        Err(ClientError::UnknownNamespace {
            namespace: "nothing".into()
        })
    );
    assert!(matches!(
        client.next("-bad").await,
        Err(ClientError::InvalidNamespace(_))
    ));
    assert!(matches!(
        client.next_batch("photos", 0).await,
        Err(ClientError::InvalidCount { .. })
    ));
    assert!(matches!(
        Client::connect(["not a url"]).await,
        Err(ClientError::InvalidConfig { .. })
    ));
    assert!(client.next("photos").await.is_ok());
    client.close().await;
    node.stop().await;
}

/// A shard or key sent to a namespace whose node field is not the data's shard (a sequence, a
/// snowflake on the node's worker lease) comes back `Rejected` with `invalid_request`, naming
/// the namespace; nothing is handed out (the sequence's first ids come next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_sent_to_an_ordinary_namespace_is_rejected() {
    let node = TestNode::start(
        "[namespaces.photos]\nkind = \"sequence\"\ncache = \"off\"\n\n\
         [namespaces.events]\nkind = \"snowflake\"\nworker = 2\n",
    )
    .await;
    let client = support::client([node.url()]).await;
    for ns in ["photos", "events"] {
        for route in [ShardRoute::Shard(7), ShardRoute::Key(42)] {
            match client.next_routed(ns, 2, route).await {
                Err(e @ ClientError::Rejected { .. }) => {
                    assert_eq!(e.code(), Some("invalid_request"), "{e}");
                    assert!(e.to_string().contains(&format!("\"{ns}\"")), "{e}");
                }
                other => panic!("{ns} {route:?}: {other:?}"),
            }
        }
    }
    assert_eq!(
        client.next_routed("photos", 0, ShardRoute::Shard(1)).await,
        Err(ClientError::InvalidCount {
            count: 0,
            max: idmint_client::MAX_BATCH
        })
    );
    let photos = client.next_batch("photos", 2).await.unwrap();
    assert_eq!(u64s(&photos), vec![1, 2]);
    client.close().await;
    node.stop().await;
}

/// A node with `[auth]`: the client with a token of the `blocks` scope gets ids; without a
/// token, or with one lacking the scope, the call is `Rejected` with the node's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_sent_to_a_node_with_auth() {
    let hash = idmint_node::auth::TokenHash::of(b"idmint_app").to_string();
    let reader = idmint_node::auth::TokenHash::of(b"idmint_reader").to_string();
    let node = TestNode::start(&format!(
        "[[auth.tokens]]\nhash = \"{hash}\"\nscopes = {{ \"*\" = [\"blocks\", \"read\"] }}\n\n\
         [[auth.tokens]]\nhash = \"{reader}\"\nscopes = {{ \"*\" = [\"read\"] }}\n"
    ))
    .await;
    let client = Client::connect_with(
        support::config([node.url()]).with_token("idmint_app"),
        Arc::new(SystemClock::new()),
    )
    .await
    .unwrap();
    let ids = client.next_batch("photos", 3).await.unwrap();
    assert_eq!(u64s(&ids).len(), 3);
    assert!(format!(
        "{:?}",
        support::config([node.url()]).with_token("idmint_app")
    )
    .contains("<redacted>"));
    client.close().await;
    for token in [None, Some("idmint_reader"), Some("idmint_unknown")] {
        let mut config = support::config([node.url()]);
        if let Some(t) = token {
            config = config.with_token(t);
        }
        let outcome = match Client::connect_with(config, Arc::new(SystemClock::new())).await {
            Ok(client) => {
                let r = client.next_batch("photos", 1).await.map(|_| ());
                client.close().await;
                r
            }
            Err(e) => Err(e),
        };
        match outcome {
            Err(ClientError::Rejected { code, .. }) => assert!(
                matches!(code.as_deref(), Some("unauthorized") | Some("forbidden")),
                "{token:?}: {code:?}"
            ),
            other => panic!("{token:?}: {other:?}"),
        }
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_increase_per_client_across_handles_calls_and_batches() {
    // One after another through every entry point: each id is above every id handed out
    // before it by this client (the window's unclaimed ids go back in front of a batch).
    let node = TestNode::start("").await;
    let config = support::config([node.url()]).fixed_blocks(1000).unwrap();
    let client = Client::connect_with(config, Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let (h1, h2) = (
        client.namespace("photos").await.unwrap(),
        client.namespace("photos").await.unwrap(),
    );
    let mut last = 0;
    for i in 0..20_000u64 {
        let ids = match i % 5 {
            0 => vec![h1.next().await.unwrap()],
            1 => h2.try_next().into_iter().collect(),
            2 => vec![client.next("photos").await.unwrap()],
            3 => h1.next_batch(1 + i % 300).await.unwrap(),
            _ => client.try_next("photos").into_iter().collect(),
        };
        for id in u64s(&ids) {
            assert!(id > last, "{id} after {last}");
            last = id;
        }
    }
    let stats = h1.stats();
    assert_eq!(stats.burned, 0, "{stats:?}");
    client.close().await;
    node.stop().await;
}

#[test]
fn local_handles_on_threads_hand_out_each_id_once_beside_the_shared_path() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let node = rt.block_on(TestNode::start(""));
    let client =
        BlockingClient::connect_with(support::config([node.url()]), Arc::new(SystemClock::new()))
            .unwrap();
    let orders = client.namespace("orders").unwrap();
    // Three threads on their own `LocalIds` (chunks, no atomics) and one on the shared window
    // (`try_next`, one `fetch_sub` per id), taking from the same buffer at once.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let orders = orders.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(400_000);
                if t == 0 {
                    while ids.len() < 100_000 {
                        let id = match orders.try_next() {
                            Some(id) => id,
                            None => orders.next().unwrap(),
                        };
                        ids.push(id.as_u64().unwrap());
                    }
                } else {
                    let mut local = orders.local();
                    while ids.len() < 400_000 {
                        ids.push(local.next().unwrap().as_u64().unwrap());
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut highest = 0;
    for (t, thread) in threads.into_iter().enumerate() {
        let ids = thread.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids increase per handle (thread {t})"
        );
        highest = highest.max(*ids.last().unwrap());
        for id in ids {
            assert!(all.insert(id), "{id} handed out twice");
        }
    }
    assert_eq!(all.len(), 1_300_000);
    let state = rt.block_on(node.sequence("orders"));
    assert!(highest < state.watermark, "only ids of granted blocks");
    let report = client.close().unwrap();
    let stats = orders.stats();
    // Every handle dropped: its unused chunk tail went back or was counted burned, so the
    // counts are exact again, and every id the node leased is accounted for.
    assert_eq!(stats.served, all.len() as u64, "{stats:?}");
    assert_eq!(stats.buffered, 0, "{stats:?}");
    assert_eq!(stats.given_back, report.given_back, "{stats:?}");
    let state = rt.block_on(node.sequence("orders"));
    assert_eq!(
        state.ids_served,
        stats.served + stats.burned,
        "{stats:?} {state:?}"
    );
    drop(client);
    rt.block_on(node.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_handles_chunk_tail_goes_back_or_is_counted_burned() {
    // Fixed blocks of 1,000: chunks (and windows) of 125 ids; fewer than 500 ids taken, so no
    // refill: one block, all of it accounted for below.
    let node = TestNode::start("").await;
    let config = support::config([node.url()]).fixed_blocks(1000).unwrap();
    let client = Client::connect_with(config, Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let photos = client.namespace("photos").await.unwrap();
    let seq = |id: Option<Id>| id.unwrap().as_u64().unwrap();

    // Dropped with nothing taken since its chunk: the tail goes back in front.
    let mut first = photos.local();
    let a = seq(first.try_next());
    for i in 1..10 {
        assert_eq!(seq(first.try_next()), a + i);
    }
    assert_eq!(first.held(), 115);
    drop(first);
    assert_eq!(seq(photos.try_next()), a + 10);

    // Something taken after its chunk: the tail cannot go back in order, so it is burned.
    let mut second = photos.local();
    assert_eq!(seq(second.try_next()), a + 11);
    assert_eq!(
        seq(photos.try_next()),
        a + 136,
        "after the chunk a + 11 ..= a + 135"
    );
    drop(second);
    assert_eq!(photos.stats().burned, 124);

    // Alive across the close: the close gives the buffer's tail back; the chunk's tail is
    // burned when the handle drops, never given back or served twice.
    let mut third = photos.local();
    assert_eq!(seq(third.try_next()), a + 137);
    let report = client.close().await;
    assert_eq!(report.given_back, 1000 - 262);
    assert_eq!(third.held(), 124);
    drop(third);
    let stats = photos.stats();
    assert_eq!(
        (stats.served, stats.burned, stats.given_back, stats.buffered),
        (14, 248, 738, 0),
        "{stats:?}"
    );
    // A handle made after the close gets nothing.
    assert_eq!(photos.local().try_next(), None);
    node.stop().await;
}
