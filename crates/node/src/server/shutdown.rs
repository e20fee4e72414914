//! The stages of a node's shutdown: the one mechanism every part of the node watches (each
//! connection of every front-end, the refill tasks, the lease keepers, the readiness probe).
//!
//! A [`Shutdown`] is a cheap handle on one `tokio::sync::watch` channel holding the [`Stage`]:
//! `Running`, then `Draining` (stop accepting, let requests in flight finish; no namespace is
//! created any more and `/readyz` answers 503), then `StopNow` (cut every connection at once),
//! then `Stopped` (every connection is gone: the background tasks stop and the node hands its
//! buffers back). Anyone holding a clone may move it forward to `StopNow`: the binary on a first
//! and a second signal, the server when the drain deadline passes or a listener fails. Only the
//! node moves it to `Stopped` ([`crate::Node::shutdown`]), once the server returned.
//!
//! Invariants: the stage only moves forward (a late "drain" never undoes "stop now"); every
//! waiter sees every stage it waits for, whenever it starts waiting (a watch channel keeps the
//! latest value); `Stopped` follows the end of every request future, so the hand-back runs
//! after the last id was handed out (docs/design.md invariant 3).

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
    /// Every connection is gone: background tasks stop, the buffers are handed back.
    Stopped,
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

    /// Marks every connection gone (the node's shutdown, after the server returned).
    pub(crate) fn stopped(&self) -> bool {
        self.advance(Stage::Stopped)
    }

    /// Whether draining has begun.
    pub fn is_draining(&self) -> bool {
        self.stage() >= Stage::Draining
    }

    /// Resolves once the stage is at least `stage`.
    pub async fn reached(&self, stage: Stage) {
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
