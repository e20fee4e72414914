//! The server side of a door: the nodes it needs, on one memory authority, served in process on
//! the calling thread's runtime, and the addresses a client knocks on.
//!
//! Invariants: every node runs on the production clock (`CoarseClock`, as `idmint serve`), so
//! the counted path is the one a deployed node takes; the hot-path namespaces are fixed blocks
//! of 10,000,000 ids, so no refill falls inside a measured window but where the door is the
//! refill; leases live a minute, so no renewal falls inside one either; a forward may wait
//! ten minutes for its answer (`peers.wait_ms`, `forward_timeout_ms`): under callgrind on a
//! loaded machine one takes seconds.

use crate::Door;
use idmint_node::namespace::Namespace;
use idmint_node::strict::Role;
use idmint_node::{FileConfig, Node, Server};
use idmint_store::{Authority, MemoryAuthority};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The namespaces of every node: the hot path's, the refill's, strict order's, owned shards'.
const NAMESPACES: &str = "\
[namespaces.bench]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 10000000\n\n\
[namespaces.refill]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 100\n\n\
[namespaces.chat]\nkind = \"sequence\"\norder = \"strict\"\ncache = \"fixed\"\nblock_size = 10000000\n\n\
[namespaces.photos]\nkind = \"snowflake\"\nlayout = \"instagram\"\nshards = \"owned\"\n\
logical_shards = 64\nshard_range = 8\n";

/// Where a client of one door connects.
pub struct Target {
    /// The HTTP address of the node the door's requests go to.
    pub http: SocketAddr,
    /// Its RESP address.
    pub resp: SocketAddr,
    /// Its gRPC url.
    pub grpc: String,
    /// HTTP addresses of the other nodes (the holder of a shard, the strict leader).
    pub others: Vec<SocketAddr>,
}

/// One node served on this runtime.
struct Member {
    node: Arc<Node>,
    http: SocketAddr,
    resp: SocketAddr,
    grpc: String,
}

/// Starts the nodes `door` needs and returns where to knock; for a forward, once the
/// nodes agree who leads (strict order).
pub async fn start(door: Door) -> Result<Target, String> {
    let store: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let nodes = match door {
        Door::StrictForward | Door::ShardForward => 2,
        _ => 1,
    };
    let mut members = Vec::new();
    for _ in 0..nodes {
        members.push(member(store.clone()).await?);
    }
    let first = match door {
        Door::StrictForward => settle(&members).await?,
        _ => 0,
    };
    let me = &members[first];
    Ok(Target {
        http: me.http,
        resp: me.resp,
        grpc: me.grpc.clone(),
        others: members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != first)
            .map(|(_, m)| m.http)
            .collect(),
    })
}

async fn bind() -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("bind: {e}"))?;
    Ok((listener, addr))
}

async fn member(store: Arc<dyn Authority>) -> Result<Member, String> {
    let (http, http_addr) = bind().await?;
    let (resp, resp_addr) = bind().await?;
    let (grpc, grpc_addr) = bind().await?;
    let url = format!("http://{grpc_addr}");
    let toml = format!(
        "[server]\ngrpc = \"{grpc_addr}\"\n\n\
         [leases]\nttl_ms = 60000\nsafety_margin_ms = 2000\nfloor_ahead_ms = 30000\n\n\
         [peers]\nadvertise = \"{url}\"\ntoken = \"idmint_doors_peer\"\nwait_ms = 600000\nforward_timeout_ms = 600000\n\n{NAMESPACES}"
    );
    let config = FileConfig::parse(&toml)
        .map_err(|e| format!("config: {e}"))?
        .node;
    let clock: Arc<dyn idmint_core::Clock> = Arc::new(idmint_core::CoarseClock::new());
    let node = Node::start_with_clock(config, store, clock)
        .await
        .map_err(|e| format!("node: {e}"))?;
    let server = Server::new(node.clone()).http(http).resp(resp).grpc(grpc);
    tokio::spawn(server.serve());
    Ok(Member {
        node,
        http: http_addr,
        resp: resp_addr,
        grpc: url,
    })
}

/// Waits until one member leads `chat` and the other follows; returns the follower's index.
async fn settle(members: &[Member]) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let roles: Vec<Role> = members.iter().map(|m| role(&m.node)).collect();
        let leaders = roles
            .iter()
            .filter(|r| matches!(r, Role::Leader(_)))
            .count();
        let follower = roles
            .iter()
            .position(|r| matches!(r, Role::Follower { .. }));
        if let (1, Some(follower)) = (leaders, follower) {
            return Ok(follower);
        }
        if Instant::now() > deadline {
            return Err("the strict namespace found no leader within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn role(node: &Node) -> Role {
    match node.served_namespace("chat").as_deref() {
        Some(Namespace::Sequence(s)) => match s.strict_order() {
            Some(strict) => strict.role(),
            None => Role::Seeking("chat is not strict".into()),
        },
        _ => Role::Seeking("chat is not served".into()),
    }
}
