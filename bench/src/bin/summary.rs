//! The summary runner: its own timed runs of every contender (warm-up, then the median of 5
//! runs of a fixed number of ids per thread), printed as markdown tables with the ratio
//! idmint/peer per scenario and thread count, and the issue-2 targets checked.
//!
//! `cargo run --release --bin summary` (bench/run.sh runs it after the criterion benches).
//! Also writes the report to `target/summary.md`.

use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idmint_bench::{contenders, Contender, Kind, Scenario};

/// Timed runs per figure: 5, or `BENCH_RUNS` from the environment.
fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5)
}
const THREADS: [usize; 2] = [1, 2];
/// Twitter-layout ids per second per node: 4096 per ms.
const TWITTER_CAP: f64 = 4_096_000.0;

struct Measured {
    /// Median ids/s over the runs, and the lowest and highest.
    median: f64,
    min: f64,
    max: f64,
    runs: usize,
    ids_per_run: u64,
}

fn rate(threads: usize, per_thread: u64, d: Duration) -> f64 {
    (threads as u64 * per_thread) as f64 / d.as_secs_f64()
}

/// How many ids per thread one timed run of `c` on `threads` threads uses, found by growing
/// the run until it lasts 20 ms (which also warms it up), then scaling to the target length.
fn calibrate(c: &Contender, threads: usize) -> u64 {
    if let Some(total) = c.fixed_total {
        black_box((c.run)(threads, 10_000));
        return total / threads as u64;
    }
    let mut per_thread = 10_000u64;
    let mut d = (c.run)(threads, per_thread);
    while d < Duration::from_millis(20) && per_thread < 1 << 34 {
        per_thread *= 4;
        d = (c.run)(threads, per_thread);
    }
    // Clock-limited runs are longer so that a partly used first and last millisecond weigh
    // at most ~0.25%.
    let target = match c.scenario {
        Scenario::Twitter => Duration::from_millis(400),
        _ => Duration::from_millis(150),
    };
    let per_thread = ((per_thread as f64 * target.as_secs_f64() / d.as_secs_f64()) as u64).max(1);
    // Warm-up at the final size.
    black_box((c.run)(threads, per_thread));
    per_thread
}

/// Measures every (contender, threads) pair of one scenario. The timed runs are interleaved
/// round-robin (run 1 of every pair, then run 2, ...) so that a burst of load from other
/// processes spreads over all contenders instead of sinking one.
fn measure_scenario(cs: &[Contender]) -> Vec<[Measured; 2]> {
    let sizes: Vec<[u64; 2]> = cs
        .iter()
        .map(|c| {
            THREADS.map(|t| {
                eprintln!("calibrating {} / {} / {} thread(s)", c.scenario.id(), c.name, t);
                calibrate(c, t)
            })
        })
        .collect();
    let mut rates: Vec<[Vec<f64>; 2]> = cs.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for round in 0..runs() {
        for (i, c) in cs.iter().enumerate() {
            for (j, &t) in THREADS.iter().enumerate() {
                // One long run suffices for a fixed-total contender.
                if c.fixed_total.is_some() && round > 0 {
                    continue;
                }
                let n = sizes[i][j];
                rates[i][j].push(rate(t, n, (c.run)(t, n)));
            }
        }
    }
    rates
        .into_iter()
        .enumerate()
        .map(|(i, pair)| {
            let mut j = 0;
            pair.map(|mut v| {
                v.sort_by(f64::total_cmp);
                let m = Measured {
                    median: v[v.len() / 2],
                    min: v[0],
                    max: v[v.len() - 1],
                    runs: v.len(),
                    ids_per_run: sizes[i][j] * THREADS[j] as u64,
                };
                j += 1;
                m
            })
        })
        .collect()
}

/// Nanoseconds per call of `f`, median of 5 runs of 2M calls.
fn ns_per_call(mut f: impl FnMut() -> u64) -> f64 {
    const N: u64 = 2_000_000;
    let mut v: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..N {
                black_box(f());
            }
            start.elapsed().as_nanos() as f64 / N as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[2]
}

fn fmt_rate(r: f64) -> String {
    if r >= 1e9 {
        format!("{:.2} G/s", r / 1e9)
    } else if r >= 1e6 {
        format!("{:.2} M/s", r / 1e6)
    } else {
        format!("{:.1} k/s", r / 1e3)
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn main() {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        out,
        "machine: {cores} cores, `{}`; {} timed runs per figure after warm-up, interleaved across contenders; median shown (min-max in brackets)\n",
        cpu_model(),
        runs()
    );

    // The cost of the primitives the generators' hot paths are made of.
    let origin = Instant::now();
    let atomic = AtomicU64::new(0);
    let prims = [
        (
            "Instant::elapsed (monotonic clock, vDSO)",
            ns_per_call(|| origin.elapsed().as_nanos() as u64),
        ),
        (
            "SystemTime::now (wall clock, vDSO)",
            ns_per_call(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            }),
        ),
        (
            "rand 0.9 rand::rng().next_u64() (idmint's random source)",
            ns_per_call(|| {
                use rand::RngCore;
                rand::rng().next_u64()
            }),
        ),
        (
            "u64 division by a runtime divisor (Layout::unit_nanos, 1_000_000)",
            {
                let mut x = 1_780_000_000_000_000_000u64;
                let unit = black_box(1_000_000u64);
                ns_per_call(move || {
                    x = x.wrapping_add(7);
                    black_box(x) / unit
                })
            },
        ),
        (
            "u64 division by the constant 1_000_000 (compiled to a multiply)",
            {
                let mut x = 1_780_000_000_000_000_000u64;
                ns_per_call(move || {
                    x = x.wrapping_add(7);
                    black_box(x) / 1_000_000
                })
            },
        ),
        (
            "AtomicU64 compare_exchange, uncontended",
            ns_per_call(|| {
                let v = atomic.load(Ordering::Relaxed);
                let _ = atomic.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed);
                v
            }),
        ),
    ];
    let _ = writeln!(out, "### Cost of the hot-path primitives (1 thread)\n");
    let _ = writeln!(out, "| primitive | ns per call |\n|---|---:|");
    for (name, ns) in prims {
        let _ = writeln!(out, "| {name} | {ns:.1} |");
    }
    let _ = writeln!(out);
    eprint!("{out}");

    // Optional arguments: scenario ids (or parts of them) to run, e.g. `a_twitter d_`.
    let filter: Vec<String> = std::env::args().skip(1).collect();
    let all: Vec<Contender> = contenders()
        .into_iter()
        .filter(|c| filter.is_empty() || filter.iter().any(|f| c.scenario.id().contains(f.as_str())))
        .collect();
    let _ = writeln!(out, "load average before the runs: {}\n", loadavg());
    let mut results: Vec<(Contender, [Measured; 2])> = Vec::new();
    for scenario in Scenario::ALL {
        let cs: Vec<Contender> = all.iter().filter(|c| c.scenario == scenario).copied().collect();
        for (c, m) in cs.iter().zip(measure_scenario(&cs)) {
            results.push((*c, m));
        }
    }

    let mut verdicts = Vec::new();
    for scenario in Scenario::ALL {
        let rows: Vec<&(Contender, [Measured; 2])> =
            results.iter().filter(|(c, _)| c.scenario == scenario).collect();
        let Some(mine) = rows.iter().find(|(c, _)| c.kind == Kind::Idmint) else {
            continue;
        };
        let twitter = scenario == Scenario::Twitter;
        let _ = writeln!(out, "### {}\n", scenario.title());
        let _ = write!(
            out,
            "| contender | same guarantee | 1 thread | ratio idmint/peer | 2 threads | ratio idmint/peer |"
        );
        let _ = writeln!(out, "{}", if twitter { " % of cap 1t | % of cap 2t |" } else { "" });
        let _ = writeln!(
            out,
            "|---|:-:|---:|---:|---:|---:|{}",
            if twitter { "---:|---:|" } else { "" }
        );
        for (c, m) in &rows {
            let _ = write!(out, "| {} | {} |", c.name, if c.same_guarantee { "yes" } else { "no" });
            for (i, mm) in m.iter().enumerate() {
                let spread = if mm.runs > 1 {
                    format!(" ({}-{})", fmt_rate(mm.min), fmt_rate(mm.max))
                } else {
                    format!(" (1 run of {}M ids)", mm.ids_per_run / 1_000_000)
                };
                let ratio = match c.kind {
                    Kind::Idmint => "-".to_owned(),
                    Kind::IdmintVariant => "(variant)".to_owned(),
                    Kind::Peer => format!("{:.2}", mine.1[i].median / mm.median),
                };
                let _ = write!(out, " {}{} | {} |", fmt_rate(mm.median), spread, ratio);
            }
            if twitter {
                for mm in m.iter() {
                    let _ = write!(out, " {:.1}% |", 100.0 * mm.median / TWITTER_CAP);
                }
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(out);

        // Targets.
        for (i, t) in THREADS.iter().enumerate() {
            let v = mine.1[i].median;
            match scenario {
                Scenario::Twitter => verdicts.push(format!(
                    "twitter layout, {t} thread(s): {:.1}% of 4.096M ids/s (target >= 99%{}): {}",
                    100.0 * v / TWITTER_CAP,
                    if *t == 1 { "" } else { ", stated for 1 thread" },
                    if v >= 0.99 * TWITTER_CAP { "MET" } else { "MISSED" }
                )),

                Scenario::Buffer => {
                    let ok = if *t == 1 { v >= 1e8 } else { v >= 1e8 && v >= mine.1[0].median };
                    verdicts.push(format!(
                        "buffered sequence, {t} thread(s): {} (target >= 100M/s{}): {}",
                        fmt_rate(v),
                        if *t == 1 { "" } else { " and >= the 1-thread figure" },
                        if ok { "MET" } else { "MISSED" }
                    ));
                }
                _ => {
                    let best = rows
                        .iter()
                        .filter(|(c, _)| c.kind == Kind::Peer && c.same_guarantee)
                        .max_by(|a, b| a.1[i].median.total_cmp(&b.1[i].median));
                    if let Some((peer, pm)) = best {
                        let ratio = v / pm[i].median;
                        for (var, vm) in rows.iter().filter(|(c, _)| c.kind == Kind::IdmintVariant) {
                            verdicts.push(format!(
                                "{}, {t} thread(s), variant '{}': ratio {:.2} vs {} (for comparison, not a target)",
                                scenario.id(),
                                var.name,
                                vm[i].median / pm[i].median,
                                peer.name
                            ));
                        }
                        verdicts.push(format!(
                            "{}, {t} thread(s): ratio {:.2} vs the fastest same-guarantee peer ({}) (target >= 1.0): {}",
                            scenario.id(),
                            ratio,
                            peer.name,
                            if ratio >= 1.0 { "MET" } else { "MISSED" }
                        ));
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "load average after the runs: {}\n", loadavg());
    let _ = writeln!(out, "### Targets\n");
    for v in &verdicts {
        let _ = writeln!(out, "- {v}");
    }
    let _ = writeln!(out, "\n### Guarantees\n");
    for c in &all {
        let _ = writeln!(out, "- **{}** ({}): {}", c.name, c.scenario.id(), c.guarantee);
    }
    print!("{out}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/summary.md");
    if let Err(e) = std::fs::write(path, &out) {
        eprintln!("could not write {path}: {e}");
    }
}
