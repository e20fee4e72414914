//! End-to-end tests of the RESP front-end (docs/resp.md) against nodes served in process by
//! `idmint_node::resp::serve` on `127.0.0.1:0`, driven by real Redis clients: `redis-cli` and
//! redis-py (`resp_client.py`) as subprocesses, plus raw sockets for what clients never send
//! (malformed and oversized frames, inline commands, pipelines written in one go).
//!
//! `redis-cli` and the Python `redis` module are required: a test fails, naming what to install,
//! when one is missing (`bash scripts/test.sh` installs both).
//!
//! What is checked: every command's answer in RESP2 and RESP3; errors in Redis's shapes, on a
//! connection that goes on; pipelined answers in order with ids strictly increasing; ids unique
//! across connections (redis-py, 100k ids); a 32-bit namespace ends with `EXHAUSTED` and never
//! wraps (invariant 6); malformed or oversized input answers a protocol error and closes that
//! connection only; `QUIT` closes; shutdown closes idle connections and `serve` returns without
//! shutting the node down (the caller's hand-back then runs, invariants 2 and 3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::{Authority, FileConfig, Node, NodeConfig, ShutdownReport};
use idmint_store::MemoryAuthority;
use redis_protocol::resp2::decode::decode as decode2;
use redis_protocol::resp2::types::OwnedFrame as Frame;
use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

const DEADLINE: Duration = Duration::from_secs(30);

/// A node with its RESP front-end on a fresh port.
struct RespNode {
    port: u16,
    node: Arc<Node>,
    serving: Option<JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>>,
}

impl RespNode {
    async fn start(config: NodeConfig) -> RespNode {
        let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
        let node = Node::start(config, authority).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let serving = tokio::spawn(
            idmint_node::Server::new(node.clone())
                .resp(listener)
                .serve(),
        );
        RespNode {
            port,
            node,
            serving: Some(serving),
        }
    }

    /// Drains the node: the server returns once every connection closed, after the node
    /// handed its buffers back.
    async fn stop(mut self) -> ShutdownReport {
        self.node.shutdown_handle().drain();
        tokio::time::timeout(DEADLINE, self.serving.take().unwrap())
            .await
            .expect("the server did not return after shutdown")
            .unwrap()
            .unwrap()
    }

    /// `redis-cli -p PORT args...`: its standard output, trimmed.
    async fn cli(&self, args: &[&str]) -> String {
        let mut all = vec!["-p".to_owned(), self.port.to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        run("redis-cli", all, None).await
    }

    /// Writes `request` on a new connection and reads `replies` answers (fewer if the server
    /// closes). Returns them and whether the server closed the connection afterwards.
    async fn raw(&self, request: &[u8], replies: usize) -> (Vec<Frame>, bool) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        stream.write_all(request).await.unwrap();
        read_replies(&mut stream, replies).await
    }
}

impl Drop for RespNode {
    fn drop(&mut self) {
        if let Some(handle) = self.serving.take() {
            handle.abort();
        }
    }
}

/// Reads `count` RESP2 replies from `stream`, then checks (briefly) whether it was closed.
async fn read_replies(stream: &mut TcpStream, count: usize) -> (Vec<Frame>, bool) {
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mut closed = false;
    tokio::time::timeout(DEADLINE, async {
        while frames.len() < count {
            while let Some((frame, used)) = decode2(&buf).unwrap() {
                frames.push(frame);
                buf.drain(..used);
            }
            if frames.len() >= count {
                break;
            }
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                closed = true;
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("the replies did not come in time");
    if !closed {
        // Closed right after the replies (QUIT, protocol errors)? A short wait tells.
        closed = matches!(
            tokio::time::timeout(Duration::from_millis(300), stream.read(&mut chunk)).await,
            Ok(Ok(0)) | Ok(Err(_))
        );
    }
    assert!(
        buf.is_empty(),
        "unexpected bytes after the replies: {buf:?}"
    );
    (frames, closed)
}

/// Runs `program args` (off the runtime's threads), feeding `stdin`; fails loudly if the program
/// is missing or fails.
async fn run(program: &str, args: Vec<String>, stdin: Option<Vec<u8>>) -> String {
    let program = program.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(&program)
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {program} ({e}): it is required by these tests; \
                     `bash scripts/test.sh` installs it (Debian: redis-tools, python3 -m pip install redis)"
                )
            });
        let mut input = child.stdin.take().unwrap();
        if let Some(bytes) = stdin {
            input.write_all(&bytes).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success(),
            "{program} {args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    })
    .await
    .unwrap()
}

/// A RESP request of `words`.
fn request(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

fn int(frame: &Frame) -> i64 {
    match frame {
        Frame::Integer(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

#[track_caller]
fn error(frame: &Frame) -> String {
    match frame {
        Frame::Error(e) => e.clone(),
        other => panic!("not an error: {other:?}"),
    }
}

fn config(toml: &str) -> NodeConfig {
    FileConfig::parse(toml).unwrap().node
}

/// Namespaces of every kind; `orders` is auto-created.
fn every_kind() -> NodeConfig {
    config(
        r#"
        [server]
        max_count = 1000
        [namespaces.sessions]
        kind = "uuid7"
        [namespaces.codes]
        kind = "ulid"
        [namespaces.tweets]
        kind = "snowflake"
        layout = "twitter"
        worker = 7
        [namespaces.grams]
        kind = "snowflake"
        layout = "instagram"
        worker = 5
        [namespaces.odd]
        kind = "sequence"
        step = 2
        offset = 1
        "#,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_gets_ids_of_every_kind() {
    let node = RespNode::start(every_kind()).await;
    assert_eq!(node.cli(&["PING"]).await, "PONG");
    let first: u64 = node.cli(&["INCR", "orders"]).await.parse().unwrap();
    let second: u64 = node.cli(&["incr", "orders"]).await.parse().unwrap();
    assert!(second > first, "{first} then {second}");

    // INCRBY: the last of n consecutive ids.
    let last: u64 = node.cli(&["INCRBY", "orders", "10"]).await.parse().unwrap();
    assert!(last >= second + 10, "{last}");

    let next = node.cli(&["IDMINT.NEXT", "orders", "3"]).await;
    let next: Vec<u64> = next.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(next.len(), 3);
    assert!(
        next[0] > last && next.windows(2).all(|w| w[0] < w[1]),
        "{next:?}"
    );

    let block = node.cli(&["IDMINT.BLOCK", "orders", "50"]).await;
    let block: Vec<&str> = block.lines().collect();
    assert_eq!(
        [block[0], block[2], block[4]],
        ["start", "end", "step"],
        "{block:?}"
    );
    let (start, end): (u64, u64) = (block[1].parse().unwrap(), block[3].parse().unwrap());
    assert!(
        start > next[2] && end > start && end - start <= 50,
        "{block:?}"
    );

    let decoded = node
        .cli(&["IDMINT.DECODE", "orders", &first.to_string()])
        .await;
    assert!(
        decoded.contains("sequence") && decoded.contains("issued"),
        "{decoded}"
    );

    let uuid = node.cli(&["INCR", "sessions"]).await;
    assert_eq!(uuid.len(), 36, "{uuid}");
    assert_eq!(&uuid[14..15], "7", "{uuid}");
    let ulid = node.cli(&["INCR", "codes"]).await;
    assert_eq!(ulid.len(), 26, "{ulid}");
    let tweet: u64 = node.cli(&["INCR", "tweets"]).await.parse().unwrap();
    let decoded = node
        .cli(&["IDMINT.DECODE", "tweets", &tweet.to_string()])
        .await;
    assert!(decoded.contains("worker\n7"), "{decoded}");
    let gram: u64 = node.cli(&["INCR", "grams"]).await.parse().unwrap();
    let decoded = node
        .cli(&["IDMINT.DECODE", "grams", &gram.to_string()])
        .await;
    assert!(
        decoded.contains("shard\n5") && !decoded.contains("worker"),
        "{decoded}"
    );
    let odd: u64 = node.cli(&["INCR", "odd"]).await.parse().unwrap();
    assert_eq!(odd % 2, 1);

    // Errors, in the shapes Redis writes (redis-cli prints the error line).
    let cases: [(&[&str], &str); 9] = [
        (
            &["NOSUCH", "a"],
            "ERR unknown command 'NOSUCH', with args beginning with: 'a'",
        ),
        (
            &["INCR"],
            "ERR wrong number of arguments for 'incr' command",
        ),
        (
            &["GET", "orders"],
            "ERR 'GET' is not supported: idmint stores no keys",
        ),
        (
            &["INCRBY", "tweets", "5"],
            "WRONGKIND namespace \"tweets\" is a snowflake namespace",
        ),
        (
            &["INCRBY", "odd", "5"],
            "WRONGKIND namespace \"odd\" has step 2",
        ),
        (&["IDMINT.BLOCK", "sessions", "5"], "WRONGKIND"),
        (
            &["IDMINT.NEXT", "orders", "0"],
            "ERR count must be at least 1",
        ),
        (
            &["IDMINT.NEXT", "orders", "1001"],
            "ERR count 1001 is above this server's maximum of 1000",
        ),
        (&["INCR", "no/slash"], "ERR invalid namespace name"),
    ];
    for (args, expected) in cases {
        let got = node.cli(args).await;
        assert!(got.starts_with(expected), "{args:?}: {got}");
    }
    node.stop().await;
}

/// Pipelining: `redis-cli --pipe` sends 10k INCRs at once and counts the replies; a raw
/// pipeline of mixed commands in one write gets its answers in order.
/// `IDMINT.REBASE` and `IDMINT.RETIRE` through redis-cli: forward-only, answered as a map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_rebases_and_retires_a_namespace() {
    let node = RespNode::start(every_kind()).await;
    let first: u64 = node.cli(&["INCR", "orders"]).await.parse().unwrap();
    assert_eq!(first, 1);
    let answer = node.cli(&["IDMINT.REBASE", "orders", "999999"]).await;
    let lines: Vec<&str> = answer.lines().collect();
    let field = |name: &str| {
        let i = lines
            .iter()
            .position(|l| *l == name)
            .unwrap_or_else(|| panic!("{answer}"));
        lines[i + 1].to_string()
    };
    assert_eq!(
        (field("action"), field("watermark")),
        ("rebase".into(), "1000000".into())
    );
    assert_eq!(node.cli(&["INCR", "orders"]).await, "1000000");
    let lower = node.cli(&["IDMINT.REBASE", "orders", "5"]).await;
    assert!(lower.contains("rebase"), "{lower}");
    assert_eq!(
        node.cli(&["INCR", "orders"]).await,
        "1000001",
        "nothing moved"
    );
    let bad = node.cli(&["IDMINT.REBASE", "orders", "x"]).await;
    assert!(
        bad.contains("invalid_request") || bad.starts_with("ERR"),
        "{bad}"
    );
    let retired = node.cli(&["IDMINT.RETIRE", "orders"]).await;
    assert!(
        retired.contains("retire") && retired.contains("9223372036854775808"),
        "{retired}"
    );
    let after = node.cli(&["INCR", "orders"]).await;
    assert!(after.starts_with("RETIRED"), "{after}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_answers_come_in_order() {
    let node = RespNode::start(every_kind()).await;
    let mut input = Vec::new();
    for _ in 0..10_000 {
        input.extend(request(&["INCR", "orders"]));
    }
    let summary = run(
        "redis-cli",
        vec!["-p".into(), node.port.to_string(), "--pipe".into()],
        Some(input),
    )
    .await;
    assert!(summary.contains("errors: 0, replies: 10000"), "{summary}");

    // One write of 2000 INCRs with errors and other commands among them.
    let mut input = Vec::new();
    for i in 0..2000 {
        input.extend(request(&["INCR", "orders"]));
        if i % 100 == 0 {
            input.extend(request(&["GET", "orders"]));
            input.extend(request(&["PING"]));
        }
    }
    let (replies, closed) = node.raw(&input, 2040).await;
    assert!(!closed);
    let mut ids = Vec::new();
    let mut i = 0;
    for n in 0..2000 {
        ids.push(int(&replies[i]));
        i += 1;
        if n % 100 == 0 {
            assert!(error(&replies[i]).starts_with("ERR 'GET'"));
            assert_eq!(replies[i + 1], Frame::SimpleString(b"PONG".to_vec()));
            i += 2;
        }
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "pipelined ids not increasing"
    );
    assert!(
        ids[0] > 10_000,
        "the --pipe run's ids came first: {}",
        ids[0]
    );

    // Answers far larger than the output buffer (300 x 1000 ids, about 3.5 MB) are written as
    // they are produced, still in order.
    let mut input = Vec::new();
    for _ in 0..300 {
        input.extend(request(&["IDMINT.NEXT", "orders", "1000"]));
    }
    let (replies, _) = node.raw(&input, 300).await;
    let mut big = Vec::new();
    for r in &replies {
        let Frame::Array(a) = r else { panic!("{r:?}") };
        assert_eq!(a.len(), 1000);
        big.extend(a.iter().map(int));
    }
    assert!(big[0] > ids[1999] && big.windows(2).all(|w| w[0] < w[1]));
    node.stop().await;
}

/// redis-py (RESP2 and RESP3, pipelines, 100k ids over 4 connections): see resp_client.py.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_gets_ids_over_resp2_and_resp3() {
    let node = RespNode::start(every_kind()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/resp_client.py");
    let out = run("python3", vec![script.into(), node.port.to_string()], None).await;
    assert!(out.contains("checks passed"), "{out}");
    node.stop().await;
}

/// Errors leave the connection usable; `HELLO 3` switches to RESP3 maps; `CLIENT` and the
/// handshake commands answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_the_connection_and_handshakes_answer() {
    let node = RespNode::start(every_kind()).await;
    let mut input = Vec::new();
    for words in [
        &["NOSUCH"][..],
        &["INCR", "a", "b"],
        &["SET", "k", "v"],
        &["IDMINT.DECODE", "orders", "x"],
        &["CLIENT", "SETNAME", "me"],
        &["CLIENT", "GETNAME"],
        &["CLIENT", "SETINFO", "LIB-NAME", "x"],
        &["SELECT", "0"],
        &["SELECT", "1"],
        &["COMMAND", "DOCS"],
        &["CONFIG", "GET", "save"],
        &["HELLO", "4"],
        &["ECHO", "hi"],
        &["INFO"],
    ] {
        input.extend(request(words));
    }
    input.extend(request(&["PING"]));
    let (r, closed) = node.raw(&input, 15).await;
    assert!(!closed);
    assert!(error(&r[0]).starts_with("ERR unknown command 'NOSUCH'"));
    assert_eq!(
        error(&r[1]),
        "ERR wrong number of arguments for 'incr' command"
    );
    assert!(error(&r[2]).starts_with("ERR 'SET' is not supported"));
    assert!(
        error(&r[3])
            .starts_with("NONAMESPACE namespace \"orders\" does not exist; reads do not create"),
        "{:?}",
        r[3]
    );
    assert_eq!(r[4], Frame::SimpleString(b"OK".to_vec()));
    assert_eq!(r[5], Frame::BulkString(b"me".to_vec()));
    assert_eq!(r[6], Frame::SimpleString(b"OK".to_vec()));
    assert_eq!(r[7], Frame::SimpleString(b"OK".to_vec()));
    assert!(error(&r[8]).starts_with("ERR DB index"));
    assert_eq!(r[9], Frame::Array(vec![]));
    // What redis-benchmark reads at start-up: the parameter and its value (no snapshots).
    assert_eq!(
        r[10],
        Frame::Array(vec![
            Frame::BulkString(b"save".to_vec()),
            Frame::BulkString(Vec::new())
        ])
    );
    assert!(error(&r[11]).starts_with("NOPROTO"));
    assert_eq!(r[12], Frame::BulkString(b"hi".to_vec()));
    let Frame::BulkString(info) = &r[13] else {
        panic!("{:?}", r[13])
    };
    assert!(String::from_utf8_lossy(info).contains("redis_version:"));
    assert_eq!(r[14], Frame::SimpleString(b"PONG".to_vec()));
    // A frame that is RESP but not a request (an integer): the stream cannot be trusted any
    // more, so it is answered and closed.
    let (r, closed) = node.raw(b":12\r\n", 1).await;
    assert!(
        error(&r[0]).starts_with("ERR Protocol error: a request must be"),
        "{r:?}"
    );
    assert!(closed);

    // RESP3 after HELLO 3: a map for HELLO and IDMINT.BLOCK, `_` for null.
    let mut stream = TcpStream::connect(("127.0.0.1", node.port)).await.unwrap();
    let mut input = request(&["HELLO", "3"]);
    input.extend(request(&["IDMINT.BLOCK", "orders", "10"]));
    input.extend(request(&["CLIENT", "GETNAME"]));
    stream.write_all(&input).await.unwrap();
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let mut chunk = [0u8; 4096];
    while frames.len() < 3 {
        let n = tokio::time::timeout(DEADLINE, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
        while let Some((frame, used)) =
            redis_protocol::resp3::decode::complete::decode(&buf).unwrap()
        {
            frames.push(frame);
            buf.drain(..used);
        }
    }
    use redis_protocol::resp3::types::{OwnedFrame as F3, Resp3Frame};
    let F3::Map { data: hello, .. } = &frames[0] else {
        panic!("HELLO 3 is not a map: {:?}", frames[0])
    };
    let proto = hello
        .iter()
        .find(|(k, _)| k.as_str() == Some("proto"))
        .map(|(_, v)| v.clone());
    assert_eq!(
        proto,
        Some(F3::Number {
            data: 3,
            attributes: None
        })
    );
    assert!(
        matches!(&frames[1], F3::Map { data, .. } if data.len() == 4),
        "{:?}",
        frames[1]
    );
    assert_eq!(frames[2], F3::Null);
    node.stop().await;
}

/// Malformed, oversized and inline input answers a protocol error and closes that connection;
/// the server goes on. `QUIT` answers `+OK` and closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_its_connection() {
    let node = RespNode::start(every_kind()).await;
    let bad: [&[u8]; 4] = [
        b"*1\r\n$abc\r\nPING\r\n",
        b"?what\r\n",
        b"PING\r\n",
        b"*2\r\n$4\r\nINCR\r\n$-5\r\n",
    ];
    for input in bad {
        let (r, closed) = node.raw(input, 1).await;
        assert_eq!(r.len(), 1, "{input:?}");
        assert!(error(&r[0]).starts_with("ERR Protocol error"), "{r:?}");
        assert!(closed, "{input:?}: not closed");
    }
    // A bulk string announced as 1 GB: refused once the request passes 64 KiB, without
    // waiting for (or allocating) the rest.
    let mut stream = TcpStream::connect(("127.0.0.1", node.port)).await.unwrap();
    stream
        .write_all(b"*2\r\n$4\r\nINCR\r\n$1000000000\r\n")
        .await
        .unwrap();
    let filler = vec![b'a'; 80 * 1024];
    // The server may close before reading all of it.
    let _ = stream.write_all(&filler).await;
    let (r, closed) = read_replies(&mut stream, 1).await;
    assert!(error(&r[0]).contains("larger than 65536 bytes"), "{r:?}");
    assert!(closed);
    // An array of more arguments than any command has is refused from its header, before its
    // items are read; so is an array nested in it, however deep (no recursion).
    let mut many = b"*5000\r\n".to_vec();
    for _ in 0..5000 {
        many.extend(b"$1\r\nx\r\n");
    }
    let (r, closed) = node.raw(&many, 1).await;
    assert!(error(&r[0]).contains("announces 5000"), "{r:?}");
    assert!(closed);
    let (r, closed) = node.raw(&b"*1\r\n".repeat(8000), 1).await;
    assert!(error(&r[0]).contains("nested arrays"), "{r:?}");
    assert!(closed);

    let mut input = request(&["INCR", "orders"]);
    input.extend(request(&["QUIT"]));
    input.extend(request(&["INCR", "orders"]));
    let (r, closed) = node.raw(&input, 3).await;
    assert_eq!(r.len(), 2, "nothing is answered after QUIT: {r:?}");
    assert_eq!(r[1], Frame::SimpleString(b"OK".to_vec()));
    assert!(closed);
    assert_eq!(node.cli(&["PING"]).await, "PONG");
    node.stop().await;
}

/// Invariant 6 over RESP: a 32-bit namespace hands out exactly the ids up to 2^31 - 1, then
/// answers `EXHAUSTED` on every request, never a wrapped id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_32_bit_namespace_says_so() {
    let mut cfg = config(
        r#"
        [namespaces.small]
        kind = "sequence"
        width = 32
        start = 2147483000
        cache = "fixed"
        block_size = 100
        "#,
    );
    cfg.refill_wait = Duration::from_millis(500);
    let node = RespNode::start(cfg).await;
    let mut input = Vec::new();
    for _ in 0..700 {
        input.extend(request(&["INCR", "small"]));
    }
    let (r, _) = node.raw(&input, 700).await;
    let ids: Vec<i64> = r[..648].iter().map(int).collect();
    assert_eq!(ids, (2_147_483_000..=2_147_483_647).collect::<Vec<i64>>());
    for e in &r[648..] {
        let e = error(e);
        assert!(e.starts_with("EXHAUSTED namespace \"small\""), "{e}");
        assert!(e.contains("32-bit"), "{e}");
    }
    let got = node.cli(&["IDMINT.BLOCK", "small", "5"]).await;
    assert!(got.starts_with("EXHAUSTED"), "{got}");
    node.stop().await;
}

/// Shutdown: `serve` closes idle connections and returns; a client mid-pipeline gets every
/// answer of the commands that ran, in order. The node is not shut down by `serve`: the caller's
/// hand-back afterwards gives back the unused tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections_and_leaves_the_node_to_the_caller() {
    let node = RespNode::start(every_kind()).await;
    let (r, _) = node.raw(&request(&["INCR", "orders"]), 1).await;
    let first = int(&r[0]);
    let mut idle = TcpStream::connect(("127.0.0.1", node.port)).await.unwrap();
    idle.write_all(&request(&["PING"])).await.unwrap();
    let (r, _) = read_replies(&mut idle, 1).await;
    assert_eq!(r[0], Frame::SimpleString(b"PONG".to_vec()));
    let port = node.port;
    let inner = node.node.clone();
    assert!(!inner.is_draining());
    let report = node.stop().await;
    assert!(report.given_back > 0, "{report:?}");
    let mut chunk = [0u8; 16];
    let n = tokio::time::timeout(DEADLINE, idle.read(&mut chunk))
        .await
        .expect("the idle connection was not closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "idle connection got bytes after shutdown");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).await.is_err(),
        "still accepting after shutdown"
    );
    assert!(first > 0);
}

/// Ids over several connections at once are unique (raw pipelines, 8 connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_connections_never_share_an_id() {
    let node = Arc::new(RespNode::start(every_kind()).await);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            let mut input = Vec::new();
            for _ in 0..500 {
                input.extend(request(&["INCR", "orders"]));
                input.extend(request(&["IDMINT.NEXT", "orders", "10"]));
            }
            let (r, _) = node.raw(&input, 1000).await;
            let mut ids = Vec::new();
            for f in r {
                match f {
                    Frame::Integer(n) => ids.push(n),
                    Frame::Array(a) => ids.extend(a.iter().map(int)),
                    other => panic!("{other:?}"),
                }
            }
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            ids
        }));
    }
    let mut all = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(all.len(), 8 * 500 * 11);
    let node = Arc::try_unwrap(node).ok().unwrap();
    node.stop().await;
}

/// The state of sequence namespace `name` on `node`.
async fn sequence_state(node: &RespNode, name: &str) -> idmint_api::SequenceState {
    let ns = node.node.served_namespace(name).unwrap();
    match ns.info(node.node.now()) {
        idmint_api::NamespaceInfo::Sequence { state, .. } => state,
        other => panic!("{other:?}"),
    }
}

/// `INCRBY` over a block remainder too short for it: the remainder is burned and counted as
/// burned, never as served; the ids the caller owns are consecutive, above everything before,
/// and below everything after; the node's accounting adds up exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incrby_burns_a_short_remainder_and_counts_it_as_burned() {
    let node = RespNode::start(config(
        r#"
        [namespaces.fixed]
        kind = "sequence"
        cache = "fixed"
        block_size = 10
        low_water = 0.1
        "#,
    ))
    .await;
    let first: u64 = node.cli(&["INCR", "fixed"]).await.parse().unwrap();
    assert_eq!(first, 1);
    // 2..=8 from the first block, leaving 9 and 10.
    let v: u64 = node.cli(&["INCRBY", "fixed", "7"]).await.parse().unwrap();
    assert_eq!(v, 8);
    // Five consecutive ids: either 9..=13 (the next block arrived and joined the remainder) or,
    // with 9 and 10 burned, 11..=15.
    let v: u64 = node.cli(&["INCRBY", "fixed", "5"]).await.parse().unwrap();
    let next: u64 = node.cli(&["INCR", "fixed"]).await.parse().unwrap();
    assert!(next > v, "{v} then {next}");
    let state = sequence_state(&node, "fixed").await;
    eprintln!("INCRBY 5 answered {v}; burned {}", state.ids_burned);
    let burned_expected = match v {
        13 => 0,
        15 => 2,
        other => panic!("INCRBY 5 answered {other}: neither 13 nor 15"),
    };
    assert_eq!(state.ids_burned, burned_expected, "{state:?}");
    assert_eq!(state.ids_served, 1 + 7 + 5 + 1, "{state:?}");
    assert_eq!(
        state.ids_reserved,
        state.ids_served + state.ids_buffered + state.ids_burned + state.ids_given_back,
        "{state:?}"
    );
    node.stop().await;
}

/// `redis-benchmark -t incr`, unchanged: its key `counter:__rand_int__` is a namespace name
/// (`:` is allowed after the first character), and every INCR it sent took one id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_benchmark_incr_runs_against_the_resp_port() {
    let node = RespNode::start(config("")).await;
    run(
        "redis-benchmark",
        vec![
            "-p".into(),
            node.port.to_string(),
            "-t".into(),
            "incr".into(),
            "-n".into(),
            "2000".into(),
            "-c".into(),
            "4".into(),
            "-q".into(),
        ],
        None,
    )
    .await;
    let state = sequence_state(&node, "counter:__rand_int__").await;
    assert_eq!(state.ids_served, 2000, "{state:?}");
    let next: u64 = node
        .cli(&["INCR", "counter:__rand_int__"])
        .await
        .parse()
        .unwrap();
    assert_eq!(next, 2001);
    // Counted per command: every INCR answered ok, and the handshake's CONFIG GET too.
    let text = node
        .node
        .metrics()
        .encode(idmint_node::metrics::Format::Prometheus);
    assert!(
        text.contains("idmint_resp_commands_total{command=\"incr\",outcome=\"ok\"} 2001\n"),
        "{text}"
    );
    assert!(
        text.contains("idmint_resp_commands_total{command=\"incr\",outcome=\"error\"} 0\n"),
        "{text}"
    );
    node.stop().await;
}

/// `server.max_connections` bounds RESP connections too: a third connection to a node allowing
/// two gets no answer until one of the first two closes, then it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_until_one_closes() {
    let node = RespNode::start(config("[server]\nmax_connections = 2\n")).await;
    let ping = request(&["PING"]);
    let mut first = TcpStream::connect(("127.0.0.1", node.port)).await.unwrap();
    let mut second = TcpStream::connect(("127.0.0.1", node.port)).await.unwrap();
    for stream in [&mut first, &mut second] {
        stream.write_all(&ping).await.unwrap();
        let (replies, _) = read_replies(stream, 1).await;
        assert_eq!(replies, vec![Frame::SimpleString(b"PONG".to_vec())]);
    }
    // The third is connected by the kernel (listen backlog) but not accepted: no answer.
    let mut third = TcpStream::connect(("127.0.0.1", node.port)).await.unwrap();
    third.write_all(&ping).await.unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "the third connection was answered: {early:?}"
    );
    // One closes: the third is accepted and answers the PING it sent while waiting.
    drop(first);
    let (replies, _) = tokio::time::timeout(DEADLINE, read_replies(&mut third, 1))
        .await
        .expect("the third connection was not served after one closed");
    assert_eq!(replies, vec![Frame::SimpleString(b"PONG".to_vec())]);
    drop(second);
    drop(third);
    node.stop().await;
}
