//! Strict order across real processes: three `idmint serve` share one `order = "strict"`
//! namespace on one PostgreSQL database (one test) or one etcd server (the other), with
//! clients on every node taking one id per HTTP request, while the leader is killed (SIGKILL,
//! then restarted as a new process on new ports) and later the new leader is stopped (SIGSTOP)
//! for longer than its lease's TTL, then continued.
//!
//! What is checked, over every answer of the run: no id is handed out twice, and every answer
//! is above every answer that completed before its request was sent (the linearizability
//! checker, [`idmint_testkit::linearizable`]); the only failures are the requests the kill cut
//! and `no_leader` answers while there was no leader; every phase serves (a new leader takes
//! over after each fault).
//!
//! The phases are driven by progress (answers counted), never by sleeping to order events.
//! Both tests take the machine in turn (a lock).
//!
//! Needs PostgreSQL on 127.0.0.1:5432 and the `etcd` binary (see idmint-testkit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_testkit::linearizable::{check, Op};
use idmint_testkit::wait;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::{toml_string, Server, DEADLINE};

const NODES: usize = 3;
const CLIENTS_PER_NODE: usize = 3;
/// Answers each phase must add before the next fault.
const PER_PHASE: u64 = 1500;
const TTL_MS: u64 = 3000;

static MACHINE: Mutex<()> = Mutex::new(());

#[test]
fn strict_order_holds_across_leader_kills_and_stops_on_postgres() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(idmint_testkit::postgres::TempDatabase::create());
    let authority = format!(
        "[authority]\nkind = \"postgres\"\nurl = {}\ntable = \"idmint_strict\"\ntimeout_ms = 2000\n",
        toml_string(&db.url())
    );
    strict_run(&authority);
    drop(db);
}

#[cfg(feature = "etcd")]
#[test]
fn strict_order_holds_across_leader_kills_and_stops_on_etcd() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(idmint_testkit::etcd::PrivateEtcd::start());
    let authority = format!(
        "[authority]\nkind = \"etcd\"\nendpoints = [{}]\nprefix = \"/strict/\"\ntimeout_ms = 2000\n",
        toml_string(&etcd.client_url())
    );
    strict_run(&authority);
    drop(etcd);
}

/// A port free now (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One node process (its HTTP address is where its clients go).
struct Member {
    server: Server,
}

fn start_member(dir: &Path, authority: &str, incarnation: usize) -> Member {
    // The gRPC port is chosen before the process binds it (the other nodes are told it): a
    // port taken in between by another listener is chosen again.
    for attempt in 0.. {
        let grpc = free_port();
        let grpc_url = format!("http://127.0.0.1:{grpc}");
        let config = dir.join(format!("node-{incarnation}.toml"));
        std::fs::write(
            &config,
            format!(
                "[server]\ngrpc = \"127.0.0.1:{grpc}\"\n\n{authority}\n\
                 [leases]\nttl_ms = {TTL_MS}\nsafety_margin_ms = 600\nfloor_ahead_ms = 1000\n\n\
                 [peers]\nadvertise = {}\ntoken = \"idmint_chat_peer\"\nwait_ms = 5000\nforward_timeout_ms = 1000\n\n\
                 [namespaces.chat]\nkind = \"sequence\"\norder = \"strict\"\ncache = \"fixed\"\nblock_size = 200\n",
                toml_string(&grpc_url)
            ),
        )
        .unwrap();
        let data: PathBuf = dir.join(format!("data-{incarnation}"));
        let cmd = support::serve_command(dir, &data, "127.0.0.1:0", Some(&config));
        match Server::try_spawn(cmd) {
            Ok(server) => return Member { server },
            Err(e) if attempt < 5 && e.stderr.contains("Address already in use") => continue,
            Err(e) => panic!("node {incarnation} did not start: {e:?}"),
        }
    }
    unreachable!()
}

/// What one node says of the namespace's leader: `leader`, `follower` or `seeking`.
fn role_of(addr: SocketAddr) -> Option<String> {
    let (status, body) = get(addr, "/v1/namespaces/chat").ok()?;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["state"]["leader"]["role"].as_str().map(str::to_owned)
}

/// `GET path` on `addr`, one connection: status and body, or the connection's error.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(DEADLINE))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {raw:?}")))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    Ok((status, body.to_owned()))
}

/// Where the clients of one node send their requests.
struct Slot {
    addr: Mutex<SocketAddr>,
    /// False while its process is being killed and replaced: connection failures expected.
    up: AtomicBool,
}

#[derive(Default)]
struct Tally {
    ops: Mutex<Vec<Op>>,
    answered: AtomicU64,
    no_leader: AtomicU64,
    cut: AtomicU64,
}

fn strict_run(authority: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut members: Vec<Member> = (0..NODES)
        .map(|i| start_member(dir.path(), authority, i))
        .collect();
    let slots: Arc<Vec<Slot>> = Arc::new(
        members
            .iter()
            .map(|m| Slot {
                addr: Mutex::new(m.server.addr),
                up: AtomicBool::new(true),
            })
            .collect(),
    );
    let leader = |members: &[Member]| -> usize {
        wait::until_some("one node leads", DEADLINE, || {
            (0..members.len())
                .find(|&i| role_of(members[i].server.addr).as_deref() == Some("leader"))
        })
    };
    leader(&members);
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let mut clients = Vec::new();
    for slot in 0..NODES {
        for _ in 0..CLIENTS_PER_NODE {
            let (slots, tally, stop) = (slots.clone(), tally.clone(), stop.clone());
            clients.push(thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let s = &slots[slot];
                    let addr = *s.addr.lock().unwrap();
                    let start = epoch.elapsed().as_nanos() as u64;
                    let answer = get(addr, "/v1/ids/chat");
                    let end = epoch.elapsed().as_nanos() as u64;
                    match answer {
                        Ok((200, body)) => {
                            let ids = support::parse_ids(&body);
                            tally.ops.lock().unwrap().push(Op { start, end, ids });
                            tally.answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok((503, body)) if body.contains("\"no_leader\"") => {
                            tally.no_leader.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok((status, body)) => panic!("node {slot}: {status} {body}"),
                        Err(e) => {
                            assert!(
                                !s.up.load(Ordering::SeqCst) || *s.addr.lock().unwrap() != addr,
                                "node {slot} is up and failed: {e}"
                            );
                            tally.cut.fetch_add(1, Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
            }));
        }
    }
    let progress = |tally: &Tally, what: &str| {
        let from = tally.answered.load(Ordering::SeqCst);
        wait::until(what, DEADLINE, || {
            tally.answered.load(Ordering::SeqCst) >= from + PER_PHASE
        });
    };
    progress(&tally, "answers before any fault");

    // The leader is killed and replaced by a new process on new ports.
    let first = leader(&members);
    slots[first].up.store(false, Ordering::SeqCst);
    let old = std::mem::replace(
        &mut members[first],
        start_member(dir.path(), authority, NODES),
    );
    old.server.kill9();
    *slots[first].addr.lock().unwrap() = members[first].server.addr;
    slots[first].up.store(true, Ordering::SeqCst);
    progress(&tally, "answers after the leader was killed");

    // The new leader stops for twice the TTL: another node takes over meanwhile.
    let second = leader(&members);
    members[second].server.stop();
    let others_before = tally.answered.load(Ordering::SeqCst);
    wait::until("answers while the leader is stopped", DEADLINE, || {
        tally.answered.load(Ordering::SeqCst) >= others_before + PER_PHASE
    });
    // Answers while it is stopped mean another node leads: its lease expired.
    members[second].server.signal("CONT");
    progress(&tally, "answers after the stopped leader continued");

    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    for m in members {
        let (status, lines) = m.server.terminate();
        assert!(status.success(), "{lines:?}");
    }
    let ops = std::mem::take(&mut *tally.ops.lock().unwrap());
    let checked = check(&ops).unwrap_or_else(|v| panic!("strict order broken: {v}"));
    eprintln!(
        "strict: {checked:?}; {} no_leader answers, {} requests cut by the kill",
        tally.no_leader.load(Ordering::SeqCst),
        tally.cut.load(Ordering::SeqCst)
    );
}
