//! Strict order in process: three nodes on one memory authority, each serving gRPC on
//! `127.0.0.1:0` (followers forward to the leader over real HTTP/2), clients on every node
//! taking ids through the request path every front-end takes ([`Node::take_ids`]).
//!
//! What is checked: exactly one node leads and the others follow it; every answer of every
//! node is unique and, in real time, above every answer completed before it started (the
//! linearizability checker); a clean stop of the leader hands its tail back and releases the
//! lease, another node takes over, and the ids go on above everything served; a request with
//! no leader answers `no_leader` within `peers.wait_ms`; a forward to a node that does not
//! lead is refused (one hop); lower tiers get no blocks of a strict namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::strict::Role;
use idmint_node::Credentials;
use idmint_node::{FileConfig, IdError, Node, Shutdown, ShutdownReport};
use idmint_store::{Authority, MemoryAuthority};
use idmint_testkit::linearizable::{check, Op};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

const DEADLINE: Duration = Duration::from_secs(30);

struct Member {
    node: Arc<Node>,
    url: String,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>,
}

fn toml(url: &str, extra: &str) -> String {
    let grpc = url
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    // Every member shares the cluster's peer token unless `extra` names its own.
    let token = if extra.contains("token = ") {
        String::new()
    } else {
        format!("token = \"{PEER_TOKEN}\"\n")
    };
    format!(
        "[server]\ngrpc = \"{grpc}\"\n\n[leases]\nttl_ms = 2000\nsafety_margin_ms = 400\nfloor_ahead_ms = 1000\n\n\
         [peers]\nadvertise = \"{url}\"\nwait_ms = 3000\n{token}{extra}\n\
         [namespaces.chat]\nkind = \"sequence\"\norder = \"strict\"\ncache = \"fixed\"\nblock_size = 500\n"
    )
}

async fn member(store: Arc<dyn Authority>, extra: &str) -> Member {
    member_on(store, extra, None).await
}

/// A member whose gRPC listener (the one the others forward to) is TLS with `certs` when
/// given: then its url is `https://`, and its `[peers]` trusts the certificates' CA.
async fn member_on(
    store: Arc<dyn Authority>,
    extra: &str,
    certs: Option<&idmint_testkit::certs::TestCerts>,
) -> Member {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (url, extra) = match certs {
        Some(c) => (
            format!("https://{addr}"),
            format!("ca_file = \"{}\"\n{extra}", c.ca_file().display()),
        ),
        None => (format!("http://{addr}"), extra.to_owned()),
    };
    let config = FileConfig::parse(&toml(&url, &extra)).unwrap().node;
    let node = Node::start(config, store).await.unwrap();
    let tls =
        certs.map(|c| idmint_node::tls::ServerTls::load(&c.cert_file(), &c.key_file()).unwrap());
    let server = idmint_node::Server::new(node.clone())
        .tls(tls)
        .grpc(listener);
    let shutdown = server.shutdown_handle();
    let served = tokio::spawn(server.serve());
    Member {
        node,
        url,
        shutdown,
        served,
    }
}

fn role(m: &Member) -> Role {
    let ns = m.node.served_namespace("chat").unwrap();
    match &*ns {
        idmint_node::namespace::Namespace::Sequence(s) => s.strict_order().unwrap().role(),
        _ => unreachable!(),
    }
}

/// Polls until one member leads and every other follows its url.
async fn settled(members: &[&Member]) -> usize {
    let start = Instant::now();
    loop {
        let roles: Vec<Role> = members.iter().map(|m| role(m)).collect();
        let leaders: Vec<usize> = (0..roles.len())
            .filter(|&i| matches!(roles[i], Role::Leader(_)))
            .collect();
        if let [leader] = leaders[..] {
            let url = &members[leader].url;
            if roles.iter().all(|r| {
                matches!(r, Role::Leader(_))
                    || matches!(r, Role::Follower { url: u, .. } if u == url)
            }) {
                return leader;
            }
        }
        assert!(start.elapsed() < DEADLINE, "no settled leader: {roles:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `clients` tasks per member taking one id at a time until `until` says stop; every answer
/// recorded with its start and end.
async fn load(
    members: &[&Member],
    clients: usize,
    per_client: usize,
    epoch: Instant,
) -> (Vec<Op>, Vec<String>) {
    let mut tasks = Vec::new();
    for m in members {
        for _ in 0..clients {
            let node = m.node.clone();
            tasks.push(tokio::spawn(async move {
                let mut ops = Vec::new();
                let mut errors = Vec::new();
                for _ in 0..per_client {
                    let start = epoch.elapsed().as_nanos() as u64;
                    let taken = node
                        .take_ids(Credentials::Header(None), "chat", Some(1), None)
                        .await;
                    let end = epoch.elapsed().as_nanos() as u64;
                    match taken {
                        Ok(t) => {
                            let idmint_node::namespace::Ids::U64(ids) = t.ids else {
                                unreachable!()
                            };
                            ops.push(Op { start, end, ids });
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (ops, errors)
            }));
        }
    }
    let mut ops = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        let (o, e) = t.await.unwrap();
        ops.extend(o);
        errors.extend(e);
    }
    (ops, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_leader_serves_in_real_time_order_and_a_stopped_leader_hands_over() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let a = member(store.clone(), "").await;
    let b = member(store.clone(), "").await;
    let c = member(store.clone(), "").await;
    let all = [&a, &b, &c];
    let leader = settled(&all).await;
    let epoch = Instant::now();
    let (mut ops, errors) = load(&all, 4, 300, epoch).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(ops.len(), 3 * 4 * 300);

    // A forward to a follower is refused, not forwarded again.
    let follower = all[(leader + 1) % 3];
    let peer = bearer(PEER_TOKEN);
    let refused = follower
        .node
        .take_forwarded(
            Credentials::Header(Some(peer.as_bytes())),
            "chat",
            1,
            false,
            None,
            &[],
        )
        .await
        .unwrap_err();
    assert!(matches!(refused, IdError::NoLeader { .. }), "{refused}");
    // No blocks for a lower tier.
    let e = follower
        .node
        .take_block(Credentials::Header(None), "chat", Some(10), 0, 0)
        .await
        .unwrap_err();
    assert!(matches!(e, IdError::WrongKind(_)), "{e}");

    // The leader stops cleanly: the others take over, above everything served.
    let stopped = all[leader];
    stopped.shutdown.drain();
    let report = tokio::time::timeout(DEADLINE, async {
        loop {
            if stopped.served.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(report.is_ok(), "the leader did not stop");
    let rest: Vec<&Member> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, m)| *m)
        .collect();
    settled(&rest).await;
    let (more, errors) = load(&rest, 4, 300, epoch).await;
    assert!(errors.is_empty(), "{errors:?}");
    ops.extend(more);
    let checked = check(&ops).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(checked.ops, 3 * 4 * 300 + 2 * 4 * 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_requests_wait_then_answer_no_leader() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    // Someone else holds the leader lease and names a url nobody answers at.
    let leases = store.worker_leases().unwrap();
    let group = idmint_core::NamespaceName::new("chat:leader").unwrap();
    leases
        .acquire(&idmint_store::LeaseRequest {
            group,
            workers: 1,
            choice: idmint_store::WorkerChoice::Exactly(0),
            prefer_floor_at_most: None,
            holder: "ghost pid 1 at http://127.0.0.1:9 lease 0".into(),
            layout: idmint_node::strict::LEADER_LAYOUT.into(),
            ttl: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let m = member(store, "").await;
    let started = Instant::now();
    let e = m
        .node
        .take_ids(Credentials::Header(None), "chat", Some(1), None)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(e, IdError::NoLeader { .. }), "{e}");
    assert_eq!(e.code().as_str(), "no_leader");
    assert!(
        waited >= Duration::from_millis(2900),
        "answered after {waited:?}"
    );
    assert!(matches!(role(&m), Role::Follower { ref url, .. } if url == "http://127.0.0.1:9"));
}

const CLIENT_TOKEN: &str = "idmint_chat_client";
const PEER_TOKEN: &str = "idmint_chat_peer";

/// `[auth]` with a client token (`ids` and `read` on `chat`) and a peer token (`peer` on
/// `chat`), and `[peers]` sending `peer` with every forward.
fn auth_section(peer: &str) -> String {
    let hash = |t: &str| idmint_node::auth::TokenHash::of(t.as_bytes()).to_string();
    format!(
        "token = \"{peer}\"\n\n[auth]\n\
         [[auth.tokens]]\nname = \"client\"\nhash = \"{}\"\nscopes = {{ \"chat\" = [\"ids\", \"read\"] }}\n\
         [[auth.tokens]]\nname = \"peer\"\nhash = \"{}\"\nscopes = {{ \"chat\" = [\"peer\"] }}\n",
        hash(CLIENT_TOKEN),
        hash(PEER_TOKEN)
    )
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_carry_the_peer_token_and_consecutive_ids_stay_one_block() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let a = member(store.clone(), &auth_section(PEER_TOKEN)).await;
    let b = member(store.clone(), &auth_section(PEER_TOKEN)).await;
    let leader = settled(&[&a, &b]).await;
    let follower = [&a, &b][1 - leader];
    let header = bearer(CLIENT_TOKEN);
    let who = || Credentials::Header(Some(header.as_bytes()));
    let first = follower
        .node
        .take_ids(who(), "chat", Some(3), None)
        .await
        .unwrap();
    let idmint_node::namespace::Ids::U64(first) = first.ids else {
        unreachable!()
    };
    // INCRBY through the follower: one block of 5, above what was answered before.
    let last = follower
        .node
        .take_consecutive(who(), "chat", 5)
        .await
        .unwrap();
    assert!(last - 4 > *first.last().unwrap(), "{first:?} then ..{last}");
    // Without a token the follower refuses before forwarding anything.
    let e = follower
        .node
        .take_ids(Credentials::Header(None), "chat", Some(1), None)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "unauthorized");

    // Guards against issue 31: an application's token called `Forward` itself, and a count
    // of 1,000,000 got a million ids where `Next` refuses more than `server.max_count`. Only
    // a peer's token forwards, and a forward is held to `server.max_count` like `Next`.
    let leader_node = &[&a, &b][leader].node;
    let e = leader_node
        .take_forwarded(who(), "chat", 1, false, None, &[])
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "unauthorized", "{e}");
    let peer = bearer(PEER_TOKEN);
    let as_peer = || Credentials::Header(Some(peer.as_bytes()));
    let e = leader_node
        .take_forwarded(as_peer(), "chat", 1_000_000, false, None, &[])
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid_count", "{e}");
    let (ids, _) = leader_node
        .take_forwarded(as_peer(), "chat", 3, false, None, &[])
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);

    // A follower whose peer token the leader does not know cannot forward: `no_leader`,
    // naming the leader's refusal.
    let c = member(store.clone(), &auth_section("idmint_wrong_peer")).await;
    let e = c
        .node
        .take_ids(who(), "chat", Some(1), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, IdError::NoLeader { reason, .. } if reason.contains("unauthorized")),
        "{e}"
    );
}

/// Guards against issue 31: a follower forwarded to whatever url the leader's lease named, and
/// took its answer. A node that does not hold the cluster's peer token (here a real node of
/// another cluster, leading because it took the lease first; in the attack, a fake leader
/// written into the lease) gets no forward answered: it refuses the follower's token, its
/// answer could not carry the proof, the follower uses none of its ids and says `no_leader`.
/// And a leader answers a forward only from a caller presenting its peer token, also without
/// `[auth]` (in the attack, anyone could call `Forward`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_ids_only_from_a_leader_that_proves_the_peer_token() {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let stranger = member(store.clone(), "token = \"idmint_other_cluster\"\n").await;
    assert_eq!(settled(&[&stranger]).await, 0);
    let follower = member(store.clone(), &auth_section(PEER_TOKEN)).await;
    assert_eq!(settled(&[&stranger, &follower]).await, 0);
    let header = bearer(CLIENT_TOKEN);
    let e = follower
        .node
        .take_ids(
            Credentials::Header(Some(header.as_bytes())),
            "chat",
            Some(3),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, IdError::NoLeader { reason, .. } if reason.contains("peer token")),
        "{e}"
    );
    // Its own answers to forwards carry the proof a peer checks.
    let challenge = [7u8; 16];
    let proof = follower.node.peer_proof(&challenge, 9, &[1, 2]);
    assert_eq!(
        proof,
        idmint_node::peers::proof(PEER_TOKEN, &challenge, 9, &[1, 2])
    );
    assert_ne!(
        proof,
        idmint_node::peers::proof(PEER_TOKEN, &challenge, 9, &[1, 3])
    );
    assert_ne!(stranger.node.peer_proof(&challenge, 9, &[1, 2]), proof);

    let lone = member(Arc::new(MemoryAuthority::new()), "").await;
    assert_eq!(settled(&[&lone]).await, 0);
    for header in [
        None,
        Some(bearer("idmint_other_cluster")),
        Some(bearer(CLIENT_TOKEN)),
    ] {
        let e = lone
            .node
            .take_forwarded(
                Credentials::Header(header.as_deref().map(str::as_bytes)),
                "chat",
                1,
                false,
                None,
                &[],
            )
            .await
            .unwrap_err();
        assert_eq!(e.code().as_str(), "unauthorized", "{header:?}: {e}");
    }
    let peer = bearer(PEER_TOKEN);
    let (ids, _) = lone
        .node
        .take_forwarded(
            Credentials::Header(Some(peer.as_bytes())),
            "chat",
            2,
            false,
            None,
            &[],
        )
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_go_over_tls_to_a_leader_with_a_certificate_of_the_trusted_ca() {
    let certs = idmint_testkit::certs::TestCerts::new();
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let a = member_on(store.clone(), "", Some(&certs)).await;
    let b = member_on(store.clone(), "", Some(&certs)).await;
    assert!(a.url.starts_with("https://"));
    let leader = settled(&[&a, &b]).await;
    let follower = [&a, &b][1 - leader];
    let before = [&a, &b][leader]
        .node
        .take_ids(Credentials::Header(None), "chat", Some(2), None)
        .await
        .unwrap();
    let after = follower
        .node
        .take_ids(Credentials::Header(None), "chat", Some(2), None)
        .await
        .unwrap();
    let (idmint_node::namespace::Ids::U64(before), idmint_node::namespace::Ids::U64(after)) =
        (before.ids, after.ids)
    else {
        unreachable!()
    };
    assert!(after[0] > before[1], "{before:?} then {after:?}");

    // A follower that does not trust the leader's CA cannot forward: `no_leader` naming why.
    let other = idmint_testkit::certs::TestCerts::new();
    let c = member_on(
        store.clone(),
        &format!("ca_file = \"{}\"\n", other.ca_file().display()),
        None,
    )
    .await;
    let e = c
        .node
        .take_ids(Credentials::Header(None), "chat", Some(1), None)
        .await
        .unwrap_err();
    assert!(matches!(e, IdError::NoLeader { .. }), "{e}");
}
