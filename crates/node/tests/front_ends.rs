//! Every door keeps the same rules: the front-end conformance suite. Each property is written
//! once against the [`doors::Door`] transport trait and run, by `conformance_tests!`, for every
//! door of a node: HTTP, gRPC and RESP, each plain and over TLS (a certificate from a CA made
//! at test time). Adding a front-end is one line of that macro and one `Door` implementation.
//!
//! The properties: the one count rule (absent is one id; 0 and above the limit are
//! `invalid_count`, for ids against `server.max_count` and blocks against
//! `server.max_block_request`); reads create nothing (decode, info and give-back of an unknown
//! name are `unknown_namespace`, and neither the node nor the authority holds it afterwards);
//! authentication refusals (`unauthorized`, `forbidden`, `rate_limited`) create nothing; a tiny
//! 32-bit namespace hands out its ids then `namespace_exhausted` (invariant 6), and once
//! retired `namespace_retired`, as one with ids left does after its retirement; a leased
//! block's tail given back is handed out next, and only once (invariant 3); a `shard` or `key`
//! sent to a namespace whose node field is not the data's shard (or both at once) is
//! `invalid_request` naming the namespace, and creates and hands out nothing; bad and oversized
//! input on the raw socket is refused and closes only its connection; the connection policy
//! (the first request within `header_read_timeout_ms` of the accept, then
//! `idle_timeout_ms` of quiet) and the connection limit, measured on the raw socket; and the
//! drain (a request in flight finishes, no new connection is accepted, stop-now cuts the
//! rest, the hand-back comes after every request, invariant 3). The node-to-node calls, which
//! gRPC alone carries (the worker-lease calls and `Forward`), answer only their role: the
//! tier's token on its own groups, never an internal group, and a forward only for the
//! cluster's peer token, with or without `[auth]`, plain and over TLS ([`node_to_node`]).
//!
//! Every node runs in process (`idmint_node::Server`) on `127.0.0.1:0` with short timeouts
//! where a property needs them. No test sleeps to order events: each waits for an answer, a
//! closed socket, or a condition polled against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod doors;

use doors::gate::Gated;
use doors::raw;
use doors::{
    assert_refused, hash, ok, poll_until, Decoded, Door, Failure, Fixture, Route, Security,
};
use idmint_api::ErrorCode;
use idmint_core::NamespaceName;
use std::collections::HashSet;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Runs every property for each door listed: `name => DoorType, Plain|Tls;`.
macro_rules! conformance_tests {
    ($($door:ident => $ty:ty, $security:ident;)*) => {$(
        mod $door {
            use super::doors::Security;
            conformance_tests!(@each $ty, $security;
                the_count_rule,
                reads_create_nothing,
                auth_refusals_create_nothing,
                a_tiny_namespace_runs_out_clearly,
                a_given_back_tail_is_handed_out_next_once,
                a_shard_or_key_is_refused_by_an_ordinary_namespace,
                bad_input_closes_only_its_connection,
                silent_connections_do_not_hold_the_limit_past_their_deadline,
                silent_and_quiet_connections_are_closed_at_their_deadlines,
                drain_finishes_requests_then_cuts_the_rest_then_hands_back);
        }
    )*};
    (@each $ty:ty, $security:ident; $($property:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $property() {
            crate::$property::<$ty>(Security::$security).await
        }
    )*};
}

conformance_tests! {
    http => crate::doors::http::Http, Plain;
    https => crate::doors::http::Http, Tls;
    grpc => crate::doors::grpc::Grpc, Plain;
    grpc_tls => crate::doors::grpc::Grpc, Tls;
    resp => crate::doors::resp::Resp, Plain;
    resp_tls => crate::doors::resp::Resp, Tls;
}

/// Fails unless `ids` strictly increase.
#[track_caller]
fn assert_increasing(ids: &[u64]) {
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids not strictly increasing: {ids:?}"
    );
}

/// Whether the authority holds a record of `name`.
async fn stored(f: &Fixture, name: &str) -> bool {
    let name = NamespaceName::new(name).unwrap();
    f.authority.state(&name).await.unwrap().is_some()
}

/// Fails if the node serves `name` or its authority holds it.
async fn assert_not_created(f: &Fixture, name: &str) {
    assert!(
        f.node.served_namespace(name).is_none(),
        "the node serves {name}"
    );
    assert!(!stored(f, name).await, "the authority holds {name}");
}

/// At most 100 ids a request, 5,000 a block.
const COUNTS: &str = "[server]\nmax_count = 100\nmax_block_request = 5000\n";

async fn the_count_rule<D: Door>(security: Security) {
    let f = Fixture::start(COUNTS, security).await;
    let door = f.door::<D>();
    // Checked before anything is looked up: a refused count creates nothing.
    assert_refused(door.ids("fresh", Some(0)).await, ErrorCode::InvalidCount);
    assert_refused(door.ids("fresh", Some(101)).await, ErrorCode::InvalidCount);
    assert_refused(door.block("fresh", 0).await, ErrorCode::InvalidCount);
    assert_refused(door.block("fresh", 5001).await, ErrorCode::InvalidCount);
    assert_not_created(&f, "fresh").await;

    let one = ok(door.ids("counted", None).await);
    assert_eq!(one.len(), 1, "absent is one id: {one:?}");
    let most = ok(door.ids("counted", Some(100)).await);
    assert_eq!(most.len(), 100);
    assert_increasing(&[&one[..], &most[..]].concat());
    assert_refused(door.ids("counted", Some(0)).await, ErrorCode::InvalidCount);
    assert_refused(
        door.ids("counted", Some(101)).await,
        ErrorCode::InvalidCount,
    );

    let block = ok(door.block("counted", 5000).await);
    assert!(
        (1..=5000).contains(&block.ids()) && block.start > most[99],
        "{block:?} after {}",
        most[99]
    );
    assert_refused(door.block("counted", 0).await, ErrorCode::InvalidCount);
    assert_refused(door.block("counted", 5001).await, ErrorCode::InvalidCount);
    f.stop().await;
}

async fn reads_create_nothing<D: Door>(security: Security) {
    // auto_create is on: only ids and blocks may create a namespace.
    let f = Fixture::start("", security).await;
    let door = f.door::<D>();
    assert_refused(door.decode("ghost", "5").await, ErrorCode::UnknownNamespace);
    if let Some(info) = door.info("ghost").await {
        assert_refused(info, ErrorCode::UnknownNamespace);
    }
    assert_refused(
        door.give_back("ghost", 7, 10, 20, 1).await,
        ErrorCode::UnknownNamespace,
    );
    assert_not_created(&f, "ghost").await;

    // A namespace that exists reads as it is.
    let ids = ok(door.ids("real", Some(3)).await);
    let decoded = ok(door.decode("real", &ids[2].to_string()).await);
    let expected = Decoded {
        id: ids[2],
        in_namespace: true,
        issued: true,
        residue: 0,
    };
    assert_eq!(decoded, expected);
    if let Some(info) = door.info("real").await {
        assert_eq!(ok(info), "real");
    }
    f.stop().await;
}

const TAKER: &str = "idmint_conformance_taker";
const READER: &str = "idmint_conformance_reader";

async fn auth_refusals_create_nothing<D: Door>(security: Security) {
    // `taker` may take 5 ids at once, then one per 100 s: the second request is refused on
    // any machine.
    let toml = format!(
        "[[auth.tokens]]\nname = \"taker\"\nhash = \"{}\"\n\
         scopes = {{ \"orders.*\" = [\"ids\", \"blocks\", \"read\"] }}\nrate = 0.01\nburst = 5\n\n\
         [[auth.tokens]]\nname = \"reader\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"read\"] }}\n",
        hash(TAKER),
        hash(READER)
    );
    let f = Fixture::start(&toml, security).await;
    let anonymous = f.door::<D>();
    let stranger = anonymous.with_token(Some("idmint_not_a_token"));
    let taker = anonymous.with_token(Some(TAKER));
    let reader = anonymous.with_token(Some(READER));

    for door in [&anonymous, &stranger] {
        assert_refused(door.ids("orders.eu", None).await, ErrorCode::Unauthorized);
        assert_refused(door.block("orders.eu", 10).await, ErrorCode::Unauthorized);
        assert_refused(door.decode("orders.eu", "1").await, ErrorCode::Unauthorized);
        assert_refused(
            door.give_back("orders.eu", 7, 10, 20, 1).await,
            ErrorCode::Unauthorized,
        );
    }
    assert_refused(reader.ids("orders.eu", None).await, ErrorCode::Forbidden);
    assert_refused(reader.block("orders.eu", 10).await, ErrorCode::Forbidden);
    assert_refused(taker.ids("users", None).await, ErrorCode::Forbidden);
    assert_refused(taker.block("users", 10).await, ErrorCode::Forbidden);
    assert_not_created(&f, "orders.eu").await;
    assert_not_created(&f, "users").await;

    let burst = ok(taker.ids("orders.eu", Some(5)).await);
    assert_eq!(burst.len(), 5);
    assert_refused(taker.ids("orders.eu", None).await, ErrorCode::RateLimited);
    // The reader reads what exists.
    let decoded = ok(reader.decode("orders.eu", &burst[0].to_string()).await);
    assert!(decoded.issued, "{decoded:?}");
    f.stop().await;
}

/// A 32-bit namespace with 10 ids left before its maximum, 2^31 - 1, and one with all left.
const TINY: &str = "[server]\nauto_create = false\n\n[namespaces.tiny]\nkind = \"sequence\"\n\
                    width = 32\nstart = 2147483638\ncache = \"fixed\"\nblock_size = 1000\n\n\
                    [namespaces.spare]\nkind = \"sequence\"\n";

async fn a_tiny_namespace_runs_out_clearly<D: Door>(security: Security) {
    let f = Fixture::start(TINY, security).await;
    let door = f.door::<D>();
    let mut all = Vec::new();
    let refused = loop {
        match door.ids("tiny", Some(4)).await {
            Ok(ids) => {
                assert!((1..=4).contains(&ids.len()), "{ids:?}");
                all.extend(ids);
                assert!(
                    all.len() <= 10,
                    "more ids than the namespace holds: {all:?}"
                );
            }
            Err(e) => break Err::<(), Failure>(e),
        }
    };
    assert_refused(refused, ErrorCode::NamespaceExhausted);
    assert_eq!(all, (2_147_483_638..=2_147_483_647).collect::<Vec<u64>>());
    assert_refused(door.ids("tiny", None).await, ErrorCode::NamespaceExhausted);
    assert_refused(door.block("tiny", 5).await, ErrorCode::NamespaceExhausted);
    ok(door.ids("spare", Some(3)).await);
    // An operator retires both (`idmint admin retire`): not exhausted, retired.
    for ns in ["tiny", "spare"] {
        let retired = f
            .node
            .advance(ns, idmint_store::Advance::Retire, None)
            .await
            .unwrap();
        assert!(retired.retired, "{retired:?}");
        assert_refused(door.ids(ns, None).await, ErrorCode::NamespaceRetired);
        assert_refused(door.block(ns, 5).await, ErrorCode::NamespaceRetired);
    }
    f.stop().await;
}

const LEASES: &str = "[server]\nauto_create = false\n\n[namespaces.lower]\nkind = \"sequence\"\n\
                      cache = \"fixed\"\nblock_size = 10000\n";

async fn a_given_back_tail_is_handed_out_next_once<D: Door>(security: Security) {
    let f = Fixture::start(LEASES, security).await;
    let door = f.door::<D>();
    let lease = ok(door.block("lower", 100).await);
    assert_eq!((lease.ids(), lease.step), (100, 1), "{lease:?}");
    assert_ne!(lease.lease, 0, "a buffered block is leased: {lease:?}");
    let tail = lease.start + 40;
    let given = ok(door
        .give_back("lower", lease.lease, tail, lease.end, lease.step)
        .await);
    assert!(given.given_back && given.ids == 60, "{given:?}");
    let next = ok(door.ids("lower", Some(60)).await);
    assert_eq!(next, (tail..lease.end).collect::<Vec<u64>>());
    // Once only: the same tail again is refused (and burned), whatever the door.
    let again = ok(door
        .give_back("lower", lease.lease, tail, lease.end, lease.step)
        .await);
    assert!(!again.given_back && again.ids == 0, "{again:?}");
    let after = ok(door.ids("lower", Some(1)).await);
    assert!(
        after[0] >= lease.end,
        "{after:?} repeats the block {lease:?}"
    );
    // A lease the node never granted takes nothing back.
    let other = ok(door.block("lower", 10).await);
    let forged = ok(door
        .give_back("lower", other.lease ^ 1, other.start + 5, other.end, 1)
        .await);
    assert!(!forged.given_back, "{forged:?}");
    f.stop().await;
}

/// `orders` and `events` declared (a sequence, a snowflake on the node's worker lease), a
/// family `tenant.*`, and auto-create on.
const ORDINARY: &str = "[namespaces.orders]\nkind = \"sequence\"\ncache = \"off\"\n\n\
                        [namespaces.events]\nkind = \"snowflake\"\nworker = 3\n\n\
                        [namespaces.\"tenant.*\"]\nkind = \"sequence\"\n";

/// `answer` refused as `invalid_request`, its message naming namespace `ns`.
#[track_caller]
fn assert_not_routed(answer: doors::Answer<Vec<u64>>, ns: &str) {
    match &answer {
        Err(Failure::Refused { message, .. }) => assert!(
            message.contains(&format!("\"{ns}\"")) && message.contains("shard"),
            "the refusal does not name {ns} and the shard: {message}"
        ),
        other => panic!("expected a refusal naming {ns}, got {other:?}"),
    }
    assert_refused(answer, ErrorCode::InvalidRequest);
}

async fn a_shard_or_key_is_refused_by_an_ordinary_namespace<D: Door>(security: Security) {
    let f = Fixture::start(ORDINARY, security).await;
    let door = f.door::<D>();
    let shard = Route {
        shard: Some(7),
        key: None,
    };
    let key = Route {
        shard: None,
        key: Some(42),
    };
    // A name set up with the defaults (auto-created, a family's member) is a sequence: refused
    // before it is set up, so nothing is created.
    for ns in ["fresh", "tenant.eu"] {
        for route in [shard, key] {
            assert_not_routed(door.ids_routed(ns, Some(2), route).await, ns);
        }
        assert_not_created(&f, ns).await;
    }
    // A declared sequence hands out nothing for a refused request: its first ids come next.
    assert_not_routed(door.ids_routed("orders", Some(5), shard).await, "orders");
    assert_not_routed(door.ids_routed("orders", None, key).await, "orders");
    assert_eq!(ok(door.ids("orders", Some(3)).await), vec![1, 2, 3]);
    assert_not_routed(door.ids_routed("orders", Some(1), key).await, "orders");
    assert_eq!(ok(door.ids("orders", Some(1)).await), vec![4]);
    // A snowflake namespace on the node's worker lease: its node field is the worker id, not
    // the data's shard.
    for route in [shard, key] {
        assert_not_routed(door.ids_routed("events", Some(1), route).await, "events");
    }
    let events = ok(door.ids("events", Some(2)).await);
    assert_increasing(&events);
    // Both at once: refused whatever the namespace, and nothing is created.
    let both = Route {
        shard: Some(1),
        key: Some(1),
    };
    for ns in ["orders", "events", "fresh"] {
        assert_refused(
            door.ids_routed(ns, None, both).await,
            ErrorCode::InvalidRequest,
        );
    }
    assert_not_created(&f, "fresh").await;
    assert_eq!(ok(door.ids("orders", None).await), vec![5]);
    f.stop().await;
}

async fn bad_input_closes_only_its_connection<D: Door>(security: Security) {
    let f = Fixture::start("", security).await;
    let door = f.door::<D>();
    // A connection open before the bad input goes on being served after it.
    let mut bystander = raw::connect(door.target()).await.unwrap();
    door.one_request(&mut bystander).await;
    door.bad_input().await;
    door.one_request(&mut bystander).await;
    f.every_door_answers("after").await;
    f.stop().await;
}

/// Short deadlines: the first request within 400 ms, then 1 s of quiet; 3 connections.
const POLICY: &str =
    "[server]\nheader_read_timeout_ms = 400\nidle_timeout_ms = 1000\nmax_connections = 3\n";
const FIRST_REQUEST: Duration = Duration::from_millis(400);
const IDLE: Duration = Duration::from_millis(1000);

async fn silent_and_quiet_connections_are_closed_at_their_deadlines<D: Door>(security: Security) {
    let f = Fixture::start(POLICY, security).await;
    let door = f.door::<D>();
    let target = f.target(D::PROTOCOL);
    let silent = async {
        let (mut tcp, since) = raw::silent(&target).await;
        let (_, closed) = raw::read_to_close(&mut tcp).await;
        (since, closed)
    };
    let quiet = async {
        let mut conn = raw::connect(&target).await.unwrap();
        door.one_request(&mut conn).await;
        let since = Instant::now();
        let (_, closed) = raw::read_to_close(&mut conn).await;
        (since, closed)
    };
    let ((s1, c1), (s2, c2)) = tokio::join!(silent, quiet);
    raw::assert_closed_near("a connection that sent nothing", s1, c1, FIRST_REQUEST);
    raw::assert_closed_near("a connection quiet after a request", s2, c2, IDLE);
    f.stop().await;
}

async fn silent_connections_do_not_hold_the_limit_past_their_deadline<D: Door>(security: Security) {
    let f = Fixture::start(POLICY, security).await;
    let target = f.target(D::PROTOCOL);
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(raw::silent(&target).await);
    }
    // The three hold every slot: the request waits in the backlog until the first of them is
    // closed at its deadline, then is served.
    let started = Instant::now();
    let ids = ok(f.door::<D>().ids("limited", Some(1)).await);
    let took = started.elapsed();
    assert_eq!(ids.len(), 1);
    let held = FIRST_REQUEST.saturating_sub(started - silent[0].1);
    assert!(
        took + Duration::from_millis(150) >= held && took <= FIRST_REQUEST + Duration::from_secs(3),
        "served after {took:?}; the silent connections held every slot for {held:?}"
    );
    for (tcp, since) in &mut silent {
        let (_, closed) = raw::read_to_close(tcp).await;
        raw::assert_closed_near("a silent connection", *since, closed, FIRST_REQUEST);
    }
    f.stop().await;
}

/// `held_a` and `held_b` hold their requests until the gate opens; `kept` has a buffer to
/// hand back.
const DRAIN: &str =
    "[server]\nauto_create = false\ndrain_timeout_ms = 2000\nrefill_wait_ms = 60000\n\n\
     [namespaces.kept]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 1000\n\n\
     [namespaces.held_a]\nkind = \"sequence\"\ncache = \"off\"\n\n\
     [namespaces.held_b]\nkind = \"sequence\"\ncache = \"off\"\n";

async fn drain_finishes_requests_then_cuts_the_rest_then_hands_back<D: Door>(security: Security) {
    let (gated, mut started) = Gated::new();
    let mut f = Fixture::start_on(DRAIN, security, gated.clone()).await;
    let door = f.door::<D>();
    assert_eq!(ok(door.ids("kept", Some(1)).await).len(), 1);
    let spawn = |ns: &'static str| {
        let door = door.clone();
        tokio::spawn(async move { door.ids(ns, Some(1)).await })
    };
    let (a, b) = (spawn("held_a"), spawn("held_b"));
    let mut held = HashSet::new();
    while held.len() < 2 {
        let name = tokio::time::timeout(doors::DEADLINE, started.recv())
            .await
            .expect("both requests reach the authority")
            .unwrap();
        held.insert(name);
    }

    f.shutdown.drain();
    let addr = f.target(D::PROTOCOL).addr;
    poll_until("the listener refuses new connections", || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    // A request in flight finishes during the drain.
    gated.open("held_a");
    let a = tokio::time::timeout(doors::DEADLINE, a)
        .await
        .expect("the request in flight finishes")
        .unwrap();
    assert_eq!(ok(a), vec![1]);
    // The other is cut at the drain deadline, before the hand-back.
    let report = f.served().await;
    assert_eq!(
        gated.cut(),
        1,
        "the request still held was dropped before the hand-back"
    );
    assert_eq!((report.given_back, report.burned), (999, 0), "{report:?}");
    let b = tokio::time::timeout(doors::DEADLINE, b)
        .await
        .expect("the cut request's client sees the end")
        .unwrap();
    assert!(
        matches!(b, Err(Failure::NoAnswer(_))),
        "cut, not answered: {b:?}"
    );
}

/// The node-to-node calls, which only gRPC carries: the worker-lease calls (`AcquireWorker`,
/// `RenewWorker`, `ReleaseWorker`, `WorkerGroup`) and `Forward`, plain and over TLS.
mod node_to_node {
    use super::doors::grpc::{failure, Grpc};
    use super::doors::{assert_refused, hash, Answer, Door, Fixture, Security};
    use idmint_api::ErrorCode;
    use idmint_node::grpc::proto;

    const APP: &str = "idmint_app_n2n";
    const TIER: &str = "idmint_tier_n2n";
    const PEER: &str = "idmint_peer_n2n";

    /// A strict namespace `chat` (this node leads it alone) and a snowflake namespace
    /// `events`, `[peers]` with the cluster's token, and with `auth` one token per role.
    fn toml(auth: bool) -> String {
        let mut toml = format!(
            "[server]\ngrpc = \"127.0.0.1:1\"\n\n[peers]\nadvertise = \"http://127.0.0.1:1\"\n\
             token = \"{PEER}\"\n\n\
             [namespaces.chat]\nkind = \"sequence\"\norder = \"strict\"\n\n\
             [namespaces.events]\nkind = \"snowflake\"\n"
        );
        if auth {
            toml.push_str(&format!(
                "\n[auth]\n\
                 [[auth.tokens]]\nname = \"app\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"ids\", \"blocks\", \"read\"] }}\n\
                 [[auth.tokens]]\nname = \"tier\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"blocks\", \"read\", \"tier\"] }}\n\
                 [[auth.tokens]]\nname = \"peer\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"peer\"] }}\n",
                hash(APP),
                hash(TIER),
                hash(PEER)
            ));
        }
        toml
    }

    fn acquire(group: &str) -> proto::AcquireWorkerRequest {
        proto::AcquireWorkerRequest {
            group: group.into(),
            workers: 4,
            worker: None,
            prefer_floor_at_most: None,
            holder: "lower pid 1 at http://10.0.0.7:7879".into(),
            layout: "L".into(),
            ttl_ms: 60_000,
        }
    }

    fn renew(lease: proto::WorkerLease, floor_unix_ms: u64) -> proto::RenewWorkerRequest {
        proto::RenewWorkerRequest {
            lease: Some(lease),
            floor_unix_ms,
        }
    }

    /// A lease on `group` as a caller that read it could name it: without the holder's secret.
    fn forged(group: &str) -> proto::WorkerLease {
        proto::WorkerLease {
            group: group.into(),
            worker: 0,
            token: 1,
            floor_unix_ms: 0,
            ttl_ms: 60_000,
            holder: "lower pid 1 at http://10.0.0.7:7879".into(),
        }
    }

    fn forward(namespace: &str, count: u64) -> proto::ForwardRequest {
        proto::ForwardRequest {
            namespace: namespace.into(),
            count,
            consecutive: false,
            shard: None,
            parts: Vec::new(),
            challenge: vec![7; 16],
        }
    }

    /// A call's answer, its payload dropped.
    fn answered<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Answer<()> {
        result.map(drop).map_err(failure)
    }

    /// Every node-to-node call `door` can make on lease group `group` and strict namespace
    /// `chat` (forward), as
    /// (call, answer) with the answer's payload dropped.
    async fn every_call(door: &Grpc, group: &str) -> Vec<(&'static str, Answer<()>)> {
        let Ok(mut c) = door.client().await else {
            panic!("no gRPC channel");
        };
        vec![
            (
                "AcquireWorker",
                answered(c.acquire_worker(door.request(acquire(group))).await),
            ),
            (
                "RenewWorker",
                answered(c.renew_worker(door.request(renew(forged(group), 1))).await),
            ),
            (
                "ReleaseWorker",
                answered(
                    c.release_worker(door.request(renew(forged(group), 0)))
                        .await,
                ),
            ),
            (
                "WorkerGroup",
                answered(
                    c.worker_group(door.request(proto::WorkerGroupRequest {
                        group: group.into(),
                    }))
                    .await,
                ),
            ),
            (
                "Forward",
                answered(c.forward(door.request(forward("chat", 1))).await),
            ),
        ]
    }

    /// With `[auth]`: no token is `unauthorized` on every call; an application's token and the
    /// peer token are `forbidden` on the lease calls, and only the peer token is answered a
    /// forward (`unauthorized` for any other, the tier's included); the tier's token reaches the
    /// lease calls on its own groups only, never a strict leader's or a shard range's group.
    /// The forward's answer proves the peer token over the challenge, term and ids.
    pub async fn calls_need_their_role(security: Security) {
        let f = Fixture::start(&toml(true), security).await;
        let door = f.door::<Grpc>();
        for (call, answer) in every_call(&door, "regional").await {
            assert!(
                matches!(&answer, Err(super::Failure::Refused { codes, .. }) if codes.contains(&ErrorCode::Unauthorized)),
                "{call} without a token: {answer:?}"
            );
        }
        for token in [APP, PEER] {
            let calls = every_call(&door.with_token(Some(token)), "regional").await;
            for (call, answer) in calls {
                match call {
                    "Forward" if token == PEER => assert!(answer.is_ok(), "{call}: {answer:?}"),
                    "Forward" => assert_refused(answer, ErrorCode::Unauthorized),
                    _ => assert_refused(answer, ErrorCode::Forbidden),
                }
            }
        }
        let tier = door.with_token(Some(TIER));
        for group in ["chat:leader", "events:shards"] {
            for (call, answer) in every_call(&tier, group).await {
                match call {
                    "Forward" => assert_refused(answer, ErrorCode::Unauthorized),
                    _ => assert_refused(answer, ErrorCode::Forbidden),
                }
            }
        }
        let mut c = tier.client().await.unwrap();
        let answer = c
            .acquire_worker(tier.request(acquire("regional")))
            .await
            .unwrap()
            .into_inner();
        assert!(
            matches!(
                answer.outcome,
                Some(proto::worker_lease_answer::Outcome::Lease(ref l))
                    if l.holder.starts_with("lower pid 1 at http://10.0.0.7:7879 lease ")
            ),
            "the tier's own group: a lease with the holder's secret: {answer:?}"
        );

        let peer = door.with_token(Some(PEER));
        let mut c = peer.client().await.unwrap();
        let answer = c
            .forward(peer.request(forward("chat", 3)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.ids.len(), 3);
        assert_eq!(
            answer.proof,
            idmint_node::peers::proof(PEER, &[7; 16], answer.term, &answer.ids)
        );
        f.stop().await;
    }

    /// Without `[auth]`: the internal groups stay unreachable through the lease calls, and a
    /// forward is answered only for the cluster's peer token.
    pub async fn without_auth_internal_groups_and_forwards_stay_closed(security: Security) {
        let f = Fixture::start(&toml(false), security).await;
        let door = f.door::<Grpc>();
        for group in ["chat:leader", "events:shards"] {
            for (call, answer) in every_call(&door, group).await {
                match call {
                    "Forward" => assert_refused(answer, ErrorCode::Unauthorized),
                    _ => assert_refused(answer, ErrorCode::Forbidden),
                }
            }
        }
        for token in [APP, TIER] {
            let other = door.with_token(Some(token));
            let mut c = other.client().await.unwrap();
            let e = c
                .forward(other.request(forward("chat", 1)))
                .await
                .map(drop)
                .map_err(failure);
            assert_refused(e, ErrorCode::Unauthorized);
        }
        let peer = door.with_token(Some(PEER));
        let mut c = peer.client().await.unwrap();
        let answer = c
            .forward(peer.request(forward("chat", 2)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.ids.len(), 2);
        f.stop().await;
    }

    macro_rules! node_to_node_tests {
        ($($door:ident => $security:ident;)*) => {$(
            mod $door {
                use super::super::doors::Security;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn calls_need_their_role() {
                    super::calls_need_their_role(Security::$security).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn without_auth_internal_groups_and_forwards_stay_closed() {
                    super::without_auth_internal_groups_and_forwards_stay_closed(
                        Security::$security,
                    )
                    .await
                }
            }
        )*};
    }

    node_to_node_tests! {
        grpc => Plain;
        grpc_tls => Tls;
    }
}
