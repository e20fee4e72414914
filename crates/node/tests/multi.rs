//! A node on a multi authority whose members go down and come back: `/readyz` and `/metrics`
//! say which member is down, and the node stays ready while one member is up. Also: answers
//! spanning two members stay increasing, and the accounting identity (reserved = served +
//! buffered + burned + given back) holds in `/metrics` and the namespace detail through an
//! outage.
//!
//! The members are real [`MemoryAuthority`]s behind a switch that makes them answer
//! `Unavailable`; the multi authority's back-off runs on a [`ManualClock`] the test advances, so
//! nothing sleeps.

#![allow(clippy::unwrap_used)]

mod support;

use idmint_core::ManualClock;
use idmint_node::{Authority, FileConfig};
use idmint_store::{MemoryAuthority, MultiAuthority};
use std::sync::Arc;
use support::TestNode;

use idmint_store::conformance::SwitchedAuthority as Switchable;

/// Guards against a member outage that leaves no trace and a `/readyz` that cannot say which
/// member is down: with one member down the node stays ready and names it, in `/readyz` and in
/// `idmint_authority_member_up`; with both down it is not ready; once they answer again (after
/// the back-off) it is ready with both up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_metrics_show_each_member() {
    let clock = Arc::new(ManualClock::at_unix_millis(1_000));
    let (a, b) = (
        Arc::new(Switchable::default()),
        Arc::new(Switchable::default()),
    );
    let multi = MultiAuthority::with_clock(
        vec![(a.clone() as Arc<dyn Authority>, 1), (b.clone(), 0)],
        clock.clone(),
    )
    .unwrap();
    let config = FileConfig::parse("[defaults]\nstep = 2\n").unwrap().node;
    let node = TestNode::start(config, Arc::new(multi)).await;

    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["authority"], "multi");
    assert_eq!(ready["members"][0]["number"], 1, "{ready}");
    assert_eq!(ready["members"][0]["kind"], "memory", "{ready}");
    assert_eq!(ready["members"][0]["offset"], 1, "{ready}");
    assert_eq!(ready["members"][0]["up"], true, "{ready}");
    assert_eq!(ready["members"][1]["up"], true, "{ready}");
    let (status, body) = node.get("/v1/ids/orders?count=2").await;
    assert_eq!(status, 200, "{body}");

    a.set_down(true);
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "one member up is ready: {ready}");
    assert_eq!(ready["members"][0]["up"], false, "{ready}");
    let error = ready["members"][0]["last_error"].as_str().unwrap();
    assert!(error.contains("switched off"), "{ready}");
    assert_eq!(ready["members"][1]["up"], true, "{ready}");
    let (_, metrics) = node.text("/metrics").await;
    for line in [
        "idmint_authority_member_up{member=\"1\",kind=\"memory\",offset=\"1\"} 0\n",
        "idmint_authority_member_up{member=\"2\",kind=\"memory\",offset=\"0\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line}{metrics}");
    }
    // The namespace detail says which member (which residue class) is down, too.
    let (status, detail) = node.get("/v1/namespaces/orders").await;
    assert_eq!(status, 200, "{detail}");
    let members = &detail["state"]["members"];
    assert_eq!(members[0]["up"], false, "{detail}");
    assert_eq!(members[0]["offset"], 1, "{detail}");
    assert_eq!(members[1]["up"], true, "{detail}");

    b.set_down(true);
    let (status, body) = node.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "authority_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("member 1 (memory)") && message.contains("member 2 (memory)"),
        "{message}"
    );

    a.set_down(false);
    b.set_down(false);
    clock.advance_millis(1_000);
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["members"][0]["up"], true, "{ready}");
    assert!(ready["members"][0].get("last_error").is_none(), "{ready}");
    let (_, metrics) = node.text("/metrics").await;
    assert!(
        metrics
            .contains("idmint_authority_member_up{member=\"1\",kind=\"memory\",offset=\"1\"} 1\n"),
        "{metrics}"
    );
    node.stop().await;
}

/// Guards against an answer spanning two members' blocks coming out as `[…, 47, 49, 2, 4, …]`
/// (a multi authority and a buffered cache), against the documented "ids of one answer are
/// strictly increasing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_spanning_two_members_is_increasing() {
    let multi = MultiAuthority::new(vec![
        (Arc::new(MemoryAuthority::new()) as Arc<dyn Authority>, 1),
        (Arc::new(MemoryAuthority::new()), 0),
    ])
    .unwrap();
    let config = FileConfig::parse(
        "[namespaces.orders]\nkind = \"sequence\"\nstep = 2\ncache = \"fixed\"\nblock_size = 10\n",
    )
    .unwrap()
    .node;
    let node = TestNode::start(config, Arc::new(multi)).await;
    let mut all = Vec::new();
    for _ in 0..20 {
        let (status, v) = node.get("/v1/ids/orders?count=15").await;
        assert_eq!(status, 200, "{v}");
        let ids: Vec<u64> = v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().parse().unwrap())
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one answer is not increasing: {ids:?}"
        );
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "an id was handed out twice");
}

/// Reads one sample's value from a Prometheus text body.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series}:\n{text}"))
        .parse::<f64>()
        .unwrap() as u64
}

/// Guards against a failed request losing its ids silently (a `count=60` request that meets 38
/// buffered ids and an unreachable authority answers 503; the 38 ids must not count as served,
/// neither burned nor handed out): through an outage, every id this node reserved is
/// served, buffered, burned or given back, in `/metrics` and in the namespace detail alike,
/// and the ids taken by the failed request are served first after recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounting_identity_holds_through_an_outage() {
    let authority = Arc::new(Switchable::default());
    let config = FileConfig::parse(
        "[server]\nrefill_wait_ms = 200\n[namespaces.orders]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 50\n",
    )
    .unwrap()
    .node;
    let node = TestNode::start(config, authority.clone()).await;
    let (status, body) = node.get("/v1/ids/orders?count=12").await;
    assert_eq!(status, 200, "{body}");
    authority.set_down(true);
    // More than the buffer can hold: fails once the buffer is drained, taking nothing.
    let (status, body) = node.get("/v1/ids/orders?count=5000").await;
    assert_eq!(status, 503, "{body}");

    let check = |metrics: &str, detail: &serde_json::Value| {
        let m = |family: &str| sample(metrics, &format!("{family}{{namespace=\"orders\"}}"));
        let (reserved, served, buffered, burned, given) = (
            m("idmint_ids_reserved"),
            m("idmint_ids_served_total"),
            m("idmint_buffer_ids"),
            m("idmint_ids_burned"),
            m("idmint_ids_given_back"),
        );
        assert_eq!(
            reserved,
            served + buffered + burned + given,
            "reserved {reserved} != served {served} + buffered {buffered} + burned {burned} + \
             given back {given}:\n{metrics}"
        );
        let state = &detail["state"];
        assert_eq!(state["ids_reserved"], reserved, "{detail}");
        assert_eq!(state["ids_served"], served, "{detail}");
        assert_eq!(state["ids_buffered"], buffered, "{detail}");
        assert_eq!(state["ids_burned"], burned, "{detail}");
        served
    };
    let (_, metrics) = node.text("/metrics").await;
    let (_, detail) = node.get("/v1/namespaces/orders").await;
    assert_eq!(
        check(&metrics, &detail),
        12,
        "the failed request counted ids as served"
    );

    authority.set_down(false);
    let deadline = tokio::time::Instant::now() + support::DEADLINE;
    let ids = loop {
        let (status, body) = node.get("/v1/ids/orders?count=3").await;
        if status == 200 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node does not serve again: {body}"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(
        ids["ids"][0], "13",
        "the ids taken by the failed request come first: {ids}"
    );
    let (_, metrics) = node.text("/metrics").await;
    let (_, detail) = node.get("/v1/namespaces/orders").await;
    check(&metrics, &detail);
}

/// Decode knows every member's residue class (an id of the odd member is not reported
/// `in_namespace: false`) and names the member owning it, and a member that lost its data shows as out of service in
/// `/readyz` while the other serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_knows_every_member_and_readyz_shows_a_lost_member() {
    let (a, b) = (
        Arc::new(Switchable::default()),
        Arc::new(Switchable::default()),
    );
    let multi =
        MultiAuthority::new(vec![(a.clone() as Arc<dyn Authority>, 1), (b.clone(), 0)]).unwrap();
    let config = FileConfig::parse(
        "[defaults]\nstep = 2\n\n[namespaces.orders]\nkind = \"sequence\"\ncache = \"off\"\n",
    )
    .unwrap()
    .node;
    let node = TestNode::start(config, Arc::new(multi)).await;
    let (status, body) = node.get("/v1/ids/orders?count=4").await;
    assert_eq!(status, 200, "{body}");
    for id in [1u64, 2, 3, 4] {
        let (status, decoded) = node.get(&format!("/v1/decode/orders/{id}")).await;
        assert_eq!(status, 200, "{decoded}");
        assert_eq!(decoded["in_namespace"], true, "{id}: {decoded}");
        // Member 1 owns the odd ids (offset 1), member 2 the even ones (offset 0).
        assert_eq!(decoded["residue"], id % 2, "{id}: {decoded}");
        assert_eq!(decoded["member"], 2 - id % 2, "{id}: {decoded}");
    }
    a.wipe();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        let (status, body) = node.get("/v1/ids/orders?count=3").await;
        assert_eq!(status, 200, "{body}");
        for id in body["ids"].as_array().unwrap() {
            let id: u64 = id.as_str().unwrap().parse().unwrap();
            assert_eq!(id % 2, 0, "the lost member served {id}");
            assert!(seen.insert(id), "{id} twice");
        }
    }
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let why = ready["members"][0]["out_of_service"].as_str().unwrap_or("");
    assert!(why.contains("no record of namespace orders"), "{ready}");
}

/// Worker leases on a multi authority live in its first member: two nodes on the same members
/// never share a worker id (the second with a taken fixed id is refused naming the holder), and
/// the second member holds no lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_authority_leases_from_its_first_member() {
    let (a, b) = (
        Arc::new(MemoryAuthority::new()),
        Arc::new(MemoryAuthority::new()),
    );
    let multi = || -> Arc<dyn Authority> {
        Arc::new(
            MultiAuthority::new(vec![
                (a.clone() as Arc<dyn Authority>, 0),
                (b.clone() as Arc<dyn Authority>, 1),
            ])
            .unwrap(),
        )
    };
    let events = |worker: &str| {
        FileConfig::parse(&format!(
            "[leases]\nttl_ms = 1500\nfloor_ahead_ms = 600\nsafety_margin_ms = 500\n\n\
             [namespaces.events]\nkind = \"snowflake\"\nworker = {worker}\n"
        ))
        .unwrap()
        .node
    };
    let first = idmint_node::Node::start(events("1"), multi())
        .await
        .unwrap();
    let refused = idmint_node::Node::start(events("1"), multi())
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("worker 1 of group events is held by"),
        "{refused}"
    );
    let second = idmint_node::Node::start(events("\"lease\""), multi())
        .await
        .unwrap();
    let group = idmint_core::NamespaceName::new("events").unwrap();
    let (_, slots) = a
        .worker_leases()
        .unwrap()
        .group(&group)
        .await
        .unwrap()
        .unwrap();
    let live: Vec<u64> = slots
        .iter()
        .filter(|s| s.is_live())
        .map(|s| s.worker)
        .collect();
    assert_eq!(live, vec![0, 1]);
    assert!(b
        .worker_leases()
        .unwrap()
        .group(&group)
        .await
        .unwrap()
        .is_none());
    first.shutdown().await;
    second.shutdown().await;
}
