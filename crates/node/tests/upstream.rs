//! Tiers: a lower node whose authority is the upstream authority (`idmint_store::upstream`,
//! blocks over gRPC) and upper nodes served in process on `127.0.0.1:0` by
//! `serve_front_ends` with the gRPC front-end, on a memory store shared by the upper nodes one
//! after another (as a database outlives the nodes on it). No mocks: every block crosses a
//! real HTTP/2 connection.
//!
//! What is checked: ids through the lower node from several tasks are unique, increase per
//! task and come from blocks the upper node granted; the upper tier creates a namespace the
//! lower tier sets up (auto_create) without burning the probe id; a clean stop of the lower
//! node hands its tail back to the upper node, whose next block starts where the tail started;
//! a lower node dropped without a stop (a kill) burns only what it held; the upper node
//! stopped, the lower node serves its buffer, then answers `authority_unavailable`, and
//! recovers on its own once an upper node answers at its second url (failover), above every id
//! served before; the status pages show the tiers: the lower node's, each url above and whether
//! its latest call answered; the upper node's, the blocks it answered below and the lease open
//! until the lower node's clean stop hands its tail back.
//!
//! No test sleeps to order events: every wait polls a condition against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::grpc::proto::idmint_client::IdmintClient;
use idmint_node::grpc::proto::{self, namespace_info::Kind};
use idmint_node::namespace::Ids;
use idmint_node::{FileConfig, IdError, Node, NodeConfig, Shutdown, ShutdownReport};
use idmint_store::config::UpstreamConfig;
use idmint_store::{Authority, MemoryAuthority, UpstreamAuthority};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::{Channel, Endpoint};

const DEADLINE: Duration = Duration::from_secs(30);

/// An upper node serving gRPC on `listener`, on `store`.
struct Upper {
    node: Arc<Node>,
    addr: SocketAddr,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>,
}

impl Upper {
    async fn start(store: Arc<MemoryAuthority>, listener: TcpListener) -> Upper {
        Self::start_with(store, "block_size = 10000\n", listener).await
    }

    /// An upper node on `store` whose auto-created namespaces have a fixed cache and
    /// `defaults`.
    async fn start_with(store: Arc<dyn Authority>, defaults: &str, listener: TcpListener) -> Upper {
        let config = config(&format!("[defaults]\ncache = \"fixed\"\n{defaults}"));
        let node = Node::start(config, store).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = idmint_node::Server::new(node.clone()).grpc(listener);
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve());
        Upper {
            node,
            addr,
            shutdown,
            served,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn client(&self) -> IdmintClient<Channel> {
        let channel = Endpoint::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .unwrap();
        IdmintClient::new(channel)
    }

    async fn info(&self, ns: &str) -> proto::SequenceInfo {
        let info = self
            .client()
            .await
            .namespace(proto::NamespaceRequest {
                namespace: ns.into(),
            })
            .await
            .unwrap()
            .into_inner();
        match info.kind {
            Some(Kind::Sequence(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    async fn stop(self) -> ShutdownReport {
        self.shutdown.drain();
        tokio::time::timeout(DEADLINE, self.served)
            .await
            .expect("the upper node stops")
            .unwrap()
            .unwrap()
    }
}

fn config(toml: &str) -> NodeConfig {
    FileConfig::parse(toml).unwrap().node
}

/// The lower tier's namespace: blocks of 100 from the tier above, a short refill wait.
const LOWER: &str = "[server]\nrefill_wait_ms = 300\n\n[namespaces.photos]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 100\n";

async fn lower(urls: &[String]) -> Arc<Node> {
    lower_with(urls, LOWER).await
}

async fn lower_with(urls: &[String], toml: &str) -> Arc<Node> {
    let mut upstream = UpstreamConfig::new(urls.iter().cloned());
    upstream.op_timeout = Duration::from_millis(500);
    let authority = UpstreamAuthority::connect(&upstream).unwrap();
    assert_eq!(authority.kind(), "upstream");
    Node::start(config(toml), Arc::new(authority))
        .await
        .unwrap()
}

async fn take(node: &Node, count: u64) -> Result<Vec<u64>, IdError> {
    let taken = node
        .take_ids(
            idmint_node::Credentials::Header(None),
            "photos",
            Some(count),
            None,
        )
        .await?;
    match taken.ids {
        Ids::U64(ids) => Ok(ids),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_serve_unique_ids_and_a_clean_stop_hands_the_tail_up() {
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(
        store.clone(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await;
    // The upper node has no namespace: the lower one's start creates it there (auto_create),
    // and the one-id probe goes back, so the first id is still 1.
    let node = lower(&[upper.url()]).await;
    let settings = upper.info("photos").await.settings.unwrap();
    assert_eq!((settings.width, settings.start, settings.step), (64, 1, 1));
    assert_eq!(settings.residues, vec![0]);

    let mut tasks = Vec::new();
    for _ in 0..4 {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..50 {
                mine.extend(take(&node, 7).await.unwrap());
            }
            mine
        }));
    }
    let mut all = HashSet::new();
    for task in tasks {
        let mine = task.await.unwrap();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "ids increase per task"
        );
        for id in mine {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(all.len(), 4 * 50 * 7);
    // Every id is of a block the upper node granted: below its watermark, and exactly the
    // first ids of the namespace (one lower node, blocks of 100, the probe given back).
    let upper_state = upper.info("photos").await.state.unwrap();
    let highest = *all.iter().max().unwrap();
    assert!(highest < upper_state.watermark);
    assert_eq!(*all.iter().min().unwrap(), 1);
    assert_eq!(highest, 1400);

    // A clean stop hands the unused tail up; the upper node's next block starts there. The
    // upper node takes back only a tail of the newest block it leased: when the lower node's
    // buffer had merged it with the block before (contiguous), that block's unused ids are
    // burned (GiveBack::Partly), fewer than one block.
    let report = node.shutdown().await;
    assert!(report.given_back > 0, "{report:?}");
    assert!(report.burned < 100, "{report:?}");
    let next = upper
        .client()
        .await
        .block(proto::BlockRequest {
            namespace: "photos".into(),
            count: Some(1),
            min_start: None,
            extends: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        next.start,
        highest + 1 + report.burned,
        "the tail went back to the upper node: {report:?}"
    );
    let burned = report.burned;

    // The upper node's own clean stop hands it on to its store.
    let before = store
        .state(&idmint_core::NamespaceName::new("photos").unwrap())
        .await
        .unwrap()
        .unwrap();
    let report = upper.stop().await;
    assert!(report.given_back > 0, "{report:?}");
    let after = store
        .state(&idmint_core::NamespaceName::new("photos").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.watermark,
        highest + 2 + burned,
        "the upper node burned nothing: {before:?}"
    );
}

/// Both status pages, as their snapshots read the tiers: below a url nothing listens on and a
/// live upper node, the lower node shows the first as not answering and the second as the one
/// calls go to; the upper node shows the blocks it leased below, the newest lease open until
/// the lower node's clean stop hands its tail back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_pages_show_the_nodes_above_and_below() {
    use idmint_node::http::status_page;
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(store, TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let node = lower(&[closed.clone(), upper.url()]).await;
    assert_eq!(take(&node, 30).await.unwrap().len(), 30);

    let page = status_page::snapshot(&node).await;
    assert_eq!(page.authority.kind, "upstream");
    let above: Vec<_> = page
        .authority
        .upper
        .iter()
        .map(|n| (n.url.clone(), n.current, n.answered))
        .collect();
    assert_eq!(
        above,
        [
            (closed.clone(), false, Some(false)),
            (upper.url(), true, Some(true))
        ]
    );
    assert!(page.authority.upper[0].last_error.is_some());
    let html = status_page::render(&page).into_string();
    assert!(
        html.contains(&format!("{} (calls go here first)</td>", upper.url())),
        "{html}"
    );
    assert!(html.contains("(!) did not answer: "), "{html}");

    let below = |page: &status_page::Snapshot| {
        page.namespaces
            .iter()
            .find(|r| r.info.name() == "photos")
            .and_then(|r| r.below)
            .expect("the upper node serves photos")
    };
    let leased = below(&status_page::snapshot(&upper.node).await);
    assert!(leased.blocks >= 1 && leased.ids >= 100, "{leased:?}");
    let open = leased
        .open_lease
        .expect("the lower node's newest block is leased");
    assert!(open.len() >= 100, "{open:?}");

    node.shutdown().await;
    let after = below(&status_page::snapshot(&upper.node).await);
    assert_eq!(after.open_lease, None, "the tail came back: {after:?}");
    upper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_lower_node_burns_only_what_it_held() {
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(store, TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
    let killed = lower(&[upper.url()]).await;
    let served = take(&killed, 150).await.unwrap();
    let last = *served.last().unwrap();
    let held = match killed
        .served_namespace("photos")
        .unwrap()
        .info(killed.now())
    {
        idmint_api::NamespaceInfo::Sequence { state, .. } => state.ids_buffered,
        other => panic!("{other:?}"),
    };
    // No stop: what it buffered is never handed out again, and nothing more is lost.
    let next = lower(&[upper.url()]).await;
    let first = take(&next, 1).await.unwrap()[0];
    assert!(first > last);
    assert_eq!(
        first - last - 1,
        held,
        "burned exactly what the killed node held"
    );
    assert!(held < 300, "at most its blocks and one request: {held}");
    drop(killed);
    next.shutdown().await;
    upper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upper_outage_is_bridged_by_the_buffer_then_fails_over() {
    let store = Arc::new(MemoryAuthority::new());
    let first = Upper::start(
        store.clone(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await;
    // The second url's port is bound now and served only later: until then a connection gets
    // no answer (the timeout), as from a node that is starting.
    let second = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second_url = format!("http://{}", second.local_addr().unwrap());
    let node = lower(&[first.url(), second_url]).await;
    let mut seen: Vec<u64> = take(&node, 30).await.unwrap();

    first.stop().await;
    // The buffer bridges the outage: ids keep coming until it is empty, then
    // authority_unavailable (never an id from nowhere).
    let error = loop {
        match take(&node, 10).await {
            Ok(ids) => seen.extend(ids),
            Err(e) => break e,
        }
        assert!(seen.len() < 1000, "the buffer cannot hold that many");
    };
    assert!(matches!(error, IdError::Unavailable { .. }), "{error:?}");
    assert!(seen.len() >= 100, "served its buffer first: {}", seen.len());

    // A new upper node on the same store, at the second url: the lower node recovers by
    // itself, above every id served so far.
    let second = Upper::start(store, second).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let more = loop {
        match take(&node, 10).await {
            Ok(ids) => break ids,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "no recovery: {e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let highest = *seen.iter().max().unwrap();
    assert!(more[0] > highest, "{} after {highest}", more[0]);
    seen.extend(more);
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no id twice across the outage");
    node.shutdown().await;
    second.stop().await;
}

/// Two upper nodes alive on one store: after a failover the second one's buffer holds ids below
/// those the first one granted. Those are burned, never handed back (handed back, the second
/// node would grant them again and again: a livelock while it is the only node alive), and the
/// lower node gets past them on its own, above every id it served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_an_upper_node_with_older_ids_burns_them_and_moves_on() {
    let store = Arc::new(MemoryAuthority::new());
    let small = "block_size = 300\n";
    let bind = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let first = Upper::start_with(store.clone(), small, bind().await).await;
    let second = Upper::start_with(store.clone(), small, bind().await).await;
    let block = |upper: &Upper| {
        let url = upper.url();
        async move {
            let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
            IdmintClient::new(channel)
                .block(proto::BlockRequest {
                    namespace: "photos".into(),
                    count: Some(1),
                    min_start: None,
                    extends: None,
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    // The second node buffers the store's first block, the first node the next one.
    let older = block(&second).await.start;
    let newer = block(&first).await.start;
    assert!(older < newer && newer >= 300, "{older} then {newer}");
    let node = lower(&[first.url(), second.url()]).await;
    let mut seen: Vec<u64> = take(&node, 50).await.unwrap();
    assert!(seen[0] > newer, "{seen:?}");
    first.stop().await;

    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < 1000 {
        match take(&node, 10).await {
            Ok(ids) => seen.extend(ids),
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "stuck below the floor: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "ids increase across the failover"
    );
    node.shutdown().await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_the_upper_tier_does_not_have_is_refused() {
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(store, TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
    let upstream = UpstreamAuthority::connect(&UpstreamConfig::new([upper.url()])).unwrap();
    let name = idmint_core::NamespaceName::new("photos").unwrap();
    let odd = idmint_core::SequenceSpec::new(idmint_core::Width::Bits64, 1, 2, 1).unwrap();
    let err = upstream.ensure_namespace(&name, odd).await.unwrap_err();
    assert!(
        matches!(err, idmint_store::StoreError::SpecConflict { .. }),
        "{err:?}"
    );
    // Nothing there answers at all: unavailable, not a hang.
    let dead = UpstreamAuthority::connect(&UpstreamConfig::new(["http://127.0.0.1:1"])).unwrap();
    let err = dead.reserve(&name, 10).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    upper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_a_multi_upper_tier_every_members_class_is_served() {
    // The upper node's authority owns two residue classes (two members, offsets 0 and 1, step
    // 2); the namespace-level offset is 0, and the lower node's block gate must accept both.
    let members: Vec<(Arc<dyn Authority>, u64)> = vec![
        (Arc::new(MemoryAuthority::new()), 0),
        (Arc::new(MemoryAuthority::new()), 1),
    ];
    let multi = Arc::new(idmint_store::MultiAuthority::new(members).unwrap());
    let upper = Upper::start_with(
        multi,
        "step = 2\nblock_size = 300\n",
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await;
    let node = lower_with(
        &[upper.url()],
        &LOWER.replace("block_size = 100\n", "block_size = 100\nstep = 2\n"),
    )
    .await;
    let settings = upper.info("photos").await.settings.unwrap();
    assert_eq!((settings.step, settings.offset), (2, 0));
    assert_eq!(settings.residues, vec![0, 1]);
    let mut seen = HashSet::new();
    for _ in 0..50 {
        for id in take(&node, 20).await.unwrap() {
            assert!(seen.insert(id), "id {id} twice");
        }
    }
    let classes: HashSet<u64> = seen.iter().map(|id| id % 2).collect();
    assert_eq!(classes.len(), 2, "both members' classes served");
    node.shutdown().await;
    upper.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_32_bit_namespace_runs_out_through_the_tiers_clearly() {
    let store = Arc::new(MemoryAuthority::new());
    let near_end = "width = 32\nstart = 2147483448\n"; // 200 ids left
    let upper = Upper::start_with(
        store,
        &format!("block_size = 100\n{near_end}"),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await;
    let node = lower_with(
        &[upper.url()],
        &LOWER.replace(
            "block_size = 100\n",
            &format!("block_size = 30\n{near_end}"),
        ),
    )
    .await;
    let mut seen = Vec::new();
    let error = loop {
        match take(&node, 7).await {
            Ok(ids) => seen.extend(ids),
            Err(e) => break e,
        }
        assert!(seen.len() <= 200, "never past the width");
    };
    assert!(
        matches!(error, IdError::Exhausted { bits: 32, .. }),
        "{error:?}"
    );
    assert_eq!(*seen.last().unwrap(), 2_147_483_647);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    node.shutdown().await;
    upper.stop().await;
}

/// A namespace retired on the upper tier answers `namespace_retired` on the lower tier too,
/// once the lower tier's buffer is dry (never `namespace_exhausted`), and its state says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_above_reaches_the_lower_tier_as_retired() {
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(store, TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
    let node = lower(&[upper.url()]).await;
    take(&node, 5).await.unwrap();
    let retired = upper
        .node
        .advance("photos", idmint_store::Advance::Retire, None)
        .await
        .unwrap();
    assert!(retired.retired, "{retired:?}");
    // What the lower tier buffered before the retirement is still its own to serve.
    let mut served = 0;
    let error = loop {
        match take(&node, 7).await {
            Ok(ids) => served += ids.len(),
            Err(e) => break e,
        }
        assert!(served <= 1_000, "the lower tier kept getting blocks");
    };
    assert!(matches!(error, IdError::Retired(_)), "{error:?}");
    assert_eq!(error.code(), idmint_api::ErrorCode::NamespaceRetired);
    let info = node
        .namespace_info(idmint_node::Credentials::Header(None), "photos")
        .await
        .unwrap();
    let idmint_api::NamespaceInfo::Sequence { state, .. } = info else {
        panic!("{info:?}");
    };
    assert!(state.retired, "{state:?}");
    node.shutdown().await;
    upper.stop().await;
}

/// An upper tier with `[auth]`: a lower tier with the token in its `[authority]` gets blocks;
/// one without is refused at start-up with a message naming the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_tier_sends_its_token_to_an_upper_tier_with_auth() {
    let store = Arc::new(MemoryAuthority::new());
    let hash = idmint_node::auth::TokenHash::of(b"idmint_regional").to_string();
    let with_auth = format!(
        "block_size = 1000\n\n[[auth.tokens]]\nname = \"regional\"\nhash = \"{hash}\"\n\
         scopes = {{ \"*\" = [\"blocks\", \"read\"] }}\n"
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upper = Upper::start_with(store, &with_auth, listener).await;

    let mut upstream = UpstreamConfig::new([upper.url()]);
    upstream.op_timeout = Duration::from_millis(2000);
    upstream.token = Some("idmint_regional".into());
    let node = Node::start(
        config(LOWER),
        Arc::new(UpstreamAuthority::connect(&upstream).unwrap()),
    )
    .await
    .unwrap();
    let ids = take(&node, 5).await.unwrap();
    assert_eq!(ids.len(), 5);
    node.shutdown().await;

    for token in [None, Some("idmint_wrong")] {
        let mut upstream = UpstreamConfig::new([upper.url()]);
        upstream.op_timeout = Duration::from_millis(2000);
        upstream.token = token.map(str::to_string);
        let refused = Node::start(
            config(LOWER),
            Arc::new(UpstreamAuthority::connect(&upstream).unwrap()),
        )
        .await
        .map(|_| ())
        .unwrap_err();
        assert!(
            refused.to_string().contains("[authority] token"),
            "{token:?}: {refused}"
        );
    }
    upper.stop().await;
}

/// Guards against a regional node going back across a restart: after a failover between two
/// upper nodes on one store, the surviving upper node's older buffer holds ids below those it
/// served. Its node record holds the highest end it reserved; at start that floor is handed to
/// the upstream authority, which asks for nothing below it (`min_start`) and cuts anything
/// below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_lower_node_never_goes_below_what_it_served_before() {
    let store = Arc::new(MemoryAuthority::new());
    let small = "block_size = 300\n";
    let bind = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let first = Upper::start_with(store.clone(), small, bind().await).await;
    let second = Upper::start_with(store.clone(), small, bind().await).await;
    let probe = |upper: &Upper| {
        let url = upper.url();
        async move {
            let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
            IdmintClient::new(channel)
                .block(proto::BlockRequest {
                    namespace: "photos".into(),
                    count: Some(1),
                    min_start: None,
                    extends: None,
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    // The second node buffers the store's first block, the first node the next one.
    let older = probe(&second).await.start;
    let newer = probe(&first).await.start;
    assert!(older < newer, "{older} then {newer}");

    let data = tempfile::tempdir().unwrap();
    let urls = format!("[\"{}\", \"{}\"]", first.url(), second.url());
    let file = idmint_node::FileConfig::parse(&format!(
        "[authority]\nkind = \"upstream\"\nurls = {urls}\ntimeout_ms = 500\n\n{LOWER}"
    ))
    .unwrap();
    let start = || async {
        let authority = idmint_node::open_store(&file, data.path(), false)
            .await
            .unwrap();
        Node::start(file.node.clone(), authority).await.unwrap()
    };
    let node = start().await;
    let served = take(&node, 50).await.unwrap();
    let highest = *served.last().unwrap();
    assert!(served[0] > newer, "{served:?} from the first node");
    node.shutdown().await;
    first.stop().await;

    // Only the second node answers now; its buffer still starts at `older`.
    let node = start().await;
    let after = take(&node, 50).await.unwrap();
    assert!(
        after[0] > highest,
        "after the restart the node served {} below {highest} it had served",
        after[0]
    );
    node.shutdown().await;
    second.stop().await;
}

/// A lower tier's snowflake namespace with `worker = N`.
fn snowflake(worker: &str) -> String {
    format!(
        "[leases]\nttl_ms = 1500\nfloor_ahead_ms = 600\nsafety_margin_ms = 500\n\n\
         [namespaces.events]\nkind = \"snowflake\"\nworker = {worker}\n"
    )
}

async fn snowflakes(node: &Node, count: u64) -> Vec<u64> {
    let taken = node
        .take_ids(
            idmint_node::Credentials::Header(None),
            "events",
            Some(count),
            None,
        )
        .await
        .unwrap();
    match taken.ids {
        Ids::U64(ids) => ids,
        other => panic!("{other:?}"),
    }
}

/// Guards against two regional nodes sharing a worker id (with `worker = 1` and no lease they
/// issued 1,081,300 of 1.28M ids twice). Worker ids are leased through the tier above: the
/// second node with a taken worker id is refused naming the holder, a node in lease mode gets
/// another worker id, and their ids never collide. A clean stop releases through the tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_regional_nodes_never_share_a_worker_id() {
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(store, TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
    let urls = [upper.url()];
    let first = lower_with(&urls, &snowflake("1")).await;

    let mut upstream = UpstreamConfig::new(urls.iter().cloned());
    upstream.op_timeout = Duration::from_millis(500);
    let refused = Node::start(
        config(&snowflake("1")),
        Arc::new(UpstreamAuthority::connect(&upstream).unwrap()),
    )
    .await
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("worker 1 of group events is held by"),
        "{refused}"
    );

    let second = lower_with(&urls, &snowflake("\"lease\"")).await;
    let layout = idmint_core::Layout::twitter();
    let mut seen = HashSet::new();
    let mut workers = HashSet::new();
    // Long enough for several renewals through the tier (every 500 ms).
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < until {
        for node in [&first, &second] {
            let ids = snowflakes(node, 1000).await;
            workers.insert(layout.decode(ids[0]).unwrap().parts.node);
            for id in ids {
                assert!(seen.insert(id), "id {id} twice");
            }
        }
    }
    assert_eq!(workers, HashSet::from([0, 1]), "one worker id each");

    let group = |upper: &Upper| {
        let url = upper.url();
        async move {
            let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
            IdmintClient::new(channel)
                .worker_group(proto::WorkerGroupRequest {
                    group: "events".into(),
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    let live =
        |g: &proto::WorkerGroupAnswer| g.slots.iter().filter(|s| s.expires_in_ms.is_some()).count();
    assert_eq!(live(&group(&upper).await), 2, "both leases held above");
    first.shutdown().await;
    second.shutdown().await;
    assert_eq!(
        live(&group(&upper).await),
        0,
        "both released through the tier"
    );
    upper.stop().await;
}

/// A lease call on `upper` with `token` (none: no header).
fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

fn acquire_request(group: &str, holder: &str) -> proto::AcquireWorkerRequest {
    proto::AcquireWorkerRequest {
        group: group.into(),
        workers: 4,
        worker: None,
        prefer_floor_at_most: None,
        holder: holder.into(),
        layout: "L".into(),
        ttl_ms: 60_000,
    }
}

fn release_request(lease: proto::WorkerLease, floor: u64) -> proto::RenewWorkerRequest {
    proto::RenewWorkerRequest {
        lease: Some(lease),
        floor_unix_ms: floor,
    }
}

/// The lease an answer granted, or the refusal's reason.
fn granted(
    answer: proto::WorkerLeaseAnswer,
) -> Result<proto::WorkerLease, proto::lease_refused::Reason> {
    match answer.outcome {
        Some(proto::worker_lease_answer::Outcome::Lease(lease)) => Ok(lease),
        Some(proto::worker_lease_answer::Outcome::Refused(r)) => Err(r.reason()),
        None => panic!("an empty answer"),
    }
}

/// Guards against issue 31's lease attacks: a token with `blocks` and `read` (an application's
/// scopes) read `photos:shards` and `chat:leader` with `WorkerGroup` and released them with
/// floor 0 (1,395 duplicate shard ids, 7,533 strict-order violations), and acquired
/// `chat:leader` naming a fake url (11,794 duplicates). Now every lease call needs `tier`; no
/// token reaches an internal group; a group read shows no holder's secret, so a caller with
/// the token and the public holder cannot release another holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_calls_serve_lower_tiers_only_on_their_own_groups() {
    let store = Arc::new(MemoryAuthority::new());
    let hash = |t: &str| idmint_node::auth::TokenHash::of(t.as_bytes()).to_string();
    let tokens = format!(
        "block_size = 1000\n\n\
         [[auth.tokens]]\nname = \"app\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"ids\", \"blocks\", \"read\"] }}\n\
         [[auth.tokens]]\nname = \"tier\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"blocks\", \"read\", \"tier\"] }}\n",
        hash("idmint_app"),
        hash("idmint_tier")
    );
    let upper = Upper::start_with(
        store,
        &tokens,
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await;
    let mut c = upper.client().await;
    let (app, tier) = (Some("idmint_app"), Some("idmint_tier"));

    // An application token reaches no lease call.
    let e = c
        .acquire_worker(with_token(acquire_request("events", "x"), app))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let e = c
        .worker_group(with_token(
            proto::WorkerGroupRequest {
                group: "events".into(),
            },
            app,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    // A lower tier's token reaches no internal group, for any call.
    for group in ["photos:shards", "chat:leader"] {
        let e = c
            .acquire_worker(with_token(
                acquire_request(group, "a at http://fake:1"),
                tier,
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{group}: {e:?}");
        let e = c
            .worker_group(with_token(
                proto::WorkerGroupRequest {
                    group: group.into(),
                },
                tier,
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{group}: {e:?}");
        let lease = proto::WorkerLease {
            group: group.into(),
            worker: 0,
            token: 1,
            floor_unix_ms: 0,
            ttl_ms: 1000,
            holder: "h".into(),
        };
        let e = c
            .release_worker(with_token(release_request(lease, 0), tier))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{group}: {e:?}");
    }

    // Its own group: the acquisition answers a holder with a secret made above; a group read
    // shows only the public part; a release with what the read shows is refused as
    // superseded and the lease stays live.
    let mine = granted(
        c.acquire_worker(with_token(
            acquire_request("events", "lower pid 1 at http://10.0.0.7:7879"),
            tier,
        ))
        .await
        .unwrap()
        .into_inner(),
    )
    .unwrap();
    assert!(
        mine.holder
            .starts_with("lower pid 1 at http://10.0.0.7:7879 lease "),
        "{}",
        mine.holder
    );
    let renewed = granted(
        c.renew_worker(with_token(release_request(mine.clone(), 9_000), tier))
            .await
            .unwrap()
            .into_inner(),
    )
    .unwrap();
    assert_eq!(renewed.floor_unix_ms, 9_000);
    let read = c
        .worker_group(with_token(
            proto::WorkerGroupRequest {
                group: "events".into(),
            },
            tier,
        ))
        .await
        .unwrap()
        .into_inner();
    let slot = &read.slots[0];
    assert_eq!(slot.holder, "lower pid 1 at http://10.0.0.7:7879");
    let forged = proto::WorkerLease {
        holder: slot.holder.clone(),
        ..mine.clone()
    };
    let refused = granted(
        c.release_worker(with_token(release_request(forged, 0), tier))
            .await
            .unwrap()
            .into_inner(),
    )
    .unwrap_err();
    assert_eq!(refused, proto::lease_refused::Reason::Superseded);
    let held = granted(
        c.acquire_worker(with_token(
            proto::AcquireWorkerRequest {
                worker: Some(mine.worker),
                ..acquire_request("events", "other")
            },
            tier,
        ))
        .await
        .unwrap()
        .into_inner(),
    )
    .unwrap_err();
    assert_eq!(held, proto::lease_refused::Reason::Held, "still held");

    // The holder's own release with floor 0 keeps the floor it recorded.
    granted(
        c.release_worker(with_token(release_request(renewed, 0), tier))
            .await
            .unwrap()
            .into_inner(),
    )
    .unwrap();
    let next = granted(
        c.acquire_worker(with_token(
            proto::AcquireWorkerRequest {
                worker: Some(mine.worker),
                ..acquire_request("events", "next")
            },
            tier,
        ))
        .await
        .unwrap()
        .into_inner(),
    )
    .unwrap();
    assert_eq!(
        next.floor_unix_ms, 9_000,
        "a release never lowers the floor"
    );
    upper.stop().await;
}

/// Guards against issue 31's attack without `[auth]`: a plain snowflake worker's lease read
/// with `WorkerGroup` and released with floor 0 let a third node take worker 0 while its
/// holder still issued (153 duplicates). The read shows no secret: the release is refused and
/// the holder keeps issuing alone; internal groups stay unreachable without `[auth]` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_a_worker_lease_cannot_be_released_by_another_caller() {
    let store = Arc::new(MemoryAuthority::new());
    let upper = Upper::start(store, TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
    let regional = lower_with(&[upper.url()], &snowflake("0")).await;
    let before = snowflakes(&regional, 10).await;
    let mut c = upper.client().await;
    let read = c
        .worker_group(proto::WorkerGroupRequest {
            group: "events".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let slot = read
        .slots
        .iter()
        .find(|s| s.worker == 0 && s.expires_in_ms.is_some())
        .expect("worker 0 is held through the tier")
        .clone();
    assert!(!slot.holder.contains(" lease "), "{}", slot.holder);
    let forged = proto::WorkerLease {
        group: "events".into(),
        worker: 0,
        token: slot.token,
        floor_unix_ms: 0,
        ttl_ms: 1500,
        holder: slot.holder.clone(),
    };
    let refused = granted(
        c.release_worker(release_request(forged, 0))
            .await
            .unwrap()
            .into_inner(),
    )
    .unwrap_err();
    assert_eq!(refused, proto::lease_refused::Reason::Superseded);
    let held = granted(
        c.acquire_worker(proto::AcquireWorkerRequest {
            worker: Some(0),
            workers: 1024,
            layout: read.layout.clone(),
            ..acquire_request("events", "thief")
        })
        .await
        .unwrap()
        .into_inner(),
    )
    .unwrap_err();
    assert_eq!(held, proto::lease_refused::Reason::Held);
    let after = snowflakes(&regional, 10).await;
    assert!(after[0] > *before.last().unwrap());
    for group in ["events:leader", "events:shards"] {
        let e = c
            .worker_group(proto::WorkerGroupRequest {
                group: group.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{group}: {e:?}");
    }
    regional.shutdown().await;
    upper.stop().await;
}
