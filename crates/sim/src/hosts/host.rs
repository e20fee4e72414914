//! One host: a data directory that outlives its runs, and at most one run of a real
//! [`Node`] on a current-thread tokio runtime of its own, on paused time.
//!
//! Invariants:
//! - the runtime is the run: a crash drops it, which drops every task of the node (refill
//!   tasks, requests in flight, the node itself) without running anything more of them; a
//!   restart builds a new runtime and a new node on the same data directory;
//! - a clean stop is the server's: no new requests, the ones in flight finish or are dropped
//!   at the drain deadline, then [`Node::shutdown`] runs to its end, then the runtime goes;
//! - the world drives every runtime by the same simulated time per step
//!   ([`Host::advance`]), so the hosts' clocks stay in step; a host's node reads the time of
//!   its own runtime through [`HostClock`].

use super::authority::FaultyAuthority;
use super::world::{Event, Shared};
use idmint_core::Clock;
use idmint_node::{Credentials, KeepBlocks, Node, NodeConfig};
use idmint_store::{Advance, Authority, DeferredAuthority, MemoryAuthority};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// The sequence namespace the hosts serve.
pub const NAMESPACE: &str = "orders";
/// The snowflake namespace the hosts serve, each under a worker lease.
pub const SNOWFLAKE: &str = "events";

/// Every host's configuration: a declared sequence namespace in small fixed blocks (so
/// refills, give-backs and kept blocks happen often), requests that wait at most 200 ms for a
/// refill; a snowflake namespace of 4 worker ids (2 node bits) leased from the store, with
/// leases of 300 ms renewed every 100 ms (so a crashed host's lease expires within a run).
const CONFIG: &str = "[server]\nauto_create = false\nrefill_wait_ms = 200\n\
                      [leases]\nttl_ms = 300\nfloor_ahead_ms = 100\nmax_floor_wait_ms = 200\n\
                      safety_margin_ms = 60\n\
                      [namespaces.orders]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 16\n\
                      [namespaces.events]\nkind = \"snowflake\"\nworker = \"lease\"\n\
                      layout = { timestamp_bits = 41, node_bits = 2, sequence_bits = 8, \
                      time_unit = \"1ms\", epoch = \"2026-01-01T00:00:00Z\" }\n";

/// Where a host is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No runtime.
    Down,
    /// `Node::start` in flight.
    Starting,
    /// Serving.
    Up,
    /// A clean stop: no new requests; those in flight finish until the deadline.
    Draining {
        /// The drain deadline, in the world's microseconds.
        until_us: u64,
    },
    /// `Node::shutdown` in flight.
    Stopping,
}

/// A host. See the module docs.
#[derive(Debug)]
pub struct Host {
    /// Its number.
    pub index: usize,
    dir: tempfile::TempDir,
    /// Its current (or last) run, from 1.
    pub run: u32,
    /// Where it is.
    pub state: State,
    runtime: Option<Runtime>,
    node: Option<Arc<Node>>,
    /// The start, the operator's calls, the shutdown.
    tasks: Vec<JoinHandle<()>>,
    /// The one client's request in flight.
    request: Option<JoinHandle<()>>,
}

/// The node's clock: monotonic time from the host's runtime (paused, so simulated), wall time
/// from the same plus the world's wall time at the run's start and the host's skew.
#[derive(Debug)]
pub struct HostClock {
    origin: tokio::time::Instant,
    wall_at_origin: u64,
}

impl HostClock {
    /// A clock whose monotonic reading starts at 0 now, in the current runtime's time.
    pub fn new(wall_at_origin: u64) -> Self {
        HostClock {
            origin: tokio::time::Instant::now(),
            wall_at_origin,
        }
    }
}

impl Clock for HostClock {
    fn wall_nanos(&self) -> u64 {
        self.wall_at_origin.saturating_add(self.monotonic_nanos())
    }
    fn monotonic_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Host {
    /// Host `index` with a fresh data directory.
    pub fn new(index: usize) -> std::io::Result<Self> {
        Ok(Host {
            index,
            dir: tempfile::tempdir()?,
            run: 0,
            state: State::Down,
            runtime: None,
            node: None,
            tasks: Vec::new(),
            request: None,
        })
    }

    /// `h1#3`: the host and its run, as the trace names them.
    pub fn who(&self) -> String {
        format!("h{}#{}", self.index, self.run)
    }

    /// Starts a new run: a new runtime on paused time, and `Node::start` on it over `store`
    /// (through a fault wrapper of its own) and this host's data directory. With `deferred`,
    /// the store does not answer at start: the node starts over a [`DeferredAuthority`], as
    /// `open_store_or_later` hands it, which connects after that long.
    pub fn start(
        &mut self,
        store: &Arc<MemoryAuthority>,
        shared: &Arc<Shared>,
        wall_at_origin: u64,
        deferred: Option<Duration>,
    ) -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| format!("building a runtime: {e}"))?;
        let mut config = node_config().map_err(|e| format!("the hosts' configuration: {e}"))?;
        config.keep_blocks = Some(KeepBlocks {
            dir: self.dir.path().to_owned(),
            authority: "memory (simulation)".into(),
        });
        self.run += 1;
        let (host, run) = (self.index, self.run);
        let faulty: Arc<dyn Authority> = Arc::new(FaultyAuthority::new(
            store.clone(),
            self.who(),
            shared.clone(),
        ));
        let authority: Arc<dyn Authority> = match deferred {
            None => faulty,
            Some(after) => {
                let d = Arc::new(DeferredAuthority::new(
                    "memory",
                    "the store did not answer at start",
                ));
                let (later, trace, who) = (d.clone(), shared.clone(), self.who());
                self.tasks.push(runtime.spawn(async move {
                    tokio::time::sleep(after).await;
                    later.connected(faulty);
                    trace.trace(format!("{who} the store answers: connected"));
                }));
                d
            }
        };
        let events = shared.clone();
        let task = runtime.spawn(async move {
            let clock = Arc::new(HostClock::new(wall_at_origin));
            let started = Node::start_with_clock(config, authority, clock)
                .await
                .map_err(|e| e.to_string());
            events.push(Event::Started { host, run, started });
        });
        self.tasks.push(task);
        self.runtime = Some(runtime);
        self.state = State::Starting;
        Ok(())
    }

    /// The node's start answered: serving, or down again.
    pub fn started(&mut self, node: Option<Arc<Node>>) {
        match node {
            Some(node) => {
                self.node = Some(node);
                self.state = State::Up;
            }
            None => self.crash(),
        }
    }

    /// Drops the run at once: no shutdown, nothing more of it runs.
    pub fn crash(&mut self) {
        self.node = None;
        self.tasks.clear();
        self.request = None;
        self.runtime = None;
        self.state = State::Down;
    }

    /// Whether the host's client has a request in flight.
    pub fn requesting(&self) -> bool {
        self.request.as_ref().is_some_and(|r| !r.is_finished())
    }

    /// The host's client asks the node for `count` ids, as a front-end does (`take_ids`);
    /// `req` numbers the request in the trace and the checker. One at a time: requests
    /// waiting together for a refill are woken in an order tokio draws from its own generator
    /// (a `watch` channel's sharded notify), which no seed controls.
    pub fn request(&mut self, shared: &Arc<Shared>, req: u64, namespace: &'static str, count: u64) {
        let (Some(runtime), Some(node)) = (&self.runtime, &self.node) else {
            return;
        };
        if self.requesting() {
            return;
        }
        let (host, run, node, events) = (self.index, self.run, node.clone(), shared.clone());
        self.request = Some(runtime.spawn(async move {
            let taken = node
                .take_ids(Credentials::Header(None), namespace, Some(count), None)
                .await;
            let answer = match taken {
                Ok(t) => match t.ids {
                    idmint_node::namespace::Ids::U64(ids) => Ok(ids),
                    other => Err(format!("not sequence ids: {other:?}")),
                },
                Err(e) => Err(e.to_string()),
            };
            events.push(Event::Answered {
                host,
                run,
                req,
                namespace,
                answer,
            });
        }));
    }

    /// The operator's rebase (`above`: every id from now on above it) or retirement, through
    /// this node's operation (`move_watermark`).
    pub fn move_watermark(&mut self, shared: &Arc<Shared>, req: u64, action: Advance, above: u64) {
        let (Some(runtime), Some(node)) = (&self.runtime, &self.node) else {
            return;
        };
        let (host, run, node, events) = (self.index, self.run, node.clone(), shared.clone());
        self.tasks.push(runtime.spawn(async move {
            let moved = node
                .move_watermark(Credentials::Header(None), NAMESPACE, action, Some(above))
                .await
                .map(|r| r.watermark)
                .map_err(|e| e.to_string());
            events.push(Event::Moved {
                host,
                run,
                req,
                action,
                above,
                moved,
            });
        }));
    }

    /// Begins a clean stop: no new requests from now; the drain ends at `until_us`.
    pub fn drain(&mut self, until_us: u64) {
        if self.state == State::Up {
            self.state = State::Draining { until_us };
        }
    }

    /// A draining host whose requests are done (or whose deadline passed: the rest are
    /// dropped, as the server's stop-now does) starts its shutdown.
    pub fn shut_down_when_drained(&mut self, shared: &Arc<Shared>, now_us: u64) {
        let State::Draining { until_us } = self.state else {
            return;
        };
        self.tasks.retain(|t| !t.is_finished());
        if self.busy() && now_us < until_us {
            return;
        }
        for t in self.tasks.drain(..).chain(self.request.take()) {
            t.abort();
        }
        let (Some(runtime), Some(node)) = (&self.runtime, self.node.take()) else {
            return;
        };
        let (host, run, events) = (self.index, self.run, shared.clone());
        self.tasks.push(runtime.spawn(async move {
            let report = node.shutdown().await;
            events.push(Event::Stopped { host, run, report });
        }));
        self.state = State::Stopping;
    }

    /// The shutdown finished: the runtime goes.
    pub fn stopped(&mut self) {
        self.crash();
    }

    /// Runs the host's runtime for `dt` of simulated time: every task ready, every timer due.
    pub fn advance(&mut self, dt: Duration) {
        if let Some(runtime) = &self.runtime {
            runtime.block_on(async move { tokio::time::sleep(dt).await });
            self.tasks.retain(|t| !t.is_finished());
        }
    }

    /// Whether a request or an operator's call is in flight.
    pub fn busy(&self) -> bool {
        self.requesting() || self.tasks.iter().any(|t| !t.is_finished())
    }

    /// The node, while it serves.
    pub fn node(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    /// Replaces this host's data directory with a copy of `from`'s (both hosts down): the
    /// operator restores a node's disk onto another machine.
    pub fn copy_data_from(&mut self, from: &Host) -> std::io::Result<()> {
        for entry in std::fs::read_dir(self.dir.path())? {
            let path = entry?.path();
            if path.is_file() {
                std::fs::remove_file(path)?;
            }
        }
        for entry in std::fs::read_dir(from.dir.path())? {
            let entry = entry?;
            if entry.path().is_file() {
                std::fs::copy(entry.path(), self.dir.path().join(entry.file_name()))?;
            }
        }
        Ok(())
    }
}

/// The hosts' configuration (without the data directory).
fn node_config() -> Result<NodeConfig, String> {
    idmint_node::FileConfig::parse(CONFIG)
        .map(|c| c.node)
        .map_err(|e| e.to_string())
}
