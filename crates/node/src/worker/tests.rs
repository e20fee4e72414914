//! The worker lease's renewals, floors and clock steps, on tokio's paused time.

#![allow(clippy::unwrap_used)]

use super::*;
use idmint_core::NextIdError;
use idmint_store::MemoryAuthority;
use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic time = tokio's (paused) time; wall time = a start plus that plus a step.
#[derive(Debug)]
struct SteppedClock {
    origin: tokio::time::Instant,
    step_ms: AtomicU64,
}

impl Clock for SteppedClock {
    fn wall_nanos(&self) -> u64 {
        (1_780_000_000_000 + self.step_ms.load(Ordering::SeqCst)) * 1_000_000
            + self.monotonic_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap()
    }
}

/// Worker 0 of group `events` (twitter layout) leased from a memory authority on a
/// [`SteppedClock`], with a 30 s TTL and `floor_ahead`, and kept (renewed) in the
/// background until the returned sender is dropped.
async fn kept_worker(
    floor_ahead: Duration,
) -> (Arc<SteppedClock>, Arc<LeasedWorker>, watch::Sender<bool>) {
    let clock = Arc::new(SteppedClock {
        origin: tokio::time::Instant::now(),
        step_ms: AtomicU64::new(0),
    });
    let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let settings = LeaseSettings {
        ttl: Duration::from_secs(30),
        floor_ahead,
        max_floor_wait: Duration::from_secs(2),
        safety_margin: Duration::from_secs(2),
    };
    let worker = LeasedWorker::acquire(
        NamespaceName::new("events").unwrap(),
        Layout::twitter(),
        WorkerConfig::Fixed(0),
        authority,
        settings,
        SharedClock(clock.clone()),
    )
    .await
    .unwrap();
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(worker.clone().keep(stop));
    (clock, worker, stop_tx)
}

/// Renewals come at least every half `floor_ahead`: with a third of the TTL only, a
/// `floor_ahead` below that (a legal config: `ttl_ms = 30000` and the default 5 s ahead)
/// would let the generator reach the floor between renewals and refuse until the next one.
#[tokio::test(start_paused = true)]
async fn renewals_stay_ahead_of_a_short_floor() {
    let (_clock, worker, _stop_tx) = kept_worker(Duration::from_secs(1)).await;
    // 20 s, well past the 10 s renewal period of before, one id every 50 ms.
    for i in 0..400 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let issued = worker.current().generator().next_id();
        assert!(issued.is_ok(), "at {} ms: {issued:?}", (i + 1) * 50);
    }
}

/// A wall clock stepped 10 s forward under a serving node: once the generator adopts the
/// step, its time is past the floor the last renewal recorded; the first refusal asks for a
/// renewal at once rather than refusing every request until the next periodic one.
#[tokio::test(start_paused = true)]
async fn a_clock_stepped_forward_is_renewed_past_at_once() {
    // Renewed every 10 s (a third of the TTL, half the floor's lead).
    let (clock, worker, _stop_tx) = kept_worker(Duration::from_secs(20)).await;
    let group = NamespaceName::new("events").unwrap();
    assert!(worker.current().generator().next_id().is_ok());

    // Past the floor (20 s ahead) and the expiry (28 s) the last renewal allowed.
    clock.step_ms.fetch_add(30_000, Ordering::SeqCst);
    let generation = worker.current();
    let generator = generation.generator();
    assert!(matches!(
        generator.check_clock(Duration::from_millis(5)),
        idmint_core::ClockCheck::WallAheadAdopted { .. }
    ));
    assert!(matches!(
        generator.next_id(),
        Err(NextIdError::BeyondLimit { .. })
    ));
    let _ = worker.not_issuing(&group);
    drop(generation);
    // One retry period (3 s), well before the next periodic renewal (10 s).
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let id = worker.current().generator().next_id().unwrap();
    let ms = Layout::twitter().decode(id).unwrap().unix_millis();
    assert!(ms >= 1_780_000_030_000, "{ms}: the step was adopted");
}

/// Guards against ids going back in one process: a node whose lease is superseded after its
/// wall clock stepped back 30 s re-acquires another worker id; a generator anchored to the
/// wall clock would issue ids 17.7 s below its previous answer. It starts above the old
/// one's last timestamp.
#[tokio::test(start_paused = true)]
async fn a_new_lease_never_goes_below_what_the_node_issued() {
    let clock = Arc::new(SteppedClock {
        origin: tokio::time::Instant::now(),
        step_ms: AtomicU64::new(30_000),
    });
    let memory = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let authority: Arc<dyn Authority> = memory.clone();
    let group = NamespaceName::new("events").unwrap();
    let settings = LeaseSettings {
        ttl: Duration::from_secs(4),
        floor_ahead: Duration::from_secs(1),
        max_floor_wait: Duration::from_secs(2),
        safety_margin: Duration::from_secs(1),
    };
    let worker = LeasedWorker::acquire(
        group.clone(),
        Layout::twitter(),
        WorkerConfig::Lease,
        authority,
        settings,
        SharedClock(clock.clone()),
    )
    .await
    .unwrap();
    let before = worker.current().generator().next_id().unwrap();
    // The wall clock steps back 30 s; the node stops renewing (a pause) past the TTL, and
    // another node takes its worker id over.
    clock.step_ms.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let leases = memory.worker_leases().unwrap();
    let taken = leases
        .acquire(&LeaseRequest {
            group: group.clone(),
            workers: Layout::twitter().max_node() + 1,
            choice: WorkerChoice::Exactly(0),
            prefer_floor_at_most: None,
            holder: "other lease 1".into(),
            layout: layout_text(&Layout::twitter()),
            ttl: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(taken.worker, 0);
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(worker.clone().keep(stop));
    // Superseded at the next renewal, then a new lease on another worker id.
    let after = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let generation = worker.current();
        let g = generation.generator();
        if g.node() == 0 {
            continue;
        }
        if let Ok(id) = g.next_id() {
            break id;
        }
    };
    let layout = Layout::twitter();
    let (t0, t1) = (
        layout.decode(before).unwrap().unix_millis(),
        layout.decode(after).unwrap().unix_millis(),
    );
    assert!(t1 >= t0, "the new lease's ids went back: {t0} then {t1}");
    drop(stop_tx);
}

#[test]
fn ordinals_are_trailing_numbers() {
    assert_eq!(ordinal_of("web-3"), Some(3));
    assert_eq!(ordinal_of("idmint-12"), Some(12));
    assert_eq!(ordinal_of("web"), None);
    assert_eq!(ordinal_of("web-3a"), None);
    assert_eq!(ordinal_of(""), None);
}

/// A shard range's lease drives one generator per shard of the range (the last range short),
/// each issuing ids of its shard; its release records a floor above every one of them, which
/// the next holder of the range starts above.
#[tokio::test(start_paused = true)]
async fn a_shard_range_issues_each_of_its_shards_and_releases_above_all() {
    let clock = Arc::new(SteppedClock {
        origin: tokio::time::Instant::now(),
        step_ms: AtomicU64::new(0),
    });
    let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let settings = LeaseSettings {
        ttl: Duration::from_secs(30),
        floor_ahead: Duration::from_secs(5),
        max_floor_wait: Duration::from_secs(2),
        safety_margin: Duration::from_secs(2),
    };
    let span = NodeSpan::Shards(crate::config::shards::ShardsConfig {
        logical: 10,
        range: 4,
    });
    let group = NamespaceName::new("photos:shards").unwrap();
    let take = || {
        LeasedWorker::acquire_span(
            group.clone(),
            Layout::instagram(),
            WorkerChoice::Exactly(2),
            span,
            "host pid 1 at http://127.0.0.1:1".into(),
            authority.clone(),
            settings,
            SharedClock(clock.clone()),
        )
    };
    let first = take().await.unwrap();
    let layout = Layout::instagram();
    let mut last = 0;
    {
        let generation = first.current();
        assert!(
            generation.generator_for(7).is_none(),
            "shard 7 is range 1's"
        );
        assert!(
            generation.generator_for(10).is_none(),
            "there is no shard 10"
        );
        for shard in [8, 9] {
            let g = generation.generator_for(shard).unwrap();
            for _ in 0..3 {
                let id = g.next_id().unwrap();
                assert_eq!(layout.decode(id).unwrap().parts.node, shard);
                last = last.max(id);
            }
        }
    }
    // Ids of shard 9 a little later: the release floor must cover them too.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let later = first.current().generator_for(9).unwrap().next_id().unwrap();
    first.release().await;
    assert!(
        matches!(
            take().await.map(|w| w.current().generator_for(9).unwrap().next_id()),
            Ok(Ok(id)) if id > later
        ),
        "the next holder of the range starts above {later}"
    );
    assert!(later > last);
}
