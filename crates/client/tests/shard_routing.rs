//! Routing by the shard map against three live `idmint serve` nodes sharing one PostgreSQL
//! authority and the shard-owned namespace `photos` (the conformance suite's `owned` topology:
//! 64 shards in ranges of 8). Needs PostgreSQL (`idmint_testkit::postgres`: an unreachable
//! server fails the test) and the `idmint` binary (`cargo build --bin idmint`).
//!
//! The ranges are spread first: range r is asked for through node r % 3 alone, which takes its
//! lease. Then a client of the first node only (no map to follow) has most requests forwarded,
//! and a client of all three, once it learned the map, has none: every request went to its
//! shard's holder. Every id decodes to the shard asked for (or its key's). With one node killed,
//! a new client learns the map from the others and still sends their ranges to them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod conformance_support;

use conformance_support::topology::Topology;
use idmint_client::keys::shard_of_preset;
use idmint_client::{Client, Id, ShardRoute};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const SHARDS: u64 = 64;
const PER_RANGE: u64 = 8;
const NODES: [&str; 3] = ["s1", "s2", "s3"];
const REQUESTS: u64 = 120;

/// `GET path` on the HTTP port `port`: the body.
fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    body.to_owned()
}

/// Requests for `photos` the nodes forwarded, summed over the three.
fn forwards(topology: &Topology) -> u64 {
    forwards_of(topology, &NODES)
}

/// Requests for `photos` the nodes `names` forwarded, summed.
fn forwards_of(topology: &Topology, names: &[&str]) -> u64 {
    names
        .iter()
        .map(|name| {
            let metrics = http_get(topology.nodes[*name].http, "/metrics");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix("idmint_shard_forwards_total{namespace=\"photos\"} "))
                .map_or(0, |v| v.trim().parse::<u64>().unwrap())
        })
        .sum()
}

/// A small deterministic generator (xorshift), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `REQUESTS` routed requests of 1 to 3 ids through `client`, half by shard and half by key;
/// asserts each id decodes to the shard asked for.
async fn ask(client: &Client, seed: u64) {
    let mut rng = Rng(seed);
    for i in 0..REQUESTS {
        let (route, shard) = if i % 2 == 0 {
            let shard = rng.next() % SHARDS;
            (ShardRoute::Shard(shard), shard)
        } else {
            let key = rng.next();
            (ShardRoute::Key(key), key % SHARDS)
        };
        let count = 1 + rng.next() % 3;
        let ids = client.next_routed("photos", count, route).await.unwrap();
        assert_eq!(ids.len() as u64, count);
        for id in ids {
            let Id::Snowflake(id) = id else {
                panic!("{id:?} is not a snowflake id")
            };
            assert_eq!(
                shard_of_preset("instagram", id).unwrap(),
                shard,
                "{route:?}"
            );
        }
    }
}

#[test]
fn a_client_of_several_nodes_sends_each_shard_to_its_holder() {
    let data = conformance_support::suite::load().unwrap();
    let topology = Topology::start(&data, "owned").unwrap();
    let urls = topology.urls("grpc").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Range r is taken by node r % 3, the one asked for it first.
        for range in 0..SHARDS / PER_RANGE {
            let url = urls[(range % 3) as usize].clone();
            let one = Client::connect([url]).await.unwrap();
            let shard = range * PER_RANGE;
            one.next_routed("photos", 1, ShardRoute::Shard(shard))
                .await
                .unwrap();
            one.close().await;
        }
        let spread = forwards(&topology);

        // Without a map: everything goes to s1, which holds 3 ranges of 8.
        let first_only = Client::connect([urls[0].clone()]).await.unwrap();
        ask(&first_only, 0x9e37_79b9_7f4a_7c15).await;
        first_only.close().await;
        let unrouted = forwards(&topology) - spread;
        assert!(
            unrouted >= REQUESTS / 3,
            "a client of s1 alone had {unrouted} of {REQUESTS} requests forwarded"
        );

        // With the map: the first routed request learns it, and each goes to its holder.
        let all = Client::connect(urls.clone()).await.unwrap();
        ask(&all, 0x2545_f491_4f6c_dd1d).await;
        all.close().await;
        let routed = forwards(&topology) - spread - unrouted;
        assert!(
            routed <= 2,
            "a client of all three nodes had {routed} of {REQUESTS} requests forwarded \
             (without the map: {unrouted})"
        );
    });

    // s3 killed: a new client learns the map from the two that answer, and the ranges of s1
    // and s2 still go to their holders.
    let mut topology = topology;
    topology.node_mut("s3").unwrap().kill().unwrap();
    runtime.block_on(async {
        let before = forwards_of(&topology, &NODES[..2]);
        let client = Client::connect(urls.clone()).await.unwrap();
        let mut rng = Rng(7);
        let mut asked = 0;
        while asked < REQUESTS {
            let shard = rng.next() % SHARDS;
            if (shard / PER_RANGE) % 3 == 2 {
                continue; // s3's ranges: their lease is live, nobody serves them until it expires
            }
            let ids = client
                .next_routed("photos", 1, ShardRoute::Shard(shard))
                .await
                .unwrap();
            let Some(&Id::Snowflake(id)) = ids.first() else {
                panic!("{ids:?}: no snowflake id")
            };
            assert_eq!(shard_of_preset("instagram", id).unwrap(), shard);
            asked += 1;
        }
        client.close().await;
        let routed = forwards_of(&topology, &NODES[..2]) - before;
        assert!(
            routed <= 2,
            "with s3 down, {routed} of {REQUESTS} requests were forwarded"
        );
    });
}
