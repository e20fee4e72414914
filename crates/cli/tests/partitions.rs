//! Real network partitions between real processes: `idmint serve` nodes and their authority,
//! each in a network namespace of its own ([`idmint_testkit::netns::Lab`]), their links cut and
//! healed under load, combined with SIGKILL (and restarts), clean restarts (SIGTERM: the tail
//! handed back under contention) and SIGSTOP/SIGCONT of nodes.
//!
//! Per authority, one test (etcd's with the `etcd` feature, on by default): a
//! private PostgreSQL, etcd or ZooKeeper server in its own host on the *back* LAN with three
//! nodes; or a global idmint tier (two global nodes on a private PostgreSQL) serving three
//! regional nodes on the `upstream` authority. Each serving node is on
//! two LANs: the back one (its authority) and the *front* one (its clients), so a node can lose
//! its authority and still be asked for ids. The test itself runs in an *ops* host on both LANs
//! whose links are never cut; every address is inside the lab.
//!
//! Load: one writer thread per serving node and namespace, asking for ids over a kept-alive
//! HTTP connection (paced, a few ms apart), recording every id it receives; a connection that
//! fails or times out is dropped and a new one opened. Two namespaces: `orders` (a sequence,
//! small fixed blocks so refills keep reaching the authority) and `events` (a snowflake with
//! `worker = "lease"` and a 2 s lease: a node cut off past its lease while another takes its
//! worker id over must have stopped issuing, or ids repeat).
//!
//! The schedule: a fixed list of faults ([`short_schedule`]), each held past the lease TTL;
//! with `IDMINT_PARTITION_SOAK=1`, random faults for `IDMINT_PARTITION_SOAK_SECS` (default 300)
//! seeded by `IDMINT_PARTITION_SEED` (printed, to replay). Then every link healed and every
//! node continued, each serving node must serve both namespaces again.
//!
//! What is checked: over all ids received, 0 duplicates (per namespace); 0 decreases within any
//! one connection's sequence of answers; `idmint audit verify` passes on the authority, and
//! every `orders` id received lies in a block its ledger records as granted; and some `events`
//! worker id was issued under by two nodes over the run (decoded from the ids): a lease did
//! change hands, so the schedule exercised a takeover. Each run prints ids served, duplicates,
//! decreases, the worker ids taken over, cuts, kills, freezes, clean restarts and refused
//! requests. (With the node's lease expiry limit removed, an isolated holder keeps issuing and
//! the short schedule finds tens to hundreds of duplicate `events` ids; with PostgreSQL's
//! give-back made unconditional, the clean restart lowers the watermark under other nodes'
//! blocks and `idmint audit verify` names the overlapping grants.)
//!
//! Needs root and iproute2 (network namespaces); without them the tests fail, saying so. The
//! four tests take the machine in turn. Fault durations are lower bounds past the TTL, never
//! used to order events; waits poll against a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_testkit::netns::{run_in, Host, Lab, Link};
use idmint_testkit::wait;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::{Server, DEADLINE};

const SEQ: &str = "orders";
const SNOW: &str = "events";
const NAMESPACES: [&str; 2] = [SEQ, SNOW];
const HTTP_PORT: u16 = 8080;
const GRPC_PORT: u16 = 7879;
/// The worker lease TTL; how long after a node is cut off or frozen another one restarts (its
/// lease expired by then); how long a fault lasts (past the restart).
const TTL: Duration = Duration::from_millis(2000);
const PAST_TTL: Duration = Duration::from_millis(2500);
const HOLD: Duration = Duration::from_millis(3000);
/// A writer drops a connection silent this long (a cut link hangs it, no reset).
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The tests share 2 cores: one at a time.
static MACHINE: Mutex<()> = Mutex::new(());

/// The node configuration's authority table, and what the lab runs it on.
enum Backend {
    Postgres,
    #[cfg(feature = "etcd")]
    Etcd,
    Zookeeper,
    /// Two global nodes on PostgreSQL, regional nodes on `upstream`.
    Tier,
}

/// An `idmint serve` in a host of the lab.
struct Node {
    label: String,
    host: Host,
    back: Link,
    front: Option<Link>,
    /// Where it listens for HTTP (the front address, else the back one).
    http: SocketAddr,
    grpc: Option<SocketAddr>,
    data_dir: PathBuf,
    config: PathBuf,
    server: Option<Server>,
    frozen: bool,
}

impl Node {
    fn start(&mut self) {
        let mut cmd = self.host.command(env!("CARGO_BIN_EXE_idmint"));
        cmd.env_remove("IDMINT_SERVER")
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--http", &self.http.to_string()])
            .arg("--init")
            // Listening on a lab address: only the lab's hosts reach it.
            .arg("--insecure-no-auth")
            .arg("--config")
            .arg(&self.config);
        if let Some(grpc) = self.grpc {
            cmd.args(["--grpc", &grpc.to_string()]);
        }
        self.server = Some(Server::spawn(cmd));
        self.frozen = false;
    }

    fn server(&self) -> &Server {
        self.server
            .as_ref()
            .unwrap_or_else(|| panic!("{} is not running", self.label))
    }

    fn kill9(&mut self) {
        if let Some(server) = self.server.take() {
            server.kill9();
        }
        self.frozen = false;
    }

    fn freeze(&mut self) {
        self.server().stop();
        self.frozen = true;
    }

    fn thaw(&mut self) {
        if self.frozen {
            self.server().signal("CONT");
            self.frozen = false;
        }
    }
}

/// The lab, its backend, its nodes, and which of them the clients use.
struct Cluster {
    /// The links of the authority's host(s): cut for an outage of the authority.
    authority_links: Vec<Link>,
    nodes: Vec<Node>,
    /// Indices into `nodes` of those clients ask for ids.
    serving: Vec<usize>,
    /// The node whose configuration and data directory `idmint audit` reads.
    audited: usize,
    /// The authority's server, killed when the run ends.
    _backend: Box<dyn std::any::Any>,
    _dir: tempfile::TempDir,
    // Last: deleting the namespaces after every process in them is gone.
    _lab: Lab,
}

fn leases() -> String {
    format!(
        "[leases]\nttl_ms = {}\nfloor_ahead_ms = 800\nsafety_margin_ms = 600\n\n",
        TTL.as_millis()
    )
}

fn namespaces() -> String {
    format!(
        "[namespaces.{SEQ}]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 500\n\n\
         [namespaces.{SNOW}]\nkind = \"snowflake\"\nworker = \"lease\"\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Builds the lab for `backend` and starts everything; runs on the ops host's thread.
fn build(lab: Lab, ops: &Host, backend: &Backend) -> Cluster {
    let back = lab.lan();
    let front = lab.lan();
    back.attach(ops);
    front.attach(ops);
    let dir = tempfile::tempdir().unwrap();
    let server_table =
        "[server]\nauto_create = false\nrefill_wait_ms = 1000\n\n[authority]\ntimeout_ms = 1000\n";
    let db_host = lab.host("db");
    let db_link = back.attach(&db_host);
    let (server, authority): (Box<dyn std::any::Any>, String) = match backend {
        Backend::Postgres | Backend::Tier => {
            let pg = idmint_testkit::postgres_lab::LabPostgres::start(&db_host, db_link.addr);
            let url = support::toml_string(&pg.url());
            // The lab server runs with `fsync = off`: these tests cut links, not disks.
            (
                Box::new(pg),
                format!("kind = \"postgres\"\nurl = {url}\naccept_unsafe_durability = true\n"),
            )
        }
        #[cfg(feature = "etcd")]
        Backend::Etcd => {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            let etcd = runtime.block_on(idmint_testkit::etcd::PrivateEtcd::start_in(
                &db_host,
                db_link.addr,
            ));
            let url = support::toml_string(&etcd.client_url());
            (
                Box::new(etcd),
                format!("kind = \"etcd\"\nendpoints = [{url}]\n"),
            )
        }
        Backend::Zookeeper => {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            let zk = runtime.block_on(idmint_testkit::zookeeper::PrivateZookeeper::start_in(
                &db_host,
                db_link.addr,
            ));
            let servers = support::toml_string(&zk.connect_string());
            (
                Box::new(zk),
                format!("kind = \"zookeeper\"\nservers = [{servers}]\nsession_timeout_ms = 2000\n"),
            )
        }
    };
    let mut nodes = Vec::new();
    let add = |label: &str, config: &Path, on_front: bool, grpc: bool| {
        let host = lab.host(label);
        let back_link = back.attach(&host);
        let front_link = on_front.then(|| front.attach(&host));
        let http_ip = front_link.as_ref().map_or(back_link.addr, |l| l.addr);
        let mut node = Node {
            label: label.to_owned(),
            host,
            http: SocketAddr::from((http_ip, HTTP_PORT)),
            grpc: grpc.then(|| SocketAddr::from((back_link.addr, GRPC_PORT))),
            back: back_link,
            front: front_link,
            data_dir: dir.path().join(label),
            config: config.to_owned(),
            server: None,
            frozen: false,
        };
        node.start();
        node
    };
    let (serving, audited) = match backend {
        Backend::Tier => {
            let global = write(
                dir.path(),
                "global.toml",
                &format!("{server_table}{authority}\n{}{}", leases(), namespaces()),
            );
            nodes.push(add("g0", &global, false, true));
            nodes.push(add("g1", &global, false, true));
            let urls: Vec<String> = nodes
                .iter()
                .map(|g| format!("\"http://{}\"", g.grpc.unwrap()))
                .collect();
            let regional = write(
                dir.path(),
                "regional.toml",
                &format!(
                    "{server_table}kind = \"upstream\"\nurls = [{}]\n\n{}{}",
                    urls.join(", "),
                    leases(),
                    namespaces()
                ),
            );
            for r in 0..3 {
                nodes.push(add(&format!("r{r}"), &regional, true, false));
            }
            (vec![2, 3, 4], 0)
        }
        _ => {
            let config = write(
                dir.path(),
                "node.toml",
                &format!("{server_table}{authority}\n{}{}", leases(), namespaces()),
            );
            for n in 0..3 {
                nodes.push(add(&format!("n{n}"), &config, true, false));
            }
            (vec![0, 1, 2], 0)
        }
    };
    Cluster {
        authority_links: vec![db_link],
        nodes,
        serving,
        audited,
        _backend: server,
        _dir: dir,
        _lab: lab,
    }
}

/// What one writer (a thread asking one node for one namespace's ids) received.
#[derive(Default)]
struct WriterRun {
    /// Per connection, the ids in the order received.
    connections: Vec<Vec<u64>>,
    /// Answers other than 200 (503 while the node cannot reach its authority, say).
    refused: u64,
    /// Connections that failed or timed out.
    broken: u64,
}

/// One request on a kept-alive connection: the status and body (`Content-Length` framing).
fn request(stream: &mut BufReader<TcpStream>, path: &str) -> std::io::Result<(u16, String)> {
    write!(stream.get_mut(), "GET {path} HTTP/1.1\r\nHost: lab\r\n\r\n")?;
    let mut line = String::new();
    stream.read_line(&mut line)?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut length = None;
    loop {
        line.clear();
        if stream.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
        }
    }
    let length = length.ok_or_else(|| std::io::Error::other("no content-length"))?;
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn writer(
    addr: SocketAddr,
    namespace: &'static str,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
) -> WriterRun {
    let mut run = WriterRun::default();
    let path = format!("/v1/ids/{namespace}?count=10");
    let mut conn: Option<BufReader<TcpStream>> = None;
    while !stop.load(Ordering::SeqCst) {
        let stream = match conn.as_mut() {
            Some(stream) => stream,
            None => match TcpStream::connect_timeout(&addr, IO_TIMEOUT) {
                Ok(s) => {
                    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
                    run.connections.push(Vec::new());
                    conn.insert(BufReader::new(s))
                }
                Err(_) => {
                    run.broken += 1;
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        match request(stream, &path) {
            Ok((200, body)) => {
                let ids = support::parse_ids(&body);
                served.fetch_add(ids.len() as u64, Ordering::SeqCst);
                run.connections.last_mut().unwrap().extend(ids);
            }
            Ok(_) => run.refused += 1,
            Err(_) => {
                run.broken += 1;
                conn = None;
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
    run
}

/// The writers of a run.
struct Load {
    stop: Arc<AtomicBool>,
    /// Per serving node and namespace (`NAMESPACES` order), ids received so far.
    served: Vec<[Arc<AtomicU64>; 2]>,
    /// (namespace index, serving node index, writer).
    writers: Vec<(usize, usize, thread::JoinHandle<WriterRun>)>,
}

impl Load {
    fn start(cluster: &Cluster) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut served = Vec::new();
        let mut writers = Vec::new();
        for &n in &cluster.serving {
            let counters: [Arc<AtomicU64>; 2] = Default::default();
            for (k, namespace) in NAMESPACES.into_iter().enumerate() {
                let (addr, stop, count) =
                    (cluster.nodes[n].http, stop.clone(), counters[k].clone());
                writers.push((
                    k,
                    n,
                    thread::spawn(move || writer(addr, namespace, stop, count)),
                ));
            }
            served.push(counters);
        }
        Load {
            stop,
            served,
            writers,
        }
    }

    /// Waits until every serving node has served `more` ids of each namespace.
    fn every_node_serves(&self, more: u64, what: &str) {
        let base: Vec<[u64; 2]> = self
            .served
            .iter()
            .map(|c| [c[0].load(Ordering::SeqCst), c[1].load(Ordering::SeqCst)])
            .collect();
        wait::until(
            format!("{what}: every node serving both namespaces"),
            DEADLINE,
            || {
                self.served
                    .iter()
                    .zip(&base)
                    .all(|(c, b)| (0..2).all(|k| c[k].load(Ordering::SeqCst) >= b[k] + more))
            },
        );
    }

    fn finish(mut self) -> Vec<(usize, usize, WriterRun)> {
        self.stop.store(true, Ordering::SeqCst);
        std::mem::take(&mut self.writers)
            .into_iter()
            .map(|(k, n, w)| (k, n, w.join().unwrap()))
            .collect()
    }
}

impl Drop for Load {
    /// Stops the writers also when the run panics.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One fault of a schedule; node numbers index [`Cluster::nodes`].
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The authority's host cut off from every node.
    AuthorityOutage,
    /// `node` cut from its authority (its clients still reach it) past the TTL, `restarted`
    /// killed and restarted meanwhile (it may take the isolated node's worker id over).
    Isolate { node: usize, restarted: usize },
    /// `node` frozen (SIGSTOP) past the TTL, `restarted` killed and restarted meanwhile.
    Freeze { node: usize, restarted: usize },
    /// `node` cut from its clients.
    CutFront { node: usize },
    /// `node` killed (SIGKILL) and restarted.
    Crash { node: usize },
    /// `node` stopped cleanly (SIGTERM: its tail handed back, refused if anyone reserved
    /// after it) under load, and started again.
    Restart { node: usize },
}

#[derive(Default)]
struct Counts {
    cuts: u64,
    kills: u64,
    freezes: u64,
    restarts: u64,
}

fn apply(cluster: &mut Cluster, fault: Fault, counts: &mut Counts) {
    let crash = |cluster: &mut Cluster, n: usize, counts: &mut Counts| {
        cluster.nodes[n].kill9();
        counts.kills += 1;
        cluster.nodes[n].start();
    };
    match fault {
        Fault::AuthorityOutage => {
            for link in &cluster.authority_links {
                link.cut();
                counts.cuts += 1;
            }
            thread::sleep(PAST_TTL);
            for link in &cluster.authority_links {
                link.heal();
            }
        }
        Fault::Isolate { node, restarted } => {
            cluster.nodes[node].back.cut();
            counts.cuts += 1;
            thread::sleep(PAST_TTL);
            crash(cluster, restarted, counts);
            thread::sleep(HOLD);
            cluster.nodes[node].back.heal();
        }
        Fault::Freeze { node, restarted } => {
            cluster.nodes[node].freeze();
            counts.freezes += 1;
            thread::sleep(PAST_TTL);
            crash(cluster, restarted, counts);
            thread::sleep(HOLD);
            cluster.nodes[node].thaw();
        }
        Fault::CutFront { node } => {
            if let Some(front) = &cluster.nodes[node].front {
                front.cut();
                counts.cuts += 1;
                thread::sleep(HOLD);
                front.heal();
            }
        }
        Fault::Crash { node } => crash(cluster, node, counts),
        Fault::Restart { node } => {
            let n = &mut cluster.nodes[node];
            if let Some(server) = n.server.take() {
                let (status, rest) = server.terminate();
                assert!(status.success(), "{} exit {status:?}: {rest:?}", n.label);
            }
            counts.restarts += 1;
            n.start();
        }
    }
}

/// The fixed schedule: each kind of fault once, on different nodes.
fn short_schedule(cluster: &Cluster) -> Vec<Fault> {
    let s = &cluster.serving;
    let mut faults = vec![
        Fault::Isolate {
            node: s[0],
            restarted: s[1],
        },
        Fault::Freeze {
            node: s[2],
            restarted: s[0],
        },
        Fault::AuthorityOutage,
        Fault::CutFront { node: s[1] },
        Fault::Crash { node: s[2] },
        Fault::Restart { node: s[0] },
    ];
    if s[0] != 0 {
        // The tier: a global node isolated, then one frozen while the other restarts.
        faults.push(Fault::Isolate {
            node: 0,
            restarted: s[1],
        });
        faults.push(Fault::Freeze {
            node: 1,
            restarted: 0,
        });
    }
    faults
}

/// A xorshift generator: the soak's faults, replayable from the printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn random_fault(cluster: &Cluster, rng: &mut Rng) -> Fault {
    let all = cluster.nodes.len();
    let node = rng.below(all);
    let restarted = (node + 1 + rng.below(all - 1)) % all;
    match rng.below(6) {
        0 => Fault::AuthorityOutage,
        1 => Fault::Isolate { node, restarted },
        2 => Fault::Freeze { node, restarted },
        3 => Fault::CutFront {
            node: cluster.serving[rng.below(cluster.serving.len())],
        },
        4 => Fault::Crash { node },
        _ => Fault::Restart { node },
    }
}

fn soak() -> Option<Duration> {
    if std::env::var("IDMINT_PARTITION_SOAK").ok().as_deref() != Some("1") {
        return None;
    }
    let secs = std::env::var("IDMINT_PARTITION_SOAK_SECS")
        .ok()
        .map_or(300, |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("IDMINT_PARTITION_SOAK_SECS={v:?}: {e}"))
        });
    Some(Duration::from_secs(secs))
}

/// Worker ids of `events` that more than one node issued under over the run: each one a lease
/// taken over (a node restarted while the holder was cut off or frozen past the TTL).
fn shared_workers(runs: &[(usize, usize, WriterRun)]) -> Vec<u64> {
    let layout = idmint_core::Layout::twitter();
    let mut holders: std::collections::BTreeMap<u64, HashSet<usize>> = Default::default();
    for (_, node, run) in runs.iter().filter(|(k, _, _)| *k == 1) {
        for id in run.connections.iter().flatten() {
            let worker = layout.decode(*id).unwrap().parts.node;
            holders.entry(worker).or_default().insert(*node);
        }
    }
    holders
        .into_iter()
        .filter(|(_, nodes)| nodes.len() > 1)
        .map(|(worker, _)| worker)
        .collect()
}

/// Duplicates among `ids` (every occurrence past the first).
fn duplicates(ids: impl Iterator<Item = u64>) -> (u64, u64) {
    let mut seen = HashSet::new();
    let mut total = 0;
    let mut dups = 0;
    for id in ids {
        total += 1;
        if !seen.insert(id) {
            dups += 1;
        }
    }
    (total, dups)
}

fn run(name: &'static str, backend: Backend) {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new("part");
    let ops = lab.host("ops");
    let ops_in = ops.clone();
    run_in(&ops, move || scenario(name, lab, &ops_in, &backend));
}

fn scenario(name: &str, lab: Lab, ops: &Host, backend: &Backend) {
    let mut cluster = build(lab, ops, backend);
    let load = Load::start(&cluster);
    load.every_node_serves(500, "warm-up");

    let mut counts = Counts::default();
    let mut faults = short_schedule(&cluster);
    faults.reverse();
    let soak = soak();
    let seed = std::env::var("IDMINT_PARTITION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let mut rng = Rng(seed.max(1));
    let began = Instant::now();
    let mut applied = Vec::new();
    loop {
        let fault = if let Some(fault) = faults.pop() {
            fault
        } else if soak.is_some_and(|d| began.elapsed() < d) {
            random_fault(&cluster, &mut rng)
        } else {
            break;
        };
        apply(&mut cluster, fault, &mut counts);
        applied.push(fault);
    }

    // Everything healed and continued: every serving node serves both namespaces again.
    for link in &cluster.authority_links {
        link.heal();
    }
    for node in &mut cluster.nodes {
        node.back.heal();
        if let Some(front) = &node.front {
            front.heal();
        }
        node.thaw();
    }
    load.every_node_serves(200, "after healing");
    let runs = load.finish();

    let mut decreases = 0;
    let mut refused = 0;
    let mut broken = 0;
    let mut connections = 0;
    for (_, _, run) in &runs {
        refused += run.refused;
        broken += run.broken;
        connections += run.connections.len();
        for ids in &run.connections {
            decreases += ids.windows(2).filter(|p| p[1] <= p[0]).count() as u64;
        }
    }
    let ids_of = |k: usize| {
        runs.iter()
            .filter(move |(n, _, _)| *n == k)
            .flat_map(|(_, _, r)| r.connections.iter().flatten().copied())
    };
    let (seq_total, seq_dups) = duplicates(ids_of(0));
    let (snow_total, snow_dups) = duplicates(ids_of(1));
    let shared = shared_workers(&runs);

    eprintln!(
        "[{name}] ids served: {} ({SEQ} {seq_total}, {SNOW} {snow_total}); duplicates: {SEQ} \
         {seq_dups}, {SNOW} {snow_dups}; decreases: {decreases} over {connections} connections; \
         worker ids taken over: {shared:?}; cuts: {}, kills: {}, freezes: {}, clean restarts: \
         {}; refused answers: {refused}, broken connections: {broken}; faults ({} s{}): \
         {applied:?}",
        seq_total + snow_total,
        counts.cuts,
        counts.kills,
        counts.freezes,
        counts.restarts,
        began.elapsed().as_secs(),
        if soak.is_some() {
            format!(", soak seed {seed}")
        } else {
            String::new()
        },
    );
    assert_eq!(seq_dups, 0, "[{name}] {seq_dups} duplicate {SEQ} ids");
    assert_eq!(snow_dups, 0, "[{name}] {snow_dups} duplicate {SNOW} ids");
    assert_eq!(
        decreases, 0,
        "[{name}] ids decreased within a connection {decreases} times"
    );
    assert!(
        !shared.is_empty(),
        "[{name}] no worker id changed hands: the schedule did not exercise a lease takeover"
    );

    // Clean stops (the tier's regional nodes first), then the authority's ledger.
    for node in cluster.nodes.iter_mut().rev() {
        if let Some(server) = node.server.take() {
            let (status, rest) = server.terminate();
            assert!(status.success(), "{} exit {status:?}: {rest:?}", node.label);
        }
    }
    let received: Vec<u64> = ids_of(0).collect::<HashSet<_>>().into_iter().collect();
    let audited = &cluster.nodes[cluster.audited];
    let audit = support::audit_check(Some(&audited.config), &audited.data_dir, SEQ, &received);
    eprintln!(
        "[{name}] audit verify ok; ledger: {} entries, {} grants, {} give-backs, watermark {}",
        audit.entries, audit.grants, audit.give_backs, audit.watermark
    );
}

#[test]
fn partitions_on_postgres() {
    run("postgres", Backend::Postgres);
}

#[cfg(feature = "etcd")]
#[test]
fn partitions_on_etcd() {
    run("etcd", Backend::Etcd);
}

#[test]
fn partitions_on_zookeeper() {
    run("zookeeper", Backend::Zookeeper);
}

#[test]
fn partitions_on_a_global_tier() {
    run("tier", Backend::Tier);
}
