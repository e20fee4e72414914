//! `grpc-load`: a closed-loop load client for idmint's gRPC API (bench/load/run.sh), the gRPC
//! row beside wrk's HTTP rows and redis-benchmark's RESP and Redis rows.
//!
//! `--mode next` (the default): each of `--conns` tasks owns one HTTP/2 connection and loops on
//! `Next(namespace, count)`, one request in flight per connection, like wrk's and
//! redis-benchmark's connections. After `--warmup` seconds the latency of every request is
//! recorded for `--duration` seconds. Prints one line
//! `GRPC requests=N seconds=S rps=R p50_ms=A p99_ms=B ids=I errors=E`.
//!
//! `--mode stream`: `--conns` connections each read one `NextStream(namespace, total, chunk)`
//! to the end, checking that every chunk's ids increase. Prints
//! `STREAM ids=N seconds=S ids_per_s=R`.
//!
//! Every answer is checked (ids present, increasing); an error answer is counted, never retried.

use idmint_proto::v1::idmint_client::IdmintClient;
use idmint_proto::v1::{ids, NextRequest, NextStreamRequest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

struct Args {
    url: String,
    namespace: String,
    mode: String,
    conns: usize,
    threads: usize,
    duration: f64,
    warmup: f64,
    count: u64,
    total: u64,
    chunk: u64,
}

fn die(msg: &str) -> ! {
    eprintln!("grpc-load: {msg}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        url: "http://127.0.0.1:7879".into(),
        namespace: "bench".into(),
        mode: "next".into(),
        conns: 50,
        threads: 2,
        duration: 20.0,
        warmup: 3.0,
        count: 1,
        total: 10_000_000,
        chunk: 10_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| die(&format!("{k} needs a value")));
        let num = |s: String, what: &str| -> f64 {
            s.parse()
                .unwrap_or_else(|_| die(&format!("bad {what}: {s}")))
        };
        match k.as_str() {
            "--url" => a.url = v(),
            "--namespace" => a.namespace = v(),
            "--mode" => a.mode = v(),
            "--conns" => a.conns = num(v(), "--conns") as usize,
            "--threads" => a.threads = num(v(), "--threads") as usize,
            "--duration" => a.duration = num(v(), "--duration"),
            "--warmup" => a.warmup = num(v(), "--warmup"),
            "--count" => a.count = num(v(), "--count") as u64,
            "--total" => a.total = num(v(), "--total") as u64,
            "--chunk" => a.chunk = num(v(), "--chunk") as u64,
            "-h" | "--help" => {
                println!(
                    "grpc-load --url http://127.0.0.1:7879 [--namespace bench] [--mode next|stream] \
                     [--conns 50] [--threads 2] [--duration 20] [--warmup 3] [--count 1] \
                     [--total 10000000] [--chunk 10000]"
                );
                std::process::exit(0)
            }
            other => die(&format!("unknown argument {other}")),
        }
    }
    if a.conns == 0 || a.threads == 0 || !["next", "stream"].contains(&a.mode.as_str()) {
        die("--conns and --threads must be at least 1, --mode next or stream");
    }
    a
}

/// The u64 ids of an answer, checked increasing.
fn u64_ids(answer: idmint_proto::v1::Ids) -> Result<Vec<u64>, String> {
    match answer.ids {
        Some(ids::Ids::U64(list)) => {
            if list.ids.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("ids not increasing: {:?}", list.ids));
            }
            Ok(list.ids)
        }
        other => Err(format!("not a u64 answer: {other:?}")),
    }
}

async fn connect(url: &str) -> IdmintClient<Channel> {
    let channel = Channel::from_shared(url.to_owned())
        .unwrap_or_else(|e| die(&format!("bad --url {url}: {e}")))
        .connect()
        .await
        .unwrap_or_else(|e| die(&format!("cannot connect to {url}: {e}")));
    IdmintClient::new(channel)
}

/// One connection's closed loop of `Next`; latencies (µs) of requests that started after
/// `measure_from`.
async fn next_loop(
    args: Arc<Args>,
    measure_from: Instant,
    stop: Arc<AtomicBool>,
) -> (Vec<u32>, u64, u64) {
    let mut client = connect(&args.url).await;
    let (mut latencies, mut ids, mut errors) = (Vec::with_capacity(1 << 16), 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let answer = client
            .next(NextRequest {
                namespace: args.namespace.clone(),
                count: Some(args.count),
                shard: None,
                key: None,
            })
            .await;
        let elapsed = started.elapsed();
        let ok = match answer {
            Ok(answer) => match u64_ids(answer.into_inner()) {
                Ok(got) if got.len() as u64 == args.count => {
                    if started >= measure_from {
                        ids += got.len() as u64;
                    }
                    true
                }
                Ok(got) => die(&format!("asked {} ids, got {}", args.count, got.len())),
                Err(e) => die(&e),
            },
            Err(status) => {
                if errors == 0 {
                    eprintln!("grpc-load: first error: {status}");
                }
                false
            }
        };
        if started >= measure_from {
            if ok {
                latencies.push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
            } else {
                errors += 1;
            }
        }
    }
    (latencies, ids, errors)
}

async fn run_next(args: Arc<Args>) {
    let stop = Arc::new(AtomicBool::new(false));
    let measure_from = Instant::now() + Duration::from_secs_f64(args.warmup);
    let tasks: Vec<_> = (0..args.conns)
        .map(|_| tokio::spawn(next_loop(args.clone(), measure_from, stop.clone())))
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let measured = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let seconds = measured.elapsed().as_secs_f64();
    let (mut all, mut ids, mut errors) = (Vec::new(), 0u64, 0u64);
    for t in tasks {
        let (lat, i, e) = t.await.unwrap_or_else(|e| die(&format!("a task failed: {e}")));
        all.extend(lat);
        ids += i;
        errors += e;
    }
    all.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return 0.0;
        }
        let i = ((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1;
        f64::from(all[i]) / 1000.0
    };
    println!(
        "GRPC requests={} seconds={seconds:.3} rps={:.0} p50_ms={:.3} p99_ms={:.3} ids={ids} errors={errors}",
        all.len(),
        all.len() as f64 / seconds,
        pct(0.50),
        pct(0.99),
    );
}

async fn run_stream(args: Arc<Args>) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.conns)
        .map(|_| {
            let args = args.clone();
            tokio::spawn(async move {
                let mut client = connect(&args.url).await;
                let mut stream = client
                    .next_stream(NextStreamRequest {
                        namespace: args.namespace.clone(),
                        total: args.total,
                        chunk: Some(args.chunk),
                    })
                    .await
                    .unwrap_or_else(|s| die(&format!("NextStream: {s}")))
                    .into_inner();
                let mut got = 0u64;
                while let Some(chunk) = stream
                    .message()
                    .await
                    .unwrap_or_else(|s| die(&format!("NextStream: {s}")))
                {
                    got += u64_ids(chunk).unwrap_or_else(|e| die(&e)).len() as u64;
                }
                if got != args.total {
                    die(&format!("stream delivered {got} of {} ids", args.total));
                }
                got
            })
        })
        .collect();
    let mut ids = 0;
    for t in tasks {
        ids += t.await.unwrap_or_else(|e| die(&format!("a task failed: {e}")));
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "STREAM ids={ids} seconds={seconds:.3} ids_per_s={:.0}",
        ids as f64 / seconds
    );
}

fn main() {
    let args = Arc::new(parse_args());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(&format!("no runtime: {e}")));
    rt.block_on(async move {
        if args.mode == "stream" {
            run_stream(args).await;
        } else {
            run_next(args).await;
        }
    });
}
