//! The fault scenarios, once for every [`NetworkBackend`]: faults injected by a
//! [`FaultProxy`] between an authority and its server (a cut network, a server that stops
//! answering, a reply lost after the commit), and several authorities on one server.
//!
//! Each scenario makes its own storage ([`Backend::create`](super::Backend::create)) and has two authorities on it: one
//! through the proxy with the backend's short operation timeout ([`FaultProfile::op_timeout`](super::FaultProfile::op_timeout)),
//! and a direct one that reads the durable state whatever the proxy does. What is checked
//! (docs/design.md invariants 1, 2 and 5):
//! - a cut is [`StoreError::Unavailable`] naming the backend (at once where the backend
//!   promises it, else within the timeout), also for `connect` during the cut;
//!   the authority recovers by itself, and nothing reached the server meanwhile;
//! - a stalled server is `Unavailable` after the timeout and before the timeout plus the
//!   backend's slack, naming the timeout; the stalled requests' blocks are burned, never reused;
//! - a lost reply to a committed reservation never hands its block out: the next reservation is
//!   above it, as the direct authority's durable watermark confirms;
//! - two authorities (two nodes) reserving concurrently on one namespace never overlap, and
//!   together use exactly the ids below the watermark;
//! - two independent stores with offsets 1 and 0 of step 2 never collide (in `mod.rs`, for
//!   every backend).
//!
//! Waits poll a condition against a deadline; nothing sleeps to order events. The only
//! wall-clock upper bounds are the backends' timeouts plus their stated slack.
//!
//! What it does not do: kill servers (each backend's tests do, on private servers), or test
//! faults between the members of a multi authority (`tests/multi.rs`).

use super::backend::NetworkBackend;
use super::{assert_disjoint_in_class, ensure, reserve, unique_name};
use crate::{Authority, Reservation, StoreError};
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_testkit::proxy::{Fault, FaultProxy};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a scenario waits for an authority to recover, or for a commit to show.
pub const RECOVERY_DEADLINE: Duration = Duration::from_secs(10);

/// A backend's storage, a proxy in front of its server, and two authorities on it.
struct Faulty<B: NetworkBackend> {
    proxy: FaultProxy,
    /// Through the proxy, with the backend's fault timeout.
    via_proxy: Arc<dyn Authority>,
    /// Straight to the server.
    direct: Arc<dyn Authority>,
    name: NamespaceName,
    spec: SequenceSpec,
    // Last: dropped after the authorities.
    storage: B,
}

impl<B: NetworkBackend> Faulty<B> {
    /// A namespace of `preferred` spec (or the nearest the backend serves) set up and warm: its
    /// spec cached and a connection open, so the next reservation is one request.
    async fn start(test: &str, preferred: SequenceSpec) -> Self {
        let storage = B::create().await;
        let proxy = FaultProxy::start(storage.server_addr())
            .await
            .unwrap_or_else(|e| panic!("cannot start the fault proxy: {e}"));
        let via_proxy = storage
            .connect_via(proxy.addr(), B::FAULTS.op_timeout)
            .await
            .unwrap_or_else(|e| panic!("connecting the {} authority via the proxy: {e}", B::KIND));
        let direct = storage.open().await;
        let name = unique_name(test);
        let spec = B::GRANTS.spec(preferred);
        ensure(&*via_proxy, &name, spec).await;
        reserve(&*via_proxy, &name, 3).await;
        Faulty {
            proxy,
            via_proxy,
            direct,
            name,
            spec,
            storage,
        }
    }

    async fn durable_watermark(&self) -> u64 {
        super::watermark(&*self.direct, &self.name).await
    }

    /// Reserves through the proxy until it works (within [`RECOVERY_DEADLINE`]); every failure
    /// on the way must be `Unavailable`, and there is none if the backend recovers at once.
    async fn reserve_once_recovered(&self, what: &str, count: u64) -> Reservation {
        let (r, failures) = until_ok(what, || self.via_proxy.reserve(&self.name, count)).await;
        assert!(
            failures == 0 || !B::FAULTS.recovers_at_once,
            "[{}] {what}: {failures} calls failed, but the backend recovers at once",
            B::KIND
        );
        assert_eq!(
            r.watermark,
            r.block.end(),
            "[{}] {what}: reservation {r:?}",
            B::KIND
        );
        r
    }
}

/// Retries `op` until it succeeds or [`RECOVERY_DEADLINE`] passes; returns the value and the
/// number of failed attempts, each of which must have been `Unavailable`.
pub async fn until_ok<T, F, Fut>(what: &str, op: F) -> (T, usize)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = Instant::now() + RECOVERY_DEADLINE;
    let mut failures = 0;
    loop {
        match op().await {
            Ok(v) => return (v, failures),
            Err(e) if Instant::now() < deadline => {
                assert!(e.is_unavailable(), "{what}: unexpected error {e:?}");
                failures += 1;
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("{what}: still failing after {RECOVERY_DEADLINE:?}: {e}"),
        }
    }
}

/// Panics unless `result` is `Unavailable` naming `kind`, with a message.
fn assert_unavailable<T: std::fmt::Debug>(
    kind: &str,
    what: &str,
    result: Result<T, StoreError>,
) -> String {
    match result {
        Err(StoreError::Unavailable { backend, message }) => {
            assert_eq!(backend, kind, "{what}: Unavailable names the backend");
            assert!(!message.is_empty(), "[{kind}] {what}: an empty message");
            message
        }
        other => panic!("[{kind}] {what}: expected Unavailable, got {other:?}"),
    }
}

/// The longest a call may take to fail with the network cut.
fn cut_bound<B: NetworkBackend>() -> Duration {
    let f = B::FAULTS;
    if f.cut_fails_fast {
        f.op_timeout / 2
    } else {
        f.op_timeout + f.timeout_slack
    }
}

/// With every connection cut, calls are `Unavailable` naming the backend (at once if the
/// backend fails fast, else within its timeout), and so is connecting a new authority;
/// once the network is back the same authority recovers by itself, and the next block follows
/// the last one exactly (nothing reached the server while cut), as the durable state confirms.
pub async fn cut_is_unavailable_and_recovers<B: NetworkBackend>() {
    let kind = B::KIND;
    let f = Faulty::<B>::start("cut", SequenceSpec::default_64()).await;
    let before = reserve(&*f.via_proxy, &f.name, 10).await;
    let bound = cut_bound::<B>();

    f.proxy.set_fault(Fault::Cut);
    for i in 0..3 {
        let started = Instant::now();
        let result = f.via_proxy.reserve(&f.name, 10).await;
        let took = started.elapsed();
        assert_unavailable(kind, &format!("reserve {i} while cut"), result);
        assert!(
            took < bound,
            "[{kind}] reserve {i} with the network cut took {took:?} (bound {bound:?})"
        );
    }
    let started = Instant::now();
    assert_unavailable(kind, "state while cut", f.via_proxy.state(&f.name).await);
    assert!(started.elapsed() < bound, "[{kind}] state while cut");

    // A node starting during the cut cannot connect either, and says so as quickly.
    let started = Instant::now();
    let late = f
        .storage
        .connect_via(f.proxy.addr(), B::FAULTS.op_timeout)
        .await
        .map(|_| ());
    assert_unavailable(kind, "connect while cut", late);
    let took = started.elapsed();
    assert!(
        took < bound,
        "[{kind}] connecting while cut took {took:?} to fail (bound {bound:?})"
    );

    f.proxy.set_fault(Fault::None);
    let after = f.reserve_once_recovered("reserve after the cut", 10).await;
    assert_eq!(
        after.block.len(),
        B::GRANTS.ids_for(10),
        "[{kind}] {after:?}"
    );
    assert_eq!(
        Some(after.block.start()),
        f.spec.align_up(before.watermark),
        "[{kind}] ids skipped or reused across the cut: {before:?} then {after:?}"
    );
    assert_eq!(
        f.durable_watermark().await,
        after.watermark,
        "[{kind}] the durable watermark after the cut"
    );
}

/// A server that stops answering (connections open, nothing comes back): `reserve`, `state`,
/// `list` and `reserve` again (on a new connection where the backend discards a timed-out one)
/// are each `Unavailable` no sooner than the timeout and no later than the timeout plus the
/// backend's slack (all four together: four timeouts plus one slack), saying so; once it answers again the authority recovers, and its
/// block is above everything reserved before (the stalled requests may have committed once
/// released: their blocks are burned).
pub async fn stall_is_unavailable_within_the_timeout<B: NetworkBackend>() {
    let kind = B::KIND;
    let profile = B::FAULTS;
    let f = Faulty::<B>::start("stall", SequenceSpec::default_64()).await;
    let before = reserve(&*f.via_proxy, &f.name, 10).await;

    f.proxy.set_fault(Fault::Stall);
    let calls = ["reserve", "state", "list", "reserve again"];
    let stalled = Instant::now();
    for what in calls {
        let started = Instant::now();
        let result = match what {
            "reserve" => f.via_proxy.reserve(&f.name, 10).await.map(|_| ()),
            "state" => f.via_proxy.state(&f.name).await.map(|_| ()),
            "list" => f.via_proxy.list().await.map(|_| ()),
            _ => f.via_proxy.reserve(&f.name, 10).await.map(|_| ()),
        };
        let took = started.elapsed();
        let message = assert_unavailable(kind, &format!("{what} on a stalled server"), result);
        if let Some(says) = profile.timeout_says {
            assert!(
                message.contains(says) && message.contains(&format!("{:?}", profile.op_timeout)),
                "[{kind}] {what} on a stalled server must say \"{says}\" and the timeout: \
                 {message}"
            );
        }
        assert!(
            took >= profile.op_timeout && took < profile.op_timeout + profile.timeout_slack,
            "[{kind}] {what} on a stalled server took {took:?}, timeout {:?}, slack {:?}",
            profile.op_timeout,
            profile.timeout_slack
        );
    }

    // Together, too: the timeouts do not add up to more than one slack.
    let total = stalled.elapsed();
    let n = u32::try_from(calls.len()).unwrap();
    assert!(
        total < profile.op_timeout * n + profile.timeout_slack,
        "[{kind}] {n} calls on a stalled server took {total:?}"
    );

    f.proxy.set_fault(Fault::None);
    let (after, _) = until_ok("reserve after the stall", || {
        f.via_proxy.reserve(&f.name, 10)
    })
    .await;
    assert!(
        after.block.start() >= before.watermark,
        "[{kind}] the block after the stall {after:?} reuses ids of {before:?}"
    );
    let durable = f.durable_watermark().await;
    if profile.in_order_after_stall {
        assert_eq!(
            durable, after.watermark,
            "[{kind}] the durable watermark after the stall"
        );
    } else {
        assert!(
            durable >= after.watermark,
            "[{kind}] the durable watermark {durable} is below the block after the stall {after:?}"
        );
    }
}

/// The reply to a reservation is lost after the request reached the server (an ambiguous
/// commit): the call is `Unavailable`; if the server committed it (seen on the direct
/// authority before anything else is reserved), the block it was granted is burned: the next
/// reservation is wholly above it and the durable watermark is exactly past the next block.
///
/// For backends where the lost request always commits, every round must see the commit; for
/// the others (etcd may abandon the request first) the rounds go on and at least one of them
/// must have committed, or the ambiguous case was not tested.
pub async fn lost_reply_never_reissues_the_block<B: NetworkBackend>() {
    const LOST: u64 = 100;
    let kind = B::KIND;
    let profile = B::FAULTS;
    let rounds = if profile.lost_reply_commits { 3 } else { 10 };
    let preferred = SequenceSpec::new(Width::Bits64, 1, 3, 1).unwrap();
    let f = Faulty::<B>::start("lost-reply", preferred).await;
    let mut committed = 0;
    for round in 0..rounds {
        // Warm: the next reservation is a single request, whose reply is dropped below.
        let warm = reserve(&*f.via_proxy, &f.name, 5).await;
        let w0 = f.durable_watermark().await;
        assert_eq!(w0, warm.watermark, "[{kind}] round {round}");
        // What the lost call is granted if it commits: [w0, lost_end).
        let lost_end = f
            .spec
            .reserve(w0, B::GRANTS.ids_for(LOST))
            .unwrap_or_else(|e| panic!("round {round}: {e}"))
            .end();

        f.proxy.set_fault(Fault::DropNextReply);
        let result = f.via_proxy.reserve(&f.name, LOST).await;
        assert_unavailable(kind, "reserve whose reply is lost", result);
        assert_eq!(f.proxy.fault(), Fault::None, "[{kind}] the fault fired");

        let seen = if profile.lost_reply_commits {
            let deadline = Instant::now() + RECOVERY_DEADLINE;
            loop {
                let durable = f.durable_watermark().await;
                if durable == lost_end {
                    break durable;
                }
                assert!(
                    durable == w0 && Instant::now() < deadline,
                    "[{kind}] round {round}: the lost reservation never showed in the durable \
                     state ({durable}, expected {lost_end})"
                );
                tokio::task::yield_now().await;
            }
        } else {
            f.durable_watermark().await
        };
        assert!(
            seen == w0 || seen == lost_end,
            "[{kind}] round {round}: durable watermark {seen}, neither {w0} nor {lost_end}"
        );

        let retried = f
            .reserve_once_recovered("reserve after the lost reply", 10)
            .await;
        let durable = f.durable_watermark().await;
        if seen == lost_end {
            committed += 1;
            assert!(
                retried.block.start() >= lost_end && retried.block.ids().all(|id| id >= lost_end),
                "[{kind}] round {round}: the block after a lost reply {:?} reuses ids the lost \
                 call was granted [{w0}, {lost_end})",
                retried.block
            );
            assert!(retried.watermark > lost_end, "[{kind}] round {round}");
            assert_eq!(
                durable, retried.watermark,
                "[{kind}] round {round}: the durable watermark after the retry"
            );
        } else {
            // Not committed when looked at: the retry starts right at w0 or, if the lost call
            // committed meanwhile, above its block.
            assert!(
                Some(retried.block.start()) == f.spec.align_up(w0)
                    || retried.block.start() >= lost_end,
                "[{kind}] round {round}: the block after a lost reply {:?} (w0 {w0}, lost block \
                 ends at {lost_end})",
                retried.block
            );
            assert!(durable >= retried.watermark, "[{kind}] round {round}");
        }
    }
    println!(
        "[{kind}] lost replies: the lost reservation committed in {committed} of {rounds} rounds"
    );
    assert!(
        committed > 0,
        "[{kind}] in {rounds} rounds no lost reservation committed: the ambiguous case was not \
         tested"
    );
}

/// Two authorities (two nodes, each with its own connections) on one storage, 12 tasks
/// reserving concurrently on one namespace (step 3, offset 2): the blocks are exactly as long
/// as asked, pairwise disjoint, of the residue class, and together they are exactly the ids
/// below the final watermark.
pub async fn two_authorities_never_overlap<B: NetworkBackend>() {
    const TASKS: u64 = 12;
    const PER_TASK: u64 = 100;
    let kind = B::KIND;
    let storage = B::create().await;
    let nodes = [storage.open().await, storage.open().await];
    let name = unique_name("two-nodes");
    let spec = B::GRANTS.spec(SequenceSpec::new(Width::Bits64, 10, 3, 2).unwrap());
    for node in &nodes {
        ensure(&**node, &name, spec).await;
    }
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (node, name) = (nodes[(t % 2) as usize].clone(), name.clone());
            tokio::spawn(async move {
                let mut blocks = Vec::new();
                for k in 0..PER_TASK {
                    let count = 1 + (t * 13 + k * 7) % 40;
                    let r = reserve(&*node, &name, count).await;
                    assert_eq!(
                        r.block.len(),
                        B::GRANTS.ids_for(count),
                        "[{}] task {t}: a reservation of {count}: {r:?}",
                        B::KIND
                    );
                    blocks.push(r.block);
                }
                blocks
            })
        })
        .collect();
    let mut blocks: Vec<Block> = Vec::new();
    for task in tasks {
        blocks.extend(
            task.await
                .unwrap_or_else(|e| panic!("a reservation task failed: {e}")),
        );
    }
    assert_disjoint_in_class(kind, "two authorities on one namespace", &spec, &blocks);
    let state = nodes[0]
        .state(&name)
        .await
        .unwrap_or_else(|e| panic!("[{kind}] state: {e}"))
        .unwrap_or_else(|| panic!("[{kind}] the namespace is gone"));
    let handed_out: u64 = blocks.iter().map(|b| b.len()).sum();
    assert_eq!(
        state.watermark,
        blocks.iter().map(|b| b.end()).max().unwrap(),
        "[{kind}] the watermark is past the highest block"
    );
    assert_eq!(
        state.ids_used(),
        handed_out,
        "[{kind}] {handed_out} ids were reserved but {} lie below the watermark: ids lost or \
         handed out twice",
        state.ids_used()
    );
}

/// Polls the durable watermark of `f`'s namespace until it is one of `allowed` (a lost write
/// may still be applied by the server after the caller gave up), within [`RECOVERY_DEADLINE`].
async fn settled_watermark<B: NetworkBackend>(f: &Faulty<B>, allowed: &[u64]) -> u64 {
    let deadline = Instant::now() + RECOVERY_DEADLINE;
    loop {
        let w = f.durable_watermark().await;
        if allowed.contains(&w) || Instant::now() >= deadline {
            return w;
        }
        tokio::task::yield_now().await;
    }
}

/// The reply to a give-back is lost on its way back (the server may have applied it): the
/// caller reads the outcome as [`Outcome::Unknown`](crate::Outcome::Unknown), never as a
/// refusal, and the durable watermark is either the tail's start (applied) or its end (not);
/// an `Ok` (the lost reply was that of a read the backend retried) is only ever
/// `Returned` with the watermark at the tail's start. The server may still apply a lost
/// give-back later, so the next block starts at the tail's start or past its end: since an
/// unknown give-back's tail is burned by its caller, nothing is served twice.
pub async fn lost_give_back_reply_is_unknown<B: NetworkBackend>() {
    let kind = B::KIND;
    let spec = SequenceSpec::new(Width::Bits64, 1, 1, 0).unwrap();
    let f = Faulty::<B>::start("lost-give-back", spec).await;
    let block = reserve(&*f.via_proxy, &f.name, 50).await.block;
    let (_, tail) = block.split_first(10);
    let tail = tail.unwrap_or_else(|| panic!("[{kind}] a block of 50 has a tail"));
    f.proxy.set_fault(Fault::DropNextReply);
    let outcome = crate::Outcome::of(f.via_proxy.give_back(&f.name, tail).await);
    f.proxy.set_fault(Fault::None);
    let w = settled_watermark(&f, &[tail.start(), tail.end()]).await;
    match outcome {
        crate::Outcome::Applied(crate::GiveBack::Returned) => {
            assert_eq!(
                w,
                tail.start(),
                "[{kind}] a returned tail lowers the watermark"
            )
        }
        crate::Outcome::Unknown(e) => {
            assert_unavailable(kind, "give-back whose reply is lost", Err::<(), _>(e));
            assert!(
                w == tail.start() || w == tail.end(),
                "[{kind}] durable watermark {w} after a lost give-back of {tail:?}"
            );
        }
        other => panic!("[{kind}] a lost give-back reply read as {other:?}"),
    }
    // The server may apply the give-back after it was read above: the next block starts at
    // the tail (applied) or above it (not), never inside it.
    let next = f
        .reserve_once_recovered("reserve after the lost give-back", 5)
        .await;
    assert!(
        next.block.start() == tail.start() || next.block.start() >= tail.end(),
        "[{kind}] {next:?} inside the tail {tail:?} whose give-back was lost"
    );
}

/// The reply to a rebase is lost: the outcome is applied or unknown, never a refusal, and
/// the durable watermark is at the target or where it was; repeated, the rebase lands (it is
/// idempotent) and the next reservation starts at or above its target.
pub async fn lost_advance_reply_is_unknown<B: NetworkBackend>() {
    let kind = B::KIND;
    let spec = SequenceSpec::new(Width::Bits64, 1, 1, 0).unwrap();
    let f = Faulty::<B>::start("lost-advance", spec).await;
    let w0 = f.durable_watermark().await;
    let to = w0 + 1000;
    f.proxy.set_fault(Fault::DropNextReply);
    let outcome = crate::Outcome::of(
        f.via_proxy
            .advance(&f.name, to, crate::Advance::Rebase)
            .await,
    );
    f.proxy.set_fault(Fault::None);
    let w = settled_watermark(&f, &[w0, to]).await;
    match outcome {
        crate::Outcome::Applied(a) => assert!(a.state.watermark >= to && w >= to, "[{kind}]"),
        crate::Outcome::Unknown(e) => {
            assert_unavailable(kind, "rebase whose reply is lost", Err::<(), _>(e));
            assert!(w == w0 || w == to, "[{kind}] durable watermark {w}");
        }
        crate::Outcome::Refused(e) => panic!("[{kind}] a lost rebase reply read as a refusal: {e}"),
    }
    let (again, _) = until_ok("the rebase again", || {
        f.via_proxy.advance(&f.name, to, crate::Advance::Rebase)
    })
    .await;
    assert!(again.state.watermark >= to, "[{kind}] {again:?}");
    let next = f
        .reserve_once_recovered("reserve after the rebase", 5)
        .await;
    assert!(
        next.block.start() >= to,
        "[{kind}] {next:?} below the rebase to {to}"
    );
}
