//! Criterion benchmarks of idmint-core's generators against peer crates: one group per scenario,
//! one benchmark per contender and thread count (`<contender>/<threads>t`). Throughput is in ids
//! (elements): criterion's `elem/s` is total ids per second over all threads.
//!
//! Each sample is `iter_custom`: the contender builds one shared generator, `threads` threads
//! produce `iters / threads` ids each, and the wall time of the whole is returned.
//! `cargo bench --bench generators -- <filter>` runs a subset, e.g. `-- d_ulid`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use idmint_bench::{contenders, Scenario};

fn generators(c: &mut Criterion) {
    let all = contenders();
    for scenario in Scenario::ALL {
        let mut group = c.benchmark_group(scenario.id());
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1000))
            .throughput(Throughput::Elements(1));
        for contender in all.iter().filter(|c| c.scenario == scenario) {
            for threads in [1usize, 2] {
                let id = format!("{}/{}t", contender.name, threads);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let per_thread = iters.div_ceil(threads as u64).max(1);
                        let elapsed = (contender.run)(threads, per_thread);
                        // Scale to exactly `iters` ids (per_thread * threads may exceed it by 1).
                        elapsed.mul_f64(iters as f64 / (per_thread * threads as u64) as f64)
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, generators);
criterion_main!(benches);
