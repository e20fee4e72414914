//! A process making local snowflake ids, for the conformance suite's process cases
//! (clients/conformance/README.md, "Local snowflake workers"; the same protocol in every
//! language): `local_snowflake_worker URL NAMESPACE COUNT TTL_MS`.
//!
//! Leases a worker id of NAMESPACE with a lease of TTL_MS (floor recorded TTL/2 ahead, margin
//! and floor wait TTL/5), retrying a full pool or an unavailable node for 30 s; prints
//! `worker N`, then each id on its own line as it is made (pausing 1 ms after every 10), and
//! `error CODE` when `next` fails (once per run of one code; it keeps trying every
//! millisecond). Stops after COUNT ids (0:
//! never) or when its standard input closes, then closes the handle (releasing the lease) and
//! prints `closed`. A refusal at lease time prints `error CODE` and exits with status 2.

use idmint_client::{Client, ClientError, LocalSnowflakeConfig};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn code(e: &ClientError) -> String {
    e.code().unwrap_or("error").to_owned()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, ns, count, ttl_ms] = args.as_slice() else {
        return Err("usage: local_snowflake_worker URL NAMESPACE COUNT TTL_MS".into());
    };
    let count: u64 = count.parse()?;
    let ttl = Duration::from_millis(ttl_ms.parse()?);
    let mut config = LocalSnowflakeConfig::default();
    config.ttl = ttl;
    config.floor_ahead = ttl / 2;
    config.safety_margin = ttl / 5;
    config.max_floor_wait = ttl / 5;
    let stop = Arc::new(AtomicBool::new(false));
    let stdin_stop = stop.clone();
    std::thread::spawn(move || {
        for _ in std::io::stdin().lock().lines() {}
        stdin_stop.store(true, Ordering::SeqCst);
    });
    let mut out = std::io::LineWriter::new(std::io::stdout().lock());
    let client = Client::connect([url.clone()]).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let handle = loop {
        match client.local_snowflake_with(ns, config.clone()).await {
            Ok(h) => break h,
            Err(e)
                if (e.is_retryable() || e.code() == Some("worker_pool_full"))
                    && Instant::now() < deadline
                    && !stop.load(Ordering::SeqCst) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => {
                writeln!(out, "error {}", code(&e))?;
                std::process::exit(2);
            }
        }
    };
    writeln!(out, "worker {}", handle.worker())?;
    let mut made = 0u64;
    let mut failing: Option<String> = None;
    while (count == 0 || made < count) && !stop.load(Ordering::SeqCst) {
        match handle.next() {
            Ok(id) => {
                writeln!(out, "{id}")?;
                made += 1;
                failing = None;
            }
            Err(e) => {
                let c = code(&e);
                if failing.as_deref() != Some(c.as_str()) {
                    writeln!(out, "error {c}")?;
                    failing = Some(c);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        if made.is_multiple_of(10) {
            // A steady application, not a benchmark: at most 10,000 ids a second.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    handle.close().await;
    client.close().await;
    writeln!(out, "closed")?;
    Ok(())
}
