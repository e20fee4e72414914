//! Tests of the `idmint` binary as real processes: crash (SIGKILL) and restart under load, clean
//! shutdown (SIGTERM), a 32-bit namespace running out, the help texts, offline decoding, config
//! errors, the one-process-per-data-directory rule, and the `next`/`status` clients.
//!
//! Every server runs in its own temp dir on a port the kernel picks (`--http 127.0.0.1:0`); the
//! test learns it from the `idmint listening on http://ADDR` line on the child's stdout. No test
//! sleeps to order events: waits poll a condition against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_testkit::wait;
use serde_json::Value;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;
use support::{
    assert_strictly_increasing, idmint, stop_counts, wait_with_deadline, Server, DEADLINE,
};

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
        wait::until(format!("run {run} to make progress"), DEADLINE, || {
            progress[run].load(Ordering::SeqCst) >= IDS_PER_RUN
        });
        if run < CRASHES {
            server.kill9();
        } else {
            stop.store(true, Ordering::SeqCst);
            let received: Vec<Vec<(usize, Vec<u64>)>> =
                clients.into_iter().map(|c| c.join().unwrap()).collect();
            drop(server);
            check_crash_run(&received, failed_requests.load(Ordering::SeqCst));
            // The store's audit ledger, read back after the last kill: no block granted twice,
            // the watermark above every grant, and every id the clients got inside a grant.
            let all: Vec<u64> = received
                .iter()
                .flatten()
                .flat_map(|(_, ids)| ids.iter().copied())
                .collect();
            let audit = support::audit_check(Some(&config), &data, "crash", &all);
            println!(
                "crash test: audit ledger verified: {} entries, {} grants, {} give-backs",
                audit.entries, audit.grants, audit.give_backs
            );
            assert!(audit.grants > CRASHES as u64, "{audit:?}");
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

/// Through the binary: a client that sent half a request header does not hold the process
/// after SIGTERM. With a drain deadline of an hour, a second SIGTERM stops at
/// once (no kill -9 needed), and the unused tail is still handed back.
#[test]
fn a_second_sigterm_stops_at_once_and_still_hands_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[server]\ndrain_timeout_ms = 3600000\nheader_read_timeout_ms = 3600000\nidle_timeout_ms = 3600000\n",
    );
    let server = Server::start(dir.path(), &dir.path().join("data"), Some(&config));
    assert_eq!(ids(server.addr, "photos", 3).len(), 3);
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.write_all(b"GET /v1/ids/photos HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    server.send_term();
    // Draining closes the listening socket: wait for that, so the second signal is a second one.
    wait::until("the first SIGTERM to begin the drain", DEADLINE, || {
        TcpStream::connect(server.addr).is_err()
    });
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let counts = stop_counts(&rest);
    assert!(counts.given_back > 0, "{rest:?}");
    assert_eq!(counts.burned, 0, "{rest:?}");
    drop(slow);
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
            "[namespaces.t]\nkind = \"snowflake\"\nworker = \"some\"\n",
            "namespaces.t.worker",
        ),
        ("[leases]\nttl_ms = 1000\n", "leases.floor_ahead_ms"),
        ("[server]\nrefill_wait_ms = 0\n", "server.refill_wait_ms"),
        ("[server]\nmax_namespaces = 0\n", "server.max_namespaces"),
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
    // More than the node's max_count (10,000) in one command: fetched page by page, every id
    // once, in order.
    // 25,001 lines outgrow a pipe: read while it runs (`output`), not after it exits (`run`).
    let out = idmint()
        .args(["next", "photos", "-n", "25001", "--server", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let many: Vec<u64> = text(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(many, (5..25_006).collect::<Vec<u64>>());

    let out = run(idmint().args(["next", "_bad", "--server", &url]));
    assert!(!out.status.success());
    // A shard is sent, and a namespace whose ids carry none refuses it by name.
    let out = run(idmint().args(["next", "photos", "--shard", "3", "--server", &url]));
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("invalid_request") && stderr.contains("shard 3"),
        "{stderr}"
    );
    let out = run(idmint().args([
        "next",
        "photos",
        "--shard",
        "3",
        "--shard-key",
        "9",
        "--server",
        &url,
    ]));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot be used with"), "{out:?}");

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

/// `idmint admin rebase` and `retire` through a running node: the watermark moves up only,
/// the node's buffered ids below it are never served, a retired namespace answers 410
/// `namespace_retired` (not `namespace_exhausted`) and `idmint status` shows it retired, and
/// the audit ledger read back offline records both moves and still verifies.
#[test]
fn admin_rebase_and_retire_move_the_watermark_forward_only() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(dir.path(), &data, None);
    let url = format!("http://{}", server.addr);
    let before = ids(server.addr, "imported", 5);
    assert_eq!(before, [1, 2, 3, 4, 5]);

    let out = run(idmint().args([
        "admin", "rebase", "imported", "--above", "1000000", "--server", &url,
    ]));
    assert!(out.status.success(), "{out:?}");
    let said = text(&out.stdout);
    assert!(
        said.contains("watermark ") && said.contains("-> 1000001"),
        "{said}"
    );
    // The default buffer held more than the 5 ids served: they are burned, not served.
    assert!(!said.contains(" 0 buffered ids burned"), "{said}");
    let after = ids(server.addr, "imported", 3);
    assert_eq!(
        after,
        [1_000_001, 1_000_002, 1_000_003],
        "the next ids are above the rebase"
    );

    // Lower: nothing changes, and says so.
    let out = run(idmint().args([
        "admin", "rebase", "imported", "--above", "10", "--server", &url,
    ]));
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("nothing changed"), "{out:?}");
    assert_eq!(ids(server.addr, "imported", 1), [1_000_004]);

    // Bad input: a clear 400, nothing moved.
    let (status, body) = http(server.addr, "POST", "/v1/admin/rebase/imported?above=x").unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, _) = http(server.addr, "POST", "/v1/admin/rebase/imported").unwrap();
    assert_eq!(status, 400);
    let (status, body) = http(server.addr, "GET", "/v1/admin/retire/imported").unwrap();
    assert_eq!(status, 405, "{body}");

    // Irreversible: without --yes nothing is sent, and the namespace still serves.
    let out = run(idmint().args(["admin", "retire", "imported", "--server", &url]));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("--yes"), "{out:?}");
    assert_eq!(ids(server.addr, "imported", 1), [1_000_005]);

    let out = run(idmint().args(["admin", "retire", "imported", "--yes", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("retired"), "{out:?}");
    let (status, body) = http(server.addr, "GET", "/v1/ids/imported").unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("namespace_retired")),
        "{body}"
    );
    let out = run(idmint().args(["status", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout)
            .lines()
            .any(|l| l.starts_with("imported") && l.contains("retired")),
        "{out:?}"
    );
    // Retiring again changes nothing.
    let out = run(idmint().args(["admin", "retire", "imported", "--yes", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("nothing changed"), "{out:?}");

    server.kill9();
    let served: Vec<u64> = before
        .iter()
        .chain(&after)
        .copied()
        .chain([1_000_004, 1_000_005])
        .collect();
    let audit = support::audit_check(None, &data, "imported", &served);
    assert_eq!(audit.give_backs, 0);
    let out = run(idmint()
        .args([
            "audit",
            "export",
            "--format",
            "json",
            "--namespace",
            "imported",
            "--data-dir",
        ])
        .arg(&data));
    assert!(out.status.success(), "{out:?}");
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let moves: Vec<(&str, &str, &str)> = events
        .iter()
        .filter(|e| e["event"] != "granted")
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(moves.len(), 2, "{events:?}");
    assert_eq!((moves[0].0, moves[0].2), ("rebased", "1000001"));
    assert_eq!((moves[1].0, moves[1].2), ("retired", "9223372036854775808"));
    assert!(events
        .iter()
        .all(|e| e["holder"].as_str().unwrap().contains(" pid ")));
}

/// Runs a client command with `input` on its stdin (written from a thread, so a large input
/// cannot deadlock against a large output).
fn run_with_input(cmd: &mut Command, input: String) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A command that stops early (a bad line) closes its stdin: not this helper's failure.
    let writer = thread::spawn(move || match stdin.write_all(input.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    });
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut err = child.stderr.take().unwrap();
    let reader = thread::spawn(move || err.read_to_end(&mut stderr).map(|_| stderr));
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    let status = wait_with_deadline(&mut child);
    writer.join().unwrap().unwrap();
    Output {
        status,
        stdout,
        stderr: reader.join().unwrap().unwrap(),
    }
}

/// Asserts a run ended quietly after its reader went away: exit 0 (the reader's choice is not
/// our error; ripgrep does the same), no panic, nothing on stderr.
fn assert_quiet_end(what: &str, status: std::process::ExitStatus, stderr: &[u8]) {
    let stderr = text(stderr);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(
        status.success(),
        "{what}: exit {status:?} after stdout closed; stderr: {stderr}"
    );
    assert!(stderr.trim().is_empty(), "{what}: {stderr}");
}

/// Guards against `idmint next photos -n 10000 | head -1` and `idmint sql mysql | head -1`
/// panicking with "failed printing to stdout: Broken pipe" (exit 101): a closed stdout ends
/// the command quietly with exit 0.
#[test]
fn closed_stdout_ends_quietly() {
    // `next`: the reader takes one line and goes. 10,000 ids of 20 bytes are 200 KB, more than
    // a pipe holds (64 KB), so the writer is still writing when the pipe closes.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[namespaces.wide]\nkind = \"sequence\"\nstart = 1000000000000000000\n",
    );
    let server = Server::start(dir.path(), &dir.path().join("data"), Some(&config));
    let url = format!("http://{}", server.addr);
    let mut child = idmint()
        .args(["next", "wide", "-n", "10000", "--server", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
        // Dropping the reader closes the pipe, as `head -1` does.
    }
    assert_eq!(first.trim(), "1000000000000000000");
    let status = wait_with_deadline(&mut child);
    let mut stderr = Vec::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    assert_quiet_end("next | head -1", status, &stderr);

    // Short outputs fit in the pipe, so the pipe is closed before the command starts: every
    // write fails, deterministically.
    for args in [
        &["sql", "mysql"][..],
        &["sql", "postgres"],
        &["decode", "1212161076890996736", "--layout", "twitter"],
        &["status", "--server", &url],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = run(idmint().args(args).stdout(writer));
        assert_quiet_end(&format!("{args:?}"), out.status, &out.stderr);
    }
}

/// Guards against a stack backtrace after every user error (a bad id, an unreachable server)
/// with `RUST_BACKTRACE=1`. User errors print `error:` and `caused by:`
/// lines and exit 1; usage errors exit 2.
#[test]
fn user_errors_print_no_backtrace() {
    let refused = {
        // A port that was just free: nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let refused = format!("http://{refused}");
    for args in [
        &["decode", "abc", "--layout", "twitter"][..],
        &["decode", "1", "--layout", "no-such-layout"],
        &["next", "photos", "--server", &refused],
        &["status", "--server", &refused],
    ] {
        let out = run(idmint()
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .env_remove("RUST_LIB_BACKTRACE"));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(
            !stderr.to_ascii_lowercase().contains("backtrace"),
            "{args:?} printed a backtrace:\n{stderr}"
        );
        for line in stderr.lines().skip(1) {
            assert!(line.starts_with("caused by: "), "{args:?}: {stderr}");
        }
    }
    // Usage errors are clap's: exit 2.
    let out = run(idmint().args(["decode", "1"]).env("RUST_BACKTRACE", "1"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// Guards against `--server 127.0.0.1:7979` (no scheme) failing as "is idmint serve running?":
/// a server without a scheme is http://; a scheme other than http(s) is a usage error.
#[test]
fn servers_without_a_scheme_are_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &dir.path().join("data"), None);
    let port = server.addr.port();
    for (expected, given) in [
        (1, server.addr.to_string()),
        (2, format!("localhost:{port}")),
    ] {
        let out = run(idmint().args(["next", "photos", "--server", &given]));
        assert!(out.status.success(), "--server {given}: {out:?}");
        assert_eq!(
            text(&out.stdout).trim(),
            expected.to_string(),
            "--server {given}"
        );
    }
    let out = run(idmint()
        .args(["status"])
        .env("IDMINT_SERVER", format!("127.0.0.1:{port}/")));
    assert!(out.status.success(), "{out:?}");

    let out = run(idmint().args(["next", "photos", "--server", "ftp://localhost:1"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("ftp://"), "{out:?}");
    // ... but a server that is not asked is not checked: offline decoding ignores it.
    let out = run(idmint()
        .args(["decode", "1212161076890996736", "--layout", "twitter"])
        .env("IDMINT_SERVER", "ftp://localhost:1"));
    assert!(out.status.success(), "{out:?}");
    let out = run(idmint()
        .args(["decode", "1", "--namespace", "photos"])
        .env("IDMINT_SERVER", "ftp://localhost:1"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("ftp://"), "{out:?}");
}

/// Guards against `serve --http localhost:7878` being refused (only a socket address parsed):
/// `--http` takes host names; a name that does not resolve is an error naming it, found before
/// the authority is set up.
#[test]
fn serve_http_takes_host_names() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_on(dir.path(), &dir.path().join("data"), "localhost:0", None);
    assert!(server.addr.ip().is_loopback(), "{}", server.addr);
    assert_eq!(ids(server.addr, "photos", 2), [1, 2]);

    let data = dir.path().join("unresolved");
    let out = run(idmint()
        .current_dir(dir.path())
        .args(["serve", "--http", "no-such-host.invalid:7878", "--data-dir"])
        .arg(&data));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no-such-host.invalid:7878"), "{stderr}");
    assert!(
        !data.exists(),
        "the authority was set up before --http was checked"
    );
}

/// A node reachable from the network without `[auth]` would let anyone create namespaces
/// and take ids, so `serve` refuses a non-loopback `--http` (or `--grpc`, `--resp`) without
/// `[auth]` and names `--insecure-no-auth`, before the authority is set up; with `[auth]` it
/// starts (on port 0 of every interface, so no fixed port is needed).
#[test]
fn a_non_loopback_listener_without_auth_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for args in [
        &["--http", "0.0.0.0:0"][..],
        &["--http", "127.0.0.1:0", "--grpc", "0.0.0.0:0"],
    ] {
        let out = run(idmint()
            .current_dir(dir.path())
            .arg("serve")
            .args(args)
            .arg("--data-dir")
            .arg(&data));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
        assert!(stderr.contains("[auth]"), "{stderr}");
        assert!(!data.exists(), "the authority was set up before the check");
    }
    let token = run(idmint().args(["token", "new", "--name", "t"]));
    assert!(token.status.success(), "{token:?}");
    let entry = text(&token.stdout);
    let entry = &entry[entry.find("[[auth.tokens]]").unwrap()..];
    let config = write_config(dir.path(), entry);
    let server = Server::start_on(dir.path(), &data, "0.0.0.0:0", Some(&config));
    let (status, body) = http(server.addr, "GET", "/v1/ids/photos").unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, _) = server.terminate();
    assert!(status.success());
}

/// `--grpc` serves the gRPC API beside HTTP under the same shutdown: the node announces the
/// address it bound and still hands back its tail on SIGTERM (the API itself is tested in
/// crates/node/tests/grpc.rs); an
/// unresolvable `--grpc` is refused before the authority is set up.
#[test]
fn serve_grpc_listens_beside_http_and_stops_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(dir.path(), &data, "127.0.0.1:0", None, |cmd| {
        cmd.args(["--grpc", "127.0.0.1:0"]);
    });
    assert_eq!(ids(server.addr, "photos", 2), [1, 2]);
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let grpc: SocketAddr = rest
        .iter()
        .find_map(|l| l.strip_prefix("idmint gRPC listening on "))
        .unwrap_or_else(|| panic!("no gRPC line in {rest:?}"))
        .parse()
        .unwrap();
    assert!(grpc.ip().is_loopback() && grpc.port() != 0, "{grpc}");
    let stopped = rest
        .iter()
        .find(|l| l.starts_with("idmint stopped:"))
        .unwrap_or_else(|| panic!("no stop line in {rest:?}"));
    assert!(stopped.ends_with(" 0 burned"), "{stopped}");

    let data = dir.path().join("unresolved");
    let out = run(idmint()
        .current_dir(dir.path())
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "no-such-host.invalid:7879",
        ])
        .arg("--data-dir")
        .arg(&data));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--grpc no-such-host.invalid:7879"),
        "{stderr}"
    );
    assert!(
        !data.exists(),
        "the authority was set up before --grpc was checked"
    );
}

/// Ids of a snowflake layout at consecutive milliseconds from `unix_ms`, with `node`.
fn compose(layout: &idmint_core::Layout, unix_ms: u64, node: u64, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| {
            layout
                .compose_at_unix_millis(unix_ms + i, node, i % 7)
                .unwrap()
        })
        .collect()
}

/// `decode` decodes many ids in one process, not one per process (15 s for 5,000 ids): without
/// an ID it reads ids from stdin, one per line, skipping blank lines, and prints one row per
/// id, in order; one bad line stops it with an error naming the line.
#[test]
fn decode_reads_ids_from_stdin() {
    let layout = idmint_core::Layout::twitter();
    let start = 1_700_000_000_000;
    let ids = compose(&layout, start, 585, 5000);
    let input: String = ids.iter().map(|id| format!("{id}\n\n")).collect();
    let out = run_with_input(idmint().args(["decode", "--layout", "twitter"]), input);
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), ids.len());
    for (i, (row, id)) in rows.iter().zip(&ids).enumerate() {
        let i = i as u64;
        let (ms, seq) = ((start + i).to_string(), (i % 7).to_string());
        assert_eq!(row[..], [&id.to_string(), row[1], &ms, "585", &seq][..]);
    }
    assert_eq!(rows[0][1], "2023-11-14T22:13:20.000Z");

    // JSON Lines.
    let input: String = ids[..3].iter().map(|id| format!("{id}\n")).collect();
    let out = run_with_input(
        idmint().args(["decode", "--layout", "twitter", "--json"]),
        input,
    );
    assert!(out.status.success(), "{out:?}");
    let objects: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), 3);
    assert_eq!(objects[2]["id"], ids[2].to_string());
    assert_eq!(objects[2]["unix_ms"], start + 2);
    assert_eq!(objects[2]["worker"], 585);

    // A bad line: the rows before it, then an error naming it.
    let input = format!("{}\nabc\n{}\n", ids[0], ids[1]);
    let out = run_with_input(idmint().args(["decode", "--layout", "twitter"]), input);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stdout).lines().count(), 1, "{out:?}");
    assert!(text(&out.stderr).contains("line 2"), "{out:?}");
}

/// An Instagram id made by `idmint sql postgres --instagram --epoch X` decodes offline: the
/// preset's epoch is not fixed, `--epoch` replaces it.
#[test]
fn decode_with_the_epoch_of_the_instagram_function() {
    let epoch = 1_600_000_000_000u64;
    let out = run(idmint().args([
        "sql",
        "postgres",
        "--instagram",
        "--schema",
        "shard_5",
        "--shard",
        "5",
        "--epoch",
        &epoch.to_string(),
    ]));
    assert!(out.status.success(), "{out:?}");
    // The function computes (now_ms - epoch) << 23 | shard << 10 | seq: the instagram layout
    // with this epoch, which is what the test composes below.
    let sql = text(&out.stdout);
    assert!(
        sql.contains(&format!("our_epoch bigint := {epoch};")),
        "{sql}"
    );
    assert!(sql.contains("<< 23"), "{sql}");
    let preset = idmint_core::Layout::instagram();
    let layout = idmint_core::Layout::new(idmint_core::LayoutSpec {
        epoch_unix_ms: epoch,
        ..*preset.spec()
    })
    .unwrap();
    let at = 1_750_000_000_123u64;
    let id = layout.compose_at_unix_millis(at, 5, 1023).unwrap();

    let out = run(idmint().args([
        "decode",
        &id.to_string(),
        "--layout",
        "instagram",
        "--epoch",
        &epoch.to_string(),
        "--json",
    ]));
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["unix_ms"], at, "{v}");
    assert_eq!(v["timestamp"], "2025-06-15T15:06:40.123Z", "{v}");
    assert_eq!(v["shard"], 5, "{v}");
    assert_eq!(v["sequence"], 1023, "{v}");

    // The same id, given the same layout as custom bits.
    let out = run(idmint().args([
        "decode",
        &id.to_string(),
        "--bits",
        "40,13,10",
        "--unit",
        "1ms",
        "--epoch",
        &epoch.to_string(),
    ]));
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("2025-06-15T15:06:40.123Z"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().eq(["node", "5"])),
        "{stdout}"
    );
    // A custom unit: Sonyflake's bits and 10 ms unit, with the node field above the sequence.
    let sony = idmint_core::Layout::new(idmint_core::LayoutSpec {
        order: idmint_core::FieldOrder::NodeThenSequence,
        ..*idmint_core::Layout::sonyflake().spec()
    })
    .unwrap();
    let id = sony.compose_at_unix_millis(at, 300, 2).unwrap();
    let out = run(idmint().args([
        "decode",
        &id.to_string(),
        "--bits",
        "39,16,8",
        "--unit",
        "10ms",
        "--epoch",
        "1409529600000",
        "--json",
    ]));
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["unix_ms"], at - at % 10, "{v}");
    assert_eq!(v["node"], 300, "{v}");
}

/// A Discord id shows a 5-bit worker and a 5-bit process, as Discord's ids carry them, not one
/// 10-bit node.
#[test]
fn decode_discord_shows_worker_and_process() {
    let layout = idmint_core::Layout::discord();
    let id = layout
        .compose_at_unix_millis(1_700_000_000_000, (17 << 5) | 9, 42)
        .unwrap();
    let out = run(idmint().args(["decode", &id.to_string(), "--layout", "discord", "--json"]));
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["worker"], 17, "{v}");
    assert_eq!(v["process"], 9, "{v}");
    assert_eq!(v["sequence"], 42, "{v}");
    assert!(v.get("node").is_none(), "{v}");
    let out = run(idmint().args(["decode", &id.to_string(), "--layout", "discord"]));
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().eq(["worker", "17"])),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().eq(["process", "9"])),
        "{stdout}"
    );
}

/// `next | decode --namespace`: the node decodes every id of stdin over one connection pool;
/// `--json` prints its answers (`idmint_api::Decoded`).
#[test]
fn decode_by_the_node_reads_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &dir.path().join("data"), None);
    let url = format!("http://{}", server.addr);
    let out = run(idmint().args(["next", "photos", "-n", "3", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    let out = run_with_input(
        idmint().args([
            "decode",
            "--namespace",
            "photos",
            "--json",
            "--server",
            &url,
        ]),
        text(&out.stdout),
    );
    assert!(out.status.success(), "{out:?}");
    let answers: Vec<idmint_api::Decoded> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 3);
    for (i, answer) in answers.iter().enumerate() {
        let idmint_api::Decoded::Sequence {
            id,
            in_namespace,
            issued,
            step,
            residue,
            member,
            ..
        } = answer
        else {
            panic!("{answer:?}");
        };
        assert_eq!(*id, i as u64 + 1);
        assert!(*in_namespace && *issued, "{answer:?}");
        // Step 1, one authority: residue 0, no member.
        assert_eq!((*step, *residue, *member), (Some(1), Some(0), None));
    }
    // Without --json, the row carries the residue fields after the node's.
    let out = run_with_input(
        idmint().args(["decode", "--namespace", "photos", "--server", &url]),
        "2\n".to_owned(),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "2\ttrue\ttrue\t1\t0\n");
}

/// `decode --namespace` of an instagram-layout namespace names the node field `shard`, as the
/// node does, in text and JSON; `idmint status` shows the namespace's shard.
#[test]
fn decode_by_the_node_names_an_instagram_shard() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idmint.toml");
    std::fs::write(
        &config,
        "[namespaces.grams]\nkind = \"snowflake\"\nlayout = \"instagram\"\nworker = 5\n",
    )
    .unwrap();
    let server = Server::start(dir.path(), &dir.path().join("data"), Some(&config));
    let url = format!("http://{}", server.addr);
    let out = run(idmint().args(["next", "grams", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    let id = text(&out.stdout).trim().to_owned();
    let decode = |json: bool| {
        let mut args = vec![
            "decode",
            id.as_str(),
            "--namespace",
            "grams",
            "--server",
            &url,
        ];
        if json {
            args.push("--json");
        }
        let out = run(idmint().args(&args));
        assert!(out.status.success(), "{out:?}");
        text(&out.stdout)
    };
    let plain = decode(false);
    assert!(
        plain
            .lines()
            .any(|l| l.split_whitespace().eq(["shard", "5"])),
        "{plain}"
    );
    assert!(!plain.contains("worker"), "{plain}");
    let v: Value = serde_json::from_str(decode(true).trim()).unwrap();
    assert_eq!(
        (v["shard"].as_u64(), v.get("worker")),
        (Some(5), None),
        "{v}"
    );
    let out = run(idmint().args(["status", "--server", &url]));
    assert!(text(&out.stdout).contains("shard 5"), "{out:?}");
}

/// `idmint serve` with stderr on a pipe writes no colour codes, even with colour allowed by the
/// environment; the listening line is on stdout once and not repeated in the log.
#[test]
fn logs_on_a_pipe_have_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        "127.0.0.1:0",
        None,
        |cmd| {
            cmd.env_remove("NO_COLOR").env("TERM", "xterm-256color");
        },
    );
    // Something to log: the namespace set up on first use.
    assert_eq!(ids(server.addr, "photos", 2), [1, 2]);
    let (status, stdout, stderr) = server.terminate_apart();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("serving namespace"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes on a pipe: {stderr:?}"
    );
    assert!(
        !stderr.contains("listening"),
        "listening logged too: {stderr}"
    );
    assert!(
        !stdout.iter().any(|l| l.contains("listening")),
        "a second listening line: {stdout:?}"
    );
}

/// `--log-format json`: every log line is one JSON object with a level and a message.
#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        "127.0.0.1:0",
        None,
        |cmd| {
            cmd.args(["--log-format", "json"]);
        },
    );
    assert_eq!(ids(server.addr, "photos", 1), [1]);
    let (status, _, stderr) = server.terminate_apart();
    assert!(status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "{stderr}");
    for line in lines {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert!(v["level"].is_string(), "{line}");
        assert!(v["fields"]["message"].is_string(), "{line}");
    }
    assert!(stderr.contains("serving namespace"), "{stderr}");
}

/// A declared namespace that cannot be set up (here: stored with another step) ends
/// `idmint serve` with exit 1 before it claims to listen, and the error names the namespace
/// once.
#[test]
fn a_conflicting_declared_namespace_exits_without_listening() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(dir.path(), &data, None);
    assert_eq!(ids(server.addr, "e", 1), [1]);
    let (status, _) = server.terminate();
    assert!(status.success());
    let path = write_config(
        dir.path(),
        "[namespaces.e]\nkind = \"sequence\"\nstep = 2\noffset = 1\n",
    );
    let out = run(idmint()
        .current_dir(dir.path())
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&path)
        .arg("--data-dir")
        .arg(&data));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(!stderr.contains("listening"), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(error.contains("exists with"), "{error}");
    assert_eq!(error.matches("namespace e").count(), 1, "{error}");
}

/// Past `server.max_namespaces`, a new name answers 409 `too_many_namespaces`; `status` marks
/// the auto-created namespaces.
#[test]
fn auto_create_stops_at_max_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "[server]\nmax_namespaces = 1\n[namespaces.declared]\nkind = \"sequence\"\n",
    );
    let server = Server::start(dir.path(), &dir.path().join("data"), Some(&path));
    assert_eq!(ids(server.addr, "a", 1), [1]);
    let (status, body) = http(server.addr, "GET", "/v1/ids/b?count=1").unwrap();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "too_many_namespaces", "{body}");
    assert_eq!(ids(server.addr, "declared", 1), [1]);
    let out = run(idmint()
        .args(["status", "--server"])
        .arg(server.addr.to_string()));
    let table = text(&out.stdout);
    assert!(out.status.success(), "{table}{}", text(&out.stderr));
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {table}"))
            .to_owned()
    };
    assert!(row("a").contains("(auto)"), "{table}");
    assert!(!row("declared").contains("(auto)"), "{table}");
    let (status, _) = server.terminate();
    assert!(status.success());
}

/// A family's member is served on first use by `idmint next` with `auto_create` off, shown in
/// `idmint status` with its family; past `max_members`, a clear error naming the key.
#[test]
fn next_takes_ids_of_a_family_member() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "[server]\nauto_create = false\n[namespaces.\"invoices.*\"]\nkind = \"sequence\"\nwidth = 32\nmax_members = 1\n",
    );
    let server = Server::start(dir.path(), &dir.path().join("data"), Some(&path));
    let url = format!("http://{}", server.addr);
    let out = run(idmint().args(["next", "invoices.42", "-n", "2", "--server", &url]));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "1\n2\n");
    let out = run(idmint().args(["next", "invoices.43", "--server", &url]));
    assert!(!out.status.success(), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("invoices.*") && stderr.contains("max_members"),
        "{stderr}"
    );
    let out = run(idmint().args(["status", "--server", &url]));
    let table = text(&out.stdout);
    assert!(out.status.success(), "{table}{}", text(&out.stderr));
    let row = table
        .lines()
        .find(|l| l.starts_with("invoices.42 "))
        .unwrap_or_else(|| panic!("no member row in {table}"));
    assert!(row.contains("sequence/32 (invoices.*)"), "{table}");
    assert!(!table.contains("invoices.43"), "{table}");
    let (status, _) = server.terminate();
    assert!(status.success());
}

/// `idmint sql mysql --servers` stays within MySQL's auto_increment_increment (1 to 65535).
#[test]
fn sql_mysql_servers_is_bounded() {
    for bad in ["0", "65536", "100000"] {
        let out = run(idmint().args(["sql", "mysql", "--tickets", "t", "--servers", bad]));
        assert_eq!(out.status.code(), Some(2), "--servers {bad} was accepted");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("1..=65535"), "{stderr}");
    }
    // 65535 servers print a lot: into the void, not into a pipe nobody reads yet.
    let mut child = idmint()
        .args(["sql", "mysql", "--tickets", "t", "--servers", "65535"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_with_deadline(&mut child).success());
}

/// On a PostgreSQL authority, restarting (the table exists) logs none of the server's notices
/// (`relation … already exists, skipping`).
#[test]
fn postgres_notices_stay_out_of_the_log() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = runtime.block_on(idmint_testkit::postgres::TempDatabase::create());
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &format!("[authority]\nkind = \"postgres\"\nurl = \"{}\"\n", db.url()),
    );
    for run in 0..2 {
        let server = Server::start(dir.path(), &dir.path().join("data"), Some(&path));
        assert_eq!(ids(server.addr, "photos", 1).len(), 1);
        let (status, _, stderr) = server.terminate_apart();
        assert!(status.success(), "{stderr}");
        assert!(!stderr.contains("already exists"), "run {run}: {stderr}");
        assert!(!stderr.contains("NOTICE"), "run {run}: {stderr}");
    }
    runtime.block_on(db.drop_now());
}

/// Guards against a ULID or UUIDv7 whose time lies after 9999 decoding offline to a saturated,
/// wrong date (2554-07-21) without a word. RFC 3339 cannot write such a time: the text says so,
/// `--json` gives `null`, and `unix_ms` is exact.
#[test]
fn decode_of_a_time_past_9999_says_so() {
    for (id, layout) in [
        ("7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "ulid"),
        ("ffffffff-ffff-7fff-bfff-ffffffffffff", "uuid7"),
    ] {
        let out = run(idmint().args(["decode", id, "--layout", layout]));
        assert!(out.status.success(), "{out:?}");
        let stdout = text(&out.stdout);
        assert!(stdout.contains("after 9999-12-31"), "{stdout}");
        assert!(!stdout.contains("2554"), "{stdout}");
        let out = run(idmint().args(["decode", id, "--layout", layout, "--json"]));
        let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
        assert!(v["timestamp"].is_null(), "{v}");
        assert_eq!(v["unix_ms"], 281_474_976_710_655u64, "{v}");
    }
}

/// Guards against `idmint serve` run from two working directories using one store per
/// directory (a relative default such as `./idmint-data`) and handing out 1, 2, 3 twice: the
/// default data directory is absolute (under the user's data directory), and a store that moved (here: the file
/// authority's `path` changed) is refused as lost, by a declared namespace at start and by an
/// auto-created one at its first request, never started fresh.
#[test]
fn a_store_that_moved_is_refused_not_started_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let serve_in = |cwd: &Path, extra: &[&str]| {
        let mut cmd = idmint();
        cmd.current_dir(cwd)
            .env("HOME", &home)
            .env_remove("XDG_DATA_HOME")
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra);
        cmd
    };
    let first = Server::spawn(serve_in(&a, &[]));
    assert_eq!(ids(first.addr, "orders", 3), [1, 2, 3]);
    let (status, _) = first.terminate();
    assert!(status.success());
    let second = Server::spawn(serve_in(&b, &[]));
    let next = ids(second.addr, "orders", 3);
    assert!(
        next[0] > 3,
        "a second working directory started fresh: {next:?}"
    );
    let (status, _) = second.terminate();
    assert!(status.success());
    let data = home.join(".local/share/idmint");
    assert!(
        data.join("node-record.toml").is_file(),
        "no node record in {}",
        data.display()
    );

    // The authority's path changed: the node record knows `orders` and the new store does not.
    let moved = write_config(
        dir.path(),
        &format!(
            "[authority]\nkind = \"file\"\npath = \"{}\"\n",
            dir.path().join("elsewhere").display()
        ),
    );
    // The node record knows the store's incarnation, and the new store has none: refused at start,
    // whatever the configuration declares.
    let out = run(&mut serve_in(&a, &["--config", moved.to_str().unwrap()]));
    assert!(!out.status.success(), "a moved store was served");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("store lost") && stderr.contains("node-record.toml"),
        "{stderr}"
    );

    // Declared in the configuration: the node refuses to start.
    let declared = write_config(
        dir.path(),
        &format!(
            "[authority]\nkind = \"file\"\npath = \"{}\"\n\n[namespaces.orders]\nkind = \"sequence\"\n",
            dir.path().join("elsewhere2").display()
        ),
    );
    let out = run(&mut serve_in(&a, &["--config", declared.to_str().unwrap()]));
    assert!(!out.status.success(), "started on a moved store");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("lost") && stderr.contains("node-record.toml"),
        "{stderr}"
    );

    // The operator's way back: re-seed above the highest id handed out. Below what the node
    // record saw is refused; above it, the node starts and serves above it.
    let reseed = |above: &str| {
        let mut cmd = idmint();
        cmd.current_dir(&a)
            .env("HOME", &home)
            .env_remove("XDG_DATA_HOME")
            .args(["admin", "reseed", "orders", "--above", above, "--config"])
            .arg(&declared);
        run(&mut cmd)
    };
    let out = reseed("2");
    assert!(
        !out.status.success(),
        "re-seeded below the node record: {out:?}"
    );
    assert!(text(&out.stderr).contains("below what this node handed out"));
    let out = reseed(&next[2].to_string());
    assert!(out.status.success(), "{out:?}");
    let server = Server::spawn(serve_in(&a, &["--config", declared.to_str().unwrap()]));
    let after = ids(server.addr, "orders", 2);
    assert!(
        after[0] > next[2],
        "re-seeded store repeated: {after:?} after {next:?}"
    );
}

/// A first start on an empty store whose configuration declares namespaces needs `--init`.
#[test]
fn a_new_deployment_with_declared_namespaces_needs_init() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[namespaces.orders]\nkind = \"sequence\"\n");
    let data = dir.path().join("data");
    let out = run(idmint()
        .current_dir(dir.path())
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(&data));
    assert!(!out.status.success(), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--init") && stderr.contains("orders"),
        "{stderr}"
    );
    let server = Server::start(dir.path(), &data, Some(&config));
    assert_eq!(ids(server.addr, "orders", 2), [1, 2]);
    let (status, _) = server.terminate();
    assert!(status.success());
    // A restart needs nothing more: the node record holds the namespace.
    let mut restart = idmint();
    restart
        .current_dir(dir.path())
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(&data);
    let server = Server::spawn(restart);
    assert!(ids(server.addr, "orders", 1)[0] > 2);
}

/// A multi member that lost its data, end to end, with two file-store members: member 1's
/// store is deleted while the node is down (a wiped server). The next node takes it out of
/// service and serves only member 2's class; `idmint admin reseed --member 1` above the highest
/// id brings it back, and no id ever repeats.
#[test]
fn a_lost_member_is_taken_out_then_reseeded_by_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (m1, m2) = (dir.path().join("m1"), dir.path().join("m2"));
    let config = write_config(
        dir.path(),
        &format!(
            "[defaults]\nstep = 2\n\n[authority]\nkind = \"multi\"\n\n[[authority.members]]\n\
             kind = \"file\"\npath = \"{}\"\noffset = 1\n\n[[authority.members]]\nkind = \"file\"\n\
             path = \"{}\"\noffset = 0\n\n[namespaces.orders]\nkind = \"sequence\"\ncache = \"off\"\n",
            m1.display(),
            m2.display()
        ),
    );
    let seen = std::cell::RefCell::new(HashSet::new());
    let take = |server: &Server, n: u64| -> Vec<u64> {
        let got = ids(server.addr, "orders", n);
        for id in &got {
            assert!(seen.borrow_mut().insert(*id), "id {id} handed out twice");
        }
        got
    };
    let server = Server::start(dir.path(), &data, Some(&config));
    for _ in 0..4 {
        take(&server, 5);
    }
    let (status, _) = server.terminate();
    assert!(status.success());

    std::fs::remove_dir_all(&m1).unwrap();
    let server = Server::start(dir.path(), &data, Some(&config));
    for _ in 0..4 {
        for id in take(&server, 5) {
            assert_eq!(id % 2, 0, "the wiped member served {id}");
        }
    }
    let (_, ready) = http(server.addr, "GET", "/readyz").unwrap();
    assert!(ready["members"][0]["out_of_service"].is_string(), "{ready}");
    let (status, _) = server.terminate();
    assert!(status.success());

    let highest = *seen.borrow().iter().max().unwrap();
    let out = run(idmint()
        .current_dir(dir.path())
        .args(["admin", "reseed", "orders", "--member", "1", "--above"])
        .arg(highest.to_string())
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(&data));
    assert!(out.status.success(), "{out:?}");
    let server = Server::start(dir.path(), &data, Some(&config));
    let mut classes = HashSet::new();
    for _ in 0..6 {
        for id in take(&server, 5) {
            classes.insert(id % 2);
        }
    }
    assert_eq!(classes.len(), 2, "member 1 did not come back");
}

/// `idmint audit verify` on a multi authority whose member 2 cannot be reached: it reports
/// member 1, names member 2 as unreadable and exits non-zero; it never says "ok" on the
/// members it could read.
#[test]
fn verify_fails_on_an_unreadable_member() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let m1 = dir.path().join("m1");
    // Port 1 on the loopback: nothing listens, the connection is refused at once.
    let config = write_config(
        dir.path(),
        &format!(
            "[defaults]\nstep = 2\n\n[authority]\nkind = \"multi\"\n\n[[authority.members]]\n\
             kind = \"file\"\npath = \"{}\"\noffset = 1\n\n[[authority.members]]\n\
             kind = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1:1/idmint\"\n\
             timeout_ms = 500\noffset = 0\n",
            m1.display()
        ),
    );
    let out = run(idmint()
        .current_dir(dir.path())
        .args(["audit", "verify", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(&data));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("member 1 (file): 0 entries"), "{stdout}");
    assert!(
        stdout.contains("UNREADABLE member 2 (postgres)"),
        "{stdout}"
    );
    assert!(!stdout.contains("ok: "), "{stdout}");
    assert!(stderr.contains("member 2 (postgres)"), "{stderr}");
}

/// `--resp` serves the Redis protocol beside HTTP, from the same namespaces: redis-cli's `INCR`
/// continues the sequence HTTP started, and a SIGTERM drains both front-ends before the one
/// hand-back (nothing burned).
#[test]
fn resp_serves_beside_http_and_shares_the_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(dir.path(), &data, "127.0.0.1:0", None, |cmd| {
        cmd.args(["--resp", "127.0.0.1:0"]);
    });
    let line = server.next_line();
    let resp: SocketAddr = line
        .strip_prefix("idmint RESP listening on ")
        .unwrap_or_else(|| panic!("not the RESP line: {line}"))
        .parse()
        .unwrap();
    assert_eq!(ids(server.addr, "photos", 2), [1, 2]);
    let out = run(Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &resp.port().to_string()])
        .args(["INCR", "photos"]));
    assert!(
        out.status.success(),
        "redis-cli (Debian package redis-tools) failed: {out:?}"
    );
    assert_eq!(text(&out.stdout).trim(), "3");
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let stopped = rest
        .iter()
        .find(|l| l.starts_with("idmint stopped:"))
        .unwrap_or_else(|| panic!("no stop line in {rest:?}"));
    assert!(stopped.ends_with(" 0 burned"), "{stopped}");
}

/// SIGHUP installs the `[auth]` tokens of the configuration file as it is now: a token added
/// is served at once, a token removed is refused at its next request (401), and a file that
/// no longer loads leaves the tokens in use.
#[test]
fn sighup_reloads_the_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let new_token = |name: &str| {
        let out = run(idmint().args(["token", "new", "--name", name]));
        assert!(out.status.success(), "{out:?}");
        let out = text(&out.stdout);
        let secret = out
            .lines()
            .find(|l| l.starts_with("idmint_"))
            .unwrap()
            .to_owned();
        let entry = out[out.find("[[auth.tokens]]").unwrap()..].to_owned();
        (secret, entry)
    };
    let (first, first_entry) = new_token("first");
    let (second, second_entry) = new_token("second");
    let config = write_config(dir.path(), &first_entry);
    let server = Server::start(dir.path(), &data, Some(&config));
    let url = format!("http://{}", server.addr);
    let next = |token: &str| {
        run(idmint()
            .args(["next", "photos", "--server", &url])
            .env("IDMINT_TOKEN", token))
    };
    assert!(next(&first).status.success());
    let refused = next(&second);
    assert!(
        !refused.status.success() && text(&refused.stderr).contains("401"),
        "{refused:?}"
    );

    std::fs::write(&config, &second_entry).unwrap();
    server.signal("HUP");
    idmint_testkit::wait::until("the second token is served", DEADLINE, || {
        next(&second).status.success()
    });
    let gone = next(&first);
    assert!(
        !gone.status.success() && text(&gone.stderr).contains("401"),
        "{gone:?}"
    );

    std::fs::write(&config, "[auth\n").unwrap();
    server.signal("HUP");
    idmint_testkit::wait::until("the failed reload is logged", DEADLINE, || {
        server
            .stderr_so_far()
            .contains("SIGHUP: tokens not reloaded")
    });
    assert!(next(&second).status.success(), "the tokens in use stay");
    let (status, _) = server.terminate();
    assert!(status.success());
}
