//! `authority-bench`: reservations per second and their latency for each authority backend,
//! measured on the `idmint_store::Authority` trait directly (no node, no HTTP).
//!
//! For each backend (`file`, `postgres`, `mysql` in blocks mode, `etcd`) and each client count
//! (default 1 and 8): one authority instance, shared by N tasks that loop on
//! `reserve(ns, --count)` (default 1000). A fresh namespace per row. `--warmup` seconds of load,
//! then `--duration` seconds measured: every reservation started in the window counts, with
//! its latency. Afterwards the blocks of the window are checked to be disjoint.
//!
//! Backends are real servers with their default durability:
//! - file: a redb file in a temporary directory under `$TMPDIR` (fsync per commit);
//! - postgres: a fresh database on the system server (idmint_testkit::postgres::TempDatabase,
//!   127.0.0.1:5432, user postgres), dropped at the end;
//! - mysql: a fresh database on the system MariaDB (idmint_testkit::mysql::TempDatabase,
//!   127.0.0.1:3306, root), dropped at the end;
//! - etcd: a private single-node etcd with its WAL fsynced (idmint_testkit::etcd::PrivateEtcd),
//!   killed at the end.
//!
//! CPU: cores used during the window by this process ("client", which for `file` includes the
//! backend itself), by the server processes (`postgres`, `mariadbd`, `etcd`, from /proc), and by
//! everything else ("others", from /proc/stat). Before each row it waits up to `--quiet-wait`
//! seconds for other processes to leave the machine alone.
//!
//! Prints a human line and one `RESULT key=value ...` line per row.

use idmint_core::{NamespaceName, SequenceSpec};
use idmint_store::etcd::{EtcdAuthority, EtcdConfig};
use idmint_store::mysql::{MysqlAuthority, MysqlConfig};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_store::{Authority, FileAuthority};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    backends: Vec<String>,
    clients: Vec<usize>,
    count: u64,
    duration: f64,
    warmup: f64,
    quiet_wait: f64,
}

fn die(msg: &str) -> ! {
    eprintln!("authority-bench: {msg}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        backends: vec!["file".into(), "postgres".into(), "mysql".into(), "etcd".into()],
        clients: vec![1, 8],
        count: 1000,
        duration: 5.0,
        warmup: 1.0,
        quiet_wait: 20.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| die(&format!("{k} needs a value")));
        match k.as_str() {
            "--backends" => a.backends = v().split(',').map(str::to_owned).collect(),
            "--clients" => {
                a.clients = v()
                    .split(',')
                    .map(|s| s.parse().unwrap_or_else(|_| die("bad --clients")))
                    .collect()
            }
            "--count" => a.count = v().parse().unwrap_or_else(|_| die("bad --count")),
            "--duration" => a.duration = v().parse().unwrap_or_else(|_| die("bad --duration")),
            "--warmup" => a.warmup = v().parse().unwrap_or_else(|_| die("bad --warmup")),
            "--quiet-wait" => {
                a.quiet_wait = v().parse().unwrap_or_else(|_| die("bad --quiet-wait"))
            }
            "-h" | "--help" => {
                println!("authority-bench [--backends file,postgres,mysql,etcd] [--clients 1,8] [--count 1000] [--duration 5] [--warmup 1] [--quiet-wait 20]");
                std::process::exit(0);
            }
            other => die(&format!("unknown argument {other}")),
        }
    }
    for b in &a.backends {
        if !matches!(b.as_str(), "file" | "postgres" | "mysql" | "etcd") {
            die(&format!("unknown backend {b} (file, postgres, mysql, etcd)"));
        }
    }
    a
}

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc.

fn clk_tck() -> f64 {
    // getconf CLK_TCK; 100 on every Linux this runs on.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// user+nice+system ticks of the whole machine (what processes used; not iowait/irq/steal).
fn machine_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = s.lines().next().unwrap_or("");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum()
}

/// (comm, parent pid, utime+stime) of a process, from /proc/PID/stat.
fn proc_ticks(pid: &str) -> Option<(String, u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_owned();
    let rest: Vec<&str> = s[close + 2..].split_whitespace().collect();
    // Fields after the comm start at field 3 (state); ppid is field 4, utime 14, stime 15.
    let ppid: u32 = rest.get(1)?.parse().ok()?;
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, ppid, utime + stime))
}

/// Per-process ticks of the server processes: every process whose comm is one of `names` and,
/// if `children_only`, whose parent is this process (a private etcd, not another session's).
fn server_ticks(names: &[&str], children_only: bool) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    if names.is_empty() {
        return out;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let me = std::process::id();
    for e in dir.flatten() {
        let name = e.file_name();
        let Ok(pid) = name.to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some((comm, ppid, t)) = proc_ticks(&pid.to_string()) {
            if names.contains(&comm.as_str()) && (!children_only || ppid == me) {
                out.insert(pid, t);
            }
        }
    }
    out
}

/// Ticks the server processes used between two snapshots: per process, so processes that come
/// and go (other sessions' test servers, PostgreSQL backends) never make it negative; a
/// process that ended in the window is left out (its ticks land in "others").
fn server_delta(a: &HashMap<u32, u64>, b: &HashMap<u32, u64>) -> u64 {
    b.iter()
        .map(|(pid, t1)| t1.saturating_sub(a.get(pid).copied().unwrap_or(0)))
        .sum()
}

fn self_ticks() -> u64 {
    proc_ticks("self").map_or(0, |(_, _, t)| t)
}

struct CpuSnap {
    machine: u64,
    server: HashMap<u32, u64>,
    me: u64,
    at: Instant,
}

fn snap(servers: &Servers) -> CpuSnap {
    CpuSnap {
        machine: machine_ticks(),
        server: server_ticks(&servers.names, servers.children_only),
        me: self_ticks(),
        at: Instant::now(),
    }
}

/// (server cores, client cores, other cores) between two snapshots.
fn cores(a: &CpuSnap, b: &CpuSnap, tck: f64) -> (f64, f64, f64) {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let server = server_delta(&a.server, &b.server) as f64 / tck / secs;
    let me = b.me.saturating_sub(a.me) as f64 / tck / secs;
    let all = b.machine.saturating_sub(a.machine) as f64 / tck / secs;
    (server, me, (all - server - me).max(0.0))
}

/// Waits up to `max` seconds for the machine to be quiet (under 0.25 core busy over 1 s).
async fn wait_quiet(label: &str, max: f64, tck: f64) {
    let start = Instant::now();
    let mut said = false;
    loop {
        let m0 = machine_ticks();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = machine_ticks().saturating_sub(m0) as f64 / tck;
        if busy < 0.25 {
            println!("   machine quiet before {label} ({busy:.2} cores busy)");
            return;
        }
        if start.elapsed().as_secs_f64() >= max {
            println!(
                "   WARNING: {busy:.2} cores busy with other processes before {label} (waited {:.0}s); numbers may be low",
                start.elapsed().as_secs_f64()
            );
            return;
        }
        if !said {
            println!("   machine busy before {label} ({busy:.2} cores): waiting up to {max:.0}s");
            said = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// Which processes are the backend's server.
struct Servers {
    names: Vec<&'static str>,
    children_only: bool,
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

struct TaskOut {
    /// Latency (µs) of each reservation started in the window.
    lat_us: Vec<u32>,
    /// (start, end) of each block reserved in the window.
    blocks: Vec<(u64, u64)>,
    errors: u64,
    first_error: Option<String>,
}

struct Row {
    reservations: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    mean_ms: f64,
    errors: u64,
    overlaps: u64,
    server: f64,
    client: f64,
    others: f64,
    first_error: Option<String>,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

async fn run_row(
    authority: Arc<dyn Authority>,
    ns: NamespaceName,
    clients: usize,
    args: &Args,
    servers: &Servers,
    tck: f64,
) -> Row {
    authority
        .ensure_namespace(&ns, SequenceSpec::default_64())
        .await
        .unwrap_or_else(|e| die(&format!("ensure_namespace({ns}) on {}: {e}", authority.kind())));
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let count = args.count;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let a = authority.clone();
        let ns = ns.clone();
        let phase = phase.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = TaskOut {
                lat_us: Vec::with_capacity(16 * 1024),
                blocks: Vec::with_capacity(16 * 1024),
                errors: 0,
                first_error: None,
            };
            loop {
                let p = phase.load(Ordering::Acquire);
                if p == STOP {
                    break;
                }
                let t0 = Instant::now();
                let r = a.reserve(&ns, count).await;
                let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
                if p == MEASURE {
                    match r {
                        Ok(res) => {
                            out.lat_us.push(us);
                            out.blocks.push((res.block.start(), res.block.end()));
                        }
                        Err(e) => {
                            out.errors += 1;
                            if out.first_error.is_none() {
                                out.first_error = Some(e.to_string());
                            }
                        }
                    }
                } else if let Err(e) = r {
                    if out.first_error.is_none() {
                        out.first_error = Some(format!("(warm-up) {e}"));
                    }
                    out.errors += 1;
                }
            }
            out
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let c0 = snap(servers);
    phase.store(MEASURE, Ordering::Release);
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    phase.store(STOP, Ordering::Release);
    let c1 = snap(servers);
    let seconds = c1.at.duration_since(c0.at).as_secs_f64();
    let (server, client, others) = cores(&c0, &c1, tck);

    let mut lat = Vec::new();
    let mut blocks = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for t in tasks {
        let out = t.await.unwrap_or_else(|e| die(&format!("a client task failed: {e}")));
        lat.extend(out.lat_us);
        blocks.extend(out.blocks);
        errors += out.errors;
        if first_error.is_none() {
            first_error = out.first_error;
        }
    }
    lat.sort_unstable();
    blocks.sort_unstable();
    let overlaps = blocks.windows(2).filter(|w| w[1].0 < w[0].1).count() as u64;
    let mean_ms = if lat.is_empty() {
        0.0
    } else {
        lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len() as f64 / 1000.0
    };
    Row {
        reservations: lat.len() as u64,
        seconds,
        p50_ms: percentile(&lat, 50.0),
        p99_ms: percentile(&lat, 99.0),
        max_ms: lat.last().map_or(0.0, |&x| x as f64 / 1000.0),
        mean_ms,
        errors,
        overlaps,
        server,
        client,
        others,
        first_error,
    }
}

fn main() {
    let args = parse_args();
    let tck = clk_tck();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(&format!("no runtime: {e}")));
    println!(
        "authority-bench: backends {:?}, clients {:?}, reserve(ns, {}), warm-up {}s, {}s measured per row",
        args.backends, args.clients, args.count, args.warmup, args.duration
    );

    for backend in args.backends.clone() {
        println!("\n-- {backend}");
        // Resources that must outlive the authority (dropped at the end of the iteration).
        let mut _file_dir = None;
        let mut pg_db = None;
        let mut my_db = None;
        let mut _etcd = None;
        let (authority, server_names, detail): (Arc<dyn Authority>, Vec<&'static str>, String) =
            match backend.as_str() {
                "file" => {
                    let dir = tempfile::Builder::new()
                        .prefix("idmint-authbench-file-")
                        .tempdir()
                        .unwrap_or_else(|e| die(&format!("no temp dir: {e}")));
                    let a = FileAuthority::open(dir.path())
                        .unwrap_or_else(|e| die(&format!("FileAuthority::open: {e}")));
                    let detail = format!("redb file in {}", dir.path().display());
                    _file_dir = Some(dir);
                    (Arc::new(a), vec![], detail)
                }
                "postgres" => rt.block_on(async {
                    let db = idmint_testkit::postgres::TempDatabase::create().await;
                    let a = PostgresAuthority::connect(PostgresConfig::new(db.url()))
                        .await
                        .unwrap_or_else(|e| die(&format!("PostgresAuthority::connect: {e}")));
                    let detail = format!(
                        "database {} on {} (pool {} connections)",
                        db.name(),
                        db.server_addr(),
                        PostgresConfig::DEFAULT_POOL_SIZE
                    );
                    pg_db = Some(db);
                    (Arc::new(a) as Arc<dyn Authority>, vec!["postgres"], detail)
                }),
                "mysql" => {
                    let db = idmint_testkit::mysql::TempDatabase::new();
                    let url = db.url();
                    let detail = format!(
                        "database {} on {}:{} (blocks mode, pool {} connections)",
                        db.name(),
                        db.host_port().0,
                        db.host_port().1,
                        idmint_store::mysql::PoolConfig::default().max_connections
                    );
                    my_db = Some(db);
                    let a = rt.block_on(async {
                        MysqlAuthority::connect(MysqlConfig::new(url))
                            .await
                            .unwrap_or_else(|e| die(&format!("MysqlAuthority::connect: {e}")))
                    });
                    (Arc::new(a), vec!["mariadbd", "mysqld"], detail)
                }
                "etcd" => rt.block_on(async {
                    let etcd = idmint_testkit::etcd::PrivateEtcd::start().await;
                    let a = EtcdAuthority::connect(EtcdConfig::new([etcd.client_url()]))
                        .await
                        .unwrap_or_else(|e| die(&format!("EtcdAuthority::connect: {e}")));
                    let detail = format!("private etcd at {} (fsync on)", etcd.client_url());
                    _etcd = Some(etcd);
                    (Arc::new(a) as Arc<dyn Authority>, vec!["etcd"], detail)
                }),
                _ => unreachable!(),
            };
        println!("   {detail}");
        let servers = Servers {
            children_only: backend == "etcd",
            names: server_names,
        };

        for &clients in &args.clients {
            let label = format!("{backend} clients={clients}");
            rt.block_on(wait_quiet(&label, args.quiet_wait, tck));
            let ns = NamespaceName::new(&format!("bench_c{clients}"))
                .unwrap_or_else(|e| die(&format!("namespace name: {e}")));
            let row = rt.block_on(run_row(
                authority.clone(),
                ns,
                clients,
                &args,
                &servers,
                tck,
            ));
            let rps = row.reservations as f64 / row.seconds;
            println!(
                "   {label}: {rps:.0} reservations/s ({:.0} ids/s), p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, errors {}, overlapping blocks {}; cores: server {:.2}, client {:.2}, others {:.2}",
                rps * args.count as f64,
                row.p50_ms,
                row.p99_ms,
                row.max_ms,
                row.errors,
                row.overlaps,
                row.server,
                row.client,
                row.others
            );
            if let Some(e) = &row.first_error {
                println!("   first error: {e}");
            }
            println!(
                "RESULT backend={backend} clients={clients} count={} seconds={:.2} reservations={} rps={rps:.1} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} mean_ms={:.3} errors={} overlaps={} server_cores={:.2} client_cores={:.2} others_cores={:.2}",
                args.count,
                row.seconds,
                row.reservations,
                row.p50_ms,
                row.p99_ms,
                row.max_ms,
                row.mean_ms,
                row.errors,
                row.overlaps,
                row.server,
                row.client,
                row.others
            );
        }
        drop(authority);
        if let Some(db) = pg_db.take() {
            rt.block_on(db.drop_now());
            println!("   dropped the PostgreSQL database");
        }
        if let Some(db) = my_db.take() {
            drop(db);
            println!("   dropped the MariaDB database");
        }
    }
}
