//! Regression tests, on real `idmint serve` processes, of what reached a node through its
//! doors before one request path and one server kept the same rules on every one of them.
//! Each test names the finding it guards; each failed on the commit before that change:
//!
//! - an unauthenticated client sending `*1\r\n` 8,000 times to `--resp` overflowed the stack
//!   (the process died); the process must stay alive and HTTP still answer;
//! - silent connections (and connections quiet after one command) to RESP, and connections
//!   that never send the HTTP/2 preface to gRPC, stayed open for good, so with
//!   `max_connections` of them no real `INCR` or gRPC `Next` was ever served;
//! - `NextStream` calls a client never reads were not bounded: beyond `server.max_streams` they
//!   are refused with `RESOURCE_EXHAUSTED` / `too_many_streams`, and the node's RSS stays
//!   bounded;
//! - a rate-limited token's quota buckets were kept per name asked for, known or not: 100,000
//!   unknown names must leave RSS and later requests' latency where they were;
//! - `idmint serve 2>&1 | head -3`: once the reader of the log closed the pipe, each log line
//!   panicked the thread that wrote it; the node must still answer in full, stop cleanly on
//!   SIGTERM (exit 0, buffers handed back), and with `| head -2` not die at start.
//!
//! Memory and time figures are printed (`--nocapture`); the bounds asserted are generous.
//! No test sleeps to order events: each waits for an answer, a closed socket, or a condition
//! polled against a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_proto::v1 as proto;
use idmint_proto::v1::idmint_client::IdmintClient;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{http_get, parse_ids, wait_with_deadline, Server, DEADLINE};
use tonic::transport::{Channel, Endpoint};

/// How long a real request may take once the node's deadlines have closed what held it.
const SERVED_WITHIN: Duration = Duration::from_secs(15);

const TOKEN: &str = "idmint_doors_token";

/// `[[auth.tokens]]` with every scope on every namespace, and `extra` keys.
fn token_config(extra: &str) -> String {
    let hash = idmint_node::auth::TokenHash::of(TOKEN.as_bytes());
    format!("[[auth.tokens]]\nhash = \"{hash}\"\nscopes = {{ \"*\" = [\"ids\", \"blocks\", \"read\"] }}\n{extra}")
}

/// `idmint serve` with `config`, and `--grpc` and `--resp` on ports the kernel picks: the
/// server and the gRPC and RESP addresses.
fn serve(dir: &Path, config: &str) -> (Server, SocketAddr, SocketAddr) {
    let path = dir.join("idmint.toml");
    std::fs::write(&path, config).unwrap();
    let data = dir.join("data");
    let server = Server::start_with(dir, &data, "127.0.0.1:0", Some(&path), |cmd| {
        cmd.args(["--grpc", "127.0.0.1:0", "--resp", "127.0.0.1:0"]);
    });
    let address = |line: String, prefix: &str| -> SocketAddr {
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("not {prefix:?}: {line}"))
            .parse()
            .unwrap()
    };
    let grpc = address(server.next_line(), "idmint gRPC listening on ");
    let resp = address(server.next_line(), "idmint RESP listening on ");
    (server, grpc, resp)
}

/// A RESP request of `words`.
fn request(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

/// Reads one RESP reply's lines (a simple line, or an array of simple lines), as text.
fn reply(reader: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    if let Some(n) = line.strip_prefix('*') {
        for _ in 0..n.trim().parse::<usize>().unwrap_or(0) {
            reader.read_line(&mut line)?;
        }
    }
    Ok(line)
}

/// A RESP connection to `addr` that gives up reading after `timeout`.
fn resp_connect(addr: SocketAddr, timeout: Duration) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

/// `words` on a new connection to `addr` (after `AUTH` when `token`): the reply, or why none
/// came within `timeout`.
fn resp_once(
    addr: SocketAddr,
    token: Option<&str>,
    words: &[&str],
    timeout: Duration,
) -> std::io::Result<String> {
    let (mut stream, mut reader) = resp_connect(addr, timeout);
    if let Some(token) = token {
        stream.write_all(&request(&["AUTH", token]))?;
        assert_eq!(reply(&mut reader)?, "+OK\r\n");
    }
    stream.write_all(&request(words))?;
    reply(&mut reader)
}

/// Reads until the peer closes (or `DEADLINE`): what was read.
fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                panic!("the node did not close the connection within {DEADLINE:?}")
            }
            Err(_) => return got,
        }
    }
}

/// The node's resident memory, KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// Fails, with the node's log, unless its HTTP port still answers `/healthz`.
fn assert_alive(server: &Server) {
    let answered = std::panic::catch_unwind(|| http_get(server.addr, "/healthz"));
    match answered {
        Ok((200, _)) => {}
        other => panic!(
            "the node no longer answers ({other:?}); its log:\n{}",
            server.stderr_so_far()
        ),
    }
}

/// A runtime for the gRPC client.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A gRPC client of `addr` whose HTTP/2 windows are the protocol's default 64 KiB.
async fn grpc_client(addr: SocketAddr) -> IdmintClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    IdmintClient::new(channel)
}

/// `Next` of one id of `ns`, with the token.
fn next_request(ns: &str) -> tonic::Request<proto::NextRequest> {
    let mut request = tonic::Request::new(proto::NextRequest {
        namespace: ns.into(),
        count: Some(1),
        shard: None,
        key: None,
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    request
}

/// Guards against what a review found: `*1\r\n` 8,000 times, sent to `--resp` by a client that never authenticated,
/// was decoded recursively and overflowed the stack: the process died. Now it is a protocol
/// error on that connection, and the node goes on.
#[test]
fn nested_arrays_before_auth_do_not_crash_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _, resp) = serve(dir.path(), &token_config(""));
    let mut stream = TcpStream::connect(resp).unwrap();
    // The node may close before reading all of it.
    let _ = stream.write_all(&b"*1\r\n".repeat(8000));
    let answer = read_to_close(&mut stream);
    assert_alive(&server);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("-ERR Protocol error"),
        "not a protocol error: {answer:?}"
    );
    // RESP itself still serves.
    let id = resp_once(resp, Some(TOKEN), &["INCR", "after"], DEADLINE).unwrap();
    assert_eq!(id, ":1\r\n");
    let (status, rest) = server.terminate();
    assert!(status.success(), "{status:?} {rest:?}");
}

/// Short deadlines: the first request within 3 s of the accept (opening 256 connections may
/// take a second), then 2 s of quiet.
const DEADLINES: &str =
    "[server]\nheader_read_timeout_ms = 3000\nidle_timeout_ms = 2000\nmax_connections = 256\n";

/// Guards against what a review found: 1024 silent TCP connections to the RESP port all stayed open and a real `INCR`
/// timed out (RESP had no first-request deadline, and kept idle connections for good). Half of
/// these connections send nothing, half one `PING` then nothing: all of them are closed at
/// their deadlines, and a real `INCR` is served.
#[test]
fn silent_resp_connections_do_not_lock_out_incr() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _, resp) = serve(dir.path(), &token_config(DEADLINES));
    let mut held = Vec::new();
    for i in 0..256 {
        let (mut stream, mut reader) = resp_connect(resp, DEADLINE);
        if i % 2 == 1 {
            stream.write_all(&request(&["PING"])).unwrap();
            assert_eq!(reply(&mut reader).unwrap(), "+PONG\r\n");
        }
        held.push(stream);
    }
    let started = Instant::now();
    let id = resp_once(resp, Some(TOKEN), &["INCR", "real"], SERVED_WITHIN).unwrap_or_else(|e| {
        panic!("no answer within {SERVED_WITHIN:?} while 256 quiet connections are open: {e}")
    });
    println!("INCR answered after {:?}", started.elapsed());
    assert_eq!(id, ":1\r\n");
    for stream in &mut held {
        read_to_close(stream);
    }
    let (status, rest) = server.terminate();
    assert!(status.success(), "{status:?} {rest:?}");
}

/// Guards against what a review found: plaintext gRPC connections that never sent the HTTP/2 preface were never closed:
/// `max_connections` of them and no `Next` was served again. Now each is closed at
/// `header_read_timeout_ms`, and a real `Next` is served.
#[test]
fn grpc_connections_without_the_preface_do_not_lock_out_next() {
    let dir = tempfile::tempdir().unwrap();
    let (server, grpc, _) = serve(dir.path(), &token_config(DEADLINES));
    let opening = Instant::now();
    let mut held: Vec<TcpStream> = (0..256)
        .map(|_| TcpStream::connect(grpc).unwrap())
        .collect();
    println!("256 silent connections opened in {:?}", opening.elapsed());
    let rt = runtime();
    let started = Instant::now();
    let answer = rt.block_on(async {
        tokio::time::timeout(SERVED_WITHIN, async {
            grpc_client(grpc).await.next(next_request("real")).await
        })
        .await
    });
    let outcome = if answer.is_ok() {
        "answered"
    } else {
        "unanswered"
    };
    println!("Next {outcome} after {:?}", started.elapsed());
    let ids = answer
        .unwrap_or_else(|_| {
            panic!("no Next within {SERVED_WITHIN:?} behind 256 silent connections")
        })
        .unwrap()
        .into_inner();
    assert!(matches!(ids.ids, Some(proto::ids::Ids::U64(u)) if u.ids == [1]));
    for stream in &mut held {
        read_to_close(stream);
    }
    let (status, rest) = server.terminate();
    assert!(status.success(), "{status:?} {rest:?}");
}

/// The ids served of `ns` so far, from `/metrics`.
fn served(addr: SocketAddr, ns: &str) -> u64 {
    let (status, text) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    let prefix = format!("idmint_ids_served_total{{namespace=\"{ns}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Guards against what a review found: `NextStream` calls a client never reads were not bounded in number, and each
/// took ids ahead of the client. Now at most `server.max_streams` (256 by default) are open
/// at once, the next are refused with `RESOURCE_EXHAUSTED` and `too_many_streams`, and the
/// node's memory stays bounded while they are held.
#[test]
fn streams_a_client_never_reads_are_bounded() {
    const STREAMS: usize = 300;
    const LIMIT: usize = 256;
    let dir = tempfile::tempdir().unwrap();
    let (server, grpc, _) = serve(dir.path(), &token_config(""));
    let pid = server.pid();
    let rt = runtime();
    let before = rt.block_on(async {
        let mut client = grpc_client(grpc).await;
        client.next(next_request("flows")).await.unwrap();
        rss_kib(pid)
    });
    let (held, refused, peak) = rt.block_on(async {
        // Six connections of 50 calls: under the node's 128 streams per connection.
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..STREAMS / 50 {
            let client = grpc_client(grpc).await;
            for _ in 0..50 {
                let mut client = client.clone();
                calls.spawn(async move {
                    let mut request = tonic::Request::new(proto::NextStreamRequest {
                        namespace: "flows".into(),
                        total: 100_000_000,
                        chunk: None,
                    });
                    request
                        .metadata_mut()
                        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
                    client.next_stream(request).await
                });
            }
        }
        let (mut held, mut refused) = (Vec::new(), 0);
        while let Some(call) = tokio::time::timeout(DEADLINE, calls.join_next())
            .await
            .expect("every call is answered (opened or refused)")
        {
            match call.unwrap() {
                Ok(stream) => held.push(stream),
                Err(status) => {
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                    let code = status.metadata().get("idmint-error-code").unwrap();
                    assert_eq!(code.to_str().unwrap(), "too_many_streams");
                    refused += 1;
                }
            }
        }
        // The streams are open and never read: watch the node's memory for two seconds.
        let mut peak = rss_kib(pid);
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            peak = peak.max(rss_kib(pid));
        }
        (held, refused, peak)
    });
    let taken = served(server.addr, "flows");
    println!(
        "{} streams open, {refused} refused; RSS {before} KiB before, {peak} KiB at most while \
         held (+{} KiB); {taken} ids taken",
        held.len(),
        peak.saturating_sub(before)
    );
    assert_eq!((held.len(), refused), (LIMIT, STREAMS - LIMIT));
    // Each open stream holds at most one chunk (10,000 ids, 80 KB) and 64 KiB of send buffer:
    // about 37 MiB for 256 of them.
    assert!(
        peak.saturating_sub(before) < 128 * 1024,
        "RSS grew by {} KiB",
        peak - before
    );
    drop(held);
    drop(rt);
    let (status, rest) = server.terminate();
    assert!(status.success(), "{status:?} {rest:?}");
}

/// Pipelines `INCRBY name 1` for every name of `names` on `stream`, 500 at a time, each
/// answered `NONAMESPACE`; returns how long it took.
fn unknown_names(
    stream: &mut TcpStream,
    reader: &mut impl BufRead,
    names: std::ops::Range<u32>,
) -> Duration {
    let started = Instant::now();
    let all: Vec<u32> = names.collect();
    for batch in all.chunks(500) {
        let mut out = Vec::new();
        for i in batch {
            out.extend(request(&["INCRBY", &format!("unknown.{i}"), "1"]));
        }
        stream.write_all(&out).unwrap();
        for i in batch {
            let line = reply(reader).unwrap();
            assert!(line.starts_with("-NONAMESPACE"), "unknown.{i}: {line}");
        }
    }
    started.elapsed()
}

/// Guards against what a review found: a rate-limited token's quota was a bucket per (token, name asked for), made
/// before the name was looked up, and swept only once 100,000 were held: unknown names grew
/// the node, and past 100,000 every request swept them all. Now a namespace that does not
/// exist has no buckets: 100,000 unknown names leave memory and latency where they were.
#[test]
fn unknown_names_leave_no_quota_state() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nauto_create = false\n\n[namespaces.known]\nkind = \"sequence\"\n\n{}",
        token_config("rate = 0.001\nburst = 100\n")
    );
    let (server, _, resp) = serve(dir.path(), &config);
    let pid = server.pid();
    let (mut stream, mut reader) = resp_connect(resp, DEADLINE);
    stream.write_all(&request(&["AUTH", TOKEN])).unwrap();
    assert_eq!(reply(&mut reader).unwrap(), "+OK\r\n");
    let early = unknown_names(&mut stream, &mut reader, 0..2_000);
    let before = rss_kib(pid);
    let bulk = unknown_names(&mut stream, &mut reader, 2_000..100_000);
    let later = unknown_names(&mut stream, &mut reader, 100_000..102_000);
    let after = rss_kib(pid);
    println!(
        "2,000 unknown names: {early:?} first, {later:?} after 100,000 ({bulk:?} for the 98,000 \
         between); RSS {before} KiB, then {after} KiB (+{} KiB)",
        after.saturating_sub(before)
    );
    assert!(
        later < early * 10 + Duration::from_millis(200),
        "later requests are {:.0}x slower",
        later.as_secs_f64() / early.as_secs_f64()
    );
    assert!(
        after.saturating_sub(before) < 6 * 1024,
        "RSS grew by {} KiB for names that do not exist",
        after - before
    );
    stream.write_all(&request(&["INCR", "known"])).unwrap();
    assert_eq!(reply(&mut reader).unwrap(), ":1\r\n");
    let (status, rest) = server.terminate();
    assert!(status.success(), "{status:?} {rest:?}");
}

/// A port the kernel just gave and took back, for an address the command line must name.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// An `idmint serve` whose stdout and stderr are one pipe, as `idmint serve 2>&1 | head -N`:
/// killed when dropped.
struct Piped {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
    resp: SocketAddr,
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `idmint serve` on `data` with its stdout and stderr on one pipe, reads the first
/// `lines` lines from it, then closes the pipe's only reader; waits until HTTP answers.
fn serve_into_head(data: &Path, lines: usize) -> Piped {
    let (reader, writer) = std::io::pipe().unwrap();
    let (http, grpc, resp) = (free_port(), free_port(), free_port());
    let mut cmd = support::idmint();
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--http", &http.to_string()])
        .args(["--grpc", &grpc.to_string()])
        .args(["--resp", &resp.to_string()])
        .arg("--init")
        .stdout(Stdio::from(writer.try_clone().unwrap()))
        .stderr(Stdio::from(writer));
    let child = cmd.spawn().unwrap();
    // The command held the pipe's writing ends: only the child's are left.
    drop(cmd);
    let mut piped = Piped {
        child,
        http,
        grpc,
        resp,
    };
    let mut head = BufReader::new(reader);
    for _ in 0..lines {
        let mut line = String::new();
        assert!(
            head.read_line(&mut line).unwrap() > 0,
            "the pipe closed early"
        );
        print!("head: {line}");
    }
    drop(head);
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = piped.child.try_wait().unwrap() {
            panic!("idmint serve died once its log pipe closed: {status:?}");
        }
        if TcpStream::connect(http).is_ok() && http_get(http, "/healthz").0 == 200 {
            return piped;
        }
        assert!(
            Instant::now() < deadline,
            "the node never answered /healthz"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, and the exit status once it exited.
fn terminate(piped: &mut Piped) -> std::process::ExitStatus {
    let pid = piped.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    wait_with_deadline(&mut piped.child)
}

/// Guards against what a review found: `idmint serve 2>&1 | head -3`. Once `head` exited, every log line the node wrote
/// panicked the thread writing it (tracing's writer reports its write error on stderr, the
/// closed pipe itself): a request that logged (a namespace created on first use) lost its
/// connection, and SIGTERM's log line killed the process before the hand-back. Now lines
/// are dropped: answers are whole, SIGTERM exits 0, and a restart continues exactly where
/// the buffers were handed back.
#[test]
fn a_closed_log_pipe_leaves_answers_whole_and_the_stop_clean() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut piped = serve_into_head(&data, 3);
    // Each namespace is created by its first request, which logs it.
    let (status, body) = http_get(piped.http, "/v1/ids/first?count=1000");
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse_ids(&body), (1..=1000).collect::<Vec<u64>>());
    let id = resp_once(piped.resp, None, &["INCR", "second"], DEADLINE).unwrap();
    assert_eq!(id, ":1\r\n");
    let rt = runtime();
    let ids = rt.block_on(async {
        let mut client = grpc_client(piped.grpc).await;
        let request = proto::NextRequest {
            namespace: "third".into(),
            count: Some(100),
            shard: None,
            key: None,
        };
        client.next(request).await.unwrap().into_inner()
    });
    assert!(
        matches!(&ids.ids, Some(proto::ids::Ids::U64(u)) if u.ids == (1..=100).collect::<Vec<u64>>()),
        "{ids:?}"
    );
    let status = terminate(&mut piped);
    assert!(
        status.success(),
        "SIGTERM with a closed log pipe: {status:?}"
    );
    drop(piped);

    // The buffers were handed back: a restart continues at the next id of each.
    let server = Server::start(dir.path(), &data, None);
    assert_eq!(parse_ids(&http_get(server.addr, "/v1/ids/first").1), [1001]);
    assert_eq!(parse_ids(&http_get(server.addr, "/v1/ids/second").1), [2]);
    assert_eq!(parse_ids(&http_get(server.addr, "/v1/ids/third").1), [101]);
    let (status, rest) = server.terminate();
    assert!(status.success(), "{status:?} {rest:?}");
}

/// Guards against what a review found: with `| head -2`, the log's reader went away while the node was starting, and
/// the next start-up line killed it. Now it starts, serves and stops cleanly.
#[test]
fn a_log_pipe_closed_at_start_does_not_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut piped = serve_into_head(&dir.path().join("data"), 2);
    let (status, body) = http_get(piped.http, "/v1/ids/photos?count=3");
    assert_eq!((status, parse_ids(&body)), (200, vec![1, 2, 3]), "{body}");
    let status = terminate(&mut piped);
    assert!(
        status.success(),
        "SIGTERM with a closed log pipe: {status:?}"
    );
}
