//! Owned shards across real processes: three `idmint serve` share one `shards = "owned"`
//! namespace (layout `instagram`, 256 logical shards in 16 ranges of 16) on one PostgreSQL
//! database (one test) or one ZooKeeper server (the other), each node serving HTTP and gRPC
//! and advertising its gRPC url. Clients on every node ask for a few ids of random shards (by
//! `shard` or by `key`), so most requests are forwarded to the range's holder. Then a node that
//! holds ranges is killed (SIGKILL): its shards answer `no_leader` or wait until its leases
//! expire, then the survivors take its ranges over and serve them.
//!
//! What is checked, over every answer of the run:
//! - no id is handed out twice, and every id decodes to the shard asked for (`key %
//!   logical_shards` for a key);
//! - per shard, real-time order ([`idmint_testkit::linearizable`] on each shard's history): an
//!   answer is above every answer of its shard that completed before its request was sent.
//!   In particular every id answered to a request sent after the kill is above every id of its
//!   shard answered before (a takeover starts above the floor);
//! - no range of the killed node is served by another before its lease could have expired: the
//!   victim issued up to at least the start of its last answered request, with at least
//!   `safety_margin_ms` of its lease left;
//! - the only failures are requests the kill cut and `503 no_leader`; every phase serves, and
//!   each of the killed node's ranges is served again.
//!
//! The phases are driven by progress (answers counted, ranges taken as the nodes' logs say),
//! never by sleeping to order events. Both tests take the machine in turn (a lock).
//!
//! Needs PostgreSQL on 127.0.0.1:5432 and the ZooKeeper jars with Java (see idmint-testkit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_core::Layout;
use idmint_testkit::linearizable::{check, Op};
use idmint_testkit::wait;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::{toml_string, Server, DEADLINE};

const NODES: usize = 3;
const CLIENTS_PER_NODE: usize = 3;
const SHARDS: u64 = 256;
const PER_RANGE: u64 = 16;
const RANGES: u64 = SHARDS / PER_RANGE;
/// Answers each phase must add before the next.
const PER_PHASE: u64 = 1000;
const TTL_MS: u64 = 3000;
const SAFETY_MARGIN_MS: u64 = 600;
/// Renewals come every 1 s (the smaller of a third of the TTL and half of this), so a renewal
/// may be 1 s late on a loaded machine before a range's generator reaches its recorded floor
/// and answers 503 `authority_unavailable`.
const FLOOR_AHEAD_MS: u64 = 2000;
/// Shorter than the lease's TTL: requests for the killed node's shards sent soon after the
/// kill give up (`no_leader`) before its leases expire.
const WAIT_MS: u64 = 2000;
/// What the node logs when it takes a range's lease.
const TOOK: &str = "took the lease of a shard range";

static MACHINE: Mutex<()> = Mutex::new(());

#[test]
fn owned_shards_are_taken_over_above_their_floors_after_a_holder_is_killed_on_postgres() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(idmint_testkit::postgres::TempDatabase::create());
    let authority = format!(
        "[authority]\nkind = \"postgres\"\nurl = {}\ntable = \"idmint_shards\"\ntimeout_ms = 2000\n",
        toml_string(&db.url())
    );
    shards_run(&authority);
    drop(db);
}

#[cfg(feature = "zookeeper")]
#[test]
fn owned_shards_are_taken_over_above_their_floors_after_a_holder_is_killed_on_zookeeper() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let zk = runtime.block_on(idmint_testkit::zookeeper::PrivateZookeeper::start());
    let authority = format!(
        "[authority]\nkind = \"zookeeper\"\nservers = [{}]\ntimeout_ms = 2000\n",
        toml_string(&zk.connect_string())
    );
    shards_run(&authority);
    drop(zk);
}

/// A port free now (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_node(dir: &Path, authority: &str, n: usize) -> Server {
    // The gRPC port is chosen before the process binds it (it is advertised in the node's
    // leases): a port taken in between by another listener is chosen again.
    for attempt in 0.. {
        let grpc = free_port();
        let config = dir.join(format!("node-{n}.toml"));
        std::fs::write(
            &config,
            format!(
                "[server]\ngrpc = \"127.0.0.1:{grpc}\"\n\n{authority}\n\
                 [leases]\nttl_ms = {TTL_MS}\nsafety_margin_ms = {SAFETY_MARGIN_MS}\nfloor_ahead_ms = {FLOOR_AHEAD_MS}\n\n\
                 [peers]\nadvertise = {}\ntoken = \"idmint_photos_peer\"\nwait_ms = {WAIT_MS}\nforward_timeout_ms = 1000\n\n\
                 [namespaces.photos]\nkind = \"snowflake\"\nlayout = \"instagram\"\nshards = \"owned\"\n\
                 logical_shards = {SHARDS}\nshard_range = {PER_RANGE}\n",
                toml_string(&format!("http://127.0.0.1:{grpc}"))
            ),
        )
        .unwrap();
        let data = dir.join(format!("data-{n}"));
        let cmd = support::serve_command(dir, &data, "127.0.0.1:0", Some(&config));
        match Server::try_spawn(cmd) {
            Ok(server) => return server,
            Err(e) if attempt < 5 && e.stderr.contains("Address already in use") => continue,
            Err(e) => panic!("node {n} did not start: {e:?}"),
        }
    }
    unreachable!()
}

/// The ranges a node's log says it took, in order, with repeats.
fn ranges_taken(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains(TOOK))
        .map(|l| {
            let value = l
                .split_once(" range=")
                .unwrap_or_else(|| panic!("no range in {l:?}"))
                .1;
            let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
            digits
                .parse()
                .unwrap_or_else(|_| panic!("no range in {l:?}"))
        })
        .collect()
}

/// What `now` (a node's ranges taken) adds to `then` (taken earlier); nothing for a node
/// killed since (its log is no longer read).
fn since<'a>(now: &'a [u64], then: &[u64]) -> &'a [u64] {
    now.get(then.len()..).unwrap_or(&[])
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

/// A small deterministic generator (xorshift), one per client.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One answered request.
struct Answer {
    shard: u64,
    op: Op,
}

#[derive(Default)]
struct Tally {
    answers: Mutex<Vec<Answer>>,
    answered: AtomicU64,
    /// The shard of each `no_leader` answer, and when it came.
    no_leader: Mutex<Vec<(u64, u64)>>,
    cut: AtomicU64,
}

impl Tally {
    /// Ranges with an answer to a request sent at or after `since` (ns since the epoch).
    fn ranges_served_since(&self, since: u64) -> BTreeSet<u64> {
        self.answers
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.op.start >= since)
            .map(|a| a.shard / PER_RANGE)
            .collect()
    }
}

fn shards_run(authority: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Option<Server>> = (0..NODES)
        .map(|n| Some(start_node(dir.path(), authority, n)))
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.as_ref().unwrap().addr).collect();
    // Where the clients of each node send their requests (a node's index into `addrs`).
    let targets: Arc<Vec<AtomicUsize>> = Arc::new((0..NODES).map(AtomicUsize::new).collect());
    let dead: Arc<Vec<AtomicBool>> = Arc::new((0..NODES).map(|_| AtomicBool::new(false)).collect());
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let mut clients = Vec::new();
    for slot in 0..NODES {
        for c in 0..CLIENTS_PER_NODE {
            let (targets, dead, tally, stop) =
                (targets.clone(), dead.clone(), tally.clone(), stop.clone());
            let addrs = addrs.clone();
            clients.push(thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((slot as u64) << 32 | c as u64));
                let mut round = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    round += 1;
                    let node = targets[slot].load(Ordering::SeqCst);
                    let shard = rng.below(SHARDS);
                    let count = 1 + rng.below(4);
                    // Every third request names a key of the shard rather than the shard.
                    let path = if round.is_multiple_of(3) {
                        let key = shard + SHARDS * rng.below(1 << 40);
                        format!("/v1/ids/photos?key={key}&count={count}")
                    } else {
                        format!("/v1/ids/photos?shard={shard}&count={count}")
                    };
                    let start = epoch.elapsed().as_nanos() as u64;
                    let answer = get(addrs[node], &path);
                    let end = epoch.elapsed().as_nanos() as u64;
                    match answer {
                        Ok((200, body)) => {
                            let ids = support::parse_ids(&body);
                            assert_eq!(ids.len() as u64, count, "{path}: {body}");
                            tally.answers.lock().unwrap().push(Answer {
                                shard,
                                op: Op { start, end, ids },
                            });
                            tally.answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok((503, body)) if body.contains("\"no_leader\"") => {
                            tally.no_leader.lock().unwrap().push((shard, end));
                        }
                        Ok((status, body)) => panic!("node {node}, {path}: {status} {body}"),
                        Err(e) => {
                            assert!(
                                dead[node].load(Ordering::SeqCst),
                                "node {node} is up and failed: {path}: {e}"
                            );
                            tally.cut.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }));
        }
    }
    let progress = |what: &str| {
        let from = tally.answered.load(Ordering::SeqCst);
        wait::until(what, DEADLINE, || {
            tally.answered.load(Ordering::SeqCst) >= from + PER_PHASE
        });
    };
    let taken_by = |nodes: &[Option<Server>]| -> Vec<Vec<u64>> {
        nodes
            .iter()
            .map(|n| {
                n.as_ref()
                    .map_or(Vec::new(), |s| ranges_taken(&s.stderr_so_far()))
            })
            .collect()
    };

    // Phase 1: every range is taken, each by one node.
    progress("answers before the kill");
    wait::until("every range taken", DEADLINE, || {
        taken_by(&nodes)
            .iter()
            .flatten()
            .collect::<HashSet<_>>()
            .len() as u64
            == RANGES
    });
    let before = taken_by(&nodes);
    let mut holder = BTreeMap::new();
    for (n, ranges) in before.iter().enumerate() {
        for &r in ranges {
            assert!(
                holder.insert(r, n).is_none(),
                "range {r} taken twice with no fault: {before:?}"
            );
        }
    }
    let victim = (0..NODES).max_by_key(|&n| before[n].len()).unwrap();
    let victim_ranges: BTreeSet<u64> = before[victim].iter().copied().collect();
    assert!(!victim_ranges.is_empty());

    // Phase 2: the victim's clients move to the next node, and it is killed.
    dead[victim].store(true, Ordering::SeqCst);
    targets[victim].store((victim + 1) % NODES, Ordering::SeqCst);
    let killed_at = epoch.elapsed().as_nanos() as u64;
    nodes[victim].take().unwrap().kill9();
    progress("answers after the kill");
    wait::until(
        wait::lazy(|| {
            format!(
                "the killed node's ranges {victim_ranges:?} taken over (taken since: {:?})",
                taken_by(&nodes)
            )
        }),
        DEADLINE,
        || {
            let after = taken_by(&nodes);
            let taken: HashSet<u64> = (0..NODES)
                .flat_map(|n| since(&after[n], &before[n]).iter().copied())
                .collect();
            victim_ranges.iter().all(|r| taken.contains(r))
        },
    );
    wait::until(
        "every range of the killed node served again",
        DEADLINE,
        || {
            tally
                .ranges_served_since(killed_at)
                .is_superset(&victim_ranges)
        },
    );

    // Phase 3: the survivors serve every shard.
    let settled = epoch.elapsed().as_nanos() as u64;
    progress("answers after the takeover");
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let after = taken_by(&nodes);
    for (n, server) in nodes.into_iter().enumerate() {
        if let Some(server) = server {
            let (status, lines) = server.terminate();
            assert!(status.success(), "node {n}: {lines:?}");
        }
    }
    // Only the killed node's ranges changed hands.
    for (n, ranges) in after.iter().enumerate() {
        for r in since(ranges, &before[n]) {
            assert!(
                victim_ranges.contains(r),
                "node {n} took range {r}, which node {} held and still serves: {after:?}",
                holder[r]
            );
        }
    }

    // `no_leader` only for the killed node's shards, once it was killed.
    let no_leader = std::mem::take(&mut *tally.no_leader.lock().unwrap());
    for &(shard, end) in &no_leader {
        assert!(
            victim_ranges.contains(&(shard / PER_RANGE)) && end > killed_at,
            "no_leader for shard {shard} (range {}) {} ms after the start, the kill at {} ms: \
             only the killed node's ranges may lack a holder, and only after the kill",
            shard / PER_RANGE,
            end / 1_000_000,
            killed_at / 1_000_000
        );
    }

    let answers = std::mem::take(&mut *tally.answers.lock().unwrap());
    let takeover = check_answers(&answers, &victim_ranges, killed_at, settled);
    eprintln!(
        "shards: {} answers ({} ids), node {victim} killed holding ranges {victim_ranges:?}, \
         served again {:?} ms after the kill; {} no_leader answers, {} requests cut by the kill",
        answers.len(),
        answers.iter().map(|a| a.op.ids.len()).sum::<usize>(),
        takeover,
        no_leader.len(),
        tally.cut.load(Ordering::SeqCst)
    );
}

/// The checks over every answer: see the module docs. Returns how long after the kill each
/// of the killed node's ranges was first served again (ms, the earliest and the latest).
fn check_answers(
    answers: &[Answer],
    victim_ranges: &BTreeSet<u64>,
    killed_at: u64,
    settled: u64,
) -> (u64, u64) {
    let layout = Layout::instagram();
    let mut seen = HashSet::new();
    let mut per_shard: BTreeMap<u64, Vec<Op>> = BTreeMap::new();
    for a in answers {
        for &id in &a.op.ids {
            assert!(seen.insert(id), "id {id} answered twice");
            let node = layout.decode(id).unwrap().parts.node;
            assert_eq!(node, a.shard, "id {id} answered for shard {}", a.shard);
        }
        per_shard.entry(a.shard).or_default().push(a.op.clone());
    }
    let ranges: BTreeSet<u64> = per_shard.keys().map(|s| s / PER_RANGE).collect();
    assert_eq!(ranges.len() as u64, RANGES, "every range was served");
    for (shard, ops) in &per_shard {
        check(ops).unwrap_or_else(|v| panic!("shard {shard}: real-time order broken: {v}"));
        // The kill's boundary, said plainly (implied by the check above).
        let before = ops
            .iter()
            .filter(|o| o.end < killed_at)
            .flat_map(|o| &o.ids)
            .max();
        let after = ops
            .iter()
            .filter(|o| o.start > killed_at)
            .flat_map(|o| &o.ids)
            .min();
        if let (Some(before), Some(after)) = (before, after) {
            assert!(
                after > before,
                "shard {shard}: {after} after the kill, {before} before"
            );
        }
    }
    let margin = Duration::from_millis(SAFETY_MARGIN_MS).as_nanos() as u64;
    let mut served_again = (u64::MAX, 0);
    for &r in victim_ranges {
        let in_range = |a: &&Answer| a.shard / PER_RANGE == r;
        // Answered before the kill: issued by the killed node, between start and end.
        let last_victim = answers
            .iter()
            .filter(in_range)
            .filter(|a| a.op.end < killed_at)
            .map(|a| a.op.start)
            .max()
            .unwrap_or_else(|| panic!("range {r}: no answer before the kill"));
        let first_taken = answers
            .iter()
            .filter(in_range)
            .filter(|a| a.op.start > killed_at)
            .map(|a| a.op.end)
            .min()
            .unwrap_or_else(|| panic!("range {r}: no answer after the kill"));
        assert!(
            first_taken >= last_victim + margin,
            "range {r} served again {} ms after the start of the killed node's last answer in \
             it: its lease could not have expired",
            (first_taken - last_victim) / 1_000_000
        );
        let ms = (first_taken - killed_at) / 1_000_000;
        served_again = (served_again.0.min(ms), served_again.1.max(ms));
    }
    let served_after = answers.iter().filter(|a| a.op.start > settled).count();
    assert!(served_after > 0, "nothing served after the takeover");
    served_again
}
