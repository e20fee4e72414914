//! `idmint-sim`: runs seeds of the deterministic simulation.
//!
//! `idmint-sim --seeds N [--first S] [--bug NAME|all] [--steps K]`: runs seeds `S..S+N` with
//! the bug planted (none by default) and stops at the first violation, printing its seed.
//! `--bug all` finds, for every planted bug, the first seed that catches it. The bugs of the
//! real crates need `--features planted`. `--bug all --rate` counts, for every bug, the seeds
//! that catch it:
//! `cargo run --release -p idmint-sim --features planted -- --bug all --seeds 10000`.
//!
//! `--world nodes` runs the production world (real nodes, [`idmint_sim::hosts`]) instead, with
//! the same flags (its bugs: `--bug giveback-unknown-kept|kept-without-claim|all`, which need
//! `--features planted`); `--trace` prints a single seed's whole interleaving (with `--bug`, the
//! catching seed's), `--print` a failing run's last lines; `--jobs J` runs clean seeds on `J`
//! threads.

use idmint_sim::{bugs, run, Bugs, STEPS};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let num = |flag: &str, default: u64| get(flag).and_then(|v| v.parse().ok()).unwrap_or(default);
    if get("--world").as_deref() == Some("nodes") {
        return nodes(&args, &num);
    }
    let seeds = num("--seeds", 1000);
    let first = num("--first", 0);
    let steps = num("--steps", STEPS);
    let bug = get("--bug");
    let started = Instant::now();
    let rate = args.iter().any(|a| a == "--rate");
    match bug.as_deref() {
        Some("all") if rate => {
            // For every bug, how many of the seeds catch it: 1 / rate is the mean number of
            // seeds to detection.
            for b in bugs::ALL.iter().filter(|b| Bugs(b.bit).available()) {
                let caught = (first..first + seeds)
                    .filter(|&seed| run(seed, Bugs(b.bit), steps).violation.is_some())
                    .count() as u64;
                let mean = if caught == 0 {
                    "never".to_string()
                } else {
                    format!("{:.1}", seeds as f64 / caught as f64)
                };
                println!(
                    "{:<34} {caught:>6} of {seeds} seeds; mean seeds to detection {mean}",
                    b.name
                );
            }
        }
        Some("all") => {
            let mut missed = 0;
            for b in bugs::ALL {
                if !Bugs(b.bit).available() {
                    println!("{:<34} needs --features planted", b.name);
                    missed += 1;
                    continue;
                }
                let t = Instant::now();
                let found = (first..first + seeds)
                    .map(|seed| run(seed, Bugs(b.bit), steps))
                    .find(|o| o.violation.is_some());
                match found {
                    Some(o) => println!(
                        "{:<34} caught at seed {} ({} seeds, {:.2}s): {}",
                        b.name,
                        o.seed,
                        o.seed - first + 1,
                        t.elapsed().as_secs_f64(),
                        o.violation.unwrap_or_default()
                    ),
                    None => {
                        missed += 1;
                        println!("{:<34} NOT caught in {seeds} seeds", b.name);
                    }
                }
            }
            if missed > 0 {
                return ExitCode::FAILURE;
            }
        }
        other => {
            let planted = match other {
                None => Bugs::default(),
                Some(name) => match bugs::by_name(name) {
                    Some(b) if !Bugs(b.bit).available() => {
                        eprintln!("{name} is planted in idmint-core or idmint-store: build with --features planted");
                        return ExitCode::FAILURE;
                    }
                    Some(b) => Bugs(b.bit),
                    None => {
                        eprintln!("unknown bug {name}; one of:");
                        for b in bugs::ALL {
                            eprintln!("  {:<34} {} ({})", b.name, b.what, b.place);
                        }
                        return ExitCode::FAILURE;
                    }
                },
            };
            let mut ids = 0;
            for seed in first..first + seeds {
                let o = run(seed, planted, steps);
                ids += o.ids;
                if seeds == 1 {
                    println!(
                        "seed {seed}: trace {:016x}, {} steps, {} ids ({} of the strict namespace, {} of the shard namespace)",
                        o.trace, o.step, o.ids, o.strict_ids, o.shard_ids
                    );
                }
                if let Some(v) = o.violation {
                    println!(
                        "seed {seed}: violation at step {}: {v}\nreplay: idmint-sim --first {seed} --seeds 1{} (trace {:016x})",
                        o.step,
                        other.map(|b| format!(" --bug {b}")).unwrap_or_default(),
                        o.trace
                    );
                    return ExitCode::FAILURE;
                }
            }
            let secs = started.elapsed().as_secs_f64();
            println!(
                "{seeds} seeds, no violation; {ids} ids; {:.1}s, {:.0} seeds/s",
                secs,
                seeds as f64 / secs
            );
        }
    }
    ExitCode::SUCCESS
}

/// The production world's runs (`--world nodes`).
fn nodes(args: &[String], num: &dyn Fn(&str, u64) -> u64) -> ExitCode {
    use idmint_sim::hosts;
    let seeds = num("--seeds", 100);
    let first = num("--first", 0);
    let steps = num("--steps", hosts::STEPS);
    let flag = |f: &str| args.iter().any(|a| a == f);
    let bug = args
        .iter()
        .position(|a| a == "--bug")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let chosen: Vec<&idmint_sim::Bug> = match bug.as_deref() {
        None => Vec::new(),
        Some("all") => hosts::BUGS.iter().collect(),
        Some(name) => match hosts::BUGS.iter().find(|b| b.name == name) {
            Some(b) => vec![b],
            None => {
                eprintln!("unknown bug {name}; one of:");
                for b in hosts::BUGS {
                    eprintln!("  {:<24} {} ({})", b.name, b.what, b.place);
                }
                return ExitCode::FAILURE;
            }
        },
    };
    if !chosen.is_empty() && !hosts::PLANTED {
        eprintln!("the node's bugs need --features planted");
        return ExitCode::FAILURE;
    }
    let print = |r: &hosts::Report| {
        for line in &r.interleaving {
            println!("  {line}");
        }
    };
    if !chosen.is_empty() && flag("--rate") {
        // For each bug, how many of the seeds catch it: 1 / rate is the mean number of seeds
        // to detection.
        for b in chosen {
            let mut caught = 0u64;
            for seed in first..first + seeds {
                match hosts::run(seed, b.bit, steps) {
                    Ok(r) if r.violation.is_some() => caught += 1,
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            let mean = if caught == 0 {
                "never".to_string()
            } else {
                format!("{:.1}", seeds as f64 / caught as f64)
            };
            println!(
                "{:<24} {caught:>6} of {seeds} seeds; mean seeds to detection {mean}",
                b.name
            );
        }
        return ExitCode::SUCCESS;
    }
    if !chosen.is_empty() {
        let mut missed = false;
        for b in chosen {
            let t = Instant::now();
            let found =
                (first..first + seeds).find_map(|seed| match hosts::run(seed, b.bit, steps) {
                    Ok(r) if r.violation.is_some() => Some(Ok(r)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                });
            match found {
                Some(Ok(r)) => {
                    println!(
                        "{:<24} caught at seed {} ({} seeds, {:.2}s) at step {}: {}",
                        b.name,
                        r.seed,
                        r.seed - first + 1,
                        t.elapsed().as_secs_f64(),
                        r.steps,
                        r.violation.clone().unwrap_or_default()
                    );
                    if flag("--trace") {
                        match hosts::run_traced(r.seed, b.bit, steps) {
                            Ok(all) => print(&all),
                            Err(e) => eprintln!("{e}"),
                        }
                    } else if flag("--print") {
                        print(&r);
                    }
                }
                Some(Err(e)) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
                None => {
                    missed = true;
                    println!("{:<24} NOT caught in {seeds} seeds", b.name);
                }
            }
        }
        return if missed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let started = Instant::now();
    let jobs = num("--jobs", 1).max(1);
    if jobs > 1 && seeds > 1 && !flag("--trace") {
        return nodes_in_parallel(first, seeds, steps, jobs, started);
    }
    let mut ids = 0;
    for seed in first..first + seeds {
        let ran = if flag("--trace") {
            hosts::run_traced(seed, 0, steps)
        } else {
            hosts::run(seed, 0, steps)
        };
        let r = match ran {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        ids += r.ids;
        if seeds == 1 {
            println!(
                "seed {seed}: trace {:016x}, {} steps, {} ids",
                r.trace, r.steps, r.ids
            );
            if flag("--trace") {
                print(&r);
            }
        }
        if let Some(v) = &r.violation {
            println!("seed {seed}: violation at step {}: {v}", r.steps);
            print(&r);
            println!(
                "replay: idmint-sim --world nodes --first {seed} --seeds 1 --trace (trace {:016x})",
                r.trace
            );
            return ExitCode::FAILURE;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{seeds} seeds of the production world, no violation; {ids} ids; {secs:.1}s, {:.1} seeds/s",
        seeds as f64 / secs
    );
    ExitCode::SUCCESS
}

/// Clean runs of the production world on `jobs` threads (each seed on one thread, whose
/// thread-local switches it sets itself): the same verdicts as one thread, and the lowest
/// failing seed, since a thread skips only seeds above the lowest failure found so far.
fn nodes_in_parallel(first: u64, seeds: u64, steps: u64, jobs: u64, started: Instant) -> ExitCode {
    use idmint_sim::hosts;
    use std::sync::atomic::{AtomicU64, Ordering};
    let lowest_failure = AtomicU64::new(u64::MAX);
    let results: Vec<Result<(u64, Option<hosts::Report>), String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|j| {
                let lowest_failure = &lowest_failure;
                scope.spawn(move || {
                    let mut ids = 0;
                    let mut seed = first + j;
                    while seed < first + seeds && seed < lowest_failure.load(Ordering::Relaxed) {
                        let r = hosts::run(seed, 0, steps).map_err(|e| e.to_string())?;
                        ids += r.ids;
                        if r.violation.is_some() {
                            lowest_failure.fetch_min(seed, Ordering::Relaxed);
                            return Ok((ids, Some(r)));
                        }
                        seed += jobs;
                    }
                    Ok((ids, None))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a seed's thread panicked".to_string()))
            })
            .collect()
    });
    let mut ids = 0;
    let mut failed: Option<hosts::Report> = None;
    for r in results {
        match r {
            Ok((n, report)) => {
                ids += n;
                if let Some(report) = report {
                    if failed.as_ref().is_none_or(|f| report.seed < f.seed) {
                        failed = Some(report);
                    }
                }
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(r) = failed {
        println!(
            "seed {}: violation at step {}: {}",
            r.seed,
            r.steps,
            r.violation.clone().unwrap_or_default()
        );
        for line in &r.interleaving {
            println!("  {line}");
        }
        println!(
            "replay: idmint-sim --world nodes --first {} --seeds 1 --trace (trace {:016x})",
            r.seed, r.trace
        );
        return ExitCode::FAILURE;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{seeds} seeds of the production world on {jobs} threads, no violation; {ids} ids; {secs:.1}s, {:.1} seeds/s",
        seeds as f64 / secs
    );
    ExitCode::SUCCESS
}
