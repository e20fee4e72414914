//! The leadership task of one strict namespace: acquire the leader lease, or follow whoever
//! holds it; while leading, renew it and keep the term's deadline; at a stop, end the term and
//! keep the lease for [`Strict::release`] (after the supply's tail went back).
//!
//! A follower tries again when the leader's lease would expire (the authority says how long is
//! left), every third of the TTL, or sooner when a forward failed ([`Strict::take`] wakes it),
//! but never more often than [`MIN_LOOK_GAP`].

use super::term::{deadline_after, Term};
use super::{holder_base, url_of, Role, Strict, LEADER_LAYOUT};
use idmint_core::{Backoff, Clock};
use idmint_store::lease::{unique_holder, LeaseError};
use idmint_store::{LeaseRequest, WorkerChoice, WorkerLease};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The shortest time between two attempts to acquire the leader lease.
pub const MIN_LOOK_GAP: Duration = Duration::from_millis(20);

/// How a term ended.
enum Ended {
    /// The node is stopping; the lease is still held.
    Stopping(WorkerLease),
    /// The lease was lost or could not be renewed in time.
    Lost(String),
}

impl Strict {
    /// Runs until `stop` turns true. See the module docs.
    pub async fn lead(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let Some(leases) = self.authority.worker_leases() else {
            self.set_role(Role::Seeking(format!(
                "the {} authority stores no leases, and a strict namespace needs a leader lease",
                self.authority.kind()
            )));
            return;
        };
        let url = self.peers.config().advertise.clone();
        let ttl = self.leases.ttl;
        let mut backoff = Backoff::new(Duration::from_millis(50), ttl / 3);
        loop {
            if *stop.borrow() {
                return;
            }
            let request = LeaseRequest {
                group: self.group.clone(),
                workers: 1,
                choice: WorkerChoice::Exactly(0),
                prefer_floor_at_most: None,
                holder: unique_holder(&holder_base(&url)),
                layout: LEADER_LAYOUT.into(),
                ttl,
            };
            let sent = self.clock.monotonic_nanos();
            let wait = match leases.acquire(&request).await {
                Ok(lease) => {
                    backoff.reset();
                    match self.lead_term(lease, sent, &mut stop).await {
                        Ended::Stopping(lease) => {
                            *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(lease);
                            return;
                        }
                        Ended::Lost(why) => {
                            tracing::warn!(namespace = %self.name, reason = %why, "no longer the leader");
                            self.set_role(Role::Seeking(why));
                            MIN_LOOK_GAP
                        }
                    }
                }
                Err(LeaseError::Held {
                    holder, expires_in, ..
                }) => {
                    backoff.reset();
                    match url_of(&holder) {
                        Some(leader) if leader == url => self.set_role(Role::Seeking(format!(
                            "this node's earlier leader lease ({holder}) expires in {} ms",
                            expires_in.as_millis()
                        ))),
                        Some(leader) => self.set_role(Role::Follower {
                            url: leader.to_owned(),
                            holder: holder.clone(),
                        }),
                        None => self.set_role(Role::Seeking(format!(
                            "the leader lease is held by {holder}, which names no url"
                        ))),
                    }
                    (expires_in + MIN_LOOK_GAP).min(ttl / 3)
                }
                Err(e) => {
                    let why = format!("the leader lease: {e}");
                    tracing::warn!(namespace = %self.name, error = %e, "could not take or read the leader lease");
                    self.set_role(Role::Seeking(why));
                    backoff.delay()
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.look_again.notified() => tokio::time::sleep(MIN_LOOK_GAP).await,
                _ = stop.changed() => {}
            }
        }
    }

    /// One term, from the lease acquired by a request sent at `sent`.
    async fn lead_term(
        &self,
        lease: WorkerLease,
        sent: u64,
        stop: &mut watch::Receiver<bool>,
    ) -> Ended {
        let margin = self.leases.safety_margin;
        let term = Arc::new(Term::new(
            lease.token,
            deadline_after(sent, lease.ttl, margin),
        ));
        // Above every id an earlier term served: every block reserved before now is below
        // the watermark the authority reports now.
        let watermark = match self.authority.state(&self.name).await {
            Ok(Some(state)) => state.watermark,
            Ok(None) => {
                return self
                    .give_up(lease, "the authority does not know the namespace")
                    .await
            }
            Err(e) => {
                return self
                    .give_up(lease, &format!("reading the watermark: {e}"))
                    .await
            }
        };
        let burned = self.supply.start_above(watermark);
        self.gate.term.store(Some(term.clone()));
        self.set_role(Role::Leader(term.clone()));
        tracing::info!(namespace = %self.name, token = lease.token, watermark, burned, "leading");
        let leases = self.authority.worker_leases();
        let mut lease = lease;
        let mut pause_for = lease.ttl / 3;
        let ended = loop {
            let pause = tokio::time::sleep(pause_for);
            tokio::select! {
                _ = pause => {}
                _ = stop.changed() => break Ended::Stopping(lease),
            }
            let Some(leases) = leases else {
                break Ended::Lost("the authority stores no leases".into());
            };
            let sent = self.clock.monotonic_nanos();
            match leases.renew(&lease, 0).await {
                Ok(renewed) => {
                    term.extend(deadline_after(sent, renewed.ttl, margin));
                    pause_for = renewed.ttl / 3;
                    lease = renewed;
                }
                Err(e @ LeaseError::Superseded { .. }) => break Ended::Lost(e.to_string()),
                Err(e) => {
                    if !term.valid_at(self.clock.monotonic_nanos()) {
                        // Still ours in the authority, maybe: let it go, so that this node
                        // (or another) need not wait out its TTL to lead again.
                        let _ = leases.release(&lease, 0).await;
                        break Ended::Lost(format!(
                            "the leader lease was not renewed in time: {e}"
                        ));
                    }
                    tracing::warn!(namespace = %self.name, error = %e, "renewing the leader lease failed; retrying");
                    // Sooner than the period: the term runs out at its deadline.
                    pause_for = lease.ttl / 10;
                }
            }
        };
        term.end();
        self.gate.term.store(None);
        ended
    }

    /// A term that cannot start: the lease goes back at once.
    async fn give_up(&self, lease: WorkerLease, why: &str) -> Ended {
        if let Some(leases) = self.authority.worker_leases() {
            let _ = leases.release(&lease, 0).await;
        }
        Ended::Lost(why.to_owned())
    }

    /// Publishes `role` when it differs in kind or leader from the current one.
    pub(super) fn set_role(&self, role: Role) {
        self.role.send_if_modified(|current| {
            let same = match (&*current, &role) {
                (Role::Follower { holder: a, .. }, Role::Follower { holder: b, .. }) => a == b,
                (Role::Leader(a), Role::Leader(b)) => Arc::ptr_eq(a, b),
                (Role::Seeking(a), Role::Seeking(b)) => a == b,
                _ => false,
            };
            if !same {
                *current = role;
            }
            !same
        });
    }
}
