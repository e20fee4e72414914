//! The production world's step loop: hosts that are real nodes, one shared store, the
//! operator, and the checker (docs/simulation.md, "The production world").
//!
//! Each step draws a time step (0.1 to 3 ms) and one action from the seed, then runs every
//! host's runtime for that time in host order, then reads what the nodes answered, in the
//! order they answered, into the trace and the checker. Everything the hosts share (the
//! generator, the trace, the answers) sits behind std mutexes taken for one call, never across
//! an `.await`; all of it runs on the calling thread.
//!
//! What the seed decides: the time steps, every action and its target, every authority call's
//! fate, each host's wall-clock skew, and the jitter of every node's retry backoff
//! (`idmint_core::backoff::seed_thread`). What it does not: the order in which `tokio::select!`
//! polls branches that are ready at once (tokio's own generator, seedable only under
//! `tokio_unstable`), `RandomState` (the supply's lease tokens, compared for equality only),
//! and claim keys (random, never printed). So each host's client has one request in flight at
//! a time, and the node itself avoids tokio's choices on the paths run here (its refill loop
//! selects `biased`; the kept-blocks file is read and written inline, not on the blocking pool,
//! whose hop would let the paused clock run on meanwhile). The replay test checks that seeds
//! replay bit for bit.

use super::check::{Checker, Counts, RunId};
use super::host::{Host, State, NAMESPACE, SNOWFLAKE};
use super::trace::Trace;
use crate::rng::Rng;
use idmint_node::namespace::Namespace;
use idmint_node::{Node, ShutdownReport};
use idmint_store::{Advance, MemoryAuthority};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Hosts in the world.
pub const HOSTS: usize = 3;
/// Steps per seed.
pub const STEPS: u64 = 1000;
/// Lines of the interleaving a failing run prints.
const TAIL: usize = 80;
/// The world's wall clock at time 0 (2026-01-01), in nanoseconds.
const EPOCH_NS: u64 = 1_767_225_600_000_000_000;

/// What a node did, reported from inside its runtime.
#[derive(Debug)]
pub enum Event {
    /// `Node::start` answered.
    Started {
        /// The host.
        host: usize,
        /// Its run.
        run: u32,
        /// The node, or why it did not start.
        started: Result<Arc<Node>, String>,
    },
    /// A request for ids answered.
    Answered {
        /// The host.
        host: usize,
        /// Its run.
        run: u32,
        /// The request's number.
        req: u64,
        /// Its namespace.
        namespace: &'static str,
        /// The ids, or the error.
        answer: Result<Vec<u64>, String>,
    },
    /// An operator's move of the watermark answered.
    Moved {
        /// The host.
        host: usize,
        /// Its run.
        run: u32,
        /// The request's number.
        req: u64,
        /// Rebase or retire.
        action: Advance,
        /// The rebase's `above`.
        above: u64,
        /// The watermark after the move, or the error.
        moved: Result<u64, String>,
    },
    /// `Node::shutdown` finished.
    Stopped {
        /// The host.
        host: usize,
        /// Its run.
        run: u32,
        /// What it did.
        report: ShutdownReport,
    },
}

/// What the hosts, their authority wrappers and the world share.
#[derive(Debug)]
pub struct Shared {
    rng: Mutex<Rng>,
    trace: Mutex<Trace>,
    events: Mutex<Vec<Event>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each holder makes one change: consistent after a panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn new(seed: u64) -> Self {
        Shared {
            rng: Mutex::new(Rng::new(seed)),
            trace: Mutex::new(Trace::default()),
            events: Mutex::new(Vec::new()),
        }
    }
    /// Draws from the run's generator.
    pub fn with_rng<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut lock(&self.rng))
    }
    /// Adds a line to the trace.
    pub fn trace(&self, line: String) {
        lock(&self.trace).line(line);
    }
    /// Reports what a node did.
    pub fn push(&self, event: Event) {
        lock(&self.events).push(event);
    }
    fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *lock(&self.events))
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Steps run.
    pub steps: u64,
    /// Ids answered.
    pub ids: u64,
    /// The hash of the trace.
    pub trace: u64,
    /// The first violation, if any.
    pub violation: Option<String>,
    /// The trace's last lines, when there is a violation.
    pub interleaving: Vec<String>,
}

/// Why a run could not be set up (not a finding).
#[derive(Debug, thiserror::Error)]
#[error("setting up the production world: {0}")]
pub struct SetupError(String);

/// Runs seed `seed` for `steps` steps with the planted bugs `planted`
/// (`idmint_core::planted`; ignored without the `planted` feature).
pub fn run(seed: u64, planted: u64, steps: u64) -> Result<Report, SetupError> {
    run_with(seed, planted, steps, false)
}

/// [`run`], with every line of the trace in the report's `interleaving` (`--trace`).
pub fn run_traced(seed: u64, planted: u64, steps: u64) -> Result<Report, SetupError> {
    run_with(seed, planted, steps, true)
}

fn run_with(seed: u64, planted: u64, steps: u64, all: bool) -> Result<Report, SetupError> {
    #[cfg(feature = "planted")]
    idmint_core::planted::set(planted);
    #[cfg(not(feature = "planted"))]
    let _ = planted;
    idmint_core::backoff::seed_thread(Some(seed.wrapping_mul(0x2545_f491_4f6c_dd1d)));
    let shared = Arc::new(Shared::new(seed));
    let store_clock = Arc::new(StoreClock::default());
    let store = Arc::new(MemoryAuthority::with_clock(store_clock.clone()));
    let mut world = World {
        shared: shared.clone(),
        store,
        hosts: (0..HOSTS)
            .map(Host::new)
            .collect::<Result<_, _>>()
            .map_err(|e| SetupError(format!("a data directory: {e}")))?,
        checker: Checker::default(),
        snowflakes: Checker::default(),
        store_clock,
        now_us: 0,
        at: 0,
        sent: std::collections::HashMap::new(),
        retired: false,
        max_answered: 0,
        dir_free: vec![0; HOSTS],
    };
    for h in 0..HOSTS {
        world.start(h).map_err(SetupError)?;
    }
    let mut violation = None;
    let mut step = 0;
    while step < steps && violation.is_none() {
        step += 1;
        violation = world.step(step, steps).err();
    }
    let trace = lock(&shared.trace);
    let report = Report {
        seed,
        steps: step,
        ids: world.checker.ids() + world.snowflakes.ids(),
        trace: trace.hash(),
        interleaving: if all {
            trace.lines().to_vec()
        } else if violation.is_some() {
            trace.tail(TAIL)
        } else {
            Vec::new()
        },
        violation,
    };
    drop(trace);
    // The runtimes go before the next seed's thread settings.
    for h in &mut world.hosts {
        h.crash();
    }
    Ok(report)
}

struct World {
    shared: Arc<Shared>,
    store: Arc<MemoryAuthority>,
    hosts: Vec<Host>,
    checker: Checker,
    /// The snowflake namespace's answers: unique, increasing per run.
    snowflakes: Checker,
    /// The store's clock (its leases expire by it): the world's time.
    store_clock: Arc<StoreClock>,
    now_us: u64,
    /// The next event number.
    at: u64,
    /// Requests in flight: their run and number when sent.
    sent: std::collections::HashMap<u64, (RunId, u64)>,
    retired: bool,
    /// The largest id answered so far (the operator rebases above it).
    max_answered: u64,
    /// Per host: when the last run that used its data directory ended (a copy brings the
    /// source's).
    dir_free: Vec<u64>,
}

impl World {
    fn next_at(&mut self) -> u64 {
        self.at += 1;
        self.at
    }

    fn line(&self, text: String) {
        self.shared.trace(text);
    }

    fn start(&mut self, h: usize) -> Result<(), String> {
        // Each run's wall clock is 0 to 60 ms ahead of the world's: a restarted host may find
        // its clock behind where its previous run left it (a clock stepped back while down).
        let skew = self.shared.with_rng(|r| r.range(0, 60_000_000));
        let wall = EPOCH_NS + self.now_us * 1000 + skew;
        let deferred = self.shared.with_rng(|r| {
            r.chance(150)
                .then(|| Duration::from_micros(r.range(5_000, 400_000)))
        });
        self.hosts[h].start(&self.store, &self.shared, wall, deferred)?;
        let at = self.next_at();
        let host = &self.hosts[h];
        self.checker
            .run_started((h, host.run), at, self.dir_free[h]);
        match deferred {
            None => self.line(format!("{} starts", host.who())),
            Some(after) => self.line(format!(
                "{} starts; the store answers it only after {} ms",
                host.who(),
                after.as_millis()
            )),
        }
        Ok(())
    }

    fn pick(&self, want: impl Fn(&Host) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = self
            .hosts
            .iter()
            .filter(|h| want(h))
            .map(|h| h.index)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let i = self.shared.with_rng(|r| r.below(candidates.len() as u64)) as usize;
        Some(candidates[i])
    }

    fn step(&mut self, step: u64, steps: u64) -> Result<(), String> {
        let dt = self.shared.with_rng(|r| r.range(100, 3000));
        self.now_us += dt;
        self.store_clock.set(self.now_us);
        lock(&self.shared.trace).at(self.now_us);
        self.act(step, steps)?;
        for h in &mut self.hosts {
            h.shut_down_when_drained(&self.shared, self.now_us);
            h.advance(Duration::from_micros(dt));
        }
        self.read_events()?;
        self.check_at_rest()
    }

    fn act(&mut self, step: u64, steps: u64) -> Result<(), String> {
        let roll = self.shared.with_rng(|r| r.below(1000));
        let up = |h: &Host| h.state == State::Up;
        match roll {
            0..550 => {
                let Some(h) = self.pick(|h| up(h) && !h.requesting()) else {
                    return Ok(());
                };
                let (namespace, count) = self.shared.with_rng(|r| {
                    if r.chance(250) {
                        (SNOWFLAKE, r.range(1, 8))
                    } else if r.chance(100) {
                        (NAMESPACE, r.range(20, 60))
                    } else {
                        (NAMESPACE, r.range(1, 8))
                    }
                });
                let req = self.next_at();
                let run = (h, self.hosts[h].run);
                self.sent.insert(req, (run, req));
                self.line(format!(
                    "{} request {req}: {count} ids of {namespace}",
                    self.hosts[h].who()
                ));
                self.hosts[h].request(&self.shared, req, namespace, count);
            }
            550..565 => {
                if let Some(h) = self.pick(|h| h.state != State::Down) {
                    self.line(format!(
                        "{} crashes ({:?})",
                        self.hosts[h].who(),
                        self.hosts[h].state
                    ));
                    self.hosts[h].crash();
                    self.dir_free[h] = self.next_at();
                }
            }
            565..585 => {
                if let Some(h) = self.pick(up) {
                    let drain = self.shared.with_rng(|r| r.range(20_000, 300_000));
                    self.line(format!(
                        "{} stops cleanly (drain deadline {} ms)",
                        self.hosts[h].who(),
                        drain / 1000
                    ));
                    self.hosts[h].drain(self.now_us + drain);
                }
            }
            585..700 => {
                if let Some(h) = self.pick(|h| h.state == State::Down) {
                    self.start(h)?;
                }
            }
            700..706 => {
                if let Some(h) = self.pick(up) {
                    let above = self.max_answered + self.shared.with_rng(|r| r.range(0, 64));
                    let req = self.next_at();
                    self.line(format!(
                        "{} operator: rebase above {above} (request {req})",
                        self.hosts[h].who()
                    ));
                    self.hosts[h].move_watermark(&self.shared, req, Advance::Rebase, above);
                }
            }
            706..708 if !self.retired && step > steps * 9 / 10 => {
                if let Some(h) = self.pick(up) {
                    let req = self.next_at();
                    self.line(format!(
                        "{} operator: retire (request {req})",
                        self.hosts[h].who()
                    ));
                    self.hosts[h].move_watermark(&self.shared, req, Advance::Retire, 0);
                }
            }
            708..720 => {
                let Some(from) = self.pick(|h| h.state == State::Down) else {
                    return Ok(());
                };
                let Some(to) = self.pick(|h| h.state == State::Down && h.index != from) else {
                    return Ok(());
                };
                self.line(format!(
                    "operator: host {from}'s data directory copied onto host {to}"
                ));
                let (a, b) = if from < to {
                    let (l, r) = self.hosts.split_at_mut(to);
                    (&l[from], &mut r[0])
                } else {
                    let (l, r) = self.hosts.split_at_mut(from);
                    (&r[0], &mut l[to])
                };
                b.copy_data_from(a)
                    .map_err(|e| format!("copying a data directory: {e}"))?;
                self.dir_free[to] = self.dir_free[from];
            }
            _ => {}
        }
        Ok(())
    }

    fn read_events(&mut self) -> Result<(), String> {
        for event in self.shared.take_events() {
            match event {
                Event::Started { host, run, started } => {
                    let live =
                        self.hosts[host].run == run && self.hosts[host].state == State::Starting;
                    match started {
                        Ok(node) if live => {
                            self.line(format!("h{host}#{run} started"));
                            self.hosts[host].started(Some(node));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.line(format!("h{host}#{run} did not start: {e}"));
                            if live {
                                self.hosts[host].started(None);
                                self.dir_free[host] = self.next_at();
                            }
                        }
                    }
                }
                Event::Answered {
                    host,
                    run,
                    req,
                    namespace,
                    answer,
                } => {
                    let sent = self.sent.remove(&req).map_or(0, |(_, at)| at);
                    match answer {
                        Ok(ids) => {
                            self.line(format!(
                                "h{host}#{run} request {req} answered {namespace} {}",
                                ids_text(&ids)
                            ));
                            if namespace == SNOWFLAKE {
                                self.snowflakes
                                    .answered((host, run), req, sent, &ids)
                                    .map_err(|e| format!("{SNOWFLAKE}: {e}"))?;
                                continue;
                            }
                            if let Some(&max) = ids.last() {
                                self.max_answered = self.max_answered.max(max);
                            }
                            self.checker.answered((host, run), req, sent, &ids)?;
                        }
                        Err(e) => self.line(format!("h{host}#{run} request {req} failed: {e}")),
                    }
                }
                Event::Moved {
                    host,
                    run,
                    req,
                    action,
                    above,
                    moved,
                } => {
                    let at = self.next_at();
                    match moved {
                        Ok(watermark) => {
                            self.line(format!("h{host}#{run} {action:?} (request {req}) answered: watermark {watermark}"));
                            let retired = action == Advance::Retire;
                            self.retired |= retired;
                            self.checker.moved((host, run), req, at, above + 1, retired);
                        }
                        Err(e) => self.line(format!(
                            "h{host}#{run} {action:?} (request {req}) failed: {e}"
                        )),
                    }
                }
                Event::Stopped { host, run, report } => {
                    self.line(format!(
                        "h{host}#{run} stopped: given back {}, kept {}, burned {}",
                        report.given_back, report.kept, report.burned
                    ));
                    if self.hosts[host].run == run && self.hosts[host].state == State::Stopping {
                        self.hosts[host].stopped();
                        self.dir_free[host] = self.next_at();
                    }
                }
            }
        }
        Ok(())
    }

    /// The accounting of every serving node with nothing in flight.
    fn check_at_rest(&self) -> Result<(), String> {
        for h in &self.hosts {
            if h.state != State::Up || h.busy() {
                continue;
            }
            let Some(node) = h.node() else { continue };
            let Some(ns) = node.served_namespace(NAMESPACE) else {
                continue;
            };
            let Namespace::Sequence(seq) = &*ns else {
                continue;
            };
            let s = seq.supply().snapshot();
            let counts = Counts {
                reserved: s.reserved,
                served: s.served,
                buffered: s.buffered,
                burned: s.stats.burned,
                given_back: s.stats.given_back,
            };
            self.checker.at_rest((h.index, h.run), &counts)?;
        }
        Ok(())
    }
}

/// The store's clock: the world's time (its leases expire by it), at one step's resolution.
#[derive(Debug, Default)]
struct StoreClock(std::sync::atomic::AtomicU64);

impl StoreClock {
    fn set(&self, now_us: u64) {
        self.0
            .store(now_us * 1000, std::sync::atomic::Ordering::Relaxed);
    }
}

impl idmint_core::Clock for StoreClock {
    fn wall_nanos(&self) -> u64 {
        EPOCH_NS + self.monotonic_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// `[a..b]` for a run of consecutive ids, else the list.
fn ids_text(ids: &[u64]) -> String {
    match (ids.first(), ids.last()) {
        (Some(a), Some(b)) if b - a + 1 == ids.len() as u64 && ids.len() > 2 => {
            format!("{a}..={b}")
        }
        _ => format!("{ids:?}"),
    }
}
