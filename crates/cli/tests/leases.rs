//! Snowflake namespaces under worker leases, with real `idmint serve` processes:
//! kill -9 and restart, a clean stop and restart, a restart under a clock stepped back 30 s
//! (libfaketime, the Debian `faketime` package, which the test command installs), and a second
//! node on one PostgreSQL configured with a worker id another node holds.
//!
//! Every id of every run is decoded and checked: never repeated, and each run's ids above the
//! previous run's (the time floor). Waits poll against a generous deadline; nothing sleeps to
//! order events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_core::Layout;
use serde_json::Value;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use support::{idmint, Server};

fn ids(addr: SocketAddr, ns: &str, count: u64) -> Vec<u64> {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /v1/ids/{ns}?count={count} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{raw}");
    let body: Value = serde_json::from_str(body).unwrap();
    body["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect()
}

fn config(dir: &Path, authority: &str, worker: &str) -> std::path::PathBuf {
    let path = dir.join("idmint.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nauto_create = false\n\n{authority}\n[namespaces.events]\n\
             kind = \"snowflake\"\nworker = {worker}\n"
        ),
    )
    .unwrap();
    path
}

fn faketime() -> &'static str {
    let path = "/usr/bin/faketime";
    assert!(
        Path::new(path).exists(),
        "{path} is missing: apt-get install -y faketime (scripts/test.sh installs it)"
    );
    path
}

/// kill -9, SIGTERM and a clock stepped back: no id of a fixed worker id ever repeats, each run
/// starts above the previous one, and a clock 30 s behind the worker id's floor is refused
/// with both times named.
#[test]
fn a_fixed_worker_never_repeats_across_crashes_and_clock_steps() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = config(dir.path(), "", "0");
    let mut seen = HashSet::new();
    let mut last_max = 0u64;
    let mut check = |batch: Vec<u64>, what: &str| {
        let min = *batch.iter().min().unwrap();
        assert!(
            min > last_max,
            "{what}: id {min} not above the previous run's {last_max}"
        );
        for id in &batch {
            assert!(seen.insert(*id), "{what}: duplicate id {id}");
            assert_eq!(Layout::twitter().decode(*id).unwrap().parts.node, 0);
        }
        last_max = *batch.iter().max().unwrap();
    };

    // Run 1, then kill -9: its floor was recorded ahead of its clock.
    let first = Server::start(dir.path(), &data, Some(&config));
    check(ids(first.addr, "events", 5000), "run 1");
    first.kill9();

    // Run 2 starts at once (its own previous run held the id: it waits out that floor).
    let second = Server::start(dir.path(), &data, Some(&config));
    check(ids(second.addr, "events", 5000), "after kill -9");
    let (status, _) = second.terminate();
    assert!(status.success());

    // Run 3 after a clean stop.
    let third = Server::start(dir.path(), &data, Some(&config));
    check(ids(third.addr, "events", 5000), "after SIGTERM");
    let (status, _) = third.terminate();
    assert!(status.success());

    // Run 4 with the clock 30 s behind: refused, naming both times.
    let out = Command::new(faketime())
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("NO_COLOR", "1")
        .env_remove("IDMINT_SERVER")
        .args([
            "-f",
            "-30s",
            env!("CARGO_BIN_EXE_idmint"),
            "serve",
            "--http",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "a clock 30 s behind must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has issued ids up to"), "{stderr}");
    assert!(stderr.contains("this clock reads"), "{stderr}");

    // Run 5 with the clock right again: serves above everything.
    let fifth = Server::start(dir.path(), &data, Some(&config));
    check(ids(fifth.addr, "events", 5000), "after the refused start");
    let out = idmint()
        .args(["status", "--server", &format!("http://{}", fifth.addr)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.starts_with("events "))
        .unwrap_or_else(|| panic!("no events row:\n{stdout}"));
    assert!(row.contains("worker 0 (lease held, token "), "{row}");
    let (status, _) = fifth.terminate();
    assert!(status.success());
}

/// Two nodes on one PostgreSQL: `worker = "lease"` gives them different worker ids; a third
/// configured with a worker id the first holds refuses to start and names the holder.
#[test]
fn nodes_on_one_postgres_never_share_a_worker_id() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(idmint_testkit::postgres::TempDatabase::create());
    let authority = format!(
        "[authority]\nkind = \"postgres\"\nurl = \"{}\"\ntimeout_ms = 5000\n",
        db.url()
    );
    let dir = tempfile::tempdir().unwrap();
    let leased = config(dir.path(), &authority, "\"lease\"");
    let a = Server::start(dir.path(), &dir.path().join("a"), Some(&leased));
    let b = Server::start(dir.path(), &dir.path().join("b"), Some(&leased));
    let (ia, ib) = (ids(a.addr, "events", 2000), ids(b.addr, "events", 2000));
    let worker = |id: u64| Layout::twitter().decode(id).unwrap().parts.node;
    assert!(ia.iter().all(|&id| worker(id) == 0), "first node: worker 0");
    assert!(
        ib.iter().all(|&id| worker(id) == 1),
        "second node: worker 1"
    );

    let other = tempfile::tempdir().unwrap();
    let fixed = config(other.path(), &authority, "0");
    let out = idmint()
        .current_dir(other.path())
        .args(["serve", "--http", "127.0.0.1:0", "--init", "--data-dir"])
        .arg(other.path().join("c"))
        .arg("--config")
        .arg(&fixed)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a taken worker id must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("worker 0 of group events is held by"),
        "{stderr}"
    );
    // Both holders kept serving.
    assert_eq!(ids(a.addr, "events", 10).len(), 10);
    let (status, _) = a.terminate();
    assert!(status.success());
    let (status, _) = b.terminate();
    assert!(status.success());
    drop(db);
}
