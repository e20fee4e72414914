//! Paired runs for the hot-path targets (issue 12 item 2), robust to a shared, loaded machine:
//! idmint's entry and its peer run in short alternating slices (the order flips every pair), and
//! each pair gives one ratio `peer time / idmint time` (above 1: idmint is faster). Load that
//! drifts over seconds hits both halves of a pair alike, so the median of the pair ratios is far
//! steadier than a ratio of two medians taken minutes apart.
//!
//! For 1 thread a slice is timed twice: wall time and the thread's CPU time
//! (`/proc/thread-self/schedstat`, nanoseconds on a CPU), which leaves out time spent descheduled.
//! For 2 threads, wall time of the whole (as the summary runner).
//!
//! `cargo run --release --bin pairs [PAIRS] [THREADS]` (default 41 pairs per comparison; THREADS
//! 1 or 2 keeps only those rows, e.g. for a run pinned to one CPU with `taskset -c 1`).

use std::time::Duration;

use idmint_bench::{contenders, Contender, Kind, Scenario};

fn cpu_nanos() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Ids per thread for a slice of about `target`.
fn calibrate(c: &Contender, threads: usize, target: Duration) -> u64 {
    let mut n = 10_000u64;
    let mut d = (c.run)(threads, n);
    while d < Duration::from_millis(5) && n < 1 << 34 {
        n *= 4;
        d = (c.run)(threads, n);
    }
    ((n as f64 * target.as_secs_f64() / d.as_secs_f64()) as u64).max(1)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn quartiles(v: &mut [f64]) -> (f64, f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (v[0], q(0.25), q(0.75), v[v.len() - 1])
}

fn main() {
    let pairs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(41);
    let only_threads: Option<usize> = std::env::args().nth(2).and_then(|a| a.parse().ok());
    let all = contenders();
    let find = |scenario: Scenario, kind: Kind, name: &str| {
        *all.iter()
            .find(|c| c.scenario == scenario && c.kind == kind && c.name.contains(name))
            .expect("contender")
    };
    let comparisons = [
        (Scenario::Wide, "ferroid AtomicSnowflakeGenerator", 1usize),
        (Scenario::Wide, "ferroid AtomicSnowflakeGenerator", 2),
        (Scenario::Ulid, "ferroid LockMonoUlidGenerator", 1),
        (Scenario::Ulid, "ferroid LockMonoUlidGenerator", 2),
    ];
    println!(
        "{pairs} pairs per row, slices of ~20 ms, order flipped every pair; load average before: {}\n",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    println!("| scenario | threads | peer | idmint ns/id (wall, median) | peer ns/id | ratio peer/idmint, wall: median [IQR] (min-max) | CPU time: median [IQR] |");
    println!("|---|---:|---|---:|---:|---|---|");
    for (scenario, peer_name, threads) in comparisons {
        if only_threads.is_some_and(|t| t != threads) {
            continue;
        }
        let mine = find(scenario, Kind::Idmint, "idmint");
        let peer = find(scenario, Kind::Peer, peer_name);
        let target = Duration::from_millis(20);
        let n_mine = calibrate(&mine, threads, target);
        let n_peer = calibrate(&peer, threads, target);
        let ids = |n: u64| (n * threads as u64) as f64;
        let (mut wall_ratio, mut cpu_ratio, mut ns_mine, mut ns_peer) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..pairs {
            let slice = |c: &Contender, n: u64| {
                let cpu0 = cpu_nanos();
                let wall = (c.run)(threads, n);
                let cpu = cpu_nanos() - cpu0;
                (wall.as_nanos() as f64 / ids(n), cpu as f64 / ids(n))
            };
            let (m, p) = if i % 2 == 0 {
                let m = slice(&mine, n_mine);
                (m, slice(&peer, n_peer))
            } else {
                let p = slice(&peer, n_peer);
                (slice(&mine, n_mine), p)
            };
            wall_ratio.push(p.0 / m.0);
            if threads == 1 && m.1 > 0.0 {
                cpu_ratio.push(p.1 / m.1);
            }
            ns_mine.push(m.0);
            ns_peer.push(p.0);
        }
        let (lo, q1, q3, hi) = quartiles(&mut wall_ratio.clone());
        let cpu = if cpu_ratio.is_empty() {
            "-".to_owned()
        } else {
            let (_, c1, c3, _) = quartiles(&mut cpu_ratio.clone());
            format!("{:.2} [{c1:.2}-{c3:.2}]", median(&mut cpu_ratio))
        };
        println!(
            "| {} | {threads} | {} | {:.1} | {:.1} | {:.2} [{q1:.2}-{q3:.2}] ({lo:.2}-{hi:.2}) | {cpu} |",
            scenario.id(),
            peer.name,
            median(&mut ns_mine),
            median(&mut ns_peer),
            median(&mut wall_ratio),
        );
    }
    println!(
        "\nload average after: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
