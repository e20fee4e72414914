//! A store that loses its records while nodes run, with real `idmint serve` processes on each
//! networked authority that stores worker leases: PostgreSQL (the schema dropped), MariaDB (the
//! database dropped and re-created), ZooKeeper and etcd (the server killed, its data deleted,
//! restarted empty).
//!
//! Nodes A and B serve a snowflake namespace with `worker = "lease"` (and A a sequence
//! namespace) under load; the store is emptied. Then:
//! - node C, which never ran, starts on the same configuration without `--init` and is refused
//!   (the store is empty and has no incarnation): it must not take worker id 0 with token 1;
//! - A and B stop issuing: their renewals find no record naming their leases, and neither
//!   re-acquires in a store that is not the incarnation it started on;
//! - an operator then starts node D with `--init` (a new deployment on the emptied store): D
//!   serves; A and B still answer nothing but 503, and B refuses to create a namespace it never
//!   saw (in the new store it would start from 1 again);
//! - across every id A, B and D handed out: 0 duplicates, ids increasing per node.
//!
//! Each run prints its counts (`--nocapture`). Waits poll against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_testkit::wait;
use serde_json::Value;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{http_get, idmint, parse_ids, Exited, Server, DEADLINE};

const NS: &str = "events";
const SEQ: &str = "orders";

/// The store under test and how to empty it.
enum Store {
    Postgres(idmint_testkit::postgres::TempDatabase),
    Mariadb(idmint_testkit::mysql::TempDatabase),
    Zookeeper(idmint_testkit::zookeeper::PrivateZookeeper),
    #[cfg(feature = "etcd")]
    Etcd(idmint_testkit::etcd::PrivateEtcd),
}

impl Store {
    fn authority(&self) -> String {
        match self {
            Store::Postgres(db) => format!(
                "kind = \"postgres\"\nurl = \"{}\"\ntimeout_ms = 2000\n",
                db.url()
            ),
            Store::Mariadb(db) => format!(
                "kind = \"mysql\"\nurl = \"{}\"\ntimeout_ms = 2000\n",
                db.url()
            ),
            Store::Zookeeper(zk) => format!(
                "kind = \"zookeeper\"\nservers = [\"{}\"]\ntimeout_ms = 2000\n",
                zk.connect_string()
            ),
            #[cfg(feature = "etcd")]
            Store::Etcd(etcd) => format!(
                "kind = \"etcd\"\nendpoints = [\"{}\"]\ntimeout_ms = 2000\n",
                etcd.client_url()
            ),
        }
    }

    /// Empties the store the way an operator or a disk would.
    async fn wipe(&mut self) {
        match self {
            Store::Postgres(db) => db
                .client()
                .await
                .batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
                .await
                .unwrap(),
            Store::Mariadb(db) => {
                let name = db.name().to_owned();
                db.sql(&format!(
                    "DROP DATABASE `{name}`; CREATE DATABASE `{name}`;"
                ))
                .unwrap();
            }
            Store::Zookeeper(zk) => zk.wipe().await,
            #[cfg(feature = "etcd")]
            Store::Etcd(etcd) => etcd.wipe().await,
        }
    }
}

/// Ids a node handed out, and how many requests it refused.
#[derive(Default)]
struct Taken {
    ids: Vec<u64>,
    refused: u64,
    /// Ids handed out after `stop_serving` was set.
    late: u64,
}

/// Takes batches of 100 from `addr` until `stop`, counting them in `served`; ids after `after`
/// is set count as late.
fn load(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    after: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
) -> Taken {
    let mut taken = Taken::default();
    while !stop.load(Ordering::Relaxed) {
        let (status, body) = http_get(addr, &format!("/v1/ids/{NS}?count=100"));
        if status == 200 {
            let batch = parse_ids(&body);
            if after.load(Ordering::Relaxed) {
                taken.late += batch.len() as u64;
            }
            served.fetch_add(batch.len() as u64, Ordering::Relaxed);
            taken.ids.extend(batch);
        } else {
            assert_eq!(status, 503, "{body}");
            taken.refused += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    taken
}

/// The node's worker lease: its status and the floor it last recorded (ms), above every
/// timestamp it may issue under it.
fn lease(addr: SocketAddr) -> (String, u64) {
    let (status, body) = http_get(addr, &format!("/v1/namespaces/{NS}"));
    assert_eq!(status, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    let lease = &info["state"]["worker_lease"];
    (
        lease["status"].as_str().unwrap_or_default().to_owned(),
        support::parse_rfc3339_ms(lease["floor"].as_str().unwrap_or_default()),
    )
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn serve(dir: &Path, data_dir: &Path, config: &Path, init: bool) -> std::process::Command {
    let mut cmd = idmint();
    cmd.current_dir(dir)
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--http", "127.0.0.1:0", "--config"])
        .arg(config);
    if init {
        cmd.arg("--init");
    }
    cmd
}

fn lost_store(mut store: Store, runtime: &tokio::runtime::Runtime, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config: PathBuf = dir.path().join("idmint.toml");
    std::fs::write(
        &config,
        format!(
            "[authority]\n{}\n[leases]\nttl_ms = 2000\nfloor_ahead_ms = 1000\n\
             max_floor_wait_ms = 2000\nsafety_margin_ms = 500\n\n\
             [namespaces.{NS}]\nkind = \"snowflake\"\nworker = \"lease\"\n\n\
             [namespaces.{SEQ}]\nkind = \"sequence\"\n",
            store.authority()
        ),
    )
    .unwrap();
    // C's configuration declares the snowflake namespace alone, as in the incident.
    let snowflake_only: PathBuf = dir.path().join("snowflake.toml");
    std::fs::write(
        &snowflake_only,
        std::fs::read_to_string(&config)
            .unwrap()
            .split(&format!("[namespaces.{SEQ}]"))
            .next()
            .unwrap(),
    )
    .unwrap();
    let node = |n: &str, init: bool| serve(dir.path(), &dir.path().join(n), &config, init);
    let a = Server::spawn(node("a", true));
    let b = Server::spawn(node("b", false));
    // A serves the sequence namespace; B never does.
    let (status, body) = http_get(a.addr, &format!("/v1/ids/{SEQ}?count=10"));
    assert_eq!(status, 200, "{body}");

    let stop = Arc::new(AtomicBool::new(false));
    let late = Arc::new(AtomicBool::new(false));
    let served = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let loads: Vec<_> = [a.addr, b.addr]
        .into_iter()
        .zip(&served)
        .map(|(addr, served)| {
            let (stop, late, served) = (stop.clone(), late.clone(), served.clone());
            std::thread::spawn(move || load(addr, stop, late, served))
        })
        .collect();
    // Both nodes under load before the store is emptied.
    wait::until(format!("[{name}] both nodes serving"), DEADLINE, || {
        served.iter().all(|s| s.load(Ordering::Relaxed) >= 1_000)
    });

    runtime.block_on(store.wipe());

    // C never ran: the empty store without an incarnation, and a configuration declaring
    // namespaces, is not a new deployment without --init.
    let c = match Server::try_spawn(serve(
        dir.path(),
        &dir.path().join("c"),
        &snowflake_only,
        false,
    )) {
        Ok(c) => panic!("[{name}] node C started on the emptied store at {}", c.addr),
        Err(Exited { status, stderr }) => {
            assert!(!status.success());
            assert!(
                stderr.contains("--init") && stderr.contains("no store incarnation"),
                "[{name}] {stderr}"
            );
            stderr
        }
    };
    drop(c);

    // A and B stop renewing, so they stop issuing at the floor they recorded last: once the
    // clock is past both floors, nothing either issues can be new.
    for (who, node) in [("A", &a), ("B", &b)] {
        let what = wait::lazy(|| {
            let (status, floor) = lease(node.addr);
            format!(
                "[{name}] {who} to give up its lease ({status}, floor {floor}): {}",
                node.stderr_so_far()
            )
        });
        wait::until(what, DEADLINE, || {
            let (status, floor) = lease(node.addr);
            status != "held" && now_ms() > floor
        });
    }
    late.store(true, Ordering::Relaxed);

    // An operator starts a new deployment on the emptied store.
    let d = Server::spawn(node("d", true));
    let mut d_ids = Vec::new();
    for _ in 0..20 {
        let (status, body) = http_get(d.addr, &format!("/v1/ids/{NS}?count=100"));
        assert_eq!(status, 200, "[{name}] D: {body}");
        d_ids.extend(parse_ids(&body));
    }
    // A and B see their leases gone (at the latest once D's store answers again) and refuse
    // to take a worker id in D's store.
    for (who, node) in [("A", &a), ("B", &b)] {
        let what = wait::lazy(|| {
            format!(
                "[{name}] {who} to see its lease lost and the store lost: {}",
                node.stderr_so_far()
            )
        });
        wait::until(what, DEADLINE, || {
            lease(node.addr).0 == "lost" && node.stderr_so_far().contains("store lost")
        });
    }
    // A namespace B never saw: creating it in D's store would start it from 1 again.
    let (status, body) = http_get(b.addr, "/v1/ids/invoices?count=1");
    assert_ne!(
        status, 200,
        "[{name}] B created invoices in the new store: {body}"
    );
    assert!(body.contains("namespace_lost"), "[{name}] {status} {body}");

    stop.store(true, Ordering::Relaxed);
    let taken: Vec<Taken> = loads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut seen = HashSet::new();
    let mut duplicates = 0u64;
    for (who, ids) in [("A", &taken[0].ids), ("B", &taken[1].ids), ("D", &d_ids)] {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "[{name}] {who}'s ids went back"
        );
        for id in ids {
            if !seen.insert(*id) {
                duplicates += 1;
            }
        }
    }
    eprintln!(
        "[{name}] A: {} ids ({} refused, {} after the loss was seen); B: {} ids ({} refused, {} \
         after); D (--init): {} ids; {} distinct, {duplicates} duplicates",
        taken[0].ids.len(),
        taken[0].refused,
        taken[0].late,
        taken[1].ids.len(),
        taken[1].refused,
        taken[1].late,
        d_ids.len(),
        seen.len()
    );
    assert_eq!(duplicates, 0, "[{name}] ids repeated");
    assert_eq!(
        (taken[0].late, taken[1].late),
        (0, 0),
        "[{name}] a node issued after it saw its lease lost"
    );
    assert!(!taken[0].ids.is_empty() && !taken[1].ids.is_empty());
    assert!(
        d_ids.iter().min() > taken[0].ids.iter().chain(&taken[1].ids).max(),
        "[{name}] D issued below what A and B issued"
    );
}

#[test]
fn postgres_schema_dropped_under_running_nodes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(idmint_testkit::postgres::TempDatabase::create());
    lost_store(Store::Postgres(db), &runtime, "postgres");
}

#[test]
fn mariadb_database_recreated_under_running_nodes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    lost_store(
        Store::Mariadb(idmint_testkit::mysql::TempDatabase::new()),
        &runtime,
        "mariadb",
    );
}

#[test]
fn zookeeper_wiped_under_running_nodes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let zk = runtime.block_on(idmint_testkit::zookeeper::PrivateZookeeper::start());
    lost_store(Store::Zookeeper(zk), &runtime, "zookeeper");
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_wiped_under_running_nodes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(idmint_testkit::etcd::PrivateEtcd::start());
    lost_store(Store::Etcd(etcd), &runtime, "etcd");
}
