//! The one connection pool of the SQL authorities (PostgreSQL and MySQL/MariaDB), on
//! [`deadpool`]'s managed pool: a backend says how to open a connection, how to tell without a
//! round trip that one is closed, and how to ping one ([`Connector`]); this module holds the
//! policy, the same for every backend.
//!
//! ## The policy
//!
//! - **Reuse only what finished cleanly.** A connection is reused only after [`Lease::finish`]
//!   with a result that is not [`StoreError::Unavailable`]. One finished with `Unavailable` is
//!   detached from the pool and closed at once; one whose lease was dropped any other way (an
//!   operation cancelled by its timeout with a statement in flight, a panic) stays marked
//!   unclean and is closed by the idle sweep after the timeout or by the next recycle, never
//!   lent again. So a late reply can never be read as the answer to a later statement.
//! - **Health check on recycle.** Taking an idle connection checks, without a round trip, that
//!   the driver has not seen it close; one last used more than [`PING_IDLE_AFTER`] ago is also
//!   pinged (the server or a firewall may have dropped it silently). A connection failing either
//!   check is dropped and the next idle one is tried, then a new one is opened.
//! - **Reconnection.** After an operation fails with `Unavailable` or times out, every idle
//!   connection is dropped as well: they most likely share the failed one's fate (server
//!   restart, network cut), and the next operation opens a fresh connection. There is no
//!   background reconnection: connections are opened on demand.
//! - **Retries.** Writes are never retried here: a write whose reply was lost may have
//!   committed, and the backends' safety argument needs the next write to start from whatever
//!   is durable (see each backend's docs). Reads ([`Pool::read_on_conn`]) run at most twice, the second
//!   time after a connection failure, on a freshly opened connection, within the same timeout:
//!   running a read twice changes nothing.
//! - **Timeouts.** Every operation, waiting for a connection, opening it (connecting and session
//!   setup), recycling it and the statements included, is bounded by the backend's
//!   `op_timeout` as a whole ([`Pool::run`]); deadpool's own wait, create and recycle timeouts
//!   are set to the same bound. A stalled server yields `Unavailable`, never a hang.
//! - **Size.** At most `max_size` connections are open at once (more operations wait, within
//!   their timeout), and at most `max_idle` are kept between operations.
//!
//! What it does not do: TLS, prepared-statement caching (the backend's connection type holds
//! its statements), or any SQL.

use crate::StoreError;
use deadpool::managed::{
    self, Metrics, Object, PoolError, RecycleError, RecycleResult, TimeoutType, Timeouts,
};
use std::future::Future;
use std::time::Duration;

/// Idle connections last used longer ago than this are pinged before use.
pub(crate) const PING_IDLE_AFTER: Duration = Duration::from_secs(30);

/// How a backend opens and checks its connections.
pub(crate) trait Connector: Send + Sync + 'static {
    /// One open connection, with whatever session state the backend keeps on it.
    type Conn: Send + 'static;

    /// Opens a connection and sets its session up. Bounded by the caller's timeout.
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, StoreError>> + Send;

    /// Whether the driver already knows the connection is closed (no round trip).
    fn is_closed(conn: &Self::Conn) -> bool;

    /// One round trip that succeeds only on a live connection.
    fn ping(conn: &mut Self::Conn) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A pooled connection and whether its last operation finished cleanly.
pub(crate) struct Pooled<T> {
    conn: T,
    /// Set by [`Lease::finish`] only; cleared when the connection is lent out.
    clean: bool,
}

/// deadpool's view of a [`Connector`].
struct Manager<C>(C);

impl<C: Connector> managed::Manager for Manager<C> {
    type Type = Pooled<C::Conn>;
    type Error = StoreError;

    async fn create(&self) -> Result<Pooled<C::Conn>, StoreError> {
        Ok(Pooled {
            conn: self.0.connect().await?,
            clean: true,
        })
    }

    async fn recycle(
        &self,
        pooled: &mut Pooled<C::Conn>,
        metrics: &Metrics,
    ) -> RecycleResult<StoreError> {
        if !pooled.clean {
            return Err(RecycleError::message("abandoned mid-operation"));
        }
        if C::is_closed(&pooled.conn) {
            return Err(RecycleError::message("closed while idle"));
        }
        if metrics.last_used() >= PING_IDLE_AFTER {
            C::ping(&mut pooled.conn)
                .await
                .map_err(RecycleError::Backend)?;
        }
        Ok(())
    }
}

/// Sizes and bounds of a [`Pool`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolLimits {
    /// At most this many connections open at once (at least 1).
    pub(crate) max_size: usize,
    /// At most this many kept between operations.
    pub(crate) max_idle: usize,
    /// The bound on every operation.
    pub(crate) op_timeout: Duration,
}

/// A pool of one backend's connections under the module's policy.
pub(crate) struct Pool<C: Connector> {
    inner: managed::Pool<Manager<C>>,
    kind: &'static str,
    /// Where the connections go, for messages: host, port, database; never a password.
    target: String,
    max_idle: usize,
    op_timeout: Duration,
}

impl<C: Connector> Pool<C> {
    /// A pool of connections opened by `connector`; none is opened yet.
    pub(crate) fn new(
        connector: C,
        kind: &'static str,
        target: String,
        limits: PoolLimits,
    ) -> Result<Self, StoreError> {
        if limits.max_size == 0 || limits.op_timeout.is_zero() {
            return Err(StoreError::InvalidSetup {
                message: "the pool size and op_timeout must be above zero".into(),
            });
        }
        let bound = Some(limits.op_timeout);
        let inner = managed::Pool::builder(Manager(connector))
            .max_size(limits.max_size)
            .timeouts(Timeouts {
                wait: bound,
                create: bound,
                recycle: bound,
            })
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::InvalidSetup {
                message: format!("cannot build the connection pool: {e}"),
            })?;
        Ok(Pool {
            inner,
            kind,
            target,
            max_idle: limits.max_idle,
            op_timeout: limits.op_timeout,
        })
    }

    /// `host:port/database` (or the backend's equivalent), for messages.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    /// The bound on every operation.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    /// A connection: a healthy idle one, else a new one (see the module docs). Call it inside
    /// [`Pool::run`], which bounds it ([`Pool::on_conn`] and [`Pool::read_on_conn`] do).
    pub(crate) async fn get(&self) -> Result<Lease<'_, C>, StoreError> {
        match self.inner.get().await {
            Ok(mut object) => {
                object.clean = false;
                Ok(Lease { pool: self, object })
            }
            Err(PoolError::Backend(e)) => Err(e),
            // A server that does not answer while connecting (or a health check) is the same
            // outage as one that does not answer a statement: one wording, so operators and the
            // conformance suite's stall scenario read one message. A full pool is not an outage
            // of the server, and says so.
            Err(PoolError::Timeout(TimeoutType::Wait)) => Err(self.unavailable(format!(
                "no pooled connection free within {:?}",
                self.op_timeout
            ))),
            Err(PoolError::Timeout(what)) => Err(self.unavailable(format!(
                "no answer within {:?} ({})",
                self.op_timeout,
                match what {
                    TimeoutType::Create => "connecting",
                    _ => "checking an idle connection",
                }
            ))),
            Err(other) => Err(self.unavailable(other.to_string())),
        }
    }

    /// Runs `op` (which takes its connection with [`Pool::get`] and hands it back with
    /// [`Lease::finish`]) within the operation timeout. After an `Unavailable` result or a
    /// timeout, idle connections are dropped. `Unavailable` messages are prefixed with `what`
    /// and the target.
    pub(crate) async fn run<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let out = match tokio::time::timeout(self.op_timeout, op).await {
            Ok(out) => out,
            // `op` was dropped mid-flight, and its lease with it: its connection is detached.
            Err(_) => Err(self.unavailable(format!("no answer within {:?}", self.op_timeout))),
        };
        out.map_err(|e| match e {
            StoreError::Unavailable { backend, message } => {
                self.drop_idle();
                StoreError::Unavailable {
                    backend,
                    message: format!("{what} on {}: {message}", self.target),
                }
            }
            other => other,
        })
    }

    /// `op` on one pooled connection, within the operation timeout ([`Pool::run`]): takes a
    /// connection, runs `op` on it and hands it back with [`Lease::finish`] (detached after
    /// `Unavailable`). The one shape of every write.
    pub(crate) async fn on_conn<T>(
        &self,
        what: &str,
        op: impl AsyncFnOnce(&mut C::Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run(what, async {
            let mut lease = self.get().await?;
            let out = op(lease.conn()).await;
            lease.finish(out)
        })
        .await
    }

    /// [`Pool::on_conn`] for a read-only `op`: after a connection failure it runs once more, on
    /// a new connection (the idle ones were dropped), within the same timeout. `op` is cloned
    /// for the first try (a closure that only borrows is `Clone`): an `AsyncFn` called twice
    /// would meet the compiler's higher-ranked `Send` limitation inside `#[async_trait]`.
    pub(crate) async fn read_on_conn<T>(
        &self,
        what: &str,
        op: impl AsyncFnOnce(&mut C::Conn) -> Result<T, StoreError> + Clone,
    ) -> Result<T, StoreError> {
        self.run(what, async {
            let first = {
                let mut lease = self.get().await?;
                let out = op.clone()(lease.conn()).await;
                lease.finish(out)
            };
            match first {
                Err(e) if e.is_unavailable() => {
                    self.drop_idle();
                    let mut lease = self.get().await?;
                    let out = op(lease.conn()).await;
                    lease.finish(out)
                }
                other => other,
            }
        })
        .await
    }

    fn drop_idle(&self) {
        let dropped = self.inner.retain(|_, _| false);
        drop(dropped); // outside deadpool's lock: closing a connection may do work
    }

    fn unavailable(&self, message: String) -> StoreError {
        StoreError::Unavailable {
            backend: self.kind,
            message,
        }
    }
}

/// A connection lent to one operation. Handed back with [`Lease::finish`]; dropped otherwise
/// (the operation was cancelled or panicked), it stays marked unclean: the next recycle, or the
/// idle sweep that follows a timeout, closes it (see the module docs).
pub(crate) struct Lease<'a, C: Connector> {
    pool: &'a Pool<C>,
    object: Object<Manager<C>>,
}

impl<C: Connector> Lease<'_, C> {
    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut C::Conn {
        &mut self.object.conn
    }

    /// Ends the operation with `out`: the connection goes back to the pool unless `out` is
    /// `Unavailable` (the connection may be broken, or a reply may still be in flight) or the
    /// pool already keeps `max_idle` idle connections; then it is detached and closed.
    pub(crate) fn finish<T>(mut self, out: Result<T, StoreError>) -> Result<T, StoreError> {
        let keep = !matches!(out, Err(StoreError::Unavailable { .. }))
            && self.pool.inner.status().available < self.pool.max_idle;
        if keep {
            self.object.clean = true;
        } else {
            drop(Object::take(self.object));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Connections numbered from 0 in the order they were opened.
    #[derive(Default)]
    struct Fake {
        opened: AtomicUsize,
    }

    struct FakeConn {
        id: usize,
        closed: Arc<AtomicBool>,
    }

    impl Connector for Arc<Fake> {
        type Conn = FakeConn;
        async fn connect(&self) -> Result<FakeConn, StoreError> {
            Ok(FakeConn {
                id: self.opened.fetch_add(1, Ordering::SeqCst),
                closed: Arc::default(),
            })
        }
        fn is_closed(conn: &FakeConn) -> bool {
            conn.closed.load(Ordering::SeqCst)
        }
        async fn ping(_: &mut FakeConn) -> Result<(), StoreError> {
            Ok(())
        }
    }

    fn pool(op_timeout: Duration) -> (Arc<Fake>, Pool<Arc<Fake>>) {
        let fake = Arc::new(Fake::default());
        let limits = PoolLimits {
            max_size: 2,
            max_idle: 2,
            op_timeout,
        };
        let pool = Pool::new(fake.clone(), "test", "fake:1/db".into(), limits).unwrap();
        (fake, pool)
    }

    fn down() -> StoreError {
        StoreError::Unavailable {
            backend: "test",
            message: "down".into(),
        }
    }

    /// Runs one operation ending with `out`; the id of the connection it used.
    async fn op(pool: &Pool<Arc<Fake>>, out: Result<(), StoreError>) -> Result<usize, StoreError> {
        pool.run("op", async {
            let mut lease = pool.get().await?;
            let id = lease.conn().id;
            lease.finish(out.map(|()| id))
        })
        .await
    }

    #[tokio::test]
    async fn clean_connections_are_reused() {
        let (fake, pool) = pool(Duration::from_secs(5));
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 0);
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 0);
        // A server-side error that is not an outage leaves the connection usable.
        let corrupt = StoreError::Corrupt {
            message: "x".into(),
        };
        assert!(op(&pool, Err(corrupt)).await.is_err());
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 0);
        assert_eq!(fake.opened.load(Ordering::SeqCst), 1);
    }

    /// Guards against reading a late reply: a connection whose operation failed with
    /// `Unavailable`, or whose lease was dropped mid-operation, is never lent again.
    #[tokio::test]
    async fn failed_or_abandoned_connections_are_never_reused() {
        let (_, pool) = pool(Duration::from_secs(5));
        let err = op(&pool, Err(down())).await.unwrap_err();
        assert!(err.to_string().contains("op on fake:1/db: down"), "{err}");
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 1);
        {
            let _abandoned = pool.get().await.unwrap(); // connection 1, never finished
        }
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn closed_connections_are_not_recycled() {
        let (_, pool) = pool(Duration::from_secs(5));
        let mut lease = pool.get().await.unwrap();
        let closed = lease.conn().closed.clone();
        lease.finish(Ok(())).unwrap();
        closed.store(true, Ordering::SeqCst);
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn an_outage_drops_every_idle_connection() {
        let (_, pool) = pool(Duration::from_secs(5));
        let mut a = pool.get().await.unwrap();
        let mut b = pool.get().await.unwrap();
        assert_eq!((a.conn().id, b.conn().id), (0, 1));
        a.finish(Ok(())).unwrap();
        // `b` fails: `a`, idle meanwhile, is dropped too.
        pool.run("op", async { b.finish::<()>(Err(down())) })
            .await
            .unwrap_err();
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 2);
    }

    /// Time is paused: the timeout fires when the runtime is idle, without waiting.
    #[tokio::test(start_paused = true)]
    async fn operations_are_bounded_by_the_timeout() {
        let (_, pool) = pool(Duration::from_secs(5));
        let err = pool
            .run("stall", async {
                let _lease = pool.get().await?;
                std::future::pending::<Result<(), StoreError>>().await
            })
            .await
            .unwrap_err();
        assert!(
            err.is_unavailable() && err.to_string().contains("no answer within"),
            "{err}"
        );
        // The stalled connection is not lent again.
        assert_eq!(op(&pool, Ok(())).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn reads_run_twice_at_most_and_writes_once() {
        let (_, pool) = pool(Duration::from_secs(5));
        let calls = AtomicUsize::new(0);
        let read = pool
            .read_on_conn("read", async |_| {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(down()),
                    _ => Ok(()),
                }
            })
            .await;
        assert!(read.is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        calls.store(0, Ordering::SeqCst);
        let read: Result<(), _> = pool
            .read_on_conn("read", async |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(down())
            })
            .await;
        assert!(read.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        calls.store(0, Ordering::SeqCst);
        let write: Result<(), _> = pool
            .run("write", async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(down())
            })
            .await;
        assert!(write.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
