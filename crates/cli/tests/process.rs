//! Tests of the `idmint` binary as real processes: crash (SIGKILL) and restart under load, clean
//! shutdown (SIGTERM), a 32-bit namespace running out, the help texts, offline decoding, config
//! errors, the one-process-per-data-directory rule, and the `next`/`status` clients.
//!
//! Every server runs in its own temp dir on a port the kernel picks (`--http 127.0.0.1:0`); the
//! test learns it from the `idmint listening on http://ADDR` line on the child's stdout. No test
//! sleeps to order events: waits poll a condition against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::{assert_strictly_increasing, idmint, wait_with_deadline, Server, DEADLINE};

/// Runs a client command to completion (it must not hang).
fn run(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The outputs are small: reading them after the exit cannot deadlock on a full pipe.
    let status = wait_with_deadline(&mut child);
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One HTTP/1.1 request on a fresh connection. `Err` when the server is gone (refused,
/// reset, or closed before a whole response).
fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, Value)> {
    let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(DEADLINE))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let raw = String::from_utf8(raw).map_err(|_| broken("not UTF-8"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| broken("no head"))?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| broken("no status"))?;
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "chunked answers are not supported by this test client: {head}"
    );
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .ok_or_else(|| broken("no content-length"))?;
    if body.len() != length {
        return Err(broken("truncated body"));
    }
    let value = serde_json::from_str(body).map_err(|_| broken("body is not JSON"))?;
    Ok((status, value))
}

/// GET `/v1/ids/{ns}?count={count}`: `Ok(Ok(ids))`, `Ok(Err((status, body)))` for an error
/// answer, `Err` if the server is gone.
fn fetch(
    addr: SocketAddr,
    ns: &str,
    count: u64,
) -> std::io::Result<Result<Vec<u64>, (u16, Value)>> {
    let (status, body) = http(addr, "GET", &format!("/v1/ids/{ns}?count={count}"))?;
    if status != 200 {
        return Ok(Err((status, body)));
    }
    assert_eq!(body["namespace"], ns, "{body}");
    let ids: Vec<u64> = body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    Ok(Ok(ids))
}

fn ids(addr: SocketAddr, ns: &str, count: u64) -> Vec<u64> {
    let ids = fetch(addr, ns, count)
        .unwrap()
        .unwrap_or_else(|(status, body)| panic!("{status}: {body}"));
    assert_eq!(ids.len() as u64, count);
    ids
}

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("idmint.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The block size of the crash test's namespace.
const BLOCK: u64 = 1000;
const CRASHES: usize = 5;
const CLIENTS: u64 = 8;
/// Ids each server run hands out before it is killed.
const IDS_PER_RUN: u64 = 4000;

/// Where the clients of the crash test send requests: the address of the current server run.
struct Current {
    /// `(run, address)`; `None` before the first start.
    server: Mutex<Option<(usize, SocketAddr)>>,
    changed: Condvar,
}

impl Current {
    /// The current server, waiting for a run newer than `after` when given.
    fn wait_newer(&self, after: Option<usize>) -> (usize, SocketAddr) {
        let guard = self.server.lock().unwrap();
        let (guard, timeout) = self
            .changed
            .wait_timeout_while(guard, DEADLINE, |s| match (s, after) {
                (None, _) => true,
                (Some((run, _)), Some(after)) => *run <= after,
                (Some(_), None) => false,
            })
            .unwrap();
        assert!(!timeout.timed_out(), "no new server run after {after:?}");
        guard.unwrap()
    }

    fn publish(&self, run: usize, addr: SocketAddr) {
        *self.server.lock().unwrap() = Some((run, addr));
        self.changed.notify_all();
    }
}

/// Invariants 1 and 3 under SIGKILL: 8 clients fetch ids (count 1 and 50) while the server is
/// killed 5 times and restarted on the same data directory. No id is ever returned twice, each
/// client's ids increase strictly across restarts (a restarted node never reuses a block), and
/// each crash burns at most what the node had reserved but not yet delivered.
#[test]
fn crash_and_restart_never_repeats_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = write_config(
        dir.path(),
        &format!(
            "[server]\nauto_create = false\n\n[namespaces.crash]\nkind = \"sequence\"\n\
             cache = \"fixed\"\nblock_size = {BLOCK}\n"
        ),
    );
    let current = Arc::new(Current {
        server: Mutex::new(None),
        changed: Condvar::new(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    // Ids received per server run, for the main thread to know when to kill.
    let progress: Arc<Vec<AtomicU64>> =
        Arc::new((0..=CRASHES).map(|_| AtomicU64::new(0)).collect());
    let failed_requests = Arc::new(AtomicU64::new(0));

    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (current, stop, progress, failed) = (
                current.clone(),
                stop.clone(),
                progress.clone(),
                failed_requests.clone(),
            );
            thread::spawn(move || {
                // (run, ids) of every successful request, in order.
                let mut received: Vec<(usize, Vec<u64>)> = Vec::new();
                let (mut run, mut addr) = current.wait_newer(None);
                let mut request = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    request += 1;
                    let count = if (client + request).is_multiple_of(4) {
                        50
                    } else {
                        1
                    };
                    match fetch(addr, "crash", count) {
                        Ok(Ok(ids)) => {
                            assert_eq!(ids.len() as u64, count);
                            progress[run].fetch_add(count, Ordering::SeqCst);
                            received.push((run, ids));
                        }
                        Ok(Err((status, body))) => {
                            panic!("client {client}: unexpected {status}: {body}")
                        }
                        Err(_) => {
                            // The server was killed: reconnect to the next run.
                            failed.fetch_add(1, Ordering::SeqCst);
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                            (run, addr) = current.wait_newer(Some(run));
                        }
                    }
                }
                received
            })
        })
        .collect();

    for run in 0..=CRASHES {
        let server = Server::start(dir.path(), &data, Some(&config));
        current.publish(run, server.addr);
        let deadline = Instant::now() + DEADLINE;
        while progress[run].load(Ordering::SeqCst) < IDS_PER_RUN {
            assert!(Instant::now() < deadline, "run {run} made no progress");
            thread::sleep(Duration::from_millis(2));
        }
        if run < CRASHES {
            server.kill9();
        } else {
            stop.store(true, Ordering::SeqCst);
            let received: Vec<Vec<(usize, Vec<u64>)>> =
                clients.into_iter().map(|c| c.join().unwrap()).collect();
            drop(server);
            check_crash_run(&received, failed_requests.load(Ordering::SeqCst));
            return;
        }
    }
    unreachable!();
}

fn check_crash_run(received: &[Vec<(usize, Vec<u64>)>], failed_requests: u64) {
    let mut all = Vec::new();
    let mut lowest = [u64::MAX; CRASHES + 1];
    let mut highest = [0u64; CRASHES + 1];
    for (client, batches) in received.iter().enumerate() {
        let mine: Vec<u64> = batches
            .iter()
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        assert_strictly_increasing(&mine, &format!("client {client}"));
        for (run, ids) in batches {
            for &id in ids {
                lowest[*run] = lowest[*run].min(id);
                highest[*run] = highest[*run].max(id);
            }
        }
        all.extend(mine);
    }
    let total = all.len();
    let unique: HashSet<u64> = all.iter().copied().collect();
    let duplicates = total - unique.len();
    // A restarted node starts at the durable watermark, above everything the killed one could
    // have served: ids received after a crash lie above every id received before it. What lies
    // in between was reserved by the killed node and never delivered: burned. A refill starts
    // when fewer than low_water x block = 500 ids are buffered and asks for one block (1000)
    // plus the shortfall of requests waiting on an empty buffer (at most 8 clients x 50 = 400).
    // Everything reserved but undelivered (buffered, in a refill in flight, or taken by a
    // request whose answer the kill cut off) is therefore below 500 + 1000 + 400 < 2 x block.
    let burned: Vec<u64> = (0..CRASHES)
        .map(|run| {
            assert!(
                lowest[run + 1] > highest[run],
                "run {} served {} at or below run {run}'s highest {}",
                run + 1,
                lowest[run + 1],
                highest[run]
            );
            lowest[run + 1] - highest[run] - 1
        })
        .collect();
    println!(
        "crash test: {total} ids over {} runs ({CRASHES} SIGKILLs), {duplicates} duplicates, \
         {failed_requests} requests cut off by kills, burned per crash {burned:?} \
         (bound {})",
        CRASHES + 1,
        2 * BLOCK
    );
    assert_eq!(duplicates, 0);
    assert!(total as u64 >= (CRASHES as u64 + 1) * IDS_PER_RUN);
    for (crash, b) in burned.iter().enumerate() {
        assert!(*b <= 2 * BLOCK, "crash {crash} burned {b} ids");
    }
}

/// SIGTERM is a clean shutdown: exit 0, the unused tail handed back (nothing burned), and the
/// next run continues exactly after the last id served.
#[test]
fn sigterm_hands_back_the_tail_and_restart_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(dir.path(), &data, None);
    let mut served = Vec::new();
    for count in [1, 10, 100, 1, 37] {
        served.extend(ids(server.addr, "photos", count));
    }
    assert_strictly_increasing(&served, "photos");
    let last = *served.last().unwrap();
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let stopped = rest
        .iter()
        .find(|l| l.starts_with("idmint stopped:"))
        .unwrap_or_else(|| panic!("no stop line in {rest:?}"));
    assert!(stopped.contains("ids handed back"), "{stopped}");
    assert!(stopped.ends_with(" 0 burned"), "{stopped}");
    let given_back: u64 = stopped
        .trim_start_matches("idmint stopped: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(given_back > 0, "{stopped}");

    let server = Server::start(dir.path(), &data, None);
    assert_eq!(ids(server.addr, "photos", 1), [last + 1], "ids were burned");
    let (status, _) = server.terminate();
    assert!(status.success());
}

/// Invariant 6 through the binary: a 32-bit namespace hands out exactly its last ids, then
/// answers 409 `namespace_exhausted` naming the width, and keeps answering so.
#[test]
fn thirty_two_bit_namespace_runs_out_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[namespaces.small]\nkind = \"sequence\"\nwidth = 32\nstart = 2147483000\n\
         cache = \"fixed\"\nblock_size = 100\n",
    );
    let server = Server::start(dir.path(), &dir.path().join("data"), Some(&config));
    let mut got = Vec::new();
    let error = loop {
        match fetch(server.addr, "small", 100).unwrap() {
            Ok(batch) => {
                assert!(!batch.is_empty() && batch.len() <= 100);
                got.extend(batch);
            }
            Err(error) => break error,
        }
        assert!(got.len() < 10_000, "the namespace does not end");
    };
    assert_eq!(got, (2_147_483_000..=2_147_483_647).collect::<Vec<u64>>());
    for answer in [error, fetch(server.addr, "small", 1).unwrap().unwrap_err()] {
        let (status, body) = answer;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "namespace_exhausted", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("32-bit"), "{message}");
    }
}

#[test]
fn help_texts_have_examples() {
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["next", "--help"],
        &["decode", "--help"],
        &["status", "--help"],
    ] {
        let out = run(idmint().args(args));
        assert!(out.status.success(), "idmint {args:?}: {out:?}");
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("Example"),
            "idmint {args:?} shows no example:\n{stdout}"
        );
    }
}

#[test]
fn decode_offline_with_a_layout() {
    let out = run(idmint().args(["decode", "1212161076890996736", "--layout", "twitter"]));
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("2019-12-31T"), "{stdout}");

    let out = run(idmint().args(["decode", "abc", "--layout", "twitter"]));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a decimal"), "{out:?}");
}

#[test]
fn bad_config_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (config, key) in [
        (
            "[namespaces.x]\nkind = \"sequence\"\nwidth = 16\n",
            "namespaces.x.width",
        ),
        ("[server]\nhttpp = \"127.0.0.1:1\"\n", "httpp"),
        (
            "[namespaces.t]\nkind = \"snowflake\"\n",
            "namespaces.t.worker",
        ),
    ] {
        let path = write_config(dir.path(), config);
        let out = run(idmint()
            .current_dir(dir.path())
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(&path)
            .arg("--data-dir")
            .arg(dir.path().join("data")));
        assert!(!out.status.success(), "{config:?} was accepted");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(key), "{config:?}: no {key:?} in {stderr}");
    }
}

#[test]
fn second_server_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = Server::start(dir.path(), &data, None);
    let out = run(idmint()
        .current_dir(dir.path())
        .args(["serve", "--http", "127.0.0.1:0", "--data-dir"])
        .arg(&data));
    assert!(!out.status.success(), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("in use"), "{stderr}");
    // The first one is unharmed.
    assert_eq!(ids(first.addr, "photos", 2), [1, 2]);
    let (status, _) = first.terminate();
    assert!(status.success());
}

#[test]
fn next_and_status_talk_to_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &dir.path().join("data"), None);
    let url = format!("http://{}", server.addr);

    let out = run(idmint().args(["next", "photos", "-n", "3", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<u64> = text(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(lines, [1, 2, 3]);
    let out = run(idmint().args(["next", "photos"]).env("IDMINT_SERVER", &url));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), "4");

    let out = run(idmint().args(["next", "_bad", "--server", &url]));
    assert!(!out.status.success());

    let out = run(idmint().args(["status", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    let header = stdout.lines().next().unwrap();
    assert!(header.starts_with("NAMESPACE"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("photos "))
        .unwrap_or_else(|| panic!("no photos row:\n{stdout}"));
    assert!(row.contains("sequence/64"), "{row}");

    // Nothing listening: a clear error, not a hang.
    drop(server);
    let out = run(idmint().args(["status", "--server", &url]));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot reach"), "{out:?}");
}
