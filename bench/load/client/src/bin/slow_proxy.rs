//! `slow-proxy`: a TCP proxy on 127.0.0.1 that delays every chunk it forwards, both ways, by
//! `--latency-ms` (idmint_testkit's `FaultProxy` with `set_latency`). With 50 ms, a request and
//! its reply each wait 50 ms: one round trip through it costs 100 ms more than direct.
//!
//! Prints `slow-proxy listening on 127.0.0.1:PORT upstream=... latency_ms=...` once it accepts
//! connections, then runs until killed (SIGTERM/SIGINT).

use idmint_testkit::proxy::FaultProxy;
use std::net::SocketAddr;
use std::time::Duration;

fn die(msg: &str) -> ! {
    eprintln!("slow-proxy: {msg}");
    std::process::exit(2)
}

fn main() {
    let mut upstream: Option<SocketAddr> = None;
    let mut latency_ms: u64 = 50;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| die(&format!("{k} needs a value")));
        match k.as_str() {
            "--upstream" => {
                upstream = Some(v().parse().unwrap_or_else(|_| die("bad --upstream (ip:port)")))
            }
            "--latency-ms" => latency_ms = v().parse().unwrap_or_else(|_| die("bad --latency-ms")),
            "-h" | "--help" => {
                println!("slow-proxy --upstream 127.0.0.1:5432 [--latency-ms 50]");
                return;
            }
            other => die(&format!("unknown argument {other}")),
        }
    }
    let upstream = upstream.unwrap_or_else(|| die("--upstream is required"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| die(&format!("no runtime: {e}")));
    rt.block_on(async move {
        let proxy = FaultProxy::start(upstream)
            .await
            .unwrap_or_else(|e| die(&format!("cannot listen: {e}")));
        proxy.set_latency(Duration::from_millis(latency_ms));
        println!(
            "slow-proxy listening on {} upstream={upstream} latency_ms={latency_ms}",
            proxy.addr()
        );
        std::future::pending::<()>().await;
        drop(proxy);
    });
}
