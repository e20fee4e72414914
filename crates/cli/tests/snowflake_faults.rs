//! Fault tests of snowflake namespaces under worker leases with real `idmint serve` processes,
//! each fault for each authority that stores leases: the file store, PostgreSQL (a database of
//! its own per test) and ZooKeeper (a private server per test, from
//! `idmint_testkit::zookeeper`).
//!
//! The faults, one function each, run per backend by the `faults!` table at the end:
//! 1. `sigstop_takeover`: a lease holder stopped (SIGSTOP) for twice the TTL while a second
//!    node takes its worker id over, then continued: it answers nothing but 503 from then on,
//!    and every id of the new holder is above every id of the stopped one;
//! 2. `same_fixed_worker`: a second node configured with a worker id another holds refuses to
//!    start and names the holder;
//! 3. `clock_back_while_serving`: the wall clock stepped back 5 s under a serving node
//!    (libfaketime, monotonic clock untouched): ids keep increasing, no duplicate;
//! 4. `clock_back_across_restart`: the clock set back by more than the downtime between a stop
//!    and a restart: the node waits when the floor is near, refuses naming both times when it
//!    is far; no duplicate;
//! 5. `burst_over_sequence`: a burst above a unit's sequence space (2 sequence bits) rolls into
//!    the following units, no duplicate;
//! 6. `kill9_holder`: a lease holder killed with SIGKILL: its worker id is not reused while the
//!    lease lives, and its next holder issues above its floor;
//! 7. `clock_forward_excursion`: the clock stepped 10 s forward (adopted), corrected back, the
//!    node killed and restarted: the excursion is never issued again;
//! 8. `layout_change`: the layout or the epoch changed between runs: refused.
//!
//! Every id is decoded; each test prints its counts (`eprintln!`, shown with `--nocapture`)
//! and asserts exact properties. The wall clock is faked with libfaketime (the Debian
//! `faketime` package, which scripts/test.sh installs) through a control file the test
//! rewrites ([`support::FakeClock`]). Waits poll against a generous deadline; the only timed
//! waits are the faults themselves (a node stopped for twice the TTL, a node serving across
//! several renewals), which are lower bounds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_core::{FieldOrder, Layout, LayoutSpec};
use idmint_testkit::postgres::TempDatabase;
use idmint_testkit::wait;
use idmint_testkit::zookeeper::PrivateZookeeper;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{
    assert_strictly_increasing, http_get, parse_ids, parse_rfc3339_ms, read_response, rfc3339_ms,
    serve_command, Exited, FakeClock, Server, DEADLINE,
};

/// The namespace every test issues from (its lease group too).
const NS: &str = "events";

/// The authorities that store worker leases, as far as these tests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    File,
    Postgres,
    Zookeeper,
}

impl Backend {
    fn named(name: &str) -> Backend {
        match name {
            "file" => Backend::File,
            "postgres" => Backend::Postgres,
            "zookeeper" => Backend::Zookeeper,
            other => panic!("no backend {other}"),
        }
    }
}

/// Lease timing of a test's nodes (`[leases]`, ms).
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttl_ms: u64,
    floor_ahead_ms: u64,
    max_floor_wait_ms: u64,
    safety_margin_ms: u64,
}

/// Short leases: renewed every 500 ms (half the floor's lead), expired 2 s after the last
/// renewal.
const FAST: Timing = Timing {
    ttl_ms: 2000,
    floor_ahead_ms: 1000,
    max_floor_wait_ms: 2000,
    safety_margin_ms: 500,
};

/// One test's backend and directory: the nodes' configs and data directories.
struct Fault {
    name: String,
    backend: Backend,
    /// The `[authority]` table ("" for the file store, the default).
    authority: String,
    dir: tempfile::TempDir,
    _postgres: Option<TempDatabase>,
    _zookeeper: Option<PrivateZookeeper>,
    _runtime: tokio::runtime::Runtime,
}

impl Fault {
    fn new(fault: &str, backend: Backend) -> Fault {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (authority, postgres, zookeeper) = match backend {
            Backend::File => (String::new(), None, None),
            Backend::Postgres => {
                let db = runtime.block_on(TempDatabase::create());
                let table = format!(
                    "[authority]\nkind = \"postgres\"\nurl = \"{}\"\ntimeout_ms = 5000\n",
                    db.url()
                );
                (table, Some(db), None)
            }
            Backend::Zookeeper => {
                let zk = runtime.block_on(PrivateZookeeper::start());
                let table = format!(
                    "[authority]\nkind = \"zookeeper\"\nservers = [\"{}\"]\ntimeout_ms = 5000\n",
                    zk.connect_string()
                );
                (table, None, Some(zk))
            }
        };
        Fault {
            name: format!("{fault}/{backend:?}"),
            backend,
            authority,
            dir: tempfile::tempdir().unwrap(),
            _postgres: postgres,
            _zookeeper: zookeeper,
            _runtime: runtime,
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes config `file` for namespace `events` with `namespace` (its keys after `kind`;
    /// a `[namespaces.events.layout]` table last if any) and `timing`.
    fn config(&self, file: &str, timing: Timing, namespace: &str) -> PathBuf {
        let path = self.dir().join(file);
        let Timing {
            ttl_ms,
            floor_ahead_ms,
            max_floor_wait_ms,
            safety_margin_ms,
        } = timing;
        std::fs::write(
            &path,
            format!(
                "[server]\nauto_create = false\n\n{}\n\
                 [leases]\nttl_ms = {ttl_ms}\nfloor_ahead_ms = {floor_ahead_ms}\n\
                 max_floor_wait_ms = {max_floor_wait_ms}\nsafety_margin_ms = {safety_margin_ms}\n\n\
                 [namespaces.{NS}]\nkind = \"snowflake\"\n{namespace}\n",
                self.authority
            ),
        )
        .unwrap();
        path
    }

    /// Node `node`'s data directory. The file store lives in the data directory, so there all
    /// nodes (one at a time) share one; with the other backends each node has its own.
    fn data_dir(&self, node: &str) -> PathBuf {
        match self.backend {
            Backend::File => self.dir().join("store"),
            _ => self.dir().join(node),
        }
    }

    /// `idmint serve` as node `node` with `config`, under `clock` if given.
    fn command(&self, node: &str, config: &Path, clock: Option<&FakeClock>) -> Command {
        let mut cmd = serve_command(
            self.dir(),
            &self.data_dir(node),
            "127.0.0.1:0",
            Some(config),
        );
        if let Some(clock) = clock {
            clock.apply(&mut cmd);
        }
        cmd
    }

    fn start(&self, node: &str, config: &Path) -> Server {
        Server::spawn(self.command(node, config, None))
    }

    fn start_with_clock(&self, node: &str, config: &Path, clock: &FakeClock) -> Server {
        Server::spawn(self.command(node, config, Some(clock)))
    }

    /// A start that must be refused: how it ended.
    fn refused(&self, node: &str, config: &Path, clock: Option<&FakeClock>) -> Exited {
        match Server::try_spawn(self.command(node, config, clock)) {
            Ok(server) => panic!("{}: node {node} started on {}", self.name, server.addr),
            Err(exited) => {
                assert!(!exited.status.success(), "{}", exited.stderr);
                exited
            }
        }
    }

    /// Starts `node` with a fixed worker id that another holder's lease, not yet expired,
    /// may still hold. The node itself waits once for a lease held under this host's name to
    /// expire; the authority may see the expiry a little later (a ZooKeeper session expires on
    /// the server's next tick), so a start refused with "is held by" is tried again.
    fn start_when_free(&self, node: &str, config: &Path) -> Server {
        let what = format!("{}: node {node} to find its worker id free", self.name);
        wait::until_some(what, DEADLINE, || {
            match Server::try_spawn(self.command(node, config, None)) {
                Ok(server) => Some(server),
                Err(e) if e.stderr.contains("is held by") => None,
                Err(e) => panic!("{}: node {node} did not start: {}", self.name, e.stderr),
            }
        })
    }
}

/// `count` ids from `addr`, or the status and body of the refusal.
fn take(addr: SocketAddr, count: u64) -> Result<Vec<u64>, (u16, String)> {
    let (status, body) = http_get(addr, &format!("/v1/ids/{NS}?count={count}"));
    if status != 200 {
        return Err((status, body));
    }
    Ok(parse_ids(&body))
}

/// `count` ids from `addr`; panics on anything but 200.
fn ids(addr: SocketAddr, count: u64) -> Vec<u64> {
    let batch = take(addr, count).unwrap_or_else(|(s, b)| panic!("{addr}: {s} {b}"));
    assert_eq!(batch.len() as u64, count);
    batch
}

/// The namespace's worker lease as `GET /v1/namespaces/events` shows it.
fn lease(addr: SocketAddr) -> Value {
    let (status, body) = http_get(addr, &format!("/v1/namespaces/{NS}"));
    assert_eq!(status, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    let lease = info["state"]["worker_lease"].clone();
    assert!(lease.is_object(), "no worker lease in {info}");
    lease
}

/// `idmint_clock_behind_seconds` of namespace `events` (0 if not exported yet).
fn clock_behind(addr: SocketAddr) -> f64 {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find(|l| l.starts_with("idmint_clock_behind_seconds{") && l.contains(&format!("\"{NS}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

/// The floor a node's lease was acquired with, from its log line `worker lease acquired …
/// floor=…` (the floor the authority handed over: every earlier holder issued below it).
fn acquired_floor(server: &Server) -> u64 {
    let what = wait::lazy(|| format!("a lease acquired in {}", server.stderr_so_far()));
    wait::until_some(what, DEADLINE, || {
        let log = server.stderr_so_far();
        let line = log.lines().find(|l| l.contains("worker lease acquired"))?;
        let floor = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("floor="))
            .unwrap_or_else(|| panic!("no floor in {line}"));
        Some(parse_rfc3339_ms(floor))
    })
}

/// Waits until `server`'s log contains `text`.
fn await_log(server: &Server, text: &str) {
    let what = wait::lazy(|| format!("{text:?} in {}", server.stderr_so_far()));
    wait::until(what, DEADLINE, || server.stderr_so_far().contains(text));
}

fn real_now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// `host pid N` of a process on this machine, as a lease names its holder.
fn holder(pid: u32) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!("{} pid {pid}", host.trim())
}

/// Every id of a test, checked as it comes in: no id twice, each of the layout's.
struct SeenIds {
    layout: Layout,
    seen: HashSet<u64>,
}

impl SeenIds {
    fn new(layout: Layout) -> SeenIds {
        SeenIds {
            layout,
            seen: HashSet::new(),
        }
    }

    /// Records `batch` from `who`, all of worker `worker`.
    fn add(&mut self, who: &str, worker: u64, batch: &[u64]) {
        for &id in batch {
            assert!(self.seen.insert(id), "{who}: duplicate id {id}");
            let node = self.layout.decode(id).unwrap().parts.node;
            assert_eq!(node, worker, "{who}: id {id} of worker {node}");
        }
    }

    fn ms(&self, id: u64) -> u64 {
        self.layout.decode(id).unwrap().unix_millis()
    }

    fn len(&self) -> usize {
        self.seen.len()
    }
}

fn max(ids: &[u64]) -> u64 {
    *ids.iter().max().unwrap()
}

fn min(ids: &[u64]) -> u64 {
    *ids.iter().min().unwrap()
}

fn terminate(server: Server, who: &str) {
    let (status, rest) = server.terminate();
    assert!(status.success(), "{who}: {status:?} {rest:?}");
}

// ---------------------------------------------------------------------------------------------
// The faults

/// 1. Node A holds worker 0; it is stopped (SIGSTOP) for twice the TTL, long enough for its
///    lease to expire by the authority's clock, and node B, configured with the same worker
///    id, takes it over and serves. Requests sent to A while it is stopped (queued in its
///    listen backlog) and every request after SIGCONT are refused with 503: A's generator
///    stops at its lease's expiry minus the safety margin on its own monotonic clock, and its
///    next renewal finds the lease superseded, so it never issues under it again; nor can it
///    take worker 0 back while B holds it. Every B id is above every A id (B starts above the
///    floor A recorded), so none repeats.
fn sigstop_takeover(backend: Backend) {
    let f = Fault::new("sigstop_takeover", backend);
    let config = f.config("fixed.toml", FAST, "worker = 0");
    let mut seen_ids = SeenIds::new(Layout::twitter());
    let a = f.start("a", &config);
    let mut a_ids = Vec::new();
    for _ in 0..5 {
        a_ids.extend(ids(a.addr, 1000));
    }
    seen_ids.add("A", 0, &a_ids);

    a.stop();
    let stopped = Instant::now();
    // Requests that reach A while it is stopped: the kernel completes the connections into
    // A's listen backlog, and A reads them the moment it runs again.
    let queued: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(a.addr).unwrap();
            write!(
                s,
                "GET /v1/ids/{NS}?count=100 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            s
        })
        .collect();

    let b = f.start_when_free("b", &config);
    let mut b_ids = ids(b.addr, 1000);
    // B serves while A stays stopped for twice the TTL.
    while stopped.elapsed() < Duration::from_millis(2 * FAST.ttl_ms) {
        b_ids.extend(ids(b.addr, 100));
        std::thread::sleep(Duration::from_millis(20));
    }
    a.signal("CONT");

    let mut refused = 0u64;
    for mut stream in queued {
        let (status, body) = read_response(&mut stream);
        assert_eq!(
            status, 503,
            "A answered a request queued while it was stopped: {body}"
        );
        assert!(body.contains("worker lease of group events"), "{body}");
        refused += 1;
    }
    // A learns at its next renewal that the lease was superseded; until then and after, it
    // issues nothing.
    wait::until("A to see its lease superseded", DEADLINE, || {
        if lease(a.addr)["status"] == "lost" {
            return true;
        }
        match take(a.addr, 100) {
            Ok(batch) => panic!("A issued {} ids after its lease expired", batch.len()),
            Err((status, body)) => assert_eq!(status, 503, "{body}"),
        }
        refused += 1;
        false
    });
    // Both keep running: B issues, A refuses (worker 0 is B's).
    for _ in 0..10 {
        let (status, body) = take(a.addr, 100).unwrap_err();
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("was lost"), "{body}");
        refused += 1;
        b_ids.extend(ids(b.addr, 100));
    }
    seen_ids.add("B", 0, &b_ids);
    assert!(
        max(&a_ids) < min(&b_ids),
        "B's ids must all be above A's (A's floor)"
    );
    assert_eq!(lease(b.addr)["status"], "held");
    eprintln!(
        "[{}] A: {} ids before SIGSTOP, then {refused} requests refused (503), 0 ids; B: {} ids; \
         {} distinct ids, 0 duplicates",
        f.name,
        a_ids.len(),
        b_ids.len(),
        seen_ids.len()
    );
    assert_eq!(seen_ids.len(), a_ids.len() + b_ids.len());
    terminate(b, "B");
    terminate(a, "A");
}

/// 2. A second node configured with the worker id a running node holds refuses to start and
///    names the holder; the holder keeps serving.
///
///    The file store lives in one node's data directory, which one process at a time can
///    open: a second node cannot share it at all, so there the refusal is that of the data
///    directory (a second node with a data directory of its own is another store, another
///    deployment, whose ids are its own business).
fn same_fixed_worker(backend: Backend) {
    let f = Fault::new("same_fixed_worker", backend);
    let config = f.config("fixed.toml", FAST, "worker = 0");
    let mut seen_ids = SeenIds::new(Layout::twitter());
    let a = f.start("a", &config);
    let first = ids(a.addr, 1000);
    seen_ids.add("A", 0, &first);
    let exited = f.refused("b", &config, None);
    if backend == Backend::File {
        assert!(
            exited
                .stderr
                .contains("is in use by another idmint process"),
            "{}",
            exited.stderr
        );
    } else {
        let expected = format!("worker 0 of group {NS} is held by {}", holder(a.pid()));
        assert!(exited.stderr.contains(&expected), "{}", exited.stderr);
    }
    let second = ids(a.addr, 1000);
    seen_ids.add("A", 0, &second);
    assert!(max(&first) < min(&second));
    eprintln!(
        "[{}] second node refused; holder served {} ids, 0 duplicates",
        f.name,
        seen_ids.len()
    );
    terminate(a, "A");
}

/// 3. The wall clock stepped back 5 s under a serving node (libfaketime; its monotonic clock
///    untouched): the node reports the step (`idmint_clock_behind_seconds`), keeps its own
///    time, renews its lease across several TTLs, and its ids keep increasing.
fn clock_back_while_serving(backend: Backend) {
    let f = Fault::new("clock_back_while_serving", backend);
    let config = f.config("fixed.toml", FAST, "worker = 0");
    let clock = FakeClock::new(f.dir(), "+0");
    let node = f.start_with_clock("a", &config, &clock);
    let mut all = Vec::new();
    for _ in 0..5 {
        all.extend(ids(node.addr, 500));
    }
    let before = all.len();
    let last_before = *all.last().unwrap();

    clock.set("-5");
    let stepped = Instant::now();
    wait::until("the step back to be reported", DEADLINE, || {
        if clock_behind(node.addr) >= 4.5 {
            return true;
        }
        all.extend(ids(node.addr, 200));
        false
    });
    // Serve on across several renewals under the stepped clock.
    while stepped.elapsed() < Duration::from_millis(3 * FAST.ttl_ms) {
        all.extend(ids(node.addr, 200));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lease(node.addr)["status"], "held");
    assert!(
        clock_behind(node.addr) >= 4.5,
        "the clock is still 5 s behind"
    );

    assert_strictly_increasing(&all, "ids across the step back");
    assert!(all[before] > last_before);
    let mut seen_ids = SeenIds::new(Layout::twitter());
    seen_ids.add("node", 0, &all);
    eprintln!(
        "[{}] {before} ids before the 5 s step back, {} after; strictly increasing, 0 duplicates",
        f.name,
        all.len() - before
    );
    terminate(node, "node");
}

/// 4. The clock set back by more than the downtime between a stop and a restart. Near (behind
///    the floor by less than `max_floor_wait_ms`): the node waits for the floor, then issues
///    above it. Far (60 s): it refuses to start and names both times. With the clock right
///    again it serves above everything.
fn clock_back_across_restart(backend: Backend) {
    let f = Fault::new("clock_back_across_restart", backend);
    let strict = f.config("strict.toml", FAST, "worker = 0");
    let patient = f.config(
        "patient.toml",
        Timing {
            max_floor_wait_ms: 15_000,
            ..FAST
        },
        "worker = 0",
    );
    let mut seen_ids = SeenIds::new(Layout::twitter());

    let run1 = f.start("n", &strict);
    let mut r1 = ids(run1.addr, 1000);
    let last_request = Instant::now();
    r1.extend(ids(run1.addr, 1000));
    terminate(run1, "run 1");
    seen_ids.add("run 1", 0, &r1);
    // A clean stop releases the lease; its floor stays at least just above its last id.
    let floor1 = seen_ids.ms(max(&r1)) + 1;

    // Near: the clock set back by 4 s more than the whole downtime so far, so the node finds
    // the floor ahead of its clock by 4 s less its own start-up time.
    let back = 4.0 + last_request.elapsed().as_secs_f64();
    let clock = FakeClock::new(f.dir(), &format!("-{back:.3}"));
    let run2 = f.start_with_clock("n", &patient, &clock);
    await_log(&run2, "waiting for the worker id's time floor");
    let r2 = ids(run2.addr, 2000);
    seen_ids.add("run 2 (clock set back, floor near)", 0, &r2);
    assert!(min(&r2) > max(&r1));
    assert!(r2.iter().all(|&id| seen_ids.ms(id) >= floor1));
    terminate(run2, "run 2");
    let floor2 = seen_ids.ms(max(&r2)) + 1;

    // Far: 60 s back is more than any wait allows.
    clock.set("-60");
    let exited = f.refused("n", &strict, Some(&clock));
    // The floor the store holds: run 2's last id + 1, or the floor its renewals recorded ahead
    // of its clock (a release never lowers it), at most `floor_ahead_ms` and a renewal later.
    let reported = (floor2..=floor2 + 2 * FAST.floor_ahead_ms).any(|ms| {
        exited
            .stderr
            .contains(&format!("has issued ids up to {}", rfc3339_ms(ms)))
    });
    assert!(
        reported,
        "not the floor of run 2 ({floor2}): {}",
        exited.stderr
    );
    assert!(
        exited.stderr.contains("this clock reads"),
        "{}",
        exited.stderr
    );

    // The clock right again: above everything.
    let run4 = f.start("n", &strict);
    let r4 = ids(run4.addr, 1000);
    seen_ids.add("run 4", 0, &r4);
    assert!(min(&r4) > max(&r2));
    terminate(run4, "run 4");
    eprintln!(
        "[{}] run 1: {} ids; run 2 (clock {back:.3} s back, waited): {}; run 3 (60 s back): \
         refused; run 4: {}; {} distinct, 0 duplicates",
        f.name,
        r1.len(),
        r2.len(),
        r4.len(),
        seen_ids.len()
    );
}

/// 5. A burst above the sequence space of a time unit (2 sequence bits: 4 ids per ms) rolls
///    into the following units: every request gets all it asked for, no id repeats, and the
///    units are filled up to, never beyond, 4 ids.
fn burst_over_sequence(backend: Backend) {
    let f = Fault::new("burst_over_sequence", backend);
    let config = f.config(
        "burst.toml",
        FAST,
        "worker = 0\n\n[namespaces.events.layout]\ntimestamp_bits = 41\nnode_bits = 10\n\
         sequence_bits = 2\ntime_unit = \"1ms\"\nepoch = \"2020-01-01T00:00:00Z\"",
    );
    let layout = Layout::new(LayoutSpec {
        timestamp_bits: 41,
        node_bits: 10,
        sequence_bits: 2,
        time_unit: Duration::from_millis(1),
        epoch_unix_ms: 1_577_836_800_000,
        order: FieldOrder::NodeThenSequence,
        max_bits: 63,
    })
    .unwrap();
    let node = f.start("a", &config);
    let addr = node.addr;
    let mut batches = vec![ids(addr, 2000)];
    let concurrent: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || ids(addr, 500)))
        .collect();
    batches.extend(concurrent.into_iter().map(|t| t.join().unwrap()));

    let mut seen_ids = SeenIds::new(layout);
    let mut per_unit: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, batch) in batches.iter().enumerate() {
        assert_strictly_increasing(batch, &format!("batch {i}"));
        seen_ids.add(&format!("batch {i}"), 0, batch);
        for &id in batch {
            *per_unit
                .entry(layout.decode(id).unwrap().parts.timestamp)
                .or_default() += 1;
        }
    }
    let total: u64 = per_unit.values().sum();
    assert_eq!(total, 4000);
    assert_eq!(seen_ids.len(), 4000);
    assert_eq!(per_unit.values().max(), Some(&4), "units are filled to 4");
    assert!(per_unit.len() >= 1000, "4000 ids need at least 1000 units");
    let big: HashSet<u64> = batches[0]
        .iter()
        .map(|&id| layout.decode(id).unwrap().parts.timestamp)
        .collect();
    assert!(
        big.len() >= 500,
        "one request of 2000 spans at least 500 units"
    );
    eprintln!(
        "[{}] 1 request of 2000 + 4 concurrent of 500 at 4 ids per unit: {total} ids in {} units \
         ({} for the 2000), 0 duplicates",
        f.name,
        per_unit.len(),
        big.len()
    );
    terminate(node, "node");
}

/// 6. A lease holder killed with SIGKILL releases nothing. While its lease lives, a node
///    asking for the lowest free worker id gets the next one; once the lease expired by the
///    authority's clock, a node configured with the dead holder's worker id gets it, with the
///    floor the dead holder recorded, and issues above it.
///
///    The file store keeps its live leases in the memory of the one process that has the data
///    directory open: after a SIGKILL no holder can exist, and the next node to open the
///    directory takes the worker id at once, above its floor.
fn kill9_holder(backend: Backend) {
    let f = Fault::new("kill9_holder", backend);
    // A TTL long enough that B surely starts while A's lease lives (it expires at least
    // two thirds of the TTL after A's last renewal), even on a loaded machine.
    let timing = Timing {
        ttl_ms: 5000,
        ..FAST
    };
    let lowest = f.config("lease.toml", timing, "worker = \"lease\"");
    let fixed = f.config("fixed.toml", timing, "worker = 0");
    let mut seen_ids = SeenIds::new(Layout::twitter());

    let a = f.start("a", &lowest);
    let mut a_ids = Vec::new();
    for _ in 0..5 {
        a_ids.extend(ids(a.addr, 1000));
    }
    seen_ids.add("A", 0, &a_ids);
    let a_lease = lease(a.addr);
    let a_token = a_lease["token"].as_u64().unwrap();
    // Floors only grow: the one recorded when A died is at least this.
    let a_floor_seen = parse_rfc3339_ms(a_lease["floor"].as_str().unwrap());
    a.kill9();

    let mut b_count = String::from("none (file store)");
    if backend != Backend::File {
        // Worker 0 is still leased: the lowest free one is 1.
        let b = f.start("b", &lowest);
        let b_ids = ids(b.addr, 1000);
        seen_ids.add("B (while A's lease lived)", 1, &b_ids);
        b_count = b_ids.len().to_string();
        terminate(b, "B");
    }

    let c = f.start_when_free("c", &fixed);
    let floor = acquired_floor(&c);
    let c_ids = ids(c.addr, 1000);
    seen_ids.add("C (A's worker id)", 0, &c_ids);
    assert!(
        floor >= a_floor_seen,
        "acquired floor {floor} below A's {a_floor_seen}"
    );
    assert!(floor > seen_ids.ms(max(&a_ids)));
    assert!(c_ids.iter().all(|&id| seen_ids.ms(id) >= floor));
    assert!(min(&c_ids) > max(&a_ids));
    assert!(lease(c.addr)["token"].as_u64().unwrap() > a_token);
    eprintln!(
        "[{}] A: {} ids, killed; B (worker 1 meanwhile): {b_count}; C (worker 0 after expiry, \
         floor {} ms above A's last id): {}; 0 duplicates",
        f.name,
        a_ids.len(),
        floor - seen_ids.ms(max(&a_ids)),
        c_ids.len()
    );
    terminate(c, "C");
}

/// 7. The wall clock stepped 10 s forward under a serving node (adopted: its ids jump ahead),
///    then corrected back (reported; the node keeps its time), then the node killed with
///    SIGKILL and restarted with the right clock: the restarted node waits for the floor the
///    excursion recorded and issues above every id of the excursion.
fn clock_forward_excursion(backend: Backend) {
    let f = Fault::new("clock_forward_excursion", backend);
    let config = f.config(
        "fixed.toml",
        Timing {
            max_floor_wait_ms: 15_000,
            ..FAST
        },
        "worker = 0",
    );
    let mut seen_ids = SeenIds::new(Layout::twitter());
    let clock = FakeClock::new(f.dir(), "+0");
    let a = f.start_with_clock("a", &config, &clock);
    let mut all = ids(a.addr, 1000);
    let before = all.len();

    clock.set("+10");
    let mut ahead = 0;
    // Adopting the step moves the generator's time past the floor it recorded (1 s ahead):
    // it answers 503 until its next renewal records a floor ahead of its new time.
    let mut refused = 0u64;
    wait::until("the step forward to be adopted", DEADLINE, || {
        match take(a.addr, 200) {
            Ok(batch) => {
                let last = *batch.last().unwrap();
                all.extend(batch);
                seen_ids.ms(last) > real_now_ms() + 9000
            }
            Err((status, body)) => {
                assert_eq!(status, 503, "{body}");
                assert!(body.contains("is not renewed up to now"), "{body}");
                refused += 1;
                false
            }
        }
    });
    clock.set("+0");
    wait::until("the correction to be reported", DEADLINE, || {
        if clock_behind(a.addr) >= 8.0 {
            return true;
        }
        all.extend(ids(a.addr, 200));
        false
    });
    all.extend(ids(a.addr, 1000));
    assert_strictly_increasing(&all, "ids across the excursion");
    let now = real_now_ms();
    for &id in &all {
        if seen_ids.ms(id) > now {
            ahead += 1;
        }
    }
    seen_ids.add("A", 0, &all);
    a.kill9();

    let b = f.start_when_free("b", &config);
    let b_ids = ids(b.addr, 1000);
    assert!(
        b.stderr_so_far()
            .contains("waiting for the worker id's time floor"),
        "{}",
        b.stderr_so_far()
    );
    seen_ids.add("B (restarted)", 0, &b_ids);
    assert!(min(&b_ids) > max(&all), "the excursion was issued again");
    eprintln!(
        "[{}] A: {before} ids, then {} across the +10 s excursion and its correction ({ahead} \
         stamped ahead of the real clock; {refused} requests refused (503) until the renewal \
         after the jump), killed; B: {} ids, all above; 0 duplicates",
        f.name,
        all.len() - before,
        b_ids.len()
    );
    terminate(b, "B");
}

/// 8. A namespace's layout is locked by its first run: twitter → discord (another epoch),
///    and the twitter bits with another epoch, are refused naming both; twitter again serves
///    above the first run.
fn layout_change(backend: Backend) {
    let f = Fault::new("layout_change", backend);
    let twitter = f.config("twitter.toml", FAST, "worker = 0\nlayout = \"twitter\"");
    let discord = f.config("discord.toml", FAST, "worker = 0\nlayout = \"discord\"");
    let epoch = f.config(
        "epoch.toml",
        FAST,
        "worker = 0\n\n[namespaces.events.layout]\ntimestamp_bits = 41\nnode_bits = 10\n\
         sequence_bits = 12\ntime_unit = \"1ms\"\nepoch = \"2020-01-01T00:00:00Z\"",
    );
    let mut seen_ids = SeenIds::new(Layout::twitter());
    let run1 = f.start("n", &twitter);
    let r1 = ids(run1.addr, 1000);
    seen_ids.add("run 1", 0, &r1);
    terminate(run1, "run 1");

    for (what, config, requested) in [
        ("discord", &discord, "epoch_unix_ms=1420070400000"),
        ("another epoch", &epoch, "epoch_unix_ms=1577836800000"),
    ] {
        let exited = f.refused("n", config, None);
        for text in ["epoch_unix_ms=1288834974657", requested, "could collide"] {
            assert!(exited.stderr.contains(text), "{what}: {}", exited.stderr);
        }
    }

    let run4 = f.start("n", &twitter);
    let r4 = ids(run4.addr, 1000);
    seen_ids.add("run 4", 0, &r4);
    assert!(min(&r4) > max(&r1));
    terminate(run4, "run 4");
    eprintln!(
        "[{}] twitter: {} ids; discord and another epoch refused; twitter again: {}; 0 duplicates",
        f.name,
        r1.len(),
        r4.len()
    );
}

/// Each fault as one test per backend: `FAULT::BACKEND`.
macro_rules! faults {
    ($($fault:ident => [$($backend:ident),+];)+) => {$(
        mod $fault {
            $(
                #[test]
                fn $backend() {
                    super::$fault(super::Backend::named(stringify!($backend)));
                }
            )+
        }
    )+};
}

faults! {
    // Not the file store: it lives in one node's data directory, which one process at a time
    // can open, so no second node can take a worker id over from a stopped one.
    sigstop_takeover => [postgres, zookeeper];
    same_fixed_worker => [file, postgres, zookeeper];
    clock_back_while_serving => [file, postgres, zookeeper];
    clock_back_across_restart => [file, postgres, zookeeper];
    burst_over_sequence => [file, postgres, zookeeper];
    kill9_holder => [file, postgres, zookeeper];
    clock_forward_excursion => [file, postgres, zookeeper];
    layout_change => [file, postgres, zookeeper];
}
