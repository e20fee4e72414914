//! Tiers with real processes (issue 11, item 4): a global `idmint serve` on the file store, two
//! regional nodes on the `upstream` authority leasing blocks from it over gRPC, and an
//! `idmint-client` per regional node leasing from it, under steady load.
//!
//! The global node is frozen (SIGSTOP: its sockets stay open and nothing answers, the harder
//! kind of outage) for `IDMINT_OUTAGE_SECS` seconds (5 in the test command; the 60 s
//! run is `IDMINT_OUTAGE_SECS=60`), then resumed (SIGCONT). What is checked: the clients see
//! zero errors throughout, because the regional buffers (sized by `buffer_seconds` from their
//! demand) outlast the outage; zero duplicates across every client; ids strictly increasing per
//! client; a clean stop of each tier (client close, then regional SIGTERM, then global SIGTERM)
//! hands its tail up rather than burning it.
//!
//! The load is paced (a batch every few milliseconds) so the demand is steady; nothing sleeps to
//! order events, and the outage length is a parameter, not an assertion bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_client::{BlockingClient, ClientConfig, ClientError};
use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use support::{stop_counts, Server, DEADLINE};

const NAMESPACE: &str = "orders";

fn outage() -> Duration {
    let secs = std::env::var("IDMINT_OUTAGE_SECS")
        .ok()
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("IDMINT_OUTAGE_SECS={v:?}: {e}"))
        })
        .unwrap_or(5);
    Duration::from_secs(secs)
}

/// A port the kernel just gave and took back, for a `--grpc` address that configs must name
/// before the process starts.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "kill {sig} {pid}");
}

/// What one client thread saw.
struct ClientRun {
    ids: Vec<u64>,
    errors: Vec<String>,
    given_back: u64,
}

fn client_loop(url: String, stop: Arc<AtomicBool>, taken: Arc<AtomicU64>) -> ClientRun {
    let mut config = ClientConfig::new([url]);
    // An empty client buffer waits (for its regional node) rather than failing fast.
    config.refill_wait = Duration::from_secs(30);
    let client =
        BlockingClient::connect_with(config, Arc::new(idmint_core::SystemClock::new())).unwrap();
    let mut run = ClientRun {
        ids: Vec::new(),
        errors: Vec::new(),
        given_back: 0,
    };
    while !stop.load(Ordering::SeqCst) {
        match client.next_batch(NAMESPACE, 20) {
            Ok(ids) => {
                run.ids.extend(ids.iter().map(|id| id.as_u64().unwrap()));
                taken.fetch_add(20, Ordering::SeqCst);
            }
            Err(e) => run.errors.push(e.to_string()),
        }
        thread::sleep(Duration::from_millis(2));
    }
    match client.close() {
        Ok(report) => run.given_back = report.given_back,
        Err(ClientError::Closed) => {}
        Err(e) => run.errors.push(format!("close: {e}")),
    }
    run
}

#[test]
fn regional_nodes_and_clients_ride_out_a_global_outage() {
    let dir = tempfile::tempdir().unwrap();
    let global_grpc = free_port();
    let global_cfg = write(
        dir.path(),
        "global.toml",
        &format!(
            "[server]\nauto_create = false\n\n[namespaces.{NAMESPACE}]\nkind = \"sequence\"\n"
        ),
    );
    let global = Server::start_with(
        dir.path(),
        &dir.path().join("global"),
        "127.0.0.1:0",
        Some(&global_cfg),
        |cmd| {
            cmd.args(["--grpc", &global_grpc.to_string()]);
        },
    );
    let outage = outage();
    // Each regional buffer holds twice the outage of its own demand (and at least 20 s).
    let buffer_seconds = (outage.as_secs() * 2).max(20);
    let regional_cfg = write(
        dir.path(),
        "regional.toml",
        &format!(
            "[server]\nauto_create = false\n\n[authority]\nkind = \"upstream\"\n\
             urls = [\"http://{global_grpc}\"]\n\n[namespaces.{NAMESPACE}]\nkind = \"sequence\"\n\
             buffer_seconds = {buffer_seconds}\nmin_block = 20000\n"
        ),
    );
    let regional_grpc = [free_port(), free_port()];
    let regionals: Vec<Server> = regional_grpc
        .iter()
        .enumerate()
        .map(|(i, grpc)| {
            Server::start_with(
                dir.path(),
                &dir.path().join(format!("regional-{i}")),
                "127.0.0.1:0",
                Some(&regional_cfg),
                |cmd| {
                    cmd.args(["--grpc", &grpc.to_string()]);
                },
            )
        })
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let url = format!("http://{}", regional_grpc[i % 2]);
            let (stop, taken) = (stop.clone(), taken.clone());
            thread::spawn(move || client_loop(url, stop, taken))
        })
        .collect();

    let wait_for = |ids: u64, what: &str| {
        let deadline = Instant::now() + DEADLINE;
        while taken.load(Ordering::SeqCst) < ids {
            assert!(Instant::now() < deadline, "{what}: no progress");
            thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for(20_000, "warm-up");

    // The outage: the global node frozen, its sockets open, nothing answering.
    signal(global.pid(), "-STOP");
    let before = taken.load(Ordering::SeqCst);
    let frozen_at = Instant::now();
    while frozen_at.elapsed() < outage {
        thread::sleep(Duration::from_millis(50));
    }
    let during = taken.load(Ordering::SeqCst) - before;
    signal(global.pid(), "-CONT");
    assert!(during > 0, "no ids were taken during the outage");
    let after = taken.load(Ordering::SeqCst);
    wait_for(after + 20_000, "after the outage");

    stop.store(true, Ordering::SeqCst);
    let runs: Vec<ClientRun> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let mut all = HashSet::new();
    let mut client_given_back = 0;
    for (i, run) in runs.iter().enumerate() {
        assert!(
            run.errors.is_empty(),
            "client {i} saw errors: {:?}",
            run.errors
        );
        support::assert_strictly_increasing(&run.ids, &format!("client {i}"));
        for id in &run.ids {
            assert!(all.insert(*id), "id {id} handed out twice");
        }
        client_given_back += run.given_back;
    }
    assert!(
        client_given_back > 0,
        "the clients' clean close gave nothing back"
    );

    let mut regional_given_back = 0;
    for regional in regionals {
        let (status, rest) = regional.terminate();
        assert!(status.success(), "regional exit {status:?}: {rest:?}");
        let (given_back, _burned) = stop_counts(&rest);
        regional_given_back += given_back;
    }
    assert!(
        regional_given_back > 0,
        "the regional nodes gave nothing back to the global one"
    );
    let (status, rest) = global.terminate();
    assert!(status.success(), "global exit {status:?}: {rest:?}");
    eprintln!(
        "{} ids to 4 clients, {during} during a {outage:?} outage; given back: clients {client_given_back}, regional {regional_given_back}",
        all.len()
    );
}
