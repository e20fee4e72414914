//! Owned shards in process: three nodes on one memory authority, each serving gRPC on
//! `127.0.0.1:0` (a node forwards a shard it does not hold to its holder over real HTTP/2),
//! clients on every node asking for random shards.
//!
//! What is checked: every id is unique and decodes to the shard it was asked for; each range
//! is held by exactly one node, and requests for the others' shards were forwarded; a forward
//! to a node that does not hold the shard is refused (one hop); a clean stop of a node releases
//! its ranges, the others take them over, and each shard's ids go on above everything served;
//! bad shards and missing shards are `invalid_request`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_core::Layout;
use idmint_node::namespace::route::ShardRoute;
use idmint_node::namespace::{Ids, Namespace, SnowflakeNamespace};
use idmint_node::Credentials;
use idmint_node::{FileConfig, IdError, Node, Shutdown, ShutdownReport};
use idmint_store::{Authority, MemoryAuthority};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const DEADLINE: Duration = Duration::from_secs(30);
const SHARDS: u64 = 64;
const PER_RANGE: u64 = 8;
/// The `authorization` of a forward: the cluster's peer token, which every member shares.
const PEER: &[u8] = b"Bearer idmint_photos_peer";

struct Member {
    node: Arc<Node>,
    url: String,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>,
}

fn toml(url: &str) -> String {
    let grpc = url.trim_start_matches("http://");
    format!(
        "[server]\ngrpc = \"{grpc}\"\n\n[leases]\nttl_ms = 2000\nsafety_margin_ms = 400\nfloor_ahead_ms = 1000\n\n\
         [peers]\nadvertise = \"{url}\"\ntoken = \"idmint_photos_peer\"\nwait_ms = 3000\n\n\
         [namespaces.photos]\nkind = \"snowflake\"\nlayout = \"instagram\"\nshards = \"owned\"\n\
         logical_shards = {SHARDS}\nshard_range = {PER_RANGE}\n\n\
         [namespaces.events]\nkind = \"snowflake\"\n"
    )
}

async fn member(store: Arc<dyn Authority>) -> Member {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let config = FileConfig::parse(&toml(&url)).unwrap().node;
    let node = Node::start(config, store).await.unwrap();
    let server = idmint_node::Server::new(node.clone()).grpc(listener);
    let shutdown = server.shutdown_handle();
    let served = tokio::spawn(server.serve());
    Member {
        node,
        url,
        shutdown,
        served,
    }
}

fn photos(m: &Member) -> Arc<Namespace> {
    m.node.served_namespace("photos").unwrap()
}

fn snowflake(ns: &Namespace) -> &SnowflakeNamespace {
    match ns {
        Namespace::Snowflake(s) => s,
        _ => unreachable!("photos is a snowflake namespace"),
    }
}

/// `count` ids of `route` through `m`, by the request path every front-end takes.
async fn take_routed(
    node: &Node,
    name: &str,
    route: Option<ShardRoute>,
    count: u64,
) -> Result<Vec<u64>, IdError> {
    let taken = node
        .take_ids(Credentials::Header(None), name, Some(count), route)
        .await?;
    match taken.ids {
        Ids::U64(ids) => Ok(ids),
        other => panic!("not 64-bit ids: {other:?}"),
    }
}

/// `count` ids of `shard` through `m`.
async fn take(m: &Member, shard: u64, count: u64) -> Result<Vec<u64>, IdError> {
    take_routed(&m.node, "photos", Some(ShardRoute::Shard(shard)), count).await
}

/// A small deterministic generator (xorshift), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `clients` tasks per member, each asking `rounds` times for 1 to 5 ids of a random shard;
/// every answer with its shard.
async fn load(members: &[&Member], clients: u64, rounds: usize) -> Vec<(u64, Vec<u64>)> {
    let mut tasks = Vec::new();
    for (i, m) in members.iter().enumerate() {
        for c in 0..clients {
            let node = m.node.clone();
            let seed = 0x9e37_79b9_7f4a_7c15 ^ ((i as u64) << 32 | c);
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(seed);
                let mut answers = Vec::new();
                for round in 0..rounds {
                    // Half by shard, half by a key of that shard.
                    let shard = rng.below(SHARDS);
                    let route = if round % 2 == 0 {
                        ShardRoute::Shard(shard)
                    } else {
                        ShardRoute::Key(shard + SHARDS * rng.below(1000))
                    };
                    let count = 1 + rng.below(5);
                    let ids = take_routed(&node, "photos", Some(route), count)
                        .await
                        .unwrap_or_else(|e| panic!("{route}: {e}"));
                    assert_eq!(ids.len() as u64, count);
                    answers.push((shard, ids));
                }
                answers
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// Every id unique and of the shard it was asked for; each answer increasing. Returns the
/// highest id of each shard.
fn check(answers: &[(u64, Vec<u64>)]) -> BTreeMap<u64, u64> {
    let layout = Layout::instagram();
    let mut seen = HashSet::new();
    let mut highest = BTreeMap::new();
    for (shard, ids) in answers {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        for &id in ids {
            assert!(seen.insert(id), "id {id} answered twice");
            let d = layout.decode(id).unwrap();
            assert_eq!(d.parts.node, *shard, "id {id} of shard {shard}");
            let top = highest.entry(*shard).or_insert(0);
            *top = id.max(*top);
        }
    }
    highest
}

/// The ranges each member holds.
fn held(members: &[&Member]) -> Vec<HashSet<u64>> {
    members
        .iter()
        .map(|m| {
            let ns = photos(m);
            let shards = snowflake(&ns).owned_shards().unwrap();
            shards.held_ranges().into_iter().collect()
        })
        .collect()
}

async fn stop(m: &Member) {
    m.shutdown.drain();
    tokio::time::timeout(DEADLINE, async {
        while !m.served.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the node stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_shards_are_served_once_each_by_their_holder_and_handed_over_at_a_clean_stop() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let a = member(store.clone()).await;
    let b = member(store.clone()).await;
    let c = member(store.clone()).await;
    let all = [&a, &b, &c];
    // Node k takes range k first, so every node holds one.
    let mut answers = Vec::new();
    for (k, m) in all.iter().enumerate() {
        let shard = k as u64 * PER_RANGE;
        answers.push((shard, take(m, shard, 1).await.unwrap()));
    }
    answers.extend(load(&all, 4, 150).await);
    let before = check(&answers);
    assert_eq!(before.len() as u64, SHARDS, "every shard was asked for");

    // Each range is held by exactly one node; every node forwarded to the others.
    let holders = held(&all);
    let mut owner = HashMap::new();
    for (i, ranges) in holders.iter().enumerate() {
        for r in ranges {
            assert!(owner.insert(*r, i).is_none(), "range {r} held twice");
        }
    }
    assert_eq!(owner.len() as u64, SHARDS / PER_RANGE, "{holders:?}");

    // The nodes forwarded the shards they did not hold, and count it.
    let mut forwards = 0.0;
    for m in all {
        let text = m
            .node
            .scrape(idmint_node::metrics::Format::Prometheus)
            .await;
        forwards += text
            .lines()
            .find(|l| l.starts_with("idmint_shard_forwards_total{namespace=\"photos\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |v| v.parse::<f64>().unwrap());
    }
    assert!(forwards > 100.0, "{forwards} forwards");

    // Every node's shard map (read from the authority) says the same: which url holds each
    // range.
    for m in all {
        let info = m
            .node
            .namespace_info(Credentials::Header(None), "photos")
            .await
            .unwrap();
        let idmint_api::NamespaceInfo::Snowflake { state, .. } = info else {
            panic!("photos is a snowflake namespace");
        };
        let map = state.shards.expect("an owned namespace has a shard map");
        assert_eq!((map.logical_shards, map.shard_range), (SHARDS, PER_RANGE));
        assert_eq!(map.this_node, m.url);
        assert_eq!(map.error, None);
        assert_eq!(map.ranges.len(), owner.len());
        for r in &map.ranges {
            assert_eq!(r.holder, all[owner[&r.range]].url, "range {}", r.range);
            assert_eq!(
                (r.first_shard, r.last_shard),
                (r.range * PER_RANGE, r.range * PER_RANGE + PER_RANGE - 1)
            );
        }
    }

    // A forward for a shard this node does not hold is refused, not forwarded again.
    let (&r, &i) = owner.iter().next().unwrap();
    let other = all[(i + 1) % 3];
    let refused = other
        .node
        .take_forwarded(
            Credentials::Header(Some(PEER)),
            "photos",
            1,
            false,
            Some(r * PER_RANGE),
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code().as_str(), "no_leader", "{refused}");
    // A shard of a namespace of worker ids is refused.
    let e = other
        .node
        .take_forwarded(
            Credentials::Header(Some(PEER)),
            "events",
            1,
            false,
            Some(1),
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid_request", "{e}");
    // A batch of parts to the holder: each part's ids in order, each of its shard; all or
    // none when one part is not the node's; counts that do not add up are refused.
    let holder = all[i];
    let (a, b) = (r * PER_RANGE, r * PER_RANGE + PER_RANGE - 1);
    let (ids, _) = holder
        .node
        .take_forwarded(
            Credentials::Header(Some(PEER)),
            "photos",
            5,
            false,
            None,
            &[(a, 2), (b, 3)],
        )
        .await
        .unwrap();
    let of = |id: u64| Layout::instagram().decode(id).unwrap().parts.node;
    assert_eq!(
        ids.iter().map(|&id| of(id)).collect::<Vec<_>>(),
        [a, a, b, b, b]
    );
    let (&elsewhere, _) = owner.iter().find(|(_, &j)| j != i).unwrap();
    let e = holder
        .node
        .take_forwarded(
            Credentials::Header(Some(PEER)),
            "photos",
            2,
            false,
            None,
            &[(a, 1), (elsewhere * PER_RANGE, 1)],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "no_leader", "{e}");
    let e = holder
        .node
        .take_forwarded(
            Credentials::Header(Some(PEER)),
            "photos",
            4,
            false,
            None,
            &[(a, 2), (b, 3)],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid_request", "{e}");

    // The holder of range r stops cleanly: the others take its ranges over, above its ids.
    let stopped = all[i];
    stop(stopped).await;
    let rest: Vec<&Member> = all
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, m)| *m)
        .collect();
    let after = load(&rest, 4, 150).await;
    let highest_after = check(&after);
    for (shard, ids) in &after {
        let earlier = before.get(shard).copied().unwrap_or(0);
        assert!(
            ids[0] > earlier,
            "shard {shard}: {} after the handover, {earlier} before",
            ids[0]
        );
    }
    assert!(!highest_after.is_empty());
    answers.extend(after);
    check(&answers);
    for m in rest {
        stop(m).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_out_of_range_and_missing_shards_are_invalid_requests() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let m = member(store).await;
    let e = take(&m, SHARDS, 1).await.unwrap_err();
    assert_eq!(e.code().as_str(), "invalid_request", "{e}");
    assert!(e.to_string().contains("logical_shards = 64"), "{e}");
    let e = take_routed(&m.node, "photos", None, 1).await.unwrap_err();
    assert_eq!(e.code().as_str(), "invalid_request", "{e}");
    assert!(e.to_string().contains("shard"), "{e}");
    let e = take_routed(&m.node, "events", Some(ShardRoute::Shard(1)), 1)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid_request", "{e}");
    assert_eq!(
        take_routed(&m.node, "photos", Some(ShardRoute::Key(SHARDS * 7 + 5)), 2)
            .await
            .unwrap()
            .iter()
            .map(|&id| Layout::instagram().decode(id).unwrap().parts.node)
            .collect::<Vec<_>>(),
        vec![5, 5],
        "a key maps to key % logical_shards"
    );
    assert_eq!(take(&m, SHARDS - 1, 3).await.unwrap().len(), 3);
    let url = m.url.clone();
    assert!(url.starts_with("http://"));
    stop(&m).await;
}

/// A holder that names a url nobody answers at: requests wait `peers.wait_ms`, then answer
/// `no_leader`; never ids of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_holder_means_no_leader_after_the_wait() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let leases = store.worker_leases().unwrap();
    let group = idmint_core::NamespaceName::new("photos:shards").unwrap();
    let layout = idmint_node::shards::range_layout_text(
        &Layout::instagram(),
        &idmint_node::config::shards::ShardsConfig {
            logical: SHARDS,
            range: PER_RANGE,
        },
    );
    leases
        .acquire(&idmint_store::LeaseRequest {
            group,
            workers: SHARDS / PER_RANGE,
            choice: idmint_store::WorkerChoice::Exactly(1),
            prefer_floor_at_most: None,
            holder: "ghost pid 1 at http://127.0.0.1:9 lease 0".into(),
            layout,
            ttl: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let m = member(store).await;
    let started = std::time::Instant::now();
    let e = take(&m, PER_RANGE, 1).await.unwrap_err();
    assert_eq!(e.code().as_str(), "no_leader", "{e}");
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "answered after {:?}",
        started.elapsed()
    );
    // Another range is free: served here.
    assert_eq!(take(&m, 0, 2).await.unwrap().len(), 2);
    stop(&m).await;
}
