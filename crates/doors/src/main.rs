//! One request through each door of a node, for counting what the server spends on it.
//!
//! `doors DOOR [REQUESTS]` serves the door's nodes on a thread of their own (a current-thread
//! tokio runtime), warms the door up, then enters [`doors_measured_phase`] on that thread and
//! sends REQUESTS requests from the main thread, one at a time. Run under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=*doors_measured_phase`,
//! only the server thread's instructions inside that phase are counted: the requests' server
//! work, never the client's, the set-up's or the warm-up's. `bench/doors/check.sh` does
//! that for every door and compares the counts with `bench/doors/counts.toml`.
//!
//! Without a door (`cargo run --release -p idmint-doors`) every door runs natively and
//! its wall time per request is printed: informational only, the clock of a shared machine
//! cannot guard anything.
//!
//! Invariants: the server thread enters the measured phase before the first measured request
//! leaves (the client waits for its word) and leaves it only after the last answer was read;
//! every measured request succeeded (an error ends the run with a failure).

mod cluster;
mod wire;

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::runtime::{Builder, Runtime};
use tokio::sync::oneshot;

/// A way into the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    /// `GET /v1/ids/bench?count=1`.
    Http1,
    /// `GET /v1/ids/bench?count=100`.
    Http100,
    /// RESP `INCR bench`.
    Resp,
    /// gRPC `Next`, count 1.
    GrpcNext,
    /// gRPC `NextStream` of [`wire::STREAM_TOTAL`] ids.
    GrpcStream,
    /// `GET /v1/ids/chat?count=1` at the follower of a strict namespace: one forward to the
    /// leader (both nodes counted).
    StrictForward,
    /// `GET /v1/ids/photos?shard=0` at a node that does not hold the shard: one forward to its
    /// holder (both nodes counted).
    ShardForward,
    /// `GET /v1/ids/refill?count=100` on blocks of 100: one refill from the authority each.
    Refill,
}

/// Every door, with its name and the requests measured by default.
const DOORS: [(Door, &str, u64); 8] = [
    (Door::Http1, "http_1", 400),
    (Door::Http100, "http_100", 400),
    (Door::Resp, "resp_incr", 400),
    (Door::GrpcNext, "grpc_next", 400),
    (Door::GrpcStream, "grpc_stream", 4),
    (Door::StrictForward, "strict_forward", 200),
    (Door::ShardForward, "shard_forward", 200),
    (Door::Refill, "refill", 200),
];

/// Requests before the measured ones: connections set up, namespaces and buffers warm.
fn warm_up(requests: u64) -> u64 {
    (requests / 4).max(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let chosen: Vec<(Door, &str, u64)> = match args.first() {
        None => DOORS.to_vec(),
        Some(name) => match DOORS.iter().find(|(_, n, _)| n == name) {
            Some(&(door, name, default)) => {
                let requests = match args.get(1).map(|n| n.parse::<u64>()) {
                    None => default,
                    Some(Ok(n)) if n > 0 => n,
                    Some(_) => return usage(),
                };
                vec![(door, name, requests)]
            }
            None => return usage(),
        },
    };
    for (door, name, requests) in chosen {
        match run(door, requests) {
            Ok(took) => println!(
                "door={name} requests={requests} wall_us_per_request={:.1}",
                took.as_secs_f64() * 1e6 / requests as f64
            ),
            Err(e) => {
                eprintln!("door {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    let names: Vec<&str> = DOORS.iter().map(|(_, n, _)| *n).collect();
    eprintln!("usage: doors [{}] [REQUESTS]", names.join("|"));
    ExitCode::from(2)
}

/// Serves `door`, warms it up, and times `requests` requests inside the measured phase.
fn run(door: Door, requests: u64) -> Result<Duration, String> {
    let (target_tx, target_rx) = mpsc::channel();
    let (start_tx, start_rx) = oneshot::channel::<()>();
    let (inside_tx, inside_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let server = std::thread::Builder::new()
        .name("doors-server".into())
        .spawn(move || -> Result<(), String> {
            let rt = runtime()?;
            let target = rt.block_on(cluster::start(door));
            let failed = target.is_err();
            let _ = target_tx.send(target);
            if failed {
                return Ok(());
            }
            // Serves the warm-up until the client says the measured requests follow.
            let _ = rt.block_on(start_rx);
            doors_measured_phase(&rt, &inside_tx, done_rx);
            Ok(())
        })
        .map_err(|e| format!("thread: {e}"))?;
    let target = target_rx
        .recv()
        .map_err(|_| "the server thread ended".to_string())??;
    let client_rt = runtime()?;
    let mut client = wire::Client::open(door, &target, &client_rt)?;
    for _ in 0..warm_up(requests) {
        client.call(&client_rt)?;
    }
    let _ = start_tx.send(());
    inside_rx
        .recv()
        .map_err(|_| "the server thread ended".to_string())?;
    let began = Instant::now();
    for _ in 0..requests {
        client.call(&client_rt)?;
    }
    let took = began.elapsed();
    let _ = done_tx.send(());
    server
        .join()
        .map_err(|_| "the server thread panicked".to_string())??;
    Ok(took)
}

fn runtime() -> Result<Runtime, String> {
    Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

/// The measured phase: the server thread serves until `done`. Callgrind's
/// `--toggle-collect=*doors_measured_phase` counts exactly what runs inside; the name must
/// stay unique to this function.
#[inline(never)]
fn doors_measured_phase(rt: &Runtime, inside: &mpsc::Sender<()>, done: oneshot::Receiver<()>) {
    let _ = inside.send(());
    let _ = rt.block_on(done);
}
