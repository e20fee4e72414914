//! The gRPC front-end's count of requests in flight, and the gate that closes on shutdown.
//!
//! tonic runs each connection, and each request on it, in tasks of its own that the serving
//! future does not own: dropping that future stops the accepting, not the requests. So every
//! handler (and every stream's producer task) holds a [`Pass`] while it may touch the domain,
//! and [`Gate::close`] refuses new passes and waits until the last one is dropped. The
//! front-end returns only after that, so every request future has been dropped (and the ids
//! it held put back, `supply.rs`) before the node hands back its buffers (docs/design.md
//! invariant 3, section 5). A request arriving on a connection left open after the close is
//! refused with `shutting_down` without touching the domain.
//!
//! Invariant: once [`Gate::close`] has returned, no [`Pass`] exists and none will be issued.
//! (`enter` counts itself in before it looks at `closed`, and `close` sets `closed` before it
//! looks at the count, both sequentially consistent: one of the two always sees the other.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Gate {
    closed: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
}

/// One request in flight; dropping it lets [`Gate::close`] go on.
#[derive(Debug)]
pub struct Pass(Arc<Gate>);

impl Gate {
    /// An open gate.
    pub fn new() -> Arc<Self> {
        Arc::new(Gate::default())
    }

    /// A pass for one request, or `None` once the gate is closed.
    pub fn enter(self: &Arc<Self>) -> Option<Pass> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let pass = Pass(self.clone());
        if self.closed.load(Ordering::SeqCst) {
            return None; // dropping `pass` counts it out again
        }
        Some(pass)
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Refuses new passes, then waits until every pass has been dropped.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        loop {
            // Created before the check: a `notify_waiters` after the check still wakes it.
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn close_waits_for_every_pass_and_refuses_new_ones() {
        let gate = Gate::new();
        let pass = gate.enter();
        assert!(pass.is_some());
        let closing = tokio::spawn({
            let gate = gate.clone();
            async move { gate.close().await }
        });
        tokio::task::yield_now().await;
        assert!(!closing.is_finished(), "a pass is still out");
        drop(pass);
        assert!(closing.await.is_ok());
        assert!(gate.enter().is_none());
        assert_eq!(gate.in_flight(), 0);
    }
}
