//! The CPU cost of one `GET /v1/ids/{namespace}` through the whole axum router, without the
//! network: a node on the in-memory authority, requests driven with `tower::ServiceExt::oneshot`
//! on a current-thread runtime, each answer's body read to the end.
//!
//! Meant for `valgrind --tool=callgrind`, whose instruction counts repeat under load where
//! wall-clock time does not (BENCHMARKS.md, "Request path cost"):
//!
//! ```text
//! cargo build --release -p idmint-node --example request_cost
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='request_cost::measure' \
//!     target/release/examples/request_cost 'photos?count=1' 20000
//! ```
//!
//! Only `measure` (the request loop, and whatever the runtime runs meanwhile: refills
//! included) is counted; the total divided by the request count is the cost of one request.
//! Without valgrind it prints the wall-clock time per request (noisy on a loaded machine).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use axum::body::{to_bytes, Body};
use axum::http::Request;
use axum::Router;
use idmint_node::config::NodeConfig;
use idmint_node::Node;
use idmint_store::MemoryAuthority;
use std::sync::Arc;
use std::time::Instant;
use tower::ServiceExt;

/// Sends `n` requests for `uri`, each answer read to its end; returns the bytes read.
#[inline(never)]
fn measure(rt: &tokio::runtime::Runtime, router: &Router, uri: &str, n: u64) -> usize {
    rt.block_on(async {
        let mut bytes = 0;
        for _ in 0..n {
            let request = Request::get(uri).body(Body::empty()).unwrap();
            let answer = router.clone().oneshot(request).await.unwrap();
            assert!(answer.status().is_success(), "{uri}: {}", answer.status());
            bytes += to_bytes(answer.into_body(), usize::MAX)
                .await
                .unwrap()
                .len();
        }
        bytes
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_else(|| "photos?count=1".into());
    let n: u64 = args.next().map_or(20_000, |s| s.parse().unwrap());
    let uri = format!("/v1/ids/{target}");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = rt
        .block_on(Node::start(
            NodeConfig::default(),
            Arc::new(MemoryAuthority::new()),
        ))
        .unwrap();
    let router = idmint_node::http::router(node);
    // Warm up: create the namespace, let its buffer fill and its sizing settle.
    measure(&rt, &router, &uri, 2_000);

    let started = Instant::now();
    let bytes = measure(&rt, &router, &uri, n);
    let elapsed = started.elapsed();
    println!(
        "{n} requests for {uri}: {:.0} ns/request (wall clock), {} bytes/answer",
        elapsed.as_nanos() as f64 / n as f64,
        bytes as u64 / n
    );
}
