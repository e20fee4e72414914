//! Bounded graceful shutdown: no client can keep a node from stopping, and
//! the buffers are handed back however the drain ends (docs/design.md invariant 3).
//!
//! Each test serves a node in process (`idmint_node::Server::serve` on a real `TcpListener` on
//! `127.0.0.1:0`) and talks to it over raw TCP, so it can send half a request or nothing at
//! all. Timeouts and deadlines are configured short (200 ms) so the test is quick; the only
//! wall-clock bound is [`HANG_GUARD`], which fails a test that hangs instead of blocking the
//! suite. No test sleeps to order events: it waits for the server's answers or for the
//! authority to report a reservation in flight. The one wait with no event to wait for (the
//! connection limit holds the next connection) only checks that nothing happens meanwhile, so
//! a slow machine can weaken it but never fail it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use idmint_node::{Authority, FileConfig, Node, NodeError, Shutdown, ShutdownReport};
use idmint_store::{GiveBack, MemoryAuthority, NamespaceState, Reservation, StoreError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Fails a test that hangs; never reached by a passing one.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A node serving `toml`'s config from `authority` on a fresh port, with its shutdown handle.
struct Served {
    addr: std::net::SocketAddr,
    shutdown: Shutdown,
    handle: JoinHandle<Result<ShutdownReport, NodeError>>,
}

impl Served {
    async fn start(toml: &str, authority: Arc<dyn Authority>) -> Served {
        let config = FileConfig::parse(toml).unwrap().node;
        let node = Node::start(config, authority).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = idmint_node::Server::new(node).http(listener);
        let shutdown = server.shutdown_handle();
        let handle = tokio::spawn(server.serve());
        Served {
            addr,
            shutdown,
            handle,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// Waits (within the hang guard) for `Server::serve` to return, and returns its report.
    async fn stopped(self) -> ShutdownReport {
        tokio::time::timeout(HANG_GUARD, self.handle)
            .await
            .expect("the node did not stop: shutdown is held hostage")
            .unwrap()
            .unwrap()
    }
}

/// Sends a whole `GET path` on `stream` (kept alive) and reads the status line's code.
async fn get(stream: &mut TcpStream, path: &str) -> u16 {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_some(stream).await;
    status_of(&answer)
}

/// Reads what arrives next (at most 64 KiB), within the hang guard: empty when the server
/// closed the connection (or reset it).
async fn read_some(stream: &mut TcpStream) -> String {
    let mut buf = vec![0; 65536];
    let n = tokio::time::timeout(HANG_GUARD, stream.read(&mut buf))
        .await
        .expect("the server neither answered nor closed the connection")
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// A sequence namespace `kept` with a buffer to hand back.
const KEPT: &str = r#"
[namespaces.kept]
kind = "sequence"
cache = "fixed"
block_size = 1000
"#;

/// Guards against one socket that sent half a request header keeping the server alive after
/// SIGTERM until the client leaves: the drain deadline cuts it, `Server::serve` returns, and the
/// buffers are still handed back. (The header-read timeout is long here, so
/// the deadline is what ends it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_header_does_not_hold_shutdown_hostage() {
    let served = Served::start(
        &format!("[server]\nauto_create = false\nheader_read_timeout_ms = 3600000\nidle_timeout_ms = 3600000\ndrain_timeout_ms = 200\n{KEPT}"),
        Arc::new(MemoryAuthority::new()),
    )
    .await;
    let mut client = served.connect().await;
    assert_eq!(get(&mut client, "/v1/ids/kept?count=10").await, 200);
    let mut slow = served.connect().await;
    slow.write_all(b"GET /v1/ids/kept HTTP/1.1\r\nHost: t\r\n")
        .await
        .unwrap();
    served.shutdown.drain();
    let read = tokio::spawn(async move { read_some(&mut slow).await });
    let report = served.stopped().await;
    assert_eq!(
        report.given_back, 990,
        "the unused ids of the block are handed back: {report:?}"
    );
    assert_eq!(report.burned, 0, "{report:?}");
    assert_eq!(
        read.await.unwrap(),
        "",
        "the slow client is cut, not answered"
    );
}

/// An authority whose reservations of the namespace `stuck` never finish (until dropped),
/// reporting each one that starts; every other namespace is a memory authority's.
#[derive(Debug)]
struct StuckAuthority {
    inner: MemoryAuthority,
    started: mpsc::UnboundedSender<()>,
    dropped: Arc<AtomicUsize>,
}

/// Counts a stuck reservation's future being dropped.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Authority for StuckAuthority {
    fn kind(&self) -> &'static str {
        "stuck"
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.inner.ensure_namespace(name, spec).await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if name.as_str() == "stuck" {
            let _dropped = DropCount(self.dropped.clone());
            let _ = self.started.send(());
            std::future::pending::<()>().await;
        }
        self.inner.reserve(name, count).await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.inner.state(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.inner.list().await
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.inner.give_back(name, tail).await
    }
}

/// A request in flight that never finishes (its reservation hangs) is cut at the drain
/// deadline: its client sees the connection closed, the request's future is dropped, and the
/// node still hands back the other namespace's buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_finishes_is_cut_at_the_drain_deadline() {
    let (started, mut reservations) = mpsc::unbounded_channel();
    let dropped = Arc::new(AtomicUsize::new(0));
    let authority = Arc::new(StuckAuthority {
        inner: MemoryAuthority::new(),
        started,
        dropped: dropped.clone(),
    });
    let served = Served::start(
        &format!("[server]\nauto_create = false\nrefill_wait_ms = 60000\ndrain_timeout_ms = 200\n{KEPT}\n[namespaces.stuck]\nkind = \"sequence\"\ncache = \"off\"\n"),
        authority,
    )
    .await;
    let mut client = served.connect().await;
    assert_eq!(get(&mut client, "/v1/ids/kept").await, 200);
    let mut stuck = served.connect().await;
    stuck
        .write_all(b"GET /v1/ids/stuck HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::timeout(HANG_GUARD, reservations.recv())
        .await
        .expect("the stuck request never reached the authority");
    served.shutdown.drain();
    let report = served.stopped().await;
    assert_eq!(report.given_back, 999, "{report:?}");
    assert_eq!(read_some(&mut stuck).await, "", "cut, not answered");
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the request's future is gone before Server::serve returns"
    );
}

/// A second signal (`stop_now`) does not wait for the drain deadline, and still hands back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_and_still_hands_back() {
    let served = Served::start(
        &format!("[server]\nauto_create = false\nheader_read_timeout_ms = 3600000\nidle_timeout_ms = 3600000\ndrain_timeout_ms = 3600000\n{KEPT}"),
        Arc::new(MemoryAuthority::new()),
    )
    .await;
    let mut client = served.connect().await;
    assert_eq!(get(&mut client, "/v1/ids/kept").await, 200);
    let mut slow = served.connect().await;
    slow.write_all(b"GET /v1/ids/kept HTTP/1.1\r\n")
        .await
        .unwrap();
    served.shutdown.drain();
    served.shutdown.stop_now();
    let report = served.stopped().await;
    assert_eq!(report.given_back, 999, "{report:?}");
    assert_eq!(read_some(&mut slow).await, "");
}

/// With `max_connections = 1`, a second connection is not served while the first is open (it
/// waits in the listen backlog), and is served as soon as the first closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_limit_holds_the_next_connection_until_one_closes() {
    let served = Served::start(
        "[server]\nmax_connections = 1\nheader_read_timeout_ms = 3600000\nidle_timeout_ms = 3600000\n",
        Arc::new(MemoryAuthority::new()),
    )
    .await;
    let mut first = served.connect().await;
    // Answered: the first connection holds the only permit.
    assert_eq!(get(&mut first, "/healthz").await, 200);
    let mut second = served.connect().await;
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), second.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "the second connection was served past the limit"
    );
    drop(first);
    assert_eq!(status_of(&read_some(&mut second).await), 200);
    served.shutdown.drain();
    served.stopped().await;
}

/// A connection that sends nothing is closed after `header_read_timeout_ms`, with no shutdown
/// at all; so is one that stops mid-header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_read_timeout_closes_a_silent_connection() {
    let served = Served::start(
        "[server]\nheader_read_timeout_ms = 200\nidle_timeout_ms = 3600000\n",
        Arc::new(MemoryAuthority::new()),
    )
    .await;
    let mut silent = served.connect().await;
    let mut half = served.connect().await;
    half.write_all(b"GET /healthz HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let closed = read_some(&mut silent).await;
    assert!(closed.is_empty() || closed.contains(" 408 "), "{closed:?}");
    let closed = read_some(&mut half).await;
    assert!(closed.is_empty() || closed.contains(" 408 "), "{closed:?}");
    // The node still serves others.
    let mut client = served.connect().await;
    assert_eq!(get(&mut client, "/healthz").await, 200);
    served.shutdown.drain();
    served.stopped().await;
}

/// A connection that goes quiet mid-request (no byte for `idle_timeout_ms`, no request being
/// handled) is closed even when the header-read timeout is long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_closes_a_connection_that_went_quiet() {
    let served = Served::start(
        "[server]\nheader_read_timeout_ms = 3600000\nidle_timeout_ms = 200\n",
        Arc::new(MemoryAuthority::new()),
    )
    .await;
    let mut quiet = served.connect().await;
    assert_eq!(get(&mut quiet, "/healthz").await, 200);
    quiet.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    assert_eq!(read_some(&mut quiet).await, "");
    served.shutdown.drain();
    served.stopped().await;
}
