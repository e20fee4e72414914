//! `ticket-load`: a closed-loop load client for a Flickr-style ticket server on MySQL/MariaDB.
//!
//! Each of `--conns` tasks owns one connection (autocommit on) and loops on one request:
//! `REPLACE INTO Tickets64 (stub) VALUES ('a'); SELECT LAST_INSERT_ID();` sent as one
//! multi-statement query (one round trip, the cheapest form for the database), or as two
//! queries with `--two-trips`. After `--warmup` seconds the latency of every request is
//! recorded for `--duration` seconds. A request that InnoDB rolls back as a deadlock (1213) or
//! lock wait timeout (1205) is retried at once, as real ticket clients do; its latency includes
//! the retries, and their number is reported. Prints one `RESULT key=value ...` line.

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    url: String,
    conns: usize,
    duration: f64,
    warmup: f64,
    two_trips: bool,
    threads: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        url: "mysql://root@127.0.0.1:3306/idmint_bench".into(),
        conns: 50,
        duration: 20.0,
        warmup: 3.0,
        two_trips: false,
        threads: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| die(&format!("{k} needs a value")));
        match k.as_str() {
            "--url" => a.url = v(),
            "--conns" => a.conns = v().parse().unwrap_or_else(|_| die("bad --conns")),
            "--duration" => a.duration = v().parse().unwrap_or_else(|_| die("bad --duration")),
            "--warmup" => a.warmup = v().parse().unwrap_or_else(|_| die("bad --warmup")),
            "--threads" => a.threads = v().parse().unwrap_or_else(|_| die("bad --threads")),
            "--two-trips" => a.two_trips = true,
            "-h" | "--help" => {
                println!("ticket-load [--url mysql://root@127.0.0.1:3306/idmint_bench] [--conns 50] [--duration 20] [--warmup 3] [--threads 2] [--two-trips]");
                std::process::exit(0);
            }
            other => die(&format!("unknown argument {other}")),
        }
    }
    a
}

fn die(msg: &str) -> ! {
    eprintln!("ticket-load: {msg}");
    std::process::exit(2)
}

/// Per-task result: latencies (µs) of measured requests, errors, smallest and largest id seen.
struct TaskOut {
    lat_us: Vec<u32>,
    errors: u64,
    retries: u64,
    min_id: u64,
    max_id: u64,
}

async fn one_request(conn: &mut Conn, two_trips: bool) -> Result<u64, mysql_async::Error> {
    if two_trips {
        conn.query_drop("REPLACE INTO Tickets64 (stub) VALUES ('a')").await?;
        let id: Option<u64> = conn.query_first("SELECT LAST_INSERT_ID()").await?;
        Ok(id.unwrap_or(0))
    } else {
        let mut r = conn
            .query_iter("REPLACE INTO Tickets64 (stub) VALUES ('a'); SELECT LAST_INSERT_ID()")
            .await?;
        // First result set: the REPLACE (no rows). Second: the id.
        let _: Vec<u64> = r.collect().await?;
        let rows: Vec<u64> = r.collect_and_drop().await?;
        Ok(rows.first().copied().unwrap_or(0))
    }
}

/// InnoDB deadlock (1213) and lock wait timeout (1205): the server rolled the statement back and
/// asks the client to try again, which is what any real ticket-server client does.
fn retryable(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == 1213 || s.code == 1205)
}

/// One id: the request, retried on deadlock / lock wait timeout (at most 100 times).
/// Returns the id and how many retries it took.
async fn one_id(conn: &mut Conn, two_trips: bool) -> Result<(u64, u64), mysql_async::Error> {
    let mut retries = 0;
    loop {
        match one_request(conn, two_trips).await {
            Ok(id) => return Ok((id, retries)),
            Err(e) if retryable(&e) && retries < 100 => retries += 1,
            Err(e) => return Err(e),
        }
    }
}

static PRINTED_ERROR: AtomicBool = AtomicBool::new(false);

fn report_error(e: &mysql_async::Error) {
    if !PRINTED_ERROR.swap(true, Ordering::Relaxed) {
        eprintln!("ticket-load: error (first of possibly many): {e}");
    }
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(&format!("runtime: {e}")));
    rt.block_on(run(args));
}

async fn run(args: Args) {
    let opts = Opts::from_url(&args.url).unwrap_or_else(|e| die(&format!("bad url: {e}")));
    // Connect everything first so connection setup is not measured.
    let mut conns = Vec::with_capacity(args.conns);
    for _ in 0..args.conns {
        let c = Conn::new(opts.clone())
            .await
            .unwrap_or_else(|e| die(&format!("connect: {e}")));
        conns.push(c);
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for mut conn in conns {
        let measuring = measuring.clone();
        let stop = stop.clone();
        let two_trips = args.two_trips;
        handles.push(tokio::spawn(async move {
            let mut out = TaskOut {
                lat_us: Vec::with_capacity(1 << 16),
                errors: 0,
                retries: 0,
                min_id: u64::MAX,
                max_id: 0,
            };
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r = one_id(&mut conn, two_trips).await;
                let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
                if measuring.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                    match r {
                        Ok((id, retries)) => {
                            out.lat_us.push(us);
                            out.retries += retries;
                            out.min_id = out.min_id.min(id);
                            out.max_id = out.max_id.max(id);
                        }
                        Err(e) => {
                            report_error(&e);
                            out.errors += 1;
                        }
                    }
                } else if let Err(e) = r {
                    report_error(&e);
                    if !retryable(&e) {
                        // A broken connection: stop this client rather than spin.
                        break;
                    }
                }
            }
            let _ = conn.disconnect().await;
            out
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let mut lat: Vec<u32> = Vec::new();
    let (mut errors, mut retries, mut min_id, mut max_id) = (0u64, 0u64, u64::MAX, 0u64);
    for h in handles {
        let o = h.await.unwrap_or_else(|e| die(&format!("task: {e}")));
        lat.extend_from_slice(&o.lat_us);
        errors += o.errors;
        retries += o.retries;
        min_id = min_id.min(o.min_id);
        max_id = max_id.max(o.max_id);
    }
    lat.sort_unstable();
    let n = lat.len();
    let pct = |p: f64| -> f64 {
        if n == 0 {
            return 0.0;
        }
        let i = ((p / 100.0) * n as f64).ceil() as usize;
        lat[i.clamp(1, n) - 1] as f64 / 1000.0
    };
    let mean = if n == 0 {
        0.0
    } else {
        lat.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1000.0
    };
    println!(
        "RESULT requests={n} seconds={elapsed:.3} rps={:.1} mean_ms={mean:.3} p50_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3} errors={errors} deadlock_retries={retries} conns={} min_id={} max_id={}",
        n as f64 / elapsed,
        pct(50.0),
        pct(99.0),
        pct(99.9),
        pct(100.0),
        args.conns,
        if n == 0 { 0 } else { min_id },
        max_id,
    );
}
