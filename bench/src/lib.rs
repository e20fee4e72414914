//! The contenders of idmint-core's generator benchmarks, shared by the criterion benches
//! (`benches/generators.rs`) and the summary runner (`src/bin/summary.rs`).
//!
//! Every contender is one function `fn(threads, ids_per_thread) -> Duration`: it builds one
//! generator (shared by all threads, as a service would share it), starts `threads` threads on a
//! barrier, has each produce exactly `ids_per_thread` ids through `black_box`, and returns the
//! wall time from the first thread's start to the last thread's end. The per-id loop is
//! monomorphised for each contender: no dynamic dispatch per id.
//!
//! What it does not do: check the ids (the crates' own tests do); it only makes sure the
//! compiler cannot drop the work.

use std::hint::black_box;
use std::sync::{Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

use idmint_core::block::Block;
use idmint_core::snowflake::next_id_spinning;
use idmint_core::{
    Buffer, BufferConfig, BufferPolicy, CoarseClock, FieldOrder, Layout, LayoutSpec, SharedBlock,
    Sizing, SnowflakeGenerator, SystemClock, UlidGenerator, Uuid7Generator,
};

/// The benchmark scenarios of issue 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// (a) Twitter layout (41/10/12, ms): the clock caps one node at 4,096 ids/ms.
    Twitter,
    /// (b) A wide-sequence layout (41 ts / 0 node / 22 seq, ms): the clock is not the limit.
    Wide,
    /// (c) Ids from a leased sequence block through `Buffer` / `SharedBlock`.
    Buffer,
    /// (d) UUIDv7.
    Uuid7,
    /// (d) ULID.
    Ulid,
}

impl Scenario {
    /// All scenarios, in report order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Twitter,
        Scenario::Wide,
        Scenario::Buffer,
        Scenario::Uuid7,
        Scenario::Ulid,
    ];

    /// Short name, used in criterion ids.
    pub fn id(self) -> &'static str {
        match self {
            Scenario::Twitter => "a_twitter",
            Scenario::Wide => "b_wide",
            Scenario::Buffer => "c_buffer",
            Scenario::Uuid7 => "d_uuid7",
            Scenario::Ulid => "d_ulid",
        }
    }

    /// Heading in the summary.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::Twitter => "(a) snowflake, twitter layout 41/10/12 ms (cap 4,096,000 ids/s per node)",
            Scenario::Wide => "(b) snowflake, wide sequence (idmint/ferroid 41/0/22, idgenerator 1 worker + 21 seq bits)",
            Scenario::Buffer => "(c) buffered sequence block (Buffer, refilled from a SharedBlock in chunks of 4096)",
            Scenario::Uuid7 => "(d) UUIDv7",
            Scenario::Ulid => "(d) ULID",
        }
    }
}

/// Who a contender is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// idmint-core as shipped, used as documented: the numerator of every ratio.
    Idmint,
    /// idmint-core used another way, or on another clock: shown for comparison only.
    IdmintVariant,
    /// A peer crate.
    Peer,
}

/// One generator under test.
#[derive(Clone, Copy)]
pub struct Contender {
    /// Which scenario it belongs to.
    pub scenario: Scenario,
    /// Name in the tables and criterion ids.
    pub name: &'static str,
    /// idmint's headline entry (the numerator of the ratios), one of its variants, or a peer.
    pub kind: Kind,
    /// What it guarantees, briefly.
    pub guarantee: &'static str,
    /// Whether it gives the same guarantee as idmint's entry (monotonic across threads from one
    /// shared generator, never an id ahead of the clock for snowflakes): the targets compare
    /// against the fastest such peer.
    pub same_guarantee: bool,
    /// Runs `threads` threads of `ids_per_thread` ids each; returns the wall time.
    pub run: fn(usize, u64) -> Duration,
    /// For contenders whose short runs are not representative (idgenerator's "drift" issues
    /// ids up to 2 s ahead of the clock and then stalls): the total id count of one run.
    pub fixed_total: Option<u64>,
}

/// Runs `work(ids_per_thread)` on `threads` threads started together; returns the wall time
/// from the earliest start to the latest end. With one thread, runs inline.
pub fn drive(threads: usize, ids_per_thread: u64, work: impl Fn(u64) + Sync) -> Duration {
    if threads <= 1 {
        let start = Instant::now();
        work(ids_per_thread);
        return start.elapsed();
    }
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    work(ids_per_thread);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("threads > 0");
    let last = spans.iter().map(|s| s.1).max().expect("threads > 0");
    last - first
}

// ---------------------------------------------------------------------------------------------
// (a) twitter layout

const NODE: u64 = 1;

fn idmint_twitter(threads: usize, n: u64) -> Duration {
    let g = SnowflakeGenerator::new(Layout::twitter(), NODE, CoarseClock::new(), None)
        .expect("generator");
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(next_id_spinning(&g).expect("time left"));
        }
    })
}

fn ferroid_twitter(threads: usize, n: u64) -> Duration {
    use ferroid::generator::AtomicSnowflakeGenerator;
    use ferroid::id::SnowflakeTwitterId;
    use ferroid::time::{MonotonicClock, TWITTER_EPOCH};
    let g: AtomicSnowflakeGenerator<SnowflakeTwitterId, _> =
        AtomicSnowflakeGenerator::new(NODE, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_id(|_| std::hint::spin_loop()));
        }
    })
}

fn snowflaked_twitter(threads: usize, n: u64) -> Duration {
    let g = snowflaked::sync::Generator::new(NODE as u16);
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.generate::<u64>());
        }
    })
}

fn rs_snowflake_twitter(threads: usize, n: u64) -> Duration {
    // machine_id 0, node_id 1: its 5 + 5 bits form the 10-bit worker field.
    let g = Mutex::new(snowflake::SnowflakeIdGenerator::new(0, NODE as i32));
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.lock().expect("not poisoned").real_time_generate());
        }
    })
}

/// idgenerator's generators sleep 500 ms when configured, so each configuration is built once
/// and kept (its state carries over from run to run).
fn idgenerator_instance(
    cell: &'static OnceLock<Mutex<idgenerator::CoreIdGenerator>>,
    worker_bits: u8,
    seq_bits: u8,
) -> &'static Mutex<idgenerator::CoreIdGenerator> {
    cell.get_or_init(|| {
        let mut g = idgenerator::CoreIdGenerator::default();
        g.init(
            idgenerator::IdGeneratorOptions::new()
                .worker_id(1)
                .worker_id_bit_len(worker_bits)
                .seq_bit_len(seq_bits),
        )
        .expect("valid idgenerator options");
        Mutex::new(g)
    })
}

fn idgenerator_run(g: &Mutex<idgenerator::CoreIdGenerator>, threads: usize, n: u64) -> Duration {
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.lock().expect("not poisoned").next_id());
        }
    })
}

fn idgenerator_twitter(threads: usize, n: u64) -> Duration {
    static G: OnceLock<Mutex<idgenerator::CoreIdGenerator>> = OnceLock::new();
    idgenerator_run(idgenerator_instance(&G, 10, 12), threads, n)
}

// ---------------------------------------------------------------------------------------------
// (b) wide sequence

/// 41 bits of ms since the twitter epoch, no node, 22 bits of sequence (4.19 billion ids/s).
pub fn wide_layout() -> Layout {
    Layout::new(LayoutSpec {
        timestamp_bits: 41,
        node_bits: 0,
        sequence_bits: 22,
        time_unit: Duration::from_millis(1),
        epoch_unix_ms: 1_288_834_974_657,
        order: FieldOrder::NodeThenSequence,
        max_bits: 63,
    })
    .expect("valid layout")
}

ferroid::define_snowflake_id!(
    /// ferroid's layout for scenario (b): the same bits as [`wide_layout`].
    Wide22Id, u64,
    reserved: 1,
    timestamp: 41,
    machine_id: 0,
    sequence: 22
);

fn idmint_wide(threads: usize, n: u64) -> Duration {
    let g = SnowflakeGenerator::new(wide_layout(), 0, CoarseClock::new(), None).expect("generator");
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(next_id_spinning(&g).expect("time left"));
        }
    })
}

fn ferroid_wide(threads: usize, n: u64) -> Duration {
    use ferroid::generator::AtomicSnowflakeGenerator;
    use ferroid::time::{MonotonicClock, TWITTER_EPOCH};
    let g: AtomicSnowflakeGenerator<Wide22Id, _> =
        AtomicSnowflakeGenerator::new(0, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_id(|_| std::hint::spin_loop()));
        }
    })
}

fn idgenerator_wide(threads: usize, n: u64) -> Duration {
    static G: OnceLock<Mutex<idgenerator::CoreIdGenerator>> = OnceLock::new();
    // worker_id_bit_len + seq_bit_len <= 22 and worker bits >= 1: 21 is its widest sequence.
    idgenerator_run(idgenerator_instance(&G, 1, 21), threads, n)
}

// ---------------------------------------------------------------------------------------------
// (c) buffered sequence block

fn fixed_policy(n: u64) -> BufferPolicy {
    BufferPolicy::new(BufferConfig {
        sizing: Sizing::Fixed(n),
        ..BufferConfig::default()
    })
    .expect("valid policy")
}

/// Chunk size carved from the shared block per refill.
pub const CHUNK: u64 = 4096;

fn idmint_buffer(threads: usize, n: u64) -> Duration {
    if threads <= 1 {
        // One thread: one huge block pushed once (outside the timing), then `next_id()` in a loop.
        let mut buffer = Buffer::new(fixed_policy(n));
        buffer
            .push(Block::new(1, n + 1, 1).expect("non-empty"))
            .expect("first block");
        let start = Instant::now();
        for _ in 0..n {
            black_box(buffer.next_id().expect("buffered"));
        }
        return start.elapsed();
    }
    // Each thread takes whole chunks: room for one partly used chunk per thread.
    let total = threads as u64 * (n + CHUNK);
    let shared = SharedBlock::new(Block::new(1, total + 1, 1).expect("non-empty"));
    drive(threads, n, |n| {
        // Each thread keeps its own buffer, fed lock-free from the shared block.
        let mut buffer = Buffer::new(fixed_policy(CHUNK));
        for _ in 0..n {
            let id = match buffer.next_id() {
                Some(id) => id,
                None => {
                    let chunk = shared.take(CHUNK).expect("shared block holds enough");
                    buffer.push(chunk).expect("chunks increase");
                    buffer.next_id().expect("just refilled")
                }
            };
            black_box(id);
        }
    })
}

// ---------------------------------------------------------------------------------------------
// (d) UUIDv7 and ULID

fn idmint_uuid7(threads: usize, n: u64) -> Duration {
    let g = Uuid7Generator::default();
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_uuid());
        }
    })
}

fn uuid_now_v7(threads: usize, n: u64) -> Duration {
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(uuid::Uuid::now_v7());
        }
    })
}

fn idmint_ulid(threads: usize, n: u64) -> Duration {
    let g = UlidGenerator::default();
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_ulid());
        }
    })
}

/// ferroid's lock-free `AtomicMonoUlidGenerator` needs `target_has_atomic = "128"`, which
/// x86_64-unknown-linux-gnu does not set: `LockMonoUlidGenerator` is its thread-safe monotonic
/// ULID generator here.
fn ferroid_ulid_lock(threads: usize, n: u64) -> Duration {
    use ferroid::generator::LockMonoUlidGenerator;
    use ferroid::id::ULID;
    use ferroid::rand::ThreadRandom;
    use ferroid::time::{MonotonicClock, UNIX_EPOCH};
    let g: LockMonoUlidGenerator<ULID, _, _> =
        LockMonoUlidGenerator::new(MonotonicClock::<1>::with_epoch(UNIX_EPOCH), ThreadRandom);
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_id(|_| std::hint::spin_loop()));
        }
    })
}

fn ferroid_ulid_thread_local(threads: usize, n: u64) -> Duration {
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(ferroid::generator::thread_local::Ulid::new_ulid_mono(
                |_| std::hint::spin_loop(),
            ));
        }
    })
}

fn ulid_generator_mutex(threads: usize, n: u64) -> Duration {
    let g = Mutex::new(ulid::Generator::new());
    drive(threads, n, |n| {
        for _ in 0..n {
            let mut g = g.lock().expect("not poisoned");
            let id = match g.generate() {
                Ok(id) => id,
                // 80 random bits incremented within one ms: practically never.
                Err(overflow) => overflow.commit_overflow_increment(),
            };
            black_box(id);
        }
    })
}

fn ulid_generate(threads: usize, n: u64) -> Duration {
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(ulid::Ulid::generate());
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Variants: the generators on `SystemClock` (no cached readings: one OS clock call per id), for
// comparison with the default `CoarseClock`.

fn idmint_twitter_system(threads: usize, n: u64) -> Duration {
    let g = SnowflakeGenerator::new(Layout::twitter(), NODE, SystemClock::new(), None)
        .expect("generator");
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(next_id_spinning(&g).expect("time left"));
        }
    })
}

fn idmint_wide_system(threads: usize, n: u64) -> Duration {
    let g = SnowflakeGenerator::new(wide_layout(), 0, SystemClock::new(), None).expect("generator");
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(next_id_spinning(&g).expect("time left"));
        }
    })
}

/// Ids claimed 64 at a time with `next_ids` (one clock read and one CAS per batch), as a
/// service answering `count=N` requests would.
fn idmint_wide_batched(threads: usize, n: u64) -> Duration {
    let g = SnowflakeGenerator::new(wide_layout(), 0, CoarseClock::new(), None).expect("generator");
    drive(threads, n, |n| {
        let mut out = Vec::with_capacity(64);
        let mut done = 0;
        while done < n {
            out.clear();
            match g.next_ids(64.min(n - done), &mut out) {
                Ok(k) => done += k,
                Err(idmint_core::NextIdError::SequenceExhausted { .. }) => continue,
                Err(e) => panic!("{e}"),
            }
            for id in &out {
                black_box(*id);
            }
        }
    })
}

fn idmint_uuid7_system(threads: usize, n: u64) -> Duration {
    let g = Uuid7Generator::new(SystemClock::new());
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_uuid());
        }
    })
}

fn idmint_ulid_system(threads: usize, n: u64) -> Duration {
    let g = UlidGenerator::new(SystemClock::new());
    drive(threads, n, |n| {
        for _ in 0..n {
            black_box(g.next_ulid());
        }
    })
}

/// Every contender, in report order; idmint's entry first in each scenario.
pub fn contenders() -> Vec<Contender> {
    use Scenario::*;
    vec![
        Contender {
            scenario: Twitter,
            name: "idmint SnowflakeGenerator",
            kind: Kind::Idmint,
            guarantee: "lock-free, shared; strictly increasing across threads; never ahead of the clock; monotonic clock anchored to wall time (survives wall steps); default CoarseClock (one atomic load, refreshed every ms by a process-wide thread; precise re-read before waiting); returns SequenceExhausted{wait}, caller spins (next_id_spinning)",
            same_guarantee: true,
            run: idmint_twitter,
            fixed_total: None,
        },
        Contender {
            scenario: Twitter,
            name: "idmint + SystemClock",
            kind: Kind::IdmintVariant,
            guarantee: "idmint SnowflakeGenerator on SystemClock (no cached readings: one OS monotonic clock call per id)",
            same_guarantee: true,
            run: idmint_twitter_system,
            fixed_total: None,
        },
        Contender {
            scenario: Twitter,
            name: "ferroid AtomicSnowflakeGenerator",
            kind: Kind::Peer,
            guarantee: "lock-free (AtomicU64 CAS), shared; monotonic; time from MonotonicClock (a background thread ticks an atomic every ms); Pending on exhaustion, caller spins",
            same_guarantee: true,
            run: ferroid_twitter,
            fixed_total: None,
        },
        Contender {
            scenario: Twitter,
            name: "snowflaked sync::Generator",
            kind: Kind::Peer,
            guarantee: "lock-free (AtomicU64 fetch_update), shared; 42/10/12 from the Unix epoch; SystemTime per id; spins inside the CAS closure on exhaustion; panics if the wall clock steps back",
            same_guarantee: true,
            run: snowflaked_twitter,
            fixed_total: None,
        },
        Contender {
            scenario: Twitter,
            name: "rs-snowflake real_time_generate (Mutex)",
            kind: Kind::Peer,
            guarantee: "&mut, shared behind std Mutex; 42/5+5/12 from the Unix epoch; SystemTime per id; spins under the lock on exhaustion; a wall step back re-issues old timestamps (duplicates possible)",
            same_guarantee: true,
            run: rs_snowflake_twitter,
            fixed_total: None,
        },
        Contender {
            scenario: Twitter,
            name: "idgenerator CoreIdGenerator (Mutex)",
            kind: Kind::Peer,
            guarantee: "&mut, shared behind std Mutex; 10 worker + 12 seq bits (4091 ids/ms, 5 reserved); 'drift': on exhaustion borrows future ms (up to 2000) without waiting, then stalls until the clock catches up; ids ahead of the clock",
            same_guarantee: false,
            run: idgenerator_twitter,
            // ~4 s at the 4.09M/s long-run rate: covers whole drift/stall cycles.
            fixed_total: Some(16_000_000),
        },
        Contender {
            scenario: Wide,
            name: "idmint SnowflakeGenerator",
            kind: Kind::Idmint,
            guarantee: "as in (a), layout 41/0/22",
            same_guarantee: true,
            run: idmint_wide,
            fixed_total: None,
        },
        Contender {
            scenario: Wide,
            name: "idmint next_ids(64)",
            kind: Kind::IdmintVariant,
            guarantee: "idmint SnowflakeGenerator::next_ids, 64 ids per claim (one clock read + one CAS per batch); same guarantees",
            same_guarantee: true,
            run: idmint_wide_batched,
            fixed_total: None,
        },
        Contender {
            scenario: Wide,
            name: "idmint + SystemClock",
            kind: Kind::IdmintVariant,
            guarantee: "as (a), on SystemClock",
            same_guarantee: true,
            run: idmint_wide_system,
            fixed_total: None,
        },
        Contender {
            scenario: Wide,
            name: "ferroid AtomicSnowflakeGenerator",
            kind: Kind::Peer,
            guarantee: "as in (a), custom layout 41/0/22 via define_snowflake_id!",
            same_guarantee: true,
            run: ferroid_wide,
            fixed_total: None,
        },
        Contender {
            scenario: Wide,
            name: "idgenerator CoreIdGenerator (Mutex)",
            kind: Kind::Peer,
            guarantee: "as in (a), 1 worker + 21 seq bits (its widest: worker + seq <= 22)",
            same_guarantee: false,
            run: idgenerator_wide,
            fixed_total: None,
        },
        Contender {
            scenario: Buffer,
            name: "idmint Buffer (+ SharedBlock)",
            kind: Kind::Idmint,
            guarantee: "1 thread: one Buffer holding one huge block; 2 threads: one Buffer per thread, refilled lock-free from one SharedBlock in chunks of 4096; strictly increasing per thread, unique across threads",
            same_guarantee: true,
            run: idmint_buffer,
            fixed_total: None,
        },
        Contender {
            scenario: Uuid7,
            name: "idmint Uuid7Generator",
            kind: Kind::Idmint,
            guarantee: "lock-free, shared; strictly increasing across threads and wall steps; 24-bit counter (RFC 9562 method 1) + 50 fresh random bits per id",
            same_guarantee: true,
            run: idmint_uuid7,
            fixed_total: None,
        },
        Contender {
            scenario: Uuid7,
            name: "idmint + SystemClock",
            kind: Kind::IdmintVariant,
            guarantee: "Uuid7Generator on SystemClock (one OS wall clock call per id)",
            same_guarantee: true,
            run: idmint_uuid7_system,
            fixed_total: None,
        },
        Contender {
            scenario: Uuid7,
            name: "uuid Uuid::now_v7 (fast-rng)",
            kind: Kind::Peer,
            guarantee: "process-wide global Mutex<ContextV7>: monotonic within the process, thread-safe; 42-bit counter reseeded each ms + random tail",
            same_guarantee: true,
            run: uuid_now_v7,
            fixed_total: None,
        },
        Contender {
            scenario: Ulid,
            name: "idmint UlidGenerator",
            kind: Kind::Idmint,
            guarantee: "lock-free, shared; strictly increasing across threads and wall steps; 24-bit counter seeded each ms + 56 random bits drawn once per ms (the ULID spec monotonic method)",
            same_guarantee: true,
            run: idmint_ulid,
            fixed_total: None,
        },
        Contender {
            scenario: Ulid,
            name: "idmint + SystemClock",
            kind: Kind::IdmintVariant,
            guarantee: "UlidGenerator on SystemClock (one OS wall clock call per id)",
            same_guarantee: true,
            run: idmint_ulid_system,
            fixed_total: None,
        },
        Contender {
            scenario: Ulid,
            name: "ferroid LockMonoUlidGenerator (parking_lot)",
            kind: Kind::Peer,
            guarantee: "shared behind a parking_lot Mutex (its lock-free AtomicMonoUlidGenerator needs 128-bit atomics, absent on x86_64 Linux); monotonic; random drawn once per ms then +1 per id (no fresh randomness within a ms); ticker-thread clock",
            same_guarantee: true,
            run: ferroid_ulid_lock,
            fixed_total: None,
        },
        Contender {
            scenario: Ulid,
            name: "ulid Generator (Mutex)",
            kind: Kind::Peer,
            guarantee: "&mut, shared behind std Mutex; monotonic (random +1 within a ms); SystemTime per id",
            same_guarantee: true,
            run: ulid_generator_mutex,
            fixed_total: None,
        },
        Contender {
            scenario: Ulid,
            name: "ferroid thread_local new_ulid_mono",
            kind: Kind::Peer,
            guarantee: "one generator per thread: monotonic per thread only, not across threads",
            same_guarantee: false,
            run: ferroid_ulid_thread_local,
            fixed_total: None,
        },
        Contender {
            scenario: Ulid,
            name: "ulid Ulid::generate",
            kind: Kind::Peer,
            guarantee: "not monotonic (fresh 80 random bits each), thread-safe, no shared state",
            same_guarantee: false,
            run: ulid_generate,
            fixed_total: None,
        },
    ]
}
