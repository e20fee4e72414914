//! Several nodes on one authority, as real processes: three `idmint serve` share one sequence
//! namespace on one PostgreSQL database (one test) or one etcd server (the other) while twelve
//! clients fetch ids from them, and the nodes are killed (SIGKILL) and restarted on new ports,
//! rotating, with one graceful restart (SIGTERM, which hands back the unused tail).
//!
//! What is checked (invariants 1 to 3 of docs/design.md, across processes): no id is ever
//! returned twice by any node; each client's ids from one node increase strictly, within one
//! process and across its restarts (a restarted node never reuses a block); a request cut by a
//! kill is answered once it is retried on the restarted node; and no request fails other than
//! by a connection cut during a kill or a SIGTERM.
//!
//! At the end `idmint audit verify` and `export` read the authority's audit ledger with the
//! nodes' configuration: it must verify clean and contain every id the clients received.
//!
//! The run lasts `IDMINT_CLUSTER_SECS` seconds (default 60). The kill schedule is driven by the
//! run's progress: the main thread polls the elapsed time and the ids each node has served, it
//! never sleeps to order events. Both tests take the machine in turn (a lock), not together.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 and, for the etcd test (cargo feature `etcd`, on by
//! default), the `etcd` binary (see idmint-testkit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_core::NamespaceName;
#[cfg(feature = "etcd")]
use idmint_store::etcd::{EtcdAuthority, EtcdConfig};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_store::Authority;
use idmint_testkit::wait;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::{assert_strictly_increasing, stop_counts, toml_string, Server, DEADLINE};

/// The shared namespace and its block size: small, so that blocks turn over often.
const NAMESPACE: &str = "orders";
const BLOCK: u64 = 500;
const NODES: usize = 3;
const CLIENTS_PER_NODE: usize = 4;
/// Kills and restarts during the run, rotating among the nodes; one of them is a SIGTERM.
const EVENTS: usize = 6;
/// The event that stops its node with SIGTERM instead of SIGKILL.
const GRACEFUL_EVENT: usize = 3;
/// Ids a node process must have served before it may be stopped (so each one takes part).
const MIN_IDS_PER_PROCESS: u64 = 4 * BLOCK;
/// Default run length, overridden by `IDMINT_CLUSTER_SECS`.
const DEFAULT_SECS: u64 = 60;

/// The two tests share 2 cores: one at a time.
static MACHINE: Mutex<()> = Mutex::new(());

fn run_length() -> Duration {
    let secs = match std::env::var("IDMINT_CLUSTER_SECS") {
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("IDMINT_CLUSTER_SECS={v:?}: {e}")),
        Err(_) => DEFAULT_SECS,
    };
    assert!(secs > 0, "IDMINT_CLUSTER_SECS must be above 0");
    Duration::from_secs(secs)
}

#[test]
fn three_nodes_on_one_postgres_never_repeat_an_id() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(idmint_testkit::postgres::TempDatabase::create());
    let url = db.url();
    let authority = format!(
        "[authority]\nkind = \"postgres\"\nurl = {}\ntable = \"idmint_cluster\"\ntimeout_ms = 5000\n",
        toml_string(&url)
    );
    let watermark = move || {
        runtime.block_on(async {
            let mut config = PostgresConfig::new(url.clone());
            config.table = "idmint_cluster".to_owned();
            let a = PostgresAuthority::connect(config).await.unwrap();
            final_watermark(&a).await
        })
    };
    cluster_run("postgres", &authority, watermark);
    drop(db);
}

/// Needs the binary built with the `etcd` feature (on by default).
#[cfg(feature = "etcd")]
#[test]
fn three_nodes_on_one_etcd_never_repeat_an_id() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(idmint_testkit::etcd::PrivateEtcd::start());
    let endpoint = etcd.client_url();
    let prefix = "/idmint-cluster/";
    let authority = format!(
        "[authority]\nkind = \"etcd\"\nendpoints = [{}]\nprefix = {}\ntimeout_ms = 5000\n",
        toml_string(&endpoint),
        toml_string(prefix)
    );
    let watermark = move || {
        runtime.block_on(async {
            let mut config = EtcdConfig::new([endpoint.clone()]);
            config.prefix = prefix.to_owned();
            let a = EtcdAuthority::connect(config).await.unwrap();
            final_watermark(&a).await
        })
    };
    cluster_run("etcd", &authority, watermark);
    drop(etcd);
}

/// The namespace's durable watermark and its first id, read from the authority itself.
async fn final_watermark(a: &dyn Authority) -> (u64, u64) {
    let state = a
        .state(&NamespaceName::new(NAMESPACE).unwrap())
        .await
        .unwrap()
        .expect("the namespace exists");
    (state.watermark, state.spec.initial_watermark())
}

/// Where one node slot currently lives. A slot is one node of the cluster; each restart of it is
/// a new process (an incarnation), with a number unique over the run, on a new port.
struct Slot {
    state: Mutex<SlotState>,
    changed: Condvar,
    /// Ids its clients received, over all its incarnations (the kill schedule's progress).
    served: AtomicU64,
}

#[derive(Clone, Copy)]
struct SlotState {
    incarnation: usize,
    addr: SocketAddr,
    /// False from just before the process is signalled until its successor is published:
    /// connection failures then are expected.
    up: bool,
}

/// What a client does after a request failed on the connection level.
enum AfterFailure {
    /// The node went down: the newer incarnation to retry on.
    Moved(SlotState),
    /// The node is up and was not signalled: the failure is an error of its own.
    StillUp,
    /// The run is over (only when the test is failing elsewhere).
    Stopped,
}

impl Slot {
    fn new(first: SlotState) -> Slot {
        Slot {
            state: Mutex::new(first),
            changed: Condvar::new(),
            served: AtomicU64::new(0),
        }
    }

    fn current(&self) -> SlotState {
        *self.state.lock().unwrap()
    }

    fn going_down(&self) {
        self.state.lock().unwrap().up = false;
    }

    fn publish(&self, incarnation: usize, addr: SocketAddr) {
        *self.state.lock().unwrap() = SlotState {
            incarnation,
            addr,
            up: true,
        };
        self.changed.notify_all();
    }

    fn after_failure(&self, failed_on: usize, stop: &AtomicBool) -> AfterFailure {
        let deadline = Instant::now() + DEADLINE;
        let mut state = self.state.lock().unwrap();
        if state.incarnation == failed_on && state.up {
            return AfterFailure::StillUp;
        }
        loop {
            if state.incarnation > failed_on && state.up {
                return AfterFailure::Moved(*state);
            }
            if stop.load(Ordering::SeqCst) {
                return AfterFailure::Stopped;
            }
            assert!(
                Instant::now() < deadline,
                "no restart of the node after incarnation {failed_on}"
            );
            state = self
                .changed
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }
}

/// Sets the flag when dropped, so that client threads end when the test body panics.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// What one client thread brings back.
#[derive(Default)]
struct ClientLog {
    /// Every id received, in order.
    ids: Vec<u64>,
    /// `(incarnation, index in ids where its ids begin)`, one entry per change of incarnation.
    segments: Vec<(usize, usize)>,
    requests: u64,
    /// Requests that failed on a connection cut while their node was going down.
    cut: u64,
    /// Requests answered after at least one cut (retried on the restarted node).
    retried_ok: u64,
    /// Everything else that went wrong, described.
    errors: Vec<String>,
}

fn client(client: usize, slot: &Slot, stop: &AtomicBool, progress_of: impl Fn(u64)) -> ClientLog {
    let mut log = ClientLog::default();
    let mut node = slot.current();
    let mut conn: Option<Conn> = None;
    let path_1 = format!("/v1/ids/{NAMESPACE}?count=1");
    let path_20 = format!("/v1/ids/{NAMESPACE}?count=20");
    'requests: while !stop.load(Ordering::SeqCst) {
        log.requests += 1;
        let count: u64 = if (client as u64 + log.requests).is_multiple_of(3) {
            20
        } else {
            1
        };
        let path = if count == 1 { &path_1 } else { &path_20 };
        let mut was_cut = false;
        loop {
            let answer = match conn.as_mut() {
                Some(c) => c.get(path),
                None => Conn::open(node.addr).and_then(|c| conn.insert(c).get(path)),
            };
            match answer {
                Ok((200, body, keep)) => {
                    if !keep {
                        conn = None;
                    }
                    let ids = parse_ids(&body);
                    if ids.len() as u64 != count {
                        log.errors
                            .push(format!("asked {count} ids, got {}: {body}", ids.len()));
                    }
                    if log
                        .segments
                        .last()
                        .is_none_or(|&(i, _)| i != node.incarnation)
                    {
                        log.segments.push((node.incarnation, log.ids.len()));
                    }
                    progress_of(ids.len() as u64);
                    log.ids.extend(ids);
                    if was_cut {
                        log.retried_ok += 1;
                    }
                    continue 'requests;
                }
                Ok((status, body, _)) => {
                    conn = None;
                    log.errors.push(format!(
                        "incarnation {}: status {status}: {body}",
                        node.incarnation
                    ));
                    // Not retried: the error is reported, the client goes on with a new request.
                    thread::sleep(Duration::from_millis(10));
                    continue 'requests;
                }
                Err(e) => {
                    conn = None;
                    match slot.after_failure(node.incarnation, stop) {
                        AfterFailure::Moved(next) => {
                            if !was_cut {
                                log.cut += 1;
                            }
                            was_cut = true;
                            node = next;
                        }
                        AfterFailure::StillUp => {
                            log.errors.push(format!(
                                "incarnation {}: connection failed while it was up: {e}",
                                node.incarnation
                            ));
                            thread::sleep(Duration::from_millis(10));
                            continue 'requests;
                        }
                        AfterFailure::Stopped => break 'requests,
                    }
                }
            }
        }
    }
    log
}

fn parse_ids(body: &Value) -> Vec<u64> {
    assert_eq!(body["namespace"], NAMESPACE, "{body}");
    body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids: {body}"))
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect()
}

/// One keep-alive HTTP/1.1 connection: a request at a time, answers with a Content-Length.
struct Conn {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        stream.set_read_timeout(Some(DEADLINE))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            addr,
            reader: BufReader::new(stream),
        })
    }

    /// GET `path`: `(status, body, whether the connection stays open)`. `Err` when the server is
    /// gone (refused, reset, or closed before a whole answer).
    fn get(&mut self, path: &str) -> std::io::Result<(u16, Value, bool)> {
        let broken = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.addr);
        self.reader.get_mut().write_all(request.as_bytes())?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| broken(format!("no status in {line:?}")))?;
        let mut length = None;
        let mut keep = true;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                return Err(broken(format!("bad header {header:?}")));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("connection") {
                keep = !value.eq_ignore_ascii_case("close");
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                panic!("chunked answers are not supported by this test client: {header}");
            }
        }
        let length = length.ok_or_else(|| broken("no content-length".to_owned()))?;
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        let value = serde_json::from_slice(&body).map_err(|_| {
            broken(format!(
                "body is not JSON: {}",
                String::from_utf8_lossy(&body)
            ))
        })?;
        Ok((status, value, keep))
    }
}

/// SIGTERM; the node must exit cleanly with its stop line. Returns `(handed back, not handed
/// back)`: burned, or kept in its data directory (which a restart serves first; the last
/// stop's kept ids are never served, so the store counts them as burned).
fn terminate_cleanly(server: Server) -> (u64, u64) {
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit {status:?}: {rest:?}");
    let counts = stop_counts(&rest);
    (counts.given_back, counts.kept + counts.burned)
}

/// The whole scenario on one authority (`authority` is the config's `[authority]` table);
/// `watermark` reads the namespace's final `(watermark, first id)` from the authority once every
/// node has stopped.
fn cluster_run(backend: &str, authority: &str, watermark: impl FnOnce() -> (u64, u64)) {
    let began = Instant::now();
    let length = run_length();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idmint.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nauto_create = false\n\n{authority}\n[namespaces.{NAMESPACE}]\n\
             kind = \"sequence\"\ncache = \"fixed\"\nblock_size = {BLOCK}\n"
        ),
    )
    .unwrap();
    let data_dir = |slot: usize| -> PathBuf { dir.path().join(format!("data-{slot}")) };

    // The three first processes start together: their `ensure_namespace` calls race.
    let mut servers: Vec<Option<Server>> = thread::scope(|s| {
        let starting: Vec<_> = (0..NODES)
            .map(|slot| {
                let (config, data) = (&config, data_dir(slot));
                s.spawn(move || Server::start(config.parent().unwrap(), &data, Some(config)))
            })
            .collect();
        starting
            .into_iter()
            .map(|h| Some(h.join().unwrap()))
            .collect()
    });
    let mut next_incarnation = 0;
    let slots: Arc<Vec<Slot>> = Arc::new(
        servers
            .iter()
            .map(|server| {
                let first = SlotState {
                    incarnation: next_incarnation,
                    addr: server.as_ref().unwrap().addr,
                    up: true,
                };
                next_incarnation += 1;
                Slot::new(first)
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_panic = StopOnDrop(stop.clone());

    let clients: Vec<_> = (0..NODES * CLIENTS_PER_NODE)
        .map(|c| {
            let (slots, stop) = (slots.clone(), stop.clone());
            thread::spawn(move || {
                let slot = &slots[c % NODES];
                client(c, slot, &stop, |n| {
                    slot.served.fetch_add(n, Ordering::SeqCst);
                })
            })
        })
        .collect();

    // The schedule: event k at (k + 1) / (EVENTS + 1) of the run, on node k mod 3, once that
    // node's current process has served enough ids.
    let run_start = Instant::now();
    let mut served_at_start = [0u64; NODES];
    let (mut kills, mut terms) = (0usize, 0usize);
    let mut handed_back_mid_run = (0u64, 0u64);
    let mut event = 0;
    while event < EVENTS {
        let due = length.mul_f64((event + 1) as f64 / (EVENTS + 1) as f64);
        let slot = event % NODES;
        // The event's time has come and the node has served since its start.
        let what = format!("node {slot} to serve {MIN_IDS_PER_PROCESS} ids since its start");
        let within = (length + DEADLINE).saturating_sub(run_start.elapsed());
        wait::until(what, within, || {
            run_start.elapsed() >= due
                && slots[slot].served.load(Ordering::SeqCst) - served_at_start[slot]
                    >= MIN_IDS_PER_PROCESS
        });
        slots[slot].going_down();
        let server = servers[slot].take().unwrap();
        let old = server.addr;
        if event == GRACEFUL_EVENT {
            let (back, burned) = terminate_cleanly(server);
            handed_back_mid_run = (back, burned);
            terms += 1;
        } else {
            server.kill9();
            kills += 1;
        }
        let server = Server::start(config.parent().unwrap(), &data_dir(slot), Some(&config));
        println!(
            "[{backend} {:>5.1}s] node {slot}: {} {old} -> restarted on {}",
            run_start.elapsed().as_secs_f64(),
            if event == GRACEFUL_EVENT {
                "SIGTERM"
            } else {
                "SIGKILL"
            },
            server.addr
        );
        served_at_start[slot] = slots[slot].served.load(Ordering::SeqCst);
        slots[slot].publish(next_incarnation, server.addr);
        next_incarnation += 1;
        servers[slot] = Some(server);
        event += 1;
    }
    // The load runs for `length`.
    thread::sleep(length.saturating_sub(run_start.elapsed()));
    stop.store(true, Ordering::SeqCst);
    let logs: Vec<ClientLog> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let ran_for = run_start.elapsed();

    // Every node stops gracefully; a refused hand-back (another node reserved since) burns.
    let mut final_back = 0;
    let mut final_burned = 0;
    for (slot, server) in servers.iter_mut().enumerate() {
        slots[slot].going_down();
        let (back, burned) = terminate_cleanly(server.take().unwrap());
        final_back += back;
        final_burned += burned;
    }
    let (watermark, first) = watermark();

    // The figures.
    let total: u64 = logs.iter().map(|l| l.ids.len() as u64).sum();
    let requests: u64 = logs.iter().map(|l| l.requests).sum();
    let cut: u64 = logs.iter().map(|l| l.cut).sum();
    let retried_ok: u64 = logs.iter().map(|l| l.retried_ok).sum();
    let errors: Vec<&String> = logs.iter().flat_map(|l| &l.errors).collect();
    let per_node: Vec<u64> = (0..NODES)
        .map(|slot| {
            logs.iter()
                .skip(slot)
                .step_by(NODES)
                .map(|l| l.ids.len() as u64)
                .sum()
        })
        .collect();
    let reserved = watermark - first;
    let burned = reserved.saturating_sub(total);
    println!(
        "[{backend}] {:.1}s run, {} clients on {NODES} nodes: {total} ids in {requests} \
         requests, per node {per_node:?}; {kills} SIGKILL + {terms} SIGTERM restarts \
         ({} processes); {cut} requests cut by them, {retried_ok} answered on retry; \
         {} errors",
        ran_for.as_secs_f64(),
        NODES * CLIENTS_PER_NODE,
        next_incarnation,
        errors.len()
    );
    println!(
        "[{backend}] final watermark {watermark}: {reserved} ids reserved, {total} received, \
         {burned} burned ({:.2} blocks of {BLOCK} per stop); mid-run SIGTERM handed back {} \
         (burned {}), final SIGTERMs handed back {final_back} (burned {final_burned}); \
         test took {:.1}s",
        burned as f64 / BLOCK as f64 / (kills + terms + NODES) as f64,
        handed_back_mid_run.0,
        handed_back_mid_run.1,
        began.elapsed().as_secs_f64()
    );

    // The checks.
    assert!(
        errors.is_empty(),
        "{} requests failed other than by a kill, first ones: {:#?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    for (c, log) in logs.iter().enumerate() {
        let who = format!("client {c} (node {})", c % NODES);
        for (k, &(incarnation, begin)) in log.segments.iter().enumerate() {
            let end = log.segments.get(k + 1).map_or(log.ids.len(), |s| s.1);
            assert_strictly_increasing(
                &log.ids[begin..end],
                &format!("{who}, process {incarnation}"),
            );
        }
        // A restarted node never reuses a block: its ids lie above all its predecessor served.
        assert_strictly_increasing(&log.ids, &format!("{who}, across restarts"));
        assert!(!log.ids.is_empty(), "{who} received nothing");
    }
    let mut all: Vec<u64> = logs.iter().flat_map(|l| l.ids.iter().copied()).collect();
    all.sort_unstable();
    let duplicates: Vec<u64> = all
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(
        duplicates.is_empty(),
        "{} ids returned twice, e.g. {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(10)]
    );
    // Invariant 1: every id received lies below the durable watermark.
    if let Some(&highest) = all.last() {
        assert!(
            highest < watermark,
            "id {highest} above the watermark {watermark}"
        );
        assert!(all[0] >= first, "id {} below the first id {first}", all[0]);
    }
    assert_eq!(kills + terms, EVENTS);
    // Each stop loses at most what its node had buffered or was reserving: a couple of blocks.
    let stops = (kills + terms + NODES) as u64;
    assert!(
        burned <= stops * 3 * BLOCK,
        "{burned} ids burned by {stops} stops"
    );
    // The authority's audit ledger, read back by `idmint audit verify` and `export` with the
    // nodes' configuration: no block granted twice across the 9 processes (give-backs
    // accounted for), the watermark above every grant, every id received inside a grant.
    let audit = support::audit_check(Some(&config), &data_dir(0), NAMESPACE, &all);
    println!(
        "[{backend}] audit ledger verified: {} entries, {} grants, {} give-backs",
        audit.entries, audit.grants, audit.give_backs
    );
    assert!(
        audit.give_backs >= 1,
        "the SIGTERMs handed tails back: {audit:?}"
    );
    // Processes started: the first three and one per event; every one served ids.
    assert_eq!(next_incarnation, NODES + EVENTS);
    for incarnation in 0..next_incarnation {
        assert!(
            logs.iter()
                .any(|l| l.segments.iter().any(|&(i, _)| i == incarnation)),
            "process {incarnation} served nothing"
        );
    }
}
