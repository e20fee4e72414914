//! The stages of a node's shutdown, shared by every front-end (HTTP and gRPC; RESP next).
//!
//! A [`Shutdown`] is a cheap handle on one `tokio::sync::watch` channel holding the [`Stage`]:
//! `Running`, then `Draining` (stop accepting, let requests in flight finish), then `StopNow`
//! (cut every connection at once). Anyone holding a clone may move it forward: the binary on a
//! first and a second signal, [`crate::serve_front_ends`] when the drain deadline passes or a
//! front-end fails. Front-ends only wait on it ([`Shutdown::draining`],
//! [`Shutdown::stopping_now`]).
//!
//! Invariants: the stage only moves forward (a late "drain" never undoes "stop now"); every
//! waiter sees every stage it waits for, whenever it starts waiting (a watch channel keeps the
//! latest value). Handing back the buffers is not a stage: it follows once every front-end has
//! stopped, exactly once ([`crate::serve_front_ends`]), so cutting connections never skips it
//! (docs/design.md invariant 3: the hand-back runs after every request future is gone).

use std::sync::Arc;
use tokio::sync::watch;

/// Where a node's shutdown stands. Ordered: each stage follows the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Serving.
    Running,
    /// Not accepting new connections; requests in flight may finish until the drain deadline.
    Draining,
    /// Cut every connection now (drain deadline passed, or a second signal).
    StopNow,
}

/// A handle on the shutdown stage of one node; clones share it.
#[derive(Debug, Clone)]
pub struct Shutdown {
    stage: Arc<watch::Sender<Stage>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A node that is running.
    pub fn new() -> Self {
        Shutdown {
            stage: Arc::new(watch::Sender::new(Stage::Running)),
        }
    }

    /// The current stage.
    pub fn stage(&self) -> Stage {
        *self.stage.borrow()
    }

    /// Moves to `to` if that is forward; returns whether it moved.
    fn advance(&self, to: Stage) -> bool {
        self.stage.send_if_modified(|stage| {
            if *stage < to {
                *stage = to;
                true
            } else {
                false
            }
        })
    }

    /// Begins draining (the first signal). Returns whether this call began it.
    pub fn drain(&self) -> bool {
        self.advance(Stage::Draining)
    }

    /// Cuts every connection now (a second signal, or the drain deadline). Returns whether
    /// this call did it.
    pub fn stop_now(&self) -> bool {
        self.advance(Stage::StopNow)
    }

    /// Resolves once the stage is at least `stage`.
    async fn reached(&self, stage: Stage) {
        let mut rx = self.stage.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|s| *s >= stage).await;
    }

    /// Resolves once draining has begun (or the node stops at once).
    pub async fn draining(&self) {
        self.reached(Stage::Draining).await
    }

    /// Resolves once connections must be cut.
    pub async fn stopping_now(&self) {
        self.reached(Stage::StopNow).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stages_only_move_forward_and_late_waiters_see_them() {
        let s = Shutdown::new();
        assert_eq!(s.stage(), Stage::Running);
        assert!(s.stop_now());
        assert!(!s.drain(), "a drain after stop-now changes nothing");
        assert_eq!(s.stage(), Stage::StopNow);
        // Waiting after the fact resolves at once.
        s.clone().draining().await;
        s.stopping_now().await;
    }
}
