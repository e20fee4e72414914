//! A node on PostgreSQL (through the test kit's fault proxy) whose store does not answer when
//! it stops and when it starts again, with real processes:
//! - the clean stop cannot hand its tail back (the store is cut): the give-back's outcome is
//!   unknown, so the tail is burned, never kept (the store may have applied it);
//! - the restart does not exit: the node listens, answers 503 `authority_unavailable` and is
//!   unready (`/readyz` 503): nothing it could serve is confirmed by the store;
//! - when the store answers again the node connects and checks it by itself, serves ids above
//!   everything before, turns ready, and a clean stop hands its tail back;
//! - a node that never ran on its store (no node record) still refuses to start without it:
//!   only the store can say whether the deployment is new.
//!
//! Nothing sleeps to order events: every wait polls a condition against a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_testkit::postgres::TempDatabase;
use idmint_testkit::proxy::{Fault, FaultProxy};
use idmint_testkit::wait;
use std::path::Path;
use support::{http_get, ids_of, serve_command, stop_counts, toml_string, Server, DEADLINE};

fn write_config(dir: &Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("idmint.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nauto_create = false\n\n[authority]\nkind = \"postgres\"\nurl = {}\n\
             timeout_ms = 1000\n\n[namespaces.orders]\nkind = \"sequence\"\ncache = \"fixed\"\n\
             block_size = 1000\n",
            toml_string(url)
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_node_restarted_while_its_store_is_down_burns_its_tail_and_connects_later() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TempDatabase::create());
    let proxy = runtime
        .block_on(FaultProxy::start(db.server_addr()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = write_config(dir.path(), &db.url_via(proxy.addr()));

    let node = Server::start_with(dir.path(), &data, "127.0.0.1:0", Some(&config), |_| {});
    let (status, body) = http_get(node.addr, "/v1/ids/orders?count=10");
    assert_eq!(status, 200, "{body}");
    let mut served = ids_of(&body);
    assert_eq!(served, (1..=10).collect::<Vec<_>>());

    // The store goes away; the clean stop burns the unused block (its give-back has no answer).
    proxy.set_fault(Fault::Cut);
    let (status, rest) = node.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let stop = stop_counts(&rest);
    assert_eq!(
        (stop.given_back, stop.kept, stop.burned),
        (0, 0, 990),
        "{rest:?}"
    );

    // Restarted with the store still down: it starts, answers a clear 503, and is unready.
    let node = Server::start_with(dir.path(), &data, "127.0.0.1:0", Some(&config), |_| {});
    let (status, body) = http_get(node.addr, "/v1/ids/orders");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("authority_unavailable"), "{body}");
    assert_eq!(http_get(node.addr, "/readyz").0, 503);

    // The store answers again: the node connects by itself and serves above everything before.
    proxy.set_fault(Fault::None);
    let after = wait::until_some("the node serves again", DEADLINE, || {
        let (status, body) = http_get(node.addr, "/v1/ids/orders?count=5");
        (status == 200).then(|| ids_of(&body))
    });
    assert!(
        after[0] > 1000,
        "an id at or below one served before: {after:?}"
    );
    served.extend(after);
    support::assert_strictly_increasing(&served, "the node across the outage");
    wait::until("the node turns ready", DEADLINE, || {
        http_get(node.addr, "/readyz").0 == 200
    });
    let (status, rest) = node.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let stop = stop_counts(&rest);
    assert!(stop.given_back > 0, "{rest:?}");
    assert_eq!(stop.burned, 0, "{rest:?}");
    drop(proxy);
    runtime.block_on(db.drop_now());
}

#[test]
fn a_node_that_never_ran_on_its_store_does_not_start_without_it() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TempDatabase::create());
    let proxy = runtime
        .block_on(FaultProxy::start(db.server_addr()))
        .unwrap();
    proxy.set_fault(Fault::Cut);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &db.url_via(proxy.addr()));
    let cmd = serve_command(
        dir.path(),
        &dir.path().join("data"),
        "127.0.0.1:0",
        Some(&config),
    );
    let exited = match Server::try_spawn(cmd) {
        Ok(_) => panic!("started without its store and without a node record"),
        Err(exited) => exited,
    };
    assert!(!exited.status.success());
    assert!(
        exited
            .stderr
            .contains("connecting to the postgres authority"),
        "{}",
        exited.stderr
    );
    drop(proxy);
    runtime.block_on(db.drop_now());
}
